/* route_check.h — internal: the one set of rules a routing description must satisfy. */
#ifndef MOE_ROUTE_ROUTE_CHECK_H
#define MOE_ROUTE_ROUTE_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moe.h"

/* The largest E a router accepts: the per-row scratch lives on the stack, sized by it, and
 * it matches the config readers' limit (every shipped model has at most 384). */
#define MOE_ROUTE_MAX_EXPERTS 4096

/* The fields the rules look at. Callers name them their own way (the router's params
 * struct says "top_k", config.json "num_experts_per_tok"). */
typedef enum moe_route_field {
    MOE_ROUTE_FIELD_METHOD = 0,
    MOE_ROUTE_FIELD_SCORE,
    MOE_ROUTE_FIELD_N_EXPERTS,
    MOE_ROUTE_FIELD_TOP_K,
    MOE_ROUTE_FIELD_N_GROUP,
    MOE_ROUTE_FIELD_TOPK_GROUP,
    MOE_ROUTE_FIELD_NORM_TOPK_PROB,
    MOE_ROUTE_FIELD_COUNT_
} moe_route_field;

typedef struct moe_route_shape {
    moe_route_method method;
    moe_score_func score;
    int64_t n_experts, top_k, n_group, topk_group;
    bool norm_topk_prob;
} moe_route_shape;

/* Why a shape was rejected: the field to blame and a sentence about it that uses the
 * caller's field names ("9 must be in [1, num_local_experts = 8]"). */
typedef struct moe_route_violation {
    moe_route_field field;
    char detail[256];
} moe_route_violation;

/*
 * Checks S against the rules, in this order, and reports the first one broken:
 *   method and score are known values;
 *   1 <= n_experts <= MOE_ROUTE_MAX_EXPERTS;
 *   1 <= top_k <= n_experts;
 *   n_group >= 1 and divides n_experts;
 *   1 <= topk_group <= n_group;
 *   top_k <= topk_group × (n_experts / n_group) (the kept groups can supply top_k experts);
 *   noaux_tc with n_group > 1 has >= 2 experts per group (its group score sums the top 2);
 *   the score is one the method allows (softmax for softmax_topk, topk_softmax, greedy and
 *   group_limited_greedy; sigmoid or sqrtsoftplus for noaux_tc and hash; sigmoid for
 *   sigmoid_top1);
 *   sigmoid_top1 has top_k = 1 and no renormalisation; topk_softmax renormalises (its
 *   softmax over the k selected always sums to 1).
 * The shape rules come first so a config with several problems reports the structural one.
 * NAMES[field] is how the caller spells each field. Returns true when S is valid; otherwise
 * false with *V filled.
 */
bool moe_route_check(const moe_route_shape *s, const char *const names[MOE_ROUTE_FIELD_COUNT_],
                     moe_route_violation *v);

/* True for the methods whose selection looks at groups (group_limited_greedy, noaux_tc). */
bool moe_route_method_uses_groups(moe_route_method method);

#endif
