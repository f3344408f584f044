/* expert_mxfp4_q8.c — the AVX-VNNI expert kernel set of the Q8 recipe (MXFP4), vpdpbusd, 32x16. */
#define MOE_MX_AVXVNNI 1
#include "kernels/avx2/expert_mxfp4_q8_body.h"

/*
 * For AVX2 CPUs with AVX-VNNI and without AVX-512 (the Alder Lake family, Sierra Forest): the
 * kernels of expert_mxfp4_q8_body.h with the integer dot product as the VEX vpdpbusd on ymm,
 * one instruction for what the avx2 set does in about two and a half (vpmaddubsw, the 16-bit
 * adds, vpmaddwd, vpaddd); the sums, and so the bits, are the reference's.
 */

MX_YMM_SET(moe_expert_mxfp4_q8_32x16__avxvnni, MOE_REQ_AVXVNNI);
