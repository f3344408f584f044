/* test_verify.c — checkpoints written from the tables: verify, its errors, reports, model_open. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "core/alloc.h"
#include "io/checkpoint.h"
#include "io/st_writer.h"
#include "model/model.h"
#include "model/model_handle.h"
#include "model/verify.h"

/* ---- Tiny configs, one per tensor layout ---------------------------------------------- */

static const char cfg_v3[] =
    "{\"model_type\":\"deepseek_v3\",\"hidden_size\":192,\"num_hidden_layers\":3,"
    "\"intermediate_size\":320,\"moe_intermediate_size\":64,\"n_routed_experts\":8,"
    "\"num_experts_per_tok\":2,\"n_group\":2,\"topk_group\":1,\"n_shared_experts\":1,"
    "\"first_k_dense_replace\":1,\"topk_method\":\"noaux_tc\",\"scoring_func\":\"sigmoid\","
    "\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\","
    "\"activation_scheme\":\"dynamic\",\"weight_block_size\":[128,128]},"
    "\"num_attention_heads\":4,\"vocab_size\":1000}";

static const char cfg_v4[] =
    "{\"model_type\":\"deepseek_v4\",\"hidden_size\":64,\"num_hidden_layers\":3,"
    "\"moe_intermediate_size\":64,\"n_routed_experts\":8,\"num_experts_per_tok\":2,"
    "\"n_shared_experts\":1,\"num_hash_layers\":1,\"vocab_size\":100,\"swiglu_limit\":10.0,"
    "\"expert_dtype\":\"fp4\",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\","
    "\"weight_block_size\":[128,128],\"scale_fmt\":\"ue8m0\"}}";

static const char cfg_mixtral[] =
    "{\"model_type\":\"mixtral\",\"hidden_size\":32,\"num_hidden_layers\":2,"
    "\"intermediate_size\":48,\"num_local_experts\":4,\"num_experts_per_tok\":2}";

static const char cfg_gpt_oss[] =
    "{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"num_hidden_layers\":2,"
    "\"intermediate_size\":64,\"num_local_experts\":4,\"num_experts_per_tok\":2,"
    "\"quantization_config\":{\"quant_method\":\"mxfp4\"}}";

static const char cfg_qwen3[] =
    "{\"model_type\":\"qwen3_moe\",\"hidden_size\":32,\"num_hidden_layers\":3,"
    "\"intermediate_size\":96,\"moe_intermediate_size\":16,\"num_experts\":4,"
    "\"num_experts_per_tok\":2,\"mlp_only_layers\":[0],\"norm_topk_prob\":true}";

static const char cfg_minimax[] =
    "{\"model_type\":\"minimax_m2\",\"hidden_size\":64,\"num_hidden_layers\":2,"
    "\"intermediate_size\":48,\"num_local_experts\":4,\"num_experts_per_tok\":2,"
    "\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"float8_e4m3fn\","
    "\"weight_block_size\":[128,128]}}";

static const char cfg_kimi_k25[] =
    "{\"model_type\":\"kimi_k25\",\"text_config\":{\"model_type\":\"kimi_k2\","
    "\"hidden_size\":64,\"num_hidden_layers\":2,\"intermediate_size\":96,"
    "\"moe_intermediate_size\":32,\"n_routed_experts\":8,\"num_experts_per_tok\":2,"
    "\"n_shared_experts\":1,\"first_k_dense_replace\":1}}";

/* ---- Writing a checkpoint from the tables, with deliberate damage --------------------- */

typedef struct extra {
    const char *name;
    moe_dtype dtype;
    int ndim;
    int64_t shape[4];
} extra;

typedef struct damage {
    const char *drop[4];   /* canonical names left out */
    const char *retype[4]; /* written with retype_to instead */
    moe_dtype retype_to[4];
    const char *reshape[4]; /* written with one more row */
    bool prefix_model;      /* every name written as "model." + name */
    const char *twice;      /* written under the canonical and the "model." name */
    extra extras[4];        /* more tensors */
} damage;

static bool listed(const char *const *list, const char *name, int *at)
{
    for (int i = 0; i < 4; i++)
        if (list[i] && !strcmp(list[i], name)) {
            if (at) *at = i;
            return true;
        }
    return false;
}

static moe_status fill_zero(void *ctx, size_t index, uint64_t offset, void *buf, size_t len)
{
    (void)ctx, (void)index, (void)offset;
    memset(buf, 0, len);
    return MOE_OK;
}

static moe_status add_spec(moe_st_writer *w, const moe_tensor_spec *s, const damage *dm)
{
    int at;
    if (listed(dm->drop, s->name, NULL)) return MOE_OK;
    moe_dtype dt = listed(dm->retype, s->name, &at) ? dm->retype_to[at] : s->dtype;
    int64_t shape[4];
    memcpy(shape, s->shape, sizeof shape);
    if (listed(dm->reshape, s->name, NULL)) shape[0]++;
    char name[200];
    snprintf(name, sizeof name, "%s%s", dm->prefix_model ? "model." : "", s->name);
    moe_status st = moe_st_writer_add(w, name, dt, s->ndim, shape);
    if (st || !dm->twice || strcmp(dm->twice, s->name)) return st;
    snprintf(name, sizeof name, "model.%s", s->name);
    return moe_st_writer_add(w, name, dt, s->ndim, shape);
}

/* Writes DIR/model.safetensors holding every spec of every layer of D, damaged as DM says,
 * plus an attention weight and the embeddings that are not the model module's business. */
static void write_ckpt(const moe_model_desc *d, const char *dir, const damage *dm)
{
    moe_st_writer *w = NULL;
    REQUIRE(moe_st_writer_create(&w) == MOE_OK);
    for (int layer = 0; layer < d->n_layers; layer++) {
        moe_tensor_spec *v = NULL;
        size_t n = 0;
        REQUIRE(moe_model_layer_tensors(d, layer, &v, &n) == MOE_OK);
        for (size_t i = 0; i < n; i++)
            REQUIRE(add_spec(w, &v[i], dm) == MOE_OK);
        moe_free(v);
        char name[128];
        const int64_t attn[2] = {d->hidden, d->hidden};
        snprintf(name, sizeof name, "model.layers.%d.self_attn.o_proj.weight", layer);
        REQUIRE(moe_st_writer_add(w, name, MOE_DTYPE_BF16, 2, attn) == MOE_OK);
    }
    const int64_t emb[2] = {16, d->hidden};
    REQUIRE(moe_st_writer_add(w, "model.embed_tokens.weight", MOE_DTYPE_BF16, 2, emb) == MOE_OK);
    for (int i = 0; i < 4 && dm->extras[i].name; i++)
        REQUIRE(moe_st_writer_add(w, dm->extras[i].name, dm->extras[i].dtype, dm->extras[i].ndim,
                                  dm->extras[i].shape) == MOE_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    moe_status st = moe_st_writer_write(w, path, fill_zero, NULL);
    if (st) fprintf(stderr, "write %s: %s\n", path, moe_last_error());
    REQUIRE(st == MOE_OK);
    moe_st_writer_destroy(w);
}

static void write_text(const char *dir, const char *file, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    REQUIRE(f != NULL);
    REQUIRE(fwrite(text, 1, strlen(text), f) == strlen(text));
    REQUIRE(fclose(f) == 0);
}

static void remove_in(const char *dir, const char *file)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    unlink(path);
}

static moe_model_desc parse(const char *cfg)
{
    moe_model_desc d;
    moe_status st = moe_model_desc_parse(cfg, strlen(cfg), "test config", &d);
    if (st) fprintf(stderr, "%s\n", moe_last_error());
    REQUIRE(st == MOE_OK);
    return d;
}

/* Writes the checkpoint and verifies it strictly; returns the status, message in last error. */
static moe_status verify_with(const moe_model_desc *d, const char *dir, const damage *dm,
                              moe_verify_summary *sum)
{
    write_ckpt(d, dir, dm);
    moe_ckpt *ck = NULL;
    moe_status st = moe_ckpt_open(dir, NULL, &ck);
    if (st) fprintf(stderr, "open: %s\n", moe_last_error());
    REQUIRE(st == MOE_OK);
    st = moe_model_verify(d, ck);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", moe_last_error());
    moe_status st2 = moe_model_verify_each(d, ck, NULL, NULL, sum);
    CHECKF(st2 == st, "strict %d, reporting %d", (int)st, (int)st2);
    /* The reporting walk returns the same first problem with the same message. */
    if (st) CHECKF(!strcmp(msg, moe_last_error()), "'%s' vs '%s'", msg, moe_last_error());
    moe_ckpt_close(ck);
    return st;
}

static size_t count_specs(const moe_model_desc *d)
{
    size_t total = 0;
    for (int layer = 0; layer < d->n_layers; layer++) {
        moe_tensor_spec *v = NULL;
        size_t n = 0;
        REQUIRE(moe_model_layer_tensors(d, layer, &v, &n) == MOE_OK);
        moe_free(v);
        total += n;
    }
    return total;
}

static bool has(const char *needle) { return strstr(moe_last_error(), needle) != NULL; }

/* ---- Tests ----------------------------------------------------------------------------- */

static void test_every_family_clean(const char *dir)
{
    const char *cfgs[] = {cfg_v3,    cfg_v4,      cfg_mixtral, cfg_gpt_oss,
                          cfg_qwen3, cfg_minimax, cfg_kimi_k25};
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        moe_model_desc d = parse(cfgs[i]);
        damage dm = {0};
        moe_verify_summary sum;
        CHECK_STATUS(verify_with(&d, dir, &dm, &sum), MOE_OK);
        size_t total = count_specs(&d);
        CHECKF(sum.specs == total && sum.found == total, "%s: %zu specs, %zu found of %zu",
               d.model_type, sum.specs, sum.found, total);
        CHECK(sum.missing + sum.bad_dtype + sum.bad_shape + sum.unexpected + sum.absent == 0);
        moe_model_desc_free(&d);
    }
}

static void test_strict_errors(const char *dir)
{
    moe_model_desc d = parse(cfg_v3);
    moe_verify_summary sum;
    damage drop = {.drop = {"model.layers.2.mlp.experts.5.up_proj.weight_scale_inv"}};
    CHECK_STATUS(verify_with(&d, dir, &drop, &sum), MOE_EMISSING);
    CHECK(has("model.layers.2.mlp.experts.5.up_proj.weight_scale_inv") && has("layer 2"));
    CHECK(sum.missing == 1);

    damage retype = {.retype = {"model.layers.1.mlp.gate.weight"}, .retype_to = {MOE_DTYPE_I32}};
    CHECK_STATUS(verify_with(&d, dir, &retype, &sum), MOE_EDTYPE);
    CHECK(has("model.layers.1.mlp.gate.weight") && has("dtype i32") &&
          has("accepted: f32, f16, bf16"));

    /* FP8 weights accept only E4M3. */
    damage e5m2 = {.retype = {"model.layers.0.mlp.up_proj.weight"},
                   .retype_to = {MOE_DTYPE_F8_E5M2}};
    CHECK_STATUS(verify_with(&d, dir, &e5m2, &sum), MOE_EDTYPE);
    CHECK(has("model.layers.0.mlp.up_proj.weight") && has("accepted: f8_e4m3"));

    damage reshape = {.reshape = {"model.layers.1.mlp.experts.0.down_proj.weight"}};
    CHECK_STATUS(verify_with(&d, dir, &reshape, &sum), MOE_ESHAPE);
    CHECK(has("model.layers.1.mlp.experts.0.down_proj.weight") && has("[193, 64]") &&
          has("expected [192, 64]"));

    damage scale = {.reshape = {"model.layers.2.mlp.shared_experts.gate_proj.weight_scale_inv"}};
    CHECK_STATUS(verify_with(&d, dir, &scale, &sum), MOE_ESHAPE);
    CHECK(has("has shape [2, 2]") && has("expected [1, 2]"));

    /* Accepted alternatives: an f32 router, a bf16 correction bias and bf16 block scales. */
    damage alts = {.retype = {"model.layers.1.mlp.gate.weight",
                              "model.layers.2.mlp.gate.e_score_correction_bias",
                              "model.layers.2.mlp.experts.1.gate_proj.weight_scale_inv"},
                   .retype_to = {MOE_DTYPE_F32, MOE_DTYPE_BF16, MOE_DTYPE_BF16}};
    CHECK_STATUS(verify_with(&d, dir, &alts, &sum), MOE_OK);
    moe_model_desc_free(&d);
}

static void test_unexpected(const char *dir)
{
    moe_model_desc d = parse(cfg_v3);
    moe_verify_summary sum;
    /* Expert 8 of 8 experts and a stray scale are ours and unknown; attention, embeddings and
     * a layer past num_hidden_layers (the MTP layer) are not our business. */
    damage dm = {
        .extras = {
            {"model.layers.1.mlp.experts.8.gate_proj.weight", MOE_DTYPE_F8_E4M3, 2, {64, 192}},
            {"model.layers.2.mlp.gate_proj.input_scale", MOE_DTYPE_F32, 1, {1}},
            {"model.layers.1.self_attn.q_proj.weight", MOE_DTYPE_BF16, 2, {4, 4}},
            {"model.layers.3.mlp.gate.weight", MOE_DTYPE_BF16, 2, {8, 192}}}};
    CHECK_STATUS(verify_with(&d, dir, &dm, &sum), MOE_OK);
    CHECKF(sum.unexpected == 2, "%zu unexpected", sum.unexpected);
    moe_model_desc_free(&d);
}

typedef struct report {
    int calls, by_kind[6];
    char names[8][200];
    int n_names;
    moe_status stop_with;
} report;

static moe_status on_item(void *ctx, const moe_verify_item *item)
{
    report *r = ctx;
    r->calls++;
    if ((unsigned)item->kind < 6) r->by_kind[item->kind]++;
    if (item->kind != MOE_VERIFY_FOUND && r->n_names < 8) {
        const char *name = item->spec ? item->spec->name : item->tensor->name;
        snprintf(r->names[r->n_names++], sizeof r->names[0], "%s", name);
        CHECK(item->message && item->message[0]);
        CHECK(item->status == (item->kind == MOE_VERIFY_MISSING     ? MOE_EMISSING
                               : item->kind == MOE_VERIFY_BAD_DTYPE ? MOE_EDTYPE
                               : item->kind == MOE_VERIFY_BAD_SHAPE ? MOE_ESHAPE
                                                                    : MOE_OK));
    }
    if (item->kind == MOE_VERIFY_FOUND) CHECK(item->tensor && item->spec && item->status == MOE_OK);
    return r->stop_with;
}

static void test_report_every_problem(const char *dir)
{
    moe_model_desc d = parse(cfg_v3);
    damage dm = {
        .drop = {"model.layers.2.mlp.experts.7.down_proj.weight"},
        .retype = {"model.layers.1.mlp.gate.e_score_correction_bias"},
        .retype_to = {MOE_DTYPE_I64},
        .reshape = {"model.layers.0.mlp.down_proj.weight_scale_inv"},
        .extras = {{"model.layers.2.mlp.experts.0.gate_proj.bias", MOE_DTYPE_BF16, 1, {64}}}};
    write_ckpt(&d, dir, &dm);
    moe_ckpt *ck = NULL;
    REQUIRE(moe_ckpt_open(dir, NULL, &ck) == MOE_OK);
    report r;
    memset(&r, 0, sizeof r);
    moe_verify_summary sum;
    moe_status st = moe_model_verify_each(&d, ck, on_item, &r, &sum);
    /* The first problem in walk order (layer 0's dense scale) decides the status. */
    CHECK_STATUS(st, MOE_ESHAPE);
    CHECK(has("model.layers.0.mlp.down_proj.weight_scale_inv"));
    const size_t total = count_specs(&d);
    CHECK(sum.specs == total && sum.found == total - 3);
    CHECK(sum.missing == 1 && sum.bad_dtype == 1 && sum.bad_shape == 1 && sum.unexpected == 1);
    CHECK((size_t)r.calls == total + 1);
    CHECK(r.by_kind[MOE_VERIFY_MISSING] == 1 && r.by_kind[MOE_VERIFY_BAD_DTYPE] == 1);
    CHECK(r.by_kind[MOE_VERIFY_BAD_SHAPE] == 1 && r.by_kind[MOE_VERIFY_UNEXPECTED] == 1);
    /* Layer order, specs before the layer's unexpected tensors. */
    CHECK(r.n_names == 4);
    CHECK(!strcmp(r.names[0], "model.layers.0.mlp.down_proj.weight_scale_inv"));
    CHECK(!strcmp(r.names[1], "model.layers.1.mlp.gate.e_score_correction_bias"));
    CHECK(!strcmp(r.names[2], "model.layers.2.mlp.experts.7.down_proj.weight"));
    CHECK(!strcmp(r.names[3], "model.layers.2.mlp.experts.0.gate_proj.bias"));

    /* A callback's status stops the walk at once. */
    memset(&r, 0, sizeof r);
    r.stop_with = MOE_ESTATE;
    CHECK_STATUS(moe_model_verify_each(&d, ck, on_item, &r, &sum), MOE_ESTATE);
    CHECK(r.calls == 1 && sum.specs == 1);
    CHECK_STATUS(moe_model_verify(NULL, ck), MOE_EINVAL);
    moe_ckpt_close(ck);
    moe_model_desc_free(&d);
}

static void test_v4_names_and_dtypes(const char *dir)
{
    moe_model_desc d = parse(cfg_v4);
    moe_verify_summary sum;
    damage prefixed = {.prefix_model = true};
    CHECK_STATUS(verify_with(&d, dir, &prefixed, &sum), MOE_OK);
    CHECK(sum.found == count_specs(&d) && sum.unexpected == 0);

    /* Both spellings: the canonical one is used, the other one is reported. */
    damage twice = {.twice = "layers.2.ffn.gate.bias"};
    CHECK_STATUS(verify_with(&d, dir, &twice, &sum), MOE_OK);
    CHECK(sum.unexpected == 1);

    damage alts = {.retype = {"layers.0.ffn.gate.tid2eid", "layers.1.ffn.experts.3.w2.scale",
                              "layers.2.ffn.experts.0.w1.weight",
                              "layers.2.ffn.shared_experts.w3.scale"},
                   .retype_to = {MOE_DTYPE_I32, MOE_DTYPE_U8, MOE_DTYPE_U8, MOE_DTYPE_F32}};
    CHECK_STATUS(verify_with(&d, dir, &alts, &sum), MOE_OK);

    damage bad = {.retype = {"layers.0.ffn.gate.tid2eid"}, .retype_to = {MOE_DTYPE_F32}};
    CHECK_STATUS(verify_with(&d, dir, &bad, &sum), MOE_EDTYPE);
    CHECK(has("layers.0.ffn.gate.tid2eid") && has("accepted: i32, i64"));

    damage fp4 = {.retype = {"layers.1.ffn.experts.3.w2.scale"}, .retype_to = {MOE_DTYPE_F32}};
    CHECK_STATUS(verify_with(&d, dir, &fp4, &sum), MOE_EDTYPE);

    damage missing = {.drop = {"layers.0.ffn.gate.tid2eid"}};
    CHECK_STATUS(verify_with(&d, dir, &missing, &sum), MOE_EMISSING);
    CHECK(has("layer 0") && has("layers.0.ffn.gate.tid2eid") && has("i64 [100, 2]"));

    damage stray = {
        .extras = {{"layers.1.ffn.gate.tid2eid", MOE_DTYPE_I64, 2, {100, 2}},
                   {"model.layers.2.ffn.experts.9.w1.weight", MOE_DTYPE_I8, 2, {64, 32}},
                   {"layers.1.ffn_norm.weight", MOE_DTYPE_BF16, 1, {64}}}};
    CHECK_STATUS(verify_with(&d, dir, &stray, &sum), MOE_OK);
    CHECK(sum.unexpected == 2);
    moe_model_desc_free(&d);
}

static void test_gpt_oss_and_mixtral(const char *dir)
{
    moe_model_desc d = parse(cfg_gpt_oss);
    moe_verify_summary sum;
    damage drop = {.drop = {"model.layers.1.mlp.router.bias"}};
    CHECK_STATUS(verify_with(&d, dir, &drop, &sum), MOE_EMISSING);
    CHECK(has("model.layers.1.mlp.router.bias"));
    damage shape = {.reshape = {"model.layers.0.mlp.experts.gate_up_proj_blocks"}};
    CHECK_STATUS(verify_with(&d, dir, &shape, &sum), MOE_ESHAPE);
    CHECK(has("[5, 128, 2, 16]") && has("expected [4, 128, 2, 16]"));
    moe_model_desc_free(&d);

    d = parse(cfg_mixtral);
    damage stray = {
        .extras = {
            {"model.layers.0.block_sparse_moe.experts.0.w4.weight", MOE_DTYPE_BF16, 2, {48, 32}},
            {"model.layers.0.mlp.gate.weight", MOE_DTYPE_BF16, 2, {4, 32}}}};
    CHECK_STATUS(verify_with(&d, dir, &stray, &sum), MOE_OK);
    CHECK(sum.unexpected == 1);
    moe_model_desc_free(&d);
}

/* MiniMax-M2's namespace is block_sparse_moe, its bias the block's; Kimi-K2.5's is the
 * language model's, under both spellings. */
static void test_minimax_and_kimi_k25(const char *dir)
{
    moe_model_desc d = parse(cfg_minimax);
    moe_verify_summary sum;
    damage drop = {.drop = {"model.layers.1.block_sparse_moe.e_score_correction_bias"}};
    CHECK_STATUS(verify_with(&d, dir, &drop, &sum), MOE_EMISSING);
    CHECK(has("layer 1") && has("model.layers.1.block_sparse_moe.e_score_correction_bias") &&
          has("f32 [4]"));
    damage stray = {
        .extras = {
            {"model.layers.0.block_sparse_moe.gate.e_score_correction_bias", MOE_DTYPE_F32, 1, {4}},
            {"model.layers.0.block_sparse_moe.experts.4.w1.weight", MOE_DTYPE_F8_E4M3, 2, {48, 64}},
            {"model.layers.0.mlp.gate.weight", MOE_DTYPE_BF16, 2, {4, 64}}}};
    CHECK_STATUS(verify_with(&d, dir, &stray, &sum), MOE_OK);
    CHECK(sum.unexpected == 2);
    moe_model_desc_free(&d);

    d = parse(cfg_kimi_k25);
    damage kstray = {
        .extras = {{"language_model.model.blocks.1.mlp.experts.8.up_proj.weight",
                    MOE_DTYPE_BF16,
                    2,
                    {32, 64}},
                   {"language_model.model.layers.1.mlp.gate.bias", MOE_DTYPE_F32, 1, {8}},
                   {"model.layers.1.mlp.gate.weight", MOE_DTYPE_BF16, 2, {8, 64}}}};
    CHECK_STATUS(verify_with(&d, dir, &kstray, &sum), MOE_OK);
    CHECK(sum.unexpected == 2);
    damage kdrop = {.drop = {"language_model.model.layers.1.mlp.shared_experts.up_proj.weight"}};
    CHECK_STATUS(verify_with(&d, dir, &kdrop, &sum), MOE_EMISSING);
    CHECK(has("language_model.model.layers.1.mlp.shared_experts.up_proj.weight"));
    moe_model_desc_free(&d);
}

static void test_model_open(const char *dir)
{
    moe_model_desc d = parse(cfg_v3);
    damage none = {0};
    write_ckpt(&d, dir, &none);
    moe_model *m = NULL;
    moe_model *const sentinel = (moe_model *)&d;

    /* No config.json yet. */
    m = sentinel;
    CHECK_STATUS(moe_model_open(dir, NULL, &m), MOE_EMISSING);
    CHECK(has("config.json") && m == sentinel);

    write_text(dir, "config.json", cfg_v3);
    CHECK_STATUS(moe_model_open(dir, NULL, &m), MOE_OK);
    CHECK(m != sentinel && moe_model_layer_count(m) == 3);
    const moe_model_desc *md = moe_model_desc_of(m);
    CHECK(md && md->family == MOE_FAMILY_DEEPSEEK_V3 && md->layers[0].kind == MOE_LAYER_DENSE);
    const moe_ckpt *ck = moe_model_ckpt_of(m);
    CHECK(ck && moe_ckpt_find(ck, "model.layers.2.mlp.gate.weight") != NULL);
    moe_model_close(m);

    moe_open_options opts = {sizeof opts, true};
    CHECK_STATUS(moe_model_open(dir, &opts, &m), MOE_OK);
    CHECK(moe_model_layer_count(m) == 3);
    moe_model_close(m);

    m = sentinel;
    opts.size = 0;
    CHECK_STATUS(moe_model_open(dir, &opts, &m), MOE_EINVAL);
    CHECK(has("size") && m == sentinel);
    CHECK_STATUS(moe_model_open(NULL, NULL, &m), MOE_EINVAL);
    CHECK_STATUS(moe_model_open("", NULL, &m), MOE_EINVAL);
    CHECK_STATUS(moe_model_open(dir, NULL, NULL), MOE_EINVAL);
    CHECK_STATUS(moe_model_open_ex(dir, NULL, 0x80, &m), MOE_EINVAL);
    CHECK(m == sentinel);

    /* A tensor missing: the open fails naming the folder, layer and tensor; skipping the
     * check (moe inspect) still gives a handle. */
    damage drop = {.drop = {"model.layers.1.mlp.experts.3.gate_proj.weight"}};
    write_ckpt(&d, dir, &drop);
    CHECK_STATUS(moe_model_open(dir, NULL, &m), MOE_EMISSING);
    CHECK(has(dir) && has("layer 1") && has("experts.3.gate_proj.weight") && m == sentinel);
    CHECK_STATUS(moe_model_open_ex(dir, NULL, MOE_OPEN_SKIP_VERIFY, &m), MOE_OK);
    CHECK(m != sentinel && moe_model_layer_count(m) == 3);
    moe_model_close(m);

    /* A bad config stops the open before the tensors. */
    m = sentinel;
    write_text(dir, "config.json", "{\"model_type\":\"jamba\"}");
    CHECK_STATUS(moe_model_open(dir, NULL, &m), MOE_EUNSUPPORTED);
    CHECK(has("jamba") && m == sentinel);

    /* No tensors at all. */
    write_text(dir, "config.json", cfg_v3);
    remove_in(dir, "model.safetensors");
    CHECK(moe_model_open(dir, NULL, &m) != MOE_OK && m == sentinel);

    moe_model_close(NULL);
    CHECK(moe_model_layer_count(NULL) == 0);
    remove_in(dir, "config.json");
    moe_model_desc_free(&d);
}

int main(void)
{
    char dir[] = "/tmp/moe_test_verify_XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    test_every_family_clean(dir);
    test_strict_errors(dir);
    test_unexpected(dir);
    test_minimax_and_kimi_k25(dir);
    test_report_every_problem(dir);
    test_v4_names_and_dtypes(dir);
    test_gpt_oss_and_mixtral(dir);
    test_model_open(dir);
    remove_in(dir, "model.safetensors");
    remove_in(dir, "config.json");
    CHECK(rmdir(dir) == 0);
    return TEST_END();
}
