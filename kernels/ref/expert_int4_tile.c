/* expert_int4_tile.c — the reference expert kernel set of the tile recipe for INT4 group weights:
 * tdpbf16ps's arithmetic per 32-K chunk on the integers u - 8, one scale FMA per group, in plain
 * C. */
#include <math.h>
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/ref/expert_int4_tile_layout.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/expert_ref.h"
#include "kernels/ref/tile_x_chunk.h"
#include "kernels/tile_bf16.h"
#include "select/kernel.h"

/*
 * The executable specification of the tile recipe for INT4 weights (kernels/expert.h, "The tile
 * recipe"). The tile is the INT4 tile pairs layout (kernels/ref/expert_int4_tile_layout.h): each
 * stored nibble u widened to the bf16 of u - 8 (exact), the group scales f32. Per output element:
 * acc = +0; per group g of gc = G / 32 blocks, C = +0, then one moe_tile_bf16_dot_ref per block of
 * the group over the block's 16 pairs of x and of the row's integers, then acc = fmaf(C, s_g, acc)
 * (one rounding, no flush); then + bias (plain f32), gate/up the activation in f32 and h rounded
 * to bf16 (moe_f32_to_bf16), down y in f32.
 */

#define NR MOE_I4T_NR
#define MR 8
#define CHUNK MOE_I4T_BLOCK

/* Row n's integers of block c of projection p, widened, in K order. */
static void w_chunk(const unsigned char *tile, int np, size_t nb, int p, size_t n, size_t c,
                    uint16_t out[CHUNK])
{
    const unsigned char *codes = tile + moe_i4t_codes_at(np, nb, c, p);
    for (size_t j = 0; j < CHUNK / 2; j++) {
        const unsigned byte = codes[16 * j + n];
        out[2 * j] = moe_i4t_widen(byte & 15);
        out[2 * j + 1] = moe_i4t_widen(byte >> 4);
    }
}

static float load_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Row n of projection p times x, plus the row's bias. */
static float dot(const unsigned char *tile, int np, int p, size_t n, size_t k, const uint16_t *x)
{
    const size_t nb = k / CHUNK, gc = moe_i4t_group_blocks(tile, np);
    float acc = 0.0f;
    for (size_t c0 = 0; c0 < nb; c0 += gc) {
        float sum = 0.0f;
        for (size_t c = c0; c < c0 + gc; c++) {
            uint16_t xc[CHUNK], wc[CHUNK];
            moe_xr_tile_x_chunk(x, k, c, xc);
            w_chunk(tile, np, nb, p, n, c, wc);
            sum = moe_tile_bf16_dot_ref(sum, xc, wc, CHUNK / 2);
        }
        acc = fmaf(sum, load_f32(tile + moe_i4t_scales_at(np, c0, p) + n * 4), acc);
    }
    return acc + load_f32(tile + ((size_t)p * NR + n) * 4);
}

#include "kernels/ref/expert_tile_entries.h"

MOE_XL_SET(moe_expert_int4_tile_8x16__ref, MOE_RECIPE_TILE, MOE_REQ_SCALAR, MR, MOE_I4T_SET_LAYOUT,
           .gateup = gateup_tile, .down = down_tile);
