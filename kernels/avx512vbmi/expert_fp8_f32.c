/* expert_fp8_f32.c — the AVX512-VBMI expert kernel set of the f32 recipe for FP8 weights: byte-table decode, 32x16. */
#include "kernels/avx512/expert_f32_common.h"
#include "kernels/avx512vbmi/fp8_bytes.h"
#include "select/kernel.h"

/*
 * The micro-kernels of kernels/avx512/expert_fp8_f32_body.h over the groups order of the codes
 * (kernels/ref/expert_layout.h). A group of 64 codes becomes its four f32 weight vectors in
 * 11 uops instead of the k-major set's 16 (two byte-table lookups: kernels/avx512vbmi/
 * fp8_bytes.h). The weights, and so every bit of the output, equal the k-major set's.
 */

/* The groups order puts fp8_bytes_decode's results in row order. */
INLINE void fp8_decode64(const fp8_dec *d, const unsigned char *c, __m512 w[4])
{
    fp8_bytes_decode(d, _mm512_loadu_si512(c), w);
}

#include "kernels/avx512/expert_fp8_f32_body.h"

MOE_XL_SET(moe_expert_fp8_f32_32x16__avx512vbmi, MOE_RECIPE_F32, MOE_REQ_AVX512VBMI, MR_FP8,
           MOE_XL_FP8_LAYOUT(fp8g), .gateup = gateup_fp8, .down = down_fp8,
           .gateup_tiles = gateup_fp8_tiles, .down_tiles = down_fp8_tiles, .tiles_from_m = MR + 1,
           .tiles_to_m = DIRECT_PAIRS);
