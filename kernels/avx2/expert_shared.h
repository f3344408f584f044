/* expert_shared.h — internal: what the AVX2 expert kernel sets share: scale loads, the row store,
 * the activation, the bf16 recipes' gate/up epilogue.
 */
#ifndef MOE_KERNELS_AVX2_EXPERT_SHARED_H
#define MOE_KERNELS_AVX2_EXPERT_SHARED_H

#include <immintrin.h>
#include <string.h>

#include "kernels/avx2/math_avx2.h"
#include "kernels/expert.h"

/* An f32 stored in a packed tile or a prepared row (any alignment). */
static inline __attribute__((always_inline)) float load_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Stores rows [0, 16) ∩ [0, n_valid) of a 16-row result held in two ymm. */
static inline __attribute__((always_inline)) void store16(float *out, __m256 lo, __m256 hi,
                                                          size_t n_valid)
{
    if (n_valid >= 8) {
        _mm256_storeu_ps(out, lo);
        if (n_valid == 16)
            _mm256_storeu_ps(out + 8, hi);
        else if (n_valid > 8)
            _mm256_maskstore_ps(out + 8, moe_tail_mask_avx2(n_valid - 8), hi);
    } else {
        _mm256_maskstore_ps(out, moe_tail_mask_avx2(n_valid), lo);
    }
}

/* The epilogue: moe_xr_act (kernels/ref/expert_ref.h) on 8 lanes. */
static inline __attribute__((always_inline)) __m256 act8(const moe_act_params *a, __m256 g,
                                                         __m256 u)
{
    if (a->kind != 0) {
        const __m256 lim = _mm256_set1_ps(a->limit), nlim = _mm256_set1_ps(-a->limit);
        g = _mm256_min_ps(lim, g);
        u = _mm256_min_ps(lim, u);
        u = _mm256_max_ps(nlim, u);
    }
    if (a->kind == 2) {
        __m256 s = moe_sigmoid_avx2(_mm256_mul_ps(_mm256_set1_ps(a->alpha), g));
        return _mm256_mul_ps(_mm256_mul_ps(g, s), _mm256_add_ps(u, _mm256_set1_ps(1.0f)));
    }
    return _mm256_mul_ps(_mm256_mul_ps(g, moe_sigmoid_avx2(g)), u);
}

/* moe_f32_to_bf16 on 8 lanes (nearest even, NaN quiet, subnormals kept), as 8 words. */
static inline __attribute__((always_inline)) __m128i to_bf16(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb));
    r = _mm256_srli_epi32(r, 16);
    const __m256i qn = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
    r = _mm256_blendv_epi8(r, qn, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    const __m256i p = _mm256_packus_epi32(r, r); /* per lane: words 0-3 twice, 4-7 twice */
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08));
}

/* One token's gate/up outputs from its sums (gate rows 0-7, 8-15, up rows 0-7, 8-15): bias,
 * the activation, h rounded to bf16; n_valid rows stored. */
static inline __attribute__((always_inline)) void gateup_row(__m256 g0, __m256 g1, __m256 u0,
                                                             __m256 u1, const unsigned char *tile,
                                                             const moe_act_params *act, uint16_t *h,
                                                             size_t n_valid)
{
    const float *bias = (const float *)tile;
    uint16_t row[MOE_EXPERT_NR];
    _mm_storeu_si128((__m128i *)row,
                     to_bf16(act8(act, _mm256_add_ps(g0, _mm256_loadu_ps(bias)),
                                  _mm256_add_ps(u0, _mm256_loadu_ps(bias + MOE_EXPERT_NR)))));
    _mm_storeu_si128((__m128i *)(row + 8),
                     to_bf16(act8(act, _mm256_add_ps(g1, _mm256_loadu_ps(bias + 8)),
                                  _mm256_add_ps(u1, _mm256_loadu_ps(bias + MOE_EXPERT_NR + 8)))));
    memcpy(h, row, n_valid * sizeof row[0]);
}

#endif
