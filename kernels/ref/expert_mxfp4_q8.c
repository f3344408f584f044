/* expert_mxfp4_q8.c — the reference expert kernel set of the Q8 recipe (MXFP4 weights). */
#include "kernels/ref/expert_mxfp4_layout.h"
#include "kernels/ref/expert_q8_ref.h"
#include "select/kernel.h"

/*
 * The executable specification of the Q8 recipe for MXFP4 weights (kernels/expert.h), in the
 * loops the 4-bit formats share (kernels/ref/expert_q8_ref.h): w2 the doubled E2M1 value of
 * each code by table, and S = xs_b · 2^(e_b - 128) from the row's E8M0 scale e_b of block b.
 */

#define MR 8

static const moe_q8_ref_weights mxfp4 = {
    .value = MOE_MX_W2_TABLE,
    .scales = MOE_Q8_REF_E8M0,
};

static void gateup(size_t m, size_t k, const void *const *x, const void *tile,
                   const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    moe_q8_ref_gateup(&mxfp4, m, k, x, tile, act, h, h_stride, n_valid);
}

static void down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                 size_t y_stride, size_t n_valid)
{
    moe_q8_ref_down(&mxfp4, m, k, h, tile, y, y_stride, n_valid);
}

const moe_expert_kernels moe_expert_mxfp4_q8_8x16__ref = {
    .name = "moe_expert_mxfp4_q8_8x16__ref",
    MOE_MX_SET_LAYOUT,
    .isa = MOE_REQ_SCALAR,
    .mr = MR,
    .nr = MOE_MX_NR,
    .gateup = gateup,
    .down = down,
    .prepare_act = moe_q8_prepare_ref,
};
