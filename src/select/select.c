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
    case MOE_KERNEL_FAMILY_ROUTE_EXPSUM: return true;
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
