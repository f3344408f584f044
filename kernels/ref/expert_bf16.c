/* expert_bf16.c — the reference expert kernel sets of the bf16 recipe: vdpbf16ps in plain C. */
#include <math.h>
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/inline.h"
#include "kernels/ref/expert_fp8_pairs.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/expert_ref.h"
#include "select/kernel.h"

/*
 * The executable specification of the bf16 recipe. Activations x and h are bf16 codes; the
 * weights are bf16 pairs (k = 2q, 2q+1), exact (FP8 codes, packed in the pairs order, decode
 * to e4m3(code) · 2^-8, which bf16 holds exactly). Per output element:
 *  - bf16 weights: acc = 0; for each pair q: acc = dpbf16(acc, x pair q, w pair q)
 *    (moe_xr_dpbf16: vdpbf16ps on one lane, odd products first, DAZ/FTZ).
 *  - FP8 weights: per 128-K block (64 pairs) bacc = 0, bacc = dpbf16(bacc, ...) over its
 *    pairs, then acc = fma(bacc, scale_b · 2^8, acc) (a plain f32 FMA).
 * With K odd, the last pair is (x[K-1], 0) against (w[K-1], 0): nothing past x[K-1] is read.
 * down splits each sum (FP8: each block's) into two chains, A over the even pairs and B over
 * the odd ones, summed A + B with a plain f32 addition (kernels/ref/expert_f32.c says why).
 * Then + bias; gate/up apply the activation in f32 and round h to bf16 (moe_f32_to_bf16:
 * nearest even, NaN kept quiet, subnormals kept); down writes y in f32.
 */

#define NR MOE_XL_NR
#define MR 8

static uint32_t load_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static float load_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

static float dot_bf16(const unsigned char *tile, int np, int p, size_t n, size_t k,
                      const uint16_t *x)
{
    const unsigned char *w = tile + moe_xl_bf16_weights(np) + n * 4;
    float acc = 0.0f;
    for (size_t q = 0; q < (k + 1) / 2; q++)
        acc = moe_xr_dpbf16(acc, moe_xl_bf16_x_pair(x, q, k),
                            load_u32(w + moe_xl_bf16_pair_at(np, (int64_t)k, p, q)));
    return acc + load_f32(tile + ((size_t)p * NR + n) * 4);
}

static float dot_fp8(const unsigned char *tile, int np, int p, size_t n, size_t k,
                     const uint16_t *x)
{
    const unsigned char *scales = tile + moe_xl_bias_bytes(np);
    const size_t pairs = (k + 1) / 2;
    const size_t block_pairs = MOE_XL_KB / 2;
    float acc = 0.0f;
    for (size_t q0 = 0, b = 0; q0 < pairs; q0 += block_pairs, b++) {
        const size_t q1 = q0 + block_pairs < pairs ? q0 + block_pairs : pairs;
        float bacc = 0.0f;
        for (size_t q = q0; q < q1; q++)
            bacc = moe_xr_dpbf16(bacc, moe_xl_bf16_x_pair(x, q, k),
                                 moe_xr_fp8_pair(tile, np, p, n, k, q));
        acc = fmaf(bacc, load_f32(scales + (b * (size_t)np + (size_t)p) * 4), acc);
    }
    return acc + load_f32(tile + ((size_t)p * NR + n) * 4);
}

/* down's two chains over the pairs [q0, q1) of one row; w(q) gives the weight pair q. */
static float chains(const unsigned char *tile, int fp8, size_t q0, size_t q1, size_t n, size_t k,
                    const uint16_t *x)
{
    float acc[2] = {0.0f, 0.0f};
    for (size_t q = q0; q < q1; q++) {
        const uint32_t w = fp8 ? moe_xr_fp8_pair(tile, 1, 0, n, k, q)
                               : load_u32(tile + moe_xl_bf16_weights(1) +
                                          moe_xl_bf16_pair_at(1, (int64_t)k, 0, q) + n * 4);
        acc[q & 1] = moe_xr_dpbf16(acc[q & 1], moe_xl_bf16_x_pair(x, q, k), w);
    }
    return acc[0] + acc[1];
}

static float down_dot_bf16(const unsigned char *tile, size_t n, size_t k, const uint16_t *x)
{
    return chains(tile, 0, 0, (k + 1) / 2, n, k, x) + load_f32(tile + n * 4);
}

static float down_dot_fp8(const unsigned char *tile, size_t n, size_t k, const uint16_t *x)
{
    const unsigned char *scales = tile + moe_xl_bias_bytes(1);
    const size_t pairs = (k + 1) / 2, bp = MOE_XL_KB / 2;
    float acc = 0.0f;
    for (size_t q0 = 0, b = 0; q0 < pairs; q0 += bp, b++) {
        const size_t q1 = q0 + bp < pairs ? q0 + bp : pairs;
        acc = fmaf(chains(tile, 1, q0, q1, n, k, x), load_f32(scales + b * 4), acc);
    }
    return acc + load_f32(tile + n * 4);
}

enum { W_BF16, W_FP8 }; /* the weights of a tile: bf16 pairs, FP8 pairs */

INLINE float dot(int wf, const unsigned char *tile, int p, size_t n, size_t k, const uint16_t *x)
{
    return wf == W_FP8 ? dot_fp8(tile, 2, p, n, k, x) : dot_bf16(tile, 2, p, n, k, x);
}

INLINE float down_dot(int wf, const unsigned char *tile, size_t n, size_t k, const uint16_t *x)
{
    return wf == W_FP8 ? down_dot_fp8(tile, n, k, x) : down_dot_bf16(tile, n, k, x);
}

INLINE void gateup(int wf, size_t m, size_t k, const void *const *x, const void *tile,
                   const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    for (size_t i = 0; i < m; i++) {
        uint16_t *hi = (uint16_t *)h + i * h_stride;
        for (size_t n = 0; n < n_valid; n++) {
            float g = dot(wf, tile, 0, n, k, x[i]), u = dot(wf, tile, 1, n, k, x[i]);
            hi[n] = moe_f32_to_bf16(moe_xr_act(act, g, u));
        }
    }
}

INLINE void down(int wf, size_t m, size_t k, const void *const *h, const void *tile, float *y,
                 size_t y_stride, size_t n_valid)
{
    for (size_t i = 0; i < m; i++)
        for (size_t n = 0; n < n_valid; n++)
            y[i * y_stride + n] = down_dot(wf, tile, n, k, h[i]);
}

MOE_XR_ENTRIES(bf16, W_BF16)
MOE_XR_ENTRIES(fp8, W_FP8)

MOE_XL_BF16_RECIPE_SETS(moe_expert_bf16_bf16_8x16__ref, moe_expert_fp8_bf16_8x16__ref,
                        MOE_REQ_SCALAR, MR);
