/* family_deepseek.c — DeepSeek-V2, DeepSeek-V3/R1 and Kimi-K2: config rules and tensor table. */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/family.h"

/* The fields these three families share, as read from config.json. */
typedef struct ds_fields {
    int64_t experts, top_k, moe_inter, inter, n_shared, first_dense, freq, n_group, topk_group;
    double rsf;
    bool norm;
    const char *method, *scoring, *experts_key;
} ds_fields;

static moe_status read_counts(const moe_cfg *c, moe_family family, ds_fields *f)
{
    /* transformers' attribute_map: deepseek_v2 also takes num_experts, deepseek_v3 (and
     * kimi_k2, which it reads as deepseek_v3) num_local_experts. */
    const char *alias = family == MOE_FAMILY_DEEPSEEK_V2 ? "num_experts" : "num_local_experts";
    moe_status st = moe_cfg_int_either(c, "n_routed_experts", alias, true, 0, 0,
                                       MOE_CFG_MAX_EXPERTS, &f->experts, &f->experts_key);
    if (st) return st;
    st =
        moe_cfg_int(c, "num_experts_per_tok", f->experts > 0, 1, 1, MOE_CFG_MAX_EXPERTS, &f->top_k);
    if (st) return st;
    st = moe_cfg_int(c, "moe_intermediate_size", f->experts > 0, 0, 1, MOE_CFG_MAX_DIM,
                     &f->moe_inter);
    if (st) return st;
    st = moe_cfg_int(c, "n_shared_experts", false, 0, 0, MOE_CFG_MAX_SHARED, &f->n_shared);
    if (st) return st;
    st = moe_cfg_int(c, "first_k_dense_replace", false, 0, 0, MOE_CFG_MAX_LAYERS, &f->first_dense);
    if (st) return st;
    st = moe_cfg_int(c, "moe_layer_freq", false, 1, 1, MOE_CFG_MAX_LAYERS, &f->freq);
    if (st) return st;
    st = moe_cfg_int(c, "n_group", false, 1, 1, MOE_CFG_MAX_EXPERTS, &f->n_group);
    if (st) return st;
    return moe_cfg_int(c, "topk_group", false, 1, 1, MOE_CFG_MAX_EXPERTS, &f->topk_group);
}

static moe_status read_routing(const moe_cfg *c, moe_family family, ds_fields *f)
{
    /* The defaults are those of the transformers config classes of each family. */
    const bool v2 = family == MOE_FAMILY_DEEPSEEK_V2;
    moe_status st = moe_cfg_str(c, "topk_method", false, v2 ? "greedy" : "noaux_tc", &f->method);
    if (st) return st;
    st = moe_cfg_str(c, "scoring_func", false, v2 ? "softmax" : "sigmoid", &f->scoring);
    if (st) return st;
    st = moe_cfg_bool(c, "norm_topk_prob", false, false, &f->norm);
    if (st) return st;
    st = moe_cfg_num(c, "routed_scaling_factor", false, 1.0, 0.0, FLT_MAX, &f->rsf);
    if (st) return st;
    if (!(f->rsf > 0.0))
        return moe_cfg_fail(c, MOE_ECONFIG, "routed_scaling_factor", "%g must be > 0", f->rsf);
    return MOE_OK;
}

static moe_status map_routing(const moe_cfg *c, const ds_fields *f, moe_routing_desc *r)
{
    memset(r, 0, sizeof *r);
    if (!strcmp(f->method, "greedy"))
        r->method = MOE_ROUTE_GREEDY;
    else if (!strcmp(f->method, "group_limited_greedy"))
        r->method = MOE_ROUTE_GROUP_LIMITED_GREEDY;
    else if (!strcmp(f->method, "noaux_tc"))
        r->method = MOE_ROUTE_NOAUX_TC;
    else
        return moe_cfg_fail(
            c, MOE_ECONFIG, "topk_method",
            "unknown method '%.64s' (known: greedy, group_limited_greedy, noaux_tc)", f->method);
    if (!strcmp(f->scoring, "softmax"))
        r->score = MOE_SCORE_SOFTMAX;
    else if (!strcmp(f->scoring, "sigmoid"))
        r->score = MOE_SCORE_SIGMOID;
    else
        return moe_cfg_fail(c, MOE_ECONFIG, "scoring_func",
                            "unknown scoring function '%.64s' (known here: softmax, sigmoid)",
                            f->scoring);
    r->n_experts = (int)f->experts;
    r->top_k = (int)f->top_k;
    r->n_group = (int)f->n_group;
    r->topk_group = (int)f->topk_group;
    r->has_correction_bias = r->method == MOE_ROUTE_NOAUX_TC;
    r->norm_topk_prob = f->norm;
    r->routed_scaling_factor = (float)f->rsf;
    return MOE_OK;
}

static bool ds_is_moe(const ds_fields *f, int layer)
{
    return f->experts > 0 && layer >= f->first_dense && layer % f->freq == 0;
}

static moe_status fill_layers(const moe_cfg *c, const ds_fields *f, const moe_routing_desc *r,
                              moe_weight_format fmt, moe_model_desc *d)
{
    /* V3.1's scale_fmt "ue8m0" rounds scales to powers of two but still stores them as f32
     * weight_scale_inv, so the scale dtype does not follow it here. */
    moe_status st = moe_cfg_alloc_layers(c, d);
    if (st) return st;
    for (int i = 0; i < d->n_layers; i++) {
        moe_layer_desc *l = &d->layers[i];
        if (!ds_is_moe(f, i)) {
            l->kind = MOE_LAYER_DENSE;
            l->dense = moe_cfg_mlp(d->hidden, f->inter, fmt, MOE_DTYPE_F32);
            continue;
        }
        l->kind = MOE_LAYER_MOE;
        l->routing = *r;
        l->experts = moe_cfg_mlp(d->hidden, f->moe_inter, fmt, MOE_DTYPE_F32);
        l->n_shared = (int)f->n_shared;
        if (f->n_shared > 0)
            l->shared = moe_cfg_mlp(d->hidden, f->moe_inter * f->n_shared, fmt, MOE_DTYPE_F32);
    }
    return MOE_OK;
}

/* One MLP group of an INT4 checkpoint (PREFIX, N_EXPERTS as moe_int4_mlp_format): INT4 with
 * the config's group size, which must divide both widths, or bf16 as the ignore list says. */
static moe_status int4_group(const moe_cfg *c, const moe_cfg_quant_info *q,
                             const moe_int4_ignore *ig, const char *prefix, int n_experts,
                             moe_mlp_desc *m)
{
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    moe_weight_format fmt;
    moe_status st = moe_int4_mlp_format(ig, c, prefix, proj, n_experts, &fmt);
    if (st || fmt != MOE_WFMT_INT4_GROUP) return st;
    const int64_t g = q->group_size;
    if (m->hidden % g != 0 || m->intermediate % g != 0)
        return moe_cfg_fail(c, MOE_ECONFIG, "quantization_config.config_groups",
                            "group_size %lld does not divide the width %lld of '%s%s.%s'",
                            (long long)g, (long long)(m->hidden % g ? m->hidden : m->intermediate),
                            prefix, n_experts > 0 ? ".experts.0" : "",
                            m->hidden % g ? "gate_proj.weight_scale" : "down_proj.weight_scale");
    *m = moe_cfg_mlp(m->hidden, m->intermediate, MOE_WFMT_INT4_GROUP, MOE_DTYPE_BF16);
    m->block_in = (int)g;
    return MOE_OK;
}

/* The formats of every MLP group of an INT4 (compressed-tensors) checkpoint. */
static moe_status int4_formats(const moe_cfg *c, const moe_cfg_quant_info *q, moe_model_desc *d)
{
    moe_int4_ignore *ig;
    moe_status st = moe_int4_ignore_make(q, &ig);
    if (st) return st;
    for (int i = 0; i < d->n_layers && !st; i++) {
        moe_layer_desc *l = &d->layers[i];
        char p[96], s[128];
        /* The names the ignore list matches: Kimi-K2.5's text model lives under
         * language_model (family_kimi_k25.c). */
        snprintf(p, sizeof p, "%smodel.layers.%d.mlp",
                 d->family == MOE_FAMILY_KIMI_K25 ? "language_model." : "", i);
        if (l->kind == MOE_LAYER_DENSE) {
            st = int4_group(c, q, ig, p, 0, &l->dense);
            continue;
        }
        st = int4_group(c, q, ig, p, l->routing.n_experts, &l->experts);
        snprintf(s, sizeof s, "%s.shared_experts", p);
        if (!st && l->n_shared > 0) st = int4_group(c, q, ig, s, 0, &l->shared);
    }
    moe_int4_ignore_free(ig);
    return st;
}

moe_status moe_family_deepseek_parse(const moe_cfg *c, moe_family family, moe_model_desc *d)
{
    ds_fields f;
    memset(&f, 0, sizeof f);
    moe_status st = moe_cfg_common(c, d);
    if (st) return st;
    if ((st = read_counts(c, family, &f)) || (st = read_routing(c, family, &f)) ||
        (st = moe_cfg_check_act(c)))
        return st;
    /* Only deepseek_v2's config class has mlp_bias (biases on every MLP). */
    if (family == MOE_FAMILY_DEEPSEEK_V2 && (st = moe_cfg_check_no_mlp_bias(c))) return st;
    bool any_dense = false, any_moe = false;
    for (int i = 0; i < d->n_layers; i++) {
        any_moe |= ds_is_moe(&f, i);
        any_dense |= !ds_is_moe(&f, i);
    }
    st = moe_cfg_int(c, "intermediate_size", any_dense, 0, 1, MOE_CFG_MAX_DIM, &f.inter);
    if (st) return st;
    if (f.moe_inter * f.n_shared > MOE_CFG_MAX_DIM)
        return moe_cfg_fail(c, MOE_ECONFIG, "n_shared_experts",
                            "%lld × moe_intermediate_size %lld exceeds the limit %lld",
                            (long long)f.n_shared, (long long)f.moe_inter,
                            (long long)MOE_CFG_MAX_DIM);
    moe_routing_desc r;
    memset(&r, 0, sizeof r);
    /* Names are checked even when every layer is dense; the counts only matter for MoE. */
    if ((st = map_routing(c, &f, &r))) return st;
    if (any_moe && (st = moe_cfg_check_routing(c, &r, f.experts_key, "num_experts_per_tok")))
        return st;
    moe_cfg_quant_info q;
    moe_weight_format fmt;
    if ((st = moe_cfg_quant_read_int4(c, &q))) return st;
    if (q.kind == MOE_QUANT_INT4_GROUP) {
        if ((st = fill_layers(c, &f, &r, MOE_WFMT_BF16, d))) return st;
        return int4_formats(c, &q, d);
    }
    if ((st = moe_cfg_plain_format(c, &q, &fmt))) return st;
    return fill_layers(c, &f, &r, fmt, d);
}

static const moe_mlp_names ds_names = {"gate_proj", "up_proj", "down_proj", "weight",
                                       "weight_scale_inv"};

moe_status moe_family_deepseek_tensors(const moe_model_desc *d, int layer, moe_spec_list *l)
{
    char prefix[96];
    snprintf(prefix, sizeof prefix, "model.layers.%d.mlp", layer);
    return moe_family_deepseek_tensors_under(d, layer, prefix, l);
}

moe_status moe_family_deepseek_tensors_under(const moe_model_desc *d, int layer, const char *prefix,
                                             moe_spec_list *l)
{
    const moe_layer_desc *ld = &d->layers[layer];
    if (ld->kind == MOE_LAYER_DENSE)
        return moe_spec_add_mlp(l, prefix, &ds_names, &ld->dense, MOE_GROUP_DENSE, layer, -1);
    const int64_t e = ld->routing.n_experts;
    moe_status st = moe_spec_add_router(l, d, layer, prefix);
    if (st) return st;
    if (ld->routing.has_correction_bias) {
        st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTER, MOE_ROLE_CORRECTION_BIAS, MOE_DTYPE_F32,
                          MOE_MASK_FLOAT, 1, &e, "%s.gate.e_score_correction_bias", prefix);
        if (st) return st;
    }
    return moe_spec_add_experts(l, d, layer, prefix, &ds_names);
}
