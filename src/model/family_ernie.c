/* family_ernie.c — ERNIE-4.5 MoE: softmax + bias selection, floored renorm, layer range. */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/family.h"

/* What transformers' Ernie4_5_MoeConfig names the fields its MoE block reads. */
typedef struct ernie_fields {
    int64_t experts, top_k, moe_inter, inter, n_shared, start, end, interval;
    double norm_min;
    const char *experts_key, *topk_key;
} ernie_fields;

/* The rule of Ernie4_5_MoeDecoderLayer: MoE iff (L + 1) % interval == 0 and start <= L <= end. */
static bool ernie_is_moe(const ernie_fields *f, int layer)
{
    return f->experts > 0 && (layer + 1) % f->interval == 0 && layer >= f->start && layer <= f->end;
}

static moe_status read_placement(const moe_cfg *c, int n_layers, ernie_fields *f)
{
    moe_status st =
        moe_cfg_int(c, "moe_layer_start_index", false, 1, 0, MOE_CFG_MAX_LAYERS, &f->start);
    if (st) return st;
    /* -1 (the default) is the last layer, as Ernie4_5_MoeConfig resolves it. */
    st = moe_cfg_int(c, "moe_layer_end_index", false, -1, -1, MOE_CFG_MAX_LAYERS, &f->end);
    if (st) return st;
    if (f->end == -1) f->end = n_layers - 1;
    return moe_cfg_int(c, "moe_layer_interval", false, 1, 1, MOE_CFG_MAX_LAYERS, &f->interval);
}

static moe_status read_block(const moe_cfg *c, bool any_moe, ernie_fields *f)
{
    /* Its attribute_map: num_experts_per_tok is moe_k. */
    moe_status st = moe_cfg_int_either(c, "moe_k", "num_experts_per_tok", any_moe, 1, 1,
                                       MOE_CFG_MAX_EXPERTS, &f->top_k, &f->topk_key);
    if (st) return st;
    st = moe_cfg_int(c, "moe_intermediate_size", any_moe, 0, 1, MOE_CFG_MAX_DIM, &f->moe_inter);
    if (st) return st;
    st = moe_cfg_int(c, "moe_num_shared_experts", false, 0, 0, MOE_CFG_MAX_SHARED, &f->n_shared);
    if (st) return st;
    if (f->moe_inter * f->n_shared > MOE_CFG_MAX_DIM)
        return moe_cfg_fail(c, MOE_ECONFIG, "moe_num_shared_experts",
                            "%lld × moe_intermediate_size %lld exceeds the limit %lld",
                            (long long)f->n_shared, (long long)f->moe_inter,
                            (long long)MOE_CFG_MAX_DIM);
    /* The floor of the renormalisation; Ernie4_5_MoeConfig's default 1e-12. */
    return moe_cfg_num(c, "moe_norm_min", false, 1e-12, 0.0, FLT_MAX, &f->norm_min);
}

static moe_status fill(const moe_cfg *c, const ernie_fields *f, bool any_moe, moe_weight_format fmt,
                       moe_model_desc *d)
{
    moe_routing_desc r;
    memset(&r, 0, sizeof r);
    r.method = MOE_ROUTE_SOFTMAX_BIAS;
    r.score = MOE_SCORE_SOFTMAX;
    r.n_experts = (int)f->experts;
    r.top_k = (int)f->top_k;
    r.n_group = r.topk_group = 1;
    r.has_correction_bias = true;
    r.norm_topk_prob = true; /* always renormalised, with the floor */
    r.routed_scaling_factor = 1.0f;
    r.renorm_min = (float)f->norm_min;
    moe_status st;
    if (any_moe && (st = moe_cfg_check_routing(c, &r, f->experts_key, f->topk_key))) return st;
    if ((st = moe_cfg_alloc_layers(c, d))) return st;
    for (int i = 0; i < d->n_layers; i++) {
        moe_layer_desc *l = &d->layers[i];
        if (!ernie_is_moe(f, i)) {
            l->kind = MOE_LAYER_DENSE;
            l->dense = moe_cfg_mlp(d->hidden, f->inter, fmt, MOE_DTYPE_F32);
            continue;
        }
        l->kind = MOE_LAYER_MOE;
        l->routing = r;
        l->experts = moe_cfg_mlp(d->hidden, f->moe_inter, fmt, MOE_DTYPE_F32);
        l->n_shared = (int)f->n_shared;
        if (f->n_shared > 0)
            l->shared = moe_cfg_mlp(d->hidden, f->moe_inter * f->n_shared, fmt, MOE_DTYPE_F32);
    }
    return MOE_OK;
}

moe_status moe_family_ernie4_5_moe_parse(const moe_cfg *c, moe_model_desc *d)
{
    ernie_fields f;
    memset(&f, 0, sizeof f);
    moe_status st = moe_cfg_common(c, d);
    if (st) return st;
    /* Its attribute_map: num_experts is moe_num_experts. */
    st = moe_cfg_int_either(c, "moe_num_experts", "num_experts", true, 0, 0, MOE_CFG_MAX_EXPERTS,
                            &f.experts, &f.experts_key);
    if (st || (st = moe_cfg_check_act(c)) || (st = read_placement(c, d->n_layers, &f))) return st;
    /* use_bias puts a bias on every MLP projection (Ernie4_5_MoeMLP); libmoe's MLPs of this
     * model_type have none. */
    bool use_bias = false;
    if ((st = moe_cfg_bool(c, "use_bias", false, false, &use_bias))) return st;
    if (use_bias)
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "use_bias",
                            "true is not supported (biases on every MLP projection)");
    bool any_moe = false, any_dense = false;
    for (int i = 0; i < d->n_layers; i++) {
        any_moe |= ernie_is_moe(&f, i);
        any_dense |= !ernie_is_moe(&f, i);
    }
    if ((st = read_block(c, any_moe, &f))) return st;
    st = moe_cfg_int(c, "intermediate_size", any_dense, 0, 1, MOE_CFG_MAX_DIM, &f.inter);
    if (st) return st;
    moe_cfg_quant_info q;
    moe_weight_format fmt;
    if ((st = moe_cfg_quant_read(c, false, &q)) || (st = moe_cfg_plain_format(c, &q, &fmt)))
        return st;
    return fill(c, &f, any_moe, fmt, d);
}

static const moe_mlp_names ernie_names = {"gate_proj", "up_proj", "down_proj", "weight",
                                          "weight_scale_inv"};

moe_status moe_family_ernie4_5_moe_tensors(const moe_model_desc *d, int layer, moe_spec_list *l)
{
    const moe_layer_desc *ld = &d->layers[layer];
    char prefix[96];
    snprintf(prefix, sizeof prefix, "model.layers.%d.mlp", layer);
    if (ld->kind == MOE_LAYER_DENSE)
        return moe_spec_add_mlp(l, prefix, &ernie_names, &ld->dense, MOE_GROUP_DENSE, layer, -1);
    moe_status st = moe_spec_add_router(l, d, layer, prefix);
    if (st) return st;
    /* Ernie4_5_MoeStatics keeps the bias as [1, E] f32 (one expert group). */
    const int64_t bias[2] = {1, ld->routing.n_experts};
    st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTER, MOE_ROLE_CORRECTION_BIAS, MOE_DTYPE_F32,
                      MOE_MASK_FLOAT, 2, bias, "%s.moe_statics.e_score_correction_bias", prefix);
    if (st) return st;
    return moe_spec_add_experts(l, d, layer, prefix, &ernie_names);
}
