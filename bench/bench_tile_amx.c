/* bench_tile_amx.c — the tile recipe's AMX-BF16 micro-kernels (bf16 and FP8 experts) at prefill:
 * GFLOP/s at DeepSeek-V3's expert shape against tdpbf16ps's peak, measured in the same run. */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE for the buffers (bench/bench_util.h) */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernels/expert.h"
#if defined(MOE_COMPILED_AVX512AMXBF16)
#include "kernels/avx512amxbf16/expert_bf16_tile.h"
#include "kernels/avx512amxbf16/expert_fp8_tile.h"
#include "kernels/ref/expert_layout.h"
#endif

/*
 * One thread, hidden H = 7168, intermediate I = 2048: gate/up tiles of K = H (448 KB each, 128
 * per expert), down tiles of K = I (64 KB, 448 per expert), m = 8, 16, 32 tokens in one panel
 * (the engine's rows, uniformly strided, K codes apart; "padded": K + 32 codes apart, so rows
 * are not a multiple of 4 KB apart; "gathered": rows 0, 3, 4, 6, 8, ... of a padded panel, no
 * one stride, so the kernels copy each chunk's rows first). Two working sets:
 *   L2:   2 gate/up tiles and 8 down tiles (+ the token rows: about 1.4 MB and 0.6 MB); for
 *         both phases together 1 and 4 (1.3 MB); run over and over, so they stay in L2;
 *   full: a whole expert (88 MB), every tile once per pass, so they come from beyond L2.
 * Each phase tile by tile (the single-tile entries) and through the multi-tile entries (down
 * two tiles side by side); "gate/up+down" is the two phases' multi-tile calls one after the
 * other, flops over the summed time. Figure: the median of 7 timed passes of about 50 ms,
 * 2·m·K flops per row and token, and its share of the peak: bench_util.h's register-only
 * loop of independent tdpbf16ps (BENCH_TDPBF16PS), fastest of 7.
 *
 * FP8 (set "fp8"): the same shapes and working sets over the FP8 pairs layout (tiles of K = H
 * 233 KB, of K = I 33 KB; a whole expert 44 MB), random E4M3 codes (no NaN) and block scales
 * 2^-8, panel rows; the same flops (the codes' widening is overhead the kernels pay).
 *
 * First, the ceiling of the sets' inner step alone (block_ceiling): a 2x2 block of C tiles
 * fed per chunk by four tileloadd and four tdpbf16ps, with A and B in L1, from the engine's
 * panel rows, or streamed over a gate/up tile's span in L2 — what the kernels' loop could reach
 * without their epilogues and bookkeeping.
 *
 * Usage: bench_tile_amx   (no arguments; prints why and exits 0 where AMX-BF16 is not allowed)
 */

#define H 7168
#define I 2048
#define ROWS 16
#define REPS 7
#define PAD 32 /* codes added to a padded row */
#define MAXM 128 /* the most tokens a set's call takes here */

#if defined(MOE_COMPILED_AVX512AMXBF16)

/* A working set: n_gu gate/up and n_dn down tiles, m token rows of H and of I codes. */
typedef struct wset {
    bool fp8;
    size_t n_gu, n_dn, gu_bytes, dn_bytes;
    unsigned char *gu, *dn;
    uint16_t *x, *h, *hout;
    float *y;
} wset;

static size_t tile_bytes(int np, size_t k) { return 64 * (size_t)np + np * (k + 31) / 32 * 1024; }

/* bytes of bf16 codes of random sign and mantissa, magnitudes in [2^(e-127), 2^(e-126)) (f32
 * biases read from them alike). Like a checkpoint's (activations near 1, weights near 2^-6),
 * so the sums stay moderate: sums of one sign grow with K until the activation's exp
 * underflows to subnormals, whose microcode assists would be timed instead of the kernels. */
static void *big(size_t bytes, unsigned e, uint64_t *s)
{
    unsigned char *p = bench_alloc_pages(bytes, 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    for (size_t i = 0; i + 1 < bytes; i += 2) {
        const uint64_t r = bench_rand(s);
        const uint16_t c = (uint16_t)((r >> 40 & 0x8000u) | e << 7 | (r & 0x7Fu));
        memcpy(p + i, &c, 2);
    }
    return p;
}

/* FP8 pairs tiles of np projections over k: E4M3 codes but NaN, bias 0, scales 2^-8 · 2^8. */
static void *fp8_tiles(size_t n, int np, size_t k, size_t bytes, uint64_t *s)
{
    unsigned char *p = big(n * bytes, 121, s);
    for (size_t i = 0; i < n * bytes; i++)
        if ((p[i] & 0x7F) == 0x7F) p[i] ^= 1;
    for (size_t t = 0; t < n; t++) {
        unsigned char *tile = p + t * bytes;
        memset(tile, 0, moe_xl_fp8_codes((int64_t)k, np));
        for (size_t b = 0; b < (size_t)moe_xl_nblocks((int64_t)k) * (size_t)np; b++)
            memcpy(tile + moe_xl_bias_bytes(np) + 4 * b, &(float){1.0f}, 4);
    }
    return p;
}

static void wset_init(wset *w, bool fp8, size_t n_gu, size_t n_dn, uint64_t *s)
{
    w->fp8 = fp8;
    w->n_gu = n_gu;
    w->n_dn = n_dn;
    w->gu_bytes = fp8 ? moe_xl_fp8_gateup_bytes(H) : tile_bytes(2, H);
    w->dn_bytes = fp8 ? moe_xl_fp8_down_bytes(I) : tile_bytes(1, I);
    w->gu = fp8 ? fp8_tiles(n_gu, 2, H, w->gu_bytes, s) : big(n_gu * w->gu_bytes, 121, s);
    w->dn = fp8 ? fp8_tiles(n_dn, 1, I, w->dn_bytes, s) : big(n_dn * w->dn_bytes, 121, s);
    /* 2·MAXM rows: gathered takes every other one */
    w->x = big(2 * MAXM * (H + PAD) * 2, 126, s);
    w->h = big(2 * MAXM * (I + PAD) * 2, 126, s);
    w->hout = big(MAXM * (I + 64) * 2, 126, s);
    w->y = big(MAXM * (H + 64) * 4, 126, s);
}

/* The most tokens a call of the bf16 or the FP8 set takes (its MR), at most MAXM. */
static size_t set_mr(bool fp8)
{
    const int mr = fp8 ? moe_expert_fp8_tile_64x16__avx512amxbf16.mr
                       : moe_expert_bf16_tile_32x16__avx512amxbf16.mr;
    return (size_t)mr < MAXM ? (size_t)mr : MAXM;
}

enum { GATEUP, DOWN, BOTH };
static const char *const phase_names[] = {"gate/up", "down", "gate/up+down"};

/* pass's FP8 twin. */
static void pass_fp8(const wset *w, int phase, size_t m, bool multi, const void *const *x,
                     const void *const *hr)
{
    static const moe_act_params act = {0, 0, 0};
    if (phase != DOWN) {
        if (multi)
            moe_tile_amx_fp8_gateup_tiles(m, H, x, w->gu, w->n_gu, &act, w->hout, I + 64, ROWS);
        else
            for (size_t t = 0; t < w->n_gu; t++)
                moe_tile_amx_fp8_gateup(m, H, x, w->gu + t * w->gu_bytes, &act, w->hout + t * ROWS,
                                        I + 64, ROWS);
    }
    if (phase != GATEUP) {
        if (multi)
            moe_tile_amx_fp8_down_tiles(m, I, hr, w->dn, w->n_dn, w->y, H + 64, ROWS);
        else
            for (size_t t = 0; t < w->n_dn; t++)
                moe_tile_amx_fp8_down(m, I, hr, w->dn + t * w->dn_bytes, w->y + t * ROWS, H + 64,
                                      ROWS);
    }
}

/* One pass over the set's tiles of a phase (multi: the multi-tile entries). */
static void pass(const wset *w, int phase, size_t m, bool multi, const void *const *x,
                 const void *const *hr)
{
    static const moe_act_params act = {0, 0, 0};
    if (w->fp8) {
        pass_fp8(w, phase, m, multi, x, hr);
        return;
    }
    if (phase != DOWN) {
        if (multi)
            moe_tile_amx_gateup_tiles(m, H, x, w->gu, w->n_gu, &act, w->hout, I + 64, ROWS);
        else
            for (size_t t = 0; t < w->n_gu; t++)
                moe_tile_amx_gateup(m, H, x, w->gu + t * w->gu_bytes, &act, w->hout + t * ROWS,
                                    I + 64, ROWS);
    }
    if (phase != GATEUP) {
        if (multi)
            moe_tile_amx_down_tiles(m, I, hr, w->dn, w->n_dn, w->y, H + 64, ROWS);
        else
            for (size_t t = 0; t < w->n_dn; t++)
                moe_tile_amx_down(m, I, hr, w->dn + t * w->dn_bytes, w->y + t * ROWS, H + 64, ROWS);
    }
}

static double phase_flops(const wset *w, int phase, size_t m)
{
    double f = 0;
    if (phase != DOWN) f += 2.0 * m * H * (2.0 * ROWS * (double)w->n_gu);
    if (phase != GATEUP) f += 2.0 * m * I * (ROWS * (double)w->n_dn);
    return f;
}

/* GFLOP/s: the median of REPS timed runs of enough passes for about 50 ms. */
enum { PANEL, PADDED, GATHERED, N_ROWS };
static const char *const rows_names[N_ROWS] = {"panel", "padded", "gathered"};

static double measure(const wset *w, int phase, size_t m, bool multi, int rows)
{
    const void *x[MAXM], *hr[MAXM];
    const bool gathered = rows == GATHERED;
    const size_t step = gathered ? 2 : 1, pad = rows == PANEL ? 0 : PAD;
    for (size_t i = 0; i < m; i++) {
        /* gathered: rows 0, 2, 4, ... but row 2 placed as row 3, so no one stride fits */
        const size_t r = i * step + (gathered && i == 1);
        x[i] = w->x + r * (H + pad);
        hr[i] = w->h + r * (I + pad);
    }
    int passes = 1;
    for (;;) {
        double t0 = bench_now_ns();
        for (int p = 0; p < passes; p++)
            pass(w, phase, m, multi, x, hr);
        double dt = bench_now_ns() - t0;
        if (dt > 2e7) {
            passes = (int)((double)passes * 5e7 / dt) + 1;
            break;
        }
        passes *= 2;
    }
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = bench_now_ns();
        for (int p = 0; p < passes; p++)
            pass(w, phase, m, multi, x, hr);
        t[r] = (bench_now_ns() - t0) / passes;
    }
    return phase_flops(w, phase, m) / bench_median(t, REPS);
}

/* The ceiling of the sets' inner step without their epilogues: a 2x2 block of C tiles, per
 * 32-K chunk two A tiles and two B tiles loaded (tileloadd, 1 KB each) and four tdpbf16ps, as
 * the AMX sets run a chunk at 32 tokens. A from one 32-row panel whose rows are `a_stride`
 * bytes apart (64: one 2 KB block in L1; H bf16: the engine's rows), B streamed through
 * `b_bytes` of pair lines (2 KB: in L1; a gate/up tile's span: from L2). GFLOP/s over `chunks`
 * chunks, the median of REPS. */
__attribute__((target("amx-tile,amx-bf16"))) static double
block_ceiling(size_t a_stride, size_t b_bytes, size_t chunks, const uint16_t *a, const uint16_t *b)
{
    bench_tilecfg cfg = {.palette = 1};
    for (int t = 0; t < 8; t++)
        cfg.colsb[t] = 64, cfg.rows[t] = 16;
    _tile_loadconfig(&cfg);
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        const double t0 = bench_now_ns();
        for (size_t c = 0; c < chunks; c++) {
            const size_t ac = c % (a_stride / 64), bc = c % (b_bytes / 2048);
            _tile_loadd(4, a + 32 * ac, a_stride);
            _tile_loadd(5, a + 32 * ac + 16 * a_stride / 2, a_stride);
            _tile_loadd(6, b + 1024 * bc, 64);
            _tile_loadd(7, b + 1024 * bc + 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        t[r] = bench_now_ns() - t0;
    }
    float c[16][16] __attribute__((aligned(64)));
    _tile_stored(0, c, 64);
    _tile_release();
    bench_fsink = c[0][0];
    return 4.0 * 2 * 16 * 16 * 32 * (double)chunks / bench_median(t, REPS);
}

static void print_block_ceilings(double peak, uint64_t *s)
{
    const size_t a_panel = (size_t)H * 2, b_span = tile_bytes(2, H);
    const uint16_t *a = big(32 * a_panel, 126, s), *b = big(b_span, 121, s);
    const struct {
        const char *name;
        size_t a_stride, b_bytes;
    } cases[] = {{"A and B in L1", 64, 2048},
                 {"A panel rows, B in L1", a_panel, 2048},
                 {"A in L1, B over a gate/up tile (L2)", 64, b_span - 2048},
                 {"A panel rows, B over a tile (L2)", a_panel, b_span - 2048}};
    printf("2x2 block per chunk (4 tileloadd, 4 tdpbf16ps), no epilogue:\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const double g = block_ceiling(cases[i].a_stride, cases[i].b_bytes, 1u << 16, a, b);
        printf("  %-38s %9.0f GFLOP/s %7.2f of peak\n", cases[i].name, g, g / peak);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1) { /* it takes no options: --help or anything else prints what it does */
        const bool help = !strcmp(argv[1], "--help");
        fprintf(help ? stdout : stderr,
                "usage: %s (no options): the tile recipe's AMX-BF16 kernels at DeepSeek-V3's "
                "expert shape, one thread\n",
                argv[0]);
        return help ? 0 : 2;
    }
    moe_cpu_info ci;
    if (moe_cpu_query(&ci) != MOE_OK || !ci.allowed.amx_bf16) {
        printf("bench_tile_amx: amx_bf16 not allowed on this CPU / OS: nothing to time\n");
        return 0;
    }
    uint64_t s = 0x2545F4914F6CDD1Du;
    const double peak = bench_peak_gflops(BENCH_TDPBF16PS, 1, REPS);
    printf("tdpbf16ps peak, one thread: %.0f GFLOP/s\n", peak);
    print_block_ceilings(peak, &s);
    printf("DeepSeek-V3 expert (H %d, I %d), bf16 and FP8, tile recipe, AMX-BF16, one thread\n", H,
           I);
    printf("%-4s %-6s %-14s %3s %-12s %-9s %9s %7s\n", "fmt", "set", "phase", "m", "entry", "rows",
           "GFLOP/s", "of peak");
    wset sets[6];
    wset_init(&sets[0], false, 2, 8, &s);
    wset_init(&sets[1], false, 1, 4, &s); /* both phases in L2 */
    wset_init(&sets[2], false, I / ROWS, H / ROWS, &s);
    wset_init(&sets[3], true, 2, 8, &s);
    wset_init(&sets[4], true, 1, 4, &s);
    wset_init(&sets[5], true, I / ROWS, H / ROWS, &s);
    const char *set_names[6] = {"L2", "L2", "full", "L2", "L2", "full"};
    for (int si = 0; si < 6; si += 1 + (si % 3 == 0))
        for (int phase = GATEUP; phase <= BOTH; phase++)
            for (size_t m = 8; m <= set_mr(sets[si].fp8); m *= 2)
                for (int multi = 0; multi < 2; multi++)
                    for (int rows = PANEL; rows < N_ROWS; rows++) {
                        if (rows != PANEL && (m != 32 || !multi)) continue;
                        if (phase == BOTH && (!multi || rows == GATHERED)) continue;
                        if (m > 32 && !multi) continue; /* only the multi-tile entries take more */
                        const wset *w = &sets[si % 3 == 0 && phase == BOTH ? si + 1 : si];
                        const double g = measure(w, phase, m, multi, rows);
                        printf("%-4s %-6s %-14s %3zu %-12s %-9s %9.0f %7.2f\n",
                               w->fp8 ? "fp8" : "bf16", set_names[si], phase_names[phase], m,
                               multi ? "multi-tile" : "tile by tile", rows_names[rows], g,
                               g / peak);
                    }
    return 0;
}

#else
int main(void)
{
    printf("bench_tile_amx: no AMX-BF16 kernels in this build: nothing to time\n");
    return 0;
}
#endif
