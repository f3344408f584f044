/* expert_mxfp4_tile.c — the AMX-BF16 expert kernel set of the tile recipe for MXFP4 weights,
 * 32x16: each block's codes and scales widened to a bf16 B tile once per call, one tdpbf16ps per
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
 */

/* The B streams of a group: stream j's block 0 codes and scales (blocks np · 256 and np · 16
 * bytes apart). */
typedef struct mx_streams {
    const unsigned char *codes[4], *scales[4];
} mx_streams;

typedef struct mx_call {
    amx_acts a;
    uint16_t b[2][4][ROWS * CHUNK] __attribute__((aligned(64))); /* block c in b[c % 2] */
    size_t code_step, scale_step;                                /* np · 256, np · 16 */
} mx_call;

/* Block c of NB streams widened into b[c % 2]. */
INLINE void widen(mx_call *f, const mx_streams *w, size_t c, const int NB)
{
    for (int j = 0; j < NB; j++) {
        const __m512i delta = mxfp4_delta(w->scales[j] + c * f->scale_step);
        const unsigned char *src = w->codes[j] + c * f->code_step;
        uint16_t *dst = f->b[c % 2][j];
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
    widen(f, w, 0, NB);
    for (size_t c = 0; c < a->chunks; c++) {
        acts_ready(a, c + 1);
        long sa;
        const unsigned char *pa = acts_rows(a, c, &sa), *b[4];
        for (int j = 0; j < NB; j++)
            b[j] = (const unsigned char *)f->b[c % 2][j];
        chunk_products(pa, sa, b, TWO, NB);
        if (c + 1 < a->chunks) widen(f, w, c + 1, NB);
        epilogue_step(e);
    }
    epilogue_finish(e);
    SUM_TILES(STORE_SUM, TWO, NB);
}

/* A group of nb streams (TWO: nb ≤ 2, else ≤ 4): its sums into the buffer the pending epilogue
 * e does not read, then e made its epilogue (biases, masks and outputs still to be set). */
static void group_sums(mx_call *f, const mx_streams *w, size_t nb, epilogue *e)
{
    amx_acts *a = &f->a;
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

/* The whole call over n_tiles tiles of np projections; out: token 0's first output, out_bytes
 * from one token's to the next's. */
static void run(size_t m, size_t k, const void *const *x, const unsigned char *tile, size_t n_tiles,
                int np, const moe_act_params *act, unsigned char *out, size_t out_bytes,
                size_t n_valid)
{
    if (m == 0 || n_tiles == 0) return;
    mx_call f;
    acts_init(&f.a, m, k, x);
    f.code_step = (size_t)np * MOE_MXT_CODE_BYTES;
    f.scale_step = (size_t)np * MOE_MXT_NR;
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
        group_sums(&f, &w, (size_t)np * n, &e);
        for (size_t q = 0; q < n; q++)
            epilogue_tile(&e, q, np, tile + (t + q) * bytes, t + q + 1 < n_tiles ? ROWS : n_valid);
        e.n_out = n;
        e.out = out + t * out_tile;
    }
    epilogue_finish(&e);
    _tile_release();
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
MOE_XL_SET(moe_expert_mxfp4_tile_32x16__avx512amxbf16, MOE_RECIPE_TILE, MOE_REQ_AVX512AMXBF16,
           MOE_TILE_AMX_MR, MOE_MXT_SET_LAYOUT, .gateup = gateup_one, .down = down_one,
           .gateup_tiles = gateup_tiles, .down_tiles = down_tiles, .tiles_from_m = 0,
           .tiles_to_m = 0);
