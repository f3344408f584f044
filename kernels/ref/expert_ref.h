/* expert_ref.h — internal: the scalar arithmetic of the expert kernels (epilogue, vdpbf16ps). */
#ifndef MOE_KERNELS_REF_EXPERT_REF_H
#define MOE_KERNELS_REF_EXPERT_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/expert.h"
#include "kernels/ref/fma_ftz.h"
#include "kernels/ref/math_ref.h"

/*
 * The executable specification of what every expert kernel computes per element. The SIMD
 * kernels repeat it operation for operation (math_ref.h explains why that gives equal bits:
 * only correctly rounded IEEE operations, explicit fmaf, no contraction).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The activation epilogue (kernels/expert.h, moe_act_params). The clamps are written
 * "limit < g ? limit : g" and "-limit > u ? -limit : u": what vminps(limit, g) and
 * vmaxps(-limit, u) compute, so a NaN passes through on every ISA. */
static inline float moe_xr_act(const moe_act_params *a, float g, float u)
{
    if (a->kind != 0) {
        const float lim = a->limit, nlim = -a->limit;
        g = lim < g ? lim : g;
        u = lim < u ? lim : u;
        u = nlim > u ? nlim : u;
    }
    if (a->kind == 2) {
        float s = moe_math_sigmoid(a->alpha * g);
        return (g * s) * (u + 1.0f);
    }
    return (g * moe_math_sigmoid(g)) * u;
}

/* A reference set's two entries, gateup_<name> and down_<name>: the includer's drivers
 * gateup(wf, ...) and down(wf, ...) over the tile's weights wf (the includer's enumerator; the
 * drivers are INLINE, so each entry is compiled for its own wf). */
#define MOE_XR_ENTRIES(name, wf)                                                                   \
    static void gateup_##name(size_t m, size_t k, const void *const *x, const void *tile,          \
                              const moe_act_params *act, void *h, size_t h_stride, size_t n_valid) \
    {                                                                                              \
        gateup(wf, m, k, x, tile, act, h, h_stride, n_valid);                                      \
    }                                                                                              \
    static void down_##name(size_t m, size_t k, const void *const *h, const void *tile, float *y,  \
                            size_t y_stride, size_t n_valid)                                       \
    {                                                                                              \
        down(wf, m, k, h, tile, y, y_stride, n_valid);                                             \
    }

/* ---- vdpbf16ps, exactly ---------------------------------------------------------------
 * Per f32 lane j, with a and b holding bf16 pairs (low word = even element):
 *   t   = fma_ftz(a.odd,  b.odd,  DAZ(acc))
 *   acc = fma_ftz(a.even, b.even, t)
 * with the bf16 operands read with DAZ and fma_ftz one fused multiply-add rounded to nearest
 * even, then flushed as x86's FTZ does (kernels/ref/fma_ftz.h: tininess after rounding; the
 * products are exact, never rounded or overflowed on their own). Its NaN order (x, y, then
 * z) over the two steps is the manual's for vdpbf16ps: a.even, b.even, a.odd, b.odd, acc.
 * This is what Sapphire Rapids computes: checked against the instruction on 3.2 million
 * random lanes (subnormals, overflows, cancellations, NaN and Inf included), where "products
 * rounded to f32, then summed" or "the odd pair first as two plain additions" differ in
 * overflowing lanes, and "even pair first" or "one rounding" in ~5% of all lanes; and on 5
 * million lanes built to end just under 2^-126, where a flush before rounding (fmaf, then
 * FTZ) differs in 9% (docs/kernels.md, "The tile unit's bf16 arithmetic"). */

/* acc + a·b over one bf16 pair of each operand (a, b: the two codes, even in the low half). */
static inline float moe_xr_dpbf16(float acc, uint32_t a, uint32_t b)
{
    float t = moe_xr_fma_ftz(moe_xr_bf16(a >> 16), moe_xr_bf16(b >> 16), moe_xr_daz(acc));
    return moe_xr_fma_ftz(moe_xr_bf16(a & 0xFFFFu), moe_xr_bf16(b & 0xFFFFu), t);
}

#endif
