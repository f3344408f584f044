/* test_layer_ep.c — moe_ep.h's steps over n simulated ranks: bit for bit moe_layer_forward. */
#include "fwd_io.h"
#include "moe_ep.h"

enum { T_MAX = 13, THREADS = 2, MAX_RANKS = 4 };

/* The one-process forward's outputs for T tokens: what every rank's share must reproduce. */
typedef struct want {
    float *out, *logits, *w;
    int32_t *ids;
} want;

/* One simulated run: n ranks, a placement table (NULL: contiguous), the tokens per rank (t in
 * all), the hidden rows in f32 or bf16, the token ids in i32 or i64. */
typedef struct sim {
    const moe_model *m;
    int layer;
    const moe_layer_options *o;
    int n;
    const int32_t *table;
    size_t t;
    size_t count[MAX_RANKS];
    bool bf16;
    bool ids64;
    const char *what;
} sim;

static void *ws_alloc(size_t bytes)
{
    if (!bytes) return NULL;
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    REQUIRE(p);
    return p;
}

static moe_layer *placed(const sim *s, int rank, int e)
{
    moe_ep_placement pl = {sizeof pl, rank, s->n, s->table, s->table ? (size_t)e : 0};
    moe_layer *l = NULL;
    moe_status st = moe_layer_create_ep(s->m, s->layer, s->o, &pl, &l);
    if (st) fprintf(stderr, "%s: rank %d: %s\n", s->what, rank, moe_last_error());
    REQUIRE(st == MOE_OK);
    return l;
}

/* The steps of moe_ep.h, the transport a few memcpys: rank r's tokens are rows
 * first[r] .. first[r] + count[r] - 1 of the batch. Where the layer says its weights scale the
 * experts' inputs (llama4), each row travels with its weight; else with none. */
static void run_steps(const sim *s, const void *x, const int32_t *tok32, const int64_t *tok64,
                      const want *wt, size_t h, size_t e, size_t k)
{
    const int n = s->n;
    const size_t xb = s->bf16 ? 2 : 4;
    moe_layer *l[MAX_RANKS];
    size_t first[MAX_RANKS + 1];
    first[0] = 0;
    for (int r = 0; r < n; r++) {
        l[r] = placed(s, r, (int)e);
        first[r + 1] = first[r] + s->count[r];
    }
    REQUIRE(first[n] == s->t);
    moe_ep_info info = {.size = sizeof info};
    REQUIRE(moe_ep_get_info(l[0], &info) == MOE_OK);
    const bool scales = info.scales_input != 0;
    CHECKF(scales == (l[0]->plan.ld->scale_input), "%s: scales_input %d", s->what,
           info.scales_input);
    int32_t *ids[MAX_RANKS];
    float *w[MAX_RANKS], *logits[MAX_RANKS], *yhome[MAX_RANKS];
    int64_t *tags[MAX_RANKS];
    size_t to[MAX_RANKS][MAX_RANKS]; /* to[r][d]: pairs rank r sends rank d */
    /* 1. route, 2. send plans */
    for (int r = 0; r < n; r++) {
        const size_t c = s->count[r];
        ids[r] = malloc(c * k * 4 + 4);
        w[r] = malloc(c * k * 4 + 4);
        logits[r] = malloc(c * e * 4 + 4);
        tags[r] = malloc(c * k * 8 + 8);
        yhome[r] = malloc(c * k * h * 4 + 4);
        REQUIRE(ids[r] && w[r] && logits[r] && tags[r] && yhome[r]);
        const size_t wsb = moe_ep_workspace_size(l[r], c, 0);
        void *ws = ws_alloc(wsb);
        moe_forward_args a = {.size = sizeof a,
                              .n_tokens = c,
                              .hidden_size = h,
                              .hidden = (const char *)x + first[r] * h * xb,
                              .hidden_dtype = s->bf16 ? MOE_DTYPE_BF16 : MOE_DTYPE_F32,
                              .token_ids = s->ids64 ? (const void *)(tok64 + first[r])
                                                    : (const void *)(tok32 + first[r]),
                              .token_id_dtype = s->ids64 ? MOE_DTYPE_I64 : MOE_DTYPE_I32,
                              .logits_out = logits[r],
                              .ids_out = ids[r],
                              .weights_out = w[r],
                              .workspace = ws,
                              .workspace_size = wsb};
        CHECKF(moe_ep_route(l[r], &a) == MOE_OK, "%s: rank %d route: %s", s->what, r,
               moe_last_error());
        CHECKF(!memcmp(ids[r], wt->ids + first[r] * k, c * k * 4), "%s: rank %d ids differ",
               s->what, r);
        CHECKF(!memcmp(w[r], wt->w + first[r] * k, c * k * 4), "%s: rank %d weights differ",
               s->what, r);
        CHECKF(!memcmp(logits[r], wt->logits + first[r] * e, c * e * 4),
               "%s: rank %d logits differ", s->what, r);
        free(ws);
        CHECKF(moe_ep_send_plan(l[r], c, ids[r], to[r], tags[r]) == MOE_OK, "%s: %s", s->what,
               moe_last_error());
        size_t sum = 0;
        for (int d = 0; d < n; d++)
            sum += to[r][d];
        CHECKF(sum == c * k, "%s: rank %d sends %zu pairs, not %zu", s->what, r, sum, c * k);
    }
    /* 3. each destination's rows, 4. the rows back home */
    for (int d = 0; d < n; d++) {
        size_t rows = 0;
        for (int r = 0; r < n; r++)
            rows += to[r][d];
        unsigned char *in = malloc(rows * h * xb + 4);
        int32_t *ex = malloc(rows * 4 + 4);
        float *y = malloc(rows * h * 4 + 4), *rw = malloc(rows * 4 + 4);
        REQUIRE(in && ex && y && rw);
        size_t at = 0;
        for (int r = 0; r < n; r++) {
            size_t off = 0;
            for (int q = 0; q < d; q++)
                off += to[r][q];
            for (size_t i = 0; i < to[r][d]; i++, at++) {
                const int64_t g = tags[r][off + i];
                const size_t t = first[r] + (size_t)g / k;
                memcpy(in + at * h * xb, (const char *)x + t * h * xb, h * xb);
                ex[at] = ids[r][g];
                rw[at] = w[r][g];
                int owner = -1;
                CHECK(moe_ep_expert_rank(l[d], ex[at], &owner) == MOE_OK && owner == d);
            }
        }
        const size_t wsb = moe_ep_workspace_size(l[d], 0, rows);
        void *ws = ws_alloc(wsb);
        moe_ep_rows_args ra = {.size = sizeof ra,
                               .n_rows = rows,
                               .hidden_size = h,
                               .rows = in,
                               .rows_dtype = s->bf16 ? MOE_DTYPE_BF16 : MOE_DTYPE_F32,
                               .experts = ex,
                               .y = y,
                               .workspace = ws,
                               .workspace_size = wsb,
                               .weights = scales ? rw : NULL};
        CHECKF(moe_ep_experts(l[d], &ra) == MOE_OK, "%s: rank %d experts: %s", s->what, d,
               moe_last_error());
        at = 0;
        for (int r = 0; r < n; r++) {
            size_t off = 0;
            for (int q = 0; q < d; q++)
                off += to[r][q];
            for (size_t i = 0; i < to[r][d]; i++, at++)
                memcpy(yhome[r] + (size_t)tags[r][off + i] * h, y + at * h, h * 4);
        }
        free(ws);
        free(in);
        free(ex);
        free(y);
        free(rw);
    }
    /* 5. combine at home */
    for (int r = 0; r < n; r++) {
        const size_t c = s->count[r];
        float *out = malloc(c * h * 4 + 4);
        REQUIRE(out);
        const size_t wsb = moe_ep_workspace_size(l[r], c, 0);
        void *ws = ws_alloc(wsb);
        moe_ep_combine_args ca = {.size = sizeof ca,
                                  .n_tokens = c,
                                  .hidden_size = h,
                                  .hidden = (const char *)x + first[r] * h * xb,
                                  .hidden_dtype = s->bf16 ? MOE_DTYPE_BF16 : MOE_DTYPE_F32,
                                  .weights = w[r],
                                  .y = yhome[r],
                                  .out = out,
                                  .workspace = ws,
                                  .workspace_size = wsb};
        CHECKF(moe_ep_combine(l[r], &ca) == MOE_OK, "%s: rank %d combine: %s", s->what, r,
               moe_last_error());
        CHECKF(!memcmp(out, wt->out + first[r] * h, c * h * 4),
               "%s: rank %d (%zu tokens): the output differs from moe_layer_forward's", s->what, r,
               c);
        free(ws);
        free(out);
        free(ids[r]);
        free(w[r]);
        free(logits[r]);
        free(tags[r]);
        free(yhome[r]);
    }
    for (int r = 0; r < n; r++)
        moe_layer_destroy(l[r]);
}

/* A dense layer: every rank runs its own tokens with moe_layer_forward on its placed layer. */
static void run_dense(const sim *s, const void *x, const want *wt, size_t h)
{
    const size_t xb = s->bf16 ? 2 : 4;
    size_t first = 0;
    for (int r = 0; r < s->n; r++) {
        moe_layer *l = placed(s, r, 0);
        const size_t c = s->count[r];
        float *out = malloc(c * h * 4 + 4);
        size_t wsb = moe_ep_workspace_size(l, c, 0);
        void *ws = ws_alloc(wsb);
        REQUIRE(out);
        moe_forward_args a = fx_args(
            c, h, (const float *)(const void *)((const char *)x + first * h * xb), out, ws, wsb);
        a.hidden_dtype = s->bf16 ? MOE_DTYPE_BF16 : MOE_DTYPE_F32;
        CHECKF(moe_layer_forward(l, &a) == MOE_OK, "%s: %s", s->what, moe_last_error());
        CHECKF(!memcmp(out, wt->out + first * h, c * h * 4), "%s: dense rank %d differs", s->what,
               r);
        first += c;
        free(out);
        free(ws);
        moe_layer_destroy(l);
    }
}

/* T tokens over the ranks: even, uneven (the last rank most), and with rank 0 (and for n 4, rank 2)
 * empty. (One token: on rank 0, rank 0, and the last rank.) */
static void spread(size_t t, int n, int kind, size_t *count)
{
    size_t left = t;
    for (int r = 0; r < n; r++) {
        if (kind == 0) count[r] = t / (size_t)n + ((size_t)r < t % (size_t)n);
        if (kind == 1) count[r] = r + 1 < n ? ((size_t)r + 1 < left ? (size_t)r + 1 : left) : left;
        if (kind == 2) {
            const bool empty = r == 0 || (n == 4 && r == 2);
            const int full = n == 4 ? 2 : n - 1; /* ranks that hold tokens */
            count[r] = empty ? 0 : (r + 1 < n ? t / (size_t)full : left);
        }
        left -= count[r];
    }
}

/* The one-process forward of T tokens of LAYER (recipe in O), the hidden rows in f32 or bf16. */
static void one_process(const moe_model *m, int layer, const moe_layer_options *o, size_t t,
                        const void *x, bool bf16, const int32_t *tok, want *wt, size_t *h,
                        size_t *e, size_t *k)
{
    moe_layer *l = NULL;
    REQUIRE(moe_layer_create(m, layer, o, &l) == MOE_OK);
    *h = (size_t)l->plan.desc->hidden;
    *e = l->plan.moe ? (size_t)l->plan.ld->routing.n_experts : 1;
    *k = l->plan.moe ? (size_t)l->plan.ld->routing.top_k : 1;
    wt->out = malloc(t * *h * 4);
    wt->logits = malloc(t * *e * 4);
    wt->w = malloc(t * *k * 4);
    wt->ids = malloc(t * *k * 4);
    size_t wsb;
    void *ws = fx_workspace(l, t, &wsb);
    REQUIRE(wt->out && wt->logits && wt->w && wt->ids);
    moe_forward_args a = fx_args(t, *h, x, wt->out, ws, wsb);
    a.hidden_dtype = bf16 ? MOE_DTYPE_BF16 : MOE_DTYPE_F32;
    a.token_ids = tok;
    a.token_id_dtype = MOE_DTYPE_I32;
    if (l->plan.moe) {
        a.logits_out = wt->logits;
        a.ids_out = wt->ids;
        a.weights_out = wt->w;
    }
    REQUIRE(moe_layer_forward(l, &a) == MOE_OK);
    free(ws);
    moe_layer_destroy(l);
}

static void want_free(want *wt)
{
    free(wt->out);
    free(wt->logits);
    free(wt->w);
    free(wt->ids);
}

/* Every n, spread and placement for T tokens (at most T_MAX) of one layer and recipe. */
static void check_layer(const moe_model *m, int layer, int recipe, size_t t, const char *name)
{
    const moe_layer_options o = fx_options(THREADS, recipe);
    moe_model_info mi = {.size = sizeof mi};
    REQUIRE(moe_model_get_info(m, &mi) == MOE_OK);
    const size_t hh = (size_t)mi.hidden_size;
    moe_layer_info li = {.size = sizeof li};
    REQUIRE(moe_model_get_layer_info(m, layer, &li) == MOE_OK);
    const bool moe = li.kind != MOE_LAYER_DENSE;
    REQUIRE(t >= 1 && t <= T_MAX);
    float *x = malloc(t * hh * 4);
    uint16_t *xb = malloc(t * hh * 2);
    int32_t tok[T_MAX];
    int64_t tok64[T_MAX];
    REQUIRE(x && xb);
    fx_hidden(5, t * hh, x);
    for (size_t i = 0; i < t * hh; i++)
        xb[i] = moe_f32_to_bf16(x[i]);
    for (size_t i = 0; i < t; i++)
        tok64[i] = tok[i] = (int32_t)((i * 37 + 11) % 1000);
    for (int bf = 0; bf < 2; bf++) {
        want wt;
        size_t h, e, k;
        const void *xin = bf ? (const void *)xb : x;
        one_process(m, layer, &o, t, xin, bf, tok, &wt, &h, &e, &k);
        int32_t table[2][64];
        REQUIRE(e <= 64);
        for (int n = 1; n <= MAX_RANKS; n++) {
            for (size_t i = 0; i < e; i++) {
                table[0][i] = (int32_t)((i * 5 + 1) % (size_t)n); /* scattered */
                table[1][i] = i % 2 ? 0 : (int32_t)n - 1;         /* ranks 1 .. n - 2 own none */
            }
            for (int pk = 0; pk < 3; pk++) {
                for (int kind = 0; kind < (n > 1 ? 3 : 1); kind++) {
                    if (bf && (pk != 1 || kind != 1)) continue; /* bf16 input: one case */
                    char what[160];
                    snprintf(what, sizeof what,
                             "%s layer %d recipe %s %zu tokens %s input n %d %s %s", name, layer,
                             fx_recipe_name(recipe), t, bf ? "bf16" : "f32", n,
                             pk == 0   ? "contiguous"
                             : pk == 1 ? "scattered table"
                                       : "skewed table",
                             kind == 0   ? "even"
                             : kind == 1 ? "uneven"
                                         : "empty ranks");
                    sim s = {m,  layer,          &o,  n, pk ? table[pk - 1] : NULL, t, {0},
                             bf, (n + kind) % 2, what};
                    spread(t, n, kind, s.count);
                    if (moe)
                        run_steps(&s, xin, tok, tok64, &wt, h, e, k);
                    else
                        run_dense(&s, xin, &wt, h);
                }
            }
        }
        want_free(&wt);
    }
    free(x);
    free(xb);
}

/* Packed bytes per rank on 4 ranks: the shared part (gate, shared experts) on every rank, and
 * each rank's own experts at the one-process layer's bytes per expert; the explain text lists
 * the placement. */
static void check_bytes(const moe_model *m, int layer, const char *name)
{
    moe_layer *one = NULL;
    REQUIRE(moe_layer_create(m, layer, NULL, &one) == MOE_OK);
    moe_ep_info full = {.size = sizeof full};
    REQUIRE(moe_ep_get_info(one, &full) == MOE_OK);
    CHECK(full.n_ranks == 1 && full.rank == 0 && full.n_owned == full.n_experts);
    const size_t common = full.packed_bytes - (size_t)full.n_experts * full.expert_bytes;
    int32_t table[64];
    REQUIRE(full.n_experts <= 64);
    for (int i = 0; i < full.n_experts; i++)
        table[i] = (int32_t)(i % 3 == 0 ? 3 : i % 2); /* rank 2 owns none */
    for (int pk = 0; pk < 2; pk++) {
        uint64_t fp = 0;
        for (int r = 0; r < 4; r++) {
            moe_ep_placement pl = {sizeof pl, r, 4, pk ? table : NULL,
                                   pk ? (size_t)full.n_experts : 0};
            moe_layer *l = NULL;
            REQUIRE(moe_layer_create_ep(m, layer, NULL, &pl, &l) == MOE_OK);
            int owned = 0;
            for (int i = 0; i < full.n_experts; i++)
                owned += (pk ? table[i] : i * 4 / full.n_experts) == r;
            moe_ep_info info = {.size = sizeof info};
            REQUIRE(moe_ep_get_info(l, &info) == MOE_OK);
            CHECKF(info.n_owned == owned, "%s: rank %d owns %d, expected %d", name, r, info.n_owned,
                   owned);
            CHECKF(info.packed_bytes == common + (size_t)owned * full.expert_bytes,
                   "%s: rank %d packs %zu bytes, expected %zu", name, r, info.packed_bytes,
                   common + (size_t)owned * full.expert_bytes);
            for (int q = 0; q < 4; q++) {
                size_t b = 0;
                int oq = 0;
                for (int i = 0; i < full.n_experts; i++)
                    oq += (pk ? table[i] : i * 4 / full.n_experts) == q;
                CHECK(moe_ep_rank_bytes(l, q, &b) == MOE_OK &&
                      b == common + (size_t)oq * full.expert_bytes);
            }
            if (r == 0) fp = info.fingerprint;
            CHECKF(info.fingerprint == fp, "%s: rank %d's fingerprint differs", name, r);
            char line[64];
            snprintf(line, sizeof line, "placement: rank %d of 4", r);
            CHECKF(strstr(moe_layer_explain(l), line) != NULL, "%s: explain: %s", name,
                   moe_layer_explain(l));
            CHECKF(strstr(moe_layer_explain(l), "(this rank)") != NULL, "%s", name);
            CHECKF(!strstr(moe_layer_explain(l), "rows travel with their routing weights") ==
                       !one->plan.ld->scale_input,
                   "%s: explain: %s", name, moe_layer_explain(l));
            /* The whole forward needs every expert: steps only. */
            fwd_io b;
            io_make(&b, one, 3);
            moe_forward_args a = args_of(&b);
            poison(&b);
            if (owned < full.n_experts) {
                CHECKF(moe_layer_forward(l, &a) == MOE_ESTATE, "%s: rank %d ran it whole", name, r);
                CHECK(strstr(moe_last_error(), "steps") != NULL);
                CHECK(io_untouched(&b));
            }
            io_free(&b);
            moe_layer_destroy(l);
        }
    }
    moe_layer_destroy(one);
}

/* Step 3's arguments for N f32 rows of B (weights NULL: none travel with them). */
static moe_ep_rows_args f32_rows(const fwd_io *b, size_t n, const int32_t *ex, float *y, void *ws,
                                 size_t wsb)
{
    return (moe_ep_rows_args){.size = sizeof(moe_ep_rows_args),
                              .n_rows = n,
                              .hidden_size = b->h,
                              .rows = b->x,
                              .rows_dtype = MOE_DTYPE_F32,
                              .experts = ex,
                              .y = y,
                              .workspace = ws,
                              .workspace_size = wsb};
}

/* Every step checks its arguments; nothing is written on error. */
static void check_errors(const moe_model *m, int layer, bool hash)
{
    const int e = 16;
    int32_t table[16];
    for (int i = 0; i < e; i++)
        table[i] = i % 2;
    moe_layer *l = SENTINEL;
    table[5] = 2;
    moe_ep_placement pl = {sizeof pl, 0, 2, table, (size_t)e};
    CHECK(moe_layer_create_ep(m, layer, NULL, &pl, &l) == MOE_ERANGE && l == SENTINEL);
    CHECKF(strstr(moe_last_error(), "expert_rank[5] = 2") != NULL, "%s", moe_last_error());
    table[5] = -1;
    CHECK(moe_layer_create_ep(m, layer, NULL, &pl, &l) == MOE_ERANGE);
    CHECK(strstr(moe_last_error(), "expert_rank[5] = -1") != NULL);
    table[5] = 1;
    pl.n_entries = 15;
    CHECK(moe_layer_create_ep(m, layer, NULL, &pl, &l) == MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "n_entries") != NULL);
    pl.n_entries = 16;
    pl.rank = 2;
    CHECK(moe_layer_create_ep(m, layer, NULL, &pl, &l) == MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "rank 2 of n_ranks 2") != NULL);
    pl.rank = 0;
    pl.size = 8;
    CHECK(moe_layer_create_ep(m, layer, NULL, &pl, &l) == MOE_EINVAL);
    pl.size = sizeof pl;
    REQUIRE(moe_layer_create_ep(m, layer, NULL, &pl, &l) == MOE_OK);
    fwd_io b;
    io_make(&b, l, 4);
    const size_t wsb = moe_ep_workspace_size(l, 4, 4);
    void *ws = ws_alloc(wsb);
    /* route */
    moe_forward_args a = args_of(&b);
    a.workspace = ws;
    a.workspace_size = wsb;
    a.out = NULL;
    a.trace = NULL;
    poison(&b);
    a.hidden_size = b.h + 1;
    CHECK(moe_ep_route(l, &a) == MOE_EINVAL && strstr(moe_last_error(), "hidden_size"));
    a.hidden_size = b.h;
    a.ids_out = NULL;
    CHECK(moe_ep_route(l, &a) == MOE_EINVAL && strstr(moe_last_error(), "ids_out"));
    a.ids_out = b.ids;
    a.workspace_size = 64;
    CHECK(moe_ep_route(l, &a) == MOE_ERANGE && strstr(moe_last_error(), "workspace"));
    a.workspace_size = wsb;
    if (hash) {
        b.tokens[2] = 1000;
        CHECK(moe_ep_route(l, &a) == MOE_ERANGE && strstr(moe_last_error(), "token_ids[2]"));
        b.tokens[2] = 7;
    }
    CHECK(io_untouched(&b));
    REQUIRE(moe_ep_route(l, &a) == MOE_OK);
    /* send plan */
    size_t counts[2];
    int64_t tags[64];
    const int32_t keep = b.ids[3];
    b.ids[3] = 16;
    CHECK(moe_ep_send_plan(l, 4, b.ids, counts, tags) == MOE_ERANGE &&
          strstr(moe_last_error(), "ids[0][3] = 16"));
    b.ids[3] = keep;
    /* experts: an expert of rank 1 on rank 0 */
    int32_t ex[4] = {0, 2, 1, 4};
    float y[4 * 512];
    REQUIRE(b.h <= 512);
    memset(y, POISON, sizeof y);
    moe_ep_rows_args ra = f32_rows(&b, 4, ex, y, ws, wsb);
    CHECK(moe_ep_experts(l, &ra) == MOE_ERANGE &&
          strstr(moe_last_error(), "experts[2] = 1 is not one of rank 0"));
    ex[2] = 17;
    CHECK(moe_ep_experts(l, &ra) == MOE_ERANGE && strstr(moe_last_error(), "experts[2] = 17"));
    ex[2] = 6;
    ra.rows_dtype = MOE_DTYPE_F16;
    CHECK(moe_ep_experts(l, &ra) == MOE_EDTYPE);
    ra.rows_dtype = MOE_DTYPE_F32;
    CHECK(all_poison(y, sizeof y));
    moe_ep_info info = {.size = sizeof info};
    CHECK(moe_ep_get_info(l, &info) == MOE_OK && info.scales_input == 0);
    const float nan_w[4] = {NAN, NAN, NAN, NAN};
    ra.weights = nan_w; /* not read: this layer's weights apply in the combine */
    CHECK(moe_ep_experts(l, &ra) == MOE_OK);
    /* combine: a NaN weight */
    float *yk = calloc(4 * b.k * b.h, 4);
    REQUIRE(yk);
    memset(b.out, POISON, 4 * b.h * 4);
    b.w[1 * b.k + 1] = NAN;
    moe_ep_combine_args ca = {.size = sizeof ca,
                              .n_tokens = 4,
                              .hidden_size = b.h,
                              .hidden = b.x,
                              .hidden_dtype = MOE_DTYPE_F32,
                              .weights = b.w,
                              .y = yk,
                              .out = b.out,
                              .workspace = ws,
                              .workspace_size = wsb};
    CHECK(moe_ep_combine(l, &ca) == MOE_EVALUE && strstr(moe_last_error(), "weights[1][1]"));
    ca.y = NULL;
    b.w[1 * b.k + 1] = 0.5f;
    CHECK(moe_ep_combine(l, &ca) == MOE_EINVAL && strstr(moe_last_error(), "y"));
    CHECK(all_poison(b.out, 4 * b.h * 4));
    free(yk);
    free(ws);
    io_free(&b);
    moe_layer_destroy(l);
}

/* Creation reads only the rank's experts: a NaN block scale in expert 15 fails the rank that
 * owns it (naming the expert) and no other. */
static void check_reads_own(const char *dir, const char *config)
{
    const char *bad = "model.layers.1.mlp.experts.15.up_proj.weight_scale_inv";
    const fx_damage nan = {NULL, bad};
    fx_write_model_ex(dir, config, 77, &nan);
    moe_model *m = fx_open(dir, false);
    moe_layer *l = NULL;
    CHECK(moe_layer_create(m, 1, NULL, &l) == MOE_EVALUE); /* the damage is seen at all */
    for (int r = 0; r < 2; r++) {
        moe_ep_placement pl = {sizeof pl, r, 2, NULL, 0};
        l = NULL;
        const moe_status st = moe_layer_create_ep(m, 1, NULL, &pl, &l);
        if (r == 0) {
            CHECKF(st == MOE_OK, "rank 0 read expert 15: %s", moe_last_error());
        } else {
            CHECK(st == MOE_EVALUE);
            CHECKF(strstr(moe_last_error(), "expert 15 gate/up: up") != NULL, "%s",
                   moe_last_error());
        }
        moe_layer_destroy(l);
    }
    moe_model_close(m);
    fx_remove_model(dir);
}

/* A layer whose routing weights scale the experts' inputs (llama4): moe_ep_get_info says so
 * (where info->size covers the field), and step 3 needs each row's weight: missing (NULL, or
 * beyond args->size) is MOE_EINVAL, a non-finite one MOE_EVALUE naming the row, y untouched. */
static void check_scale_input_errors(const moe_model *m, int layer)
{
    const moe_layer_options o = fx_options(THREADS, MOE_RECIPE_F32);
    moe_ep_placement pl = {sizeof pl, 1, 2, NULL, 0}; /* experts 8-15 */
    moe_layer *l = NULL;
    REQUIRE(moe_layer_create_ep(m, layer, &o, &pl, &l) == MOE_OK);
    moe_ep_info info;
    memset(&info, POISON, sizeof info);
    info.size = offsetof(moe_ep_info, scales_input); /* an older caller's struct */
    CHECK(moe_ep_get_info(l, &info) == MOE_OK && all_poison(&info.scales_input, sizeof(int)));
    info.size = sizeof info;
    CHECK(moe_ep_get_info(l, &info) == MOE_OK && info.scales_input == 1);
    CHECKF(strstr(moe_layer_explain(l), "rows travel with their routing weights") != NULL, "%s",
           moe_layer_explain(l));
    fwd_io b;
    io_make(&b, l, 3);
    const size_t wsb = moe_ep_workspace_size(l, 0, 3);
    void *ws = ws_alloc(wsb);
    const int32_t ex[3] = {8, 15, 8};
    float w[3] = {0.25f, 0.5f, 0.75f};
    float *y = malloc(3 * b.h * 4);
    REQUIRE(y);
    memset(y, POISON, 3 * b.h * 4);
    moe_ep_rows_args ra = f32_rows(&b, 3, ex, y, ws, wsb); /* .weights NULL */
    CHECKF(moe_ep_experts(l, &ra) == MOE_EINVAL && strstr(moe_last_error(), "args->weights") &&
               strstr(moe_last_error(), "is NULL"),
           "%s", moe_last_error());
    ra.weights = w;
    ra.size = offsetof(moe_ep_rows_args, weights); /* an older caller's struct */
    CHECKF(moe_ep_experts(l, &ra) == MOE_EINVAL && strstr(moe_last_error(), "beyond args->size"),
           "%s", moe_last_error());
    ra.size = sizeof ra;
    w[1] = INFINITY;
    CHECKF(moe_ep_experts(l, &ra) == MOE_EVALUE &&
               strstr(moe_last_error(), "weights[1] = inf is not finite"),
           "%s", moe_last_error());
    CHECK(all_poison(y, 3 * b.h * 4));
    w[1] = 0.5f;
    CHECK(moe_ep_experts(l, &ra) == MOE_OK && !all_poison(y, 3 * b.h * 4));
    /* The weight is each row's own: rows 0 and 2 share an expert, and row 2 with row 0's
     * input and weight computes row 0's output. */
    memcpy(b.x + 2 * b.h, b.x, b.h * 4);
    w[2] = w[0];
    CHECK(moe_ep_experts(l, &ra) == MOE_OK && !memcmp(y, y + 2 * b.h, b.h * 4));
    free(y);
    free(ws);
    io_free(&b);
    moe_layer_destroy(l);
}

int main(void)
{
    char dir[] = "/tmp/moe_test_layer_ep_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    for (size_t i = 0; i < N_FAM_CASES; i++) {
        const fam_case *fc = &fam_cases[i];
        fx_write_model(dir, fc->config, 1300 + i);
        moe_model *m = fx_open(dir, false);
        const int layers[2] = {fc->moe_layer, fc->other_layer};
        const bool llama4 = !strcmp(fc->name, "llama4");
        for (int li = 0; li < 2; li++) {
            if (layers[li] < 0) continue;
            check_layer(m, layers[li], MOE_RECIPE_F32, T_MAX, fc->name);
            if (li == 0) {
                check_layer(m, layers[li], MOE_RECIPE_BF16, T_MAX, fc->name);
                check_layer(m, layers[li], MOE_RECIPE_TILE, T_MAX, fc->name);
                check_bytes(m, layers[li], fc->name);
            }
            /* One token (every other rank empty), each recipe where the weights scale the
             * experts' inputs. */
            if (li == 0) check_layer(m, layers[li], MOE_RECIPE_F32, 1, fc->name);
            if (li == 0 && llama4) {
                check_layer(m, layers[li], MOE_RECIPE_BF16, 1, fc->name);
                check_layer(m, layers[li], MOE_RECIPE_TILE, 1, fc->name);
            }
        }
        if (llama4) check_scale_input_errors(m, fc->moe_layer);
        if (!strcmp(fc->name, "deepseek_v3")) check_errors(m, 1, false);
        if (!strcmp(fc->name, "deepseek_v4_fp8")) check_errors(m, 0, true);
        moe_model_close(m);
        fx_remove_model(dir);
        if (!strcmp(fc->name, "deepseek_v3_fp8")) check_reads_own(dir, fc->config);
    }
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
