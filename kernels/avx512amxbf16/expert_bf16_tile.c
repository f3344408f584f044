/* expert_bf16_tile.c — the AMX-BF16 micro-kernels of the tile recipe (bf16 experts), 32x16: one
 * tdpbf16ps per 32-K chunk, 16 tokens and 16 rows. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512/expert_shared.h"
#include "kernels/avx512amxbf16/expert_bf16_tile.h"
#include "kernels/inline.h"

/*
 * Tile registers, configured once per call from m (palette 1): 0 and 1 the A rows of tokens
 * 0-15 and 16-31 (one 32-K chunk each: 64 bytes), 2 and 3 two B chunks (16 pairs × 16 rows),
 * and the sums: 4 = A0·B2, 5 = A0·B3, 6 = A1·B2, 7 = A1·B3. Gate/up puts gate's chunk in 2
 * and up's in 3; down puts two tiles' chunks there (the multi-tile entry) or one. So every
 * chunk of 32 tokens loads 4 tiles and runs 4 tdpbf16ps. The sums start at +0 (tilezero) and
 * take each chunk in K order, which is the recipe's chain itself: the same bits for every m
 * and token position.
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
    tile_shape(&a->cfg, 6, r1, 64);
    tile_shape(&a->cfg, 7, r1, 64);
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

/* moe_f32_to_bf16 on 16 lanes (nearest even, NaN quiet, subnormals kept), narrowed to 16
 * words: the integer rounding of the bf16 recipe's AVX-512 epilogue
 * (kernels/avx512/expert_bf16_body.h), not vcvtneps2bf16, which flushes subnormals. */
INLINE __m256i to_bf16(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb));
    r = _mm512_srli_epi32(r, 16);
    const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
    r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, q);
    return _mm512_cvtepi32_epi16(r);
}

/* A tile's epilogue, token by token: in a multi-tile call one token per chunk of the next
 * tile (the vector units work while the tile unit does), the rest after its last chunk. */
typedef struct epilogue {
    const float (*s)[ROWS][ROWS]; /* the stored sums, tiles 4-7 */
    const moe_act_params *act;    /* gate/up; NULL: down */
    __m512 b0, b1;                /* the biases of the rows against B tiles 2 and 3 */
    __mmask16 mask0, mask1;       /* their valid rows */
    bool second;                  /* down: a second tile, against B tile 3 */
    unsigned char *out;           /* token 0's first output (h: bf16, y: f32) */
    size_t out_bytes;             /* bytes between tokens' outputs */
    size_t m, next;               /* tokens, and the next one to write */
} epilogue;

/* Token i: gate/up h = bf16(act(g + bg, u + bu)); down y = sum + b, of one or two tiles. */
INLINE void epilogue_token(const epilogue *e, size_t i)
{
    const size_t r = i % ROWS, t = i >= ROWS ? 2 : 0;
    unsigned char *out = e->out + i * e->out_bytes;
    const __m512 v = _mm512_add_ps(_mm512_load_ps(e->s[t][r]), e->b0);
    if (e->act) {
        const __m512 u = _mm512_add_ps(_mm512_load_ps(e->s[t + 1][r]), e->b1);
        _mm256_mask_storeu_epi16(out, e->mask0, to_bf16(act16(e->act, v, u)));
        return;
    }
    _mm512_mask_storeu_ps(out, e->mask0, v);
    if (e->second)
        _mm512_mask_storeu_ps(out + ROWS * sizeof(float), e->mask1,
                              _mm512_add_ps(_mm512_load_ps(e->s[t + 1][r]), e->b1));
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

/* One chunk: A rows from pa, sa bytes apart (tokens 16-31 from pa + 16·sa, when TWO: more than
 * 16 tokens), against the B chunks at b2 and, when B3 (gate/up, or a second down tile), b3;
 * then a token of the pending epilogue. */
INLINE void step(const unsigned char *pa, long sa, const unsigned char *b2, const unsigned char *b3,
                 epilogue *e, const bool TWO, const bool B3)
{
    _tile_loadd(0, pa, sa);
    if (TWO) _tile_loadd(1, pa + ROWS * sa, sa);
    _tile_loadd(2, b2, 64);
    if (B3) _tile_loadd(3, b3, 64);
    _tile_dpbf16ps(4, 0, 2);
    if (B3) _tile_dpbf16ps(5, 0, 3);
    if (TWO) {
        _tile_dpbf16ps(6, 1, 2);
        if (B3) _tile_dpbf16ps(7, 1, 3);
    }
    epilogue_step(e);
}

/* Chunks [c0, c1) with A straight from the rows (one stride), B chunk c at b + c · 1 KB. */
INLINE void run_direct(const amx_acts *a, size_t c0, size_t c1, const unsigned char *b2,
                       const unsigned char *b3, epilogue *e, const bool TWO, const bool B3)
{
    for (size_t c = c0; c < c1; c++)
        step(a->row0 + 2 * CHUNK * c, a->stride, b2 + c * B_BYTES, b3 + c * B_BYTES, e, TWO, B3);
}

/* The same with A through the buffer, one chunk ahead: chunk c + 1 is gathered before chunk c's
 * tiles are loaded, so the loads find the stores done and the copy overlaps the products. */
INLINE void run_gathered(amx_acts *a, size_t c0, size_t c1, const unsigned char *b2,
                         const unsigned char *b3, epilogue *e, const bool TWO, const bool B3)
{
    if (c0 < c1) gather(a, c0);
    for (size_t c = c0; c < c1; c++) {
        if (c + 1 < c1) gather(a, c + 1);
        step((const unsigned char *)a->buf[c % 2][0], 2 * CHUNK, b2 + c * B_BYTES, b3 + c * B_BYTES,
             e, TWO, B3);
    }
}

/* The sums of one or two B streams over all chunks, stored to s (tiles 4-7 in order), while
 * the pending epilogue e runs; e finished before the stores. */
INLINE void sums_m(amx_acts *a, const unsigned char *b2, const unsigned char *b3, epilogue *e,
                   float (*s)[ROWS][ROWS], const bool TWO, const bool B3)
{
    _tile_zero(4);
    if (B3) _tile_zero(5);
    if (TWO) {
        _tile_zero(6);
        if (B3) _tile_zero(7);
    }
    run_direct(a, 0, a->direct, b2, b3, e, TWO, B3);
    run_gathered(a, a->direct, a->chunks, b2, b3, e, TWO, B3);
    epilogue_finish(e);
    _tile_stored(4, s[0], 64);
    if (B3) _tile_stored(5, s[1], 64);
    if (TWO) {
        _tile_stored(6, s[2], 64);
        if (B3) _tile_stored(7, s[3], 64);
    }
}

/* One tile (gate/up: b3 up's chunks) or two (down: b3 the second's chunks, or NULL): its sums
 * into the buffer the pending epilogue e does not read, then e set to its own epilogue (outputs
 * and biases still to be filled in). */
static void tile_sums(amx_acts *a, const unsigned char *b2, const unsigned char *b3, epilogue *e)
{
    float(*s)[ROWS][ROWS] = a->sums[e->s == a->sums[0] ? 1 : 0];
    const bool two = a->m > ROWS;
    if (b3)
        two ? sums_m(a, b2, b3, e, s, true, true) : sums_m(a, b2, b3, e, s, false, true);
    else /* b3 unread */
        two ? sums_m(a, b2, b2, e, s, true, false) : sums_m(a, b2, b2, e, s, false, false);
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
    const size_t bytes = 2 * 64 + 2 * a.chunks * B_BYTES;
    epilogue e = {.act = act, .second = false, .out_bytes = h_stride * sizeof(uint16_t)};
    for (size_t t = 0; t < n_tiles; t++) {
        const unsigned char *w = (const unsigned char *)tile + t * bytes;
        tile_sums(&a, w + 2 * 64, w + 2 * 64 + a.chunks * B_BYTES, &e);
        e.b0 = _mm512_loadu_ps(w);
        e.b1 = _mm512_loadu_ps(w + 64);
        e.mask0 = rows_mask(t + 1 < n_tiles ? ROWS : n_valid);
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
    const size_t bytes = 64 + a.chunks * B_BYTES;
    epilogue e = {.act = NULL, .out_bytes = y_stride * sizeof(float)};
    for (size_t t = 0; t < n_tiles; t += 2) {
        const unsigned char *t0 = (const unsigned char *)tile + t * bytes, *t1 = t0 + bytes;
        const bool pair = t + 1 < n_tiles;
        tile_sums(&a, t0 + 64, pair ? t1 + 64 : NULL, &e);
        e.b0 = _mm512_loadu_ps(t0);
        e.mask0 = rows_mask(pair ? ROWS : n_valid);
        e.second = pair;
        if (pair) {
            e.b1 = _mm512_loadu_ps(t1);
            e.mask1 = rows_mask(t + 2 < n_tiles ? ROWS : n_valid);
        }
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
