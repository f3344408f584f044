/* math_ref.h — internal: the scalar exp/log1p/sigmoid/sqrt-softplus every route kernel mirrors. */
#ifndef MOE_KERNELS_REF_MATH_REF_H
#define MOE_KERNELS_REF_MATH_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/*
 * Why our own exp and log1p: routing must give the same bits on every ISA (kernels/route.h),
 * and libm's expf is neither specified bit for bit nor vectorisable alike. These functions
 * use only IEEE operations that are correctly rounded in both scalar and SIMD form (+, -, *,
 * /, sqrt, fmaf, compares, integer bit moves), in one fixed order; math_avx2.h and
 * math_avx512.h repeat them operation for operation, so the results are bit-identical.
 *
 * Contraction must not change anything: a compiler that fused a*b+c into an FMA on one side
 * only would break the mirror. Every FMA here is an explicit fmaf, and no product feeds an
 * addition outside one, so there is nothing to fuse even under -ffp-contract=fast (GCC does
 * not contract in ISO C mode anyway; the pragma turns clang's default contraction off).
 *
 * Subnormals: no flush to zero. exp produces correctly scaled subnormals down to 2^-149 and 0
 * below (it multiplies by 2^n in two exact-then-rounding steps); log1p accepts subnormal
 * inputs. This assumes the MXCSR defaults (round to nearest, FTZ and DAZ off); under FTZ/DAZ
 * the scalar and SIMD paths both flush, alike.
 *
 * Accuracy (tests/kernels/test_route_math.c measures it against double): exp and log1p are
 * within 1 ulp of the correctly rounded value over their whole domain, sigmoid and
 * sqrt-softplus within 2 ulp.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static inline uint32_t moe_math_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float moe_math_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/*
 * exp: x = n·ln2 + r with n = round(x·log2(e)), |r| ≤ ln2/2 (+ rounding); e^r ≈ p(r); the
 * result is p · 2^n.
 *
 * Clamp: below -104 every exp rounds to 0 (e^-104 < 2^-150, half the least subnormal); above
 * 89 every exp overflows (e^88.73 > FLT_MAX). Clamping keeps n in [-150, 128], so the integer
 * tricks below stay valid; ±Inf land on the clamps (exp(-Inf) = 0, exp(+Inf) = +Inf). The
 * comparisons are written so a NaN passes through unchanged (and yields NaN).
 *
 * Rounding to an integer: SHIFTER = 1.5·2^23; for |v| < 2^22, v + SHIFTER lies in [2^23, 2^24)
 * where the float spacing is 1, so the addition rounds v to the nearest integer (ties to
 * even) and the low mantissa bits of t hold n as a two's complement offset from 0x4B400000.
 *
 * Cody-Waite: LN2_HI = ln2 rounded to float, LN2_LO = (ln2 - LN2_HI) rounded. r1 = x - n·LN2_HI
 * by one FMA is exact: for n ≠ 0, |x| > 0.34, so x and n·LN2_HI are multiples of 2^-25, and
 * |r1| < 0.5 needs at most 24 bits (for n = 0, r1 = x). r = r1 - n·LN2_LO rounds once.
 *
 * Polynomial: e^r = 1 + r + r²·h(r), h(r) = (e^r - 1 - r)/r², approximated on |r| ≤ 0.3471 by
 * the degree-4 minimax polynomial of h (Remez exchange in mpmath at 50 digits, max |error|
 * 6.3e-8 in h), coefficients rounded to float: with those rounded coefficients the relative
 * error of 1 + r + r²·h is ≤ 1.04e-8 (0.17 · 2^-24) in exact arithmetic. E2 came out as 0.5.
 * Horner with FMA from E6 down, then ·r + 1 twice.
 *
 * Scaling: 2^n = 2^n1 · 2^n2 with n1 = floor(n/2), n2 = n - n1, both in [-75, 64] and so normal
 * floats. p·2^n1 is exact (p ≥ 0.7 keeps it normal); the second product rounds once, which is
 * the correctly rounded p·2^n, subnormal or overflowing to +Inf alike.
 */
#define MOE_EXP_LO (-104.0f)
#define MOE_EXP_HI 89.0f
#define MOE_EXP_LOG2E 0x1.715476p+0f /* 1.44269502, log2(e) rounded */
#define MOE_EXP_SHIFTER 0x1.8p+23f   /* 12582912 */
#define MOE_EXP_SHIFTER_BITS 0x4B400000u
#define MOE_EXP_LN2_HI 0x1.62e43p-1f     /* 0.693147182 */
#define MOE_EXP_LN2_LO (-0x1.05c61p-29f) /* -1.90465421e-09 */
#define MOE_EXP_E2 0x1p-1f               /* 0.5 */
#define MOE_EXP_E3 0x1.5554dcp-3f        /* 0.166665763 */
#define MOE_EXP_E4 0x1.5554b8p-5f        /* 0.0416663736 */
#define MOE_EXP_E5 0x1.120c2p-7f         /* 0.00836326182 */
#define MOE_EXP_E6 0x1.6d763ep-10f       /* 0.00139412645 */

static inline float moe_math_exp(float x)
{
    x = x < MOE_EXP_LO ? MOE_EXP_LO : x;
    x = x > MOE_EXP_HI ? MOE_EXP_HI : x;
    float t = fmaf(x, MOE_EXP_LOG2E, MOE_EXP_SHIFTER);
    float n = t - MOE_EXP_SHIFTER;
    float r = fmaf(n, -MOE_EXP_LN2_HI, x);
    r = fmaf(n, -MOE_EXP_LN2_LO, r);
    float p = fmaf(MOE_EXP_E6, r, MOE_EXP_E5);
    p = fmaf(p, r, MOE_EXP_E4);
    p = fmaf(p, r, MOE_EXP_E3);
    p = fmaf(p, r, MOE_EXP_E2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    /* Integer work in uint32 (wrapping, defined); n1 = floor(n/2) is the arithmetic shift
     * of the SIMD code, spelled on unsigned bits: shift, then copy the sign bit back. */
    uint32_t k = moe_math_bits(t) - MOE_EXP_SHIFTER_BITS;
    uint32_t k1 = (k >> 1) | (k & 0x80000000u);
    uint32_t k2 = k - k1;
    float s1 = moe_math_from_bits((k1 + 127u) << 23);
    float s2 = moe_math_from_bits((k2 + 127u) << 23);
    float y = p * s1;
    return y * s2;
}

/*
 * log1p: u = 1 + x rounded, with the exact error e = (1 + x) - u from TwoSum (6 operations,
 * exact for all finite x), so log1p(x) = log(u) + log(1 + e/u) ≈ log(u) + c, c = e/u.
 * u = 2^k·m with m in [sqrt(2)/2, sqrt(2)): adding 0x3F800000 - 0x3F3504F3 (the bits of 1 and
 * of sqrt(2)/2) to u's bits carries into the exponent exactly when m would reach sqrt(2).
 * f = m - 1 is exact (Sterbenz), in [-0.2929, 0.4143].
 *
 * log(1+f) = 2·atanh(s), s = f/(2+f), |s| ≤ 0.1716; 2·atanh(s) = 2s + s·Q(z), z = s², with
 * Q(z) = z·R(z), R(z) = 2/3 + 2z/5 + 2z²/7 + ...; R is the degree-2 minimax polynomial on
 * z in [0, 0.0295] (Remez in mpmath; max error 1.9e-7 in R, ≤ 2.6e-9 = 0.04 · 2^-24 relative in
 * log(1+f) with the coefficients rounded to float). Since 2s = f - s·f,
 *   log(1+f) = f - s·(f - Q),
 * which keeps f, exact, as the leading term; f - Q = f - z·R is one FMA. Then
 *   log1p(x) = k·LN2_HI + (f - (s·(f - Q) - (k·LN2_LO + c))),
 * the last step one FMA, so the large term k·ln2 is added with one rounding.
 *
 * Specials (blended at the end, as the SIMD versions do): log1p(±0) = ±0, log1p(-1) = -Inf,
 * x < -1 gives NaN, log1p(+Inf) = +Inf, NaN stays NaN. Tiny x comes out as x by itself (u = 1,
 * f = 0, c = x).
 */
#define MOE_LOG1P_M_OFFSET 0x004AFB0Du /* 0x3F800000 - 0x3F3504F3 */
#define MOE_LOG1P_M_BASE 0x3F3504F3u   /* bits of sqrt(2)/2 */
#define MOE_LOG1P_R0 0x1.55555cp-1f    /* 0.666666865 */
#define MOE_LOG1P_R1 0x1.997be6p-2f    /* 0.399886698 */
#define MOE_LOG1P_R2 0x1.2ef16p-2f     /* 0.295842648 */
#define MOE_QNAN_BITS 0x7FC00000u

static inline float moe_math_log1p(float x)
{
    float u = 1.0f + x;
    float bb = u - 1.0f;
    float e = (1.0f - (u - bb)) + (x - bb);
    uint32_t ui = moe_math_bits(u) + MOE_LOG1P_M_OFFSET;
    float kf = (float)((int32_t)(ui >> 23) - 127);
    float m = moe_math_from_bits((ui & 0x007FFFFFu) + MOE_LOG1P_M_BASE);
    float f = m - 1.0f;
    float s = f / (2.0f + f);
    float z = s * s;
    float q = fmaf(MOE_LOG1P_R2, z, MOE_LOG1P_R1);
    q = fmaf(q, z, MOE_LOG1P_R0);
    float fq = fmaf(-q, z, f); /* f - Q, Q = z·R(z) */
    float c = e / u;
    float lo = fmaf(kf, MOE_EXP_LN2_LO, c);
    float w = fmaf(s, fq, -lo);
    float y = fmaf(kf, MOE_EXP_LN2_HI, f - w);
    y = x == 0.0f ? x : y;
    y = x == -1.0f ? -INFINITY : y;
    y = x < -1.0f ? moe_math_from_bits(MOE_QNAN_BITS) : y;
    y = x == INFINITY ? x : y;
    y = x != x ? x + x : y;
    return y;
}

/*
 * sigmoid(z) = 1/(1 + e^-z) for z ≥ 0 and e^z/(1 + e^z) for z < 0: one exp of -|z| either
 * way, and no cancellation, so tiny sigmoids of very negative z keep their relative accuracy
 * (down to the subnormals; 0 below z ≈ -103.9) instead of being 1/(1 + huge). IEEE division.
 * sigmoid(-0) = 0.5, sigmoid(±Inf) = 1 / 0, NaN gives NaN.
 */
static inline float moe_math_sigmoid(float z)
{
    float e = moe_math_exp(-fabsf(z));
    float num = z < 0.0f ? e : 1.0f;
    return num / (1.0f + e);
}

/*
 * sqrt(softplus(z)), softplus(z) = max(z, 0) + log1p(e^-|z|): never overflows (e^-|z| ≤ 1).
 * For z < -20, softplus(z) = e^z·(1 - e^z/2 + ...) equals e^z to within 2^-29, and e^z
 * itself runs into the subnormals below z ≈ -87 and to 0 below -104, so there the result is
 * computed as e^(z/2) directly: exact-to-1-ulp down to z ≈ -174 and nonzero down to z ≈ -207
 * (the weights of very negative scores survive renormalisation). The same exp call serves
 * both branches: its argument is z/2 (exact) or -|z|, chosen per element.
 * max(z, 0) is written "z > 0 ? z : 0", which is what the SIMD max instruction computes with
 * 0 as its second operand (NaN -> 0, -0 -> 0). NaN gives NaN, +Inf gives +Inf, -Inf gives 0.
 */
#define MOE_SSP_TINY (-20.0f)

static inline float moe_math_sqrtsoftplus(float z)
{
    int tiny = z < MOE_SSP_TINY;
    float arg = tiny ? 0.5f * z : -fabsf(z);
    float e = moe_math_exp(arg);
    float l = moe_math_log1p(e);
    float pos = z > 0.0f ? z : 0.0f;
    float s = sqrtf(pos + l);
    return tiny ? e : s;
}

#endif
