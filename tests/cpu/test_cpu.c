/* test_cpu.c — CPU detection consistency, feature masks, and the pure MOE_ISA cap function. */
#include <pthread.h>
#include <string.h>

#include "moe.h"
#include "cpu/cpu.h"
#include "test.h"

static const moe_isa_level levels[] = {MOE_ISA_SCALAR, MOE_ISA_AVX2, MOE_ISA_AVX512,
                                       MOE_ISA_AVX512BF16};

static bool caps_equal(const moe_cpu_caps *a, const moe_cpu_caps *b)
{
    return a->avx2 == b->avx2 && a->avx512 == b->avx512 && a->avx512_bf16 == b->avx512_bf16 &&
           a->avx512_vnni == b->avx512_vnni && a->avx512_fp16 == b->avx512_fp16 &&
           a->avx512_vbmi == b->avx512_vbmi && a->avx_vnni == b->avx_vnni &&
           a->amx_int8 == b->amx_int8 && a->amx_bf16 == b->amx_bf16;
}

/* Made-up caps from nine booleans (avx2, avx512, bf16, vnni, fp16, vbmi, avx_vnni, amx_int8,
 * amx_bf16), written out field by field so the test does not lean on moe_cpu_caps_from_mask. */
#define CAPS_COMBOS 512u
#define CAPS_ALL (CAPS_COMBOS - 1)
static moe_cpu_caps caps_of(unsigned bits)
{
    moe_cpu_caps c;
    c.avx2 = bits & 1;
    c.avx512 = (bits >> 1) & 1;
    c.avx512_bf16 = (bits >> 2) & 1;
    c.avx512_vnni = (bits >> 3) & 1;
    c.avx512_fp16 = (bits >> 4) & 1;
    c.avx512_vbmi = (bits >> 5) & 1;
    c.avx_vnni = (bits >> 6) & 1;
    c.amx_int8 = (bits >> 7) & 1;
    c.amx_bf16 = (bits >> 8) & 1;
    return c;
}

/* What moe.h says each cap keeps, spelled independently of the implementation: a feature
 * survives when the input has it, its prerequisites survive, and the level permits it. */
static moe_cpu_caps expected_cap(const moe_cpu_caps *in, moe_isa_level lv)
{
    moe_cpu_caps e;
    e.avx2 = in->avx2 && lv >= MOE_ISA_AVX2;
    e.avx_vnni = in->avx_vnni && e.avx2 && lv >= MOE_ISA_AVX2;
    e.avx512 = in->avx512 && e.avx2 && lv >= MOE_ISA_AVX512;
    e.avx512_vnni = in->avx512_vnni && e.avx512 && lv >= MOE_ISA_AVX512;
    e.avx512_vbmi = in->avx512_vbmi && e.avx512 && lv >= MOE_ISA_AVX512;
    e.avx512_bf16 = in->avx512_bf16 && e.avx512 && lv >= MOE_ISA_AVX512BF16;
    e.avx512_fp16 = in->avx512_fp16 && e.avx512 && lv >= MOE_ISA_AVX512BF16;
    e.amx_int8 = in->amx_int8 && e.avx512 && lv >= MOE_ISA_AVX512BF16;
    e.amx_bf16 = in->amx_bf16 && e.avx512 && lv >= MOE_ISA_AVX512BF16;
    return e;
}

static void test_level_names(void)
{
    CHECK(!strcmp(moe_isa_level_name(MOE_ISA_SCALAR), "scalar"));
    CHECK(!strcmp(moe_isa_level_name(MOE_ISA_AVX2), "avx2"));
    CHECK(!strcmp(moe_isa_level_name(MOE_ISA_AVX512), "avx512"));
    CHECK(!strcmp(moe_isa_level_name(MOE_ISA_AVX512BF16), "avx512bf16"));
    CHECK(!strcmp(moe_isa_level_name((moe_isa_level)4), "invalid"));
    CHECK(!strcmp(moe_isa_level_name((moe_isa_level)-1), "invalid"));
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        moe_isa_level got = (moe_isa_level)99;
        CHECK_STATUS(moe_isa_level_parse(moe_isa_level_name(levels[i]), &got), MOE_OK);
        CHECK(got == levels[i]);
    }
}

/* Every level applied to every made-up caps struct, consistent or not. */
static void test_cap_every_level_every_caps(void)
{
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        for (unsigned bits = 0; bits < CAPS_COMBOS; bits++) {
            moe_cpu_caps in = caps_of(bits), out, want = expected_cap(&in, levels[l]);
            moe_isa_level got = (moe_isa_level)99;
            CHECK_STATUS(moe_cpu_caps_apply_isa(&in, moe_isa_level_name(levels[l]), &out, &got),
                         MOE_OK);
            CHECKF(caps_equal(&out, &want), "MOE_ISA=%s caps=0x%03x", moe_isa_level_name(levels[l]),
                   bits);
            CHECK(got == levels[l]);
        }
    }
}

/* The literal sets from moe.h, for the caps of a machine that has everything. */
static void test_cap_literal_sets(void)
{
    const moe_cpu_caps all = caps_of(CAPS_ALL);
    moe_cpu_caps out;
    moe_isa_level lv;
    CHECK_STATUS(moe_cpu_caps_apply_isa(&all, "scalar", &out, &lv), MOE_OK);
    CHECK(!out.avx2 && !out.avx512 && !out.avx512_bf16 && !out.avx512_vnni && !out.avx512_fp16 &&
          !out.avx512_vbmi && !out.avx_vnni && !out.amx_int8 && !out.amx_bf16);
    CHECK_STATUS(moe_cpu_caps_apply_isa(&all, "avx2", &out, &lv), MOE_OK);
    CHECK(out.avx2 && !out.avx512 && !out.avx512_bf16 && !out.avx512_vnni && !out.avx512_fp16 &&
          !out.avx512_vbmi && out.avx_vnni && !out.amx_int8 && !out.amx_bf16);
    CHECK_STATUS(moe_cpu_caps_apply_isa(&all, "avx512", &out, &lv), MOE_OK);
    CHECK(out.avx2 && out.avx512 && !out.avx512_bf16 && out.avx512_vnni && !out.avx512_fp16 &&
          out.avx512_vbmi && out.avx_vnni && !out.amx_int8 && !out.amx_bf16);
    CHECK_STATUS(moe_cpu_caps_apply_isa(&all, "avx512bf16", &out, &lv), MOE_OK);
    CHECK(out.avx2 && out.avx512 && out.avx512_bf16 && out.avx512_vnni && out.avx512_fp16 &&
          out.avx512_vbmi && out.avx_vnni && out.amx_int8 && out.amx_bf16);

    /* No cap: NULL and "" both mean the highest level, and keep everything. */
    CHECK_STATUS(moe_cpu_caps_apply_isa(&all, NULL, &out, &lv), MOE_OK);
    CHECK(lv == MOE_ISA_AVX512BF16 && caps_equal(&out, &all));
    CHECK_STATUS(moe_cpu_caps_apply_isa(&all, "", &out, &lv), MOE_OK);
    CHECK(lv == MOE_ISA_AVX512BF16 && caps_equal(&out, &all));
    CHECK_STATUS(moe_cpu_caps_apply_isa(&all, "avx2", &out, NULL), MOE_OK);

    /* A cap never adds what the caps lack: an AVX2-only machine under MOE_ISA=avx512bf16. */
    const moe_cpu_caps avx2_only = caps_of(1);
    CHECK_STATUS(moe_cpu_caps_apply_isa(&avx2_only, "avx512bf16", &out, &lv), MOE_OK);
    CHECK(out.avx2 && !out.avx512 && !out.avx512_bf16);
    /* AVX-512 without BF16 under avx512bf16: bf16 stays off, VNNI stays on. */
    const moe_cpu_caps skx_vnni = caps_of(1 | 2 | 8);
    CHECK_STATUS(moe_cpu_caps_apply_isa(&skx_vnni, "avx512bf16", &out, &lv), MOE_OK);
    CHECK(out.avx512 && out.avx512_vnni && !out.avx512_bf16 && !out.avx512_fp16);
    /* Inconsistent made-up caps: bf16 without avx512 is dropped, AVX-VNNI without avx2 too. */
    const moe_cpu_caps bad = caps_of(1 | 4);
    CHECK_STATUS(moe_cpu_caps_apply_isa(&bad, NULL, &out, &lv), MOE_OK);
    CHECK(out.avx2 && !out.avx512 && !out.avx512_bf16);
    const moe_cpu_caps bad_vnni = caps_of(64);
    CHECK_STATUS(moe_cpu_caps_apply_isa(&bad_vnni, NULL, &out, &lv), MOE_OK);
    CHECK(!out.avx2 && !out.avx_vnni);
}

static void test_cap_rejects_unknown(void)
{
    static const char *const bad[] = {"AVX2",     "Scalar",     "avx",   "sse2",  "avx512f",
                                      "avx512bf", "avx512vnni", " avx2", "avx2 ", "avx2,avx512",
                                      "none",     "native",     "0"};
    const moe_cpu_caps all = caps_of(CAPS_ALL);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        moe_cpu_caps out, before;
        memset(&out, 0x5A, sizeof out);
        memcpy(&before, &out, sizeof out);
        moe_isa_level lv = (moe_isa_level)77;
        CHECK_STATUS(moe_cpu_caps_apply_isa(&all, bad[i], &out, &lv), MOE_EINVAL);
        CHECKF(strstr(moe_last_error(), bad[i]) != NULL, "message '%s' lacks '%s'",
               moe_last_error(), bad[i]);
        CHECK(memcmp(&out, &before, sizeof out) == 0);
        CHECK(lv == (moe_isa_level)77);
    }
    moe_cpu_caps out;
    CHECK_STATUS(moe_cpu_caps_apply_isa(NULL, "avx2", &out, NULL), MOE_EINVAL);
    CHECK_STATUS(moe_cpu_caps_apply_isa(&all, "avx2", NULL, NULL), MOE_EINVAL);
}

static void test_masks(void)
{
    for (unsigned bits = 0; bits < CAPS_COMBOS; bits++) {
        moe_cpu_caps c = caps_of(bits);
        uint32_t m = moe_cpu_caps_mask(&c);
        CHECK(((m & MOE_FEAT_AVX2) != 0) == c.avx2);
        CHECK(((m & MOE_FEAT_AVX512) != 0) == c.avx512);
        CHECK(((m & MOE_FEAT_AVX512_BF16) != 0) == c.avx512_bf16);
        CHECK(((m & MOE_FEAT_AVX512_VNNI) != 0) == c.avx512_vnni);
        CHECK(((m & MOE_FEAT_AVX512_FP16) != 0) == c.avx512_fp16);
        CHECK(((m & MOE_FEAT_AVX512_VBMI) != 0) == c.avx512_vbmi);
        CHECK(((m & MOE_FEAT_AVX_VNNI) != 0) == c.avx_vnni);
        CHECK(((m & MOE_FEAT_AMX_INT8) != 0) == c.amx_int8);
        CHECK(((m & MOE_FEAT_AMX_BF16) != 0) == c.amx_bf16);
        moe_cpu_caps back = moe_cpu_caps_from_mask(m);
        CHECK(caps_equal(&back, &c));
    }
    CHECK(!strcmp(moe_cpu_feature_name(MOE_FEAT_AVX512_BF16), "avx512_bf16"));
    CHECK(!strcmp(moe_cpu_feature_name(MOE_FEAT_AVX_VNNI), "avx_vnni"));
    CHECK(!strcmp(moe_cpu_feature_name(MOE_FEAT_AMX_INT8), "amx_int8"));
    CHECK(!strcmp(moe_cpu_feature_name(MOE_FEAT_AMX_BF16), "amx_bf16"));
    CHECK(!strcmp(moe_cpu_feature_name(0), "?"));
    CHECK(!strcmp(moe_cpu_feature_name(MOE_FEAT_AVX2 | MOE_FEAT_AVX512), "?"));
    char buf[128];
    moe_cpu_mask_format(0, buf, sizeof buf);
    CHECK(!strcmp(buf, "none"));
    moe_cpu_mask_format(MOE_FEAT_AVX2 | MOE_FEAT_AVX512_VNNI, buf, sizeof buf);
    CHECK(!strcmp(buf, "avx2 avx512_vnni"));
    char tiny[6];
    moe_cpu_mask_format(MOE_FEAT_ALL_, tiny, sizeof tiny);
    CHECK(strlen(tiny) < sizeof tiny);
}

/* gcc's and clang's runtimes read CPUID and XCR0 on their own: an independent witness. */
static void test_detect_matches_compiler_runtime(const moe_cpu_caps *d)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#ifndef __clang__ /* clang 14 knows neither "f16c" nor "avx512fp16" */
    avx2 = avx2 && __builtin_cpu_supports("f16c");
#endif
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    CHECK(d->avx2 == avx2);
    CHECK(d->avx512 == avx512);
    CHECK(d->avx512_vnni == (avx512 && __builtin_cpu_supports("avx512vnni")));
    CHECK(d->avx512_bf16 == (avx512 && __builtin_cpu_supports("avx512bf16")));
    CHECK(d->avx512_vbmi == (avx512 && __builtin_cpu_supports("avx512vbmi")));
#ifndef __clang__ /* clang 14 does not know "avxvnni" either */
    CHECK(d->avx_vnni == (avx2 && __builtin_cpu_supports("avxvnni")));
    CHECK(d->avx512_fp16 == (avx512 && __builtin_cpu_supports("avx512fp16")));
    /* The runtime sees CPUID alone; detection also needs the OS's grant of tile data, so
     * only one way. */
    CHECK(!d->amx_int8 ||
          (avx512 && __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-int8")));
    CHECK(!d->amx_bf16 ||
          (avx512 && __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-bf16")));
    /* One grant serves both sets: a CPU with both has both or neither. */
    if (__builtin_cpu_supports("amx-int8") && __builtin_cpu_supports("amx-bf16"))
        CHECK(d->amx_int8 == d->amx_bf16);
#endif
#else
    CHECK(!d->avx2 && !d->avx512);
#endif
}

typedef struct detect_result {
    moe_cpu_caps caps;
    char brand[64];
} detect_result;

static void *detect_thread(void *arg)
{
    detect_result *r = arg;
    moe_cpu_detect(&r->caps, r->brand);
    return NULL;
}

static void test_detect(void)
{
    /* Several threads race to be first; pthread_once must give all of them one answer. */
    enum { THREADS = 4 };
    pthread_t th[THREADS];
    detect_result r[THREADS];
    for (int i = 0; i < THREADS; i++)
        REQUIRE(pthread_create(&th[i], NULL, detect_thread, &r[i]) == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);

    detect_result first;
    moe_cpu_detect(&first.caps, first.brand);
    moe_cpu_detect(NULL, NULL);
    for (int i = 0; i < THREADS; i++) {
        CHECK(caps_equal(&r[i].caps, &first.caps));
        CHECK(!strcmp(r[i].brand, first.brand));
    }
    const moe_cpu_caps *d = &first.caps;
    /* The implications moe.h documents. */
    CHECK(!d->avx512 || d->avx2);
    CHECK(!d->avx512_bf16 || d->avx512);
    CHECK(!d->avx512_vnni || d->avx512);
    CHECK(!d->avx512_fp16 || d->avx512);
    CHECK(!d->avx512_vbmi || d->avx512);
    CHECK(!d->avx_vnni || d->avx2);
    CHECK(!d->amx_int8 || d->avx512);
    CHECK(!d->amx_bf16 || d->avx512);
    size_t len = strnlen(first.brand, sizeof first.brand);
    CHECK(len < sizeof first.brand);
    CHECK(len == 0 || (first.brand[0] != ' ' && first.brand[len - 1] != ' '));
    test_detect_matches_compiler_runtime(d);
    fprintf(stderr,
            "cpu: '%s' avx2=%d avx512=%d bf16=%d vnni=%d fp16=%d vbmi=%d avx_vnni=%d amx_int8=%d "
            "amx_bf16=%d\n",
            first.brand, d->avx2, d->avx512, d->avx512_bf16, d->avx512_vnni, d->avx512_fp16,
            d->avx512_vbmi, d->avx_vnni, d->amx_int8, d->amx_bf16);
}

static void test_normalize_and_intersect(void)
{
    for (unsigned a = 0; a < CAPS_COMBOS; a++) {
        moe_cpu_caps ca = caps_of(a), n = moe_cpu_caps_normalize(ca);
        moe_cpu_caps want = expected_cap(&ca, MOE_ISA_AVX512BF16);
        CHECKF(caps_equal(&n, &want), "normalize 0x%03x", a);
        for (unsigned b = 0; b < CAPS_COMBOS; b++) {
            moe_cpu_caps cb = caps_of(b), both = caps_of(a & b);
            moe_cpu_caps got = moe_cpu_caps_intersect(&ca, &cb);
            moe_cpu_caps w = expected_cap(&both, MOE_ISA_AVX512BF16);
            CHECKF(caps_equal(&got, &w), "intersect 0x%03x 0x%03x", a, b);
        }
    }
}

/* The L2 size against the kernel's own account in sysfs (Linux reads the same CPUID leaves,
 * but parses them with its own code): equal where sysfs has an L2 data or unified cache;
 * elsewhere 0 or a plausible size. */
static size_t sysfs_l2_bytes(void)
{
    for (int i = 0; i < 8; i++) {
        char path[96], level[8] = "", type[32] = "", size[32] = "";
        const char *field[3] = {"level", "type", "size"};
        char *out[3] = {level, type, size};
        const int cap[3] = {sizeof level, sizeof type, sizeof size};
        for (int f = 0; f < 3; f++) {
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i,
                     field[f]);
            FILE *fp = fopen(path, "r");
            if (!fp) return 0;
            if (!fgets(out[f], cap[f], fp)) out[f][0] = '\0';
            fclose(fp);
        }
        char *end;
        const unsigned long kb = strtoul(size, &end, 10);
        if (atoi(level) == 2 && strncmp(type, "Instruction", 11) != 0 && *end == 'K')
            return (size_t)kb << 10;
    }
    return 0;
}

static void test_l2_bytes(void)
{
    const size_t l2 = moe_cpu_l2_bytes(), sys = sysfs_l2_bytes();
    if (sys)
        CHECKF(l2 == sys, "CPUID says an L2 of %zu bytes, sysfs %zu", l2, sys);
    else
        CHECKF(l2 == 0 || (l2 >= ((size_t)64 << 10) && l2 <= ((size_t)256 << 20)),
               "CPUID says an L2 of %zu bytes (no sysfs to compare)", l2);
}

int main(void)
{
    test_level_names();
    test_cap_every_level_every_caps();
    test_cap_literal_sets();
    test_cap_rejects_unknown();
    test_masks();
    test_normalize_and_intersect();
    test_detect();
    test_l2_bytes();
    return TEST_END();
}
