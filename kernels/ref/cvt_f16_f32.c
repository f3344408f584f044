/* cvt_f16_f32.c — moe_cvt_f16_f32__ref: the reference IEEE half -> f32 row kernel. */
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/cvt.h"

/* Non-NaN codes go through the scalar decoder. NaNs follow the kernel contract (cvt.h):
 * quiet, sign and payload kept, which is how F16C widens them. */
void moe_cvt_f16_f32__ref(size_t n, const uint16_t *x, float *y)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t c = x[i];
        if ((c & 0x7C00u) == 0x7C00u && (c & 0x03FFu) != 0) {
            uint32_t bits = ((uint32_t)(c & 0x8000u) << 16) | MOE_CVT_QNAN_BITS |
                            ((uint32_t)(c & 0x03FFu) << 13);
            memcpy(&y[i], &bits, sizeof bits);
        } else {
            y[i] = moe_f16_to_f32(c);
        }
    }
}
