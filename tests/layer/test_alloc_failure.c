/* test_alloc_failure.c — every allocation reached by open, create and router create, failed in
 * turn. */
#include <sys/stat.h>

#include "layer_fixture.h"

/*
 * For each operation and n = 1, 2, ...: moe_alloc_fail_nth(n) fails the n-th allocation of this
 * thread, the operation runs, and then either
 *  - it reached the n-th allocation: it must return MOE_ENOMEM with a message, leave its
 *    out-pointer as it was (a sentinel), and hold no file descriptor or mapping afterwards;
 *    memory it took is LeakSanitizer's to find (the sanitizer build runs this test); or
 *  - it made fewer than n allocations: it must succeed, and the walk of that operation ends.
 * Layers are created with one thread, so every allocation happens on this thread and is
 * counted. A successful forward on each layer then checks that the handle is whole, and that
 * forward allocates nothing.
 */

/* One operation under test: returns its status and stores its handle (if any) in *out. */
typedef struct op {
    const char *what;
    moe_status (*run)(const struct op *op, void **out);
    void (*release)(void *handle);
    const char *dir;
    const moe_model *model;
    int layer;
    bool no_mmap;
    const moe_router_params *params;
} op;

static moe_status run_open(const op *o, void **out)
{
    const moe_open_options opt = {sizeof opt, o->no_mmap};
    return moe_model_open(o->dir, &opt, (moe_model **)out);
}

static moe_status run_create(const op *o, void **out)
{
    const moe_layer_options opt = {
        .size = sizeof opt, .threads = 1, .logits_dtype = MOE_DTYPE_INVALID};
    return moe_layer_create(o->model, o->layer, &opt, (moe_layer **)out);
}

static moe_status run_router_model(const op *o, void **out)
{
    return moe_router_create_from_model(o->model, o->layer, (moe_router **)out);
}

static moe_status run_router(const op *o, void **out)
{
    return moe_router_create(o->params, (moe_router **)out);
}

static void release_model(void *h) { moe_model_close(h); }
static void release_layer(void *h) { moe_layer_destroy(h); }
static void release_router(void *h) { moe_router_destroy(h); }

static const char *g_root;

/* Walks n = 1, 2, ... for O; returns the number of allocations of a successful run. */
static uint64_t walk(const op *o)
{
    const int fds = fx_fd_count(), maps = fx_map_count(g_root);
    for (uint64_t n = 1;; n++) {
        void *h = SENTINEL;
        moe_alloc_fail_nth(n);
        const moe_status st = o->run(o, &h);
        const uint64_t calls = moe_alloc_calls();
        moe_alloc_fail_nth(0);
        if (calls < n) {
            CHECKF(st == MOE_OK, "%s: without a failed allocation: status %d: %s", o->what, st,
                   moe_last_error());
            if (st == MOE_OK) o->release(h);
            return calls;
        }
        CHECKF(st == MOE_ENOMEM, "%s: allocation %llu of %llu failed: status %d (%s): %s", o->what,
               (unsigned long long)n, (unsigned long long)calls, st, moe_status_string(st),
               moe_last_error());
        CHECKF(moe_last_error()[0] != '\0', "%s: allocation %llu failed: no message", o->what,
               (unsigned long long)n);
        CHECKF(h == SENTINEL, "%s: allocation %llu failed: *out was written", o->what,
               (unsigned long long)n);
        if (st == MOE_OK && h != SENTINEL) o->release(h);
        CHECKF(fx_fd_count() == fds, "%s: allocation %llu failed: %d file descriptors left open",
               o->what, (unsigned long long)n, fx_fd_count() - fds);
        CHECKF(fx_map_count(g_root) == maps, "%s: allocation %llu failed: %d mappings left", o->what,
               (unsigned long long)n, fx_map_count(g_root) - maps);
        if (test_failures_ > 50) return calls; /* one broken path fails every n after it */
    }
}

/* A forward of a few tokens on L: it must succeed and allocate nothing. */
static void forward_ok(const moe_layer *l, const char *what)
{
    const size_t n = 3, h = (size_t)l->plan.desc->hidden;
    float *x = malloc(n * h * sizeof *x), *y = malloc(n * h * sizeof *y);
    const int32_t tokens[3] = {1, 500, 999};
    size_t ws_size;
    void *ws = fx_workspace(l, n, &ws_size);
    REQUIRE(x && y);
    fx_hidden(4, n * h, x);
    moe_forward_args a = fx_args(n, h, x, y, ws, ws_size);
    a.token_ids = tokens;
    a.token_id_dtype = MOE_DTYPE_I32;
    moe_alloc_fail_nth(1);
    const moe_status st = moe_layer_forward(l, &a);
    const uint64_t calls = moe_alloc_calls();
    moe_alloc_fail_nth(0);
    CHECKF(st == MOE_OK, "%s: forward: %s", what, moe_last_error());
    CHECKF(calls == 0, "%s: forward made %llu allocations", what, (unsigned long long)calls);
    free(x);
    free(y);
    free(ws);
}

static void family(const fam_case *fc, const char *root, bool no_mmap)
{
    char dir[256], what[128];
    snprintf(dir, sizeof dir, "%s/%s", root, fc->name);
    REQUIRE(mkdir(dir, 0700) == 0 || access(dir, F_OK) == 0);
    fx_write_model(dir, fc->config, 31);

    snprintf(what, sizeof what, "%s: open%s", fc->name, no_mmap ? " (no_mmap)" : "");
    op o = {what, run_open, release_model, dir, NULL, 0, no_mmap, NULL};
    uint64_t total = walk(&o);
    moe_model *m = fx_open(dir, no_mmap);
    for (int layer = 0; layer < moe_model_layer_count(m); layer++) {
        snprintf(what, sizeof what, "%s: create layer %d%s", fc->name, layer,
                 no_mmap ? " (no_mmap)" : "");
        o = (op){what, run_create, release_layer, dir, m, layer, no_mmap, NULL};
        total += walk(&o);
        moe_layer *l = NULL;
        const moe_layer_options opt = {
            .size = sizeof opt, .threads = 1, .logits_dtype = MOE_DTYPE_INVALID};
        REQUIRE(moe_layer_create(m, layer, &opt, &l) == MOE_OK);
        forward_ok(l, what);
        moe_layer_destroy(l);
        if (moe_model_desc_of(m)->layers[layer].kind == MOE_LAYER_DENSE) continue;
        snprintf(what, sizeof what, "%s: router of layer %d", fc->name, layer);
        o = (op){what, run_router_model, release_router, dir, m, layer, no_mmap, NULL};
        total += walk(&o);
    }
    moe_model_close(m);
    fprintf(stderr, "%s%s: %llu allocations walked\n", fc->name, no_mmap ? " (no_mmap)" : "",
            (unsigned long long)total);
    fx_remove_model(dir);
    rmdir(dir);
}

/* moe_router_create from parameters: a hash router with its table, and a noaux_tc one. */
static void routers(void)
{
    enum { E = 16, K = 4, VOCAB = 100 };
    static int32_t table[VOCAB * K];
    static float bias[E];
    for (int r = 0; r < VOCAB; r++)
        for (int j = 0; j < K; j++)
            table[r * K + j] = (r + 3 * j) % E;
    for (int e = 0; e < E; e++)
        bias[e] = 0.01f * (float)e;
    const route_cfg hash = {"hash", MOE_ROUTE_HASH, MOE_SCORE_SQRTSOFTPLUS, E, K, 1, 1, true, 1.5f};
    const route_cfg noaux = {"noaux", MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, E, K, 4, 2, true,
                             2.5f};
    moe_router_params p = route_params(&hash, NULL, table, VOCAB);
    op o = {"moe_router_create (hash)", run_router, release_router, NULL, NULL, 0, false, &p};
    walk(&o);
    moe_router_params q = route_params(&noaux, bias, NULL, 0);
    o.what = "moe_router_create (noaux_tc)";
    o.params = &q;
    walk(&o);
}

int main(void)
{
    char root[] = "/tmp/moe_alloc_failure_XXXXXX";
    REQUIRE(mkdtemp(root));
    g_root = root;
    for (size_t i = 0; i < N_FAM_CASES; i++)
        family(&fam_cases[i], root, false);
    family(&fam_cases[2], root, true); /* the read-into-memory path of one FP8 checkpoint */
    routers();
    rmdir(root);
    return TEST_END();
}
