/* family_qwen3_next.c — Qwen3-Next, Qwen3.5-MoE: softmax top-k, a sigmoid-gated shared expert. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/family.h"

/* What the two families' MoE blocks read (transformers' Qwen3NextSparseMoeBlock and
 * Qwen3_5MoeSparseMoeBlock are the same block). */
typedef struct next_fields {
    int64_t experts, top_k, moe_inter, shared_inter, inter;
    bool norm;
    const char *experts_key;
} next_fields;

static moe_status read_block(const moe_cfg *c, bool any_moe, next_fields *f)
{
    moe_status st;
    if (!any_moe) return MOE_OK;
    st = moe_cfg_int(c, "num_experts_per_tok", true, 0, 1, MOE_CFG_MAX_EXPERTS, &f->top_k);
    if (st) return st;
    st = moe_cfg_int(c, "moe_intermediate_size", true, 0, 1, MOE_CFG_MAX_DIM, &f->moe_inter);
    if (st) return st;
    /* Every MoE block has the shared expert; its width has no neutral default. */
    return moe_cfg_int(c, "shared_expert_intermediate_size", true, 0, 1, MOE_CFG_MAX_DIM,
                       &f->shared_inter);
}

/* The layers from F; quantization_config is read from QC (the top level for both). */
static moe_status fill(const moe_cfg *c, const moe_cfg *qc, const next_fields *f, const bool *dense,
                       moe_model_desc *d)
{
    moe_routing_desc r;
    memset(&r, 0, sizeof r);
    r.method = MOE_ROUTE_SOFTMAX_TOPK;
    r.score = MOE_SCORE_SOFTMAX;
    r.n_experts = (int)f->experts;
    r.top_k = (int)f->top_k;
    r.n_group = r.topk_group = 1;
    r.norm_topk_prob = f->norm;
    r.routed_scaling_factor = 1.0f;
    moe_status st;
    bool any_moe = false;
    for (int i = 0; i < d->n_layers; i++)
        any_moe |= !dense[i];
    if (any_moe && (st = moe_cfg_check_routing(c, &r, f->experts_key, "num_experts_per_tok")))
        return st;
    moe_cfg_quant_info q;
    moe_weight_format fmt;
    if ((st = moe_cfg_quant_read(qc, false, &q)) || (st = moe_cfg_plain_format(qc, &q, &fmt)))
        return st;
    if ((st = moe_cfg_alloc_layers(c, d))) return st;
    for (int i = 0; i < d->n_layers; i++) {
        moe_layer_desc *l = &d->layers[i];
        if (dense[i]) {
            l->kind = MOE_LAYER_DENSE;
            l->dense = moe_cfg_mlp(d->hidden, f->inter, fmt, MOE_DTYPE_F32);
            continue;
        }
        l->kind = MOE_LAYER_MOE;
        l->routing = r;
        l->experts = moe_cfg_mlp(d->hidden, f->moe_inter, fmt, MOE_DTYPE_F32);
        l->n_shared = 1;
        l->shared = moe_cfg_mlp(d->hidden, f->shared_inter, fmt, MOE_DTYPE_F32);
        l->shared_gate = true;
    }
    return MOE_OK;
}

static moe_status read_experts(const moe_cfg *c, next_fields *f)
{
    /* transformers' configs spell it num_experts; num_local_experts is accepted as for
     * Qwen3-MoE, whose transformers 5 configs use it. */
    return moe_cfg_int_either(c, "num_experts", "num_local_experts", true, 0, 0,
                              MOE_CFG_MAX_EXPERTS, &f->experts, &f->experts_key);
}

static moe_status next_with(const moe_cfg *c, moe_model_desc *d, bool *dense)
{
    next_fields f;
    memset(&f, 0, sizeof f);
    moe_status st = read_experts(c, &f);
    if (st || (st = moe_cfg_check_act(c))) return st;
    bool any_dense, any_moe;
    st = moe_family_qwen3_plan_layers(c, d->n_layers, f.experts, dense, &any_dense, &any_moe);
    if (st || (st = read_block(c, any_moe, &f))) return st;
    /* transformers' Qwen3NextConfig defaults norm_topk_prob to true (Qwen3-MoE's to false). */
    if ((st = moe_cfg_bool(c, "norm_topk_prob", false, true, &f.norm))) return st;
    st = moe_cfg_int(c, "intermediate_size", any_dense, 0, 1, MOE_CFG_MAX_DIM, &f.inter);
    if (st) return st;
    return fill(c, c, &f, dense, d);
}

moe_status moe_family_qwen3_next_parse(const moe_cfg *c, moe_model_desc *d)
{
    moe_status st = moe_cfg_common(c, d);
    if (st) return st;
    bool *dense = moe_calloc((size_t)d->n_layers, sizeof *dense);
    if (!dense) return moe_error(MOE_ENOMEM, "%s: allocating the layer plan", c->name);
    st = next_with(c, d, dense);
    moe_free(dense);
    return st;
}

/* Qwen3.5-MoE's text fields, inside text_config: every layer is MoE and always renormalised
 * (Qwen3_5MoeTopKRouter has no switch; norm_topk_prob false is refused, not ignored). */
static moe_status qwen3_5_text(const moe_cfg *c, const moe_cfg *t, moe_model_desc *d, bool *dense)
{
    next_fields f;
    memset(&f, 0, sizeof f);
    moe_status st = read_experts(t, &f);
    if (st || (st = moe_cfg_check_act(t))) return st;
    if (f.experts == 0)
        return moe_cfg_fail(t, MOE_ECONFIG, f.experts_key,
                            "0: every Qwen3.5-MoE layer routes experts");
    if ((st = read_block(t, true, &f))) return st;
    if ((st = moe_cfg_bool(t, "norm_topk_prob", false, true, &f.norm))) return st;
    if (!f.norm)
        return moe_cfg_fail(t, MOE_EUNSUPPORTED, "norm_topk_prob",
                            "false is not supported (Qwen3.5-MoE always renormalises)");
    return fill(t, c, &f, dense, d);
}

moe_status moe_family_qwen3_5_moe_parse(const moe_cfg *c, moe_model_desc *d)
{
    /* Qwen3_5MoeConfig nests the text model's fields in text_config; a top-level field of the
     * same name belongs to no module, so nothing is read from there but the dtype when
     * text_config has none (transformers writes it at the top). */
    const json_t *v = json_object_get(c->obj, "text_config");
    if (!v || json_is_null(v))
        return moe_cfg_fail(c, MOE_EMISSING, "text_config",
                            "required field is missing (Qwen3.5-MoE keeps its text model's "
                            "fields there)");
    if (!json_is_object(v)) return moe_cfg_fail(c, MOE_EJSON, "text_config", "must be an object");
    const moe_cfg t = {v, c->name, "text_config."};
    moe_status st = moe_cfg_common(&t, d);
    if (st) return st;
    if (!moe_cfg_has(&t, "torch_dtype") && !moe_cfg_has(&t, "dtype") && (st = moe_cfg_dtype(c, d)))
        return st;
    if (moe_cfg_has(&t, "quantization_config"))
        return moe_cfg_fail(&t, MOE_EUNSUPPORTED, "quantization_config",
                            "is read at the top level of a Qwen3.5-MoE config, not here");
    bool *dense = moe_calloc((size_t)d->n_layers, sizeof *dense);
    if (!dense) return moe_error(MOE_ENOMEM, "%s: allocating the layer plan", c->name);
    st = qwen3_5_text(c, &t, d, dense);
    moe_free(dense);
    return st;
}

static const moe_mlp_names next_names = {"gate_proj", "up_proj", "down_proj", "weight",
                                         "weight_scale_inv"};

moe_status moe_family_qwen3_next_tensors(const moe_model_desc *d, int layer, moe_spec_list *l)
{
    const moe_layer_desc *ld = &d->layers[layer];
    char prefix[96];
    const char *base =
        d->family == MOE_FAMILY_QWEN3_5_MOE ? "model.language_model.layers" : "model.layers";
    snprintf(prefix, sizeof prefix, "%s.%d.mlp", base, layer);
    if (ld->kind == MOE_LAYER_DENSE)
        return moe_spec_add_mlp(l, prefix, &next_names, &ld->dense, MOE_GROUP_DENSE, layer, -1);
    moe_status st = moe_spec_add_router(l, d, layer, prefix);
    if (st) return st;
    char p[160];
    for (int x = 0; x < ld->routing.n_experts; x++) {
        snprintf(p, sizeof p, "%s.experts.%d", prefix, x);
        st = moe_spec_add_mlp(l, p, &next_names, &ld->experts, MOE_GROUP_ROUTED, layer, x);
        if (st) return st;
    }
    snprintf(p, sizeof p, "%s.shared_expert", prefix);
    st = moe_spec_add_mlp(l, p, &next_names, &ld->shared, MOE_GROUP_SHARED, layer, -1);
    if (st) return st;
    /* nn.Linear(hidden, 1, bias=False), stored in the model's dtype (FP8 releases keep it so). */
    const int64_t gate[2] = {1, d->hidden};
    return moe_spec_add(l, layer, -1, MOE_GROUP_SHARED, MOE_ROLE_SHARED_GATE, d->router_dtype,
                        MOE_MASK_FLOAT, 2, gate, "%s.shared_expert_gate.weight", prefix);
}
