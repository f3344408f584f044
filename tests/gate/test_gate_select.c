/* test_gate_select.c — moe_select_gate with made-up capabilities and problems, every branch. */
#include <stdlib.h>
#include <string.h>

#include "moe.h"
#include "gate/gate.h"
#include "kernels/gate.h"
#include "test.h"

static moe_cpu_caps make_caps(bool avx2, bool avx512, bool bf16, bool vnni, bool fp16)
{
    moe_cpu_caps c = {.avx2 = avx2, .avx512 = avx512, .avx512_bf16 = bf16, .avx512_vnni = vnni,
                      .avx512_fp16 = fp16};
    return c;
}

static moe_gate_problem problem(moe_dtype w, moe_dtype x, moe_dtype logits, bool bias)
{
    moe_gate_problem p = {.weight_dtype = w,
                          .input_dtype = x,
                          .logits_dtype = logits,
                          .has_bias = bias,
                          .n_experts = 256,
                          .hidden = 7168};
    return p;
}

static const char *short_name(moe_dtype d)
{
    return d == MOE_DTYPE_F32 ? "f32" : moe_dtype_name(d);
}

/* The ISA this build should pick, spelled out from the caps (normalized by hand: a feature
 * whose prerequisite is missing does not count) and the MOE_COMPILED_* definitions. */
static const char *expected_isa(const moe_cpu_caps *c, moe_dtype w, moe_dtype x)
{
    bool avx2 = c->avx2, avx512 = avx2 && c->avx512, bf16 = avx512 && c->avx512_bf16;
#ifdef MOE_COMPILED_AVX512BF16
    if (bf16 && w == MOE_DTYPE_BF16 && x == MOE_DTYPE_BF16) return "avx512bf16";
#endif
#ifdef MOE_COMPILED_AVX512
    if (avx512) return "avx512";
#endif
#ifdef MOE_COMPILED_AVX2
    if (avx2) return "avx2";
#endif
    (void)bf16, (void)w, (void)x, (void)avx512, (void)avx2;
    return "ref";
}

typedef struct caps_case {
    const char *what;
    moe_cpu_caps caps;
} caps_case;

static const caps_case machines[] = {
    {"no AVX2", {0, 0, 0, 0, 0, 0, 0, 0, 0}},
    {"AVX2 only", {1, 0, 0, 0, 0, 0, 0, 0, 0}},
    {"AVX-512 without BF16", {1, 1, 0, 0, 0, 0, 0, 0, 0}},
    {"AVX-512 + VNNI", {1, 1, 0, 1, 0, 0, 0, 0, 0}},
    {"AVX-512 + BF16", {1, 1, 1, 0, 0, 0, 0, 0, 0}},
    {"everything", {1, 1, 1, 1, 1, 1, 1, 1, 1}},
    {"AVX2 + AVX-VNNI", {1, 0, 0, 0, 0, 0, 1, 0, 0}},
    {"avx512 flags without avx2", {0, 1, 1, 1, 1, 1, 0, 0, 0}},
    {"bf16 without avx512", {1, 0, 1, 0, 0, 0, 0, 0, 0}},
};

static const moe_dtype weights[] = {MOE_DTYPE_F32, MOE_DTYPE_BF16, MOE_DTYPE_F16};
static const moe_dtype inputs[] = {MOE_DTYPE_F32, MOE_DTYPE_BF16};
static const moe_dtype logits[] = {MOE_DTYPE_F32, MOE_DTYPE_BF16};

/* The decisive feature or dtype the reason must name, for what this build compiled. */
static const char *decisive(const moe_cpu_caps *c, moe_dtype w, moe_dtype x, const char *isa)
{
    bool avx2 = c->avx2, avx512 = avx2 && c->avx512, bf16 = avx512 && c->avx512_bf16;
    bool bf16_family = w == MOE_DTYPE_BF16 && x == MOE_DTYPE_BF16;
    if (!strcmp(isa, "ref")) {
#ifdef MOE_COMPILED_AVX2
        return "needs avx2, which is not allowed";
#endif
        return "the only kernel";
    }
    if (!strcmp(isa, "avx2")) {
#ifdef MOE_COMPILED_AVX512
        return "needs avx512, which is not allowed";
#endif
        return "avx2 allowed";
    }
    if (!strcmp(isa, "avx512")) {
        if (bf16 && !bf16_family) return x != MOE_DTYPE_BF16 ? "x is f32" : "W is";
#ifdef MOE_COMPILED_AVX512BF16
        if (bf16_family) return "needs avx512_bf16, which is not allowed";
#endif
        return "avx512 allowed";
    }
    return "avx512bf16 allowed";
}

static void test_every_branch(void)
{
    for (size_t mi = 0; mi < sizeof machines / sizeof machines[0]; mi++) {
        const caps_case *m = &machines[mi];
        for (size_t wi = 0; wi < 3; wi++) {
            for (size_t xi = 0; xi < 2; xi++) {
                for (size_t li = 0; li < 2; li++) {
                    for (int bias = 0; bias < 2; bias++) {
                        moe_dtype w = weights[wi], x = inputs[xi];
                        moe_gate_problem p = problem(w, x, logits[li], bias);
                        moe_kernel_choice ch;
                        CHECK_STATUS(moe_select_gate(&m->caps, &p, &ch), MOE_OK);
                        REQUIRE(ch.kernel != NULL);
                        const char *isa = expected_isa(&m->caps, w, x);
                        char want[96];
                        snprintf(want, sizeof want, "moe_gate_x%s_w%s__%s", short_name(x),
                                 short_name(w), isa);
                        CHECKF(!strcmp(ch.kernel->name, want), "%s, W %s x %s: got %s, want %s",
                               m->what, short_name(w), short_name(x), ch.kernel->name, want);
                        /* The packing goes with the weight dtype, whatever else. */
                        CHECK(ch.packing && ch.packing->dtype == w);
                        CHECK(ch.packing == (w == MOE_DTYPE_F32    ? &moe_gate_packing_f32
                                             : w == MOE_DTYPE_BF16 ? &moe_gate_packing_bf16
                                                                   : &moe_gate_packing_f16));
                        CHECKF(!strncmp(ch.reason, want, strlen(want)),
                               "reason '%s' does not start with the kernel", ch.reason);
                        const char *why = decisive(&m->caps, w, x, isa);
                        CHECKF(strstr(ch.reason, why) != NULL, "%s: reason '%s' does not say '%s'",
                               m->what, ch.reason, why);
                        /* What the kernel computes, in the reason too. */
                        char what[64];
                        snprintf(what, sizeof what, "x %s, W %s, %s, %s logits", short_name(x),
                                 short_name(w), bias ? "bias" : "no bias", short_name(logits[li]));
                        CHECKF(strstr(ch.reason, what) != NULL, "reason '%s' lacks '%s'", ch.reason,
                               what);
                        CHECK(strlen(ch.reason) < sizeof ch.reason - 1); /* not truncated */
                    }
                }
            }
        }
    }
}

/* The logits dtype and the bias live in the epilogue: the late-set dtype selects again and
 * gets the same function and packing (so no repack), and so does the bias. */
static void test_late_logits_and_bias(void)
{
    for (size_t mi = 0; mi < sizeof machines / sizeof machines[0]; mi++) {
        for (size_t wi = 0; wi < 3; wi++) {
            for (size_t xi = 0; xi < 2; xi++) {
                moe_kernel_choice a, b, c;
                moe_gate_problem p = problem(weights[wi], inputs[xi], MOE_DTYPE_F32, false);
                CHECK_STATUS(moe_select_gate(&machines[mi].caps, &p, &a), MOE_OK);
                p.logits_dtype = MOE_DTYPE_BF16;
                CHECK_STATUS(moe_select_gate(&machines[mi].caps, &p, &b), MOE_OK);
                p.has_bias = true;
                CHECK_STATUS(moe_select_gate(&machines[mi].caps, &p, &c), MOE_OK);
                CHECK(a.kernel == b.kernel && b.kernel == c.kernel);
                CHECK(a.packing == b.packing && b.packing == c.packing);
                CHECK(a.missing == b.missing && b.missing == c.missing);
                CHECK(strstr(b.reason, "bf16 logits (rounded in the epilogue)") != NULL);
                CHECK(strstr(a.reason, "rounded") == NULL);
            }
        }
    }
}

/* The exact wording, where this build has the kernels. */
static void test_reasons(void)
{
    moe_kernel_choice ch;
    (void)ch;
#ifdef MOE_COMPILED_AVX512BF16
    moe_cpu_caps all = make_caps(1, 1, 1, 1, 1);
    moe_gate_problem p = problem(MOE_DTYPE_BF16, MOE_DTYPE_BF16, MOE_DTYPE_F32, false);
    CHECK_STATUS(moe_select_gate(&all, &p, &ch), MOE_OK);
    CHECKF(!strcmp(ch.reason, "moe_gate_xbf16_wbf16__avx512bf16: avx512bf16 allowed; preferred "
                              "over moe_gate_xbf16_wbf16__avx512; x bf16, W bf16, no bias, f32 "
                              "logits"),
           "reason '%s'", ch.reason);
    CHECK(ch.missing == 0);
    p = problem(MOE_DTYPE_BF16, MOE_DTYPE_F32, MOE_DTYPE_BF16, true);
    CHECK_STATUS(moe_select_gate(&all, &p, &ch), MOE_OK);
    CHECKF(!strcmp(ch.reason, "moe_gate_xf32_wbf16__avx512: avx512 allowed; preferred over "
                              "moe_gate_xf32_wbf16__avx2; vdpbf16ps needs bf16 x and W, x is f32; "
                              "x f32, W bf16, bias, bf16 logits (rounded in the epilogue)"),
           "reason '%s'", ch.reason);
    p = problem(MOE_DTYPE_F16, MOE_DTYPE_BF16, MOE_DTYPE_F32, true);
    CHECK_STATUS(moe_select_gate(&all, &p, &ch), MOE_OK);
    CHECKF(strstr(ch.reason, "vdpbf16ps needs bf16 x and W, W is f16") != NULL, "reason '%s'",
           ch.reason);
    moe_cpu_caps no_bf16 = make_caps(1, 1, 0, 1, 0);
    p = problem(MOE_DTYPE_BF16, MOE_DTYPE_BF16, MOE_DTYPE_F32, true);
    CHECK_STATUS(moe_select_gate(&no_bf16, &p, &ch), MOE_OK);
    CHECKF(!strcmp(ch.reason, "moe_gate_xbf16_wbf16__avx512: moe_gate_xbf16_wbf16__avx512bf16 "
                              "needs avx512_bf16, which is not allowed; x bf16, W bf16, bias, f32 "
                              "logits"),
           "reason '%s'", ch.reason);
    CHECK(ch.missing == MOE_FEAT_AVX512_BF16);
#endif
#ifdef MOE_COMPILED_AVX512
    moe_cpu_caps avx2 = make_caps(1, 0, 1, 0, 0);
    moe_gate_problem q = problem(MOE_DTYPE_F32, MOE_DTYPE_F32, MOE_DTYPE_F32, false);
    CHECK_STATUS(moe_select_gate(&avx2, &q, &ch), MOE_OK);
    CHECK(ch.missing == MOE_FEAT_AVX512);
    CHECK(strstr(ch.reason, "vdpbf16ps") == NULL); /* bf16 without avx512 is no bf16 */
#endif
#ifdef MOE_COMPILED_AVX2
    moe_cpu_caps none = make_caps(0, 0, 0, 0, 0);
    moe_gate_problem r = problem(MOE_DTYPE_F16, MOE_DTYPE_BF16, MOE_DTYPE_F32, false);
    CHECK_STATUS(moe_select_gate(&none, &r, &ch), MOE_OK);
    CHECKF(!strcmp(ch.reason, "moe_gate_xbf16_wf16__ref: moe_gate_xbf16_wf16__avx2 needs avx2, "
                              "which is not allowed; x bf16, W f16, no bias, f32 logits"),
           "reason '%s'", ch.reason);
    CHECK(ch.missing == MOE_FEAT_AVX2);
#endif
}

/* Bad problems: a specific status, a message naming the value, *out untouched. */
static void test_errors(void)
{
    const moe_cpu_caps caps = make_caps(1, 1, 1, 0, 0);
    moe_kernel_choice ch, before;
    memset(&ch, 0x5A, sizeof ch);
    memcpy(&before, &ch, sizeof ch);
    moe_gate_problem ok = problem(MOE_DTYPE_BF16, MOE_DTYPE_F32, MOE_DTYPE_F32, false);
    CHECK_STATUS(moe_select_gate(NULL, &ok, &ch), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "allowed") != NULL);
    CHECK_STATUS(moe_select_gate(&caps, NULL, &ch), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "problem") != NULL);
    CHECK_STATUS(moe_select_gate(&caps, &ok, NULL), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "out") != NULL);
    const struct {
        moe_gate_problem p;
        moe_status st;
        const char *named;
    } bad[] = {
        {problem(MOE_DTYPE_F8_E4M3, MOE_DTYPE_F32, MOE_DTYPE_F32, false), MOE_EDTYPE, "f8_e4m3"},
        {problem(MOE_DTYPE_F64, MOE_DTYPE_F32, MOE_DTYPE_F32, false), MOE_EDTYPE, "f64"},
        {problem(MOE_DTYPE_INVALID, MOE_DTYPE_F32, MOE_DTYPE_F32, false), MOE_EDTYPE, "invalid"},
        {problem(MOE_DTYPE_BF16, MOE_DTYPE_F16, MOE_DTYPE_F32, false), MOE_EDTYPE,
         "input dtype f16"},
        {problem(MOE_DTYPE_BF16, MOE_DTYPE_F32, MOE_DTYPE_F16, false), MOE_EDTYPE,
         "logits dtype f16"},
        {problem(MOE_DTYPE_BF16, MOE_DTYPE_F32, MOE_DTYPE_INVALID, false), MOE_EDTYPE,
         "logits dtype invalid"},
        {problem(MOE_DTYPE_BF16, MOE_DTYPE_F32, (moe_dtype)99, false), MOE_EDTYPE, "logits"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(moe_select_gate(&caps, &bad[i].p, &ch), bad[i].st);
        CHECKF(strstr(moe_last_error(), bad[i].named) != NULL, "message '%s' does not name '%s'",
               moe_last_error(), bad[i].named);
    }
    const struct {
        int64_t e, h;
        moe_status st;
        const char *named;
    } shapes[] = {
        {0, 10, MOE_EINVAL, "n_experts 0"},
        {-4, 10, MOE_EINVAL, "n_experts -4"},
        {8, 0, MOE_EINVAL, "hidden 0"},
        {8, -1, MOE_EINVAL, "hidden -1"},
        {(int64_t)1 << 40, (int64_t)1 << 40, MOE_EOVERFLOW, "1099511627776"},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        moe_gate_problem p = ok;
        p.n_experts = shapes[i].e;
        p.hidden = shapes[i].h;
        CHECK_STATUS(moe_select_gate(&caps, &p, &ch), shapes[i].st);
        CHECKF(strstr(moe_last_error(), shapes[i].named) != NULL, "message '%s' does not name '%s'",
               moe_last_error(), shapes[i].named);
    }
    CHECK(memcmp(&ch, &before, sizeof ch) == 0);
    /* Edge shapes that are fine: one expert, one hidden element, odd sizes. */
    const int64_t edges[][2] = {{1, 1}, {1, 7168}, {384, 1}, {17, 255}};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        moe_gate_problem p = ok;
        p.n_experts = edges[i][0];
        p.hidden = edges[i][1];
        CHECK_STATUS(moe_select_gate(&caps, &p, &ch), MOE_OK);
    }
}

/* Pure: the same arguments give the same answer, whatever the environment says. */
static void test_purity(void)
{
    const moe_cpu_caps caps = make_caps(1, 1, 1, 0, 0);
    moe_gate_problem p = problem(MOE_DTYPE_BF16, MOE_DTYPE_BF16, MOE_DTYPE_F32, true);
    moe_kernel_choice a, b;
    CHECK_STATUS(moe_select_gate(&caps, &p, &a), MOE_OK);
    const char *old = getenv("MOE_ISA");
    char *saved = old ? strdup(old) : NULL;
    setenv("MOE_ISA", "scalar", 1);
    CHECK_STATUS(moe_select_gate(&caps, &p, &b), MOE_OK);
    CHECK(a.kernel == b.kernel && a.packing == b.packing && a.missing == b.missing &&
          !strcmp(a.reason, b.reason));
    if (saved) {
        setenv("MOE_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("MOE_ISA");
    }
}

/* Every registered gate kernel is chosen for the caps that are exactly its requirement and
 * its family's dtypes: none is unreachable. */
static void test_every_kernel_reachable(void)
{
    static const struct {
        moe_kernel_family f;
        moe_dtype x, w;
    } fam[] = {
        {MOE_KERNEL_FAMILY_GATE_XF32_WF32, MOE_DTYPE_F32, MOE_DTYPE_F32},
        {MOE_KERNEL_FAMILY_GATE_XF32_WBF16, MOE_DTYPE_F32, MOE_DTYPE_BF16},
        {MOE_KERNEL_FAMILY_GATE_XF32_WF16, MOE_DTYPE_F32, MOE_DTYPE_F16},
        {MOE_KERNEL_FAMILY_GATE_XBF16_WF32, MOE_DTYPE_BF16, MOE_DTYPE_F32},
        {MOE_KERNEL_FAMILY_GATE_XBF16_WBF16, MOE_DTYPE_BF16, MOE_DTYPE_BF16},
        {MOE_KERNEL_FAMILY_GATE_XBF16_WF16, MOE_DTYPE_BF16, MOE_DTYPE_F16},
    };
    size_t count, seen = 0;
    const moe_kernel *reg = moe_kernel_registry(&count);
    for (size_t i = 0; i < count; i++) {
        for (size_t f = 0; f < sizeof fam / sizeof fam[0]; f++) {
            if (reg[i].family != fam[f].f) continue;
            seen++;
            moe_cpu_caps caps = moe_cpu_caps_from_mask(reg[i].isa);
            moe_gate_problem p = problem(fam[f].w, fam[f].x, MOE_DTYPE_F32, false);
            moe_kernel_choice ch;
            CHECK_STATUS(moe_select_gate(&caps, &p, &ch), MOE_OK);
            CHECKF(ch.kernel == &reg[i], "%s unreachable (got %s)", reg[i].name,
                   ch.kernel ? ch.kernel->name : "NULL");
        }
    }
    CHECK(seen >= 6); /* a reference per family at least */
}

int main(void)
{
    test_every_branch();
    test_late_logits_and_bias();
    test_reasons();
    test_errors();
    test_purity();
    test_every_kernel_reachable();
    return TEST_END();
}
