/* cvt_f16_f32.c — moe_cvt_f16_f32__avx512: IEEE half -> f32 rows with AVX-512. */
#include <immintrin.h>

#include "kernels/cvt.h"

/*
 * vcvtph2ps on 16 halves at a time: exact, NaNs quieted with sign and payload kept (the
 * contract of cvt.h). 32 per iteration, then 16, then one masked step for the last 1..15.
 */
void moe_cvt_f16_f32__avx512(size_t n, const uint16_t *x, float *y)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16)));
        _mm512_storeu_ps(y + i, a);
        _mm512_storeu_ps(y + i + 16, b);
    }
    if (i + 16 <= n) {
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
        i += 16;
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
    }
}
