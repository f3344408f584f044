/* route_score_keys.c — moe_route_{sigmoid,sqrtsoftplus}_keys__avx2: scores and keys, 8 lanes. */
#include <immintrin.h>

#include "kernels/avx2/math_avx2.h"
#include "kernels/route.h"
#include "kernels/inline.h"

/*
 * 8 logits per step through moe_sigmoid_avx2, or moe_sqrtsoftplus_avx2 when SQRTSOFTPLUS (the
 * scalar functions of math_ref.h, operation for operation), so scores and keys equal the
 * reference's bit for bit. Lanes with a non-finite z get s = +0; lanes with a non-finite z or a
 * non-finite s + bias get MOE_ROUTE_KEY_EXCLUDED. The last 1..7 elements use vpmaskmov loads and
 * stores (masked-off lanes are not touched; their zeros are computed and discarded).
 */
INLINE void step(int sqrtsoftplus, __m256 z, __m256 b, int has_bias, __m256 *s_out,
                 __m256i *key_out)
{
    __m256 finite = moe_finite_avx2(z);
    __m256 f = sqrtsoftplus ? moe_sqrtsoftplus_avx2(z) : moe_sigmoid_avx2(z);
    __m256 s = _mm256_and_ps(f, finite);
    __m256 v = has_bias ? _mm256_add_ps(s, b) : s;
    __m256 ok = _mm256_and_ps(finite, moe_finite_avx2(v));
    *s_out = s;
    *key_out = _mm256_blendv_epi8(_mm256_set1_epi32((int)MOE_ROUTE_KEY_EXCLUDED),
                                  moe_key_encode_avx2(v), _mm256_castps_si256(ok));
}

INLINE void score_keys(int sqrtsoftplus, size_t n, const float *z, const float *bias, float *s,
                       uint32_t *key)
{
    const int has_bias = bias != NULL;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 sv;
        __m256i kv;
        __m256 b = has_bias ? _mm256_loadu_ps(bias + i) : _mm256_setzero_ps();
        step(sqrtsoftplus, _mm256_loadu_ps(z + i), b, has_bias, &sv, &kv);
        _mm256_storeu_ps(s + i, sv);
        _mm256_storeu_si256((__m256i *)(key + i), kv);
    }
    if (i < n) {
        __m256i m = moe_tail_mask_avx2(n - i);
        __m256 sv;
        __m256i kv;
        __m256 b = has_bias ? _mm256_maskload_ps(bias + i, m) : _mm256_setzero_ps();
        step(sqrtsoftplus, _mm256_maskload_ps(z + i, m), b, has_bias, &sv, &kv);
        _mm256_maskstore_ps(s + i, m, sv);
        _mm256_maskstore_epi32((int *)(key + i), m, kv);
    }
}

void moe_route_sigmoid_keys__avx2(size_t n, const float *z, const float *bias, float *s,
                                  uint32_t *key)
{
    score_keys(0, n, z, bias, s, key);
}

void moe_route_sqrtsoftplus_keys__avx2(size_t n, const float *z, const float *bias, float *s,
                                       uint32_t *key)
{
    score_keys(1, n, z, bias, s, key);
}
