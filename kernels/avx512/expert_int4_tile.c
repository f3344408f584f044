/* expert_int4_tile.c — the AVX-512 expert kernel set of the tile recipe for INT4 group weights,
 * 12x16: each block's nibbles widened to the bf16 integers u - 8, the bf16 tile set's two FMA
 * chains per block, one scale FMA per group. */
#include <immintrin.h>

#include "kernels/avx512/expert_f32_common.h"
#include "kernels/avx512/expert_tile_chunk.h"
#include "kernels/avx512/int4_pairs.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "select/kernel.h"

/*
 * For CPUs with AVX-512 but no AMX-BF16 (kernels/expert.h, "The tile recipe", INT4). Per group
 * of gc = G / 32 blocks, each token's group sums C start at +0; per 32-K block the 16 pair lines
 * of each projection's nibbles (the INT4 tile pairs layout, kernels/ref/
 * expert_int4_tile_layout.h) are widened once into a 1 KB buffer of bf16 pair lines
 * (kernels/avx512/int4_pairs.h: u - 8, exact), which the bf16 tile set's chains read as they read
 * a bf16 tile (kernels/avx512/expert_tile_chunk.h: two FMA chains from +0, then their sum into C,
 * all under MXCSR's DAZ and FTZ). After the group MXCSR is put back and each total takes
 * acc = fma(C, s_g, acc) with the rows' 16 scales of the group (no flush); the bias and the
 * activation run under the caller's MXCSR too: the reference's bits.
 *
 * The codes stream once, prefetched 8 KB ahead into L2 (one prefetch per 64-byte line of codes);
 * the buffer and each token's widened chunk of x stay in L1.
 */

#define LINES_BYTES (STEPS * MOE_XL_BF16_LINE) /* one projection's block as bf16 pair lines */

/* Block c of np projections widened: projection p's pair lines at buf + p · LINES_BYTES. */
INLINE void widen_block(const int np, const unsigned char *tile, size_t nb, size_t c,
                        unsigned char *buf)
{
    for (int p = 0; p < np; p++) {
        const unsigned char *codes = tile + moe_i4t_codes_at(np, nb, c, p);
        unsigned char *dst = buf + (size_t)p * LINES_BYTES;
        _Pragma("GCC unroll 16") for (size_t r = 0; r < STEPS; r++)
        {
            if (r % 4 == 0) prefetch_at(codes + 16 * r, PF_BYTES); /* one per 64-byte line */
            _mm512_store_si512(dst + r * MOE_XL_BF16_LINE, int4_bf16(codes + 16 * r));
        }
    }
}

/* The totals over K of np projections for M tokens: per group the blocks' chains in DP's MXCSR
 * (entered before the first chain, left after the group's last sum, fenced on both sides), then
 * the scale FMA under the caller's. */
INLINE void dots(const size_t M, const int np, size_t k, const uint16_t *const *x,
                 const unsigned char *tile, __m512 acc[][2])
{
    const size_t nb = k / CHUNK, gc = moe_i4t_group_blocks(tile, np);
    float xs[MR_TILE][CHUNK] __attribute__((aligned(64)));
    unsigned char buf[2 * LINES_BYTES] __attribute__((aligned(64)));
    UNROLL
    for (size_t i = 0; i < M; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (size_t c0 = 0; c0 < nb; c0 += gc) {
        __m512 cb[MR_TILE][2];
        UNROLL
        for (size_t i = 0; i < M; i++)
            cb[i][0] = cb[i][1] = _mm512_setzero_ps();
        fence_sums(M, acc);
        const dp_state st = dp_enter();
        fence_sums(M, cb);
        for (size_t c = c0; c < c0 + gc; c++) {
            widen_chunk(M, x, k, c, xs);
            widen_block(np, tile, nb, c, buf);
            for (int p = 0; p < np; p++)
                chunk_dp(M, buf + (size_t)p * LINES_BYTES, 0, NULL, 0, (const float(*)[CHUNK])xs,
                         cb, p);
        }
        fence_sums(M, cb);
        dp_leave(st);
        fence_sums(M, cb);
        for (int p = 0; p < np; p++) {
            const __m512 s = _mm512_loadu_ps(tile + moe_i4t_scales_at(np, c0, p));
            UNROLL
            for (size_t i = 0; i < M; i++)
                acc[i][p] = _mm512_fmadd_ps(cb[i][p], s, acc[i][p]);
        }
    }
    fence_sums(M, acc);
}

#include "kernels/avx512/expert_tile_entries.h"

MOE_XL_SET(moe_expert_int4_tile_12x16__avx512, MOE_RECIPE_TILE, MOE_REQ_AVX512, MR_TILE,
           MOE_I4T_SET_LAYOUT, .gateup = gateup_tile, .down = down_tile);
