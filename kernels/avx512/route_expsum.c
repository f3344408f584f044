/* route_expsum.c — moe_route_expsum__avx512: the exp-sum of a logit row with AVX-512. */
#include <immintrin.h>

#include "kernels/avx512/math_avx512.h"
#include "kernels/route.h"

/*
 * route.h's 16 partial sums are the 16 lanes of one register: element i of each 16-element
 * step is added into lane i % 16, exactly as the reference's acc[i % 16]. A masked add skips
 * the lanes of non-finite z and, in the tail, the lanes past n (a masked-off lane keeps its
 * sum, the same bits as adding +0). The folds are route.h's: the 256-bit halves (lane j with
 * j+8), the 128-bit halves (j with j+4), movehl (j with j+2), then lane 0 with lane 1.
 */
float moe_route_expsum__avx512(size_t n, const float *z, float m)
{
    const __m512 mv = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(z + i);
        acc = _mm512_mask_add_ps(acc, moe_finite_avx512(v), acc,
                                 moe_exp_avx512(_mm512_sub_ps(v, mv)));
    }
    if (i < n) {
        __mmask16 lanes = moe_tail_mask_avx512(n - i);
        __m512 v = _mm512_maskz_loadu_ps(lanes, z + i);
        acc = _mm512_mask_add_ps(acc, lanes & moe_finite_avx512(v), acc,
                                 moe_exp_avx512(_mm512_sub_ps(v, mv)));
    }
    __m256 f8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 f4 = _mm_add_ps(_mm256_castps256_ps128(f8), _mm256_extractf128_ps(f8, 1));
    __m128 f2 = _mm_add_ps(f4, _mm_movehl_ps(f4, f4));
    __m128 f1 = _mm_add_ss(f2, _mm_shuffle_ps(f2, f2, 0x55));
    return _mm_cvtss_f32(f1);
}
