/* router_from_model.c — moe_router_create_from_model: a layer's router from the checkpoint. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "model/model_handle.h"
#include "model/verify.h"

#define WHO "moe_router_create_from_model"

moe_router_params moe_router_params_of(const moe_model_desc *d, const moe_routing_desc *r)
{
    moe_router_params p;
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.method = r->method;
    p.score = r->score;
    p.n_experts = r->n_experts;
    p.top_k = r->top_k;
    p.n_group = r->n_group;
    p.topk_group = r->topk_group;
    p.norm_topk_prob = r->norm_topk_prob;
    p.routed_scaling_factor = r->routed_scaling_factor;
    p.vocab_size = r->method == MOE_ROUTE_HASH ? d->vocab_size : 0;
    p.renorm_min = r->renorm_min;
    return p;
}

/* Points P at the layer's correction bias and tid2eid tensors, in their checkpoint dtype and
 * place: the router converts and copies them once. */
static moe_status attach_tensors(const moe_model *model, int layer, moe_router_params *p)
{
    moe_tensor_spec *specs = NULL;
    size_t n = 0;
    moe_status st = moe_model_layer_tensors(moe_model_desc_of(model), layer, &specs, &n);
    if (st) return st;
    const moe_ckpt *ckpt = moe_model_ckpt_of(model);
    for (size_t i = 0; i < n && !st; i++) {
        const moe_tensor_spec *s = &specs[i];
        if (s->group != MOE_GROUP_ROUTER) continue;
        if (s->role != MOE_ROLE_CORRECTION_BIAS && s->role != MOE_ROLE_TID2EID) continue;
        const moe_tensor *t = NULL;
        st = moe_model_find_checked(moe_model_desc_of(model), ckpt, s, &t);
        if (st) st = moe_error_context(st, WHO ": ");
        /* The router reads the bytes now, long after open: the file may have shrunk since. */
        if (!st) st = moe_ckpt_check_files(ckpt, &t, 1);
        if (st || !t) continue;
        if (s->role == MOE_ROLE_CORRECTION_BIAS) {
            p->correction_bias = t->data;
            p->correction_bias_dtype = t->dtype;
        } else {
            p->tid2eid = t->data;
            p->tid2eid_dtype = t->dtype;
        }
    }
    moe_free(specs);
    return st;
}

moe_status moe_router_create_from_model(const moe_model *model, int layer, moe_router **out)
{
    if (!model) return moe_error(MOE_EINVAL, WHO ": argument 'model' is NULL");
    if (!out) return moe_error(MOE_EINVAL, WHO ": argument 'out' is NULL");
    const moe_model_desc *d = moe_model_desc_of(model);
    if (layer < 0 || layer >= d->n_layers)
        return moe_error(MOE_EINVAL, WHO ": layer %d is outside [0, %d)", layer, d->n_layers);
    const moe_layer_desc *ld = &d->layers[layer];
    if (ld->kind == MOE_LAYER_DENSE)
        return moe_error(MOE_EINVAL, WHO ": layer %d is dense (one MLP, no router)", layer);
    moe_router_params p = moe_router_params_of(d, &ld->routing);
    moe_status st = attach_tensors(model, layer, &p);
    if (st) return st;
    st = moe_router_create(&p, out);
    if (st) return moe_error_context(st, "layer %d (%s): ", layer, d->model_type);
    return MOE_OK;
}
