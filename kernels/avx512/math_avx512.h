/* math_avx512.h — internal: the routing math of kernels/ref/math_ref.h on 16 lanes (AVX-512). */
#ifndef MOE_KERNELS_AVX512_MATH_AVX512_H
#define MOE_KERNELS_AVX512_MATH_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/ref/math_ref.h"

/*
 * Each function is its scalar twin in math_ref.h, line for line, as in math_avx2.h: the same
 * constants and IEEE operations in the same order, vfmadd where the scalar code calls fmaf,
 * max(LO, x) / min(HI, x) / max(z, 0) for the clamps (vmaxps/vminps return the second operand
 * when the comparison is false, NaN included), and the scalar selects as mask blends.
 *
 * One substitution, equal in every bit: exp's final scaling by 2^n. The scalar code forms
 * 2^n1 and 2^n2 from integer bits and multiplies twice; the first product is exact, so the
 * result is p·2^n rounded once. vscalefps(p, n) computes p·2^floor(n) rounded once, by
 * definition, and n is already an integer, so it gives the same bits (normal, subnormal, 0 or
 * +Inf alike) in one instruction instead of eight; the subnormal and overflow sweeps of
 * tests/kernels/test_route_math.c check it. Finiteness tests use vfpclassps (one instruction
 * for NaN or ±Inf) where the scalar code says isfinite.
 */

static inline __m512 moe_exp_avx512(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(MOE_EXP_LO), x);
    x = _mm512_min_ps(_mm512_set1_ps(MOE_EXP_HI), x);
    const __m512 shifter = _mm512_set1_ps(MOE_EXP_SHIFTER);
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(MOE_EXP_LOG2E), shifter);
    __m512 n = _mm512_sub_ps(t, shifter);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-MOE_EXP_LN2_HI), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-MOE_EXP_LN2_LO), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(MOE_EXP_E6), r, _mm512_set1_ps(MOE_EXP_E5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MOE_EXP_E4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MOE_EXP_E3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(MOE_EXP_E2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n); /* = (p·2^n1)·2^n2 of the scalar code, see above */
}

static inline __m512 moe_log1p_avx512(__m512 x)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 u = _mm512_add_ps(one, x);
    __m512 bb = _mm512_sub_ps(u, one);
    __m512 e = _mm512_add_ps(_mm512_sub_ps(one, _mm512_sub_ps(u, bb)), _mm512_sub_ps(x, bb));
    __m512i ui =
        _mm512_add_epi32(_mm512_castps_si512(u), _mm512_set1_epi32((int)MOE_LOG1P_M_OFFSET));
    __m512i ki = _mm512_sub_epi32(_mm512_srli_epi32(ui, 23), _mm512_set1_epi32(127));
    __m512 kf = _mm512_cvtepi32_ps(ki);
    __m512i mi = _mm512_add_epi32(_mm512_and_si512(ui, _mm512_set1_epi32(0x007FFFFF)),
                                  _mm512_set1_epi32((int)MOE_LOG1P_M_BASE));
    __m512 f = _mm512_sub_ps(_mm512_castsi512_ps(mi), one);
    __m512 s = _mm512_div_ps(f, _mm512_add_ps(_mm512_set1_ps(2.0f), f));
    __m512 z = _mm512_mul_ps(s, s);
    __m512 q = _mm512_fmadd_ps(_mm512_set1_ps(MOE_LOG1P_R2), z, _mm512_set1_ps(MOE_LOG1P_R1));
    q = _mm512_fmadd_ps(q, z, _mm512_set1_ps(MOE_LOG1P_R0));
    __m512 fq = _mm512_fnmadd_ps(q, z, f); /* fmaf(-q, z, f) */
    __m512 c = _mm512_div_ps(e, u);
    __m512 lo = _mm512_fmadd_ps(kf, _mm512_set1_ps(MOE_EXP_LN2_LO), c);
    __m512 w = _mm512_fmsub_ps(s, fq, lo); /* fmaf(s, fq, -lo) */
    __m512 y = _mm512_fmadd_ps(kf, _mm512_set1_ps(MOE_EXP_LN2_HI), _mm512_sub_ps(f, w));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ), x);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-1.0f), _CMP_EQ_OQ),
                           _mm512_set1_ps(-INFINITY));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-1.0f), _CMP_LT_OQ),
                           _mm512_castsi512_ps(_mm512_set1_epi32((int)MOE_QNAN_BITS)));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(INFINITY), _CMP_EQ_OQ), x);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_add_ps(x, x));
    return y;
}

/* -|z| and |z| by the sign bit, as the scalar negation and fabsf do. */
static inline __m512 moe_neg_abs_avx512(__m512 z)
{
    return _mm512_castsi512_ps(
        _mm512_or_si512(_mm512_castps_si512(z), _mm512_set1_epi32((int)0x80000000u)));
}

static inline __m512 moe_abs_avx512(__m512 z)
{
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(z), _mm512_set1_epi32(0x7FFFFFFF)));
}

static inline __m512 moe_sigmoid_avx512(__m512 z)
{
    __m512 e = moe_exp_avx512(moe_neg_abs_avx512(z));
    __mmask16 neg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
    __m512 num = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), neg, e);
    return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

static inline __m512 moe_sqrtsoftplus_avx512(__m512 z)
{
    __mmask16 tiny = _mm512_cmp_ps_mask(z, _mm512_set1_ps(MOE_SSP_TINY), _CMP_LT_OQ);
    __m512 arg =
        _mm512_mask_mov_ps(moe_neg_abs_avx512(z), tiny, _mm512_mul_ps(_mm512_set1_ps(0.5f), z));
    __m512 e = moe_exp_avx512(arg);
    __m512 l = moe_log1p_avx512(e);
    __m512 pos = _mm512_max_ps(z, _mm512_setzero_ps());
    __m512 s = _mm512_sqrt_ps(_mm512_add_ps(pos, l));
    return _mm512_mask_mov_ps(s, tiny, e);
}

/* The lanes whose z is finite: not QNaN (0x01), +Inf (0x08), -Inf (0x10) or SNaN (0x80). */
static inline __mmask16 moe_finite_avx512(__m512 z)
{
    return (__mmask16)~_mm512_fpclass_ps_mask(z, 0x99);
}

/* moe_route_key_encode on 16 lanes: +0 added first (so -0 encodes as +0), then
 * u ^ (sra(u, 31) | sign): ~u for negatives, u | sign for the rest. */
static inline __m512i moe_key_encode_avx512(__m512 v)
{
    __m512i u = _mm512_castps_si512(_mm512_add_ps(v, _mm512_setzero_ps()));
    __m512i flip = _mm512_or_si512(_mm512_srai_epi32(u, 31), _mm512_set1_epi32((int)0x80000000u));
    return _mm512_xor_si512(u, flip);
}

/* The first `count` lanes (count in 0..16). */
static inline __mmask16 moe_tail_mask_avx512(size_t count)
{
    return (__mmask16)((1u << count) - 1u);
}

#endif
