/* test_layer_mxfp4.c — MXFP4 layers: packing from the checkpoint, same bits at every ISA level,
 * hash-layer token ids, and load-time errors naming the tensor. (test_layer_numeric and
 * test_layer_invariance run the MXFP4 families against the float64 reference and for batch
 * and thread invariance.) */
#include "layer_fixture.h"
#include "ckpt_patch.h"

#define POISON 0xA5u

static const fam_case *family(const char *name)
{
    for (size_t i = 0; i < N_FAM_CASES; i++)
        if (!strcmp(fam_cases[i].name, name)) return &fam_cases[i];
    REQUIRE(!"no such family case");
    return NULL;
}

static bool has(const char *needle) { return strstr(moe_last_error(), needle) != NULL; }

static moe_layer *make(const moe_model *m, int layer, const moe_cpu_caps *caps, int threads,
                       moe_experts_recipe recipe)
{
    const moe_layer_options o = {.size = sizeof o,
                                 .threads = threads,
                                 .logits_dtype = MOE_DTYPE_INVALID,
                                 .experts_recipe = recipe};
    const moe_layer_tuning tune = {caps, 0};
    return fx_layer(m, layer, &o, &tune);
}

/* ---- unpack(pack(w)) == the checkpoint's bytes ------------------------------------------------
 */

/* Row R (of K columns) of the checkpoint's codes and scales, against row R of an unpacked
 * [rows, K/2] / [rows, K/32] pair. */
static bool same_row(const moe_tensor *codes, const moe_tensor *scales, uint64_t r_ck,
                     const unsigned char *u_codes, const unsigned char *u_scales, uint64_t r,
                     int64_t k)
{
    const unsigned char *c = (const unsigned char *)codes->data + r_ck * (uint64_t)(k / 2);
    const unsigned char *s = (const unsigned char *)scales->data + r_ck * (uint64_t)(k / 32);
    return !memcmp(c, u_codes + r * (uint64_t)(k / 2), (size_t)(k / 2)) &&
           !memcmp(s, u_scales + r * (uint64_t)(k / 32), (size_t)(k / 32));
}

/* Every expert of the routed group unpacked and compared with the checkpoint: gpt-oss's
 * interleaved rows (gate j = row 2j, up j = row 2j + 1) and biases, DeepSeek-V4's w1/w3/w2. */
static void check_packing(const moe_model *m, const moe_layer *l, int layer, const char *what)
{
    const moe_expert_group *g = l->routed;
    const int64_t h = g->hidden, in = g->inter;
    const bool oss = moe_model_desc_of(m)->family == MOE_FAMILY_GPT_OSS;
    unsigned char *gc = malloc((size_t)(in * h / 2)), *uc = malloc((size_t)(in * h / 2));
    unsigned char *dc = malloc((size_t)(h * in / 2));
    unsigned char *gs = malloc((size_t)(in * h / 32)), *us = malloc((size_t)(in * h / 32));
    unsigned char *ds = malloc((size_t)(h * in / 32));
    float *gb = malloc((size_t)in * 4), *ub = malloc((size_t)in * 4), *db = malloc((size_t)h * 4);
    REQUIRE(gc && uc && dc && gs && us && ds && gb && ub && db);
    int bad = 0;
    for (int e = 0; e < g->n_experts; e++) {
        const moe_weight_dst gd = {gc, MOE_DTYPE_U8,    in,           h, gs, MOE_DTYPE_F8_E8M0, 1,
                                   32, oss ? gb : NULL, MOE_DTYPE_F32};
        const moe_weight_dst ud = {uc, MOE_DTYPE_U8,    in,           h, us, MOE_DTYPE_F8_E8M0, 1,
                                   32, oss ? ub : NULL, MOE_DTYPE_F32};
        const moe_weight_dst dd = {
            dc, MOE_DTYPE_U8, h, in, ds, MOE_DTYPE_F8_E8M0, 1, 32, oss ? db : NULL, MOE_DTYPE_F32};
        REQUIRE(g->ks->unpack_gateup(moe_expert_gateup(g, e), &gd, &ud) == MOE_OK);
        REQUIRE(g->ks->unpack_down(moe_expert_down(g, e), &dd) == MOE_OK);
        if (oss) {
            const moe_tensor *gu = fx_find(m, layer, MOE_GROUP_ROUTED, -1, MOE_ROLE_GATE_UP);
            const moe_tensor *gus = fx_find(m, layer, MOE_GROUP_ROUTED, -1, MOE_ROLE_GATE_UP_SCALE);
            const moe_tensor *gub = fx_find(m, layer, MOE_GROUP_ROUTED, -1, MOE_ROLE_GATE_UP_BIAS);
            const moe_tensor *dn = fx_find(m, layer, MOE_GROUP_ROUTED, -1, MOE_ROLE_DOWN);
            const moe_tensor *dns = fx_find(m, layer, MOE_GROUP_ROUTED, -1, MOE_ROLE_DOWN_SCALE);
            const moe_tensor *dnb = fx_find(m, layer, MOE_GROUP_ROUTED, -1, MOE_ROLE_DOWN_BIAS);
            REQUIRE(gu && gus && gub && dn && dns && dnb);
            const uint64_t e2 = (uint64_t)e * (uint64_t)(2 * in);
            for (int64_t j = 0; j < in; j++) {
                bad += !same_row(gu, gus, e2 + 2 * (uint64_t)j, gc, gs, (uint64_t)j, h);
                bad += !same_row(gu, gus, e2 + 2 * (uint64_t)j + 1, uc, us, (uint64_t)j, h);
                bad += gb[j] != (float)fx_decode(gub, e2 + 2 * (uint64_t)j);
                bad += ub[j] != (float)fx_decode(gub, e2 + 2 * (uint64_t)j + 1);
            }
            for (int64_t r = 0; r < h; r++) {
                const uint64_t row = (uint64_t)e * (uint64_t)h + (uint64_t)r;
                bad += !same_row(dn, dns, row, dc, ds, (uint64_t)r, in);
                bad += db[r] != (float)fx_decode(dnb, row);
            }
        } else {
            const moe_tensor *t[6];
            static const moe_tensor_role roles[6] = {MOE_ROLE_GATE, MOE_ROLE_GATE_SCALE,
                                                     MOE_ROLE_UP,   MOE_ROLE_UP_SCALE,
                                                     MOE_ROLE_DOWN, MOE_ROLE_DOWN_SCALE};
            for (int i = 0; i < 6; i++) {
                t[i] = fx_find(m, layer, MOE_GROUP_ROUTED, e, roles[i]);
                REQUIRE(t[i]);
            }
            for (int64_t j = 0; j < in; j++) {
                bad += !same_row(t[0], t[1], (uint64_t)j, gc, gs, (uint64_t)j, h);
                bad += !same_row(t[2], t[3], (uint64_t)j, uc, us, (uint64_t)j, h);
            }
            for (int64_t r = 0; r < h; r++)
                bad += !same_row(t[4], t[5], (uint64_t)r, dc, ds, (uint64_t)r, in);
        }
    }
    CHECKF(bad == 0, "%s: %d unpacked rows or biases differ from the checkpoint", what, bad);
    free(gc);
    free(uc);
    free(dc);
    free(gs);
    free(us);
    free(ds);
    free(gb);
    free(ub);
    free(db);
}

/* ---- Same bits at every level; explain; the packing ---------------------------------------- */

enum { T = 40 };

static void forward(const moe_layer *l, size_t n, const float *x, const int32_t *tokens, float *out,
                    int32_t *ids)
{
    size_t ws_size;
    void *ws = fx_workspace(l, n, &ws_size);
    moe_forward_args a = fx_args(n, (size_t)l->plan.desc->hidden, x, out, ws, ws_size);
    a.token_ids = tokens;
    a.token_id_dtype = MOE_DTYPE_I32;
    a.ids_out = ids;
    moe_status st = moe_layer_forward(l, &a);
    if (st) fprintf(stderr, "forward: %s\n", moe_last_error());
    REQUIRE(st == MOE_OK);
    free(ws);
}

/* Every level gives the reference level's bits, in the Q8 recipe (exact integer sums and the
 * same f32 steps in the same order, kernels/expert.h) and in the tile recipe (the bf16 tile
 * arithmetic on the exactly widened weights, stated per element); the other groups run the
 * f32 recipe, or the tile recipe when it is asked, the same everywhere too. Explain names the
 * recipe and the set, and the packed tiles unpack to the checkpoint's bytes. */
static void test_levels(const char *name, const char *dir, bool tile)
{
    const fam_case *fc = family(name);
    fx_write_model(dir, fc->config, 71);
    moe_model *m = fx_open(dir, false);
    moe_cpu_caps caps[8];
    const char *names[8];
    const size_t n_levels = fx_levels(caps, names);
    const int layers[2] = {fc->moe_layer, fc->other_layer};
    for (int li = 0; li < 2; li++) {
        if (layers[li] < 0) continue;
        const size_t h = (size_t)moe_model_desc_of(m)->hidden;
        float *x = malloc(T * h * 4), *ref = malloc(T * h * 4), *out = malloc(T * h * 4);
        int32_t ids[T * 8], tokens[T];
        REQUIRE(x && ref && out);
        fx_hidden(5 + (uint64_t)li, T * h, x);
        for (int t = 0; t < T; t++)
            tokens[t] = (t * 53 + 11) % 1000;
        for (size_t lv = 0; lv < n_levels; lv++) {
            moe_layer *l = make(m, layers[li], &caps[lv], 1,
                                tile ? MOE_EXPERTS_RECIPE_TILE : MOE_EXPERTS_RECIPE_DEFAULT);
            char what[128];
            snprintf(what, sizeof what, "%s layer %d at %s, %s recipe", name, layers[li], names[lv],
                     tile ? "tile" : "default");
            const moe_expert_group *g = l->routed;
            CHECKF(g->ks->recipe == (tile ? MOE_RECIPE_TILE : MOE_RECIPE_Q8) &&
                       g->ks->format == MOE_EXPERT_FMT_MXFP4,
                   "%s: routed kernel set %s", what, g->ks->name);
            if (tile) CHECKF(strstr(g->ks->name, "moe_expert_mxfp4_tile_"), "%s", g->ks->name);
            const char *ex = moe_layer_explain(l);
            CHECKF(strstr(ex, tile ? "recipe: tile (" : "recipe: q8 (") &&
                       strstr(ex, g->ks->name) && strstr(ex, "format mxfp4") &&
                       (tile || strstr(ex, "prepare_act")),
                   "%s: explain does not name the recipe and %s:\n%s", what, g->ks->name, ex);
            if (lv == 0) check_packing(m, l, layers[li], what);
            forward(l, T, x, tokens, lv == 0 ? ref : out, ids);
            if (lv > 0)
                CHECKF(!memcmp(ref, out, T * h * 4), "%s: output differs from the %s level's", what,
                       names[0]);
            moe_layer_destroy(l);
        }
        fprintf(stderr, "%s layer %d, %s recipe: packing round trip, same bits at %zu levels\n",
                name, layers[li], tile ? "tile" : "q8", n_levels);
        free(x);
        free(ref);
        free(out);
    }
    moe_model_close(m);
    fx_remove_model(dir);
}

/* ---- Hash layers: token ids ------------------------------------------------------------------ */

static bool untouched(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != POISON) return false;
    return true;
}

static void test_token_ids(const char *dir)
{
    const fam_case *fc = family("deepseek_v4_mxfp4");
    fx_write_model(dir, fc->config, 72);
    moe_model *m = fx_open(dir, false);
    moe_layer *l = make(m, fc->other_layer, NULL, 2, MOE_EXPERTS_RECIPE_DEFAULT);
    REQUIRE(l->plan.ld->kind == MOE_LAYER_HASH);
    enum { N = 5 };
    const size_t h = (size_t)l->plan.desc->hidden;
    float *x = malloc(N * h * 4), *out = malloc(N * h * 4);
    REQUIRE(x && out);
    fx_hidden(9, N * h, x);
    size_t ws_size;
    void *ws = fx_workspace(l, N, &ws_size);
    int32_t t32[N] = {1, 2, 3, 4, 5};
    int64_t t64[N] = {1, 2, 3, 4, 5};
    moe_forward_args a = fx_args(N, h, x, out, ws, ws_size);

    /* No token ids: a clear error, nothing written. */
    memset(out, POISON, N * h * 4);
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_EINVAL);
    CHECKF(has("hash-routed") && has("token_ids") && has("--input-ids") && has("layer 0"), "%s",
           moe_last_error());
    CHECK(untouched(out, N * h * 4));

    /* Out of the vocabulary (1000), either width, either side. */
    const int64_t bad[3] = {1000, -1, 1 << 20};
    for (int w = 0; w < 2; w++)
        for (int i = 0; i < 3; i++) {
            memcpy(t32, (int32_t[N]){1, 2, 3, 4, 5}, sizeof t32);
            memcpy(t64, (int64_t[N]){1, 2, 3, 4, 5}, sizeof t64);
            t32[3] = (int32_t)bad[i];
            t64[3] = bad[i];
            a.token_ids = w ? (const void *)t64 : (const void *)t32;
            a.token_id_dtype = w ? MOE_DTYPE_I64 : MOE_DTYPE_I32;
            memset(out, POISON, N * h * 4);
            CHECK_STATUS(moe_layer_forward(l, &a), MOE_ERANGE);
            char want[64];
            snprintf(want, sizeof want, "token_ids[3] = %lld is outside [0, 1000)",
                     (long long)bad[i]);
            CHECKF(has(want), "%s", moe_last_error());
            CHECK(untouched(out, N * h * 4));
        }

    /* The same ids in either width route the same. */
    float *out64 = malloc(N * h * 4);
    REQUIRE(out64);
    for (int i = 0; i < N; i++)
        t32[i] = (int32_t)(t64[i] = 997 - 3 * i);
    a.token_ids = t32;
    a.token_id_dtype = MOE_DTYPE_I32;
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_OK);
    a.token_ids = t64;
    a.token_id_dtype = MOE_DTYPE_I64;
    a.out = out64;
    CHECK_STATUS(moe_layer_forward(l, &a), MOE_OK);
    CHECK(!memcmp(out, out64, N * h * 4));
    free(out64);
    free(ws);
    free(x);
    free(out);
    moe_layer_destroy(l);
    moe_model_close(m);
    fx_remove_model(dir);
}

/* ---- Load-time errors naming the tensor -------------------------------------------------------
 */

static void set_ff(void *ctx, unsigned char *bytes, size_t n)
{
    const uint64_t at = *(const uint64_t *)ctx;
    REQUIRE(at < n);
    bytes[at] = 0xFF;
}

/* A NaN (0xFF) E8M0 scale at flat index AT of TENSOR (expert E, index text WHERE): create fails
 * naming the tensor, the expert and the index; describe, which packs nothing, does not see it. */
static void nan_scale(const char *dir, const char *fam, int layer, const char *tensor, uint64_t at,
                      int e, const char *where)
{
    fx_write_model(dir, family(fam)->config, 73);
    moe_model *m = fx_open(dir, false);
    const moe_ckpt *ck = moe_model_ckpt_of(m);
    const moe_tensor *t = moe_ckpt_find(ck, tensor);
    REQUIRE(t);
    ckpt_rewrite(t, set_ff, &at);
    moe_model_close(m);
    m = fx_open(dir, false);
    moe_layer *sentinel = (moe_layer *)&sentinel, *l = sentinel;
    for (int threads = 1; threads <= 2; threads++) {
        const moe_layer_options o = {
            .size = sizeof o, .threads = threads, .logits_dtype = MOE_DTYPE_INVALID};
        CHECK_STATUS(moe_layer_create(m, layer, &o, &l), MOE_EVALUE);
        char want[256];
        snprintf(want, sizeof want,
                 "layer %d routed experts: expert %d: tensor '%s' holds the E8M0 scale 0xFF (NaN) "
                 "at [%s]",
                 layer, e, tensor, where);
        CHECKF(has(want), "%s: want '%s'", moe_last_error(), want);
        CHECK(l == sentinel);
        if (threads == 1) fprintf(stderr, "create: %s\n", moe_last_error());
    }
    char *text = NULL;
    CHECK_STATUS(moe_layer_describe(m, layer, NULL, &text), MOE_OK);
    moe_free(text);
    moe_model_close(m);
    fx_remove_model(dir);
}

/* A tensor of the wrong shape: open (which verifies) fails naming it; opened without
 * verification, create does. */
static void wrong_shape(const char *dir, const char *fam, int layer, const fx_reshape *rs,
                        const char *want)
{
    fx_write_model_rs(dir, family(fam)->config, 74, NULL, rs);
    moe_model *m = NULL;
    CHECK_STATUS(moe_model_open(dir, NULL, &m), MOE_ESHAPE);
    CHECKF(has(rs->name) && has(want), "%s: want '%s'", moe_last_error(), want);
    CHECK(m == NULL);
    REQUIRE(moe_model_open_ex(dir, NULL, MOE_OPEN_SKIP_VERIFY, &m) == MOE_OK);
    moe_layer *l = NULL;
    CHECK_STATUS(moe_layer_create(m, layer, NULL, &l), MOE_ESHAPE);
    CHECKF(has(rs->name) && has(want), "%s: want '%s'", moe_last_error(), want);
    fprintf(stderr, "create: %s\n", moe_last_error());
    CHECK(l == NULL);
    moe_model_close(m);
    fx_remove_model(dir);
}

static void test_errors(const char *dir)
{
    /* gpt-oss: H = 288 (9 blocks), I = 160 (5 blocks), 16 experts: scales [16, 320, 9] and
     * [16, 288, 5]. Expert 7's up row 100 (row 201), block 4; the very last down scale. */
    nan_scale(dir, "gpt_oss_mxfp4", 0, "model.layers.0.mlp.experts.gate_up_proj_scales",
              (7 * 320 + 201) * 9 + 4, 7, "7, 201, 4");
    nan_scale(dir, "gpt_oss_mxfp4", 0, "model.layers.0.mlp.experts.down_proj_scales",
              16 * 288 * 5 - 1, 15, "15, 287, 4");
    /* DeepSeek-V4: H = 256 (8 blocks), I = 160 (5 blocks). */
    nan_scale(dir, "deepseek_v4_mxfp4", 1, "layers.1.ffn.experts.5.w2.scale", 100 * 5 + 3, 5,
              "100, 3");
    nan_scale(dir, "deepseek_v4_mxfp4", 0, "layers.0.ffn.experts.11.w3.scale", 0, 11, "0, 0");

    /* A block of 32 bytes (64 codes) instead of 16. */
    const fx_reshape block = {
        "model.layers.0.mlp.experts.gate_up_proj_blocks", 4, {16, 320, 9, 32}};
    wrong_shape(dir, "gpt_oss_mxfp4", 0, &block, "[16, 320, 9, 16]");
    /* Codes not packed two per byte: [I, H] where the config says [I, H/2]. */
    const fx_reshape unpacked = {"layers.1.ffn.experts.2.w1.weight", 2, {160, 256}};
    wrong_shape(dir, "deepseek_v4_mxfp4", 1, &unpacked, "[160, 128]");
    /* Scales per 16 instead of per 32. */
    const fx_reshape per16 = {"layers.1.ffn.experts.0.w2.scale", 2, {256, 10}};
    wrong_shape(dir, "deepseek_v4_mxfp4", 1, &per16, "[256, 5]");
    /* Down blocks of another intermediate size. */
    const fx_reshape other_i = {"model.layers.0.mlp.experts.down_proj_blocks", 4, {16, 288, 4, 16}};
    wrong_shape(dir, "gpt_oss_mxfp4", 0, &other_i, "[16, 288, 5, 16]");
}

/* ---- Scales the tile recipe cannot fold -------------------------------------------------------
 */

static void set_byte(void *ctx, unsigned char *bytes, size_t n)
{
    const uint64_t *at = ctx; /* index, value */
    REQUIRE(at[0] < n);
    bytes[at[0]] = (unsigned char)at[1];
}

/* One E8M0 scale of the routed experts set to 2^-127, 2^-126, 2^126 or 2^127 (bytes 0, 1, 253,
 * 254): asked for the tile recipe, the layer gives the routed group the Q8 recipe, the reason
 * and explain saying why, and its outputs are the Q8 layer's bit for bit (the default
 * recipe); 2^-125 and 2^125 (2, 252) still fold. */
static void test_unfoldable(const char *dir)
{
    static const struct {
        const char *fam, *tensor;
        int layer;
    } where[2] = {{"gpt_oss_mxfp4", "model.layers.0.mlp.experts.down_proj_scales", 0},
                  {"deepseek_v4_mxfp4", "layers.1.ffn.experts.5.w1.scale", 1}};
    static const unsigned values[6] = {0, 1, 253, 254, 2, 252};
    for (int w = 0; w < 2; w++)
        for (int v = 0; v < 6; v++) {
            const fam_case *fc = family(where[w].fam);
            fx_write_model(dir, fc->config, 75);
            moe_model *m = fx_open(dir, false);
            const moe_tensor *t = moe_ckpt_find(moe_model_ckpt_of(m), where[w].tensor);
            REQUIRE(t);
            uint64_t at[2] = {t->nbytes / 3, values[v]};
            ckpt_rewrite(t, set_byte, at);
            moe_model_close(m);
            m = fx_open(dir, false);
            const bool folds = v >= 4;
            moe_layer *lt = make(m, where[w].layer, NULL, 2, MOE_EXPERTS_RECIPE_TILE);
            moe_layer *lq = make(m, where[w].layer, NULL, 2, MOE_EXPERTS_RECIPE_DEFAULT);
            char what[160];
            snprintf(what, sizeof what, "%s scale %u in %s", fc->name, values[v], where[w].tensor);
            const moe_expert_group *g = lt->routed;
            CHECKF(g->ks->recipe == (folds ? MOE_RECIPE_TILE : MOE_RECIPE_Q8) &&
                       g->ks->format == MOE_EXPERT_FMT_MXFP4,
                   "%s: routed kernel set %s", what, g->ks->name);
            const char *ex = moe_layer_explain(lt);
            if (!folds) {
                CHECKF(g->ks == lq->routed->ks, "%s: %s, the default's %s", what, g->ks->name,
                       lq->routed->ks->name);
                CHECKF(strstr(ex, "tile requested, but a block scale is outside 2^-125..2^125") &&
                           strstr(ex, "mxfp4 groups with a block scale bf16 cannot hold: q8") &&
                           strstr(ex, "recipe: q8 ("),
                       "%s: explain does not say why:\n%s", what, ex);
                const size_t h = (size_t)lt->plan.desc->hidden;
                float *x = malloc(T * h * 4), *yt = malloc(T * h * 4), *yq = malloc(T * h * 4);
                int32_t ids[T * 8], tokens[T];
                REQUIRE(x && yt && yq);
                fx_hidden(11, T * h, x);
                for (int i = 0; i < T; i++)
                    tokens[i] = (i * 29 + 3) % 1000;
                forward(lt, T, x, tokens, yt, ids);
                forward(lq, T, x, tokens, yq, ids);
                /* The other groups (DeepSeek-V4's FP8 shared experts) run what was asked. */
                if (!lt->always)
                    CHECKF(!memcmp(yt, yq, T * h * 4), "%s: not the q8 layer's outputs", what);
                free(x);
                free(yt);
                free(yq);
            } else {
                CHECKF(strstr(ex, "recipe: tile (") != NULL, "%s:\n%s", what, ex);
            }
            moe_layer_destroy(lt);
            moe_layer_destroy(lq);
            moe_model_close(m);
            fx_remove_model(dir);
        }
    fprintf(stderr, "unfoldable scales: q8 with the reason; 2 and 252 fold\n");
}

int main(void)
{
    char dir[] = "/tmp/moe_test_layer_mxfp4_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    for (int tile = 0; tile < 2; tile++) {
        test_levels("gpt_oss_mxfp4", dir, tile);
        test_levels("deepseek_v4_mxfp4", dir, tile);
    }
    test_unfoldable(dir);
    test_token_ids(dir);
    test_errors(dir);
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
