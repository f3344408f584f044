/* route_expsum.c — moe_route_expsum__avx2: the exp-sum of a logit row with AVX2. */
#include <immintrin.h>

#include "kernels/avx2/math_avx2.h"
#include "kernels/route.h"

/*
 * route.h's 16 partial sums live in two registers: lo holds acc[0..7], hi acc[8..15], so
 * element i of each 16-element step lands in acc[i % 16] exactly as in the reference. Each
 * term is moe_exp_avx2(z - m) with the lanes of non-finite z (and, in the tail, the lanes past
 * n, read as 0 by vpmaskmov) zeroed: adding +0 leaves a partial sum's bits unchanged. The
 * folds are route.h's: lo + hi (lane j with lane j+8), then the two 128-bit halves (j with
 * j+4), then movehl (j with j+2), then lane 0 with lane 1.
 */
static inline __m256 term(__m256 z, __m256 m, __m256 valid)
{
    __m256 e = moe_exp_avx2(_mm256_sub_ps(z, m));
    return _mm256_and_ps(e, _mm256_and_ps(valid, moe_finite_avx2(z)));
}

float moe_route_expsum__avx2(size_t n, const float *z, float m)
{
    const __m256 mv = _mm256_set1_ps(m);
    const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        lo = _mm256_add_ps(lo, term(_mm256_loadu_ps(z + i), mv, all));
        hi = _mm256_add_ps(hi, term(_mm256_loadu_ps(z + i + 8), mv, all));
    }
    size_t rest = n - i;
    if (rest > 0) {
        __m256i m0 = moe_tail_mask_avx2(rest < 8 ? rest : 8);
        lo = _mm256_add_ps(lo, term(_mm256_maskload_ps(z + i, m0), mv, _mm256_castsi256_ps(m0)));
    }
    if (rest > 8) {
        __m256i m1 = moe_tail_mask_avx2(rest - 8);
        hi =
            _mm256_add_ps(hi, term(_mm256_maskload_ps(z + i + 8, m1), mv, _mm256_castsi256_ps(m1)));
    }
    __m256 f8 = _mm256_add_ps(lo, hi);
    __m128 f4 = _mm_add_ps(_mm256_castps256_ps128(f8), _mm256_extractf128_ps(f8, 1));
    __m128 f2 = _mm_add_ps(f4, _mm_movehl_ps(f4, f4));
    __m128 f1 = _mm_add_ss(f2, _mm_shuffle_ps(f2, f2, 0x55));
    return _mm_cvtss_f32(f1);
}
