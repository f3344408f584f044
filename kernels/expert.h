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
 * of each recipe exactly; kernels/ref/expert_layout.h has the offsets in code
 * (kernels/ref/expert_mxfp4_layout.h for MXFP4).
 */

/* The weight formats kernel sets exist for: the values of moe_weight_format (src/model/model.h;
 * tests/kernels/test_expert_select.c checks they agree). */
enum {
    MOE_EXPERT_FMT_BF16 = 0,      /* bf16 [out, in] */
    MOE_EXPERT_FMT_FP8_BLOCK = 1, /* E4M3 [out, in] + scale [ceil(out/128), ceil(in/128)] */
    MOE_EXPERT_FMT_MXFP4 = 2,     /* E2M1 codes [out, in/2] (two per byte, low nibble = even
                                     element) + one E8M0 scale per 32 along K [out, in/32] */
    MOE_EXPERT_FMT_F32 = 3,       /* f32 [out, in] */
    MOE_EXPERT_FMT_F16 = 4,       /* f16 [out, in]: widened exactly, it packs into the f32
                                     sets' tiles, so those sets (format F32) serve it */
    /* int4 nibbles [out, in/2] (compressed-tensors' int32 words as little-endian bytes,
     * element 2i low, stored value + 8) + one bf16 / f16 / f32 scale per row and G along K */
    MOE_EXPERT_FMT_INT4_GROUP = 5,
};

/* Rows of every tile (gate/up: per projection; down: output rows). It divides the FP8 scale
 * block (128), so all rows of a tile share their scales. */
#define MOE_EXPERT_NR 16
/* The FP8 scale block along K (weight_block_size [128, 128]). */
#define MOE_EXPERT_KBLOCK 128
/* The MX block along K: one E8M0 weight scale (MXFP4) and one activation scale (the Q8
 * recipe) per 32 values. MXFP4 shapes need K (H for gate/up, I for down) a multiple of it. */
#define MOE_EXPERT_MXBLOCK 32

/* How activations meet the weights. Fixed per layer at creation, the same at every T. */
typedef enum moe_expert_recipe {
    MOE_RECIPE_F32 = 0,  /* activations f32; weights widened to f32 in registers; fp32 FMA */
    MOE_RECIPE_BF16 = 1, /* activations rounded to bf16 once per forward; vdpbf16ps; fp32 acc */
    MOE_RECIPE_Q8 = 2,   /* MXFP4 weights: activations quantised per 32-block to int8 with one
                            f32 scale (prepare_act); exact int32 dot products with the doubled
                            E2M1 values; fp32 accumulation across blocks (below) */
    MOE_RECIPE_TILE = 3, /* bf16, FP8, MXFP4 and INT4 weights: activations rounded to bf16 once
                            per forward (as BF16); the tile unit's arithmetic, tdpbf16ps, K cut
                            every 32 (FP8: per 128-K block, then one scale FMA; MXFP4: each
                            weight folded with its block scale into one bf16; INT4: per group of
                            G, then one FMA with the row's group scale; below) */
} moe_expert_recipe;

/*
 * The tile recipe (bf16, FP8, MXFP4 and INT4 weights), exactly; every ISA gives these bits.
 *
 * Activations x are the BF16 recipe's bf16 rows (rounded once per forward); gate/up writes h
 * as bf16 codes, down reads them; y is f32. For each output element (row n of a tile, one
 * token), K is cut into chunks of 32 (the last one zero-padded in both x and w_n, which the
 * arithmetic reads: a padded step can turn a chain's -0 into +0, as the tile unit's does):
 *
 *   acc = +0
 *   for c = 0 .. ceil(K/32) - 1:
 *       acc = moe_tile_bf16_dot_ref(acc, x + 32c, w_n + 32c, 16)     (kernels/tile_bf16.h)
 *   v = acc + bias_n                  (a plain f32 addition, nearest even; bias 0 when none)
 *   gate/up: h = bf16_rne(act(v_gate, v_up)), the BF16 recipe's epilogue; down: y = v
 *
 * so per chunk two fp32 chains from +0, one over the even elements and one over the odd,
 * each FMA rounded once to nearest even with denormal operands read as zero and denormal
 * results flushed after rounding (kernels/ref/fma_ftz.h); then acc = ADD(DAZ(acc), ADD(e, o)),
 * both additions flushed too. This is tdpbf16ps's arithmetic, one instruction per chunk with
 * C = acc (the AMX-BF16 sets); FMA under MXCSR DAZ|FTZ on zmm or ymm gives the same bits (the
 * AVX-512 and AVX2 sets: two FMA chains per chunk, then the two additions, MXCSR put back for
 * the bias and the activation). NaN payloads may differ between sets; NaN-ness does not.
 *
 * FP8 weights (the FP8 pairs layout, kernels/ref/expert_layout.h): w''_n is row n's codes
 * widened to the bf16 of e4m3(code) · 2^-8 (exact) and s_b the packed scale of block b
 * (scale · 2^8). The chunks run per 128-K block from a zero sum, and the block's sum meets its
 * scale in one fused multiply-add under MXCSR's defaults (no flush):
 *
 *   acc = +0
 *   for each 128-K block b:
 *       C = +0
 *       for each 32-K chunk c of block b (4, fewer in the last; the last chunk of K
 *       zero-padded in x and w''):
 *           C = moe_tile_bf16_dot_ref(C, x + 32c, w''_n + 32c, 16)
 *       acc = fmaf(C, s_b, acc)
 *   v = acc + bias_n, then the epilogue as above
 *
 * (on the tile unit: per block the C tiles zeroed, one tdpbf16ps per chunk, stored, and the
 * FMA on the vector units; the AVX-512 and AVX2 sets put MXCSR back before the FMA).
 *
 * MXFP4 weights (the MXFP4 tile pairs layout, kernels/ref/expert_mxfp4_tile_layout.h): each
 * weight w = e2m1(code) · 2^(s - 127), with s the E8M0 scale of its row and 32-block, is one
 * bf16 value exactly (the E2M1 magnitudes 0.5 .. 6 have at most 2 significant bits, and w is a
 * bf16 normal for every s in [MOE_TILE_MX_SCALE_MIN, MOE_TILE_MX_SCALE_MAX] = [2, 252]; zero
 * codes are zeros of their sign). With w_n row n's weights so widened, a 32-K chunk is exactly
 * one MX block and the arithmetic is the bf16 weights' above, unchanged:
 *
 *   acc = +0
 *   for c = 0 .. K/32 - 1:  acc = moe_tile_bf16_dot_ref(acc, x + 32c, w_n + 32c, 16)
 *   v = acc + bias_n, then the epilogue as above
 *
 * so MXFP4 in the tile recipe is the bf16 tile recipe on the exactly widened weights, the same
 * bits on every ISA, m and thread count. A matrix with any scale outside [2, 252] cannot be
 * widened exactly: its packing is refused (MOE_EVALUE), and a layer asked for the tile recipe
 * gives that expert group the Q8 recipe instead, the reason saying so (src/layer/
 * layer_plan.c; docs/kernels.md).
 *
 * INT4 group weights (the INT4 tile pairs layout, kernels/ref/expert_int4_tile_layout.h): w_n is
 * row n's integers q = u - 8 in [-8, 7] (u the stored nibble), each one bf16 exactly, and s_g the
 * row's scale of group g as an f32 (converted once at packing; G a multiple of 32 dividing K).
 * Nothing is folded: q · s has up to 3 + 8 significant bits, more than bf16 holds. Each group's
 * G/32 chunks are summed from +0 as the FP8 weights' blocks are, and the group's sum meets its
 * scale in one fused multiply-add under MXCSR's defaults (no flush):
 *
 *   acc = +0
 *   for each group g (columns gG .. gG + G - 1):
 *       C = +0
 *       for each 32-K chunk c of group g:  C = moe_tile_bf16_dot_ref(C, x + 32c, w_n + 32c, 16)
 *       acc = fmaf(C, s_g, acc)
 *   v = acc + bias_n, then the epilogue as above
 *
 * (the FP8 structure with a block of G instead of 128 and a scale per row: on the tile unit the
 * C tiles zeroed per group, one tdpbf16ps per chunk, stored, and the FMA on the vector units with
 * the 16 rows' scales; the AVX-512 and AVX2 sets put MXCSR back before it). K is a multiple of
 * 32, so no chunk is padded. A group with scale 0 still runs: an Inf or NaN in its x makes C,
 * and then acc, NaN.
 *
 * It is not the BF16 recipe's arithmetic: vdpbf16ps takes one chain from the accumulator, odd
 * product then even per pair, while tdpbf16ps, per instruction of at most 16 pairs, runs the
 * two chains from +0, adds them, and adds that sum to C last; on random inputs the two differ
 * in 19-85 % of the elements. docs/kernels.md, "The tile unit's bf16 arithmetic (tdpbf16ps)",
 * has the experiment behind the statement, and "The tile recipe" the layout
 * (kernels/ref/expert_layout.h, "tile pairs") and the selection.
 */

/* The E8M0 scales the tile recipe folds into bf16 weights exactly (above). */
#define MOE_TILE_MX_SCALE_MIN 2
#define MOE_TILE_MX_SCALE_MAX 252

static inline bool moe_tile_mx_scale_ok(unsigned s)
{
    return s >= MOE_TILE_MX_SCALE_MIN && s <= MOE_TILE_MX_SCALE_MAX;
}

/* Whether the recipe's activations (x and h) are bf16 codes: BF16 and TILE read the same rows. */
static inline bool moe_recipe_bf16_rows(moe_expert_recipe r)
{
    return r == MOE_RECIPE_BF16 || r == MOE_RECIPE_TILE;
}

/*
 * The Q8 recipe (MXFP4 weights), exactly; every ISA gives these bits.
 *
 * Activation rows. A row of k f32 values (k a multiple of 32, nb = k/32 blocks) is prepared
 * once by prepare_act into act_row_bytes(k) bytes, any alignment (64 is faster):
 *
 *   offset 0                       q:    k int8 codes, zeros up to pad64(k)
 *   offset pad64(k)                xs:   nb f32 block scales, zeros up to pad64(4·nb)
 *   offset pad64(k) + pad64(4·nb)  corr: nb int32, corr_b = -MOE_Q8_WOFFSET · Σ_{j<32} q_j,
 *                                        zeros up to pad64(4·nb)
 *
 * (pad64(n) rounds n up to a multiple of 64; moe_q8_* below have the offsets.) Per block of
 * 32 values x_j, in f32:
 *   - any x_j NaN or ±Inf: xs = NaN (0x7FC00000), q = 0, corr = 0 (every output that reads
 *     the block is then NaN; nothing traps, nothing is skipped);
 *   - else amax = max |x_j|, d = amax / 127 (one IEEE division, nearest even); d == 0 (an
 *     all-zero block, or amax below 127·2^-150): xs = 0, q = 0;
 *   - else xs = d, q_j = clamp(rne(x_j / d), -127, 127) (IEEE division, then round to nearest
 *     even integer: the clamp only matters when d is subnormal).
 * corr is what the SIMD kernels start each block's integer sum from: they multiply the
 * unsigned weights w2 + MOE_Q8_WOFFSET (in [0, 24]) by the signed q (vpdpbusd /
 * vpmaddubsw take u8 × s8), and Σ (w2 + 12)·q + corr = Σ w2·q exactly.
 *
 * Gate/up reads x rows prepared with k = H and writes h in f32 (the activation in f32, as the
 * F32 recipe); the engine then prepares each h row with k = I (h must have exactly I values
 * per row: prepare_act reads x[0..k)) and down reads those rows. So for this recipe x[i] and
 * h[i] of the micro-kernels point at prepared rows, and gate/up's h output is float.
 *
 * Arithmetic, per output row n and token, with w2_j ∈ {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12} the
 * doubled E2M1 value of weight j (exact int8) and e_b the row's E8M0 scale byte of block b:
 *   isum_b = Σ_{j<32} w2_j · q_j                   (int32: exact, so any order of addition)
 *   S_b    = xs_b · 2^(e_b - 128)                  (one f32 multiply; 2^(e-128) is exact in
 *                                                   f32 for every e ≤ 254: the weight scale
 *                                                   2^(e-127) and the 1/2 of the doubled
 *                                                   table folded into one power of two)
 *   acc    = fma((float)isum_b, S_b, acc)          for b = 0, 1, ..., nb-1, acc = 0 first
 *   out    = acc + bias (f32), then gate/up's activation, as for the other recipes.
 * (float)isum is exact (|isum| ≤ 32·12·127 < 2^24) and no flush to zero is involved, so the
 * result depends only on these IEEE operations in this order.
 *
 * INT4 group weights (format INT4_GROUP) run the same recipe with w_j = u_j - 8 (u the stored
 * nibble; the SIMD operand u + 4 = w + 12 against the same corrections) and
 *   S_b    = xs_b · ws_b                           (one f32 multiply, rounded to nearest even;
 *                                                   ws_b the row's group scale of block b as
 *                                                   an f32, converted once at packing)
 * (|isum| ≤ 32·8·127); the rest as above.
 */
#define MOE_Q8_WOFFSET 12

static inline size_t moe_q8_pad64(size_t n) { return (n + 63) & ~(size_t)63; }
/* Offsets in a prepared row of k values (k a multiple of 32). */
static inline size_t moe_q8_scales_offset(size_t k) { return moe_q8_pad64(k); }
static inline size_t moe_q8_corr_offset(size_t k)
{
    return moe_q8_pad64(k) + moe_q8_pad64(k / MOE_EXPERT_MXBLOCK * 4);
}

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
 * and gate/up interleaved: strides express that without a copy). data may be unaligned.
 *
 * MXFP4 (format MXFP4; cols = K, a multiple of 32): data holds the packed E2M1 codes, two per
 * byte, low nibble = even column; row r's cols/2 bytes are contiguous from data + r *
 * row_stride, with row_stride in BYTES, and col_stride must be 1. scale holds the E8M0 bytes
 * [rows, cols/32]: the scale of row r, block b (columns 32b..32b+31) is at scale + r *
 * scale_stride + b (bytes; scale_dtype F8_E8M0 or U8, block_rows 1, block_cols 32). Strides
 * may be negative. gpt-oss's gate_up_proj_blocks [2I, H/32, 16] is then gate = (data: row 0,
 * row_stride 2·H/2 = H) and up = (data + H/2, row_stride H), scales likewise (scale_stride
 * 2·H/32, up from + H/32), biases with bias_stride 2 (up from element 1); DeepSeek-V4's
 * w1/w3 [out, in/2] are plain rows (row_stride in/2, scale_stride in/32). */
typedef struct moe_weight_src {
    const void *data;
    moe_dtype dtype; /* BF16 weights (format BF16), F32 or F16 (format F32, which serves F16),
                        F8_E4M3 codes (format FP8_BLOCK), or the
                        packed codes of format MXFP4: F4_E2M1 (U8 and I8, as checkpoints
                        label them, are read the same) */
    int64_t rows, cols;
    int64_t row_stride, col_stride;
    /* FP8 block scales [ceil(rows/block_rows), ceil(cols/block_cols)], row-major; NULL else.
     * block_cols must be 128 and block_rows a multiple of MOE_EXPERT_NR. MXFP4: see above. */
    const void *scale;
    moe_dtype scale_dtype; /* F32, BF16 or F8_E8M0 (U8 is read as E8M0 bytes) */
    int block_rows, block_cols;
    int64_t scale_stride; /* MXFP4: bytes between rows of scales; ignored by the FP8 format */
    /* Optional bias [rows] (gpt-oss), element r at bias + r * bias_stride; BF16, F16 or F32. */
    const void *bias;
    moe_dtype bias_dtype;
    int64_t bias_stride;
} moe_weight_src;

/* Where unpack writes one matrix in the checkpoint layout: data row-major [rows, cols] of
 * dtype; scale row-major [ceil(rows/block_rows), ceil(cols/128)] of scale_dtype (FP8 only);
 * bias [rows] of bias_dtype, or NULL when not wanted. Converting to the source's own dtypes
 * is exact; unpack does not know them, so the caller names them. MXFP4: data row-major
 * [rows, cols/2] bytes (dtype F4_E2M1, U8 or I8: the same bytes), scale row-major [rows,
 * cols/32] E8M0 bytes (scale_dtype F8_E8M0 or U8, block_rows 1, block_cols 32). */
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
 * row i (k activations of the recipe's type: float, bf16 codes as uint16_t, or the Q8
 * recipe's prepared row of act_row_bytes(k) bytes); h rows of the recipe's type (float for
 * F32 and Q8, bf16 codes for BF16 and TILE), h_stride elements apart. Reads exactly x[i]'s row and
 * the tile; writes exactly h[i][0..n_valid). Any alignment. 1 ≤ n_valid ≤ NR. */
typedef void moe_expert_gateup_ukernel(size_t m, size_t k, const void *const *x, const void *tile,
                                       const moe_act_params *act, void *h, size_t h_stride,
                                       size_t n_valid);

/* y[i][n] = down_n · h_i + bd_n for the tile's NR output rows (n < n_valid), i < m ≤ MR, in f32,
 * y rows y_stride floats apart; h[i] points at k activations of the recipe's type (Q8: a
 * prepared row of k = I values). */
typedef void moe_expert_down_ukernel(size_t m, size_t k, const void *const *h, const void *tile,
                                     float *y, size_t y_stride, size_t n_valid);

/* The same as n_tiles calls of the ukernels above over consecutive tiles (tile i at
 * tile + i · tile_bytes(k), its outputs NR elements after tile i - 1's in each h / y row),
 * bit for bit: every tile but the last has NR valid rows, the last n_valid. A set may run
 * the tiles side by side, so activations it reorganises per call serve several tiles. */
typedef void moe_expert_gateup_tiles_ukernel(size_t m, size_t k, const void *const *x,
                                             const void *tile, size_t n_tiles,
                                             const moe_act_params *act, void *h, size_t h_stride,
                                             size_t n_valid);
typedef void moe_expert_down_tiles_ukernel(size_t m, size_t k, const void *const *h,
                                           const void *tile, size_t n_tiles, float *y,
                                           size_t y_stride, size_t n_valid);

/* One kernel set: everything that must agree with one packed layout. */
/* K above 2^40 is refused by every expert pack and tile size: sizes below it fit in 64 bits. */
#define MOE_EXPERT_MAX_K ((int64_t)1 << 40)

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
     * of a NaN E4M3 code, or the block of a scale that is NaN, infinite, ≤ 0 or ≥ 2^120;
     * MXFP4: MOE_ESHAPE for K not a multiple of 32, MOE_EVALUE naming the row and block of
     * an E8M0 scale 0xFF (NaN). */
    moe_status (*pack_gateup)(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
    moe_status (*pack_down)(const moe_weight_src *down, void *dst);
    /* Rebuild the checkpoint layout from packed bytes (for tests). MOE_EINVAL / MOE_EDTYPE for
     * a destination that does not fit the format; nothing is written then. */
    moe_status (*unpack_gateup)(const void *packed, const moe_weight_dst *gate,
                                const moe_weight_dst *up);
    moe_status (*unpack_down)(const void *packed, const moe_weight_dst *down);
    moe_expert_gateup_ukernel *gateup;
    moe_expert_down_ukernel *down;
    /* Optional (NULL: the engine calls gateup / down tile by tile). */
    moe_expert_gateup_tiles_ukernel *gateup_tiles;
    moe_expert_down_tiles_ukernel *down_tiles;
    /* The m the multi-tile entries do more for than tile-by-tile calls: from tiles_from_m on
     * (0: every m) and up to tiles_to_m (0: none); for the m between, the engine treats the
     * set as one without them. */
    int tiles_from_m, tiles_to_m;
    /* Tiles per call of the multi-tile entries when a span has more rows than MR (0: the
     * engine's rule, a run of tiles that stays in L2 beside a chunk's rows). A set that widens
     * its tiles in every call may ask for more, so that the chunk's rows stay in L2 while the
     * tiles stream through. */
    int tiles_per_call;
    /* The activation rows of the Q8 recipe (above): bytes of one prepared row of k values (0
     * for k < 1, k not a multiple of 32, or k > 2^40), and the preparation itself, which reads
     * x[0..k) (f32, any alignment) and writes exactly act_row_bytes(k) bytes at dst (any
     * alignment; padding zeroed). Every set of the recipe writes the same bytes. Thread-safe,
     * no allocation. NULL for the F32, BF16 and TILE recipes, whose rows are the plain f32 / bf16
     * arrays the engine writes itself. */
    size_t (*act_row_bytes)(int64_t k);
    void (*prepare_act)(size_t k, const float *x, void *dst);
} moe_expert_kernels;

/* Whether calls of m rows of a phase (gate/up, else down) go through the set's multi-tile
 * entry for it: where it has one, from tiles_from_m rows on and up to tiles_to_m (the
 * engine's rule, which the benches follow). */
static inline bool moe_expert_uses_tiles(const moe_expert_kernels *ks, bool gateup, size_t m)
{
    const bool has = gateup ? ks->gateup_tiles != NULL : ks->down_tiles != NULL;
    return has && (m >= (size_t)ks->tiles_from_m || m <= (size_t)ks->tiles_to_m);
}

/* Every kernel set compiled into this build, declared from the eleven enumerators (one per
 * format and recipe; each lists its reference first). */
#define MOE_KERNEL(name, isa, ref) extern const moe_expert_kernels name;
#include "kernels/expert_bf16_f32.inc"
#include "kernels/expert_f32_f32.inc"
#include "kernels/expert_bf16_bf16.inc"
#include "kernels/expert_fp8_f32.inc"
#include "kernels/expert_fp8_bf16.inc"
#include "kernels/expert_mxfp4_q8.inc"
#include "kernels/expert_bf16_tile.inc"
#include "kernels/expert_fp8_tile.inc"
#include "kernels/expert_mxfp4_tile.inc"
#include "kernels/expert_int4_q8.inc"
#include "kernels/expert_int4_tile.inc"
#undef MOE_KERNEL

#endif
