/* cvt_e4m3_f32.c — moe_cvt_e4m3_f32__avx512: FP8 E4M3 -> f32 rows with AVX-512. */
#include <immintrin.h>

#include "kernels/cvt.h"

/*
 * 16 codes per step, the same recipe as the AVX2 kernel with mask registers for the two
 * special cases. With m = code & 0x7F: normal codes are m << 20 rebiased by (127-7) << 23;
 * subnormals (m < 8) are m * 2^-9 via an exact int -> float conversion; m = 0x7F is the
 * contract's quiet NaN; then the sign moves from bit 7 to bit 31. The tail is one masked
 * step, so nothing outside the row is read or written.
 */
static inline __m512i cvt16(__m128i codes)
{
    const __m512i c = _mm512_cvtepu8_epi32(codes);
    const __m512i m = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24);
    __m512i bits = _mm512_add_epi32(_mm512_slli_epi32(m, 20), _mm512_set1_epi32(120 << 23));
    __m512i sub =
        _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1p-9f)));
    bits = _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(m, _mm512_set1_epi32(8)), bits, sub);
    bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(m, _mm512_set1_epi32(0x7F)), bits,
                                   _mm512_set1_epi32((int)MOE_CVT_QNAN_BITS));
    return _mm512_or_si512(bits, sign);
}

void moe_cvt_e4m3_f32__avx512(size_t n, const uint8_t *x, float *y)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m128i a = _mm_loadu_si128((const __m128i *)(x + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(x + i + 16));
        _mm512_storeu_si512(y + i, cvt16(a));
        _mm512_storeu_si512(y + i + 16, cvt16(b));
    }
    if (i + 16 <= n) {
        _mm512_storeu_si512(y + i, cvt16(_mm_loadu_si128((const __m128i *)(x + i))));
        i += 16;
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_epi32(y + i, m, cvt16(_mm_maskz_loadu_epi8(m, x + i)));
    }
}
