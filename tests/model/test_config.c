/* test_config.c — every family's config.json fixture parses to routing.md §7; layer plans. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "config_fixture.h"

/* What each fixture must parse to, written from routing.md §7 and formats.md §2–4, not from
 * the parser. A row: the fixture; the model; its routing; its MLPs. */
typedef struct want {
    struct {
        const char *file, *type;
        moe_family family;
    };
    struct {
        int layers;
        int64_t hidden, vocab;
        int first_dense; /* leading dense layers (DeepSeek first_k_dense_replace) */
        int first_hash;  /* leading hash layers (DeepSeek-V4 num_hash_layers) */
    };
    struct {
        moe_route_method method;
        moe_score_func score;
        int experts, top_k, n_group, topk_group;
        bool correction_bias, router_bias, norm;
        float rsf;
    };
    struct {
        int64_t expert_inter, dense_inter;
        int n_shared;
        moe_weight_format fmt, shared_fmt;
        moe_dtype scale, shared_scale;
        moe_activation act;
        float limit, alpha;
    };
} want;

static const want wants[] = {
    {{"deepseek-v3.json", "deepseek_v3", MOE_FAMILY_DEEPSEEK_V3},
     {61, 7168, 129280, 3, 0},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 8, 4, true, false, true, 2.5f},
     {2048, 18432, 1, MOE_WFMT_FP8_BLOCK, MOE_WFMT_FP8_BLOCK, MOE_DTYPE_F32, MOE_DTYPE_F32,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"deepseek-r1.json", "deepseek_v3", MOE_FAMILY_DEEPSEEK_V3},
     {61, 7168, 129280, 3, 0},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 8, 4, true, false, true, 2.5f},
     {2048, 18432, 1, MOE_WFMT_FP8_BLOCK, MOE_WFMT_FP8_BLOCK, MOE_DTYPE_F32, MOE_DTYPE_F32,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"kimi-k2.json", "kimi_k2", MOE_FAMILY_KIMI_K2},
     {61, 7168, 163840, 1, 0},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 384, 8, 1, 1, true, false, true, 2.827f},
     {2048, 18432, 1, MOE_WFMT_FP8_BLOCK, MOE_WFMT_FP8_BLOCK, MOE_DTYPE_F32, MOE_DTYPE_F32,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"deepseek-v2.json", "deepseek_v2", MOE_FAMILY_DEEPSEEK_V2},
     {60, 5120, 102400, 1, 0},
     {MOE_ROUTE_GROUP_LIMITED_GREEDY, MOE_SCORE_SOFTMAX, 160, 6, 8, 3, false, false, false, 16.0f},
     {1536, 12288, 2, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"deepseek-v2-lite.json", "deepseek_v2", MOE_FAMILY_DEEPSEEK_V2},
     {27, 2048, 102400, 1, 0},
     {MOE_ROUTE_GREEDY, MOE_SCORE_SOFTMAX, 64, 6, 1, 1, false, false, false, 1.0f},
     {1408, 10944, 2, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"deepseek-v4-flash.json", "deepseek_v4", MOE_FAMILY_DEEPSEEK_V4},
     {43, 4096, 129280, 0, 3},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SQRTSOFTPLUS, 256, 6, 1, 1, true, false, true, 1.5f},
     {2048, 0, 1, MOE_WFMT_MXFP4, MOE_WFMT_FP8_BLOCK, MOE_DTYPE_F8_E8M0, MOE_DTYPE_F8_E8M0,
      MOE_ACT_SILU_GLU_CLAMP, 10.0f, 0}},
    {{"qwen3-30b-a3b.json", "qwen3_moe", MOE_FAMILY_QWEN3_MOE},
     {48, 2048, 151936, 0, 0},
     {MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 128, 8, 1, 1, false, false, true, 1.0f},
     {768, 0, 0, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"qwen3-30b-a3b-fp8.json", "qwen3_moe", MOE_FAMILY_QWEN3_MOE},
     {48, 2048, 151936, 0, 0},
     {MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 128, 8, 1, 1, false, false, true, 1.0f},
     {768, 0, 0, MOE_WFMT_FP8_BLOCK, MOE_WFMT_BF16, MOE_DTYPE_F32, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"mixtral-8x7b.json", "mixtral", MOE_FAMILY_MIXTRAL},
     {32, 4096, 32000, 0, 0},
     {MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 8, 2, 1, 1, false, false, true, 1.0f},
     {14336, 0, 0, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"gpt-oss-20b.json", "gpt_oss", MOE_FAMILY_GPT_OSS},
     {24, 2880, 201088, 0, 0},
     {MOE_ROUTE_TOPK_SOFTMAX, MOE_SCORE_SOFTMAX, 32, 4, 1, 1, false, true, true, 1.0f},
     {2880, 0, 0, MOE_WFMT_MXFP4, MOE_WFMT_BF16, MOE_DTYPE_F8_E8M0, MOE_DTYPE_INVALID,
      MOE_ACT_GPTOSS_GLU, 7.0f, 1.702f}},
    {{"gpt-oss-120b.json", "gpt_oss", MOE_FAMILY_GPT_OSS},
     {36, 2880, 201088, 0, 0},
     {MOE_ROUTE_TOPK_SOFTMAX, MOE_SCORE_SOFTMAX, 128, 4, 1, 1, false, true, true, 1.0f},
     {2880, 0, 0, MOE_WFMT_MXFP4, MOE_WFMT_BF16, MOE_DTYPE_F8_E8M0, MOE_DTYPE_INVALID,
      MOE_ACT_GPTOSS_GLU, 7.0f, 1.702f}},
    /* Written by transformers 5.25's save_pretrained from each config class's defaults: the
     * expected values are those classes' defaults (configuration_*.py). */
    {{"qwen3-moe-transformers5.json", "qwen3_moe", MOE_FAMILY_QWEN3_MOE},
     {24, 2048, 151936, 0, 0},
     {MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 128, 8, 1, 1, false, false, false, 1.0f},
     {768, 0, 0, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"deepseek-v4-transformers5.json", "deepseek_v4", MOE_FAMILY_DEEPSEEK_V4},
     {43, 4096, 129280, 0, 3},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SQRTSOFTPLUS, 256, 6, 1, 1, true, false, true, 1.5f},
     {2048, 0, 1, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU_CLAMP, 10.0f, 0}},
    {{"gpt-oss-transformers5.json", "gpt_oss", MOE_FAMILY_GPT_OSS},
     {36, 2880, 201088, 0, 0},
     {MOE_ROUTE_TOPK_SOFTMAX, MOE_SCORE_SOFTMAX, 128, 4, 1, 1, false, true, true, 1.0f},
     {2880, 0, 0, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_GPTOSS_GLU, 7.0f, 1.702f}},
    /* DeepSeek-V3.2 and the GLM family: DeepseekV32Config, Glm4MoeConfig, GlmMoeDsaConfig and
     * Glm4MoeLiteConfig (the DeepSeek-V3.2, GLM-4.5-Air, GLM-5 and GLM-4.7-Flash shapes). */
    {{"deepseek-v32-transformers5.json", "deepseek_v32", MOE_FAMILY_DEEPSEEK_V32},
     {61, 7168, 129280, 3, 0},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 8, 4, true, false, true, 2.5f},
     {2048, 18432, 1, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"glm4-moe-transformers5.json", "glm4_moe", MOE_FAMILY_GLM4_MOE},
     {46, 4096, 151552, 1, 0},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 128, 8, 1, 1, true, false, true, 1.0f},
     {1408, 10944, 1, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"glm-moe-dsa-transformers5.json", "glm_moe_dsa", MOE_FAMILY_GLM_MOE_DSA},
     {78, 6144, 154880, 3, 0},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 1, 1, true, false, true, 2.5f},
     {2048, 12288, 1, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"glm4-moe-lite-transformers5.json", "glm4_moe_lite", MOE_FAMILY_GLM4_MOE_LITE},
     {47, 2048, 154880, 1, 0},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 64, 4, 1, 1, true, false, true, 1.8f},
     {1536, 10240, 1, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    /* MiniMaxM2Config: sigmoid noaux_tc in one group, renormalised, unscaled, no shared expert. */
    {{"minimax-m2-transformers5.json", "minimax_m2", MOE_FAMILY_MINIMAX_M2},
     {62, 3072, 200064, 0, 0},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 1, 1, true, false, true, 1.0f},
     {1536, 0, 0, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    /* Kimi_K25Config: its text_config is DeepseekV3Config's defaults. */
    {{"kimi-k25-transformers5.json", "kimi_k25", MOE_FAMILY_KIMI_K25},
     {61, 7168, 129280, 3, 0},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 8, 4, true, false, true, 2.5f},
     {2048, 18432, 1, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    /* MiniMax-M2.7 as released: block FP8 spelled "float8_e4m3fn", f32 scales. */
    {{"minimax-m2.7.json", "minimax_m2", MOE_FAMILY_MINIMAX_M2},
     {62, 3072, 200064, 0, 0},
     {MOE_ROUTE_NOAUX_TC, MOE_SCORE_SIGMOID, 256, 8, 1, 1, true, false, true, 1.0f},
     {1536, 0, 0, MOE_WFMT_FP8_BLOCK, MOE_WFMT_BF16, MOE_DTYPE_F32, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    /* Qwen3-Next and Qwen3.5-MoE: one shared expert of shared_expert_intermediate_size (512 =
     * 1 × moe_intermediate_size in both), its output gated by sigmoid(shared_expert_gate). */
    {{"qwen3-next-80b-a3b.json", "qwen3_next", MOE_FAMILY_QWEN3_NEXT},
     {48, 2048, 151936, 0, 0},
     {MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 512, 10, 1, 1, false, false, true, 1.0f},
     {512, 0, 1, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    {{"qwen3.5-35b-a3b.json", "qwen3_5_moe", MOE_FAMILY_QWEN3_5_MOE},
     {40, 2048, 248320, 0, 0},
     {MOE_ROUTE_SOFTMAX_TOPK, MOE_SCORE_SOFTMAX, 256, 8, 1, 1, false, false, true, 1.0f},
     {512, 0, 1, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
    /* ERNIE-4.5: layer 0 dense (moe_layer_start_index 1), softmax + correction bias for the
     * choice, renormalised with the 1e-12 floor, two shared experts. */
    {{"ernie-4.5-21b-a3b.json", "ernie4_5_moe", MOE_FAMILY_ERNIE4_5_MOE},
     {28, 2560, 103424, 1, 0},
     {MOE_ROUTE_SOFTMAX_BIAS, MOE_SCORE_SOFTMAX, 64, 6, 1, 1, true, false, true, 1.0f},
     {1536, 12288, 2, MOE_WFMT_BF16, MOE_WFMT_BF16, MOE_DTYPE_INVALID, MOE_DTYPE_INVALID,
      MOE_ACT_SILU_GLU, 0, 0}},
};

/* The families whose shared expert has a sigmoid gate. */
static bool gated_shared(moe_family f)
{
    return f == MOE_FAMILY_QWEN3_NEXT || f == MOE_FAMILY_QWEN3_5_MOE;
}

static int blocks_out(moe_weight_format f)
{
    return f == MOE_WFMT_FP8_BLOCK ? 128 : f == MOE_WFMT_MXFP4 ? 1 : 0;
}
static int blocks_in(moe_weight_format f)
{
    return f == MOE_WFMT_FP8_BLOCK ? 128 : f == MOE_WFMT_MXFP4 ? 32 : 0;
}

static void check_mlp(const want *w, const moe_mlp_desc *m, int64_t inter, moe_weight_format fmt,
                      moe_dtype scale, int layer, const char *what)
{
    CHECKF(m->hidden == w->hidden, "%s layer %d %s hidden %lld", w->file, layer, what,
           (long long)m->hidden);
    CHECKF(m->intermediate == inter, "%s layer %d %s intermediate %lld, want %lld", w->file, layer,
           what, (long long)m->intermediate, (long long)inter);
    CHECKF(m->format == fmt, "%s layer %d %s format %s", w->file, layer, what,
           moe_weight_format_name(m->format));
    CHECKF(m->scale_dtype == scale, "%s layer %d %s scale %s", w->file, layer, what,
           moe_dtype_name(m->scale_dtype));
    CHECKF(m->block_out == blocks_out(fmt) && m->block_in == blocks_in(fmt),
           "%s layer %d %s block %dx%d", w->file, layer, what, m->block_out, m->block_in);
    CHECKF(m->activation == w->act, "%s layer %d %s activation %s", w->file, layer, what,
           moe_activation_name(m->activation));
    CHECKF(m->swiglu_limit == w->limit, "%s layer %d %s limit %g", w->file, layer, what,
           (double)m->swiglu_limit);
    CHECKF(m->alpha == w->alpha, "%s layer %d %s alpha %g", w->file, layer, what, (double)m->alpha);
    CHECK(m->has_bias == (w->family == MOE_FAMILY_GPT_OSS));
}

static void check_routing(const want *w, const moe_layer_desc *l)
{
    const moe_routing_desc *r = &l->routing;
    const bool hash = l->kind == MOE_LAYER_HASH;
    CHECKF(r->method == (hash ? MOE_ROUTE_HASH : w->method), "%s layer %d method %s", w->file,
           l->index, moe_route_method_name(r->method));
    CHECKF(r->score == w->score, "%s layer %d score %s", w->file, l->index,
           moe_score_func_name(r->score));
    CHECK(r->n_experts == w->experts);
    CHECK(r->top_k == w->top_k);
    CHECK(r->n_group == (hash ? 1 : w->n_group));
    CHECK(r->topk_group == (hash ? 1 : w->topk_group));
    CHECKF(r->has_correction_bias == (w->correction_bias && !hash), "%s layer %d bias", w->file,
           l->index);
    CHECK(r->has_router_bias == w->router_bias);
    CHECK(r->norm_topk_prob == w->norm);
    CHECKF(r->routed_scaling_factor == w->rsf, "%s rsf %g", w->file,
           (double)r->routed_scaling_factor);
    const float floor = w->method == MOE_ROUTE_SOFTMAX_BIAS ? 1e-12f : 0.0f; /* moe_norm_min */
    CHECKF(r->renorm_min == floor, "%s renorm_min %g", w->file, (double)r->renorm_min);
}

static void check_want(const want *w)
{
    moe_model_desc d;
    moe_status st = load_fixture(w->file, &d);
    CHECKF(st == MOE_OK, "%s: %s", w->file, moe_last_error());
    if (st) return;
    CHECK(d.family == w->family);
    CHECKF(!strcmp(d.model_type, w->type), "%s model_type %s", w->file, d.model_type);
    CHECK(!strcmp(moe_family_name(d.family), w->type));
    CHECK(d.n_layers == w->layers);
    CHECK(d.hidden == w->hidden);
    CHECK(d.vocab_size == w->vocab);
    CHECK(d.router_dtype == MOE_DTYPE_BF16);
    CHECK(d.num_hash_layers == w->first_hash);
    int counts[3] = {0, 0, 0};
    for (int i = 0; i < d.n_layers; i++) {
        const moe_layer_desc *l = &d.layers[i];
        moe_layer_kind kind = i < w->first_hash    ? MOE_LAYER_HASH
                              : i < w->first_dense ? MOE_LAYER_DENSE
                                                   : MOE_LAYER_MOE;
        CHECK(l->index == i);
        CHECKF(l->kind == kind, "%s layer %d kind %s", w->file, i, moe_layer_kind_name(l->kind));
        if (l->kind >= 0 && l->kind <= 2) counts[l->kind]++;
        if (l->kind == MOE_LAYER_DENSE) {
            check_mlp(w, &l->dense, w->dense_inter, w->shared_fmt, w->shared_scale, i, "dense");
            continue;
        }
        check_routing(w, l);
        check_mlp(w, &l->experts, w->expert_inter, w->fmt, w->scale, i, "experts");
        CHECK(l->n_shared == w->n_shared);
        CHECKF(l->shared_gate == gated_shared(w->family), "%s layer %d shared gate", w->file, i);
        if (w->n_shared)
            check_mlp(w, &l->shared, w->expert_inter * w->n_shared, w->shared_fmt, w->shared_scale,
                      i, "shared");
    }
    CHECK(counts[MOE_LAYER_DENSE] == w->first_dense);
    CHECK(counts[MOE_LAYER_HASH] == w->first_hash);
    CHECK(counts[MOE_LAYER_MOE] == w->layers - w->first_dense - w->first_hash);
    moe_model_desc_free(&d);
    CHECK(d.layers == NULL);
}

/* Parses TEXT, which must succeed. */
static bool parse_ok(const char *text, moe_model_desc *d)
{
    moe_status st = moe_model_desc_parse(text, strlen(text), "inline.json", d);
    CHECKF(st == MOE_OK, "%s -> %s", text, moe_last_error());
    return st == MOE_OK;
}

/* Parses TEXT, which must fail with WANT and a message containing NEEDLE. */
static void parse_fails(const char *text, moe_status want_st, const char *needle)
{
    moe_model_desc d;
    memset(&d, 0x5a, sizeof d);
    moe_model_desc before = d;
    moe_status st = moe_model_desc_parse(text, strlen(text), "inline.json", &d);
    CHECKF(st == want_st, "%s -> %d (%s), want %d", text, (int)st, moe_last_error(), (int)want_st);
    CHECKF(strstr(moe_last_error(), needle) != NULL, "message '%s' lacks '%s'", moe_last_error(),
           needle);
    CHECK(memcmp(&d, &before, sizeof d) == 0); /* untouched on error */
    if (st == MOE_OK) moe_model_desc_free(&d);
}

#define QWEN3(extra)                                                                               \
    "{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"num_hidden_layers\":8,"                    \
    "\"num_experts\":16,\"num_experts_per_tok\":4,\"moe_intermediate_size\":32" extra "}"

static void test_qwen3_plan(void)
{
    moe_model_desc d;
    /* decoder_sparse_step 2: layers 1, 3, 5, 7 are MoE ((L+1) % 2 == 0), minus mlp_only 3. */
    if (parse_ok(QWEN3(",\"intermediate_size\":96,\"decoder_sparse_step\":2,"
                       "\"mlp_only_layers\":[3, 0]"),
                 &d)) {
        const bool moe[8] = {false, true, false, false, false, true, false, true};
        for (int i = 0; i < 8; i++) {
            CHECKF(d.layers[i].kind == (moe[i] ? MOE_LAYER_MOE : MOE_LAYER_DENSE), "layer %d", i);
            if (!moe[i]) CHECK(d.layers[i].dense.intermediate == 96);
        }
        CHECK(d.layers[1].routing.norm_topk_prob == false); /* the default */
        moe_model_desc_free(&d);
    }
    /* Dense layers need intermediate_size; all-MoE configs do not. */
    parse_fails(QWEN3(",\"mlp_only_layers\":[2]"), MOE_EMISSING, "intermediate_size");
    if (parse_ok(QWEN3(""), &d)) {
        for (int i = 0; i < 8; i++)
            CHECK(d.layers[i].kind == MOE_LAYER_MOE);
        moe_model_desc_free(&d);
    }
    parse_fails(QWEN3(",\"mlp_only_layers\":[8]"), MOE_ECONFIG, "mlp_only_layers");
    parse_fails(QWEN3(",\"mlp_only_layers\":[\"1\"]"), MOE_EJSON, "mlp_only_layers");
    parse_fails(QWEN3(",\"mlp_only_layers\":3"), MOE_EJSON, "mlp_only_layers");
    parse_fails(QWEN3(",\"decoder_sparse_step\":0"), MOE_ECONFIG, "decoder_sparse_step");
}

#define DSV2(extra)                                                                                \
    "{\"model_type\":\"deepseek_v2\",\"hidden_size\":64,\"num_hidden_layers\":9,"                  \
    "\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32" extra "}"

static void test_deepseek_plan_and_defaults(void)
{
    moe_model_desc d;
    /* moe_layer_freq 3, first_k_dense_replace 2: MoE at 3 and 6 only. */
    if (parse_ok(DSV2(",\"intermediate_size\":80,\"first_k_dense_replace\":2,\"moe_layer_freq\":3"),
                 &d)) {
        for (int i = 0; i < 9; i++)
            CHECKF(d.layers[i].kind == ((i == 3 || i == 6) ? MOE_LAYER_MOE : MOE_LAYER_DENSE),
                   "layer %d", i);
        moe_model_desc_free(&d);
    }
    /* Defaults of deepseek_v2: greedy, softmax, no norm, rsf 1, groups 1/1, no shared. */
    if (parse_ok(DSV2(""), &d)) {
        const moe_layer_desc *l = &d.layers[0];
        CHECK(l->kind == MOE_LAYER_MOE);
        CHECK(l->routing.method == MOE_ROUTE_GREEDY);
        CHECK(l->routing.score == MOE_SCORE_SOFTMAX);
        CHECK(!l->routing.norm_topk_prob && !l->routing.has_correction_bias);
        CHECK(l->routing.routed_scaling_factor == 1.0f);
        CHECK(l->routing.n_group == 1 && l->routing.topk_group == 1);
        CHECK(l->n_shared == 0);
        CHECK(d.vocab_size == 0);
        CHECK(l->experts.format == MOE_WFMT_BF16);
        moe_model_desc_free(&d);
    }
    /* Defaults of deepseek_v3: noaux_tc with sigmoid and a correction bias. */
    if (parse_ok("{\"model_type\":\"deepseek_v3\",\"hidden_size\":64,\"num_hidden_layers\":1,"
                 "\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32}",
                 &d)) {
        CHECK(d.layers[0].routing.method == MOE_ROUTE_NOAUX_TC);
        CHECK(d.layers[0].routing.score == MOE_SCORE_SIGMOID);
        CHECK(d.layers[0].routing.has_correction_bias);
        moe_model_desc_free(&d);
    }
    /* Every layer dense when there are no routed experts. */
    if (parse_ok("{\"model_type\":\"deepseek_v2\",\"hidden_size\":64,\"num_hidden_layers\":2,"
                 "\"n_routed_experts\":0,\"intermediate_size\":128}",
                 &d)) {
        CHECK(d.layers[0].kind == MOE_LAYER_DENSE && d.layers[1].kind == MOE_LAYER_DENSE);
        moe_model_desc_free(&d);
    }
    /* Kimi-K2 accepts the older DeepSeek methods too. */
    if (parse_ok("{\"model_type\":\"kimi_k2\",\"hidden_size\":64,\"num_hidden_layers\":1,"
                 "\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
                 "\"topk_method\":\"group_limited_greedy\",\"n_group\":4,\"topk_group\":2,"
                 "\"scoring_func\":\"softmax\"}",
                 &d)) {
        CHECK(d.layers[0].routing.method == MOE_ROUTE_GROUP_LIMITED_GREEDY);
        CHECK(!d.layers[0].routing.has_correction_bias);
        CHECK(d.layers[0].routing.n_group == 4 && d.layers[0].routing.topk_group == 2);
        moe_model_desc_free(&d);
    }
    parse_fails(DSV2(",\"first_k_dense_replace\":1"), MOE_EMISSING, "intermediate_size");
    parse_fails(DSV2(",\"moe_layer_freq\":0"), MOE_ECONFIG, "moe_layer_freq");
    parse_fails(DSV2(",\"routed_scaling_factor\":0"), MOE_ECONFIG, "routed_scaling_factor");
    parse_fails(DSV2(",\"routed_scaling_factor\":-2.5"), MOE_ECONFIG, "routed_scaling_factor");
    parse_fails(DSV2(",\"norm_topk_prob\":1"), MOE_EJSON, "norm_topk_prob");
    parse_fails(DSV2(",\"scoring_func\":\"sqrtsoftplus\""), MOE_ECONFIG, "scoring_func");
    parse_fails(DSV2(",\"n_shared_experts\":-1"), MOE_ECONFIG, "n_shared_experts");
    parse_fails(DSV2(",\"topk_method\":\"noaux_tc\",\"n_group\":8,\"topk_group\":8"), MOE_ECONFIG,
                "top 2");
    parse_fails(DSV2(",\"num_experts_per_tok\":0"), MOE_EDUPLICATE, "num_experts_per_tok");
}

static void test_common_fields(void)
{
    moe_model_desc d;
    /* torch_dtype -> router dtype; the transformers-5 "dtype" key; null means absent. */
    if (parse_ok(DSV2(",\"torch_dtype\":\"float32\""), &d)) {
        CHECK(d.router_dtype == MOE_DTYPE_F32);
        moe_model_desc_free(&d);
    }
    if (parse_ok(DSV2(",\"dtype\":\"float16\""), &d)) {
        CHECK(d.router_dtype == MOE_DTYPE_F16);
        moe_model_desc_free(&d);
    }
    if (parse_ok(DSV2(",\"torch_dtype\":null,\"n_group\":null,\"quantization_config\":null"), &d)) {
        CHECK(d.router_dtype == MOE_DTYPE_BF16);
        CHECK(d.layers[0].routing.n_group == 1);
        moe_model_desc_free(&d);
    }
    parse_fails(DSV2(",\"torch_dtype\":\"float64\""), MOE_ECONFIG, "torch_dtype");
    parse_fails(DSV2(",\"vocab_size\":0"), MOE_ECONFIG, "vocab_size");
    parse_fails("{\"model_type\":\"mixtral\",\"hidden_size\":64,\"num_hidden_layers\":4097,"
                "\"num_local_experts\":8,\"num_experts_per_tok\":2,\"intermediate_size\":32}",
                MOE_ECONFIG, "num_hidden_layers");
    parse_fails("{\"model_type\":\"mixtral\",\"hidden_size\":1048577,\"num_hidden_layers\":1,"
                "\"num_local_experts\":8,\"num_experts_per_tok\":2,\"intermediate_size\":32}",
                MOE_ECONFIG, "hidden_size");
    parse_fails("{\"model_type\":\"mixtral\",\"hidden_size\":64,\"num_hidden_layers\":1,"
                "\"num_local_experts\":8,\"num_experts_per_tok\":2,\"intermediate_size\":32.0}",
                MOE_EJSON, "intermediate_size");
    parse_fails("{\"model_type\":\"mixtral\",\"hidden_size\":64,\"num_hidden_layers\":1,"
                "\"num_local_experts\":8,\"num_experts_per_tok\":2}",
                MOE_EMISSING, "intermediate_size");
    parse_fails("{\"model_type\":7}", MOE_EJSON, "model_type");
    parse_fails("", MOE_EJSON, "not valid JSON");
    parse_fails("{\"model_type\":\"mixtral\"} trailing", MOE_EJSON, "not valid JSON");
    CHECK_STATUS(moe_model_desc_parse(NULL, 0, "x", &d), MOE_EINVAL);
    CHECK_STATUS(moe_model_desc_parse("{}", 2, "x", NULL), MOE_EINVAL);
    CHECK_STATUS(moe_model_desc_load("/nonexistent/config.json", &d), MOE_EMISSING);
    CHECK(strstr(moe_last_error(), "/nonexistent/config.json") != NULL);
    moe_model_desc_free(NULL);
}

#define GPTOSS(extra)                                                                              \
    "{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"num_hidden_layers\":2,"                      \
    "\"num_local_experts\":8,\"intermediate_size\":96" extra "}"

static void test_gpt_oss_variants(void)
{
    moe_model_desc d;
    /* No quantization_config: HF's dequantised bf16 layout; OpenAI's top-k key; limit default. */
    if (parse_ok(GPTOSS(",\"experts_per_token\":3"), &d)) {
        CHECK(d.layers[1].experts.format == MOE_WFMT_BF16);
        CHECK(d.layers[1].routing.top_k == 3);
        CHECK(d.layers[1].experts.swiglu_limit == 7.0f);
        CHECK(d.layers[1].experts.alpha == 1.702f);
        CHECK(d.layers[1].experts.has_bias);
        moe_model_desc_free(&d);
    }
    parse_fails(GPTOSS(""), MOE_EMISSING, "num_experts_per_tok");
    parse_fails(GPTOSS(",\"experts_per_token\":3,\"num_experts_per_tok\":4"), MOE_ECONFIG,
                "experts_per_token");
    parse_fails(GPTOSS(",\"num_experts_per_tok\":4,\"swiglu_limit\":0"), MOE_ECONFIG,
                "swiglu_limit");
    /* swiglu_alpha (transformers' GptOssConfig; 1.702 when absent) reaches the activation. */
    if (parse_ok(GPTOSS(",\"num_experts_per_tok\":4,\"swiglu_alpha\":1.25,\"swiglu_limit\":3"),
                 &d)) {
        CHECK(d.layers[0].experts.alpha == 1.25f && d.layers[1].experts.alpha == 1.25f);
        CHECK(d.layers[0].experts.swiglu_limit == 3.0f);
        moe_model_desc_free(&d);
    }
    parse_fails(GPTOSS(",\"num_experts_per_tok\":4,\"swiglu_alpha\":0"), MOE_ECONFIG,
                "field 'swiglu_alpha': 0 must be > 0");
    parse_fails(GPTOSS(",\"num_experts_per_tok\":4,\"swiglu_alpha\":-1.702"), MOE_ECONFIG,
                "field 'swiglu_alpha'");
    parse_fails(GPTOSS(",\"num_experts_per_tok\":4,\"swiglu_alpha\":1e39"), MOE_ECONFIG,
                "field 'swiglu_alpha'");
    parse_fails(GPTOSS(",\"num_experts_per_tok\":4,\"swiglu_alpha\":\"1.702\""), MOE_EJSON,
                "field 'swiglu_alpha'");
    parse_fails(GPTOSS(",\"num_experts_per_tok\":4,\"swiglu_limit\":1e39"), MOE_ECONFIG,
                "field 'swiglu_limit'");
    /* transformers' GptOssExperts does not read hidden_act: neither does libmoe. */
    if (parse_ok(GPTOSS(",\"num_experts_per_tok\":4,\"hidden_act\":\"gelu\""), &d)) {
        CHECK(d.layers[0].experts.activation == MOE_ACT_GPTOSS_GLU);
        moe_model_desc_free(&d);
    }
    parse_fails(
        GPTOSS(",\"num_experts_per_tok\":4,\"quantization_config\":{\"quant_method\":\"fp8\","
               "\"weight_block_size\":[128,128]}"),
        MOE_EUNSUPPORTED, "fp8");
    /* intermediate 96 is a multiple of 32, 80 is not. */
    parse_fails("{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"num_hidden_layers\":2,"
                "\"num_local_experts\":8,\"intermediate_size\":80,\"num_experts_per_tok\":4,"
                "\"quantization_config\":{\"quant_method\":\"mxfp4\"}}",
                MOE_ECONFIG, "intermediate_size");
    parse_fails(DSV2(",\"quantization_config\":{\"quant_method\":\"mxfp4\"}"), MOE_EUNSUPPORTED,
                "mxfp4");
}

#define DSV4(extra)                                                                                \
    "{\"model_type\":\"deepseek_v4\",\"hidden_size\":256,\"num_hidden_layers\":4,"                 \
    "\"vocab_size\":1000,\"n_routed_experts\":16,\"num_experts_per_tok\":4,"                       \
    "\"moe_intermediate_size\":64" extra "}"

#define V4_FP8 "\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]"

static void test_deepseek_v4_variants(void)
{
    moe_model_desc d;
    /* expert_dtype fp8 with ue8m0 scales; the defaults of transformers' DeepseekV4Config:
     * 3 hash layers, renormalised, routed scaling 1.5, swiglu_limit 10 on every expert. */
    if (parse_ok(DSV4(",\"expert_dtype\":\"fp8\",\"n_shared_experts\":2," V4_FP8
                      ",\"scale_fmt\":\"ue8m0\"}"),
                 &d)) {
        const moe_layer_desc *l = &d.layers[3];
        CHECK(d.num_hash_layers == 3 && l->kind == MOE_LAYER_MOE);
        CHECK(d.layers[2].kind == MOE_LAYER_HASH);
        CHECK(l->experts.format == MOE_WFMT_FP8_BLOCK &&
              l->experts.scale_dtype == MOE_DTYPE_F8_E8M0);
        CHECK(l->shared.format == MOE_WFMT_FP8_BLOCK && l->shared.intermediate == 128);
        CHECK(l->experts.activation == MOE_ACT_SILU_GLU_CLAMP && l->experts.swiglu_limit == 10.0f);
        CHECK(l->shared.activation == MOE_ACT_SILU_GLU_CLAMP && l->shared.swiglu_limit == 10.0f);
        CHECK(l->routing.score == MOE_SCORE_SQRTSOFTPLUS && l->routing.norm_topk_prob);
        CHECK(l->routing.routed_scaling_factor == 1.5f);
        moe_model_desc_free(&d);
    }
    /* Without quantization_config every expert is a float tensor (a dequantised checkpoint),
     * whatever a leftover top-level expert_dtype says; one shared expert by default. */
    if (parse_ok("{\"model_type\":\"deepseek_v4\",\"hidden_size\":256,\"num_hidden_layers\":4,"
                 "\"vocab_size\":1000,\"n_routed_experts\":16,\"num_experts_per_tok\":4,"
                 "\"moe_intermediate_size\":48,\"expert_dtype\":\"fp4\"}",
                 &d)) {
        CHECK(d.layers[3].experts.format == MOE_WFMT_BF16);
        CHECK(d.layers[3].experts.scale_dtype == MOE_DTYPE_INVALID);
        CHECK(d.layers[3].n_shared == 1 && d.layers[3].shared.format == MOE_WFMT_BF16);
        moe_model_desc_free(&d);
    }
    /* transformers 5 keeps expert_dtype in quantization_config; absent anywhere it is fp8
     * (FineGrainedFP8Config's default), and scale_fmt "float" means f32 scales. */
    if (parse_ok(DSV4("," V4_FP8 ",\"expert_dtype\":\"fp4\",\"scale_fmt\":\"ue8m0\"}"), &d)) {
        CHECK(d.layers[3].experts.format == MOE_WFMT_MXFP4);
        CHECK(d.layers[3].shared.format == MOE_WFMT_FP8_BLOCK);
        moe_model_desc_free(&d);
    }
    if (parse_ok(DSV4("," V4_FP8 ",\"scale_fmt\":\"float\"}"), &d)) {
        CHECK(d.layers[3].experts.format == MOE_WFMT_FP8_BLOCK);
        CHECK(d.layers[3].experts.scale_dtype == MOE_DTYPE_F32);
        moe_model_desc_free(&d);
    }
    if (parse_ok(DSV4(",\"expert_dtype\":\"fp4\"," V4_FP8 ",\"expert_dtype\":\"fp4\"}"), &d)) {
        CHECK(d.layers[0].experts.format == MOE_WFMT_MXFP4);
        moe_model_desc_free(&d);
    }
    parse_fails(DSV4(",\"expert_dtype\":\"fp4\"," V4_FP8 ",\"expert_dtype\":\"fp8\"}"), MOE_ECONFIG,
                "field 'expert_dtype': 'fp4' disagrees with quantization_config.expert_dtype");
    parse_fails(DSV4("," V4_FP8 ",\"expert_dtype\":\"int4\"}"), MOE_EUNSUPPORTED,
                "field 'quantization_config.expert_dtype'");
    parse_fails(DSV4("," V4_FP8 ",\"scale_fmt\":\"e5m2\"}"), MOE_EUNSUPPORTED,
                "field 'quantization_config.scale_fmt'");
    parse_fails(DSV4(",\"expert_dtype\":\"int4\""), MOE_EUNSUPPORTED, "expert_dtype");
    parse_fails(DSV4(",\"topk_method\":\"greedy\""), MOE_ECONFIG, "topk_method");
    parse_fails(DSV4(",\"swiglu_limit\":-1"), MOE_ECONFIG, "swiglu_limit");
    parse_fails(DSV4(",\"swiglu_limit\":0"), MOE_ECONFIG, "swiglu_limit");
    parse_fails(DSV4(",\"norm_topk_prob\":false"), MOE_EUNSUPPORTED, "field 'norm_topk_prob'");
    parse_fails(DSV4(",\"hidden_act\":\"gelu\""), MOE_EUNSUPPORTED, "field 'hidden_act'");
    parse_fails(DSV4(",\"mlp_bias\":true"), MOE_EUNSUPPORTED, "field 'mlp_bias'");
    parse_fails(DSV4(",\"moe_intermediate_size\":48"), MOE_EDUPLICATE, "moe_intermediate_size");
    parse_fails(DSV4(",\"moe_intermediate_size\":48,\"expert_dtype\":\"fp4\"," V4_FP8 "}"),
                MOE_EDUPLICATE, "moe_intermediate_size");
    parse_fails("{\"model_type\":\"deepseek_v4\",\"hidden_size\":256,\"num_hidden_layers\":4,"
                "\"vocab_size\":1000,\"n_routed_experts\":16,\"num_experts_per_tok\":4,"
                "\"moe_intermediate_size\":48,\"expert_dtype\":\"fp4\"," V4_FP8 "}}",
                MOE_ECONFIG, "moe_intermediate_size");
}

/* mlp_layer_types (transformers 5) and num_hash_layers (hub configs). */
static void test_deepseek_v4_layer_types(void)
{
    moe_model_desc d;
    if (parse_ok(DSV4(",\"mlp_layer_types\":[\"moe\",\"hash_moe\",\"moe\",\"hash_moe\"]"), &d)) {
        for (int i = 0; i < 4; i++) {
            CHECKF(d.layers[i].kind == (i % 2 ? MOE_LAYER_HASH : MOE_LAYER_MOE), "layer %d", i);
            CHECK(d.layers[i].routing.method == (i % 2 ? MOE_ROUTE_HASH : MOE_ROUTE_NOAUX_TC));
        }
        CHECK(d.num_hash_layers == 2);
        moe_model_desc_free(&d);
    }
    if (parse_ok(DSV4(",\"num_hash_layers\":2,"
                      "\"mlp_layer_types\":[\"hash_moe\",\"hash_moe\",\"moe\",\"moe\"]"),
                 &d)) {
        CHECK(d.num_hash_layers == 2 && d.layers[1].kind == MOE_LAYER_HASH);
        CHECK(d.layers[2].kind == MOE_LAYER_MOE);
        moe_model_desc_free(&d);
    }
    if (parse_ok(DSV4(",\"num_hash_layers\":0"), &d)) {
        CHECK(d.num_hash_layers == 0 && d.layers[0].kind == MOE_LAYER_MOE);
        moe_model_desc_free(&d);
    }
    /* The default of 3 hash layers is cut to the layers there are. */
    if (parse_ok("{\"model_type\":\"deepseek_v4\",\"hidden_size\":256,\"num_hidden_layers\":2,"
                 "\"vocab_size\":1000,\"n_routed_experts\":16,\"num_experts_per_tok\":4,"
                 "\"moe_intermediate_size\":64}",
                 &d)) {
        CHECK(d.num_hash_layers == 2 && d.layers[1].kind == MOE_LAYER_HASH);
        moe_model_desc_free(&d);
    }
    parse_fails(DSV4(",\"num_hash_layers\":1,"
                     "\"mlp_layer_types\":[\"hash_moe\",\"hash_moe\",\"moe\",\"moe\"]"),
                MOE_ECONFIG,
                "field 'mlp_layer_types': element 1 'hash_moe' disagrees with num_hash_layers = 1");
    parse_fails(DSV4(",\"num_hash_layers\":2,"
                     "\"mlp_layer_types\":[\"hash_moe\",\"moe\",\"hash_moe\",\"moe\"]"),
                MOE_ECONFIG, "element 1 'moe' disagrees with num_hash_layers = 2");
    parse_fails(DSV4(",\"mlp_layer_types\":[\"hash_moe\",\"moe\",\"moe\"]"), MOE_ECONFIG,
                "field 'mlp_layer_types': has 3 entries; num_hidden_layers is 4");
    parse_fails(DSV4(",\"mlp_layer_types\":[\"hash_moe\",\"moe\",\"moe\",\"moe\",\"moe\"]"),
                MOE_ECONFIG, "has 5 entries");
    parse_fails(DSV4(",\"mlp_layer_types\":[\"hash_moe\",\"dense\",\"moe\",\"moe\"]"), MOE_ECONFIG,
                "field 'mlp_layer_types': element 1 'dense' is not one of");
    parse_fails(DSV4(",\"mlp_layer_types\":[\"moe\",\"moe\",\"moe\",7]"), MOE_EJSON,
                "field 'mlp_layer_types': element 3 is not a string");
    parse_fails(DSV4(",\"mlp_layer_types\":\"moe\""), MOE_EJSON, "field 'mlp_layer_types'");
    parse_fails(DSV4(",\"num_hash_layers\":5"), MOE_ECONFIG, "num_hash_layers");
    parse_fails("{\"model_type\":\"deepseek_v4\",\"hidden_size\":256,\"num_hidden_layers\":2,"
                "\"n_routed_experts\":16,\"num_experts_per_tok\":4,\"moe_intermediate_size\":64,"
                "\"mlp_layer_types\":[\"moe\",\"hash_moe\"]}",
                MOE_EMISSING, "field 'vocab_size'");
    if (parse_ok("{\"model_type\":\"deepseek_v4\",\"hidden_size\":256,\"num_hidden_layers\":2,"
                 "\"n_routed_experts\":16,\"num_experts_per_tok\":4,\"moe_intermediate_size\":64,"
                 "\"mlp_layer_types\":[\"moe\",\"moe\"]}",
                 &d)) {
        CHECK(d.num_hash_layers == 0 && d.vocab_size == 0);
        moe_model_desc_free(&d);
    }
}

/* The expert count under both of its names (transformers' attribute_map): the hub's and the
 * one transformers 5 writes; both present must agree. */
static void test_expert_count_names(void)
{
    static const struct {
        const char *head, *tail, *key, *alias;
    } cases[] = {
        {"{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32",
         "}", "num_experts", "num_local_experts"},
        {"{\"model_type\":\"mixtral\",\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_experts_per_tok\":4,\"intermediate_size\":32",
         "}", "num_local_experts", "num_experts"},
        {"{\"model_type\":\"gpt_oss\",\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_experts_per_tok\":4,\"intermediate_size\":32",
         "}", "num_local_experts", "num_experts"},
        {"{\"model_type\":\"deepseek_v2\",\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32",
         "}", "n_routed_experts", "num_experts"},
        {"{\"model_type\":\"deepseek_v3\",\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32",
         "}", "n_routed_experts", "num_local_experts"},
        {"{\"model_type\":\"kimi_k2\",\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32",
         "}", "n_routed_experts", "num_local_experts"},
        {"{\"model_type\":\"deepseek_v4\",\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32,\"num_hash_layers\":0",
         "}", "n_routed_experts", "num_local_experts"},
        {"{\"model_type\":\"deepseek_v32\",\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32,\"first_k_dense_replace\":0,"
         "\"n_group\":1,\"topk_group\":1",
         "}", "n_routed_experts", "num_local_experts"},
        {"{\"model_type\":\"glm4_moe\",\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32,\"first_k_dense_replace\":0",
         "}", "n_routed_experts", "num_local_experts"},
        {"{\"model_type\":\"minimax_m2\",\"hidden_size\":64,\"num_hidden_layers\":2,"
         "\"num_experts_per_tok\":4,\"intermediate_size\":32",
         "}", "num_local_experts", "num_experts"},
    };
    char text[512], needle[160];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *h = cases[i].head, *t = cases[i].tail, *k = cases[i].key, *a = cases[i].alias;
        moe_model_desc d;
        const int layer = 1;
        snprintf(text, sizeof text, "%s,\"%s\":16%s", h, a, t);
        if (parse_ok(text, &d)) {
            CHECKF(d.layers[layer].routing.n_experts == 16, "%s", text);
            moe_model_desc_free(&d);
        }
        snprintf(text, sizeof text, "%s,\"%s\":16,\"%s\":16%s", h, k, a, t);
        if (parse_ok(text, &d)) {
            CHECKF(d.layers[layer].routing.n_experts == 16, "%s", text);
            moe_model_desc_free(&d);
        }
        snprintf(text, sizeof text, "%s,\"%s\":16,\"%s\":8%s", h, k, a, t);
        snprintf(needle, sizeof needle, "field '%s': 16 disagrees with %s = 8", k, a);
        parse_fails(text, MOE_ECONFIG, needle);
        snprintf(text, sizeof text, "%s%s", h, t);
        snprintf(needle, sizeof needle, "field '%s': required field is missing (nor is %s", k, a);
        parse_fails(text, MOE_EMISSING, needle);
        /* Routing messages name the spelling the config used. */
        snprintf(text, sizeof text, "%s,\"%s\":3%s", h, a, t);
        snprintf(needle, sizeof needle, "must be in [1, %s = 3]", a);
        parse_fails(text, MOE_ECONFIG, needle);
    }
    /* The other family's alias is no name for the count. */
    parse_fails("{\"model_type\":\"deepseek_v2\",\"hidden_size\":64,\"num_hidden_layers\":2,"
                "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32,\"num_local_experts\":16}",
                MOE_EMISSING, "n_routed_experts");
}

/* Fields that change the MLP's arithmetic are read or refused: hidden_act, mlp_bias, and
 * an fp4 expert_dtype where only DeepSeek-V4 has fp4 experts. */
static void test_refused_fields(void)
{
    static const char *const heads[] = {
        "{\"model_type\":\"qwen3_moe\",\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32,\"num_experts\":16",
        "{\"model_type\":\"mixtral\",\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_experts_per_tok\":4,\"intermediate_size\":32,\"num_local_experts\":16",
        "{\"model_type\":\"deepseek_v2\",\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32,\"n_routed_experts\":16",
        "{\"model_type\":\"deepseek_v3\",\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32,\"n_routed_experts\":16",
        "{\"model_type\":\"kimi_k2\",\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_experts_per_tok\":4,\"moe_intermediate_size\":32,\"n_routed_experts\":16",
    };
    char text[512];
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        moe_model_desc d;
        snprintf(text, sizeof text, "%s,\"hidden_act\":\"gelu\"}", heads[i]);
        parse_fails(text, MOE_EUNSUPPORTED, "field 'hidden_act': 'gelu' is not supported");
        snprintf(text, sizeof text, "%s,\"hidden_act\":\"relu\"}", heads[i]);
        parse_fails(text, MOE_EUNSUPPORTED, "field 'hidden_act'");
        snprintf(text, sizeof text, "%s,\"hidden_act\":1}", heads[i]);
        parse_fails(text, MOE_EJSON, "field 'hidden_act'");
        snprintf(text, sizeof text, "%s,\"hidden_act\":\"swish\"}", heads[i]);
        if (parse_ok(text, &d)) moe_model_desc_free(&d);
        snprintf(text, sizeof text, "%s,\"hidden_act\":\"silu\"}", heads[i]);
        if (parse_ok(text, &d)) moe_model_desc_free(&d);
        /* What transformers' FineGrainedFP8Config writes, and an fp4 expert_dtype. */
        snprintf(text, sizeof text,
                 "%s,\"quantization_config\":{\"quant_method\":\"fp8\",\"activation_scheme\":"
                 "\"dynamic\",\"weight_block_size\":[128,128],\"dequantize\":false,"
                 "\"scale_fmt\":\"float\",\"expert_dtype\":\"fp8\"}}",
                 heads[i]);
        if (parse_ok(text, &d)) {
            CHECK(d.layers[1].experts.format == MOE_WFMT_FP8_BLOCK);
            moe_model_desc_free(&d);
        }
        snprintf(text, sizeof text,
                 "%s,\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":"
                 "[128,128],\"expert_dtype\":\"fp4\"}}",
                 heads[i]);
        parse_fails(text, MOE_EUNSUPPORTED, "field 'quantization_config.expert_dtype': 'fp4'");
    }
    parse_fails(DSV2(",\"mlp_bias\":true"), MOE_EUNSUPPORTED, "field 'mlp_bias'");
    parse_fails(DSV2(",\"mlp_bias\":\"no\""), MOE_EJSON, "field 'mlp_bias'");
    moe_model_desc d;
    if (parse_ok(DSV2(",\"mlp_bias\":false"), &d)) moe_model_desc_free(&d);
}

#define GLM(type, extra)                                                                           \
    "{\"model_type\":\"" type "\",\"hidden_size\":64,\"num_hidden_layers\":4,"                     \
    "\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"               \
    "\"intermediate_size\":96" extra "}"

/* Which layers are dense in DeepSeek-V3.2 and the GLM family, as transformers decides it. */
static void test_v3_moe_plans(void)
{
    moe_model_desc d;
    /* mlp_layer_types decides and first_k_dense_replace beside it is not used (transformers
     * 5.25 saves both: the default 3 next to the types it was given). */
    static const char *const with_types[] = {"deepseek_v32", "glm_moe_dsa", "glm4_moe_lite"};
    char text[512];
    for (int i = 0; i < 3; i++) {
        snprintf(text, sizeof text,
                 "{\"model_type\":\"%s\",\"hidden_size\":64,\"num_hidden_layers\":4,"
                 "\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
                 "\"intermediate_size\":96,\"n_group\":1,\"topk_group\":1,"
                 "\"first_k_dense_replace\":3,"
                 "\"mlp_layer_types\":[\"sparse\",\"dense\",\"sparse\",\"dense\"]}",
                 with_types[i]);
        if (parse_ok(text, &d)) {
            for (int l = 0; l < 4; l++)
                CHECKF(d.layers[l].kind == (l % 2 ? MOE_LAYER_DENSE : MOE_LAYER_MOE), "%s layer %d",
                       with_types[i], l);
            CHECK(d.layers[1].dense.intermediate == 96);
            moe_model_desc_free(&d);
        }
    }
    /* glm4_moe's config class has no mlp_layer_types: first_k_dense_replace decides. */
    if (parse_ok(GLM("glm4_moe",
                     ",\"first_k_dense_replace\":2,"
                     "\"mlp_layer_types\":[\"sparse\",\"sparse\",\"sparse\",\"sparse\"]"),
                 &d)) {
        for (int l = 0; l < 4; l++)
            CHECKF(d.layers[l].kind == (l < 2 ? MOE_LAYER_DENSE : MOE_LAYER_MOE), "layer %d", l);
        moe_model_desc_free(&d);
    }
    /* Without mlp_layer_types: first_k_dense_replace, each class's default (3 for DeepSeek-V3.2
     * and GLM-5, 1 for GLM-4.5 and GLM-4.7-Flash). */
    static const struct {
        const char *type;
        int first;
    } defaults[] = {{"deepseek_v32", 3}, {"glm_moe_dsa", 3}, {"glm4_moe", 1}, {"glm4_moe_lite", 1}};
    for (int i = 0; i < 4; i++) {
        snprintf(text, sizeof text,
                 "{\"model_type\":\"%s\",\"hidden_size\":64,\"num_hidden_layers\":4,"
                 "\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"
                 "\"intermediate_size\":96,\"n_group\":1,\"topk_group\":1}",
                 defaults[i].type);
        if (parse_ok(text, &d)) {
            for (int l = 0; l < 4; l++)
                CHECKF(d.layers[l].kind ==
                           (l < defaults[i].first ? MOE_LAYER_DENSE : MOE_LAYER_MOE),
                       "%s layer %d", defaults[i].type, l);
            moe_model_desc_free(&d);
        }
    }
    if (parse_ok(GLM("glm_moe_dsa", ",\"first_k_dense_replace\":0"), &d)) {
        CHECK(d.layers[0].kind == MOE_LAYER_MOE);
        moe_model_desc_free(&d);
    }
    /* GLM-4.7-Flash's default makes layer 0 dense whatever first_k_dense_replace says. */
    parse_fails(GLM("glm4_moe_lite", ",\"first_k_dense_replace\":2"), MOE_ECONFIG,
                "field 'first_k_dense_replace': 2: without mlp_layer_types");
    parse_fails(GLM("glm_moe_dsa", ",\"mlp_layer_types\":[\"dense\",\"sparse\"]"), MOE_ECONFIG,
                "field 'mlp_layer_types': has 2 entries; num_hidden_layers is 4");
    parse_fails(
        GLM("glm_moe_dsa", ",\"mlp_layer_types\":[\"dense\",\"moe\",\"sparse\",\"sparse\"]"),
        MOE_ECONFIG, "element 1 'moe' is not one of");
    parse_fails(GLM("deepseek_v32", ",\"mlp_layer_types\":\"sparse\""), MOE_EJSON,
                "field 'mlp_layer_types': must be an array");
    parse_fails(GLM("deepseek_v32", ",\"mlp_layer_types\":[1,2,3,4]"), MOE_EJSON,
                "element 0 is not a string");
}

/* The DeepSeek-V3 router under the newer model_types: defaults of each config class; the
 * fields DeepSeek's and GLM's own code read and transformers' block hard-codes. */
static void test_v3_moe_routing(void)
{
    moe_model_desc d;
    /* Glm4MoeConfig's defaults: renormalised, no scaling, one group, one shared expert. */
    if (parse_ok(GLM("glm4_moe", ""), &d)) {
        const moe_layer_desc *l = &d.layers[3];
        CHECK(l->kind == MOE_LAYER_MOE && l->routing.method == MOE_ROUTE_NOAUX_TC);
        CHECK(l->routing.score == MOE_SCORE_SIGMOID && l->routing.has_correction_bias);
        CHECK(l->routing.norm_topk_prob && l->routing.routed_scaling_factor == 1.0f);
        CHECK(l->routing.n_group == 1 && l->routing.topk_group == 1);
        CHECK(l->n_shared == 1 && l->shared.intermediate == 32);
        moe_model_desc_free(&d);
    }
    /* DeepseekV32Config's: 8 groups, 4 kept, rsf 2.5 (8 experts: 1 per group is too few). */
    parse_fails(GLM("deepseek_v32", ""), MOE_ECONFIG, "field 'n_group': 8 leaves 1 expert");
    if (parse_ok(GLM("deepseek_v32", ",\"n_group\":4,\"topk_group\":2,\"n_shared_experts\":2,"
                                     "\"norm_topk_prob\":false,\"routed_scaling_factor\":1.5"),
                 &d)) {
        const moe_layer_desc *l = &d.layers[3];
        CHECK(l->routing.n_group == 4 && l->routing.topk_group == 2);
        CHECK(!l->routing.norm_topk_prob && l->routing.routed_scaling_factor == 1.5f);
        CHECK(l->n_shared == 2 && l->shared.intermediate == 64);
        moe_model_desc_free(&d);
    }
    if (parse_ok(GLM("glm4_moe", ",\"topk_method\":\"noaux_tc\",\"scoring_func\":\"sigmoid\","
                                 "\"moe_router_dtype\":\"float32\",\"moe_layer_freq\":1,"
                                 "\"n_shared_experts\":0"),
                 &d)) {
        CHECK(d.layers[3].n_shared == 0);
        moe_model_desc_free(&d);
    }
    static const char *const types[] = {"deepseek_v32", "glm4_moe", "glm_moe_dsa", "glm4_moe_lite"};
    char text[512];
    for (int i = 0; i < 4; i++) {
#define V3M(extra)                                                                                 \
    (snprintf(text, sizeof text,                                                                   \
              "{\"model_type\":\"%s\",\"hidden_size\":64,\"num_hidden_layers\":2,"                 \
              "\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,"     \
              "\"intermediate_size\":96,\"n_group\":1,\"topk_group\":1,"                           \
              "\"first_k_dense_replace\":1" extra "}",                                             \
              types[i]),                                                                           \
     text)
        parse_fails(V3M(",\"topk_method\":\"group_limited_greedy\""), MOE_ECONFIG,
                    "field 'topk_method': 'group_limited_greedy' is not supported");
        parse_fails(V3M(",\"scoring_func\":\"softmax\""), MOE_ECONFIG, "field 'scoring_func'");
        parse_fails(V3M(",\"moe_router_dtype\":\"bfloat16\""), MOE_EUNSUPPORTED,
                    "field 'moe_router_dtype'");
        parse_fails(V3M(",\"moe_layer_freq\":2"), MOE_EUNSUPPORTED, "field 'moe_layer_freq': 2");
        parse_fails(V3M(",\"mlp_bias\":true"), MOE_EUNSUPPORTED, "field 'mlp_bias'");
        parse_fails(V3M(",\"hidden_act\":\"gelu\""), MOE_EUNSUPPORTED, "field 'hidden_act'");
        parse_fails(V3M(",\"routed_scaling_factor\":0"), MOE_ECONFIG, "routed_scaling_factor");
        parse_fails(V3M(",\"norm_topk_prob\":\"yes\""), MOE_EJSON, "norm_topk_prob");
        parse_fails(V3M(",\"num_experts_per_tok\":9"), MOE_EDUPLICATE, "num_experts_per_tok");
        parse_fails(V3M(",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e5m2\","
                        "\"weight_block_size\":[128,128]}"),
                    MOE_EUNSUPPORTED, "field 'quantization_config.fmt'");
        if (parse_ok(V3M(",\"quantization_config\":{\"quant_method\":\"fp8\","
                         "\"weight_block_size\":[128,128],\"scale_fmt\":\"ue8m0\"}"),
                     &d)) {
            CHECK(d.layers[1].experts.format == MOE_WFMT_FP8_BLOCK);
            CHECK(d.layers[0].dense.format == MOE_WFMT_FP8_BLOCK);
            moe_model_desc_free(&d);
        }
#undef V3M
    }
}

#define MINIMAX(extra)                                                                             \
    "{\"model_type\":\"minimax_m2\",\"hidden_size\":64,\"num_hidden_layers\":2,"                   \
    "\"num_local_experts\":16,\"num_experts_per_tok\":4,\"intermediate_size\":32" extra "}"

/* MiniMax-M2: its own config's routing fields are read and any value transformers' block does
 * not compute is refused; FP8 under both spellings of E4M3. */
static void test_minimax_m2(void)
{
    moe_model_desc d;
    if (parse_ok(MINIMAX(",\"scoring_func\":\"sigmoid\",\"use_routing_bias\":true,"
                         "\"shared_intermediate_size\":0,\"router_jitter_noise\":0.5"),
                 &d)) {
        for (int l = 0; l < 2; l++) {
            const moe_layer_desc *ld = &d.layers[l];
            CHECK(ld->kind == MOE_LAYER_MOE && ld->n_shared == 0);
            CHECK(ld->routing.method == MOE_ROUTE_NOAUX_TC);
            CHECK(ld->routing.score == MOE_SCORE_SIGMOID && ld->routing.has_correction_bias);
            CHECK(ld->routing.n_group == 1 && ld->routing.topk_group == 1);
            CHECK(ld->routing.norm_topk_prob && ld->routing.routed_scaling_factor == 1.0f);
            CHECK(ld->experts.intermediate == 32 && ld->experts.format == MOE_WFMT_BF16);
        }
        moe_model_desc_free(&d);
    }
    parse_fails(MINIMAX(",\"scoring_func\":\"softmax\""), MOE_EUNSUPPORTED,
                "field 'scoring_func': 'softmax' is not supported for minimax_m2");
    parse_fails(MINIMAX(",\"use_routing_bias\":false"), MOE_EUNSUPPORTED,
                "field 'use_routing_bias'");
    parse_fails(MINIMAX(",\"shared_intermediate_size\":1536"), MOE_EUNSUPPORTED,
                "field 'shared_intermediate_size': 1536");
    parse_fails(MINIMAX(",\"norm_topk_prob\":false"), MOE_EUNSUPPORTED, "field 'norm_topk_prob'");
    parse_fails(MINIMAX(",\"routed_scaling_factor\":2.0"), MOE_EUNSUPPORTED,
                "field 'routed_scaling_factor'");
    parse_fails(MINIMAX(",\"hidden_act\":\"gelu\""), MOE_EUNSUPPORTED, "field 'hidden_act'");
    parse_fails(MINIMAX(",\"num_experts_per_tok\":17"), MOE_EDUPLICATE, "num_experts_per_tok");
    static const char *const fmts[] = {"e4m3", "float8_e4m3fn"};
    char text[512];
    for (int i = 0; i < 2; i++) {
        snprintf(text, sizeof text,
                 MINIMAX(",\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"%s\","
                         "\"weight_block_size\":[128,128]}"),
                 fmts[i]);
        if (parse_ok(text, &d)) {
            CHECK(d.layers[1].experts.format == MOE_WFMT_FP8_BLOCK);
            CHECK(d.layers[1].experts.scale_dtype == MOE_DTYPE_F32);
            moe_model_desc_free(&d);
        }
    }
    parse_fails(MINIMAX(",\"quantization_config\":{\"quant_method\":\"fp8\","
                        "\"fmt\":\"float8_e5m2\",\"weight_block_size\":[128,128]}"),
                MOE_EUNSUPPORTED, "'float8_e5m2' is not supported");
}

#define K25_TEXT                                                                                   \
    "\"model_type\":\"kimi_k2\",\"hidden_size\":64,\"num_hidden_layers\":3,"                       \
    "\"n_routed_experts\":16,\"num_experts_per_tok\":4,\"moe_intermediate_size\":32,"              \
    "\"intermediate_size\":96,\"first_k_dense_replace\":1,\"n_shared_experts\":1,"                 \
    "\"routed_scaling_factor\":2.827,\"norm_topk_prob\":true"
#define K25_FP8 "\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]}"

/* Kimi-K2.5: the language model's config nested in text_config, read as deepseek_v3 reads its
 * own (quantization_config included), messages naming the nesting. */
static void test_kimi_k25(void)
{
    moe_model_desc d;
    if (parse_ok("{\"model_type\":\"kimi_k25\",\"vision_config\":{\"hidden_size\":1152},"
                 "\"text_config\":{" K25_TEXT "," K25_FP8 "}}",
                 &d)) {
        CHECK(d.family == MOE_FAMILY_KIMI_K25 && !strcmp(d.model_type, "kimi_k25"));
        CHECK(d.n_layers == 3 && d.hidden == 64);
        CHECK(d.layers[0].kind == MOE_LAYER_DENSE && d.layers[0].dense.intermediate == 96);
        const moe_layer_desc *l = &d.layers[1];
        CHECK(l->kind == MOE_LAYER_MOE && l->routing.method == MOE_ROUTE_NOAUX_TC);
        CHECK(l->routing.n_experts == 16 && l->routing.top_k == 4);
        CHECK(l->routing.routed_scaling_factor == 2.827f && l->routing.norm_topk_prob);
        CHECK(l->experts.format == MOE_WFMT_FP8_BLOCK && l->n_shared == 1);
        moe_model_desc_free(&d);
    }
    /* The same quantization_config at the top level as well is accepted; another is not. */
    if (parse_ok("{\"model_type\":\"kimi_k25\"," K25_FP8 ",\"text_config\":{" K25_TEXT "," K25_FP8
                 "}}",
                 &d))
        moe_model_desc_free(&d);
    parse_fails("{\"model_type\":\"kimi_k25\"," K25_FP8 ",\"text_config\":{" K25_TEXT "}}",
                MOE_ECONFIG, "field 'quantization_config': differs from text_config");
    parse_fails("{\"model_type\":\"kimi_k25\",\"hidden_size\":64}", MOE_EMISSING,
                "field 'text_config': required field is missing");
    parse_fails("{\"model_type\":\"kimi_k25\",\"text_config\":[1]}", MOE_EJSON,
                "field 'text_config': must be an object");
    parse_fails("{\"model_type\":\"kimi_k25\",\"text_config\":{\"model_type\":\"qwen3_moe\"}}",
                MOE_EUNSUPPORTED, "field 'text_config.model_type': 'qwen3_moe' is not supported");
    parse_fails("{\"model_type\":\"kimi_k25\",\"text_config\":{" K25_TEXT
                ",\"quantization_config\":{\"quant_method\":\"awq\"}}}",
                MOE_EUNSUPPORTED, "field 'text_config.quantization_config.quant_method': 'awq'");
    parse_fails("{\"model_type\":\"kimi_k25\",\"text_config\":{" K25_TEXT ",\"n_group\":3}}",
                MOE_ECONFIG, "field 'text_config.n_group': 3");
    parse_fails("{\"model_type\":\"kimi_k25\",\"text_config\":{" K25_TEXT
                ",\"hidden_act\":\"gelu\"}}",
                MOE_EUNSUPPORTED, "field 'text_config.hidden_act'");
    /* The expert count's other name (DeepseekV3Config's attribute_map), inside text_config. */
    parse_fails("{\"model_type\":\"kimi_k25\",\"text_config\":{" K25_TEXT
                ",\"num_local_experts\":8}}",
                MOE_ECONFIG,
                "field 'text_config.n_routed_experts': 16 disagrees with "
                "text_config.num_local_experts = 8");
    parse_fails("{\"model_type\":\"kimi_k25\",\"text_config\":{\"hidden_size\":64,"
                "\"num_hidden_layers\":2}}",
                MOE_EMISSING,
                "field 'text_config.n_routed_experts': required field is missing (nor is "
                "text_config.num_local_experts");
}

#define QNEXT(extra)                                                                               \
    "{\"model_type\":\"qwen3_next\",\"hidden_size\":64,\"num_hidden_layers\":4,"                   \
    "\"num_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32" extra "}"
#define QNEXT_SHARED ",\"shared_expert_intermediate_size\":48"

static void test_qwen3_next(void)
{
    moe_model_desc d;
    /* Qwen3-MoE's layer plan; norm_topk_prob defaults to true (Qwen3NextConfig's default). */
    if (parse_ok(QNEXT(QNEXT_SHARED ",\"intermediate_size\":96,\"mlp_only_layers\":[0],"
                                    "\"decoder_sparse_step\":2"),
                 &d)) {
        const moe_layer_kind kinds[4] = {MOE_LAYER_DENSE, MOE_LAYER_MOE, MOE_LAYER_DENSE,
                                         MOE_LAYER_MOE};
        for (int i = 0; i < 4; i++) {
            const moe_layer_desc *l = &d.layers[i];
            CHECKF(l->kind == kinds[i], "layer %d kind %s", i, moe_layer_kind_name(l->kind));
            if (l->kind == MOE_LAYER_DENSE) {
                CHECK(l->dense.intermediate == 96 && !l->shared_gate && l->n_shared == 0);
                continue;
            }
            CHECK(l->routing.norm_topk_prob && l->routing.method == MOE_ROUTE_SOFTMAX_TOPK);
            CHECK(l->n_shared == 1 && l->shared.intermediate == 48 && l->shared_gate);
            CHECK(l->experts.intermediate == 32);
        }
        moe_model_desc_free(&d);
    }
    if (parse_ok(QNEXT(QNEXT_SHARED ",\"norm_topk_prob\":false"), &d)) {
        CHECK(!d.layers[0].routing.norm_topk_prob);
        moe_model_desc_free(&d);
    }
    parse_fails(QNEXT(""), MOE_EMISSING, "field 'shared_expert_intermediate_size'");
    parse_fails(QNEXT(",\"shared_expert_intermediate_size\":0"), MOE_ECONFIG,
                "shared_expert_intermediate_size");
    parse_fails(QNEXT(QNEXT_SHARED ",\"mlp_only_layers\":[1]"), MOE_EMISSING, "intermediate_size");
    parse_fails(QNEXT(QNEXT_SHARED ",\"hidden_act\":\"gelu\""), MOE_EUNSUPPORTED, "hidden_act");
    parse_fails(
        "{\"model_type\":\"qwen3_next\",\"hidden_size\":64,\"num_hidden_layers\":4,"
        "\"num_experts\":8,\"num_experts_per_tok\":9,\"moe_intermediate_size\":32" QNEXT_SHARED "}",
        MOE_ECONFIG, "num_experts_per_tok");
    parse_fails(QNEXT(QNEXT_SHARED ",\"num_local_experts\":4"), MOE_ECONFIG, "num_local_experts");
}

/* A Qwen3.5-MoE config: TOP's fields at the top level, text_config of BODY (Q35_TEXT: a valid
 * one) and TEXT. */
#define Q35_BODY(body, text, top)                                                                  \
    "{\"model_type\":\"qwen3_5_moe\"" top ",\"text_config\":{" body text "}}"
#define Q35_SIZES "\"hidden_size\":64,\"num_hidden_layers\":2,\"moe_intermediate_size\":32"
#define Q35_TEXT                                                                                   \
    Q35_SIZES ",\"num_experts\":8,\"num_experts_per_tok\":2,\"shared_expert_intermediate_size\":"  \
              "48"
#define Q35(text, top) Q35_BODY(Q35_TEXT, text, top)

static void test_qwen3_5_moe(void)
{
    moe_model_desc d;
    /* Every layer MoE and renormalised, whatever Qwen3-MoE's plan fields say (transformers'
     * Qwen3.5 decoder layer does not read them); the dtype from the top when text has none. */
    if (parse_ok(Q35(",\"mlp_only_layers\":[0]", ",\"dtype\":\"float32\""), &d)) {
        CHECK(d.router_dtype == MOE_DTYPE_F32 && d.hidden == 64 && d.n_layers == 2);
        for (int i = 0; i < 2; i++) {
            const moe_layer_desc *l = &d.layers[i];
            CHECK(l->kind == MOE_LAYER_MOE && l->routing.norm_topk_prob && l->shared_gate);
            CHECK(l->shared.intermediate == 48 && l->routing.n_experts == 8);
        }
        moe_model_desc_free(&d);
    }
    if (parse_ok(Q35(",\"dtype\":\"float16\"", ",\"dtype\":\"float32\""), &d)) {
        CHECK(d.router_dtype == MOE_DTYPE_F16); /* text_config's own wins */
        moe_model_desc_free(&d);
    }
    /* quantization_config at the top level, as transformers keeps it. */
    if (parse_ok(Q35("", ",\"quantization_config\":{\"quant_method\":\"fp8\","
                         "\"weight_block_size\":[128,128]}"),
                 &d)) {
        CHECK(d.layers[0].experts.format == MOE_WFMT_FP8_BLOCK);
        CHECK(d.layers[0].shared.format == MOE_WFMT_FP8_BLOCK);
        moe_model_desc_free(&d);
    }
    parse_fails("{\"model_type\":\"qwen3_5_moe\",\"hidden_size\":64,\"num_hidden_layers\":2}",
                MOE_EMISSING, "field 'text_config'");
    parse_fails("{\"model_type\":\"qwen3_5_moe\",\"text_config\":[]}", MOE_EJSON,
                "field 'text_config'");
    parse_fails(Q35(",\"norm_topk_prob\":false", ""), MOE_EUNSUPPORTED,
                "field 'text_config.norm_topk_prob'");
    parse_fails(Q35(",\"quantization_config\":{\"quant_method\":\"fp8\"}", ""), MOE_EUNSUPPORTED,
                "field 'text_config.quantization_config'");
    parse_fails(Q35_BODY(Q35_SIZES,
                         ",\"num_experts\":8,\"num_experts_per_tok\":9,"
                         "\"shared_expert_intermediate_size\":48",
                         ""),
                MOE_ECONFIG, "field 'text_config.num_experts_per_tok'");
    parse_fails(Q35_BODY(Q35_SIZES,
                         ",\"num_experts\":0,\"num_experts_per_tok\":2,"
                         "\"shared_expert_intermediate_size\":48",
                         ""),
                MOE_ECONFIG, "field 'text_config.num_experts'");
    parse_fails(Q35_BODY(Q35_SIZES, ",\"num_experts\":8,\"num_experts_per_tok\":2", ""),
                MOE_EMISSING, "field 'text_config.shared_expert_intermediate_size'");
    parse_fails(Q35_BODY("\"hidden_size\":\"64\",\"num_hidden_layers\":2", "", ""), MOE_EJSON,
                "field 'text_config.hidden_size'");
}

#define ERNIE(extra)                                                                               \
    "{\"model_type\":\"ernie4_5_moe\",\"hidden_size\":64,\"num_hidden_layers\":6,"                 \
    "\"intermediate_size\":96,\"moe_intermediate_size\":32,\"moe_num_experts\":8" extra "}"

static void test_ernie(void)
{
    moe_model_desc d;
    /* MoE iff (L + 1) % interval == 0 and start <= L <= end; the rest dense. */
    if (parse_ok(ERNIE(",\"moe_k\":2,\"moe_layer_start_index\":2,\"moe_layer_end_index\":4,"
                       "\"moe_layer_interval\":2,\"moe_num_shared_experts\":3,"
                       "\"moe_norm_min\":0.25"),
                 &d)) {
        for (int i = 0; i < 6; i++) {
            const moe_layer_desc *l = &d.layers[i];
            const bool moe = i == 3; /* (L+1) even: 1, 3, 5; in [2, 4]: 3 */
            CHECKF(l->kind == (moe ? MOE_LAYER_MOE : MOE_LAYER_DENSE), "layer %d kind %s", i,
                   moe_layer_kind_name(l->kind));
            if (!moe) {
                CHECK(l->dense.intermediate == 96);
                continue;
            }
            CHECK(l->routing.method == MOE_ROUTE_SOFTMAX_BIAS && l->routing.has_correction_bias);
            CHECK(l->routing.renorm_min == 0.25f && l->routing.top_k == 2);
            CHECK(l->n_shared == 3 && l->shared.intermediate == 96 && !l->shared_gate);
        }
        moe_model_desc_free(&d);
    }
    /* The defaults: start 1, end -1 (the last layer), interval 1, no shared experts, floor
     * 1e-12; num_experts_per_tok and num_experts are the attribute_map's other names. */
    if (parse_ok(ERNIE(",\"num_experts_per_tok\":2,\"num_experts\":8"), &d)) {
        CHECK(d.layers[0].kind == MOE_LAYER_DENSE && d.layers[5].kind == MOE_LAYER_MOE);
        CHECK(d.layers[1].n_shared == 0 && d.layers[1].routing.renorm_min == 1e-12f);
        moe_model_desc_free(&d);
    }
    parse_fails(ERNIE(",\"moe_k\":2,\"use_bias\":true"), MOE_EUNSUPPORTED, "field 'use_bias'");
    parse_fails(ERNIE(",\"moe_k\":2,\"moe_norm_min\":-1"), MOE_ECONFIG, "moe_norm_min");
    parse_fails(ERNIE(",\"moe_k\":9"), MOE_ECONFIG, "field 'moe_k'");
    parse_fails(ERNIE(",\"moe_k\":2,\"num_experts_per_tok\":3"), MOE_ECONFIG, "moe_k");
    parse_fails(ERNIE(",\"moe_k\":2,\"moe_layer_interval\":0"), MOE_ECONFIG, "moe_layer_interval");
    parse_fails(ERNIE(",\"moe_k\":2,\"moe_layer_end_index\":-2"), MOE_ECONFIG,
                "moe_layer_end_index");
    parse_fails(ERNIE(""), MOE_EMISSING, "field 'moe_k'");
    parse_fails(ERNIE(",\"moe_k\":2,\"hidden_act\":\"gelu\""), MOE_EUNSUPPORTED, "hidden_act");
}

/* Llama-4 Maverick: MoE every second layer (interleave_moe_layer_step 2), top-1 sigmoid
 * routing that scales the expert's input, one shared expert as wide as an expert, dense
 * layers of intermediate_size_mlp. */
static void test_llama4_fixture(void)
{
    moe_model_desc d;
    moe_status st = load_fixture("llama-4-maverick.json", &d);
    CHECKF(st == MOE_OK, "llama-4-maverick.json: %s", moe_last_error());
    if (st) return;
    CHECK(d.family == MOE_FAMILY_LLAMA4 && !strcmp(d.model_type, "llama4"));
    CHECK(d.n_layers == 48 && d.hidden == 5120 && d.vocab_size == 202048);
    CHECK(d.router_dtype == MOE_DTYPE_BF16);
    for (int i = 0; i < 48; i++) {
        const moe_layer_desc *l = &d.layers[i];
        const bool moe = i % 2 == 1;
        CHECKF(l->kind == (moe ? MOE_LAYER_MOE : MOE_LAYER_DENSE), "layer %d kind %s", i,
               moe_layer_kind_name(l->kind));
        if (!moe) {
            CHECK(l->dense.intermediate == 16384 && l->dense.format == MOE_WFMT_BF16);
            continue;
        }
        const moe_routing_desc *r = &l->routing;
        CHECK(r->method == MOE_ROUTE_SIGMOID_TOP1 && r->score == MOE_SCORE_SIGMOID);
        CHECK(r->n_experts == 128 && r->top_k == 1 && !r->norm_topk_prob);
        CHECK(r->routed_scaling_factor == 1.0f && !r->has_correction_bias);
        CHECK(l->scale_input && !l->shared_gate && l->n_shared == 1);
        CHECK(l->experts.intermediate == 8192 && l->shared.intermediate == 8192);
    }
    moe_model_desc_free(&d);
}

#define L4(text, top)                                                                              \
    "{\"model_type\":\"llama4\"" top ",\"text_config\":{\"hidden_size\":64,"                       \
    "\"num_hidden_layers\":4,\"num_local_experts\":8,\"intermediate_size\":32" text "}}"

static void test_llama4(void)
{
    test_llama4_fixture();
    moe_model_desc d;
    /* moe_layers overrides interleave_moe_layer_step, as in Llama4TextConfig. */
    if (parse_ok(L4(",\"intermediate_size_mlp\":96,\"moe_layers\":[0,3],"
                    "\"interleave_moe_layer_step\":2",
                    ",\"dtype\":\"float32\""),
                 &d)) {
        const bool moe[4] = {true, false, false, true};
        for (int i = 0; i < 4; i++)
            CHECKF(d.layers[i].kind == (moe[i] ? MOE_LAYER_MOE : MOE_LAYER_DENSE), "layer %d", i);
        CHECK(d.router_dtype == MOE_DTYPE_F32 && d.layers[0].routing.top_k == 1);
        moe_model_desc_free(&d);
    }
    /* The defaults: every layer MoE, one expert per token. */
    if (parse_ok(L4("", ""), &d)) {
        for (int i = 0; i < 4; i++)
            CHECK(d.layers[i].kind == MOE_LAYER_MOE && d.layers[i].scale_input);
        moe_model_desc_free(&d);
    }
    parse_fails("{\"model_type\":\"llama4\",\"hidden_size\":64}", MOE_EMISSING,
                "field 'text_config'");
    parse_fails(L4(",\"num_experts_per_tok\":2", ""), MOE_ECONFIG,
                "field 'text_config.num_experts_per_tok'");
    parse_fails(L4(",\"interleave_moe_layer_step\":2", ""), MOE_EMISSING,
                "text_config.intermediate_size_mlp");
    parse_fails(L4(",\"intermediate_size_mlp\":96,\"moe_layers\":[4]", ""), MOE_ECONFIG,
                "text_config.moe_layers");
    parse_fails(L4(",\"moe_layers\":3", ""), MOE_EJSON, "text_config.moe_layers");
    parse_fails(L4(",\"interleave_moe_layer_step\":0", ""), MOE_ECONFIG,
                "text_config.interleave_moe_layer_step");
    parse_fails(L4(",\"hidden_act\":\"gelu\"", ""), MOE_EUNSUPPORTED, "text_config.hidden_act");
    parse_fails(L4("", ",\"quantization_config\":{\"quant_method\":\"fp8\","
                       "\"weight_block_size\":[128,128]}"),
                MOE_EUNSUPPORTED, "field 'quantization_config'");
}

static void test_names(void)
{
    moe_family f = MOE_FAMILY_COUNT_;
    const char *types[] = {"deepseek_v2",  "deepseek_v3", "kimi_k2",       "deepseek_v4",
                           "qwen3_moe",    "mixtral",     "gpt_oss",       "deepseek_v32",
                           "glm4_moe",     "glm_moe_dsa", "glm4_moe_lite", "minimax_m2",
                           "kimi_k25",     "qwen3_next",  "qwen3_5_moe",   "ernie4_5_moe",
                           "llama4"};
    for (int i = 0; i < MOE_FAMILY_COUNT_; i++) {
        CHECK(moe_family_from_name(types[i], &f) && f == (moe_family)i);
        CHECK(!strcmp(moe_family_name((moe_family)i), types[i]));
    }
    CHECK(!moe_family_from_name("llama4_text", &f));
    CHECK(!strcmp(moe_family_name((moe_family)99), "unknown"));
    CHECK(!strcmp(moe_route_method_name(MOE_ROUTE_NOAUX_TC), "noaux_tc"));
    CHECK(!strcmp(moe_route_method_name((moe_route_method)-1), "unknown"));
    CHECK(!strcmp(moe_score_func_name(MOE_SCORE_SQRTSOFTPLUS), "sqrtsoftplus"));
    CHECK(!strcmp(moe_layer_kind_name(MOE_LAYER_HASH), "hash"));
    CHECK(!strcmp(moe_weight_format_name(MOE_WFMT_FP8_BLOCK), "fp8_block"));
    CHECK(!strcmp(moe_activation_name(MOE_ACT_GPTOSS_GLU), "gptoss_glu"));
    CHECK(!strcmp(moe_tensor_group_name(MOE_GROUP_SHARED), "shared"));
    CHECK(!strcmp(moe_tensor_role_name(MOE_ROLE_DOWN_BIAS), "down_bias"));
    CHECK(!strcmp(moe_tensor_role_name(MOE_ROLE_SHARED_GATE), "shared_gate"));
}

int main(void)
{
    for (size_t i = 0; i < sizeof wants / sizeof wants[0]; i++)
        check_want(&wants[i]);
    test_qwen3_plan();
    test_qwen3_next();
    test_qwen3_5_moe();
    test_ernie();
    test_llama4();
    test_deepseek_plan_and_defaults();
    test_common_fields();
    test_gpt_oss_variants();
    test_deepseek_v4_variants();
    test_deepseek_v4_layer_types();
    test_expert_count_names();
    test_refused_fields();
    test_v3_moe_plans();
    test_v3_moe_routing();
    test_minimax_m2();
    test_kimi_k25();
    test_names();
    return TEST_END();
}
