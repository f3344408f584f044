/* expert_mxfp4_q8.c — the AVX512-VNNI expert kernel set of the Q8 recipe (MXFP4), vpdpbusd, 32x16. */
#define MOE_MX_VNNI 1
#include "kernels/avx512/expert_mxfp4_q8_body.h"
#include "kernels/avx512/q8_prepare.h"
#include "select/kernel.h"

/*
 * The kernels of kernels/avx512/expert_mxfp4_q8_body.h with the integer dot product as
 * vpdpbusd: per 16 rows, block and token, 8 instructions take the block's 32 products of
 * u8 weights (w2 + 12) and s8 activations into the int32 lanes, starting from the row's
 * correction, so the sum is exactly the reference's Σ w2·q.
 */

const moe_expert_kernels moe_expert_mxfp4_q8_32x16__avx512vnni = {
    .name = "moe_expert_mxfp4_q8_32x16__avx512vnni",
    .format = MOE_EXPERT_FMT_MXFP4,
    .recipe = MOE_RECIPE_Q8,
    .isa = MOE_REQ_AVX512VNNI,
    .mr = MX_MR,
    .nr = MX_NR,
    .gateup_tile_bytes = moe_mx_gateup_bytes,
    .down_tile_bytes = moe_mx_down_bytes,
    .pack_gateup = moe_mx_pack_gateup,
    .pack_down = moe_mx_pack_down,
    .unpack_gateup = moe_mx_unpack_gateup,
    .unpack_down = moe_mx_unpack_down,
    .gateup = mx_gateup,
    .down = mx_down,
    .gateup_tiles = mx_gateup_tiles,
    .down_tiles = mx_down_tiles,
    .act_row_bytes = moe_q8_row_bytes,
    .prepare_act = q8_prepare_avx512,
};
