/* route_oracle.h — router test helpers: seeded RNG, params, a float64 oracle of the formulas. */
#ifndef MOE_TEST_ROUTE_ORACLE_H
#define MOE_TEST_ROUTE_ORACLE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "moe.h"

/* ---- Random numbers (splitmix64: small, seedable, the same on every machine) ------------ */

typedef struct rng {
    uint64_t s;
} rng;

static inline uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; }

static inline float rng_uniform(rng *r, double lo, double hi)
{
    return (float)(lo + (hi - lo) * rng_unit(r));
}

static inline int rng_below(rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

/* A [vocab, k] table whose rows hold k distinct ids of [0, e), shuffled. */
static inline void rng_table(rng *r, int64_t vocab, int k, int e, int32_t *table)
{
    int32_t perm[4096];
    for (int x = 0; x < e; x++)
        perm[x] = x;
    for (int64_t row = 0; row < vocab; row++) {
        for (int j = 0; j < k; j++) { /* partial Fisher-Yates: the first k of a shuffle */
            int pick = j + rng_below(r, e - j);
            int32_t t = perm[j];
            perm[j] = perm[pick];
            perm[pick] = t;
            table[row * k + j] = perm[j];
        }
    }
}

/* ---- Router descriptions -------------------------------------------------------------- */

typedef struct route_cfg {
    const char *name;
    moe_route_method method;
    moe_score_func score;
    int e, k, g, tg;
    bool norm;
    float rsf;
} route_cfg;

/* Params for CFG; BIAS (f32 [e]) and TABLE (i32 [vocab, k]) as the method needs them. */
static inline moe_router_params route_params(const route_cfg *c, const float *bias,
                                             const int32_t *table, int64_t vocab)
{
    moe_router_params p;
    memset(&p, 0, sizeof p);
    p.size = sizeof p;
    p.method = c->method;
    p.score = c->score;
    p.n_experts = c->e;
    p.top_k = c->k;
    p.n_group = c->g;
    p.topk_group = c->tg;
    p.norm_topk_prob = c->norm;
    p.routed_scaling_factor = c->rsf;
    if (c->method == MOE_ROUTE_NOAUX_TC || c->method == MOE_ROUTE_SOFTMAX_BIAS) {
        p.correction_bias = bias;
        p.correction_bias_dtype = MOE_DTYPE_F32;
    }

    if (c->method == MOE_ROUTE_HASH) {
        p.tid2eid = table;
        p.tid2eid_dtype = MOE_DTYPE_I32;
        p.vocab_size = vocab;
    }
    return p;
}

/* The sweeps' groups for E experts: the largest of 8, 6, 4, 2 that divides E with at least 2
 * experts per group, else 1. */
static inline int groups_for(int e)
{
    static const int cand[] = {8, 6, 4, 2};
    for (int i = 0; i < 4; i++)
        if (e % cand[i] == 0 && e / cand[i] >= 2) return cand[i];
    return 1;
}

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* ---- The float64 oracle ----------------------------------------------------------------- */

#define ORACLE_MAX_E 4096

static inline double o_sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

/* sqrt(softplus(z)), softplus(z) = log(1 + e^z) written so double neither overflows nor
 * cancels: z + log1p(e^-z) for z > 0. */
static inline double o_sqrtsoftplus(double z)
{
    return sqrt(z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)));
}

static inline double o_score(moe_score_func f, double z)
{
    return f == MOE_SCORE_SQRTSOFTPLUS ? o_sqrtsoftplus(z) : o_sigmoid(z);
}

/* The literal softmax over the finite logits of the row; non-finite ones get NAN (excluded). */
static inline void o_softmax(const float *z, int e, double *p)
{
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < e; i++)
        if (isfinite(z[i]) && z[i] > m) m = z[i];
    for (int i = 0; i < e; i++)
        if (isfinite(z[i])) sum += exp((double)z[i] - m);
    for (int i = 0; i < e; i++)
        p[i] = isfinite(z[i]) ? exp((double)z[i] - m) / sum : NAN;
}

/* Picks k times the largest key among those not taken, lower index on ties; -inf keys are
 * picked after every finite one, lower index first. */
static inline void o_topk(const double *key, int n, int k, int *ids)
{
    bool taken[ORACLE_MAX_E] = {false};
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (taken[i]) continue;
            if (best < 0 || key[i] > key[best]) best = i;
        }
        ids[j] = best;
        taken[best] = true;
    }
}

/* Two keys the tests cannot order reliably: within 1e-5 relative (docs/design.md), plus FLOOR
 * absolute for keys that are sums (s + bias) and so carry the bias's rounding. */
static inline bool o_near(double a, double b, double floor)
{
    if (!isfinite(a) || !isfinite(b)) return false;
    double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    return fabs(a - b) <= 1e-5 * m + floor;
}

typedef struct oracle_row {
    int ids[ORACLE_MAX_E];
    double w[ORACLE_MAX_E];
    double key[ORACLE_MAX_E]; /* the selection key of every expert, -inf when masked/excluded */
    double floor;             /* o_near's absolute floor for these keys */
    bool ambiguous;           /* the kept groups hinge on a near-tie: compare nothing */
} oracle_row;

/* The oracle cannot order the K ids it chose of E within its tolerance (two chosen keys, or
 * the last chosen and the best left out, are near): any id order there is right. */
static inline bool o_near_tie(int k, int e, const oracle_row *o)
{
    if (o->ambiguous) return true;
    for (int j = 0; j + 1 < k; j++)
        if (o_near(o->key[o->ids[j]], o->key[o->ids[j + 1]], o->floor)) return true;
    double best = -INFINITY;
    for (int i = 0; i < e; i++) {
        bool taken = false;
        for (int j = 0; j < k; j++)
            taken |= o->ids[j] == i;
        if (!taken && o->key[i] > best) best = o->key[i];
    }
    return k < e && o_near(o->key[o->ids[k - 1]], best, o->floor);
}

/* Keeps the tg groups with the largest score (lower index on ties) and masks the others'
 * keys with -inf. Flags a near-tie at the boundary. */
static inline void o_keep_groups(const double *gscore, int g, int tg, int m, oracle_row *o)
{
    int order[ORACLE_MAX_E];
    o_topk(gscore, g, g, order);
    if (o_near(gscore[order[tg - 1]], gscore[order[tg]], o->floor)) o->ambiguous = true;
    for (int j = tg; j < g; j++)
        for (int i = 0; i < m; i++)
            o->key[order[j] * m + i] = -INFINITY;
}

static inline void o_normalize(double *w, int k, double scale)
{
    double sum = 0;
    for (int j = 0; j < k; j++)
        sum += w[j];
    for (int j = 0; j < k; j++)
        w[j] = sum > 0 ? w[j] / sum * scale : 0;
}

/* softmax_topk, greedy, group_limited_greedy: softmax over all E, (groups), top-k, then the
 * method's weight rule. */
static inline void o_softmax_methods(const route_cfg *c, const float *z, oracle_row *o)
{
    double p[ORACLE_MAX_E];
    o_softmax(z, c->e, p);
    for (int i = 0; i < c->e; i++)
        o->key[i] = isnan(p[i]) ? -INFINITY : p[i];
    const int m = c->e / c->g;
    if (c->method == MOE_ROUTE_GROUP_LIMITED_GREEDY && c->g > 1 && c->tg < c->g) {
        double gs[ORACLE_MAX_E];
        for (int g = 0; g < c->g; g++) {
            gs[g] = -INFINITY;
            for (int i = 0; i < m; i++)
                gs[g] = o->key[g * m + i] > gs[g] ? o->key[g * m + i] : gs[g];
        }
        o_keep_groups(gs, c->g, c->tg, m, o);
    }
    o_topk(o->key, c->e, c->k, o->ids);
    for (int j = 0; j < c->k; j++)
        o->w[j] = isfinite(o->key[o->ids[j]]) ? p[o->ids[j]] : 0;
    bool renorm = c->norm, rsf = true;
    if (c->method != MOE_ROUTE_SOFTMAX_TOPK) { /* the HF DeepSeek-V2 rule */
        renorm = c->norm && c->k > 1;
        rsf = !renorm;
    }
    if (renorm)
        o_normalize(o->w, c->k, c->method == MOE_ROUTE_SOFTMAX_TOPK ? c->rsf : 1.0);
    else
        for (int j = 0; j < c->k; j++)
            o->w[j] *= rsf ? c->rsf : 1.0;
}

/* topk_softmax: top-k on the logits, softmax over the k. */
static inline void o_topk_softmax(const route_cfg *c, const float *z, oracle_row *o)
{
    for (int i = 0; i < c->e; i++)
        o->key[i] = isfinite(z[i]) ? (double)z[i] : -INFINITY;
    o_topk(o->key, c->e, c->k, o->ids);
    double top = o->key[o->ids[0]];
    for (int j = 0; j < c->k; j++)
        o->w[j] = isfinite(o->key[o->ids[j]]) ? exp(o->key[o->ids[j]] - top) : 0;
    o_normalize(o->w, c->k, c->rsf);
}

/* noaux_tc: s = score(z), key = s + bias, top-2-sum groups, top-k, unbiased weights. */
static inline void o_noaux_tc(const route_cfg *c, const float *z, const float *bias, oracle_row *o)
{
    double s[ORACLE_MAX_E];
    o->floor = 1e-6;
    for (int i = 0; i < c->e; i++) {
        s[i] = isfinite(z[i]) ? o_score(c->score, z[i]) : 0;
        o->key[i] = isfinite(z[i]) ? s[i] + (double)bias[i] : -INFINITY;
    }
    const int m = c->e / c->g;
    if (c->g > 1 && c->tg < c->g) {
        double gs[ORACLE_MAX_E];
        for (int g = 0; g < c->g; g++) {
            int two[2];
            o_topk(o->key + g * m, m, 2, two);
            double a = o->key[g * m + two[0]], b = o->key[g * m + two[1]];
            gs[g] = isfinite(b) ? a + b : -INFINITY;
        }
        o_keep_groups(gs, c->g, c->tg, m, o);
    }
    o_topk(o->key, c->e, c->k, o->ids);
    for (int j = 0; j < c->k; j++)
        o->w[j] = isfinite(o->key[o->ids[j]]) ? s[o->ids[j]] : 0;
    if (c->norm)
        o_normalize(o->w, c->k, c->rsf);
    else
        for (int j = 0; j < c->k; j++)
            o->w[j] *= c->rsf;
}

/* hash: ids from the table row, weights the scores there. */
static inline void o_hash(const route_cfg *c, const float *z, const int32_t *row, oracle_row *o)
{
    for (int i = 0; i < c->e; i++)
        o->key[i] = -INFINITY;
    for (int j = 0; j < c->k; j++) {
        o->ids[j] = row[j];
        o->w[j] = isfinite(z[row[j]]) ? o_score(c->score, z[row[j]]) : 0;
    }
    if (c->norm)
        o_normalize(o->w, c->k, c->rsf);
    else
        for (int j = 0; j < c->k; j++)
            o->w[j] *= c->rsf;
}

/* sigmoid_top1: the largest logit, its sigmoid. */
static inline void o_sigmoid_top1(const route_cfg *c, const float *z, oracle_row *o)
{
    for (int i = 0; i < c->e; i++)
        o->key[i] = isfinite(z[i]) ? (double)z[i] : -INFINITY;
    o_topk(o->key, c->e, 1, o->ids);
    o->w[0] = isfinite(o->key[o->ids[0]]) ? o_sigmoid(o->key[o->ids[0]]) * c->rsf : 0;
}

/* softmax_bias (ERNIE-4.5): key = softmax(z) + bias, top-k, the unbiased softmax at the
 * selected divided by max(its sum, renorm_min). */
static inline void o_softmax_bias(const route_cfg *c, double renorm_min, const float *z,
                                  const float *bias, oracle_row *o)
{
    double p[ORACLE_MAX_E];
    o_softmax(z, c->e, p);
    o->floor = 1e-6;
    for (int i = 0; i < c->e; i++)
        o->key[i] = isnan(p[i]) ? -INFINITY : p[i] + (double)bias[i];
    o_topk(o->key, c->e, c->k, o->ids);
    double sum = 0;
    for (int j = 0; j < c->k; j++) {
        o->w[j] = isfinite(o->key[o->ids[j]]) ? p[o->ids[j]] : 0;
        sum += o->w[j];
    }
    const double div = sum > renorm_min ? sum : renorm_min;
    for (int j = 0; j < c->k; j++)
        o->w[j] = div > 0 ? o->w[j] / div * c->rsf : 0;
}

/* The oracle's answer for one row. TABLE_ROW is the token's tid2eid row (hash only);
 * RENORM_MIN the softmax_bias renormalisation floor (moe_router_params.renorm_min). */
static inline void oracle_route_floor(const route_cfg *c, double renorm_min, const float *z,
                                      const float *bias, const int32_t *table_row, oracle_row *o)
{
    o->floor = 0;
    o->ambiguous = false;
    switch (c->method) {
    case MOE_ROUTE_SOFTMAX_TOPK:
    case MOE_ROUTE_GREEDY:
    case MOE_ROUTE_GROUP_LIMITED_GREEDY: o_softmax_methods(c, z, o); break;
    case MOE_ROUTE_TOPK_SOFTMAX: o_topk_softmax(c, z, o); break;
    case MOE_ROUTE_NOAUX_TC: o_noaux_tc(c, z, bias, o); break;
    case MOE_ROUTE_HASH: o_hash(c, z, table_row, o); break;
    case MOE_ROUTE_SIGMOID_TOP1: o_sigmoid_top1(c, z, o); break;
    case MOE_ROUTE_SOFTMAX_BIAS: o_softmax_bias(c, renorm_min, z, bias, o); break;
    }
}

/* oracle_route_floor without a renormalisation floor (every method but softmax_bias). */
static inline void oracle_route(const route_cfg *c, const float *z, const float *bias,
                                const int32_t *table_row, oracle_row *o)
{
    oracle_route_floor(c, 0.0, z, bias, table_row, o);
}

#endif
