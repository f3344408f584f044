/* expert_bf16_tile.c — the AVX-512 expert kernel set of the tile recipe, 12x16: tdpbf16ps's
 * arithmetic as two FMA chains per 32-K chunk under DAZ and FTZ. */
#include <immintrin.h>

#include "kernels/avx512/expert_f32_common.h"
#include "kernels/avx512/expert_tile_chunk.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "select/kernel.h"

/*
 * For CPUs with AVX-512 but no AMX-BF16 (or no grant of the tile data). Per chunk of 32 along
 * K and per projection, each token runs the chunk's two chains from +0 (the even elements and
 * the odd ones, 16 FMAs each on the widened bf16 values), then adds them and adds that sum to
 * its total, with MXCSR's DAZ and FTZ set: FMA and ADD then read denormal operands as zero and
 * flush denormal results after rounding, which is what tdpbf16ps does and the reference states
 * (kernels/expert.h, "The tile recipe"). MXCSR is set around the whole K loop and put back
 * before the bias and the activation (kernels/mxcsr_daz_ftz.h), fences keeping each value's
 * arithmetic on its side of the switches. The chunk is padded with zeros, and its padded steps
 * run like the others (a step on zeros can turn a chain's -0 into +0, as the tile unit's does).
 *
 * Register tile 12x16: per token and chunk the two chains of one projection (24 zmm at 12
 * tokens), gate's chunk then up's, each token's totals beside them. The weights stream as the
 * bf16 f32-recipe set reads them (kernels/avx512/expert_f32.c): one 64-byte pair line per step,
 * its even elements by a shift and its odd ones by a mask, prefetched 8 KB ahead into L2 and
 * 2 KB into L1 (kernels/avx512/expert_f32_common.h), gate's L2 line going on to the next tile's
 * up once it would fall in this tile's up. Each token's chunk of x is widened once per chunk
 * into a stack buffer (the even elements, then the odd ones, as f32; zeros past k, read with a
 * masked load so nothing past x[k-1] is touched), from which the FMAs broadcast it.
 */

/* The totals over K of np projections for M tokens (tb: a gate/up tile's bytes), in DP's MXCSR:
 * entered before the first chain, left after the last sum, fenced on both sides. */
INLINE void dots(const size_t M, const int np, size_t k, const uint16_t *const *x,
                 const unsigned char *tile, __m512 tot[][2])
{
    const size_t tb = np == 2 ? moe_xl_tile_gateup_bytes((int64_t)k) : 0;
    const unsigned char *w = tile + moe_xl_bf16_weights(np);
    const unsigned char *up = w + moe_xl_tile_pair_at((int64_t)k, 1, 0);
    float xs[MR_TILE][CHUNK] __attribute__((aligned(64)));
    const dp_state st = dp_enter();
    UNROLL
    for (size_t i = 0; i < M; i++) {
        tot[i][0] = tot[i][1] = _mm512_setzero_ps();
        dp_fence(tot[i][0]);
        dp_fence(tot[i][1]);
    }
    for (size_t c = 0; c < moe_xl_tile_chunks((int64_t)k); c++) {
        widen_chunk(M, x, k, c, xs);
        const size_t off = moe_xl_tile_pair_at((int64_t)k, 0, c * STEPS);
        if (np == 2) {
            chunk_dp(M, w + off, 1, up, tb, (const float(*)[CHUNK])xs, tot, 0);
            chunk_dp(M, up + off, 1, up, 0, (const float(*)[CHUNK])xs, tot, 1);
        } else {
            chunk_dp(M, w + off, 1, w, 0, (const float(*)[CHUNK])xs, tot, 0);
        }
    }
    UNROLL
    for (size_t i = 0; i < M; i++) {
        dp_fence(tot[i][0]);
        dp_fence(tot[i][1]);
    }
    dp_leave(st);
    UNROLL
    for (size_t i = 0; i < M; i++) {
        dp_fence(tot[i][0]);
        dp_fence(tot[i][1]);
    }
}

#include "kernels/avx512/expert_tile_entries.h"

MOE_XL_SET(moe_expert_bf16_tile_12x16__avx512, MOE_RECIPE_TILE, MOE_REQ_AVX512, MR_TILE,
           MOE_XL_TILE_LAYOUT, .gateup = gateup_tile, .down = down_tile);
