/* expert_mxfp4_tile.c — the AVX2 expert kernel set of the tile recipe for MXFP4 weights, 4x16: each
 * block's codes and scales widened to bf16, then the bf16 tile set's two FMA chains. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/avx2/expert_shared.h"
#include "kernels/avx2/expert_tile_chunk.h"
#include "kernels/inline.h"
#include "kernels/mxcsr_daz_ftz.h"
#include "kernels/ref/expert_mxfp4_tile_layout.h"
#include "select/kernel.h"

/*
 * For CPUs without AVX-512 (kernels/avx512/expert_mxfp4_tile.c is this on zmm). Per 32-K block
 * and projection, the 16 pair lines of codes (the MXFP4 tile pairs layout) are widened once with
 * the block's scales into a 1 KB buffer of bf16 pair lines, which the bf16 tile set's chains
 * read per half of the rows (kernels/avx2/expert_tile_chunk.h), under MXCSR's DAZ and FTZ for
 * the whole K loop; bias and activation under the caller's MXCSR: the reference's bits
 * (kernels/expert.h, "The tile recipe").
 *
 * The widening, 8 rows per ymm: each code byte zero-extended to a dword, its nibbles moved to
 * the two words; each word's nibble i repeated into both its bytes selects, by vpshufb, the low
 * byte of the bf16 of e2m1(i) from one 16-byte table and the high byte from another, blended per
 * byte; the nonzero words then take (s_n - 127) << 7 in the exponent (exact for the scales
 * packing admits).
 */

#define LINES_BYTES (STEPS * MOE_XL_BF16_LINE) /* one projection's block as bf16 pair lines */

/* The addend of rows 8h .. 8h + 7's exponents: dword n, both words, (s_n - 127) << 7. */
INLINE __m256i delta8(const unsigned char *scales)
{
    const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)scales));
    const __m256i t = _mm256_slli_epi32(_mm256_sub_epi32(s, _mm256_set1_epi32(127)), 7);
    return _mm256_or_si256(_mm256_and_si256(t, _mm256_set1_epi32(0xFFFF)),
                           _mm256_slli_epi32(t, 16));
}

/* 8 code bytes (rows 8h .. 8h + 7 of one pair line) to their 8 bf16 pair dwords. */
INLINE __m256i widen8(const unsigned char *codes, __m256i delta)
{
    const __m256i lo = _mm256_setr_epi8(
        0, 0, (char)0x80, (char)0xC0, 0, 0x40, (char)0x80, (char)0xC0, 0, 0, (char)0x80, (char)0xC0,
        0, 0x40, (char)0x80, (char)0xC0, 0, 0, (char)0x80, (char)0xC0, 0, 0x40, (char)0x80,
        (char)0xC0, 0, 0, (char)0x80, (char)0xC0, 0, 0x40, (char)0x80, (char)0xC0);
    const __m256i hi =
        _mm256_setr_epi8(0, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, (char)0x80, (char)0xBF,
                         (char)0xBF, (char)0xBF, (char)0xC0, (char)0xC0, (char)0xC0, (char)0xC0, 0,
                         0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40, (char)0x80, (char)0xBF,
                         (char)0xBF, (char)0xBF, (char)0xC0, (char)0xC0, (char)0xC0, (char)0xC0);
    const __m256i d = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)codes));
    const __m256i idx = _mm256_and_si256(_mm256_or_si256(d, _mm256_slli_epi32(d, 12)),
                                         _mm256_set1_epi32(0x000F000F));
    const __m256i ctl = _mm256_or_si256(idx, _mm256_slli_epi16(idx, 8));
    const __m256i v = _mm256_blendv_epi8(_mm256_shuffle_epi8(lo, ctl), _mm256_shuffle_epi8(hi, ctl),
                                         _mm256_set1_epi16((short)0xFF00));
    const __m256i zero =
        _mm256_cmpeq_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x7FFF)), _mm256_setzero_si256());
    return _mm256_add_epi16(v, _mm256_andnot_si256(zero, delta));
}

/* Block c of np projections widened: projection p's pair lines at buf + p · LINES_BYTES. */
INLINE void widen_block(const int np, const unsigned char *tile, size_t nb, size_t c,
                        unsigned char *buf)
{
    for (int p = 0; p < np; p++) {
        const unsigned char *sc = tile + moe_mxt_scales_at(np, c, p);
        const __m256i d0 = delta8(sc), d1 = delta8(sc + 8);
        const unsigned char *codes = tile + moe_mxt_codes_at(np, nb, c, p);
        unsigned char *dst = buf + (size_t)p * LINES_BYTES;
        for (size_t r = 0; r < STEPS; r++) {
            if (r % 4 == 0) /* one per 64-byte line */
                _mm_prefetch((const char *)codes + 16 * r + PF_BYTES, _MM_HINT_T1);
            _mm256_store_si256((__m256i *)(dst + r * MOE_XL_BF16_LINE), widen8(codes + 16 * r, d0));
            _mm256_store_si256((__m256i *)(dst + r * MOE_XL_BF16_LINE + 32),
                               widen8(codes + 16 * r + 8, d1));
        }
    }
}

/* The totals over K of np projections for M tokens (slots 0-1 the first projection's rows 0-7
 * and 8-15, 2-3 up's), in DP's MXCSR (entered before the first chain, left after the last sum,
 * fenced on both sides). */
INLINE void dots(const size_t M, const int np, size_t k, const uint16_t *const *x,
                 const unsigned char *tile, __m256 tot[][4])
{
    const size_t nb = k / CHUNK;
    float xs[MR_TILE][CHUNK] __attribute__((aligned(32)));
    unsigned char buf[2 * LINES_BYTES] __attribute__((aligned(32)));
    UNROLL
    for (size_t i = 0; i < M; i++)
        tot[i][0] = tot[i][1] = tot[i][2] = tot[i][3] = _mm256_setzero_ps();
    fence_tot(M, tot);
    const dp_state st = dp_enter();
    fence_tot(M, tot);
    for (size_t c = 0; c < nb; c++) {
        widen_chunk(M, x, k, c, xs);
        widen_block(np, tile, nb, c, buf);
        const float(*cx)[CHUNK] = (const float(*)[CHUNK])xs;
        UNROLL
        for (int half = 0; half < 2; half++)
            for (int p = 0; p < np; p++)
                chunk_dp(M, buf + (size_t)p * LINES_BYTES, half, 0, NULL, 0, cx, tot, 2 * p + half);
    }
    fence_tot(M, tot);
    dp_leave(st);
    fence_tot(M, tot);
}

#include "kernels/avx2/expert_tile_entries.h"

MOE_XL_SET(moe_expert_mxfp4_tile_4x16__avx2, MOE_RECIPE_TILE, MOE_REQ_AVX2, MR_TILE,
           MOE_MXT_SET_LAYOUT, .gateup = gateup_tile, .down = down_tile);
