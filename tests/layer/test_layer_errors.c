/* test_layer_errors.c — the layer's doors: create and forward errors (outputs untouched), T = 0,
 * the logits-dtype rules, dense layers, released checkpoint pages. (MXFP4 load errors:
 * test_layer_mxfp4.) */
#include <stddef.h>
#include <stdint.h>

#include "fwd_io.h"

static bool has(const char *needle) { return strstr(moe_last_error(), needle) != NULL; }

static moe_layer *make(const moe_model *m, int layer, int threads, moe_dtype logits)
{
    const moe_layer_options o = {.size = sizeof o, .threads = threads, .logits_dtype = logits};
    return fx_layer(m, layer, &o, NULL);
}

/* ---- Forward: every output poisoned, checked untouched after each error --------------------- */

/* Runs A, expects WANT with NEEDLE in the message and every output untouched. */
static void expect_fail(const moe_layer *l, fwd_io *b, moe_forward_args a, moe_status want,
                        const char *needle, const char *what)
{
    poison(b);
    const moe_status st = moe_layer_forward(l, &a);
    CHECKF(st == want, "%s: status %d (%s), want %d", what, (int)st, moe_last_error(), (int)want);
    CHECKF(!needle || has(needle), "%s: message '%s' lacks '%s'", what, moe_last_error(), needle);
    CHECKF(io_untouched(b), "%s: an output was written", what);
}

static void test_forward_errors(const moe_model *m, int layer, bool hash)
{
    moe_layer *l = make(m, layer, 2, MOE_DTYPE_INVALID);
    fwd_io b;
    io_make(&b, l, 7);
    moe_forward_args a = args_of(&b);
    char buf[64];

    a.hidden_size = b.h + 1;
    snprintf(buf, sizeof buf, "hidden_size = %zu", b.h + 1);
    expect_fail(l, &b, a, MOE_EINVAL, buf, "hidden size mismatch");
    a = args_of(&b);
    a.hidden_dtype = MOE_DTYPE_F16;
    expect_fail(l, &b, a, MOE_EDTYPE, "f16", "f16 hidden");
    a.hidden_dtype = MOE_DTYPE_I8;
    expect_fail(l, &b, a, MOE_EDTYPE, "hidden_dtype", "i8 hidden");
    a = args_of(&b);
    a.hidden = NULL;
    expect_fail(l, &b, a, MOE_EINVAL, "hidden", "NULL hidden");
    a = args_of(&b);
    a.out = NULL;
    expect_fail(l, &b, a, MOE_EINVAL, "out", "NULL out");
    a = args_of(&b);
    a.workspace = NULL;
    expect_fail(l, &b, a, MOE_EINVAL, "workspace", "NULL workspace");
    a = args_of(&b);
    a.workspace = (char *)b.ws + 8;
    a.workspace_size -= 8;
    expect_fail(l, &b, a, MOE_EINVAL, "aligned", "misaligned workspace");
    a = args_of(&b);
    a.workspace_size = b.ws_size - 1;
    snprintf(buf, sizeof buf, "n_tokens = %zu", b.n);
    expect_fail(l, &b, a, MOE_ERANGE, buf, "workspace too small");
    a = args_of(&b);
    a.n_tokens = SIZE_MAX / 4;
    expect_fail(l, &b, a, MOE_EOVERFLOW, "too many", "workspace size overflow");
    a = args_of(&b);
    a.size = 8;
    expect_fail(l, &b, a, MOE_EINVAL, "size", "args->size too small");
    if (hash) {
        a = args_of(&b);
        a.token_ids = NULL;
        expect_fail(l, &b, a, MOE_EINVAL, "token_ids", "hash layer without token ids");
        a = args_of(&b);
        a.token_id_dtype = MOE_DTYPE_F32;
        expect_fail(l, &b, a, MOE_EDTYPE, "token_id_dtype", "float token ids");
        a = args_of(&b);
        b.tokens[4] = 1000;
        expect_fail(l, &b, a, MOE_ERANGE, "token_ids[4] = 1000", "token id past the vocabulary");
        b.tokens[4] = -1;
        expect_fail(l, &b, a, MOE_ERANGE, "token_ids[4] = -1", "negative token id");
        b.tokens[4] = 3;
    }
    poison(&b);
    CHECK_STATUS(moe_layer_forward(NULL, &a), MOE_EINVAL);
    CHECK_STATUS(moe_layer_forward(l, NULL), MOE_EINVAL);
    CHECK(io_untouched(&b));

    /* T = 0 is a no-op whatever the pointers; the trace is emptied. */
    moe_forward_args z;
    memset(&z, 0, sizeof z);
    z.size = sizeof z;
    z.trace = &b.trace;
    poison(&b);
    CHECK_STATUS(moe_layer_forward(l, &z), MOE_OK);
    CHECK(b.trace.count == 0);
    CHECK(moe_layer_workspace_size(l, 0) == 0 && moe_layer_workspace_size(NULL, 5) == 0);

    /* And the arguments above, repaired, run. */
    a = args_of(&b);
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_OK);
    io_free(&b);
    moe_layer_destroy(l);
}

/* ---- Non-finite hidden states -------------------------------------------------------------- */

static void test_nonfinite(const moe_model *m, int layer)
{
    moe_layer *l = make(m, layer, 2, MOE_DTYPE_INVALID);
    fwd_io b, c;
    io_make(&b, l, 6);
    io_make(&c, l, 6);
    for (size_t i = 0; i < b.h; i++) {
        b.x[0 * b.h + i] = NAN;
        b.x[1 * b.h + i] = i % 2 ? INFINITY : -INFINITY;
    }
    b.x[2 * b.h + 5] = NAN;
    b.x[3 * b.h + 1] = INFINITY;
    b.x[4 * b.h] = 3e38f;
    moe_forward_args a = args_of(&b);
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_OK);
    for (size_t i = 0; i < b.n * b.k; i++)
        CHECKF(b.ids[i] >= 0 && (size_t)b.ids[i] < b.e, "id %d out of range", b.ids[i]);
    for (size_t t = 0; t < b.n; t++) /* ids distinct within a row */
        for (size_t i = 0; i < b.k; i++)
            for (size_t j = i + 1; j < b.k; j++)
                CHECK(b.ids[t * b.k + i] != b.ids[t * b.k + j]);
    /* The finite row is not disturbed by its neighbours. */
    moe_forward_args one = args_of(&c);
    one.n_tokens = 1;
    one.hidden = b.x + 5 * b.h;
    CHECK_STATUS(moe_layer_forward(l, &one), MOE_OK);
    CHECK(!memcmp(c.out, b.out + 5 * b.h, b.h * 4));
    io_free(&b);
    io_free(&c);
    moe_layer_destroy(l);
}

/* ---- The logits dtype ------------------------------------------------------------------------ */

static void test_logits_dtype(const moe_model *m, int moe_index, int dense_index)
{
    moe_layer *f32 = make(m, moe_index, 1, MOE_DTYPE_INVALID);
    moe_layer *late = make(m, moe_index, 1, MOE_DTYPE_INVALID);
    const char *old = moe_layer_explain(late);
    CHECKF(strstr(old, "logits dtype: f32 (default"), "%s", old);
    CHECK_STATUS(moe_layer_set_logits_dtype(late, MOE_DTYPE_I32), MOE_EINVAL);
    CHECK_STATUS(moe_layer_set_logits_dtype(NULL, MOE_DTYPE_BF16), MOE_EINVAL);
    CHECK_STATUS(moe_layer_set_logits_dtype(late, MOE_DTYPE_BF16), MOE_OK);
    CHECKF(strstr(moe_layer_explain(late), "logits dtype: bf16 (set by"), "%s",
           moe_layer_explain(late));
    CHECK(strstr(old, "logits dtype: f32 (default") != NULL); /* the old text is still alive */
    CHECK_STATUS(moe_layer_set_logits_dtype(late, MOE_DTYPE_F32), MOE_ESTATE);
    CHECK(has("already decided"));

    /* bf16 logits are the rounded f32 logits, in the same epilogue: bit for bit. */
    fwd_io a, b;
    io_make(&a, f32, 9);
    io_make(&b, late, 9);
    moe_forward_args fa = args_of(&a), fb = args_of(&b);
    CHECK_STATUS(moe_layer_forward(f32, &fa), MOE_OK);
    CHECK_STATUS(moe_layer_forward(late, &fb), MOE_OK);
    size_t bad = 0;
    for (size_t i = 0; i < a.n * a.e; i++) {
        const float want = moe_bf16_to_f32(moe_f32_to_bf16(a.logits[i]));
        bad += memcmp(&want, &b.logits[i], 4) != 0;
    }
    CHECKF(bad == 0, "%zu bf16 logits are not the rounded f32 logits", bad);
    io_free(&a);
    io_free(&b);

    /* After a forward, or when the options decided, setting is a state error. */
    CHECK_STATUS(moe_layer_set_logits_dtype(f32, MOE_DTYPE_BF16), MOE_ESTATE);
    CHECK(has("already run a forward"));
    moe_layer *decided = make(m, moe_index, 1, MOE_DTYPE_F32);
    CHECKF(strstr(moe_layer_explain(decided), "logits dtype: f32 (options->logits_dtype)"), "%s",
           moe_layer_explain(decided));
    CHECK_STATUS(moe_layer_set_logits_dtype(decided, MOE_DTYPE_BF16), MOE_ESTATE);
    moe_layer *dense = make(m, dense_index, 1, MOE_DTYPE_INVALID);
    CHECK_STATUS(moe_layer_set_logits_dtype(dense, MOE_DTYPE_BF16), MOE_EINVAL);
    CHECK(has("dense"));
    moe_layer_destroy(f32);
    moe_layer_destroy(late);
    moe_layer_destroy(decided);
    moe_layer_destroy(dense);
}

/* ---- Dense layers leave the routing outputs alone ----------------------------------------------
 */

static void test_dense_outputs(const moe_model *m, int layer)
{
    moe_layer *l = make(m, layer, 2, MOE_DTYPE_INVALID);
    fwd_io b;
    io_make(&b, l, 4);
    poison(&b);
    moe_forward_args a = args_of(&b);
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_OK);
    CHECK(all_poison(b.logits, b.n * b.e * 4) && all_poison(b.ids, b.n * b.k * 4) &&
          all_poison(b.w, b.n * b.k * 4) && !all_poison(b.out, b.n * b.h * 4));
    CHECKF(strstr(moe_layer_explain(l), "logits dtype: none"), "%s", moe_layer_explain(l));
    io_free(&b);
    moe_layer_destroy(l);
}

/* ---- Create -----------------------------------------------------------------------------------
 */

static void test_create_errors(const moe_model *m, int n_layers)
{
    moe_layer *sentinel = (moe_layer *)&sentinel, *l = sentinel;
    CHECK_STATUS(moe_layer_create(NULL, 0, NULL, &l), MOE_EINVAL);
    CHECK_STATUS(moe_layer_create(m, 0, NULL, NULL), MOE_EINVAL);
    CHECK_STATUS(moe_layer_create(m, -1, NULL, &l), MOE_EINVAL);
    CHECK(has("layer -1"));
    CHECK_STATUS(moe_layer_create(m, n_layers, NULL, &l), MOE_EINVAL);
    moe_layer_options o = {.size = sizeof o, .threads = -1, .logits_dtype = MOE_DTYPE_INVALID};
    CHECK_STATUS(moe_layer_create(m, 0, &o, &l), MOE_EINVAL);
    CHECK(has("threads = -1"));
    o.threads = 0;
    o.logits_dtype = MOE_DTYPE_I8;
    CHECK_STATUS(moe_layer_create(m, 0, &o, &l), MOE_EINVAL);
    CHECK(has("logits_dtype = i8"));
    o.logits_dtype = MOE_DTYPE_INVALID;
    o.size = 4;
    CHECK_STATUS(moe_layer_create(m, 0, &o, &l), MOE_EINVAL);
    CHECK(has("options->size = 4"));
    o.size = sizeof o;
    o.experts_recipe = (moe_experts_recipe)-1;
    CHECK_STATUS(moe_layer_create(m, 0, &o, &l), MOE_EINVAL);
    CHECK(has("options->experts_recipe = -1"));
    CHECK(l == sentinel);
    /* The recipe as asked, and a caller whose options end before experts_recipe gets the
     * default whatever lies past its size. */
    const struct {
        size_t size;
        moe_experts_recipe recipe;
        const char *want;
    } asks[] = {
        {sizeof o, MOE_EXPERTS_RECIPE_BF16, "kernels: bf16 (options->experts_recipe)"},
        {sizeof o, MOE_EXPERTS_RECIPE_F32, "kernels: f32 (options->experts_recipe)"},
        {sizeof o, MOE_EXPERTS_RECIPE_DEFAULT, "kernels: f32 (default: f32 keeps"},
        {offsetof(moe_layer_options, experts_recipe), MOE_EXPERTS_RECIPE_BF16,
         "kernels: f32 (default: f32 keeps"},
    };
    for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
        o.size = asks[i].size;
        o.experts_recipe = asks[i].recipe;
        CHECK_STATUS(moe_layer_create(m, 0, &o, &l), MOE_OK);
        if (l == sentinel) continue;
        CHECKF(strstr(moe_layer_explain(l), asks[i].want), "case %zu: %s", i, moe_layer_explain(l));
        moe_layer_destroy(l);
        l = sentinel;
    }
    char *text = (char *)&sentinel;
    CHECK_STATUS(moe_layer_describe(m, 0, NULL, NULL), MOE_EINVAL);
    CHECK_STATUS(moe_layer_describe(m, n_layers, NULL, &text), MOE_EINVAL);
    CHECK(text == (char *)&sentinel);
    CHECK(!strcmp(moe_layer_explain(NULL), ""));
    moe_layer_destroy(NULL);

    /* threads 0 resolves to the number of cores, visibly. */
    CHECK_STATUS(moe_layer_create(m, 0, NULL, &l), MOE_OK);
    if (l != sentinel) {
        CHECKF(strstr(moe_layer_explain(l), "(default: options->threads 0 = the number of cores)"),
               "%s", moe_layer_explain(l));
        moe_layer_destroy(l);
    }
}

/* A checkpoint opened without verification, missing one expert tensor; one with a NaN code. */
static void test_damaged(const char *dir)
{
    const fam_case *fc = &fam_cases[2]; /* deepseek_v3 fp8 */
    const fx_damage drop = {"model.layers.1.mlp.experts.3.up_proj.weight_scale_inv", NULL};
    fx_write_model_ex(dir, fc->config, 9, &drop);
    moe_model *m = NULL;
    REQUIRE(moe_model_open_ex(dir, NULL, MOE_OPEN_SKIP_VERIFY, &m) == MOE_OK);
    moe_layer *sentinel = (moe_layer *)&sentinel, *l = sentinel;
    CHECK_STATUS(moe_layer_create(m, 1, NULL, &l), MOE_EMISSING);
    CHECKF(has(drop.drop) && has("layer 1"), "%s", moe_last_error());
    char *text = NULL;
    CHECK_STATUS(moe_layer_describe(m, 1, NULL, &text), MOE_EMISSING);
    CHECK(l == sentinel && text == NULL);
    moe_model_close(m);

    const fx_damage nan_code = {NULL, "model.layers.1.mlp.experts.5.down_proj.weight"};
    fx_write_model_ex(dir, fc->config, 9, &nan_code);
    m = fx_open(dir, false);
    CHECK_STATUS(moe_layer_create(m, 1, NULL, &l), MOE_EVALUE);
    CHECKF(has("expert 5") && has("layer 1"), "%s", moe_last_error());
    CHECK(l == sentinel);
    /* describe packs nothing, so it cannot see the value. */
    CHECK_STATUS(moe_layer_describe(m, 1, NULL, &text), MOE_OK);
    moe_free(text);
    moe_model_close(m);

    const fx_damage nan_router = {NULL, "model.layers.1.mlp.gate.weight"};
    fx_write_model_ex(dir, fc->config, 9, &nan_router);
    m = fx_open(dir, false);
    CHECK_STATUS(moe_layer_create(m, 1, NULL, &l), MOE_EVALUE);
    CHECKF(has("layer 1") && has("gate"), "%s", moe_last_error());
    moe_model_close(m);

    /* Qwen3-Next: a NaN in the shared expert gate's weight, named with its index. */
    const fam_case *next = NULL;
    for (size_t i = 0; i < N_FAM_CASES; i++)
        if (!strcmp(fam_cases[i].name, "qwen3_next")) next = &fam_cases[i];
    REQUIRE(next);
    const fx_damage nan_gate = {NULL, "model.layers.1.mlp.shared_expert_gate.weight"};
    fx_write_model_ex(dir, next->config, 9, &nan_gate);
    m = fx_open(dir, false);
    CHECK_STATUS(moe_layer_create(m, 1, NULL, &l), MOE_EVALUE);
    CHECKF(has("layer 1 shared expert gate") && has(nan_gate.nan) && has("[0, 0]"), "%s",
           moe_last_error());
    CHECK(l == sentinel);
    moe_model_close(m);
    fx_remove_model(dir);
}

/* Released pages read back the same (mapped: faulted in again from the file; no_mmap: the
 * buffer is never released). */
static void test_release(const char *dir)
{
    const fam_case *fc = &fam_cases[1]; /* deepseek_v3 bf16 */
    fx_write_model(dir, fc->config, 4);
    for (int no_mmap = 0; no_mmap < 2; no_mmap++) {
        moe_model *m = fx_open(dir, no_mmap);
        const moe_tensor *t = fx_find(m, 1, MOE_GROUP_ROUTED, 2, MOE_ROLE_DOWN);
        REQUIRE(t);
        void *copy = malloc(t->nbytes);
        REQUIRE(copy);
        memcpy(copy, t->data, t->nbytes);
        moe_layer *l = make(m, 1, 1, MOE_DTYPE_INVALID);
        CHECKF(!memcmp(copy, t->data, t->nbytes), "no_mmap=%d: released tensor reads back changed",
               no_mmap);
        moe_ckpt_release(moe_model_ckpt_of(m), t);
        moe_ckpt_release(moe_model_ckpt_of(m), NULL);
        moe_ckpt_release(NULL, t);
        CHECK(!memcmp(copy, t->data, t->nbytes));
        /* A second layer from the same (released) model packs the same bytes. */
        moe_layer *l2 = make(m, 1, 1, MOE_DTYPE_INVALID);
        const moe_expert_group *g1 = l->routed, *g2 = l2->routed;
        CHECK(g1->packed_bytes == g2->packed_bytes &&
              !memcmp(g1->packed, g2->packed, g1->packed_bytes));
        moe_layer_destroy(l);
        moe_layer_destroy(l2);
        free(copy);
        moe_model_close(m);
    }
    fx_remove_model(dir);
}

/* A created layer keeps nothing of the model: it runs after the model is closed. */
static void test_outlives_model(const char *dir)
{
    fx_write_model(dir, fam_cases[0].config, 31);
    moe_model *m = fx_open(dir, false);
    moe_layer *l = make(m, 1, 2, MOE_DTYPE_INVALID);
    fwd_io before, after;
    io_make(&before, l, 5);
    io_make(&after, l, 5);
    moe_forward_args a = args_of(&before);
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_OK);
    moe_model_close(m);
    fx_remove_model(dir);
    a = args_of(&after);
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_OK);
    CHECK(!memcmp(before.out, after.out, before.n * before.h * 4));
    CHECK(strstr(moe_layer_explain(l), "deepseek_v2") != NULL);
    io_free(&before);
    io_free(&after);
    moe_layer_destroy(l);
}

int main(void)
{
    char dir[] = "/tmp/moe_test_layer_errors_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    const fam_case *v3 = &fam_cases[2];
    fx_write_model(dir, v3->config, 21);
    moe_model *m = fx_open(dir, false);
    test_create_errors(m, moe_model_layer_count(m));
    test_forward_errors(m, v3->moe_layer, false);
    test_forward_errors(m, v3->other_layer, false);
    test_nonfinite(m, v3->moe_layer);
    test_logits_dtype(m, v3->moe_layer, v3->other_layer);
    test_dense_outputs(m, v3->other_layer);
    moe_model_close(m);
    fx_remove_model(dir);

    const fam_case *v4 = &fam_cases[7]; /* layer 0 is hash-routed */
    fx_write_model(dir, v4->config, 22);
    m = fx_open(dir, false);
    test_forward_errors(m, 0, true);
    moe_model_close(m);
    fx_remove_model(dir);

    test_damaged(dir);
    test_release(dir);
    test_outlives_model(dir);
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
