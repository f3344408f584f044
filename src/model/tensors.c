/* tensors.c — a layer's tensor table: spec list, MLP projections per format, family dispatch. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/family.h"

moe_status moe_spec_add(moe_spec_list *l, int layer, int expert, moe_tensor_group group,
                        moe_tensor_role role, moe_dtype dtype, uint32_t mask, int ndim,
                        const int64_t *shape, const char *fmt, ...)
{
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        moe_tensor_spec *v = moe_realloc(l->v, ncap * sizeof *v);
        if (!v)
            return moe_error(MOE_ENOMEM, "allocating %zu tensor specs of layer %d", ncap, layer);
        l->v = v;
        l->cap = ncap;
    }
    moe_tensor_spec *s = &l->v[l->n];
    memset(s, 0, sizeof *s);
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof s->name)
        return moe_error(MOE_EOVERFLOW, "layer %d: a tensor name is longer than %zu bytes", layer,
                         sizeof s->name - 1);
    s->group = group;
    s->role = role;
    s->layer = layer;
    s->expert = expert;
    s->dtype = dtype;
    s->dtype_mask = mask | MOE_DTBIT(dtype);
    s->ndim = ndim;
    for (int i = 0; i < ndim && i < 4; i++)
        s->shape[i] = shape[i];
    s->optional = false;
    l->n++;
    return MOE_OK;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static uint32_t scale_mask(moe_dtype scale)
{
    /* E8M0 scales are raw bytes, so some writers label them U8; f32 copies of power-of-two
     * scales are exact, so they are accepted wherever E8M0 is. Block-FP8 f32 scales may
     * come as bf16 from some exporters. */
    if (scale == MOE_DTYPE_F8_E8M0)
        return MOE_DTBIT(MOE_DTYPE_F8_E8M0) | MOE_DTBIT(MOE_DTYPE_U8) | MOE_DTBIT(MOE_DTYPE_F32);
    return MOE_DTBIT(MOE_DTYPE_F32) | MOE_DTBIT(MOE_DTYPE_BF16);
}

/* compressed-tensors pack-quantized: weight_packed int32 [out, in/8], weight_scale [out,
 * in/G] (bf16 as Kimi ships it; f16 or f32 from a model saved in those), weight_shape [2]
 * (int64 as torch.tensor(shape) writes it; int32 accepted), whose values the layer checks. */
static moe_status add_int4_proj(moe_spec_list *l, const char *prefix, const char *proj,
                                const moe_mlp_desc *m, moe_tensor_group group, int layer,
                                int expert, moe_tensor_role wrole, moe_tensor_role srole,
                                int64_t out, int64_t in)
{
    const moe_tensor_role shrole = wrole == MOE_ROLE_GATE ? MOE_ROLE_GATE_SHAPE
                                   : wrole == MOE_ROLE_UP ? MOE_ROLE_UP_SHAPE
                                                          : MOE_ROLE_DOWN_SHAPE;
    const int64_t shape[2] = {out, in / 8}, sshape[2] = {out, in / m->block_in}, two = 2;
    moe_status st =
        moe_spec_add(l, layer, expert, group, wrole, MOE_DTYPE_I32, MOE_DTBIT(MOE_DTYPE_I32), 2,
                     shape, "%s.%s.weight_packed", prefix, proj);
    if (st) return st;
    st = moe_spec_add(l, layer, expert, group, srole, MOE_DTYPE_BF16, MOE_MASK_FLOAT, 2, sshape,
                      "%s.%s.weight_scale", prefix, proj);
    if (st) return st;
    return moe_spec_add(l, layer, expert, group, shrole, MOE_DTYPE_I64, MOE_DTBIT(MOE_DTYPE_I32), 1,
                        &two, "%s.%s.weight_shape", prefix, proj);
}

/* One projection [out, in] of MLP M, and its scale when the format has one. */
static moe_status add_proj(moe_spec_list *l, const char *prefix, const char *proj,
                           const moe_mlp_names *names, const moe_mlp_desc *m,
                           moe_tensor_group group, int layer, int expert, moe_tensor_role wrole,
                           moe_tensor_role srole, int64_t out, int64_t in)
{
    if (m->format == MOE_WFMT_BF16 || m->format == MOE_WFMT_F32 || m->format == MOE_WFMT_F16) {
        /* Unquantised: BF16 until the checkpoint's dtype decides (moe_model_resolve_formats),
         * so any float; F32 and F16 hold the group to the dtype its projections have. */
        const moe_dtype dt = m->format == MOE_WFMT_F32   ? MOE_DTYPE_F32
                             : m->format == MOE_WFMT_F16 ? MOE_DTYPE_F16
                                                         : MOE_DTYPE_BF16;
        const uint32_t mask = m->format == MOE_WFMT_BF16 ? MOE_MASK_FLOAT : MOE_DTBIT(dt);
        const int64_t shape[2] = {out, in};
        return moe_spec_add(l, layer, expert, group, wrole, dt, mask, 2, shape, "%s.%s.%s", prefix,
                            proj, names->weight);
    }
    moe_status st;
    if (m->format == MOE_WFMT_FP8_BLOCK) {
        const int64_t shape[2] = {out, in};
        const int64_t sshape[2] = {ceil_div(out, m->block_out), ceil_div(in, m->block_in)};
        st = moe_spec_add(l, layer, expert, group, wrole, MOE_DTYPE_F8_E4M3,
                          MOE_DTBIT(MOE_DTYPE_F8_E4M3), 2, shape, "%s.%s.%s", prefix, proj,
                          names->weight);
        if (st) return st;
        return moe_spec_add(l, layer, expert, group, srole, m->scale_dtype,
                            scale_mask(m->scale_dtype), 2, sshape, "%s.%s.%s", prefix, proj,
                            names->scale);
    }
    if (m->format == MOE_WFMT_INT4_GROUP) /* the format's own names, whatever the family's */
        return add_int4_proj(l, prefix, proj, m, group, layer, expert, wrole, srole, out, in);
    /* MXFP4 as separate tensors: two E2M1 codes per byte along K, one E8M0 per 32 of K. */
    const int64_t shape[2] = {out, in / 2};
    const int64_t sshape[2] = {out, in / 32};
    st = moe_spec_add(l, layer, expert, group, wrole, MOE_DTYPE_I8,
                      MOE_DTBIT(MOE_DTYPE_I8) | MOE_DTBIT(MOE_DTYPE_U8), 2, shape, "%s.%s.%s",
                      prefix, proj, names->weight);
    if (st) return st;
    return moe_spec_add(l, layer, expert, group, srole, MOE_DTYPE_F8_E8M0,
                        scale_mask(MOE_DTYPE_F8_E8M0) & ~MOE_DTBIT(MOE_DTYPE_F32), 2, sshape,
                        "%s.%s.%s", prefix, proj, names->scale);
}

moe_status moe_spec_add_mlp(moe_spec_list *l, const char *prefix, const moe_mlp_names *names,
                            const moe_mlp_desc *m, moe_tensor_group group, int layer, int expert)
{
    const int64_t h = m->hidden, i = m->intermediate;
    moe_status st = add_proj(l, prefix, names->gate, names, m, group, layer, expert, MOE_ROLE_GATE,
                             MOE_ROLE_GATE_SCALE, i, h);
    if (st) return st;
    st = add_proj(l, prefix, names->up, names, m, group, layer, expert, MOE_ROLE_UP,
                  MOE_ROLE_UP_SCALE, i, h);
    if (st) return st;
    return add_proj(l, prefix, names->down, names, m, group, layer, expert, MOE_ROLE_DOWN,
                    MOE_ROLE_DOWN_SCALE, h, i);
}

moe_status moe_spec_add_router(moe_spec_list *l, const moe_model_desc *d, int layer,
                               const char *prefix)
{
    const int64_t router[2] = {d->layers[layer].routing.n_experts, d->hidden};
    return moe_spec_add(l, layer, -1, MOE_GROUP_ROUTER, MOE_ROLE_ROUTER_WEIGHT, d->router_dtype,
                        MOE_MASK_FLOAT, 2, router, "%s.gate.weight", prefix);
}

moe_status moe_spec_add_experts(moe_spec_list *l, const moe_model_desc *d, int layer,
                                const char *prefix, const moe_mlp_names *names)
{
    const moe_layer_desc *ld = &d->layers[layer];
    char p[160];
    for (int x = 0; x < ld->routing.n_experts; x++) {
        snprintf(p, sizeof p, "%s.experts.%d", prefix, x);
        moe_status st = moe_spec_add_mlp(l, p, names, &ld->experts, MOE_GROUP_ROUTED, layer, x);
        if (st) return st;
    }
    if (ld->n_shared == 0) return MOE_OK;
    snprintf(p, sizeof p, "%s.shared_experts", prefix);
    return moe_spec_add_mlp(l, p, names, &ld->shared, MOE_GROUP_SHARED, layer, -1);
}

typedef moe_status (*family_tensors_fn)(const moe_model_desc *d, int layer, moe_spec_list *l);

static family_tensors_fn tensors_of(moe_family f)
{
    switch (f) {
    case MOE_FAMILY_DEEPSEEK_V2:
    case MOE_FAMILY_DEEPSEEK_V3:
    case MOE_FAMILY_KIMI_K2: return moe_family_deepseek_tensors;
    case MOE_FAMILY_DEEPSEEK_V4: return moe_family_deepseek_v4_tensors;
    case MOE_FAMILY_QWEN3_MOE: return moe_family_qwen3_tensors;
    case MOE_FAMILY_MIXTRAL: return moe_family_mixtral_tensors;
    case MOE_FAMILY_GPT_OSS: return moe_family_gpt_oss_tensors;
    case MOE_FAMILY_DEEPSEEK_V32:
    case MOE_FAMILY_GLM4_MOE:
    case MOE_FAMILY_GLM_MOE_DSA:
    case MOE_FAMILY_GLM4_MOE_LITE: return moe_family_deepseek_tensors;
    case MOE_FAMILY_MINIMAX_M2: return moe_family_minimax_m2_tensors;
    case MOE_FAMILY_KIMI_K25: return moe_family_kimi_k25_tensors;
    case MOE_FAMILY_QWEN3_NEXT:
    case MOE_FAMILY_QWEN3_5_MOE: return moe_family_qwen3_next_tensors;
    case MOE_FAMILY_ERNIE4_5_MOE: return moe_family_ernie4_5_moe_tensors;
    case MOE_FAMILY_LLAMA4: return moe_family_llama4_tensors;
    case MOE_FAMILY_COUNT_: break;
    }
    return NULL;
}

moe_status moe_model_layer_tensors(const moe_model_desc *desc, int layer, moe_tensor_spec **out,
                                   size_t *count)
{
    if (!desc || !out || !count)
        return moe_error(MOE_EINVAL,
                         "moe_model_layer_tensors: argument 'desc', 'out' or 'count' is NULL");
    if (!desc->layers || layer < 0 || layer >= desc->n_layers)
        return moe_error(MOE_EINVAL, "layer %d is outside [0, %d)", layer, desc->n_layers);
    family_tensors_fn fn = tensors_of(desc->family);
    if (!fn)
        return moe_error(MOE_EINVAL, "model description has an unknown family %d",
                         (int)desc->family);
    moe_spec_list l = {NULL, 0, 0};
    moe_status st = fn(desc, layer, &l);
    if (st) {
        moe_free(l.v);
        return st;
    }
    *out = l.v;
    *count = l.n;
    return MOE_OK;
}

bool moe_model_alt_name(const moe_model_desc *desc, const char *name, char *buf, size_t cap)
{
    static const char pfx[] = "model.";
    if (desc && name && buf && desc->family == MOE_FAMILY_KIMI_K25)
        return moe_family_kimi_k25_alt_name(name, buf, cap);
    if (!desc || !name || !buf || desc->family != MOE_FAMILY_DEEPSEEK_V4) return false;
    if (strncmp(name, "layers.", 7) != 0) return false;
    int n = snprintf(buf, cap, "%s%s", pfx, name);
    return n > 0 && (size_t)n < cap;
}
