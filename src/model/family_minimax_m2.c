/* family_minimax_m2.c — MiniMax-M2: sigmoid noaux_tc in one group, block-level bias, w1/w2/w3. */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/family.h"

/* The fields of MiniMax's own config (its remote code reads them) that transformers'
 * MiniMaxM2SparseMoeBlock hard-codes: any other value would change the math. */
static moe_status check_fixed_fields(const moe_cfg *c)
{
    const char *scoring;
    bool bias, norm;
    int64_t shared;
    double rsf;
    moe_status st;
    if ((st = moe_cfg_str(c, "scoring_func", false, "sigmoid", &scoring))) return st;
    if (strcmp(scoring, "sigmoid"))
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "scoring_func",
                            "'%.64s' is not supported for minimax_m2 (only sigmoid)", scoring);
    if ((st = moe_cfg_bool(c, "use_routing_bias", false, true, &bias))) return st;
    if (!bias)
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "use_routing_bias",
                            "false is not supported (minimax_m2 selects with "
                            "e_score_correction_bias)");
    if ((st = moe_cfg_int(c, "shared_intermediate_size", false, 0, 0, MOE_CFG_MAX_DIM, &shared)))
        return st;
    if (shared != 0)
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "shared_intermediate_size",
                            "%lld is not supported (minimax_m2 has no shared expert)",
                            (long long)shared);
    if ((st = moe_cfg_bool(c, "norm_topk_prob", false, true, &norm))) return st;
    if (!norm)
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "norm_topk_prob",
                            "false is not supported (minimax_m2 always renormalises)");
    if ((st = moe_cfg_num(c, "routed_scaling_factor", false, 1.0, 0.0, 1e30, &rsf))) return st;
    if (rsf != 1.0)
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "routed_scaling_factor",
                            "%g is not supported (minimax_m2 does not scale its weights)", rsf);
    return moe_cfg_check_act(c);
}

moe_status moe_family_minimax_m2_parse(const moe_cfg *c, moe_model_desc *d)
{
    int64_t experts, k, inter;
    const char *experts_key;
    moe_status st = moe_cfg_common(c, d);
    if (st) return st;
    /* transformers' attribute_map makes num_experts another name of num_local_experts. */
    if ((st = moe_cfg_int_either(c, "num_local_experts", "num_experts", true, 0, 1,
                                 MOE_CFG_MAX_EXPERTS, &experts, &experts_key)) ||
        (st = moe_cfg_int(c, "num_experts_per_tok", true, 0, 1, MOE_CFG_MAX_EXPERTS, &k)) ||
        (st = moe_cfg_int(c, "intermediate_size", true, 0, 1, MOE_CFG_MAX_DIM, &inter)) ||
        (st = check_fixed_fields(c)))
        return st;
    /* Sigmoid scores, the bias added for the choice only, the unbiased scores of the chosen
     * experts renormalised: noaux_tc with one group and no scaling (docs/routing.md). */
    moe_routing_desc r;
    memset(&r, 0, sizeof r);
    r.method = MOE_ROUTE_NOAUX_TC;
    r.score = MOE_SCORE_SIGMOID;
    r.n_experts = (int)experts;
    r.top_k = (int)k;
    r.n_group = r.topk_group = 1;
    r.has_correction_bias = true;
    r.norm_topk_prob = true;
    r.routed_scaling_factor = 1.0f;
    if ((st = moe_cfg_check_routing(c, &r, experts_key, "num_experts_per_tok"))) return st;
    /* router_jitter_noise perturbs the input in training only: not read. */
    moe_cfg_quant_info q;
    moe_weight_format fmt;
    if ((st = moe_cfg_quant_read(c, false, &q)) || (st = moe_cfg_plain_format(c, &q, &fmt)) ||
        (st = moe_cfg_alloc_layers(c, d)))
        return st;
    for (int i = 0; i < d->n_layers; i++) {
        d->layers[i].kind = MOE_LAYER_MOE;
        d->layers[i].routing = r;
        d->layers[i].experts = moe_cfg_mlp(d->hidden, inter, fmt, MOE_DTYPE_F32);
    }
    return MOE_OK;
}

/* w1 is the gate, w3 the up and w2 the down projection, as in Mixtral. */
static const moe_mlp_names minimax_names = {"w1", "w3", "w2", "weight", "weight_scale_inv"};

moe_status moe_family_minimax_m2_tensors(const moe_model_desc *d, int layer, moe_spec_list *l)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "model.layers.%d.block_sparse_moe", layer);
    const int64_t e = d->layers[layer].routing.n_experts;
    moe_status st = moe_spec_add_router(l, d, layer, prefix);
    if (st) return st;
    /* The correction bias belongs to the block, not to its gate. */
    st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTER, MOE_ROLE_CORRECTION_BIAS, MOE_DTYPE_F32,
                      MOE_MASK_FLOAT, 1, &e, "%s.e_score_correction_bias", prefix);
    if (st) return st;
    return moe_spec_add_experts(l, d, layer, prefix, &minimax_names);
}
