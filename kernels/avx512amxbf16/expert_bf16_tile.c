/* expert_bf16_tile.c — the AMX-BF16 micro-kernels of the tile recipe (bf16 experts), 32x16: one
 * tdpbf16ps per 32-K chunk, 16 tokens and 16 rows. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512/expert_shared.h"
#include "kernels/avx512amxbf16/expert_bf16_tile.h"
#include "kernels/inline.h"
#include "kernels/ref/expert_layout.h"
#include "select/kernel.h"

/*
 * Tile registers, configured once per call from m (palette 1): 0 and 1 the A rows of tokens
 * 0-15 and 16-31 (one 32-K chunk each: 64 bytes), 2 and 3 B chunks (16 pairs × 16 rows), 4-7
 * the sums. A call's tiles run in groups of B streams (gate/up: each tile's gate and up; down:
 * each tile): with more than 16 tokens two streams, 4 = A0·B2, 5 = A0·B3, 6 = A1·B2, 7 = A1·B3
 * (gate/up one tile, down two); with at most 16, four streams through B tiles 2 and 3 twice
 * per chunk into sums 4-7 (gate/up two tiles, down four). So every A load feeds 4 tdpbf16ps
 * and every B load 2 (more than 16 tokens) or 1 (at most: at 8-16 tokens 19-25 % faster than
 * two streams). The sums start at +0 (tilezero) and take each chunk in K order, which is the
 * recipe's chain itself: the same bits for every m, token position and group.
 *
 * A rows: when x[i] = x[0] + i·stride for one stride (the engine's panels), the full chunks
 * load straight from the rows with that stride; otherwise each chunk's rows are first copied
 * into a 64-byte aligned stack buffer, one chunk ahead of the products (two buffers). A last
 * partial chunk (k % 32 != 0) always goes through the buffer, with masked loads that read
 * nothing past x[i][k - 1] and zero the rest.
 *
 * Epilogue: the sums stored to the stack, then on 16 lanes (AVX-512) + bias in f32 and, for
 * gate/up, act16 (kernels/avx512/expert_shared.h, moe_xr_act's twin) and the bf16 rounding of
 * the bf16 recipe; masked stores of the n_valid rows. In a multi-tile call a tile's epilogue
 * runs during the next tile's chunks, one token per chunk, from the second of two sums
 * buffers: the vector units' work (the activation's exp and division above all) then
 * overlaps the tile unit's instead of following it.
 */

#define ROWS 16      /* tile rows: tokens per A tile, weight rows per tile */
#define CHUNK 32     /* bf16 along K per tdpbf16ps */
#define B_BYTES 1024 /* one B chunk: 16 rows of 64 bytes */
#define MR MOE_TILE_AMX_MR

/* The palette-1 tile configuration, as LDTILECFG reads it (Intel SDM): 64 bytes. */
typedef struct tile_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_cfg;

/* A call's tokens: where their rows are, the staging buffer, the tile configuration. */
typedef struct amx_acts {
    uint16_t buf[2][MR][CHUNK] __attribute__((aligned(64)));   /* two chunks' rows, gathered */
    float sums[2][4][ROWS][ROWS] __attribute__((aligned(64))); /* tiles 4-7 stored, twice */
    tile_cfg cfg __attribute__((aligned(64)));
    const uint16_t *const *x;
    const unsigned char *row0; /* x[0] */
    long stride;               /* bytes from x[i] to x[i + 1] when uniform */
    size_t m, k, chunks;
    size_t direct; /* chunks loaded straight from the rows: k / 32 when uniform, else 0 */
} amx_acts;

/* Tile t as rows × colsb bytes (rows 0: unused). */
INLINE void tile_shape(tile_cfg *c, int t, size_t rows, size_t colsb)
{
    c->rows[t] = (uint8_t)rows;
    c->colsb[t] = (uint16_t)(rows ? colsb : 0);
}

/* Reads the call's rows and configures the tiles for m tokens. */
static void acts_init(amx_acts *a, size_t m, size_t k, const void *const *x)
{
    a->x = (const uint16_t *const *)x;
    a->m = m;
    a->k = k;
    a->chunks = (k + CHUNK - 1) / CHUNK;
    a->row0 = x[0];
    const uintptr_t p0 = (uintptr_t)x[0];
    const uintptr_t step = m > 1 ? (uintptr_t)x[1] - p0 : 0;
    bool uniform = true;
    for (size_t i = 2; i < m && uniform; i++)
        uniform = (uintptr_t)x[i] == p0 + i * step;
    a->stride = (long)step;
    a->direct = uniform ? k / CHUNK : 0;
    const size_t r0 = m < ROWS ? m : ROWS, r1 = m - r0;
    memset(&a->cfg, 0, sizeof a->cfg);
    a->cfg.palette = 1;
    tile_shape(&a->cfg, 0, r0, 64);
    tile_shape(&a->cfg, 1, r1, 64);
    tile_shape(&a->cfg, 2, ROWS, 64);
    tile_shape(&a->cfg, 3, ROWS, 64);
    tile_shape(&a->cfg, 4, r0, 64);
    tile_shape(&a->cfg, 5, r0, 64);
    tile_shape(&a->cfg, 6, r1 ? r1 : r0, 64); /* one A tile: sums of streams 2 and 3 */
    tile_shape(&a->cfg, 7, r1 ? r1 : r0, 64);
    _tile_loadconfig(&a->cfg);
}

/* Chunk c of every row into buf[c % 2]: the 32 codes, or the k - 32c left zero-padded. */
INLINE void gather(amx_acts *a, size_t c)
{
    const size_t left = a->k - CHUNK * c;
    const __mmask32 mask = left >= CHUNK ? ~(__mmask32)0 : ((__mmask32)1 << left) - 1;
    for (size_t i = 0; i < a->m; i++)
        _mm512_store_si512(a->buf[c % 2][i], _mm512_maskz_loadu_epi16(mask, a->x[i] + CHUNK * c));
}

/* The epilogue of a group of tiles, token by token: in a multi-tile call one token per chunk
 * of the next group (the vector units work while the tile unit does), the rest after its
 * last chunk. Output q of a token is tile q of the group: gate/up from B streams 2q (gate)
 * and 2q + 1 (up), down from stream q. */
typedef struct epilogue {
    const float (*s)[ROWS][ROWS]; /* the stored sums, tiles 4-7 */
    const moe_act_params *act;    /* gate/up; NULL: down */
    __m512 b[4];                  /* the biases of the rows of each stream */
    __mmask16 mask[4];            /* the valid rows of each output */
    size_t n_out;                 /* tiles in the group */
    unsigned char *out;           /* token 0's first output (h: bf16, y: f32) */
    size_t out_bytes;             /* bytes between tokens' outputs */
    size_t m, next;               /* tokens, and the next one to write */
} epilogue;

/* The stored sums of token i against B stream j (tiles 4-7: A0·B2, A0·B3, then for tokens
 * 16-31 A1·B2, A1·B3; one A tile: streams 0-3 in tiles 4-7). */
INLINE __m512 sums_of(const epilogue *e, size_t i, size_t j)
{
    return _mm512_load_ps(e->s[(i >= ROWS ? 2 : 0) + j][i % ROWS]);
}

/* Token i: gate/up h = bf16(act(g + bg, u + bu)), down y = sum + b, for each tile. */
INLINE void epilogue_token(const epilogue *e, size_t i)
{
    unsigned char *out = e->out + i * e->out_bytes;
    for (size_t q = 0; q < e->n_out; q++) {
        if (e->act) {
            const __m512 g = _mm512_add_ps(sums_of(e, i, 2 * q), e->b[2 * q]);
            const __m512 u = _mm512_add_ps(sums_of(e, i, 2 * q + 1), e->b[2 * q + 1]);
            _mm256_mask_storeu_epi16(out + q * ROWS * sizeof(uint16_t), e->mask[q],
                                     to_bf16(act16(e->act, g, u)));
        } else {
            _mm512_mask_storeu_ps(out + q * ROWS * sizeof(float), e->mask[q],
                                  _mm512_add_ps(sums_of(e, i, q), e->b[q]));
        }
    }
}

INLINE void epilogue_step(epilogue *e)
{
    if (e->next < e->m) epilogue_token(e, e->next++);
}

static void epilogue_finish(epilogue *e)
{
    while (e->next < e->m)
        epilogue_token(e, e->next++);
}

/* The B streams of a group, chunk c of stream j at b[j] + c · 1 KB. */
typedef struct streams {
    const unsigned char *b[4];
} streams;

/*
 * One chunk: A rows from pa, sa bytes apart, against NB B streams' chunk c; then a token of
 * the pending epilogue. TWO (more than 16 tokens): tokens 16-31 from pa + 16·sa in tile 1, NB
 * ≤ 2 streams in tiles 2 and 3, four sums. One A tile: up to 4 streams, through tiles 2 and 3
 * twice, each into its own sum (4 tdpbf16ps per A load, where a pair of streams gave 2).
 */
INLINE void step(const unsigned char *pa, long sa, const streams *w, size_t c, epilogue *e,
                 const bool TWO, const int NB)
{
    const size_t o = c * B_BYTES;
    _tile_loadd(0, pa, sa);
    if (TWO) _tile_loadd(1, pa + ROWS * sa, sa);
    _tile_loadd(2, w->b[0] + o, 64);
    if (NB > 1) _tile_loadd(3, w->b[1] + o, 64);
    _tile_dpbf16ps(4, 0, 2);
    if (NB > 1) _tile_dpbf16ps(5, 0, 3);
    if (TWO) {
        _tile_dpbf16ps(6, 1, 2);
        if (NB > 1) _tile_dpbf16ps(7, 1, 3);
    } else if (NB > 2) {
        _tile_loadd(2, w->b[2] + o, 64);
        _tile_dpbf16ps(6, 0, 2);
        if (NB > 3) {
            _tile_loadd(3, w->b[3] + o, 64);
            _tile_dpbf16ps(7, 0, 3);
        }
    }
    epilogue_step(e);
}

/* Chunks [c0, c1) with A straight from the rows (one stride). */
INLINE void run_direct(const amx_acts *a, size_t c0, size_t c1, const streams *w, epilogue *e,
                       const bool TWO, const int NB)
{
    for (size_t c = c0; c < c1; c++)
        step(a->row0 + 2 * CHUNK * c, a->stride, w, c, e, TWO, NB);
}

/* The same with A through the buffer, one chunk ahead: chunk c + 1 is gathered before chunk c's
 * tiles are loaded, so the loads find the stores done and the copy overlaps the products. */
INLINE void run_gathered(amx_acts *a, size_t c0, size_t c1, const streams *w, epilogue *e,
                         const bool TWO, const int NB)
{
    if (c0 < c1) gather(a, c0);
    for (size_t c = c0; c < c1; c++) {
        if (c + 1 < c1) gather(a, c + 1);
        step((const unsigned char *)a->buf[c % 2][0], 2 * CHUNK, w, c, e, TWO, NB);
    }
}

/* The sum tiles a group uses: 4 and, per stream and A tile, the next. */
#define SUM_TILES(OP, TWO, NB)                                                                     \
    do {                                                                                           \
        OP(4, 0);                                                                                  \
        if ((NB) > 1) OP(5, 1);                                                                    \
        if ((TWO) || (NB) > 2) OP(6, 2);                                                           \
        if (((TWO) && (NB) > 1) || (NB) > 3) OP(7, 3);                                             \
    } while (0)
#define ZERO_SUM(t, j) _tile_zero(t)
#define STORE_SUM(t, j) _tile_stored(t, s[j], 64)

/* The group's sums over all chunks, stored to s, while the pending epilogue e runs; e
 * finished before the stores. */
INLINE void sums_m(amx_acts *a, const streams *w, epilogue *e, float (*s)[ROWS][ROWS],
                   const bool TWO, const int NB)
{
    SUM_TILES(ZERO_SUM, TWO, NB);
    run_direct(a, 0, a->direct, w, e, TWO, NB);
    run_gathered(a, a->direct, a->chunks, w, e, TWO, NB);
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

/* Tiles per group: gate/up (2 streams each) 1 with two A tiles, else 2; down 2, else 4. */
static size_t group_tiles(const amx_acts *a, int np) { return (a->m > ROWS ? 2 : 4) / (size_t)np; }

void moe_tile_amx_gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                               size_t n_tiles, const moe_act_params *act, void *h, size_t h_stride,
                               size_t n_valid)
{
    if (m == 0 || n_tiles == 0) return;
    amx_acts a;
    acts_init(&a, m, k, x);
    const size_t bytes = 2 * 64 + 2 * a.chunks * B_BYTES, g = group_tiles(&a, 2);
    epilogue e = {.act = act, .out_bytes = h_stride * sizeof(uint16_t)};
    for (size_t t = 0; t < n_tiles; t += g) {
        const size_t n = n_tiles - t < g ? n_tiles - t : g;
        streams w = {{NULL}};
        for (size_t q = 0; q < n; q++) {
            w.b[2 * q] = (const unsigned char *)tile + (t + q) * bytes + 2 * 64;
            w.b[2 * q + 1] = w.b[2 * q] + a.chunks * B_BYTES;
        }
        group_sums(&a, &w, 2 * n, &e);
        for (size_t q = 0; q < n; q++) {
            const unsigned char *bias = (const unsigned char *)tile + (t + q) * bytes;
            e.b[2 * q] = _mm512_loadu_ps(bias);
            e.b[2 * q + 1] = _mm512_loadu_ps(bias + 64);
            e.mask[q] = rows_mask(t + q + 1 < n_tiles ? ROWS : n_valid);
        }
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
    const size_t bytes = 64 + a.chunks * B_BYTES, g = group_tiles(&a, 1);
    epilogue e = {.act = NULL, .out_bytes = y_stride * sizeof(float)};
    for (size_t t = 0; t < n_tiles; t += g) {
        const size_t n = n_tiles - t < g ? n_tiles - t : g;
        streams w = {{NULL}};
        for (size_t q = 0; q < n; q++)
            w.b[q] = (const unsigned char *)tile + (t + q) * bytes + 64;
        group_sums(&a, &w, n, &e);
        for (size_t q = 0; q < n; q++) {
            e.b[q] = _mm512_loadu_ps((const unsigned char *)tile + (t + q) * bytes);
            e.mask[q] = rows_mask(t + q + 1 < n_tiles ? ROWS : n_valid);
        }
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
