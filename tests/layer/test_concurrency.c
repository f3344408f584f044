/* test_concurrency.c — eight threads at once (forward, route, open/create/close) get the serial bits. */
#include <pthread.h>
#include <sys/stat.h>

#include "layer_fixture.h"

/*
 * Each part computes every call serially first, on the main thread, then makes eight threads
 * repeat the same calls at once, released together by a barrier, each with its own workspace
 * and outputs, and compares bit for bit. scripts/tsan.sh runs this program under
 * ThreadSanitizer (with OMP_THREAD_LIMIT=1: libgomp is not built with TSan, so its barriers
 * would show as races between the threads of one team; one thread per team leaves only the
 * eight callers, which are plain pthreads).
 */

enum { THREADS = 8, ROUNDS = 3, POOL = 64, LAYER_THREADS = 2 };

static const size_t batch_sizes[] = {1, 3, 17, 64};
#define N_BATCH (sizeof batch_sizes / sizeof batch_sizes[0])

static pthread_barrier_t start_line;

static void run_threads(void *(*fn)(void *), void *jobs, size_t job_size)
{
    pthread_t th[THREADS];
    REQUIRE(pthread_barrier_init(&start_line, NULL, THREADS) == 0);
    for (int t = 0; t < THREADS; t++)
        REQUIRE(pthread_create(&th[t], NULL, fn, (char *)jobs + (size_t)t * job_size) == 0);
    for (int t = 0; t < THREADS; t++)
        REQUIRE(pthread_join(th[t], NULL) == 0);
    pthread_barrier_destroy(&start_line);
}

/* ---- Layer forward ---------------------------------------------------------------------- */

typedef struct pool {
    const moe_layer *l;
    size_t h, e, k;
    float *x;
    int32_t *tokens;
} pool;

/* One forward's outputs. */
typedef struct result {
    size_t first, n;
    float *out, *logits, *w;
    int32_t *ids;
    moe_status st;
} result;

static void result_alloc(result *r, const pool *p, size_t first, size_t n)
{
    r->first = first;
    r->n = n;
    r->out = malloc(n * p->h * 4);
    r->logits = malloc(n * p->e * 4);
    r->w = malloc(n * p->k * 4);
    r->ids = malloc(n * p->k * 4);
    REQUIRE(r->out && r->logits && r->w && r->ids);
}

static void result_free(result *r)
{
    free(r->out);
    free(r->logits);
    free(r->w);
    free(r->ids);
}

static moe_status forward(const pool *p, result *r, void *ws, size_t ws_size)
{
    moe_forward_args a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.n_tokens = r->n;
    a.hidden_size = p->h;
    a.hidden = p->x + r->first * p->h;
    a.hidden_dtype = MOE_DTYPE_F32;
    a.token_ids = p->tokens + r->first;
    a.token_id_dtype = MOE_DTYPE_I32;
    a.out = r->out;
    a.logits_out = r->logits;
    a.ids_out = r->ids;
    a.weights_out = r->w;
    a.workspace = ws;
    a.workspace_size = ws_size;
    return moe_layer_forward(p->l, &a);
}

static bool same_result(const pool *p, const result *a, const result *b)
{
    return a->st == b->st && !memcmp(a->out, b->out, a->n * p->h * 4) &&
           !memcmp(a->logits, b->logits, a->n * p->e * 4) &&
           !memcmp(a->ids, b->ids, a->n * p->k * 4) && !memcmp(a->w, b->w, a->n * p->k * 4);
}

typedef struct fwd_job {
    const pool *p;
    result r[ROUNDS];
} fwd_job;

/* The rows of thread T in round R: a batch size and offset that differ between threads. */
static void job_rows(int t, int r, size_t *first, size_t *n)
{
    *n = batch_sizes[(size_t)(t + r) % N_BATCH];
    *first = (size_t)(t * 7 + r * 13) % (POOL - *n + 1);
}

static void *fwd_main(void *arg)
{
    fwd_job *j = arg;
    size_t ws_size;
    void *ws = fx_workspace(j->p->l, POOL, &ws_size);
    pthread_barrier_wait(&start_line);
    for (int r = 0; r < ROUNDS; r++)
        j->r[r].st = forward(j->p, &j->r[r], ws, ws_size);
    free(ws);
    return NULL;
}

static void pool_make(pool *p, const moe_model *m, int layer, uint64_t seed)
{
    const moe_layer_options o = {
        .size = sizeof o, .threads = LAYER_THREADS, .logits_dtype = MOE_DTYPE_INVALID};
    moe_layer *l = NULL;
    REQUIRE(moe_layer_create(m, layer, &o, &l) == MOE_OK);
    const moe_layer_desc *ld = &moe_model_desc_of(m)->layers[layer];
    p->l = l;
    p->h = (size_t)moe_model_desc_of(m)->hidden;
    p->e = (size_t)ld->routing.n_experts;
    p->k = (size_t)ld->routing.top_k;
    p->x = malloc(POOL * p->h * 4);
    p->tokens = malloc(POOL * 4);
    REQUIRE(p->x && p->tokens);
    fx_hidden(seed, POOL * p->h, p->x);
    for (size_t t = 0; t < POOL; t++)
        p->tokens[t] = (int32_t)((t * 389 + seed) % 1000);
}

static void pool_free(pool *p)
{
    moe_layer_destroy((moe_layer *)p->l);
    free(p->x);
    free(p->tokens);
}

/* Eight threads on two layers at once (threads alternate), against the serial calls. */
static void test_forward(const pool *pools, int n_pools)
{
    fwd_job jobs[THREADS], serial[THREADS];
    for (int t = 0; t < THREADS; t++) {
        const pool *p = &pools[t % n_pools];
        jobs[t].p = serial[t].p = p;
        for (int r = 0; r < ROUNDS; r++) {
            size_t first, n;
            job_rows(t, r, &first, &n);
            result_alloc(&jobs[t].r[r], p, first, n);
            result_alloc(&serial[t].r[r], p, first, n);
            memset(jobs[t].r[r].out, 0xA5, n * p->h * 4);
        }
    }
    for (int t = 0; t < THREADS; t++) {
        size_t ws_size;
        void *ws = fx_workspace(serial[t].p->l, POOL, &ws_size);
        for (int r = 0; r < ROUNDS; r++) {
            serial[t].r[r].st = forward(serial[t].p, &serial[t].r[r], ws, ws_size);
            CHECK_STATUS(serial[t].r[r].st, MOE_OK);
        }
        free(ws);
    }
    run_threads(fwd_main, jobs, sizeof jobs[0]);
    for (int t = 0; t < THREADS; t++)
        for (int r = 0; r < ROUNDS; r++) {
            const result *a = &jobs[t].r[r], *b = &serial[t].r[r];
            CHECKF(same_result(jobs[t].p, a, b),
                   "thread %d round %d (layer %d, rows %zu..%zu): differs from the serial call "
                   "(status %d)",
                   t, r, jobs[t].p->l->plan.index, a->first, a->first + a->n - 1, (int)a->st);
            result_free(&jobs[t].r[r]);
            result_free(&serial[t].r[r]);
        }
}

/* ---- Router forward ------------------------------------------------------------------------ */

enum { R_ROWS = 512, R_E = 256, R_K = 8, R_VOCAB = 4096 };

typedef struct route_job {
    const moe_router *r;
    const float *logits;
    const int32_t *tokens;
    size_t first, n;
    int32_t ids[ROUNDS][R_ROWS * R_K];
    float w[ROUNDS][R_ROWS * R_K];
    moe_status st[ROUNDS];
} route_job;

static void *route_main(void *arg)
{
    route_job *j = arg;
    pthread_barrier_wait(&start_line);
    for (int r = 0; r < ROUNDS; r++)
        j->st[r] = moe_router_forward(j->r, j->n, j->logits + j->first * R_E, j->tokens + j->first,
                                      MOE_DTYPE_I32, j->ids[r], j->w[r]);
    return NULL;
}

static void test_router(const route_cfg *c, const float *bias, const int32_t *table)
{
    moe_router_params params = route_params(c, bias, table, R_VOCAB);
    moe_router *router = NULL;
    REQUIRE(moe_router_create(&params, &router) == MOE_OK);
    float *logits = malloc(R_ROWS * R_E * sizeof *logits);
    int32_t *tokens = malloc(R_ROWS * sizeof *tokens);
    int32_t *ids = malloc(R_ROWS * R_K * sizeof *ids);
    float *w = malloc(R_ROWS * R_K * sizeof *w);
    route_job *jobs = calloc(THREADS, sizeof *jobs);
    REQUIRE(logits && tokens && ids && w && jobs);
    rng g = {0xC0C0 + (uint64_t)c->method};
    for (size_t i = 0; i < R_ROWS * R_E; i++)
        logits[i] = rng_uniform(&g, -4, 4);
    for (size_t t = 0; t < R_ROWS; t++)
        tokens[t] = rng_below(&g, R_VOCAB);
    /* Serial: all rows in one call (each row's result does not depend on the others). */
    CHECK_STATUS(moe_router_forward(router, R_ROWS, logits, tokens, MOE_DTYPE_I32, ids, w), MOE_OK);
    for (int t = 0; t < THREADS; t++) {
        jobs[t].r = router;
        jobs[t].logits = logits;
        jobs[t].tokens = tokens;
        jobs[t].n = (size_t)(1 + t * 71 % R_ROWS);
        jobs[t].first = (size_t)(t * 37) % (R_ROWS - jobs[t].n + 1);
    }
    run_threads(route_main, jobs, sizeof *jobs);
    for (int t = 0; t < THREADS; t++)
        for (int r = 0; r < ROUNDS; r++) {
            const route_job *j = &jobs[t];
            CHECK_STATUS(j->st[r], MOE_OK);
            CHECKF(!memcmp(j->ids[r], ids + j->first * R_K, j->n * R_K * 4) &&
                       !memcmp(j->w[r], w + j->first * R_K, j->n * R_K * 4),
                   "%s: thread %d round %d (rows %zu..%zu) differs from the serial call", c->name,
                   t, r, j->first, j->first + j->n - 1);
        }
    free(logits);
    free(tokens);
    free(ids);
    free(w);
    free(jobs);
    moe_router_destroy(router);
}

/* ---- Open, create, forward, close ---------------------------------------------------------- */

enum { OC_TOKENS = 5 };

typedef struct open_job {
    int t;
    const char *dir;          /* the good model */
    const moe_model *shared;  /* a model every thread creates from, or NULL: open your own */
    const char *missing_root; /* the parent of a folder that does not exist */
    const float *x;
    size_t h, e, k;
    float out[ROUNDS][OC_TOKENS * 320];
    moe_status st[ROUNDS];
    bool own_message[ROUNDS]; /* the failed open's message names this thread's folder */
} open_job;

/* open (or use the shared model) -> create layer 1 -> forward OC_TOKENS rows -> destroy ->
 * close. */
static moe_status open_create_forward(const open_job *j, float *out)
{
    moe_model *m = NULL;
    moe_status st = MOE_OK;
    if (!j->shared && (st = moe_model_open(j->dir, NULL, &m))) return st;
    const moe_model *use = j->shared ? j->shared : m;
    const moe_layer_options o = {.size = sizeof o, .threads = 1, .logits_dtype = MOE_DTYPE_INVALID};
    moe_layer *l = NULL;
    st = moe_layer_create(use, 1, &o, &l);
    if (!st) {
        size_t ws_size;
        void *ws = fx_workspace(l, OC_TOKENS, &ws_size);
        const moe_forward_args a = fx_args(OC_TOKENS, j->h, j->x, out, ws, ws_size);
        st = moe_layer_forward(l, &a);
        free(ws);
    }
    moe_layer_destroy(l);
    moe_model_close(m);
    return st;
}

static void *open_main(void *arg)
{
    open_job *j = arg;
    char missing[256];
    snprintf(missing, sizeof missing, "%s/missing-%d", j->missing_root, j->t);
    pthread_barrier_wait(&start_line);
    for (int r = 0; r < ROUNDS; r++) {
        /* A failure on this thread, then a success: the message is this thread's own. */
        moe_model *m = NULL;
        if (moe_model_open(missing, NULL, &m) == MOE_EMISSING)
            j->own_message[r] = strstr(moe_last_error(), missing) != NULL;
        j->st[r] = open_create_forward(j, j->out[r]);
        /* Success may leave the message as it was, but never another thread's. */
        const char *msg = moe_last_error();
        if (strstr(msg, "/missing-") && !strstr(msg, missing)) j->own_message[r] = false;
    }
    return NULL;
}

static void test_open_close(const char *dir, const char *root, const moe_model *shared)
{
    moe_model *m = fx_open(dir, false);
    const size_t h = (size_t)moe_model_desc_of(m)->hidden;
    REQUIRE(h <= 320);
    float *x = malloc(OC_TOKENS * h * sizeof *x), *want = malloc(OC_TOKENS * h * sizeof *want);
    open_job *jobs = calloc(THREADS, sizeof *jobs);
    REQUIRE(x && want && jobs);
    fx_hidden(55, OC_TOKENS * h, x);
    open_job serial = {0};
    serial.dir = dir;
    serial.x = x;
    serial.h = h;
    CHECK_STATUS(open_create_forward(&serial, want), MOE_OK);
    moe_model_close(m);
    for (int t = 0; t < THREADS; t++) {
        jobs[t].t = t;
        jobs[t].dir = dir;
        jobs[t].shared = shared;
        jobs[t].missing_root = root;
        jobs[t].x = x;
        jobs[t].h = h;
    }
    run_threads(open_main, jobs, sizeof *jobs);
    for (int t = 0; t < THREADS; t++)
        for (int r = 0; r < ROUNDS; r++) {
            CHECK_STATUS(jobs[t].st[r], MOE_OK);
            CHECKF(!memcmp(jobs[t].out[r], want, OC_TOKENS * h * 4),
                   "%s: thread %d round %d: output differs from the serial run",
                   shared ? "create on a shared model" : "open/create/close", t, r);
            CHECKF(jobs[t].own_message[r],
                   "thread %d round %d: the last error is not this thread's own", t, r);
        }
    free(x);
    free(want);
    free(jobs);
}

int main(void)
{
    char root[] = "/tmp/moe_test_concurrency_XXXXXX";
    REQUIRE(mkdtemp(root) != NULL);
    char v3[128], v4[128];
    snprintf(v3, sizeof v3, "%s/v3", root);
    snprintf(v4, sizeof v4, "%s/v4", root);
    REQUIRE(mkdir(v3, 0700) == 0 && mkdir(v4, 0700) == 0);
    fx_write_model(v3, fam_cases[2].config, 41); /* FP8, shared expert; layer 1 routed */
    fx_write_model(v4, fam_cases[7].config, 42); /* layer 0 hash-routed */
    moe_model *m3 = fx_open(v3, false), *m4 = fx_open(v4, false);

    /* Layer forward: a routed layer with a shared expert and a hash layer, together. */
    pool pools[2];
    pool_make(&pools[0], m3, 1, 7);
    pool_make(&pools[1], m4, 0, 8);
    test_forward(pools, 2);
    pool_free(&pools[0]);
    pool_free(&pools[1]);

    /* Router forward: DeepSeek-V3's shape (the fused noaux_tc path on AVX-512) and a hash
     * router. */
    float bias[R_E];
    rng g = {99};
    for (int i = 0; i < R_E; i++)
        bias[i] = rng_uniform(&g, -0.1, 0.1);
    int32_t *table = malloc((size_t)R_VOCAB * R_K * sizeof *table);
    REQUIRE(table);
    rng_table(&g, R_VOCAB, R_K, R_E, table);
    const route_cfg noaux = {"noaux_tc", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, R_E, R_K, 8, 4,
                             true, 2.5f};
    const route_cfg hash = {"hash", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, R_E, R_K, 1, 1,
                            true, 1.5f};
    test_router(&noaux, bias, NULL);
    test_router(&hash, NULL, table);
    free(table);

    /* Open/create/close from eight threads, then eight threads creating from one model. */
    test_open_close(v3, root, NULL);
    test_open_close(v3, root, m3);

    moe_model_close(m3);
    moe_model_close(m4);
    fx_remove_model(v3);
    fx_remove_model(v4);
    CHECK(rmdir(v3) == 0 && rmdir(v4) == 0 && rmdir(root) == 0);
    return TEST_END();
}
