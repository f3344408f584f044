/* expert_int4_tile.c — the AVX2 expert kernel set of the tile recipe for INT4 group weights, 4x16:
 * each block's nibbles widened to the bf16 integers u - 8, the bf16 tile set's two FMA chains per
 * block, one scale FMA per group. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/avx2/expert_shared.h"
#include "kernels/avx2/expert_tile_chunk.h"
#include "kernels/inline.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "kernels/ref/expert_int4_tile_layout.h"
#include "select/kernel.h"

/*
 * For CPUs without AVX-512 (kernels/avx512/expert_int4_tile.c is this on zmm). Per group of
 * gc = G / 32 blocks, each token's group sums C start at +0; per block and projection the 16
 * pair lines of nibbles (the INT4 tile pairs layout) are widened once into a 1 KB buffer of bf16
 * pair lines, which the bf16 tile set's chains read per half of the rows (kernels/avx2/
 * expert_tile_chunk.h), under MXCSR's DAZ and FTZ. After the group MXCSR is put back and each
 * total takes acc = fma(C, s_g, acc) with its rows' scales (no flush); bias and activation under
 * the caller's MXCSR: the reference's bits (kernels/expert.h, "The tile recipe").
 *
 * The widening, 8 rows per ymm: each code byte zero-extended to a dword, its nibbles moved to
 * the two words; each word's nibble u repeated into both its bytes selects, by vpshufb, the low
 * byte of the bf16 of u - 8 from one 16-byte table and the high byte from another, blended per
 * byte (MOE_I4T_BF16_TABLE split in two).
 */

#define LINES_BYTES (STEPS * MOE_XL_BF16_LINE) /* one projection's block as bf16 pair lines */

/* 8 code bytes (rows 8h .. 8h + 7 of one pair line) to their 8 bf16 pair dwords. */
INLINE __m256i widen8(const unsigned char *codes)
{
    const __m256i lo =
        _mm256_setr_epi8(0, (char)0xE0, (char)0xC0, (char)0xA0, (char)0x80, 0x40, 0, (char)0x80, 0,
                         (char)0x80, 0, 0x40, (char)0x80, (char)0xA0, (char)0xC0, (char)0xE0, 0,
                         (char)0xE0, (char)0xC0, (char)0xA0, (char)0x80, 0x40, 0, (char)0x80, 0,
                         (char)0x80, 0, 0x40, (char)0x80, (char)0xA0, (char)0xC0, (char)0xE0);
    const __m256i hi =
        _mm256_setr_epi8((char)0xC1, (char)0xC0, (char)0xC0, (char)0xC0, (char)0xC0, (char)0xC0,
                         (char)0xC0, (char)0xBF, 0, 0x3F, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40,
                         (char)0xC1, (char)0xC0, (char)0xC0, (char)0xC0, (char)0xC0, (char)0xC0,
                         (char)0xC0, (char)0xBF, 0, 0x3F, 0x40, 0x40, 0x40, 0x40, 0x40, 0x40);
    const __m256i d = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)codes));
    const __m256i idx = _mm256_and_si256(_mm256_or_si256(d, _mm256_slli_epi32(d, 12)),
                                         _mm256_set1_epi32(0x000F000F));
    const __m256i ctl = _mm256_or_si256(idx, _mm256_slli_epi16(idx, 8));
    return _mm256_blendv_epi8(_mm256_shuffle_epi8(lo, ctl), _mm256_shuffle_epi8(hi, ctl),
                              _mm256_set1_epi16((short)0xFF00));
}

/* Block c of np projections widened: projection p's pair lines at buf + p · LINES_BYTES. */
INLINE void widen_block(const int np, const unsigned char *tile, size_t nb, size_t c,
                        unsigned char *buf)
{
    for (int p = 0; p < np; p++) {
        const unsigned char *codes = tile + moe_i4t_codes_at(np, nb, c, p);
        unsigned char *dst = buf + (size_t)p * LINES_BYTES;
        for (size_t r = 0; r < STEPS; r++) {
            if (r % 4 == 0) /* one per 64-byte line */
                _mm_prefetch((const char *)codes + 16 * r + PF_BYTES, _MM_HINT_T1);
            _mm256_store_si256((__m256i *)(dst + r * MOE_XL_BF16_LINE), widen8(codes + 16 * r));
            _mm256_store_si256((__m256i *)(dst + r * MOE_XL_BF16_LINE + 32),
                               widen8(codes + 16 * r + 8));
        }
    }
}

/* The totals over K of np projections for M tokens (slots 0-1 the first projection's rows 0-7
 * and 8-15, 2-3 up's): per group the blocks' chains in DP's MXCSR (entered before the first
 * chain, left after the group's last sum, fenced on both sides), then the scale FMA under the
 * caller's. */
INLINE void dots(const size_t M, const int np, size_t k, const uint16_t *const *x,
                 const unsigned char *tile, __m256 acc[][4])
{
    const size_t nb = k / CHUNK, gc = moe_i4t_group_blocks(tile, np);
    float xs[MR_TILE][CHUNK] __attribute__((aligned(32)));
    unsigned char buf[2 * LINES_BYTES] __attribute__((aligned(32)));
    UNROLL
    for (size_t i = 0; i < M; i++)
        acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm256_setzero_ps();
    for (size_t c0 = 0; c0 < nb; c0 += gc) {
        __m256 cb[MR_TILE][4];
        UNROLL
        for (size_t i = 0; i < M; i++)
            cb[i][0] = cb[i][1] = cb[i][2] = cb[i][3] = _mm256_setzero_ps();
        fence_tot(M, acc);
        const dp_state st = dp_enter();
        fence_tot(M, cb);
        for (size_t c = c0; c < c0 + gc; c++) {
            widen_chunk(M, x, k, c, xs);
            widen_block(np, tile, nb, c, buf);
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
            const __m256 sv = _mm256_loadu_ps(
                (const float *)(tile + moe_i4t_scales_at(np, c0, s / 2)) + 8 * (s % 2));
            UNROLL
            for (size_t i = 0; i < M; i++)
                acc[i][s] = _mm256_fmadd_ps(cb[i][s], sv, acc[i][s]);
        }
    }
    fence_tot(M, acc);
}

#include "kernels/avx2/expert_tile_entries.h"

MOE_XL_SET(moe_expert_int4_tile_4x16__avx2, MOE_RECIPE_TILE, MOE_REQ_AVX2, MR_TILE,
           MOE_I4T_SET_LAYOUT, .gateup = gateup_tile, .down = down_tile);
