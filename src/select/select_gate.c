/* select_gate.c — moe_select_gate: the router gate's eligibility function (kernel, packing, why).
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "gate/gate.h"
#include "kernels/gate.h"

/*
 * The dtypes pick the family (one per input × weight pair) and with it the packed layout,
 * which depends on the weight dtype only: so the kernels chosen for f32 and for bf16 input
 * read the same packed bytes, and a late change of the logits dtype (which every kernel
 * handles in its epilogue, like the bias) never needs a repack. Then the shared ISA ladder
 * picks the kernel. The reason says what decided: the ladder's feature, or — when the CPU
 * has AVX512-BF16 but the family has no vdpbf16ps kernel — the dtype that ruled it out, and
 * always what the kernel computes (dtypes, bias, logits).
 *
 * For bf16 input and weights the vdpbf16ps kernel is the most preferred: it streams the
 * weight with no widening uops, which is what decode is bound by. Where vdpbf16ps issues at
 * half the FMA rate it is the slower one for prefill; docs/kernels.md has the figures.
 */

static const moe_kernel_family families[2][3] = {
    /* input f32 */ {MOE_KERNEL_FAMILY_GATE_XF32_WF32, MOE_KERNEL_FAMILY_GATE_XF32_WBF16,
                     MOE_KERNEL_FAMILY_GATE_XF32_WF16},
    /* input bf16 */
    {MOE_KERNEL_FAMILY_GATE_XBF16_WF32, MOE_KERNEL_FAMILY_GATE_XBF16_WBF16,
     MOE_KERNEL_FAMILY_GATE_XBF16_WF16},
};

static int weight_index(moe_dtype d)
{
    switch (d) {
    case MOE_DTYPE_F32: return 0;
    case MOE_DTYPE_BF16: return 1;
    case MOE_DTYPE_F16: return 2;
    default: return -1;
    }
}

static const moe_packing *packing_of(moe_dtype weight)
{
    switch (weight) {
    case MOE_DTYPE_F32: return &moe_gate_packing_f32;
    case MOE_DTYPE_BF16: return &moe_gate_packing_bf16;
    default: return &moe_gate_packing_f16;
    }
}

static moe_status check_problem(const moe_gate_problem *p)
{
    if (weight_index(p->weight_dtype) < 0)
        return moe_error(MOE_EDTYPE,
                         "moe_select_gate: router weight dtype %s is not supported (bf16, f16 "
                         "or f32)",
                         moe_dtype_name(p->weight_dtype));
    if (p->input_dtype != MOE_DTYPE_F32 && p->input_dtype != MOE_DTYPE_BF16)
        return moe_error(MOE_EDTYPE,
                         "moe_select_gate: input dtype %s is not supported (f32 or bf16)",
                         moe_dtype_name(p->input_dtype));
    if (p->logits_dtype != MOE_DTYPE_F32 && p->logits_dtype != MOE_DTYPE_BF16)
        return moe_error(MOE_EDTYPE,
                         "moe_select_gate: logits dtype %s is not f32 or bf16 (an undecided "
                         "dtype resolves to f32 before selection)",
                         moe_dtype_name(p->logits_dtype));
    if (p->n_experts < 1)
        return moe_error(MOE_EINVAL, "moe_select_gate: n_experts %lld is not positive",
                         (long long)p->n_experts);
    if (p->hidden < 1)
        return moe_error(MOE_EINVAL, "moe_select_gate: hidden %lld is not positive",
                         (long long)p->hidden);
    return MOE_OK;
}

moe_status moe_select_gate(const moe_cpu_caps *allowed, const moe_gate_problem *problem,
                           moe_kernel_choice *out)
{
    if (!allowed || !problem || !out)
        return moe_error(MOE_EINVAL, "moe_select_gate: argument '%s' is NULL",
                         !allowed   ? "allowed"
                         : !problem ? "problem"
                                    : "out");
    moe_status st = check_problem(problem);
    if (st != MOE_OK) return st;
    const moe_packing *packing = packing_of(problem->weight_dtype);
    size_t bytes;
    st = packing->bytes(problem->n_experts, problem->hidden, &bytes);
    if (st != MOE_OK) return moe_error_context(st, "moe_select_gate: ");

    bool x_bf16 = problem->input_dtype == MOE_DTYPE_BF16;
    moe_kernel_family family = families[x_bf16][weight_index(problem->weight_dtype)];
    moe_kernel_choice r;
    st = moe_select_isa_ladder(family, allowed, &r);
    if (st != MOE_OK) return st;
    r.packing = packing;

    /* AVX512-BF16 allowed but not used: the dtypes decided, say which. */
    moe_cpu_caps caps = moe_cpu_caps_normalize(*allowed);
    char dtype_note[64] = "";
    if (caps.avx512_bf16 && family != MOE_KERNEL_FAMILY_GATE_XBF16_WBF16)
        snprintf(dtype_note, sizeof dtype_note, "; vdpbf16ps needs bf16 x and W, %s is %s",
                 x_bf16 ? "W" : "x",
                 moe_dtype_name(x_bf16 ? problem->weight_dtype : problem->input_dtype));
    size_t used = strlen(r.reason);
    snprintf(r.reason + used, sizeof r.reason - used, "%s; x %s, W %s, %s, %s logits%s", dtype_note,
             moe_dtype_name(problem->input_dtype), moe_dtype_name(problem->weight_dtype),
             problem->has_bias ? "bias" : "no bias", moe_dtype_name(problem->logits_dtype),
             problem->logits_dtype == MOE_DTYPE_BF16 ? " (rounded in the epilogue)" : "");
    *out = r;
    return MOE_OK;
}
