/* gen_config.c — the config.json `moe gen` writes for each family, with the real HF field names. */
#include "gen_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

const char *gen_dtype_name(gen_dtype dtype)
{
    switch (dtype) {
    case GEN_DTYPE_BF16: return "bf16";
    case GEN_DTYPE_FP8: return "fp8";
    case GEN_DTYPE_MXFP4: return "mxfp4";
    case GEN_DTYPE_INT4: return "int4";
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

/* compressed-tensors pack-quantized W4A16 as Kimi-K2-Thinking ships it: one group over every
 * Linear, symmetric int4 per group of 32 along K, and an ignore list that keeps everything but
 * the routed experts in bf16: the dense layers' MLPs by name, the shared experts (and
 * attention, the head) by "re:" pattern. */
static json_t *int4_quant(builder *b, const gen_options *o)
{
    json_t *q = json_object(), *groups = json_object(), *g = json_object(), *w = json_object();
    json_t *ignore = json_array();
    set_str(b, q, "quant_method", "compressed-tensors");
    set_str(b, q, "format", "pack-quantized");
    set_str(b, q, "quantization_status", "compressed");
    set_int(b, w, "num_bits", 4);
    set_str(b, w, "type", "int");
    set_bool(b, w, "symmetric", true);
    set_str(b, w, "strategy", "group");
    set_int(b, w, "group_size", 32);
    set_bool(b, w, "dynamic", false);
    put(b, w, "actorder", json_null());
    set_str(b, w, "observer", "minmax");
    static const char *const linear = "Linear";
    put(b, g, "targets", str_array(b, &linear, 1));
    put(b, g, "weights", w);
    put(b, g, "input_activations", json_null());
    put(b, g, "output_activations", json_null());
    set_str(b, g, "format", "pack-quantized");
    put(b, groups, "group_0", g);
    put(b, q, "config_groups", groups);
    static const char *const fixed[] = {"lm_head", "re:.*self_attn.*", "re:.*shared_experts.*"};
    for (size_t i = 0; ignore && i < 3; i++)
        if (json_array_append_new(ignore, json_string(fixed[i])) != 0) b->ok = false;
    static const char *const proj[] = {"gate_proj", "up_proj", "down_proj"};
    for (int64_t l = 0; ignore && l < o->first_dense && l < o->layers; l++)
        for (int p = 0; p < 3; p++) {
            char name[96];
            snprintf(name, sizeof name, "model.layers.%lld.mlp.%s", (long long)l, proj[p]);
            if (json_array_append_new(ignore, json_string(name)) != 0) b->ok = false;
        }
    put(b, q, "ignore", ignore);
    return q;
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

/* The tail, then the quantization_config of --dtype fp8 where the family's FP8 releases use
 * DeepSeek-V3's block FP8. */
static void set_tail_fp8(builder *b, json_t *c, const gen_options *o)
{
    set_tail(b, c, o);
    if (o->dtype == GEN_DTYPE_FP8) put(b, c, "quantization_config", fp8_block_quant(b));
}

/* The sizes and expert counts of DeepSeek-V3's schema, which V2, Kimi-K2, V3.2 and the GLM
 * MoE configs share. */
static void set_v3_experts(builder *b, json_t *c, const gen_options *o)
{
    set_int(b, c, "hidden_size", o->hidden);
    set_int(b, c, "intermediate_size", o->dense_intermediate);
    set_int(b, c, "moe_intermediate_size", o->intermediate);
    set_int(b, c, "n_routed_experts", o->experts);
    set_int(b, c, "n_shared_experts", o->shared);
    set_int(b, c, "num_experts_per_tok", o->topk);
    set_int(b, c, "n_group", o->groups);
    set_int(b, c, "topk_group", o->topk_group);
}

/* DeepSeek-V2, DeepSeek-V3/R1 and Kimi-K2 share one config schema. */
static void build_deepseek(builder *b, json_t *c, const gen_options *o)
{
    bool v2 = o->family == MOE_FAMILY_DEEPSEEK_V2, kimi = o->family == MOE_FAMILY_KIMI_K2;
    if (v2)
        set_head(b, c, "deepseek_v2", "DeepseekV2ForCausalLM");
    else
        set_head(b, c, kimi ? "kimi_k2" : "deepseek_v3", "DeepseekV3ForCausalLM");
    set_v3_experts(b, c, o);
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
    set_tail_fp8(b, c, o);
    if (o->dtype == GEN_DTYPE_INT4) put(b, c, "quantization_config", int4_quant(b, o));
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

/* Qwen3-MoE's fields after the head; Qwen3-Next's (shared_expert) add the one shared expert's
 * width: --shared experts of --intermediate, as bench presets count it. */
static void set_qwen3_moe(builder *b, json_t *c, const gen_options *o, bool shared_expert)
{
    set_int(b, c, "hidden_size", o->hidden);
    set_int(b, c, "moe_intermediate_size", o->intermediate);
    if (shared_expert)
        set_int(b, c, "shared_expert_intermediate_size", o->intermediate * o->shared);
    set_int(b, c, "intermediate_size", o->dense_intermediate);
    set_int(b, c, "num_experts", o->experts);
    set_int(b, c, "num_experts_per_tok", o->topk);
    set_bool(b, c, "norm_topk_prob", true);
    set_int(b, c, "decoder_sparse_step", 1);
    put(b, c, "mlp_only_layers", json_array());
    set_tail_fp8(b, c, o);
}

static void build_qwen3(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "qwen3_moe", "Qwen3MoeForCausalLM");
    set_qwen3_moe(b, c, o, false);
}

/* The sizes and expert counts of Mixtral's schema, which gpt-oss and MiniMax-M2 keep. */
static void set_mixtral_experts(builder *b, json_t *c, const gen_options *o)
{
    set_int(b, c, "hidden_size", o->hidden);
    set_int(b, c, "intermediate_size", o->intermediate);
    set_int(b, c, "num_local_experts", o->experts);
    set_int(b, c, "num_experts_per_tok", o->topk);
}

static void build_mixtral(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "mixtral", "MixtralForCausalLM");
    set_mixtral_experts(b, c, o);
    set_tail_fp8(b, c, o);
}

static void build_gpt_oss(builder *b, json_t *c, const gen_options *o)
{
    static const char *const not_converted[] = {
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"};
    set_head(b, c, "gpt_oss", "GptOssForCausalLM");
    set_mixtral_experts(b, c, o);
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

/* mlp_layer_types of transformers' DeepSeek-V3.2 and GLM configs: first_dense "dense", then
 * "sparse". */
static json_t *dense_sparse_types(builder *b, const gen_options *o)
{
    json_t *a = json_array();
    for (int64_t i = 0; a && i < o->layers; i++)
        if (json_array_append_new(a, json_string(i < o->first_dense ? "dense" : "sparse")) != 0)
            b->ok = false;
    return a;
}

/* DeepSeek-V3.2, GLM-4.5 (glm4_moe), GLM-5 (glm_moe_dsa), GLM-4.7-Flash (glm4_moe_lite): the V3
 * MoE fields under each model_type, its released routed_scaling_factor, and the way each
 * config says which layers are dense. */
static void build_v3_moe(builder *b, json_t *c, const gen_options *o)
{
    switch (o->family) {
    case MOE_FAMILY_DEEPSEEK_V32:
        set_head(b, c, "deepseek_v32", "DeepseekV32ForCausalLM");
        set_str(b, c, "topk_method", "noaux_tc");
        set_str(b, c, "scoring_func", "sigmoid");
        set_real(b, c, "routed_scaling_factor", 2.5);
        set_int(b, c, "first_k_dense_replace", o->first_dense);
        break;
    case MOE_FAMILY_GLM_MOE_DSA:
        set_head(b, c, "glm_moe_dsa", "GlmMoeDsaForCausalLM");
        set_real(b, c, "routed_scaling_factor", 2.5);
        set_int(b, c, "first_k_dense_replace", o->first_dense);
        put(b, c, "mlp_layer_types", dense_sparse_types(b, o));
        break;
    case MOE_FAMILY_GLM4_MOE_LITE:
        set_head(b, c, "glm4_moe_lite", "Glm4MoeLiteForCausalLM");
        set_real(b, c, "routed_scaling_factor", 1.8);
        put(b, c, "mlp_layer_types", dense_sparse_types(b, o));
        break;
    default:
        set_head(b, c, "glm4_moe", "Glm4MoeForCausalLM");
        set_real(b, c, "routed_scaling_factor", 2.5);
        set_int(b, c, "first_k_dense_replace", o->first_dense);
        break;
    }
    set_v3_experts(b, c, o);
    set_bool(b, c, "norm_topk_prob", true);
    set_tail_fp8(b, c, o);
}

/* Qwen3-Next: Qwen3-MoE's fields plus the one shared expert. */
static void build_qwen3_next(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "qwen3_next", "Qwen3NextForCausalLM");
    set_qwen3_moe(b, c, o, true);
}

/* MiniMax-M2 as released: its own routing fields, and FP8 spelled by the torch dtype name
 * with the router and correction bias left unquantised. */
static void build_minimax_m2(builder *b, json_t *c, const gen_options *o)
{
    static const char *const not_converted[] = {"gate", "e_score_correction_bias", "lm_head"};
    set_head(b, c, "minimax_m2", "MiniMaxM2ForCausalLM");
    set_mixtral_experts(b, c, o);
    set_str(b, c, "scoring_func", "sigmoid");
    set_bool(b, c, "use_routing_bias", true);
    set_int(b, c, "shared_intermediate_size", 0);
    set_tail(b, c, o);
    if (o->dtype == GEN_DTYPE_FP8) {
        json_t *q = json_object();
        set_str(b, q, "quant_method", "fp8");
        set_str(b, q, "fmt", "float8_e4m3fn");
        set_str(b, q, "activation_scheme", "dynamic");
        put(b, q, "weight_block_size", block_128x128(b));
        put(b, q, "modules_to_not_convert", str_array(b, not_converted, 3));
        put(b, c, "quantization_config", q);
    }
}

/* Kimi-K2.5: a kimi_k2 text_config (quantization_config inside it, as released) in a
 * vision-language wrapper. */
static void build_kimi_k25(builder *b, json_t *c, const gen_options *o)
{
    set_head(b, c, "kimi_k25", "KimiK25ForConditionalGeneration");
    json_t *text = json_object();
    gen_options t = *o;
    t.family = MOE_FAMILY_KIMI_K2;
    build_deepseek(b, text, &t);
    put(b, c, "text_config", text);
    set_str(b, c, "torch_dtype", o->torch_dtype);
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
    set_real(b, c, "moe_norm_min", o->norm_min);
    set_bool(b, c, "use_bias", false);
    set_tail_fp8(b, c, o);
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
    case MOE_FAMILY_DEEPSEEK_V32:
    case MOE_FAMILY_GLM4_MOE:
    case MOE_FAMILY_GLM_MOE_DSA:
    case MOE_FAMILY_GLM4_MOE_LITE: build_v3_moe(b, c, o); break;
    case MOE_FAMILY_MINIMAX_M2: build_minimax_m2(b, c, o); break;
    case MOE_FAMILY_KIMI_K25: build_kimi_k25(b, c, o); break;
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
