/* expert.h — internal: the expert GEMM kernel sets (packing + gate/up and down micro-kernels). */
#ifndef MOE_KERNELS_EXPERT_H
#define MOE_KERNELS_EXPERT_H

#include <stddef.h>
#include <stdint.h>

#include "moe.h"

/*
 * An expert MLP is down(act(gate·x + bg, up·x + bu)) + bd. The engine (src/experts/) runs it
 * for a list of token rows with one kernel set, chosen with its packing by
 * moe_select_experts() (src/select/select.h):
 *
 *  - pack_gateup turns the checkpoint's gate [I, H] and up [I, H] (any strides, any dtype of
 *    the format, scales, optional biases) into tiles of NR intermediate rows: the tile holds
 *    the NR gate rows and the NR up rows side by side at every K step, their block scales
 *    and biases next to them, so one pass over x yields both projections. pack_down does the
 *    same for down [H, I] without the pairing. Rows past the edge are zero-padded.
 *  - the gate/up micro-kernel computes, for m ≤ MR token rows and one tile, the activation of
 *    the two projections in its epilogue and writes h in the recipe's activation type;
 *    the down micro-kernel computes y = down·h + bd for one tile, in f32.
 *  - unpack_* rebuild the checkpoint layout from the packed bytes exactly (tests check
 *    unpack(pack(w)) == w).
 *
 * Same token, same bits: every output element is accumulated over K in one fixed order that
 * does not depend on m, on the token's position in the tile, or on the tile's position in
 * the work split. A token routed alone and the same token in a batch of 300 get the same bits.
 */

/* How activations meet the weights. Fixed per layer at creation, the same at every T. */
typedef enum moe_expert_recipe {
    MOE_RECIPE_F32 = 0,  /* activations f32; weights widened to f32 in registers; fp32 FMA */
    MOE_RECIPE_BF16 = 1, /* activations rounded to bf16 once per forward; vdpbf16ps; fp32 acc */
} moe_expert_recipe;

/* The activation of the gate/up epilogue (moe_activation of src/model/model.h). */
typedef struct moe_act_params {
    int kind;    /* 0 SiLU-GLU, 1 SiLU-GLU clamped at limit, 2 gpt-oss */
    float limit; /* kinds 1 and 2 */
    float alpha; /* kind 2: 1.702 */
} moe_act_params;

/* One weight matrix [rows, cols] = [out, in] as the checkpoint holds it. Element (r, c) is at
 * data + (r * row_stride + c * col_stride) elements (gpt-oss stores its experts transposed
 * and gate/up interleaved: strides express that without a copy). data may be unaligned. */
typedef struct moe_weight_src {
    const void *data;
    moe_dtype dtype; /* BF16 / F16 / F32 weights, or F8_E4M3 codes */
    int64_t rows, cols;
    int64_t row_stride, col_stride;
    /* FP8 block scales [ceil(rows/block_rows), ceil(cols/block_cols)], row-major; NULL else. */
    const void *scale;
    moe_dtype scale_dtype; /* F32, BF16 or F8_E8M0 */
    int block_rows, block_cols;
    /* Optional bias [rows] (gpt-oss), element r at bias + r * bias_stride. */
    const void *bias;
    moe_dtype bias_dtype;
    int64_t bias_stride;
} moe_weight_src;

/* h[i][n] for the tile's NR intermediate rows (n < n_valid), i < m ≤ MR. x[i] points at token
 * row i (k activations of the recipe's type); h rows of the recipe's type, h_stride elements
 * apart. */
typedef void moe_expert_gateup_ukernel(size_t m, size_t k, const void *const *x, const void *tile,
                                       const moe_act_params *act, void *h, size_t h_stride,
                                       size_t n_valid);

/* y[i][n] = down_n · h_i + bd_n for the tile's NR output rows (n < n_valid), i < m ≤ MR, in f32,
 * y rows y_stride floats apart. */
typedef void moe_expert_down_ukernel(size_t m, size_t k, const void *const *h, const void *tile,
                                     float *y, size_t y_stride, size_t n_valid);

/* One kernel set: everything that must agree with one packed layout. */
typedef struct moe_expert_kernels {
    const char *name; /* moe_expert_<format>_<recipe>_<MR>x<NR>__<isa> */
    int format;       /* moe_weight_format */
    moe_expert_recipe recipe;
    uint32_t isa;     /* MOE_REQ_* */
    int mr, nr;
    /* Bytes of one packed tile for K = k (gate/up: both projections). */
    size_t (*gateup_tile_bytes)(int64_t k);
    size_t (*down_tile_bytes)(int64_t k);
    /* Packs all ceil(rows / NR) tiles into dst; MOE_EVALUE naming the element for a NaN code
     * or scale the kernels cannot carry. */
    moe_status (*pack_gateup)(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
    moe_status (*pack_down)(const moe_weight_src *down, void *dst);
    /* Rebuild the checkpoint layout (row-major [rows, cols] in src dtypes, and the scales and
     * biases) from packed bytes; dst buffers as the moe_weight_src describe them, unit
     * col_stride and row_stride = cols. */
    void (*unpack_gateup)(const void *packed, moe_weight_src *gate, moe_weight_src *up);
    void (*unpack_down)(const void *packed, moe_weight_src *down);
    moe_expert_gateup_ukernel *gateup;
    moe_expert_down_ukernel *down;
} moe_expert_kernels;

#endif
