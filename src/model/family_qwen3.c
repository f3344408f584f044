/* family_qwen3.c — Qwen3-MoE: sparse-step/mlp_only_layers plan, softmax top-k, tensor table. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/family.h"

/* Marks the layers listed in mlp_only_layers in DENSE (n_layers entries). */
static moe_status read_mlp_only(const moe_cfg *c, int n_layers, bool *dense)
{
    const json_t *v = json_object_get(c->obj, "mlp_only_layers");
    if (!v || json_is_null(v)) return MOE_OK;
    if (!json_is_array(v))
        return moe_cfg_fail(c, MOE_EJSON, "mlp_only_layers", "must be an array of integers");
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        if (!json_is_integer(e))
            return moe_cfg_fail(c, MOE_EJSON, "mlp_only_layers", "element %zu is not an integer",
                                i);
        json_int_t layer = json_integer_value(e);
        if (layer < 0 || layer >= n_layers)
            return moe_cfg_fail(c, MOE_ECONFIG, "mlp_only_layers",
                                "element %zu = %lld is not a layer in [0, %d)", i, (long long)layer,
                                n_layers);
        dense[layer] = true;
    }
    return MOE_OK;
}

moe_status moe_family_qwen3_plan_layers(const moe_cfg *c, int n_layers, int64_t experts,
                                        bool *dense, bool *any_dense, bool *any_moe)
{
    int64_t step;
    moe_status st = moe_cfg_int(c, "decoder_sparse_step", false, 1, 1, MOE_CFG_MAX_LAYERS, &step);
    if (st) return st;
    if ((st = read_mlp_only(c, n_layers, dense))) return st;
    *any_dense = *any_moe = false;
    for (int i = 0; i < n_layers; i++) {
        /* The rule of transformers' Qwen3MoeDecoderLayer. */
        dense[i] = dense[i] || experts == 0 || (i + 1) % step != 0;
        *any_dense |= dense[i];
        *any_moe |= !dense[i];
    }
    return MOE_OK;
}

static moe_status read_routing(const moe_cfg *c, int64_t experts, const char *experts_key,
                               moe_routing_desc *r)
{
    int64_t k;
    moe_status st = moe_cfg_int(c, "num_experts_per_tok", true, 0, 1, MOE_CFG_MAX_EXPERTS, &k);
    if (st) return st;
    memset(r, 0, sizeof *r);
    r->method = MOE_ROUTE_SOFTMAX_TOPK;
    r->score = MOE_SCORE_SOFTMAX;
    r->n_experts = (int)experts;
    r->top_k = (int)k;
    r->n_group = r->topk_group = 1;
    r->routed_scaling_factor = 1.0f;
    st = moe_cfg_bool(c, "norm_topk_prob", false, false, &r->norm_topk_prob);
    if (st) return st;
    return moe_cfg_check_routing(c, r, experts_key, "num_experts_per_tok");
}

static moe_status parse_with(const moe_cfg *c, moe_model_desc *d, bool *dense)
{
    int64_t experts, moe_inter = 0, inter = 0;
    const char *experts_key;
    /* Hub configs say num_experts; transformers 5 writes num_local_experts (its attribute_map
     * makes the two one field). */
    moe_status st = moe_cfg_int_either(c, "num_experts", "num_local_experts", true, 0, 0,
                                       MOE_CFG_MAX_EXPERTS, &experts, &experts_key);
    if (st) return st;
    if ((st = moe_cfg_check_act(c))) return st;
    bool any_dense, any_moe;
    st = moe_family_qwen3_plan_layers(c, d->n_layers, experts, dense, &any_dense, &any_moe);
    if (st) return st;
    moe_routing_desc r;
    memset(&r, 0, sizeof r);
    if (any_moe) {
        if ((st = read_routing(c, experts, experts_key, &r))) return st;
        st = moe_cfg_int(c, "moe_intermediate_size", true, 0, 1, MOE_CFG_MAX_DIM, &moe_inter);
        if (st) return st;
    }
    st = moe_cfg_int(c, "intermediate_size", any_dense, 0, 1, MOE_CFG_MAX_DIM, &inter);
    if (st) return st;
    moe_cfg_quant_info q;
    moe_weight_format fmt;
    if ((st = moe_cfg_quant_read(c, false, &q)) || (st = moe_cfg_plain_format(c, &q, &fmt)))
        return st;
    if ((st = moe_cfg_alloc_layers(c, d))) return st;
    for (int i = 0; i < d->n_layers; i++) {
        moe_layer_desc *l = &d->layers[i];
        if (dense[i]) {
            l->kind = MOE_LAYER_DENSE;
            l->dense = moe_cfg_mlp(d->hidden, inter, fmt, MOE_DTYPE_F32);
        } else {
            l->kind = MOE_LAYER_MOE;
            l->routing = r;
            l->experts = moe_cfg_mlp(d->hidden, moe_inter, fmt, MOE_DTYPE_F32);
        }
    }
    return MOE_OK;
}

moe_status moe_family_qwen3_parse(const moe_cfg *c, moe_model_desc *d)
{
    moe_status st = moe_cfg_common(c, d);
    if (st) return st;
    bool *dense = moe_calloc((size_t)d->n_layers, sizeof *dense);
    if (!dense) return moe_error(MOE_ENOMEM, "%s: allocating the layer plan", c->name);
    st = parse_with(c, d, dense);
    moe_free(dense);
    return st;
}

static const moe_mlp_names qwen3_names = {"gate_proj", "up_proj", "down_proj", "weight",
                                          "weight_scale_inv"};

moe_status moe_family_qwen3_tensors(const moe_model_desc *d, int layer, moe_spec_list *l)
{
    const moe_layer_desc *ld = &d->layers[layer];
    char prefix[96];
    snprintf(prefix, sizeof prefix, "model.layers.%d.mlp", layer);
    if (ld->kind == MOE_LAYER_DENSE)
        return moe_spec_add_mlp(l, prefix, &qwen3_names, &ld->dense, MOE_GROUP_DENSE, layer, -1);
    moe_status st = moe_spec_add_router(l, d, layer, prefix);
    if (st) return st;
    return moe_spec_add_experts(l, d, layer, prefix, &qwen3_names);
}
