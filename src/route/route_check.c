/* route_check.c — the routing consistency rules shared by the router and the config readers. */
#include <stdarg.h>
#include <stdio.h>

#include "route/route_check.h"

static const char *const method_names[] = {
    [MOE_ROUTE_SOFTMAX_TOPK] = "softmax_topk",
    [MOE_ROUTE_TOPK_SOFTMAX] = "topk_softmax",
    [MOE_ROUTE_GREEDY] = "greedy",
    [MOE_ROUTE_GROUP_LIMITED_GREEDY] = "group_limited_greedy",
    [MOE_ROUTE_NOAUX_TC] = "noaux_tc",
    [MOE_ROUTE_HASH] = "hash",
    [MOE_ROUTE_SIGMOID_TOP1] = "sigmoid_top1",
    [MOE_ROUTE_SOFTMAX_BIAS] = "softmax_bias",
};

static const char *const score_names[] = {
    [MOE_SCORE_SOFTMAX] = "softmax",
    [MOE_SCORE_SIGMOID] = "sigmoid",
    [MOE_SCORE_SQRTSOFTPLUS] = "sqrtsoftplus",
};

#define N_METHODS (sizeof method_names / sizeof method_names[0])
#define N_SCORES (sizeof score_names / sizeof score_names[0])

const char *moe_route_method_name(moe_route_method method)
{
    /* Through int: an out-of-range enum value may be negative. */
    int m = (int)method;
    return m >= 0 && (size_t)m < N_METHODS ? method_names[m] : "unknown";
}

const char *moe_score_func_name(moe_score_func score)
{
    int s = (int)score;
    return s >= 0 && (size_t)s < N_SCORES ? score_names[s] : "unknown";
}

bool moe_route_method_uses_groups(moe_route_method method)
{
    return method == MOE_ROUTE_GROUP_LIMITED_GREEDY || method == MOE_ROUTE_NOAUX_TC;
}

static bool violate(moe_route_violation *v, moe_route_field field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool violate(moe_route_violation *v, moe_route_field field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->detail, sizeof v->detail, fmt, ap);
    va_end(ap);
    v->field = field;
    return false;
}

/* The score functions a method can use, as a mask of (1 << moe_score_func), and their
 * names for the message. */
static unsigned allowed_scores(moe_route_method m, const char **names)
{
    const unsigned softmax = 1u << MOE_SCORE_SOFTMAX, sigmoid = 1u << MOE_SCORE_SIGMOID;
    switch (m) {
    case MOE_ROUTE_NOAUX_TC:
    case MOE_ROUTE_HASH:
        *names = "sigmoid, sqrtsoftplus";
        return sigmoid | (1u << MOE_SCORE_SQRTSOFTPLUS);
    case MOE_ROUTE_SIGMOID_TOP1: *names = "sigmoid"; return sigmoid;
    default: *names = "softmax"; return softmax;
    }
}

/* The rules that relate the counts to each other; the ones every method shares. */
static bool check_counts(const moe_route_shape *s, const char *const *names, moe_route_violation *v)
{
    const int64_t e = s->n_experts, k = s->top_k, g = s->n_group, tg = s->topk_group;
    if (e < 1 || e > MOE_ROUTE_MAX_EXPERTS)
        return violate(v, MOE_ROUTE_FIELD_N_EXPERTS, "%lld is outside [1, %d]", (long long)e,
                       MOE_ROUTE_MAX_EXPERTS);
    if (k < 1 || k > e)
        return violate(v, MOE_ROUTE_FIELD_TOP_K, "%lld must be in [1, %s = %lld]", (long long)k,
                       names[MOE_ROUTE_FIELD_N_EXPERTS], (long long)e);
    if (g < 1 || e % g != 0)
        return violate(v, MOE_ROUTE_FIELD_N_GROUP, "%lld must be >= 1 and divide %s = %lld",
                       (long long)g, names[MOE_ROUTE_FIELD_N_EXPERTS], (long long)e);
    if (tg < 1 || tg > g)
        return violate(v, MOE_ROUTE_FIELD_TOPK_GROUP, "%lld must be in [1, %s = %lld]",
                       (long long)tg, names[MOE_ROUTE_FIELD_N_GROUP], (long long)g);
    const int64_t per_group = e / g;
    if (k > tg * per_group)
        return violate(v, MOE_ROUTE_FIELD_TOP_K,
                       "%lld exceeds %s × experts per group = %lld × %lld: the kept groups "
                       "cannot supply %lld experts",
                       (long long)k, names[MOE_ROUTE_FIELD_TOPK_GROUP], (long long)tg,
                       (long long)per_group, (long long)k);
    if (s->method == MOE_ROUTE_NOAUX_TC && g > 1 && per_group < 2)
        return violate(v, MOE_ROUTE_FIELD_N_GROUP,
                       "%lld leaves %lld expert per group, but the noaux_tc group score sums "
                       "the top 2 of each group",
                       (long long)g, (long long)per_group);
    return true;
}

bool moe_route_check(const moe_route_shape *s, const char *const names[MOE_ROUTE_FIELD_COUNT_],
                     moe_route_violation *v)
{
    if ((int)s->method < 0 || (size_t)s->method >= N_METHODS)
        return violate(v, MOE_ROUTE_FIELD_METHOD, "%d is not a routing method", (int)s->method);
    if ((int)s->score < 0 || (size_t)s->score >= N_SCORES)
        return violate(v, MOE_ROUTE_FIELD_SCORE, "%d is not a score function", (int)s->score);
    if (!check_counts(s, names, v)) return false;
    const char *allowed;
    if (!(allowed_scores(s->method, &allowed) & (1u << s->score)))
        return violate(v, MOE_ROUTE_FIELD_SCORE,
                       "%s is not a score function of %s %s (allowed: %s)", score_names[s->score],
                       names[MOE_ROUTE_FIELD_METHOD], method_names[s->method], allowed);
    if (s->method == MOE_ROUTE_SIGMOID_TOP1 && s->top_k != 1)
        return violate(v, MOE_ROUTE_FIELD_TOP_K, "%lld must be 1 for sigmoid_top1",
                       (long long)s->top_k);
    if (s->method == MOE_ROUTE_SIGMOID_TOP1 && s->norm_topk_prob)
        return violate(v, MOE_ROUTE_FIELD_NORM_TOPK_PROB,
                       "must be false for sigmoid_top1: its weight is the sigmoid of the one "
                       "selected logit, which renormalising would turn into 1");
    if (s->method == MOE_ROUTE_SOFTMAX_BIAS && !s->norm_topk_prob)
        return violate(v, MOE_ROUTE_FIELD_NORM_TOPK_PROB,
                       "must be true for softmax_bias: its weights are always renormalised "
                       "(with the renorm_min floor)");
    if (s->method == MOE_ROUTE_TOPK_SOFTMAX && !s->norm_topk_prob)
        return violate(v, MOE_ROUTE_FIELD_NORM_TOPK_PROB,
                       "must be true for topk_softmax: its softmax over the selected experts "
                       "always sums to 1");
    return true;
}
