/* math_avx2.h — internal: the routing math of kernels/ref/math_ref.h on 8 lanes (AVX2, FMA). */
#ifndef MOE_KERNELS_AVX2_MATH_AVX2_H
#define MOE_KERNELS_AVX2_MATH_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/ref/math_ref.h"

/*
 * Each function is its scalar twin in math_ref.h, line for line: the same constants, the same
 * IEEE operations in the same order, one FMA where the scalar code calls fmaf, and the same
 * choice on NaN. Two details carry the equivalence:
 *  - "x < LO ? LO : x" is _mm256_max_ps(LO, x), and "x > HI ? HI : x" is _mm256_min_ps(HI, x):
 *    vmaxps/vminps return their second operand when the comparison is false, NaN included.
 *  - "z > 0 ? z : 0" is _mm256_max_ps(z, 0) for the same reason.
 * Integer steps use 32-bit lanes with wrap-around, as the scalar code uses uint32_t.
 */

static inline __m256 moe_exp_avx2(__m256 x)
{
    x = _mm256_max_ps(_mm256_set1_ps(MOE_EXP_LO), x);
    x = _mm256_min_ps(_mm256_set1_ps(MOE_EXP_HI), x);
    const __m256 shifter = _mm256_set1_ps(MOE_EXP_SHIFTER);
    __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(MOE_EXP_LOG2E), shifter);
    __m256 n = _mm256_sub_ps(t, shifter);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-MOE_EXP_LN2_HI), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-MOE_EXP_LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(MOE_EXP_E6), r, _mm256_set1_ps(MOE_EXP_E5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MOE_EXP_E4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MOE_EXP_E3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(MOE_EXP_E2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i k =
        _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32((int)MOE_EXP_SHIFTER_BITS));
    __m256i k1 = _mm256_srai_epi32(k, 1);
    __m256i k2 = _mm256_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    __m256 y = _mm256_mul_ps(p, s1);
    return _mm256_mul_ps(y, s2);
}

static inline __m256 moe_log1p_avx2(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 u = _mm256_add_ps(one, x);
    __m256 bb = _mm256_sub_ps(u, one);
    __m256 e = _mm256_add_ps(_mm256_sub_ps(one, _mm256_sub_ps(u, bb)), _mm256_sub_ps(x, bb));
    __m256i ui =
        _mm256_add_epi32(_mm256_castps_si256(u), _mm256_set1_epi32((int)MOE_LOG1P_M_OFFSET));
    __m256i ki = _mm256_sub_epi32(_mm256_srli_epi32(ui, 23), _mm256_set1_epi32(127));
    __m256 kf = _mm256_cvtepi32_ps(ki);
    __m256i mi = _mm256_add_epi32(_mm256_and_si256(ui, _mm256_set1_epi32(0x007FFFFF)),
                                  _mm256_set1_epi32((int)MOE_LOG1P_M_BASE));
    __m256 f = _mm256_sub_ps(_mm256_castsi256_ps(mi), one);
    __m256 s = _mm256_div_ps(f, _mm256_add_ps(_mm256_set1_ps(2.0f), f));
    __m256 z = _mm256_mul_ps(s, s);
    __m256 q = _mm256_fmadd_ps(_mm256_set1_ps(MOE_LOG1P_R2), z, _mm256_set1_ps(MOE_LOG1P_R1));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(MOE_LOG1P_R0));
    __m256 fq = _mm256_fnmadd_ps(q, z, f); /* fmaf(-q, z, f) */
    __m256 c = _mm256_div_ps(e, u);
    __m256 lo = _mm256_fmadd_ps(kf, _mm256_set1_ps(MOE_EXP_LN2_LO), c);
    __m256 w = _mm256_fmsub_ps(s, fq, lo); /* fmaf(s, fq, -lo) */
    __m256 y = _mm256_fmadd_ps(kf, _mm256_set1_ps(MOE_EXP_LN2_HI), _mm256_sub_ps(f, w));
    y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(-INFINITY),
                         _mm256_cmp_ps(x, _mm256_set1_ps(-1.0f), _CMP_EQ_OQ));
    y = _mm256_blendv_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32((int)MOE_QNAN_BITS)),
                         _mm256_cmp_ps(x, _mm256_set1_ps(-1.0f), _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, _mm256_set1_ps(INFINITY), _CMP_EQ_OQ));
    y = _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    return y;
}

/* -|z| and |z| by the sign bit, as the scalar negation and fabsf do. */
static inline __m256 moe_neg_abs_avx2(__m256 z) { return _mm256_or_ps(z, _mm256_set1_ps(-0.0f)); }

static inline __m256 moe_abs_avx2(__m256 z) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), z); }

static inline __m256 moe_sigmoid_avx2(__m256 z)
{
    __m256 e = moe_exp_avx2(moe_neg_abs_avx2(z));
    __m256 num = _mm256_blendv_ps(_mm256_set1_ps(1.0f), e,
                                  _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __m256 moe_sqrtsoftplus_avx2(__m256 z)
{
    __m256 tiny = _mm256_cmp_ps(z, _mm256_set1_ps(MOE_SSP_TINY), _CMP_LT_OQ);
    __m256 arg =
        _mm256_blendv_ps(moe_neg_abs_avx2(z), _mm256_mul_ps(_mm256_set1_ps(0.5f), z), tiny);
    __m256 e = moe_exp_avx2(arg);
    __m256 l = moe_log1p_avx2(e);
    __m256 pos = _mm256_max_ps(z, _mm256_setzero_ps());
    __m256 s = _mm256_sqrt_ps(_mm256_add_ps(pos, l));
    return _mm256_blendv_ps(s, e, tiny);
}

/* All-ones in the lanes whose z is finite (|z| < Inf is false for NaN and ±Inf). */
static inline __m256 moe_finite_avx2(__m256 z)
{
    return _mm256_cmp_ps(moe_abs_avx2(z), _mm256_set1_ps(INFINITY), _CMP_LT_OQ);
}

/* moe_route_key_encode on 8 lanes: +0 added first (so -0 encodes as +0), then the sign-dependent
 * flip: ~u for negatives, u | sign for the rest, i.e. u ^ (sra(u, 31) | sign). */
static inline __m256i moe_key_encode_avx2(__m256 v)
{
    __m256i u = _mm256_castps_si256(_mm256_add_ps(v, _mm256_setzero_ps()));
    __m256i flip = _mm256_or_si256(_mm256_srai_epi32(u, 31), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_xor_si256(u, flip);
}

/* All-ones in the first `count` lanes (count in 0..8), for maskload/maskstore tails. */
static inline __m256i moe_tail_mask_avx2(size_t count)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)count),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#endif
