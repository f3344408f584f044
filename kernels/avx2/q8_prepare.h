/* q8_prepare.h — internal: the Q8 recipe's activation rows (prepare_act) on AVX2, 32 values a block. */
#ifndef MOE_KERNELS_AVX2_Q8_PREPARE_H
#define MOE_KERNELS_AVX2_Q8_PREPARE_H

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/ref/expert_mxfp4_layout.h"

/*
 * The row kernels/expert.h defines, byte for byte what moe_q8_prepare_ref writes, as
 * kernels/avx512/q8_prepare.h does it on four ymm vectors per block: a block with an
 * all-ones exponent (NaN, ±Inf) anywhere gets the NaN scale; amax is the largest |x| (exact
 * in any order), d = amax / 127 the same scalar IEEE division, q = rne(x / d) from vdivps
 * and vroundps, clamped to ±127, narrowed by two saturating packs and put back in order by a
 * dword permute; corr is -12 times their sum. Included by each ymm set's file; everything is
 * static.
 */

static inline float q8_hmax_avx2(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline int32_t q8_hsum_avx2(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

static void q8_prepare_avx2(size_t k, const float *x, void *dst)
{
    unsigned char *row = dst;
    const size_t nb = k / MOE_EXPERT_MXBLOCK, so = moe_q8_scales_offset(k);
    const size_t co = moe_q8_corr_offset(k);
    const __m256 lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
    const __m256i expo = _mm256_set1_epi32(0x7F800000), mag = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (size_t b = 0; b < nb; b++) {
        __m256 v[4];
        __m256i bad = _mm256_setzero_si256();
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
            const __m256i u = _mm256_castps_si256(v[i]);
            bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(u, expo), expo));
            amax = _mm256_max_ps(amax, _mm256_castsi256_ps(_mm256_and_si256(u, mag)));
        }
        __m256i q = _mm256_setzero_si256();
        float xs = NAN;
        int32_t corr = 0;
        if (_mm256_testz_si256(bad, bad)) {
            xs = q8_hmax_avx2(amax) / 127.0f;
            if (xs != 0.0f) {
                const __m256 d = _mm256_set1_ps(xs);
                __m256i n[4], sum = _mm256_setzero_si256();
                for (int i = 0; i < 4; i++) {
                    __m256 r = _mm256_round_ps(_mm256_div_ps(v[i], d),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                    r = _mm256_max_ps(nlim, _mm256_min_ps(lim, r));
                    n[i] = _mm256_cvtps_epi32(r);
                    sum = _mm256_add_epi32(sum, n[i]);
                }
                const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(n[0], n[1]),
                                                     _mm256_packs_epi32(n[2], n[3]));
                q = _mm256_permutevar8x32_epi32(w, order);
                corr = -MOE_Q8_WOFFSET * q8_hsum_avx2(sum);
            }
        }
        _mm256_storeu_si256((__m256i *)(row + 32 * b), q);
        memcpy(row + so + 4 * b, &xs, sizeof xs);
        memcpy(row + co + 4 * b, &corr, sizeof corr);
    }
    moe_q8_zero_padding(k, row);
}

#endif
