/* cvt_e4m3_f32.c — moe_cvt_e4m3_f32__avx2: FP8 E4M3 -> f32 rows with AVX2. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cvt.h"

/*
 * 8 codes per step, each widened to a 32-bit lane. With m = code & 0x7F:
 *  - normal (m >= 8): the f32 bits are m << 20 plus (127 - 7) << 23: the 4 exponent bits
 *    land in the f32 exponent field and are rebiased from 7 to 127, the 3 mantissa bits
 *    become the top of the f32 mantissa;
 *  - subnormal (m < 8): the value is m * 2^-9, exact through an int -> float conversion
 *    (no denormal operand, so no microcode assist);
 *  - m = 0x7F is NaN, the contract's quiet NaN;
 * and the sign bit moves from bit 7 to bit 31. The last 1..7 codes go through a zero-padded
 * copy.
 */
static __m256i cvt8(__m128i codes)
{
    const __m256i c = _mm256_cvtepu8_epi32(codes);
    const __m256i m = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(m, 20), _mm256_set1_epi32(120 << 23));
    __m256i sub =
        _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-9f)));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), m);
    __m256i is_nan = _mm256_cmpeq_epi32(m, _mm256_set1_epi32(0x7F));
    __m256i bits = _mm256_blendv_epi8(normal, sub, is_sub);
    bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32((int)MOE_CVT_QNAN_BITS), is_nan);
    return _mm256_or_si256(bits, sign);
}

void moe_cvt_e4m3_f32__avx2(size_t n, const uint8_t *x, float *y)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i q = _mm_loadu_si128((const __m128i *)(x + i));
        _mm256_storeu_si256((__m256i *)(y + i), cvt8(q));
        _mm256_storeu_si256((__m256i *)(y + i + 8), cvt8(_mm_unpackhi_epi64(q, q)));
    }
    if (i + 8 <= n) {
        _mm256_storeu_si256((__m256i *)(y + i), cvt8(_mm_loadl_epi64((const __m128i *)(x + i))));
        i += 8;
    }
    if (i < n) {
        uint8_t in[8] = {0};
        float out[8];
        memcpy(in, x + i, n - i);
        _mm256_storeu_si256((__m256i *)out, cvt8(_mm_loadl_epi64((const __m128i *)in)));
        memcpy(y + i, out, (n - i) * sizeof *y);
    }
}
