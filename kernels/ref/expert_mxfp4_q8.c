/* expert_mxfp4_q8.c — the reference expert kernel set of the Q8 recipe (MXFP4 weights). */
#include <math.h>
#include <string.h>

#include "kernels/ref/expert_mxfp4_layout.h"
#include "kernels/ref/expert_ref.h"
#include "select/kernel.h"

/*
 * The executable specification of the Q8 recipe (kernels/expert.h), one output element at a
 * time: for each 32-block b, isum = Σ w2·q over the block in plain int32 (the doubled E2M1
 * value of each code by table, the activation code from the prepared row), S = xs_b ·
 * 2^(e_b - 128), acc = fmaf((float)isum, S, acc) in increasing b; then + bias and, for
 * gate/up, the activation (moe_xr_act) of the two projections; h and y are f32. The SIMD sets
 * sum the same integers in other orders (exact) and repeat the f32 steps as they are, so
 * their bits equal these for every m.
 */

#define NR MOE_MX_NR
#define BLK MOE_MX_BLOCK
#define MR 8

static const int8_t w2_table[16] = MOE_MX_W2_TABLE;

static float load_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* 2^(e - 128) as an f32, exactly: normal for e ≥ 2, subnormal for e = 0 and 1. */
static float half_scale(uint8_t e) { return ldexpf(1.0f, (int)e - 128); }

/* Row n of projection p (of np) over the prepared row xq of k values. */
static float dot(const unsigned char *tile, int np, int p, size_t n, size_t k,
                 const unsigned char *xq)
{
    const size_t nb = k / BLK;
    const int8_t *q = (const int8_t *)xq;
    const unsigned char *xs = xq + moe_q8_scales_offset(k);
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const unsigned char *unit = tile + moe_mx_unit_at(np, b, p);
        int32_t isum = 0;
        for (size_t j = 0; j < BLK; j++) {
            const unsigned char byte = unit[moe_mx_code_byte(n, j)];
            const int code = moe_mx_code_high(j) ? byte >> 4 : byte & 0x0F;
            isum += w2_table[code] * q[b * BLK + j];
        }
        const float s = load_f32(xs + b * sizeof(float)) *
                        half_scale(tile[moe_mx_scales_at(np, nb, b, p) + n]);
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

const moe_expert_kernels moe_expert_mxfp4_q8_8x16__ref = {
    .name = "moe_expert_mxfp4_q8_8x16__ref",
    MOE_MX_SET_LAYOUT,
    .isa = MOE_REQ_SCALAR,
    .mr = MR,
    .nr = NR,
    .gateup = gateup,
    .down = down,
    .prepare_act = moe_q8_prepare_ref,
};
