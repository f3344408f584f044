/* gen_config.c — the config.json `moe gen` writes for each family, with the real HF field names. */
#include "gen_config.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

const char *gen_dtype_name(gen_dtype dtype)
{
    switch (dtype) {
    case GEN_DTYPE_BF16: return "bf16";
    case GEN_DTYPE_FP8: return "fp8";
    case GEN_DTYPE_MXFP4: return "mxfp4";
    }
    return "?";
}

/* The object being built and whether every allocation so far succeeded, so one check at the
 * end covers them all (a config silently missing a field would be worse than none). */
typedef struct builder {
    bool ok;
} builder;

static void put(builder *b, json_t *o, const char *key, json_t *v)
{
    if (!o || !v) {
        json_decref(v);
        b->ok = false;
        return;
    }
    if (json_object_set_new(o, key, v) != 0) b->ok = false;
}
static void set_int(builder *b, json_t *o, const char *key, int64_t v)
{
    put(b, o, key, json_integer((json_int_t)v));
}
static void set_real(builder *b, json_t *o, const char *key, double v)
{
    put(b, o, key, json_real(v));
}
static void set_str(builder *b, json_t *o, const char *key, const char *v)
{
    put(b, o, key, json_string(v));
}
static void set_bool(builder *b, json_t *o, const char *key, bool v)
{
    put(b, o, key, json_boolean(v));
}

static json_t *str_array(builder *b, const char *const *items, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string(items[i])) != 0) b->ok = false;
    return a;
}

static json_t *block_128x128(builder *b)
{
    json_t *a = json_array();
    if (!a || json_array_append_new(a, json_integer(128)) != 0 ||
        json_array_append_new(a, json_integer(128)) != 0)
        b->ok = false;
    return a;
}

static void set_head(builder *b, json_t *c, const char *model_type, const char *arch)
{
    set_str(b, c, "model_type", model_type);
    put(b, c, "architectures", str_array(b, &arch, 1));
}

/* DeepSeek-V3's block FP8 (README_WEIGHTS.md), which Qwen3 and Mixtral FP8 releases share. */
static json_t *fp8_block_quant(builder *b)
{
    json_t *q = json_object();
    set_str(b, q, "quant_method", "fp8");
    set_str(b, q, "fmt", "e4m3");
    set_str(b, q, "activation_scheme", "dynamic");
    put(b, q, "weight_block_size", block_128x128(b));
    return q;
}

static void set_tail(builder *b, json_t *c, const gen_options *o)
{
    set_int(b, c, "num_hidden_layers", o->layers);
    set_int(b, c, "vocab_size", o->vocab);
    set_str(b, c, "torch_dtype", o->torch_dtype);
    set_str(b, c, "hidden_act", "silu");
}

/* DeepSeek-V2, DeepSeek-V3/R1 and Kimi-K2 share one config schema. */
static void build_deepseek(builder *b, json_t *c, const gen_options *o)
{
    bool v2 = o->family == MOE_FAMILY_DEEPSEEK_V2, kimi = o->family == MOE_FAMILY_KIMI_K2;
    if (v2)
        set_head(b, c, "deepseek_v2", "DeepseekV2ForCausalLM");
    else
        set_head(b, c, kimi ? "kimi_k2" : "deepseek_v3", "DeepseekV3ForCausalLM");
    set_int(b, c, "hidden_size", o->hidden);
    set_int(b, c, "intermediate_size", o->dense_intermediate);
    set_int(b, c, "moe_intermediate_size", o->intermediate);
    set_int(b, c, "n_routed_experts", o->experts);
    set_int(b, c, "n_shared_experts", o->shared);
    set_int(b, c, "num_experts_per_tok", o->topk);
    set_int(b, c, "n_group", o->groups);
    set_int(b, c, "topk_group", o->topk_group);
    if (v2) {
        set_str(b, c, "topk_method", o->groups > 1 ? "group_limited_greedy" : "greedy");
        set_str(b, c, "scoring_func", "softmax");
        set_bool(b, c, "norm_topk_prob", false);
        set_real(b, c, "routed_scaling_factor", 16.0);
    } else {
        set_str(b, c, "topk_method", "noaux_tc");
        set_str(b, c, "scoring_func", "sigmoid");
        set_bool(b, c, "norm_topk_prob", true);
        set_real(b, c, "routed_scaling_factor", kimi ? 2.827 : 2.5);
    }
    set_int(b, c, "first_k_dense_replace", o->first_dense);
    set_int(b, c, "moe_layer_freq", 1);
    set_tail(b, c, o);
    if (o->dtype == GEN_DTYPE_FP8) put(b, c, "quantization_config", fp8_block_quant(b));
}

static void build_deepseek_v4(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "deepseek_v4", "DeepseekV4ForCausalLM");
    set_int(b, c, "hidden_size", o->hidden);
    set_int(b, c, "moe_intermediate_size", o->intermediate);
    set_int(b, c, "n_routed_experts", o->experts);
    set_int(b, c, "n_shared_experts", o->shared);
    set_int(b, c, "num_experts_per_tok", o->topk);
    set_int(b, c, "num_hash_layers", o->hash_layers);
    set_str(b, c, "scoring_func", "sqrtsoftplus");
    set_str(b, c, "topk_method", "noaux_tc");
    set_bool(b, c, "norm_topk_prob", true);
    set_real(b, c, "routed_scaling_factor", 1.5);
    set_real(b, c, "swiglu_limit", 10.0);
    set_str(b, c, "expert_dtype", o->dtype == GEN_DTYPE_MXFP4 ? "fp4" : "fp8");
    set_tail(b, c, o);
    /* The shared experts are block FP8 with power-of-two (E8M0) scales in every V4 release. */
    json_t *q = json_object();
    set_str(b, q, "quant_method", "fp8");
    set_str(b, q, "fmt", "e4m3");
    put(b, q, "weight_block_size", block_128x128(b));
    set_str(b, q, "scale_fmt", "ue8m0");
    put(b, c, "quantization_config", q);
}

static void build_qwen3(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "qwen3_moe", "Qwen3MoeForCausalLM");
    set_int(b, c, "hidden_size", o->hidden);
    set_int(b, c, "moe_intermediate_size", o->intermediate);
    set_int(b, c, "intermediate_size", o->dense_intermediate);
    set_int(b, c, "num_experts", o->experts);
    set_int(b, c, "num_experts_per_tok", o->topk);
    set_bool(b, c, "norm_topk_prob", true);
    set_int(b, c, "decoder_sparse_step", 1);
    put(b, c, "mlp_only_layers", json_array());
    set_tail(b, c, o);
    if (o->dtype == GEN_DTYPE_FP8) put(b, c, "quantization_config", fp8_block_quant(b));
}

static void build_mixtral(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "mixtral", "MixtralForCausalLM");
    set_int(b, c, "hidden_size", o->hidden);
    set_int(b, c, "intermediate_size", o->intermediate);
    set_int(b, c, "num_local_experts", o->experts);
    set_int(b, c, "num_experts_per_tok", o->topk);
    set_tail(b, c, o);
    if (o->dtype == GEN_DTYPE_FP8) put(b, c, "quantization_config", fp8_block_quant(b));
}

static void build_gpt_oss(builder *b, json_t *c, const gen_options *o)
{
    static const char *const not_converted[] = {
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"};
    set_head(b, c, "gpt_oss", "GptOssForCausalLM");
    set_int(b, c, "hidden_size", o->hidden);
    set_int(b, c, "intermediate_size", o->intermediate);
    set_int(b, c, "num_local_experts", o->experts);
    set_int(b, c, "num_experts_per_tok", o->topk);
    set_int(b, c, "experts_per_token", o->topk);
    set_real(b, c, "swiglu_limit", 7.0);
    set_tail(b, c, o);
    if (o->dtype == GEN_DTYPE_MXFP4) {
        json_t *q = json_object();
        set_str(b, q, "quant_method", "mxfp4");
        put(b, q, "modules_to_not_convert", str_array(b, not_converted, 4));
        put(b, c, "quantization_config", q);
    }
}

/* Qwen3-Next: Qwen3-MoE's fields plus the one shared expert (its width: --shared experts of
 * --intermediate, as bench presets count it). */
static void build_qwen3_next(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "qwen3_next", "Qwen3NextForCausalLM");
    set_int(b, c, "hidden_size", o->hidden);
    set_int(b, c, "moe_intermediate_size", o->intermediate);
    set_int(b, c, "shared_expert_intermediate_size", o->intermediate * o->shared);
    set_int(b, c, "intermediate_size", o->dense_intermediate);
    set_int(b, c, "num_experts", o->experts);
    set_int(b, c, "num_experts_per_tok", o->topk);
    set_bool(b, c, "norm_topk_prob", true);
    set_int(b, c, "decoder_sparse_step", 1);
    put(b, c, "mlp_only_layers", json_array());
    set_tail(b, c, o);
    if (o->dtype == GEN_DTYPE_FP8) put(b, c, "quantization_config", fp8_block_quant(b));
}

/* Qwen3.5-MoE: the text model's fields in text_config, as Qwen3_5MoeConfig nests them;
 * quantization_config at the top level. */
static void build_qwen3_5_moe(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration");
    json_t *t = json_object();
    set_str(b, t, "model_type", "qwen3_5_moe_text");
    set_int(b, t, "hidden_size", o->hidden);
    set_int(b, t, "moe_intermediate_size", o->intermediate);
    set_int(b, t, "shared_expert_intermediate_size", o->intermediate * o->shared);
    set_int(b, t, "num_experts", o->experts);
    set_int(b, t, "num_experts_per_tok", o->topk);
    set_tail(b, t, o);
    put(b, c, "text_config", t);
    if (o->dtype == GEN_DTYPE_FP8) put(b, c, "quantization_config", fp8_block_quant(b));
}

/* ERNIE-4.5 MoE: its own names for the counts (moe_num_experts, moe_k); the first
 * --first-dense layers dense (moe_layer_start_index), the rest MoE. */
static void build_ernie(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "ernie4_5_moe", "Ernie4_5_MoeForCausalLM");
    set_int(b, c, "hidden_size", o->hidden);
    set_int(b, c, "intermediate_size", o->dense_intermediate);
    set_int(b, c, "moe_intermediate_size", o->intermediate);
    set_int(b, c, "moe_num_experts", o->experts);
    set_int(b, c, "moe_k", o->topk);
    set_int(b, c, "moe_num_shared_experts", o->shared);
    set_int(b, c, "moe_layer_start_index", o->first_dense);
    set_int(b, c, "moe_layer_end_index", -1);
    set_int(b, c, "moe_layer_interval", 1);
    set_real(b, c, "moe_norm_min", 1e-12);
    set_bool(b, c, "use_bias", false);
    set_tail(b, c, o);
    if (o->dtype == GEN_DTYPE_FP8) put(b, c, "quantization_config", fp8_block_quant(b));
}

/* Llama-4: the text model's fields in text_config (Llama4Config nests them); every layer MoE
 * (interleave_moe_layer_step 1, as Scout), one expert per token, a shared expert as wide as
 * an expert. */
static void build_llama4(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "llama4", "Llama4ForConditionalGeneration");
    json_t *t = json_object();
    set_str(b, t, "model_type", "llama4_text");
    set_int(b, t, "hidden_size", o->hidden);
    set_int(b, t, "intermediate_size", o->intermediate);
    set_int(b, t, "intermediate_size_mlp", o->dense_intermediate);
    set_int(b, t, "num_local_experts", o->experts);
    set_int(b, t, "num_experts_per_tok", o->topk);
    set_int(b, t, "interleave_moe_layer_step", 1);
    set_tail(b, t, o);
    put(b, c, "text_config", t);
}

char *gen_config_text(const gen_options *o)
{
    builder bld = {.ok = true}, *b = &bld;
    json_t *c = json_object();
    if (!c) return NULL;
    switch (o->family) {
    case MOE_FAMILY_DEEPSEEK_V2:
    case MOE_FAMILY_DEEPSEEK_V3:
    case MOE_FAMILY_KIMI_K2: build_deepseek(b, c, o); break;
    case MOE_FAMILY_DEEPSEEK_V4: build_deepseek_v4(b, c, o); break;
    case MOE_FAMILY_QWEN3_MOE: build_qwen3(b, c, o); break;
    case MOE_FAMILY_MIXTRAL: build_mixtral(b, c, o); break;
    case MOE_FAMILY_GPT_OSS: build_gpt_oss(b, c, o); break;
    case MOE_FAMILY_QWEN3_NEXT: build_qwen3_next(b, c, o); break;
    case MOE_FAMILY_QWEN3_5_MOE: build_qwen3_5_moe(b, c, o); break;
    case MOE_FAMILY_ERNIE4_5_MOE: build_ernie(b, c, o); break;
    case MOE_FAMILY_LLAMA4: build_llama4(b, c, o); break;
    case MOE_FAMILY_COUNT_: break;
    }
    /* 9 significant digits print 2.827 as "2.827", not its 17-digit binary expansion. */
    char *body = bld.ok ? json_dumps(c, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(c);
    if (!body) return NULL;
    size_t n = strlen(body);
    char *text = realloc(body, n + 2);
    if (!text) {
        free(body);
        return NULL;
    }
    memcpy(text + n, "\n", 2);
    return text;
}
