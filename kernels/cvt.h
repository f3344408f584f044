/* cvt.h — internal: declarations of the conversion kernels (from their enumerators) and the
 * bit patterns every variant must produce. */
#ifndef MOE_KERNELS_CVT_H
#define MOE_KERNELS_CVT_H

#include <stdint.h>

#include "select/kernel.h"

#define MOE_KERNEL(name, isa, ref) moe_cvt_bf16_f32_ukernel name;
#include "kernels/cvt_bf16_f32.inc"
#undef MOE_KERNEL

#define MOE_KERNEL(name, isa, ref) moe_cvt_f16_f32_ukernel name;
#include "kernels/cvt_f16_f32.inc"
#undef MOE_KERNEL

#define MOE_KERNEL(name, isa, ref) moe_cvt_e4m3_f32_ukernel name;
#include "kernels/cvt_e4m3_f32.inc"
#undef MOE_KERNEL

#define MOE_KERNEL(name, isa, ref) moe_cvt_mxfp4_f32_ukernel name;
#include "kernels/cvt_mxfp4_f32.inc"
#undef MOE_KERNEL

/*
 * The output contract, bit for bit, where dtype.h leaves NaN bits open (it promises "a NaN"):
 *  - bf16: y = code << 16 for every code, NaN payloads and signalling NaNs included (a bf16
 *    is the upper half of an f32, so widening is a shift).
 *  - f16: NaN -> sign | 0x7FC00000 | payload << 13 (quieted, payload kept: what F16C does).
 *  - E4M3: the NaN codes 0x7F / 0xFF -> 0x7FC00000 / 0xFFC00000.
 *  - MXFP4: a block whose scale is 0xFF is 0x7FC00000 in all 32 elements.
 * Every other output is the exact value (all these formats are subsets of f32).
 */
#define MOE_CVT_QNAN_BITS 0x7FC00000u

/* The f32 bits of an E8M0 scale 2^(s-127): the exponent field is s itself, except s = 0,
 * 2^-127, which is the subnormal 0x00400000, and s = 0xFF, the NaN of the contract above. */
static inline uint32_t moe_cvt_e8m0_bits(uint8_t s)
{
    if (s == 0) return 0x00400000u;
    if (s == 0xFF) return MOE_CVT_QNAN_BITS;
    return (uint32_t)s << 23;
}

#endif
