/* expert_mxfp4_tile.c — the AMX-BF16 expert kernel set of the tile recipe for MXFP4 weights,
 * 64x16: each block's codes and scales widened to a bf16 B tile once per call, one tdpbf16ps per
 * 32-K block. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/avx512/mxfp4_pairs.h"
#include "kernels/avx512amxbf16/expert_bf16_tile.h"
#include "kernels/avx512amxbf16/tile_amx.h"
#include "kernels/inline.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/expert_mxfp4_tile_layout.h"
#include "select/kernel.h"

/*
 * The tile configuration, the A rows, a chunk's products and the epilogue are
 * kernels/avx512amxbf16/tile_amx.h's, the groups of B streams too (gate/up: each tile's gate
 * and up; down: each tile). A 32-K chunk is one MX block: per call and stream, each block's 16
 * pair lines of codes (the MXFP4 tile pairs layout, kernels/ref/expert_mxfp4_tile_layout.h)
 * are widened once with the block's scales (kernels/avx512/mxfp4_pairs.h, exact) into a 1 KB
 * B buffer, tdpbf16ps's B operand, which all the call's tokens use; the next block's widening
 * runs on the vector units right after this block's tdpbf16ps (two buffers), with one token of
 * the previous group's epilogue. The sums start at +0 and take the blocks in K order: the bf16
 * tile set's chain on the widened weights, the reference's bits.
 *
 * More than 32 tokens (up to MOE_TILE_AMX_WIDEN_MR; groups of at most 2 streams): the widening is
 * shared by all of them. Runs of RUN_CHUNKS blocks are widened once into a 16 KB L1 buffer
 * (during the previous run's first token block), then every block of 32 tokens runs over them:
 * its sums loaded (+0 at the first run), the run's blocks, stored. A tile store and load are
 * exact, so each token's chain is the same as at 32 tokens or one.
 */

#define RUN_CHUNKS 4 /* blocks widened per run of a call of more than 32 tokens */

/* The B streams of a group: stream j's block 0 codes and scales (blocks np · 256 and np · 16
 * bytes apart). */
typedef struct mx_streams {
    const unsigned char *codes[4], *scales[4];
} mx_streams;

/* A call of more than 32 tokens: run r's blocks of 2 streams in wb[r % 2], a group's sums
 * twice. Apart from mx_call, so that the smaller calls' stack frame stays as it was. */
typedef struct mx_wide {
    uint16_t wb[2][RUN_CHUNKS][2][ROWS * CHUNK] __attribute__((aligned(64)));
    float sums[2][SUMS_BLOCKS(MOE_TILE_AMX_WIDEN_MR)][ROWS][ROWS] __attribute__((aligned(64)));
} mx_wide;

typedef struct mx_call {
    amx_acts a;
    uint16_t b[2][4][ROWS * CHUNK] __attribute__((aligned(64))); /* block c in b[c % 2] */
    size_t code_step, scale_step;                                /* np · 256, np · 16 */
    struct mx_wide *w; /* more than 32 tokens: its buffers (run_wide's); else NULL */
} mx_call;

/* Block c of NB streams widened into to[j]. */
INLINE void widen(const mx_call *f, const mx_streams *w, size_t c, uint16_t (*to)[ROWS * CHUNK],
                  const int NB)
{
    for (int j = 0; j < NB; j++) {
        const __m512i delta = mxfp4_delta(w->scales[j] + c * f->scale_step);
        const unsigned char *src = w->codes[j] + c * f->code_step;
        uint16_t *dst = to[j];
        _Pragma("GCC unroll 16") for (size_t r = 0; r < ROWS; r++)
        {
            if (r % 4 == 0) _mm_prefetch((const char *)src + 16 * r + 4096, _MM_HINT_T1);
            _mm512_store_si512(dst + CHUNK * r, mxfp4_bf16(src + 16 * r, delta));
        }
    }
}

/* The group's sums over all blocks, stored to s, while the pending epilogue e runs; e finished
 * before the stores. */
INLINE void sums_m(mx_call *f, const mx_streams *w, epilogue *e, float (*s)[ROWS][ROWS],
                   const bool TWO, const int NB)
{
    amx_acts *a = &f->a;
    SUM_TILES(ZERO_SUM, TWO, NB);
    acts_ready(a, 0);
    widen(f, w, 0, f->b[0], NB);
    for (size_t c = 0; c < a->chunks; c++) {
        acts_ready(a, c + 1);
        long sa;
        const unsigned char *pa = acts_rows(a, c, &sa), *b[4];
        for (int j = 0; j < NB; j++)
            b[j] = (const unsigned char *)f->b[c % 2][j];
        chunk_products(pa, sa, b, TWO, NB);
        if (c + 1 < a->chunks) widen(f, w, c + 1, f->b[(c + 1) % 2], NB);
        epilogue_step(e);
    }
    epilogue_finish(e);
    SUM_TILES(STORE_SUM, TWO, NB);
}

/* One token block (mt tokens from t0; TWO: more than 16) over run r's nc blocks from c0,
 * widened in f->w->wb[r % 2], its sums in s (+0 first: the first run); the first token block
 * widens the next run's blocks. */
INLINE void token_block(mx_call *f, const mx_streams *w, size_t r, size_t c0, size_t nc, size_t t0,
                        size_t mt, float (*s)[ROWS][ROWS], epilogue *e, const bool TWO,
                        const int NB)
{
    amx_acts *a = &f->a;
    if (r == 0)
        SUM_TILES(ZERO_SUM, TWO, NB);
    else
        SUM_TILES(LOAD_SUM, TWO, NB);
    for (size_t q = 0; q < nc; q++) {
        long sa;
        const unsigned char *pa = block_rows(a, t0, mt, c0 + q, &sa), *b[4];
        for (int j = 0; j < NB; j++)
            b[j] = (const unsigned char *)f->w->wb[r % 2][q][j];
        chunk_products(pa, sa, b, TWO, NB);
        if (t0 == 0 && c0 + RUN_CHUNKS + q < a->chunks)
            widen(f, w, c0 + RUN_CHUNKS + q, f->w->wb[(r + 1) % 2][q], NB);
        epilogue_step(e);
    }
    SUM_TILES(STORE_SUM, TWO, NB);
}

/* A group of NB ≤ 2 streams for more than 32 tokens, its sums into s (token i's at
 * sums_block(i, ·)): each run of blocks widened once, every token block run over it, while the
 * pending epilogue e runs; e finished at the end. */
INLINE void group_wide(mx_call *f, const mx_streams *w, epilogue *e, float (*s)[ROWS][ROWS],
                       const int NB)
{
    amx_acts *a = &f->a;
    for (size_t c = 0; c < RUN_CHUNKS && c < a->chunks; c++)
        widen(f, w, c, f->w->wb[0][c], NB);
    for (size_t r = 0, c0 = 0; c0 < a->chunks; r++, c0 += RUN_CHUNKS) {
        const size_t nc = a->chunks - c0 < RUN_CHUNKS ? a->chunks - c0 : RUN_CHUNKS;
        for (size_t t0 = 0; t0 < a->m; t0 += TOKEN_BLOCK) {
            const size_t mt = a->m - t0 < TOKEN_BLOCK ? a->m - t0 : TOKEN_BLOCK;
            float(*st)[ROWS][ROWS] = s + sums_block(t0, 0);
            if (mt > ROWS)
                token_block(f, w, r, c0, nc, t0, mt, st, e, true, NB);
            else
                token_block(f, w, r, c0, nc, t0, mt, st, e, false, NB);
        }
    }
    epilogue_finish(e);
}

/* A group of nb ≤ 2 streams of a call of more than 32 tokens: as group_sums. Apart from it, so
 * that the smaller calls' code stays as it was. */
static __attribute__((noinline)) void group_sums_wide(mx_call *f, const mx_streams *w, size_t nb,
                                                      epilogue *e)
{
    float(*s)[ROWS][ROWS] = f->w->sums[e->s == f->w->sums[0] ? 1 : 0];
    nb == 2 ? group_wide(f, w, e, s, 2) : group_wide(f, w, e, s, 1);
    e->s = (const float(*)[ROWS][ROWS])s;
    e->m = f->a.m;
    e->next = 0;
}

/* A group of nb streams (TWO: nb ≤ 2, else ≤ 4): its sums into the buffer the pending epilogue
 * e does not read, then e made its epilogue (biases, masks and outputs still to be set). */
static void group_sums(mx_call *f, const mx_streams *w, size_t nb, epilogue *e)
{
    amx_acts *a = &f->a;
    if (a->m > TOKEN_BLOCK) {
        group_sums_wide(f, w, nb, e);
        return;
    }
    float(*s)[ROWS][ROWS] = a->sums[e->s == a->sums[0] ? 1 : 0];
    if (a->m > ROWS)
        nb == 2 ? sums_m(f, w, e, s, true, 2) : sums_m(f, w, e, s, true, 1);
    else if (nb > 2)
        nb == 4 ? sums_m(f, w, e, s, false, 4) : sums_m(f, w, e, s, false, 3);
    else
        nb == 2 ? sums_m(f, w, e, s, false, 2) : sums_m(f, w, e, s, false, 1);
    e->s = (const float(*)[ROWS][ROWS])s;
    e->m = a->m;
    e->next = 0;
}

/* The whole call over n_tiles tiles of np projections (f: its tokens set, w: run_wide's buffers
 * or NULL); out: token 0's first output, out_bytes from one token's to the next's. */
static void run_call(mx_call *f, mx_wide *wide, const unsigned char *tile, size_t n_tiles, int np,
                     const moe_act_params *act, unsigned char *out, size_t out_bytes,
                     size_t n_valid)
{
    const size_t m = f->a.m, k = f->a.k;
    f->w = wide;
    f->code_step = (size_t)np * MOE_MXT_CODE_BYTES;
    f->scale_step = (size_t)np * MOE_MXT_NR;
    const size_t nb = k / CHUNK, bytes = np == 2 ? moe_mxt_gateup_bytes((int64_t)k)
                                                 : moe_mxt_down_bytes((int64_t)k);
    const size_t g = group_tiles(m, np), out_tile = ROWS * (np == 2 ? sizeof(uint16_t) : 4);
    epilogue e = {.act = act, .out_bytes = out_bytes};
    for (size_t t = 0; t < n_tiles; t += g) {
        const size_t n = n_tiles - t < g ? n_tiles - t : g;
        mx_streams w;
        for (size_t q = 0; q < n; q++)
            for (int p = 0; p < np; p++) {
                const unsigned char *base = tile + (t + q) * bytes;
                w.codes[(size_t)np * q + (size_t)p] = base + moe_mxt_codes_at(np, nb, 0, p);
                w.scales[(size_t)np * q + (size_t)p] = base + moe_mxt_scales_at(np, 0, p);
            }
        group_sums(f, &w, (size_t)np * n, &e);
        for (size_t q = 0; q < n; q++)
            epilogue_tile(&e, q, np, tile + (t + q) * bytes, t + q + 1 < n_tiles ? ROWS : n_valid);
        e.n_out = n;
        e.out = out + t * out_tile;
    }
    epilogue_finish(&e);
    _tile_release();
}

/* A call of more than 32 tokens, with the buffers of the shared widening. */
static __attribute__((noinline)) void run_wide(size_t m, size_t k, const void *const *x,
                                               const unsigned char *tile, size_t n_tiles, int np,
                                               const moe_act_params *act, unsigned char *out,
                                               size_t out_bytes, size_t n_valid)
{
    mx_call f;
    mx_wide wide;
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
    mx_call f;
    acts_init(&f.a, m, k, x);
    run_call(&f, NULL, tile, n_tiles, np, act, out, out_bytes, n_valid);
}

static void gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile,
                         size_t n_tiles, const moe_act_params *act, void *h, size_t h_stride,
                         size_t n_valid)
{
    run(m, k, x, tile, n_tiles, 2, act, h, h_stride * sizeof(uint16_t), n_valid);
}

static void down_tiles(size_t m, size_t k, const void *const *h, const void *tile,
                       size_t n_tiles, float *y, size_t y_stride, size_t n_valid)
{
    run(m, k, h, tile, n_tiles, 1, NULL, (unsigned char *)y, y_stride * sizeof(float), n_valid);
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

/* The set: the multi-tile entries at every m, as the bf16 and FP8 ones. Unlike the FP8 set it
 * runs the tile unit at every m, one token included: a decode call's work is the widening, on
 * the vector units either way, and tdpbf16ps takes the products off them (at one token of
 * gpt-oss's 2880 × 2880 experts, one thread, it streamed the codes at 8.6-8.7 GB/s where the
 * AVX-512 set did 6.2-6.8: bench_expert_kernels --mxfp4, on a shared machine). */
MOE_XL_SET(moe_expert_mxfp4_tile_64x16__avx512amxbf16, MOE_RECIPE_TILE, MOE_REQ_AVX512AMXBF16,
           MOE_TILE_AMX_WIDEN_MR, MOE_MXT_SET_LAYOUT, .gateup = gateup_one, .down = down_one,
           .gateup_tiles = gateup_tiles, .down_tiles = down_tiles, .tiles_from_m = 0,
           .tiles_to_m = 0);
