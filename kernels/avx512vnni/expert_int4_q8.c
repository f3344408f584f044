/* expert_int4_q8.c — the AVX512-VNNI expert kernel set of the Q8 recipe (INT4 group weights),
 * 32x16. */
#define MOE_MX_VNNI 1
#define MOE_Q8_INT4 1
#include "kernels/avx512/expert_mxfp4_q8_body.h"
#include "select/kernel.h"

/*
 * The MXFP4 zmm body with the INT4 table and f32 group scales, the integer dot product as
 * vpdpbusd (u8 weights u + 4 × s8 activations, from the row's correction -12·Σq): the sums are
 * the reference's Σ (u - 8)·q exactly.
 */

MX_ZMM_SET(moe_expert_int4_q8_32x16__avx512vnni, MOE_REQ_AVX512VNNI);
