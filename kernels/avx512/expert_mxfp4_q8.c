/* expert_mxfp4_q8.c — the AVX-512 expert kernel set of the Q8 recipe (MXFP4), vpmaddubsw, 32x16. */
#define MOE_MX_VNNI 0
#include "kernels/avx512/expert_mxfp4_q8_body.h"
#include "select/kernel.h"

/*
 * For AVX-512 CPUs without VNNI (Skylake-SP): the kernels of expert_mxfp4_q8_body.h with the
 * integer dot product as vpmaddubsw (u8 weights × s8 activations, pairs summed in 16 bits)
 * and vpmaddwd against ones; the sums, and so the bits, are the reference's.
 */

MX_ZMM_SET(moe_expert_mxfp4_q8_32x16__avx512, MOE_REQ_AVX512);
