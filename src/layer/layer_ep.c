/* layer_ep.c — moe_ep.h: the steps of a placed forward, checked at the door. */
#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "layer/layer_internal.h"

#define INFO_MIN_SIZE (offsetof(moe_ep_info, fingerprint) + sizeof(uint64_t))
#define ROWS_MIN_SIZE (offsetof(moe_ep_rows_args, trace) + sizeof(moe_trace *))
#define ROWS_WEIGHTS_SIZE (offsetof(moe_ep_rows_args, weights) + sizeof(const float *))
#define INFO_SCALES_SIZE (offsetof(moe_ep_info, scales_input) + sizeof(int))
#define COMBINE_MIN_SIZE (offsetof(moe_ep_combine_args, trace) + sizeof(moe_trace *))
#define FWD_MIN_SIZE (offsetof(moe_forward_args, trace) + sizeof(moe_trace *))

static int n_experts(const moe_layer *l) { return l->plan.moe ? l->plan.ld->routing.n_experts : 0; }
static int top_k(const moe_layer *l) { return l->plan.moe ? l->plan.ld->routing.top_k : 0; }
static bool scales_input(const moe_layer *l) { return l->plan.moe && l->plan.ld->scale_input; }

/* ---- Placement ---------------------------------------------------------------------------- */

moe_status moe_ep_get_info(const moe_layer *layer, moe_ep_info *info)
{
    if (!layer || !info)
        return moe_error(MOE_EINVAL, "moe_ep_get_info: argument '%s' is NULL",
                         layer ? "info" : "layer");
    if (info->size < INFO_MIN_SIZE)
        return moe_error(MOE_EINVAL,
                         "moe_ep_get_info: info->size = %zu is smaller than the %zu bytes this "
                         "version writes (set it to sizeof(moe_ep_info))",
                         info->size, (size_t)INFO_MIN_SIZE);
    const moe_layer_plan *p = &layer->plan;
    info->rank = p->ep.rank;
    info->n_ranks = p->ep.n_ranks;
    info->n_experts = n_experts(layer);
    info->top_k = top_k(layer);
    info->n_owned = p->ep.slot ? p->ep.n_owned : info->n_experts;
    info->packed_bytes = moe_layer_rank_bytes(p, p->ep.rank);
    info->expert_bytes = p->moe ? p->groups[MOE_LG_ROUTED].group.expert_stride : 0;
    info->fingerprint = moe_layer_fingerprint(p);
    if (info->size >= INFO_SCALES_SIZE) info->scales_input = scales_input(layer);
    return MOE_OK;
}

moe_status moe_ep_expert_rank(const moe_layer *layer, int expert, int *rank)
{
    if (!layer || !rank)
        return moe_error(MOE_EINVAL, "moe_ep_expert_rank: argument '%s' is NULL",
                         layer ? "rank" : "layer");
    if (expert < 0 || expert >= n_experts(layer))
        return moe_error(MOE_ERANGE, "moe_ep_expert_rank: layer %d: expert %d is outside [0, %d)",
                         layer->plan.index, expert, n_experts(layer));
    *rank = layer->plan.ep.expert_rank ? layer->plan.ep.expert_rank[expert] : 0;
    return MOE_OK;
}

moe_status moe_ep_rank_bytes(const moe_layer *layer, int rank, size_t *bytes)
{
    if (!layer || !bytes)
        return moe_error(MOE_EINVAL, "moe_ep_rank_bytes: argument '%s' is NULL",
                         layer ? "bytes" : "layer");
    if (rank < 0 || rank >= layer->plan.ep.n_ranks)
        return moe_error(MOE_ERANGE, "moe_ep_rank_bytes: layer %d: rank %d is outside [0, %d)",
                         layer->plan.index, rank, layer->plan.ep.n_ranks);
    *bytes = moe_layer_rank_bytes(&layer->plan, rank);
    return MOE_OK;
}

size_t moe_ep_workspace_size(const moe_layer *layer, size_t n_tokens, size_t n_rows)
{
    if (!layer) return 0;
    const moe_layer_plan *p = &layer->plan;
    if (!p->moe) return moe_layer_plan_workspace(p, n_tokens); /* moe_layer_forward's */
    size_t need = 0;
    if (n_tokens > 0) {
        const size_t route = moe_layer_part_workspace(p, n_tokens, MOE_PART_ROUTE);
        const size_t comb = moe_layer_part_workspace(p, n_tokens, MOE_PART_COMBINE);
        if (!route || !comb) return 0;
        need = route > comb ? route : comb;
    }
    if (n_rows > 0) {
        const size_t rows = moe_layer_part_workspace(p, n_rows, MOE_PART_ROWS);
        if (!rows) return 0;
        if (rows > need) need = rows;
    }
    return need;
}

/* ---- Shared checks ------------------------------------------------------------------------ */

static moe_status check_layer(const char *fn, const moe_layer *l, const void *args, size_t size,
                              size_t min_size, const char *type)
{
    if (!l) return moe_error(MOE_EINVAL, "%s: argument 'layer' is NULL", fn);
    if (!args) return moe_error(MOE_EINVAL, "%s: argument 'args' is NULL", fn);
    if (size < min_size)
        return moe_error(MOE_EINVAL,
                         "%s: args->size = %zu is smaller than the %zu bytes this version reads "
                         "(set it to sizeof(%s))",
                         fn, size, min_size, type);
    if (!l->plan.moe)
        return moe_error(MOE_EINVAL,
                         "%s: layer %d is a dense layer: every rank runs its own tokens with "
                         "moe_layer_forward",
                         fn, l->plan.index);
    return MOE_OK;
}

/* Hidden width and dtype, the rows, the workspace of NEED bytes. */
static moe_status check_io(const char *fn, const moe_layer *l, size_t n, size_t hidden_size,
                           moe_dtype dt, const void *rows, const char *rows_name, const void *out,
                           const char *out_name, const void *ws, size_t ws_size, size_t need)
{
    const int index = l->plan.index;
    const int64_t h = l->plan.desc->hidden;
    if (hidden_size != (size_t)h)
        return moe_error(MOE_EINVAL,
                         "%s: layer %d: args->hidden_size = %zu, but the model's hidden size is "
                         "%lld",
                         fn, index, hidden_size, (long long)h);
    if (dt != MOE_DTYPE_F32 && dt != MOE_DTYPE_BF16)
        return moe_error(MOE_EDTYPE, "%s: layer %d: the rows' dtype %s is not f32 or bf16", fn,
                         index, moe_dtype_name(dt));
    if (!rows || !out)
        return moe_error(MOE_EINVAL, "%s: layer %d: args->%s is NULL with %zu rows", fn, index,
                         rows ? out_name : rows_name, n);
    if (need == 0)
        return moe_error(MOE_EOVERFLOW, "%s: layer %d: %zu rows: the workspace size overflows", fn,
                         index, n);
    if (!ws || (uintptr_t)ws % 64 || ws_size < need)
        return moe_error(ws && (uintptr_t)ws % 64 == 0 ? MOE_ERANGE : MOE_EINVAL,
                         "%s: layer %d: the workspace (%p, %zu bytes) must be 64-byte aligned and "
                         "hold the %zu bytes moe_ep_workspace_size gives for %zu rows",
                         fn, index, ws, ws_size, need, n);
    return MOE_OK;
}

/* ---- Step 1: route ------------------------------------------------------------------------ */

#define ROUTE "moe_ep_route"

moe_status moe_ep_route(const moe_layer *layer, const moe_forward_args *args)
{
    moe_status st =
        check_layer(ROUTE, layer, args, args ? args->size : 0, FWD_MIN_SIZE, "moe_forward_args");
    if (st || args->n_tokens == 0) return st;
    const size_t need = moe_layer_part_workspace(&layer->plan, args->n_tokens, MOE_PART_ROUTE);
    st = check_io(ROUTE, layer, args->n_tokens, args->hidden_size, args->hidden_dtype, args->hidden,
                  "hidden", args->ids_out ? (const void *)args->weights_out : NULL,
                  args->ids_out ? "weights_out" : "ids_out", args->workspace, args->workspace_size,
                  need);
    if (st) return st;
    if (layer->plan.ld->routing.method == MOE_ROUTE_HASH && (st = moe_layer_check_token_ids(layer, args, ROUTE, "")))
        return st;
    return moe_layer_forward_part(layer, args, MOE_PART_ROUTE, NULL, NULL, NULL);
}

/* ---- Step 2: the send plan ---------------------------------------------------------------- */

moe_status moe_ep_send_plan(const moe_layer *layer, size_t n_tokens, const int32_t *ids,
                            size_t *counts, int64_t *tags)
{
    static const char fn[] = "moe_ep_send_plan";
    if (!layer) return moe_error(MOE_EINVAL, "%s: argument 'layer' is NULL", fn);
    const moe_layer_plan *p = &layer->plan;
    if (!p->moe)
        return moe_error(MOE_EINVAL, "%s: layer %d is a dense layer: nothing is sent", fn,
                         p->index);
    if (!counts) return moe_error(MOE_EINVAL, "%s: argument 'counts' is NULL", fn);
    const size_t k = (size_t)top_k(layer), n = (size_t)p->ep.n_ranks;
    size_t tk;
    if (moe_mul_overflow_size(n_tokens, k, &tk) || tk > (size_t)INT64_MAX)
        return moe_error(MOE_EOVERFLOW, "%s: layer %d: %zu tokens × top_k %zu overflows", fn,
                         p->index, n_tokens, k);
    if (n_tokens > 0 && (!ids || !tags))
        return moe_error(MOE_EINVAL, "%s: argument '%s' is NULL with %zu tokens", fn,
                         ids ? "tags" : "ids", n_tokens);
    const int e_n = n_experts(layer);
    for (size_t i = 0; i < tk; i++)
        if (ids[i] < 0 || ids[i] >= e_n)
            return moe_error(MOE_ERANGE, "%s: layer %d: ids[%zu][%zu] = %d is outside [0, %d)", fn,
                             p->index, i / k, i % k, (int)ids[i], e_n);
    /* Counts, then each rank's tags in ascending order (a stable counting sort by rank). */
    for (size_t r = 0; r < n; r++)
        counts[r] = 0;
    for (size_t i = 0; i < tk; i++)
        counts[p->ep.expert_rank ? (size_t)p->ep.expert_rank[ids[i]] : 0]++;
    size_t start = 0;
    for (size_t r = 0; r < n; r++) {
        size_t fill = start;
        for (size_t i = 0; i < tk; i++)
            if ((p->ep.expert_rank ? (size_t)p->ep.expert_rank[ids[i]] : 0) == r)
                tags[fill++] = (int64_t)i;
        start = fill;
    }
    return MOE_OK;
}

/* ---- Step 3: the experts on received rows ------------------------------------------------- */

#define EXPERTS "moe_ep_experts"

moe_status moe_ep_experts(const moe_layer *layer, const moe_ep_rows_args *args)
{
    moe_status st =
        check_layer(EXPERTS, layer, args, args ? args->size : 0, ROWS_MIN_SIZE, "moe_ep_rows_args");
    if (st || args->n_rows == 0) return st;
    const moe_layer_plan *p = &layer->plan;
    const size_t need = moe_layer_part_workspace(p, args->n_rows, MOE_PART_ROWS);
    st = check_io(EXPERTS, layer, args->n_rows, args->hidden_size, args->rows_dtype, args->rows,
                  "rows", args->experts ? (const void *)args->y : NULL,
                  args->experts ? "y" : "experts", args->workspace, args->workspace_size, need);
    if (st) return st;
    const int e_n = n_experts(layer);
    for (size_t r = 0; r < args->n_rows; r++) {
        const int32_t e = args->experts[r];
        if (e < 0 || e >= e_n || (p->ep.slot && p->ep.slot[e] < 0))
            return moe_error(MOE_ERANGE, EXPERTS ": layer %d: experts[%zu] = %d is %s of rank %d",
                             p->index, r, (int)e,
                             e < 0 || e >= e_n ? "outside [0, E): not an expert" : "not one",
                             p->ep.rank);
    }
    const float *w = scales_input(layer) && args->size >= ROWS_WEIGHTS_SIZE ? args->weights : NULL;
    if (scales_input(layer) && !w)
        return moe_error(MOE_EINVAL,
                         EXPERTS ": layer %d: its routing weights scale the experts' inputs "
                                 "(llama4): args->weights (each row's weight from moe_ep_route) "
                                 "is %s",
                         p->index, args->size < ROWS_WEIGHTS_SIZE ? "beyond args->size" : "NULL");
    for (size_t r = 0; w && r < args->n_rows; r++)
        if (!(w[r] - w[r] == 0.0f))
            return moe_error(MOE_EVALUE, EXPERTS ": layer %d: weights[%zu] = %g is not finite",
                             p->index, r, (double)w[r]);
    moe_forward_args fa;
    memset(&fa, 0, sizeof fa);
    fa.size = sizeof fa;
    fa.n_tokens = args->n_rows;
    fa.hidden_size = args->hidden_size;
    fa.hidden = args->rows;
    fa.hidden_dtype = args->rows_dtype;
    fa.out = args->y;
    fa.workspace = args->workspace;
    fa.workspace_size = args->workspace_size;
    fa.trace = args->trace;
    return moe_layer_forward_part(layer, &fa, MOE_PART_ROWS, args->experts, w, NULL);
}

/* ---- Step 5: the combine ------------------------------------------------------------------ */

#define COMBINE "moe_ep_combine"

moe_status moe_ep_combine(const moe_layer *layer, const moe_ep_combine_args *args)
{
    moe_status st = check_layer(COMBINE, layer, args, args ? args->size : 0, COMBINE_MIN_SIZE,
                                "moe_ep_combine_args");
    if (st || args->n_tokens == 0) return st;
    const moe_layer_plan *p = &layer->plan;
    const size_t need = moe_layer_part_workspace(p, args->n_tokens, MOE_PART_COMBINE);
    st = check_io(COMBINE, layer, args->n_tokens, args->hidden_size, args->hidden_dtype,
                  args->hidden, "hidden", args->out, "out", args->workspace, args->workspace_size,
                  need);
    if (st) return st;
    if (!args->weights || !args->y)
        return moe_error(MOE_EINVAL, COMBINE ": layer %d: args->%s is NULL with n_tokens = %zu",
                         p->index, args->weights ? "y" : "weights", args->n_tokens);
    const size_t k = (size_t)top_k(layer);
    size_t tk;
    if (moe_mul_overflow_size(args->n_tokens, k, &tk))
        return moe_error(MOE_EOVERFLOW, COMBINE ": layer %d: %zu tokens × top_k %zu overflows",
                         p->index, args->n_tokens, k);
    for (size_t i = 0; i < tk; i++) {
        const float w = args->weights[i];
        if (!(w - w == 0.0f))
            return moe_error(MOE_EVALUE, COMBINE ": layer %d: weights[%zu][%zu] = %g is not finite",
                             p->index, i / k, i % k, (double)w);
    }
    moe_forward_args fa;
    memset(&fa, 0, sizeof fa);
    fa.size = sizeof fa;
    fa.n_tokens = args->n_tokens;
    fa.hidden_size = args->hidden_size;
    fa.hidden = args->hidden;
    fa.hidden_dtype = args->hidden_dtype;
    fa.out = args->out;
    fa.workspace = args->workspace;
    fa.workspace_size = args->workspace_size;
    fa.trace = args->trace;
    return moe_layer_forward_part(layer, &fa, MOE_PART_COMBINE, NULL, args->weights, args->y);
}
