/* expert_q8_weights.h — internal: what the Q8 bodies need of their weight format (MXFP4 or INT4).
 */
#ifndef MOE_KERNELS_REF_EXPERT_Q8_WEIGHTS_H
#define MOE_KERNELS_REF_EXPERT_Q8_WEIGHTS_H

#include "kernels/ref/expert_int4_layout.h"
#include "kernels/ref/expert_mxfp4_layout.h"

/*
 * The SIMD bodies of the Q8 recipe (kernels/avx2/expert_mxfp4_q8_body.h,
 * kernels/avx512/expert_mxfp4_q8_body.h) serve both 4-bit formats: the code units, the
 * decode (mask, shift, vpshufb through a 16-byte table), the integer sums against the prepared
 * rows and the f32 steps are the same. A set's file defines MOE_Q8_INT4 (1: INT4 group weights;
 * absent or 0: MXFP4) before including its body, which takes from here:
 *   Q8W_WU_VALUES     the 16 unsigned operands w + MOE_Q8_WOFFSET per stored nibble
 *   Q8W_SCALE_BYTES   bytes of one row's scale per 32-block (E8M0: 1; f32: 4), so row half v
 *                     of a unit's scales is at Q8W_SCALE_BYTES · 8v
 *   q8w_step_at       where step s of a tile starts; the units and step lengths are common
 *   q8w_gateup_bytes, q8w_down_bytes, Q8W_SET_LAYOUT   the tile sizes and the set's fields
 * and loads the weight scales itself (E8M0: the exact 2^(e - 128); INT4: the packed f32s).
 */
#if MOE_Q8_INT4
#define Q8W_WU_VALUES MOE_I4_WU_VALUES
#define Q8W_SCALE_BYTES MOE_I4_SCALE_BYTES
#define q8w_step_at moe_i4_step_at
#define q8w_gateup_bytes moe_i4_gateup_bytes
#define q8w_down_bytes moe_i4_down_bytes
#define Q8W_SET_LAYOUT MOE_I4_SET_LAYOUT
#else
#define Q8W_WU_VALUES 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0
#define Q8W_SCALE_BYTES 1
#define q8w_step_at moe_mx_step_at
#define q8w_gateup_bytes moe_mx_gateup_bytes
#define q8w_down_bytes moe_mx_down_bytes
#define Q8W_SET_LAYOUT MOE_MX_SET_LAYOUT
#endif

#endif
