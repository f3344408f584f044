/* family.h — internal to src/model: config readers and table builders the families share. */
#ifndef MOE_MODEL_FAMILY_H
#define MOE_MODEL_FAMILY_H

#include <jansson.h>

#include "model/model.h"

/* Documented limits (docs/models.md). They keep every derived size far from overflow and a
 * per-layer tensor table small, and they are generous next to every shipped model. */
#define MOE_CFG_MAX_DIM (INT64_C(1) << 20) /* hidden, intermediate (shared: after × n) */
#define MOE_CFG_MAX_LAYERS 4096
#define MOE_CFG_MAX_EXPERTS 4096
#define MOE_CFG_MAX_SHARED 64
#define MOE_CFG_MAX_VOCAB (INT64_C(1) << 24)

/* ---- Reading fields of one JSON object ----------------------------------------------- */

/* Where the fields are read from: the object, the config's name for messages, and the path
 * of the object inside the config ("" for the top level, "quantization_config." below). */
typedef struct moe_cfg {
    const json_t *obj;
    const char *name;
    const char *prefix;
} moe_cfg;

/* Each reader: a missing key or a JSON null takes DEF when REQUIRED is false and is
 * MOE_EMISSING otherwise; a value of the wrong JSON type is MOE_EJSON; a value outside
 * [LO, HI] is MOE_ECONFIG. Every message names the config and the field. */
moe_status moe_cfg_int(const moe_cfg *c, const char *key, bool required, int64_t def, int64_t lo,
                       int64_t hi, int64_t *out);
/* Integers and reals; the value must be finite and inside [LO, HI]. */
moe_status moe_cfg_num(const moe_cfg *c, const char *key, bool required, double def, double lo,
                       double hi, double *out);
moe_status moe_cfg_bool(const moe_cfg *c, const char *key, bool required, bool def, bool *out);
/* *OUT points into the JSON document (valid while it lives); DEF may be NULL. */
moe_status moe_cfg_str(const moe_cfg *c, const char *key, bool required, const char *def,
                       const char **out);
/* True when KEY is present and not null. */
bool moe_cfg_has(const moe_cfg *c, const char *key);

/* A MOE_ECONFIG message that starts with the config's name and the field. */
moe_status moe_cfg_fail(const moe_cfg *c, moe_status status, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- Fields several families read the same way --------------------------------------- */

/* An integer a config may spell KEY or ALIAS (transformers' attribute_map: configs written by
 * transformers 5 use one name, hub configs the other). Either may be absent; both present with
 * different values is MOE_ECONFIG naming both. *USED (may be NULL) gets the name present (KEY
 * when both or neither are), for later messages. */
moe_status moe_cfg_int_either(const moe_cfg *c, const char *key, const char *alias, bool required,
                              int64_t def, int64_t lo, int64_t hi, int64_t *out, const char **used);

/* hidden_act must be "silu" (or "swish", the same function in transformers' ACT2FN), the
 * activation of every SiLU-GLU MLP libmoe computes; anything else is MOE_EUNSUPPORTED. */
moe_status moe_cfg_check_act(const moe_cfg *c);

/* mlp_bias (deepseek_v2, deepseek_v4) must be absent or false: MOE_EUNSUPPORTED otherwise. */
moe_status moe_cfg_check_no_mlp_bias(const moe_cfg *c);

/* num_hidden_layers, hidden_size, vocab_size (optional; 0 when absent) and
 * torch_dtype (or the newer "dtype"; default bfloat16) into D. */
moe_status moe_cfg_common(const moe_cfg *c, moe_model_desc *d);

/* The quantisation a config declares. */
typedef enum moe_cfg_quant {
    MOE_QUANT_NONE = 0,
    MOE_QUANT_FP8_BLOCK, /* fp8, e4m3, weight_block_size [128, 128] */
    MOE_QUANT_MXFP4,     /* gpt-oss */
    /* compressed-tensors pack-quantized, symmetric int4 (config_int4.c) */
    MOE_QUANT_INT4_GROUP,
} moe_cfg_quant;

typedef struct moe_cfg_quant_info {
    moe_cfg_quant kind;
    bool scale_ue8m0;         /* scale_fmt "ue8m0" (absent or "float": f32 scales) */
    const char *expert_dtype; /* fp8: "fp8", "fp4" or NULL when absent (points into the JSON) */
    int group_size;           /* INT4_GROUP: weights.group_size (a multiple of 32) */
    const json_t *ignore;     /* INT4_GROUP: the ignore list (strings), or NULL */
} moe_cfg_quant_info;

/* Reads quantization_config. ALLOW_MXFP4 is true for gpt-oss only. Any other quant_method,
 * fmt, scale_fmt, expert_dtype or block size is MOE_EUNSUPPORTED naming it. */
moe_status moe_cfg_quant_read(const moe_cfg *c, bool allow_mxfp4, moe_cfg_quant_info *out);

/* moe_cfg_quant_read (no MXFP4) that also reads quant_method "compressed-tensors"
 * (moe_cfg_int4_read): for the families whose checkpoints ship INT4 experts (DeepSeek-V3 /
 * Kimi-K2). C is the object holding quantization_config (the top level, or text_config). */
moe_status moe_cfg_quant_read_int4(const moe_cfg *c, moe_cfg_quant_info *out);

/* compressed-tensors' quantization_config Q (config_int4.c; docs/formats.md): format
 * "pack-quantized", quantization_status "compressed", one config group with targets
 * ["Linear"], weights {num_bits 4, type int, symmetric, strategy group, group_size a
 * multiple of 32, not dynamic, no actorder}, no input / output activations, no sparsity or
 * transform; the ignore list's "re:" entries compile as POSIX EREs. Anything else is
 * MOE_EUNSUPPORTED (MOE_EJSON, MOE_EMISSING) naming the field. Sets kind INT4_GROUP. */
moe_status moe_cfg_int4_read(const moe_cfg *q, moe_cfg_quant_info *out);

/* The ignore list compiled (exact names sorted, "re:" entries as regexes matched from the
 * start, as Python's re.match). */
typedef struct moe_int4_ignore moe_int4_ignore;
moe_status moe_int4_ignore_make(const moe_cfg_quant_info *q, moe_int4_ignore **out);
void moe_int4_ignore_free(moe_int4_ignore *m);

/* Whether the MLP group at PREFIX is INT4 (no module of it ignored: *out INT4_GROUP) or
 * unquantised (all of them: BF16): its modules are PREFIX.experts.E.<proj> for E <
 * N_EXPERTS, or PREFIX.<proj> when N_EXPERTS is 0, with PROJ the three projection names. A
 * group partly ignored is MOE_EUNSUPPORTED naming one module of each kind (C for the
 * message). */
moe_status moe_int4_mlp_format(const moe_int4_ignore *m, const moe_cfg *c, const char *prefix,
                               const char *const proj[3], int n_experts, moe_weight_format *out);

/* The expert format of a non-V4 family from its quantization: FP8_BLOCK or BF16; an
 * expert_dtype "fp4" is MOE_EUNSUPPORTED (only deepseek_v4 has fp4 experts). */
moe_status moe_cfg_plain_format(const moe_cfg *c, const moe_cfg_quant_info *q,
                                moe_weight_format *out);

/* The plain SiLU-GLU MLP description in format BF16 or FP8_BLOCK (with SCALE for FP8). */
moe_mlp_desc moe_cfg_mlp(int64_t hidden, int64_t intermediate, moe_weight_format format,
                         moe_dtype scale);

/* Validates a scored routing description with the router's own rules (moe_route_check in
 * src/route/route_check.h): top_k in [1, E], n_group ≥ 1 dividing E, topk_group in
 * [1, n_group], top_k ≤ topk_group × E/n_group, ≥ 2 experts per group when the group score is
 * a top-2 sum, and a scoring function the method allows. MOE_ECONFIG naming the field; the
 * *_KEY arguments are the config's names for E and top_k. */
moe_status moe_cfg_check_routing(const moe_cfg *c, const moe_routing_desc *r,
                                 const char *experts_key, const char *topk_key);

/* Allocates D->layers (n_layers entries, zeroed, index set). */
moe_status moe_cfg_alloc_layers(const moe_cfg *c, moe_model_desc *d);

/* The family parsers: each fills D (layers included) from the top-level object. */
moe_status moe_family_deepseek_parse(const moe_cfg *c, moe_family family, moe_model_desc *d);
moe_status moe_family_deepseek_v4_parse(const moe_cfg *c, moe_model_desc *d);
moe_status moe_family_qwen3_parse(const moe_cfg *c, moe_model_desc *d);
moe_status moe_family_mixtral_parse(const moe_cfg *c, moe_model_desc *d);
moe_status moe_family_gpt_oss_parse(const moe_cfg *c, moe_model_desc *d);
/* deepseek_v32, glm4_moe, glm_moe_dsa, glm4_moe_lite: DeepSeek-V3's MoE block (family_v3_moe.c). */
moe_status moe_family_v3_moe_parse(const moe_cfg *c, moe_family family, moe_model_desc *d);
moe_status moe_family_minimax_m2_parse(const moe_cfg *c, moe_model_desc *d);
moe_status moe_family_kimi_k25_parse(const moe_cfg *c, moe_model_desc *d);
moe_status moe_family_qwen3_next_parse(const moe_cfg *c, moe_model_desc *d);
moe_status moe_family_qwen3_5_moe_parse(const moe_cfg *c, moe_model_desc *d);
moe_status moe_family_ernie4_5_moe_parse(const moe_cfg *c, moe_model_desc *d);
moe_status moe_family_llama4_parse(const moe_cfg *c, moe_model_desc *d);

/* Qwen3's layer plan (Qwen3-MoE, Qwen3-Next): decoder_sparse_step and mlp_only_layers mark the
 * dense layers in DENSE (n_layers entries, zeroed); *ANY_DENSE / *ANY_MOE summarise it. */
moe_status moe_family_qwen3_plan_layers(const moe_cfg *c, int n_layers, int64_t experts,
                                        bool *dense, bool *any_dense, bool *any_moe);

/* torch_dtype (or transformers 5's "dtype"; default bfloat16) into d->router_dtype. */
moe_status moe_cfg_dtype(const moe_cfg *c, moe_model_desc *d);

/* ---- Building a layer's tensor table ------------------------------------------------- */

typedef struct moe_spec_list {
    moe_tensor_spec *v;
    size_t n, cap;
} moe_spec_list;

#define MOE_DTBIT(d) (1u << (unsigned)(d))
#define MOE_MASK_FLOAT                                                                             \
    (MOE_DTBIT(MOE_DTYPE_BF16) | MOE_DTBIT(MOE_DTYPE_F16) | MOE_DTBIT(MOE_DTYPE_F32))

/* Appends one spec; the name is printf-formatted. NDIM ≤ 4. */
moe_status moe_spec_add(moe_spec_list *l, int layer, int expert, moe_tensor_group group,
                        moe_tensor_role role, moe_dtype dtype, uint32_t mask, int ndim,
                        const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 10, 11)));

/* How a family spells the three projections of an MLP below PREFIX:
 * PREFIX.<gate>.<weight>, PREFIX.<gate>.<scale> and the same for up and down. */
typedef struct moe_mlp_names {
    const char *gate, *up, *down;
    const char *weight; /* "weight" */
    const char *scale;  /* "weight_scale_inv" or "scale" */
} moe_mlp_names;

/* Appends gate, [gate scale], up, [up scale], down, [down scale] of MLP M (formats BF16,
 * FP8_BLOCK, and MXFP4 as separate packed [out, in/2] tensors, DeepSeek-V4 style). */
moe_status moe_spec_add_mlp(moe_spec_list *l, const char *prefix, const moe_mlp_names *names,
                            const moe_mlp_desc *m, moe_tensor_group group, int layer, int expert);

/* Appends the router weight PREFIX.gate.weight [E, H] of layer LAYER. */
moe_status moe_spec_add_router(moe_spec_list *l, const moe_model_desc *d, int layer,
                               const char *prefix);

/* Appends every routed expert PREFIX.experts.X and, when the layer has them, the shared
 * experts PREFIX.shared_experts, spelled with NAMES. */
moe_status moe_spec_add_experts(moe_spec_list *l, const moe_model_desc *d, int layer,
                                const char *prefix, const moe_mlp_names *names);

/* The per-family tables: append layer LAYER's tensors to L. */
moe_status moe_family_deepseek_tensors(const moe_model_desc *d, int layer, moe_spec_list *l);
moe_status moe_family_deepseek_v4_tensors(const moe_model_desc *d, int layer, moe_spec_list *l);
moe_status moe_family_qwen3_tensors(const moe_model_desc *d, int layer, moe_spec_list *l);
moe_status moe_family_mixtral_tensors(const moe_model_desc *d, int layer, moe_spec_list *l);
moe_status moe_family_gpt_oss_tensors(const moe_model_desc *d, int layer, moe_spec_list *l);
moe_status moe_family_minimax_m2_tensors(const moe_model_desc *d, int layer, moe_spec_list *l);
moe_status moe_family_kimi_k25_tensors(const moe_model_desc *d, int layer, moe_spec_list *l);
/* Kimi-K2.5's other spelling of NAME (what transformers 5.25 saves), into BUF. */
bool moe_family_kimi_k25_alt_name(const char *name, char *buf, size_t cap);
/* The DeepSeek-V3 layout of layer LAYER below PREFIX (DeepSeek's own: model.layers.L.mlp). */
moe_status moe_family_deepseek_tensors_under(const moe_model_desc *d, int layer, const char *prefix,
                                             moe_spec_list *l);
moe_status moe_family_qwen3_next_tensors(const moe_model_desc *d, int layer, moe_spec_list *l);
moe_status moe_family_ernie4_5_moe_tensors(const moe_model_desc *d, int layer, moe_spec_list *l);
moe_status moe_family_llama4_tensors(const moe_model_desc *d, int layer, moe_spec_list *l);

#endif
