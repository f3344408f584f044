/* route_rows.h — internal: the portable row algorithms of routing, over any ISA's primitives. */
#ifndef MOE_KERNELS_REF_ROUTE_ROWS_H
#define MOE_KERNELS_REF_ROUTE_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/route.h"

/*
 * Written once, in plain C, and used three ways: by the router's row drivers
 * (src/route/route_methods.c) with the primitives it chose, by every noaux_tc kernel as its
 * portable path with its own ISA's primitives, and by the reference noaux_tc kernel with the
 * reference primitives. The primitives give the same bits on every ISA and everything here is
 * integer work on keys or the same f32 operations in the same order, so a row's ids and
 * weights never depend on which ISA ran it. Everything is static inline: each caller passes
 * its primitives as constants and the compiler calls them directly.
 */

static inline bool moe_route_is_real(uint32_t key) { return key > MOE_ROUTE_KEY_EXCLUDED; }

/* w[j] = (w[j] / sum) · scale over the K slots, the sum taken in slot order: a zero sum (every
 * weight 0) leaves them. Dividing each weight, rather than multiplying by scale / sum, cannot
 * overflow on a tiny sum. */
static inline void moe_route_normalize(float *w, int k, float scale)
{
    float sum = 0.0f;
    for (int j = 0; j < k; j++)
        sum += w[j];
    if (!(sum > 0.0f)) return;
    for (int j = 0; j < k; j++)
        w[j] = (w[j] / sum) * scale;
}

static inline void moe_route_scale(float *w, int k, float scale)
{
    if (scale == 1.0f) return;
    for (int j = 0; j < k; j++)
        w[j] *= scale;
}

/* Keeps the topk_group groups with the largest gkey (lower group on ties) and masks every key
 * of the others as EXCLUDED (never a low real value: a masked expert must lose to every real
 * key, negative ones included). gkey, gidx and top are [n_group] workspace; gkey is consumed. */
static inline void moe_route_keep_groups(moe_route_topk_ukernel *topk, int n_group, int topk_group,
                                         int group_size, uint32_t *gkey, int32_t *gidx,
                                         uint32_t *top, uint32_t *key)
{
    topk((size_t)n_group, gkey, (size_t)topk_group, gidx, top);
    /* topk marked the kept groups TAKEN; every other gkey is still above TAKEN. */
    for (int g = 0; g < n_group; g++) {
        if (gkey[g] == MOE_ROUTE_KEY_TAKEN) continue;
        uint32_t *kg = key + (size_t)g * (size_t)group_size;
        for (int i = 0; i < group_size; i++)
            kg[i] = MOE_ROUTE_KEY_EXCLUDED;
    }
}

/* noaux_tc's group scores: the sum of a group's two largest keys (a repeated maximum counts
 * twice, as topk(2).sum does); fewer than two real keys scores EXCLUDED (-inf). The two come
 * from the top-k primitive, after which their keys are put back: a group is a short row, which
 * the SIMD top-k keeps in registers. */
static inline void moe_route_group_top2(moe_route_topk_ukernel *topk, int n_group, int group_size,
                                        uint32_t *key, uint32_t *gkey)
{
    for (int g = 0; g < n_group; g++) {
        uint32_t *kg = key + (size_t)g * (size_t)group_size;
        int32_t at[2];
        uint32_t best[2];
        topk((size_t)group_size, kg, 2, at, best);
        kg[at[0]] = best[0];
        kg[at[1]] = best[1];
        uint32_t gk = MOE_ROUTE_KEY_EXCLUDED;
        if (moe_route_is_real(best[1])) {
            const float sum = moe_route_key_decode(best[0]) + moe_route_key_decode(best[1]);
            /* Two finite keys of the same sign can overflow to ±Inf (huge biases), which
             * still orders right; NaN cannot arise, as real keys are finite. */
            gk = moe_route_key_encode(sum);
        }
        gkey[g] = gk;
    }
}

/* noaux_tc selection and weights of one row whose scores sc->s and keys sc->key are computed:
 * the group step when groups are dropped, top-k, then the unbiased scores at the picks. */
static inline void moe_route_noaux_tc_select(const moe_route_noaux_tc_args *a,
                                             moe_route_topk_ukernel *topk, moe_route_scratch *sc,
                                             int32_t *ids, float *w)
{
    const int e = a->n_experts, k = a->top_k, g = a->n_group;
    if (g > 1 && a->topk_group < g) {
        moe_route_group_top2(topk, g, e / g, sc->key, sc->gkey);
        moe_route_keep_groups(topk, g, a->topk_group, e / g, sc->gkey, sc->gidx, sc->top, sc->key);
    }
    topk((size_t)e, sc->key, (size_t)k, ids, sc->top);
    for (int j = 0; j < k; j++)
        w[j] = moe_route_is_real(sc->top[j]) ? sc->s[ids[j]] : 0.0f;
    if (a->renormalize)
        moe_route_normalize(w, k, a->scale);
    else
        moe_route_scale(w, k, a->scale);
}

/* The whole noaux_tc kernel over one ISA's primitives: scores and keys, then the selection. */
static inline void moe_route_noaux_tc_rows(const moe_route_noaux_tc_args *a,
                                           moe_route_sigmoid_keys_ukernel *sigmoid_keys,
                                           moe_route_sqrtsoftplus_keys_ukernel *ssp_keys,
                                           moe_route_topk_ukernel *topk, size_t n_rows,
                                           const float *z, int32_t *ids, float *w,
                                           moe_route_scratch *sc)
{
    const size_t e = (size_t)a->n_experts, k = (size_t)a->top_k;
    for (size_t t = 0; t < n_rows; t++) {
        if (a->score == MOE_SCORE_SQRTSOFTPLUS)
            ssp_keys(e, z + t * e, a->bias, sc->s, sc->key);
        else
            sigmoid_keys(e, z + t * e, a->bias, sc->s, sc->key);
        moe_route_noaux_tc_select(a, topk, sc, ids + t * k, w + t * k);
    }
}

#endif
