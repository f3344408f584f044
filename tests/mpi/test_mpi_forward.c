/* test_mpi_forward.c — libmoe_mpi under mpirun: bit for bit one process; faults agreed. */
#include <mpi.h>

#include "layer/layer_fixture.h"
#include "moe_mpi.h"

enum { T = 11, THREADS = 1 };

static int rank_, size_;

/* Every rank's check counts: the test fails on a rank whose own checks failed. */
#define POISON 0xA5u

static bool all_poison(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != POISON) return false;
    return true;
}

/* The one-process forward of LAYER for T tokens, on this rank, as the expected values. */
typedef struct want {
    size_t h, k;
    float *out, *w;
    int32_t *ids;
} want;

static void one_process(const moe_model *m, int layer, const moe_layer_options *o, const void *x,
                        moe_dtype xdt, const int32_t *tok, want *wt)
{
    moe_layer *l = NULL;
    REQUIRE(moe_layer_create(m, layer, o, &l) == MOE_OK);
    moe_layer_info li = {.size = sizeof li};
    REQUIRE(moe_layer_get_info(l, &li) == MOE_OK);
    wt->h = (size_t)li.hidden_size;
    wt->k = li.top_k > 0 ? (size_t)li.top_k : 1;
    wt->out = malloc(T * wt->h * 4);
    wt->w = malloc(T * wt->k * 4);
    wt->ids = malloc(T * wt->k * 4);
    size_t wsb;
    void *ws = fx_workspace(l, T, &wsb);
    REQUIRE(wt->out && wt->w && wt->ids);
    moe_forward_args a = fx_args(T, wt->h, x, wt->out, ws, wsb);
    a.hidden_dtype = xdt;
    a.token_ids = tok;
    a.token_id_dtype = MOE_DTYPE_I32;
    if (li.kind != MOE_LAYER_DENSE) {
        a.ids_out = wt->ids;
        a.weights_out = wt->w;
    }
    REQUIRE(moe_layer_forward(l, &a) == MOE_OK);
    free(ws);
    moe_layer_destroy(l);
}

/* This rank's first token and count: even, or skewed (rank 0 none, the last rank most). */
static void share(int kind, size_t *first, size_t *count)
{
    const size_t n = (size_t)size_, r = (size_t)rank_;
    if (kind == 0 || n == 1) {
        *first = T * r / n;
        *count = T * (r + 1) / n - *first;
        return;
    }
    /* rank r > 0 gets r of every 1 + 2 + ... + (n - 1) parts */
    const size_t parts = n * (n - 1) / 2, before = r * (r - 1) / 2;
    *first = T * before / parts;
    *count = T * (before + r) / parts - *first;
}

/* LAYER over the ranks with RECIPE, the hidden rows in f32 or (bf16) bf16. */
static void check_layer(const moe_model *m, int layer, const char *name, int recipe, bool bf16)
{
    moe_model_info mi = {.size = sizeof mi};
    REQUIRE(moe_model_get_info(m, &mi) == MOE_OK);
    const size_t h = (size_t)mi.hidden_size, xb = bf16 ? 2 : 4;
    const moe_dtype xdt = bf16 ? MOE_DTYPE_BF16 : MOE_DTYPE_F32;
    float *xf = malloc(T * h * 4);
    uint16_t *x16 = malloc(T * h * 2);
    int32_t tok[T];
    REQUIRE(xf && x16);
    fx_hidden(9, T * h, xf);
    for (size_t i = 0; i < T * h; i++)
        x16[i] = moe_f32_to_bf16(xf[i]);
    const unsigned char *x = bf16 ? (const unsigned char *)x16 : (const unsigned char *)xf;
    for (size_t t = 0; t < T; t++)
        tok[t] = (int32_t)((t * 53 + 5) % 1000);
    const moe_layer_options o = fx_options(THREADS, recipe);
    want wt;
    one_process(m, layer, &o, x, xdt, tok, &wt);
    const size_t k = wt.k;
    moe_layer_info li = {.size = sizeof li};
    REQUIRE(moe_model_get_layer_info(m, layer, &li) == MOE_OK);
    int32_t table[64];
    const int e = li.n_experts;
    REQUIRE(e <= 64);
    for (int i = 0; i < e; i++)
        table[i] = (int32_t)((i * 3 + 2) % size_);
    for (int pk = 0; pk < 2; pk++) {
        moe_layer *l = NULL;
        moe_status st = moe_mpi_layer_create(MPI_COMM_WORLD, m, MOE_OK, layer, &o,
                                             pk ? table : NULL, pk ? (size_t)e : 0, &l);
        CHECKF(st == MOE_OK, "%s layer %d: %s", name, layer, moe_last_error());
        if (st) continue;
        float *out = malloc(T * h * 4), *w = malloc(T * k * 4);
        int32_t *ids = malloc(T * k * 4);
        REQUIRE(out && w && ids);
        /* Each rank its own tokens. */
        for (int kind = 0; kind < 2; kind++) {
            size_t first, count;
            share(kind, &first, &count);
            memset(out, POISON, T * h * 4);
            moe_mpi_stats stats;
            const moe_mpi_forward_args a = {.size = sizeof a,
                                            .n_tokens = count,
                                            .hidden_size = h,
                                            .hidden = x + first * h * xb,
                                            .hidden_dtype = xdt,
                                            .token_ids = tok + first,
                                            .token_id_dtype = MOE_DTYPE_I32,
                                            .out = out,
                                            .ids_out = li.top_k ? ids : NULL,
                                            .weights_out = li.top_k ? w : NULL,
                                            .stats = &stats};
            st = moe_mpi_forward(MPI_COMM_WORLD, l, &a);
            CHECKF(st == MOE_OK, "%s layer %d: %s", name, layer, moe_last_error());
            CHECKF(!memcmp(out, wt.out + first * h, count * h * 4),
                   "%s layer %d recipe %s %s input placement %d spread %d: rank %d of %d (%zu "
                   "tokens) differs from one process",
                   name, layer, fx_recipe_name(recipe), bf16 ? "bf16" : "f32", pk, kind, rank_,
                   size_, count);
            if (li.top_k) {
                CHECK(!memcmp(ids, wt.ids + first * k, count * k * 4));
                CHECK(!memcmp(w, wt.w + first * k, count * k * 4));
            }
        }
        /* The whole batch on the last rank. */
        const int root = size_ - 1;
        memset(out, POISON, T * h * 4);
        memset(ids, POISON, T * k * 4);
        const moe_mpi_forward_args ra = {.size = sizeof ra,
                                         .n_tokens = T,
                                         .hidden_size = h,
                                         .hidden = x,
                                         .hidden_dtype = xdt,
                                         .token_ids = tok,
                                         .token_id_dtype = MOE_DTYPE_I32,
                                         .out = out,
                                         .ids_out = li.top_k ? ids : NULL};
        st = moe_mpi_forward_root(MPI_COMM_WORLD, root, l, rank_ == root ? &ra : NULL, NULL);
        CHECKF(st == MOE_OK, "%s layer %d root: %s", name, layer, moe_last_error());
        if (rank_ == root) {
            CHECKF(!memcmp(out, wt.out, T * h * 4), "%s layer %d: the root's batch differs", name,
                   layer);
            if (li.top_k) CHECK(!memcmp(ids, wt.ids, T * k * 4));
        } else {
            CHECK(all_poison(out, T * h * 4)); /* only the root's outputs are written */
        }
        free(out);
        free(w);
        free(ids);
        moe_layer_destroy(l);
    }
    free(xf);
    free(x16);
    free(wt.out);
    free(wt.w);
    free(wt.ids);
}

/* The model folder: rank 0 writes it, every rank waits, then opens it. */
static moe_model *shared_model(const char *dir, const char *config, uint64_t seed)
{
    if (rank_ == 0) fx_write_model(dir, config, seed);
    MPI_Barrier(MPI_COMM_WORLD);
    return fx_open(dir, false);
}

static void done_model(moe_model *m, const char *dir)
{
    moe_model_close(m);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) fx_remove_model(dir);
}

/* A message that names the failing rank and the cause, on every rank. */
static void check_named(moe_status st, moe_status want_st, int bad_rank, const char *cause,
                        const char *what)
{
    char who[32];
    snprintf(who, sizeof who, "rank %d: ", bad_rank);
    CHECKF(st == want_st, "%s: status %d, expected %d: %s", what, st, want_st, moe_last_error());
    CHECKF(strstr(moe_last_error(), who) != NULL && strstr(moe_last_error(), cause) != NULL,
           "%s: the message does not name %s and '%s': %s", what, who, cause, moe_last_error());
}

/* Faults on one rank (the last): an error on every rank, nothing written. */
static void check_faults(const char *dir, const char *other)
{
    const fam_case *v4 = NULL, *v3 = NULL;
    for (size_t i = 0; i < N_FAM_CASES; i++) {
        if (!strcmp(fam_cases[i].name, "deepseek_v4_fp8")) v4 = &fam_cases[i];
        if (!strcmp(fam_cases[i].name, "deepseek_v3")) v3 = &fam_cases[i];
    }
    REQUIRE(v4 && v3);
    const int bad = size_ - 1;
    /* A different config on the last rank: a routed scaling factor of its own. */
    if (rank_ == bad && size_ > 1) {
        char cfg[2048];
        snprintf(cfg, sizeof cfg, "%s", v3->config);
        char *at = strstr(cfg, "\"routed_scaling_factor\":2.5");
        REQUIRE(at);
        memcpy(at, "\"routed_scaling_factor\":2.6", strlen("\"routed_scaling_factor\":2.6"));
        fx_write_model(other, cfg, 3);
    }
    if (rank_ == 0) fx_write_model(dir, v3->config, 3);
    MPI_Barrier(MPI_COMM_WORLD);
    moe_model *m = fx_open(rank_ == bad && size_ > 1 ? other : dir, false);
    moe_layer *l = SENTINEL;
    moe_status st = moe_mpi_layer_create(MPI_COMM_WORLD, m, MOE_OK, 1, NULL, NULL, 0, &l);
    if (size_ > 1) {
        check_named(st, MOE_ECONFIG, bad, "differs from rank 0's", "a different config");
        CHECK(l == SENTINEL);
    } else { /* one rank: nothing to differ from */
        CHECK(st == MOE_OK);
        moe_layer_destroy(l);
        l = SENTINEL;
    }
    moe_model_close(m);
    /* A table entry outside [0, n): the same table everywhere, the same error everywhere. */
    m = fx_open(dir, false);
    int32_t table[16] = {0};
    table[9] = (int32_t)size_;
    st = moe_mpi_layer_create(MPI_COMM_WORLD, m, MOE_OK, 1, NULL, table, 16, &l);
    check_named(st, MOE_ERANGE, 0, "expert_rank[9]", "a bad table");
    CHECK(l == SENTINEL);
    /* A missing shard on the last rank: its model does not open. */
    moe_model *mm = NULL;
    moe_status mst = MOE_OK;
    if (rank_ == bad) {
        char path[600];
        snprintf(path, sizeof path, "%s/model.safetensors", other);
        MPI_Barrier(MPI_COMM_WORLD);
        if (size_ > 1) CHECK(unlink(path) == 0);
        if (size_ == 1) {
            fx_write_model(other, v3->config, 3);
            CHECK(unlink(path) == 0);
        }
        mst = moe_model_open(other, NULL, &mm);
        CHECK(mst != MOE_OK);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        mm = m;
    }
    st = moe_mpi_layer_create(MPI_COMM_WORLD, mm, mst, 1, NULL, NULL, 0, &l);
    int want_st = (int)mst;
    MPI_Bcast(&want_st, 1, MPI_INT, bad, MPI_COMM_WORLD);
    check_named(st, (moe_status)want_st, bad, "model.safetensors", "a missing shard");
    CHECK(l == SENTINEL);
    if (rank_ == bad) {
        char path[600];
        snprintf(path, sizeof path, "%s/config.json", other);
        unlink(path);
        rmdir(other);
    }
    /* A wrong hidden width on the last rank. */
    REQUIRE(moe_mpi_layer_create(MPI_COMM_WORLD, m, MOE_OK, 1, NULL, NULL, 0, &l) == MOE_OK);
    const size_t h = 320;
    float x[3 * 320], out[3 * 320], w[3 * 4];
    int32_t ids[3 * 4];
    fx_hidden(1, 3 * h, x);
    moe_mpi_forward_args a = {.size = sizeof a,
                              .n_tokens = 3,
                              .hidden_size = rank_ == bad ? h + 1 : h,
                              .hidden = x,
                              .hidden_dtype = MOE_DTYPE_F32,
                              .out = out,
                              .ids_out = ids,
                              .weights_out = w};
    memset(out, POISON, sizeof out);
    memset(ids, POISON, sizeof ids);
    st = moe_mpi_forward(MPI_COMM_WORLD, l, &a);
    check_named(st, MOE_EINVAL, bad, "hidden_size = 321", "a wrong hidden width");
    CHECK(all_poison(out, sizeof out) && all_poison(ids, sizeof ids));
    /* Another dtype on the last rank (n > 1): the rows could not move. */
    a.hidden_size = h;
    if (size_ > 1) {
        a.hidden_dtype = rank_ == bad ? MOE_DTYPE_BF16 : MOE_DTYPE_F32;
        st = moe_mpi_forward(MPI_COMM_WORLD, l, &a);
        CHECKF(st == MOE_EDTYPE && strstr(moe_last_error(), "dtypes differ"), "%s",
               moe_last_error());
        CHECK(all_poison(out, sizeof out));
        a.hidden_dtype = MOE_DTYPE_F32;
    }
    moe_layer_destroy(l);
    done_model(m, dir);
    /* An out-of-vocabulary token id on the last rank of a hash layer. */
    m = shared_model(dir, v4->config, 4);
    REQUIRE(moe_mpi_layer_create(MPI_COMM_WORLD, m, MOE_OK, 0, NULL, NULL, 0, &l) == MOE_OK);
    const size_t h4 = 256;
    float x4[2 * 256], out4[2 * 256];
    int64_t tok4[2] = {5, rank_ == bad ? 1000 : 6};
    fx_hidden(2, 2 * h4, x4);
    memset(out4, POISON, sizeof out4);
    const moe_mpi_forward_args a4 = {.size = sizeof a4,
                                     .n_tokens = 2,
                                     .hidden_size = h4,
                                     .hidden = x4,
                                     .hidden_dtype = MOE_DTYPE_F32,
                                     .token_ids = tok4,
                                     .token_id_dtype = MOE_DTYPE_I64,
                                     .out = out4};
    st = moe_mpi_forward(MPI_COMM_WORLD, l, &a4);
    check_named(st, MOE_ERANGE, bad, "token_ids[1] = 1000", "an out-of-vocabulary token id");
    CHECK(all_poison(out4, sizeof out4));
    moe_layer_destroy(l);
    done_model(m, dir);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char dir[64] = "/tmp/moe_test_mpi_XXXXXX";
    if (rank_ == 0) REQUIRE(mkdtemp(dir) != NULL);
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    char other[64] = "/tmp/moe_test_mpi_other_XXXXXX";
    if (rank_ == size_ - 1) REQUIRE(mkdtemp(other) != NULL);
    for (size_t i = 0; i < N_FAM_CASES; i++) {
        const fam_case *fc = &fam_cases[i];
        moe_model *m = shared_model(dir, fc->config, 2100 + i);
        check_layer(m, fc->moe_layer, fc->name, MOE_RECIPE_F32, false);
        /* llama4: each row travels with its weight, which scales it on the expert's rank:
         * bf16 rows too, and the product rounded to bf16 for the bf16 recipe. */
        if (!strcmp(fc->name, "llama4"))
            check_layer(m, fc->moe_layer, fc->name, MOE_RECIPE_BF16, true);
        if (fc->other_layer >= 0) check_layer(m, fc->other_layer, fc->name, MOE_RECIPE_F32, false);
        done_model(m, dir);
    }
    check_faults(dir, other);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) CHECK(rmdir(dir) == 0);
    const int failed = test_failures_ != 0 || test_checks_ == 0;
    fprintf(stderr, "rank %d: %ld checks, %d failed\n", rank_, test_checks_, test_failures_);
    MPI_Finalize();
    return failed;
}
