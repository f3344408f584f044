/* family_llama4.c — Llama-4 text: top-1 sigmoid scaling the expert input, stacked experts. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/family.h"

/* Marks the MoE layers in MOE (n_layers entries): moe_layers when present (it overrides the
 * step in Llama4TextConfig), else every interleave_moe_layer_step-th layer from step - 1. */
static moe_status plan_layers(const moe_cfg *t, int n_layers, bool *moe)
{
    const json_t *v = json_object_get(t->obj, "moe_layers");
    if (v && !json_is_null(v)) {
        if (!json_is_array(v))
            return moe_cfg_fail(t, MOE_EJSON, "moe_layers", "must be an array of integers");
        for (size_t i = 0; i < json_array_size(v); i++) {
            const json_t *e = json_array_get(v, i);
            if (!json_is_integer(e))
                return moe_cfg_fail(t, MOE_EJSON, "moe_layers", "element %zu is not an integer", i);
            const json_int_t layer = json_integer_value(e);
            if (layer < 0 || layer >= n_layers)
                return moe_cfg_fail(t, MOE_ECONFIG, "moe_layers",
                                    "element %zu = %lld is not a layer in [0, %d)", i,
                                    (long long)layer, n_layers);
            moe[layer] = true;
        }
        return MOE_OK;
    }
    int64_t step;
    moe_status st =
        moe_cfg_int(t, "interleave_moe_layer_step", false, 1, 1, MOE_CFG_MAX_LAYERS, &step);
    if (st) return st;
    for (int i = 0; i < n_layers; i++)
        moe[i] = (i + 1) % step == 0;
    return MOE_OK;
}

static moe_status text_with(const moe_cfg *c, const moe_cfg *t, moe_model_desc *d, bool *moe)
{
    int64_t experts, k = 1, inter = 0, inter_mlp = 0;
    moe_status st = moe_cfg_int(t, "num_local_experts", true, 0, 1, MOE_CFG_MAX_EXPERTS, &experts);
    if (st || (st = moe_cfg_check_act(t)) || (st = plan_layers(t, d->n_layers, moe))) return st;
    bool any_moe = false, any_dense = false;
    for (int i = 0; i < d->n_layers; i++) {
        any_moe |= moe[i];
        any_dense |= !moe[i];
    }
    /* Llama4TextConfig's default: one expert per token. */
    st = moe_cfg_int(t, "num_experts_per_tok", false, 1, 1, MOE_CFG_MAX_EXPERTS, &k);
    if (st) return st;
    st = moe_cfg_int(t, "intermediate_size", any_moe, 0, 1, MOE_CFG_MAX_DIM, &inter);
    if (st) return st;
    st = moe_cfg_int(t, "intermediate_size_mlp", any_dense, 0, 1, MOE_CFG_MAX_DIM, &inter_mlp);
    if (st) return st;
    /* Llama4Router: top-k of the logits, each weight the sigmoid of its logit; the router and
     * the experts' input scaling are written for one expert per token (sigmoid_top1). */
    moe_routing_desc r;
    memset(&r, 0, sizeof r);
    r.method = MOE_ROUTE_SIGMOID_TOP1;
    r.score = MOE_SCORE_SIGMOID;
    r.n_experts = (int)experts;
    r.top_k = (int)k;
    r.n_group = r.topk_group = 1;
    r.routed_scaling_factor = 1.0f;
    if (any_moe && (st = moe_cfg_check_routing(t, &r, "num_local_experts", "num_experts_per_tok")))
        return st;
    /* Llama-4's quantised releases are not block FP8 with this layout: unquantised only. */
    if (moe_cfg_has(c, "quantization_config") || moe_cfg_has(t, "quantization_config"))
        return moe_cfg_fail(moe_cfg_has(c, "quantization_config") ? c : t, MOE_EUNSUPPORTED,
                            "quantization_config",
                            "is not supported for llama4 (its experts are read as float "
                            "[E, H, 2I] / [E, I, H] tensors)");
    if ((st = moe_cfg_alloc_layers(c, d))) return st;
    for (int i = 0; i < d->n_layers; i++) {
        moe_layer_desc *l = &d->layers[i];
        if (!moe[i]) {
            l->kind = MOE_LAYER_DENSE;
            l->dense = moe_cfg_mlp(d->hidden, inter_mlp, MOE_WFMT_BF16, MOE_DTYPE_INVALID);
            continue;
        }
        l->kind = MOE_LAYER_MOE;
        l->routing = r;
        l->experts = moe_cfg_mlp(d->hidden, inter, MOE_WFMT_BF16, MOE_DTYPE_INVALID);
        l->scale_input = true;
        l->n_shared = 1; /* Llama4TextMoe's shared_expert, as wide as an expert */
        l->shared = moe_cfg_mlp(d->hidden, inter, MOE_WFMT_BF16, MOE_DTYPE_INVALID);
    }
    return MOE_OK;
}

moe_status moe_family_llama4_parse(const moe_cfg *c, moe_model_desc *d)
{
    /* Llama4Config nests the text model (Llama4TextConfig) in text_config. */
    const json_t *v = json_object_get(c->obj, "text_config");
    if (!v || json_is_null(v))
        return moe_cfg_fail(c, MOE_EMISSING, "text_config",
                            "required field is missing (Llama-4 keeps its text model's fields "
                            "there)");
    if (!json_is_object(v)) return moe_cfg_fail(c, MOE_EJSON, "text_config", "must be an object");
    const moe_cfg t = {v, c->name, "text_config."};
    moe_status st = moe_cfg_common(&t, d);
    if (st) return st;
    if (!moe_cfg_has(&t, "torch_dtype") && !moe_cfg_has(&t, "dtype") && (st = moe_cfg_dtype(c, d)))
        return st;
    bool *moe = moe_calloc((size_t)d->n_layers, sizeof *moe);
    if (!moe) return moe_error(MOE_ENOMEM, "%s: allocating the layer plan", c->name);
    st = text_with(c, &t, d, moe);
    moe_free(moe);
    return st;
}

static const moe_mlp_names llama4_names = {"gate_proj", "up_proj", "down_proj", "weight",
                                           "weight_scale_inv"};

moe_status moe_family_llama4_tensors(const moe_model_desc *d, int layer, moe_spec_list *l)
{
    const moe_layer_desc *ld = &d->layers[layer];
    char prefix[96];
    snprintf(prefix, sizeof prefix, "language_model.model.layers.%d.feed_forward", layer);
    if (ld->kind == MOE_LAYER_DENSE)
        return moe_spec_add_mlp(l, prefix, &llama4_names, &ld->dense, MOE_GROUP_DENSE, layer, -1);
    const int64_t e = ld->routing.n_experts, h = d->hidden, i = ld->experts.intermediate;
    const int64_t router[2] = {e, h}, gate_up[3] = {e, h, 2 * i}, down[3] = {e, i, h};
    moe_status st =
        moe_spec_add(l, layer, -1, MOE_GROUP_ROUTER, MOE_ROLE_ROUTER_WEIGHT, d->router_dtype,
                     MOE_MASK_FLOAT, 2, router, "%s.router.weight", prefix);
    if (st) return st;
    /* Llama4TextExperts: stacked and input-major, gate in the first I columns of gate_up. */
    st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_GATE_UP, MOE_DTYPE_BF16,
                      MOE_MASK_FLOAT, 3, gate_up, "%s.experts.gate_up_proj", prefix);
    if (st) return st;
    st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_DOWN, MOE_DTYPE_BF16, MOE_MASK_FLOAT,
                      3, down, "%s.experts.down_proj", prefix);
    if (st) return st;
    char p[160];
    snprintf(p, sizeof p, "%s.shared_expert", prefix);
    return moe_spec_add_mlp(l, p, &llama4_names, &ld->shared, MOE_GROUP_SHARED, layer, -1);
}
