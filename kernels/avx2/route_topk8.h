/* route_topk8.h — internal: top-k over at most 8 keys in one register (AVX2 and AVX-512). */
#ifndef MOE_KERNELS_AVX2_ROUTE_TOPK8_H
#define MOE_KERNELS_AVX2_ROUTE_TOPK8_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/avx2/math_avx2.h"

/* The unsigned max of the 8 lanes, in every lane. */
static inline __m256i moe_hmax8_avx2(__m256i v)
{
    v = _mm256_max_epu32(v, _mm256_permute2x128_si256(v, v, 0x01));
    v = _mm256_max_epu32(v, _mm256_shuffle_epi32(v, 0x4E));
    return _mm256_max_epu32(v, _mm256_shuffle_epi32(v, 0xB1));
}

/* The lanes of v equal to best, as movmskps bits. */
static inline unsigned moe_eq_mask_avx2(__m256i v, __m256i best)
{
    return (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, best)));
}

/*
 * Rows of 1..8 keys (group scores, Mixtral's 8 experts) stay in one register for all k
 * passes: the max in every lane, the first lane equal to it, that lane zeroed (TAKEN); the
 * row is written back once. vpmaskmovd reads the n real keys and 0 (TAKEN) elsewhere, which
 * is never a max while a key ≥ 1 remains (route.h's precondition), and the mask of real
 * lanes keeps a pick inside the row even when it does not.
 */
static inline void moe_topk8_avx2(size_t n, uint32_t *key, size_t k, int32_t *ids, uint32_t *top)
{
    const __m256i m = moe_tail_mask_avx2(n);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const unsigned real = (1u << n) - 1u;
    __m256i v = _mm256_maskload_epi32((const int *)key, m);
    for (size_t j = 0; j < k; j++) {
        __m256i best = moe_hmax8_avx2(v);
        unsigned eq = moe_eq_mask_avx2(v, best) & real;
        unsigned idx = eq ? (unsigned)__builtin_ctz(eq) : 0;
        ids[j] = (int32_t)idx;
        top[j] = (uint32_t)_mm256_cvtsi256_si32(best);
        v = _mm256_andnot_si256(_mm256_cmpeq_epi32(lane, _mm256_set1_epi32((int)idx)), v);
    }
    _mm256_maskstore_epi32((int *)key, m, v);
}

#endif
