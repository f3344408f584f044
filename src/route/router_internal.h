/* router_internal.h — internal: the router object, its scratch, and a create for tests. */
#ifndef MOE_ROUTE_ROUTER_INTERNAL_H
#define MOE_ROUTE_ROUTER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/route.h"
#include "moe.h"
#include "route/route_check.h"
#include "select/select.h"

/* The per-row scratch (struct moe_route_scratch, kernels/route.h): everything a row needs
 * beyond its inputs and outputs, sized by the largest E (80 KiB). It lives on the stack of
 * moe_router_forward, so forward never allocates and any number of threads can share one
 * router. */
_Static_assert(MOE_ROUTE_SCRATCH_EXPERTS >= MOE_ROUTE_MAX_EXPERTS,
               "the routing scratch is smaller than the largest router");

/* sigmoid_keys and sqrtsoftplus_keys share this signature (kernels/route.h). */
typedef void moe_route_score_keys_fn(size_t n, const float *z, const float *bias, float *s,
                                     uint32_t *key);

/* The primitives a router calls, chosen once at creation. */
typedef enum moe_route_prim {
    MOE_ROUTE_PRIM_LOGIT_KEYS = 0,
    MOE_ROUTE_PRIM_SCORE_KEYS, /* sigmoid or sqrtsoftplus, per the router's score */
    MOE_ROUTE_PRIM_TOPK,
    MOE_ROUTE_PRIM_EXPSUM,
    MOE_ROUTE_PRIM_NOAUX_TC, /* whole noaux_tc rows (scores, groups, top-k, weights) */
    MOE_ROUTE_PRIM_COUNT_
} moe_route_prim;

/* Routes one row: logits Z [E] (and, for hash routers, the row's token id TOKEN, already
 * range-checked) into IDS [K] and W [K]. */
typedef void moe_route_row_fn(const moe_router *r, const float *z, int64_t token,
                              moe_route_scratch *sc, int32_t *ids, float *w);

/* Routes N rows at once (methods whose kernel takes whole batches; token ids unused). */
typedef void moe_route_rows_fn(const moe_router *r, size_t n, const float *z, moe_route_scratch *sc,
                               int32_t *ids, float *w);

struct moe_router {
    moe_route_method method;
    moe_score_func score;
    int n_experts, top_k, n_group, topk_group;
    int group_size; /* n_experts / n_group */
    bool grouped;   /* the selection keeps topk_group of n_group groups (1 < tg < n_group) */
    bool norm_topk_prob;
    bool renormalize; /* what the weights do after selection, per method (docs/routing.md) */
    bool apply_rsf;   /* false only for greedy methods that renormalise (HF DeepSeek-V2) */
    float rsf;
    float renorm_min; /* softmax_bias: the renormalisation's floor; 0 otherwise */
    float *bias;      /* [E] f32, NULL for methods without a correction bias */
    int32_t *tid2eid; /* [vocab_size, K], validated, NULL unless hash */
    int64_t vocab_size;
    moe_route_row_fn *row;
    moe_route_rows_fn *rows; /* when set, forward routes the whole batch with it instead */
    moe_route_logit_keys_ukernel *logit_keys;
    moe_route_score_keys_fn *score_keys;
    moe_route_topk_ukernel *topk;
    moe_route_expsum_ukernel *expsum;
    moe_route_noaux_tc_ukernel *noaux_tc;
    moe_route_noaux_tc_args noaux_args; /* bias, shape, score and weight rule, for noaux_tc */
    moe_kernel_choice choice[MOE_ROUTE_PRIM_COUNT_];
    bool used[MOE_ROUTE_PRIM_COUNT_]; /* which primitives this method calls */
    char *explain;
};

/* moe_router_create with explicit allowed caps instead of moe_cpu_query()'s, so tests can
 * force every ISA level (made-up caps are normalised; a level this build did not compile is
 * simply not chosen). */
moe_status moe_router_create_caps(const moe_router_params *params, const moe_cpu_caps *caps,
                                  moe_router **out);

/* Picks the row driver of R's method; fills r->row or r->rows. */
void moe_route_bind_row(moe_router *r);

#endif
