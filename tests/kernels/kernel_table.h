/* kernel_table.h — kernel tests: an enumerator's kernels as a table, checked against the
 * registry. */
#ifndef MOE_TEST_KERNEL_TABLE_H
#define MOE_TEST_KERNEL_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "moe.h"
#include "select/kernel.h"
#include "test.h"

/* One line of an enumerator: MOE_KERNEL(name, isa, ref) gives {#name, isa, {.<member> = name}}. */
typedef struct test_kernel {
    const char *name;
    uint32_t isa;
    moe_kernel_fn fn;
} test_kernel;

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Function pointers compared through the member the family makes live. */
static inline bool same_fn(moe_kernel_family f, moe_kernel_fn a, moe_kernel_fn b)
{
    switch (f) {
    case MOE_KERNEL_FAMILY_CVT_BF16_F32: return a.cvt_bf16_f32 == b.cvt_bf16_f32;
    case MOE_KERNEL_FAMILY_CVT_F16_F32: return a.cvt_f16_f32 == b.cvt_f16_f32;
    case MOE_KERNEL_FAMILY_CVT_E4M3_F32: return a.cvt_e4m3_f32 == b.cvt_e4m3_f32;
    case MOE_KERNEL_FAMILY_CVT_MXFP4_F32: return a.cvt_mxfp4_f32 == b.cvt_mxfp4_f32;
    case MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS: return a.route_logit_keys == b.route_logit_keys;
    case MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS: return a.route_sigmoid_keys == b.route_sigmoid_keys;
    case MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS:
        return a.route_sqrtsoftplus_keys == b.route_sqrtsoftplus_keys;
    case MOE_KERNEL_FAMILY_ROUTE_TOPK: return a.route_topk == b.route_topk;
    case MOE_KERNEL_FAMILY_ROUTE_EXPSUM: return a.route_expsum == b.route_expsum;
    case MOE_KERNEL_FAMILY_ROUTE_NOAUX_TC: return a.route_noaux_tc == b.route_noaux_tc;
    case MOE_KERNEL_FAMILY_EXPERT_BF16_F32:
    case MOE_KERNEL_FAMILY_EXPERT_BF16_BF16:
    case MOE_KERNEL_FAMILY_EXPERT_FP8_F32:
    case MOE_KERNEL_FAMILY_EXPERT_FP8_BF16:
    case MOE_KERNEL_FAMILY_EXPERT_MXFP4_Q8:
    case MOE_KERNEL_FAMILY_EXPERT_F32_F32:
    case MOE_KERNEL_FAMILY_EXPERT_BF16_TILE:
    case MOE_KERNEL_FAMILY_EXPERT_FP8_TILE:
    case MOE_KERNEL_FAMILY_EXPERT_MXFP4_TILE: return a.expert_set == b.expert_set;
    case MOE_KERNEL_FAMILY_EXPERT_INT4_Q8: return a.expert_set == b.expert_set;
    case MOE_KERNEL_FAMILY_EXPERT_INT4_TILE: return a.expert_set == b.expert_set;
    case MOE_KERNEL_FAMILY_GATE_XF32_WF32:
    case MOE_KERNEL_FAMILY_GATE_XF32_WBF16:
    case MOE_KERNEL_FAMILY_GATE_XF32_WF16:
    case MOE_KERNEL_FAMILY_GATE_XBF16_WF32:
    case MOE_KERNEL_FAMILY_GATE_XBF16_WBF16:
    case MOE_KERNEL_FAMILY_GATE_XBF16_WF16: return a.gate == b.gate;
    case MOE_KERNEL_FAMILY_COUNT_: break;
    }
    return false;
}

/* The registry holds each of the N kernels of family F under its name, with its ISA and
 * function, and the enumerator's first line (the reference) as its reference. */
static inline void check_registered(moe_kernel_family f, const test_kernel *ks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const moe_kernel *r = moe_kernel_find(ks[i].name);
        CHECKF(r != NULL, "%s is in its .inc but not in the registry", ks[i].name);
        if (!r) continue;
        CHECK(r->family == f && r->isa == ks[i].isa);
        CHECK(same_fn(f, r->fn, ks[i].fn));
        CHECK(same_fn(f, r->ref, ks[0].fn));
    }
}

#endif
