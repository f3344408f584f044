/* route_score_keys.c — moe_route_{sigmoid,sqrtsoftplus}_keys__avx512: 16 lanes. */
#include <immintrin.h>

#include "kernels/avx512/math_avx512.h"
#include "kernels/route.h"
#include "kernels/inline.h"

/*
 * 16 logits per step through moe_sigmoid_avx512, or moe_sqrtsoftplus_avx512 when SQRTSOFTPLUS
 * (the scalar functions of math_ref.h, operation for operation), so scores and keys equal the
 * reference's bit for bit. Lanes with a non-finite z get s = +0; lanes with a non-finite z or a
 * non-finite s + bias get MOE_ROUTE_KEY_EXCLUDED. Whole vectors use plain loads and stores (a
 * later full-width load of the keys, as top-k does, can then be forwarded from them); the last
 * 1..15 elements use one masked load and store, which touch nothing outside the row.
 */
INLINE void step(int sqrtsoftplus, __m512 z, __m512 b, int has_bias, __m512 *s_out,
                 __m512i *key_out)
{
    __mmask16 finite = moe_finite_avx512(z);
    __m512 f = sqrtsoftplus ? moe_sqrtsoftplus_avx512(z) : moe_sigmoid_avx512(z);
    __m512 s = _mm512_maskz_mov_ps(finite, f);
    __m512 v = has_bias ? _mm512_add_ps(s, b) : s;
    __mmask16 ok = finite & moe_finite_avx512(v);
    *s_out = s;
    *key_out = _mm512_mask_mov_epi32(_mm512_set1_epi32((int)MOE_ROUTE_KEY_EXCLUDED), ok,
                                     moe_key_encode_avx512(v));
}

INLINE void score_keys(int sqrtsoftplus, size_t n, const float *z, const float *bias, float *s,
                       uint32_t *key)
{
    const int has_bias = bias != NULL;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) { /* two independent steps per iteration overlap their chains */
        __m512 s0, s1;
        __m512i k0, k1;
        __m512 b0 = has_bias ? _mm512_loadu_ps(bias + i) : _mm512_setzero_ps();
        __m512 b1 = has_bias ? _mm512_loadu_ps(bias + i + 16) : _mm512_setzero_ps();
        step(sqrtsoftplus, _mm512_loadu_ps(z + i), b0, has_bias, &s0, &k0);
        step(sqrtsoftplus, _mm512_loadu_ps(z + i + 16), b1, has_bias, &s1, &k1);
        _mm512_storeu_ps(s + i, s0);
        _mm512_storeu_ps(s + i + 16, s1);
        _mm512_storeu_si512(key + i, k0);
        _mm512_storeu_si512(key + i + 16, k1);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 sv;
        __m512i kv;
        __m512 b = has_bias ? _mm512_loadu_ps(bias + i) : _mm512_setzero_ps();
        step(sqrtsoftplus, _mm512_loadu_ps(z + i), b, has_bias, &sv, &kv);
        _mm512_storeu_ps(s + i, sv);
        _mm512_storeu_si512(key + i, kv);
    }
    if (i < n) {
        __mmask16 m = moe_tail_mask_avx512(n - i);
        __m512 sv;
        __m512i kv;
        __m512 b = has_bias ? _mm512_maskz_loadu_ps(m, bias + i) : _mm512_setzero_ps();
        step(sqrtsoftplus, _mm512_maskz_loadu_ps(m, z + i), b, has_bias, &sv, &kv);
        _mm512_mask_storeu_ps(s + i, m, sv);
        _mm512_mask_storeu_epi32(key + i, m, kv);
    }
}

void moe_route_sigmoid_keys__avx512(size_t n, const float *z, const float *bias, float *s,
                                    uint32_t *key)
{
    score_keys(0, n, z, bias, s, key);
}

void moe_route_sqrtsoftplus_keys__avx512(size_t n, const float *z, const float *bias, float *s,
                                         uint32_t *key)
{
    score_keys(1, n, z, bias, s, key);
}
