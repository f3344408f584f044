/* test_kernel_tile_amx.c — the tile recipe's AMX-BF16 micro-kernels against the tdpbf16ps
 * reference bit for bit and against float64, for every m, both A paths and the multi-tile entries.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"
#include "dtype/dtype.h"
#include "kernels/ref/expert_ref.h"
#include "kernels/tile_bf16.h"
#include "test.h"
#include "tile_amx_check.h"
#ifdef MOE_COMPILED_AVX512AMXBF16
#include "kernels/avx512amxbf16/expert_bf16_tile.h"
#endif

/*
 * Each case packs random gate/up (np = 2) or down (np = 1) weights into the "tile pairs"
 * layout with the loops below (kernels/avx512amxbf16/expert_bf16_tile.h states it: bias np × 16
 * f32, then per projection 16 pair dwords per K pair, zeros past K and past the rows), and
 * computes each output element as the recipe defines it: acc = +0, acc =
 * moe_tile_bf16_dot_ref(acc, x chunk, w chunk, 16) per 32-K chunk zero-padded, v = acc + bias
 * in f32, then moe_xr_act and moe_f32_to_bf16 (gate/up) or y = v (down). The kernels must give
 * those bits (NaN: NaN-ness) for every m = 1..32, with token rows in one panel (stride
 * positive or negative) and scattered (the gathered path), and through the multi-tile
 * entries; nothing else in h / y is written, nothing past a row's k codes or the tiles is read
 * (they end at an inaccessible page), and the tile state is released after every call.
 * Independently of the reference, the kernels' outputs of finite cases are within an error bound of
 * the same expressions in float64.
 */

/* ---- Values ---------------------------------------------------------------------------- */

enum { NEAR_ONE, WIDE, DENORMALS, TINY, HUGE_EXP, SPECIALS, N_REGIMES };
static const char *const regime_names[N_REGIMES] = {"near 1",
                                                    "2^±20",
                                                    "denormals among near 1",
                                                    "products near 2^-126",
                                                    "exponents to 2^±60",
                                                    "NaN and Inf among near 1"};

/* A bf16 code of the regime: random sign and mantissa, exponent field by regime. */
static uint16_t random_code(uint64_t *s, int regime)
{
    const uint64_t r = xorshift64(s);
    const uint16_t sign_mant = (uint16_t)(((r >> 40) & 0x8000u) | ((r >> 8) & 0x7Fu));
    unsigned e;
    switch (regime) {
    case WIDE: e = 107 + (unsigned)(r % 41); break;
    case DENORMALS: e = r % 6 == 0 ? 0 : 122 + (unsigned)(r % 7); break;
    case TINY: e = 60 + (unsigned)(r % 8); break;
    case HUGE_EXP: e = 67 + (unsigned)(r % 121); break;
    case SPECIALS:
        if (r % 997 == 0)
            return (uint16_t)(0x7F80u | (r % 3 == 0 ? 0x41u : 0) | (sign_mant & 0x8000u));
        e = 122 + (unsigned)(r % 7);
        break;
    default: e = 122 + (unsigned)(r % 7); break;
    }
    return (uint16_t)(sign_mant | e << 7);
}

static float random_bias(uint64_t *s)
{
    const uint64_t r = xorshift64(s);
    return (float)((double)(r >> 11) * 0x1p-53 * 4.0 - 2.0);
}

/* ---- Weights, packed by the spec's loops ------------------------------------------------ */

typedef struct weights {
    int np;
    size_t rows, k, n_tiles, tile_bytes;
    uint16_t *w[2];        /* [rows][k] */
    float *bias[2];        /* [rows], or NULL */
    unsigned char *packed; /* the tiles, ending at an inaccessible page (64-byte aligned) */
    guarded g;
} weights;

static size_t chunks_of(size_t k) { return (k + CHUNK - 1) / CHUNK; }

static void weights_make(weights *W, int np, size_t rows, size_t k, bool bias, int regime,
                         uint64_t *s)
{
    W->np = np;
    W->rows = rows;
    W->k = k;
    W->n_tiles = (rows + ROWS - 1) / ROWS;
    const size_t pairs = ROWS * chunks_of(k); /* P */
    W->tile_bytes = 64 * (size_t)np + (size_t)np * pairs * 64;
    for (int p = 0; p < 2; p++) {
        W->w[p] = NULL;
        W->bias[p] = NULL;
    }
    for (int p = 0; p < np; p++) {
        W->w[p] = malloc(rows * k * sizeof(uint16_t));
        REQUIRE(W->w[p]);
        for (size_t i = 0; i < rows * k; i++)
            W->w[p][i] = random_code(s, regime);
        if (bias) {
            W->bias[p] = malloc(rows * sizeof(float));
            REQUIRE(W->bias[p]);
            for (size_t r = 0; r < rows; r++)
                W->bias[p][r] = random_bias(s);
        }
    }
    W->packed = guarded_alloc(&W->g, W->n_tiles * W->tile_bytes);
    memset(W->packed, 0, W->n_tiles * W->tile_bytes);
    for (size_t t = 0; t < W->n_tiles; t++) {
        unsigned char *tile = W->packed + t * W->tile_bytes;
        for (int p = 0; p < np; p++)
            for (size_t n = 0; n < ROWS; n++) {
                const size_t r = t * ROWS + n;
                if (r >= rows) continue;
                const float b = W->bias[p] ? W->bias[p][r] : 0.0f;
                memcpy(tile + ((size_t)p * ROWS + n) * 4, &b, 4);
                for (size_t q = 0; q < pairs; q++) {
                    const uint32_t lo = 2 * q < k ? W->w[p][r * k + 2 * q] : 0;
                    const uint32_t hi = 2 * q + 1 < k ? W->w[p][r * k + 2 * q + 1] : 0;
                    const uint32_t dw = lo | hi << 16;
                    memcpy(tile + 64 * (size_t)np + ((size_t)p * pairs + q) * 64 + n * 4, &dw, 4);
                }
            }
    }
}

static void weights_free(weights *W)
{
    for (int p = 0; p < 2; p++) {
        free(W->w[p]);
        free(W->bias[p]);
    }
    guarded_free(&W->g);
}

/* ---- Expected values -------------------------------------------------------------------- */

/* v = the recipe's sum over K of token row x and weight row r of projection p, + bias. */
static float ref_v(const weights *W, int p, size_t r, const uint16_t *x)
{
    float acc = 0.0f;
    const size_t k = W->k;
    for (size_t c = 0; c < chunks_of(k); c++) {
        uint16_t xc[CHUNK] = {0}, wc[CHUNK] = {0};
        for (size_t j = 0; j < CHUNK && CHUNK * c + j < k; j++) {
            xc[j] = x[CHUNK * c + j];
            wc[j] = W->w[p][r * k + CHUNK * c + j];
        }
        acc = moe_tile_bf16_dot_ref(acc, xc, wc, CHUNK / 2);
    }
    return acc + (W->bias[p] ? W->bias[p][r] : 0.0f);
}

static double daz64(uint16_t c) { return (c & 0x7F80u) == 0 ? 0.0 : (double)moe_bf16_to_f32(c); }

/* The same sum in float64 (inputs read with DAZ), and Σ |x·w| + |bias| for its error bound. */
static double exact_v(const weights *W, int p, size_t r, const uint16_t *x, double *mag)
{
    double s = 0, a = 0;
    for (size_t j = 0; j < W->k; j++) {
        const double t = daz64(x[j]) * daz64(W->w[p][r * W->k + j]);
        s += t;
        a += fabs(t);
    }
    const double b = W->bias[p] ? W->bias[p][r] : 0.0;
    *mag = a + fabs(b);
    return s + b;
}

/* Bound on |v - exact| for the recipe's f32 arithmetic: 16 FMAs per chain, the chains' sum,
 * one addition per chunk and the bias, each at most 2^-24 relative of the magnitudes; flushes
 * at most 2^-126 each. */
static double v_bound(size_t k, double mag)
{
    return (double)(20 + chunks_of(k)) * 0x1p-24 * mag + (double)(k + 3 * chunks_of(k)) * 0x1p-126;
}

/* ---- One case ------------------------------------------------------------------------------ */

typedef struct tcase {
    int np;
    size_t k, rows;
    bool bias;
    int regime, act_kind;
} tcase;

static uint16_t xsrc[MAXM][MAXK];

/* The expected outputs of the MAXM tokens (want, row stride ROWS · 4 ≥ rows), and the float64
 * check of got (same layout) where the case is finite. */
static void expected(const weights *W, const moe_act_params *act, uint16_t *want_h, float *want_y)
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

static long check_float64(const weights *W, const moe_act_params *act, const uint16_t *h,
                          const float *y, size_t ld)
{
    long bad = 0;
    for (size_t i = 0; i < MAXM; i++)
        for (size_t r = 0; r < W->rows; r++) {
            double mg, mu = 0;
            const double g = exact_v(W, 0, r, xsrc[i], &mg);
            const double eg = v_bound(W->k, mg);
            double got, want, bound;
            if (W->np == 1) {
                got = y[i * ld + r];
                want = g;
                bound = eg;
            } else {
                const double u = exact_v(W, 1, r, xsrc[i], &mu), eu = v_bound(W->k, mu);
                got = moe_bf16_to_f32(h[i * ld + r]);
                want = act_d(act, g, u);
                if (fabs(want) > 0x1p120) continue; /* near f32 overflow: bits only */
                /* bf16 rounding, the f32 epilogue's few roundings, and the projections'
                 * errors through the activation (|d/dg| ≤ 1.3 |u + 1|, |d/du| ≤ |g|) */
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

#ifdef MOE_COMPILED_AVX512AMXBF16
static uint16_t hbuf[MAXM * (WANT_LD + HS_PAD)];
static float ybuf[MAXM * (WANT_LD + HS_PAD)];

static long run_kernels(const tcase *c, const weights *W, const moe_act_params *act,
                        const uint16_t *want_h, const float *want_y, uint64_t *s)
{
    const size_t ld = ROWS * W->n_tiles + HS_PAD, last = W->rows - ROWS * (W->n_tiles - 1);
    long bad = 0;
    for (int layout = 0; layout < N_LAYOUTS; layout++) {
        rows_map R;
        rows_place(&R, layout, c->k, (const uint16_t(*)[MAXK])xsrc, s);
        for (size_t m = 1; m <= MAXM; m++)
            for (int multi = 0; multi < 2; multi++) {
                const void *const *x = (const void *const *)R.x;
                char label[192];
                snprintf(label, sizeof label, "%s np=%d k=%zu rows=%zu bias=%d %s act=%d %s",
                         multi ? "tiles entry" : "one tile per call", W->np, c->k, c->rows, c->bias,
                         regime_names[c->regime], c->act_kind, layout_names[layout]);
                fill_sentinels(W->np, hbuf, ybuf, ld);
                if (W->np == 2) {
                    if (multi)
                        moe_tile_amx_gateup_tiles(m, c->k, x, W->packed, W->n_tiles, act, hbuf, ld,
                                                  last);
                    else
                        for (size_t t = 0; t < W->n_tiles; t++)
                            moe_tile_amx_gateup(m, c->k, x, W->packed + t * W->tile_bytes, act,
                                                hbuf + t * ROWS, ld,
                                                t + 1 < W->n_tiles ? ROWS : last);
                } else {
                    if (multi)
                        moe_tile_amx_down_tiles(m, c->k, x, W->packed, W->n_tiles, ybuf, ld, last);
                    else
                        for (size_t t = 0; t < W->n_tiles; t++)
                            moe_tile_amx_down(m, c->k, x, W->packed + t * W->tile_bytes,
                                              ybuf + t * ROWS, ld,
                                              t + 1 < W->n_tiles ? ROWS : last);
                }
                bad += compare_out(W->np, hbuf, ybuf, ld, m, W->rows, want_h, want_y, label);
                bad += tiles_in_use();
            }
        rows_free(&R);
    }
    /* The last call (m = 32, scattered, tiles entry) against float64, finite cases only. */
    if (c->regime != SPECIALS && c->regime != HUGE_EXP)
        bad += check_float64(W, act, hbuf, ybuf, ld);
    return bad;
}
#endif

static const tcase cases[] = {
    /* np, k, rows, bias, regime, act */
    {2, 32, 16, false, NEAR_ONE, 0},
    {2, 64, 16, true, NEAR_ONE, 0},
    {2, 33, 5, true, WIDE, 1},
    {2, 7, 16, false, NEAR_ONE, 2},
    {2, 100, 13, true, DENORMALS, 0},
    {2, 96, 40, true, NEAR_ONE, 2},
    {2, 160, 16, true, TINY, 0},
    {2, 130, 33, true, HUGE_EXP, 1},
    {2, 200, 16, false, SPECIALS, 0},
    {2, 2048, 16, true, NEAR_ONE, 0},
    {2, 2085, 21, true, WIDE, 2},
    {1, 32, 16, true, NEAR_ONE, 0},
    {1, 64, 3, false, WIDE, 0},
    {1, 45, 16, true, DENORMALS, 0},
    {1, 256, 64, true, NEAR_ONE, 0},
    {1, 96, 47, false, TINY, 0},
    {1, 150, 16, true, HUGE_EXP, 0},
    {1, 300, 35, true, SPECIALS, 0},
    {1, 2048, 64, false, NEAR_ONE, 0},
    {1, 2070, 30, true, WIDE, 0},
    /* groups of tiles: gate/up 2 per group up to 16 tokens, down 4 (2 from 17) */
    {2, 96, 70, true, NEAR_ONE, 1},
    {1, 128, 100, true, WIDE, 0},
    {1, 64, 128, false, NEAR_ONE, 0},
    {2, 33, 128, true, DENORMALS, 2},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static uint16_t want_h[MAXM * WANT_LD];
static float want_y[MAXM * WANT_LD];

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
    uint64_t s = 0x9E3779B97F4A7C15u;
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const tcase *c = &cases[ci];
        REQUIRE(c->k <= MAXK && c->rows <= WANT_LD);
        const moe_act_params act = {c->act_kind, 7.0f, 1.702f};
        weights W;
        weights_make(&W, c->np, c->rows, c->k, c->bias, c->regime, &s);
        for (size_t i = 0; i < MAXM; i++)
            for (size_t j = 0; j < c->k; j++)
                xsrc[i][j] = random_code(&s, c->regime);
        expected(&W, &act, want_h, want_y);
        long bad = 0;
        if (c->regime != SPECIALS && c->regime != HUGE_EXP) /* the reference itself vs float64 */
            bad += check_float64(&W, &act, want_h, want_y, WANT_LD);
#ifdef MOE_COMPILED_AVX512AMXBF16
        if (amx) bad += run_kernels(c, &W, &act, want_h, want_y, &s);
#endif
        CHECKF(bad == 0, "case %zu (np %d, k %zu, rows %zu, %s): %ld mismatches", ci, c->np, c->k,
               c->rows, regime_names[c->regime], bad);
        weights_free(&W);
    }
    fprintf(stderr, "%ld outputs compared bit for bit, %ld against float64\n", n_compared, n_bound);
    if (amx) CHECK(n_compared > 0);
    return TEST_END();
}
