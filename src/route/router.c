/* router.c — moe_router: validation, kernel choice, explain, and the checked forward. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "dtype/dtype.h"
#include "route/router_internal.h"

#define WHO "moe_router_create"

/* vocab_size (int64) is used as a size_t count below. */
_Static_assert(sizeof(size_t) >= sizeof(int64_t), "size_t narrower than int64_t");

/* The bytes of moe_router_params this version reads: everything up to vocab_size. */
#define PARAMS_MIN_SIZE (offsetof(moe_router_params, vocab_size) + sizeof(int64_t))

static const char *const param_names[MOE_ROUTE_FIELD_COUNT_] = {
    [MOE_ROUTE_FIELD_METHOD] = "method",
    [MOE_ROUTE_FIELD_SCORE] = "score",
    [MOE_ROUTE_FIELD_N_EXPERTS] = "n_experts",
    [MOE_ROUTE_FIELD_TOP_K] = "top_k",
    [MOE_ROUTE_FIELD_N_GROUP] = "n_group",
    [MOE_ROUTE_FIELD_TOPK_GROUP] = "topk_group",
    [MOE_ROUTE_FIELD_NORM_TOPK_PROB] = "norm_topk_prob",
};

/* ---- Validation of the parameters ------------------------------------------------------ */

static moe_status check_shape(const moe_router_params *p)
{
    const moe_route_shape shape = {p->method,  p->score,      p->n_experts,     p->top_k,
                                   p->n_group, p->topk_group, p->norm_topk_prob};
    moe_route_violation v;
    if (moe_route_check(&shape, param_names, &v)) return MOE_OK;
    return moe_error(MOE_EINVAL, WHO ": params->%s: %s", param_names[v.field], v.detail);
}

/* renorm_min, or 0 when the caller's struct ends before it. */
static float renorm_min_of(const moe_router_params *p)
{
    return p->size >= offsetof(moe_router_params, renorm_min) + sizeof(float) ? p->renorm_min
                                                                              : 0.0f;
}

static moe_status check_params(const moe_router_params *p)
{
    if (p->size < PARAMS_MIN_SIZE)
        return moe_error(MOE_EINVAL,
                         WHO ": params->size = %zu is smaller than the %zu bytes this version "
                             "reads (set it to sizeof(moe_router_params))",
                         p->size, (size_t)PARAMS_MIN_SIZE);
    moe_status st = check_shape(p);
    if (st) return st;
    const float rsf = p->routed_scaling_factor;
    if (!isfinite(rsf) || !(rsf > 0.0f))
        return moe_error(MOE_EINVAL,
                         WHO ": params->routed_scaling_factor = %g must be finite and > 0 "
                             "(1 for none)",
                         (double)rsf);
    const bool wants_bias = p->method == MOE_ROUTE_NOAUX_TC || p->method == MOE_ROUTE_SOFTMAX_BIAS;
    if (wants_bias && !p->correction_bias)
        return moe_error(MOE_EINVAL,
                         WHO ": params->correction_bias is NULL, but %s selects by score + "
                             "correction bias",
                         moe_route_method_name(p->method));
    if (!wants_bias && p->correction_bias)
        return moe_error(MOE_EINVAL,
                         WHO ": params->correction_bias is set, but %s has no correction bias",
                         moe_route_method_name(p->method));
    const bool wants_table = p->method == MOE_ROUTE_HASH;
    if (wants_table && !p->tid2eid)
        return moe_error(MOE_EINVAL,
                         WHO ": params->tid2eid is NULL, but a hash router takes its expert ids "
                             "from it");
    if (!wants_table && p->tid2eid)
        return moe_error(MOE_EINVAL, WHO ": params->tid2eid is set, but %s has no hash table",
                         moe_route_method_name(p->method));
    const float floor = renorm_min_of(p);
    if (!isfinite(floor) || floor < 0.0f)
        return moe_error(MOE_EINVAL, WHO ": params->renorm_min = %g must be finite and >= 0",
                         (double)floor);
    if (floor != 0.0f && p->method != MOE_ROUTE_SOFTMAX_BIAS)
        return moe_error(MOE_EINVAL,
                         WHO ": params->renorm_min = %g is set, but %s has no renormalisation "
                             "floor (only softmax_bias)",
                         (double)floor, moe_route_method_name(p->method));
    return MOE_OK;
}

/* The correction bias, converted to f32 once; every value must be finite. The source may be
 * unaligned (checkpoint data), so each element is copied out. */
static moe_status convert_bias(const moe_router_params *p, float **out)
{
    const moe_dtype dt = p->correction_bias_dtype;
    if (dt != MOE_DTYPE_F32 && dt != MOE_DTYPE_BF16 && dt != MOE_DTYPE_F16)
        return moe_error(MOE_EDTYPE,
                         WHO ": params->correction_bias_dtype %s is not f32, bf16 or f16",
                         moe_dtype_name(dt));
    const size_t e = (size_t)p->n_experts;
    float *bias = moe_malloc(e * sizeof *bias);
    if (!bias) return moe_error(MOE_ENOMEM, WHO ": allocating the correction bias [%zu]", e);
    const unsigned char *src = p->correction_bias;
    for (size_t i = 0; i < e; i++) {
        float f;
        uint16_t h;
        if (dt == MOE_DTYPE_F32) {
            memcpy(&f, src + 4 * i, sizeof f);
        } else {
            memcpy(&h, src + 2 * i, sizeof h);
            f = dt == MOE_DTYPE_BF16 ? moe_bf16_to_f32(h) : moe_f16_to_f32(h);
        }
        if (!isfinite(f)) {
            moe_free(bias);
            return moe_error(MOE_EVALUE, WHO ": correction_bias[%zu] = %g is not finite", i,
                             (double)f);
        }
        bias[i] = f;
    }
    *out = bias;
    return MOE_OK;
}

static int64_t table_entry(const unsigned char *src, moe_dtype dt, size_t i)
{
    if (dt == MOE_DTYPE_I32) {
        int32_t v;
        memcpy(&v, src + 4 * i, sizeof v);
        return v;
    }
    int64_t v;
    memcpy(&v, src + 8 * i, sizeof v);
    return v;
}

/* Copies the table into int32, checking once, here, that every entry is an expert id and
 * that no row names an expert twice; forward then trusts it. SEEN_ROW[e] / SEEN_COL[e] hold
 * the last row and column that named expert e. */
static moe_status copy_table(const moe_router_params *p, int32_t *dst, int64_t *seen_row,
                             int32_t *seen_col)
{
    const moe_dtype dt = p->tid2eid_dtype;
    const unsigned char *src = p->tid2eid;
    const int k = p->top_k, e = p->n_experts;
    for (int x = 0; x < e; x++)
        seen_row[x] = -1;
    for (int64_t row = 0; row < p->vocab_size; row++) {
        for (int col = 0; col < k; col++) {
            const size_t i = (size_t)row * (size_t)k + (size_t)col;
            const int64_t v = table_entry(src, dt, i);
            if (v < 0 || v >= e)
                return moe_error(MOE_ERANGE,
                                 WHO ": tid2eid[%lld][%d] = %lld is not an expert id in [0, %d)",
                                 (long long)row, col, (long long)v, e);
            if (seen_row[v] == row)
                return moe_error(MOE_EVALUE,
                                 WHO ": tid2eid row %lld names expert %lld twice (columns %d "
                                     "and %d)",
                                 (long long)row, (long long)v, seen_col[v], col);
            seen_row[v] = row;
            seen_col[v] = col;
            dst[i] = (int32_t)v;
        }
    }
    return MOE_OK;
}

static moe_status convert_table(const moe_router_params *p, int32_t **out)
{
    const moe_dtype dt = p->tid2eid_dtype;
    if (dt != MOE_DTYPE_I32 && dt != MOE_DTYPE_I64)
        return moe_error(MOE_EDTYPE, WHO ": params->tid2eid_dtype %s is not i32 or i64",
                         moe_dtype_name(dt));
    if (p->vocab_size < 1)
        return moe_error(MOE_EINVAL, WHO ": params->vocab_size = %lld must be >= 1 (tid2eid rows)",
                         (long long)p->vocab_size);
    size_t entries, bytes;
    if (moe_mul_overflow_size((size_t)p->vocab_size, (size_t)p->top_k, &entries) ||
        moe_mul_overflow_size(entries, sizeof(int32_t), &bytes))
        return moe_error(MOE_EOVERFLOW, WHO ": tid2eid [%lld, %d] is too large",
                         (long long)p->vocab_size, p->top_k);
    int32_t *table = moe_malloc(bytes);
    int64_t *seen_row = moe_malloc((size_t)p->n_experts * sizeof *seen_row);
    int32_t *seen_col = moe_malloc((size_t)p->n_experts * sizeof *seen_col);
    moe_status st = MOE_OK;
    if (!table || !seen_row || !seen_col) {
        st = moe_error(MOE_ENOMEM, WHO ": allocating tid2eid [%lld, %d]", (long long)p->vocab_size,
                       p->top_k);
        goto done;
    }
    st = copy_table(p, table, seen_row, seen_col);
done:
    moe_free(seen_row);
    moe_free(seen_col);
    if (st) {
        moe_free(table);
        return st;
    }
    *out = table;
    return MOE_OK;
}

/* ---- Method semantics and kernels -------------------------------------------------------- */

/* What each method does after selection (docs/routing.md). */
static void set_weight_rule(moe_router *r)
{
    r->apply_rsf = true;
    switch (r->method) {
    case MOE_ROUTE_TOPK_SOFTMAX: r->renormalize = true; break;
    case MOE_ROUTE_GREEDY:
    case MOE_ROUTE_GROUP_LIMITED_GREEDY:
        /* HF DeepSeek-V2: renormalise (then no rsf) only when top_k > 1 and norm_topk_prob. */
        r->renormalize = r->norm_topk_prob && r->top_k > 1;
        r->apply_rsf = !r->renormalize;
        break;
    case MOE_ROUTE_SIGMOID_TOP1: r->renormalize = false; break;
    default: r->renormalize = r->norm_topk_prob; break;
    }
}

/* Which primitives a method calls (the others are neither chosen nor explained). */
static void set_used(moe_router *r)
{
    bool *u = r->used;
    switch (r->method) {
    case MOE_ROUTE_SOFTMAX_TOPK:
    case MOE_ROUTE_TOPK_SOFTMAX:
    case MOE_ROUTE_GREEDY:
    case MOE_ROUTE_GROUP_LIMITED_GREEDY:
        u[MOE_ROUTE_PRIM_LOGIT_KEYS] = u[MOE_ROUTE_PRIM_TOPK] = true;
        u[MOE_ROUTE_PRIM_EXPSUM] = !r->renormalize;
        break;
    case MOE_ROUTE_NOAUX_TC: u[MOE_ROUTE_PRIM_NOAUX_TC] = true; break;
    case MOE_ROUTE_HASH: u[MOE_ROUTE_PRIM_SCORE_KEYS] = true; break;
    case MOE_ROUTE_SIGMOID_TOP1:
        u[MOE_ROUTE_PRIM_LOGIT_KEYS] = u[MOE_ROUTE_PRIM_TOPK] = true;
        u[MOE_ROUTE_PRIM_SCORE_KEYS] = true;
        break;
    case MOE_ROUTE_SOFTMAX_BIAS: /* keys of softmax + bias; the full-row softmax sum */
        u[MOE_ROUTE_PRIM_LOGIT_KEYS] = u[MOE_ROUTE_PRIM_TOPK] = true;
        u[MOE_ROUTE_PRIM_EXPSUM] = true;
        break;
    }
}

static moe_kernel_family prim_family(const moe_router *r, moe_route_prim prim)
{
    switch (prim) {
    case MOE_ROUTE_PRIM_LOGIT_KEYS: return MOE_KERNEL_FAMILY_ROUTE_LOGIT_KEYS;
    case MOE_ROUTE_PRIM_SCORE_KEYS:
        return r->score == MOE_SCORE_SQRTSOFTPLUS ? MOE_KERNEL_FAMILY_ROUTE_SQRTSOFTPLUS_KEYS
                                                  : MOE_KERNEL_FAMILY_ROUTE_SIGMOID_KEYS;
    case MOE_ROUTE_PRIM_TOPK: return MOE_KERNEL_FAMILY_ROUTE_TOPK;
    case MOE_ROUTE_PRIM_EXPSUM: return MOE_KERNEL_FAMILY_ROUTE_EXPSUM;
    case MOE_ROUTE_PRIM_NOAUX_TC: return MOE_KERNEL_FAMILY_ROUTE_NOAUX_TC;
    case MOE_ROUTE_PRIM_COUNT_: break;
    }
    return MOE_KERNEL_FAMILY_COUNT_;
}

static void bind_kernel(moe_router *r, moe_route_prim prim, const moe_kernel *k)
{
    switch (prim) {
    case MOE_ROUTE_PRIM_LOGIT_KEYS: r->logit_keys = k->fn.route_logit_keys; break;
    case MOE_ROUTE_PRIM_SCORE_KEYS:
        r->score_keys = r->score == MOE_SCORE_SQRTSOFTPLUS ? k->fn.route_sqrtsoftplus_keys
                                                           : k->fn.route_sigmoid_keys;
        break;
    case MOE_ROUTE_PRIM_TOPK: r->topk = k->fn.route_topk; break;
    case MOE_ROUTE_PRIM_EXPSUM: r->expsum = k->fn.route_expsum; break;
    case MOE_ROUTE_PRIM_NOAUX_TC: r->noaux_tc = k->fn.route_noaux_tc; break;
    case MOE_ROUTE_PRIM_COUNT_: break;
    }
}

static moe_status choose_kernels(moe_router *r, const moe_cpu_caps *caps)
{
    const moe_route_problem problem = {r->n_experts, r->top_k};
    for (int i = 0; i < MOE_ROUTE_PRIM_COUNT_; i++) {
        if (!r->used[i]) continue;
        const moe_route_prim prim = (moe_route_prim)i;
        moe_status st = moe_select_route(prim_family(r, prim), caps, &problem, &r->choice[i]);
        if (st) return moe_error_context(st, WHO ": ");
        bind_kernel(r, prim, r->choice[i].kernel);
    }
    return MOE_OK;
}

/* ---- explain ----------------------------------------------------------------------------- */

typedef struct text {
    char *buf;
    size_t len, cap;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(text *t, const char *fmt, ...)
{
    if (t->len >= t->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n > 0) t->len += (size_t)n < t->cap - t->len ? (size_t)n : t->cap - t->len - 1;
}

static const char *weights_rule(const moe_router *r)
{
    switch (r->method) {
    case MOE_ROUTE_SOFTMAX_TOPK:
    case MOE_ROUTE_GREEDY:
    case MOE_ROUTE_GROUP_LIMITED_GREEDY:
        return r->renormalize ? "softmax over the selected" : "softmax over all experts";
    case MOE_ROUTE_TOPK_SOFTMAX: return "softmax over the selected";
    case MOE_ROUTE_NOAUX_TC:
        return r->renormalize ? "unbiased scores at the selected, renormalised"
                              : "unbiased scores at the selected";
    case MOE_ROUTE_HASH:
        return r->renormalize ? "scores at the table's ids, renormalised"
                              : "scores at the table's ids";
    case MOE_ROUTE_SIGMOID_TOP1: return "sigmoid of the selected logit";
    case MOE_ROUTE_SOFTMAX_BIAS:
        return "unbiased softmax at the selected, renormalised (sum floored at renorm_min)";
    }
    return "?";
}

static void explain_groups(const moe_router *r, text *t)
{
    if (!moe_route_method_uses_groups(r->method)) {
        if (r->n_group > 1) put(t, ", n_group=%d (unused by this method)", r->n_group);
        return;
    }
    if (r->n_group == 1) {
        put(t, ", no groups");
        return;
    }
    put(t, ", n_group=%d topk_group=%d", r->n_group, r->topk_group);
    if (!r->grouped)
        put(t, " (every group kept: no group step)");
    else if (r->method == MOE_ROUTE_NOAUX_TC)
        put(t, " (group score: sum of the 2 largest biased keys; other groups masked)");
    else
        put(t, " (group score: largest logit; other groups masked)");
}

/* Whether the chosen noaux_tc kernel runs its fused path for this router (kernels/route.h). */
static bool noaux_tc_fused(const moe_router *r)
{
    const moe_route_noaux_tc_args *a = &r->noaux_args;
    return (r->choice[MOE_ROUTE_PRIM_NOAUX_TC].kernel->isa & MOE_FEAT_AVX512) &&
           moe_route_noaux_tc_fused_shape(a->score == MOE_SCORE_SIGMOID, a->n_experts, a->top_k,
                                          a->n_group, a->topk_group);
}

static moe_status build_explain(moe_router *r, moe_dtype bias_from)
{
    text t = {moe_malloc(2048), 0, 2048};
    if (!t.buf) return moe_error(MOE_ENOMEM, WHO ": allocating the explain text");
    t.buf[0] = '\0';
    put(&t, "router %s: score=%s E=%d top_k=%d", moe_route_method_name(r->method),
        moe_score_func_name(r->score), r->n_experts, r->top_k);
    explain_groups(r, &t);
    put(&t, ", norm_topk_prob=%s, weights=%s", r->norm_topk_prob ? "true" : "false",
        weights_rule(r));
    if (r->apply_rsf)
        put(&t, ", routed_scaling_factor=%g (applied once, in the weights)", (double)r->rsf);
    else
        put(&t,
            ", routed_scaling_factor=%g (not applied: greedy renormalised weights, as HF "
            "DeepSeek-V2)",
            (double)r->rsf);
    if (r->method == MOE_ROUTE_SOFTMAX_BIAS) put(&t, ", renorm_min=%g", (double)r->renorm_min);
    if (r->bias)
        put(&t, ", correction bias f32[%d] (converted from %s at creation)", r->n_experts,
            moe_dtype_name(bias_from));
    if (r->tid2eid)
        put(&t, ", tid2eid [%lld, %d] (validated at creation)", (long long)r->vocab_size, r->top_k);
    static const char *const prim_names[MOE_ROUTE_PRIM_COUNT_] = {"logit_keys", "score_keys",
                                                                  "topk", "expsum", "noaux_tc"};
    put(&t, "; kernels:");
    for (int i = 0; i < MOE_ROUTE_PRIM_COUNT_; i++) {
        if (!r->used[i]) continue;
        put(&t, " %s: %s", prim_names[i], r->choice[i].reason);
        if (i == MOE_ROUTE_PRIM_NOAUX_TC && noaux_tc_fused(r))
            put(&t, " (fused for this shape: sigmoid, E=256, 8 groups, top_k<=8)");
        put(&t, ";");
    }
    if (t.len > 0 && t.buf[t.len - 1] == ';') t.buf[--t.len] = '\0';
    r->explain = t.buf;
    return MOE_OK;
}

/* ---- Public entry points ----------------------------------------------------------------- */

static void fill_from_params(moe_router *r, const moe_router_params *p)
{
    r->method = p->method;
    r->score = p->score;
    r->n_experts = p->n_experts;
    r->top_k = p->top_k;
    r->n_group = p->n_group;
    r->topk_group = p->topk_group;
    r->group_size = p->n_experts / p->n_group;
    r->grouped =
        moe_route_method_uses_groups(p->method) && p->n_group > 1 && p->topk_group < p->n_group;
    r->norm_topk_prob = p->norm_topk_prob;
    r->rsf = p->routed_scaling_factor;
    r->vocab_size = p->method == MOE_ROUTE_HASH ? p->vocab_size : 0;
    r->renorm_min = renorm_min_of(p);
}

moe_status moe_router_create_caps(const moe_router_params *params, const moe_cpu_caps *caps,
                                  moe_router **out)
{
    if (!params) return moe_error(MOE_EINVAL, WHO ": argument 'params' is NULL");
    if (!caps) return moe_error(MOE_EINVAL, WHO ": argument 'caps' is NULL");
    if (!out) return moe_error(MOE_EINVAL, WHO ": argument 'out' is NULL");
    moe_status st = check_params(params);
    if (st) return st;
    moe_router *r = moe_calloc(1, sizeof *r);
    if (!r) return moe_error(MOE_ENOMEM, WHO ": allocating the router");
    fill_from_params(r, params);
    set_weight_rule(r);
    set_used(r);
    if (params->correction_bias && (st = convert_bias(params, &r->bias))) goto fail;
    if (params->tid2eid && (st = convert_table(params, &r->tid2eid))) goto fail;
    if ((st = choose_kernels(r, caps))) goto fail;
    r->noaux_args = (moe_route_noaux_tc_args){.bias = r->bias,
                                              .n_experts = r->n_experts,
                                              .top_k = r->top_k,
                                              .n_group = r->n_group,
                                              .topk_group = r->topk_group,
                                              .score = r->score,
                                              .renormalize = r->renormalize,
                                              .scale = r->rsf};
    moe_route_bind_row(r);
    if ((st = build_explain(r, params->correction_bias_dtype))) goto fail;
    *out = r;
    return MOE_OK;
fail:
    moe_router_destroy(r);
    return st;
}

moe_status moe_router_create(const moe_router_params *params, moe_router **out)
{
    moe_cpu_info info;
    moe_status st = moe_cpu_query(&info);
    if (st) return moe_error_context(st, WHO ": ");
    return moe_router_create_caps(params, &info.allowed, out);
}

void moe_router_destroy(moe_router *router)
{
    if (!router) return;
    moe_free(router->bias);
    moe_free(router->tid2eid);
    moe_free(router->explain);
    moe_free(router);
}

const char *moe_router_explain(const moe_router *router)
{
    if (!router) return "(no router)";
    return router->explain;
}

/* ---- forward ----------------------------------------------------------------------------- */

#define FWD "moe_router_forward"

/* Every token id in [0, vocab_size), checked before anything is written. */
static moe_status check_token_ids(const moe_router *r, size_t n, const void *token_ids,
                                  moe_dtype dt)
{
    if (!token_ids)
        return moe_error(MOE_EINVAL,
                         FWD ": this layer is hash-routed (tid2eid) and needs the token id of "
                             "every row (token_ids is NULL; the CLI takes them with --input-ids)");
    if (dt != MOE_DTYPE_I32 && dt != MOE_DTYPE_I64)
        return moe_error(MOE_EDTYPE, FWD ": token_id_dtype %s is not i32 or i64",
                         moe_dtype_name(dt));
    for (size_t t = 0; t < n; t++) {
        const int64_t id =
            dt == MOE_DTYPE_I32 ? ((const int32_t *)token_ids)[t] : ((const int64_t *)token_ids)[t];
        if (id < 0 || id >= r->vocab_size)
            return moe_error(MOE_ERANGE, FWD ": token_ids[%zu] = %lld is outside [0, %lld)", t,
                             (long long)id, (long long)r->vocab_size);
    }
    return MOE_OK;
}

moe_status moe_router_forward(const moe_router *router, size_t n_tokens, const float *logits,
                              const void *token_ids, moe_dtype token_id_dtype, int32_t *ids,
                              float *weights)
{
    if (n_tokens == 0) return MOE_OK; /* a no-op whatever the pointers, router included */
    if (!router) return moe_error(MOE_EINVAL, FWD ": argument 'router' is NULL");
    if (!logits || !ids || !weights)
        return moe_error(MOE_EINVAL, FWD ": argument '%s' is NULL with n_tokens = %zu",
                         !logits ? "logits"
                         : !ids  ? "ids"
                                 : "weights",
                         n_tokens);
    const size_t e = (size_t)router->n_experts, k = (size_t)router->top_k;
    size_t total;
    if (moe_mul_overflow_size(n_tokens, e * sizeof(float), &total))
        return moe_error(MOE_EOVERFLOW, FWD ": %zu tokens × %zu experts overflow", n_tokens, e);
    const bool hash = router->method == MOE_ROUTE_HASH;
    if (hash) {
        moe_status st = check_token_ids(router, n_tokens, token_ids, token_id_dtype);
        if (st) return st;
    }
    moe_route_scratch sc;
    if (router->rows) {
        router->rows(router, n_tokens, logits, &sc, ids, weights);
        return MOE_OK;
    }
    for (size_t t = 0; t < n_tokens; t++) {
        int64_t token = 0;
        if (hash)
            token = token_id_dtype == MOE_DTYPE_I32 ? ((const int32_t *)token_ids)[t]
                                                    : ((const int64_t *)token_ids)[t];
        router->row(router, logits + t * e, token, &sc, ids + t * k, weights + t * k);
    }
    return MOE_OK;
}
