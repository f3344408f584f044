/* expert_mxfp4_q8.c — the AVX512-VNNI expert kernel set of the Q8 recipe (MXFP4), vpdpbusd, 32x16. */
#define MOE_MX_VNNI 1
#include "kernels/avx512/expert_mxfp4_q8_body.h"
#include "select/kernel.h"

/*
 * The kernels of kernels/avx512/expert_mxfp4_q8_body.h with the integer dot product as
 * vpdpbusd: per 16 rows, block and token, 8 instructions take the block's 32 products of
 * u8 weights (w2 + 12) and s8 activations into the int32 lanes, starting from the row's
 * correction, so the sum is exactly the reference's Σ w2·q.
 */

MX_ZMM_SET(moe_expert_mxfp4_q8_32x16__avx512vnni, MOE_REQ_AVX512VNNI);
