/* expert_mxfp4_tile.c — the reference expert kernel set of the tile recipe for MXFP4 weights: each
 * weight and its block scale widened to one bf16, then tdpbf16ps's arithmetic per 32-K block, in
 * plain C. */
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/expert_mxfp4_tile_layout.h"
#include "kernels/ref/expert_ref.h"
#include "kernels/ref/tile_x_chunk.h"
#include "kernels/tile_bf16.h"
#include "select/kernel.h"

/*
 * The executable specification of the tile recipe for MXFP4 weights (kernels/expert.h, "The
 * tile recipe"). The tile is the MXFP4 tile pairs layout (kernels/ref/
 * expert_mxfp4_tile_layout.h). Per output element: acc = +0, then for each 32-K block c one
 * moe_tile_bf16_dot_ref over the block's 16 pairs of x and of the row's weights, each weight
 * the bf16 of e2m1(code) · 2^(s_c - 127) (moe_mxt_widen; exact, the scales checked at
 * packing); then + bias (plain f32), gate/up the activation in f32 and h rounded to bf16
 * (moe_f32_to_bf16), down y in f32: the bf16 tile set's dot on the widened weights.
 */

#define NR MOE_MXT_NR
#define MR 8
#define CHUNK MOE_MXT_BLOCK

/* Row n's weights of block c of projection p, widened, in K order. */
static void w_chunk(const unsigned char *tile, int np, size_t nb, int p, size_t n, size_t c,
                    uint16_t out[CHUNK])
{
    const unsigned char *codes = tile + moe_mxt_codes_at(np, nb, c, p);
    const unsigned s = tile[moe_mxt_scales_at(np, c, p) + n];
    for (size_t j = 0; j < CHUNK / 2; j++) {
        const unsigned byte = codes[16 * j + n];
        out[2 * j] = moe_mxt_widen(byte & 15, s);
        out[2 * j + 1] = moe_mxt_widen(byte >> 4, s);
    }
}

/* Row n of projection p times x, plus the row's bias. */
static float dot(const unsigned char *tile, int np, int p, size_t n, size_t k, const uint16_t *x)
{
    const size_t nb = k / CHUNK;
    float acc = 0.0f, bias;
    for (size_t c = 0; c < nb; c++) {
        uint16_t xc[CHUNK], wc[CHUNK];
        moe_xr_tile_x_chunk(x, k, c, xc);
        w_chunk(tile, np, nb, p, n, c, wc);
        acc = moe_tile_bf16_dot_ref(acc, xc, wc, CHUNK / 2);
    }
    memcpy(&bias, tile + ((size_t)p * NR + n) * 4, sizeof bias);
    return acc + bias;
}

#include "kernels/ref/expert_tile_entries.h"

MOE_XL_SET(moe_expert_mxfp4_tile_8x16__ref, MOE_RECIPE_TILE, MOE_REQ_SCALAR, MR, MOE_MXT_SET_LAYOUT,
           .gateup = gateup_tile, .down = down_tile);
