/* expert_int4_q8.c — the reference expert kernel set of the Q8 recipe for INT4 (group) weights. */
#include <math.h>
#include <string.h>

#include "kernels/ref/expert_int4_layout.h"
#include "kernels/ref/expert_ref.h"
#include "select/kernel.h"

/*
 * The executable specification of the Q8 recipe for INT4 weights (kernels/expert.h), one output
 * element at a time: for each 32-block b, isum = Σ w·q over the block in plain int32 (w = u - 8
 * from the stored nibble u, the activation code from the prepared row), S = xs_b · ws_b (the
 * row's f32 group scale of block b, one f32 multiply), acc = fmaf((float)isum, S, acc) in
 * increasing b; then + bias and, for gate/up, the activation (moe_xr_act); h and y are f32. The
 * SIMD sets sum the same integers in other orders (exact) and repeat the f32 steps as they are.
 */

#define NR MOE_MX_NR
#define BLK MOE_MX_BLOCK
#define MR 8

static float load_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Row n of projection p (of np) over the prepared row xq of k values. */
static float dot(const unsigned char *tile, int np, int p, size_t n, size_t k,
                 const unsigned char *xq)
{
    const size_t nb = k / BLK;
    const int8_t *q = (const int8_t *)xq;
    const unsigned char *xs = xq + moe_q8_scales_offset(k);
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const unsigned char *unit = tile + moe_i4_unit_at(np, b, p);
        int32_t isum = 0;
        for (size_t j = 0; j < BLK; j++) {
            const unsigned char byte = unit[moe_mx_code_byte(n, j)];
            const int u = moe_mx_code_high(j) ? byte >> 4 : byte & 0x0F;
            isum += (u - MOE_I4_OFFSET) * q[b * BLK + j];
        }
        const float ws = load_f32(tile + moe_i4_scales_at(np, nb, b, p) + n * sizeof(float));
        const float s = load_f32(xs + b * sizeof(float)) * ws;
        acc = fmaf((float)isum, s, acc);
    }
    return acc + load_f32(tile + ((size_t)p * NR + n) * sizeof(float));
}

static void gateup(size_t m, size_t k, const void *const *x, const void *tile,
                   const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    for (size_t i = 0; i < m; i++) {
        float *hi = (float *)h + i * h_stride;
        for (size_t n = 0; n < n_valid; n++) {
            float g = dot(tile, 2, 0, n, k, x[i]), u = dot(tile, 2, 1, n, k, x[i]);
            hi[n] = moe_xr_act(act, g, u);
        }
    }
}

static void down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                 size_t y_stride, size_t n_valid)
{
    for (size_t i = 0; i < m; i++)
        for (size_t n = 0; n < n_valid; n++)
            y[i * y_stride + n] = dot(tile, 1, 0, n, k, h[i]);
}

const moe_expert_kernels moe_expert_int4_q8_8x16__ref = {
    .name = "moe_expert_int4_q8_8x16__ref",
    MOE_I4_SET_LAYOUT,
    .isa = MOE_REQ_SCALAR,
    .mr = MR,
    .nr = NR,
    .gateup = gateup,
    .down = down,
    .prepare_act = moe_q8_prepare_ref,
};
