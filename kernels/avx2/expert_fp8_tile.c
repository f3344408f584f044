/* expert_fp8_tile.c — the AVX2 expert kernel set of the tile recipe for FP8 block weights, 4x16:
 * the codes widened to bf16 per 32-K chunk, then the bf16 tile set's two FMA chains. */
#include <immintrin.h>

#include "kernels/avx2/expert_shared.h"
#include "kernels/avx2/expert_tile_chunk.h"
#include "kernels/avx2/fp8_pairs.h"
#include "kernels/inline.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "kernels/ref/expert_layout.h"
#include "select/kernel.h"

/*
 * For CPUs without AVX-512 (kernels/avx512/expert_fp8_tile.c is this on zmm). Per 128-K block
 * (4 chunks of 32, fewer in the last), each token's per-block sums C start at +0; per chunk the
 * 16 pairs of each projection's codes (the FP8 pairs layout) are widened once into a 1 KB
 * buffer of bf16 pair lines (kernels/avx2/fp8_pairs.h; pairs past the tile's kpad / 2 zeros),
 * which the bf16 tile set's chains read per half of the rows (kernels/avx2/
 * expert_tile_chunk.h), under MXCSR's DAZ and FTZ. After the block MXCSR is put back and each
 * total takes acc = fma(C, s_b, acc) (no flush); bias and activation run under the caller's
 * MXCSR: the reference's bits (kernels/expert.h, "The tile recipe"). The codes are prefetched
 * 8 KB ahead into L2 as the widening loop reads them.
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
        if (np == 2 || j % 2 == 0) /* one per 64-byte line */
            _mm_prefetch((const char *)src + PF_BYTES, _MM_HINT_T1);
        for (int p = 0; p < np; p++) {
            __m256i v[2];
            unsigned char *l = buf + (size_t)p * LINES_BYTES + j * MOE_XL_BF16_LINE;
            fp8_bf16_32(src + 32 * (size_t)p, v);
            _mm256_store_si256((__m256i *)l, v[0]);
            _mm256_store_si256((__m256i *)(l + 32), v[1]);
        }
    }
    for (; j < STEPS; j++)
        for (int p = 0; p < np; p++) {
            unsigned char *l = buf + (size_t)p * LINES_BYTES + j * MOE_XL_BF16_LINE;
            _mm256_store_si256((__m256i *)l, _mm256_setzero_si256());
            _mm256_store_si256((__m256i *)(l + 32), _mm256_setzero_si256());
        }
}

/* The totals over K of np projections for M tokens (slots 0-1 the first projection's rows 0-7
 * and 8-15, 2-3 up's): per block the chunks' chains in DP's MXCSR (entered before the first
 * chain, left after the block's last sum, fenced on both sides), then the scale FMA under the
 * caller's. */
INLINE void dots(const size_t M, const int np, size_t k, const uint16_t *const *x,
                 const unsigned char *tile, __m256 acc[][4])
{
    const unsigned char *sc = tile + moe_xl_bias_bytes(np);
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, np);
    const size_t pairs = (size_t)moe_xl_kpad((int64_t)k) / 2;
    const size_t chunks = moe_xl_tile_chunks((int64_t)k);
    float xs[MR_TILE][CHUNK] __attribute__((aligned(32)));
    unsigned char buf[2 * LINES_BYTES] __attribute__((aligned(32)));
    UNROLL
    for (size_t i = 0; i < M; i++)
        acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm256_setzero_ps();
    for (size_t c0 = 0; c0 < chunks; c0 += BLOCK_CHUNKS, sc += 4 * (size_t)np) {
        const size_t c1 = c0 + BLOCK_CHUNKS < chunks ? c0 + BLOCK_CHUNKS : chunks;
        __m256 cb[MR_TILE][4];
        UNROLL
        for (size_t i = 0; i < M; i++)
            cb[i][0] = cb[i][1] = cb[i][2] = cb[i][3] = _mm256_setzero_ps();
        fence_tot(M, acc);
        const dp_state st = dp_enter();
        fence_tot(M, cb);
        for (size_t c = c0; c < c1; c++) {
            widen_chunk(M, x, k, c, xs);
            widen_codes(np, codes, pairs, c, buf);
            const float(*cx)[CHUNK] = (const float(*)[CHUNK])xs;
            UNROLL
            for (int half = 0; half < 2; half++)
                for (int p = 0; p < np; p++)
                    chunk_dp(M, buf + (size_t)p * LINES_BYTES, half, 0, NULL, 0, cx, cb,
                             2 * p + half);
        }
        fence_tot(M, cb);
        dp_leave(st);
        fence_tot(M, cb);
        UNROLL
        for (int s = 0; s < 2 * np; s++) {
            const __m256 sv = _mm256_set1_ps(load_f32(sc + 4 * (size_t)(s / 2)));
            UNROLL
            for (size_t i = 0; i < M; i++)
                acc[i][s] = _mm256_fmadd_ps(cb[i][s], sv, acc[i][s]);
        }
    }
    fence_tot(M, acc);
}

#include "kernels/avx2/expert_tile_entries.h"

MOE_XL_SET(moe_expert_fp8_tile_4x16__avx2, MOE_RECIPE_TILE, MOE_REQ_AVX2, MR_TILE,
           MOE_XL_FP8_LAYOUT(fp8p), .gateup = gateup_tile, .down = down_tile);
