/* test_layer_invariance.c — same token, same bits: batches, thread counts, concurrent callers. */
#include <pthread.h>

#include "layer_fixture.h"

enum { POOL = 300, KEEP = 32 };

typedef struct run_ctx {
    const moe_layer *l;
    size_t n, h, e, k;
    const float *x;
    const int32_t *tokens;
} run_ctx;

typedef struct run_out {
    float *out, *logits, *w;
    int32_t *ids;
} run_out;

static void out_alloc(run_out *o, size_t n, size_t h, size_t e, size_t k)
{
    o->out = malloc(n * h * 4);
    o->logits = malloc(n * e * 4);
    o->w = malloc(n * k * 4);
    o->ids = malloc(n * k * 4);
    REQUIRE(o->out && o->logits && o->w && o->ids);
}

static void out_free(run_out *o)
{
    free(o->out);
    free(o->logits);
    free(o->w);
    free(o->ids);
}

/* One forward of rows [first, first + n) of the pool into O at row OFFSET. */
static moe_status forward_rows(const run_ctx *c, size_t first, size_t n, run_out *o, size_t offset)
{
    size_t ws_size;
    void *ws = fx_workspace(c->l, n, &ws_size);
    moe_forward_args a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.n_tokens = n;
    a.hidden_size = c->h;
    a.hidden = c->x + first * c->h;
    a.hidden_dtype = MOE_DTYPE_F32;
    a.token_ids = c->tokens + first;
    a.token_id_dtype = MOE_DTYPE_I32;
    a.out = o->out + offset * c->h;
    const bool moe = c->l->plan.moe;
    a.logits_out = moe ? o->logits + offset * c->e : NULL;
    a.ids_out = moe ? o->ids + offset * c->k : NULL;
    a.weights_out = moe ? o->w + offset * c->k : NULL;
    a.workspace = ws;
    a.workspace_size = ws_size;
    moe_status st = moe_layer_forward(c->l, &a);
    free(ws);
    return st;
}

static bool same_rows(const run_ctx *c, const run_out *a, size_t first, const run_out *b, size_t n)
{
    bool same = !memcmp(a->out + first * c->h, b->out, n * c->h * 4);
    if (c->l->plan.moe)
        same = same && !memcmp(a->logits + first * c->e, b->logits, n * c->e * 4) &&
               !memcmp(a->ids + first * c->k, b->ids, n * c->k * 4) &&
               !memcmp(a->w + first * c->k, b->w, n * c->k * 4);
    return same;
}

typedef struct thread_job {
    const run_ctx *c;
    size_t n;
    run_out o;
    moe_status st;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    j->st = forward_rows(j->c, 0, j->n, &j->o, 0);
    return NULL;
}

static moe_layer *make(const moe_model *m, int layer, int threads, const moe_cpu_caps *caps,
                       int recipe)
{
    const moe_layer_options o = fx_options(threads, recipe);
    const moe_layer_tuning tune = {caps, 0};
    return fx_layer(m, layer, &o, &tune);
}

/* Tokens alone = batches of several sizes = 1 and 2 threads = concurrent callers, for the first
 * POOL tokens; keep (NULL or KEEP rows) receives the first KEEP tokens' outputs alone. */
static void run_layer(const moe_model *m, int layer, const moe_cpu_caps *caps, int recipe,
                      size_t pool, const char *what, float *keep)
{
    const moe_model_desc *d = moe_model_desc_of(m);
    const moe_layer_desc *ld = &d->layers[layer];
    moe_layer *l1 = make(m, layer, 1, caps, recipe), *l2 = make(m, layer, 2, caps, recipe);
    run_ctx c = {l1,
                 pool,
                 (size_t)d->hidden,
                 (size_t)(ld->kind == MOE_LAYER_DENSE ? 1 : ld->routing.n_experts),
                 (size_t)(ld->kind == MOE_LAYER_DENSE ? 1 : ld->routing.top_k),
                 NULL,
                 NULL};
    float *x = malloc(POOL * c.h * 4);
    int32_t *tokens = malloc(POOL * 4);
    REQUIRE(x && tokens);
    fx_hidden(77 + (uint64_t)layer, POOL * c.h, x);
    for (size_t t = 0; t < POOL; t++)
        tokens[t] = (int32_t)((t * 131 + 17) % 1000);
    /* A few rows that are not finite must not disturb anything (the other rows included). */
    x[5 * c.h + 3] = NAN;
    x[9 * c.h] = INFINITY;
    x[11 * c.h + 7] = -INFINITY;
    c.x = x;
    c.tokens = tokens;

    /* Every token alone, one thread. */
    run_out alone, batch;
    out_alloc(&alone, POOL, c.h, c.e, c.k);
    out_alloc(&batch, POOL, c.h, c.e, c.k);
    for (size_t t = 0; t < pool; t++)
        REQUIRE(forward_rows(&c, t, 1, &alone, t) == MOE_OK);
    if (l1->plan.moe)
        for (size_t i = 0; i < pool * c.k; i++)
            CHECKF(alone.ids[i] >= 0 && (size_t)alone.ids[i] < c.e, "%s: id %d", what,
                   alone.ids[i]);

    /* Batches of several sizes from several places, 1 and 2 threads. */
    static const size_t sizes[] = {1, 2, 3, 5, 17, 64, 300};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0] && sizes[si] <= pool; si++) {
        const size_t n = sizes[si], first = (si * 41) % (pool - n + 1);
        for (int th = 1; th <= 2; th++) {
            c.l = th == 1 ? l1 : l2;
            CHECK_STATUS(forward_rows(&c, first, n, &batch, 0), MOE_OK);
            CHECKF(same_rows(&c, &alone, first, &batch, n),
                   "%s: a batch of %zu from token %zu with %d threads differs from the tokens "
                   "alone",
                   what, n, first, th);
        }
    }

    /* Four callers at once on one layer, each with its own workspace (one worker each, as a
     * server would run it; the teams of the 2-thread layer ran above). */
    c.l = l1;
    thread_job jobs[4];
    pthread_t tid[4];
    for (int i = 0; i < 4; i++) {
        jobs[i].c = &c;
        jobs[i].n = pool < 64 ? pool : 64;
        jobs[i].st = MOE_OK;
        out_alloc(&jobs[i].o, jobs[i].n, c.h, c.e, c.k);
        REQUIRE(pthread_create(&tid[i], NULL, thread_main, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        REQUIRE(pthread_join(tid[i], NULL) == 0);
        CHECK_STATUS(jobs[i].st, MOE_OK);
        CHECKF(same_rows(&c, &alone, 0, &jobs[i].o, jobs[i].n), "%s: concurrent caller %d differs",
               what, i);
        out_free(&jobs[i].o);
    }
    fprintf(stderr,
            "%s: %zu tokens alone = batches of 1..%zu = 1 and 2 threads = 4 concurrent "
            "callers\n",
            what, pool, pool);
    if (keep) memcpy(keep, alone.out, KEEP * c.h * sizeof *keep);
    out_free(&alone);
    out_free(&batch);
    free(x);
    free(tokens);
    moe_layer_destroy(l1);
    moe_layer_destroy(l2);
}

/* The same bits in a and b, n floats, but for NaN: any NaN equals any NaN. A NaN's sign and
 * payload come from which operand an instruction takes first, which a compiler may swap in
 * commutative operations (at -O0 the vector epilogue and the portable one disagreed on the
 * sign of the token whose input held a NaN), so the recipes promise the NaN, not its bits. */
static bool same_bits_but_nan(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (isnan(a[i]) ? !isnan(b[i]) : memcmp(&a[i], &b[i], sizeof a[i]) != 0) return false;
    return true;
}

/* The tile recipe on bf16, FP8, MXFP4 and INT4 experts (routed, shared and dense groups:
 * DeepSeek-V3 in bf16, FP8 and INT4; gpt-oss's stacked tensors and biases, in bf16 and MXFP4;
 * DeepSeek-V4's MXFP4 routed experts beside FP8 shared ones; Kimi-K2's INT4 experts, group 32):
 * at every level tokens alone = batches of 1..300
 * (best level; 64 above the reference, 32 on it) = 1 and 2 threads, and the same bits at every
 * level, the portable reference's included. */
static void test_tile(const char *dir, const moe_cpu_caps *caps, const char **names,
                      size_t n_levels)
{
    static const char *const families[] = {"deepseek_v3",  "deepseek_v3_fp8", "qwen3_moe",
                                           "gpt_oss",      "gpt_oss_mxfp4",   "deepseek_v4_mxfp4",
                                           "kimi_k2_int4", "deepseek_v3_int4"};
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        const fam_case *fc = NULL;
        for (size_t i = 0; i < N_FAM_CASES; i++)
            if (!strcmp(fam_cases[i].name, families[f])) fc = &fam_cases[i];
        REQUIRE(fc);
        fx_write_model(dir, fc->config, 700 + f);
        moe_model *m = fx_open(dir, false);
        const int layers[2] = {fc->moe_layer, fc->other_layer};
        const size_t h = (size_t)moe_model_desc_of(m)->hidden;
        for (int li = 0; li < 2; li++) {
            if (layers[li] < 0) continue;
            float *first = malloc(KEEP * h * sizeof *first), *out = malloc(KEEP * h * sizeof *out);
            REQUIRE(first && out);
            for (size_t lv = 0; lv < n_levels; lv++) {
                char what[128];
                snprintf(what, sizeof what, "%s layer %d at %s, tile recipe", fc->name, layers[li],
                         names[lv]);
                const size_t pool = lv + 1 == n_levels ? POOL : lv == 0 ? KEEP : 64;
                run_layer(m, layers[li], &caps[lv], MOE_RECIPE_TILE, pool, what,
                          lv == 0 ? first : out);
                if (lv > 0)
                    CHECKF(same_bits_but_nan(first, out, KEEP * h),
                           "%s: the outputs differ from those at %s", what, names[0]);
            }
            free(first);
            free(out);
        }
        moe_model_close(m);
        fx_remove_model(dir);
    }
}

int main(void)
{
    char dir[] = "/tmp/moe_test_layer_inv_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    moe_cpu_caps caps[8];
    const char *names[8];
    const size_t n_levels = fx_levels(caps, names);
    for (size_t i = 0; i < N_FAM_CASES; i++) {
        const fam_case *fc = &fam_cases[i];
        fx_write_model(dir, fc->config, 500 + i);
        moe_model *m = fx_open(dir, false);
        /* The machine's best level everywhere, with both recipes; the f32 recipe at the
         * levels between the reference and the best (other tiles, other MR) on one family,
         * to keep this fast (test_layer_numeric runs the reference kernels). */
        const bool mx = strstr(fc->name, "mxfp4") != NULL || strstr(fc->name, "int4") != NULL;
        /* MXFP4 (the Q8 recipe) at every level: the reference and each SIMD set have their
         * own MR and paths. */
        const size_t first_level = mx ? 0 : i == 2 && n_levels > 1 ? 1 : n_levels - 1;
        for (size_t lv = first_level; lv < n_levels; lv++) {
            for (int recipe = 0; recipe < 2; recipe++) {
                /* The bf16 recipe on a bf16, an FP8 and the gpt-oss layout, and on the
                 * MXFP4 ones (their FP8 shared experts take it; MXFP4 groups run Q8
                 * whatever is asked). */
                if (recipe == MOE_RECIPE_BF16 && !mx &&
                    ((lv + 1 < n_levels && strcmp(names[lv], "avx512") &&
                      strcmp(names[lv], "avx2")) ||
                     (strcmp(fc->name, "qwen3_moe") && strcmp(fc->name, "deepseek_v3_fp8") &&
                      strcmp(fc->name, "gpt_oss"))))
                    continue;
                const int layers[2] = {fc->moe_layer, fc->other_layer};
                for (int li = 0; li < 2; li++) {
                    if (layers[li] < 0) continue;
                    char what[128];
                    snprintf(what, sizeof what, "%s layer %d at %s, %s recipe asked", fc->name,
                             layers[li], names[lv], recipe ? "bf16" : "f32");
                    /* The full 300 for seven families (FP8 with shared experts and a dense
                     * layer; gpt-oss; gpt-oss and DeepSeek-V4 MXFP4; Qwen3-Next's gated shared
                     * expert; Llama-4's scaled expert input; ERNIE-4.5's floored
                     * renormalisation), f32 recipe, best level;
                     * 64 or 32 elsewhere, which keeps the test quick under sanitizers. */
                    const bool f32_best = recipe == MOE_RECIPE_F32 && lv + 1 == n_levels;
                    const bool full = f32_best && (!strcmp(fc->name, "deepseek_v3_fp8") ||
                                                   !strcmp(fc->name, "gpt_oss") ||
                                                   !strcmp(fc->name, "gpt_oss_mxfp4") ||
                                                   !strcmp(fc->name, "deepseek_v4_mxfp4") ||
                                                   !strcmp(fc->name, "kimi_k2_int4") ||

                                                   !strcmp(fc->name, "qwen3_next") ||
                                                   !strcmp(fc->name, "llama4") ||
                                                   !strcmp(fc->name, "ernie4_5_moe"));
                    run_layer(m, layers[li], &caps[lv], recipe,
                              full       ? POOL
                              : f32_best ? 64
                                         : 32,
                              what, NULL);
                }
            }
        }
        moe_model_close(m);
        fx_remove_model(dir);
    }
    /* DeepSeek-V3 saved in f32 and in f16 (dense, shared and routed groups of the f32 sets,
     * which have their own tiles and MR at each level): every level, both recipes asked (a
     * bf16 request runs the f32 recipe on them). */
    static const moe_dtype plain[2] = {MOE_DTYPE_F32, MOE_DTYPE_F16};
    for (int pi = 0; pi < 2; pi++) {
        const fam_case *fc = &fam_cases[1];
        REQUIRE(!strcmp(fc->name, "deepseek_v3"));
        fx_write_model_full(dir, fc->config, 900 + (uint64_t)pi, NULL, NULL, plain[pi]);
        moe_model *m = fx_open(dir, false);
        for (size_t lv = 0; lv < n_levels; lv++)
            for (int recipe = 0; recipe < 2; recipe++)
                for (int li = 0; li < 2; li++) {
                    const int layer = li ? fc->other_layer : fc->moe_layer;
                    char what[128];
                    snprintf(what, sizeof what, "%s in %s layer %d at %s, %s recipe asked",
                             fc->name, moe_dtype_name(plain[pi]), layer, names[lv],
                             recipe ? "bf16" : "f32");
                    const bool best = lv + 1 == n_levels && recipe == MOE_RECIPE_F32;
                    run_layer(m, layer, &caps[lv], recipe, best ? POOL : 32, what, NULL);
                }
        moe_model_close(m);
        fx_remove_model(dir);
    }
    test_tile(dir, caps, names, n_levels);
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
