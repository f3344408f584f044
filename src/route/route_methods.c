/* route_methods.c — the row drivers: each method's selection and its weights. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/ref/math_ref.h"
#include "route/router_internal.h"

/*
 * Every driver routes one row. Scores, keys, top-k and exp-sums run on the primitives the
 * router chose at creation (kernels/route.h). What is left is plain C shared by every ISA:
 * group scores (an integer max over the encoded keys, or one f32 add of a group's top two),
 * masking, and the weight arithmetic, which uses the same scalar exp as the reference
 * kernels (math_ref.h).
 * So a row's ids and weights are the same bits whatever the machine.
 *
 * A slot whose key is MOE_ROUTE_KEY_EXCLUDED (a non-finite score, a masked group's expert,
 * or the fill-in when fewer than K real candidates exist) gets weight 0. Slots come in
 * descending key order, so the real ones are always first.
 */

static inline bool is_real(uint32_t key) { return key > MOE_ROUTE_KEY_EXCLUDED; }

/* w[j] = (w[j] / sum) · scale over the K slots: a zero sum (every weight 0) leaves zeros.
 * Dividing each weight, rather than multiplying by scale / sum, cannot overflow on a tiny sum. */
static void normalize(float *w, int k, float scale)
{
    float sum = 0.0f;
    for (int j = 0; j < k; j++)
        sum += w[j];
    if (!(sum > 0.0f)) return;
    for (int j = 0; j < k; j++)
        w[j] = (w[j] / sum) * scale;
}

static void scale_by(float *w, int k, float scale)
{
    if (scale == 1.0f) return;
    for (int j = 0; j < k; j++)
        w[j] *= scale;
}

/* w[j] = exp(z_j - z_0) over the selected real slots (slot 0 holds their largest logit), 0
 * for the others: the numerators of a softmax over the selected. */
static void exp_selected(const float *z, const int32_t *ids, const uint32_t *top, int k, float *w)
{
    const float zmax = z[ids[0]];
    for (int j = 0; j < k; j++)
        w[j] = is_real(top[j]) ? moe_math_exp(z[ids[j]] - zmax) : 0.0f;
}

/* w[j] = softmax(z)[ids[j]] · scale, the softmax over every finite logit of the row. Slot 0
 * holds the row's largest finite logit whenever the selection was on logits and the group
 * holding it was kept, which every logit-selecting method guarantees. */
static void softmax_weights(const moe_router *r, const float *z, const int32_t *ids,
                            const uint32_t *top, float scale, float *w)
{
    const int k = r->top_k;
    if (!is_real(top[0])) {
        memset(w, 0, (size_t)k * sizeof *w);
        return;
    }
    const float m = z[ids[0]];
    const float sum = r->expsum((size_t)r->n_experts, z, m);
    for (int j = 0; j < k; j++)
        w[j] = is_real(top[j]) ? (moe_math_exp(z[ids[j]] - m) / sum) * scale : 0.0f;
}

/* ---- Group selection -------------------------------------------------------------------- */

/* Keeps the topk_group groups with the largest gkey (lower group on ties) and masks every
 * expert of the others as EXCLUDED (never a low real value: a masked expert must lose to
 * every real key, negative ones included). */
static void keep_groups(const moe_router *r, moe_route_scratch *sc)
{
    const size_t m = (size_t)r->group_size;
    r->topk((size_t)r->n_group, sc->gkey, (size_t)r->topk_group, sc->gidx, sc->top);
    /* topk marked the kept groups TAKEN; every other gkey is still above TAKEN. */
    for (int g = 0; g < r->n_group; g++) {
        if (sc->gkey[g] == MOE_ROUTE_KEY_TAKEN) continue;
        uint32_t *key = sc->key + (size_t)g * m;
        for (size_t i = 0; i < m; i++)
            key[i] = MOE_ROUTE_KEY_EXCLUDED;
    }
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

/* noaux_tc: a group's score is the sum of its two largest biased keys (a repeated maximum
 * counts twice, as topk(2).sum does); fewer than two real keys scores EXCLUDED (-inf). The
 * two largest come from the top-k primitive, after which their keys are put back: a group is
 * a short row, which the SIMD top-k keeps in registers (bench/NOTES.md compares this with a
 * plain-C scan). */
static void group_top2_keys(const moe_router *r, moe_route_scratch *sc)
{
    const size_t m = (size_t)r->group_size;
    for (int g = 0; g < r->n_group; g++) {
        uint32_t *key = sc->key + (size_t)g * m;
        int32_t at[2];
        uint32_t best[2];
        r->topk(m, key, 2, at, best);
        key[at[0]] = best[0];
        key[at[1]] = best[1];
        uint32_t gk = MOE_ROUTE_KEY_EXCLUDED;
        if (is_real(best[1])) {
            const float sum = moe_route_key_decode(best[0]) + moe_route_key_decode(best[1]);
            /* Two finite keys of the same sign can overflow to ±Inf (huge biases), which
             * still orders right; NaN cannot arise, as real keys are finite. */
            gk = moe_route_key_encode(sum);
        }
        sc->gkey[g] = gk;
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
        normalize(w, r->top_k, scale);
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
    if (!is_real(sc->top[0])) {
        w[0] = 0.0f;
        return;
    }
    /* The score kernel on the one selected logit: the same sigmoid bits as a full row. */
    float s;
    uint32_t key;
    r->score_keys(1, &z[ids[0]], NULL, &s, &key);
    w[0] = s * r->rsf;
}

/* Unbiased scores at the chosen ids, 0 for EXCLUDED slots; then renormalise and scale. */
static void score_weights(const moe_router *r, const float *s, const int32_t *ids,
                          const uint32_t *top, float *w)
{
    for (int j = 0; j < r->top_k; j++)
        w[j] = is_real(top[j]) ? s[ids[j]] : 0.0f;
    if (r->renormalize)
        normalize(w, r->top_k, r->rsf);
    else
        scale_by(w, r->top_k, r->rsf);
}

static void row_noaux_tc(const moe_router *r, const float *z, int64_t token, moe_route_scratch *sc,
                         int32_t *ids, float *w)
{
    (void)token;
    r->score_keys((size_t)r->n_experts, z, r->bias, sc->s, sc->key);
    if (r->grouped) {
        group_top2_keys(r, sc);
        keep_groups(r, sc);
    }
    r->topk((size_t)r->n_experts, sc->key, (size_t)r->top_k, ids, sc->top);
    score_weights(r, sc->s, ids, sc->top, w);
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
        normalize(w, k, r->rsf);
    else
        scale_by(w, k, r->rsf);
}

void moe_route_bind_row(moe_router *r)
{
    switch (r->method) {
    case MOE_ROUTE_SOFTMAX_TOPK:
    case MOE_ROUTE_TOPK_SOFTMAX:
    case MOE_ROUTE_GREEDY: r->row = row_logits_softmax; break;
    case MOE_ROUTE_GROUP_LIMITED_GREEDY: r->row = row_group_limited_greedy; break;
    case MOE_ROUTE_NOAUX_TC: r->row = row_noaux_tc; break;
    case MOE_ROUTE_HASH: r->row = row_hash; break;
    case MOE_ROUTE_SIGMOID_TOP1: r->row = row_sigmoid_top1; break;
    }
}
