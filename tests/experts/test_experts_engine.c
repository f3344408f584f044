/* test_experts_engine.c — the expert engine on a private plain-loop kernel set. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "dtype/dtype.h"
#include "experts/experts.h"
#include "route/route_oracle.h"

/* ---- A test-only kernel set -------------------------------------------------------------
 * Tiles of NR rows, stored as f32: gate/up tile = [NR gate rows × K][NR up rows × K][NR gate
 * biases][NR up biases]; down tile = [NR rows × K][NR biases]. MR = 3 and NR = 5 put edges
 * everywhere. Each output is a sequential f32 sum over k, so a row's result cannot depend on
 * the other rows of a call. */

#define TMR 3
#define TNR 5

static size_t t_gateup_tile_bytes(int64_t k) { return (size_t)(2 * TNR * k + 2 * TNR) * 4; }
static size_t t_down_tile_bytes(int64_t k) { return (size_t)(TNR * k + TNR) * 4; }

static float src_at(const moe_weight_src *s, int64_t r, int64_t c)
{
    uint16_t code;
    memcpy(&code, (const uint16_t *)s->data + r * s->row_stride + c * s->col_stride, 2);
    return moe_bf16_to_f32(code);
}

static float bias_at(const moe_weight_src *s, int64_t r)
{
    if (!s->bias) return 0.0f;
    uint16_t code;
    memcpy(&code, (const uint16_t *)s->bias + r * s->bias_stride, 2);
    return moe_bf16_to_f32(code);
}

/* Rows of one projection into a tile part: NR rows × K, then (separately) NR biases. */
static void pack_rows(const moe_weight_src *s, int64_t r0, float *w, float *b)
{
    for (int n = 0; n < TNR; n++) {
        const bool ok = r0 + n < s->rows;
        for (int64_t c = 0; c < s->cols; c++)
            w[n * s->cols + c] = ok ? src_at(s, r0 + n, c) : 0.0f;
        b[n] = ok ? bias_at(s, r0 + n) : 0.0f;
    }
}

static int pack_calls_fail_at = -1; /* >= 0: the pack of that call number fails */
static int pack_calls;

static moe_status t_pack_gateup(const moe_weight_src *gate, const moe_weight_src *up, void *dst)
{
    if (pack_calls++ == pack_calls_fail_at) return MOE_EVALUE;
    const int64_t k = gate->cols, tiles = (gate->rows + TNR - 1) / TNR;
    for (int64_t j = 0; j < tiles; j++) {
        float *t = (float *)((char *)dst + j * t_gateup_tile_bytes(k));
        pack_rows(gate, j * TNR, t, t + 2 * TNR * k);
        pack_rows(up, j * TNR, t + TNR * k, t + 2 * TNR * k + TNR);
    }
    return MOE_OK;
}

static moe_status t_pack_down(const moe_weight_src *down, void *dst)
{
    const int64_t k = down->cols, tiles = (down->rows + TNR - 1) / TNR;
    for (int64_t j = 0; j < tiles; j++) {
        float *t = (float *)((char *)dst + j * t_down_tile_bytes(k));
        pack_rows(down, j * TNR, t, t + TNR * k);
    }
    return MOE_OK;
}

static bool bf16_recipe; /* which recipe the set below claims */

static float load_act(const void *row, size_t i)
{
    if (!bf16_recipe) return ((const float *)row)[i];
    return moe_bf16_to_f32(((const uint16_t *)row)[i]);
}

static void store_act(void *row, size_t i, float v)
{
    if (bf16_recipe)
        ((uint16_t *)row)[i] = moe_f32_to_bf16(v);
    else
        ((float *)row)[i] = v;
}

static float t_act(const moe_act_params *a, float g, float u)
{
    if (a->kind == 2) {
        g = g < a->limit ? g : a->limit;
        u = u < -a->limit ? -a->limit : u > a->limit ? a->limit : u;
        return g / (1.0f + expf(-a->alpha * g)) * (u + 1.0f);
    }
    return g / (1.0f + expf(-g)) * u;
}

static void t_gateup(size_t m, size_t k, const void *const *x, const void *tile,
                     const moe_act_params *act, void *h, size_t h_stride, size_t n_valid)
{
    const float *t = tile;
    const size_t eb = bf16_recipe ? 2 : 4;
    for (size_t i = 0; i < m; i++) {
        for (size_t n = 0; n < n_valid; n++) {
            float g = 0.0f, u = 0.0f;
            for (size_t c = 0; c < k; c++) {
                g += load_act(x[i], c) * t[n * k + c];
                u += load_act(x[i], c) * t[(TNR + n) * k + c];
            }
            g += t[2 * TNR * k + n];
            u += t[2 * TNR * k + TNR + n];
            store_act((char *)h + i * h_stride * eb, n, t_act(act, g, u));
        }
    }
}

static void t_down(size_t m, size_t k, const void *const *h, const void *tile, float *y,
                   size_t y_stride, size_t n_valid)
{
    const float *t = tile;
    for (size_t i = 0; i < m; i++) {
        for (size_t n = 0; n < n_valid; n++) {
            float acc = 0.0f;
            for (size_t c = 0; c < k; c++)
                acc += load_act(h[i], c) * t[n * k + c];
            y[i * y_stride + n] = acc + t[TNR * k + n];
        }
    }
}

static moe_expert_kernels test_set = {
    .name = "test_plain_loops",
    .format = 0,
    .recipe = MOE_RECIPE_F32,
    .isa = 0,
    .mr = TMR,
    .nr = TNR,
    .gateup_tile_bytes = t_gateup_tile_bytes,
    .down_tile_bytes = t_down_tile_bytes,
    .pack_gateup = t_pack_gateup,
    .pack_down = t_pack_down,
    .gateup = t_gateup,
    .down = t_down,
};

/* ---- Random MLP weights in checkpoint layout -------------------------------------------- */

typedef struct mlp {
    int64_t h, i;
    uint16_t *gate, *up, *down; /* [I, H], [I, H], [H, I] bf16 */
    uint16_t *bg, *bu, *bd;     /* biases or NULL */
} mlp;

static uint16_t rnd_bf16(rng *r, double scale)
{
    return moe_f32_to_bf16((float)((rng_unit(r) * 2 - 1) * scale));
}

static mlp make_mlp(rng *r, int64_t h, int64_t i, bool bias)
{
    mlp m = {h, i, NULL, NULL, NULL, NULL, NULL, NULL};
    m.gate = malloc((size_t)(h * i) * 2);
    m.up = malloc((size_t)(h * i) * 2);
    m.down = malloc((size_t)(h * i) * 2);
    REQUIRE(m.gate && m.up && m.down);
    for (int64_t x = 0; x < h * i; x++) {
        m.gate[x] = rnd_bf16(r, 0.2);
        m.up[x] = rnd_bf16(r, 0.2);
        m.down[x] = rnd_bf16(r, 0.2);
    }
    if (bias) {
        m.bg = malloc((size_t)i * 2);
        m.bu = malloc((size_t)i * 2);
        m.bd = malloc((size_t)h * 2);
        REQUIRE(m.bg && m.bu && m.bd);
        for (int64_t x = 0; x < i; x++) {
            m.bg[x] = rnd_bf16(r, 0.5);
            m.bu[x] = rnd_bf16(r, 0.5);
        }
        for (int64_t x = 0; x < h; x++)
            m.bd[x] = rnd_bf16(r, 0.5);
    }
    return m;
}

static void free_mlp(mlp *m)
{
    free(m->gate);
    free(m->up);
    free(m->down);
    free(m->bg);
    free(m->bu);
    free(m->bd);
}

static moe_weight_src wsrc(const uint16_t *data, int64_t rows, int64_t cols, const uint16_t *bias)
{
    moe_weight_src s;
    memset(&s, 0, sizeof s);
    s.data = data;
    s.dtype = MOE_DTYPE_BF16;
    s.rows = rows;
    s.cols = cols;
    s.row_stride = cols;
    s.col_stride = 1;
    s.bias = bias;
    s.bias_dtype = MOE_DTYPE_BF16;
    s.bias_stride = 1;
    return s;
}

static void pack_group(moe_expert_group *g, const mlp *m, int n)
{
    REQUIRE(moe_expert_group_alloc(g, "test group") == MOE_OK);
    for (int e = 0; e < n; e++) {
        const moe_weight_src gs = wsrc(m[e].gate, m[e].i, m[e].h, m[e].bg);
        const moe_weight_src us = wsrc(m[e].up, m[e].i, m[e].h, m[e].bu);
        const moe_weight_src ds = wsrc(m[e].down, m[e].h, m[e].i, m[e].bd);
        REQUIRE(moe_expert_group_pack(g, e, &gs, &us, &ds) == MOE_OK);
    }
}

/* ---- The expected bits, computed one token at a time with direct kernel calls ------------ */

/* y = mlp_e(x) for one token through the test kernels with m = 1, in f32. */
static void one_token_mlp(const moe_expert_group *g, int e, const void *x, float *y)
{
    const size_t eb = bf16_recipe ? 2 : 4;
    unsigned char h[4096 * 4];
    const void *xp[1] = {x}, *hp[1] = {h};
    for (int64_t j = 0; j < g->gateup_tiles; j++) {
        const int64_t n0 = j * TNR, nv = g->inter - n0 < TNR ? g->inter - n0 : TNR;
        t_gateup(1, (size_t)g->hidden, xp, moe_expert_gateup(g, e) + j * g->gateup_tile_bytes,
                 &g->act, h + n0 * eb, 0, (size_t)nv);
    }
    for (int64_t j = 0; j < g->down_tiles; j++) {
        const int64_t n0 = j * TNR, nv = g->hidden - n0 < TNR ? g->hidden - n0 : TNR;
        t_down(1, (size_t)g->inter, hp, moe_expert_down(g, e) + j * g->down_tile_bytes, y + n0, 0,
               (size_t)nv);
    }
}

static void expected_token(const moe_expert_group *routed, const moe_expert_group *always, int k_n,
                           const int32_t *ids, const float *w, const void *x, float *out)
{
    const int64_t h = routed ? routed->hidden : always->hidden;
    float y[4096], s[4096];
    if (always) one_token_mlp(always, 0, x, s);
    if (!routed) {
        memcpy(out, s, (size_t)h * 4);
        return;
    }
    for (int k = 0; k < k_n; k++) {
        one_token_mlp(routed, ids[k], x, y);
        for (int64_t c = 0; c < h; c++)
            out[c] = k == 0 ? w[0] * y[c] : out[c] + w[k] * y[c];
    }
    if (always)
        for (int64_t c = 0; c < h; c++)
            out[c] = out[c] + s[c];
}

/* ---- The double reference ------------------------------------------------------------- */

static double d_act(const moe_act_params *a, double g, double u)
{
    if (a->kind == 2) {
        g = fmin(g, a->limit);
        u = fmax(-a->limit, fmin(u, a->limit));
        return g / (1.0 + exp(-a->alpha * g)) * (u + 1.0);
    }
    return g / (1.0 + exp(-g)) * u;
}

static double bfv(const uint16_t *p, int64_t i) { return p ? moe_bf16_to_f32(p[i]) : 0.0; }

static void ref_mlp(const mlp *m, const moe_act_params *a, const float *x, double *y)
{
    double hh[4096];
    for (int64_t n = 0; n < m->i; n++) {
        double g = bfv(m->bg, n), u = bfv(m->bu, n);
        for (int64_t c = 0; c < m->h; c++) {
            g += (double)x[c] * moe_bf16_to_f32(m->gate[n * m->h + c]);
            u += (double)x[c] * moe_bf16_to_f32(m->up[n * m->h + c]);
        }
        hh[n] = d_act(a, g, u);
    }
    for (int64_t n = 0; n < m->h; n++) {
        double acc = bfv(m->bd, n);
        for (int64_t c = 0; c < m->i; c++)
            acc += hh[c] * moe_bf16_to_f32(m->down[n * m->i + c]);
        y[n] = acc;
    }
}

/* ---- One scenario: E routed experts (or none), an always-on MLP (or none) ---------------- */

typedef struct scenario {
    int e, k;
    int64_t h, i, i_always;
    bool routed, always, bias, bf16;
    int act_kind;
} scenario;

typedef struct setup {
    scenario sc;
    moe_expert_group routed, always;
    mlp *experts, shared;
    moe_act_params act;
} setup;

static void setup_make(setup *s, const scenario *sc, rng *r)
{
    memset(s, 0, sizeof *s);
    s->sc = *sc;
    bf16_recipe = sc->bf16;
    test_set.recipe = sc->bf16 ? MOE_RECIPE_BF16 : MOE_RECIPE_F32;
    s->act.kind = sc->act_kind;
    s->act.limit = 0.5f; /* small enough that the gpt-oss clamps bite */
    s->act.alpha = 1.702f;
    if (sc->routed) {
        REQUIRE(moe_expert_group_plan(&s->routed, &test_set, sc->e, sc->h, sc->i, &s->act,
                                      "routed") == MOE_OK);
        s->experts = calloc((size_t)sc->e, sizeof *s->experts);
        REQUIRE(s->experts);
        for (int e = 0; e < sc->e; e++)
            s->experts[e] = make_mlp(r, sc->h, sc->i, sc->bias);
        pack_group(&s->routed, s->experts, sc->e);
    }
    if (sc->always) {
        REQUIRE(moe_expert_group_plan(&s->always, &test_set, 1, sc->h, sc->i_always, &s->act,
                                      "always") == MOE_OK);
        s->shared = make_mlp(r, sc->h, sc->i_always, sc->bias);
        pack_group(&s->always, &s->shared, 1);
    }
}

static void setup_free(setup *s)
{
    if (s->sc.routed) {
        for (int e = 0; e < s->sc.e; e++)
            free_mlp(&s->experts[e]);
        free(s->experts);
        moe_expert_group_free(&s->routed);
    }
    if (s->sc.always) {
        free_mlp(&s->shared);
        moe_expert_group_free(&s->always);
    }
}

/* Random distinct ids per token and weights in (0, 1]. */
static void random_routing(rng *r, int e, int k, size_t t_n, int32_t *ids, float *w)
{
    for (size_t t = 0; t < t_n; t++) {
        rng_table(r, 1, k, e, ids + t * (size_t)k);
        for (int j = 0; j < k; j++)
            w[t * (size_t)k + (size_t)j] = (float)(rng_unit(r) * 0.9 + 0.1);
    }
}

/* Runs the engine on T tokens with THREADS; out [T, H]. Also returns the workspace so the
 * caller can look at the plan. */
static void *run_engine(const setup *s, size_t t_n, const void *act, const int32_t *ids,
                        const float *w, float *out, int threads, moe_experts_job *job_out)
{
    const moe_expert_group *routed = s->sc.routed ? &s->routed : NULL;
    const moe_expert_group *always = s->sc.always ? &s->always : NULL;
    moe_carve c = {NULL, 0, false};
    moe_experts_ws ws;
    moe_experts_ws_carve(&c, &ws, routed, s->sc.k, always, t_n);
    REQUIRE(!c.overflow);
    void *buf = aligned_alloc(64, (c.used + 64) / 64 * 64);
    REQUIRE(buf);
    moe_carve c2 = {buf, 0, false};
    moe_experts_job job;
    memset(&job, 0, sizeof job);
    moe_experts_ws_carve(&c2, &job.ws, routed, s->sc.k, always, t_n);
    CHECK(c2.used == c.used);
    job.n_tokens = t_n;
    job.act[s->sc.bf16 ? MOE_RECIPE_BF16 : MOE_RECIPE_F32] = act;
    job.routed = routed;
    job.top_k = s->sc.k;
    job.ids = ids;
    job.weights = w;
    job.always = always;
    job.always_name = routed ? "shared" : "dense";
    job.out = out;
    CHECK_STATUS(moe_experts_run(&job, threads), MOE_OK);
    if (job_out) *job_out = job;
    return buf;
}

static void check_plan(const moe_experts_job *job, const int32_t *ids)
{
    const moe_route_plan *p = &job->ws.plan;
    const size_t k_n = (size_t)p->top_k;
    CHECK(p->offset[0] == 0 && p->offset[p->n_experts] == p->n_tokens * k_n);
    size_t active = 0;
    for (int e = 0; e < p->n_experts; e++) {
        size_t want = 0;
        for (size_t i = 0; i < p->n_tokens * k_n; i++)
            want += ids[i] == e;
        CHECKF(p->offset[e + 1] - p->offset[e] == want, "expert %d", e);
        if (want) CHECK(active < p->n_active && p->active[active++] == e);
        for (size_t r = p->offset[e]; r + 1 < p->offset[e + 1]; r++)
            CHECK(p->token[r] < p->token[r + 1]); /* ascending tokens, distinct ids per token */
    }
    CHECK(active == p->n_active);
    for (size_t t = 0; t < p->n_tokens; t++)
        for (size_t k = 0; k < k_n; k++) {
            const size_t r = p->row[t * k_n + k];
            CHECK(p->token[r] == t && r >= p->offset[ids[t * k_n + k]] &&
                  r < p->offset[ids[t * k_n + k] + 1]);
        }
}

static void check_padding(const moe_experts_job *job, const moe_expert_group *g, const void *h,
                          size_t rows)
{
    const size_t eb = g->act_elem;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = (size_t)g->inter; c < g->h_stride; c++) {
            uint32_t v = 0;
            memcpy(&v, (const char *)h + (r * g->h_stride + c) * eb, eb);
            CHECKF(v == 0, "h row %zu column %zu padding", r, c);
        }
    (void)job;
}

static void scenario_run(const scenario *sc, uint64_t seed)
{
    rng r = {seed};
    setup s;
    setup_make(&s, sc, &r);
    enum { T = 300 };
    const size_t h = (size_t)sc->h, k_n = (size_t)sc->k;
    float *x = malloc(T * h * 4);
    uint16_t *xb = malloc(T * h * 2);
    int32_t *ids = malloc(T * k_n * 4 + 4);
    float *w = malloc(T * k_n * 4 + 4);
    float *alone = malloc(T * h * 4), *out = malloc(T * h * 4), *want = malloc(h * 4);
    double *ref = malloc(h * 8), *ry = malloc(h * 8);
    REQUIRE(x && xb && ids && w && alone && out && want && ref && ry);
    for (size_t i = 0; i < T * h; i++)
        x[i] = (float)(rng_unit(&r) * 2 - 1);
    moe_act_round_bf16(T * h, x, xb);
    const void *act = sc->bf16 ? (const void *)xb : (const void *)x;
    const size_t eb = sc->bf16 ? 2 : 4;
    if (sc->routed) random_routing(&r, sc->e, sc->k, T, ids, w);

    /* Every token alone: bit for bit the per-token kernel calls; close to the double one. */
    double err2 = 0, norm2 = 0;
    for (size_t t = 0; t < T; t++) {
        void *ws = run_engine(&s, 1, (const char *)act + t * h * eb, ids + t * k_n, w + t * k_n,
                              alone + t * h, 1, NULL);
        free(ws);
        expected_token(sc->routed ? &s.routed : NULL, sc->always ? &s.always : NULL, sc->k,
                       ids + t * k_n, w + t * k_n, (const char *)act + t * h * eb, want);
        CHECKF(!memcmp(want, alone + t * h, h * 4), "token %zu alone vs per-token kernels", t);
        for (size_t c = 0; c < h; c++)
            ref[c] = 0;
        if (sc->routed)
            for (size_t k = 0; k < k_n; k++) {
                ref_mlp(&s.experts[ids[t * k_n + k]], &s.act, x + t * h, ry);
                for (size_t c = 0; c < h; c++)
                    ref[c] += w[t * k_n + k] * ry[c];
            }
        if (sc->always) {
            ref_mlp(&s.shared, &s.act, x + t * h, ry);
            for (size_t c = 0; c < h; c++)
                ref[c] += ry[c];
        }
        for (size_t c = 0; c < h; c++) {
            err2 += (alone[t * h + c] - ref[c]) * (alone[t * h + c] - ref[c]);
            norm2 += ref[c] * ref[c];
        }
    }
    const double rel = sqrt(err2 / norm2);
    CHECKF(rel <= (sc->bf16 ? 1e-2 : 1e-5), "relative Frobenius error %.3g", rel);

    /* Batches of several sizes and thread counts: each row equals the token alone. */
    static const size_t sizes[] = {1, 2, 3, 5, 17, 64, 300};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        for (int threads = 1; threads <= 3; threads++) {
            const size_t n = sizes[si];
            const size_t first = (si * 37) % (T - n + 1);
            moe_experts_job job;
            void *ws = run_engine(&s, n, (const char *)act + first * h * eb, ids + first * k_n,
                                  w + first * k_n, out, threads, &job);
            CHECKF(!memcmp(out, alone + first * h, n * h * 4),
                   "batch of %zu from token %zu, %d threads vs alone", n, first, threads);
            if (sc->routed) {
                check_plan(&job, ids + first * k_n);
                check_padding(&job, &s.routed, job.ws.h_routed, n * k_n);
            }
            if (sc->always) check_padding(&job, &s.always, job.ws.h_always, n);
            free(ws);
        }
    }
    fprintf(stderr,
            "engine e=%d k=%d h=%lld i=%lld routed=%d always=%d bias=%d %s act=%d: "
            "rel err %.3g\n",
            sc->e, sc->k, (long long)sc->h, (long long)sc->i, sc->routed, sc->always, sc->bias,
            sc->bf16 ? "bf16" : "f32", sc->act_kind, rel);
    free(x);
    free(xb);
    free(ids);
    free(w);
    free(alone);
    free(out);
    free(want);
    free(ref);
    free(ry);
    setup_free(&s);
}

/* ---- Smaller checks ------------------------------------------------------------------- */

static void test_round_bf16(void)
{
    rng r = {7};
    enum { N = 1 << 16 };
    static float x[N];
    static uint16_t y[N];
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
        0x7F7F8000u, 0x7F7F7FFFu, 0x00000001u, 0x00008000u, 0x00018000u, 0x3F808000u,
        0x3F818000u, 0x7FC00000u, 0xFF800001u, 0x7F800001u, 0x7FFFFFFFu, 0x807FFFFFu};
    for (size_t i = 0; i < N; i++) {
        uint32_t u = i < sizeof special / 4 ? special[i] : (uint32_t)rng_next(&r);
        if (i % 3 == 0 && i >= sizeof special / 4) u = (u & 0xFFFF0000u) | 0x8000u; /* ties */
        memcpy(&x[i], &u, 4);
    }
    moe_act_round_bf16(N, x, y);
    size_t bad = 0;
    for (size_t i = 0; i < N; i++)
        bad += y[i] != moe_f32_to_bf16(x[i]);
    CHECKF(bad == 0, "%zu of %d roundings differ from moe_f32_to_bf16", bad, N);
}

static void test_carve(void)
{
    moe_carve c = {NULL, 0, false};
    CHECK(moe_carve_take(&c, 3, 4) == NULL && c.used == 12);
    moe_carve_take(&c, 1, 1);
    CHECK(c.used == 65);
    moe_carve_take(&c, SIZE_MAX / 2, 4);
    CHECK(c.overflow);
    unsigned char buf[256];
    moe_carve b = {buf, 0, false};
    unsigned char *p = moe_carve_take(&b, 3, 4), *q = moe_carve_take(&b, 1, 1);
    CHECK(p == buf && q == buf + 64);
}

static void test_group_errors(void)
{
    moe_expert_group g;
    moe_act_params a = {0, 0, 0};
    CHECK_STATUS(
        moe_expert_group_plan(&g, &test_set, 4, INT64_C(1) << 40, INT64_C(1) << 40, &a, "huge"),
        MOE_EOVERFLOW);
    CHECK(strstr(moe_last_error(), "huge") != NULL);
    moe_expert_group_free(&g);
    CHECK_STATUS(moe_expert_group_plan(&g, NULL, 4, 8, 8, &a, "null"), MOE_EINVAL);
    moe_expert_kernels wide = test_set;
    wide.mr = MOE_EXPERTS_MAX_MR + 1;
    CHECK_STATUS(moe_expert_group_plan(&g, &wide, 4, 8, 8, &a, "wide"), MOE_EINVAL);

    /* A failing pack names the expert. */
    rng r = {3};
    mlp m[2] = {make_mlp(&r, 8, 7, false), make_mlp(&r, 8, 7, false)};
    REQUIRE(moe_expert_group_plan(&g, &test_set, 2, 8, 7, &a, "two") == MOE_OK);
    REQUIRE(moe_expert_group_alloc(&g, "two") == MOE_OK);
    pack_calls = 0;
    pack_calls_fail_at = 1;
    const moe_weight_src gs = wsrc(m[1].gate, 7, 8, NULL), ds = wsrc(m[1].down, 8, 7, NULL);
    CHECK_STATUS(moe_expert_group_pack(&g, 0, &gs, &gs, &ds), MOE_OK);
    CHECK_STATUS(moe_expert_group_pack(&g, 1, &gs, &gs, &ds), MOE_EVALUE);
    CHECK(strstr(moe_last_error(), "expert 1") != NULL);
    CHECK_STATUS(moe_expert_group_pack(&g, 2, &gs, &gs, &ds), MOE_EINVAL);
    pack_calls_fail_at = -1;
    moe_expert_group_free(&g);
    free_mlp(&m[0]);
    free_mlp(&m[1]);
}

static void test_bad_id(void)
{
    rng r = {11};
    const scenario sc = {4, 2, 9, 6, 0, true, false, false, false, 0};
    setup s;
    setup_make(&s, &sc, &r);
    int32_t ids[4] = {0, 1, 3, 4};
    float w[4] = {1, 1, 1, 1}, x[18] = {0}, out[18];
    for (int i = 0; i < 18; i++)
        out[i] = -7.0f;
    moe_carve c = {NULL, 0, false};
    moe_experts_job job;
    memset(&job, 0, sizeof job);
    moe_experts_ws_carve(&c, &job.ws, &s.routed, 2, NULL, 2);
    void *buf = aligned_alloc(64, (c.used + 64) / 64 * 64);
    REQUIRE(buf);
    moe_carve c2 = {buf, 0, false};
    moe_experts_ws_carve(&c2, &job.ws, &s.routed, 2, NULL, 2);
    job.n_tokens = 2;
    job.act[MOE_RECIPE_F32] = x;
    job.routed = &s.routed;
    job.top_k = 2;
    job.ids = ids;
    job.weights = w;
    job.out = out;
    CHECK_STATUS(moe_experts_run(&job, 2), MOE_ERANGE);
    CHECK(strstr(moe_last_error(), "token 1 slot 1") != NULL);
    bool untouched = true;
    for (int i = 0; i < 18; i++)
        untouched &= out[i] == -7.0f;
    CHECK(untouched);
    free(buf);
    setup_free(&s);
}

/* An aliased group (moe bench's resident experts): 10 experts on 3 packed copies, the batch's
 * i-th expert (ascending ids) on copy i % 3. The batch routes to experts 2, 4, 7, 9 (copies 0,
 * 1, 2, 0, where e % 3 would give 2, 1, 1, 0): each token's bits must equal the same tokens
 * through a plain group of those 3 experts with the ids mapped so. */
static void test_aliased(void)
{
    rng r = {21};
    bf16_recipe = false;
    test_set.recipe = MOE_RECIPE_F32;
    enum { E = 10, P = 3, K = 2, TN = 3, H = 24, I = 16 };
    moe_act_params a = {0, 0, 0};
    mlp m[P];
    for (int e = 0; e < P; e++)
        m[e] = make_mlp(&r, H, I, false);
    moe_expert_group g, full;
    REQUIRE(moe_expert_group_plan(&g, &test_set, E, H, I, &a, "aliased") == MOE_OK);
    const size_t planned = g.packed_bytes;
    moe_expert_group_alias(&g, P);
    CHECK(g.n_packed == P && g.packed_bytes == planned / E * P);
    pack_group(&g, m, P);
    REQUIRE(moe_expert_group_plan(&full, &test_set, P, H, I, &a, "plain") == MOE_OK);
    pack_group(&full, m, P);
    const int32_t ids[TN * K] = {7, 2, 9, 4, 2, 9}, copies[TN * K] = {2, 0, 0, 1, 0, 0};
    const float w[TN * K] = {0.75f, 0.25f, 0.5f, 0.5f, 0.125f, 0.875f};
    float x[TN * H], out[TN * H], want[H];
    for (size_t i = 0; i < TN * H; i++)
        x[i] = (float)(rng_unit(&r) * 2 - 1);
    moe_carve c = {NULL, 0, false};
    moe_experts_job job;
    memset(&job, 0, sizeof job);
    moe_experts_ws_carve(&c, &job.ws, &g, K, NULL, TN);
    void *buf = aligned_alloc(64, (c.used + 64) / 64 * 64);
    REQUIRE(buf);
    moe_carve c2 = {buf, 0, false};
    moe_experts_ws_carve(&c2, &job.ws, &g, K, NULL, TN);
    job.n_tokens = TN;
    job.act[MOE_RECIPE_F32] = x;
    job.routed = &g;
    job.top_k = K;
    job.ids = ids;
    job.weights = w;
    job.out = out;
    CHECK_STATUS(moe_experts_run(&job, 2), MOE_OK);
    for (size_t t = 0; t < TN; t++) {
        expected_token(&full, NULL, K, copies + t * K, w + t * K, x + t * H, want);
        CHECKF(!memcmp(want, out + t * H, sizeof want), "aliased group, token %zu", t);
    }
    free(buf);
    moe_expert_group_free(&g);
    moe_expert_group_free(&full);
    for (int e = 0; e < P; e++)
        free_mlp(&m[e]);
}

int main(void)
{
    test_round_bf16();
    test_carve();
    test_group_errors();
    test_bad_id();
    test_aliased();
    /* e, k, h, i, i_always, routed, always, bias, bf16, activation */
    static const scenario scs[] = {
        {8, 2, 37, 23, 0, true, false, false, false, 0},  /* Mixtral-like */
        {16, 4, 40, 11, 22, true, true, false, false, 0}, /* DeepSeek-like with a shared MLP */
        {8, 2, 33, 17, 0, true, false, true, false, 2},   /* gpt-oss-like: biases, clamps */
        {8, 3, 36, 21, 13, true, true, false, true, 0},   /* bf16 recipe */
        {0, 0, 29, 0, 31, false, true, false, false, 0},  /* a dense layer */
        {0, 0, 30, 0, 19, false, true, true, true, 2},    /* a dense layer, bf16, biases */
    };
    for (size_t i = 0; i < sizeof scs / sizeof scs[0]; i++)
        scenario_run(&scs[i], 100 + i);
    return TEST_END();
}
