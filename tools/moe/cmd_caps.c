/* cmd_caps.c — `moe caps`: CPU features detected, kernels compiled, the MOE_ISA cap, what is
 * allowed, and the kernel each family selects with its reason. */
#include <stdio.h>
#include <string.h>

#include "moe.h"
#include "cli_util.h"
#include "commands.h"
#include "cpu/cpu.h"
#include "select/select.h"

#define PROG "moe caps"

static void help(void)
{
    printf("usage: moe caps\n"
           "\n"
           "Prints the CPU brand; the ISA features libmoe detected (CPUID, with the OS support\n"
           "that XGETBV reports); the features this build compiled kernels for; the MOE_ISA\n"
           "cap; the features libmoe will use (detected and compiled and allowed by the cap),\n"
           "with the reason for each one it will not use; the kernels compiled per family;\n"
           "and the kernel each family selects, with the reason.\n"
           "\n"
           "environment:\n"
           "  MOE_ISA=scalar|avx2|avx512|avx512bf16   the highest ISA level libmoe may use\n"
           "      (avx2 includes AVX-VNNI; avx512 VNNI and VBMI; avx512bf16 also BF16, FP16,\n"
           "      AMX-INT8 and AMX-BF16).\n"
           "      Unset or empty: no cap.\n"
           "\n"
           "Exit status: 0 success; 1 an invalid MOE_ISA (one line on stderr); 2 usage error.\n");
}

static const uint32_t features[] = {
    MOE_FEAT_AVX2,        MOE_FEAT_AVX_VNNI,    MOE_FEAT_AVX512,
    MOE_FEAT_AVX512_BF16, MOE_FEAT_AVX512_VNNI, MOE_FEAT_AVX512_FP16,
    MOE_FEAT_AVX512_VBMI, MOE_FEAT_AMX_INT8,    MOE_FEAT_AMX_BF16};
#define NFEATURES (sizeof features / sizeof features[0])

static void print_mask(const char *label, const moe_cpu_caps *caps)
{
    char buf[128];
    moe_cpu_mask_format(moe_cpu_caps_mask(caps), buf, sizeof buf);
    printf("%-10s %s\n", label, buf);
}

static void print_summary(const moe_cpu_info *info)
{
    printf("%-10s %s\n", "cpu", info->brand[0] ? info->brand : "(no brand string)");
    print_mask("detected", &info->detected);
    print_mask("compiled", &info->compiled);
    if (info->cap_from_env)
        printf("%-10s %s (from the environment)\n", "MOE_ISA", moe_isa_level_name(info->cap));
    else
        printf("%-10s unset (no cap)\n", "MOE_ISA");
    print_mask("allowed", &info->allowed);
    printf("%-10s %s\n", "level", moe_isa_level_name(cli_isa_level(&info->allowed)));

    printf("\nfeatures\n");
    for (size_t i = 0; i < NFEATURES; i++) {
        char why[96];
        moe_cpu_feature_why(info, features[i], why, sizeof why);
        printf("  %-12s %s\n", moe_cpu_feature_name(features[i]), why);
    }
}

static void print_compiled_kernels(void)
{
    size_t count;
    const moe_kernel *reg = moe_kernel_registry(&count);
    printf("\nkernels compiled (reference first, most preferred last)\n");
    for (size_t i = 0; i < count; i++) {
        bool first = i == 0 || reg[i - 1].family != reg[i].family;
        bool last = i + 1 == count || reg[i + 1].family != reg[i].family;
        const char *token = moe_kernel_isa_token(reg[i].isa);
        if (first) printf("  %-24s", moe_kernel_family_name(reg[i].family));
        printf(" %s", token ? token : reg[i].name);
        if (last) printf("\n");
    }
}

static int print_selection(const moe_cpu_info *info)
{
    printf("\nselected\n");
    for (int f = 0; f < MOE_KERNEL_FAMILY_COUNT_; f++) {
        moe_kernel_family family = (moe_kernel_family)f;
        moe_kernel_choice choice;
        if (moe_select_isa_ladder(family, &info->allowed, &choice) != MOE_OK) {
            fprintf(stderr, PROG ": %s\n", moe_last_error());
            return 1;
        }
        printf("  %-24s %s", moe_kernel_family_name(family), choice.reason);
        if (choice.missing) {
            char why[96];
            moe_cpu_feature_why(info, choice.missing, why, sizeof why);
            printf(" (%s)", why);
        }
        printf("\n");
    }
    return 0;
}

int moe_cmd_caps(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help();
            return 0;
        }
        fprintf(stderr, PROG ": unexpected argument '%s' (moe caps --help)\n", argv[i]);
        return 2;
    }
    moe_cpu_info info;
    if (moe_cpu_query(&info) != MOE_OK) {
        fprintf(stderr, PROG ": %s\n", moe_last_error());
        return 1;
    }
    print_summary(&info);
    print_compiled_kernels();
    return print_selection(&info);
}
