/* test_expert_select.c — moe_select_experts with made-up capabilities and problems, every branch.
 */
#include <stdlib.h>
#include <string.h>

#include "moe.h"
#include "model/model.h"
#include "select/select.h"
#include "test.h"

/* kernels/expert.h spells the weight formats and activations as ints; they are model.h's. */
_Static_assert(MOE_EXPERT_FMT_BF16 == (int)MOE_WFMT_BF16, "format values");
_Static_assert(MOE_EXPERT_FMT_FP8_BLOCK == (int)MOE_WFMT_FP8_BLOCK, "format values");
_Static_assert(MOE_EXPERT_FMT_MXFP4 == (int)MOE_WFMT_MXFP4, "format values");
_Static_assert(MOE_EXPERT_FMT_F32 == (int)MOE_WFMT_F32, "format values");
_Static_assert(MOE_EXPERT_FMT_F16 == (int)MOE_WFMT_F16, "format values");
_Static_assert(MOE_EXPERT_FMT_INT4_GROUP == (int)MOE_WFMT_INT4_GROUP, "format values");
_Static_assert(MOE_ACT_SILU_GLU == 0 && MOE_ACT_SILU_GLU_CLAMP == 1 && MOE_ACT_GPTOSS_GLU == 2,
               "activation kinds");

static moe_cpu_caps make_caps(bool avx2, bool avx512, bool bf16, bool vnni, bool fp16, bool vbmi,
                              bool avx_vnni, bool amx)
{
    /* amx_bf16 off: only the tile recipe's sets use tdpbf16ps (test_tile_ladder) */
    moe_cpu_caps c = {avx2, avx512, bf16, vnni, fp16, vbmi, avx_vnni, amx, false};
    return c;
}

static moe_expert_problem problem(int format, moe_expert_recipe recipe)
{
    moe_expert_problem p = {
        .format = format,
        .weight_dtype = format == MOE_EXPERT_FMT_BF16 ? MOE_DTYPE_BF16 : MOE_DTYPE_F8_E4M3,
        .scale_dtype = format == MOE_EXPERT_FMT_BF16 ? MOE_DTYPE_INVALID : MOE_DTYPE_F32,
        .hidden = 7168,
        .intermediate = 2048,
        .activation = 0,
        .has_bias = false,
        .recipe = recipe,
    };
    return p;
}

/* The set this build must choose, spelled out from the names of kernels/expert_*.inc and the
 * MOE_COMPILED_* definitions (not read from the registry). */
static const char *expected(int format, moe_expert_recipe recipe, const moe_cpu_caps *c)
{
    const bool fp8 = format == MOE_EXPERT_FMT_FP8_BLOCK;
    const bool avx2 = c->avx2, avx512 = avx2 && c->avx512, bf16 = avx512 && c->avx512_bf16;
    const bool vbmi = avx512 && c->avx512_vbmi;
    (void)avx2, (void)avx512, (void)bf16, (void)vbmi;
    if (recipe == MOE_RECIPE_BF16) {
#ifdef MOE_COMPILED_AVX512BF16
        if (bf16)
            return fp8 ? "moe_expert_fp8_bf16_8x16__avx512bf16"
                       : "moe_expert_bf16_bf16_8x16__avx512bf16";
#endif
#ifdef MOE_COMPILED_AVX512
        if (avx512)
            return fp8 ? "moe_expert_fp8_bf16_8x16__avx512" : "moe_expert_bf16_bf16_8x16__avx512";
#endif
#ifdef MOE_COMPILED_AVX2
        if (avx2)
            return fp8 ? "moe_expert_fp8_bf16_32x16__avx2" : "moe_expert_bf16_bf16_32x16__avx2";
#endif
        return fp8 ? "moe_expert_fp8_bf16_8x16__ref" : "moe_expert_bf16_bf16_8x16__ref";
    }
#ifdef MOE_COMPILED_AVX512VBMI
    if (fp8 && vbmi) return "moe_expert_fp8_f32_32x16__avx512vbmi";
#endif
#ifdef MOE_COMPILED_AVX512
    if (avx512)
        return fp8 ? "moe_expert_fp8_f32_32x16__avx512" : "moe_expert_bf16_f32_12x16__avx512";
#endif
#ifdef MOE_COMPILED_AVX2
    if (avx2) return fp8 ? "moe_expert_fp8_f32_32x16__avx2" : "moe_expert_bf16_f32_32x16__avx2";
#endif
    return fp8 ? "moe_expert_fp8_f32_8x16__ref" : "moe_expert_bf16_f32_8x16__ref";
}

/* MXFP4: gpt-oss-20b's expert shape, E8M0 scales, the codes as F4_E2M1. */
static moe_expert_problem mxfp4_problem(moe_expert_recipe recipe)
{
    moe_expert_problem p = {
        .format = MOE_EXPERT_FMT_MXFP4,
        .weight_dtype = MOE_DTYPE_F4_E2M1,
        .scale_dtype = MOE_DTYPE_F8_E8M0,
        .hidden = 2880,
        .intermediate = 2880,
        .activation = 2,
        .has_bias = true,
        .recipe = recipe,
    };
    return p;
}

/* The MXFP4 set this build must choose, and the instruction the reason must name. */
static const char *expected_mxfp4(const moe_cpu_caps *c, const char **insn)
{
    const bool avx2 = c->avx2, avx512 = avx2 && c->avx512, vnni = avx512 && c->avx512_vnni;
    const bool avx_vnni = avx2 && c->avx_vnni;
    (void)avx2, (void)avx512, (void)vnni, (void)avx_vnni;
#ifdef MOE_COMPILED_AVX512AMX
    *insn = "tdpbssd tiles from 16 tokens, amx_int8 allowed";
    if (vnni && c->amx_int8) return "moe_expert_mxfp4_q8_32x16__avx512amx";
#endif
#ifdef MOE_COMPILED_AVX512VNNI
    *insn = "vpdpbusd, avx512_vnni allowed";
    if (vnni) return "moe_expert_mxfp4_q8_32x16__avx512vnni";
#endif
#ifdef MOE_COMPILED_AVX512
    *insn = "vpmaddubsw zmm, avx512 allowed";
    if (avx512) return "moe_expert_mxfp4_q8_32x16__avx512";
#endif
#ifdef MOE_COMPILED_AVXVNNI
    *insn = "vpdpbusd ymm, avx_vnni allowed";
    if (avx_vnni) return "moe_expert_mxfp4_q8_32x16__avxvnni";
#endif
#ifdef MOE_COMPILED_AVX2
    *insn = "vpmaddubsw ymm, avx2 allowed";
    if (avx2) return "moe_expert_mxfp4_q8_32x16__avx2";
#endif
    *insn = "portable C, no int8 dot product allowed";
    return "moe_expert_mxfp4_q8_8x16__ref";
}

/* INT4 group weights: Kimi-K2's expert shape, bf16 scales, the words as I32. */
static moe_expert_problem int4_problem(moe_expert_recipe recipe)
{
    moe_expert_problem p = {
        .format = MOE_EXPERT_FMT_INT4_GROUP,
        .weight_dtype = MOE_DTYPE_I32,
        .scale_dtype = MOE_DTYPE_BF16,
        .hidden = 7168,
        .intermediate = 2048,
        .recipe = recipe,
    };
    return p;
}

/* The Q8 INT4 ladder is MXFP4's without the AMX-INT8 set: the same names with int4, the same
 * instructions in the reason (the tile recipe's ladder: test_tile_ladder_of). */
static void test_int4_ladder(const moe_cpu_caps *caps, size_t ncaps)
{
    for (size_t c = 0; c < ncaps; c++) {
        moe_cpu_caps norm = moe_cpu_caps_normalize(caps[c]);
        norm.amx_int8 = false;
        const char *insn = NULL;
        char want[96];
        snprintf(want, sizeof want, "moe_expert_int4_%s",
                 expected_mxfp4(&norm, &insn) + strlen("moe_expert_mxfp4_"));
        for (int r = 0; r < 2; r++) {
            moe_expert_problem p = int4_problem(r ? MOE_RECIPE_Q8 : MOE_RECIPE_F32);
            moe_expert_choice ch;
            CHECK_STATUS(moe_select_experts(&caps[c], &p, &ch), MOE_OK);
            CHECKF(!strcmp(ch.set->name, want), "caps %zu int4: %s, want %s", c, ch.set->name,
                   want);
            CHECK(ch.kernel->family == MOE_KERNEL_FAMILY_EXPERT_INT4_Q8);
            CHECK(ch.recipe == MOE_RECIPE_Q8 && ch.set->format == MOE_EXPERT_FMT_INT4_GROUP);
            CHECKF(strstr(ch.reason, insn) != NULL, "reason '%s' lacks '%s'", ch.reason, insn);
        }
    }
}

/* MXFP4 runs the Q8 recipe on every machine; the ISA ladder picks the set, the reason names
 * the recipe and its instruction; activation, bias, the code and scale labels and an F32
 * (default) or Q8 request change nothing. */
static void test_mxfp4_ladder(const moe_cpu_caps *caps, size_t ncaps)
{
    for (size_t c = 0; c < ncaps; c++) {
        moe_cpu_caps norm = moe_cpu_caps_normalize(caps[c]);
        const char *insn = NULL;
        const char *want = expected_mxfp4(&norm, &insn);
        moe_expert_problem p = mxfp4_problem(MOE_RECIPE_Q8);
        moe_expert_choice ch;
        CHECK_STATUS(moe_select_experts(&caps[c], &p, &ch), MOE_OK);
        CHECKF(!strcmp(ch.set->name, want), "caps %zu mxfp4: %s, want %s", c, ch.set->name, want);
        CHECK(ch.kernel && ch.kernel->fn.expert_set == ch.set);
        CHECK(ch.kernel->family == MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8);
        CHECK(ch.recipe == MOE_RECIPE_Q8 && ch.set->recipe == MOE_RECIPE_Q8);
        CHECK(ch.set->format == MOE_EXPERT_FMT_MXFP4);
        CHECK(ch.set->act_row_bytes && ch.set->prepare_act);
        CHECKF(!strncmp(ch.reason, want, strlen(want)), "reason '%s'", ch.reason);
        CHECKF(strstr(ch.reason, "; recipe q8 (int8 activations per 32-block") != NULL,
               "reason '%s'", ch.reason);
        CHECKF(strstr(ch.reason, insn) != NULL, "reason '%s' lacks '%s'", ch.reason, insn);
        const moe_dtype codes[] = {MOE_DTYPE_F4_E2M1, MOE_DTYPE_U8, MOE_DTYPE_I8};
        for (int v = 0; v < 6; v++) {
            moe_expert_problem q = p;
            q.recipe = v % 2 ? MOE_RECIPE_F32 : MOE_RECIPE_Q8;
            q.activation = v % 3;
            q.has_bias = v == 2;
            q.weight_dtype = codes[v % 3];
            q.scale_dtype = v >= 3 ? MOE_DTYPE_U8 : MOE_DTYPE_F8_E8M0;
            q.hidden = v >= 4 ? 4096 : 2880;
            q.intermediate = v >= 4 ? 2048 : 32;
            moe_expert_choice ch2;
            CHECK_STATUS(moe_select_experts(&caps[c], &q, &ch2), MOE_OK);
            CHECK(ch2.set == ch.set && !strcmp(ch2.reason, ch.reason));
        }
    }
}

/* f32 and f16 weights: the f32 sets (f16 packs into their tiles), the f32 recipe whatever is
 * asked, the reason saying a bf16 request was not taken. The names spelled out from
 * kernels/expert_f32_f32.inc. */
static void test_plain_ladder(const moe_cpu_caps *caps, size_t ncaps)
{
    const int formats[] = {MOE_EXPERT_FMT_F32, MOE_EXPERT_FMT_F16};
    const moe_dtype dtypes[] = {MOE_DTYPE_F32, MOE_DTYPE_F16};
    for (size_t c = 0; c < ncaps; c++) {
        const moe_cpu_caps norm = moe_cpu_caps_normalize(caps[c]);
        const char *want = "moe_expert_f32_f32_8x16__ref";
#ifdef MOE_COMPILED_AVX2
        if (norm.avx2) want = "moe_expert_f32_f32_32x16__avx2";
#endif
#ifdef MOE_COMPILED_AVX512
        if (norm.avx2 && norm.avx512) want = "moe_expert_f32_f32_12x16__avx512";
#endif
        const moe_expert_recipe asked[] = {MOE_RECIPE_F32, MOE_RECIPE_BF16, MOE_RECIPE_TILE};
        for (size_t f = 0; f < 2; f++)
            for (size_t a = 0; a < 3; a++) {
                const moe_expert_recipe r = asked[a];
                moe_expert_problem p = problem(MOE_EXPERT_FMT_BF16, r);
                p.format = formats[f];
                p.weight_dtype = dtypes[f];
                moe_expert_choice ch;
                CHECK_STATUS(moe_select_experts(&caps[c], &p, &ch), MOE_OK);
                CHECKF(!strcmp(ch.set->name, want), "caps %zu format %d recipe %d: %s, want %s", c,
                       formats[f], (int)r, ch.set->name, want);
                CHECK(ch.set->format == MOE_EXPERT_FMT_F32 && ch.recipe == MOE_RECIPE_F32);
                CHECK(ch.kernel && ch.kernel->family == MOE_KERNEL_FAMILY_EXPERT_F32_F32);
                CHECKF(!strncmp(ch.reason, want, strlen(want)) &&
                           strstr(ch.reason, "recipe f32 (f32 activations, fp32 FMA)") != NULL,
                       "reason '%s'", ch.reason);
                const bool said = strstr(ch.reason, "bf16 requested, but f") != NULL &&
                                  strstr(ch.reason, f ? "f16 weights have no bf16 recipe"
                                                      : "f32 weights have no bf16 recipe") != NULL;
                CHECKF(said == (r == MOE_RECIPE_BF16), "reason '%s'", ch.reason);
                const bool said_tile =
                    strstr(ch.reason, "tile requested, but f") != NULL &&
                    strstr(ch.reason, f ? "f16 weights have no tile recipe"
                                        : "f32 weights have no tile recipe") != NULL;
                CHECKF(said_tile == (r == MOE_RECIPE_TILE), "reason '%s'", ch.reason);
            }
    }
    /* The dtype must be the format's; no q8 recipe. *out untouched on error. */
    const moe_cpu_caps all = make_caps(1, 1, 1, 1, 1, 1, 1, 1);
    moe_expert_problem p = problem(MOE_EXPERT_FMT_BF16, MOE_RECIPE_F32);
    p.format = MOE_EXPERT_FMT_F32;
    moe_expert_choice keep;
    memset(&keep, 0x5A, sizeof keep);
    moe_expert_choice out = keep;
    CHECK_STATUS(moe_select_experts(&all, &p, &out), MOE_EDTYPE);
    CHECK(strstr(moe_last_error(), "f32-format expert weights of dtype bf16, not f32") != NULL);
    p.format = MOE_EXPERT_FMT_F16;
    p.weight_dtype = MOE_DTYPE_F32;
    CHECK_STATUS(moe_select_experts(&all, &p, &out), MOE_EDTYPE);
    CHECK(strstr(moe_last_error(), "f16-format expert weights of dtype f32, not f16") != NULL);
    p.weight_dtype = MOE_DTYPE_F16;
    p.recipe = MOE_RECIPE_Q8;
    CHECK_STATUS(moe_select_experts(&all, &p, &out), MOE_EUNSUPPORTED);
    CHECK(strstr(moe_last_error(), "the q8 recipe is for MXFP4 and INT4 weights, not f16") != NULL);
    CHECK(!memcmp(&out, &keep, sizeof out));
    /* bf16-format weights stored as f32 point at their own format. */
    p = problem(MOE_EXPERT_FMT_BF16, MOE_RECIPE_F32);
    p.weight_dtype = MOE_DTYPE_F32;
    CHECK_STATUS(moe_select_experts(&all, &p, &out), MOE_EUNSUPPORTED);
    CHECK(strstr(moe_last_error(), "f32 weights are their own format") != NULL);
}

/* The tile recipe's AMX-BF16 set of family f, where this build registers one (the registry is
 * read for it: its tile size is the set's own), else NULL. */
static const moe_kernel *tile_amx_set(moe_kernel_family f)
{
    size_t n;
    const moe_kernel *reg = moe_kernel_registry(&n);
    for (size_t i = 0; i < n; i++)
        if (reg[i].family == f && reg[i].isa == MOE_REQ_AVX512AMXBF16) return &reg[i];
    return NULL;
}

/* bf16, FP8, MXFP4 and INT4 weights asked for the tile recipe: the ladder ref -> avx2 -> avx512 ->
 * avx512amxbf16 of each format's family (FP8: avx512vbmi before the tiles), the reason naming
 * the arithmetic that runs (tdpbf16ps tiles, or the tile unit's arithmetic as FMA chains, or in
 * portable C). Made-up machines: AMX-BF16 with the OS's grant of the tile data (amx_bf16
 * allowed) and without it (the CPU's AMX flags, but amx_bf16 not allowed); AMX-BF16 without
 * VBMI; AVX512-BF16 alone; AVX-512 alone; AVX2 alone; nothing. Names spelled out from
 * kernels/expert_bf16_tile.inc, kernels/expert_fp8_tile.inc, kernels/expert_mxfp4_tile.inc and
 * kernels/expert_int4_tile.inc. */
static void test_tile_ladder_of(int fmt)
{
    const bool fp8 = fmt == MOE_EXPERT_FMT_FP8_BLOCK, mx = fmt == MOE_EXPERT_FMT_MXFP4;
    const bool i4 = fmt == MOE_EXPERT_FMT_INT4_GROUP;
    const moe_kernel_family fam = fp8  ? MOE_KERNEL_FAMILY_EXPERT_FP8_TILE
                                  : mx ? MOE_KERNEL_FAMILY_EXPERT_MXFP4_TILE
                                  : i4 ? MOE_KERNEL_FAMILY_EXPERT_INT4_TILE
                                       : MOE_KERNEL_FAMILY_EXPERT_BF16_TILE;
    const moe_kernel *amx = tile_amx_set(fam);
    const char *fma = "recipe tile (bf16 activations, the tile unit's arithmetic as two FMA chains "
                      "under DAZ and FTZ), as requested";
    const struct {
        const char *what;
        moe_cpu_caps caps;
        bool tiles; /* the AMX set, where this build has one */
    } cases[] = {
        {"amx_bf16 allowed", {1, 1, 1, 1, 1, 1, 0, 1, 1}, true},
        {"amx_bf16 without the OS's grant", {1, 1, 1, 1, 1, 1, 0, 0, 0}, false},
        {"amx_bf16 without avx512_bf16", {1, 1, 0, 1, 0, 0, 0, 1, 1}, false},
        {"amx_bf16 without avx512_vbmi", {1, 1, 1, 1, 1, 0, 0, 1, 1}, false},
        {"avx512_bf16 only", {1, 1, 1, 0, 0, 0, 0, 0, 0}, false},
        {"avx512 only", {1, 1, 0, 0, 0, 0, 0, 0, 0}, false},
        {"avx2 only", {1, 0, 0, 0, 0, 0, 0, 0, 0}, false},
        {"scalar", {0, 0, 0, 0, 0, 0, 0, 0, 0}, false},
        {"amx_bf16 flag without avx2", {0, 1, 1, 0, 0, 0, 0, 0, 1}, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const moe_cpu_caps norm = moe_cpu_caps_normalize(cases[c].caps);
        const char *want = fp8  ? "moe_expert_fp8_tile_8x16__ref"
                           : mx ? "moe_expert_mxfp4_tile_8x16__ref"
                           : i4 ? "moe_expert_int4_tile_8x16__ref"
                                : "moe_expert_bf16_tile_8x16__ref";
        const char *recipe = "the tile unit's arithmetic in portable C";
#ifdef MOE_COMPILED_AVX2
        if (norm.avx2)
            want = fp8  ? "moe_expert_fp8_tile_4x16__avx2"
                   : mx ? "moe_expert_mxfp4_tile_4x16__avx2"
                   : i4 ? "moe_expert_int4_tile_4x16__avx2"
                        : "moe_expert_bf16_tile_4x16__avx2",
            recipe = fma;
#endif
#ifdef MOE_COMPILED_AVX512
        if (norm.avx2 && norm.avx512)
            want = fp8  ? "moe_expert_fp8_tile_12x16__avx512"
                   : mx ? "moe_expert_mxfp4_tile_12x16__avx512"
                   : i4 ? "moe_expert_int4_tile_12x16__avx512"
                        : "moe_expert_bf16_tile_12x16__avx512",
            recipe = fma;
#endif
#ifdef MOE_COMPILED_AVX512VBMI
        if (fp8 && norm.avx2 && norm.avx512 && norm.avx512_vbmi)
            want = "moe_expert_fp8_tile_12x16__avx512vbmi", recipe = fma;
#endif
        if (cases[c].tiles && amx) {
            want = amx->name;
            recipe = "recipe tile (activations rounded to bf16, tdpbf16ps tiles), as requested";
        }
        moe_expert_problem p = mx   ? mxfp4_problem(MOE_RECIPE_TILE)
                               : i4 ? int4_problem(MOE_RECIPE_TILE)
                                    : problem(fmt, MOE_RECIPE_TILE);
        moe_expert_choice ch;
        CHECK_STATUS(moe_select_experts(&cases[c].caps, &p, &ch), MOE_OK);
        CHECKF(!strcmp(ch.set->name, want), "%s: %s, want %s", cases[c].what, ch.set->name, want);
        CHECK(ch.kernel && ch.kernel->fn.expert_set == ch.set);
        CHECK(ch.kernel->family == fam);
        CHECK(ch.recipe == MOE_RECIPE_TILE && ch.set->format == fmt);
        CHECKF(!strncmp(ch.reason, want, strlen(want)) && strstr(ch.reason, recipe) != NULL,
               "%s: reason '%s' lacks '%s'", cases[c].what, ch.reason, recipe);
        /* Where the AMX set was given up for the AVX-512 one, amx_bf16 is what was missing. */
        if (amx && !cases[c].tiles && norm.avx512_bf16 && norm.avx512_vbmi)
            CHECKF(ch.missing == MOE_FEAT_AMX_BF16 &&
                       strstr(ch.reason, "needs amx_bf16, which is not allowed") != NULL,
                   "%s: missing %#x, reason '%s'", cases[c].what, ch.missing, ch.reason);
        /* The AMX-BF16 folder compiles with VBMI too (src/select/kernel.h). */
        if (amx && !cases[c].tiles && norm.avx512_bf16 && !norm.avx512_vbmi && norm.amx_bf16)
            CHECKF(ch.missing == MOE_FEAT_AVX512_VBMI &&
                       strstr(ch.reason, "needs avx512_vbmi, which is not allowed") != NULL,
                   "%s: missing %#x, reason '%s'", cases[c].what, ch.missing, ch.reason);
        for (int a = 0; a < 3; a++) {
            moe_expert_problem q = p;
            q.activation = a;
            q.has_bias = a == 2;
            moe_expert_choice ch2;
            CHECK_STATUS(moe_select_experts(&cases[c].caps, &q, &ch2), MOE_OK);
            CHECK(ch2.set == ch.set && !strcmp(ch2.reason, ch.reason));
        }
        if (i4) {
            /* INT4: every scale dtype takes the tile; q8 asked for, or no preference, keeps q8. */
            const moe_dtype sd[] = {MOE_DTYPE_F16, MOE_DTYPE_F32};
            for (size_t d = 0; d < 2; d++) {
                moe_expert_problem q = p;
                q.scale_dtype = sd[d];
                moe_expert_choice ch2;
                CHECK_STATUS(moe_select_experts(&cases[c].caps, &q, &ch2), MOE_OK);
                CHECK(ch2.set == ch.set);
            }
            const moe_expert_recipe others[] = {MOE_RECIPE_Q8, MOE_RECIPE_F32};
            for (size_t o = 0; o < 2; o++) {
                moe_expert_problem q = int4_problem(others[o]);
                CHECK_STATUS(moe_select_experts(&cases[c].caps, &q, &ch), MOE_OK);
                CHECK(ch.recipe == MOE_RECIPE_Q8 &&
                      ch.kernel->family == MOE_KERNEL_FAMILY_EXPERT_INT4_Q8);
                CHECK(strstr(ch.reason, "requested") == NULL);
            }
        }
        if (!mx) continue;
        /* MXFP4 with a block scale outside 2^-125..2^125: the Q8 set of the same machine,
         * the reason saying why; Q8 asked for, or no preference, gets Q8 as before. */
        p.mx_scales_unfoldable = true;
        const char *insn;
        const char *q8 = expected_mxfp4(&norm, &insn);
        CHECK_STATUS(moe_select_experts(&cases[c].caps, &p, &ch), MOE_OK);
        CHECKF(!strcmp(ch.set->name, q8), "%s unfoldable: %s, want %s", cases[c].what, ch.set->name,
               q8);
        CHECK(ch.recipe == MOE_RECIPE_Q8 && ch.kernel->family == MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8);
        CHECKF(strstr(ch.reason, "tile requested, but a block scale is outside 2^-125..2^125") !=
                   NULL,
               "%s unfoldable: reason '%s'", cases[c].what, ch.reason);
        const moe_expert_recipe others[] = {MOE_RECIPE_Q8, MOE_RECIPE_F32};
        for (size_t o = 0; o < 2; o++) {
            moe_expert_problem q = mxfp4_problem(others[o]);
            CHECK_STATUS(moe_select_experts(&cases[c].caps, &q, &ch), MOE_OK);
            CHECK(ch.recipe == MOE_RECIPE_Q8 && !strcmp(ch.set->name, q8));
            CHECK(strstr(ch.reason, "requested") == NULL);
        }
    }
}

static void test_tile_ladder(void)
{
    test_tile_ladder_of(MOE_EXPERT_FMT_BF16);
    test_tile_ladder_of(MOE_EXPERT_FMT_FP8_BLOCK);
    test_tile_ladder_of(MOE_EXPERT_FMT_MXFP4);
    test_tile_ladder_of(MOE_EXPERT_FMT_INT4_GROUP);
}

static void test_ladder(void)
{
    const moe_cpu_caps caps[] = {
        make_caps(0, 0, 0, 0, 0, 0, 0, 0),
        make_caps(1, 0, 0, 0, 0, 0, 0, 0),
        make_caps(1, 1, 0, 0, 0, 0, 0, 0),
        make_caps(1, 1, 0, 1, 0, 0, 0, 0),
        make_caps(1, 1, 1, 0, 0, 0, 0, 0),
        make_caps(1, 1, 1, 1, 1, 0, 0, 0),
        make_caps(1, 1, 0, 0, 0, 1, 0, 0),
        make_caps(1, 1, 1, 1, 1, 1, 0, 0),
        /* AVX-VNNI with AVX2 alone (Alder Lake), and beside AVX-512 with and without VNNI. */
        make_caps(1, 0, 0, 0, 0, 0, 1, 0),
        make_caps(1, 1, 0, 0, 0, 0, 1, 0),
        make_caps(1, 1, 1, 1, 1, 1, 1, 0),
        /* AMX-INT8 (Sapphire Rapids and later); beside AVX-512 without VNNI (the AMX set runs
         * its few-token calls on vpdpbusd, so it needs both). */
        make_caps(1, 1, 1, 1, 1, 1, 1, 1),
        make_caps(1, 1, 0, 0, 0, 0, 0, 1),
        /* Inconsistent structs are normalized: bf16 without avx512 is no bf16, avx512
         * without avx2 no avx512. */
        make_caps(1, 0, 1, 0, 0, 0, 0, 0),
        make_caps(0, 1, 1, 1, 1, 1, 0, 0),
        make_caps(1, 0, 0, 0, 0, 1, 0, 0),
        make_caps(0, 0, 0, 0, 0, 0, 1, 0),
        make_caps(1, 0, 0, 0, 0, 0, 0, 1),
    };
    const int formats[] = {MOE_EXPERT_FMT_BF16, MOE_EXPERT_FMT_FP8_BLOCK};
    const moe_expert_recipe recipes[] = {MOE_RECIPE_F32, MOE_RECIPE_BF16};
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++)
        for (size_t f = 0; f < 2; f++)
            for (size_t r = 0; r < 2; r++) {
                moe_cpu_caps norm = moe_cpu_caps_normalize(caps[c]);
                const char *want = expected(formats[f], recipes[r], &norm);
                moe_expert_problem p = problem(formats[f], recipes[r]);
                moe_expert_choice ch;
                CHECK_STATUS(moe_select_experts(&caps[c], &p, &ch), MOE_OK);
                CHECKF(!strcmp(ch.set->name, want), "caps %zu format %d recipe %d: %s, want %s", c,
                       formats[f], (int)recipes[r], ch.set->name, want);
                CHECK(ch.kernel && ch.kernel->fn.expert_set == ch.set);
                CHECK(!strcmp(ch.kernel->name, ch.set->name));
                CHECK(ch.set->format == formats[f] && ch.set->recipe == recipes[r]);
                CHECK(ch.recipe == recipes[r]);
                /* The reason names the set first, then the recipe. */
                CHECKF(!strncmp(ch.reason, want, strlen(want)), "reason '%s'", ch.reason);
                CHECKF(strstr(ch.reason,
                              recipes[r] == MOE_RECIPE_BF16 ? "recipe bf16" : "recipe f32") != NULL,
                       "reason '%s'", ch.reason);
                /* Activation and bias never change the choice. */
                for (int a = 0; a < 3; a++) {
                    moe_expert_problem q = p;
                    q.activation = a;
                    q.has_bias = a == 2;
                    moe_expert_choice ch2;
                    CHECK_STATUS(moe_select_experts(&caps[c], &q, &ch2), MOE_OK);
                    CHECK(ch2.set == ch.set && !strcmp(ch2.reason, ch.reason));
                }
            }
    test_mxfp4_ladder(caps, sizeof caps / sizeof caps[0]);
    test_int4_ladder(caps, sizeof caps / sizeof caps[0]);
    test_plain_ladder(caps, sizeof caps / sizeof caps[0]);
    test_tile_ladder();
}

/* The reasons' wording for the decisive feature, where this build has the better set. */
static void test_reasons(void)
{
    moe_expert_choice ch;
    moe_expert_problem p = problem(MOE_EXPERT_FMT_FP8_BLOCK, MOE_RECIPE_F32);
#if defined(MOE_COMPILED_AVX2) && defined(MOE_COMPILED_AVX512)
    moe_cpu_caps avx2 = make_caps(1, 0, 0, 0, 0, 0, 0, 0);
    CHECK_STATUS(moe_select_experts(&avx2, &p, &ch), MOE_OK);
    CHECKF(!strcmp(ch.reason, "moe_expert_fp8_f32_32x16__avx2: moe_expert_fp8_f32_32x16__avx512 "
                              "needs avx512, which is not allowed; recipe f32 (f32 activations, "
                              "fp32 FMA)"),
           "reason '%s'", ch.reason);
    CHECK(ch.missing == MOE_FEAT_AVX512);
    moe_cpu_caps novbmi = make_caps(1, 1, 1, 1, 1, 0, 0, 0);
    CHECK_STATUS(moe_select_experts(&novbmi, &p, &ch), MOE_OK);
#ifdef MOE_COMPILED_AVX512VBMI
    CHECKF(!strcmp(ch.reason,
                   "moe_expert_fp8_f32_32x16__avx512: "
                   "moe_expert_fp8_f32_32x16__avx512vbmi needs avx512_vbmi, which is not "
                   "allowed; recipe f32 (f32 activations, fp32 FMA)"),
           "reason '%s'", ch.reason);
    CHECK(ch.missing == MOE_FEAT_AVX512_VBMI);
    moe_cpu_caps all = make_caps(1, 1, 1, 1, 1, 1, 0, 0);
    CHECK_STATUS(moe_select_experts(&all, &p, &ch), MOE_OK);
    CHECKF(strstr(ch.reason, "avx512vbmi allowed; preferred over moe_expert_fp8_f32_32x16__avx512"),
           "reason '%s'", ch.reason);
#else
    CHECKF(strstr(ch.reason, "avx512 allowed; preferred over moe_expert_fp8_f32_32x16__avx2"),
           "reason '%s'", ch.reason);
#endif
    CHECK(ch.missing == 0);
#endif
#if defined(MOE_COMPILED_AVX2) && defined(MOE_COMPILED_AVXVNNI)
    p = mxfp4_problem(MOE_RECIPE_Q8);
    moe_cpu_caps plain = make_caps(1, 0, 0, 0, 0, 0, 0, 0);
    CHECK_STATUS(moe_select_experts(&plain, &p, &ch), MOE_OK);
    CHECKF(strstr(ch.reason, "moe_expert_mxfp4_q8_32x16__avx2: moe_expert_mxfp4_q8_32x16__avxvnni "
                             "needs avx_vnni, which is not allowed") == ch.reason,
           "reason '%s'", ch.reason);
    CHECK(ch.missing == MOE_FEAT_AVX_VNNI);
    moe_cpu_caps alder = make_caps(1, 0, 0, 0, 0, 0, 1, 0);
    CHECK_STATUS(moe_select_experts(&alder, &p, &ch), MOE_OK);
#ifdef MOE_COMPILED_AVX512
    CHECKF(strstr(ch.reason,
                  "moe_expert_mxfp4_q8_32x16__avxvnni: moe_expert_mxfp4_q8_32x16__avx512 "
                  "needs avx512, which is not allowed") == ch.reason,
           "reason '%s'", ch.reason);
    CHECK(ch.missing == MOE_FEAT_AVX512);
#else
    CHECKF(strstr(ch.reason, "avxvnni allowed; preferred over moe_expert_mxfp4_q8_32x16__avx2"),
           "reason '%s'", ch.reason);
    CHECK(ch.missing == 0);
#endif
#endif
#ifdef MOE_COMPILED_AVX512BF16
    moe_cpu_caps nobf16 = make_caps(1, 1, 0, 0, 0, 0, 0, 0);
    p = problem(MOE_EXPERT_FMT_BF16, MOE_RECIPE_BF16);
    CHECK_STATUS(moe_select_experts(&nobf16, &p, &ch), MOE_OK);
    CHECKF(strstr(ch.reason,
                  "moe_expert_bf16_bf16_8x16__avx512: moe_expert_bf16_bf16_8x16__avx512bf16 "
                  "needs avx512_bf16, which is not allowed") == ch.reason,
           "reason '%s'", ch.reason);
    CHECKF(strstr(ch.reason, "two FMAs under DAZ and FTZ), as requested") != NULL, "reason '%s'",
           ch.reason);
    CHECK(ch.missing == MOE_FEAT_AVX512_BF16);
    moe_cpu_caps bf16 = make_caps(1, 1, 1, 0, 0, 0, 0, 0);
    CHECK_STATUS(moe_select_experts(&bf16, &p, &ch), MOE_OK);
    CHECKF(strstr(ch.reason, "recipe bf16 (activations rounded to bf16, vdpbf16ps), as requested"),
           "reason '%s'", ch.reason);
#endif
    (void)ch;
    (void)p;
}

static void expect_error(const moe_cpu_caps *caps, const moe_expert_problem *p, moe_status want,
                         const char *needle)
{
    moe_expert_choice ch, before;
    memset(&ch, 0x5A, sizeof ch);
    memcpy(&before, &ch, sizeof ch);
    CHECK_STATUS(moe_select_experts(caps, p, &ch), want);
    CHECKF(strstr(moe_last_error(), needle) != NULL, "message '%s' lacks '%s'", moe_last_error(),
           needle);
    CHECK(!memcmp(&ch, &before, sizeof ch));
}

static void test_errors(void)
{
    const moe_cpu_caps caps = make_caps(1, 1, 1, 1, 1, 0, 0, 0);
    const moe_expert_problem good = problem(MOE_EXPERT_FMT_FP8_BLOCK, MOE_RECIPE_F32);
    moe_expert_choice ch;
    CHECK_STATUS(moe_select_experts(NULL, &good, &ch), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "allowed") != NULL);
    CHECK_STATUS(moe_select_experts(&caps, NULL, &ch), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "problem") != NULL);
    CHECK_STATUS(moe_select_experts(&caps, &good, NULL), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "out") != NULL);

    moe_expert_problem p = good;
    p.format = 9;
    expect_error(&caps, &p, MOE_EINVAL, "format 9");
    p = problem(MOE_EXPERT_FMT_BF16, MOE_RECIPE_F32);
    p.weight_dtype = MOE_DTYPE_F16;
    expect_error(&caps, &p, MOE_EUNSUPPORTED, "dtype f16");
    p.weight_dtype = MOE_DTYPE_F32;
    expect_error(&caps, &p, MOE_EUNSUPPORTED, "dtype f32");
    p = good;
    p.weight_dtype = MOE_DTYPE_BF16;
    expect_error(&caps, &p, MOE_EDTYPE, "dtype bf16");
    p = good;
    p.scale_dtype = MOE_DTYPE_F16;
    expect_error(&caps, &p, MOE_EDTYPE, "scales of dtype f16");
    p = good;
    p.hidden = 0;
    expect_error(&caps, &p, MOE_EINVAL, "hidden 0");
    p = good;
    p.intermediate = -3;
    expect_error(&caps, &p, MOE_EINVAL, "intermediate -3");
    p = good;
    p.activation = 3;
    expect_error(&caps, &p, MOE_EINVAL, "activation 3");
    p = good;
    p.recipe = (moe_expert_recipe)5;
    expect_error(&caps, &p, MOE_EINVAL, "recipe 5");
    p = good;
    p.hidden = (int64_t)1 << 41;
    expect_error(&caps, &p, MOE_EOVERFLOW, "hidden 2199023255552");

    /* INT4: words, scales, the 32-block, and the recipe (no bf16 recipe). */
    p = int4_problem(MOE_RECIPE_Q8);
    p.weight_dtype = MOE_DTYPE_BF16;
    expect_error(&caps, &p, MOE_EDTYPE, "INT4 expert weights of dtype bf16");
    p = int4_problem(MOE_RECIPE_Q8);
    p.scale_dtype = MOE_DTYPE_F8_E8M0;
    expect_error(&caps, &p, MOE_EDTYPE, "INT4 group scales of dtype f8_e8m0");
    p = int4_problem(MOE_RECIPE_BF16);
    expect_error(&caps, &p, MOE_EUNSUPPORTED,
                 "INT4 expert weights have no bf16 recipe (their recipes are q8 and tile)");
    p = int4_problem(MOE_RECIPE_Q8);
    p.intermediate = 2048 + 8;
    expect_error(&caps, &p, MOE_ESHAPE, "INT4 hidden 7168 and intermediate 2056");

    /* MXFP4: codes, scales, the 32-block, and the recipe. */
    p = mxfp4_problem(MOE_RECIPE_Q8);
    p.weight_dtype = MOE_DTYPE_BF16;
    expect_error(&caps, &p, MOE_EDTYPE, "MXFP4 expert weights of dtype bf16");
    p = mxfp4_problem(MOE_RECIPE_Q8);
    p.scale_dtype = MOE_DTYPE_F32;
    expect_error(&caps, &p, MOE_EDTYPE, "MXFP4 scales of dtype f32");
    p = mxfp4_problem(MOE_RECIPE_BF16);
    expect_error(&caps, &p, MOE_EUNSUPPORTED, "no bf16 recipe");
    p = mxfp4_problem(MOE_RECIPE_Q8);
    p.hidden = 2880 + 16;
    expect_error(&caps, &p, MOE_ESHAPE,
                 "hidden 2896 and intermediate 2880 must be multiples of 32");
    p = mxfp4_problem(MOE_RECIPE_Q8);
    p.intermediate = 100;
    expect_error(&caps, &p, MOE_ESHAPE, "intermediate 100");
    p.intermediate = 0;
    expect_error(&caps, &p, MOE_EINVAL, "intermediate 0");
    p = mxfp4_problem(MOE_RECIPE_Q8);
    p.hidden = (int64_t)1 << 41;
    expect_error(&caps, &p, MOE_EOVERFLOW, "hidden 2199023255552");
    p = good;
    p.recipe = MOE_RECIPE_Q8;
    expect_error(&caps, &p, MOE_EUNSUPPORTED,
                 "the q8 recipe is for MXFP4 and INT4 weights, not FP8");
    p = problem(MOE_EXPERT_FMT_BF16, MOE_RECIPE_Q8);
    expect_error(&caps, &p, MOE_EUNSUPPORTED, "not bf16");

    /* Every accepted scale dtype, U8 (E8M0 bytes some writers label U8) included. */
    const moe_dtype scales[] = {MOE_DTYPE_F32, MOE_DTYPE_BF16, MOE_DTYPE_F8_E8M0, MOE_DTYPE_U8};
    for (size_t i = 0; i < sizeof scales / sizeof scales[0]; i++) {
        p = good;
        p.scale_dtype = scales[i];
        CHECK_STATUS(moe_select_experts(&caps, &p, &ch), MOE_OK);
    }
}

/* Same arguments, same answer, whatever the environment says. */
static void test_purity(void)
{
    const moe_cpu_caps caps = make_caps(1, 0, 0, 0, 0, 0, 0, 0);
    const moe_expert_problem p = problem(MOE_EXPERT_FMT_BF16, MOE_RECIPE_F32);
    moe_expert_choice a, b;
    CHECK_STATUS(moe_select_experts(&caps, &p, &a), MOE_OK);
    const char *old = getenv("MOE_ISA");
    char *saved = old ? strdup(old) : NULL;
    setenv("MOE_ISA", "scalar", 1);
    CHECK_STATUS(moe_select_experts(&caps, &p, &b), MOE_OK);
    CHECK(a.set == b.set && !strcmp(a.reason, b.reason) && a.missing == b.missing);
    if (saved) {
        setenv("MOE_ISA", saved, 1);
        free(saved);
    } else {
        unsetenv("MOE_ISA");
    }
}

int main(void)
{
    test_ladder();
    test_reasons();
    test_errors();
    test_purity();
    return TEST_END();
}
