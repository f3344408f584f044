/* family_deepseek_v4.c — DeepSeek-V4: hash and score layers, fp4/fp8 experts, tensor table. */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/family.h"

typedef struct v4_fields {
    int64_t experts, top_k, moe_inter, n_shared, hash_layers, n_group, topk_group;
    double rsf, swiglu_limit;
    bool norm, clamp;
    const char *method, *scoring, *expert_dtype;
} v4_fields;

static moe_status read_counts(const moe_cfg *c, const moe_model_desc *d, v4_fields *f)
{
    moe_status st =
        moe_cfg_int(c, "n_routed_experts", true, 0, 1, MOE_CFG_MAX_EXPERTS, &f->experts);
    if (st) return st;
    st = moe_cfg_int(c, "num_experts_per_tok", true, 0, 1, MOE_CFG_MAX_EXPERTS, &f->top_k);
    if (st) return st;
    st = moe_cfg_int(c, "moe_intermediate_size", true, 0, 1, MOE_CFG_MAX_DIM, &f->moe_inter);
    if (st) return st;
    st = moe_cfg_int(c, "n_shared_experts", false, 0, 0, MOE_CFG_MAX_SHARED, &f->n_shared);
    if (st) return st;
    if (f->moe_inter * f->n_shared > MOE_CFG_MAX_DIM)
        return moe_cfg_fail(c, MOE_ECONFIG, "n_shared_experts",
                            "%lld × moe_intermediate_size %lld exceeds the limit %lld",
                            (long long)f->n_shared, (long long)f->moe_inter,
                            (long long)MOE_CFG_MAX_DIM);
    st = moe_cfg_int(c, "num_hash_layers", false, 0, 0, MOE_CFG_MAX_LAYERS, &f->hash_layers);
    if (st) return st;
    if (f->hash_layers > d->n_layers)
        return moe_cfg_fail(c, MOE_ECONFIG, "num_hash_layers",
                            "%lld exceeds num_hidden_layers = %d", (long long)f->hash_layers,
                            d->n_layers);
    if (f->hash_layers > 0 && d->vocab_size == 0)
        return moe_cfg_fail(c, MOE_EMISSING, "vocab_size",
                            "required when num_hash_layers > 0 (tid2eid has one row per token)");
    /* V4 configs have no group keys (flat top-k); read them anyway so a config that has
     * them is honoured rather than silently flattened. */
    st = moe_cfg_int(c, "n_group", false, 1, 1, MOE_CFG_MAX_EXPERTS, &f->n_group);
    if (st) return st;
    return moe_cfg_int(c, "topk_group", false, 1, 1, MOE_CFG_MAX_EXPERTS, &f->topk_group);
}

static moe_status read_routing(const moe_cfg *c, v4_fields *f)
{
    moe_status st = moe_cfg_str(c, "topk_method", false, "noaux_tc", &f->method);
    if (st) return st;
    if (strcmp(f->method, "noaux_tc"))
        return moe_cfg_fail(c, MOE_ECONFIG, "topk_method",
                            "'%.64s' is not a deepseek_v4 method (known: noaux_tc)", f->method);
    st = moe_cfg_str(c, "scoring_func", false, "sqrtsoftplus", &f->scoring);
    if (st) return st;
    st = moe_cfg_bool(c, "norm_topk_prob", false, false, &f->norm);
    if (st) return st;
    st = moe_cfg_num(c, "routed_scaling_factor", false, 1.0, 0.0, FLT_MAX, &f->rsf);
    if (st) return st;
    if (!(f->rsf > 0.0))
        return moe_cfg_fail(c, MOE_ECONFIG, "routed_scaling_factor", "%g must be > 0", f->rsf);
    f->clamp = moe_cfg_has(c, "swiglu_limit");
    st = moe_cfg_num(c, "swiglu_limit", false, 0.0, 0.0, FLT_MAX, &f->swiglu_limit);
    if (st) return st;
    if (f->clamp && !(f->swiglu_limit > 0.0))
        return moe_cfg_fail(c, MOE_ECONFIG, "swiglu_limit", "%g must be > 0", f->swiglu_limit);
    return moe_cfg_str(c, "expert_dtype", false, "fp4", &f->expert_dtype);
}

static moe_status map_score(const moe_cfg *c, const char *s, moe_score_func *out)
{
    if (!strcmp(s, "sqrtsoftplus"))
        *out = MOE_SCORE_SQRTSOFTPLUS;
    else if (!strcmp(s, "sigmoid"))
        *out = MOE_SCORE_SIGMOID;
    else if (!strcmp(s, "softmax"))
        *out = MOE_SCORE_SOFTMAX;
    else
        return moe_cfg_fail(c, MOE_ECONFIG, "scoring_func",
                            "unknown scoring function '%.64s' (known: sqrtsoftplus, sigmoid, "
                            "softmax)",
                            s);
    return MOE_OK;
}

/* The routed and shared expert descriptions from expert_dtype and quantization_config. */
static moe_status map_formats(const moe_cfg *c, const moe_model_desc *d, const v4_fields *f,
                              moe_mlp_desc *routed, moe_mlp_desc *shared)
{
    moe_cfg_quant_info q;
    moe_status st = moe_cfg_quant_read(c, false, &q);
    if (st) return st;
    const moe_dtype scale = q.scale_ue8m0 ? MOE_DTYPE_F8_E8M0 : MOE_DTYPE_F32;
    const bool fp8 = q.kind == MOE_QUANT_FP8_BLOCK;
    if (!strcmp(f->expert_dtype, "fp4")) {
        if (d->hidden % 32 || f->moe_inter % 32)
            return moe_cfg_fail(c, MOE_ECONFIG,
                                d->hidden % 32 ? "hidden_size" : "moe_intermediate_size",
                                "%lld is not a multiple of 32, the fp4 (MXFP4) block along K",
                                (long long)(d->hidden % 32 ? d->hidden : f->moe_inter));
        *routed = moe_cfg_mlp(d->hidden, f->moe_inter, MOE_WFMT_MXFP4, MOE_DTYPE_F8_E8M0);
    } else if (!strcmp(f->expert_dtype, "fp8")) {
        if (!fp8)
            return moe_cfg_fail(c, MOE_EMISSING, "quantization_config",
                                "expert_dtype 'fp8' needs an fp8 quantization_config");
        *routed = moe_cfg_mlp(d->hidden, f->moe_inter, MOE_WFMT_FP8_BLOCK, scale);
    } else {
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "expert_dtype",
                            "'%.64s' is not supported (supported: fp4, fp8)", f->expert_dtype);
    }
    *shared = moe_cfg_mlp(d->hidden, f->moe_inter * f->n_shared,
                          fp8 ? MOE_WFMT_FP8_BLOCK : MOE_WFMT_BF16, scale);
    if (f->clamp) {
        routed->activation = shared->activation = MOE_ACT_SILU_GLU_CLAMP;
        routed->swiglu_limit = shared->swiglu_limit = (float)f->swiglu_limit;
    }
    return MOE_OK;
}

moe_status moe_family_deepseek_v4_parse(const moe_cfg *c, moe_model_desc *d)
{
    v4_fields f;
    memset(&f, 0, sizeof f);
    moe_status st = moe_cfg_common(c, d);
    if (st) return st;
    if ((st = read_counts(c, d, &f)) || (st = read_routing(c, &f))) return st;
    moe_routing_desc score, hash;
    memset(&score, 0, sizeof score);
    if ((st = map_score(c, f.scoring, &score.score))) return st;
    score.method = MOE_ROUTE_NOAUX_TC;
    score.n_experts = (int)f.experts;
    score.top_k = (int)f.top_k;
    score.n_group = (int)f.n_group;
    score.topk_group = (int)f.topk_group;
    score.has_correction_bias = true;
    score.norm_topk_prob = f.norm;
    score.routed_scaling_factor = (float)f.rsf;
    if ((st = moe_cfg_check_routing(c, &score, "n_routed_experts", "num_experts_per_tok")))
        return st;
    /* Hash layers take their ids from tid2eid, so groups and the bias play no part. */
    hash = score;
    hash.method = MOE_ROUTE_HASH;
    hash.n_group = hash.topk_group = 1;
    hash.has_correction_bias = false;
    moe_mlp_desc routed, shared;
    if ((st = map_formats(c, d, &f, &routed, &shared))) return st;
    d->num_hash_layers = (int)f.hash_layers;
    if ((st = moe_cfg_alloc_layers(c, d))) return st;
    for (int i = 0; i < d->n_layers; i++) {
        moe_layer_desc *l = &d->layers[i];
        l->kind = i < f.hash_layers ? MOE_LAYER_HASH : MOE_LAYER_MOE;
        l->routing = i < f.hash_layers ? hash : score;
        l->experts = routed;
        l->n_shared = (int)f.n_shared;
        if (f.n_shared > 0) l->shared = shared;
    }
    return MOE_OK;
}

static const moe_mlp_names v4_names = {"w1", "w3", "w2", "weight", "scale"};

moe_status moe_family_deepseek_v4_tensors(const moe_model_desc *d, int layer, moe_spec_list *l)
{
    const moe_layer_desc *ld = &d->layers[layer];
    char prefix[96];
    snprintf(prefix, sizeof prefix, "layers.%d.ffn", layer);
    const int64_t e = ld->routing.n_experts;
    moe_status st = moe_spec_add_router(l, d, layer, prefix);
    if (st) return st;
    if (ld->kind == MOE_LAYER_HASH) {
        const int64_t table[2] = {d->vocab_size, ld->routing.top_k};
        st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTER, MOE_ROLE_TID2EID, MOE_DTYPE_I64,
                          MOE_DTBIT(MOE_DTYPE_I32), 2, table, "%s.gate.tid2eid", prefix);
    } else {
        st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTER, MOE_ROLE_CORRECTION_BIAS, MOE_DTYPE_F32,
                          MOE_MASK_FLOAT, 1, &e, "%s.gate.bias", prefix);
    }
    if (st) return st;
    return moe_spec_add_experts(l, d, layer, prefix, &v4_names);
}
