/* family_deepseek_v4.c — DeepSeek-V4: hash and score layers, fp4/fp8/float experts, tensors. */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/family.h"

/* The defaults are those of transformers' DeepseekV4Config and FineGrainedFP8Config. */
#define V4_HASH_LAYERS 3
#define V4_SHARED 1
#define V4_RSF 1.5
#define V4_SWIGLU_LIMIT 10.0

typedef struct v4_fields {
    int64_t experts, top_k, moe_inter, n_shared, n_group, topk_group;
    double rsf, swiglu_limit;
    const char *method, *scoring, *experts_key;
} v4_fields;

static moe_status read_counts(const moe_cfg *c, v4_fields *f)
{
    /* transformers' attribute_map makes num_local_experts another name of n_routed_experts. */
    moe_status st = moe_cfg_int_either(c, "n_routed_experts", "num_local_experts", true, 0, 1,
                                       MOE_CFG_MAX_EXPERTS, &f->experts, &f->experts_key);
    if (st) return st;
    st = moe_cfg_int(c, "num_experts_per_tok", true, 0, 1, MOE_CFG_MAX_EXPERTS, &f->top_k);
    if (st) return st;
    st = moe_cfg_int(c, "moe_intermediate_size", true, 0, 1, MOE_CFG_MAX_DIM, &f->moe_inter);
    if (st) return st;
    st = moe_cfg_int(c, "n_shared_experts", false, V4_SHARED, 0, MOE_CFG_MAX_SHARED, &f->n_shared);
    if (st) return st;
    if (f->moe_inter * f->n_shared > MOE_CFG_MAX_DIM)
        return moe_cfg_fail(c, MOE_ECONFIG, "n_shared_experts",
                            "%lld × moe_intermediate_size %lld exceeds the limit %lld",
                            (long long)f->n_shared, (long long)f->moe_inter,
                            (long long)MOE_CFG_MAX_DIM);
    /* V4 configs have no group keys (flat top-k); read them anyway so a config that has
     * them is honoured rather than silently flattened. */
    st = moe_cfg_int(c, "n_group", false, 1, 1, MOE_CFG_MAX_EXPERTS, &f->n_group);
    if (st) return st;
    return moe_cfg_int(c, "topk_group", false, 1, 1, MOE_CFG_MAX_EXPERTS, &f->topk_group);
}

/* The hash layers of N layers into HASH: mlp_layer_types ("hash_moe" or "moe" per layer, what
 * transformers 5 writes) or the older num_hash_layers (the first N are hash layers); both
 * present must agree; neither gives transformers' default of 3. */
static moe_status read_layer_types(const moe_cfg *c, int n, bool *hash)
{
    int64_t n_hash = V4_HASH_LAYERS;
    const bool has_count = moe_cfg_has(c, "num_hash_layers");
    moe_status st =
        moe_cfg_int(c, "num_hash_layers", false, n_hash, 0, MOE_CFG_MAX_LAYERS, &n_hash);
    if (st) return st;
    const json_t *v = json_object_get(c->obj, "mlp_layer_types");
    if (!v || json_is_null(v)) {
        if (has_count && n_hash > n)
            return moe_cfg_fail(c, MOE_ECONFIG, "num_hash_layers",
                                "%lld exceeds num_hidden_layers = %d", (long long)n_hash, n);
        for (int i = 0; i < n; i++) /* transformers keeps min(n, 3) for the default */
            hash[i] = i < n_hash;
        return MOE_OK;
    }
    if (!json_is_array(v))
        return moe_cfg_fail(c, MOE_EJSON, "mlp_layer_types", "must be an array of strings");
    if (json_array_size(v) != (size_t)n)
        return moe_cfg_fail(c, MOE_ECONFIG, "mlp_layer_types",
                            "has %zu entries; num_hidden_layers is %d", json_array_size(v), n);
    for (int i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_string(e))
            return moe_cfg_fail(c, MOE_EJSON, "mlp_layer_types", "element %d is not a string", i);
        const char *t = json_string_value(e);
        if (strcmp(t, "hash_moe") && strcmp(t, "moe"))
            return moe_cfg_fail(c, MOE_ECONFIG, "mlp_layer_types",
                                "element %d '%.64s' is not one of \"hash_moe\", \"moe\"", i, t);
        hash[i] = !strcmp(t, "hash_moe");
        if (has_count && hash[i] != (i < n_hash))
            return moe_cfg_fail(c, MOE_ECONFIG, "mlp_layer_types",
                                "element %d '%s' disagrees with num_hash_layers = %lld (layers "
                                "below it are \"hash_moe\", the rest \"moe\")",
                                i, t, (long long)n_hash);
    }
    return MOE_OK;
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
    /* transformers' V4 routers always renormalise the selected weights. */
    bool norm;
    st = moe_cfg_bool(c, "norm_topk_prob", false, true, &norm);
    if (st) return st;
    if (!norm)
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "norm_topk_prob",
                            "false is not supported for deepseek_v4 (its routers always "
                            "renormalise)");
    st = moe_cfg_num(c, "routed_scaling_factor", false, V4_RSF, 0.0, FLT_MAX, &f->rsf);
    if (st) return st;
    if (!(f->rsf > 0.0))
        return moe_cfg_fail(c, MOE_ECONFIG, "routed_scaling_factor", "%g must be > 0", f->rsf);
    st = moe_cfg_num(c, "swiglu_limit", false, V4_SWIGLU_LIMIT, 0.0, FLT_MAX, &f->swiglu_limit);
    if (st) return st;
    if (!(f->swiglu_limit > 0.0))
        return moe_cfg_fail(c, MOE_ECONFIG, "swiglu_limit", "%g must be > 0", f->swiglu_limit);
    if ((st = moe_cfg_check_act(c))) return st;
    return moe_cfg_check_no_mlp_bias(c);
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

/* The routed experts' expert_dtype: quantization_config's (transformers 5 moves it there),
 * else the top-level one, else FineGrainedFP8Config's default "fp8"; the two present and
 * different is MOE_ECONFIG. */
static moe_status expert_dtype_of(const moe_cfg *c, const moe_cfg_quant_info *q, const char **out)
{
    const char *top;
    moe_status st = moe_cfg_str(c, "expert_dtype", false, NULL, &top);
    if (st) return st;
    if (top && strcmp(top, "fp8") && strcmp(top, "fp4"))
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "expert_dtype",
                            "'%.64s' is not supported (supported: fp4, fp8)", top);
    if (top && q->expert_dtype && strcmp(top, q->expert_dtype))
        return moe_cfg_fail(c, MOE_ECONFIG, "expert_dtype",
                            "'%s' disagrees with quantization_config.expert_dtype = '%s'", top,
                            q->expert_dtype);
    *out = q->expert_dtype ? q->expert_dtype : top ? top : "fp8";
    return MOE_OK;
}

/* The routed and shared expert descriptions. Without a quantization_config every weight is
 * a float tensor (a dequantised checkpoint, as transformers saves one); expert_dtype only
 * describes quantised checkpoints. */
static moe_status map_formats(const moe_cfg *c, const moe_model_desc *d, const v4_fields *f,
                              moe_mlp_desc *routed, moe_mlp_desc *shared)
{
    moe_cfg_quant_info q;
    const char *expert_dtype = NULL;
    moe_status st = moe_cfg_quant_read(c, false, &q);
    if (st || (st = expert_dtype_of(c, &q, &expert_dtype))) return st;
    const moe_dtype scale = q.scale_ue8m0 ? MOE_DTYPE_F8_E8M0 : MOE_DTYPE_F32;
    const bool fp8 = q.kind == MOE_QUANT_FP8_BLOCK;
    if (!fp8) {
        *routed = moe_cfg_mlp(d->hidden, f->moe_inter, MOE_WFMT_BF16, MOE_DTYPE_INVALID);
    } else if (!strcmp(expert_dtype, "fp4")) {
        if (d->hidden % 32 || f->moe_inter % 32)
            return moe_cfg_fail(c, MOE_ECONFIG,
                                d->hidden % 32 ? "hidden_size" : "moe_intermediate_size",
                                "%lld is not a multiple of 32, the fp4 (MXFP4) block along K",
                                (long long)(d->hidden % 32 ? d->hidden : f->moe_inter));
        *routed = moe_cfg_mlp(d->hidden, f->moe_inter, MOE_WFMT_MXFP4, MOE_DTYPE_F8_E8M0);
    } else {
        *routed = moe_cfg_mlp(d->hidden, f->moe_inter, MOE_WFMT_FP8_BLOCK, scale);
    }
    *shared = moe_cfg_mlp(d->hidden, f->moe_inter * f->n_shared,
                          fp8 ? MOE_WFMT_FP8_BLOCK : MOE_WFMT_BF16, scale);
    /* transformers clamps both the routed and the shared experts. */
    routed->activation = shared->activation = MOE_ACT_SILU_GLU_CLAMP;
    routed->swiglu_limit = shared->swiglu_limit = (float)f->swiglu_limit;
    return MOE_OK;
}

static moe_status fill_layers(const moe_cfg *c, const v4_fields *f, const bool *hash,
                              const moe_routing_desc *score, moe_model_desc *d)
{
    /* Hash layers take their ids from tid2eid, so groups and the bias play no part. */
    moe_routing_desc by_token = *score;
    by_token.method = MOE_ROUTE_HASH;
    by_token.n_group = by_token.topk_group = 1;
    by_token.has_correction_bias = false;
    moe_mlp_desc routed, shared;
    moe_status st = map_formats(c, d, f, &routed, &shared);
    if (st || (st = moe_cfg_alloc_layers(c, d))) return st;
    d->num_hash_layers = 0;
    for (int i = 0; i < d->n_layers; i++) {
        moe_layer_desc *l = &d->layers[i];
        l->kind = hash[i] ? MOE_LAYER_HASH : MOE_LAYER_MOE;
        l->routing = hash[i] ? by_token : *score;
        l->experts = routed;
        l->n_shared = (int)f->n_shared;
        if (f->n_shared > 0) l->shared = shared;
        d->num_hash_layers += hash[i];
    }
    if (d->num_hash_layers > 0 && d->vocab_size == 0)
        return moe_cfg_fail(c, MOE_EMISSING, "vocab_size",
                            "required with hash layers (tid2eid has one row per token)");
    return MOE_OK;
}

static moe_status parse_with(const moe_cfg *c, moe_model_desc *d, bool *hash)
{
    v4_fields f;
    memset(&f, 0, sizeof f);
    moe_status st;
    if ((st = read_counts(c, &f)) || (st = read_layer_types(c, d->n_layers, hash)) ||
        (st = read_routing(c, &f)))
        return st;
    moe_routing_desc score;
    memset(&score, 0, sizeof score);
    if ((st = map_score(c, f.scoring, &score.score))) return st;
    score.method = MOE_ROUTE_NOAUX_TC;
    score.n_experts = (int)f.experts;
    score.top_k = (int)f.top_k;
    score.n_group = (int)f.n_group;
    score.topk_group = (int)f.topk_group;
    score.has_correction_bias = true;
    score.norm_topk_prob = true;
    score.routed_scaling_factor = (float)f.rsf;
    if ((st = moe_cfg_check_routing(c, &score, f.experts_key, "num_experts_per_tok"))) return st;
    return fill_layers(c, &f, hash, &score, d);
}

moe_status moe_family_deepseek_v4_parse(const moe_cfg *c, moe_model_desc *d)
{
    moe_status st = moe_cfg_common(c, d);
    if (st) return st;
    bool *hash = moe_calloc((size_t)d->n_layers, sizeof *hash);
    if (!hash) return moe_error(MOE_ENOMEM, "%s: allocating the layer plan", c->name);
    st = parse_with(c, d, hash);
    moe_free(hash);
    return st;
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
