/* expert_tile_chunk.h — internal: the AVX-512 tile recipe's chains over one 32-K chunk (two FMA
 * chains per token under DAZ and FTZ), shared by its bf16 and FP8 sets. */
#ifndef MOE_KERNELS_AVX512_EXPERT_TILE_CHUNK_H
#define MOE_KERNELS_AVX512_EXPERT_TILE_CHUNK_H

#include <immintrin.h>

#include "kernels/avx512/expert_f32_common.h"
#include "kernels/inline.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "kernels/ref/expert_layout.h"

/* kernels/avx512/expert_bf16_tile.c says how the chains run; the FP8 set
 * (kernels/avx512/expert_fp8_tile.c) runs them on its codes widened into bf16 pair lines. */

#define MR_TILE 12
#define CHUNK MOE_XL_TILE_CHUNK
#define STEPS (CHUNK / 2) /* pair steps per chunk */

/* A chunk of each token's row as f32: xs[i][j] the even element of pair j, xs[i][STEPS + j]
 * the odd one; zeros past k. */
INLINE void widen_chunk(const size_t M, const uint16_t *const *x, size_t k, size_t c,
                        float (*xs)[CHUNK])
{
    const size_t k0 = c * CHUNK, n = k - k0 < CHUNK ? k - k0 : CHUNK;
    const __mmask32 mask = (__mmask32)(n == CHUNK ? ~0u : (1u << n) - 1u);
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        const __m512i v = _mm512_maskz_loadu_epi16(mask, x[i] + k0);
        _mm512_store_si512(xs[i], _mm512_slli_epi32(v, 16));
        _mm512_store_si512(xs[i] + STEPS, _mm512_and_si512(v, hi));
    }
}

/* Two vectors per token (two projections, or two halves of rows) for M tokens fenced
 * (dp_fence), so no arithmetic moves across an MXCSR write. */
INLINE void fence_sums(const size_t M, __m512 s[][2])
{
    UNROLL
    for (size_t i = 0; i < M; i++) {
        dp_fence(s[i][0]);
        dp_fence(s[i][1]);
    }
}

/* One chunk of one projection (its 16 pair lines from l) into the M tokens' totals tot[i][p],
 * under DAZ and FTZ. With pf, each line is prefetched ahead (the L2 line skip bytes further once
 * it reaches end); lines the caller decoded into a buffer are not. */
INLINE void chunk_dp(const size_t M, const unsigned char *l, const int pf, const unsigned char *end,
                     size_t skip, const float (*xs)[CHUNK], __m512 tot[][2], int p)
{
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 e[MR_TILE], o[MR_TILE];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        e[i] = o[i] = _mm512_setzero_ps();
        dp_fence(e[i]);
        dp_fence(o[i]);
    }
    for (size_t j = 0; j < STEPS; j++, l += MOE_XL_BF16_LINE) {
        if (pf) prefetch_side(l, end, skip);
        const __m512i w = _mm512_loadu_si512(l);
        const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(w, hi));
        UNROLL
        for (size_t i = 0; i < M; i++) {
            e[i] = _mm512_fmadd_ps(we, _mm512_set1_ps(xs[i][j]), e[i]);
            o[i] = _mm512_fmadd_ps(wo, _mm512_set1_ps(xs[i][STEPS + j]), o[i]);
        }
    }
    UNROLL
    for (size_t i = 0; i < M; i++)
        tot[i][p] = _mm512_add_ps(tot[i][p], _mm512_add_ps(e[i], o[i]));
}

#endif
