/* expert_int4_tile.c — the AMX-BF16 expert kernel set of the tile recipe for INT4 group weights,
 * 32x16: nibbles widened to the bf16 integers u - 8 block by block, one tdpbf16ps per 32-K block,
 * the group scales on the vector units. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/avx512/int4_pairs.h"
#include "kernels/avx512amxbf16/tile_amx.h"
#include "kernels/inline.h"
#include "kernels/ref/expert_int4_tile_layout.h"
#include "kernels/ref/expert_layout.h"
#include "select/kernel.h"

/*
 * The FP8 AMX set's structure (kernels/avx512amxbf16/expert_fp8_tile.c) with a group of G / 32
 * blocks in place of the 128-K block and a scale per row. The tile configuration, the A rows, a
 * chunk's products and the epilogue are kernels/avx512amxbf16/tile_amx.h's; the groups of B
 * streams too (gate/up: each tile's gate and up; down: each tile). Per call and stream, each
 * 32-K block's 16 pair lines of nibbles (the INT4 tile pairs layout, kernels/ref/
 * expert_int4_tile_layout.h) are widened once (int4_bf16, kernels/avx512/int4_pairs.h) into a
 * 1 KB B buffer, tdpbf16ps's B operand, which all the call's tokens use. Per group the sum
 * tiles start at +0, take the group's blocks, and are stored; then each token's row of each
 * stream does acc = fma(C, s_g, acc) on 16 lanes with the 16 rows' scales of the group (MXCSR's
 * defaults), acc kept in a stack buffer in the stored tiles' order, which the epilogue reads.
 * The same bits as the reference (kernels/expert.h, "The tile recipe").
 *
 * Overlap: the vector units' work is interleaved with the tile unit's, in program order just
 * after each block's tdpbf16ps: the widening of the next block (into the second of two B
 * buffers), the scale step of the previous group (spread over the group's blocks), then one
 * token of the previous group of tiles' epilogue (multi-tile calls). Before a group's sums are
 * stored the previous group's scale step is completed; an epilogue follows its last scale step
 * and reads the second of two acc buffers.
 */

/* The B streams of a group of tiles: stream j's block 0 codes and scales (blocks np · 256 and
 * np · 64 bytes apart). */
typedef struct i4_streams {
    const unsigned char *codes[4], *scale[4];
} i4_streams;


/* A call: its tokens, the B buffers, the totals and the pending vector work. */
typedef struct i4_call {
    amx_acts a;
    uint16_t b[2][4][ROWS * CHUNK] __attribute__((aligned(64))); /* block c in b[c % 2] */
    float acc[2][4][ROWS][ROWS] __attribute__((aligned(64)));    /* a group's totals, twice */
    size_t gc;                                                   /* blocks per scale group */
    size_t code_step, scale_step;                                /* np · 256, np · 64 */
    size_t units;                                                /* scale tokens per block */
    scale_step sc;
    epilogue e;
} i4_call;

/* The vector work after a chunk's products: units tokens of the scale step, then (the scale
 * step done, so the epilogue's group has all its blocks) one token of the epilogue. */
INLINE void vector_work(i4_call *f)
{
    for (size_t u = 0; u < f->units && f->sc.next < f->sc.m; u++)
        scale_token(&f->sc, f->sc.next++);
    if (f->sc.next == f->sc.m) epilogue_step(&f->e);
}

/* Block c of NB streams widened into b[c % 2]: 16 rows of 32 bf16 (16 pairs). */
INLINE void widen(i4_call *f, const i4_streams *w, size_t c, const int NB)
{
    for (int j = 0; j < NB; j++) {
        uint16_t *dst = f->b[c % 2][j];
        const unsigned char *src = w->codes[j] + c * f->code_step;
        _Pragma("GCC unroll 16") for (size_t r = 0; r < ROWS; r++)
        {
            if (r % 4 == 0) _mm_prefetch((const char *)src + 16 * r + 4096, _MM_HINT_T1);
            _mm512_store_si512(dst + CHUNK * r, int4_bf16(src + 16 * r));
        }
    }
}

/* A group of NB streams (TWO: two A tiles, NB ≤ 2), its totals into acc: every scale group's
 * sums (gc blocks each), the last scale group's step left pending. */
INLINE void group_m(i4_call *f, const i4_streams *w, float (*acc)[ROWS][ROWS], const bool TWO,
                    const int NB)
{
    amx_acts *a = &f->a;
    acts_ready(a, 0);
    widen(f, w, 0, NB);
    for (size_t sg = 0, c = 0; c < a->chunks; sg++) {
        const size_t c0 = c, end = c + f->gc;
        SUM_TILES(ZERO_SUM, TWO, NB);
        for (; c < end; c++) {
            acts_ready(a, c + 1);
            long sa;
            const unsigned char *pa = acts_rows(a, c, &sa), *b[4];
            for (int j = 0; j < NB; j++)
                b[j] = (const unsigned char *)f->b[c % 2][j];
            chunk_products(pa, sa, b, TWO, NB);
            if (c + 1 < a->chunks) widen(f, w, c + 1, NB);
            vector_work(f);
        }
        scale_finish(&f->sc);
        float(*s)[ROWS][ROWS] = a->sums[sg % 2];
        SUM_TILES(STORE_SUM, TWO, NB);
        f->sc.s = (const float(*)[ROWS][ROWS])s;
        f->sc.acc = acc;
        for (int j = 0; j < NB; j++)
            f->sc.sc[j] = _mm512_loadu_ps(w->scale[j] + c0 * f->scale_step);
        f->sc.nb = (size_t)NB;
        f->sc.m = a->m;
        f->sc.next = 0;
        f->sc.first = sg == 0;
    }
}

/* A group of nb streams (two A tiles: nb ≤ 2, else ≤ 4) into acc. */
static void group(i4_call *f, const i4_streams *w, size_t nb, float (*acc)[ROWS][ROWS])
{
    if (f->a.m > ROWS)
        nb == 2 ? group_m(f, w, acc, true, 2) : group_m(f, w, acc, true, 1);
    else if (nb > 2)
        nb == 4 ? group_m(f, w, acc, false, 4) : group_m(f, w, acc, false, 3);
    else
        nb == 2 ? group_m(f, w, acc, false, 2) : group_m(f, w, acc, false, 1);
}

/* The whole call over n_tiles tiles of np projections; out: token 0's first output, out_bytes
 * from one token's to the next's. */
static void run(size_t m, size_t k, const void *const *x, const unsigned char *tile, size_t n_tiles,
                int np, const moe_act_params *act, unsigned char *out, size_t out_bytes,
                size_t n_valid)
{
    if (m == 0 || n_tiles == 0) return;
    i4_call f;
    acts_init(&f.a, m, k, x);
    f.gc = moe_i4t_group_blocks(tile, np);
    f.code_step = (size_t)np * MOE_I4T_CODE_BYTES;
    f.scale_step = (size_t)np * MOE_I4T_SCALE_BYTES;
    f.units = (m + f.gc - 1) / f.gc;
    f.sc = (scale_step){.m = 0, .next = 0};
    f.e = (epilogue){.act = act, .out_bytes = out_bytes, .m = 0, .next = 0};
    const size_t nb = k / CHUNK,
                 bytes =
                     np == 2 ? moe_i4t_gateup_bytes((int64_t)k) : moe_i4t_down_bytes((int64_t)k),
                 g = group_tiles(m, np),
                 out_tile = ROWS * (np == 2 ? sizeof(uint16_t) : sizeof(float));
    for (size_t t = 0, gi = 0; t < n_tiles; t += g, gi++) {
        const size_t n = n_tiles - t < g ? n_tiles - t : g;
        i4_streams w;
        for (size_t q = 0; q < n; q++)
            for (int p = 0; p < np; p++) {
                const unsigned char *base = tile + (t + q) * bytes;
                w.codes[(size_t)np * q + (size_t)p] = base + moe_i4t_codes_at(np, nb, 0, p);
                w.scale[(size_t)np * q + (size_t)p] = base + moe_i4t_scales_at(np, 0, p);
            }
        float(*acc)[ROWS][ROWS] = f.acc[gi % 2];
        group(&f, &w, (size_t)np * n, acc);
        /* The previous group's epilogue done (its scale steps are), this group's set. */
        epilogue_finish(&f.e);
        f.e.s = (const float(*)[ROWS][ROWS])acc;
        f.e.m = m;
        f.e.next = 0;
        for (size_t q = 0; q < n; q++)
            epilogue_tile(&f.e, q, np, tile + (t + q) * bytes,
                          t + q + 1 < n_tiles ? ROWS : n_valid);
        f.e.n_out = n;
        f.e.out = out + t * out_tile;
    }
    scale_finish(&f.sc);
    epilogue_finish(&f.e);
    _tile_release();
}

static void gateup_tiles(size_t m, size_t k, const void *const *x, const void *tile, size_t n_tiles,
                         const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    run(m, k, x, tile, n_tiles, 2, act, h, h_stride * sizeof(uint16_t), n_valid);
}

static void down_tiles(size_t m, size_t k, const void *const *h, const void *tile, size_t n_tiles,
                       float *y, size_t y_stride, size_t n_valid)
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

/* The set: the tile unit and the multi-tile entries at every m, as the MXFP4 one (a decode
 * call's work is the widening, on the vector units either way: at one token of Kimi-K2's
 * expert it streamed 0.47 of the read floor where the AVX-512 set did 0.40; bench/NOTES.md
 * v23). */
MOE_XL_SET(moe_expert_int4_tile_32x16__avx512amxbf16, MOE_RECIPE_TILE, MOE_REQ_AVX512AMXBF16,
           MOE_TILE_AMX_MR, MOE_I4T_SET_LAYOUT, .gateup = gateup_one, .down = down_one,
           .gateup_tiles = gateup_tiles, .down_tiles = down_tiles, .tiles_from_m = 0,
           .tiles_to_m = 0);
