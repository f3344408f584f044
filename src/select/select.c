/* select.c — the eligibility functions: pure choices of a kernel, with the reason. */
#include <stdio.h>

#include "core/error.h"
#include "select/select.h"

static bool meets(uint32_t have, uint32_t need) { return (need & ~have) == 0; }

/* The lowest set bit: features are ordered from basic to advanced, so this is the first
 * thing a caller would have to enable. */
static uint32_t lowest_bit(uint32_t mask) { return mask & (~mask + 1u); }

static void describe(const moe_kernel *chosen, const moe_kernel *worse, const moe_kernel *better,
                     uint32_t missing, char *buf, size_t size)
{
    if (better) {
        snprintf(buf, size, "%s: %s needs %s, which is not allowed", chosen->name, better->name,
                 moe_cpu_feature_name(missing));
    } else if (worse) {
        const char *token = moe_kernel_isa_token(chosen->isa);
        snprintf(buf, size, "%s: %s allowed; preferred over %s", chosen->name,
                 token ? token : "its ISA", worse->name);
    } else {
        snprintf(buf, size, "%s: the only kernel of %s", chosen->name,
                 moe_kernel_family_name(chosen->family));
    }
}

/*
 * The ISA ladder shared by every family: among the family's registered kernels (listed
 * from the reference to the most preferred) take the last one `allowed` can run. The next
 * more preferred kernel, if any, is what was given up, and its first missing feature is the
 * decisive one.
 */
static moe_status select_by_isa(moe_kernel_family family, const moe_cpu_caps *allowed,
                                moe_kernel_choice *out)
{
    size_t count;
    const moe_kernel *all = moe_kernel_registry(&count);
    uint32_t have = moe_cpu_caps_mask(allowed);
    const moe_kernel *chosen = NULL, *worse = NULL, *better = NULL;
    for (size_t i = 0; i < count; i++) {
        const moe_kernel *k = &all[i];
        if (k->family != family) continue;
        if (meets(have, k->isa)) {
            worse = chosen;
            chosen = k;
            better = NULL;
        } else if (chosen && !better) {
            better = k;
        }
    }
    if (!chosen)
        return moe_error(MOE_EUNSUPPORTED, "no kernel of family %s can run here",
                         moe_kernel_family_name(family));
    moe_kernel_choice r = {.kernel = chosen, .packing = NULL};
    if (better) r.missing = lowest_bit(better->isa & ~have);
    describe(chosen, worse, better, r.missing, r.reason, sizeof r.reason);
    *out = r;
    return MOE_OK;
}

moe_status moe_select_cvt(moe_kernel_family family, const moe_cpu_caps *allowed,
                          const moe_cvt_problem *problem, moe_kernel_choice *out)
{
    if (!allowed || !problem || !out)
        return moe_error(MOE_EINVAL, "moe_select_cvt: argument '%s' is NULL",
                         !allowed   ? "allowed"
                         : !problem ? "problem"
                                    : "out");
    switch (family) {
    case MOE_KERNEL_FAMILY_CVT_BF16_F32:
    case MOE_KERNEL_FAMILY_CVT_F16_F32:
    case MOE_KERNEL_FAMILY_CVT_E4M3_F32:
    case MOE_KERNEL_FAMILY_CVT_MXFP4_F32: break;
    default:
        return moe_error(MOE_EINVAL, "moe_select_cvt: family %d (%s) is not a conversion",
                         (int)family, moe_kernel_family_name(family));
    }
    /* Normalize so a made-up struct with, say, bf16 but no avx512 selects consistently. */
    moe_cpu_caps caps = moe_cpu_caps_normalize(*allowed);
    return select_by_isa(family, &caps, out);
}

static bool is_route_family(moe_kernel_family family)
{
    switch (family) {
    case MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS:
    case MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS:
    case MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS:
    case MOE_KERNEL_FAMILY_ROUTE_TOPK:
    case MOE_KERNEL_FAMILY_ROUTE_EXPSUM:
    case MOE_KERNEL_FAMILY_ROUTE_NOAUX_TC: return true;
    default: return false;
    }
}

moe_status moe_select_route(moe_kernel_family family, const moe_cpu_caps *allowed,
                            const moe_route_problem *problem, moe_kernel_choice *out)
{
    if (!allowed || !problem || !out)
        return moe_error(MOE_EINVAL, "moe_select_route: argument '%s' is NULL",
                         !allowed   ? "allowed"
                         : !problem ? "problem"
                                    : "out");
    if (!is_route_family(family))
        return moe_error(MOE_EINVAL, "moe_select_route: family %d (%s) is not a routing family",
                         (int)family, moe_kernel_family_name(family));
    if (problem->n_experts < 1)
        return moe_error(MOE_EINVAL, "moe_select_route: n_experts %d is not positive",
                         problem->n_experts);
    if (problem->top_k < 1 || problem->top_k > problem->n_experts)
        return moe_error(MOE_EINVAL, "moe_select_route: top_k %d is outside [1, n_experts = %d]",
                         problem->top_k, problem->n_experts);
    moe_cpu_caps caps = moe_cpu_caps_normalize(*allowed);
    return select_by_isa(family, &caps, out);
}

moe_status moe_select_isa_ladder(moe_kernel_family family, const moe_cpu_caps *allowed,
                                 moe_kernel_choice *out)
{
    if (!allowed || !out)
        return moe_error(MOE_EINVAL, "moe_select_isa_ladder: argument '%s' is NULL",
                         !allowed ? "allowed" : "out");
    if ((unsigned)family >= MOE_KERNEL_FAMILY_COUNT_)
        return moe_error(MOE_EINVAL, "moe_select_isa_ladder: family %d is not a kernel family",
                         (int)family);
    moe_cpu_caps caps = moe_cpu_caps_normalize(*allowed);
    return select_by_isa(family, &caps, out);
}

/* ---- Expert kernel sets ---------------------------------------------------------------- */

static moe_kernel_family expert_family(int format, moe_expert_recipe recipe)
{
    if (format == MOE_EXPERT_FMT_MXFP4)
        return recipe == MOE_RECIPE_TILE ? MOE_KERNEL_FAMILY_EXPERT_MXFP4_TILE
                                         : MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8;
    if (format == MOE_EXPERT_FMT_INT4_GROUP)
        return recipe == MOE_RECIPE_TILE ? MOE_KERNEL_FAMILY_EXPERT_INT4_TILE
                                         : MOE_KERNEL_FAMILY_EXPERT_INT4_Q8;
    /* f16 widens exactly to f32, so both pack to the f32 sets' tiles; their one recipe is f32. */
    if (format == MOE_EXPERT_FMT_F32 || format == MOE_EXPERT_FMT_F16)
        return MOE_KERNEL_FAMILY_EXPERT_F32_F32;
    if (format == MOE_EXPERT_FMT_BF16)
        return recipe == MOE_RECIPE_BF16   ? MOE_KERNEL_FAMILY_EXPERT_BF16_BF16
               : recipe == MOE_RECIPE_TILE ? MOE_KERNEL_FAMILY_EXPERT_BF16_TILE
                                           : MOE_KERNEL_FAMILY_EXPERT_BF16_F32;
    return recipe == MOE_RECIPE_BF16   ? MOE_KERNEL_FAMILY_EXPERT_FP8_BF16
           : recipe == MOE_RECIPE_TILE ? MOE_KERNEL_FAMILY_EXPERT_FP8_TILE
                                       : MOE_KERNEL_FAMILY_EXPERT_FP8_F32;
}

static bool is_expert_scale(moe_dtype d)
{
    return d == MOE_DTYPE_F32 || d == MOE_DTYPE_BF16 || d == MOE_DTYPE_F8_E8M0 || d == MOE_DTYPE_U8;
}

/* MXFP4: packed E2M1 codes (checkpoints label them U8 or I8), E8M0 scales, K multiples of the
 * 32-block, and the Q8 or TILE recipe (F32, the default request, stands for "no preference":
 * Q8). */
static moe_status check_mxfp4_problem(const moe_expert_problem *p)
{
    if (p->weight_dtype != MOE_DTYPE_F4_E2M1 && p->weight_dtype != MOE_DTYPE_U8 &&
        p->weight_dtype != MOE_DTYPE_I8)
        return moe_error(MOE_EDTYPE,
                         "moe_select_experts: MXFP4 expert weights of dtype %s, not f4_e2m1 (or "
                         "u8 / i8 packed codes)",
                         moe_dtype_name(p->weight_dtype));
    if (p->scale_dtype != MOE_DTYPE_F8_E8M0 && p->scale_dtype != MOE_DTYPE_U8)
        return moe_error(MOE_EDTYPE,
                         "moe_select_experts: MXFP4 scales of dtype %s, not f8_e8m0 (or u8)",
                         moe_dtype_name(p->scale_dtype));
    if (p->recipe == MOE_RECIPE_BF16)
        return moe_error(MOE_EUNSUPPORTED,
                         "moe_select_experts: MXFP4 expert weights have no bf16 recipe (their "
                         "recipes are q8 and tile)");
    if (p->hidden >= 1 && p->intermediate >= 1 &&
        (p->hidden % MOE_EXPERT_MXBLOCK != 0 || p->intermediate % MOE_EXPERT_MXBLOCK != 0))
        return moe_error(MOE_ESHAPE,
                         "moe_select_experts: MXFP4 hidden %lld and intermediate %lld must be "
                         "multiples of 32 (the block along K)",
                         (long long)p->hidden, (long long)p->intermediate);
    return MOE_OK;
}

/* INT4 group weights: packed nibbles (i32 words as checkpoints store them, or u8 / i8), bf16,
 * f16 or f32 group scales, K multiples of 32, and the Q8 or TILE recipe as MXFP4 (F32 stands for
 * "no preference": Q8; BF16 refused). */
static moe_status check_int4_problem(const moe_expert_problem *p)
{
    if (p->weight_dtype != MOE_DTYPE_I32 && p->weight_dtype != MOE_DTYPE_U8 &&
        p->weight_dtype != MOE_DTYPE_I8)
        return moe_error(MOE_EDTYPE,
                         "moe_select_experts: INT4 expert weights of dtype %s, not i32 (or u8 / "
                         "i8 packed nibbles)",
                         moe_dtype_name(p->weight_dtype));
    if (p->scale_dtype != MOE_DTYPE_BF16 && p->scale_dtype != MOE_DTYPE_F16 &&
        p->scale_dtype != MOE_DTYPE_F32)
        return moe_error(MOE_EDTYPE,
                         "moe_select_experts: INT4 group scales of dtype %s, not bf16, f16 or f32",
                         moe_dtype_name(p->scale_dtype));
    if (p->recipe == MOE_RECIPE_BF16)
        return moe_error(MOE_EUNSUPPORTED,
                         "moe_select_experts: INT4 expert weights have no bf16 recipe (their "
                         "recipes are q8 and tile)");
    if (p->hidden >= 1 && p->intermediate >= 1 &&
        (p->hidden % MOE_EXPERT_MXBLOCK != 0 || p->intermediate % MOE_EXPERT_MXBLOCK != 0))
        return moe_error(MOE_ESHAPE,
                         "moe_select_experts: INT4 hidden %lld and intermediate %lld must be "
                         "multiples of 32 (the activation block along K)",
                         (long long)p->hidden, (long long)p->intermediate);
    return MOE_OK;
}

/* The formats whose one recipe is Q8. */
static bool is_q8_format(int format)
{
    return format == MOE_EXPERT_FMT_MXFP4 || format == MOE_EXPERT_FMT_INT4_GROUP;
}

static bool is_plain_float(int format)
{
    return format == MOE_EXPERT_FMT_F32 || format == MOE_EXPERT_FMT_F16;
}

static const char *format_text(int format)
{
    switch (format) {
    case MOE_EXPERT_FMT_BF16: return "bf16";
    case MOE_EXPERT_FMT_F32: return "f32";
    case MOE_EXPERT_FMT_F16: return "f16";
    default: return "FP8 blocks";
    }
}

static moe_status check_expert_problem(const moe_expert_problem *p)
{
    if (p->format != MOE_EXPERT_FMT_BF16 && p->format != MOE_EXPERT_FMT_FP8_BLOCK &&
        !is_q8_format(p->format) && !is_plain_float(p->format))
        return moe_error(MOE_EINVAL, "moe_select_experts: unknown weight format %d", p->format);
    if (p->recipe != MOE_RECIPE_F32 && p->recipe != MOE_RECIPE_BF16 && p->recipe != MOE_RECIPE_Q8 &&
        p->recipe != MOE_RECIPE_TILE)
        return moe_error(MOE_EINVAL, "moe_select_experts: unknown recipe %d", (int)p->recipe);
    if (!is_q8_format(p->format) && p->recipe == MOE_RECIPE_Q8)
        return moe_error(MOE_EUNSUPPORTED,
                         "moe_select_experts: the q8 recipe is for MXFP4 and INT4 weights, not %s",
                         format_text(p->format));
    if (p->format == MOE_EXPERT_FMT_BF16 && p->weight_dtype != MOE_DTYPE_BF16)
        return moe_error(MOE_EUNSUPPORTED,
                         "moe_select_experts: bf16-format expert weights of dtype %s; %s weights "
                         "are their own format (f32 / f16)",
                         moe_dtype_name(p->weight_dtype), moe_dtype_name(p->weight_dtype));
    if (is_plain_float(p->format) &&
        p->weight_dtype != (p->format == MOE_EXPERT_FMT_F32 ? MOE_DTYPE_F32 : MOE_DTYPE_F16))
        return moe_error(
            MOE_EDTYPE, "moe_select_experts: %s-format expert weights of dtype %s, not %s",
            format_text(p->format), moe_dtype_name(p->weight_dtype), format_text(p->format));
    if (p->format == MOE_EXPERT_FMT_FP8_BLOCK && p->weight_dtype != MOE_DTYPE_F8_E4M3)
        return moe_error(MOE_EDTYPE,
                         "moe_select_experts: FP8 expert weights of dtype %s, not "
                         "f8_e4m3",
                         moe_dtype_name(p->weight_dtype));
    if (p->format == MOE_EXPERT_FMT_FP8_BLOCK && !is_expert_scale(p->scale_dtype))
        return moe_error(MOE_EDTYPE,
                         "moe_select_experts: FP8 block scales of dtype %s, not f32, "
                         "bf16 or f8_e8m0",
                         moe_dtype_name(p->scale_dtype));
    if (p->format == MOE_EXPERT_FMT_MXFP4) {
        moe_status st = check_mxfp4_problem(p);
        if (st) return st;
    }
    if (p->format == MOE_EXPERT_FMT_INT4_GROUP) {
        moe_status st = check_int4_problem(p);
        if (st) return st;
    }
    if (p->hidden < 1 || p->intermediate < 1)
        return moe_error(MOE_EINVAL,
                         "moe_select_experts: hidden %lld and intermediate %lld must "
                         "be at least 1",
                         (long long)p->hidden, (long long)p->intermediate);
    if (p->activation < 0 || p->activation > 2)
        return moe_error(MOE_EINVAL, "moe_select_experts: unknown activation %d", p->activation);
    return MOE_OK;
}

/* The recipe part of the reason: what the activations become, and what decided. (At most 126
 * characters, so the whole reason fits moe_expert_choice.reason after the ladder's 191.) */
#define Q8_RECIPE "recipe q8 (int8 activations per 32-block, exact int32 dot products): "

static const char *recipe_reason(const moe_expert_kernels *set, const moe_expert_problem *p)
{
    if (is_plain_float(p->format) && p->recipe == MOE_RECIPE_BF16)
        return p->format == MOE_EXPERT_FMT_F32
                   ? "recipe f32 (f32 activations, fp32 FMA): bf16 requested, but f32 weights "
                     "have no bf16 recipe (it would round them)"
                   : "recipe f32 (f32 activations, fp32 FMA): bf16 requested, but f16 weights "
                     "have no bf16 recipe (it would round them)";
    if (is_plain_float(p->format) && p->recipe == MOE_RECIPE_TILE)
        return p->format == MOE_EXPERT_FMT_F32
                   ? "recipe f32 (f32 activations, fp32 FMA): tile requested, but f32 weights "
                     "have no tile recipe (it would round them)"
                   : "recipe f32 (f32 activations, fp32 FMA): tile requested, but f16 weights "
                     "have no tile recipe (it would round them)";
    if (set->recipe == MOE_RECIPE_TILE) {
        if (set->isa == MOE_REQ_AVX512AMXBF16)
            return "recipe tile (activations rounded to bf16, tdpbf16ps tiles), as requested";
        return set->isa != MOE_REQ_SCALAR
                   ? "recipe tile (bf16 activations, the tile unit's arithmetic as two FMA chains "
                     "under DAZ and FTZ), as requested"
                   : "recipe tile (bf16 activations, the tile unit's arithmetic in portable C), "
                     "as requested";
    }
    if (set->recipe == MOE_RECIPE_BF16) {
        if (set->isa == MOE_REQ_AVX512BF16)
            return "recipe bf16 (activations rounded to bf16, vdpbf16ps), as requested";
        return set->isa != MOE_REQ_SCALAR
                   ? "recipe bf16 (activations rounded to bf16, vdpbf16ps's arithmetic as two "
                     "FMAs under DAZ and FTZ), as requested"
                   : "recipe bf16 (activations rounded to bf16, vdpbf16ps's arithmetic in portable "
                     "C), as requested";
    }
    if (set->recipe == MOE_RECIPE_F32) return "recipe f32 (f32 activations, fp32 FMA)";
    if (p->recipe == MOE_RECIPE_TILE)
        return "recipe q8 (int8 activations per 32-block): tile requested, but a block scale is "
               "outside 2^-125..2^125 (no bf16)";
    /* Q8, INT4's recipe and MXFP4's unless tile is asked for: say which integer dot product
     * runs it. */
    switch (set->isa) {
    case MOE_REQ_AVX512AMX: return Q8_RECIPE "tdpbssd tiles from 16 tokens, amx_int8 allowed";
    case MOE_REQ_AVX512VNNI: return Q8_RECIPE "vpdpbusd, avx512_vnni allowed";
    case MOE_REQ_AVX512: return Q8_RECIPE "vpmaddubsw zmm, avx512 allowed (no avx512_vnni)";
    case MOE_REQ_AVXVNNI: return Q8_RECIPE "vpdpbusd ymm, avx_vnni allowed";
    case MOE_REQ_AVX2: return Q8_RECIPE "vpmaddubsw ymm, avx2 allowed (no avx_vnni)";
    default: return Q8_RECIPE "portable C, no int8 dot product allowed; same bits";
    }
}

moe_status moe_select_experts(const moe_cpu_caps *allowed, const moe_expert_problem *problem,
                              moe_expert_choice *out)
{
    if (!allowed || !problem || !out)
        return moe_error(MOE_EINVAL, "moe_select_experts: argument '%s' is NULL",
                         !allowed   ? "allowed"
                         : !problem ? "problem"
                                    : "out");
    moe_status st = check_expert_problem(problem);
    if (st) return st;
    moe_cpu_caps caps = moe_cpu_caps_normalize(*allowed);
    moe_kernel_choice kc;
    /* MXFP4 weights the tile recipe cannot widen exactly keep the Q8 recipe (the reason says). */
    const moe_expert_recipe recipe = problem->format == MOE_EXPERT_FMT_MXFP4 &&
                                             problem->recipe == MOE_RECIPE_TILE &&
                                             problem->mx_scales_unfoldable
                                         ? MOE_RECIPE_Q8
                                         : problem->recipe;
    st = select_by_isa(expert_family(problem->format, recipe), &caps, &kc);
    if (st) return st;
    const moe_expert_kernels *set = kc.kernel->fn.expert_set;
    if (set->gateup_tile_bytes(problem->hidden) == 0 ||
        set->down_tile_bytes(problem->intermediate) == 0)
        return moe_error(MOE_EOVERFLOW,
                         "moe_select_experts: hidden %lld or intermediate %lld exceeds the "
                         "expert kernels' limit of 2^40",
                         (long long)problem->hidden, (long long)problem->intermediate);
    moe_expert_choice r = {
        .set = set, .kernel = kc.kernel, .recipe = set->recipe, .missing = kc.missing};
    snprintf(r.reason, sizeof r.reason, "%s; %s", kc.reason, recipe_reason(set, problem));
    *out = r;
    return MOE_OK;
}

void moe_cpu_feature_why(const moe_cpu_info *info, uint32_t feature, char *buf, size_t size)
{
    if (size == 0) return;
    if (moe_cpu_caps_mask(&info->allowed) & feature)
        snprintf(buf, size, "allowed");
    else if (!(moe_cpu_caps_mask(&info->detected) & feature))
        snprintf(buf, size, "not detected on this CPU");
    else if (!(moe_cpu_caps_mask(&info->compiled) & feature))
        snprintf(buf, size, "not compiled into this build");
    else if (moe_isa_level_mask(info->cap) & feature)
        snprintf(buf, size, "a feature it builds on is not allowed");
    else
        snprintf(buf, size, "capped by MOE_ISA=%s", moe_isa_level_name(info->cap));
}
