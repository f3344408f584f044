/* expert_f32.c — the reference expert kernel sets of the f32 recipe (bf16, f32 and FP8 weights). */
#include <math.h>
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/inline.h"
#include "kernels/ref/expert_ref.h"
#include "select/kernel.h"

/*
 * The executable specification of the f32 recipe, one output element at a time:
 *  - bf16 and f32 weights (f16 weights are packed as f32): acc = 0; for k = 0, 1, ..., K-1:
 *    acc = fma(w[k], x[k], acc).
 *  - FP8 weights: per 128-K block b, bacc = 0; for k in the block: bacc = fma(w'[k], x[k],
 *    bacc) with w' = e4m3(code) · 2^-8; then acc = fma(bacc, scale_b · 2^8, acc), acc = 0
 *    before the first block.
 *  - down splits each sum in two chains that take the k-pairs (k = 2q, 2q+1) in turn: chain
 *    A the even q, chain B the odd q, each FMA-ing its pairs' k upward; the sum is A + B (FP8:
 *    per block, block = A + B before its scale). A tile of down has one projection, so
 *    without the split a single token would wait on one chain of dependent FMAs; with it
 *    decode keeps two in flight, as gate/up does with its two projections.
 *  - then + bias (f32, zero when the checkpoint has none), and for gate/up the activation
 *    (moe_xr_act) of the two projections; h and y are f32.
 * Every SIMD set of the recipe computes each element in exactly this order (vectorised over
 * the 16 rows of the tile, activations broadcast), so its bits equal these for any m.
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

/* The weights at k = 2q and 2q + 1 of row n, projection p (of np, over k), in a pair tile's
 * weights w: the low and the high half of its bf16 pair dword (bf16 pairs), or the 16 rows at
 * 2q, then at 2q + 1, of its pair line (f32 pairs). K is padded to even, so both are there. */
INLINE void pair_weights(int f32, const unsigned char *w, int np, int p, size_t n, size_t k,
                         size_t q, float wq[2])
{
    if (f32) {
        const unsigned char *line = w + moe_xl_f32_pair_at(np, (int64_t)k, p, q) + n * 4;
        wq[0] = load_f32(line);
        wq[1] = load_f32(line + MOE_XL_F32_LINE / 2);
        return;
    }
    const uint32_t d = load_u32(w + moe_xl_bf16_pair_at(np, (int64_t)k, p, q) + n * 4);
    wq[0] = moe_math_from_bits(d << 16);
    wq[1] = moe_math_from_bits(d & 0xFFFF0000u);
}

static float fp8_weight(uint8_t code) { return moe_e4m3_to_f32(code) * MOE_XL_FP8_CODE_UNIT; }

/* Row n of projection p over x, in the recipe's order, from a gate/up pair tile. */
INLINE float dot_pairs(int f32, const unsigned char *tile, int p, size_t n, size_t k,
                       const float *x)
{
    const unsigned char *w = tile + moe_xl_bf16_weights(2);
    float acc = 0.0f;
    for (size_t q = 0; q < (k + 1) / 2; q++) {
        float wq[2];
        pair_weights(f32, w, 2, p, n, k, q, wq);
        for (size_t kk = 2 * q; kk < 2 * q + 2 && kk < k; kk++)
            acc = fmaf(wq[kk & 1], x[kk], acc);
    }
    return acc + load_f32(tile + ((size_t)p * NR + n) * 4);
}

/* Row n over x from a down pair tile: its two chains, A + B, then the bias. */
INLINE float down_dot_pairs(int f32, const unsigned char *tile, size_t n, size_t k, const float *x)
{
    const unsigned char *w = tile + moe_xl_bf16_weights(1);
    float acc[2] = {0.0f, 0.0f};
    for (size_t q = 0; q < (k + 1) / 2; q++) {
        float wq[2];
        pair_weights(f32, w, 1, 0, n, k, q, wq);
        for (size_t kk = 2 * q; kk < 2 * q + 2 && kk < k; kk++)
            acc[q & 1] = fmaf(wq[kk & 1], x[kk], acc[q & 1]);
    }
    return acc[0] + acc[1] + load_f32(tile + n * 4);
}

static float dot_fp8(const unsigned char *tile, int np, int p, size_t n, size_t k, const float *x)
{
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, np) + (size_t)p * NR + n;
    const unsigned char *scales = tile + moe_xl_bias_bytes(np);
    const size_t step = moe_xl_fp8_step_bytes(np);
    float acc = 0.0f;
    for (size_t k0 = 0, b = 0; k0 < k; k0 += MOE_XL_KB, b++) {
        const size_t k1 = k0 + MOE_XL_KB < k ? k0 + MOE_XL_KB : k;
        float bacc = 0.0f;
        for (size_t kk = k0; kk < k1; kk++)
            bacc = fmaf(fp8_weight(codes[kk * step]), x[kk], bacc);
        acc = fmaf(bacc, load_f32(scales + (b * (size_t)np + (size_t)p) * 4), acc);
    }
    return acc + load_f32(tile + ((size_t)p * NR + n) * 4);
}

static float chains_fp8(const unsigned char *codes, size_t step, size_t q0, size_t q1, size_t k,
                        const float *x)
{
    float acc[2] = {0.0f, 0.0f};
    for (size_t q = q0; q < q1; q++)
        for (size_t kk = 2 * q; kk < 2 * q + 2 && kk < k; kk++)
            acc[q & 1] = fmaf(fp8_weight(codes[kk * step]), x[kk], acc[q & 1]);
    return acc[0] + acc[1];
}

static float down_dot_fp8(const unsigned char *tile, size_t n, size_t k, const float *x)
{
    const unsigned char *codes = tile + moe_xl_fp8_codes((int64_t)k, 1) + n;
    const unsigned char *scales = tile + moe_xl_bias_bytes(1);
    const size_t step = moe_xl_fp8_step_bytes(1), pairs = (k + 1) / 2, bp = MOE_XL_KB / 2;
    float acc = 0.0f;
    for (size_t q0 = 0, b = 0; q0 < pairs; q0 += bp, b++) {
        const size_t q1 = q0 + bp < pairs ? q0 + bp : pairs;
        float block = chains_fp8(codes, step, q0, q1, k, x);
        acc = fmaf(block, load_f32(scales + b * 4), acc);
    }
    return acc + load_f32(tile + n * 4);
}

enum { W_BF16, W_F32, W_FP8 }; /* the weights of a tile: bf16 pairs, f32 pairs, FP8 k-major */

INLINE float dot(int wf, const unsigned char *tile, int p, size_t n, size_t k, const float *x)
{
    return wf == W_FP8 ? dot_fp8(tile, 2, p, n, k, x) : dot_pairs(wf == W_F32, tile, p, n, k, x);
}

INLINE float down_dot(int wf, const unsigned char *tile, size_t n, size_t k, const float *x)
{
    return wf == W_FP8 ? down_dot_fp8(tile, n, k, x) : down_dot_pairs(wf == W_F32, tile, n, k, x);
}

INLINE void gateup(int wf, size_t m, size_t k, const void *const *x, const void *tile,
                   const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    for (size_t i = 0; i < m; i++) {
        float *hi = (float *)h + i * h_stride;
        for (size_t n = 0; n < n_valid; n++) {
            float g = dot(wf, tile, 0, n, k, x[i]), u = dot(wf, tile, 1, n, k, x[i]);
            hi[n] = moe_xr_act(act, g, u);
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
MOE_XR_ENTRIES(f32, W_F32)
MOE_XR_ENTRIES(fp8, W_FP8)

MOE_XL_SET(moe_expert_bf16_f32_8x16__ref, MOE_RECIPE_F32, MOE_REQ_SCALAR, MR, MOE_XL_BF16_LAYOUT,
           .gateup = gateup_bf16, .down = down_bf16);

MOE_XL_SET(moe_expert_fp8_f32_8x16__ref, MOE_RECIPE_F32, MOE_REQ_SCALAR, MR, MOE_XL_FP8_LAYOUT(fp8),
           .gateup = gateup_fp8, .down = down_fp8);

MOE_XL_SET(moe_expert_f32_f32_8x16__ref, MOE_RECIPE_F32, MOE_REQ_SCALAR, MR, MOE_XL_F32_LAYOUT,
           .gateup = gateup_f32, .down = down_f32);
