/* expert_mxfp4_q8.c — the AVX-VNNI expert kernel set of the Q8 recipe (MXFP4), vpdpbusd, 16x16. */
#define MOE_MX_AVXVNNI 1
#include "kernels/avx2/expert_mxfp4_q8_body.h"
#include "kernels/avx2/q8_prepare.h"

/*
 * For AVX2 CPUs with AVX-VNNI and without AVX-512 (the Alder Lake family, Sierra Forest): the
 * kernels of expert_mxfp4_q8_body.h with the integer dot product as the VEX vpdpbusd on ymm,
 * one instruction for what the avx2 set does in about two and a half (vpmaddubsw, the 16-bit
 * adds, vpmaddwd, vpaddd); the sums, and so the bits, are the reference's.
 */

const moe_expert_kernels moe_expert_mxfp4_q8_16x16__avxvnni = {
    .name = "moe_expert_mxfp4_q8_16x16__avxvnni",
    .format = MOE_EXPERT_FMT_MXFP4,
    .recipe = MOE_RECIPE_Q8,
    .isa = MOE_REQ_AVXVNNI,
    .mr = MR,
    .nr = NR,
    .gateup_tile_bytes = moe_mx_gateup_bytes,
    .down_tile_bytes = moe_mx_down_bytes,
    .pack_gateup = moe_mx_pack_gateup,
    .pack_down = moe_mx_pack_down,
    .unpack_gateup = moe_mx_unpack_gateup,
    .unpack_down = moe_mx_unpack_down,
    .gateup = gateup,
    .down = down,
    .gateup_tiles = gateup_tiles,
    .down_tiles = down_tiles,
    .act_row_bytes = moe_q8_row_bytes,
    .prepare_act = q8_prepare_avx2,
};
