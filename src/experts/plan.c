/* plan.c — the route plan (a counting sort of the ids by expert) and the workspace carving. */
#include <stdint.h>
#include <string.h>

#include "core/checked.h"
#include "core/error.h"
#include "experts/experts.h"

moe_status moe_route_plan_build(moe_route_plan *p, const int32_t *ids)
{
    const size_t t_n = p->n_tokens, k_n = (size_t)p->top_k, e_n = (size_t)p->n_experts;
    size_t *off = p->offset;
    memset(off, 0, (e_n + 1) * sizeof *off);
    /* Counts land one place to the right, so the prefix sum leaves offset[e] = first row. */
    for (size_t i = 0; i < t_n * k_n; i++) {
        const int32_t e = ids[i];
        if (e < 0 || (size_t)e >= e_n)
            return moe_error(MOE_ERANGE,
                             "route plan: token %zu slot %zu has expert id %d, outside "
                             "[0, %zu)",
                             i / k_n, i % k_n, (int)e, e_n);
        off[e + 1]++;
    }
    p->n_active = 0;
    for (size_t e = 0; e < e_n; e++) {
        if (off[e + 1]) p->active[p->n_active++] = (int32_t)e;
        off[e + 1] += off[e];
    }
    /* Placing rows in token order keeps each expert's tokens ascending (a stable sort); the
     * offsets move to each expert's end and are shifted back afterwards. */
    for (size_t t = 0; t < t_n; t++) {
        for (size_t k = 0; k < k_n; k++) {
            const size_t r = off[ids[t * k_n + k]]++;
            p->token[r] = t;
            p->row[t * k_n + k] = r;
        }
    }
    for (size_t e = e_n; e > 0; e--)
        off[e] = off[e - 1];
    off[0] = 0;
    return MOE_OK;
}

void *moe_carve_take(moe_carve *c, size_t n, size_t elem)
{
    size_t bytes, start, end;
    if (c->overflow || n == SIZE_MAX || moe_mul_overflow_size(n, elem, &bytes) ||
        moe_add_overflow_size(c->used, 63, &start)) {
        c->overflow = true;
        return NULL;
    }
    start &= ~(size_t)63;
    if (moe_add_overflow_size(start, bytes, &end)) {
        c->overflow = true;
        return NULL;
    }
    c->used = end;
    return c->base ? c->base + start : NULL;
}

/* a × b, checked; SIZE_MAX on overflow (which the carve rejects). */
static size_t elems2(size_t a, size_t b)
{
    size_t r;
    return moe_mul_overflow_size(a, b, &r) ? SIZE_MAX : r;
}

void moe_experts_ws_carve(moe_carve *c, moe_experts_ws *ws, const moe_expert_group *routed,
                          int top_k, const moe_expert_group *always, size_t n_tokens)
{
    memset(ws, 0, sizeof *ws);
    if (routed) {
        const size_t e = (size_t)routed->n_experts, rows = elems2(n_tokens, (size_t)top_k);
        ws->plan.n_tokens = n_tokens;
        ws->plan.n_experts = routed->n_experts;
        ws->plan.top_k = top_k;
        ws->plan.offset = moe_carve_take(c, e + 1, sizeof(size_t));
        ws->plan.token = moe_carve_take(c, rows, sizeof(size_t));
        ws->plan.row = moe_carve_take(c, rows, sizeof(size_t));
        ws->plan.active = moe_carve_take(c, e, sizeof(int32_t));
        if (routed->ks->recipe == MOE_RECIPE_TILE || routed->scale_input)
            ws->x_routed = moe_carve_take(c, rows, routed->xg_row_bytes);
        ws->h_routed = moe_carve_take(c, elems2(rows, routed->h_stride), routed->act_elem);
        if (routed->hq_row_bytes) ws->hq_routed = moe_carve_take(c, rows, routed->hq_row_bytes);
        ws->y_routed = moe_carve_take(c, elems2(rows, (size_t)routed->hidden), sizeof(float));
    }
    if (always) {
        ws->h_always = moe_carve_take(c, elems2(n_tokens, always->h_stride), always->act_elem);
        if (always->hq_row_bytes) ws->hq_always = moe_carve_take(c, n_tokens, always->hq_row_bytes);
    }
}
