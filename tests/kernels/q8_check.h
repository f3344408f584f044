/* q8_check.h — Q8-recipe expert kernel tests (MXFP4, INT4): token rows and one case's checks. */
#ifndef MOE_TEST_Q8_CHECK_H
#define MOE_TEST_Q8_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "expert_check.h"

#define Q8_BLK MOE_EXPERT_MXBLOCK

/* ---- Token rows (kernels/expert.h: int8 codes, then the f32 scales, then the corrections) - */

static inline size_t pad64(size_t n) { return (n + 63) / 64 * 64; }

/* Activation j of a prepared row of k values, dequantised: q_j · xs_b. */
static inline double q8_value(const unsigned char *row, size_t k, size_t j)
{
    float xs;
    memcpy(&xs, row + pad64(k) + j / Q8_BLK * 4, sizeof xs);
    return (int8_t)row[j] * (double)xs;
}

typedef struct tokens {
    int n;
    size_t k, bytes;
    guarded g[MAX_TOKENS];
    const void *row[MAX_TOKENS]; /* prepared rows, each ending at a PROT_NONE page */
    float *x[MAX_TOKENS];        /* the f32 values */
    double *xq[MAX_TOKENS];      /* the dequantised values the kernels read */
} tokens;

/* n rows of k values ~ sigma · N(0, 1), prepared by ks. */
static inline void tokens_init(tokens *t, const moe_expert_kernels *ks, int n, size_t k,
                               double sigma)
{
    t->n = n;
    t->k = k;
    t->bytes = ks->act_row_bytes((int64_t)k);
    REQUIRE(t->bytes == pad64(k) + 2 * pad64(k / Q8_BLK * 4));
    for (int i = 0; i < n; i++) {
        t->x[i] = malloc(k * sizeof(float));
        t->xq[i] = malloc(k * sizeof(double));
        REQUIRE(t->x[i] && t->xq[i]);
        for (size_t c = 0; c < k; c++)
            t->x[i][c] = (float)(sigma * gauss());
        unsigned char *row = guarded_alloc(&t->g[i], t->bytes);
        memset(row, 0xEE, t->bytes);
        ks->prepare_act(k, t->x[i], row);
        for (size_t c = 0; c < k; c++)
            t->xq[i][c] = q8_value(row, k, c);
        t->row[i] = row;
    }
}

static inline void tokens_free(tokens *t)
{
    for (int i = 0; i < t->n; i++) {
        guarded_free(&t->g[i]);
        free(t->x[i]);
        free(t->xq[i]);
    }
}

/* ---- One case ----------------------------------------------------------------------------- */

/* Against the exact activations the Q8 recipe must stay within docs/design.md's 2e-2 overall: the
 * cases' relative errors pooled (weighted by their outputs), as a block output pools many
 * rows. One small case alone (a single block of one row) may stray a little above it by
 * chance, so each case is only held to 5e-2. */
#define Q8_CASE_TOL 5e-2

/* The token counts around the switches of the sets' paths (expert_check.h). */
static const m_plan q8_mplan = {{1, 2, 3, 4, 5, 13}, 6, {7, 8, 9, 12, 13}, 5};

/* One projection's exact values: w [n, k] row-major and the bias [n] (zeros without one). */
typedef struct exact_proj {
    const double *w, *b;
} exact_proj;

/* One case of a set, r holding its packing and its reference's of g and u (gate/up: kind is
 * the activation's) or of g alone (down): check_kernel's every m, reference bits and guards;
 * every output against float64 from the activations the kernels read (1e-5) and from the f32
 * ones (Q8_CASE_TOL, and pooled). */
static inline void q8_check_case(const xset *xs, runner *r, const tokens *tok, exact_proj g,
                                 exact_proj u, int kind, const char *what)
{
    const size_t n = r->n, total = (size_t)tok->n * n;
    const int64_t k = (int64_t)r->k;
    double *gq = malloc(total * sizeof(double)), *uq = malloc(total * sizeof(double));
    double *gx = malloc(total * sizeof(double)), *ux = malloc(total * sizeof(double));
    double *wantq = malloc(total * sizeof(double)), *wantx = malloc(total * sizeof(double));
    double *got = malloc(total * sizeof(double));
    REQUIRE(gq && uq && gx && ux && wantq && wantx && got);
    for (int t = 0; t < tok->n; t++)
        for (size_t i = 0; i < n; i++) {
            const size_t o = (size_t)t * n + i;
            gq[o] = dot_exact(g.w + (int64_t)i * k, tok->xq[t], k) + g.b[i];
            gx[o] = dot_exact_f(g.w + (int64_t)i * k, tok->x[t], k) + g.b[i];
            uq[o] = r->gateup ? dot_exact(u.w + (int64_t)i * k, tok->xq[t], k) + u.b[i] : 0;
            ux[o] = r->gateup ? dot_exact_f(u.w + (int64_t)i * k, tok->x[t], k) + u.b[i] : 0;
        }
    moe_act_params act = {0};
    if (r->gateup) act = clipping_act(kind, uq, total);
    r->act = r->gateup ? &act : NULL;
    for (size_t i = 0; i < total; i++) {
        wantq[i] = r->gateup ? act_d(&act, gq[i], uq[i]) : gq[i];
        wantx[i] = r->gateup ? act_d(&act, gx[i], ux[i]) : gx[i];
    }
    check_kernel(xs, r, tok->row, tok->n, &q8_mplan, what, got);
    const double eq = rel_err(got, wantq, total), ex = rel_err(got, wantx, total);
    CHECKF(eq <= 1e-5, "%s %s k=%zu n=%zu: error %.3g vs the dequantised activations", xs->name,
           what, r->k, n, eq);
    CHECKF(ex <= Q8_CASE_TOL, "%s %s k=%zu n=%zu: error %.3g vs the f32 activations", xs->name,
           what, r->k, n, ex);
    pool_add(ex, total);
    free(gq), free(uq), free(gx), free(ux), free(wantq), free(wantx), free(got);
}

/* y[0..15]: the set's down over src (one tile of k inputs) for one token x. */
static inline void q8_down_one(const moe_expert_kernels *ks, const moe_weight_src *src, size_t k,
                               const float *x, float *y)
{
    unsigned char *packed = aligned_alloc(64, ks->down_tile_bytes((int64_t)k));
    unsigned char *row = malloc(ks->act_row_bytes((int64_t)k));
    REQUIRE(packed && row);
    CHECK_STATUS(ks->pack_down(src, packed), MOE_OK);
    ks->prepare_act(k, x, row);
    const void *rows[1] = {row};
    ks->down(1, k, rows, packed, y, 16, 16);
    free(packed);
    free(row);
}

/* ---- Packing at the door ----------------------------------------------------------------- */

/* What the packers of both 4-bit formats do alike (kernels/ref/expert_w4_pack.h) with gate sg
 * and up su of one shape, refused leaving dst alone: sg and su pack; a NULL destination,
 * shapes apart, col_stride 2, a bf16 weight, no rows, a row stride past 64 bits, columns past
 * 2^40 and no source at all are refused. */
static inline void expect_w4_rejects(const moe_expert_kernels *ks, const moe_weight_src *sg,
                                     const moe_weight_src *su)
{
    guarded gd;
    void *dst =
        guarded_alloc(&gd, ks->gateup_tile_bytes(su->cols) * (size_t)((su->rows + NR - 1) / NR));
    CHECK_STATUS(ks->pack_gateup(sg, su, dst), MOE_OK);
    guarded_free(&gd);
    CHECK_STATUS(ks->pack_gateup(sg, su, NULL), MOE_EINVAL);
    moe_weight_src t = *su;
    t.rows = su->rows - 1;
    expect_reject(ks, sg, &t, MOE_ESHAPE, "differ in shape");
    t = *su;
    t.col_stride = 2;
    expect_reject(ks, sg, &t, MOE_EUNSUPPORTED, "up: col_stride 2");
    t = *su;
    t.dtype = MOE_DTYPE_BF16;
    expect_reject(ks, sg, &t, MOE_EDTYPE, "weight dtype bf16");
    t = *su;
    t.rows = 0;
    char shape[64];
    snprintf(shape, sizeof shape, "down: shape [0, %lld]", (long long)su->cols);
    expect_reject(ks, &t, NULL, MOE_ESHAPE, shape);
    t = *su;
    t.row_stride = INT64_MAX / 4;
    expect_reject(ks, &t, NULL, MOE_EOVERFLOW, "stride");
    t = *su;
    t.cols = (int64_t)1 << 41;
    expect_reject(ks, &t, NULL, MOE_EOVERFLOW, "limit of 2^40");
    expect_reject(ks, NULL, NULL, MOE_EINVAL, "NULL");
}

#endif
