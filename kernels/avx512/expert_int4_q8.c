/* expert_int4_q8.c — the AVX-512 expert kernel set of the Q8 recipe (INT4 group weights), 32x16. */
#define MOE_MX_VNNI 0
#define MOE_Q8_INT4 1
#include "kernels/avx512/expert_mxfp4_q8_body.h"
#include "select/kernel.h"

/*
 * The MXFP4 zmm body with the INT4 table (stored nibble u → u + 4) and the packed f32 group
 * scales, the integer dot product as vpmaddubsw and vpmaddwd against ones (per chunk ≤
 * 2·2·19·127 = 9652 in 16 bits); the sums, and so the bits, are the reference's.
 */

MX_ZMM_SET(moe_expert_int4_q8_32x16__avx512, MOE_REQ_AVX512);
