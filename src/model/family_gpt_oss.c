/* family_gpt_oss.c — gpt-oss: top-k softmax with router bias, clamped GLU, stacked experts. */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "model/family.h"

/* The defaults of transformers' GptOssConfig: the GLU g·sigmoid(alpha·g)·(u + 1) with the
 * gate clamped to <= limit and the up projection to ±limit. */
#define GPT_OSS_ALPHA 1.702
#define GPT_OSS_LIMIT 7.0

/* A positive float of the GLU: finite, > 0 and representable in f32. */
static moe_status read_glu_param(const moe_cfg *c, const char *key, double def, float *out)
{
    double v;
    moe_status st = moe_cfg_num(c, key, false, def, 0.0, FLT_MAX, &v);
    if (st) return st;
    if (!(v > 0.0)) return moe_cfg_fail(c, MOE_ECONFIG, key, "%g must be > 0", v);
    *out = (float)v;
    return MOE_OK;
}

/* top-k is "num_experts_per_tok" in the HF config and "experts_per_token" in OpenAI's. */
static moe_status read_top_k(const moe_cfg *c, int64_t *out)
{
    const bool hf = moe_cfg_has(c, "num_experts_per_tok");
    const bool oai = moe_cfg_has(c, "experts_per_token");
    int64_t a = 0, b = 0;
    moe_status st;
    if (hf && (st = moe_cfg_int(c, "num_experts_per_tok", true, 0, 1, MOE_CFG_MAX_EXPERTS, &a)))
        return st;
    if (oai && (st = moe_cfg_int(c, "experts_per_token", true, 0, 1, MOE_CFG_MAX_EXPERTS, &b)))
        return st;
    if (!hf && !oai)
        return moe_cfg_fail(c, MOE_EMISSING, "num_experts_per_tok",
                            "required field is missing (nor is experts_per_token present)");
    if (hf && oai && a != b)
        return moe_cfg_fail(c, MOE_ECONFIG, "num_experts_per_tok",
                            "%lld disagrees with experts_per_token = %lld", (long long)a,
                            (long long)b);
    *out = hf ? a : b;
    return MOE_OK;
}

static moe_status read_experts(const moe_cfg *c, const moe_model_desc *d, moe_mlp_desc *m)
{
    int64_t inter;
    float limit = 0, alpha = 0;
    moe_status st = moe_cfg_int(c, "intermediate_size", true, 0, 1, MOE_CFG_MAX_DIM, &inter);
    if (st) return st;
    if ((st = read_glu_param(c, "swiglu_limit", GPT_OSS_LIMIT, &limit)) ||
        (st = read_glu_param(c, "swiglu_alpha", GPT_OSS_ALPHA, &alpha)))
        return st;
    moe_cfg_quant_info q;
    if ((st = moe_cfg_quant_read(c, true, &q))) return st;
    if (q.kind == MOE_QUANT_FP8_BLOCK)
        return moe_cfg_fail(c, MOE_EUNSUPPORTED, "quantization_config.quant_method",
                            "'fp8' is not supported for gpt_oss (supported: mxfp4)");
    const bool mx = q.kind == MOE_QUANT_MXFP4;
    if (mx && (d->hidden % 32 || inter % 32))
        return moe_cfg_fail(c, MOE_ECONFIG, d->hidden % 32 ? "hidden_size" : "intermediate_size",
                            "%lld is not a multiple of 32, the MXFP4 block along K",
                            (long long)(d->hidden % 32 ? d->hidden : inter));
    *m = moe_cfg_mlp(d->hidden, inter, mx ? MOE_WFMT_MXFP4 : MOE_WFMT_BF16, MOE_DTYPE_INVALID);
    m->activation = MOE_ACT_GPTOSS_GLU;
    m->swiglu_limit = limit;
    m->alpha = alpha;
    m->has_bias = true;
    return MOE_OK;
}

moe_status moe_family_gpt_oss_parse(const moe_cfg *c, moe_model_desc *d)
{
    int64_t experts = 0, k = 0;
    /* hidden_act is not read: transformers' GptOssExperts computes the GLU above whatever it
     * says. */
    moe_status st = moe_cfg_common(c, d);
    if (st) return st;
    const char *experts_key;
    st = moe_cfg_int_either(c, "num_local_experts", "num_experts", true, 0, 1, MOE_CFG_MAX_EXPERTS,
                            &experts, &experts_key);
    if (st) return st;
    if ((st = read_top_k(c, &k))) return st;
    moe_routing_desc r;
    memset(&r, 0, sizeof r);
    r.method = MOE_ROUTE_TOPK_SOFTMAX;
    r.score = MOE_SCORE_SOFTMAX;
    r.n_experts = (int)experts;
    r.top_k = (int)k;
    r.n_group = r.topk_group = 1;
    r.has_router_bias = true;
    r.norm_topk_prob = true; /* the softmax over the selected k sums to 1 */
    r.routed_scaling_factor = 1.0f;
    if ((st = moe_cfg_check_routing(c, &r, experts_key, "num_experts_per_tok"))) return st;
    moe_mlp_desc m;
    if ((st = read_experts(c, d, &m))) return st;
    if ((st = moe_cfg_alloc_layers(c, d))) return st;
    for (int i = 0; i < d->n_layers; i++) {
        d->layers[i].kind = MOE_LAYER_MOE;
        d->layers[i].routing = r;
        d->layers[i].experts = m;
    }
    return MOE_OK;
}

/* Stacked expert tensors in the HF MXFP4 layout: rows are outputs, 16 bytes hold a block of
 * 32 K values, gate and up rows interleaved in gate_up. */
static moe_status add_mxfp4(moe_spec_list *l, const char *p, int layer, int64_t e, int64_t h,
                            int64_t i)
{
    const uint32_t u8 = MOE_DTBIT(MOE_DTYPE_U8);
    const uint32_t scale = u8 | MOE_DTBIT(MOE_DTYPE_F8_E8M0);
    const int64_t gub[4] = {e, 2 * i, h / 32, 16}, gus[3] = {e, 2 * i, h / 32};
    const int64_t db[4] = {e, h, i / 32, 16}, ds[3] = {e, h, i / 32};
    const int64_t gubias[2] = {e, 2 * i}, dbias[2] = {e, h};
    moe_status st;
    if ((st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_GATE_UP, MOE_DTYPE_U8, u8, 4,
                           gub, "%s.experts.gate_up_proj_blocks", p)) ||
        (st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_GATE_UP_SCALE, MOE_DTYPE_U8,
                           scale, 3, gus, "%s.experts.gate_up_proj_scales", p)) ||
        (st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_GATE_UP_BIAS, MOE_DTYPE_BF16,
                           MOE_MASK_FLOAT, 2, gubias, "%s.experts.gate_up_proj_bias", p)) ||
        (st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_DOWN, MOE_DTYPE_U8, u8, 4, db,
                           "%s.experts.down_proj_blocks", p)) ||
        (st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_DOWN_SCALE, MOE_DTYPE_U8, scale,
                           3, ds, "%s.experts.down_proj_scales", p)))
        return st;
    return moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_DOWN_BIAS, MOE_DTYPE_BF16,
                        MOE_MASK_FLOAT, 2, dbias, "%s.experts.down_proj_bias", p);
}

/* HF's dequantised layout is transposed: [E, in, out]. */
static moe_status add_bf16(moe_spec_list *l, const char *p, int layer, int64_t e, int64_t h,
                           int64_t i)
{
    const int64_t gu[3] = {e, h, 2 * i}, gubias[2] = {e, 2 * i};
    const int64_t dn[3] = {e, i, h}, dbias[2] = {e, h};
    moe_status st;
    if ((st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_GATE_UP, MOE_DTYPE_BF16,
                           MOE_MASK_FLOAT, 3, gu, "%s.experts.gate_up_proj", p)) ||
        (st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_GATE_UP_BIAS, MOE_DTYPE_BF16,
                           MOE_MASK_FLOAT, 2, gubias, "%s.experts.gate_up_proj_bias", p)) ||
        (st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_DOWN, MOE_DTYPE_BF16,
                           MOE_MASK_FLOAT, 3, dn, "%s.experts.down_proj", p)))
        return st;
    return moe_spec_add(l, layer, -1, MOE_GROUP_ROUTED, MOE_ROLE_DOWN_BIAS, MOE_DTYPE_BF16,
                        MOE_MASK_FLOAT, 2, dbias, "%s.experts.down_proj_bias", p);
}

moe_status moe_family_gpt_oss_tensors(const moe_model_desc *d, int layer, moe_spec_list *l)
{
    const moe_layer_desc *ld = &d->layers[layer];
    char p[96];
    snprintf(p, sizeof p, "model.layers.%d.mlp", layer);
    const int64_t e = ld->routing.n_experts;
    const int64_t router[2] = {e, d->hidden};
    moe_status st;
    if ((st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTER, MOE_ROLE_ROUTER_WEIGHT, d->router_dtype,
                           MOE_MASK_FLOAT, 2, router, "%s.router.weight", p)) ||
        (st = moe_spec_add(l, layer, -1, MOE_GROUP_ROUTER, MOE_ROLE_ROUTER_BIAS, d->router_dtype,
                           MOE_MASK_FLOAT, 1, &e, "%s.router.bias", p)))
        return st;
    if (ld->experts.format == MOE_WFMT_MXFP4)
        return add_mxfp4(l, p, layer, e, d->hidden, ld->experts.intermediate);
    return add_bf16(l, p, layer, e, d->hidden, ld->experts.intermediate);
}
