/* test_layer_config_fields.c — config fields that change the arithmetic, end to end: gpt-oss's
 * swiglu_alpha against a float64 reference; token ids on a DeepSeek-V4 layer that is not hashed. */
#include "layer_fixture.h"

enum { T = 24 };

/* gpt-oss with a GLU slope far from its 1.702 default, and a limit the gate and up values
 * reach, so the clamps are exercised too. The values the reference uses are these literals,
 * not the parsed description. */
#define ALPHA 0.55
#define LIMIT 1.5
static const char gpt_oss_config[] =
    "{\"model_type\":\"gpt_oss\",\"hidden_size\":160,\"num_hidden_layers\":1,"
    "\"intermediate_size\":96,\"num_local_experts\":8,\"num_experts_per_tok\":2,"
    "\"swiglu_alpha\":0.55,\"swiglu_limit\":1.5,\"torch_dtype\":\"bfloat16\"}";

/* The ids and weights the test routes token T with: two distinct experts, fixed weights. */
static void route_of(int t, int e, int32_t ids[2], float w[2])
{
    ids[0] = t % e;
    ids[1] = (t * 3 + 1) % e;
    if (ids[1] == ids[0]) ids[1] = (ids[0] + 1) % e;
    w[0] = 0.625f;
    w[1] = 0.375f;
}

/* The largest |a - b| over N values, relative to the largest |b|. */
static double rel_err(size_t n, const float *a, const double *b)
{
    double err = 0, mag = 0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs((double)a[i] - b[i]));
        mag = fmax(mag, fabs(b[i]));
    }
    return err / mag;
}

/* sum_k w_k · mlp_{id_k}(x) for every token, in double, with the GLU of slope ALPHA_. */
static void reference(fx_mlp *experts, int e, const float *x, int64_t h, double alpha_, double *y)
{
    double *xd = fx_alloc(h);
    for (int t = 0; t < T; t++) {
        int32_t ids[2];
        float w[2];
        route_of(t, e, ids, w);
        for (int64_t c = 0; c < h; c++)
            xd[c] = x[t * h + c];
        for (int64_t c = 0; c < h; c++)
            y[t * h + c] = 0;
        for (int k = 0; k < 2; k++) {
            fx_mlp *m = &experts[ids[k]];
            m->act = MOE_ACT_GPTOSS_GLU;
            m->alpha = alpha_;
            m->limit = LIMIT;
            fx_mlp_apply(m, xd, w[k], y + t * h);
        }
    }
    free(xd);
}

static void test_gpt_oss_alpha(const char *dir)
{
    fx_write_model(dir, gpt_oss_config, 77);
    moe_model *m = fx_open(dir, false);
    const int64_t h = 160;
    const int e = 8;
    fx_mlp experts[8];
    for (int x = 0; x < e; x++)
        fx_mlp_load(m, 0, MOE_GROUP_ROUTED, x, &experts[x]);
    /* Hidden states of deviation 4 put the gate and up values around ±1, where the slope
     * and the clamps matter. */
    float *x = malloc(T * (size_t)h * sizeof *x), *out = malloc(T * (size_t)h * sizeof *out);
    double *want = fx_alloc(T * h), *wrong = fx_alloc(T * h);
    REQUIRE(x && out);
    fx_hidden(5, T * (size_t)h, x);
    for (size_t i = 0; i < T * (size_t)h; i++)
        x[i] *= 4.0f;
    reference(experts, e, x, h, ALPHA, want);
    reference(experts, e, x, h, 1.702, wrong);
    int32_t ids[T * 2];
    float w[T * 2];
    for (int t = 0; t < T; t++)
        route_of(t, e, ids + 2 * t, w + 2 * t);

    moe_cpu_caps caps[8];
    const char *names[8];
    const size_t n_levels = fx_levels(caps, names);
    for (size_t lv = 0; lv < n_levels; lv++) {
        const moe_layer_options o = fx_options(1, MOE_RECIPE_F32);
        const moe_layer_tuning tune = {&caps[lv], 0};
        moe_layer *l = fx_layer(m, 0, &o, &tune);
        size_t ws_size;
        void *ws = fx_workspace(l, T, &ws_size);
        moe_experts_args a = {.size = sizeof a,
                              .n_tokens = T,
                              .hidden_size = (size_t)h,
                              .hidden = x,
                              .hidden_dtype = MOE_DTYPE_F32,
                              .top_k = 2,
                              .ids = ids,
                              .ids_dtype = MOE_DTYPE_I32,
                              .weights = w,
                              .out = out,
                              .workspace = ws,
                              .workspace_size = ws_size};
        moe_status st = moe_layer_forward_experts(l, &a);
        CHECKF(st == MOE_OK, "%s: %s", names[lv], moe_last_error());
        /* f32 arithmetic on bf16 weights: a few f32 roundings per dot product. */
        const double err = rel_err(T * (size_t)h, out, want);
        CHECKF(err < 2e-5, "%s: swiglu_alpha %g: relative error %.3g", names[lv], ALPHA, err);
        /* The default slope gives another answer, far outside that tolerance. */
        const double off = rel_err(T * (size_t)h, out, wrong);
        CHECKF(off > 1e-2, "%s: output within %.3g of the alpha = 1.702 answer", names[lv], off);
        free(ws);
        moe_layer_destroy(l);
    }
    for (int i = 0; i < e; i++)
        fx_mlp_free(&experts[i]);
    free(x);
    free(out);
    free(want);
    free(wrong);
    moe_model_close(m);
    fx_remove_model(dir);
}

/* The fixture case NAME. */
static const fam_case *family(const char *name)
{
    for (size_t i = 0; i < N_FAM_CASES; i++)
        if (!strcmp(fam_cases[i].name, name)) return &fam_cases[i];
    REQUIRE(!"no such fixture case");
    return NULL;
}

/* A caller that hands token ids to every layer of a hash-routed model (moe run --input-ids)
 * gets them ignored where the layer routes by score: the same bits as without them, even
 * for ids no hash table could look up. A hash layer still needs them. */
static void test_token_ids_on_score_layer(const char *dir)
{
    const fam_case *fc = family("deepseek_v4_bf16");
    fx_write_model(dir, fc->config, 91);
    moe_model *m = fx_open(dir, false);
    const size_t h = (size_t)moe_model_desc_of(m)->hidden;
    REQUIRE(moe_model_desc_of(m)->layers[fc->moe_layer].kind == MOE_LAYER_MOE);
    REQUIRE(moe_model_desc_of(m)->layers[fc->other_layer].kind == MOE_LAYER_HASH);
    float *x = malloc(T * h * sizeof *x), *y0 = malloc(T * h * sizeof *y0);
    float *y1 = malloc(T * h * sizeof *y1);
    REQUIRE(x && y0 && y1);
    fx_hidden(3, T * h, x);
    int64_t tokens[T];
    for (int t = 0; t < T; t++)
        tokens[t] = t % 2 ? -5 : INT64_C(1) << 40; /* outside any vocabulary */
    const moe_layer_options o = fx_options(1, MOE_RECIPE_F32);
    moe_layer *l = fx_layer(m, fc->moe_layer, &o, NULL);
    size_t ws_size;
    void *ws = fx_workspace(l, T, &ws_size);
    moe_forward_args a = fx_args(T, h, x, y0, ws, ws_size);
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_OK);
    a.out = y1;
    a.token_ids = tokens;
    a.token_id_dtype = MOE_DTYPE_I64;
    moe_status st = moe_layer_forward(l, &a);
    CHECKF(st == MOE_OK, "score layer with token ids: %s", moe_last_error());
    CHECK(memcmp(y0, y1, T * h * sizeof *y0) == 0);
    free(ws);
    moe_layer_destroy(l);

    l = fx_layer(m, fc->other_layer, &o, NULL);
    ws = fx_workspace(l, T, &ws_size);
    a = fx_args(T, h, x, y0, ws, ws_size);
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "token_ids") != NULL);
    free(ws);
    moe_layer_destroy(l);
    free(x);
    free(y0);
    free(y1);
    moe_model_close(m);
    fx_remove_model(dir);
}

int main(void)
{
    char dir[] = "/tmp/moe_test_layer_config_fields_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    test_gpt_oss_alpha(dir);
    test_token_ids_on_score_layer(dir);
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
