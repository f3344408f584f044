/* fma_ftz.h — internal: x86's fp32 FMA with DAZ and FTZ (vdpbf16ps, tdpbf16ps, FMA under MXCSR
 * DAZ|FTZ) in portable C. */
#ifndef MOE_KERNELS_REF_FMA_FTZ_H
#define MOE_KERNELS_REF_FMA_FTZ_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/ref/math_ref.h"

/*
 * DAZ reads a denormal operand as a zero of its sign. FTZ flushes a result to a zero of its
 * sign when, rounded to nearest even to 24 significant bits with unbounded exponent, it is
 * below 2^-126 in magnitude (x86 detects tininess after rounding). C's fmaf rounds such a
 * result on the denormal grid instead; the two differ only for an exact result in
 * [2^-126 - 2^-150, 2^-126 - 2^-151) (and its negative), which fmaf rounds to 2^-126 and x86
 * flushes. A NaN operand gives the first NaN, quieted, in the order multiplicand x,
 * multiplicand y, addend z; Inf·0 and Inf - Inf give the default NaN 0xFFC00000 (x86's
 * "real indefinite"). docs/kernels.md, "The tile unit's bf16 arithmetic (tdpbf16ps)", has the
 * experiment behind each rule. Expects MXCSR's defaults (the C code must not itself run
 * under DAZ or FTZ).
 */

#define MOE_XR_F32_DEFAULT_NAN 0xFFC00000u

static inline float moe_xr_daz(float x)
{
    const uint32_t u = moe_math_bits(x);
    return (u & 0x7F800000u) == 0 ? moe_math_from_bits(u & 0x80000000u) : x;
}

static inline bool moe_xr_is_nan(float x)
{
    const uint32_t u = moe_math_bits(x);
    return (u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0;
}

static inline float moe_xr_quiet(float x)
{
    return moe_math_from_bits(moe_math_bits(x) | 0x00400000u);
}

/* A bf16 code as the float it stands for, read with DAZ. */
static inline float moe_xr_bf16(uint32_t code)
{
    return moe_xr_daz(moe_math_from_bits(code << 16));
}

/*
 * x·y + z rounded once, then flushed; x, y, z already read with DAZ. Only where fmaf gives
 * exactly ±2^-126 can the two roundings disagree, and then the exact sum's side of the
 * midpoint 2^-126 - 2^-151 decides, which fma in double tells exactly: when |x·y| ≥ 2^-152
 * every term is a multiple of 2^-167 (x·y has at most 16 significant bits here, z, normal or
 * zero, is a multiple of 2^-149), so a sum below 2^-125 is exact in double; when
 * |x·y| < 2^-152, z is a nonzero multiple of 2^-149, at least 2^-151 from the midpoint, and
 * the sum at least 2^-152 from it, far beyond double's rounding error there (2^-179).
 * (Multiplicands with more than 16 significant bits between them would need a wider check;
 * every caller multiplies bf16 values.)
 */
static inline float moe_xr_fma_ftz(float x, float y, float z)
{
    if (moe_xr_is_nan(x)) return moe_xr_quiet(x);
    if (moe_xr_is_nan(y)) return moe_xr_quiet(y);
    if (moe_xr_is_nan(z)) return moe_xr_quiet(z);
    const float r = fmaf(x, y, z);
    if (moe_xr_is_nan(r)) return moe_math_from_bits(MOE_XR_F32_DEFAULT_NAN);
    const float mag = fabsf(r);
    if (mag < 0x1p-126f) return copysignf(0.0f, r);
    if (mag == 0x1p-126f && fabs(fma((double)x, (double)y, (double)z)) < 0x1p-126 - 0x1p-151)
        return copysignf(0.0f, r);
    return r;
}

/* x + y rounded, then flushed; x and y normal, zero, Inf or NaN (already read with DAZ or
 * flushed), so a sum below 2^-126 is a multiple of 2^-149 and exact: flushing it is all FTZ
 * does. NaN: x's first. */
static inline float moe_xr_add_ftz(float x, float y)
{
    if (moe_xr_is_nan(x)) return moe_xr_quiet(x);
    if (moe_xr_is_nan(y)) return moe_xr_quiet(y);
    const float r = x + y;
    if (moe_xr_is_nan(r)) return moe_math_from_bits(MOE_XR_F32_DEFAULT_NAN);
    return fabsf(r) < 0x1p-126f ? copysignf(0.0f, r) : r;
}

#endif
