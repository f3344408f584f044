/* family_v3_moe.c — DeepSeek-V3.2 and GLM-4.5/4.7-Flash/5: DeepSeek-V3's MoE block, config rules.
 */
#include <float.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/family.h"

/* The defaults of each transformers 5.25 config class (configuration_*.py): what transformers
 * runs when the field is absent. */
typedef struct v3m_defaults {
    int64_t first_dense, n_group, topk_group, n_shared;
    double rsf;
} v3m_defaults;

static v3m_defaults defaults_of(moe_family f)
{
    switch (f) {
    case MOE_FAMILY_DEEPSEEK_V32: return (v3m_defaults){3, 8, 4, 1, 2.5};
    case MOE_FAMILY_GLM_MOE_DSA: return (v3m_defaults){3, 1, 1, 1, 2.5};
    case MOE_FAMILY_GLM4_MOE_LITE: return (v3m_defaults){1, 1, 1, 1, 1.8};
    default: return (v3m_defaults){1, 1, 1, 1, 1.0}; /* glm4_moe */
    }
}

/* A string field whose one accepted value is WANT (transformers' block hard-codes it). */
static moe_status check_only(const moe_cfg *c, const char *key, const char *want, moe_status bad)
{
    const char *v;
    moe_status st = moe_cfg_str(c, key, false, want, &v);
    if (st) return st;
    if (strcmp(v, want))
        return moe_cfg_fail(c, bad, key,
                            "'%.64s' is not supported for this model_type (its MoE block always "
                            "uses %s)",
                            v, want);
    return MOE_OK;
}

/* The fields transformers' block does not read but DeepSeek's and GLM's own code does; a value
 * other than the one the block hard-codes would change the math, so it is refused. */
static moe_status check_fixed_fields(const moe_cfg *c)
{
    moe_status st;
    if ((st = check_only(c, "topk_method", "noaux_tc", MOE_ECONFIG)) ||
        (st = check_only(c, "scoring_func", "sigmoid", MOE_ECONFIG)) ||
        (st = check_only(c, "moe_router_dtype", "float32", MOE_EUNSUPPORTED)))
        return st;
    int64_t freq;
    st = moe_cfg_int(c, "moe_layer_freq", false, 1, 1, MOE_CFG_MAX_LAYERS, &freq);
    if (st) return st;
    if (freq != 1)
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "moe_layer_freq",
                            "%lld is not supported for this model_type (every layer from "
                            "first_k_dense_replace on is MoE)",
                            (long long)freq);
    if ((st = moe_cfg_check_act(c))) return st;
    return moe_cfg_check_no_mlp_bias(c);
}

/* Which of N layers are MoE, into MOE, as transformers decides: deepseek_v32, glm_moe_dsa and
 * glm4_moe_lite follow mlp_layer_types ("dense" or "sparse" per layer) when present, and then
 * read nothing else (transformers 5.25 saves a first_k_dense_replace beside it that it does
 * not use); without it, and always for glm4_moe (whose config class has no mlp_layer_types),
 * the layers from first_k_dense_replace on are MoE. glm4_moe_lite's default ignores
 * first_k_dense_replace (one dense layer), so another value is refused there. */
static moe_status plan_layers(const moe_cfg *c, moe_family family, int n, int64_t def_first,
                              bool *moe)
{
    const json_t *v = json_object_get(c->obj, "mlp_layer_types");
    if (family == MOE_FAMILY_GLM4_MOE || !v || json_is_null(v)) {
        int64_t first;
        moe_status st = moe_cfg_int(c, "first_k_dense_replace", false, def_first, 0,
                                    MOE_CFG_MAX_LAYERS, &first);
        if (st) return st;
        if (family == MOE_FAMILY_GLM4_MOE_LITE && first != def_first)
            return moe_cfg_fail(c, MOE_ECONFIG, "first_k_dense_replace",
                                "%lld: without mlp_layer_types transformers' glm4_moe_lite "
                                "makes only layer 0 dense",
                                (long long)first);
        for (int i = 0; i < n; i++)
            moe[i] = i >= first;
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
        if (strcmp(t, "dense") && strcmp(t, "sparse"))
            return moe_cfg_fail(c, MOE_ECONFIG, "mlp_layer_types",
                                "element %d '%.64s' is not one of \"dense\", \"sparse\"", i, t);
        moe[i] = !strcmp(t, "sparse");
    }
    return MOE_OK;
}

/* The router: noaux_tc on sigmoid scores with the correction bias, as every one of these
 * families' TopkRouter computes it. */
static moe_status read_routing(const moe_cfg *c, const v3m_defaults *def, const char **experts_key,
                               int64_t *n_shared, moe_routing_desc *r)
{
    int64_t experts, k, groups, topk_group;
    double rsf;
    bool norm;
    moe_status st = moe_cfg_int_either(c, "n_routed_experts", "num_local_experts", true, 0, 1,
                                       MOE_CFG_MAX_EXPERTS, &experts, experts_key);
    if (st) return st;
    if ((st = moe_cfg_int(c, "num_experts_per_tok", true, 0, 1, MOE_CFG_MAX_EXPERTS, &k)) ||
        (st = moe_cfg_int(c, "n_group", false, def->n_group, 1, MOE_CFG_MAX_EXPERTS, &groups)) ||
        (st = moe_cfg_int(c, "topk_group", false, def->topk_group, 1, MOE_CFG_MAX_EXPERTS,
                          &topk_group)) ||
        (st = moe_cfg_bool(c, "norm_topk_prob", false, true, &norm)) ||
        (st = moe_cfg_num(c, "routed_scaling_factor", false, def->rsf, 0.0, FLT_MAX, &rsf)) ||
        (st = moe_cfg_int(c, "n_shared_experts", false, def->n_shared, 0, MOE_CFG_MAX_SHARED,
                          n_shared)))
        return st;
    if (!(rsf > 0.0))
        return moe_cfg_fail(c, MOE_ECONFIG, "routed_scaling_factor", "%g must be > 0", rsf);
    memset(r, 0, sizeof *r);
    r->method = MOE_ROUTE_NOAUX_TC;
    r->score = MOE_SCORE_SIGMOID;
    r->n_experts = (int)experts;
    r->top_k = (int)k;
    r->n_group = (int)groups;
    r->topk_group = (int)topk_group;
    r->has_correction_bias = true;
    r->norm_topk_prob = norm;
    r->routed_scaling_factor = (float)rsf;
    return moe_cfg_check_routing(c, r, *experts_key, "num_experts_per_tok");
}

static moe_status parse_with(const moe_cfg *c, moe_family family, moe_model_desc *d, bool *moe)
{
    const v3m_defaults def = defaults_of(family);
    moe_status st = check_fixed_fields(c);
    if (st) return st;
    if ((st = plan_layers(c, family, d->n_layers, def.first_dense, moe))) return st;
    bool any_dense = false;
    for (int i = 0; i < d->n_layers; i++)
        any_dense |= !moe[i];
    const char *experts_key;
    int64_t n_shared, moe_inter, inter = 0;
    moe_routing_desc r;
    if ((st = read_routing(c, &def, &experts_key, &n_shared, &r)) ||
        (st = moe_cfg_int(c, "moe_intermediate_size", true, 0, 1, MOE_CFG_MAX_DIM, &moe_inter)) ||
        (st = moe_cfg_int(c, "intermediate_size", any_dense, 0, 1, MOE_CFG_MAX_DIM, &inter)))
        return st;
    if (moe_inter * n_shared > MOE_CFG_MAX_DIM)
        return moe_cfg_fail(c, MOE_ECONFIG, "n_shared_experts",
                            "%lld × moe_intermediate_size %lld exceeds the limit %lld",
                            (long long)n_shared, (long long)moe_inter, (long long)MOE_CFG_MAX_DIM);
    moe_cfg_quant_info q;
    moe_weight_format fmt;
    if ((st = moe_cfg_quant_read(c, false, &q)) || (st = moe_cfg_plain_format(c, &q, &fmt)) ||
        (st = moe_cfg_alloc_layers(c, d)))
        return st;
    for (int i = 0; i < d->n_layers; i++) {
        moe_layer_desc *l = &d->layers[i];
        if (!moe[i]) {
            l->kind = MOE_LAYER_DENSE;
            l->dense = moe_cfg_mlp(d->hidden, inter, fmt, MOE_DTYPE_F32);
            continue;
        }
        l->kind = MOE_LAYER_MOE;
        l->routing = r;
        l->experts = moe_cfg_mlp(d->hidden, moe_inter, fmt, MOE_DTYPE_F32);
        l->n_shared = (int)n_shared;
        if (n_shared > 0)
            l->shared = moe_cfg_mlp(d->hidden, moe_inter * n_shared, fmt, MOE_DTYPE_F32);
    }
    return MOE_OK;
}

moe_status moe_family_v3_moe_parse(const moe_cfg *c, moe_family family, moe_model_desc *d)
{
    moe_status st = moe_cfg_common(c, d);
    if (st) return st;
    bool *moe = moe_calloc((size_t)d->n_layers, sizeof *moe);
    if (!moe) return moe_error(MOE_ENOMEM, "%s: allocating the layer plan", c->name);
    st = parse_with(c, family, d, moe);
    moe_free(moe);
    return st;
}
