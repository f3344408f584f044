/* test_kernel_tile_amx_fp8.c — the tile recipe's AMX-BF16 micro-kernels for FP8 experts against
 * the recipe's formula (tdpbf16ps reference) bit for bit and against float64, for every m, both
 * A paths and the multi-tile entries. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"
#include "dtype/dtype.h"
#include "kernels/ref/expert_layout.h"
#include "kernels/ref/expert_ref.h"
#include "kernels/tile_bf16.h"
#include "test.h"
#define MAXM 64 /* the AMX set's MR: past 32 tokens, blocks of 32 over each widened 128-K block */
#include "tile_amx_check.h"
#ifdef MOE_COMPILED_AVX512AMXBF16
#include "kernels/avx512amxbf16/expert_fp8_tile.h"
#endif

/*
 * Each case draws E4M3 codes (every non-NaN code: subnormals and zeros included), f32 block
 * scales of the case's magnitudes (one per 16 rows × 128 K) and an optional bias, packs them
 * with the FP8 pairs packer (moe_xl_fp8p_pack_gateup / _down), and computes each output
 * element as the tile recipe defines it for FP8: w'' = bf16(e4m3(code) · 2^-8) (from dtype's
 * E4M3 decoding), s'' = scale · 2^8; acc = +0; per 128-K block C = +0, C =
 * moe_tile_bf16_dot_ref(C, x chunk, w'' chunk, 16) per 32-K chunk (the last zero-padded), acc =
 * fmaf(C, s'', acc); v = acc + bias; gate/up moe_f32_to_bf16(moe_xr_act(v_g, v_u)), down y = v.
 * The kernels must give those bits (NaN: NaN-ness) for every m = 1..64 (the AMX set's MR: past
 * 32 tokens in blocks of 32, the last one partial), with token rows in one
 * panel (stride positive or negative) and scattered (the gathered path), tile by tile and
 * through the multi-tile entries; nothing else in h / y is written, nothing past a row's k
 * codes or the tiles is read (both end at an inaccessible page), and the tile state is released.
 * Independently, finite cases are within an error bound of the same sums in float64.
 */

#define KB 128
static size_t chunks_of(size_t k) { return (k + CHUNK - 1) / CHUNK; }
static size_t blocks_of(size_t k) { return (k + KB - 1) / KB; }

/* ---- Values ---------------------------------------------------------------------------- */

/* Activations: bf16 near 1, over 2^±20, or with Inf / NaN among them. */
enum { NEAR_ONE, WIDE, SPECIALS, N_REGIMES };
static const char *const regime_names[N_REGIMES] = {"near 1", "2^±20", "NaN and Inf"};

static uint16_t random_x(uint64_t *s, int regime)
{
    const uint64_t r = xorshift64(s);
    const uint16_t sign_mant = (uint16_t)(((r >> 40) & 0x8000u) | ((r >> 8) & 0x7Fu));
    if (regime == SPECIALS && r % 499 == 0)
        return (uint16_t)(0x7F80u | (r % 3 == 0 ? 0x41u : 0) | (sign_mant & 0x8000u));
    const unsigned e = regime == WIDE ? 107 + (unsigned)(r % 41) : 122 + (unsigned)(r % 7);
    return (uint16_t)(sign_mant | e << 7);
}

/* Any E4M3 code but NaN (0x7F, 0xFF: the packer refuses them); one in 8 a zero or subnormal. */
static uint8_t random_code(uint64_t *s)
{
    const uint64_t r = xorshift64(s);
    uint8_t c = (uint8_t)(r >> 24);
    if (r % 8 == 0) c &= 0x87;
    return (c & 0x7F) == 0x7F ? (uint8_t)(c ^ 1) : c;
}

/* Block scales: 2^[lo, hi) with a random mantissa. */
static float random_scale(uint64_t *s, int lo, int hi)
{
    const uint64_t r = xorshift64(s);
    const double m = 1.0 + (double)(r >> 11) * 0x1p-53;
    return (float)ldexp(m, lo + (int)(r % (uint64_t)(hi - lo)));
}

static float random_bias(uint64_t *s)
{
    return (float)((double)(xorshift64(s) >> 11) * 0x1p-53 * 4.0 - 2.0);
}

/* ---- Weights ---------------------------------------------------------------------------- */

typedef struct weights {
    int np;
    size_t rows, k, n_tiles, tile_bytes;
    uint8_t *w[2];         /* [rows][k] E4M3 codes */
    float *scale[2];       /* [ceil(rows / 16)][ceil(k / 128)] */
    float *bias[2];        /* [rows], or NULL */
    unsigned char *packed; /* the tiles, ending at an inaccessible page */
    guarded g;
} weights;

static void weights_make(weights *W, int np, size_t rows, size_t k, bool bias, int slo, int shi,
                         uint64_t *s)
{
    memset(W, 0, sizeof *W);
    W->np = np;
    W->rows = rows;
    W->k = k;
    W->n_tiles = (rows + ROWS - 1) / ROWS;
    W->tile_bytes =
        np == 2 ? moe_xl_fp8_gateup_bytes((int64_t)k) : moe_xl_fp8_down_bytes((int64_t)k);
    REQUIRE(W->tile_bytes > 0);
    moe_weight_src src[2];
    for (int p = 0; p < np; p++) {
        W->w[p] = malloc(rows * k);
        W->scale[p] = malloc(W->n_tiles * blocks_of(k) * sizeof(float));
        REQUIRE(W->w[p] && W->scale[p]);
        for (size_t i = 0; i < rows * k; i++)
            W->w[p][i] = random_code(s);
        for (size_t i = 0; i < W->n_tiles * blocks_of(k); i++)
            W->scale[p][i] = random_scale(s, slo, shi);
        if (bias) {
            W->bias[p] = malloc(rows * sizeof(float));
            REQUIRE(W->bias[p]);
            for (size_t r = 0; r < rows; r++)
                W->bias[p][r] = random_bias(s);
        }
        src[p] = (moe_weight_src){.data = W->w[p],
                                  .dtype = MOE_DTYPE_F8_E4M3,
                                  .rows = (int64_t)rows,
                                  .cols = (int64_t)k,
                                  .row_stride = (int64_t)k,
                                  .col_stride = 1,
                                  .scale = W->scale[p],
                                  .scale_dtype = MOE_DTYPE_F32,
                                  .block_rows = ROWS,
                                  .block_cols = KB,
                                  .bias = W->bias[p],
                                  .bias_dtype = MOE_DTYPE_F32,
                                  .bias_stride = 1};
    }
    W->packed = guarded_alloc(&W->g, W->n_tiles * W->tile_bytes);
    const moe_status st = np == 2 ? moe_xl_fp8p_pack_gateup(&src[0], &src[1], W->packed)
                                  : moe_xl_fp8p_pack_down(&src[0], W->packed);
    REQUIRE(st == MOE_OK);
}

static void weights_free(weights *W)
{
    for (int p = 0; p < 2; p++) {
        free(W->w[p]);
        free(W->scale[p]);
        free(W->bias[p]);
    }
    guarded_free(&W->g);
}

static float scale_of(const weights *W, int p, size_t r, size_t b)
{
    return W->scale[p][r / ROWS * blocks_of(W->k) + b];
}

/* ---- Expected values -------------------------------------------------------------------- */

/* v = the recipe's FP8 sum over K of token row x and weight row r of projection p, + bias. */
static float ref_v(const weights *W, int p, size_t r, const uint16_t *x)
{
    const size_t k = W->k;
    float acc = 0.0f;
    for (size_t b = 0; b < blocks_of(k); b++) {
        float c = 0.0f;
        for (size_t ch = b * (KB / CHUNK); ch < chunks_of(k) && ch < (b + 1) * (KB / CHUNK); ch++) {
            uint16_t xc[CHUNK] = {0}, wc[CHUNK] = {0};
            for (size_t j = 0; j < CHUNK && CHUNK * ch + j < k; j++) {
                xc[j] = x[CHUNK * ch + j];
                wc[j] = moe_f32_to_bf16(moe_e4m3_to_f32(W->w[p][r * k + CHUNK * ch + j]) * 0x1p-8f);
            }
            c = moe_tile_bf16_dot_ref(c, xc, wc, CHUNK / 2);
        }
        acc = fmaf(c, scale_of(W, p, r, b) * 256.0f, acc);
    }
    return acc + (W->bias[p] ? W->bias[p][r] : 0.0f);
}

static double daz64(uint16_t c) { return (c & 0x7F80u) == 0 ? 0.0 : (double)moe_bf16_to_f32(c); }

/* The same sum in float64, Σ |x·w| + |bias| (*mag) and the largest s'' (*smax). */
static double exact_v(const weights *W, int p, size_t r, const uint16_t *x, double *mag,
                      double *smax)
{
    double s = 0, a = 0;
    *smax = 0;
    for (size_t j = 0; j < W->k; j++) {
        const double sc = scale_of(W, p, r, j / KB);
        const double t = daz64(x[j]) * (double)moe_e4m3_to_f32(W->w[p][r * W->k + j]) * sc;
        s += t;
        a += fabs(t);
        if (256.0 * sc > *smax) *smax = 256.0 * sc;
    }
    const double b = W->bias[p] ? W->bias[p][r] : 0.0;
    *mag = a + fabs(b);
    return s + b;
}

/* Bound on |v - exact|: per chunk 16 FMAs per chain and the chains' sum, one addition per chunk
 * into C, one FMA per block, the bias, each at most 2^-24 relative of the magnitudes; flushes of
 * C's terms at most 2^-126 · s''. */
static double v_bound(size_t k, double mag, double smax)
{
    const double n = (double)(20 + chunks_of(k) + blocks_of(k));
    return n * 0x1p-24 * mag + (double)(k + 3 * chunks_of(k)) * 0x1p-126 * smax;
}

static uint16_t xsrc[MAXM][MAXK];
static uint16_t want_h[MAXM * WANT_LD];
static float want_y[MAXM * WANT_LD];

static void expected(const weights *W, const moe_act_params *act)
{
    for (size_t i = 0; i < MAXM; i++)
        for (size_t r = 0; r < W->rows; r++) {
            const float g = ref_v(W, 0, r, xsrc[i]);
            if (W->np == 1)
                want_y[i * WANT_LD + r] = g;
            else
                want_h[i * WANT_LD + r] =
                    moe_f32_to_bf16(moe_xr_act(act, g, ref_v(W, 1, r, xsrc[i])));
        }
}

/* h (bf16) or y (f32), ld apart, against float64 where finite. */
static long check_float64(const weights *W, const moe_act_params *act, const uint16_t *h,
                          const float *y, size_t ld)
{
    long bad = 0;
    for (size_t i = 0; i < MAXM; i++)
        for (size_t r = 0; r < W->rows; r++) {
            double mg, mu, sg, su;
            const double g = exact_v(W, 0, r, xsrc[i], &mg, &sg), eg = v_bound(W->k, mg, sg);
            double got, want, bound;
            if (W->np == 1) {
                got = y[i * ld + r];
                want = g;
                bound = eg;
            } else {
                const double u = exact_v(W, 1, r, xsrc[i], &mu, &su), eu = v_bound(W->k, mu, su);
                got = moe_bf16_to_f32(h[i * ld + r]);
                want = act_d(act, g, u);
                if (fabs(want) > 0x1p120) continue; /* near f32 overflow: bits only */
                bound = 0x1p-8 * fabs(want) + 0x1p-18 * fabs(want) + 1.3 * (fabs(u) + 1) * eg +
                        fabs(g) * eu + 0x1p-126;
            }
            n_bound++;
            if (!(fabs(got - want) <= bound) && bad++ < 3)
                fprintf(stderr,
                        "float64: k=%zu row %zu token %zu: got %.9g, float64 %.9g, bound %.3g\n",
                        W->k, r, i, got, want, bound);
        }
    return bad;
}

/* ---- Cases ------------------------------------------------------------------------------ */

typedef struct tcase {
    int np;
    size_t k, rows;
    bool bias;
    int regime, act_kind, slo, shi; /* scales in 2^[slo, shi) */
} tcase;

static const tcase cases[] = {
    /* np, k, rows, bias, regime, act, scales */
    {2, 32, 16, false, NEAR_ONE, 0, -8, -4},
    {2, 96, 5, true, NEAR_ONE, 1, -2, 3},
    {2, 128, 16, true, WIDE, 0, -12, -6},
    {2, 200, 13, false, NEAR_ONE, 2, -10, 10},
    {2, 7, 16, true, NEAR_ONE, 0, 0, 1},
    {2, 2048, 16, true, NEAR_ONE, 0, -9, -7},
    {2, 2085, 21, true, WIDE, 2, -20, -10},
    {2, 129, 16, false, SPECIALS, 0, -8, -4},
    {2, 300, 16, true, NEAR_ONE, 1, 40, 60},
    {1, 32, 16, true, NEAR_ONE, 0, -8, -4},
    {1, 96, 3, false, WIDE, 0, -3, 3},
    {1, 128, 16, true, NEAR_ONE, 0, -30, -20},
    {1, 201, 47, false, NEAR_ONE, 0, -8, 8},
    {1, 2048, 64, false, NEAR_ONE, 0, -9, -7},
    {1, 2071, 30, true, WIDE, 0, -6, 6},
    {1, 300, 35, true, SPECIALS, 0, -8, -4},
    {1, 45, 16, true, NEAR_ONE, 0, 60, 90},
    /* groups of tiles: gate/up 2 per group up to 16 tokens, down 4 (2 from 17) */
    {2, 160, 70, true, NEAR_ONE, 1, -8, -4},
    {1, 256, 100, true, WIDE, 0, -8, -4},
    {1, 64, 128, false, NEAR_ONE, 0, -8, -4},
    {2, 33, 128, true, NEAR_ONE, 2, -8, -4},
};
#define N_CASES (sizeof cases / sizeof cases[0])

#ifdef MOE_COMPILED_AVX512AMXBF16
static uint16_t hbuf[MAXM * (WANT_LD + HS_PAD)];
static float ybuf[MAXM * (WANT_LD + HS_PAD)];

static long run_kernels(const tcase *c, const weights *W, const moe_act_params *act, uint64_t *s)
{
    const size_t ld = ROWS * W->n_tiles + HS_PAD, last = W->rows - ROWS * (W->n_tiles - 1);
    long bad = 0;
    for (int layout = 0; layout < N_LAYOUTS; layout++) {
        rows_map R;
        rows_place(&R, layout, c->k, (const uint16_t(*)[MAXK])xsrc, s);
        const void *const *x = (const void *const *)R.x;
        for (size_t m = 1; m <= MAXM; m++)
            for (int multi = 0; multi < 2; multi++) {
                char label[192];
                snprintf(label, sizeof label, "%s np=%d k=%zu rows=%zu bias=%d %s %s",
                         multi ? "tiles entry" : "one tile per call", W->np, c->k, c->rows, c->bias,
                         regime_names[c->regime], layout_names[layout]);
                fill_sentinels(W->np, hbuf, ybuf, ld);
                for (size_t t = 0; t < (multi ? 1 : W->n_tiles); t++) {
                    const unsigned char *tile = W->packed + t * W->tile_bytes;
                    const size_t n = multi ? W->n_tiles : 1;
                    const size_t nv = multi || t + 1 == W->n_tiles ? last : ROWS;
                    if (W->np == 2 && multi)
                        moe_tile_amx_fp8_gateup_tiles(m, c->k, x, tile, n, act, hbuf, ld, nv);
                    else if (W->np == 2)
                        moe_tile_amx_fp8_gateup(m, c->k, x, tile, act, hbuf + t * ROWS, ld, nv);
                    else if (multi)
                        moe_tile_amx_fp8_down_tiles(m, c->k, x, tile, n, ybuf, ld, nv);
                    else
                        moe_tile_amx_fp8_down(m, c->k, x, tile, ybuf + t * ROWS, ld, nv);
                    bad += tiles_in_use();
                }
                bad += compare_out(W->np, hbuf, ybuf, ld, m, W->rows, want_h, want_y, label);
            }
        rows_free(&R);
    }
    /* The last call (m = 64, scattered, tiles entry) against float64, finite cases only. */
    if (c->regime != SPECIALS) bad += check_float64(W, act, hbuf, ybuf, ld);
    return bad;
}
#endif

int main(void)
{
    moe_cpu_info info;
    REQUIRE(moe_cpu_query(&info) == MOE_OK);
#ifdef MOE_COMPILED_AVX512AMXBF16
    const bool amx = info.allowed.amx_bf16;
    if (!amx) fprintf(stderr, "amx_bf16 not allowed here: the AMX kernels are not run\n");
#else
    const bool amx = false;
    fprintf(stderr, "no AMX-BF16 kernels in this build: the AMX kernels are not run\n");
#endif
    uint64_t s = 0x243F6A8885A308D3u;
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const tcase *c = &cases[ci];
        REQUIRE(c->k <= MAXK && c->rows <= WANT_LD);
        const moe_act_params act = {c->act_kind, 7.0f, 1.702f};
        weights W;
        weights_make(&W, c->np, c->rows, c->k, c->bias, c->slo, c->shi, &s);
        for (size_t i = 0; i < MAXM; i++)
            for (size_t j = 0; j < c->k; j++)
                xsrc[i][j] = random_x(&s, c->regime);
        expected(&W, &act);
        long bad = 0;
        if (c->regime != SPECIALS) /* the reference itself vs float64 */
            bad += check_float64(&W, &act, want_h, want_y, WANT_LD);
#ifdef MOE_COMPILED_AVX512AMXBF16
        if (amx) bad += run_kernels(c, &W, &act, &s);
#endif
        CHECKF(bad == 0, "case %zu (np %d, k %zu, rows %zu, %s): %ld mismatches", ci, c->np, c->k,
               c->rows, regime_names[c->regime], bad);
        weights_free(&W);
    }
    fprintf(stderr, "%ld outputs compared bit for bit, %ld against float64\n", n_compared, n_bound);
    if (amx) CHECK(n_compared > 0);
    return TEST_END();
}
