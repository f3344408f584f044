/* q8_prepare.h — internal: the Q8 recipe's activation rows (prepare_act) on AVX-512, 32 values a block. */
#ifndef MOE_KERNELS_AVX512_Q8_PREPARE_H
#define MOE_KERNELS_AVX512_Q8_PREPARE_H

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/ref/expert_mxfp4_layout.h"

/*
 * The row kernels/expert.h defines, byte for byte what moe_q8_prepare_ref writes: per block
 * the two vectors are tested for NaN / ±Inf (vfpclassps), amax is the largest |x| (exact in
 * any order), d = amax / 127 is the same scalar IEEE division, q = rne(x / d) comes from
 * vdivps (IEEE, so the reference's quotient) rounded by vrndscaleps to nearest even, clamped
 * to ±127 and narrowed by vpmovsdb; corr is -12 times their sum. Included by one file per
 * kernel set; everything here is static.
 */

/* vfpclassps classes: QNaN, +Inf, -Inf, SNaN (immediates, so macros: -O0 folds no const). */
#define Q8_NONFINITE (0x01 | 0x08 | 0x10 | 0x80)
#define Q8_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static void q8_prepare_avx512(size_t k, const float *x, void *dst)
{
    unsigned char *row = dst;
    const size_t nb = k / MOE_EXPERT_MXBLOCK, so = moe_q8_scales_offset(k);
    const size_t co = moe_q8_corr_offset(k);
    const __m512 lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f);
    for (size_t b = 0; b < nb; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
        __m128i q0 = _mm_setzero_si128(), q1 = _mm_setzero_si128();
        float xs = NAN;
        int32_t corr = 0;
        if (!(_mm512_fpclass_ps_mask(v0, Q8_NONFINITE) | _mm512_fpclass_ps_mask(v1, Q8_NONFINITE))) {
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            xs = amax / 127.0f;
            if (xs != 0.0f) {
                const __m512 d = _mm512_set1_ps(xs);
                __m512 r0 = _mm512_roundscale_ps(_mm512_div_ps(v0, d), Q8_RNE);
                __m512 r1 = _mm512_roundscale_ps(_mm512_div_ps(v1, d), Q8_RNE);
                r0 = _mm512_max_ps(nlim, _mm512_min_ps(lim, r0));
                r1 = _mm512_max_ps(nlim, _mm512_min_ps(lim, r1));
                const __m512i i0 = _mm512_cvtps_epi32(r0), i1 = _mm512_cvtps_epi32(r1);
                q0 = _mm512_cvtsepi32_epi8(i0);
                q1 = _mm512_cvtsepi32_epi8(i1);
                corr = -MOE_Q8_WOFFSET * _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
            }
        }
        _mm_storeu_si128((__m128i *)(row + 32 * b), q0);
        _mm_storeu_si128((__m128i *)(row + 32 * b + 16), q1);
        memcpy(row + so + 4 * b, &xs, sizeof xs);
        memcpy(row + co + 4 * b, &corr, sizeof corr);
    }
    moe_q8_zero_padding(k, row);
}

#endif
