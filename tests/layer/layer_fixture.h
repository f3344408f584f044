/* layer_fixture.h — layer tests: small checkpoints of every family, and a float64 reference. */
#ifndef MOE_TEST_LAYER_FIXTURE_H
#define MOE_TEST_LAYER_FIXTURE_H

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "core/alloc.h"
#include "dtype/dtype.h"
#include "io/st_writer.h"
#include "layer/layer_describe.h"
#include "layer/layer_internal.h"
#include "model/model.h"
#include "model/model_handle.h"
#include "model/verify.h"
#include "route/route_oracle.h"

/* ---- The families --------------------------------------------------------------------------
 * Small shapes with realistic values: H and I are not multiples of 128, so FP8 checkpoints
 * have partial scale blocks; expert counts and top-k as the families use them, scaled down. */

typedef struct fam_case {
    const char *name;
    const char *config;
    int moe_layer;   /* a score-routed layer */
    int other_layer; /* a dense or hash-routed layer, or -1 */
} fam_case;

static const fam_case fam_cases[] = {
    {"deepseek_v2",
     "{\"model_type\":\"deepseek_v2\",\"hidden_size\":320,\"num_hidden_layers\":2,"
     "\"intermediate_size\":384,\"moe_intermediate_size\":192,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":4,\"n_group\":4,\"topk_group\":2,"
     "\"topk_method\":\"group_limited_greedy\",\"scoring_func\":\"softmax\","
     "\"norm_topk_prob\":false,\"routed_scaling_factor\":16.0,\"n_shared_experts\":2,"
     "\"first_k_dense_replace\":1,\"vocab_size\":1000}",
     1, 0},
    {"deepseek_v3",
     "{\"model_type\":\"deepseek_v3\",\"hidden_size\":320,\"num_hidden_layers\":2,"
     "\"intermediate_size\":352,\"moe_intermediate_size\":192,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":4,\"n_group\":4,\"topk_group\":2,\"topk_method\":\"noaux_tc\","
     "\"scoring_func\":\"sigmoid\",\"norm_topk_prob\":true,\"routed_scaling_factor\":2.5,"
     "\"n_shared_experts\":1,\"first_k_dense_replace\":1,\"vocab_size\":1000}",
     1, 0},
    {"deepseek_v3_fp8",
     "{\"model_type\":\"deepseek_v3\",\"hidden_size\":320,\"num_hidden_layers\":2,"
     "\"intermediate_size\":352,\"moe_intermediate_size\":192,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":4,\"n_group\":4,\"topk_group\":2,\"topk_method\":\"noaux_tc\","
     "\"scoring_func\":\"sigmoid\",\"norm_topk_prob\":true,\"routed_scaling_factor\":2.5,"
     "\"n_shared_experts\":1,\"first_k_dense_replace\":1,\"vocab_size\":1000,"
     "\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\","
     "\"activation_scheme\":\"dynamic\",\"weight_block_size\":[128,128]}}",
     1, 0},
    {"kimi_k2_fp8",
     "{\"model_type\":\"kimi_k2\",\"hidden_size\":288,\"num_hidden_layers\":2,"
     "\"intermediate_size\":320,\"moe_intermediate_size\":160,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":6,\"n_group\":1,\"topk_group\":1,\"topk_method\":\"noaux_tc\","
     "\"scoring_func\":\"sigmoid\",\"norm_topk_prob\":true,\"routed_scaling_factor\":2.827,"
     "\"n_shared_experts\":1,\"first_k_dense_replace\":1,\"vocab_size\":1000,"
     "\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\","
     "\"activation_scheme\":\"dynamic\",\"weight_block_size\":[128,128]}}",
     1, 0},
    {"qwen3_moe",
     "{\"model_type\":\"qwen3_moe\",\"hidden_size\":288,\"num_hidden_layers\":2,"
     "\"intermediate_size\":352,\"moe_intermediate_size\":160,\"num_experts\":16,"
     "\"num_experts_per_tok\":4,\"mlp_only_layers\":[0],\"norm_topk_prob\":true}",
     1, 0},
    {"mixtral",
     "{\"model_type\":\"mixtral\",\"hidden_size\":264,\"num_hidden_layers\":1,"
     "\"intermediate_size\":200,\"num_local_experts\":8,\"num_experts_per_tok\":2,"
     "\"torch_dtype\":\"float32\"}",
     0, -1},
    {"gpt_oss",
     "{\"model_type\":\"gpt_oss\",\"hidden_size\":288,\"num_hidden_layers\":1,"
     "\"intermediate_size\":160,\"num_local_experts\":8,\"num_experts_per_tok\":2,"
     "\"swiglu_limit\":0.25}",
     0, -1},
    {"deepseek_v4_fp8",
     "{\"model_type\":\"deepseek_v4\",\"hidden_size\":256,\"num_hidden_layers\":2,"
     "\"moe_intermediate_size\":160,\"n_routed_experts\":16,\"num_experts_per_tok\":4,"
     "\"n_shared_experts\":1,\"num_hash_layers\":1,\"vocab_size\":1000,\"norm_topk_prob\":true,"
     "\"routed_scaling_factor\":1.5,\"scoring_func\":\"sqrtsoftplus\",\"swiglu_limit\":0.3,"
     "\"expert_dtype\":\"fp8\",\"quantization_config\":{\"quant_method\":\"fp8\","
     "\"fmt\":\"e4m3\",\"weight_block_size\":[128,128],\"scale_fmt\":\"ue8m0\"}}",
     1, 0},
    /* MXFP4 experts (the Q8 recipe): gpt-oss's stacked, interleaved blocks; DeepSeek-V4's fp4
     * experts beside FP8 shared experts with E8M0 scales, and with f32 scales. */
    {"gpt_oss_mxfp4",
     "{\"model_type\":\"gpt_oss\",\"hidden_size\":288,\"num_hidden_layers\":1,"
     "\"intermediate_size\":160,\"num_local_experts\":16,\"num_experts_per_tok\":4,"
     "\"swiglu_limit\":0.25,\"quantization_config\":{\"quant_method\":\"mxfp4\"}}",
     0, -1},
    {"deepseek_v4_mxfp4",
     "{\"model_type\":\"deepseek_v4\",\"hidden_size\":256,\"num_hidden_layers\":2,"
     "\"moe_intermediate_size\":160,\"n_routed_experts\":16,\"num_experts_per_tok\":4,"
     "\"n_shared_experts\":1,\"num_hash_layers\":1,\"vocab_size\":1000,\"norm_topk_prob\":true,"
     "\"routed_scaling_factor\":1.5,\"scoring_func\":\"sqrtsoftplus\",\"swiglu_limit\":0.3,"
     "\"expert_dtype\":\"fp4\",\"quantization_config\":{\"quant_method\":\"fp8\","
     "\"fmt\":\"e4m3\",\"weight_block_size\":[128,128],\"scale_fmt\":\"ue8m0\"}}",
     1, 0},
    {"deepseek_v4_mxfp4_f32s",
     "{\"model_type\":\"deepseek_v4\",\"hidden_size\":320,\"num_hidden_layers\":2,"
     "\"moe_intermediate_size\":96,\"n_routed_experts\":16,\"num_experts_per_tok\":6,"
     "\"n_shared_experts\":2,\"num_hash_layers\":1,\"vocab_size\":1000,\"norm_topk_prob\":true,"
     "\"routed_scaling_factor\":2.5,\"scoring_func\":\"sqrtsoftplus\",\"swiglu_limit\":10.0,"
     "\"expert_dtype\":\"fp4\",\"quantization_config\":{\"quant_method\":\"fp8\","
     "\"fmt\":\"e4m3\",\"weight_block_size\":[128,128]}}",
     1, 0},
    /* As transformers 5 saves a DeepSeek-V4 model: mlp_layer_types instead of num_hash_layers
     * (here a hash layer after a score-routed one), no quantization_config, so float experts;
     * the rest from DeepseekV4Config's defaults (renormalised, scaling 1.5, limit 10). */
    {"deepseek_v4_bf16",
     "{\"model_type\":\"deepseek_v4\",\"hidden_size\":288,\"num_hidden_layers\":2,"
     "\"moe_intermediate_size\":96,\"n_routed_experts\":16,\"num_experts_per_tok\":4,"
     "\"n_shared_experts\":1,\"mlp_layer_types\":[\"moe\",\"hash_moe\"],\"vocab_size\":1000,"
     "\"scoring_func\":\"sqrtsoftplus\",\"hidden_act\":\"silu\",\"dtype\":\"bfloat16\"}",
     0, 1},
    /* DeepSeek-V3.2 as transformers writes it (mlp_layer_types beside an unused
     * first_k_dense_replace), FP8 with power-of-two scales kept in f32 as V3.1 on. */
    {"deepseek_v32_fp8",
     "{\"model_type\":\"deepseek_v32\",\"hidden_size\":320,\"num_hidden_layers\":2,"
     "\"intermediate_size\":352,\"moe_intermediate_size\":192,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":4,\"n_group\":4,\"topk_group\":2,\"norm_topk_prob\":true,"
     "\"routed_scaling_factor\":2.5,\"n_shared_experts\":1,\"first_k_dense_replace\":3,"
     "\"mlp_layer_types\":[\"dense\",\"sparse\"],\"index_topk\":2048,\"vocab_size\":1000,"
     "\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\","
     "\"activation_scheme\":\"dynamic\",\"weight_block_size\":[128,128],"
     "\"scale_fmt\":\"ue8m0\"}}",
     1, 0},
    /* GLM-4.5's shape scaled down (8 of 160 experts, one group, a shared expert, rsf 2.5). */
    {"glm4_moe",
     "{\"model_type\":\"glm4_moe\",\"hidden_size\":320,\"num_hidden_layers\":2,"
     "\"intermediate_size\":352,\"moe_intermediate_size\":96,\"n_routed_experts\":20,"
     "\"num_experts_per_tok\":4,\"n_group\":1,\"topk_group\":1,\"norm_topk_prob\":true,"
     "\"routed_scaling_factor\":2.5,\"n_shared_experts\":1,\"first_k_dense_replace\":1}",
     1, 0},
    /* GLM-5 without renormalisation (scores times rsf), two shared experts. */
    {"glm_moe_dsa",
     "{\"model_type\":\"glm_moe_dsa\",\"hidden_size\":288,\"num_hidden_layers\":2,"
     "\"intermediate_size\":320,\"moe_intermediate_size\":96,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":4,\"norm_topk_prob\":false,\"routed_scaling_factor\":1.5,"
     "\"n_shared_experts\":2,\"mlp_layer_types\":[\"dense\",\"sparse\"]}",
     1, 0},
    /* GLM-4.7-Flash without mlp_layer_types: layer 0 dense (its config class's default). */
    {"glm4_moe_lite",
     "{\"model_type\":\"glm4_moe_lite\",\"hidden_size\":256,\"num_hidden_layers\":2,"
     "\"intermediate_size\":288,\"moe_intermediate_size\":96,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":4,\"routed_scaling_factor\":1.8,\"n_shared_experts\":1}",
     1, 0},
    /* MiniMax-M2 as released: FP8 spelled float8_e4m3fn, an f32 router, the correction bias on
     * the block; every layer MoE, no shared expert. */
    {"minimax_m2_fp8",
     "{\"model_type\":\"minimax_m2\",\"hidden_size\":264,\"num_hidden_layers\":1,"
     "\"intermediate_size\":200,\"num_local_experts\":16,\"num_experts_per_tok\":4,"
     "\"scoring_func\":\"sigmoid\",\"use_routing_bias\":true,\"shared_intermediate_size\":0,"
     "\"dtype\":\"float32\",\"quantization_config\":{\"quant_method\":\"fp8\","
     "\"fmt\":\"float8_e4m3fn\",\"activation_scheme\":\"dynamic\","
     "\"weight_block_size\":[128,128]}}",
     0, -1},
    /* Kimi-K2.5: a kimi_k2 text_config; tensors under language_model.model.layers. */
    {"kimi_k25",
     "{\"model_type\":\"kimi_k25\",\"text_config\":{\"model_type\":\"kimi_k2\","
     "\"hidden_size\":288,\"num_hidden_layers\":2,\"intermediate_size\":320,"
     "\"moe_intermediate_size\":160,\"n_routed_experts\":16,\"num_experts_per_tok\":6,"
     "\"n_group\":1,\"topk_group\":1,\"norm_topk_prob\":true,"
     "\"routed_scaling_factor\":2.827,\"n_shared_experts\":1,\"first_k_dense_replace\":1}}",
     1, 0},
    /* Kimi-K2-Thinking's compressed-tensors INT4: routed experts int4 per group of 32, the
     * shared expert (by pattern) and the dense layer (by name) left bf16 by the ignore list. */
    {"kimi_k2_int4",
     "{\"model_type\":\"kimi_k2\",\"hidden_size\":256,\"num_hidden_layers\":2,"
     "\"intermediate_size\":352,\"moe_intermediate_size\":160,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":4,\"n_group\":1,\"topk_group\":1,\"norm_topk_prob\":true,"
     "\"routed_scaling_factor\":2.827,\"n_shared_experts\":1,\"first_k_dense_replace\":1,"
     "\"vocab_size\":1000,\"quantization_config\":{\"quant_method\":\"compressed-tensors\","
     "\"format\":\"pack-quantized\",\"quantization_status\":\"compressed\","
     "\"config_groups\":{\"group_0\":{\"targets\":[\"Linear\"],\"input_activations\":null,"
     "\"output_activations\":null,\"weights\":{\"num_bits\":4,\"type\":\"int\","
     "\"symmetric\":true,\"strategy\":\"group\",\"group_size\":32,\"dynamic\":false,"
     "\"actorder\":null}}},\"ignore\":[\"lm_head\",\"re:.*self_attn.*\","
     "\"re:.*shared_experts.*\",\"model.layers.0.mlp.gate_proj\",\"model.layers.0.mlp.up_proj\","
     "\"model.layers.0.mlp.down_proj\"]}}",
     1, 0},
    /* DeepSeek-V3 with INT4 per group of 64 on its shared expert too (only the dense MLP
     * ignored, by pattern). */
    {"deepseek_v3_int4",
     "{\"model_type\":\"deepseek_v3\",\"hidden_size\":320,\"num_hidden_layers\":2,"
     "\"intermediate_size\":352,\"moe_intermediate_size\":192,\"n_routed_experts\":16,"
     "\"num_experts_per_tok\":4,\"n_group\":4,\"topk_group\":2,\"norm_topk_prob\":true,"
     "\"routed_scaling_factor\":2.5,\"n_shared_experts\":1,\"first_k_dense_replace\":1,"
     "\"vocab_size\":1000,\"quantization_config\":{\"quant_method\":\"compressed-tensors\","
     "\"format\":\"pack-quantized\",\"config_groups\":{\"g\":{\"targets\":[\"Linear\"],"
     "\"weights\":{\"num_bits\":4,\"type\":\"int\",\"symmetric\":true,"
     "\"strategy\":\"group\",\"group_size\":64}}},"
     "\"ignore\":[\"re:model\\\\.layers\\\\.0\\\\.mlp\\\\.\"]}}",
     1, 0},
    /* One shared expert whose output is scaled by sigmoid(x · shared_expert_gate): Qwen3-Next
     * with a dense layer (mlp_only_layers) and a shared width unlike the experts'; Qwen3.5-MoE
     * nested in text_config, in FP8 (quantization_config at the top). */
    {"qwen3_next",
     "{\"model_type\":\"qwen3_next\",\"hidden_size\":288,\"num_hidden_layers\":2,"
     "\"intermediate_size\":352,\"moe_intermediate_size\":160,\"num_experts\":16,"
     "\"num_experts_per_tok\":4,\"shared_expert_intermediate_size\":224,"
     "\"mlp_only_layers\":[0],\"norm_topk_prob\":true}",
     1, 0},
    {"qwen3_5_moe_fp8",
     "{\"model_type\":\"qwen3_5_moe\",\"text_config\":{\"hidden_size\":320,"
     "\"num_hidden_layers\":1,\"moe_intermediate_size\":192,\"num_experts\":16,"
     "\"num_experts_per_tok\":6,\"shared_expert_intermediate_size\":192,\"dtype\":\"bfloat16\"},"
     "\"quantization_config\":{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\","
     "\"activation_scheme\":\"dynamic\",\"weight_block_size\":[128,128]}}",
     0, -1},
    /* ERNIE-4.5: softmax + correction bias for the choice, a renormalisation floor that binds
     * on some tokens, two shared experts, layer 0 dense (moe_layer_start_index). */
    {"ernie4_5_moe",
     "{\"model_type\":\"ernie4_5_moe\",\"hidden_size\":288,\"num_hidden_layers\":2,"
     "\"intermediate_size\":352,\"moe_intermediate_size\":96,\"moe_num_experts\":16,"
     "\"moe_k\":4,\"moe_num_shared_experts\":2,\"moe_layer_start_index\":1,"
     "\"moe_norm_min\":0.3,\"use_bias\":false}",
     1, 0},
    /* Llama-4: the sigmoid of the one chosen logit scales the expert's input; a shared expert;
     * stacked experts with gate and up in halves; layer 0 dense (moe_layers). */
    {"llama4",
     "{\"model_type\":\"llama4\",\"text_config\":{\"hidden_size\":288,"
     "\"num_hidden_layers\":2,\"intermediate_size\":160,\"intermediate_size_mlp\":352,"
     "\"num_local_experts\":16,\"num_experts_per_tok\":1,\"moe_layers\":[1],"
     "\"dtype\":\"bfloat16\"}}",
     1, 0},
};
#define N_FAM_CASES (sizeof fam_cases / sizeof fam_cases[0])

/* The public request for an internal recipe (MOE_RECIPE_F32, MOE_RECIPE_BF16 or
 * MOE_RECIPE_TILE), and the options of a layer with THREADS threads asking for it, every forward
 * on all of them (a busy machine must not take the tests' many-thread paths away:
 * layer_team.h). */
static inline moe_layer_options fx_options(int threads, int recipe)
{
    const moe_layer_options o = {sizeof o, threads, MOE_DTYPE_INVALID,
                                 recipe == MOE_RECIPE_BF16   ? MOE_EXPERTS_RECIPE_BF16
                                 : recipe == MOE_RECIPE_TILE ? MOE_EXPERTS_RECIPE_TILE
                                                             : MOE_EXPERTS_RECIPE_F32,
                                 true};
    return o;
}

/* An internal recipe's name. */
static inline const char *fx_recipe_name(int recipe)
{
    static const char *const names[] = {"f32", "bf16", "q8", "tile"};
    return recipe >= 0 && recipe < 4 ? names[recipe] : "?";
}

/* LAYER of M, created with options O and TUNING (NULL: none, as moe_layer_create does); a
 * failure stops the test. */
static inline moe_layer *fx_layer(const moe_model *m, int layer, const moe_layer_options *o,
                                  const moe_layer_tuning *tuning)
{
    moe_layer *l = NULL;
    moe_status st = moe_layer_create_tuned(m, layer, o, tuning, &l);
    if (st) fprintf(stderr, "create layer %d: %s\n", layer, moe_last_error());
    REQUIRE(st == MOE_OK);
    return l;
}

/* ---- Deterministic values ----------------------------------------------------------------- */

static inline uint64_t fx_hash(uint64_t a, uint64_t b)
{
    rng r = {a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull)};
    rng_next(&r);
    return rng_next(&r);
}

static inline double fx_unit(uint64_t a, uint64_t b)
{
    return (double)(fx_hash(a, b) >> 11) * 0x1p-53;
}

/* A value of mean 0 and variance 1, bell-shaped, a function of (a, b) only: the sum of four
 * uniforms from one hash (Irwin-Hall), cheap enough to fill every test checkpoint. */
static inline double fx_gauss(uint64_t a, uint64_t b)
{
    const uint64_t h = fx_hash(a, b);
    double sum = 0;
    for (int i = 0; i < 4; i++)
        sum += (double)((h >> (16 * i)) & 0xFFFF) * 0x1p-16;
    return (sum - 2.0 + 2 * 0x1p-17) * 1.7320508075688772; /* sqrt(12 / 4) */
}

/* ---- Writing a checkpoint from the family's tensor tables ------------------------------------ */

typedef struct fx_tensor {
    moe_tensor_role role;
    moe_dtype dtype;
    int ndim;
    int64_t shape[4];
    uint64_t id;           /* seeds its values */
    moe_dtype scale_dtype; /* FP8 weights: their scale tensor's dtype */
    uint64_t weight_id;    /* scale tensors: the id of the weight they scale */
    int n_experts, top_k;  /* tid2eid */
    bool nan_first;        /* element 0 is NaN (damage) */
    bool codes;            /* packed E2M1 codes (MXFP4 weights): random bytes */
    bool mx_scale;         /* the E8M0 scales of packed codes */
    int64_t proj[2];       /* INT4 weight_shape tensors: the projection's [out, in] */
} fx_tensor;

/* Deliberate damage: a tensor left out, a tensor whose element 0 is NaN (an E8M0 scale:
 * 0xFF). */
typedef struct fx_damage {
    const char *drop;
    const char *nan;
} fx_damage;

/* A tensor written with another shape (ndim dims of shape) than the table says. */
typedef struct fx_reshape {
    const char *name;
    int ndim;
    int64_t shape[4];
} fx_reshape;

typedef struct fx_plan {
    fx_tensor *v;
    size_t n, cap;
    uint64_t seed;
} fx_plan;

/* The block scale (br, bc) of weight W: near 2^-9, so codes of values of deviation 0.02 sit in the
 * middle of E4M3's range; exact in the scale's dtype (E8M0 scales are powers of two). */
static inline double fx_scale(uint64_t w, int64_t br, int64_t bc, moe_dtype dt)
{
    const uint64_t key = (uint64_t)br * 1000003u + (uint64_t)bc;
    if (dt == MOE_DTYPE_F8_E8M0 || dt == MOE_DTYPE_U8)
        return ldexp(1.0, -10 + (int)(fx_hash(w ^ 0x5CA1E, key) % 3));
    double s = ldexp(0.75 + 0.5 * fx_unit(w ^ 0x5CA1E, key), -9);
    if (dt == MOE_DTYPE_BF16) return moe_bf16_to_f32(moe_f32_to_bf16((float)s));
    return (float)s;
}

/* The E8M0 scale (r, b) of packed codes W: 2^-8 .. 2^-6, so that random E2M1 codes (rms 2.9)
 * give weights of deviation about 0.02, as the other formats have. */
static inline double fx_mx_scale(uint64_t w, int64_t r, int64_t b)
{
    return ldexp(1.0, -8 + (int)(fx_hash(w ^ 0x3C4F, (uint64_t)r * 1000003u + (uint64_t)b) % 3));
}

static inline bool fx_is_bias(moe_tensor_role r)
{
    return r == MOE_ROLE_ROUTER_BIAS || r == MOE_ROLE_CORRECTION_BIAS ||
           r == MOE_ROLE_GATE_UP_BIAS || r == MOE_ROLE_DOWN_BIAS;
}

static inline bool fx_is_scale(moe_tensor_role r)
{
    return r == MOE_ROLE_GATE_SCALE || r == MOE_ROLE_UP_SCALE || r == MOE_ROLE_DOWN_SCALE ||
           r == MOE_ROLE_GATE_UP_SCALE;
}

static inline bool fx_is_shape(moe_tensor_role r)
{
    return r == MOE_ROLE_GATE_SHAPE || r == MOE_ROLE_UP_SHAPE || r == MOE_ROLE_DOWN_SHAPE;
}

static inline void fx_store(moe_dtype dt, double v, unsigned char *dst)
{
    if (dt == MOE_DTYPE_F32) {
        float f = (float)v;
        memcpy(dst, &f, 4);
    } else if (dt == MOE_DTYPE_BF16) {
        uint16_t h = moe_f32_to_bf16((float)v);
        memcpy(dst, &h, 2);
    } else if (dt == MOE_DTYPE_F16) {
        uint16_t h = moe_f32_to_f16((float)v);
        memcpy(dst, &h, 2);
    } else if (dt == MOE_DTYPE_F8_E4M3) {
        *dst = moe_f32_to_e4m3((float)v);
    } else if (dt == MOE_DTYPE_F8_E8M0 || dt == MOE_DTYPE_U8) {
        *dst = moe_f32_to_e8m0((float)v);
    } else if (dt == MOE_DTYPE_I32) {
        int32_t i = (int32_t)v;
        memcpy(dst, &i, 4);
    } else if (dt == MOE_DTYPE_I64) {
        int64_t i = (int64_t)v;
        memcpy(dst, &i, 8);
    }
}

/* The value of element I of tensor T (before encoding in its dtype). */
static inline double fx_value(const fx_plan *p, const fx_tensor *t, uint64_t i)
{
    const uint64_t id = t->id ^ p->seed;
    if (t->role == MOE_ROLE_TID2EID) { /* row r: k distinct ids (3 is prime to E) */
        const uint64_t row = i / (uint64_t)t->top_k, col = i % (uint64_t)t->top_k;
        return (double)((row * 7 + col * 3) % (uint64_t)t->n_experts);
    }
    if (fx_is_shape(t->role)) return (double)t->proj[i % 2];
    if (t->role == MOE_ROLE_CORRECTION_BIAS) return 0.05 * fx_gauss(id, i);
    if (fx_is_bias(t->role)) return 0.1 * fx_gauss(id, i);
    const int64_t cols = t->shape[t->ndim - 1];
    const int64_t r = (int64_t)(i / (uint64_t)cols), c = (int64_t)(i % (uint64_t)cols);
    if (t->mx_scale) return fx_mx_scale(t->weight_id ^ p->seed, r, c);
    if (fx_is_scale(t->role)) return fx_scale(t->weight_id ^ p->seed, r, c, t->dtype);
    const double w = 0.02 * fx_gauss(id, i);
    if (t->dtype != MOE_DTYPE_F8_E4M3) return w;
    /* The rows of a 2-D FP8 weight are the outputs, blocked by 128 as the scale is. */
    return w / fx_scale(id, r / 128, c / 128, t->scale_dtype);
}

static inline moe_status fx_fill(void *ctx, size_t index, uint64_t offset, void *buf, size_t len)
{
    const fx_plan *p = ctx;
    const fx_tensor *t = &p->v[index];
    const size_t w = moe_dtype_bits(t->dtype) / 8;
    unsigned char *out = buf;
    for (size_t b = 0; b + w <= len; b += w) {
        const uint64_t i = (offset + b) / w;
        if (t->codes) /* every byte random (INT4 words: four of them) */
            for (size_t k = 0; k < w; k++)
                out[b + k] = (unsigned char)(fx_hash(t->id ^ p->seed, i * w + k) >> 56);
        else
            fx_store(t->dtype, t->nan_first && i == 0 ? NAN : fx_value(p, t, i), out + b);
    }
    return MOE_OK;
}

/* Writes DIR/config.json and DIR/model.safetensors for CONFIG with values seeded by SEED, the
 * damage DMG and the shape change RS (NULL: none); the MLP projections the table lists as bf16
 * in WEIGHTS_AS instead when it is not 0 (F32 or F16: what save_pretrained writes for a
 * float32 or float16 model). */
static inline void fx_write_model_full(const char *dir, const char *config, uint64_t seed,
                                       const fx_damage *dmg, const fx_reshape *rs,
                                       moe_dtype weights_as)
{
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(config, 1, strlen(config), f) == strlen(config) && fclose(f) == 0);
    moe_model_desc d;
    moe_status st = moe_model_desc_parse(config, strlen(config), "test config", &d);
    if (st) fprintf(stderr, "%s\n", moe_last_error());
    REQUIRE(st == MOE_OK);
    moe_st_writer *w = NULL;
    REQUIRE(moe_st_writer_create(&w) == MOE_OK);
    fx_plan plan = {NULL, 0, 0, seed};
    for (int layer = 0; layer < d.n_layers; layer++) {
        moe_tensor_spec *v = NULL;
        size_t n = 0;
        REQUIRE(moe_model_layer_tensors(&d, layer, &v, &n) == MOE_OK);
        for (size_t i = 0; i < n; i++) {
            if (dmg && dmg->drop && !strcmp(v[i].name, dmg->drop)) continue;
            if (plan.n == plan.cap) {
                plan.cap = plan.cap ? 2 * plan.cap : 256;
                plan.v = realloc(plan.v, plan.cap * sizeof *plan.v);
                REQUIRE(plan.v);
            }
            fx_tensor *t = &plan.v[plan.n];
            memset(t, 0, sizeof *t);
            const moe_tensor_role role = v[i].role;
            if (weights_as && v[i].dtype == MOE_DTYPE_BF16 &&
                (role == MOE_ROLE_GATE || role == MOE_ROLE_UP || role == MOE_ROLE_DOWN ||
                 role == MOE_ROLE_GATE_UP))
                v[i].dtype = weights_as;
            t->role = v[i].role;
            t->dtype = v[i].dtype;
            t->ndim = v[i].ndim;
            memcpy(t->shape, v[i].shape, sizeof t->shape);
            t->id = plan.n + 1;
            t->n_experts = d.layers[layer].routing.n_experts;
            t->top_k = d.layers[layer].routing.top_k;
            /* The table lists each FP8 weight right before its scale. */
            if (t->dtype == MOE_DTYPE_F8_E4M3 && i + 1 < n) t->scale_dtype = v[i + 1].dtype;
            const bool weight =
                role == MOE_ROLE_GATE || role == MOE_ROLE_UP || role == MOE_ROLE_DOWN;
            t->codes =
                ((t->dtype == MOE_DTYPE_U8 || t->dtype == MOE_DTYPE_I8) && !fx_is_scale(t->role)) ||
                (t->dtype == MOE_DTYPE_I32 && weight);
            if (fx_is_scale(t->role) && plan.n > 0) { /* INT4's bf16 scales: as FP8's */
                t->weight_id = plan.v[plan.n - 1].id;
                t->mx_scale = plan.v[plan.n - 1].codes && plan.v[plan.n - 1].dtype != MOE_DTYPE_I32;
            }
            if (fx_is_shape(t->role) && plan.n > 1) { /* after weight_packed [out, in/8] */
                t->proj[0] = plan.v[plan.n - 2].shape[0];
                t->proj[1] = plan.v[plan.n - 2].shape[1] * 8;
            }
            t->nan_first = dmg && dmg->nan && !strcmp(v[i].name, dmg->nan);
            if (rs && !strcmp(v[i].name, rs->name)) {
                t->ndim = rs->ndim;
                memcpy(t->shape, rs->shape, sizeof t->shape);
            }
            plan.n++;
            REQUIRE(moe_st_writer_add(w, v[i].name, v[i].dtype, t->ndim, t->shape) == MOE_OK);
        }
        moe_free(v);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st = moe_st_writer_write(w, path, fx_fill, &plan);
    if (st) fprintf(stderr, "%s\n", moe_last_error());
    REQUIRE(st == MOE_OK);
    moe_st_writer_destroy(w);
    free(plan.v);
    moe_model_desc_free(&d);
}

static inline void fx_write_model_rs(const char *dir, const char *config, uint64_t seed,
                                     const fx_damage *dmg, const fx_reshape *rs)
{
    fx_write_model_full(dir, config, seed, dmg, rs, MOE_DTYPE_INVALID);
}

static inline void fx_write_model_ex(const char *dir, const char *config, uint64_t seed,
                                     const fx_damage *dmg)
{
    fx_write_model_rs(dir, config, seed, dmg, NULL);
}

static inline void fx_write_model(const char *dir, const char *config, uint64_t seed)
{
    fx_write_model_ex(dir, config, seed, NULL);
}

static inline void fx_remove_model(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
}

static inline moe_model *fx_open(const char *dir, bool no_mmap)
{
    moe_open_options o = {sizeof o, no_mmap};
    moe_model *m = NULL;
    moe_status st = moe_model_open(dir, &o, &m);
    if (st) fprintf(stderr, "open %s: %s\n", dir, moe_last_error());
    REQUIRE(st == MOE_OK);
    return m;
}

/* ---- Reading tensors back ----------------------------------------------------------------- */

static inline double fx_decode(const moe_tensor *t, uint64_t i)
{
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case MOE_DTYPE_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    case MOE_DTYPE_BF16:
    case MOE_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return t->dtype == MOE_DTYPE_BF16 ? moe_bf16_to_f32(h) : moe_f16_to_f32(h);
    }
    case MOE_DTYPE_F8_E4M3: return moe_e4m3_to_f32(p[i]);
    case MOE_DTYPE_F8_E8M0:
    case MOE_DTYPE_U8: return moe_e8m0_to_f32(p[i]);
    case MOE_DTYPE_I32: {
        int32_t v;
        memcpy(&v, p + 4 * i, 4);
        return v;
    }
    case MOE_DTYPE_I64: {
        int64_t v;
        memcpy(&v, p + 8 * i, 8);
        return (double)v;
    }
    default: return NAN;
    }
}

/* The checkpoint tensor of (group, expert, role) in layer LAYER, or NULL. */
static inline const moe_tensor *fx_find(const moe_model *m, int layer, moe_tensor_group g,
                                        int expert, moe_tensor_role role)
{
    const moe_model_desc *d = moe_model_desc_of(m);
    moe_tensor_spec *v = NULL;
    size_t n = 0;
    REQUIRE(moe_model_layer_tensors(d, layer, &v, &n) == MOE_OK);
    const moe_tensor *t = NULL;
    for (size_t i = 0; i < n && !t; i++)
        if (v[i].group == g && v[i].expert == expert && v[i].role == role)
            t = moe_model_find_tensor(d, moe_model_ckpt_of(m), &v[i]);
    moe_free(v);
    return t;
}

/* ---- The float64 reference --------------------------------------------------------------------
 */

typedef struct fx_mlp {
    int64_t h, i;
    double *g, *u, *d;    /* [I][H], [I][H], [H][I], dequantised */
    double *bg, *bu, *bd; /* biases or NULL */
    moe_activation act;
    double limit, alpha;
} fx_mlp;

/* MXFP4, literally: the E2M1 value of a code (sign bit 3, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4,
 * 6) times 2^(e - 127) of its row's E8M0 scale byte e for the 32-block of column c. Row ROW of
 * K columns: code bytes at ROW·K/2 (low nibble = even column), scale bytes at ROW·K/32. */
static inline double fx_mx_at(const moe_tensor *codes, const moe_tensor *scales, uint64_t row,
                              int64_t k, int64_t c)
{
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    const unsigned char byte =
        ((const unsigned char *)codes->data)[row * (uint64_t)(k / 2) + (uint64_t)(c / 2)];
    const unsigned code = c % 2 ? byte >> 4 : byte & 0x0Fu;
    const unsigned e =
        ((const unsigned char *)scales->data)[row * (uint64_t)(k / 32) + (uint64_t)(c / 32)];
    return (code & 8 ? -1.0 : 1.0) * mag[code & 7] * ldexp(1.0, (int)e - 127);
}

static inline bool fx_is_codes(const moe_tensor *t)
{
    return t->dtype == MOE_DTYPE_U8 || t->dtype == MOE_DTYPE_I8;
}

/* INT4 (compressed-tensors pack-quantized), literally: element c of row r is bits 4(c % 8)
 * .. 4(c % 8) + 3 of int32 word c / 8, minus 8, times the row's scale of group c / G (G = cols
 * / the scale's columns). */
static inline double fx_int4_at(const moe_tensor *words, const moe_tensor *scales, int64_t r,
                                int64_t cols, int64_t c)
{
    int32_t word;
    memcpy(&word, (const unsigned char *)words->data + 4 * (size_t)(r * (cols / 8) + c / 8), 4);
    const int q = (int)(((uint32_t)word >> (4 * (c % 8))) & 15u) - 8;
    const int64_t groups = scales->shape[1];
    return q * fx_decode(scales, (uint64_t)(r * groups + c / (cols / groups)));
}

/* W[r][c] of a 2-D [rows, cols] projection with optional 128×128 block scale S, or packed
 * E2M1 codes [rows, cols/2] with E8M0 scales S [rows, cols/32], or INT4 words. */
static inline void fx_dequant(const moe_tensor *w, const moe_tensor *s, int64_t rows, int64_t cols,
                              double *out)
{
    if (w->dtype == MOE_DTYPE_I32) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                out[r * cols + c] = fx_int4_at(w, s, r, cols, c);
        return;
    }
    if (fx_is_codes(w)) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                out[r * cols + c] = fx_mx_at(w, s, (uint64_t)r, cols, c);
        return;
    }
    const int64_t scols = (cols + 127) / 128;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] = fx_decode(w, (uint64_t)(r * cols + c)) *
                                (s ? fx_decode(s, (uint64_t)((r / 128) * scols + c / 128)) : 1.0);
}

static inline double *fx_alloc(int64_t n)
{
    double *p = malloc((size_t)n * sizeof *p);
    REQUIRE(p);
    return p;
}

/* The MLP of (group, expert) of layer LAYER (expert -1 for shared and dense). */
static inline void fx_mlp_load(const moe_model *m, int layer, moe_tensor_group grp, int expert,
                               fx_mlp *out)
{
    const moe_layer_desc *ld = &moe_model_desc_of(m)->layers[layer];
    const moe_mlp_desc *md = grp == MOE_GROUP_ROUTED   ? &ld->experts
                             : grp == MOE_GROUP_SHARED ? &ld->shared
                                                       : &ld->dense;
    memset(out, 0, sizeof *out);
    const int64_t h = md->hidden, i = md->intermediate;
    out->h = h;
    out->i = i;
    out->act = md->activation;
    out->limit = md->swiglu_limit;
    out->alpha = md->alpha;
    out->g = fx_alloc(h * i);
    out->u = fx_alloc(h * i);
    out->d = fx_alloc(h * i);
    const moe_tensor *gu = fx_find(m, layer, grp, -1, MOE_ROLE_GATE_UP);
    if (gu && moe_model_desc_of(m)->family == MOE_FAMILY_LLAMA4) {
        /* Llama-4: gate_up_proj [E, H, 2I] with gate j in column j and up j in column I + j,
         * down_proj [E, I, H]; no biases. */
        const moe_tensor *dn = fx_find(m, layer, grp, -1, MOE_ROLE_DOWN);
        REQUIRE(dn);
        const uint64_t e = (uint64_t)expert;
        for (int64_t j = 0; j < i; j++)
            for (int64_t c = 0; c < h; c++) {
                const uint64_t at = e * (uint64_t)(h * 2 * i) + (uint64_t)(c * 2 * i);
                out->g[j * h + c] = fx_decode(gu, at + (uint64_t)j);
                out->u[j * h + c] = fx_decode(gu, at + (uint64_t)(i + j));
            }
        for (int64_t r = 0; r < h; r++)
            for (int64_t c = 0; c < i; c++)
                out->d[r * i + c] = fx_decode(dn, e * (uint64_t)(i * h) + (uint64_t)(c * h + r));
        return;
    }
    if (gu) { /* gpt-oss bf16: [E, H, 2I], [E, I, H], biases [E, 2I], [E, H] */
        const moe_tensor *dn = fx_find(m, layer, grp, -1, MOE_ROLE_DOWN);
        const moe_tensor *gub = fx_find(m, layer, grp, -1, MOE_ROLE_GATE_UP_BIAS);
        const moe_tensor *db = fx_find(m, layer, grp, -1, MOE_ROLE_DOWN_BIAS);
        REQUIRE(dn && gub && db);
        const uint64_t e = (uint64_t)expert;
        if (fx_is_codes(gu)) { /* MXFP4: rows 2j (gate j) and 2j + 1 (up j) of [E, 2I, H/32, 16] */
            const moe_tensor *gus = fx_find(m, layer, grp, -1, MOE_ROLE_GATE_UP_SCALE);
            const moe_tensor *ds = fx_find(m, layer, grp, -1, MOE_ROLE_DOWN_SCALE);
            REQUIRE(gus && ds);
            for (int64_t j = 0; j < i; j++)
                for (int64_t c = 0; c < h; c++) {
                    const uint64_t row = e * (uint64_t)(2 * i) + (uint64_t)(2 * j);
                    out->g[j * h + c] = fx_mx_at(gu, gus, row, h, c);
                    out->u[j * h + c] = fx_mx_at(gu, gus, row + 1, h, c);
                }
            for (int64_t r = 0; r < h; r++)
                for (int64_t c = 0; c < i; c++)
                    out->d[r * i + c] = fx_mx_at(dn, ds, e * (uint64_t)h + (uint64_t)r, i, c);
        }
        for (int64_t j = 0; j < i && !fx_is_codes(gu); j++)
            for (int64_t c = 0; c < h; c++) {
                out->g[j * h + c] =
                    fx_decode(gu, e * (uint64_t)(h * 2 * i) + (uint64_t)(c * 2 * i + 2 * j));
                out->u[j * h + c] =
                    fx_decode(gu, e * (uint64_t)(h * 2 * i) + (uint64_t)(c * 2 * i + 2 * j + 1));
            }
        for (int64_t r = 0; r < h && !fx_is_codes(gu); r++)
            for (int64_t c = 0; c < i; c++)
                out->d[r * i + c] = fx_decode(dn, e * (uint64_t)(i * h) + (uint64_t)(c * h + r));
        out->bg = fx_alloc(i);
        out->bu = fx_alloc(i);
        out->bd = fx_alloc(h);
        for (int64_t j = 0; j < i; j++) {
            out->bg[j] = fx_decode(gub, e * (uint64_t)(2 * i) + (uint64_t)(2 * j));
            out->bu[j] = fx_decode(gub, e * (uint64_t)(2 * i) + (uint64_t)(2 * j + 1));
        }
        for (int64_t r = 0; r < h; r++)
            out->bd[r] = fx_decode(db, e * (uint64_t)h + (uint64_t)r);
        return;
    }
    const moe_tensor *g = fx_find(m, layer, grp, expert, MOE_ROLE_GATE);
    const moe_tensor *u = fx_find(m, layer, grp, expert, MOE_ROLE_UP);
    const moe_tensor *dn = fx_find(m, layer, grp, expert, MOE_ROLE_DOWN);
    REQUIRE(g && u && dn);
    fx_dequant(g, fx_find(m, layer, grp, expert, MOE_ROLE_GATE_SCALE), i, h, out->g);
    fx_dequant(u, fx_find(m, layer, grp, expert, MOE_ROLE_UP_SCALE), i, h, out->u);
    fx_dequant(dn, fx_find(m, layer, grp, expert, MOE_ROLE_DOWN_SCALE), h, i, out->d);
}

static inline void fx_mlp_free(fx_mlp *m)
{
    free(m->g);
    free(m->u);
    free(m->d);
    free(m->bg);
    free(m->bu);
    free(m->bd);
}

/* The activation formulas, literally. */
static inline double fx_act(const fx_mlp *m, double g, double u)
{
    switch (m->act) {
    case MOE_ACT_SILU_GLU: return g / (1.0 + exp(-g)) * u;
    case MOE_ACT_SILU_GLU_CLAMP:
        g = fmin(g, m->limit);
        u = fmax(-m->limit, fmin(u, m->limit));
        return g / (1.0 + exp(-g)) * u;
    case MOE_ACT_GPTOSS_GLU:
        g = fmin(g, m->limit);
        u = fmax(-m->limit, fmin(u, m->limit));
        return g / (1.0 + exp(-m->alpha * g)) * (u + 1.0);
    }
    return NAN;
}

/* y += scale · mlp(x), every step in double with the literal formulas. */
static inline void fx_mlp_apply(const fx_mlp *m, const double *x, double scale, double *y)
{
    double *hh = fx_alloc(m->i);
    for (int64_t j = 0; j < m->i; j++) {
        double g = m->bg ? m->bg[j] : 0, u = m->bu ? m->bu[j] : 0;
        for (int64_t c = 0; c < m->h; c++) {
            g += x[c] * m->g[j * m->h + c];
            u += x[c] * m->u[j * m->h + c];
        }
        hh[j] = fx_act(m, g, u);
    }
    for (int64_t r = 0; r < m->h; r++) {
        double acc = m->bd ? m->bd[r] : 0;
        for (int64_t j = 0; j < m->i; j++)
            acc += hh[j] * m->d[r * m->i + j];
        y[r] += scale * acc;
    }
    free(hh);
}

/* The route_cfg of a layer's routing description, for the oracle. */
static inline route_cfg fx_route_cfg(const moe_routing_desc *r)
{
    route_cfg c = {"layer",       r->method,         r->score,
                   r->n_experts,  r->top_k,          r->n_group,
                   r->topk_group, r->norm_topk_prob, r->routed_scaling_factor};
    return c;
}

/* Random hidden states: mean 0, deviation 1 per element. */
static inline void fx_hidden(uint64_t seed, size_t n, float *x)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)fx_gauss(seed ^ 0xF00D, i);
}

/* A 64-byte aligned workspace for N_TOKENS (NULL for 0 bytes). */
static inline void *fx_workspace(const moe_layer *l, size_t n_tokens, size_t *size)
{
    *size = moe_layer_workspace_size(l, n_tokens);
    if (*size == 0) return NULL;
    void *p = aligned_alloc(64, (*size + 63) / 64 * 64);
    REQUIRE(p);
    return p;
}

/* A pointer no call returns: a failed create must leave *out holding it. */
static char fx_sentinel_ __attribute__((unused));
#define SENTINEL ((void *)&fx_sentinel_)

/* Open file descriptors of this process. */
static inline int fx_fd_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    REQUIRE(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* This process's mappings of files whose path contains ROOT. */
static inline int fx_map_count(const char *root)
{
    FILE *f = fopen("/proc/self/maps", "r");
    REQUIRE(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, root) != NULL;
    fclose(f);
    return n;
}

/* Forward arguments for N rows of f32 hidden states X (H each) into Y with workspace WS;
 * the optional outputs and token ids unset (callers add what they need). */
static inline moe_forward_args fx_args(size_t n, size_t h, const float *x, float *y, void *ws,
                                       size_t ws_size)
{
    moe_forward_args a = {.size = sizeof a,
                          .n_tokens = n,
                          .hidden_size = h,
                          .hidden = x,
                          .hidden_dtype = MOE_DTYPE_F32,
                          .out = y,
                          .workspace = ws,
                          .workspace_size = ws_size};
    return a;
}

/* The ISA levels to try: each one's caps, capped by what this machine allows. */
static inline size_t fx_levels(moe_cpu_caps *caps, const char **names)
{
    moe_cpu_info info;
    REQUIRE(moe_cpu_query(&info) == MOE_OK);
    size_t n = 0;
    for (int level = MOE_ISA_SCALAR; level <= MOE_ISA_AVX512BF16; level++) {
        moe_cpu_caps c = moe_cpu_caps_from_mask(moe_isa_level_mask((moe_isa_level)level) &
                                                moe_cpu_caps_mask(&info.allowed));
        bool dup = false;
        for (size_t i = 0; i < n; i++)
            dup |= !memcmp(&caps[i], &c, sizeof c);
        if (dup) continue;
        caps[n] = c;
        names[n++] = moe_isa_level_name((moe_isa_level)level);
    }
    return n;
}

#endif
