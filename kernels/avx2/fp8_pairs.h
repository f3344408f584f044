/* fp8_pairs.h — internal: AVX2 decode of the FP8 pairs layout's codes into bf16 weight pairs. */
#ifndef MOE_KERNELS_AVX2_FP8_PAIRS_H
#define MOE_KERNELS_AVX2_FP8_PAIRS_H

#include <immintrin.h>

#include "kernels/inline.h"

/* Shared by the sets that read FP8 tiles in the pairs order (kernels/ref/expert_layout.h): the
 * bf16 recipe's (kernels/avx2/expert_bf16.c) and the tile recipe's
 * (kernels/avx2/expert_fp8_tile.c). */

/* 32 codes (a projection's pair of 16 rows) to the bf16 words of e4m3(code) · 2^-8, rows 0-7
 * in v[0] and 8-15 in v[1], built byte by byte from the code's fields (exponent e, bits 3-6;
 * mantissa m, bits 0-2). Normal codes (e ≥ 1): bf16 exponent e + 112, so the low byte is
 * (e & 1) << 7 | m << 4, a table on the code's low nibble, and the high byte 56 + (e >> 1),
 * the code's bits 4-6 plus 56. Subnormal codes and zero (e = 0), m · 2^-17: both bytes from
 * tables on m. Then the sign, and the bytes paired into words (the code's quadwords first put
 * in the order the in-lane unpacks need). */
INLINE void fp8_bf16_32(const unsigned char *codes, __m256i v[2])
{
    const __m256i lo_tab =
        _mm256_setr_epi8(0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, (char)0x80, (char)0x90,
                         (char)0xA0, (char)0xB0, (char)0xC0, (char)0xD0, (char)0xE0, (char)0xF0,
                         0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, (char)0x80, (char)0x90,
                         (char)0xA0, (char)0xB0, (char)0xC0, (char)0xD0, (char)0xE0, (char)0xF0);
    const __m256i sub_lo =
        _mm256_setr_epi8(0, 0, (char)0x80, (char)0xC0, 0, 0x20, 0x40, 0x60, 0, 0, 0, 0, 0, 0, 0, 0,
                         0, 0, (char)0x80, (char)0xC0, 0, 0x20, 0x40, 0x60, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i sub_hi =
        _mm256_setr_epi8(0, 0x37, 0x37, 0x37, 0x38, 0x38, 0x38, 0x38, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                         0x37, 0x37, 0x37, 0x38, 0x38, 0x38, 0x38, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i c = _mm256_permute4x64_epi64(_mm256_loadu_si256((const __m256i *)codes), 0xD8);
    const __m256i nl = _mm256_and_si256(c, _mm256_set1_epi8(0x0F));
    const __m256i nh = _mm256_and_si256(_mm256_srli_epi16(c, 4), _mm256_set1_epi8(0x07));
    const __m256i sub =
        _mm256_cmpeq_epi8(_mm256_and_si256(c, _mm256_set1_epi8(0x78)), _mm256_setzero_si256());
    const __m256i lo =
        _mm256_blendv_epi8(_mm256_shuffle_epi8(lo_tab, nl), _mm256_shuffle_epi8(sub_lo, nl), sub);
    __m256i hi = _mm256_blendv_epi8(_mm256_add_epi8(nh, _mm256_set1_epi8(56)),
                                    _mm256_shuffle_epi8(sub_hi, nl), sub);
    hi = _mm256_or_si256(hi, _mm256_and_si256(c, _mm256_set1_epi8((char)0x80)));
    v[0] = _mm256_unpacklo_epi8(lo, hi);
    v[1] = _mm256_unpackhi_epi8(lo, hi);
}

#endif
