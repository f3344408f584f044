/* cvt_f16_f32.c — moe_cvt_f16_f32__avx2: IEEE half -> f32 rows with F16C. */
#include <immintrin.h>
#include <string.h>

#include "kernels/cvt.h"

/*
 * vcvtph2ps widens 8 halves exactly (subnormal halves become normal floats; it ignores
 * MXCSR.DAZ) and quiets NaNs keeping sign and payload, which is the contract of cvt.h.
 * 16 per iteration, then 8, then the last 1..7 through a zero-padded copy so no load or
 * store leaves the row.
 */
void moe_cvt_f16_f32__avx2(size_t n, const uint16_t *x, float *y)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        __m256 b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8)));
        _mm256_storeu_ps(y + i, a);
        _mm256_storeu_ps(y + i + 8, b);
    }
    if (i + 8 <= n) {
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
        i += 8;
    }
    if (i < n) {
        uint16_t in[8] = {0};
        float out[8];
        memcpy(in, x + i, (n - i) * sizeof *x);
        _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)in)));
        memcpy(y + i, out, (n - i) * sizeof *y);
    }
}
