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
 *
 * More than 32 tokens (up to MOE_TILE_AMX_BF16_MR; groups of at most 2 streams): each run of
 * RUN_CHUNKS chunks of the group's B streams is read by every block of 32 tokens in turn, so
 * the first block brings it into L1 and the others load it from there (with A from L2 and B
 * from L1 the bare step ran at 0.74-0.77 of the tdpbf16ps peak, with both from L2 at
 * 0.56-0.58: bench/NOTES.md, v29). Each token block's sum tiles are loaded (+0 at the first
 * run), take the run's chunks and are stored: a tile store and load are exact, so each token's
 * chain is the same as at 32 tokens or one.
 */

#define RUN_CHUNKS 8 /* chunks per run of a call of more than 32 tokens */
/* The most bytes of A rows one pass over a call's tiles takes, so that they stay in L2 across
 * its groups of B streams: more tokens run in passes of blocks of 32 that fit. */
#define WIDE_A_BYTES (512 * 1024)
/* ... and the most bytes of tiles one run of such passes takes, so that they stay in L2 across
 * the passes. */
#define WIDE_B_BYTES (1024 * 1024)

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

/* A call of more than 32 tokens: a group's sums twice. Apart from amx_acts, so that the smaller
 * calls' stack frame stays as it was. */
typedef struct wide_sums {
    float s[2][SUMS_BLOCKS(MOE_TILE_AMX_BF16_MR)][ROWS][ROWS] __attribute__((aligned(64)));
} wide_sums;

/* One token block (mt tokens from t0; TWO: more than 16) over the nc chunks from c0, its sums
 * in s (+0 first: c0 = 0). */
INLINE void token_block(amx_acts *a, const streams *w, size_t c0, size_t nc, size_t t0, size_t mt,
                        float (*s)[ROWS][ROWS], epilogue *e, const bool TWO, const int NB)
{
    if (c0 == 0)
        SUM_TILES(ZERO_SUM, TWO, NB);
    else
        SUM_TILES(LOAD_SUM, TWO, NB);
    for (size_t c = c0; c < c0 + nc; c++) {
        long sa;
        const unsigned char *pa = block_rows(a, t0, mt, c, &sa), *b[4];
        for (int j = 0; j < NB; j++)
            b[j] = w->b[j] + c * B_BYTES;
        chunk_products(pa, sa, b, TWO, NB);
        epilogue_step(e);
    }
    SUM_TILES(STORE_SUM, TWO, NB);
}

/* A group of NB ≤ 2 streams for more than 32 tokens, its sums into s (token i's at
 * sums_block(i, ·)): every token block over each run of chunks, while the pending epilogue e
 * runs; e finished at the end. */
INLINE void group_wide(amx_acts *a, const streams *w, epilogue *e, float (*s)[ROWS][ROWS],
                       const int NB)
{
    for (size_t c0 = 0; c0 < a->chunks; c0 += RUN_CHUNKS) {
        const size_t nc = a->chunks - c0 < RUN_CHUNKS ? a->chunks - c0 : RUN_CHUNKS;
        for (size_t t0 = 0; t0 < a->m; t0 += TOKEN_BLOCK) {
            const size_t mt = a->m - t0 < TOKEN_BLOCK ? a->m - t0 : TOKEN_BLOCK;
            float(*st)[ROWS][ROWS] = s + sums_block(t0, 0);
            if (mt > ROWS)
                token_block(a, w, c0, nc, t0, mt, st, e, true, NB);
            else
                token_block(a, w, c0, nc, t0, mt, st, e, false, NB);
        }
    }
    epilogue_finish(e);
}

/* A group of nb ≤ 2 streams of a call of more than 32 tokens: as group_sums, into ws. Apart from
 * it, so that the smaller calls' code stays as it was. */
static __attribute__((noinline)) void group_sums_wide(amx_acts *a, wide_sums *ws, const streams *w,
                                                      size_t nb, epilogue *e)
{
    float(*s)[ROWS][ROWS] = ws->s[e->s == ws->s[0] ? 1 : 0];
    nb == 2 ? group_wide(a, w, e, s, 2) : group_wide(a, w, e, s, 1);
    e->s = (const float(*)[ROWS][ROWS])s;
    e->m = a->m;
    e->next = 0;
}

/* A group of nb streams (TWO: nb ≤ 2, else ≤ 4): its sums into the buffer the pending epilogue
 * e does not read, then e made its epilogue (biases, masks and outputs still to be set). ws:
 * the sums of a call of more than 32 tokens, else NULL. */
static void group_sums(amx_acts *a, wide_sums *ws, const streams *w, size_t nb, epilogue *e)
{
    if (ws) {
        group_sums_wide(a, ws, w, nb, e);
        return;
    }
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

/* A gate/up call over n_tiles tiles, a's tokens set (ws: as group_sums). */
INLINE void gateup_call(amx_acts *a, wide_sums *ws, const void *tile, size_t n_tiles,
                        const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    const size_t bytes = 2 * 64 + 2 * a->chunks * B_BYTES, g = group_tiles(a->m, 2);
    epilogue e = {.act = act, .out_bytes = h_stride * sizeof(uint16_t)};
    for (size_t t = 0; t < n_tiles; t += g) {
        const size_t n = n_tiles - t < g ? n_tiles - t : g;
        streams w = {{NULL}};
        for (size_t q = 0; q < n; q++) {
            w.b[2 * q] = (const unsigned char *)tile + (t + q) * bytes + 2 * 64;
            w.b[2 * q + 1] = w.b[2 * q] + a->chunks * B_BYTES;
        }
        group_sums(a, ws, &w, 2 * n, &e);
        for (size_t q = 0; q < n; q++)
            epilogue_tile(&e, q, 2, (const unsigned char *)tile + (t + q) * bytes,
                          t + q + 1 < n_tiles ? ROWS : n_valid);
        e.n_out = n;
        e.out = (unsigned char *)((uint16_t *)h + t * ROWS);
    }
    epilogue_finish(&e);
    _tile_release();
}

/* A down call over n_tiles tiles, a's tokens set (ws: as group_sums). */
INLINE void down_call(amx_acts *a, wide_sums *ws, const void *tile, size_t n_tiles, float *y,
                      size_t y_stride, size_t n_valid)
{
    const size_t bytes = 64 + a->chunks * B_BYTES, g = group_tiles(a->m, 1);
    epilogue e = {.act = NULL, .out_bytes = y_stride * sizeof(float)};
    for (size_t t = 0; t < n_tiles; t += g) {
        const size_t n = n_tiles - t < g ? n_tiles - t : g;
        streams w = {{NULL}};
        for (size_t q = 0; q < n; q++)
            w.b[q] = (const unsigned char *)tile + (t + q) * bytes + 64;
        group_sums(a, ws, &w, n, &e);
        for (size_t q = 0; q < n; q++)
            epilogue_tile(&e, q, 1, (const unsigned char *)tile + (t + q) * bytes,
                          t + q + 1 < n_tiles ? ROWS : n_valid);
        e.n_out = n;
        e.out = (unsigned char *)(y + t * ROWS);
    }
    epilogue_finish(&e);
    _tile_release();
}

/* Calls of more than 32 tokens whose rows fit WIDE_A_BYTES, with their sums buffers. */
static __attribute__((noinline)) void gateup_wide(size_t m, size_t k, const void *const *x,
                                                  const void *tile, size_t n_tiles,
                                                  const moe_act_params *act, void *h,
                                                  size_t h_stride, size_t n_valid)
{
    amx_acts a;
    wide_sums ws;
    acts_init(&a, m, k, x);
    gateup_call(&a, &ws, tile, n_tiles, act, h, h_stride, n_valid);
}

static __attribute__((noinline)) void down_wide(size_t m, size_t k, const void *const *h,
                                                const void *tile, size_t n_tiles, float *y,
                                                size_t y_stride, size_t n_valid)
{
    amx_acts a;
    wide_sums ws;
    acts_init(&a, m, k, h);
    down_call(&a, &ws, tile, n_tiles, y, y_stride, n_valid);
}

/* Tokens per pass over the tiles of a call of more than 32 tokens: all of them while their
 * rows of k codes fit WIDE_A_BYTES, else the most blocks of 32 that do (at least one). */
static size_t pass_tokens(size_t m, size_t k)
{
    const size_t fit = WIDE_A_BYTES / (2 * k) / TOKEN_BLOCK * TOKEN_BLOCK;
    return fit < TOKEN_BLOCK ? TOKEN_BLOCK : fit < m ? fit : m;
}

/* Tiles per run of a call in passes: as many of tile_bytes as fit WIDE_B_BYTES, at least one;
 * one pass: all n_tiles. */
static size_t run_tiles(size_t m, size_t p, size_t tile_bytes, size_t n_tiles)
{
    const size_t fit = WIDE_B_BYTES / tile_bytes;
    return p >= m ? n_tiles : fit < 1 ? 1 : fit;
}

/* A gate/up call of more than 32 tokens: the tiles in runs, each run passed by pass_tokens
 * tokens at a time. */
static __attribute__((noinline)) void gateup_passes(size_t m, size_t k, const void *const *x,
                                                    const void *tile, size_t n_tiles,
                                                    const moe_act_params *act, void *h,
                                                    size_t h_stride, size_t n_valid)
{
    const size_t bytes = 2 * 64 + 2 * ((k + CHUNK - 1) / CHUNK) * B_BYTES, p = pass_tokens(m, k);
    const size_t run = run_tiles(m, p, bytes, n_tiles);
    for (size_t t = 0; t < n_tiles; t += run) {
        const size_t n = n_tiles - t < run ? n_tiles - t : run;
        const size_t nv = t + n < n_tiles ? ROWS : n_valid;
        const unsigned char *tt = (const unsigned char *)tile + t * bytes;
        for (size_t t0 = 0; t0 < m; t0 += p) {
            const size_t mp = m - t0 < p ? m - t0 : p;
            uint16_t *ht = (uint16_t *)h + t0 * h_stride + t * ROWS;
            if (mp > TOKEN_BLOCK)
                gateup_wide(mp, k, x + t0, tt, n, act, ht, h_stride, nv);
            else
                moe_tile_amx_gateup_tiles(mp, k, x + t0, tt, n, act, ht, h_stride, nv);
        }
    }
}

/* A down call of more than 32 tokens: as gateup_passes. */
static __attribute__((noinline)) void down_passes(size_t m, size_t k, const void *const *h,
                                                  const void *tile, size_t n_tiles, float *y,
                                                  size_t y_stride, size_t n_valid)
{
    const size_t bytes = 64 + (k + CHUNK - 1) / CHUNK * B_BYTES, p = pass_tokens(m, k);
    const size_t run = run_tiles(m, p, bytes, n_tiles);
    for (size_t t = 0; t < n_tiles; t += run) {
        const size_t n = n_tiles - t < run ? n_tiles - t : run;
        const size_t nv = t + n < n_tiles ? ROWS : n_valid;
        const unsigned char *tt = (const unsigned char *)tile + t * bytes;
        for (size_t t0 = 0; t0 < m; t0 += p) {
            const size_t mp = m - t0 < p ? m - t0 : p;
            float *yt = y + t0 * y_stride + t * ROWS;
            if (mp > TOKEN_BLOCK)
                down_wide(mp, k, h + t0, tt, n, yt, y_stride, nv);
            else
                moe_tile_amx_down_tiles(mp, k, h + t0, tt, n, yt, y_stride, nv);
        }
    }
}

void moe_tile_amx_gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                               size_t n_tiles, const moe_act_params *act, void *h, size_t h_stride,
                               size_t n_valid)
{
    if (m == 0 || n_tiles == 0) return;
    if (m > TOKEN_BLOCK) {
        gateup_passes(m, k, x, tile, n_tiles, act, h, h_stride, n_valid);
        return;
    }
    amx_acts a;
    acts_init(&a, m, k, x);
    gateup_call(&a, NULL, tile, n_tiles, act, h, h_stride, n_valid);
}

void moe_tile_amx_down_tiles(size_t m, size_t k, const void *const *h, const void *tile,
                             size_t n_tiles, float *y, size_t y_stride, size_t n_valid)
{
    if (m == 0 || n_tiles == 0) return;
    if (m > TOKEN_BLOCK) {
        down_passes(m, k, h, tile, n_tiles, y, y_stride, n_valid);
        return;
    }
    amx_acts a;
    acts_init(&a, m, k, h);
    down_call(&a, NULL, tile, n_tiles, y, y_stride, n_valid);
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
           MOE_TILE_AMX_BF16_MR, MOE_XL_TILE_LAYOUT, .gateup = moe_tile_amx_gateup,
           .down = moe_tile_amx_down, .gateup_tiles = moe_tile_amx_gateup_tiles,
           .down_tiles = moe_tile_amx_down_tiles, .tiles_from_m = 0, .tiles_to_m = 0);
