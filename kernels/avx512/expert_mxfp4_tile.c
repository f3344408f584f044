/* expert_mxfp4_tile.c — the AVX-512 expert kernel set of the tile recipe for MXFP4 weights, 12x16:
 * each block's codes and scales widened to bf16, then the bf16 tile set's two FMA chains. */
#include <immintrin.h>

#include "kernels/avx512/expert_f32_common.h"
#include "kernels/avx512/expert_tile_chunk.h"
#include "kernels/avx512/mxfp4_pairs.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "select/kernel.h"

/*
 * For CPUs with AVX-512 but no AMX-BF16. Per 32-K block (one chunk of the recipe) and
 * projection, the 16 pair lines of codes (the MXFP4 tile pairs layout, kernels/ref/
 * expert_mxfp4_tile_layout.h) are widened once with the block's scales into a 1 KB buffer of
 * bf16 pair lines (kernels/avx512/mxfp4_pairs.h: e2m1(code) · 2^(s - 127), exact), which the
 * bf16 tile set's chains read as they read a bf16 tile (kernels/avx512/expert_tile_chunk.h: two
 * FMA chains from +0, then their sum into the total, under MXCSR's DAZ and FTZ for the whole K
 * loop; the widening is integer work, which MXCSR does not touch). Bias and activation run
 * under the caller's MXCSR: the reference's bits (kernels/expert.h, "The tile recipe").
 *
 * The codes stream once, prefetched 8 KB ahead into L2 and 2 KB into L1 (one prefetch per
 * 64-byte line of codes); the buffer and each token's widened chunk of x stay in L1.
 */

#define LINES_BYTES (STEPS * MOE_XL_BF16_LINE) /* one projection's block as bf16 pair lines */

/* Block c of np projections widened: projection p's pair lines at buf + p · LINES_BYTES. */
INLINE void widen_block(const int np, const unsigned char *tile, size_t nb, size_t c,
                        unsigned char *buf)
{
    for (int p = 0; p < np; p++) {
        const __m512i delta = mxfp4_delta(tile + moe_mxt_scales_at(np, c, p));
        const unsigned char *codes = tile + moe_mxt_codes_at(np, nb, c, p);
        unsigned char *dst = buf + (size_t)p * LINES_BYTES;
        _Pragma("GCC unroll 16") for (size_t r = 0; r < STEPS; r++)
        {
            if (r % 4 == 0) prefetch_at(codes + 16 * r, PF_BYTES); /* one per 64-byte line */
            _mm512_store_si512(dst + r * MOE_XL_BF16_LINE, mxfp4_bf16(codes + 16 * r, delta));
        }
    }
}

/* The totals over K of np projections for M tokens, in DP's MXCSR (entered before the first
 * chain, left after the last sum, fenced on both sides). */
INLINE void dots(const size_t M, const int np, size_t k, const uint16_t *const *x,
                 const unsigned char *tile, __m512 tot[][2])
{
    const size_t nb = k / CHUNK;
    float xs[MR_TILE][CHUNK] __attribute__((aligned(64)));
    unsigned char buf[2 * LINES_BYTES] __attribute__((aligned(64)));
    const dp_state st = dp_enter();
    UNROLL
    for (size_t i = 0; i < M; i++) {
        tot[i][0] = tot[i][1] = _mm512_setzero_ps();
        dp_fence(tot[i][0]);
        dp_fence(tot[i][1]);
    }
    for (size_t c = 0; c < nb; c++) {
        widen_chunk(M, x, k, c, xs);
        widen_block(np, tile, nb, c, buf);
        for (int p = 0; p < np; p++)
            chunk_dp(M, buf + (size_t)p * LINES_BYTES, 0, NULL, 0, (const float(*)[CHUNK])xs, tot,
                     p);
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

MOE_XL_SET(moe_expert_mxfp4_tile_12x16__avx512, MOE_RECIPE_TILE, MOE_REQ_AVX512, MR_TILE,
           MOE_MXT_SET_LAYOUT, .gateup = gateup_tile, .down = down_tile);
