/* mxfp4_pairs.h — internal: a pair line of MXFP4 codes with its block scales widened to bf16 pairs
 * on AVX-512 (the tile recipe's AVX-512 and AMX-BF16 sets). */
#ifndef MOE_KERNELS_AVX512_MXFP4_PAIRS_H
#define MOE_KERNELS_AVX512_MXFP4_PAIRS_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/inline.h"
#include "kernels/ref/expert_mxfp4_tile_layout.h"

/* The 16 rows' scales of a block (16 E8M0 bytes) as the addend of their bf16 exponents:
 * dword n holds (s_n - 127) << 7 in both words (two's complement, 16 bits). */
INLINE __m512i mxfp4_delta(const unsigned char *scales)
{
    const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)scales));
    const __m512i t = _mm512_slli_epi32(_mm512_sub_epi32(s, _mm512_set1_epi32(127)), 7);
    /* (t & 0xFFFF) | t << 16 */
    return _mm512_ternarylogic_epi32(t, _mm512_slli_epi32(t, 16), _mm512_set1_epi32(0xFFFF), 0xEC);
}

/* Line r of a block (its 16 code bytes at line: row n's pair, low nibble the even element) to
 * the 16 bf16 pair dwords w[n][2r] | w[n][2r+1] << 16, w = e2m1(code) · 2^(s_n - 127) exactly
 * (moe_mxt_widen): each byte zero-extended to a dword, its nibbles moved to the two words, a
 * 16-entry table lookup, then the exponent addend on the nonzero words. 6 operations. */
INLINE __m512i mxfp4_bf16(const unsigned char *line, __m512i delta)
{
    static const uint16_t table[32] __attribute__((aligned(64))) = MOE_MXT_BF16_TABLE;
    const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)line));
    /* (d | d << 12) & 0x000F000F: the low nibble in the low word, the high one in the high */
    const __m512i idx =
        _mm512_ternarylogic_epi32(d, _mm512_slli_epi32(d, 12), _mm512_set1_epi32(0x000F000F), 0xA8);
    const __m512i v = _mm512_permutexvar_epi16(idx, _mm512_load_si512(table));
    const __mmask32 nz = _mm512_test_epi16_mask(v, _mm512_set1_epi16(0x7FFF));
    return _mm512_mask_add_epi16(v, nz, v, delta);
}

#endif
