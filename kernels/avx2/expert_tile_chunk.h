/* expert_tile_chunk.h — internal: the AVX2 tile recipe's chains over one 32-K chunk (two FMA
 * chains per token and row half under DAZ and FTZ), shared by its bf16 and FP8 sets. */
#ifndef MOE_KERNELS_AVX2_EXPERT_TILE_CHUNK_H
#define MOE_KERNELS_AVX2_EXPERT_TILE_CHUNK_H

#include <immintrin.h>
#include <string.h>

#include "kernels/inline.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "kernels/ref/expert_layout.h"

/* kernels/avx2/expert_bf16_tile.c says how the chains run; the FP8 set
 * (kernels/avx2/expert_fp8_tile.c) runs them on its codes widened into bf16 pair lines. */

#define NR MOE_XL_NR
#define MR_TILE 4
#define CHUNK MOE_XL_TILE_CHUNK
#define STEPS (CHUNK / 2) /* pair steps per chunk */
#define PF_BYTES 8192
#define UNROLL _Pragma("GCC unroll 8")

/* A chunk of each token's row as f32: xs[i][j] the even element of pair j, xs[i][STEPS + j]
 * the odd one; zeros past k. */
INLINE void widen_chunk(const size_t M, const uint16_t *const *x, size_t k, size_t c,
                        float (*xs)[CHUNK])
{
    const size_t k0 = c * CHUNK, n = k - k0 < CHUNK ? k - k0 : CHUNK;
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        const uint16_t *src = x[i] + k0;
        uint16_t pad[CHUNK];
        if (n < CHUNK) {
            memset(pad, 0, sizeof pad);
            memcpy(pad, src, n * sizeof pad[0]);
            src = pad;
        }
        UNROLL
        for (size_t h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(src + STEPS * h));
            _mm256_store_si256((__m256i *)(xs[i] + 8 * h), _mm256_slli_epi32(v, 16));
            _mm256_store_si256((__m256i *)(xs[i] + STEPS + 8 * h), _mm256_and_si256(v, hi));
        }
    }
}

/* One chunk of one projection's rows half (the 16 pair lines from l, the half at l + 32·half)
 * into the M tokens' totals tot[i][slot], under DAZ and FTZ. With pf, the first half's pass
 * prefetches each line, its L2 line skip bytes further once it reaches end; lines the caller
 * decoded into a buffer are not. */
INLINE void chunk_dp(const size_t M, const unsigned char *l, int half, const int pf,
                     const unsigned char *end, size_t skip, const float (*xs)[CHUNK],
                     __m256 tot[][4], int slot)
{
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 e[MR_TILE], o[MR_TILE];
    UNROLL
    for (size_t i = 0; i < M; i++) {
        e[i] = o[i] = _mm256_setzero_ps();
        dp_fence(e[i]);
        dp_fence(o[i]);
    }
    for (size_t j = 0; j < STEPS; j++, l += MOE_XL_BF16_LINE) {
        if (pf && half == 0)
            _mm_prefetch((const char *)moe_xl_pair_prefetch(l + PF_BYTES, end, skip), _MM_HINT_T1);
        const __m256i w = _mm256_loadu_si256((const __m256i *)(l + 32 * half));
        const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
        const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(w, hi));
        UNROLL
        for (size_t i = 0; i < M; i++) {
            e[i] = _mm256_fmadd_ps(we, _mm256_broadcast_ss(&xs[i][j]), e[i]);
            o[i] = _mm256_fmadd_ps(wo, _mm256_broadcast_ss(&xs[i][STEPS + j]), o[i]);
        }
    }
    UNROLL
    for (size_t i = 0; i < M; i++)
        tot[i][slot] = _mm256_add_ps(tot[i][slot], _mm256_add_ps(e[i], o[i]));
}

/* The chains of tot fenced (dp_fence), so no step of theirs moves across what follows. */
INLINE void fence_tot(const size_t M, __m256 tot[][4])
{
    UNROLL
    for (size_t i = 0; i < M; i++) {
        UNROLL
        for (int s = 0; s < 4; s++)
            dp_fence(tot[i][s]);
    }
}

/* body(M, ...) with M = m as a compile-time constant, for m = 1..4. */
#define DISPATCH4(body, m, ...)                                                                    \
    do {                                                                                           \
        switch (m) {                                                                               \
        case 1: body(1, __VA_ARGS__); break;                                                       \
        case 2: body(2, __VA_ARGS__); break;                                                       \
        case 3: body(3, __VA_ARGS__); break;                                                       \
        case 4: body(4, __VA_ARGS__); break;                                                       \
        default: break;                                                                            \
        }                                                                                          \
    } while (0)

#endif
