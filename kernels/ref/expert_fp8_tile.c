/* expert_fp8_tile.c — the reference expert kernel set of the tile recipe for FP8 block weights:
 * tdpbf16ps's arithmetic per 32-K chunk, one scale FMA per 128-K block, in plain C. */
#include <math.h>
#include <string.h>

#include "dtype/dtype.h"
#include "kernels/ref/expert_fp8_pairs.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/expert_ref.h"
#include "kernels/ref/tile_x_chunk.h"
#include "kernels/tile_bf16.h"
#include "select/kernel.h"

/*
 * The executable specification of the tile recipe for FP8 weights (kernels/expert.h, "The tile
 * recipe"). The tile is the FP8 pairs layout (kernels/ref/expert_layout.h), its codes widened
 * to the bf16 of e4m3(code) · 2^-8 (exact), its scales s_b = scale · 2^8. Per output element:
 * acc = +0; per 128-K block b, C = +0, then one moe_tile_bf16_dot_ref per chunk of 32 of the
 * block (4, fewer in the last block) over the chunk's 16 pairs of x and of the row's weights
 * (both zero past K: x copied into zeros, the weight pairs past the tile's kpad / 2 taken as
 * zeros), then acc = fmaf(C, s_b, acc) (one rounding, no flush); then + bias (plain f32),
 * gate/up the activation in f32 and h rounded to bf16 (moe_f32_to_bf16), down y in f32.
 */

#define NR MOE_XL_NR
#define MR 8
#define CHUNK MOE_XL_TILE_CHUNK
#define BLOCK_CHUNKS (MOE_XL_KB / CHUNK)

/* Row n's weights of chunk c of projection p, as 32 bf16 codes in K order (zeros past kpad). */
static void w_chunk(const unsigned char *tile, int np, size_t k, int p, size_t n, size_t c,
                    uint16_t out[CHUNK])
{
    const size_t pairs = (size_t)moe_xl_kpad((int64_t)k) / 2;
    for (size_t j = 0; j < CHUNK / 2; j++) {
        const size_t q = c * (CHUNK / 2) + j;
        const uint32_t d = q < pairs ? moe_xr_fp8_pair(tile, np, p, n, k, q) : 0;
        out[2 * j] = (uint16_t)(d & 0xFFFFu);
        out[2 * j + 1] = (uint16_t)(d >> 16);
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
    const unsigned char *scales = tile + moe_xl_bias_bytes(np);
    const size_t chunks = moe_xl_tile_chunks((int64_t)k);
    float acc = 0.0f;
    for (size_t c0 = 0, b = 0; c0 < chunks; c0 += BLOCK_CHUNKS, b++) {
        const size_t c1 = c0 + BLOCK_CHUNKS < chunks ? c0 + BLOCK_CHUNKS : chunks;
        float bc = 0.0f;
        for (size_t c = c0; c < c1; c++) {
            uint16_t xc[CHUNK], wc[CHUNK];
            moe_xr_tile_x_chunk(x, k, c, xc);
            w_chunk(tile, np, k, p, n, c, wc);
            bc = moe_tile_bf16_dot_ref(bc, xc, wc, CHUNK / 2);
        }
        acc = fmaf(bc, load_f32(scales + (b * (size_t)np + (size_t)p) * 4), acc);
    }
    return acc + load_f32(tile + ((size_t)p * NR + n) * 4);
}

#include "kernels/ref/expert_tile_entries.h"

MOE_XL_SET(moe_expert_fp8_tile_8x16__ref, MOE_RECIPE_TILE, MOE_REQ_SCALAR, MR,
           MOE_XL_FP8_LAYOUT(fp8p), .gateup = gateup_tile, .down = down_tile);
