/* expert_mxfp4_q8.c — the AMX expert kernel set of the Q8 recipe (MXFP4), 32x16: tdpbssd tiles
 * from 16 tokens per call, vpdpbusd below. */
#define MOE_MX_VNNI 1
#define MOE_MX_AMX 1
#include "kernels/avx512/expert_mxfp4_q8_body.h"
#include "select/kernel.h"

/*
 * The kernels of kernels/avx512/expert_mxfp4_q8_body.h: 1-15 tokens per call as the
 * AVX512-VNNI set's (the direct path, then its groups), 16-32 with each block's integer sums
 * of 16 tokens and 16 rows from one tdpbssd (kernels/avx512amx/expert_mxfp4_q8_tiles.h), so
 * the vector units are left the decode and the recipe's f32 step. Same bits as every other
 * set of the family.
 */

MX_ZMM_SET(moe_expert_mxfp4_q8_32x16__avx512amx, MOE_REQ_AVX512AMX);
