/* expert_q8_ref.c — the Q8 recipe's reference loops the MXFP4 and INT4 sets share. */
#include "kernels/ref/expert_q8_ref.h"

#include <math.h>
#include <string.h>

#include "kernels/ref/expert_int4_layout.h"
#include "kernels/ref/expert_mxfp4_layout.h"
#include "kernels/ref/expert_ref.h"

#define NR MOE_MX_NR
#define BLK MOE_MX_BLOCK

static float load_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* 2^(e - 128) as an f32, exactly: normal for e ≥ 2, subnormal for e = 0 and 1. */
static float half_scale(uint8_t e) { return ldexpf(1.0f, (int)e - 128); }

static size_t unit_at(const moe_q8_ref_weights *w, int np, size_t b, int p)
{
    return w->scales == MOE_Q8_REF_F32 ? moe_i4_unit_at(np, b, p) : moe_mx_unit_at(np, b, p);
}

/* Row n's weight scale of block b, projection p, in a tile of nb blocks. */
static float weight_scale(const moe_q8_ref_weights *w, const unsigned char *tile, int np, size_t nb,
                          size_t b, int p, size_t n)
{
    if (w->scales == MOE_Q8_REF_F32)
        return load_f32(tile + moe_i4_scales_at(np, nb, b, p) + n * sizeof(float));
    return half_scale(tile[moe_mx_scales_at(np, nb, b, p) + n]);
}

/* Row n of projection p (of np) over the prepared row xq of k values. */
static float dot(const moe_q8_ref_weights *w, const unsigned char *tile, int np, int p, size_t n,
                 size_t k, const unsigned char *xq)
{
    const size_t nb = k / BLK;
    const int8_t *q = (const int8_t *)xq;
    const unsigned char *xs = xq + moe_q8_scales_offset(k);
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const unsigned char *unit = tile + unit_at(w, np, b, p);
        int32_t isum = 0;
        for (size_t j = 0; j < BLK; j++) {
            const unsigned char byte = unit[moe_mx_code_byte(n, j)];
            const int u = moe_mx_code_high(j) ? byte >> 4 : byte & 0x0F;
            isum += w->value[u] * q[b * BLK + j];
        }
        const float s = load_f32(xs + b * sizeof(float)) * weight_scale(w, tile, np, nb, b, p, n);
        acc = fmaf((float)isum, s, acc);
    }
    return acc + load_f32(tile + ((size_t)p * NR + n) * sizeof(float));
}

void moe_q8_ref_gateup(const moe_q8_ref_weights *w, size_t m, size_t k, const void *const *x,
                       const void *tile, const moe_act_params *act, void *h, size_t h_stride,
                       size_t n_valid)
{
    for (size_t i = 0; i < m; i++) {
        float *hi = (float *)h + i * h_stride;
        for (size_t n = 0; n < n_valid; n++) {
            float g = dot(w, tile, 2, 0, n, k, x[i]), u = dot(w, tile, 2, 1, n, k, x[i]);
            hi[n] = moe_xr_act(act, g, u);
        }
    }
}

void moe_q8_ref_down(const moe_q8_ref_weights *w, size_t m, size_t k, const void *const *h,
                     const void *tile, float *y, size_t y_stride, size_t n_valid)
{
    for (size_t i = 0; i < m; i++)
        for (size_t n = 0; n < n_valid; n++)
            y[i * y_stride + n] = dot(w, tile, 1, 0, n, k, h[i]);
}
