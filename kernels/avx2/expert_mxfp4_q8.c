/* expert_mxfp4_q8.c — the AVX2 expert kernel set of the Q8 recipe (MXFP4), vpmaddubsw, 32x16. */
#define MOE_MX_AVXVNNI 0
#include "kernels/avx2/expert_mxfp4_q8_body.h"

/*
 * For AVX2 CPUs without AVX-VNNI (Haswell to Comet Lake, Zen 2-4): the kernels of
 * expert_mxfp4_q8_body.h with the integer dot product as vpmaddubsw (u8 weights × s8
 * activations, pairs summed in 16 bits) and vpmaddwd against ones; the sums, and so the bits,
 * are the reference's.
 */

MX_YMM_SET(moe_expert_mxfp4_q8_32x16__avx2, MOE_REQ_AVX2);
