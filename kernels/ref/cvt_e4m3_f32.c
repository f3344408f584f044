/* cvt_e4m3_f32.c — moe_cvt_e4m3_f32__ref: the reference FP8 E4M3 -> f32 row kernel. */
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/cvt.h"

/* Non-NaN codes go through the scalar decoder; the two NaN codes (0x7F, 0xFF) become the
 * quiet NaN of their sign, as the kernel contract (cvt.h) fixes. */
void moe_cvt_e4m3_f32__ref(size_t n, const uint8_t *x, float *y)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t c = x[i];
        if ((c & 0x7Fu) == 0x7Fu) {
            uint32_t bits = ((uint32_t)(c & 0x80u) << 24) | MOE_CVT_QNAN_BITS;
            memcpy(&y[i], &bits, sizeof bits);
        } else {
            y[i] = moe_e4m3_to_f32(c);
        }
    }
}
