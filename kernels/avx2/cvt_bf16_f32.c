/* cvt_bf16_f32.c — moe_cvt_bf16_f32__avx2: bf16 -> f32 rows with AVX2. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cvt.h"

/*
 * A bf16 is the upper half of an f32, so the conversion is a zero-extension to 32 bits and
 * a left shift by 16: exact for every code, NaN payloads included. 16 codes per iteration
 * (two 8-wide halves, unaligned loads and stores), then 8, then a scalar tail of up to 7.
 * The kernel is bound by memory, not by these two instructions.
 */
void moe_cvt_bf16_f32__avx2(size_t n, const uint16_t *x, float *y)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i)));
        __m256i b = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i + 8)));
        _mm256_storeu_si256((__m256i *)(y + i), _mm256_slli_epi32(a, 16));
        _mm256_storeu_si256((__m256i *)(y + i + 8), _mm256_slli_epi32(b, 16));
    }
    if (i + 8 <= n) {
        __m256i a = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i)));
        _mm256_storeu_si256((__m256i *)(y + i), _mm256_slli_epi32(a, 16));
        i += 8;
    }
    for (; i < n; i++) {
        uint32_t bits = (uint32_t)x[i] << 16;
        memcpy(&y[i], &bits, sizeof bits);
    }
}
