/* expert_fp8_pairs.h — internal: the FP8 pairs layout's codes as bf16 weight pairs, in plain C. */
#ifndef MOE_KERNELS_REF_EXPERT_FP8_PAIRS_H
#define MOE_KERNELS_REF_EXPERT_FP8_PAIRS_H

#include <stddef.h>
#include <stdint.h>

#include "dtype/dtype.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/math_ref.h"

/*
 * The reference sets that read FP8 tiles in the pairs order (kernels/ref/expert_layout.h: the
 * bf16 recipe's and the tile recipe's) widen each code to the bf16 of e4m3(code) · 2^-8, which
 * holds it exactly (at most 4 significant bits, normal in bf16); the 2^8 is folded into the
 * packed block scales.
 */

/* The bf16 code of e4m3(code) · 2^-8: an f32 with at most 4 significant bits, so its top half. */
static inline uint32_t moe_xr_fp8_bf16(uint8_t code)
{
    return moe_math_bits(moe_e4m3_to_f32(code) * MOE_XL_FP8_CODE_UNIT) >> 16;
}

/* The weight pair q (k = 2q, 2q + 1) of row n, projection p, of an FP8 pairs tile of np
 * projections over k: the dword a bf16 pair line holds (k = 2q in the low half). q must be
 * below kpad / 2. */
static inline uint32_t moe_xr_fp8_pair(const unsigned char *tile, int np, int p, size_t n, size_t k,
                                       size_t q)
{
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, np);
    return moe_xr_fp8_bf16(codes[moe_xl_fp8_code_at(MOE_XL_FP8_PAIRS, np, 2 * q, p, n)]) |
           moe_xr_fp8_bf16(codes[moe_xl_fp8_code_at(MOE_XL_FP8_PAIRS, np, 2 * q + 1, p, n)]) << 16;
}

#endif
