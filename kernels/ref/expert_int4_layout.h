/* expert_int4_layout.h — internal: the packed INT4 (group-scaled) expert tiles, in code. */
#ifndef MOE_KERNELS_REF_EXPERT_INT4_LAYOUT_H
#define MOE_KERNELS_REF_EXPERT_INT4_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ref/expert_mxfp4_layout.h"

/*
 * INT4 weights (compressed-tensors pack-quantized, docs/formats.md "INT4 (pack-quantized)")
 * share the MXFP4 tile's code units byte for byte (kernels/ref/expert_mxfp4_layout.h: steps of
 * 4 units of 256 bytes, chunk c of a unit holding quads c and c + 4 of 16 rows): a stored
 * nibble u is the value u - 8, and the checkpoint's int32 words, read little-endian, are the
 * same byte stream as MXFP4's code bytes (element 2i in the low nibble of byte i). Only the
 * scales differ: one f32 per row and 32-block (the checkpoint's bf16 / f16 / f32 group scale,
 * converted once at packing and repeated for each 32-block of its group), so a step's scale
 * area is 4 lines instead of 1:
 *
 *   bias     np × 16 f32
 *   steps    codes: r·np units of 256 bytes (as MXFP4), then
 *            scales: for unit (i, p) 16 f32 (row n at float n) at 64·(i·np + p)
 *            a full step is 4·256 + 4·64 = 1280 bytes: 5 bits a weight with the scales.
 *
 * Rows past the matrix's edge have code bytes 0 (the value -8) and scale 0, and are never
 * written out. Nothing in the Q8 rows changes: the SIMD kernels take the unsigned operand
 * w + MOE_Q8_WOFFSET = u + 4 (in [4, 19]) against the prepared row's correction.
 */

#define MOE_I4_SCALE_BYTES 4 /* one f32 per row and 32-block */
#define MOE_I4_STEP_BYTES (MOE_MX_UNITS_PER_STEP * MOE_MX_UNIT + MOE_MX_LINE * MOE_I4_SCALE_BYTES)
/* The value of stored nibble u: u - 8 (compressed-tensors' offset for 4 bits). */
#define MOE_I4_OFFSET 8
/* The unsigned operand of the SIMD kernels per stored nibble u: (u - 8) + MOE_Q8_WOFFSET. */
#define MOE_I4_WU_VALUES 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19

static inline size_t moe_i4_step_at(int np, size_t s)
{
    return moe_mx_bias_bytes(np) + s * MOE_I4_STEP_BYTES;
}

/* The 256 code bytes of block b, projection p. */
static inline size_t moe_i4_unit_at(int np, size_t b, int p)
{
    const size_t S = moe_mx_step_blocks(np);
    return moe_i4_step_at(np, b / S) + (b % S * (size_t)np + (size_t)p) * MOE_MX_UNIT;
}

/* The 16 f32 scales of block b, projection p, in a tile of nb blocks. */
static inline size_t moe_i4_scales_at(int np, size_t nb, size_t b, int p)
{
    const size_t S = moe_mx_step_blocks(np), s = b / S;
    return moe_i4_step_at(np, s) + moe_mx_step_len(np, nb, s) * (size_t)np * MOE_MX_UNIT +
           (b % S * (size_t)np + (size_t)p) * MOE_MX_NR * MOE_I4_SCALE_BYTES;
}

/* Tile sizes (kernels/expert.h: 0 for k < 1, k not a multiple of 32, or k > 2^40). */
size_t moe_i4_gateup_bytes(int64_t k);
size_t moe_i4_down_bytes(int64_t k);

/* Pack and unpack, shared by every INT4 kernel set (kernels/ref/expert_int4_pack.c). The
 * source: data the packed nibbles as bytes (dtype I32, U8 or I8: the checkpoint's int32 words
 * read as little-endian bytes), row_stride in bytes (cols/2 for plain rows), col_stride 1;
 * scale [rows, cols/G] of BF16, F16 or F32, scale_stride in elements, block_rows 1,
 * block_cols G (a multiple of 32 dividing cols). */
moe_status moe_i4_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
moe_status moe_i4_pack_down(const moe_weight_src *down, void *dst);
moe_status moe_i4_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                const moe_weight_dst *up);
moe_status moe_i4_unpack_down(const void *packed, const moe_weight_dst *down);

/* What the INT4 tile recipe's packer (kernels/ref/expert_int4_tile_pack.c) shares with this
 * one: every check of the np sources made at the door (messages name the projection), a source's
 * group scale (row r < rows, group g) and bias (0 past the rows or without one) as f32, the
 * checks of an unpack destination, and an f32 stored in a float dtype (exact for values read
 * from it). */
moe_status moe_i4_check_sources(const moe_weight_src *const *src, int np);
float moe_i4_scale_at(const moe_weight_src *s, int64_t r, int64_t g);
float moe_i4_bias_at(const moe_weight_src *s, int64_t r);
moe_status moe_i4_check_dst(const moe_weight_dst *d, const char *what);
void moe_i4_store_float(unsigned char *p, moe_dtype d, float v);

/* The fields of a moe_expert_kernels initializer every INT4 set shares (the Q8 rows are
 * MXFP4's). */
#define MOE_I4_SET_LAYOUT                                                                          \
    .format = MOE_EXPERT_FMT_INT4_GROUP, .recipe = MOE_RECIPE_Q8,                                  \
    .gateup_tile_bytes = moe_i4_gateup_bytes, .down_tile_bytes = moe_i4_down_bytes,                \
    .pack_gateup = moe_i4_pack_gateup, .pack_down = moe_i4_pack_down,                              \
    .unpack_gateup = moe_i4_unpack_gateup, .unpack_down = moe_i4_unpack_down,                      \
    .act_row_bytes = moe_q8_row_bytes

#endif
