/* expert_bf16_tile.c — the AMX-BF16 micro-kernels of the tile recipe (bf16 experts), 32x16: one
 * tdpbf16ps per 32-K chunk, 16 tokens and 16 rows. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512amxbf16/expert_bf16_tile.h"
#include "kernels/avx512amxbf16/tile_amx.h"
#include "kernels/inline.h"
#include "kernels/ref/expert_layout.h"
#include "select/kernel.h"

/*
 * The tile configuration, the A rows, a chunk's products and the epilogue are
 * kernels/avx512amxbf16/tile_amx.h's. The B chunks are the packed tile's own (the tile pairs
 * layout: chunk c of a projection at c · 1 KB from its first). In a multi-tile call a group's
 * epilogue runs during the next group's chunks, one token per chunk, from the second of two
 * sums buffers.
 */

/* The B streams of a group, chunk c of stream j at b[j] + c · 1 KB. */
typedef struct streams {
    const unsigned char *b[4];
} streams;

/* The group's sums over all chunks, stored to s, while the pending epilogue e runs; e
 * finished before the stores. */
INLINE void sums_m(amx_acts *a, const streams *w, epilogue *e, float (*s)[ROWS][ROWS],
                   const bool TWO, const int NB)
{
    SUM_TILES(ZERO_SUM, TWO, NB);
    acts_ready(a, 0);
    for (size_t c = 0; c < a->chunks; c++) {
        acts_ready(a, c + 1);
        long sa;
        const unsigned char *pa = acts_rows(a, c, &sa), *b[4];
        for (int j = 0; j < NB; j++)
            b[j] = w->b[j] + c * B_BYTES;
        chunk_products(pa, sa, b, TWO, NB);
        epilogue_step(e);
    }
    epilogue_finish(e);
    SUM_TILES(STORE_SUM, TWO, NB);
}

/* A group of nb streams (TWO: nb ≤ 2, else ≤ 4): its sums into the buffer the pending epilogue
 * e does not read, then e made its epilogue (biases, masks and outputs still to be set). */
static void group_sums(amx_acts *a, const streams *w, size_t nb, epilogue *e)
{
    float(*s)[ROWS][ROWS] = a->sums[e->s == a->sums[0] ? 1 : 0];
    if (a->m > ROWS)
        nb == 2 ? sums_m(a, w, e, s, true, 2) : sums_m(a, w, e, s, true, 1);
    else if (nb > 2)
        nb == 4 ? sums_m(a, w, e, s, false, 4) : sums_m(a, w, e, s, false, 3);
    else
        nb == 2 ? sums_m(a, w, e, s, false, 2) : sums_m(a, w, e, s, false, 1);
    e->s = (const float(*)[ROWS][ROWS])s;
    e->m = a->m;
    e->next = 0;
}

void moe_tile_amx_gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                               size_t n_tiles, const moe_act_params *act, void *h, size_t h_stride,
                               size_t n_valid)
{
    if (m == 0 || n_tiles == 0) return;
    amx_acts a;
    acts_init(&a, m, k, x);
    const size_t bytes = 2 * 64 + 2 * a.chunks * B_BYTES, g = group_tiles(m, 2);
    epilogue e = {.act = act, .out_bytes = h_stride * sizeof(uint16_t)};
    for (size_t t = 0; t < n_tiles; t += g) {
        const size_t n = n_tiles - t < g ? n_tiles - t : g;
        streams w = {{NULL}};
        for (size_t q = 0; q < n; q++) {
            w.b[2 * q] = (const unsigned char *)tile + (t + q) * bytes + 2 * 64;
            w.b[2 * q + 1] = w.b[2 * q] + a.chunks * B_BYTES;
        }
        group_sums(&a, &w, 2 * n, &e);
        for (size_t q = 0; q < n; q++)
            epilogue_tile(&e, q, 2, (const unsigned char *)tile + (t + q) * bytes,
                          t + q + 1 < n_tiles ? ROWS : n_valid);
        e.n_out = n;
        e.out = (unsigned char *)((uint16_t *)h + t * ROWS);
    }
    epilogue_finish(&e);
    _tile_release();
}

void moe_tile_amx_down_tiles(size_t m, size_t k, const void *const *h, const void *tile,
                             size_t n_tiles, float *y, size_t y_stride, size_t n_valid)
{
    if (m == 0 || n_tiles == 0) return;
    amx_acts a;
    acts_init(&a, m, k, h);
    const size_t bytes = 64 + a.chunks * B_BYTES, g = group_tiles(m, 1);
    epilogue e = {.act = NULL, .out_bytes = y_stride * sizeof(float)};
    for (size_t t = 0; t < n_tiles; t += g) {
        const size_t n = n_tiles - t < g ? n_tiles - t : g;
        streams w = {{NULL}};
        for (size_t q = 0; q < n; q++)
            w.b[q] = (const unsigned char *)tile + (t + q) * bytes + 64;
        group_sums(&a, &w, n, &e);
        for (size_t q = 0; q < n; q++)
            epilogue_tile(&e, q, 1, (const unsigned char *)tile + (t + q) * bytes,
                          t + q + 1 < n_tiles ? ROWS : n_valid);
        e.n_out = n;
        e.out = (unsigned char *)(y + t * ROWS);
    }
    epilogue_finish(&e);
    _tile_release();
}

void moe_tile_amx_gateup(size_t m, size_t k, const void *const *x, const void *tile,
                         const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    moe_tile_amx_gateup_tiles(m, k, x, tile, 1, act, h, h_stride, n_valid);
}

void moe_tile_amx_down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                       size_t y_stride, size_t n_valid)
{
    moe_tile_amx_down_tiles(m, k, h, tile, 1, y, y_stride, n_valid);
}

/* The set: the multi-tile entries at every m (they beat tile-by-tile calls at every m
 * measured, and the engine hands them a work item's whole run of tiles). */
MOE_XL_SET(moe_expert_bf16_tile_32x16__avx512amxbf16, MOE_RECIPE_TILE, MOE_REQ_AVX512AMXBF16,
           MOE_TILE_AMX_MR, MOE_XL_TILE_LAYOUT, .gateup = moe_tile_amx_gateup,
           .down = moe_tile_amx_down, .gateup_tiles = moe_tile_amx_gateup_tiles,
           .down_tiles = moe_tile_amx_down_tiles, .tiles_from_m = 0, .tiles_to_m = 0);
