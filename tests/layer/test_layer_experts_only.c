/* test_layer_experts_only.c — the caller-routed forward and the description API, every family. */
#include "fwd_io.h"

enum { T = 13, THREADS = 2 };

/* The caller's own routing for token t: K distinct ids that the router need not choose (a
 * stride walk from a token-dependent start) and weights of both signs. */
static void own_routing(size_t t, int e, int k, int32_t *ids, float *w)
{
    const int stride = e % 3 == 0 ? 5 : 3; /* coprime with E for the families here */
    for (int j = 0; j < k; j++) {
        ids[j] = (int32_t)(((int)t * 7 + j * stride) % e);
        w[j] = (float)(0.25 + 0.5 * fx_unit(t, (uint64_t)j) - (j == 1 ? 0.6 : 0.0));
    }
}

/* Given the router's own ids and weights, the experts-only forward is the full forward, bit
 * for bit, with the ids in either width. */
static void check_same_bits(const moe_layer *l, fwd_io *b, const char *what)
{
    moe_forward_args fa = args_of(b);
    REQUIRE(moe_layer_forward(l, &fa) == MOE_OK);
    const size_t th = b->n * b->h, tk = b->n * b->k;
    float *full = malloc(th * 4), *w = malloc(tk * 4);
    int32_t *ids = malloc(tk * 4);
    int64_t *ids64 = malloc(tk * 8);
    REQUIRE(full && w && ids && ids64);
    memcpy(full, b->out, th * 4);
    memcpy(ids, b->ids, tk * 4);
    memcpy(w, b->w, tk * 4);
    for (size_t i = 0; i < tk; i++)
        ids64[i] = ids[i];
    for (int width = 0; width < 2; width++) {
        memset(b->out, POISON, th * 4);
        moe_experts_args xa = xargs_of(b, width ? (const void *)ids64 : ids,
                                    width ? MOE_DTYPE_I64 : MOE_DTYPE_I32, w, true);
        CHECKF(moe_layer_forward_experts(l, &xa) == MOE_OK, "%s: %s", what, moe_last_error());
        CHECKF(!memcmp(b->out, full, th * 4), "%s: experts-only (%s ids) differs from the full "
               "forward given the router's ids and weights", what, width ? "i64" : "i32");
    }
    free(full);
    free(w);
    free(ids);
    free(ids64);
}

/* The caller's routing against a float64 reference: out[t] = Σ_k w·mlp_ids(x) (+ the shared
 * MLP when asked), every expert read back from the checkpoint. */
static void check_own_routing(const moe_model *m, const moe_layer *l, fwd_io *b, bool shared,
                              const char *what)
{
    const moe_layer_desc *ld = &moe_model_desc_of(m)->layers[l->plan.index];
    const int e = ld->routing.n_experts, k = ld->routing.top_k;
    const size_t h = b->h, tk = b->n * b->k;
    int32_t *ids = malloc(tk * 4);
    float *w = malloc(tk * 4);
    fx_mlp *mlp = calloc((size_t)e, sizeof *mlp);
    REQUIRE(ids && w && mlp);
    for (size_t t = 0; t < b->n; t++)
        own_routing(t, e, k, ids + t * b->k, w + t * b->k);
    memset(b->out, POISON, b->n * h * 4);
    moe_experts_args xa = xargs_of(b, ids, MOE_DTYPE_I32, w, shared);
    REQUIRE(moe_layer_forward_experts(l, &xa) == MOE_OK);
    fx_mlp sh;
    const bool with_shared = shared && ld->n_shared > 0;
    if (with_shared) fx_mlp_load(m, l->plan.index, MOE_GROUP_SHARED, -1, &sh);
    /* Qwen3-Next: the shared output × sigmoid(x · shared_expert_gate), as the full forward. */
    const moe_tensor *sg = fx_find(m, l->plan.index, MOE_GROUP_SHARED, -1, MOE_ROLE_SHARED_GATE);
    CHECK((sg != NULL) == ld->shared_gate);
    double err2 = 0, norm2 = 0;
    double *x = fx_alloc((int64_t)h), *y = fx_alloc((int64_t)h);
    for (size_t t = 0; t < b->n; t++) {
        for (size_t c = 0; c < h; c++) {
            x[c] = b->x[t * h + c];
            y[c] = 0;
        }
        for (int j = 0; j < k; j++) {
            const int id = ids[t * b->k + (size_t)j];
            if (!mlp[id].g) fx_mlp_load(m, l->plan.index, MOE_GROUP_ROUTED, id, &mlp[id]);
            const double wj = w[t * b->k + (size_t)j];
            if (ld->scale_input) { /* Llama-4: the weight scales the expert's input */
                double *xs = fx_alloc((int64_t)h);
                for (size_t c = 0; c < h; c++)
                    xs[c] = x[c] * wj;
                fx_mlp_apply(&mlp[id], xs, 1.0, y);
                free(xs);
            } else {
                fx_mlp_apply(&mlp[id], x, wj, y);
            }
        }
        double gate = 1.0;
        if (sg) {
            double z = 0;
            for (size_t c = 0; c < h; c++)
                z += x[c] * fx_decode(sg, c);
            gate = 1.0 / (1.0 + exp(-z));
        }
        if (with_shared) fx_mlp_apply(&sh, x, gate, y);
        for (size_t c = 0; c < h; c++) {
            const double d = b->out[t * h + c] - y[c];
            err2 += d * d;
            norm2 += y[c] * y[c];
        }
    }
    /* The numeric contract (docs/design.md): 2e-2 where the activations are quantised per
     * 32-block (MXFP4 and INT4 experts); the f32 recipe's fp32 sums are far tighter than the 1e-2 a
     * bf16 recipe may use. */
    const bool q8 =
        ld->experts.format == MOE_WFMT_MXFP4 || ld->experts.format == MOE_WFMT_INT4_GROUP ||
        (with_shared &&
         (ld->shared.format == MOE_WFMT_MXFP4 || ld->shared.format == MOE_WFMT_INT4_GROUP));
    const double rel = sqrt(err2 / norm2), tol = q8 ? 2e-2 : 1e-4;
    CHECKF(rel <= tol, "%s: caller's routing%s: relative error %.3g > %.3g", what,
           shared ? " + shared" : "", rel, tol);
    free(x);
    free(y);
    for (int i = 0; i < e; i++)
        if (mlp[i].g) fx_mlp_free(&mlp[i]);
    free(mlp);
    if (with_shared) fx_mlp_free(&sh);
    free(ids);
    free(w);
}

/* Every bad argument is refused with its status and writes nothing. */
static void check_errors(const moe_layer *l, fwd_io *b, const char *what)
{
    const size_t tk = b->n * b->k;
    int32_t *ids = malloc(tk * 4);
    float *w = malloc(tk * 4);
    REQUIRE(ids && w);
    for (size_t t = 0; t < b->n; t++)
        own_routing(t, b->e ? (int)b->e : 1, (int)b->k, ids + t * b->k, w + t * b->k);
    struct {
        const char *name;
        moe_status want;
        const char *needle;
    } cases[] = {
        {"id out of range", MOE_ERANGE, "ids[4][1]"},   {"negative id", MOE_ERANGE, "ids[0][0]"},
        {"repeated id", MOE_ERANGE, "repeats"},        {"NaN weight", MOE_EVALUE, "weights[2][0]"},
        {"Inf weight", MOE_EVALUE, "weights[12][1]"}, {"top_k", MOE_EINVAL, "top_k"},
        {"ids NULL", MOE_EINVAL, "ids"},              {"weights NULL", MOE_EINVAL, "weights"},
        {"ids dtype", MOE_EDTYPE, "ids_dtype"},        {"size", MOE_EINVAL, "size"},
        {"hidden size", MOE_EINVAL, "hidden_size"},   {"workspace", MOE_ERANGE, "workspace"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t *bad = malloc(tk * 4);
        float *bw = malloc(tk * 4);
        REQUIRE(bad && bw);
        memcpy(bad, ids, tk * 4);
        memcpy(bw, w, tk * 4);
        moe_experts_args a = xargs_of(b, bad, MOE_DTYPE_I32, bw, true);
        switch (c) {
        case 0: bad[4 * b->k + 1] = (int32_t)b->e; break;
        case 1: bad[0] = -1; break;
        case 2: bad[5 * b->k + 1] = bad[5 * b->k]; break;
        case 3: bw[2 * b->k] = NAN; break;
        case 4: bw[12 * b->k + 1] = INFINITY; break;
        case 5: a.top_k = b->k + 1; break;
        case 6: a.ids = NULL; break;
        case 7: a.weights = NULL; break;
        case 8: a.ids_dtype = MOE_DTYPE_F32; break;
        case 9: a.size = 8; break;
        case 10: a.hidden_size = b->h + 1; break;
        case 11: a.workspace_size = b->ws_size - 64; break;
        }
        poison(b);
        const moe_status st = moe_layer_forward_experts(l, &a);
        CHECKF(st == cases[c].want, "%s: %s: status %d, expected %d", what, cases[c].name, st,
               cases[c].want);
        CHECKF(strstr(moe_last_error(), cases[c].needle) != NULL,
               "%s: %s: the message does not name %s: %s", what, cases[c].name, cases[c].needle,
               moe_last_error());
        CHECKF(io_untouched(b), "%s: %s: an output was written", what, cases[c].name);
        free(bad);
        free(bw);
    }
    free(ids);
    free(w);
}

static void check_layer(const moe_model *m, int index, const moe_cpu_caps *caps, bool numeric,
                        const char *what)
{
    moe_layer_options o = fx_options(THREADS, MOE_EXPERTS_RECIPE_DEFAULT);
    moe_layer_tuning tune = {.allowed = caps};
    moe_layer *l = fx_layer(m, index, &o, &tune);
    fwd_io b;
    io_make(&b, l, T);
    if (!l->plan.moe) {
        int32_t ids[T];
        float w[T];
        for (size_t t = 0; t < T; t++) {
            ids[t] = 0;
            w[t] = 1;
        }
        moe_experts_args a = xargs_of(&b, ids, MOE_DTYPE_I32, w, true);
        a.top_k = 1;
        poison(&b);
        CHECKF(moe_layer_forward_experts(l, &a) == MOE_EINVAL, "%s: a dense layer ran", what);
        CHECKF(strstr(moe_last_error(), "dense") != NULL, "%s: %s", what, moe_last_error());
        CHECKF(io_untouched(&b), "%s: dense layer: an output was written", what);
    } else {
        check_same_bits(l, &b, what);
        if (numeric) {
            check_own_routing(m, l, &b, false, what);
            check_own_routing(m, l, &b, true, what);
            /* The error cases name slots 0 and 1: layers of one slot (Llama-4) have no second;
             * the checks are the same code for every layer. */
            if (b.k >= 2) check_errors(l, &b, what);
        }
    }
    io_free(&b);
    moe_layer_destroy(l);
}

/* The description API against the values the fixtures' configs spell out. */
static void check_info(const moe_model *m, const char *name)
{
    moe_model_info mi = {.size = sizeof mi};
    REQUIRE(moe_model_get_info(m, &mi) == MOE_OK);
    moe_layer_info li = {.size = sizeof li};
    if (!strcmp(name, "deepseek_v3") || !strcmp(name, "deepseek_v3_fp8")) {
        CHECK(!strcmp(mi.family, "deepseek_v3"));
        CHECK(mi.n_layers == 2 && mi.hidden_size == 320 && mi.vocab_size == 1000);
        CHECK(mi.n_moe_layers == 1 && mi.n_experts == 16 && mi.top_k == 4);
        REQUIRE(moe_model_get_layer_info(m, 0, &li) == MOE_OK);
        CHECK(li.index == 0 && li.kind == MOE_LAYER_DENSE && li.n_experts == 0 && li.top_k == 0);
        CHECK(li.intermediate_size == 352 && li.hidden_size == 320);
        REQUIRE(moe_model_get_layer_info(m, 1, &li) == MOE_OK);
        CHECK(li.kind == MOE_LAYER_MOE && li.n_experts == 16 && li.top_k == 4);
        CHECK(li.intermediate_size == 192 && li.n_shared_experts == 1);
        CHECK(li.shared_intermediate_size == 192);
        CHECK(li.route_method == MOE_ROUTE_NOAUX_TC && li.score_func == MOE_SCORE_SIGMOID);
        const moe_weight_format f = name[11] ? MOE_WFMT_FP8_BLOCK : MOE_WFMT_BF16;
        CHECK(li.expert_format == f && li.shared_format == f);
        CHECK(!strcmp(moe_weight_format_name(f), name[11] ? "fp8_block" : "bf16"));
        CHECK(!strcmp(moe_layer_kind_name(li.kind), "moe"));
        /* A created layer describes itself the same way. */
        moe_layer *l = fx_layer(m, 1, NULL, NULL);
        moe_layer_info li2 = {.size = sizeof li2};
        REQUIRE(moe_layer_get_info(l, &li2) == MOE_OK);
        CHECK(!memcmp(&li, &li2, sizeof li));
        moe_layer_destroy(l);
    }
    if (!strcmp(name, "deepseek_v2")) {
        REQUIRE(moe_model_get_layer_info(m, 1, &li) == MOE_OK);
        CHECK(li.n_shared_experts == 2 && li.shared_intermediate_size == 2 * 192);
        CHECK(li.route_method == MOE_ROUTE_GROUP_LIMITED_GREEDY);
    }
    /* Every call checks its arguments. */
    CHECK(moe_model_get_layer_info(m, mi.n_layers, &li) == MOE_ERANGE);
    CHECK(strstr(moe_last_error(), "outside") != NULL);
    CHECK(moe_model_get_layer_info(m, -1, &li) == MOE_ERANGE);
    moe_layer_info small = {.size = 16};
    CHECK(moe_model_get_layer_info(m, 0, &small) == MOE_EINVAL);
    CHECK(strstr(moe_last_error(), "size") != NULL);
    moe_model_info msmall = {.size = 8};
    CHECK(moe_model_get_info(m, &msmall) == MOE_EINVAL);
    CHECK(moe_model_get_info(NULL, &mi) == MOE_EINVAL);
    CHECK(moe_model_get_info(m, NULL) == MOE_EINVAL);
    CHECK(moe_layer_get_info(NULL, &li) == MOE_EINVAL);
}

int main(void)
{
    char dir[] = "/tmp/moe_test_experts_only_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    moe_cpu_caps caps[8];
    const char *names[8];
    const size_t n_levels = fx_levels(caps, names);
    for (size_t i = 0; i < N_FAM_CASES; i++) {
        const fam_case *fc = &fam_cases[i];
        fx_write_model(dir, fc->config, 900 + i);
        moe_model *m = fx_open(dir, false);
        check_info(m, fc->name);
        /* Same bits at every level; the float64 reference and the error cases at the best. */
        for (size_t lv = 0; lv < n_levels; lv++) {
            const int layers[2] = {fc->moe_layer, fc->other_layer};
            for (int li = 0; li < 2; li++) {
                if (layers[li] < 0) continue;
                char what[128];
                snprintf(what, sizeof what, "%s layer %d at %s", fc->name, layers[li], names[lv]);
                check_layer(m, layers[li], &caps[lv], lv + 1 == n_levels, what);
            }
        }
        moe_model_close(m);
        fx_remove_model(dir);
    }
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
