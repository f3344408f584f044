/* test_kernel_tile_amx_int4.c — the tile recipe's AMX-BF16 kernel set for INT4 group experts
 * against the recipe's formula (tdpbf16ps reference) bit for bit and against float64, for every m,
 * both A paths, the multi-tile entries, group sizes 32..256 and scales from 2^-100 to 2^100. */
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
#include "tile_amx_check.h"

/*
 * Each case draws INT4 nibbles (all 16), f32 group scales of magnitude 2^elo .. 2^ehi (either
 * sign, one in 16 zero), a group size and an optional bias, packs them with the set's packer,
 * and computes each output element as the tile recipe defines it for INT4: q = u - 8 as bf16
 * (exact); acc = +0; per group C = +0, per 32-K block of the group C = moe_tile_bf16_dot_ref(C,
 * x block, q block, 16), then acc = fmaf(C, scale, acc); v = acc + bias; gate/up
 * moe_f32_to_bf16(moe_xr_act(v_g, v_u)), down y = v. The AMX set must give those bits (NaN:
 * NaN-ness) for every m = 1..32 (its MR), token rows in one panel (stride positive or negative)
 * and scattered (the gathered path), tile by tile and through the multi-tile entries; nothing
 * else in h / y is written, nothing past a row's k codes or the tiles is read (both end at an
 * inaccessible page), and the tile state is released. Independently, finite cases are within
 * an error bound of the same sums in float64.
 */

#define BLK 32

/* ---- Values ---------------------------------------------------------------------------- */

/* Activations: bf16 near 1, near 2^-107 (against scales up to 2^100), near 2^103 (against
 * scales down to 2^-100), or with Inf / NaN among them. */
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

static double unit(uint64_t *s) { return (double)(xorshift64(s) >> 11) * 0x1p-53; }

/* ---- Weights ---------------------------------------------------------------------------- */

typedef struct weights {
    int np;
    size_t rows, k, group, n_tiles, tile_bytes;
    uint8_t *codes[2];     /* [rows][k / 2], low nibble the even element */
    float *scale[2];       /* [rows][k / group] */
    float *bias[2];        /* [rows], or NULL */
    unsigned char *packed; /* the tiles, ending at an inaccessible page */
    guarded g;
} weights;

static const moe_expert_kernels *const set = &moe_expert_int4_tile_8x16__ref;

static void weights_make(weights *W, int np, size_t rows, size_t k, size_t group, bool bias,
                         int elo, int ehi, uint64_t *s)
{
    memset(W, 0, sizeof *W);
    W->np = np;
    W->rows = rows;
    W->k = k;
    W->group = group;
    W->n_tiles = (rows + ROWS - 1) / ROWS;
    W->tile_bytes = np == 2 ? set->gateup_tile_bytes((int64_t)k) : set->down_tile_bytes((int64_t)k);
    REQUIRE(W->tile_bytes > 0);
    const size_t ng = k / group;
    moe_weight_src src[2];
    for (int p = 0; p < np; p++) {
        W->codes[p] = malloc(rows * k / 2);
        W->scale[p] = malloc(rows * ng * sizeof(float));
        REQUIRE(W->codes[p] && W->scale[p]);
        for (size_t i = 0; i < rows * k / 2; i++)
            W->codes[p][i] = (uint8_t)(xorshift64(s) >> 24);
        for (size_t i = 0; i < rows * ng; i++) {
            const uint64_t r = xorshift64(s);
            const int e = elo + (int)(r % (uint64_t)(ehi - elo + 1));
            const float v = (float)ldexp(1.0 + unit(s), e);
            W->scale[p][i] = r % 16 == 7 ? 0.0f : r % 2 ? -v : v;
        }
        if (bias) {
            W->bias[p] = malloc(rows * sizeof(float));
            REQUIRE(W->bias[p]);
            for (size_t r = 0; r < rows; r++)
                W->bias[p][r] = (float)(unit(s) * 4.0 - 2.0);
        }
        src[p] = (moe_weight_src){.data = W->codes[p],
                                  .dtype = MOE_DTYPE_I32,
                                  .rows = (int64_t)rows,
                                  .cols = (int64_t)k,
                                  .row_stride = (int64_t)(k / 2),
                                  .col_stride = 1,
                                  .scale = W->scale[p],
                                  .scale_dtype = MOE_DTYPE_F32,
                                  .block_rows = 1,
                                  .block_cols = (int)group,
                                  .scale_stride = (int64_t)ng,
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

/* The integer of weight (r, j) of projection p: its nibble u, minus 8. */
static int q_of(const weights *W, int p, size_t r, size_t j)
{
    const uint8_t byte = W->codes[p][(r * W->k + j) / 2];
    return (int)(j % 2 ? byte >> 4 : byte & 15u) - 8;
}

static double s_of(const weights *W, int p, size_t r, size_t j)
{
    return W->scale[p][r * (W->k / W->group) + j / W->group];
}

/* ---- Expected values -------------------------------------------------------------------- */

/* v = the recipe's sum over K of token row x and weight row r of projection p, + bias. */
static float ref_v(const weights *W, int p, size_t r, const uint16_t *x)
{
    float acc = 0.0f;
    for (size_t g0 = 0; g0 < W->k; g0 += W->group) {
        float c = 0.0f;
        for (size_t b = g0; b < g0 + W->group; b += BLK) {
            uint16_t wc[BLK];
            for (size_t j = 0; j < BLK; j++) {
                wc[j] = moe_f32_to_bf16((float)q_of(W, p, r, b + j));
                REQUIRE(moe_bf16_to_f32(wc[j]) == (float)q_of(W, p, r, b + j));
            }
            c = moe_tile_bf16_dot_ref(c, x + b, wc, BLK / 2);
        }
        acc = fmaf(c, (float)s_of(W, p, r, g0), acc);
    }
    return acc + (W->bias[p] ? W->bias[p][r] : 0.0f);
}

static double daz64(uint16_t c) { return (c & 0x7F80u) == 0 ? 0.0 : (double)moe_bf16_to_f32(c); }

/* The same sum in float64, Σ |x·q·s| + |bias| (*mag) and the largest |s| of the row (*smax). */
static double exact_v(const weights *W, int p, size_t r, const uint16_t *x, double *mag,
                      double *smax)
{
    double sum = 0, a = 0, sm = 0;
    for (size_t j = 0; j < W->k; j++) {
        const double s = s_of(W, p, r, j), t = daz64(x[j]) * q_of(W, p, r, j) * s;
        sum += t;
        a += fabs(t);
        sm = fmax(sm, fabs(s));
    }
    const double b = W->bias[p] ? W->bias[p][r] : 0.0;
    *mag = a + fabs(b);
    *smax = sm;
    return sum + b;
}

/* Bound on |v - exact|: per block 16 FMAs per chain, the chains' sum and one addition into the
 * group's sum, per group one FMA into the total, the bias, each at most 2^-24 relative of the
 * magnitudes; flushes in the group sums at most 2^-126 each before the scale, and a denormal
 * total at most 2^-150 per FMA. */
static double v_bound(const weights *W, double mag, double smax)
{
    const double nb = (double)(W->k / BLK), ng = (double)(W->k / W->group);
    return (20 + nb + ng) * 0x1p-24 * mag + (double)(W->k + 3 * nb) * 0x1p-126 * smax +
           ng * 0x1p-149;
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
            double mg, mu, sg, su;
            const double g = exact_v(W, 0, r, xsrc[i], &mg, &sg), eg = v_bound(W, mg, sg);
            double got, want, bound;
            if (W->np == 1) {
                got = y[i * ld + r];
                want = g;
                bound = eg;
            } else {
                const double u = exact_v(W, 1, r, xsrc[i], &mu, &su), eu = v_bound(W, mu, su);
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
    size_t k, rows, group;
    bool bias;
    int regime, act_kind, elo, ehi; /* scales of magnitude 2^elo .. 2^ehi */
} tcase;

static const tcase cases[] = {
    /* np, k, rows, group, bias, regime, act, scales */
    {2, 32, 16, 32, false, NEAR_ONE, 0, -8, -5},
    {2, 96, 5, 32, true, NEAR_ONE, 1, -9, -4},
    {2, 128, 16, 64, true, TINY, 0, 96, 100},
    {2, 256, 13, 128, false, HUGE, 2, -100, -96},
    {2, 2048, 16, 32, true, NEAR_ONE, 2, -8, -5},
    {2, 256, 16, 128, false, SPECIALS, 0, -8, -5},
    {1, 32, 16, 32, true, NEAR_ONE, 0, -8, -5},
    {1, 128, 3, 128, false, TINY, 0, 98, 100},
    {1, 192, 47, 64, false, HUGE, 0, -100, -99},
    {1, 2048, 64, 128, false, NEAR_ONE, 0, -8, -5},
    {1, 512, 35, 256, true, SPECIALS, 0, -8, -5},
    /* groups of tiles: gate/up 2 per group up to 16 tokens, down 4 (2 from 17) */
    {2, 160, 70, 32, true, NEAR_ONE, 1, -8, -5},
    {1, 256, 100, 64, true, NEAR_ONE, 0, -8, -5},
    {2, 32, 128, 32, true, NEAR_ONE, 2, -8, -5},
};
#define N_CASES (sizeof cases / sizeof cases[0])

#ifdef MOE_COMPILED_AVX512AMXBF16
static uint16_t hbuf[MAXM * (WANT_LD + HS_PAD)];
static float ybuf[MAXM * (WANT_LD + HS_PAD)];

static long run_kernels(const tcase *c, const weights *W, const moe_act_params *act, uint64_t *s)
{
    const moe_expert_kernels *amx = &moe_expert_int4_tile_32x16__avx512amxbf16;
    const size_t ld = ROWS * W->n_tiles + HS_PAD, last = W->rows - ROWS * (W->n_tiles - 1);
    long bad = 0;
    for (int layout = 0; layout < N_LAYOUTS; layout++) {
        rows_map R;
        rows_place(&R, layout, c->k, (const uint16_t(*)[MAXK])xsrc, s);
        const void *const *x = (const void *const *)R.x;
        for (size_t m = 1; m <= MAXM; m++)
            for (int multi = 0; multi < 2; multi++) {
                char label[192];
                snprintf(label, sizeof label, "%s np=%d k=%zu rows=%zu group=%zu bias=%d %s %s",
                         multi ? "tiles entry" : "one tile per call", W->np, c->k, c->rows,
                         c->group, c->bias, regime_names[c->regime], layout_names[layout]);
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
    CHECK(moe_expert_int4_tile_32x16__avx512amxbf16.mr == MAXM); /* every m of the set tested */
#else
    const bool amx = false;
    fprintf(stderr, "no AMX-BF16 kernels in this build: the AMX kernels are not run\n");
#endif
    uint64_t s = 0xA4093822299F31D0u;
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const tcase *c = &cases[ci];
        REQUIRE(c->k <= MAXK && c->rows <= WANT_LD && c->k % c->group == 0);
        const moe_act_params act = {c->act_kind, 7.0f, 1.702f};
        weights W;
        weights_make(&W, c->np, c->rows, c->k, c->group, c->bias, c->elo, c->ehi, &s);
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
        CHECKF(bad == 0, "case %zu (np %d, k %zu, rows %zu, group %zu, %s): %ld mismatches", ci,
               c->np, c->k, c->rows, c->group, regime_names[c->regime], bad);
        weights_free(&W);
    }
    fprintf(stderr, "%ld outputs compared bit for bit, %ld against float64\n", n_compared, n_bound);
    if (amx) CHECK(n_compared > 0);
    return TEST_END();
}
