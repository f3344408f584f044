/* expert_fp8_tile.c — the AMX-BF16 micro-kernels of the tile recipe for FP8 (E4M3, 128 × 128
 * block scales) experts, 64x16: codes widened to bf16 chunk by chunk, one tdpbf16ps per 32-K
 * chunk, the block scale on the vector units. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/avx512/fp8_pairs.h"
#include "kernels/avx512amxbf16/expert_fp8_tile.h"
#include "kernels/avx512amxbf16/tile_amx.h"
#include "kernels/avx512vbmi/fp8_bytes.h"
#include "kernels/inline.h"
#include "kernels/ref/expert_layout.h"
#include "select/kernel.h"

/*
 * The tile configuration, the A rows, a chunk's products and the epilogue are
 * kernels/avx512amxbf16/tile_amx.h's; the groups of B streams too (gate/up: each tile's gate
 * and up; down: each tile). Per call and stream, each chunk's 16 pairs of codes are widened
 * once into a 1 KB B buffer, tdpbf16ps's B operand (row r the pair 16c + r; pairs past K
 * zeros), which all the call's tokens use. Streams go in pairs (gate and up; two down tiles),
 * decoded together by byte tables (kernels/avx512vbmi/fp8_bytes.h) into two mixed B tiles:
 * each holds rows 0-3 and 8-11 (or 4-7 and 12-15) of both streams, lanes 0-7 the first's, so
 * the pair's block scale is [s_first × 8 | s_second × 8] and the epilogue puts the rows back
 * in order (tile_amx.h); a group's lone last stream widens alone (fp8_bf16,
 * kernels/avx512/fp8_pairs.h). Each row's arithmetic is the same wherever its column sits.
 * Per 128-K block the sum tiles start at +0, take the block's chunks, and are stored; then each
 * token's row of each stream does acc = fma(C, s''_b, acc) on 16 lanes (MXCSR's defaults),
 * acc kept in a stack buffer in the stored tiles' order, which the epilogue reads.
 *
 * Overlap: the vector units' work is interleaved with the tile unit's, in program order just
 * after each chunk's tdpbf16ps: the widening of the next chunk (into the second of two B
 * buffers), the scale step of the previous block (a quarter of the tokens per chunk: done
 * within the block), then one token of the previous group's epilogue (multi-tile calls).
 * Before a block's sums are stored the previous block's scale step is completed; a group's
 * epilogue follows its last scale step and reads the second of two acc buffers.
 *
 * More than 32 tokens (up to MOE_TILE_AMX_FP8_MR; groups of at most 2 streams): each 128-K block
 * of the group's streams is widened once, into a 4 KB-per-stream L1 buffer (during the previous
 * block's first token block), and every block of 32 tokens runs over it: its sums from +0, the
 * block's chunks, stored; the block's scale step then covers all the tokens. Each token's sums
 * and totals are the same operations as at 32 tokens or one, so the same bits; the widening
 * serves 64 tokens instead of 32. (128 tokens a call, 1.8 MB of rows at DeepSeek-V3's hidden
 * size, were faster at 128 rows per expert but slower at 512 with the engine's runs of 2 tiles,
 * and within the noise of 64 with runs of 16: bench/NOTES.md, v31.)
 */

#define BLOCK_CHUNKS (MOE_XL_KB / CHUNK) /* chunks per 128-K block: 4 */

/* The B streams of a group: stream j's first pair of codes, pairs pair_bytes apart, and its
 * block 0 scale, blocks scale_bytes apart. */
typedef struct fp8_streams {
    const unsigned char *codes[4], *scale[4];
} fp8_streams;

/* A call of more than 32 tokens: block r's chunks of 2 streams in wb[r % 2], its sums in the
 * sums buffer the previous block's pending scale step does not read, a group's totals twice. Apart
 * from fp8_call, so that the smaller calls' stack frame stays as it was. */
typedef struct fp8_wide {
    uint16_t wb[2][BLOCK_CHUNKS][2][ROWS * CHUNK] __attribute__((aligned(64)));
    float sums[2][SUMS_BLOCKS(MOE_TILE_AMX_FP8_MR)][ROWS][ROWS] __attribute__((aligned(64)));
    float acc[2][SUMS_BLOCKS(MOE_TILE_AMX_FP8_MR)][ROWS][ROWS] __attribute__((aligned(64)));
} fp8_wide;

/* A call: its tokens, the B buffers, the totals and the pending vector work. */
typedef struct fp8_call {
    amx_acts a;
    fp8_wide *w; /* more than 32 tokens: its buffers (run_wide's); else NULL */
    uint16_t b[2][4][ROWS * CHUNK] __attribute__((aligned(64))); /* chunk c in b[c % 2] */
    float acc[2][4][ROWS][ROWS] __attribute__((aligned(64)));    /* a group's totals, twice */
    size_t pairs;                                                /* k-pairs: ceil(k / 2) */
    int np;                                                      /* projections per tile */
    size_t pair_bytes, scale_bytes;                              /* np · 32, np · 4 */
    size_t units;                                                /* scale tokens per chunk */
    scale_step sc;
    epilogue e;
} fp8_call;

/* The vector work after a chunk's products: units tokens of the scale step, then (the scale
 * step done, so the epilogue's group has all its blocks) one token of the epilogue. */
INLINE void vector_work(fp8_call *f)
{
    for (size_t u = 0; u < f->units && f->sc.next < f->sc.m; u++)
        scale_token(&f->sc, f->sc.next++);
    if (f->sc.next == f->sc.m) epilogue_step(&f->e);
}

/* Pair q of streams j and j + 1 (gate and up: adjacent, one load; down: two tiles) widened to
 * their two mixed B lines (fp8_bytes_words). */
INLINE void widen_pair(const fp8_call *f, const fp8_dec *d, const unsigned char *s0,
                       const unsigned char *s1, uint16_t *d0, uint16_t *d1)
{
    const __m512i v =
        f->np == 2
            ? _mm512_loadu_si512(s0)
            : _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const void *)s0)),
                                 _mm256_loadu_si256((const void *)s1), 1);
    __m512i a, b;
    fp8_bytes_words(d, v, &a, &b);
    _mm512_store_si512(d0, a);
    _mm512_store_si512(d1, b);
}

/* Chunk c of NB streams widened into to[j]: 16 rows of 32 bf16 (16 pairs), zeros past the
 * last pair. Streams 2i and 2i + 1 go together, mixed (5 operations per two lines: the byte
 * tables of kernels/avx512vbmi/fp8_bytes.h); a last odd stream by fp8_bf16 (12 per two). */
INLINE void widen(const fp8_call *f, const fp8_streams *w, size_t c, uint16_t (*to)[ROWS * CHUNK],
                  const int NB)
{
    const size_t q0 = ROWS * c, n = f->pairs - q0 < ROWS ? f->pairs - q0 : ROWS;
    const size_t pb = f->pair_bytes;
    const fp8_dec d = fp8_dec_init();
    int j = 0;
    for (; j + 1 < NB; j += 2) {
        const unsigned char *s0 = w->codes[j] + q0 * pb, *s1 = w->codes[j + 1] + q0 * pb;
        if (n == ROWS) {
            _Pragma("GCC unroll 16") for (size_t r = 0; r < ROWS; r++)
            {
                widen_pair(f, &d, s0 + r * pb, s1 + r * pb, to[j] + CHUNK * r,
                           to[j + 1] + CHUNK * r);
            }
        } else {
            for (size_t r = 0; r < ROWS; r++) {
                if (r < n) {
                    widen_pair(f, &d, s0 + r * pb, s1 + r * pb, to[j] + CHUNK * r,
                               to[j + 1] + CHUNK * r);
                } else {
                    _mm512_store_si512(to[j] + CHUNK * r, _mm512_setzero_si512());
                    _mm512_store_si512(to[j + 1] + CHUNK * r, _mm512_setzero_si512());
                }
            }
        }
    }
    if (j < NB) {
        uint16_t *dst = to[j];
        const unsigned char *src = w->codes[j] + q0 * pb;
        for (size_t r = 0; r < ROWS; r++)
            _mm512_store_si512(dst + CHUNK * r,
                               r < n ? fp8_bf16(src + r * pb) : _mm512_setzero_si512());
    }
}

/* Block blk's scale step over the call's tokens made pending: its stored sums s into acc. */
INLINE void scale_pending(fp8_call *f, const fp8_streams *w, const float (*s)[ROWS][ROWS],
                          float (*acc)[ROWS][ROWS], size_t blk, const int NB)
{
    f->sc.s = s;
    f->sc.acc = acc;
    int j = 0;
    for (; j + 1 < NB; j += 2) { /* a mixed pair: lanes 0-7 stream j's rows, 8-15 j + 1's */
        const __m512 v =
            _mm512_insertf32x8(_mm512_set1_ps(load_f32(w->scale[j] + blk * f->scale_bytes)),
                               _mm256_set1_ps(load_f32(w->scale[j + 1] + blk * f->scale_bytes)), 1);
        f->sc.sc[j] = f->sc.sc[j + 1] = v;
    }
    if (j < NB) f->sc.sc[j] = _mm512_set1_ps(load_f32(w->scale[j] + blk * f->scale_bytes));
    f->sc.nb = (size_t)NB;
    f->sc.m = f->a.m;
    f->sc.next = 0;
    f->sc.first = blk == 0;
}

/* A group of NB streams (TWO: two A tiles, NB ≤ 2), its totals into acc: every block's sums,
 * the last block's scale step left pending. */
INLINE void group_m(fp8_call *f, const fp8_streams *w, float (*acc)[ROWS][ROWS], const bool TWO,
                    const int NB)
{
    amx_acts *a = &f->a;
    acts_ready(a, 0);
    widen(f, w, 0, f->b[0], NB);
    for (size_t blk = 0, c = 0; c < a->chunks; blk++) {
        const size_t end = c + BLOCK_CHUNKS < a->chunks ? c + BLOCK_CHUNKS : a->chunks;
        SUM_TILES(ZERO_SUM, TWO, NB);
        for (; c < end; c++) {
            acts_ready(a, c + 1);
            long sa;
            const unsigned char *pa = acts_rows(a, c, &sa), *b[4];
            for (int j = 0; j < NB; j++)
                b[j] = (const unsigned char *)f->b[c % 2][j];
            chunk_products(pa, sa, b, TWO, NB);
            if (c + 1 < a->chunks) widen(f, w, c + 1, f->b[(c + 1) % 2], NB);
            vector_work(f);
        }
        scale_finish(&f->sc);
        float(*s)[ROWS][ROWS] = a->sums[blk % 2];
        SUM_TILES(STORE_SUM, TWO, NB);
        scale_pending(f, w, s, acc, blk, NB);
    }
}

/* One token block (mt tokens from t0; TWO: more than 16) over block blk's nc chunks from c0,
 * widened in f->w->wb[blk % 2], its sums from +0 stored to s; the first token block widens the
 * next block's chunks. */
INLINE void token_block(fp8_call *f, const fp8_streams *w, size_t blk, size_t c0, size_t nc,
                        size_t t0, size_t mt, float (*s)[ROWS][ROWS], const bool TWO, const int NB)
{
    amx_acts *a = &f->a;
    SUM_TILES(ZERO_SUM, TWO, NB);
    for (size_t q = 0; q < nc; q++) {
        long sa;
        const unsigned char *pa = block_rows(a, t0, mt, c0 + q, &sa), *b[4];
        for (int j = 0; j < NB; j++)
            b[j] = (const unsigned char *)f->w->wb[blk % 2][q][j];
        chunk_products(pa, sa, b, TWO, NB);
        if (t0 == 0 && c0 + BLOCK_CHUNKS + q < a->chunks)
            widen(f, w, c0 + BLOCK_CHUNKS + q, f->w->wb[(blk + 1) % 2][q], NB);
        vector_work(f);
    }
    SUM_TILES(STORE_SUM, TWO, NB);
}

/* A group of NB ≤ 2 streams for more than 32 tokens, its totals into acc (token i's at
 * sums_block(i, ·)): each block widened once, every token block run over it, the block's scale
 * step over all tokens pending; the last one left pending. */
INLINE void group_wide(fp8_call *f, const fp8_streams *w, float (*acc)[ROWS][ROWS], const int NB)
{
    amx_acts *a = &f->a;
    for (size_t c = 0; c < BLOCK_CHUNKS && c < a->chunks; c++)
        widen(f, w, c, f->w->wb[0][c], NB);
    for (size_t blk = 0, c0 = 0; c0 < a->chunks; blk++, c0 += BLOCK_CHUNKS) {
        const size_t nc = a->chunks - c0 < BLOCK_CHUNKS ? a->chunks - c0 : BLOCK_CHUNKS;
        /* the buffer the pending scale step (this group's or the previous one's) does not read */
        float(*s)[ROWS][ROWS] = f->w->sums[f->sc.s == (const void *)f->w->sums[0] ? 1 : 0];
        for (size_t t0 = 0; t0 < a->m; t0 += TOKEN_BLOCK) {
            const size_t mt = a->m - t0 < TOKEN_BLOCK ? a->m - t0 : TOKEN_BLOCK;
            float(*st)[ROWS][ROWS] = s + sums_block(t0, 0);
            if (mt > ROWS)
                token_block(f, w, blk, c0, nc, t0, mt, st, true, NB);
            else
                token_block(f, w, blk, c0, nc, t0, mt, st, false, NB);
        }
        scale_finish(&f->sc);
        scale_pending(f, w, s, acc, blk, NB);
    }
}

/* A group of nb ≤ 2 streams of a call of more than 32 tokens: as group. Apart from it, so that
 * the smaller calls' code stays as it was. */
static __attribute__((noinline)) void group_sums_wide(fp8_call *f, const fp8_streams *w, size_t nb,
                                                      float (*acc)[ROWS][ROWS])
{
    nb == 2 ? group_wide(f, w, acc, 2) : group_wide(f, w, acc, 1);
}

/* A group of nb streams (two A tiles: nb ≤ 2, else ≤ 4) into acc. */
static void group(fp8_call *f, const fp8_streams *w, size_t nb, float (*acc)[ROWS][ROWS])
{
    if (f->a.m > TOKEN_BLOCK)
        group_sums_wide(f, w, nb, acc);
    else if (f->a.m > ROWS)
        nb == 2 ? group_m(f, w, acc, true, 2) : group_m(f, w, acc, true, 1);
    else if (nb > 2)
        nb == 4 ? group_m(f, w, acc, false, 4) : group_m(f, w, acc, false, 3);
    else
        nb == 2 ? group_m(f, w, acc, false, 2) : group_m(f, w, acc, false, 1);
}

/* The whole call over n_tiles tiles of np projections (f: its tokens set, wide: run_wide's
 * buffers or NULL); out: token 0's first output, out_bytes from one token's to the next's. */
static void run_call(fp8_call *f, fp8_wide *wide, const unsigned char *tile, size_t n_tiles, int np,
                     const moe_act_params *act, unsigned char *out, size_t out_bytes,
                     size_t n_valid)
{
    const size_t m = f->a.m, k = f->a.k;
    f->w = wide;
    f->pairs = (k + 1) / 2;
    f->np = np;
    f->pair_bytes = (size_t)np * 2 * MOE_XL_NR;
    f->scale_bytes = (size_t)np * sizeof(float);
    /* the scale step within a block's chunks: of every token block past 32 tokens */
    const size_t block_steps = BLOCK_CHUNKS * ((m + TOKEN_BLOCK - 1) / TOKEN_BLOCK);
    f->units = (m + block_steps - 1) / block_steps;
    f->sc = (scale_step){.m = 0, .next = 0};
    f->e = (epilogue){.act = act, .out_bytes = out_bytes, .m = 0, .next = 0};
    const size_t bytes = np == 2 ? moe_xl_fp8_gateup_bytes((int64_t)k)
                                 : moe_xl_fp8_down_bytes((int64_t)k),
                 codes = moe_xl_fp8_codes((int64_t)k, np), g = group_tiles(m, np),
                 out_tile = ROWS * (np == 2 ? sizeof(uint16_t) : sizeof(float));
    for (size_t t = 0, gi = 0; t < n_tiles; t += g, gi++) {
        const size_t n = n_tiles - t < g ? n_tiles - t : g;
        fp8_streams w;
        for (size_t q = 0; q < n; q++)
            for (int p = 0; p < np; p++) {
                const unsigned char *base = tile + (t + q) * bytes;
                w.codes[(size_t)np * q + (size_t)p] = base + codes + (size_t)p * 2 * MOE_XL_NR;
                w.scale[(size_t)np * q + (size_t)p] =
                    base + moe_xl_bias_bytes(np) + (size_t)p * sizeof(float);
            }
        float(*acc)[ROWS][ROWS] = wide ? wide->acc[gi % 2] : f->acc[gi % 2];
        group(f, &w, (size_t)np * n, acc);
        /* The previous group's epilogue done (its scale steps are), this group's set. */
        epilogue_finish(&f->e);
        f->e.s = (const float(*)[ROWS][ROWS])acc;
        f->e.m = m;
        f->e.next = 0;
        for (size_t q = 0; q < n; q++)
            epilogue_tile(&f->e, q, np, tile + (t + q) * bytes,
                          t + q + 1 < n_tiles ? ROWS : n_valid);
        f->e.n_out = n;
        f->e.mixed = ((size_t)np * n) & ~(size_t)1; /* as widen pairs the streams */
        f->e.out = out + t * out_tile;
    }
    scale_finish(&f->sc);
    epilogue_finish(&f->e);
    _tile_release();
}

/* A call of more than 32 tokens, with the buffers of the shared widening. */
static __attribute__((noinline)) void run_wide(size_t m, size_t k, const void *const *x,
                                               const unsigned char *tile, size_t n_tiles, int np,
                                               const moe_act_params *act, unsigned char *out,
                                               size_t out_bytes, size_t n_valid)
{
    fp8_call f;
    fp8_wide wide;
    acts_init(&f.a, m, k, x);
    run_call(&f, &wide, tile, n_tiles, np, act, out, out_bytes, n_valid);
}

static void run(size_t m, size_t k, const void *const *x, const unsigned char *tile, size_t n_tiles,
                int np, const moe_act_params *act, unsigned char *out, size_t out_bytes,
                size_t n_valid)
{
    if (m == 0 || n_tiles == 0) return;
    if (m > TOKEN_BLOCK) {
        run_wide(m, k, x, tile, n_tiles, np, act, out, out_bytes, n_valid);
        return;
    }
    fp8_call f;
    acts_init(&f.a, m, k, x);
    run_call(&f, NULL, tile, n_tiles, np, act, out, out_bytes, n_valid);
}

void moe_tile_amx_fp8_gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                                   size_t n_tiles, const moe_act_params *act, void *h,
                                   size_t h_stride, size_t n_valid)
{
    run(m, k, x, tile, n_tiles, 2, act, h, h_stride * sizeof(uint16_t), n_valid);
}

void moe_tile_amx_fp8_down_tiles(size_t m, size_t k, const void *const *h, const void *tile,
                                 size_t n_tiles, float *y, size_t y_stride, size_t n_valid)
{
    run(m, k, h, tile, n_tiles, 1, NULL, (unsigned char *)y, y_stride * sizeof(float), n_valid);
}

void moe_tile_amx_fp8_gateup(size_t m, size_t k, const void *const *x, const void *tile,
                             const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    moe_tile_amx_fp8_gateup_tiles(m, k, x, tile, 1, act, h, h_stride, n_valid);
}

void moe_tile_amx_fp8_down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                           size_t y_stride, size_t n_valid)
{
    moe_tile_amx_fp8_down_tiles(m, k, h, tile, 1, y, y_stride, n_valid);
}

/* Below FP8_AMX_FROM tokens a call runs the VBMI set (the same bits), whose codes are decoded
 * in registers: at one and two tokens the tile unit's B operand, widened in memory for one or
 * two rows of A, was slower than that (bench/NOTES.md, v21 and v32). */
#define FP8_AMX_FROM 3

static const moe_expert_kernels *const small = &moe_expert_fp8_tile_12x16__avx512vbmi;

static void gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                         size_t n_tiles, const moe_act_params *act, void *h, size_t h_stride,
                         size_t n_valid)
{
    if (m >= FP8_AMX_FROM)
        moe_tile_amx_fp8_gateup_tiles(m, k, x, tile, n_tiles, act, h, h_stride, n_valid);
    else
        small->gateup_tiles(m, k, x, tile, n_tiles, act, h, h_stride, n_valid);
}

static void down_tiles(size_t m, size_t k, const void *const *h, const void *tile,
                       size_t n_tiles, float *y, size_t y_stride, size_t n_valid)
{
    if (m >= FP8_AMX_FROM)
        moe_tile_amx_fp8_down_tiles(m, k, h, tile, n_tiles, y, y_stride, n_valid);
    else
        small->down_tiles(m, k, h, tile, n_tiles, y, y_stride, n_valid);
}

static void gateup_one(size_t m, size_t k, const void *const *x, const void *tile,
                       const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    gateup_tiles(m, k, x, tile, 1, act, h, h_stride, n_valid);
}

static void down_one(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                     size_t y_stride, size_t n_valid)
{
    down_tiles(m, k, h, tile, 1, y, y_stride, n_valid);
}

/* Tiles per call past MR rows: each call widens its tiles anyway, so the engine's run kept in
 * L2 (2 gate/up tiles beside 64 rows of DeepSeek-V3's 7168) only saved reads the widening
 * hides, while every run read the chunk's rows again; 16 tiles keep the rows in L2 and stream
 * the codes (at 512 rows per expert 1.15-1.2× the run of 2; 8 and 32 between: bench/NOTES.md,
 * v31). */
#define FP8_RUN_TILES 16

/* The set: the multi-tile entries at every m, as the bf16 one. */
MOE_XL_SET(moe_expert_fp8_tile_64x16__avx512amxbf16, MOE_RECIPE_TILE, MOE_REQ_AVX512AMXBF16,
           MOE_TILE_AMX_FP8_MR, MOE_XL_FP8_LAYOUT(fp8p), .gateup = gateup_one, .down = down_one,
           .gateup_tiles = gateup_tiles, .down_tiles = down_tiles, .tiles_from_m = 0,
           .tiles_to_m = 0, .tiles_per_call = FP8_RUN_TILES);
