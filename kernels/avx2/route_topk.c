/* route_topk.c — moe_route_topk__avx2: top-k over uint32 keys with AVX2. */
#include <immintrin.h>

#include "kernels/avx2/math_avx2.h"
#include "kernels/avx2/route_topk8.h"
#include "kernels/route.h"

/*
 * k passes, each the reference's "first index holding the largest key" done as two vector
 * sweeps: an unsigned max (vpmaxud) over the row, four accumulators wide so the maxes do not
 * wait on each other, reduced across lanes; then a search for the first 8-key block holding
 * that max (vpcmpeqd + movmskps) and its lowest lane (ctz). The pick is marked TAKEN (0) in
 * memory, so the next pass does not see it. The last 1..7 keys are read with vpmaskmovd,
 * whose masked-off lanes read as 0 = TAKEN: never a max, never matched, since some key ≥ 1
 * remains (route.h's precondition). Rows of at most 8 keys stay in one register for all
 * k passes (route_topk8.h).
 */
static inline __m256i row_max(size_t n, const uint32_t *key, __m256i tail_mask)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_max_epu32(a0, _mm256_loadu_si256((const __m256i *)(key + i)));
        a1 = _mm256_max_epu32(a1, _mm256_loadu_si256((const __m256i *)(key + i + 8)));
        a2 = _mm256_max_epu32(a2, _mm256_loadu_si256((const __m256i *)(key + i + 16)));
        a3 = _mm256_max_epu32(a3, _mm256_loadu_si256((const __m256i *)(key + i + 24)));
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_max_epu32(a0, _mm256_loadu_si256((const __m256i *)(key + i)));
    if (i < n) a1 = _mm256_max_epu32(a1, _mm256_maskload_epi32((const int *)(key + i), tail_mask));
    return moe_hmax8_avx2(_mm256_max_epu32(_mm256_max_epu32(a0, a1), _mm256_max_epu32(a2, a3)));
}

/* Finds the first key equal to best, marks it TAKEN and returns its index. The block holding it
 * is written back whole (a full 32-byte store, or vpmaskmovd for the tail): a single 4-byte
 * store would make every 32-byte load of the next pass that covers it wait for the store to
 * reach the cache, since a narrow store cannot be forwarded to a wider load. */
static inline size_t take_first_equal(size_t n, uint32_t *key, __m256i best, __m256i tail_mask)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(key + i));
        unsigned mask = moe_eq_mask_avx2(v, best);
        if (mask) {
            unsigned at = (unsigned)__builtin_ctz(mask);
            __m256i hit = _mm256_cmpeq_epi32(lane, _mm256_set1_epi32((int)at));
            _mm256_storeu_si256((__m256i *)(key + i), _mm256_andnot_si256(hit, v));
            return i + at;
        }
    }
    /* Only the n % 8 real lanes may match (a row with every key TAKEN breaks the contract,
     * but must still not index past the row). */
    unsigned mask =
        moe_eq_mask_avx2(_mm256_maskload_epi32((const int *)(key + i), tail_mask), best);
    mask &= (1u << (n - i)) - 1u;
    if (!mask) return 0; /* unreachable under the contract */
    size_t idx = i + (size_t)__builtin_ctz(mask);
    key[idx] = MOE_ROUTE_KEY_TAKEN;
    return idx;
}

void moe_route_topk__avx2(size_t n, uint32_t *key, size_t k, int32_t *ids, uint32_t *top)
{
    if (k == 0) return;
    if (n <= 8) {
        moe_topk8_avx2(n, key, k, ids, top);
        return;
    }
    __m256i tail_mask = moe_tail_mask_avx2(n % 8);
    for (size_t j = 0; j < k; j++) {
        __m256i best = row_max(n, key, tail_mask);
        ids[j] = (int32_t)take_first_equal(n, key, best, tail_mask);
        top[j] = (uint32_t)_mm256_cvtsi256_si32(best);
    }
}
