/* test_select.c — the kernel registry, and selection with made-up capabilities for every branch. */
#include <stdlib.h>
#include <string.h>

#include "moe.h"
#include "gate/gate.h" /* moe_select_gate, for the gate families */
#include "select/select.h"
#include "kernel_table.h"

static const moe_kernel_family families[] = {MOE_KERNEL_FAMILY_CVT_BF16_F32,
                                             MOE_KERNEL_FAMILY_CVT_F16_F32,
                                             MOE_KERNEL_FAMILY_CVT_E4M3_F32,
                                             MOE_KERNEL_FAMILY_CVT_MXFP4_F32,
                                             MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS,
                                             MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS,
                                             MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS,
                                             MOE_KERNEL_FAMILY_ROUTE_TOPK,
                                             MOE_KERNEL_FAMILY_ROUTE_EXPSUM,
                                             MOE_KERNEL_FAMILY_ROUTE_NOAUX_TC};
#define NFAMILIES (sizeof families / sizeof families[0])

static const moe_kernel_family route_families[] = {MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS,
                                                   MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS,
                                                   MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS,
                                                   MOE_KERNEL_FAMILY_ROUTE_TOPK,
                                                   MOE_KERNEL_FAMILY_ROUTE_EXPSUM,
                                                   MOE_KERNEL_FAMILY_ROUTE_NOAUX_TC};
#define NROUTE (sizeof route_families / sizeof route_families[0])

static bool is_route(moe_kernel_family f)
{
    for (size_t i = 0; i < NROUTE; i++)
        if (route_families[i] == f) return true;
    return false;
}

/* The expert kernel-set families (tests/kernels/test_expert_select.c covers their entry point;
 * here they only join the registry-wide checks). Their names carry the tile: moe_<family>_<MR>x
 * <NR>__<isa>. */
static bool is_expert(moe_kernel_family f)
{
    return f == MOE_KERNEL_FAMILY_EXPERT_BF16_F32 || f == MOE_KERNEL_FAMILY_EXPERT_BF16_BF16 ||
           f == MOE_KERNEL_FAMILY_EXPERT_FP8_F32 || f == MOE_KERNEL_FAMILY_EXPERT_FP8_BF16 ||
           f == MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8 || f == MOE_KERNEL_FAMILY_EXPERT_F32_F32 ||
           f == MOE_KERNEL_FAMILY_EXPERT_BF16_TILE || f == MOE_KERNEL_FAMILY_EXPERT_FP8_TILE ||
           f == MOE_KERNEL_FAMILY_EXPERT_MXFP4_TILE || f == MOE_KERNEL_FAMILY_EXPERT_INT4_Q8 ||
           f == MOE_KERNEL_FAMILY_EXPERT_INT4_TILE;
}

static moe_status select_expert(moe_kernel_family f, const moe_cpu_caps *caps,
                                moe_kernel_choice *ch)
{
    const bool fp8 = f == MOE_KERNEL_FAMILY_EXPERT_FP8_F32 ||
                     f == MOE_KERNEL_FAMILY_EXPERT_FP8_BF16 ||
                     f == MOE_KERNEL_FAMILY_EXPERT_FP8_TILE;
    const bool tile =
        f == MOE_KERNEL_FAMILY_EXPERT_BF16_TILE || f == MOE_KERNEL_FAMILY_EXPERT_FP8_TILE ||
        f == MOE_KERNEL_FAMILY_EXPERT_MXFP4_TILE || f == MOE_KERNEL_FAMILY_EXPERT_INT4_TILE;
    const bool bf16 =
        f == MOE_KERNEL_FAMILY_EXPERT_BF16_BF16 || f == MOE_KERNEL_FAMILY_EXPERT_FP8_BF16;
    moe_expert_problem p = {
        .format = fp8 ? MOE_EXPERT_FMT_FP8_BLOCK : MOE_EXPERT_FMT_BF16,
        .weight_dtype = fp8 ? MOE_DTYPE_F8_E4M3 : MOE_DTYPE_BF16,
        .scale_dtype = MOE_DTYPE_F32,
        .hidden = 7168,
        .intermediate = 2048,
        .recipe = bf16   ? MOE_RECIPE_BF16
                  : tile ? MOE_RECIPE_TILE
                         : MOE_RECIPE_F32,
    };
    if (f == MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8 || f == MOE_KERNEL_FAMILY_EXPERT_MXFP4_TILE) {
        p.format = MOE_EXPERT_FMT_MXFP4;
        p.weight_dtype = MOE_DTYPE_F4_E2M1;
        p.scale_dtype = MOE_DTYPE_F8_E8M0;
        p.recipe = tile ? MOE_RECIPE_TILE : MOE_RECIPE_Q8;
    }
    if (f == MOE_KERNEL_FAMILY_EXPERT_INT4_Q8 || f == MOE_KERNEL_FAMILY_EXPERT_INT4_TILE) {
        p.format = MOE_EXPERT_FMT_INT4_GROUP;
        p.weight_dtype = MOE_DTYPE_I32;
        p.scale_dtype = MOE_DTYPE_BF16;
        p.recipe = tile ? MOE_RECIPE_TILE : MOE_RECIPE_Q8;
    }
    if (f == MOE_KERNEL_FAMILY_EXPERT_F32_F32) {
        p.format = MOE_EXPERT_FMT_F32;
        p.weight_dtype = MOE_DTYPE_F32;
    }
    moe_expert_choice ec;
    moe_status st = moe_select_experts(caps, &p, &ec);
    if (st) return st;
    ch->kernel = ec.kernel;
    ch->packing = NULL;
    ch->missing = ec.missing;
    snprintf(ch->reason, sizeof ch->reason, "%.191s", ec.reason);
    return MOE_OK;
}

/* The router gate families (tests/gate/test_gate_select.c covers moe_select_gate): each is
 * one (input, weight) dtype pair, selected here for a DeepSeek-V3 router shape. */
static bool gate_dtypes(moe_kernel_family f, moe_dtype *x, moe_dtype *w)
{
    switch (f) {
    case MOE_KERNEL_FAMILY_GATE_XF32_WF32: *x = MOE_DTYPE_F32, *w = MOE_DTYPE_F32; return true;
    case MOE_KERNEL_FAMILY_GATE_XF32_WBF16: *x = MOE_DTYPE_F32, *w = MOE_DTYPE_BF16; return true;
    case MOE_KERNEL_FAMILY_GATE_XF32_WF16: *x = MOE_DTYPE_F32, *w = MOE_DTYPE_F16; return true;
    case MOE_KERNEL_FAMILY_GATE_XBF16_WF32: *x = MOE_DTYPE_BF16, *w = MOE_DTYPE_F32; return true;
    case MOE_KERNEL_FAMILY_GATE_XBF16_WBF16: *x = MOE_DTYPE_BF16, *w = MOE_DTYPE_BF16; return true;
    case MOE_KERNEL_FAMILY_GATE_XBF16_WF16: *x = MOE_DTYPE_BF16, *w = MOE_DTYPE_F16; return true;
    default: return false;
    }
}

static moe_status select_gate_family(moe_kernel_family f, const moe_cpu_caps *caps,
                                     moe_kernel_choice *ch)
{
    moe_gate_problem p = {.logits_dtype = MOE_DTYPE_F32, .n_experts = 256, .hidden = 7168};
    gate_dtypes(f, &p.input_dtype, &p.weight_dtype);
    return moe_select_gate(caps, &p, ch);
}

/* Each family through its own entry point: conversions by length, routing by shape. */
static moe_status select_any(moe_kernel_family f, const moe_cpu_caps *caps, moe_kernel_choice *ch)
{
    if (is_expert(f)) return select_expert(f, caps, ch);
    moe_dtype gx, gw;
    if (gate_dtypes(f, &gx, &gw)) return select_gate_family(f, caps, ch);
    if (is_route(f)) {
        const moe_route_problem rp = {.n_experts = 256, .top_k = 8};
        return moe_select_route(f, caps, &rp, ch);
    }
    const moe_cvt_problem cp = {.n = 1000};
    return moe_select_cvt(f, caps, &cp, ch);
}

static moe_cpu_caps make_caps(bool avx2, bool avx512, bool bf16, bool vnni, bool fp16)
{
    moe_cpu_caps c = {.avx2 = avx2,
                      .avx512 = avx512,
                      .avx512_bf16 = bf16,
                      .avx512_vnni = vnni,
                      .avx512_fp16 = fp16};
    return c;
}

/* The name this build should pick for a family at a given best ISA, spelled out here from the
 * naming rule and the MOE_COMPILED_* definitions rather than read from the registry. */
static void expected_name(moe_kernel_family f, const char *isa, char *buf, size_t size)
{
    snprintf(buf, size, "moe_%s__%s", moe_kernel_family_name(f), isa);
}

static const char *best_compiled(bool avx2, bool avx512)
{
#ifdef MOE_COMPILED_AVX512
    if (avx2 && avx512) return "avx512";
#endif
#ifdef MOE_COMPILED_AVX2
    if (avx2) return "avx2";
#endif
    (void)avx2;
    (void)avx512;
    return "ref";
}

typedef struct caps_case {
    const char *what;
    moe_cpu_caps caps;
    const char *decisive; /* the feature the reason must name, when missing is not 0 */
    uint32_t missing;     /* expected choice.missing when this build has the better kernel */
} caps_case;

static void check_case(const caps_case *c)
{
    const char *best = best_compiled(c->caps.avx2, c->caps.avx2 && c->caps.avx512);
    for (size_t i = 0; i < NFAMILIES; i++) {
        moe_kernel_choice ch;
        char want[96];
        expected_name(families[i], best, want, sizeof want);
        CHECK_STATUS(select_any(families[i], &c->caps, &ch), MOE_OK);
        REQUIRE(ch.kernel != NULL);
        CHECKF(!strcmp(ch.kernel->name, want), "%s: got %s, want %s", c->what, ch.kernel->name,
               want);
        CHECK(ch.packing == NULL);
        CHECKF(strncmp(ch.reason, ch.kernel->name, strlen(ch.kernel->name)) == 0,
               "%s: reason '%s' does not start with the kernel name", c->what, ch.reason);
        /* The decisive feature is reported when this build has the better kernel; otherwise
         * the reason names the ISA of the kernel it chose. */
        bool better_compiled = false;
#ifdef MOE_COMPILED_AVX2
        better_compiled |= c->missing == MOE_FEAT_AVX2;
#endif
#ifdef MOE_COMPILED_AVX512
        better_compiled |= c->missing == MOE_FEAT_AVX512;
#endif
        if (better_compiled) {
            CHECKF(ch.missing == c->missing, "%s: missing 0x%x, want 0x%x", c->what, ch.missing,
                   c->missing);
            CHECKF(strstr(ch.reason, c->decisive) != NULL, "%s: reason '%s' does not name %s",
                   c->what, ch.reason, c->decisive);
        } else if (strcmp(best, "ref") != 0) {
            CHECKF(strstr(ch.reason, best) != NULL, "%s: reason '%s' does not name %s", c->what,
                   ch.reason, best);
        }
        CHECK(ch.reason[0] != '\0');
        if (ch.missing == 0) CHECK(strstr(ch.reason, "not allowed") == NULL);
    }
}

/* One made-up machine per branch of the ISA ladder. */
static void test_branches(void)
{
    const caps_case cases[] = {
        {"no AVX2", make_caps(0, 0, 0, 0, 0), "avx2", MOE_FEAT_AVX2},
        {"AVX2 only", make_caps(1, 0, 0, 0, 0), "avx512", MOE_FEAT_AVX512},
        {"AVX-512 without BF16", make_caps(1, 1, 0, 0, 0), "avx512", 0},
        {"AVX-512 + VNNI", make_caps(1, 1, 0, 1, 0), "avx512", 0},
        {"everything", make_caps(1, 1, 1, 1, 1), "avx512", 0},
        /* Inconsistent structs are normalized: avx512 without avx2 is no avx512. */
        {"avx512 flag without avx2", make_caps(0, 1, 1, 1, 1), "avx2", MOE_FEAT_AVX2},
        {"bf16 without avx512", make_caps(1, 0, 1, 0, 0), "avx512", MOE_FEAT_AVX512},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);

    /* The reasons' wording for the three outcomes, where this build has the kernels. */
    const moe_cvt_problem prob = {.n = 7};
    moe_kernel_choice ch;
#ifdef MOE_COMPILED_AVX512
    moe_cpu_caps all = make_caps(1, 1, 1, 1, 1);
    CHECK_STATUS(moe_select_cvt(MOE_KERNEL_FAMILY_CVT_BF16_F32, &all, &prob, &ch), MOE_OK);
    CHECKF(!strcmp(ch.reason, "moe_cvt_bf16_f32__avx512: avx512 allowed; preferred over "
                              "moe_cvt_bf16_f32__avx2"),
           "reason '%s'", ch.reason);
    moe_cpu_caps avx2 = make_caps(1, 0, 0, 0, 0);
    CHECK_STATUS(moe_select_cvt(MOE_KERNEL_FAMILY_CVT_MXFP4_F32, &avx2, &prob, &ch), MOE_OK);
    CHECKF(!strcmp(ch.reason, "moe_cvt_mxfp4_f32__avx2: moe_cvt_mxfp4_f32__avx512 needs "
                              "avx512, which is not allowed"),
           "reason '%s'", ch.reason);
#endif
#ifdef MOE_COMPILED_AVX2
    moe_cpu_caps none = make_caps(0, 0, 0, 0, 0);
    CHECK_STATUS(moe_select_cvt(MOE_KERNEL_FAMILY_CVT_E4M3_F32, &none, &prob, &ch), MOE_OK);
    CHECKF(
        !strcmp(ch.reason,
                "moe_cvt_e4m3_f32__ref: moe_cvt_e4m3_f32__avx2 needs avx2, which is not allowed"),
        "reason '%s'", ch.reason);
#endif
}

/* Every registered kernel is chosen for the caps that are exactly its requirement. */
static void test_every_kernel_reachable(void)
{
    size_t count;
    const moe_kernel *reg = moe_kernel_registry(&count);
    for (size_t i = 0; i < count; i++) {
        moe_cpu_caps caps = moe_cpu_caps_from_mask(reg[i].isa);
        moe_kernel_choice ch;
        CHECK_STATUS(select_any(reg[i].family, &caps, &ch), MOE_OK);
        CHECKF(ch.kernel == &reg[i], "%s unreachable (got %s)", reg[i].name,
               ch.kernel ? ch.kernel->name : "NULL");
        CHECK(ch.reason[0] != '\0');
    }
}

static void test_registry_shape(void)
{
    size_t count;
    const moe_kernel *reg = moe_kernel_registry(&count);
    REQUIRE(count >= NFAMILIES);
    size_t per_family[MOE_KERNEL_FAMILY_COUNT_] = {0};
    for (size_t i = 0; i < count; i++) {
        const moe_kernel *k = &reg[i];
        REQUIRE((unsigned)k->family < MOE_KERNEL_FAMILY_COUNT_);
        const char *token = moe_kernel_isa_token(k->isa);
        CHECKF(token != NULL, "%s: isa mask 0x%x is no ISA level", k->name, k->isa);
        char want[96];
        expected_name(k->family, token ? token : "?", want, sizeof want);
        if (is_expert(k->family)) {
            /* moe_<family>_<MR>x<NR>__<isa>: the family's prefix and the ISA's suffix. */
            char prefix[64];
            snprintf(prefix, sizeof prefix, "moe_%s_", moe_kernel_family_name(k->family));
            const char *suffix = strstr(want, "__");
            size_t nl = strlen(k->name), sl = strlen(suffix);
            CHECKF(!strncmp(k->name, prefix, strlen(prefix)) && nl > sl &&
                       !strcmp(k->name + nl - sl, suffix) && strchr(k->name + strlen(prefix), 'x'),
                   "name %s, want %s<MR>x<NR>%s", k->name, prefix, suffix);
            /* <MR>x<NR> says what the set takes: its mr tokens a call by nr rows a tile. */
            const moe_expert_kernels *ks = k->fn.expert_set;
            char mrnr[32];
            snprintf(mrnr, sizeof mrnr, "_%dx%d__", ks->mr, ks->nr);
            CHECKF(strstr(k->name, mrnr) != NULL, "%s: takes %d tokens by %d rows, named otherwise",
                   k->name, ks->mr, ks->nr);
        } else {
            CHECKF(!strcmp(k->name, want), "name %s, want %s", k->name, want);
        }
        if (per_family[k->family] == 0) {
            /* The first entry of a family is its reference, which needs nothing. */
            CHECKF(k->isa == MOE_REQ_SCALAR, "%s listed first but needs 0x%x", k->name, k->isa);
            CHECK(same_fn(k->family, k->fn, k->ref));
        } else {
            /* Families are contiguous and everything points at the family's reference. */
            CHECKF(reg[i - 1].family == k->family, "%s: family not contiguous", k->name);
            const moe_kernel *first = &reg[i - per_family[k->family]];
            CHECK(same_fn(k->family, k->ref, first->fn));
            CHECK(!same_fn(k->family, k->fn, first->fn));
        }
        per_family[k->family]++;
        CHECK(moe_kernel_find(k->name) == k);
        for (size_t j = 0; j < i; j++)
            CHECKF(strcmp(reg[j].name, k->name) != 0, "duplicate %s", k->name);
    }
    for (size_t f = 0; f < MOE_KERNEL_FAMILY_COUNT_; f++)
        CHECKF(per_family[f] >= 1, "family %s has no kernel",
               moe_kernel_family_name((moe_kernel_family)f));
    CHECK(moe_kernel_find("moe_cvt_bf16_f32__sse9") == NULL);
    CHECK(moe_kernel_find(NULL) == NULL);
    CHECK(!strcmp(moe_kernel_family_name(MOE_KERNEL_FAMILY_COUNT_), "invalid"));
    CHECK(moe_kernel_isa_token(MOE_FEAT_AVX512) == NULL); /* avx512 without avx2 */
}

static void test_errors_and_purity(void)
{
    const moe_cpu_caps caps = make_caps(1, 1, 0, 0, 0);
    const moe_cvt_problem prob = {.n = 3};
    moe_kernel_choice ch, before;
    memset(&ch, 0x33, sizeof ch);
    memcpy(&before, &ch, sizeof ch);
    CHECK_STATUS(moe_select_cvt(MOE_KERNEL_FAMILY_CVT_BF16_F32, NULL, &prob, &ch), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "allowed") != NULL);
    CHECK_STATUS(moe_select_cvt(MOE_KERNEL_FAMILY_CVT_BF16_F32, &caps, NULL, &ch), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "problem") != NULL);
    CHECK_STATUS(moe_select_cvt(MOE_KERNEL_FAMILY_CVT_BF16_F32, &caps, &prob, NULL), MOE_EINVAL);
    CHECK_STATUS(moe_select_cvt(MOE_KERNEL_FAMILY_COUNT_, &caps, &prob, &ch), MOE_EINVAL);
    CHECK_STATUS(moe_select_cvt((moe_kernel_family)-1, &caps, &prob, &ch), MOE_EINVAL);
    CHECK(memcmp(&ch, &before, sizeof ch) == 0);

    /* Same arguments, same answer, whatever the environment says. */
    moe_kernel_choice a, b;
    CHECK_STATUS(moe_select_cvt(MOE_KERNEL_FAMILY_CVT_MXFP4_F32, &caps, &prob, &a), MOE_OK);
    const char *old = getenv("MOE_ISA");
    char *saved = old ? strdup(old) : NULL;
    setenv("MOE_ISA", "scalar", 1);
    CHECK_STATUS(moe_select_cvt(MOE_KERNEL_FAMILY_CVT_MXFP4_F32, &caps, &prob, &b), MOE_OK);
    CHECK(a.kernel == b.kernel && !strcmp(a.reason, b.reason) && a.missing == b.missing);
    if (saved) {
        setenv("MOE_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("MOE_ISA");
    }
}

/* moe_select_route: its own argument checks, its family set, purity, and its reasons. */
static void test_route_selection(void)
{
    const moe_cpu_caps caps = make_caps(1, 1, 0, 0, 0);
    moe_kernel_choice ch, before;
    memset(&ch, 0x5A, sizeof ch);
    memcpy(&before, &ch, sizeof ch);
    const moe_route_problem ok = {.n_experts = 256, .top_k = 8};
    const moe_kernel_family topk = MOE_KERNEL_FAMILY_ROUTE_TOPK;

    CHECK_STATUS(moe_select_route(topk, NULL, &ok, &ch), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "allowed") != NULL);
    CHECK_STATUS(moe_select_route(topk, &caps, NULL, &ch), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "problem") != NULL);
    CHECK_STATUS(moe_select_route(topk, &caps, &ok, NULL), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "out") != NULL);
    /* A conversion family is not a routing one, and the other way round. */
    CHECK_STATUS(moe_select_route(MOE_KERNEL_FAMILY_CVT_BF16_F32, &caps, &ok, &ch), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "cvt_bf16_f32") != NULL);
    CHECK_STATUS(moe_select_route(MOE_KERNEL_FAMILY_COUNT_, &caps, &ok, &ch), MOE_EINVAL);
    CHECK_STATUS(moe_select_route((moe_kernel_family)-3, &caps, &ok, &ch), MOE_EINVAL);
    const moe_cvt_problem cp = {.n = 8};
    for (size_t i = 0; i < NROUTE; i++)
        CHECK_STATUS(moe_select_cvt(route_families[i], &caps, &cp, &ch), MOE_EINVAL);
    /* Shapes: E ≥ 1, 1 ≤ K ≤ E; the message names the offending value. */
    const struct {
        moe_route_problem p;
        const char *named;
    } bad[] = {
        {{0, 1}, "n_experts 0"}, {{-5, 1}, "n_experts -5"}, {{8, 0}, "top_k 0"},
        {{8, -1}, "top_k -1"},   {{8, 9}, "top_k 9"},       {{1, 2}, "top_k 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(moe_select_route(topk, &caps, &bad[i].p, &ch), MOE_EINVAL);
        CHECKF(strstr(moe_last_error(), bad[i].named) != NULL, "message '%s' does not name '%s'",
               moe_last_error(), bad[i].named);
    }
    CHECK(memcmp(&ch, &before, sizeof ch) == 0);

    /* Edge shapes that are fine: one expert, K = E, a large E. */
    const moe_route_problem edges[] = {{1, 1}, {8, 8}, {384, 8}, {4096, 4096}};
    for (size_t f = 0; f < NROUTE; f++) {
        for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
            moe_kernel_choice a, b;
            CHECK_STATUS(moe_select_route(route_families[f], &caps, &edges[i], &a), MOE_OK);
            CHECK(a.kernel && a.kernel->family == route_families[f] && a.packing == NULL);
            /* Pure: the same arguments give the same answer. */
            CHECK_STATUS(moe_select_route(route_families[f], &caps, &edges[i], &b), MOE_OK);
            CHECK(a.kernel == b.kernel && a.missing == b.missing && !strcmp(a.reason, b.reason));
        }
    }

    /* The reasons' wording, where this build has the kernels. */
#ifdef MOE_COMPILED_AVX512
    moe_cpu_caps all = make_caps(1, 1, 1, 1, 1);
    CHECK_STATUS(moe_select_route(topk, &all, &ok, &ch), MOE_OK);
    CHECKF(!strcmp(ch.reason,
                   "moe_route_topk__avx512: avx512 allowed; preferred over moe_route_topk__avx2"),
           "reason '%s'", ch.reason);
    moe_cpu_caps avx2 = make_caps(1, 0, 0, 0, 0);
    CHECK_STATUS(moe_select_route(MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS, &avx2, &ok, &ch), MOE_OK);
    CHECKF(!strcmp(ch.reason, "moe_route_sigmoid_keys__avx2: moe_route_sigmoid_keys__avx512 "
                              "needs avx512, which is not allowed"),
           "reason '%s'", ch.reason);
    CHECK(ch.missing == MOE_FEAT_AVX512);
#endif
#ifdef MOE_COMPILED_AVX2
    moe_cpu_caps none = make_caps(0, 0, 0, 0, 0);
    CHECK_STATUS(moe_select_route(MOE_KERNEL_FAMILY_ROUTE_EXPSUM, &none, &ok, &ch), MOE_OK);
    CHECKF(!strcmp(ch.reason, "moe_route_expsum__ref: moe_route_expsum__avx2 needs avx2, which "
                              "is not allowed"),
           "reason '%s'", ch.reason);
    CHECK(ch.missing == MOE_FEAT_AVX2);
#endif
}

static bool caps_subset(const moe_cpu_caps *a, const moe_cpu_caps *b)
{
    return (moe_cpu_caps_mask(a) & ~moe_cpu_caps_mask(b)) == 0;
}

static void test_cpu_query(void)
{
    const char *old = getenv("MOE_ISA");
    char *saved = old ? strdup(old) : NULL;
    moe_cpu_info info;

    unsetenv("MOE_ISA");
    CHECK_STATUS(moe_cpu_query(&info), MOE_OK);
    CHECK(!info.cap_from_env && info.cap == MOE_ISA_AVX512BF16);
    moe_cpu_caps both = moe_cpu_caps_intersect(&info.detected, &info.compiled);
    CHECK(moe_cpu_caps_mask(&info.allowed) == moe_cpu_caps_mask(&both));
    CHECK(caps_subset(&info.allowed, &info.detected) && caps_subset(&info.allowed, &info.compiled));

    moe_cpu_caps compiled = moe_kernels_compiled();
#ifdef MOE_COMPILED_AVX2
    CHECK(compiled.avx2);
#else
    CHECK(!compiled.avx2);
#endif
#ifdef MOE_COMPILED_AVX512
    CHECK(compiled.avx512);
#else
    CHECK(!compiled.avx512);
#endif
    CHECK(!compiled.avx512_fp16);
    CHECK(moe_cpu_caps_mask(&compiled) == moe_cpu_caps_mask(&info.compiled));

    setenv("MOE_ISA", "avx2", 1);
    CHECK_STATUS(moe_cpu_query(&info), MOE_OK);
    CHECK(info.cap_from_env && info.cap == MOE_ISA_AVX2);
    CHECK(!info.allowed.avx512 && info.allowed.avx2 == (both.avx2));

    setenv("MOE_ISA", "scalar", 1);
    CHECK_STATUS(moe_cpu_query(&info), MOE_OK);
    CHECK(moe_cpu_caps_mask(&info.allowed) == 0 && info.cap == MOE_ISA_SCALAR);

    /* An empty value is the same as unset. */
    setenv("MOE_ISA", "", 1);
    CHECK_STATUS(moe_cpu_query(&info), MOE_OK);
    CHECK(!info.cap_from_env && info.cap == MOE_ISA_AVX512BF16);

    moe_cpu_info before;
    memset(&info, 0x77, sizeof info);
    memcpy(&before, &info, sizeof info);
    setenv("MOE_ISA", "avx9000", 1);
    CHECK_STATUS(moe_cpu_query(&info), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "avx9000") != NULL);
    CHECK(memcmp(&info, &before, sizeof info) == 0);
    CHECK_STATUS(moe_cpu_query(NULL), MOE_EINVAL);

    if (saved) {
        setenv("MOE_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("MOE_ISA");
    }
}

static void test_feature_why(void)
{
    moe_cpu_info info = {0};
    info.detected = make_caps(1, 1, 1, 1, 1);
    info.compiled = make_caps(1, 1, 1, 1, 0);
    info.allowed = make_caps(1, 0, 0, 0, 0);
    info.cap = MOE_ISA_AVX2;
    char buf[96];
    moe_cpu_feature_why(&info, MOE_FEAT_AVX2, buf, sizeof buf);
    CHECK(!strcmp(buf, "allowed"));
    moe_cpu_feature_why(&info, MOE_FEAT_AVX512, buf, sizeof buf);
    CHECKF(!strcmp(buf, "capped by MOE_ISA=avx2"), "'%s'", buf);
    moe_cpu_feature_why(&info, MOE_FEAT_AVX512_FP16, buf, sizeof buf);
    CHECKF(!strcmp(buf, "not compiled into this build"), "'%s'", buf);
    info.detected = make_caps(1, 0, 0, 0, 0);
    moe_cpu_feature_why(&info, MOE_FEAT_AVX512, buf, sizeof buf);
    CHECKF(!strcmp(buf, "not detected on this CPU"), "'%s'", buf);
}

int main(void)
{
    test_registry_shape();
    test_branches();
    test_every_kernel_reachable();
    test_errors_and_purity();
    test_route_selection();
    test_cpu_query();
    test_feature_why();
    return TEST_END();
}
