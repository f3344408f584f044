/* model_info.c — moe_model_get_info, moe_model_get_layer_info: the sizes a caller's buffers need.
 */
#include <string.h>

#include "core/error.h"
#include "model/model.h"
#include "model/model_handle.h"

/* The first release of each struct ends at its last field so far; a caller built against it
 * has size at least this. */
#define MODEL_INFO_MIN_SIZE (offsetof(moe_model_info, top_k) + sizeof(int))
#define LAYER_INFO_MIN_SIZE (offsetof(moe_layer_info, score_func) + sizeof(moe_score_func))

static moe_status check_size(const char *fn, size_t size, size_t min)
{
    if (size < min)
        return moe_error(MOE_EINVAL,
                         "%s: info->size = %zu is smaller than the %zu bytes this version writes "
                         "(set it to the struct's sizeof)",
                         fn, size, min);
    return MOE_OK;
}

void moe_layer_info_of(const moe_model_desc *d, const moe_layer_desc *ld, moe_layer_info *out)
{
    moe_layer_info i;
    memset(&i, 0, sizeof i);
    i.size = out->size;
    i.index = ld->index;
    i.kind = ld->kind;
    i.hidden_size = d->hidden;
    const bool routed = ld->kind != MOE_LAYER_DENSE;
    const moe_mlp_desc *mlp = routed ? &ld->experts : &ld->dense;
    i.n_experts = routed ? ld->routing.n_experts : 0;
    i.top_k = routed ? ld->routing.top_k : 0;
    i.intermediate_size = mlp->intermediate;
    i.expert_format = mlp->format;
    i.n_shared_experts = ld->n_shared;
    i.shared_intermediate_size = ld->n_shared > 0 ? ld->shared.intermediate : 0;
    i.shared_format = ld->n_shared > 0 ? ld->shared.format : mlp->format;
    i.route_method = routed ? ld->routing.method : MOE_ROUTE_SOFTMAX_TOPK;
    i.score_func = routed ? ld->routing.score : MOE_SCORE_SOFTMAX;
    *out = i;
}

moe_status moe_model_get_info(const moe_model *model, moe_model_info *info)
{
    static const char fn[] = "moe_model_get_info";
    if (!model) return moe_error(MOE_EINVAL, "%s: argument 'model' is NULL", fn);
    if (!info) return moe_error(MOE_EINVAL, "%s: argument 'info' is NULL", fn);
    moe_status st = check_size(fn, info->size, MODEL_INFO_MIN_SIZE);
    if (st) return st;
    const moe_model_desc *d = moe_model_desc_of(model);
    moe_model_info i;
    memset(&i, 0, sizeof i);
    i.size = info->size;
    i.family = d->model_type;
    i.n_layers = d->n_layers;
    i.hidden_size = d->hidden;
    i.vocab_size = d->vocab_size;
    for (int l = 0; l < d->n_layers; l++) {
        const moe_layer_desc *ld = &d->layers[l];
        if (ld->kind == MOE_LAYER_DENSE) continue;
        i.n_moe_layers++;
        if (ld->routing.n_experts > i.n_experts) i.n_experts = ld->routing.n_experts;
        if (ld->routing.top_k > i.top_k) i.top_k = ld->routing.top_k;
    }
    *info = i;
    return MOE_OK;
}

moe_status moe_model_get_layer_info(const moe_model *model, int layer, moe_layer_info *info)
{
    static const char fn[] = "moe_model_get_layer_info";
    if (!model) return moe_error(MOE_EINVAL, "%s: argument 'model' is NULL", fn);
    if (!info) return moe_error(MOE_EINVAL, "%s: argument 'info' is NULL", fn);
    moe_status st = check_size(fn, info->size, LAYER_INFO_MIN_SIZE);
    if (st) return st;
    const moe_model_desc *d = moe_model_desc_of(model);
    if (layer < 0 || layer >= d->n_layers)
        return moe_error(MOE_ERANGE, "%s: layer %d is outside [0, %d)", fn, layer, d->n_layers);
    moe_layer_info_of(d, &d->layers[layer], info);
    return MOE_OK;
}

moe_status moe_layer_info_check_size(const char *fn, const moe_layer_info *info)
{
    if (!info) return moe_error(MOE_EINVAL, "%s: argument 'info' is NULL", fn);
    return check_size(fn, info->size, LAYER_INFO_MIN_SIZE);
}
