/* cvt_mxfp4_f32.c — moe_cvt_mxfp4_f32__ref: the reference MXFP4 block decode. */
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/cvt.h"

/*
 * Block b is bytes blocks[16b .. 16b+15] and scale scales[b]; element 2i of the block is
 * the low nibble of byte i and element 2i+1 the high nibble (formats.md §2.2). Each value is
 * e2m1 * 2^(scale-127): the product of a 2-significant-bit number and a power of two, so the
 * f32 multiply is exact, except that it rounds to ±Inf above FLT_MAX (e.g. 4 * 2^127), as
 * the exact value would. A NaN scale (0xFF) makes the whole block the contract's NaN.
 */
void moe_cvt_mxfp4_f32__ref(size_t nblocks, const uint8_t *blocks, const uint8_t *scales, float *y)
{
    for (size_t b = 0; b < nblocks; b++) {
        const uint8_t *q = blocks + 16 * b;
        float *out = y + 32 * b;
        if (scales[b] == 0xFF) {
            uint32_t nan = MOE_CVT_QNAN_BITS;
            for (int i = 0; i < 32; i++)
                memcpy(&out[i], &nan, sizeof nan);
            continue;
        }
        float s = moe_e8m0_to_f32(scales[b]);
        for (int i = 0; i < 16; i++) {
            out[2 * i] = moe_e2m1_to_f32(q[i] & 0x0F) * s;
            out[2 * i + 1] = moe_e2m1_to_f32(q[i] >> 4) * s;
        }
    }
}
