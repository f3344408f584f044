/* expert_bf16_tile.c — the reference expert kernel set of the tile recipe: tdpbf16ps's arithmetic,
 * K cut every 32, in plain C. */
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/expert_ref.h"
#include "kernels/ref/tile_x_chunk.h"
#include "kernels/tile_bf16.h"
#include "select/kernel.h"

/*
 * The executable specification of the tile recipe (kernels/expert.h, "The tile recipe"). Per
 * output element: acc = +0, then for each chunk of 32 along K one moe_tile_bf16_dot_ref over
 * the chunk's 16 pairs of x and of the row's weights (the tile pairs, kernels/ref/
 * expert_layout.h), the last chunk's x copied into zeros (nothing past x[k-1] is read; the
 * weights' padding is packed as zeros); then + bias (plain f32), gate/up the activation in f32
 * and h rounded to bf16 (moe_f32_to_bf16: nearest even, NaN kept quiet, subnormals kept), down
 * y in f32.
 */

#define NR MOE_XL_NR
#define MR 8
#define CHUNK MOE_XL_TILE_CHUNK

/* Row n's weights of chunk c of projection p, as 32 codes in K order. */
static void w_chunk(const unsigned char *tile, int np, size_t k, int p, size_t n, size_t c,
                    uint16_t out[CHUNK])
{
    const unsigned char *w = tile + moe_xl_bf16_weights(np) + n * 4;
    for (size_t j = 0; j < CHUNK / 2; j++) {
        uint32_t d;
        memcpy(&d, w + moe_xl_tile_pair_at((int64_t)k, p, c * (CHUNK / 2) + j), sizeof d);
        out[2 * j] = (uint16_t)(d & 0xFFFFu);
        out[2 * j + 1] = (uint16_t)(d >> 16);
    }
}

/* Row n of projection p times x, plus the row's bias. */
static float dot(const unsigned char *tile, int np, int p, size_t n, size_t k, const uint16_t *x)
{
    float acc = 0.0f, bias;
    for (size_t c = 0; c < moe_xl_tile_chunks((int64_t)k); c++) {
        uint16_t xc[CHUNK], wc[CHUNK];
        moe_xr_tile_x_chunk(x, k, c, xc);
        w_chunk(tile, np, k, p, n, c, wc);
        acc = moe_tile_bf16_dot_ref(acc, xc, wc, CHUNK / 2);
    }
    memcpy(&bias, tile + ((size_t)p * NR + n) * 4, sizeof bias);
    return acc + bias;
}

#include "kernels/ref/expert_tile_entries.h"

MOE_XL_SET(moe_expert_bf16_tile_8x16__ref, MOE_RECIPE_TILE, MOE_REQ_SCALAR, MR, MOE_XL_TILE_LAYOUT,
           .gateup = gateup_tile, .down = down_tile);
