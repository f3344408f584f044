/* expert_int4_tile_layout.h — internal: the packed INT4 (group-scaled) tiles of the tile recipe, in
 * code. */
#ifndef MOE_KERNELS_REF_EXPERT_INT4_TILE_LAYOUT_H
#define MOE_KERNELS_REF_EXPERT_INT4_TILE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/expert.h"

/*
 * "INT4 tile pairs": one tile holds NR = 16 rows of np projections (gate/up: np = 2, gate then
 * up; down: np = 1) over K = 32·nb (K a multiple of 32), group size G = 32·gc. The codes stay 4
 * bits (never bf16 in memory); docs/kernels.md ("The tile recipe", INT4) draws it.
 *
 *   bias     np × 16 f32 (zeros without a checkpoint bias)                 at 0
 *   head     64 bytes: gc = G / 32 as a uint32, then zeros                 at 64·np
 *   scales   block c, projection p: 16 f32 (row n at float n), the scale   at 64·np + 64 + (c·np +
 * p)·64 of the group holding block c (each group's scales repeated in its gc blocks) codes    block
 * c, projection p: 256 bytes                              at scales + nb·np·64 + (c·np + p)·256
 *            byte 16r + n = u(row n, k = 32c + 2r) | u(row n, k = 32c + 2r + 1) << 4
 *
 * u is the stored nibble, the weight's integer u - 8 in [-8, 7]. The code bytes are the
 * checkpoint's own bytes (element 2i in the low nibble of byte i), moved to row order: the 16
 * bytes at 16r of a block are pair r of the block for the 16 rows, and widened byte by byte into
 * dwords (vpmovzxbd), each nibble looked up in a 16-entry table of bf16 codes (the integers -8 ..
 * 7, exact), they are line r of tdpbf16ps's 1 KB B tile (dword n = w[n][2r] | w[n][2r+1] << 16:
 * the tile pairs of kernels/ref/expert_layout.h). Nothing is folded into the weights: the scale
 * meets each group's sum in one f32 FMA (kernels/expert.h, "The tile recipe"). Gate's and up's
 * blocks lie side by side, so the codes are one stream, the scales a second (a kernel reads the
 * scale line of each group's first block only). The size depends on K alone, so every G that
 * is a multiple of 32 and divides K shares it (at G = 32 the scales are 1 bit per weight; at
 * larger G the repeated lines are never read). Rows past the matrix's edge have codes 0x88 (the
 * value 0) and scale 0, and are never written out.
 */

#define MOE_I4T_NR MOE_EXPERT_NR
#define MOE_I4T_BLOCK 32
#define MOE_I4T_CODE_BYTES 256 /* one block of one projection: 16 pairs × 16 rows */
#define MOE_I4T_SCALE_BYTES 64 /* one block of one projection: 16 f32 */
#define MOE_I4T_HEAD_BYTES 64
#define MOE_I4T_PAD_CODE 0x88 /* two zeros */

/* The bf16 code of u - 8 for each stored nibble u (0 -> -8, 8 -> +0, 15 -> 7): exact. */
#define MOE_I4T_BF16_TABLE                                                                         \
    {                                                                                              \
        0xC100, 0xC0E0, 0xC0C0, 0xC0A0, 0xC080, 0xC040, 0xC000, 0xBF80, 0x0000, 0x3F80, 0x4000,    \
            0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0                                                 \
    }

static inline size_t moe_i4t_bias_bytes(int np) { return (size_t)np * MOE_I4T_NR * sizeof(float); }
/* The uint32 gc (G / 32) at this offset. */
static inline size_t moe_i4t_head_at(int np) { return moe_i4t_bias_bytes(np); }
/* The 16 f32 scales of block c, projection p. */
static inline size_t moe_i4t_scales_at(int np, size_t c, int p)
{
    return moe_i4t_bias_bytes(np) + MOE_I4T_HEAD_BYTES +
           (c * (size_t)np + (size_t)p) * MOE_I4T_SCALE_BYTES;
}
/* The 256 code bytes of block c, projection p, in a tile of nb blocks. */
static inline size_t moe_i4t_codes_at(int np, size_t nb, size_t c, int p)
{
    return moe_i4t_scales_at(np, nb, 0) + (c * (size_t)np + (size_t)p) * MOE_I4T_CODE_BYTES;
}

/* gc, the blocks of 32 per group, as the tile's head holds it. */
static inline size_t moe_i4t_group_blocks(const void *tile, int np)
{
    uint32_t gc;
    memcpy(&gc, (const unsigned char *)tile + moe_i4t_head_at(np), sizeof gc);
    return gc;
}

/* The bf16 code of the weight u - 8 of stored nibble u. */
static inline uint16_t moe_i4t_widen(unsigned u)
{
    static const uint16_t table[16] = MOE_I4T_BF16_TABLE;
    return table[u & 15];
}

/* Tile sizes (kernels/expert.h: 0 for k < 1, k not a multiple of 32, or k > 2^40). */
size_t moe_i4t_gateup_bytes(int64_t k);
size_t moe_i4t_down_bytes(int64_t k);

/* Pack and unpack, shared by every set of the layout (kernels/ref/expert_int4_tile_pack.c): the
 * sources and destinations as the Q8 recipe's INT4 layout takes them (kernels/ref/
 * expert_int4_layout.h), with the same checks at the door. */
moe_status moe_i4t_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
moe_status moe_i4t_pack_down(const moe_weight_src *down, void *dst);
moe_status moe_i4t_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                 const moe_weight_dst *up);
moe_status moe_i4t_unpack_down(const void *packed, const moe_weight_dst *down);

/* The fields of a moe_expert_kernels initializer every set of this layout shares. */
#define MOE_I4T_SET_LAYOUT                                                                         \
    .format = MOE_EXPERT_FMT_INT4_GROUP, .gateup_tile_bytes = moe_i4t_gateup_bytes,                \
    .down_tile_bytes = moe_i4t_down_bytes, .pack_gateup = moe_i4t_pack_gateup,                     \
    .pack_down = moe_i4t_pack_down, .unpack_gateup = moe_i4t_unpack_gateup,                        \
    .unpack_down = moe_i4t_unpack_down

#endif
