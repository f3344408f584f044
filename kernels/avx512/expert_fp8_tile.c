/* expert_fp8_tile.c — the AVX-512 expert kernel set of the tile recipe for FP8 block weights,
 * 12x16: the codes widened to bf16 per 32-K chunk, then the bf16 tile set's two FMA chains. */
#include <immintrin.h>

#include "kernels/avx512/expert_f32_common.h"
#include "kernels/avx512/expert_tile_chunk.h"
#include "kernels/avx512/fp8_pairs.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "select/kernel.h"

/*
 * For CPUs with AVX-512 but no AMX-BF16. Per 128-K block (4 chunks of 32, fewer in the last),
 * each token's per-block sums C start at +0; per chunk the 16 pairs of each projection's codes
 * (the FP8 pairs layout, kernels/ref/expert_layout.h) are widened once into a 1 KB buffer of
 * bf16 pair lines (kernels/avx512/fp8_pairs.h: the bf16 of e4m3(code) · 2^-8, exact; pairs
 * past the tile's kpad / 2 zeros), which the bf16 tile set's chains read as they read a bf16
 * tile (kernels/avx512/expert_tile_chunk.h: two FMA chains from +0, then their sum into C, all
 * under MXCSR's DAZ and FTZ). After the block MXCSR is put back and each total takes
 * acc = fma(C, s_b, acc) with the packed scale s_b (no flush); the bias and the activation run
 * under the caller's MXCSR too: the reference's bits (kernels/expert.h, "The tile recipe").
 *
 * The codes stream once from memory, prefetched 8 KB ahead into L2 and 2 KB into L1 (the
 * widening loop touches each 64-byte line of codes once); the buffer and each token's widened
 * chunk of x stay in L1.
 */

#define BLOCK_CHUNKS (MOE_XL_KB / CHUNK)
#define LINES_BYTES (STEPS * MOE_XL_BF16_LINE) /* one projection's chunk as bf16 pair lines */

/* Chunk c's pairs of np projections widened to bf16 pair lines: projection p's at
 * buf + p · LINES_BYTES, line j the pair 16c + j; zeros from pair `pairs` (kpad / 2) on. */
INLINE void widen_codes(const int np, const unsigned char *codes, size_t pairs, size_t c,
                        unsigned char *buf)
{
    const size_t q0 = c * STEPS, step = moe_xl_fp8_step_bytes(np) * 2;
    const size_t n = pairs - q0 < STEPS ? pairs - q0 : STEPS;
    const unsigned char *src = codes + q0 * step;
    size_t j = 0;
    for (; j < n; j++, src += step) {
        if (np == 2 || j % 2 == 0) prefetch_at(src, PF_BYTES); /* one per 64-byte line */
        for (int p = 0; p < np; p++)
            _mm512_store_si512(buf + (size_t)p * LINES_BYTES + j * MOE_XL_BF16_LINE,
                               fp8_bf16(src + 32 * (size_t)p));
    }
    for (; j < STEPS; j++)
        for (int p = 0; p < np; p++)
            _mm512_store_si512(buf + (size_t)p * LINES_BYTES + j * MOE_XL_BF16_LINE,
                               _mm512_setzero_si512());
}

/* The totals over K of np projections for M tokens: per block the chunks' chains in DP's MXCSR
 * (entered before the first chain, left after the block's last sum, fenced on both sides),
 * then the scale FMA under the caller's. */
INLINE void dots(const size_t M, const int np, size_t k, const uint16_t *const *x,
                 const unsigned char *tile, __m512 acc[][2])
{
    const unsigned char *sc = tile + moe_xl_bias_bytes(np);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, np);
    const size_t pairs = (size_t)moe_xl_kpad((int64_t)k) / 2;
    const size_t chunks = moe_xl_tile_chunks((int64_t)k);
    float xs[MR_TILE][CHUNK] __attribute__((aligned(64)));
    unsigned char buf[2 * LINES_BYTES] __attribute__((aligned(64)));
    UNROLL
    for (size_t i = 0; i < M; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (size_t c0 = 0; c0 < chunks; c0 += BLOCK_CHUNKS, sc += 4 * (size_t)np) {
        const size_t c1 = c0 + BLOCK_CHUNKS < chunks ? c0 + BLOCK_CHUNKS : chunks;
        __m512 cb[MR_TILE][2];
        UNROLL
        for (size_t i = 0; i < M; i++)
            cb[i][0] = cb[i][1] = _mm512_setzero_ps();
        fence_sums(M, acc);
        const dp_state st = dp_enter();
        fence_sums(M, cb);
        for (size_t c = c0; c < c1; c++) {
            widen_chunk(M, x, k, c, xs);
            widen_codes(np, codes, pairs, c, buf);
            for (int p = 0; p < np; p++)
                chunk_dp(M, buf + (size_t)p * LINES_BYTES, 0, NULL, 0, (const float(*)[CHUNK])xs,
                         cb, p);
        }
        fence_sums(M, cb);
        dp_leave(st);
        fence_sums(M, cb);
        for (int p = 0; p < np; p++) {
            const __m512 s = _mm512_set1_ps(load_f32(sc + 4 * (size_t)p));
            UNROLL
            for (size_t i = 0; i < M; i++)
                acc[i][p] = _mm512_fmadd_ps(cb[i][p], s, acc[i][p]);
        }
    }
    fence_sums(M, acc);
}

#include "kernels/avx512/expert_tile_entries.h"

MOE_XL_SET(moe_expert_fp8_tile_12x16__avx512, MOE_RECIPE_TILE, MOE_REQ_AVX512, MR_TILE,
           MOE_XL_FP8_LAYOUT(fp8p), .gateup = gateup_tile, .down = down_tile);
