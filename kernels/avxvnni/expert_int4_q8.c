/* expert_int4_q8.c — the AVX-VNNI expert kernel set of the Q8 recipe (INT4 group weights), 32x16.
 */
#define MOE_MX_AVXVNNI 1
#define MOE_Q8_INT4 1
#include "kernels/avx2/expert_mxfp4_q8_body.h"

/*
 * The MXFP4 ymm body with the INT4 table and f32 group scales, the integer dot product as the
 * VEX vpdpbusd on ymm; the sums, and so the bits, are the reference's.
 */

MX_YMM_SET(moe_expert_int4_q8_32x16__avxvnni, MOE_REQ_AVXVNNI);
