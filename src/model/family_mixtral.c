/* family_mixtral.c — Mixtral: all layers MoE, renormalised softmax top-k, w1/w2/w3 tensors. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/family.h"

moe_status moe_family_mixtral_parse(const moe_cfg *c, moe_model_desc *d)
{
    int64_t experts, k, inter;
    moe_status st = moe_cfg_common(c, d);
    if (st) return st;
    const char *experts_key;
    st = moe_cfg_int_either(c, "num_local_experts", "num_experts", true, 0, 1, MOE_CFG_MAX_EXPERTS,
                            &experts, &experts_key);
    if (st) return st;
    if ((st = moe_cfg_check_act(c))) return st;
    st = moe_cfg_int(c, "num_experts_per_tok", true, 0, 1, MOE_CFG_MAX_EXPERTS, &k);
    if (st) return st;
    st = moe_cfg_int(c, "intermediate_size", true, 0, 1, MOE_CFG_MAX_DIM, &inter);
    if (st) return st;
    moe_routing_desc r;
    memset(&r, 0, sizeof r);
    r.method = MOE_ROUTE_SOFTMAX_TOPK;
    r.score = MOE_SCORE_SOFTMAX;
    r.n_experts = (int)experts;
    r.top_k = (int)k;
    r.n_group = r.topk_group = 1;
    r.norm_topk_prob = true; /* Mixtral always renormalises; its config has no switch */
    r.routed_scaling_factor = 1.0f;
    if ((st = moe_cfg_check_routing(c, &r, experts_key, "num_experts_per_tok"))) return st;
    /* router_jitter_noise multiplies the input by noise in training only: not read. */
    moe_cfg_quant_info q;
    moe_weight_format fmt;
    if ((st = moe_cfg_quant_read(c, false, &q)) || (st = moe_cfg_plain_format(c, &q, &fmt)))
        return st;
    if ((st = moe_cfg_alloc_layers(c, d))) return st;
    for (int i = 0; i < d->n_layers; i++) {
        d->layers[i].kind = MOE_LAYER_MOE;
        d->layers[i].routing = r;
        d->layers[i].experts = moe_cfg_mlp(d->hidden, inter, fmt, MOE_DTYPE_F32);
    }
    return MOE_OK;
}

/* w1 is the gate, w3 the up and w2 the down projection. */
static const moe_mlp_names mixtral_names = {"w1", "w3", "w2", "weight", "weight_scale_inv"};

moe_status moe_family_mixtral_tensors(const moe_model_desc *d, int layer, moe_spec_list *l)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "model.layers.%d.block_sparse_moe", layer);
    moe_status st = moe_spec_add_router(l, d, layer, prefix);
    if (st) return st;
    return moe_spec_add_experts(l, d, layer, prefix, &mixtral_names);
}
