/* names.c — the printable names of the model-description enums, and model_type lookup. */
#include <string.h>

#include "model/model.h"

static const char *const family_names[MOE_FAMILY_COUNT_] = {
    [MOE_FAMILY_DEEPSEEK_V2] = "deepseek_v2", [MOE_FAMILY_DEEPSEEK_V3] = "deepseek_v3",
    [MOE_FAMILY_KIMI_K2] = "kimi_k2",         [MOE_FAMILY_DEEPSEEK_V4] = "deepseek_v4",
    [MOE_FAMILY_QWEN3_MOE] = "qwen3_moe",     [MOE_FAMILY_MIXTRAL] = "mixtral",
    [MOE_FAMILY_GPT_OSS] = "gpt_oss",
    [MOE_FAMILY_DEEPSEEK_V32] = "deepseek_v32",
    [MOE_FAMILY_GLM4_MOE] = "glm4_moe",
    [MOE_FAMILY_GLM_MOE_DSA] = "glm_moe_dsa",
    [MOE_FAMILY_GLM4_MOE_LITE] = "glm4_moe_lite",
    [MOE_FAMILY_MINIMAX_M2] = "minimax_m2",
    [MOE_FAMILY_KIMI_K25] = "kimi_k25",
    [MOE_FAMILY_QWEN3_NEXT] = "qwen3_next",
    [MOE_FAMILY_QWEN3_5_MOE] = "qwen3_5_moe",
    [MOE_FAMILY_ERNIE4_5_MOE] = "ernie4_5_moe",
    [MOE_FAMILY_LLAMA4] = "llama4",
};

/* Indexes a name table, with "unknown" for any value outside it (including negative ones). */
static const char *name_at(const char *const *table, size_t n, int value)
{
    if (value < 0 || (size_t)value >= n || !table[value]) return "unknown";
    return table[value];
}

#define NAME_AT(table, value) name_at(table, sizeof table / sizeof table[0], (int)(value))

const char *moe_family_name(moe_family family) { return NAME_AT(family_names, family); }

bool moe_family_from_name(const char *name, moe_family *out)
{
    if (!name || !out) return false;
    for (int f = 0; f < MOE_FAMILY_COUNT_; f++) {
        if (!strcmp(name, family_names[f])) {
            *out = (moe_family)f;
            return true;
        }
    }
    return false;
}

const char *moe_layer_kind_name(moe_layer_kind kind)
{
    static const char *const names[] = {
        [MOE_LAYER_DENSE] = "dense", [MOE_LAYER_MOE] = "moe", [MOE_LAYER_HASH] = "hash"};
    return NAME_AT(names, kind);
}

const char *moe_weight_format_name(moe_weight_format format)
{
    static const char *const names[] = {[MOE_WFMT_BF16] = "bf16",
                                        [MOE_WFMT_FP8_BLOCK] = "fp8_block",
                                        [MOE_WFMT_MXFP4] = "mxfp4",
                                        [MOE_WFMT_F32] = "f32",
                                        [MOE_WFMT_F16] = "f16",
                                        [MOE_WFMT_INT4_GROUP] = "int4_group"};
    return NAME_AT(names, format);
}

const char *moe_activation_name(moe_activation activation)
{
    static const char *const names[] = {[MOE_ACT_SILU_GLU] = "silu_glu",
                                        [MOE_ACT_SILU_GLU_CLAMP] = "silu_glu_clamp",
                                        [MOE_ACT_GPTOSS_GLU] = "gptoss_glu"};
    return NAME_AT(names, activation);
}

const char *moe_tensor_group_name(moe_tensor_group group)
{
    static const char *const names[] = {[MOE_GROUP_ROUTER] = "router",
                                        [MOE_GROUP_ROUTED] = "routed",
                                        [MOE_GROUP_SHARED] = "shared",
                                        [MOE_GROUP_DENSE] = "dense"};
    return NAME_AT(names, group);
}

const char *moe_tensor_role_name(moe_tensor_role role)
{
    static const char *const names[] = {
        [MOE_ROLE_ROUTER_WEIGHT] = "router_weight",
        [MOE_ROLE_ROUTER_BIAS] = "router_bias",
        [MOE_ROLE_CORRECTION_BIAS] = "correction_bias",
        [MOE_ROLE_TID2EID] = "tid2eid",
        [MOE_ROLE_GATE] = "gate",
        [MOE_ROLE_GATE_SCALE] = "gate_scale",
        [MOE_ROLE_UP] = "up",
        [MOE_ROLE_UP_SCALE] = "up_scale",
        [MOE_ROLE_DOWN] = "down",
        [MOE_ROLE_DOWN_SCALE] = "down_scale",
        [MOE_ROLE_GATE_UP] = "gate_up",
        [MOE_ROLE_GATE_UP_SCALE] = "gate_up_scale",
        [MOE_ROLE_GATE_UP_BIAS] = "gate_up_bias",
        [MOE_ROLE_DOWN_BIAS] = "down_bias",
        [MOE_ROLE_GATE_SHAPE] = "gate_shape",
        [MOE_ROLE_UP_SHAPE] = "up_shape",
        [MOE_ROLE_DOWN_SHAPE] = "down_shape",
        [MOE_ROLE_SHARED_GATE] = "shared_gate",
    };
    return NAME_AT(names, role);
}
