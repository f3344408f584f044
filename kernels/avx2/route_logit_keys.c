/* route_logit_keys.c — moe_route_logit_keys__avx2: logit -> key, 8 lanes at a time. */
#include <immintrin.h>

#include "kernels/avx2/math_avx2.h"
#include "kernels/route.h"

/*
 * 8 logits per step: the order-preserving encoding of route.h on integer lanes, then
 * MOE_ROUTE_KEY_EXCLUDED blended into the lanes that are not finite. The last 1..7 elements
 * go through vpmaskmov loads and stores, which neither read nor write the masked-off lanes.
 */
static inline __m256i keys8(__m256 z)
{
    return _mm256_blendv_epi8(_mm256_set1_epi32((int)MOE_ROUTE_KEY_EXCLUDED),
                              moe_key_encode_avx2(z), _mm256_castps_si256(moe_finite_avx2(z)));
}

void moe_route_logit_keys__avx2(size_t n, const float *z, uint32_t *key)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(key + i), keys8(_mm256_loadu_ps(z + i)));
    if (i < n) {
        __m256i m = moe_tail_mask_avx2(n - i);
        _mm256_maskstore_epi32((int *)(key + i), m, keys8(_mm256_maskload_ps(z + i, m)));
    }
}
