/* expert_bf16_tile.c — the AVX2 expert kernel set of the tile recipe, 4x16: tdpbf16ps's arithmetic
 * as two FMA chains per 32-K chunk under DAZ and FTZ. */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx2/expert_shared.h"
#include "kernels/avx2/expert_tile_chunk.h"
#include "kernels/inline.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "kernels/ref/expert_layout.h"
#include "select/kernel.h"

/*
 * For CPUs without AVX-512 (kernels/avx512/expert_bf16_tile.c is this on zmm). Per chunk of 32
 * along K, per projection and per half of the tile's rows (0-7, 8-15: one ymm), each token runs
 * the chunk's two chains from +0 (even elements, odd elements; 16 FMAs each on the widened bf16
 * values), then adds them and adds that sum to its total, with MXCSR's DAZ and FTZ set around
 * the whole K loop (kernels/mxcsr_daz_ftz.h): the reference's bits (kernels/expert.h, "The tile
 * recipe"). Bias and activation run under the caller's MXCSR. The chunk is padded with zeros,
 * and its padded steps run like the others.
 *
 * Up to MR = 4 tokens: 8 chains, the half-line's two weight vectors and the broadcasts fill the
 * 16 ymm. A half-line is 32 bytes of a 64-byte pair line (the even elements by a shift, the odd
 * ones by a mask); the second half's pass reads the chunk's lines from L1, the first prefetches
 * them 8 KB ahead into L2 (gate's going on to the next tile's up once it would fall in this
 * tile's up, as in the other sets). Each token's chunk of x is widened once per chunk into a
 * stack buffer (the last chunk copied into zeros first: nothing past x[k-1] is read).
 */

/* The totals over K of np projections for M tokens (tb: a gate/up tile's bytes): slots 0-1 the
 * first projection's rows 0-7 and 8-15, 2-3 up's; in DP's MXCSR, fenced on both sides. */
INLINE void dots(const size_t M, const int np, size_t k, const uint16_t *const *x,
                 const unsigned char *tile, __m256 tot[][4])
{
    const size_t tb = np == 2 ? moe_xl_tile_gateup_bytes((int64_t)k) : 0;
    const unsigned char *w = tile + moe_xl_bf16_weights(np);
    const unsigned char *up = w + moe_xl_tile_pair_at((int64_t)k, 1, 0);
    float xs[MR_TILE][CHUNK] __attribute__((aligned(32)));
    const dp_state st = dp_enter();
    UNROLL
    for (size_t i = 0; i < M; i++)
        tot[i][0] = tot[i][1] = tot[i][2] = tot[i][3] = _mm256_setzero_ps();
    fence_tot(M, tot);
    for (size_t c = 0; c < moe_xl_tile_chunks((int64_t)k); c++) {
        widen_chunk(M, x, k, c, xs);
        const size_t off = moe_xl_tile_pair_at((int64_t)k, 0, c * STEPS);
        const float(*cx)[CHUNK] = (const float(*)[CHUNK])xs;
        UNROLL
        for (int half = 0; half < 2; half++) {
            if (np == 2) {
                chunk_dp(M, w + off, half, 1, up, tb, cx, tot, half);
                chunk_dp(M, up + off, half, 1, up, 0, cx, tot, 2 + half);
            } else {
                chunk_dp(M, w + off, half, 1, w, 0, cx, tot, half);
            }
        }
    }
    fence_tot(M, tot);
    dp_leave(st);
    fence_tot(M, tot);
}

#include "kernels/avx2/expert_tile_entries.h"

MOE_XL_SET(moe_expert_bf16_tile_4x16__avx2, MOE_RECIPE_TILE, MOE_REQ_AVX2, MR_TILE,
           MOE_XL_TILE_LAYOUT, .gateup = gateup_tile, .down = down_tile);
