/* expert_int4_q8.c — the reference expert kernel set of the Q8 recipe for INT4 (group) weights. */
#include "kernels/ref/expert_int4_layout.h"
#include "kernels/ref/expert_q8_ref.h"
#include "select/kernel.h"

/*
 * The executable specification of the Q8 recipe for INT4 weights (kernels/expert.h), in the
 * loops the 4-bit formats share (kernels/ref/expert_q8_ref.h): w = u - 8 from the stored nibble
 * u, and S = xs_b · ws_b with ws_b the row's f32 group scale of block b.
 */

#define MR 8

static const moe_q8_ref_weights int4 = {
    .value = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7}, /* u - MOE_I4_OFFSET */
    .scales = MOE_Q8_REF_F32,
};

static void gateup(size_t m, size_t k, const void *const *x, const void *tile,
                   const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    moe_q8_ref_gateup(&int4, m, k, x, tile, act, h, h_stride, n_valid);
}

static void down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                 size_t y_stride, size_t n_valid)
{
    moe_q8_ref_down(&int4, m, k, h, tile, y, y_stride, n_valid);
}

const moe_expert_kernels moe_expert_int4_q8_8x16__ref = {
    .name = "moe_expert_int4_q8_8x16__ref",
    MOE_I4_SET_LAYOUT,
    .isa = MOE_REQ_SCALAR,
    .mr = MR,
    .nr = MOE_MX_NR,
    .gateup = gateup,
    .down = down,
    .prepare_act = moe_q8_prepare_ref,
};
