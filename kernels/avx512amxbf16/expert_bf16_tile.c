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
 * sums buffers. With more than 16 tokens and more than one group (two A tiles per chunk, shared
 * by the groups) the call runs K-block by K-block instead: 8 chunks of every row copied once
 * into an L1 buffer and read by up to 4 groups, each group's sum tiles stored after a block
 * and loaded before the next; every sum still takes the chunks in K order from +0.
 */

/* The B streams of a group, chunk c of stream j at b[j] + c · 1 KB. */
typedef struct streams {
    const unsigned char *b[4];
} streams;

/* A call's tiles: tile t at tile + t · bytes, of np projections (gate/up 2, down 1), every
 * tile but the last with 16 valid rows, the last n_valid; tile t's outputs at out + 16t
 * elements of elem bytes. */
typedef struct tile_run {
    const unsigned char *tile;
    size_t bytes, n_tiles, n_valid, elem;
    int np;
    unsigned char *out;
} tile_run;

INLINE size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* The streams of the group of n tiles from tile t. */
static streams group_streams(const amx_acts *a, const tile_run *r, size_t t, size_t n)
{
    streams w = {{NULL}};
    for (size_t q = 0; q < n; q++)
        for (size_t p = 0; p < (size_t)r->np; p++)
            w.b[(size_t)r->np * q + p] =
                r->tile + (t + q) * r->bytes + 64 * (size_t)r->np + p * a->chunks * B_BYTES;
    return w;
}

/* e made the epilogue of the group of n tiles from tile t, whose sums are at s. */
static void group_epilogue(epilogue *e, const amx_acts *a, const tile_run *r, size_t t, size_t n,
                           float (*s)[ROWS][ROWS])
{
    for (size_t q = 0; q < n; q++)
        epilogue_tile(e, q, r->np, r->tile + (t + q) * r->bytes,
                      t + q + 1 < r->n_tiles ? ROWS : r->n_valid);
    e->n_out = n;
    e->out = r->out + t * ROWS * r->elem;
    e->s = (const float(*)[ROWS][ROWS])s;
    e->m = a->m;
    e->next = 0;
}

/* ---- Group by group: each group over all chunks ----------------------------------------- */

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

/* A group of nb streams (TWO: nb ≤ 2, else ≤ 4): its sums into s. */
static void group_sums(amx_acts *a, const streams *w, size_t nb, epilogue *e,
                       float (*s)[ROWS][ROWS])
{
    if (a->m > ROWS)
        nb == 2 ? sums_m(a, w, e, s, true, 2) : sums_m(a, w, e, s, true, 1);
    else if (nb > 2)
        nb == 4 ? sums_m(a, w, e, s, false, 4) : sums_m(a, w, e, s, false, 3);
    else
        nb == 2 ? sums_m(a, w, e, s, false, 2) : sums_m(a, w, e, s, false, 1);
}

/* The groups of g tiles one after the other, each into the sums buffer the pending epilogue
 * does not read. */
static void run_by_group(amx_acts *a, const tile_run *r, size_t g, epilogue *e)
{
    for (size_t t = 0; t < r->n_tiles; t += g) {
        const size_t n = min_size(r->n_tiles - t, g);
        const streams w = group_streams(a, r, t, n);
        float(*s)[ROWS][ROWS] = a->sums[e->s == a->sums[0] ? 1 : 0];
        group_sums(a, &w, (size_t)r->np * n, e, s);
        group_epilogue(e, a, r, t, n, s);
    }
}

/* ---- A held in L1: K-block by K-block across the groups of a pass -------------------------- */

#define KBLOCK 8      /* chunks of A held: 8 × 32 rows × 64 bytes = 16 KB */
#define PASS_GROUPS 4 /* groups per pass, whose sums (4 KB each) are held between K-blocks */

typedef struct held_a {
    uint16_t rows[KBLOCK][MR][CHUNK] __attribute__((aligned(64))); /* chunk c at c % KBLOCK */
    float sums[PASS_GROUPS][4][ROWS][ROWS] __attribute__((aligned(64)));
} held_a;

#define LOAD_SUM(t, j) _tile_loadd(t, s[j], 64)

/* One group's sums over chunks [c0, c1) of the held rows: from +0 (c0 = 0) or from s, back to
 * s. fill (the pass's first group): each chunk is copied into the held rows one chunk ahead
 * of its products. The pending epilogue e runs spread over the chunks, finished before the
 * stores. */
INLINE void block_m(amx_acts *a, held_a *h, const streams *w, epilogue *e, float (*s)[ROWS][ROWS],
                    size_t c0, size_t c1, bool fill, const bool TWO, const int NB)
{
    if (c0 == 0)
        SUM_TILES(ZERO_SUM, TWO, NB);
    else
        SUM_TILES(LOAD_SUM, TWO, NB);
    const size_t steps = (e->m - e->next + (c1 - c0) - 1) / (c1 - c0);
    if (fill) gather_into(a, c0, h->rows[c0 % KBLOCK]);
    for (size_t c = c0; c < c1; c++) {
        if (fill && c + 1 < c1) gather_into(a, c + 1, h->rows[(c + 1) % KBLOCK]);
        const unsigned char *b[4];
        for (int j = 0; j < NB; j++)
            b[j] = w->b[j] + c * B_BYTES;
        chunk_products((const unsigned char *)h->rows[c % KBLOCK][0], 2 * CHUNK, b, TWO, NB);
        for (size_t i = 0; i < steps; i++)
            epilogue_step(e);
    }
    epilogue_finish(e);
    SUM_TILES(STORE_SUM, TWO, NB);
}

static void block_sums(amx_acts *a, held_a *h, const streams *w, size_t nb, epilogue *e,
                       float (*s)[ROWS][ROWS], size_t c0, size_t c1, bool fill)
{
    if (nb == 2)
        block_m(a, h, w, e, s, c0, c1, fill, true, 2);
    else
        block_m(a, h, w, e, s, c0, c1, fill, true, 1);
}

/* The groups of g tiles (more than 16 tokens), PASS_GROUPS at a time: for each K-block, the
 * pass's first group copies its chunks of every row once and every group of the pass reads
 * them from L1, its sums stored after the block and loaded before the next (exact: the same
 * chain of tdpbf16ps in K order), so per chunk only the B tiles come from L2. */
static void run_held(amx_acts *a, const tile_run *r, size_t g, epilogue *e)
{
    held_a h;
    for (size_t t0 = 0; t0 < r->n_tiles; t0 += PASS_GROUPS * g) {
        const size_t t1 = min_size(r->n_tiles, t0 + PASS_GROUPS * g);
        for (size_t c0 = 0; c0 < a->chunks; c0 += KBLOCK) {
            const size_t c1 = min_size(a->chunks, c0 + KBLOCK);
            for (size_t t = t0; t < t1; t += g) {
                const size_t n = min_size(t1 - t, g);
                const streams w = group_streams(a, r, t, n);
                float(*s)[ROWS][ROWS] = h.sums[(t - t0) / g];
                block_sums(a, &h, &w, (size_t)r->np * n, e, s, c0, c1, t == t0);
                if (c1 == a->chunks) group_epilogue(e, a, r, t, n, s);
            }
        }
    }
}

/* A call: A held in L1 where a chunk loads two A tiles (more than 16 tokens) and there is more
 * than one group to share them, else group by group. */
static void run_tiles(amx_acts *a, const tile_run *r, epilogue *e)
{
    const size_t g = group_tiles(a->m, r->np);
    if (a->m > ROWS && r->n_tiles > g)
        run_held(a, r, g, e);
    else
        run_by_group(a, r, g, e);
    epilogue_finish(e);
    _tile_release();
}

void moe_tile_amx_gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                               size_t n_tiles, const moe_act_params *act, void *h, size_t h_stride,
                               size_t n_valid)
{
    if (m == 0 || n_tiles == 0) return;
    amx_acts a;
    acts_init(&a, m, k, x);
    const tile_run r = {.tile = tile,
                        .bytes = 2 * 64 + 2 * a.chunks * B_BYTES,
                        .n_tiles = n_tiles,
                        .n_valid = n_valid,
                        .elem = sizeof(uint16_t),
                        .np = 2,
                        .out = h};
    epilogue e = {.act = act, .out_bytes = h_stride * sizeof(uint16_t)};
    run_tiles(&a, &r, &e);
}

void moe_tile_amx_down_tiles(size_t m, size_t k, const void *const *h, const void *tile,
                             size_t n_tiles, float *y, size_t y_stride, size_t n_valid)
{
    if (m == 0 || n_tiles == 0) return;
    amx_acts a;
    acts_init(&a, m, k, h);
    const tile_run r = {.tile = tile,
                        .bytes = 64 + a.chunks * B_BYTES,
                        .n_tiles = n_tiles,
                        .n_valid = n_valid,
                        .elem = sizeof(float),
                        .np = 1,
                        .out = (unsigned char *)y};
    epilogue e = {.act = NULL, .out_bytes = y_stride * sizeof(float)};
    run_tiles(&a, &r, &e);
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
