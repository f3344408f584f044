/* expert_mxfp4_layout.h — internal: the packed MXFP4 expert tiles and the Q8 rows, in code. */
#ifndef MOE_KERNELS_REF_EXPERT_MXFP4_LAYOUT_H
#define MOE_KERNELS_REF_EXPERT_MXFP4_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/expert.h"

/*
 * One tile holds NR = 16 rows of np projections (gate/up: np = 2, gate then up; down: np = 1)
 * over K = 32·nb. docs/kernels.md ("MXFP4") draws it. Nothing is widened: 4 bits per code
 * and 8 per 32-block scale stay 4.25 bits per weight (plus the biases).
 *
 *   bias     np × 16 f32 (zeros without a checkpoint bias)
 *   steps    step s covers the blocks b = S·s .. S·s + r - 1 (S = 4/np blocks, so each step
 *            holds 4 (block, projection) units; r = S except in a short last step):
 *              codes: for i < r, p < np: unit (i, p) = 256 bytes, block S·s + i of
 *                     projection p, in 4 chunks of 64 bytes
 *              scales: one 64-byte line; the 16 E8M0 bytes of unit (i, p) (row n at byte n)
 *                      at 16·(i·np + p); unused entries zero
 *            so a full step is 1088 bytes (17 cache lines): 64 K values of gate and up, or
 *            128 of down, then their scales.
 *
 * Chunk c (0..3) of a unit, byte 4n + t (row n, t = 0..3):
 *   low nibble  = code of row n at k = 32b + 4c + t        (quad c of the block)
 *   high nibble = code of row n at k = 32b + 4c + 16 + t   (quad c + 4)
 * So masking a 64-byte chunk with 0x0F gives, per dword lane n, the 4 codes of row n for one
 * quad of k, and shifting it right by 4 the 4 codes of the quad 16 further: after a byte
 * shuffle through the doubled-value table each lane is exactly the operand of one vpdpbusd
 * (or vpmaddubsw) against 4 broadcast activation bytes. A 32-byte half is the same for the
 * rows 0..7 or 8..15 (AVX2). Rows past the matrix's edge have codes 0 and scale 0x7F (1.0:
 * a normal number, so no product with it is subnormal), and are never written out.
 */

#define MOE_MX_NR MOE_EXPERT_NR
#define MOE_MX_BLOCK MOE_EXPERT_MXBLOCK
#define MOE_MX_UNIT 256 /* code bytes of one block of one projection */
#define MOE_MX_CHUNK 64
#define MOE_MX_LINE 64 /* the scale line of a step */
#define MOE_MX_UNITS_PER_STEP 4
#define MOE_MX_STEP_BYTES (MOE_MX_UNITS_PER_STEP * MOE_MX_UNIT + MOE_MX_LINE)
/* The scale byte packing writes for rows past the edge. */
#define MOE_MX_PAD_SCALE 0x7F

/* The doubled E2M1 values, code 0..15 (code 8 is -0: 0). w2 = 2 · e2m1(code), exact int8. */
#define MOE_MX_W2_TABLE {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
/* The same plus MOE_Q8_WOFFSET: the unsigned operand of the SIMD kernels (0..24). */
#define MOE_MX_W2U_TABLE {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0}

static inline size_t moe_mx_step_blocks(int np) { return (size_t)(MOE_MX_UNITS_PER_STEP / np); }
static inline size_t moe_mx_bias_bytes(int np) { return (size_t)np * MOE_MX_NR * sizeof(float); }

/* Where step s starts (every step before it is full). */
static inline size_t moe_mx_step_at(int np, size_t s)
{
    return moe_mx_bias_bytes(np) + s * MOE_MX_STEP_BYTES;
}

/* Blocks in step s of a tile of nb blocks. */
static inline size_t moe_mx_step_len(int np, size_t nb, size_t s)
{
    const size_t S = moe_mx_step_blocks(np), left = nb - s * S;
    return left < S ? left : S;
}

/* The 256 code bytes of block b, projection p. */
static inline size_t moe_mx_unit_at(int np, size_t b, int p)
{
    const size_t S = moe_mx_step_blocks(np);
    return moe_mx_step_at(np, b / S) + (b % S * (size_t)np + (size_t)p) * MOE_MX_UNIT;
}

/* The 16 scale bytes of block b, projection p, in a tile of nb blocks. */
static inline size_t moe_mx_scales_at(int np, size_t nb, size_t b, int p)
{
    const size_t S = moe_mx_step_blocks(np), s = b / S;
    return moe_mx_step_at(np, s) + moe_mx_step_len(np, nb, s) * (size_t)np * MOE_MX_UNIT +
           (b % S * (size_t)np + (size_t)p) * 16;
}

/* Byte of unit holding row n's code at k (0..31 within the block), and whether it is the high
 * nibble. */
static inline size_t moe_mx_code_byte(size_t n, size_t k) { return k % 16 / 4 * 64 + 4 * n + k % 4; }
static inline int moe_mx_code_high(size_t k) { return k >= 16; }

/* Tile sizes (kernels/expert.h: 0 for k < 1, k not a multiple of 32, or k > 2^40). */
size_t moe_mx_gateup_bytes(int64_t k);
size_t moe_mx_down_bytes(int64_t k);

/* Pack and unpack, shared by every MXFP4 kernel set (kernels/ref/expert_mxfp4_pack.c). */
moe_status moe_mx_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
moe_status moe_mx_pack_down(const moe_weight_src *down, void *dst);
moe_status moe_mx_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                const moe_weight_dst *up);
moe_status moe_mx_unpack_down(const void *packed, const moe_weight_dst *down);

/* What packing and unpacking share with the tile recipe's MXFP4 layout
 * (kernels/ref/expert_mxfp4_tile_pack.c): the checks of the np sources (gate, up or down; every
 * field, then no scale 0xFF) and of one destination, a source row's bias as f32 (0 past the
 * rows or without one), and the store of destination row r's bias. */
moe_status moe_mx_check_sources(const moe_weight_src *const *src, int np);
moe_status moe_mx_check_dst(const moe_weight_dst *d, const char *what);
float moe_mx_bias_at(const moe_weight_src *s, int64_t r);
void moe_mx_store_bias(const moe_weight_dst *d, int64_t r, float v);
/* One unit: rows r0..r0+15 of block b of S's codes in the unit layout above (rows past S's
 * edge: bytes 0); S is checked by the caller. */
void moe_mx_pack_unit(const moe_weight_src *s, int64_t r0, int64_t b, unsigned char *unit);

/* The Q8 rows (kernels/expert.h): bytes of a row of k values, and the portable preparation
 * every set of the recipe uses (kernels/ref/expert_mxfp4_pack.c). */
size_t moe_q8_row_bytes(int64_t k);
void moe_q8_prepare_ref(size_t k, const float *x, void *dst);
/* Zeros a prepared row's padding (after the codes, the scales and the corrections), which the
 * SIMD preparations leave to this. */
void moe_q8_zero_padding(size_t k, void *row);

/* The fields of a moe_expert_kernels initializer that every set of this layout and the Q8
 * recipe shares: format, recipe, tile sizes, packing and the rows' size. */
#define MOE_MX_SET_LAYOUT                                                                          \
    .format = MOE_EXPERT_FMT_MXFP4, .recipe = MOE_RECIPE_Q8,                                       \
    .gateup_tile_bytes = moe_mx_gateup_bytes, .down_tile_bytes = moe_mx_down_bytes,                \
    .pack_gateup = moe_mx_pack_gateup, .pack_down = moe_mx_pack_down,                              \
    .unpack_gateup = moe_mx_unpack_gateup, .unpack_down = moe_mx_unpack_down,                      \
    .act_row_bytes = moe_q8_row_bytes

#endif
