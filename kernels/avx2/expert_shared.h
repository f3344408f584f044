/* expert_shared.h — internal: what the AVX2 expert kernel sets share: scale loads, the row store,
 * the activation.
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

#endif
