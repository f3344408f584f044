/* expert_int4_q8.c — the AVX2 expert kernel set of the Q8 recipe (INT4 group weights), 32x16. */
#define MOE_MX_AVXVNNI 0
#define MOE_Q8_INT4 1
#include "kernels/avx2/expert_mxfp4_q8_body.h"

/*
 * The MXFP4 ymm body with the INT4 table (stored nibble u → u + 4, the unsigned operand of
 * (u - 8) + 12) and the packed f32 group scales: vpmaddubsw (u8 × s8, pairs summed in 16 bits:
 * ≤ 4·2·19·127 = 19304 over two chunks, no saturation) and vpmaddwd against ones; the sums,
 * and so the bits, are the reference's.
 */

MX_YMM_SET(moe_expert_int4_q8_32x16__avx2, MOE_REQ_AVX2);
