/* cvt_bf16_f32.c — moe_cvt_bf16_f32__avx512: bf16 -> f32 rows with AVX-512. */
#include <immintrin.h>

#include "kernels/cvt.h"

/*
 * Zero-extend each bf16 to 32 bits and shift it into the upper half (exact for every code,
 * NaN payloads included). 32 codes per iteration, then 16, then one masked step for the
 * last 1..15: masked-off lanes are neither loaded nor stored, so nothing outside the row is
 * touched whatever its alignment.
 */
static inline __m512i widen16(__m256i codes)
{
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(codes), 16);
}

void moe_cvt_bf16_f32__avx512(size_t n, const uint16_t *x, float *y)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i a = widen16(_mm256_loadu_si256((const __m256i *)(x + i)));
        __m512i b = widen16(_mm256_loadu_si256((const __m256i *)(x + i + 16)));
        _mm512_storeu_si512(y + i, a);
        _mm512_storeu_si512(y + i + 16, b);
    }
    if (i + 16 <= n) {
        _mm512_storeu_si512(y + i, widen16(_mm256_loadu_si256((const __m256i *)(x + i))));
        i += 16;
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_epi32(y + i, m, widen16(_mm256_maskz_loadu_epi16(m, x + i)));
    }
}
