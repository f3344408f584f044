/* route_methods.c — the row drivers: each method's selection and its weights. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/ref/math_ref.h"
#include "kernels/ref/route_rows.h"
#include "route/router_internal.h"

/*
 * Every driver routes one row. Scores, keys, top-k and exp-sums run on the primitives the
 * router chose at creation (kernels/route.h). What is left is plain C shared by every ISA:
 * group scores (an integer max over the encoded keys, or one f32 add of a group's top two),
 * masking, and the weight arithmetic, which uses the same scalar exp as the reference
 * kernels (math_ref.h); the parts noaux_tc kernels share live in kernels/ref/route_rows.h.
 * So a row's ids and weights are the same bits whatever the machine. noaux_tc routes whole
 * batches with its own kernel family (route_noaux_tc), whose portable path is those same
 * steps.
 *
 * A slot whose key is MOE_ROUTE_KEY_EXCLUDED (a non-finite score, a masked group's expert,
 * or the fill-in when fewer than K real candidates exist) gets weight 0. Slots come in
 * descending key order, so the real ones are always first.
 */

/* w[j] = exp(z_j - z_0) over the selected real slots (slot 0 holds their largest logit), 0
 * for the others: the numerators of a softmax over the selected. */
static void exp_selected(const float *z, const int32_t *ids, const uint32_t *top, int k, float *w)
{
    const float zmax = z[ids[0]];
    for (int j = 0; j < k; j++)
        w[j] = moe_route_is_real(top[j]) ? moe_math_exp(z[ids[j]] - zmax) : 0.0f;
}

/* w[j] = softmax(z)[ids[j]] · scale, the softmax over every finite logit of the row. Slot 0
 * holds the row's largest finite logit whenever the selection was on logits and the group
 * holding it was kept, which every logit-selecting method guarantees. */
static void softmax_weights(const moe_router *r, const float *z, const int32_t *ids,
                            const uint32_t *top, float scale, float *w)
{
    const int k = r->top_k;
    if (!moe_route_is_real(top[0])) {
        memset(w, 0, (size_t)k * sizeof *w);
        return;
    }
    const float m = z[ids[0]];
    const float sum = r->expsum((size_t)r->n_experts, z, m);
    for (int j = 0; j < k; j++)
        w[j] = moe_route_is_real(top[j]) ? (moe_math_exp(z[ids[j]] - m) / sum) * scale : 0.0f;
}

/* ---- Group selection -------------------------------------------------------------------- */

/* Keeps the topk_group groups with the largest gkey and masks the others (route_rows.h). */
static void keep_groups(const moe_router *r, moe_route_scratch *sc)
{
    moe_route_keep_groups(r->topk, r->n_group, r->topk_group, r->group_size, sc->gkey, sc->gidx,
                          sc->top, sc->key);
}

/* group_limited_greedy: a group's score is its largest logit (the largest softmax). An
 * integer max over the encoded keys is exactly that, EXCLUDED when the group has no finite
 * logit. */
static void group_max_keys(const moe_router *r, moe_route_scratch *sc)
{
    const size_t m = (size_t)r->group_size;
    for (int g = 0; g < r->n_group; g++) {
        const uint32_t *key = sc->key + (size_t)g * m;
        uint32_t best = MOE_ROUTE_KEY_EXCLUDED;
        for (size_t i = 0; i < m; i++)
            best = key[i] > best ? key[i] : best;
        sc->gkey[g] = best;
    }
}

/* ---- The drivers ------------------------------------------------------------------------ */

/* Top-k on the logits: softmax_topk, topk_softmax, greedy, sigmoid_top1. */
static void select_on_logits(const moe_router *r, const float *z, moe_route_scratch *sc,
                             int32_t *ids)
{
    r->logit_keys((size_t)r->n_experts, z, sc->key);
    r->topk((size_t)r->n_experts, sc->key, (size_t)r->top_k, ids, sc->top);
}

/* The weights of the softmax methods once the selection is made. */
static void softmax_family_weights(const moe_router *r, const float *z, const int32_t *ids,
                                   const uint32_t *top, float *w)
{
    const float scale = r->apply_rsf ? r->rsf : 1.0f;
    if (r->renormalize) {
        exp_selected(z, ids, top, r->top_k, w);
        moe_route_normalize(w, r->top_k, scale);
        return;
    }
    softmax_weights(r, z, ids, top, scale, w);
}

static void row_logits_softmax(const moe_router *r, const float *z, int64_t token,
                               moe_route_scratch *sc, int32_t *ids, float *w)
{
    (void)token;
    select_on_logits(r, z, sc, ids);
    softmax_family_weights(r, z, ids, sc->top, w);
}

static void row_group_limited_greedy(const moe_router *r, const float *z, int64_t token,
                                     moe_route_scratch *sc, int32_t *ids, float *w)
{
    (void)token;
    r->logit_keys((size_t)r->n_experts, z, sc->key);
    if (r->grouped) {
        group_max_keys(r, sc);
        keep_groups(r, sc);
    }
    r->topk((size_t)r->n_experts, sc->key, (size_t)r->top_k, ids, sc->top);
    softmax_family_weights(r, z, ids, sc->top, w);
}

static void row_sigmoid_top1(const moe_router *r, const float *z, int64_t token,
                             moe_route_scratch *sc, int32_t *ids, float *w)
{
    (void)token;
    select_on_logits(r, z, sc, ids);
    if (!moe_route_is_real(sc->top[0])) {
        w[0] = 0.0f;
        return;
    }
    /* The score kernel on the one selected logit: the same sigmoid bits as a full row. */
    float s;
    uint32_t key;
    r->score_keys(1, &z[ids[0]], NULL, &s, &key);
    w[0] = s * r->rsf;
}

/* softmax_bias (ERNIE-4.5): p = the softmax over the row's finite logits, p_e =
 * exp(z_e - M) / S with M their largest and S the expsum primitive's sum; key_e = p_e + bias_e
 * (one f32 add; a non-finite logit's key is excluded); top-k of the keys; weights the unbiased
 * p at the selected, divided by max(their sum in slot order, renorm_min), times rsf. */
static void row_softmax_bias(const moe_router *r, const float *z, int64_t token,
                             moe_route_scratch *sc, int32_t *ids, float *w)
{
    (void)token;
    const int e = r->n_experts, k = r->top_k;
    float m = -INFINITY;
    for (int i = 0; i < e; i++)
        if (isfinite(z[i]) && z[i] > m) m = z[i];
    const float sum = isfinite(m) ? r->expsum((size_t)e, z, m) : 0.0f;
    float *q = sc->s; /* the biased keys as floats, then encoded */
    for (int i = 0; i < e; i++)
        q[i] = isfinite(z[i]) ? moe_math_exp(z[i] - m) / sum + r->bias[i] : NAN;
    r->logit_keys((size_t)e, q, sc->key);
    r->topk((size_t)e, sc->key, (size_t)k, ids, sc->top);
    float total = 0.0f;
    for (int j = 0; j < k; j++) {
        w[j] = moe_route_is_real(sc->top[j]) ? moe_math_exp(z[ids[j]] - m) / sum : 0.0f;
        total += w[j];
    }
    const float div = total > r->renorm_min ? total : r->renorm_min;
    for (int j = 0; j < k; j++)
        w[j] = div > 0.0f ? (w[j] / div) * r->rsf : 0.0f;
}

/* noaux_tc: the whole batch through the kernel chosen at creation (its scratch is ours). */
static void rows_noaux_tc(const moe_router *r, size_t n, const float *z, moe_route_scratch *sc,
                          int32_t *ids, float *w)
{
    r->noaux_tc(&r->noaux_args, n, z, ids, w, sc);
}

/* Hash: the ids are the table's row, in its order; the weights are the scores at those ids,
 * so only K scores are computed. A non-finite logit scores 0, like any other method's. */
static void row_hash(const moe_router *r, const float *z, int64_t token, moe_route_scratch *sc,
                     int32_t *ids, float *w)
{
    const int k = r->top_k;
    const int32_t *row = r->tid2eid + token * (int64_t)k;
    float *zsel = sc->s; /* the selected logits, gathered so one kernel call scores them */
    for (int j = 0; j < k; j++) {
        ids[j] = row[j];
        zsel[j] = z[row[j]];
    }
    r->score_keys((size_t)k, zsel, NULL, w, sc->key);
    if (r->renormalize)
        moe_route_normalize(w, k, r->rsf);
    else
        moe_route_scale(w, k, r->rsf);
}

void moe_route_bind_row(moe_router *r)
{
    switch (r->method) {
    case MOE_ROUTE_SOFTMAX_TOPK:
    case MOE_ROUTE_TOPK_SOFTMAX:
    case MOE_ROUTE_GREEDY: r->row = row_logits_softmax; break;
    case MOE_ROUTE_GROUP_LIMITED_GREEDY: r->row = row_group_limited_greedy; break;
    case MOE_ROUTE_NOAUX_TC: r->rows = rows_noaux_tc; break;
    case MOE_ROUTE_HASH: r->row = row_hash; break;
    case MOE_ROUTE_SIGMOID_TOP1: r->row = row_sigmoid_top1; break;
    case MOE_ROUTE_SOFTMAX_BIAS: r->row = row_softmax_bias; break;
    }
}
