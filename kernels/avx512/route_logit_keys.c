/* route_logit_keys.c — moe_route_logit_keys__avx512: logit -> key, 16 lanes at a time. */
#include <immintrin.h>

#include "kernels/avx512/math_avx512.h"
#include "kernels/route.h"

/*
 * 16 logits per step: the order-preserving encoding of route.h on integer lanes, with
 * MOE_ROUTE_KEY_EXCLUDED in the lanes that are not finite. The last 1..15 elements use one
 * masked load and store, which touch nothing outside the row.
 */
static inline __m512i keys16(__m512 z)
{
    return _mm512_mask_mov_epi32(_mm512_set1_epi32((int)MOE_ROUTE_KEY_EXCLUDED),
                                 moe_finite_avx512(z), moe_key_encode_avx512(z));
}

void moe_route_logit_keys__avx512(size_t n, const float *z, uint32_t *key)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512(key + i, keys16(_mm512_loadu_ps(z + i)));
    if (i < n) {
        __mmask16 m = moe_tail_mask_avx512(n - i);
        _mm512_mask_storeu_epi32(key + i, m, keys16(_mm512_maskz_loadu_ps(m, z + i)));
    }
}
