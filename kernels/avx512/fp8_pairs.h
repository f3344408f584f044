/* fp8_pairs.h — internal: 32 FP8 (E4M3) codes in the pairs order widened to bf16 pairs on AVX-512.
 */
#ifndef MOE_KERNELS_AVX512_FP8_PAIRS_H
#define MOE_KERNELS_AVX512_FP8_PAIRS_H

#include <immintrin.h>

#include "kernels/inline.h"

/* Shared by the sets that read FP8 tiles in the pairs order: the bf16 recipe's
 * (kernels/avx512/expert_bf16_body.h) and the tile recipe's (kernels/avx512/expert_fp8_tile.c). */

/* 32 codes in the pairs order (kernels/ref/expert_layout.h) to the bf16 pairs of e4m3(code) ·
 * 2^-8, exactly (4 significant bits, normal in bf16). Normal codes (exponent field e ≥ 1): the
 * magnitude shifted into the bf16 exponent and mantissa, the exponent bias moved from 7 to
 * 127 - 8 (+112 << 7). The 7 subnormal magnitudes and 0 (e = 0) come from a table indexed by
 * the word's low 5 bits (the mantissa, e being 0 there): m · 2^-17. The sign is bit 15 of the
 * sign-extended word. 6 operations: load-widen, shift, 2 ternary logic, test, permute. */
INLINE __m512i fp8_bf16(const unsigned char *codes)
{
    const __m512i sub =
        _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                         0x3860, 0x3840, 0x3820, 0x3800, 0x37C0, 0x3780, 0x3700, 0);
    const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)codes));
    /* (w << 4) & 0x87F0 | 112 << 7: bit 15 of w << 4 is the sign (bit 11 of w), and the
     * magnitude's bits 4-10 do not meet 112 << 7's bits 11-13, so OR adds */
    __m512i v = _mm512_ternarylogic_epi32(_mm512_slli_epi16(w, 4), _mm512_set1_epi16((short)0x87F0),
                                          _mm512_set1_epi16(112 << 7), 0xEA);
    v = _mm512_mask_permutexvar_epi16(v, _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x78)), w,
                                      sub);
    /* v | (w & 0x8000): the table's values take the sign */
    return _mm512_ternarylogic_epi32(v, w, _mm512_set1_epi16((short)0x8000), 0xF8);
}

#endif
