/* expert_mxfp4_q8.c — the AVX2 expert kernel set of the Q8 recipe (MXFP4), vpmaddubsw, 16x16. */
#define MOE_MX_AVXVNNI 0
#include "kernels/avx2/expert_mxfp4_q8_body.h"
#include "kernels/avx2/q8_prepare.h"

/*
 * For AVX2 CPUs without AVX-VNNI (Haswell to Comet Lake, Zen 2-4): the kernels of
 * expert_mxfp4_q8_body.h with the integer dot product as vpmaddubsw (u8 weights × s8
 * activations, pairs summed in 16 bits) and vpmaddwd against ones; the sums, and so the bits,
 * are the reference's.
 */

const moe_expert_kernels moe_expert_mxfp4_q8_16x16__avx2 = {
    .name = "moe_expert_mxfp4_q8_16x16__avx2",
    .format = MOE_EXPERT_FMT_MXFP4,
    .recipe = MOE_RECIPE_Q8,
    .isa = MOE_REQ_AVX2,
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
