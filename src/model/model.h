/* model.h — internal: the model description parsed from config.json, and each family's tensors. */
#ifndef MOE_MODEL_MODEL_H
#define MOE_MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe.h"

typedef enum moe_family {
    MOE_FAMILY_DEEPSEEK_V2 = 0, /* model_type "deepseek_v2" */
    MOE_FAMILY_DEEPSEEK_V3,     /* "deepseek_v3" (DeepSeek-V3, R1) */
    MOE_FAMILY_KIMI_K2,         /* "kimi_k2" */
    MOE_FAMILY_DEEPSEEK_V4,     /* "deepseek_v4" */
    MOE_FAMILY_QWEN3_MOE,       /* "qwen3_moe" */
    MOE_FAMILY_MIXTRAL,         /* "mixtral" */
    MOE_FAMILY_GPT_OSS,         /* "gpt_oss" */
    MOE_FAMILY_DEEPSEEK_V32,    /* "deepseek_v32" (DeepSeek-V3.2) */
    MOE_FAMILY_GLM4_MOE,        /* "glm4_moe" (GLM-4.5, 4.6, 4.7) */
    MOE_FAMILY_GLM_MOE_DSA,     /* "glm_moe_dsa" (GLM-5) */
    MOE_FAMILY_GLM4_MOE_LITE,   /* "glm4_moe_lite" (GLM-4.7-Flash) */
    MOE_FAMILY_MINIMAX_M2,      /* "minimax_m2" (MiniMax-M2, M2.1, M2.5, M2.7) */
    MOE_FAMILY_KIMI_K25,        /* "kimi_k25" (Kimi-K2.5: a DeepSeek-V3 text_config) */
    MOE_FAMILY_QWEN3_NEXT,      /* "qwen3_next" (Qwen3-Next) */
    MOE_FAMILY_QWEN3_5_MOE,     /* "qwen3_5_moe" (Qwen3.5-MoE; text_config nested) */
    MOE_FAMILY_ERNIE4_5_MOE,    /* "ernie4_5_moe" (ERNIE-4.5 MoE) */
    MOE_FAMILY_LLAMA4,          /* "llama4" (Llama-4 Scout / Maverick; text_config nested) */
    MOE_FAMILY_COUNT_
} moe_family;

/* moe_layer_kind is public: see include/moe.h. */

/* moe_score_func and moe_route_method are public: see include/moe.h. */

/* moe_weight_format is public: see include/moe.h. */

typedef enum moe_activation {
    MOE_ACT_SILU_GLU = 0,   /* down(silu(gate x) * up x) */
    MOE_ACT_SILU_GLU_CLAMP, /* the same with gate clamped to <= limit, up to ±limit (DeepSeek-V4) */
    MOE_ACT_GPTOSS_GLU,     /* g=min(gate,limit), u=clamp(up,±limit), g*sigmoid(alpha*g)*(u+1) */
} moe_activation;

typedef struct moe_routing_desc {
    moe_route_method method;
    moe_score_func score;
    int n_experts;
    int top_k;
    int n_group;                 /* 1 when the config has no groups */
    int topk_group;              /* 1 when the config has no groups */
    bool has_correction_bias;    /* e_score_correction_bias / DeepSeek-V4 ffn.gate.bias */
    bool has_router_bias;        /* gpt-oss router bias, added to the logits */
    bool norm_topk_prob;         /* renormalise the selected weights */
    float routed_scaling_factor; /* 1.0 when absent */
    float renorm_min;            /* SOFTMAX_BIAS: moe_norm_min (ERNIE-4.5); 0 otherwise */
} moe_routing_desc;

/* One MLP group: its shape, number format and activation. */
typedef struct moe_mlp_desc {
    int64_t hidden;
    int64_t intermediate;
    moe_weight_format format;
    moe_dtype scale_dtype;   /* FP8_BLOCK: F32 or F8_E8M0; MXFP4: F8_E8M0; BF16: INVALID */
    int block_out, block_in; /* FP8_BLOCK: 128, 128 (weight_block_size); MXFP4: 1, 32 */
    moe_activation activation;
    float swiglu_limit; /* SILU_GLU_CLAMP and GPTOSS_GLU */
    float alpha;        /* GPTOSS_GLU: 1.702 */
    bool has_bias;      /* gpt-oss expert biases */
} moe_mlp_desc;

typedef struct moe_layer_desc {
    int index;
    moe_layer_kind kind;
    moe_routing_desc routing; /* MOE and HASH layers */
    moe_mlp_desc experts;     /* MOE and HASH layers: each routed expert */
    int n_shared;             /* shared experts (0 if none) */
    moe_mlp_desc shared; /* n_shared > 0: ONE MLP of width intermediate (already × n_shared) */
    moe_mlp_desc dense;  /* DENSE layers */
    bool shared_gate;    /* the shared MLP's output × sigmoid(x · w), w its one-output gate
                            [1, H] (Qwen3-Next, Qwen3.5-MoE: shared_expert_gate) */
    bool scale_input;    /* the routed experts see x · weight and are added with weight 1
                            (Llama-4: the sigmoid of the chosen logit scales the input) */
} moe_layer_desc;

typedef struct moe_model_desc {
    moe_family family;
    char model_type[32];
    int n_layers;
    int64_t hidden;
    int64_t vocab_size;
    moe_dtype router_dtype; /* from torch_dtype: BF16, F16 or F32 (what gen writes; any of
                               the three is accepted when reading tensors) */
    int num_hash_layers;    /* DeepSeek-V4; 0 otherwise */
    moe_layer_desc *layers; /* n_layers entries, owned */
} moe_model_desc;

/* Parses config.json text. Every inconsistency is MOE_ECONFIG (or MOE_EMISSING for an absent
 * required field, MOE_EJSON for a wrong JSON type, MOE_EUNSUPPORTED for an unknown model_type
 * or quantisation), naming the field. NAME is used in messages. *out is untouched on error. */
moe_status moe_model_desc_parse(const char *json, size_t len, const char *name,
                                moe_model_desc *out);

/* Reads and parses PATH. */
moe_status moe_model_desc_load(const char *path, moe_model_desc *out);

void moe_model_desc_free(moe_model_desc *desc);

const char *moe_family_name(moe_family family); /* the model_type string */
/* The family whose model_type is NAME; false (and *out untouched) for an unknown name. */
bool moe_family_from_name(const char *name, moe_family *out);
const char *moe_activation_name(moe_activation activation);

/* The public description of layer LD of model D (model_info.c); keeps out->size. */
void moe_layer_info_of(const moe_model_desc *d, const moe_layer_desc *ld, moe_layer_info *out);

/* MOE_EINVAL naming FN when INFO is NULL or its size is smaller than this version writes. */
moe_status moe_layer_info_check_size(const char *fn, const moe_layer_info *info);

/* The router parameters of routing R of model D (no tensors attached: correction_bias and
 * tid2eid are NULL; vocab_size is set for hash routing). */
moe_router_params moe_router_params_of(const moe_model_desc *d, const moe_routing_desc *r);

/* ---- The tensors a family's checkpoint holds for one layer --------------------------- */

typedef enum moe_tensor_group {
    MOE_GROUP_ROUTER = 0, /* router weight, router bias, correction bias, tid2eid */
    MOE_GROUP_ROUTED,     /* routed experts */
    MOE_GROUP_SHARED,     /* shared experts */
    MOE_GROUP_DENSE,      /* the MLP of a dense layer */
} moe_tensor_group;

typedef enum moe_tensor_role {
    MOE_ROLE_ROUTER_WEIGHT = 0, /* [E, H] */
    MOE_ROLE_ROUTER_BIAS,       /* [E] (gpt-oss) */
    MOE_ROLE_CORRECTION_BIAS,   /* [E] e_score_correction_bias */
    MOE_ROLE_TID2EID,           /* [vocab, K] I32 or I64 */
    MOE_ROLE_GATE,              /* [I, H] (or packed / stacked per format and family) */
    MOE_ROLE_GATE_SCALE,
    MOE_ROLE_UP,
    MOE_ROLE_UP_SCALE,
    MOE_ROLE_DOWN, /* [H, I] */
    MOE_ROLE_DOWN_SCALE,
    MOE_ROLE_GATE_UP, /* gpt-oss fused, rows interleaved gate/up */
    MOE_ROLE_GATE_UP_SCALE,
    MOE_ROLE_GATE_UP_BIAS,
    MOE_ROLE_DOWN_BIAS,
    MOE_ROLE_GATE_SHAPE, /* INT4 (compressed-tensors): weight_shape [2] = [out, in] */
    MOE_ROLE_UP_SHAPE,
    MOE_ROLE_DOWN_SHAPE,
    MOE_ROLE_SHARED_GATE, /* [1, H]: the shared MLP's sigmoid gate (Qwen3-Next) */
} moe_tensor_role;

const char *moe_tensor_group_name(moe_tensor_group group); /* "router", "routed", ... */
const char *moe_tensor_role_name(moe_tensor_role role);    /* "router_weight", "gate", ... */

/* One tensor a checkpoint must (or may) hold. */
typedef struct moe_tensor_spec {
    char name[160]; /* the canonical name (what gen writes) */
    moe_tensor_group group;
    moe_tensor_role role;
    int layer;
    int expert;          /* -1 unless the tensor belongs to one expert */
    moe_dtype dtype;     /* the dtype gen writes */
    uint32_t dtype_mask; /* every accepted dtype: bit (1u << moe_dtype) */
    int ndim;
    int64_t shape[4];
    bool optional;
} moe_tensor_spec;

/* Lists the tensors of layer LAYER in a stable order. *out is allocated (moe_free); a layer
 * of a 256-expert model has a few thousand entries. */
moe_status moe_model_layer_tensors(const moe_model_desc *desc, int layer, moe_tensor_spec **out,
                                   size_t *count);

/* Other accepted spellings of a canonical name (DeepSeek-V4 with a "model." prefix; Kimi-K2.5
 * with transformers' "language_model.model.blocks." for "language_model.model.layers.").
 * Writes the alternative into BUF and returns true if there is one. */
bool moe_model_alt_name(const moe_model_desc *desc, const char *name, char *buf, size_t cap);

#endif
