/* test_kernel_tile_amx_mxfp4.c — the tile recipe's AMX-BF16 kernel set for MXFP4 experts against
 * the recipe's formula (tdpbf16ps reference) bit for bit and against float64, for every m, both
 * A paths, the multi-tile entries and the edges of the scales the recipe folds. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"
#include "dtype/dtype.h"
#include "kernels/expert.h"
#include "kernels/ref/expert_ref.h"
#include "kernels/tile_bf16.h"
#include "test.h"
#define MAXM 64 /* the set's MR: past 32 tokens, blocks of 32 over each run of widened blocks */
#include "tile_amx_check.h"

/*
 * Each case draws E2M1 codes (all 16, -0 included), E8M0 scales in [slo, shi] (inside the
 * [2, 252] the recipe folds into bf16) and an optional bias, packs them with the set's packer,
 * and computes each output element as the tile recipe defines it for MXFP4: w = bf16(e2m1(code)
 * · 2^(s - 127)) from the field values (ldexp; the rounding to bf16 must be exact); acc = +0;
 * per 32-K block acc = moe_tile_bf16_dot_ref(acc, x block, w block, 16); v = acc + bias; gate/up
 * moe_f32_to_bf16(moe_xr_act(v_g, v_u)), down y = v. The AMX set must give those bits (NaN:
 * NaN-ness) for every m = 1..64 (its MR: past 32 tokens in blocks of 32, the last one partial),
 * token rows in one panel (stride positive or negative) and scattered (the gathered path), tile
 * by tile and through the multi-tile entries; nothing else in h / y is written, nothing past a
 * row's k codes or the tiles is read (both end at an inaccessible page), and the tile state is
 * released. Independently, finite cases are within an error bound of the same sums in float64.
 */

#define BLK 32
static size_t blocks_of(size_t k) { return k / BLK; }

/* ---- Values ---------------------------------------------------------------------------- */

/* Activations: bf16 near 1, near 2^-107 (against the largest scales), near 2^103 (against the
 * smallest), or with Inf / NaN among them. */
enum { NEAR_ONE, TINY, HUGE, SPECIALS, N_REGIMES };
static const char *const regime_names[N_REGIMES] = {"near 1", "2^-107", "2^103", "NaN and Inf"};

static uint16_t random_x(uint64_t *s, int regime)
{
    const uint64_t r = xorshift64(s);
    const uint16_t sign_mant = (uint16_t)(((r >> 40) & 0x8000u) | ((r >> 8) & 0x7Fu));
    if (regime == SPECIALS && r % 499 == 0)
        return (uint16_t)(0x7F80u | (r % 3 == 0 ? 0x41u : 0) | (sign_mant & 0x8000u));
    const unsigned base = regime == TINY ? 17 : regime == HUGE ? 227 : 122;
    return (uint16_t)(sign_mant | (base + (unsigned)(r % 7)) << 7);
}

/* E2M1 by its fields: sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 subnormal. */
static double e2m1(unsigned code)
{
    const unsigned e = code >> 1 & 3, m = code & 1;
    const double mag =
        e == 0 ? ldexp((double)m, -1) : ldexp(1.0 + ldexp((double)m, -1), (int)e - 1);
    return code & 8 ? -mag : mag;
}

static float random_bias(uint64_t *s)
{
    return (float)((double)(xorshift64(s) >> 11) * 0x1p-53 * 4.0 - 2.0);
}

/* ---- Weights ---------------------------------------------------------------------------- */

typedef struct weights {
    int np;
    size_t rows, k, n_tiles, tile_bytes;
    uint8_t *codes[2];     /* [rows][k / 2], low nibble the even element */
    uint8_t *scale[2];     /* [rows][k / 32] E8M0 */
    float *bias[2];        /* [rows], or NULL */
    unsigned char *packed; /* the tiles, ending at an inaccessible page */
    guarded g;
} weights;

static const moe_expert_kernels *const set = &moe_expert_mxfp4_tile_8x16__ref;

static void weights_make(weights *W, int np, size_t rows, size_t k, bool bias, int slo, int shi,
                         uint64_t *s)
{
    memset(W, 0, sizeof *W);
    W->np = np;
    W->rows = rows;
    W->k = k;
    W->n_tiles = (rows + ROWS - 1) / ROWS;
    W->tile_bytes = np == 2 ? set->gateup_tile_bytes((int64_t)k) : set->down_tile_bytes((int64_t)k);
    REQUIRE(W->tile_bytes > 0);
    moe_weight_src src[2];
    for (int p = 0; p < np; p++) {
        W->codes[p] = malloc(rows * k / 2);
        W->scale[p] = malloc(rows * blocks_of(k));
        REQUIRE(W->codes[p] && W->scale[p]);
        for (size_t i = 0; i < rows * k / 2; i++)
            W->codes[p][i] = (uint8_t)(xorshift64(s) >> 24);
        for (size_t i = 0; i < rows * blocks_of(k); i++)
            W->scale[p][i] = (uint8_t)(slo + (int)(xorshift64(s) % (uint64_t)(shi - slo + 1)));
        if (bias) {
            W->bias[p] = malloc(rows * sizeof(float));
            REQUIRE(W->bias[p]);
            for (size_t r = 0; r < rows; r++)
                W->bias[p][r] = random_bias(s);
        }
        src[p] = (moe_weight_src){.data = W->codes[p],
                                  .dtype = MOE_DTYPE_F4_E2M1,
                                  .rows = (int64_t)rows,
                                  .cols = (int64_t)k,
                                  .row_stride = (int64_t)(k / 2),
                                  .col_stride = 1,
                                  .scale = W->scale[p],
                                  .scale_dtype = MOE_DTYPE_F8_E8M0,
                                  .block_rows = 1,
                                  .block_cols = BLK,
                                  .scale_stride = (int64_t)blocks_of(k),
                                  .bias = W->bias[p],
                                  .bias_dtype = MOE_DTYPE_F32,
                                  .bias_stride = 1};
    }
    W->packed = guarded_alloc(&W->g, W->n_tiles * W->tile_bytes);
    const moe_status st = np == 2 ? set->pack_gateup(&src[0], &src[1], W->packed)
                                  : set->pack_down(&src[0], W->packed);
    REQUIRE(st == MOE_OK);
}

static void weights_free(weights *W)
{
    for (int p = 0; p < 2; p++) {
        free(W->codes[p]);
        free(W->scale[p]);
        free(W->bias[p]);
    }
    guarded_free(&W->g);
}

/* Weight (r, j) of projection p in float64: e2m1(code) · 2^(s - 127). */
static double w_of(const weights *W, int p, size_t r, size_t j)
{
    const uint8_t byte = W->codes[p][(r * W->k + j) / 2];
    const unsigned code = j % 2 ? byte >> 4 : byte & 15u;
    return ldexp(e2m1(code), (int)W->scale[p][r * blocks_of(W->k) + j / BLK] - 127);
}

/* ---- Expected values -------------------------------------------------------------------- */

/* v = the recipe's sum over K of token row x and weight row r of projection p, + bias. */
static float ref_v(const weights *W, int p, size_t r, const uint16_t *x)
{
    float acc = 0.0f;
    for (size_t b = 0; b < blocks_of(W->k); b++) {
        uint16_t wc[BLK];
        for (size_t j = 0; j < BLK; j++) {
            const double w = w_of(W, p, r, BLK * b + j);
            wc[j] = moe_f32_to_bf16((float)w);
            REQUIRE((double)moe_bf16_to_f32(wc[j]) == w);
        }
        acc = moe_tile_bf16_dot_ref(acc, x + BLK * b, wc, BLK / 2);
    }
    return acc + (W->bias[p] ? W->bias[p][r] : 0.0f);
}

static double daz64(uint16_t c) { return (c & 0x7F80u) == 0 ? 0.0 : (double)moe_bf16_to_f32(c); }

/* The same sum in float64 and Σ |x·w| + |bias| (*mag). */
static double exact_v(const weights *W, int p, size_t r, const uint16_t *x, double *mag)
{
    double s = 0, a = 0;
    for (size_t j = 0; j < W->k; j++) {
        const double t = daz64(x[j]) * w_of(W, p, r, j);
        s += t;
        a += fabs(t);
    }
    const double b = W->bias[p] ? W->bias[p][r] : 0.0;
    *mag = a + fabs(b);
    return s + b;
}

/* Bound on |v - exact|: per block 16 FMAs per chain, the chains' sum and one addition into the
 * total, the bias, each at most 2^-24 relative of the magnitudes; flushes at most 2^-126 each. */
static double v_bound(size_t k, double mag)
{
    const double n = (double)(20 + blocks_of(k));
    return n * 0x1p-24 * mag + (double)(k + 3 * blocks_of(k)) * 0x1p-126;
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

/* h (bf16) or y (f32), ld apart, against float64. */
static long check_float64(const weights *W, const moe_act_params *act, const uint16_t *h,
                          const float *y, size_t ld)
{
    long bad = 0;
    for (size_t i = 0; i < MAXM; i++)
        for (size_t r = 0; r < W->rows; r++) {
            double mg, mu;
            const double g = exact_v(W, 0, r, xsrc[i], &mg), eg = v_bound(W->k, mg);
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
    int regime, act_kind, slo, shi; /* E8M0 scales in [slo, shi] */
} tcase;

static const tcase cases[] = {
    /* np, k, rows, bias, regime, act, scales */
    {2, 32, 16, false, NEAR_ONE, 0, 120, 124},
    {2, 96, 5, true, NEAR_ONE, 1, 118, 126},
    {2, 64, 16, true, TINY, 0, 248, 252},
    {2, 160, 13, false, HUGE, 2, 2, 6},
    {2, 2880, 16, true, NEAR_ONE, 2, 119, 123},
    {2, 128, 16, false, SPECIALS, 0, 120, 124},
    {1, 32, 16, true, NEAR_ONE, 0, 120, 124},
    {1, 96, 3, false, TINY, 0, 250, 252},
    {1, 224, 47, false, HUGE, 0, 2, 3},
    {1, 2048, 64, false, NEAR_ONE, 0, 119, 123},
    {1, 288, 35, true, SPECIALS, 0, 120, 124},
    /* groups of tiles: gate/up 2 per group up to 16 tokens, down 4 (2 from 17) */
    {2, 160, 70, true, NEAR_ONE, 1, 120, 124},
    {1, 256, 100, true, NEAR_ONE, 0, 120, 124},
    {2, 32, 128, true, NEAR_ONE, 2, 120, 124},
};
#define N_CASES (sizeof cases / sizeof cases[0])

#ifdef MOE_COMPILED_AVX512AMXBF16
static uint16_t hbuf[MAXM * (WANT_LD + HS_PAD)];
static float ybuf[MAXM * (WANT_LD + HS_PAD)];

static long run_kernels(const tcase *c, const weights *W, const moe_act_params *act, uint64_t *s)
{
    const moe_expert_kernels *amx = &moe_expert_mxfp4_tile_64x16__avx512amxbf16;
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
                        amx->gateup_tiles(m, c->k, x, tile, n, act, hbuf, ld, nv);
                    else if (W->np == 2)
                        amx->gateup(m, c->k, x, tile, act, hbuf + t * ROWS, ld, nv);
                    else if (multi)
                        amx->down_tiles(m, c->k, x, tile, n, ybuf, ld, nv);
                    else
                        amx->down(m, c->k, x, tile, ybuf + t * ROWS, ld, nv);
                    bad += tiles_in_use();
                }
                bad += compare_out(W->np, hbuf, ybuf, ld, m, W->rows, want_h, want_y, label);
            }
        rows_free(&R);
    }
    /* The last call (m = MAXM, scattered, tiles entry) against float64, finite cases only. */
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
    CHECK(moe_expert_mxfp4_tile_64x16__avx512amxbf16.mr == MAXM); /* every m of the set tested */
#else
    const bool amx = false;
    fprintf(stderr, "no AMX-BF16 kernels in this build: the AMX kernels are not run\n");
#endif
    uint64_t s = 0x13198A2E03707344u;
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
