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
 *  - pack_gateup turns the checkpoint's gate [I, H] and up [I, H] (any strides, scales of any
 *    dtype the format has, optional biases) into tiles of NR intermediate rows: the tile holds
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
 *
 * docs/kernels.md ("Expert kernel sets") draws the packed layouts and states the arithmetic
 * of each recipe exactly; kernels/ref/expert_layout.h has the offsets in code.
 */

/* The weight formats kernel sets exist for: the values of moe_weight_format (src/model/model.h;
 * tests/kernels/test_expert_select.c checks they agree). MXFP4 has no kernel set yet. */
enum {
    MOE_EXPERT_FMT_BF16 = 0,      /* bf16 [out, in] */
    MOE_EXPERT_FMT_FP8_BLOCK = 1, /* E4M3 [out, in] + scale [ceil(out/128), ceil(in/128)] */
};

/* Rows of every tile (gate/up: per projection; down: output rows). It divides the FP8 scale
 * block (128), so all rows of a tile share their scales. */
#define MOE_EXPERT_NR 16
/* The FP8 scale block along K (weight_block_size [128, 128]). */
#define MOE_EXPERT_KBLOCK 128

/* How activations meet the weights. Fixed per layer at creation, the same at every T. */
typedef enum moe_expert_recipe {
    MOE_RECIPE_F32 = 0,  /* activations f32; weights widened to f32 in registers; fp32 FMA */
    MOE_RECIPE_BF16 = 1, /* activations rounded to bf16 once per forward; vdpbf16ps; fp32 acc */
} moe_expert_recipe;

/* The activation of the gate/up epilogue (moe_activation of src/model/model.h). With
 * g and u the projections plus their biases, in f32:
 *   0 SiLU-GLU:           h = (g·σ(g))·u
 *   1 clamped (DS-V4):    g = min(g, limit), u = clamp(u, -limit, limit), h = (g·σ(g))·u
 *   2 gpt-oss:            the same clamps, h = (g·σ(alpha·g))·(u + 1)
 * σ is moe_math_sigmoid (kernels/ref/math_ref.h) and its SIMD twins; a NaN passes the
 * clamps (it is not replaced by the limit), as torch.clamp lets it through. */
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
    moe_dtype dtype; /* BF16 weights (format BF16), or F8_E4M3 codes (format FP8_BLOCK) */
    int64_t rows, cols;
    int64_t row_stride, col_stride;
    /* FP8 block scales [ceil(rows/block_rows), ceil(cols/block_cols)], row-major; NULL else.
     * block_cols must be 128 and block_rows a multiple of MOE_EXPERT_NR. */
    const void *scale;
    moe_dtype scale_dtype; /* F32, BF16 or F8_E8M0 (U8 is read as E8M0 bytes) */
    int block_rows, block_cols;
    /* Optional bias [rows] (gpt-oss), element r at bias + r * bias_stride; BF16, F16 or F32. */
    const void *bias;
    moe_dtype bias_dtype;
    int64_t bias_stride;
} moe_weight_src;

/* Where unpack writes one matrix in the checkpoint layout: data row-major [rows, cols] of
 * dtype; scale row-major [ceil(rows/block_rows), ceil(cols/128)] of scale_dtype (FP8 only);
 * bias [rows] of bias_dtype, or NULL when not wanted. Converting to the source's own dtypes
 * is exact; unpack does not know them, so the caller names them. */
typedef struct moe_weight_dst {
    void *data;
    moe_dtype dtype;
    int64_t rows, cols;
    void *scale;
    moe_dtype scale_dtype;
    int block_rows, block_cols;
    void *bias;
    moe_dtype bias_dtype;
} moe_weight_dst;

/* h[i][n] for the tile's NR intermediate rows (n < n_valid), i < m ≤ MR. x[i] points at token
 * row i (k activations of the recipe's type: float, or bf16 codes as uint16_t); h rows of the
 * recipe's type, h_stride elements apart. Reads exactly x[i][0..k) and the tile; writes
 * exactly h[i][0..n_valid). Any alignment. 1 ≤ n_valid ≤ NR. */
typedef void moe_expert_gateup_ukernel(size_t m, size_t k, const void *const *x, const void *tile,
                                       const moe_act_params *act, void *h, size_t h_stride,
                                       size_t n_valid);

/* y[i][n] = down_n · h_i + bd_n for the tile's NR output rows (n < n_valid), i < m ≤ MR, in f32,
 * y rows y_stride floats apart; h[i] points at k activations of the recipe's type. */
typedef void moe_expert_down_ukernel(size_t m, size_t k, const void *const *h, const void *tile,
                                     float *y, size_t y_stride, size_t n_valid);

/* One kernel set: everything that must agree with one packed layout. */
typedef struct moe_expert_kernels {
    const char *name; /* moe_expert_<format>_<recipe>_<MR>x<NR>__<isa> */
    int format;       /* MOE_EXPERT_FMT_* (moe_weight_format) */
    moe_expert_recipe recipe;
    uint32_t isa; /* MOE_REQ_* */
    int mr, nr;   /* mr: the most tokens one call takes; nr rows per tile, for gate/up
                     (each projection) and down alike */
    /* Bytes of one packed tile for K = k (gate/up: both projections), a multiple of 64;
     * 0 for k < 1 or k > 2^40 (below that every tile size fits in 64 bits). */
    size_t (*gateup_tile_bytes)(int64_t k);
    size_t (*down_tile_bytes)(int64_t k);
    /* Packs all ceil(rows / NR) tiles into dst (64-byte aligned, tiles back to back). Every
     * argument and every value is checked before the first byte is written, so dst is
     * untouched on error: MOE_EINVAL (NULLs), MOE_EDTYPE, MOE_ESHAPE, MOE_EUNSUPPORTED (a
     * scale block the kernels do not take), MOE_EOVERFLOW (strides or K past the limits)
     * naming the projection and the field; MOE_EVALUE naming the projection, row and column
     * of a NaN E4M3 code, or the block of a scale that is NaN, infinite, ≤ 0 or ≥ 2^120. */
    moe_status (*pack_gateup)(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
    moe_status (*pack_down)(const moe_weight_src *down, void *dst);
    /* Rebuild the checkpoint layout from packed bytes (for tests). MOE_EINVAL / MOE_EDTYPE for
     * a destination that does not fit the format; nothing is written then. */
    moe_status (*unpack_gateup)(const void *packed, const moe_weight_dst *gate,
                                const moe_weight_dst *up);
    moe_status (*unpack_down)(const void *packed, const moe_weight_dst *down);
    moe_expert_gateup_ukernel *gateup;
    moe_expert_down_ukernel *down;
} moe_expert_kernels;

/* Every kernel set compiled into this build, declared from the four enumerators (one per
 * format and recipe; each lists its reference first). */
#define MOE_KERNEL(name, isa, ref) extern const moe_expert_kernels name;
#include "kernels/expert_bf16_f32.inc"
#include "kernels/expert_bf16_bf16.inc"
#include "kernels/expert_fp8_f32.inc"
#include "kernels/expert_fp8_bf16.inc"
#undef MOE_KERNEL

#endif
