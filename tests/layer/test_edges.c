/* test_edges.c — numbers at the edges: denormal inputs, 100 000-token batches, experts that
 * receive no tokens or every token. */
#include <float.h>
#include <xmmintrin.h> /* _mm_getcsr: MXCSR is read here, never written */

#include "ckpt_patch.h"
#include "layer_fixture.h"

/*
 * The reference is float64 from the checkpoint (layer_fixture.h, route_oracle.h), with the
 * tolerances of docs/design.md: logits 1e-5 of sum |x·w|, routing ids exact except at the oracle's
 * near-ties, combine weights 1e-5, block output relative Frobenius error 1e-2.
 *
 * Denormals: a forward leaves MXCSR's control bits as they were (checked). The f32 kernels
 * compute with denormal operands like any other; the bf16 recipe's dot product reads denormal
 * bf16 operands as zero and flushes denormal sums: vdpbf16ps does so whatever MXCSR says, the
 * AVX-512 set emulating it sets DAZ and FTZ around its steps and puts MXCSR back
 * (docs/layer.md, "Denormal inputs"). Either way rows with
 * some denormal entries must stay within the tolerance, and rows of nothing but denormals
 * (whose exact output is below 1e-70) must give finite, tiny outputs and valid routing.
 */

enum { THREADS = 1 };

static double max_d(double a, double b) { return a > b ? a : b; }

/* ---- The float64 reference of one MoE layer ------------------------------------------------ */

typedef struct ref_layer {
    int64_t h;
    int e, k;
    route_cfg cfg;
    double *router_w; /* [E][H] */
    float *cbias;     /* [E] or NULL */
    fx_mlp *experts;  /* [E] */
    fx_mlp shared;
    bool has_shared;
    oracle_row *o;
    /* MLP outputs for the one input a reference is used with: [T][E + 1][H], slot E for the
     * shared expert; done[][] says which are computed. Levels and recipes share them. */
    double *memo;
    bool *done;
    size_t memo_t;
} ref_layer;

static void ref_load(const moe_model *m, int layer, ref_layer *r)
{
    const moe_layer_desc *ld = &moe_model_desc_of(m)->layers[layer];
    memset(r, 0, sizeof *r);
    REQUIRE(ld->kind != MOE_LAYER_DENSE);
    r->h = moe_model_desc_of(m)->hidden;
    r->e = ld->routing.n_experts;
    r->k = ld->routing.top_k;
    r->cfg = fx_route_cfg(&ld->routing);
    REQUIRE(!fx_find(m, layer, MOE_GROUP_ROUTER, -1, MOE_ROLE_ROUTER_BIAS));
    const moe_tensor *w = fx_find(m, layer, MOE_GROUP_ROUTER, -1, MOE_ROLE_ROUTER_WEIGHT);
    REQUIRE(w);
    r->router_w = fx_alloc(r->e * r->h);
    for (int64_t i = 0; i < r->e * r->h; i++)
        r->router_w[i] = fx_decode(w, (uint64_t)i);
    const moe_tensor *cb = fx_find(m, layer, MOE_GROUP_ROUTER, -1, MOE_ROLE_CORRECTION_BIAS);
    if (cb) {
        r->cbias = malloc((size_t)r->e * sizeof *r->cbias);
        REQUIRE(r->cbias);
        for (int i = 0; i < r->e; i++)
            r->cbias[i] = (float)fx_decode(cb, (uint64_t)i);
    }
    r->experts = calloc((size_t)r->e, sizeof *r->experts);
    REQUIRE(r->experts);
    for (int x = 0; x < r->e; x++)
        fx_mlp_load(m, layer, MOE_GROUP_ROUTED, x, &r->experts[x]);
    r->has_shared = ld->n_shared > 0;
    if (r->has_shared) fx_mlp_load(m, layer, MOE_GROUP_SHARED, -1, &r->shared);
    r->o = malloc(sizeof *r->o);
    REQUIRE(r->o);
}

/* Adds SCALE · mlp_slot(x_t) to Y (slot E: the shared expert), computing it once per token. */
static void ref_mlp_add(ref_layer *r, size_t t, int slot, const double *x, double scale, double *y)
{
    const size_t slots = (size_t)r->e + 1, h = (size_t)r->h;
    if (t >= r->memo_t) {
        const size_t n = t + 1 > 2 * r->memo_t ? t + 1 : 2 * r->memo_t;
        r->memo = realloc(r->memo, n * slots * h * sizeof *r->memo);
        r->done = realloc(r->done, n * slots * sizeof *r->done);
        REQUIRE(r->memo && r->done);
        memset(r->done + r->memo_t * slots, 0, (n - r->memo_t) * slots * sizeof *r->done);
        r->memo_t = n;
    }
    double *m = r->memo + (t * slots + (size_t)slot) * h;
    if (!r->done[t * slots + (size_t)slot]) {
        memset(m, 0, h * sizeof *m);
        fx_mlp_apply(slot < r->e ? &r->experts[slot] : &r->shared, x, 1.0, m);
        r->done[t * slots + (size_t)slot] = true;
    }
    for (size_t c = 0; c < h; c++)
        y[c] += scale * m[c];
}

static void ref_free(ref_layer *r)
{
    free(r->router_w);
    free(r->cbias);
    for (int x = 0; x < r->e; x++)
        fx_mlp_free(&r->experts[x]);
    free(r->experts);
    if (r->has_shared) fx_mlp_free(&r->shared);
    free(r->o);
    free(r->memo);
    free(r->done);
}

/* One forward's outputs. */
typedef struct fwd {
    size_t n;
    float *logits, *w, *out;
    int32_t *ids;
} fwd;

static void fwd_alloc(fwd *f, size_t n, const ref_layer *r)
{
    f->n = n;
    f->logits = malloc(n * (size_t)r->e * sizeof *f->logits);
    f->w = malloc(n * (size_t)r->k * sizeof *f->w);
    f->ids = malloc(n * (size_t)r->k * sizeof *f->ids);
    f->out = malloc(n * (size_t)r->h * sizeof *f->out);
    REQUIRE(f->logits && f->w && f->ids && f->out);
}

static void fwd_free(fwd *f)
{
    free(f->logits);
    free(f->w);
    free(f->ids);
    free(f->out);
}

/* Runs L on the rows X (f32, or bf16 when XB is not NULL) into F; returns the status. MXCSR
 * must come back unchanged. */
static moe_status fwd_run_as(const moe_layer *l, const ref_layer *r, const float *x,
                             const uint16_t *xb, fwd *f)
{
    size_t ws_size;
    void *ws = fx_workspace(l, f->n, &ws_size);
    moe_forward_args a = {.size = sizeof a,
                          .n_tokens = f->n,
                          .hidden_size = (size_t)r->h,
                          .hidden = xb ? (const void *)xb : (const void *)x,
                          .hidden_dtype = xb ? MOE_DTYPE_BF16 : MOE_DTYPE_F32,
                          .out = f->out,
                          .logits_out = f->logits,
                          .ids_out = f->ids,
                          .weights_out = f->w,
                          .workspace = ws,
                          .workspace_size = ws_size};
    /* The control bits: DAZ (6), exception masks (7-12), rounding (13-14), FTZ (15). The
     * exception flags below them are sticky status that an OpenMP runtime may clear. */
    const unsigned control = 0xFFC0u, csr = _mm_getcsr() & control;
    const moe_status st = moe_layer_forward(l, &a);
    CHECKF((_mm_getcsr() & control) == csr, "forward changed the MXCSR controls from %#x to %#x",
           csr, _mm_getcsr() & control);
    free(ws);
    return st;
}

static moe_status fwd_run(const moe_layer *l, const ref_layer *r, const float *x, fwd *f)
{
    return fwd_run_as(l, r, x, NULL, f);
}

typedef struct stats {
    double err2, norm2, logit_err;
    int ties;
} stats;

/* Checks rows [from, to) of F against the reference for inputs X (everything in double; X
 * must be the same on every call with R). */
static void check_rows(ref_layer *r, const float *x, const fwd *f, size_t from, size_t to, stats *s,
                       const char *what)
{
    const size_t h = (size_t)r->h, e = (size_t)r->e, k = (size_t)r->k;
    double *xd = fx_alloc(r->h), *y = fx_alloc(r->h);
    for (size_t t = from; t < to; t++) {
        for (size_t c = 0; c < h; c++) {
            xd[c] = x[t * h + c];
            y[c] = 0;
        }
        for (size_t i = 0; i < e; i++) {
            double z = 0, mag = 0;
            for (size_t c = 0; c < h; c++) {
                z += xd[c] * r->router_w[i * h + c];
                mag += fabs(xd[c] * r->router_w[i * h + c]);
            }
            const double err = fabs(f->logits[t * e + i] - z) / mag;
            s->logit_err = max_d(s->logit_err, err);
            CHECKF(err <= 1e-5, "%s: token %zu logit %zu = %.9g, reference %.9g", what, t, i,
                   (double)f->logits[t * e + i], z);
        }
        oracle_route(&r->cfg, f->logits + t * e, r->cbias, NULL, r->o);
        bool same = true;
        for (size_t j = 0; j < k; j++)
            same &= f->ids[t * k + j] == r->o->ids[j];
        const bool tie = !same && o_near_tie(r->k, r->e, r->o);
        CHECKF(same || tie, "%s: token %zu: ids differ from the oracle's", what, t);
        s->ties += tie;
        for (size_t j = 0; j < k; j++) {
            const int id = same ? r->o->ids[j] : f->ids[t * k + j];
            const double wj = same ? r->o->w[j] : f->w[t * k + j];
            if (same)
                CHECKF(fabs(f->w[t * k + j] - wj) <= 1e-5 * max_d(fabs(wj), 1e-3),
                       "%s: token %zu weight %zu = %.9g, oracle %.9g", what, t, j,
                       (double)f->w[t * k + j], wj);
            if (id >= 0 && id < r->e) ref_mlp_add(r, t, id, xd, wj, y);
        }
        if (r->has_shared) ref_mlp_add(r, t, r->e, xd, 1.0, y);
        for (size_t c = 0; c < h; c++) {
            const double d = f->out[t * h + c] - y[c];
            s->err2 += d * d;
            s->norm2 += y[c] * y[c];
        }
    }
    free(xd);
    free(y);
}

/* Ids of every row distinct and in [0, E); weights and outputs finite. */
static void check_sane(const ref_layer *r, const fwd *f, size_t from, size_t to, const char *what)
{
    const size_t h = (size_t)r->h, k = (size_t)r->k;
    for (size_t t = from; t < to; t++) {
        for (size_t j = 0; j < k; j++) {
            const int32_t id = f->ids[t * k + j];
            CHECKF(id >= 0 && id < r->e && isfinite(f->w[t * k + j]),
                   "%s: token %zu slot %zu: id %d weight %g", what, t, j, id,
                   (double)f->w[t * k + j]);
            for (size_t i = 0; i < j; i++)
                CHECKF(f->ids[t * k + i] != id, "%s: token %zu names expert %d twice", what, t, id);
        }
        for (size_t c = 0; c < h; c++)
            CHECKF(isfinite(f->out[t * h + c]), "%s: token %zu out[%zu] = %g", what, t, c,
                   (double)f->out[t * h + c]);
    }
}

/* ---- Denormal hidden states ---------------------------------------------------------------- */

enum { DN_MIXED = 8, DN_ALL = 4, DN_T = DN_MIXED + DN_ALL };

/* Rows [0, DN_MIXED): normal values with every third entry a denormal; rows after: every
 * entry a denormal (or zero). Returns the number of denormal entries. */
static size_t denormal_rows(size_t h, float *x)
{
    size_t n = 0;
    fx_hidden(71, DN_T * h, x);
    for (size_t t = 0; t < DN_T; t++)
        for (size_t c = 0; c < h; c++) {
            float *v = &x[t * h + c];
            if (t >= DN_MIXED || c % 3 == 0) *v = (float)((double)*v * 0x1p-130);
            n += fpclassify(*v) == FP_SUBNORMAL;
        }
    return n;
}

/* One level and recipe on the denormal rows X (given as bf16 when XB is not NULL: X is then
 * their f32 value). */
static void denormal_case(const moe_model *m, int layer, ref_layer *r, const moe_cpu_caps *caps,
                          int recipe, const float *x, const uint16_t *xb, const char *what)
{
    const size_t h = (size_t)r->h;
    const moe_layer_options opts = fx_options(THREADS, recipe);
    const moe_layer_tuning tune = {caps, 0};
    moe_layer *l = NULL;
    moe_status st = moe_layer_create_tuned(m, layer, &opts, &tune, &l);
    CHECKF(st == MOE_OK, "%s: create: %s", what, moe_last_error());
    if (st) return;
    fwd f;
    fwd_alloc(&f, DN_T, r);
    st = fwd_run_as(l, r, x, xb, &f);
    CHECKF(st == MOE_OK, "%s: forward: %s", what, moe_last_error());
    if (st == MOE_OK) {
        stats s = {0, 0, 0, 0};
        check_rows(r, x, &f, 0, DN_MIXED, &s, what);
        const double rel = sqrt(s.err2 / s.norm2);
        CHECKF(rel <= 1e-2, "%s: rows with denormal entries: relative error %.3g", what, rel);
        check_sane(r, &f, 0, DN_T, what);
        double big = 0;
        for (size_t v = DN_MIXED * h; v < DN_T * h; v++)
            big = max_d(big, fabs(f.out[v]));
        CHECKF(big <= 1e-30, "%s: all-denormal rows give |out| up to %g", what, big);
        fprintf(stderr, "%s: mixed rows %.3g (logits %.2g), all-denormal rows |out| <= %g\n", what,
                rel, s.logit_err, big);
    }
    fwd_free(&f);
    moe_layer_destroy(l);
}

/* Every level and recipe with f32 input; the best level also with the same values as bf16
 * (which reaches the AVX512-BF16 gate where the machine has it). */
static void test_denormals(const fam_case *fc, const char *dir)
{
    fx_write_model(dir, fc->config, 51);
    moe_model *m = fx_open(dir, false);
    ref_layer r, rb;
    ref_load(m, fc->moe_layer, &r);
    ref_load(m, fc->moe_layer, &rb);
    const size_t h = (size_t)r.h;
    float *x = malloc(DN_T * h * sizeof *x), *xr = malloc(DN_T * h * sizeof *xr);
    uint16_t *xb = malloc(DN_T * h * sizeof *xb);
    REQUIRE(x && xr && xb);
    REQUIRE(denormal_rows(h, x) > DN_T * h / 2); /* the input really is mostly denormal */
    size_t kept = 0;
    for (size_t i = 0; i < DN_T * h; i++) {
        xb[i] = moe_f32_to_bf16(x[i]);
        xr[i] = moe_bf16_to_f32(xb[i]);
        kept += fpclassify(xr[i]) == FP_SUBNORMAL;
    }
    REQUIRE(kept > DN_T * h / 2); /* and stays so in bf16 */
    moe_cpu_caps caps[8];
    const char *names[8];
    const size_t n_levels = fx_levels(caps, names);
    for (size_t i = 0; i < n_levels; i++) {
        for (int recipe = MOE_RECIPE_F32; recipe <= MOE_RECIPE_BF16; recipe++) {
            for (int bf16 = 0; bf16 < (i + 1 == n_levels ? 2 : 1); bf16++) {
                char what[128];
                snprintf(what, sizeof what, "%s denormals at %s, %s recipe, %s input", fc->name,
                         names[i], recipe == MOE_RECIPE_BF16 ? "bf16" : "f32",
                         bf16 ? "bf16" : "f32");
                denormal_case(m, fc->moe_layer, bf16 ? &rb : &r, &caps[i], recipe, bf16 ? xr : x,
                              bf16 ? xb : NULL, what);
            }
        }
    }
    free(x);
    free(xr);
    free(xb);
    ref_free(&r);
    ref_free(&rb);
    moe_model_close(m);
    fx_remove_model(dir);
}

/* Routers on denormal logits: every row the oracle's answer (or a true near-tie). */
static void test_router_denormals(void)
{
    enum { T = 64, E = 16, K = 4 };
    float bias[E], z[T * E];
    for (int i = 0; i < E; i++)
        bias[i] = (float)(0.001 * i);
    for (int i = 0; i < T * E; i++)
        z[i] = (float)(fx_gauss(73, (uint64_t)i) * (i < T * E / 2 ? 0x1p-130 : 0x1p-140));
    const route_cfg cfgs[3] = {
        {"softmax_topk", MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, E, K, 1, 1, true, 1.0f},
        {"noaux_tc", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, E, K, 4, 2, true, 2.5f},
        {"topk_softmax", MOE_ROUTE_TOPK_SOFTMAX, MOE_SCORE_SOFTMAX, E, K, 1, 1, true, 1.0f},
    };
    oracle_row *o = malloc(sizeof *o);
    REQUIRE(o);
    for (int c = 0; c < 3; c++) {
        moe_router_params p = route_params(&cfgs[c], bias, NULL, 0);
        moe_router *r = NULL;
        REQUIRE(moe_router_create(&p, &r) == MOE_OK);
        int32_t ids[T * K];
        float w[T * K];
        CHECK_STATUS(moe_router_forward(r, T, z, NULL, MOE_DTYPE_INVALID, ids, w), MOE_OK);
        for (int t = 0; t < T; t++) {
            oracle_route(&cfgs[c], z + t * E, bias, NULL, o);
            bool same = true;
            for (int j = 0; j < K; j++)
                same &= ids[t * K + j] == o->ids[j];
            CHECKF(same || o_near_tie(K, E, o), "%s: denormal row %d: ids differ", cfgs[c].name, t);
            for (int j = 0; j < K && same; j++)
                CHECKF(fabs(w[t * K + j] - o->w[j]) <= 1e-5 * max_d(fabs(o->w[j]), 1e-3),
                       "%s: denormal row %d weight %d = %.9g, oracle %.9g", cfgs[c].name, t, j,
                       (double)w[t * K + j], o->w[j]);
        }
        moe_router_destroy(r);
    }
    free(o);
}

/* ---- 100 000 tokens ------------------------------------------------------------------------ */

enum { BIG_T = 100000 };

/* Routers over 100 000 tokens: a grouped noaux_tc router against the oracle on every row, and
 * a hash router whose table has 100 000 rows, one per token, read with i64 ids. */
static void test_router_big(void)
{
    enum { E = 64, K = 6 };
    float *z = malloc((size_t)BIG_T * E * sizeof *z), *w = malloc((size_t)BIG_T * K * sizeof *w);
    int32_t *ids = malloc((size_t)BIG_T * K * sizeof *ids);
    int32_t *table = malloc((size_t)BIG_T * K * sizeof *table);
    int64_t *tokens = malloc((size_t)BIG_T * sizeof *tokens);
    oracle_row *o = malloc(sizeof *o);
    REQUIRE(z && w && ids && table && tokens && o);
    float bias[E];
    for (int i = 0; i < E; i++)
        bias[i] = (float)(0.05 * fx_gauss(74, (uint64_t)i));
    for (size_t i = 0; i < (size_t)BIG_T * E; i++)
        z[i] = (float)fx_gauss(75, i);
    const route_cfg noaux = {"noaux_tc", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, E, K, 8, 4, true,
                             2.5f};
    moe_router_params p = route_params(&noaux, bias, NULL, 0);
    moe_router *r = NULL;
    REQUIRE(moe_router_create(&p, &r) == MOE_OK);
    CHECK_STATUS(moe_router_forward(r, BIG_T, z, NULL, MOE_DTYPE_INVALID, ids, w), MOE_OK);
    moe_router_destroy(r);
    int bad = 0, ties = 0;
    for (size_t t = 0; t < BIG_T; t++) {
        oracle_route(&noaux, z + t * E, bias, NULL, o);
        bool same = true;
        for (int j = 0; j < K; j++)
            same &= ids[t * K + j] == o->ids[j] &&
                    fabs(w[t * K + j] - o->w[j]) <= 1e-5 * max_d(fabs(o->w[j]), 1e-3);
        const bool tie = !same && o_near_tie(K, E, o);
        ties += tie;
        if (!same && !tie && bad++ < 5)
            CHECKF(false, "noaux_tc, %d tokens: row %zu differs", BIG_T, t);
    }
    CHECKF(bad == 0, "noaux_tc, %d tokens: %d rows differ from the oracle", BIG_T, bad);
    CHECKF(ties < BIG_T / 100, "noaux_tc: %d near-ties", ties);

    rng g = {76};
    rng_table(&g, BIG_T, K, E, table);
    for (size_t t = 0; t < BIG_T; t++)
        tokens[t] = (int64_t)(BIG_T - 1 - t);
    const route_cfg hash = {"hash", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, E, K, 1, 1, true, 1.5f};
    p = route_params(&hash, NULL, table, BIG_T);
    REQUIRE(moe_router_create(&p, &r) == MOE_OK);
    CHECK_STATUS(moe_router_forward(r, BIG_T, z, tokens, MOE_DTYPE_I64, ids, w), MOE_OK);
    moe_router_destroy(r);
    bad = 0;
    for (size_t t = 0; t < BIG_T; t++) {
        const int32_t *row = table + (size_t)tokens[t] * K;
        oracle_route(&hash, z + t * E, NULL, row, o);
        bool same = true;
        for (int j = 0; j < K; j++)
            same &= ids[t * K + j] == row[j] &&
                    fabs(w[t * K + j] - o->w[j]) <= 1e-5 * max_d(fabs(o->w[j]), 1e-3);
        bad += !same;
    }
    CHECKF(bad == 0, "hash, %d tokens: %d rows differ from the table and oracle", BIG_T, bad);
    free(z);
    free(w);
    free(ids);
    free(table);
    free(tokens);
    free(o);
}

/* A tiny MoE layer (H = 64) so that 100 000 tokens take a moment. */
static const char cfg_tiny[] =
    "{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"num_hidden_layers\":1,"
    "\"intermediate_size\":64,\"moe_intermediate_size\":32,\"num_experts\":8,"
    "\"num_experts_per_tok\":2,\"norm_topk_prob\":true}";

enum { PATTERNS = 1009 };

/* The pattern row token T uses: a scrambled, non-periodic choice. */
static size_t pattern_of(size_t t) { return (size_t)(fx_hash(77, t) % PATTERNS); }

/* 100 000 tokens through one forward. Each token is one of PATTERNS rows; a forward of the
 * PATTERNS rows alone is checked against the reference, and every row of the big batch must
 * equal its pattern's row there bit for bit (a token's output does not depend on its batch),
 * so an index that wraps or strays anywhere in the big batch shows. */
static void test_layer_big(const char *dir)
{
    fx_write_model(dir, cfg_tiny, 52);
    moe_model *m = fx_open(dir, false);
    ref_layer r;
    ref_load(m, 0, &r);
    const size_t h = (size_t)r.h, k = (size_t)r.k, e = (size_t)r.e;
    const moe_layer_options opts = {
        .size = sizeof opts, .threads = THREADS, .logits_dtype = MOE_DTYPE_INVALID};
    moe_layer *l = NULL;
    REQUIRE(moe_layer_create(m, 0, &opts, &l) == MOE_OK);

    float *xp = malloc(PATTERNS * h * sizeof *xp), *xb = malloc((size_t)BIG_T * h * sizeof *xb);
    REQUIRE(xp && xb);
    fx_hidden(78, PATTERNS * h, xp);
    for (size_t t = 0; t < BIG_T; t++)
        memcpy(xb + t * h, xp + pattern_of(t) * h, h * sizeof *xb);
    fwd small, big;
    fwd_alloc(&small, PATTERNS, &r);
    fwd_alloc(&big, BIG_T, &r);
    CHECK_STATUS(fwd_run(l, &r, xp, &small), MOE_OK);
    stats s = {0, 0, 0, 0};
    check_rows(&r, xp, &small, 0, PATTERNS, &s, "tiny layer");
    CHECKF(sqrt(s.err2 / s.norm2) <= 1e-2, "tiny layer: relative error %.3g",
           sqrt(s.err2 / s.norm2));
    CHECK_STATUS(fwd_run(l, &r, xb, &big), MOE_OK);
    size_t bad = 0;
    int64_t count[64] = {0};
    for (size_t t = 0; t < BIG_T; t++) {
        const size_t p = pattern_of(t);
        const bool same = !memcmp(big.out + t * h, small.out + p * h, h * sizeof(float)) &&
                          !memcmp(big.ids + t * k, small.ids + p * k, k * sizeof(int32_t)) &&
                          !memcmp(big.w + t * k, small.w + p * k, k * sizeof(float)) &&
                          !memcmp(big.logits + t * e, small.logits + p * e, e * sizeof(float));
        if (!same && bad++ < 5)
            CHECKF(false, "%d tokens: token %zu differs from pattern %zu", BIG_T, t, p);
        for (size_t j = 0; j < k; j++)
            if (big.ids[t * k + j] >= 0 && big.ids[t * k + j] < (int32_t)e)
                count[big.ids[t * k + j]]++;
    }
    CHECKF(bad == 0, "%d tokens: %zu rows differ from their pattern's", BIG_T, bad);
    int64_t total = 0;
    for (size_t i = 0; i < e; i++)
        total += count[i];
    CHECK(total == (int64_t)BIG_T * (int64_t)k);
    fwd_free(&small);
    fwd_free(&big);
    free(xp);
    free(xb);
    moe_layer_destroy(l);
    ref_free(&r);
    moe_model_close(m);
    fx_remove_model(dir);
}

/* ---- One expert takes every token; others take none -------------------------------------- */

enum { HOT = 3, COLD_FROM = 8, SKEW_T = 70 };

/* The correction bias: expert HOT +100 (first in every row), experts from COLD_FROM -100 (in
 * no row: their groups are never kept); the others keep their values. */
static void skew_bias(void *ctx, unsigned char *buf, size_t len)
{
    const moe_tensor *t = ctx;
    const size_t w = moe_dtype_bits(t->dtype) / 8;
    for (size_t i = 0; i * w < len; i++) {
        if (i == HOT) fx_store(t->dtype, 100.0, buf + i * w);
        if (i >= COLD_FROM) fx_store(t->dtype, -100.0, buf + i * w);
    }
}

static void test_skewed(const char *dir)
{
    const fam_case *fc = &fam_cases[1]; /* deepseek_v3 bf16: noaux_tc, 16 experts, 4 groups */
    fx_write_model(dir, fc->config, 53);
    moe_model *m = fx_open(dir, false);
    const moe_tensor *cb =
        fx_find(m, fc->moe_layer, MOE_GROUP_ROUTER, -1, MOE_ROLE_CORRECTION_BIAS);
    REQUIRE(cb);
    ckpt_rewrite(cb, skew_bias, (void *)cb);
    moe_model_close(m);
    m = fx_open(dir, false);
    ref_layer r;
    ref_load(m, fc->moe_layer, &r);
    REQUIRE(r.cbias && r.cbias[HOT] == 100.0f && r.cbias[COLD_FROM] == -100.0f);
    const size_t h = (size_t)r.h, k = (size_t)r.k;
    float *x = malloc(SKEW_T * h * sizeof *x);
    REQUIRE(x);
    fx_hidden(79, SKEW_T * h, x);
    moe_cpu_caps caps[8];
    const char *names[8];
    const size_t n_levels = fx_levels(caps, names);
    for (size_t i = 0; i < n_levels; i++) {
        /* The bf16 recipe at the SIMD levels only: the portable set emulates vdpbf16ps one
         * lane at a time (slow; test_layer_numeric covers it), and here the routing skew is
         * what matters. */
        const bool fast_bf16 = i > 0;
        for (int recipe = MOE_RECIPE_F32; recipe <= (fast_bf16 ? MOE_RECIPE_BF16 : MOE_RECIPE_F32);
             recipe++) {
            char what[128];
            snprintf(what, sizeof what, "skewed routing at %s, %s recipe", names[i],
                     recipe == MOE_RECIPE_BF16 ? "bf16" : "f32");
            const moe_layer_options opts = fx_options(THREADS, recipe);
            const moe_layer_tuning tune = {&caps[i], 0};
            moe_layer *l = NULL;
            moe_status st = moe_layer_create_tuned(m, fc->moe_layer, &opts, &tune, &l);
            CHECKF(st == MOE_OK, "%s: create: %s", what, moe_last_error());
            if (st) continue;
            fwd f;
            fwd_alloc(&f, SKEW_T, &r);
            CHECK_STATUS(fwd_run(l, &r, x, &f), MOE_OK);
            int64_t count[16] = {0};
            for (size_t t = 0; t < SKEW_T; t++) {
                CHECKF(f.ids[t * k] == HOT, "%s: token %zu slot 0 is expert %d", what, t,
                       f.ids[t * k]);
                for (size_t j = 0; j < k; j++)
                    if (f.ids[t * k + j] >= 0 && f.ids[t * k + j] < 16) count[f.ids[t * k + j]]++;
            }
            CHECKF(count[HOT] == SKEW_T, "%s: expert %d took %lld of %d tokens", what, HOT,
                   (long long)count[HOT], SKEW_T);
            for (int c = COLD_FROM; c < 16; c++)
                CHECKF(count[c] == 0, "%s: expert %d took %lld tokens", what, c,
                       (long long)count[c]);
            stats s = {0, 0, 0, 0};
            check_rows(&r, x, &f, 0, SKEW_T, &s, what);
            const double rel = sqrt(s.err2 / s.norm2);
            CHECKF(rel <= 1e-2, "%s: relative error %.3g", what, rel);
            fprintf(stderr,
                    "skewed %-10s %s recipe: expert %d took all %d tokens, %d experts "
                    "none: output %.3g\n",
                    names[i], recipe == MOE_RECIPE_BF16 ? "bf16" : "f32", HOT, SKEW_T,
                    16 - COLD_FROM, rel);
            fwd_free(&f);
            moe_layer_destroy(l);
        }
    }
    free(x);
    ref_free(&r);
    moe_model_close(m);
    fx_remove_model(dir);
}

int main(void)
{
    char dir[] = "/tmp/moe_test_edges_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    test_denormals(&fam_cases[1], dir); /* deepseek_v3 bf16 */
    test_denormals(&fam_cases[2], dir); /* deepseek_v3 FP8 */
    test_router_denormals();
    test_skewed(dir);
    test_router_big();
    test_layer_big(dir);
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
