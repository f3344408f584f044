/* cvt_bf16_f32.c — moe_cvt_bf16_f32__ref: the reference bf16 -> f32 row kernel. */
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/cvt.h"

/* One code at a time through the scalar decoder. dtype.h promises only "a NaN" for NaN
 * codes, while the kernel contract (cvt.h) keeps every NaN bit, so NaNs are widened here. */
void moe_cvt_bf16_f32__ref(size_t n, const uint16_t *x, float *y)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t c = x[i];
        if ((c & 0x7F80u) == 0x7F80u && (c & 0x007Fu) != 0) {
            uint32_t bits = (uint32_t)c << 16;
            memcpy(&y[i], &bits, sizeof bits);
        } else {
            y[i] = moe_bf16_to_f32(c);
        }
    }
}
