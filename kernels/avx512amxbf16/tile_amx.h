/* tile_amx.h — internal: what the tile recipe's AMX-BF16 micro-kernels share: the tile
 * configuration, the A rows (one stride, gathered, masked tail), the products of a chunk and the
 * epilogue. */
#ifndef MOE_KERNELS_AVX512AMXBF16_TILE_AMX_H
#define MOE_KERNELS_AVX512AMXBF16_TILE_AMX_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512/expert_shared.h"
#include "kernels/avx512amxbf16/expert_bf16_tile.h"
#include "kernels/avx512vbmi/fp8_bytes.h"
#include "kernels/expert.h"
#include "kernels/inline.h"

/*
 * Tile registers, configured once per call from m (palette 1): 0 and 1 the A rows of tokens
 * 0-15 and 16-31 (one 32-K chunk each: 64 bytes), 2 and 3 B chunks (16 pairs × 16 rows), 4-7
 * the sums. A call's tiles run in groups of B streams (gate/up: each tile's gate and up; down:
 * each tile): with more than 16 tokens two streams, 4 = A0·B2, 5 = A0·B3, 6 = A1·B2, 7 = A1·B3
 * (gate/up one tile, down two); with at most 16, four streams through B tiles 2 and 3 twice
 * per chunk into sums 4-7 (gate/up two tiles, down four). So every A load feeds 4 tdpbf16ps
 * and every B load 2 (more than 16 tokens) or 1 (at most: at 8-16 tokens 19-25 % faster than
 * two streams). The sums start at +0 (tilezero) and take chunks in K order, which is the
 * recipe's chain itself: the same bits for every m, token position and group.
 *
 * A rows: when x[i] = x[0] + i·stride for one stride (the engine's panels), the full chunks
 * load straight from the rows with that stride; otherwise each chunk's rows are first copied
 * into a 64-byte aligned stack buffer, one chunk ahead of the products (two buffers). A last
 * partial chunk (k % 32 != 0) always goes through the buffer, with masked loads that read
 * nothing past x[i][k - 1] and zero the rest.
 *
 * Epilogue: the sums (stored tiles, or the FP8 kernels' scaled totals in the same order) on
 * 16 lanes (AVX-512): + bias in f32 and, for gate/up, act16 (kernels/avx512/expert_shared.h,
 * moe_xr_act's twin) and the bf16 rounding of the bf16 recipe; masked stores of the n_valid
 * rows. It runs token by token, so a multi-tile call can spread a group's epilogue over the
 * next group's chunks: the vector units' work (the activation's exp and division above all)
 * then overlaps the tile unit's instead of following it. Streams widened in mixed pairs (the FP8
 * set's byte tables: each of the two B tiles of a pair holds half the rows of both streams,
 * kernels/avx512vbmi/fp8_bytes.h) have their sums put back in row order here.
 */

#define ROWS 16      /* tile rows: tokens per A tile, weight rows per tile */
#define CHUNK 32     /* bf16 along K per tdpbf16ps */
#define B_BYTES 1024 /* one B chunk: 16 rows of 64 bytes */
#define MR MOE_TILE_AMX_MR
#define TOKEN_BLOCK (2 * ROWS) /* tokens per pass of the tile unit over a run of B chunks: 32 */
#define SUMS_BLOCKS(mr) (2 * (mr) / ROWS) /* 16 × 16 blocks of the sums of mr tokens, 2 streams */

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
    /* More than 32 tokens (a set that runs them in blocks of 32): every tile of 16 rows. */
    const size_t r0 = m < ROWS ? m : ROWS, r1 = m - r0 < ROWS ? m - r0 : ROWS;
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

/* Chunk c's A rows made ready for acts_rows: copied to the buffer unless loaded straight (call
 * it for chunk c + 1 before chunk c's products, so the copy overlaps them and the tile loads
 * find the stores done; chunks past the last: nothing). */
INLINE void acts_ready(amx_acts *a, size_t c)
{
    if (c >= a->direct && c < a->chunks) gather(a, c);
}

/* Where chunk c's A rows start, and (*sa) the bytes from one row to the next. */
INLINE const unsigned char *acts_rows(const amx_acts *a, size_t c, long *sa)
{
    if (c < a->direct) {
        *sa = a->stride;
        return a->row0 + 2 * CHUNK * c;
    }
    *sa = 2 * CHUNK;
    return (const unsigned char *)a->buf[c % 2][0];
}

/* Tokens t0 .. t0 + mt - 1's chunk c for the tile unit, (*sa) bytes from row to row: straight
 * from the rows for a full token block of one stride, else copied into a buffer (zero rows past
 * mt up to the A tiles' 16 or 32, zeros past k). */
static inline const unsigned char *block_rows(amx_acts *a, size_t t0, size_t mt, size_t c, long *sa)
{
    if (c < a->direct && mt == TOKEN_BLOCK) {
        *sa = a->stride;
        return a->row0 + (long)t0 * a->stride + 2 * CHUNK * c;
    }
    const size_t left = a->k - CHUNK * c, rows = mt > ROWS ? TOKEN_BLOCK : ROWS;
    const __mmask32 mask = left >= CHUNK ? ~(__mmask32)0 : ((__mmask32)1 << left) - 1;
    uint16_t(*buf)[CHUNK] = a->buf[c % 2];
    for (size_t i = 0; i < rows; i++)
        _mm512_store_si512(buf[i], i < mt ? _mm512_maskz_loadu_epi16(mask, a->x[t0 + i] + CHUNK * c)
                                          : _mm512_setzero_si512());
    *sa = 2 * CHUNK;
    return (const unsigned char *)buf[0];
}

/*
 * One chunk's products: A rows from pa, sa bytes apart, against NB B chunks (b[j], 16 rows of
 * 64 bytes). TWO (more than 16 tokens): tokens 16-31 from pa + 16·sa in tile 1, NB ≤ 2
 * streams in tiles 2 and 3, four sums. One A tile: up to 4 streams, through tiles 2 and 3
 * twice, each into its own sum (4 tdpbf16ps per A load, where a pair of streams gave 2).
 */
INLINE void chunk_products(const unsigned char *pa, long sa, const unsigned char *const *b,
                           const bool TWO, const int NB)
{
    _tile_loadd(0, pa, sa);
    if (TWO) _tile_loadd(1, pa + ROWS * sa, sa);
    _tile_loadd(2, b[0], 64);
    if (NB > 1) _tile_loadd(3, b[1], 64);
    _tile_dpbf16ps(4, 0, 2);
    if (NB > 1) _tile_dpbf16ps(5, 0, 3);
    if (TWO) {
        _tile_dpbf16ps(6, 1, 2);
        if (NB > 1) _tile_dpbf16ps(7, 1, 3);
    } else if (NB > 2) {
        _tile_loadd(2, b[2], 64);
        _tile_dpbf16ps(6, 0, 2);
        if (NB > 3) {
            _tile_loadd(3, b[3], 64);
            _tile_dpbf16ps(7, 0, 3);
        }
    }
}

/* The sum tiles a group uses: 4 and, per stream and A tile, the next; OP(tile, index of its
 * 16 × 16 block in a sums buffer). */
#define SUM_TILES(OP, TWO, NB)                                                                     \
    do {                                                                                           \
        OP(4, 0);                                                                                  \
        if ((NB) > 1) OP(5, 1);                                                                    \
        if ((TWO) || (NB) > 2) OP(6, 2);                                                           \
        if (((TWO) && (NB) > 1) || (NB) > 3) OP(7, 3);                                             \
    } while (0)
#define ZERO_SUM(t, j) _tile_zero(t)
#define LOAD_SUM(t, j) _tile_loadd(t, s[j], 64)
#define STORE_SUM(t, j) _tile_stored(t, s[j], 64)

/* Where token i's sums against B stream j lie in a sums buffer (tiles 4-7: A0·B2, A0·B3, then
 * for tokens 16-31 A1·B2, A1·B3; one A tile: streams 0-3 in tiles 4-7; past 31 tokens, which
 * only groups of at most 2 streams have, each 16 tokens the next two blocks). */
INLINE size_t sums_block(size_t i, size_t j) { return i / ROWS * 2 + j; }

/* A pending scale step of the sets whose sums start from +0 per scale block (FP8: a 128-K
 * block, INT4: a group): acc = fma(C, s, acc) (acc = +0 first) for each token and stream. */
typedef struct scale_step {
    const float (*s)[ROWS][ROWS]; /* C, the stored sum tiles */
    float (*acc)[ROWS][ROWS];     /* the totals, in the same order */
    __m512 sc[4];                 /* each stream's scales of the block */
    size_t nb, m, next;           /* streams, tokens, and the next token */
    bool first;                   /* the first block: acc = +0 before */
} scale_step;

INLINE void scale_token(const scale_step *s, size_t i)
{
    for (size_t j = 0; j < s->nb; j++) {
        const size_t blk = sums_block(i, j);
        float *acc = s->acc[blk][i % ROWS];
        const __m512 prev = s->first ? _mm512_setzero_ps() : _mm512_load_ps(acc);
        _mm512_store_ps(acc, _mm512_fmadd_ps(_mm512_load_ps(s->s[blk][i % ROWS]), s->sc[j], prev));
    }
}

static inline void scale_finish(scale_step *s)
{
    while (s->next < s->m)
        scale_token(s, s->next++);
}

/* The epilogue of a group of tiles, token by token. Output q of a token is tile q of the
 * group: gate/up from B streams 2q (gate) and 2q + 1 (up), down from stream q. */
typedef struct epilogue {
    const float (*s)[ROWS][ROWS]; /* the sums, in the stored tiles' order */
    const moe_act_params *act;    /* gate/up; NULL: down */
    __m512 b[4];                  /* the biases of the rows of each stream */
    __mmask16 mask[4];            /* the valid rows of each output */
    size_t n_out;                 /* tiles in the group */
    size_t mixed;                 /* streams 0 .. mixed - 1 are mixed pairs (2j, 2j + 1) */
    unsigned char *out;           /* token 0's first output (h: bf16, y: f32) */
    size_t out_bytes;             /* bytes between tokens' outputs */
    size_t m, next;               /* tokens, and the next one to write */
} epilogue;

INLINE __m512 sums_of(const epilogue *e, size_t i, size_t j)
{
    if (j >= e->mixed) return _mm512_load_ps(e->s[sums_block(i, j)][i % ROWS]);
    const size_t p = j & ~(size_t)1;
    return fp8_bytes_rows(_mm512_load_ps(e->s[sums_block(i, p)][i % ROWS]),
                          _mm512_load_ps(e->s[sums_block(i, p + 1)][i % ROWS]), j & 1);
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

/* The next token of a pending epilogue, if any. */
INLINE void epilogue_step(epilogue *e)
{
    if (e->next < e->m) epilogue_token(e, e->next++);
}

static void epilogue_finish(epilogue *e)
{
    while (e->next < e->m)
        epilogue_token(e, e->next++);
}

/* The biases (np × 16 f32 at bias), rows mask and output of tile q of a group whose epilogue
 * is being set: gate/up (np = 2) streams 2q and 2q + 1, down stream q. */
INLINE void epilogue_tile(epilogue *e, size_t q, int np, const unsigned char *bias, size_t n_valid)
{
    for (int p = 0; p < np; p++)
        e->b[(size_t)np * q + (size_t)p] = _mm512_loadu_ps(bias + 64 * p);
    e->mask[q] = rows_mask(n_valid);
}

/* Tiles per group: gate/up (2 streams each) 1 with two A tiles, else 2; down 2, else 4. */
INLINE size_t group_tiles(size_t m, int np) { return (m > ROWS ? 2 : 4) / (size_t)np; }

#endif
