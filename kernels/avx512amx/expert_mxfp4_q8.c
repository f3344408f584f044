/* expert_mxfp4_q8.c — the AMX expert kernel set of the Q8 recipe (MXFP4): vpdpbusd up to 4 tokens,
 * tdpbssd tiles beyond, 32x16. */
#define MOE_MX_VNNI 1
#define MOE_MX_AMX 1
#include "kernels/avx512/expert_mxfp4_q8_body.h"
#include "select/kernel.h"

/*
 * The kernels of kernels/avx512/expert_mxfp4_q8_body.h: the direct path (1-4 tokens, memory
 * bound) as the AVX512-VNNI set's, the buffered one (5-32 tokens) with each block's integer
 * sums of 16 tokens and 16 rows from one tdpbssd
 * (kernels/avx512amx/expert_mxfp4_q8_tiles.h), so the vector units are left the decode and
 * the recipe's f32 step. Same bits as every other set of the family.
 */

MX_ZMM_SET(moe_expert_mxfp4_q8_32x16__avx512amx, MOE_REQ_AVX512AMX);
