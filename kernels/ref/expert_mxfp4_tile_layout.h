/* expert_mxfp4_tile_layout.h — internal: the packed MXFP4 tiles of the tile recipe, in code. */
#ifndef MOE_KERNELS_REF_EXPERT_MXFP4_TILE_LAYOUT_H
#define MOE_KERNELS_REF_EXPERT_MXFP4_TILE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/expert.h"

/*
 * "MXFP4 tile pairs": one tile holds NR = 16 rows of np projections (gate/up: np = 2, gate
 * then up; down: np = 1) over K = 32·nb, nb the MX blocks (K a multiple of 32). The codes stay
 * 4 bits and the scales 8 bits per 32-block (4.25 bits per weight, plus the biases and the
 * padding of the scale area to 64 bytes); docs/kernels.md ("The tile recipe", MXFP4) draws it.
 *
 *   bias     np × 16 f32 (zeros without a checkpoint bias)                 at 0
 *   scales   block c, projection p: 16 E8M0 bytes (row n at byte n)       at 64·np + (c·np + p)·16
 *            (the area zero-padded to a multiple of 64 bytes)
 *   codes    block c, projection p: 256 bytes                             at codes + (c·np + p)·256
 *            byte 16r + n = code(row n, k = 32c + 2r) | code(row n, k = 32c + 2r + 1) << 4
 *
 * So the 16 bytes at 16r of a block's codes are pair r of the block for the 16 rows, in row
 * order: widened byte by byte into dwords (vpmovzxbd), each byte's two nibbles looked up in a
 * 16-entry table of bf16 codes (vpermw / vpshufb) and the scale added to the nonzero words'
 * exponent field ((s - 127) << 7, integer addition; exact for s in [2, 252], which packing
 * checks), they are line r of the 1 KB B tile of tdpbf16ps (dword n = w[n][2r] | w[n][2r+1] <<
 * 16: the tile pairs of kernels/ref/expert_layout.h). A block of a projection is one such chunk:
 * one instruction. Gate's and up's blocks lie side by side, so the codes are one stream, the
 * scales a second. Rows past the matrix's edge have codes 0 and scale 127 (1.0), and are never
 * written out.
 */

#define MOE_MXT_NR MOE_EXPERT_NR
#define MOE_MXT_BLOCK MOE_EXPERT_MXBLOCK
#define MOE_MXT_CODE_BYTES 256 /* one block of one projection: 16 pairs × 16 rows */
#define MOE_MXT_PAD_SCALE 127

/* The bf16 code of e2m1(code) (code 0..15; 8 is -0), the unscaled weights: exponents 126..129. */
#define MOE_MXT_BF16_TABLE                                                                         \
    {                                                                                              \
        0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0, 0x8000, 0xBF00, 0xBF80,    \
            0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0                                                 \
    }

static inline size_t moe_mxt_bias_bytes(int np) { return (size_t)np * MOE_MXT_NR * sizeof(float); }
static inline size_t moe_mxt_scale_area(size_t nb, int np)
{
    return (nb * (size_t)np * MOE_MXT_NR + 63) & ~(size_t)63;
}
/* The 16 scale bytes of block c, projection p. */
static inline size_t moe_mxt_scales_at(int np, size_t c, int p)
{
    return moe_mxt_bias_bytes(np) + (c * (size_t)np + (size_t)p) * MOE_MXT_NR;
}
/* The 256 code bytes of block c, projection p, in a tile of nb blocks. */
static inline size_t moe_mxt_codes_at(int np, size_t nb, size_t c, int p)
{
    return moe_mxt_bias_bytes(np) + moe_mxt_scale_area(nb, np) +
           (c * (size_t)np + (size_t)p) * MOE_MXT_CODE_BYTES;
}

/* The bf16 code of weight e2m1(code) · 2^(scale - 127), exact for scale in [MOE_TILE_MX_SCALE_MIN,
 * MOE_TILE_MX_SCALE_MAX]; zero codes stay zeros of their sign. */
static inline uint16_t moe_mxt_widen(unsigned code, unsigned scale)
{
    static const uint16_t table[16] = MOE_MXT_BF16_TABLE;
    const uint16_t v = table[code & 15];
    return (v & 0x7FFF) ? (uint16_t)(v + ((int)scale - 127) * 128) : v;
}

/* Tile sizes (kernels/expert.h: 0 for k < 1, k not a multiple of 32, or k > 2^40). */
size_t moe_mxt_gateup_bytes(int64_t k);
size_t moe_mxt_down_bytes(int64_t k);

/* Pack and unpack, shared by every set of the layout (kernels/ref/expert_mxfp4_tile_pack.c):
 * the MXFP4 checks of moe_mx_pack_* and MOE_EVALUE naming the row and block of a scale outside
 * [MOE_TILE_MX_SCALE_MIN, MOE_TILE_MX_SCALE_MAX], which the recipe cannot fold exactly. */
moe_status moe_mxt_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst);
moe_status moe_mxt_pack_down(const moe_weight_src *down, void *dst);
moe_status moe_mxt_unpack_gateup(const void *packed, const moe_weight_dst *gate,
                                 const moe_weight_dst *up);
moe_status moe_mxt_unpack_down(const void *packed, const moe_weight_dst *down);

/* The fields of a moe_expert_kernels initializer every set of this layout shares. */
#define MOE_MXT_SET_LAYOUT                                                                         \
    .format = MOE_EXPERT_FMT_MXFP4, .gateup_tile_bytes = moe_mxt_gateup_bytes,                     \
    .down_tile_bytes = moe_mxt_down_bytes, .pack_gateup = moe_mxt_pack_gateup,                     \
    .pack_down = moe_mxt_pack_down, .unpack_gateup = moe_mxt_unpack_gateup,                        \
    .unpack_down = moe_mxt_unpack_down

#endif
