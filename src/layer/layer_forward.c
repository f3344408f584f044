/* layer_forward.c — moe_layer_forward: validation at the door, then one OpenMP team runs it. */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "experts/experts.h"
#include "layer/layer_internal.h"
#include "layer/layer_shared_gate.h"
#include "route/router_internal.h"

#define FWD "moe_layer_forward"

/* Token rows per work item of the row-parallel steps (activations, gate, route): enough to
 * amortise a call, few enough that a prefill batch spreads over every thread. */
#define ROWS_PER_ITEM 8

/* The bytes of moe_forward_args this version reads. */
#define ARGS_MIN_SIZE (offsetof(moe_forward_args, trace) + sizeof(moe_trace *))

size_t moe_layer_workspace_size(const moe_layer *layer, size_t n_tokens)
{
    return layer ? moe_layer_plan_workspace(&layer->plan, n_tokens) : 0;
}

/* ---- Validation --------------------------------------------------------------------------- */

moe_status moe_layer_check_token_ids(const moe_layer *l, const moe_forward_args *a, const char *fn,
                                     const char *hint)
{
    const int index = l->plan.index;
    if (!a->token_ids)
        return moe_error(MOE_EINVAL,
                         "%s: layer %d is hash-routed (tid2eid) and needs the token id of every "
                         "row: args->token_ids is NULL%s",
                         fn, index, hint);
    const moe_dtype dt = a->token_id_dtype;
    if (dt != MOE_DTYPE_I32 && dt != MOE_DTYPE_I64)
        return moe_error(MOE_EDTYPE, "%s: layer %d: args->token_id_dtype %s is not i32 or i64", fn,
                         index, moe_dtype_name(dt));
    const int64_t vocab = l->plan.router_params.vocab_size;
    for (size_t t = 0; t < a->n_tokens; t++) {
        const int64_t id = dt == MOE_DTYPE_I32 ? ((const int32_t *)a->token_ids)[t]
                                               : ((const int64_t *)a->token_ids)[t];
        if (id < 0 || id >= vocab)
            return moe_error(MOE_ERANGE, "%s: layer %d: token_ids[%zu] = %lld is outside [0, %lld)",
                             fn, index, t, (long long)id, (long long)vocab);
    }
    return MOE_OK;
}

static moe_status check_workspace(const char *fn, const moe_layer *l, const moe_forward_args *a)
{
    const int index = l->plan.index;
    const size_t need = moe_layer_plan_workspace(&l->plan, a->n_tokens);
    if (need == 0)
        return moe_error(MOE_EOVERFLOW,
                         "%s: layer %d: n_tokens = %zu is too many: the workspace size "
                             "overflows; run fewer tokens per forward",
                         fn, index, a->n_tokens);
    if (!a->workspace)
        return moe_error(MOE_EINVAL,
                         "%s: layer %d: args->workspace is NULL; %zu tokens need "
                             "moe_layer_workspace_size = %zu bytes",
                         fn, index, a->n_tokens, need);
    if ((uintptr_t)a->workspace % 64)
        return moe_error(MOE_EINVAL, "%s: layer %d: args->workspace %p is not 64-byte aligned",
                         fn, index, a->workspace);
    if (a->workspace_size < need)
        return moe_error(MOE_ERANGE,
                         "%s: layer %d: too many tokens for the workspace: n_tokens = %zu needs "
                             "%zu bytes (moe_layer_workspace_size), args->workspace_size is %zu",
                         fn, index, a->n_tokens, need, a->workspace_size);
    return MOE_OK;
}

/* The rows in and out and the workspace, common to both forwards (FN names the caller). */
static moe_status check_rows(const char *fn, const moe_layer *l, const moe_forward_args *a)
{
    const int index = l->plan.index;
    const int64_t h = l->plan.desc->hidden;
    if (a->hidden_size != (size_t)h)
        return moe_error(MOE_EINVAL,
                         "%s: layer %d: args->hidden_size = %zu, but the model's hidden size is "
                             "%lld",
                         fn, index, a->hidden_size, (long long)h);
    if (a->hidden_dtype != MOE_DTYPE_F32 && a->hidden_dtype != MOE_DTYPE_BF16)
        return moe_error(MOE_EDTYPE, "%s: layer %d: args->hidden_dtype %s is not f32 or bf16", fn,
                         index, moe_dtype_name(a->hidden_dtype));
    if (!a->hidden || !a->out)
        return moe_error(MOE_EINVAL, "%s: layer %d: args->%s is NULL with n_tokens = %zu", fn,
                         index, a->hidden ? "out" : "hidden", a->n_tokens);
    return check_workspace(fn, l, a);
}

static moe_status check_args(const moe_layer *l, const moe_forward_args *a)
{
    moe_status st = check_rows(FWD, l, a);
    if (st) return st;
    if (l->plan.moe && l->plan.ld->routing.method == MOE_ROUTE_HASH) return moe_layer_check_token_ids(l, a, FWD, " (the CLI takes them with --input-ids)");
    return MOE_OK;
}

/* ---- The steps --------------------------------------------------------------------------------
 */

/* What one forward works with; shared by the team. */
typedef struct fwd {
    const moe_layer *l;
    const moe_forward_args *a;
    moe_layer_bufs b;
    size_t h;
    const void *act[MOE_EXPERTS_RECIPES]; /* the activations of each recipe */
    float *logits;
    int32_t *ids;
    float *weights;
    moe_trace_rec trace;
    moe_experts_job job;
    bool experts_only; /* moe_layer_forward_experts: the caller's ids and weights, no gate or route */
    moe_layer_part part; /* all of it, or one step of expert parallelism's */
    bool watch;        /* sum the threads' run-queue waits (moe_team_watching) */
    atomic_llong waited;
    _Atomic int route_status;
} fwd;

static size_t row_items(size_t n) { return (n + ROWS_PER_ITEM - 1) / ROWS_PER_ITEM; }

static size_t item_rows(size_t n, size_t it)
{
    const size_t r0 = it * ROWS_PER_ITEM;
    return n - r0 < ROWS_PER_ITEM ? n - r0 : ROWS_PER_ITEM;
}

/* The input rows in the type each recipe reads: in place when it already is, else converted
 * once here (bf16 -> f32 with the chosen kernel, f32 -> bf16 by rounding, f32 -> prepared Q8
 * rows by the Q8 kernel set, from the widened rows when the input is bf16). */
static void activations_step(fwd *f)
{
    const moe_layer_plan *p = &f->l->plan;
    const size_t n = f->a->n_tokens, h = f->h;
    const bool in_bf16 = f->a->hidden_dtype == MOE_DTYPE_BF16;
    const moe_expert_group *q8 = moe_layer_q8_group(p);
    const bool need_f32 = in_bf16 && moe_layer_needs_f32_rows(p);
    const bool need_bf16 = !in_bf16 && moe_layer_uses_bf16_rows(p);
    moe_cvt_bf16_f32_ukernel *widen = need_f32 ? p->cvt_bf16.kernel->fn.cvt_bf16_f32 : NULL;
    const float *f32 = in_bf16 ? f->b.act_f32 : (const float *)f->a->hidden;
    if (need_f32 || need_bf16 || q8) {
#pragma omp for schedule(static)
        for (size_t it = 0; it < row_items(n); it++) {
            const size_t r0 = it * ROWS_PER_ITEM, rows = item_rows(n, it);
            if (need_f32)
                widen(rows * h, (const uint16_t *)f->a->hidden + r0 * h, f->b.act_f32 + r0 * h);
            else if (need_bf16)
                moe_act_round_bf16(rows * h, (const float *)f->a->hidden + r0 * h,
                                   f->b.act_bf16 + r0 * h);
            if (q8) moe_act_prepare(q8, rows, f32 + r0 * h, h, f->b.act_q8 + r0 * q8->x_row_bytes);
        }
    }
#pragma omp master
    {
        const uint64_t th = (uint64_t)n * h, q8_bytes = q8 ? (uint64_t)n * q8->x_row_bytes : 0;
        char kernel[64];
        if (q8)
            snprintf(kernel, sizeof kernel, "%s%s%s prepare_act",
                     need_f32 ? p->cvt_bf16.kernel->name : "", need_f32 ? ", " : "", q8->ks->name);
        if (need_f32)
            moe_trace_mark(&f->trace, "activations", q8 ? kernel : p->cvt_bf16.kernel->name, th * 2,
                           th * 4 + q8_bytes);
        else if (need_bf16)
            moe_trace_mark(&f->trace, "activations", "moe_act_round_bf16", th * 4,
                           th * 2 + q8_bytes);
        else if (q8)
            moe_trace_mark(&f->trace, "activations", kernel, th * 4, q8_bytes);
        else
            moe_trace_mark(&f->trace, "activations", "none: used in place", 0, 0);
    }
}

static void gate_step(fwd *f)
{
    const moe_layer *l = f->l;
    const size_t n = f->a->n_tokens, h = f->h, e = (size_t)l->plan.ld->routing.n_experts;
    const moe_dtype dt = f->a->hidden_dtype;
    const size_t eb = dt == MOE_DTYPE_BF16 ? 2 : 4, threads = (size_t)omp_get_num_threads();
    if (row_items(n) < threads) {
        /* Fewer row items than threads (a decode step): every thread takes all the rows for
         * its share of the experts, so the gate's weight streams on every core (same bits). */
#pragma omp for schedule(static)
        for (size_t part = 0; part < threads; part++)
            moe_gate_forward(l->gate, n, f->a->hidden, dt, h, f->logits, e, part, threads);
    } else {
#pragma omp for schedule(static)
        for (size_t it = 0; it < row_items(n); it++) {
            const size_t r0 = it * ROWS_PER_ITEM;
            moe_gate_forward(l->gate, item_rows(n, it), (const char *)f->a->hidden + r0 * h * eb,
                             dt, h, f->logits + r0 * e, e, 0, 1);
        }
    }
#pragma omp master
    moe_trace_mark(&f->trace, "gate", moe_gate_choice(l->gate, dt)->kernel->name,
                   moe_gate_packed_bytes(l->gate) + (uint64_t)n * h * eb, (uint64_t)n * e * 4);
}

static void route_step(fwd *f)
{
    const moe_layer *l = f->l;
    const moe_forward_args *a = f->a;
    const size_t n = a->n_tokens, e = (size_t)l->plan.ld->routing.n_experts;
    const size_t k = (size_t)l->plan.ld->routing.top_k;
    const size_t idb = a->token_id_dtype == MOE_DTYPE_I64 ? 8 : 4;
    const bool hash = l->plan.ld->routing.method == MOE_ROUTE_HASH;
#pragma omp for schedule(static)
    for (size_t it = 0; it < row_items(n); it++) {
        const size_t r0 = it * ROWS_PER_ITEM;
        const void *tok = hash ? (const char *)a->token_ids + r0 * idb : NULL;
        moe_status st = moe_router_forward(l->router, item_rows(n, it), f->logits + r0 * e, tok,
                                           a->token_id_dtype, f->ids + r0 * k, f->weights + r0 * k);
        if (st) f->route_status = st;
    }
#pragma omp master
    {
        /* The method and its selection kernel: the fused one where the method has it, else
         * top-k, else (hash routing selects nothing) the first it calls. */
        const moe_router *r = l->router;
        int prim = r->used[MOE_ROUTE_PRIM_NOAUX_TC] ? MOE_ROUTE_PRIM_NOAUX_TC : MOE_ROUTE_PRIM_TOPK;
        for (int i = 0; !r->used[prim] && i < MOE_ROUTE_PRIM_COUNT_; i++)
            prim = i;
        char kernel[64];
        snprintf(kernel, sizeof kernel, "%s: %s", moe_route_method_name(r->method),
                 r->used[prim] ? r->choice[prim].kernel->name : "none");
        moe_trace_mark(&f->trace, "route", kernel, (uint64_t)n * (e * 4 + (hash ? idb : 0)),
                       (uint64_t)n * k * 8);
    }
}

/* sigmoid(x · w) of every token for the shared expert gate, from the input as given (bf16
 * widened exactly): the combine multiplies the shared output by it. */
static void shared_gate_step(fwd *f)
{
    const size_t n = f->a->n_tokens, h = f->h;
    const moe_dtype dt = f->a->hidden_dtype;
    const size_t eb = dt == MOE_DTYPE_BF16 ? 2 : 4;
#pragma omp for schedule(static)
    for (size_t it = 0; it < row_items(n); it++) {
        const size_t r0 = it * ROWS_PER_ITEM, rows = item_rows(n, it);
        for (size_t r = r0; r < r0 + rows; r++)
            f->b.shared_scale[r] = moe_shared_gate_scale(
                f->l->shared_gate, h, (const char *)f->a->hidden + r * h * eb, dt);
    }
#pragma omp master
    moe_trace_mark(&f->trace, "shared_gate", "sigmoid(x . w), f32, 8 partial sums",
                   (uint64_t)h * 4 + (uint64_t)n * h * eb, (uint64_t)n * 4);
}

static void steps(fwd *f)
{
    /* The calling thread's entry into the team (a few microseconds on a decode step), so the
     * first step's time is its own. */
#pragma omp master
    moe_trace_mark(&f->trace, "threads", "OpenMP team start", 0, 0);
    /* The route reads the input rows as they are; a combine converts them only for the
     * shared experts (and their gate). */
    if (f->part != MOE_PART_ROUTE && (f->part != MOE_PART_COMBINE || f->job.always))
        activations_step(f);
    if (f->l->shared_gate && f->job.always && f->part != MOE_PART_ROUTE) shared_gate_step(f);
    if (f->l->plan.moe && !f->experts_only &&
        (f->part == MOE_PART_FULL || f->part == MOE_PART_ROUTE)) {
        gate_step(f);
        route_step(f);
        if (f->route_status != MOE_OK) return; /* read after the route loop's barrier */
    }
    if (f->part != MOE_PART_ROUTE) moe_experts_run_team(&f->job);
}

/* Each thread's part, adding up how long it waited on a run queue (layer_team.h). */
static void team(fwd *f)
{
    const long long before = f->watch ? moe_team_waited_ns() : 0;
    steps(f);
    if (f->watch) atomic_fetch_add(&f->waited, moe_team_waited_ns() - before);
}

/* Runs F's steps on the team size the layer's watch chooses, and reports back. */
static void run(fwd *f)
{
    moe_team *t = f->l->team;
    const int size = moe_team_size(t, moe_team_now_ns());
    f->watch = size > 1 && moe_team_watching(t);
    atomic_init(&f->waited, 0);
    const long long start = f->watch ? moe_team_now_ns() : 0;
#pragma omp parallel num_threads(size)
    team(f);
    if (!f->watch) return;
    const long long end = moe_team_now_ns();
    const long long waited = atomic_load(&f->waited);
    moe_team_report(t, size, moe_team_shared(waited, end - start), end);
}

/* Points F at the workspace and the caller's optional outputs. */
static void bind(fwd *f)
{
    const moe_layer *l = f->l;
    const moe_forward_args *a = f->a;
    moe_carve c = {a->workspace, 0, false};
    moe_layer_carve_part(&l->plan, &c, a->n_tokens, f->part, &f->b);
    f->h = (size_t)l->plan.desc->hidden;
    const bool in_bf16 = a->hidden_dtype == MOE_DTYPE_BF16;
    f->act[MOE_RECIPE_F32] = in_bf16 ? (const void *)f->b.act_f32 : a->hidden;
    f->act[MOE_RECIPE_BF16] = in_bf16 ? a->hidden : (const void *)f->b.act_bf16;
    f->act[MOE_RECIPE_TILE] = f->act[MOE_RECIPE_BF16]; /* the same bf16 rows */
    f->act[MOE_RECIPE_Q8] = f->b.act_q8;
    const float *f32_rows = in_bf16 ? f->b.act_f32 : (const float *)a->hidden;
    f->logits = a->logits_out ? a->logits_out : f->b.logits;
    f->ids = a->ids_out ? a->ids_out : f->b.ids;
    f->weights = a->weights_out ? a->weights_out : f->b.weights;
    moe_experts_job *j = &f->job;
    j->n_tokens = a->n_tokens;
    for (int r = 0; r < MOE_EXPERTS_RECIPES; r++)
        j->act[r] = f->act[r];
    j->routed = l->routed;
    j->act_f32 = f32_rows;
    j->top_k = l->plan.moe ? l->plan.ld->routing.top_k : 0;
    j->ids = f->ids;
    j->weights = f->weights;
    j->always = l->always;
    j->always_name = l->always_name;
    j->always_scale = l->shared_gate ? f->b.shared_scale : NULL;
    j->out = a->out;
    j->ws = f->b.ws;
    j->trace = &f->trace;
    j->status = MOE_OK;
}

/* The layer, the arguments and their size, common to both forwards (FN, TYPE name them). */
static moe_status check_call(const char *fn, const char *type, const moe_layer *layer,
                             const void *args, size_t size, size_t min_size)
{
    if (!layer) return moe_error(MOE_EINVAL, "%s: argument 'layer' is NULL", fn);
    if (!args) return moe_error(MOE_EINVAL, "%s: argument 'args' is NULL", fn);
    if (size < min_size)
        return moe_error(MOE_EINVAL,
                         "%s: args->size = %zu is smaller than the %zu bytes this version reads "
                         "(set it to sizeof(%s))",
                         fn, size, min_size, type);
    return MOE_OK;
}

/* Points the job at the caller's ids (an i64 array narrowed into the workspace, its values
 * already checked in [0, E)) and weights, and leaves the shared experts out unless asked. */
static void use_callers_routing(fwd *f, const moe_experts_args *x)
{
    if (x->ids_dtype == MOE_DTYPE_I64) {
        const int64_t *ids = x->ids;
        for (size_t i = 0; i < x->n_tokens * x->top_k; i++) /* fits: the workspace holds it */
            f->b.ids[i] = (int32_t)ids[i];
        f->job.ids = f->b.ids;
    } else {
        f->job.ids = x->ids;
    }
    f->job.weights = x->weights;
    if (!x->shared) f->job.always = NULL;
}

/* One step of expert parallelism's (moe_layer_forward_part): the job's routing and outputs
 * (ROWS: each row's expert and, for scale_input, its weight; COMBINE: weights and rows). */
static void use_part(fwd *f, const int32_t *ids, const float *weights, const float *y)
{
    moe_experts_job *j = &f->job;
    if (f->part == MOE_PART_ROWS) {
        j->ids = ids;
        j->weights = weights; /* scale_input: each row's weight scales its input; else NULL */
        j->top_k = 1;
        j->always = NULL;
        j->rows_out = true;
    } else if (f->part == MOE_PART_COMBINE) {
        j->weights = weights;
        j->y_given = y;
    }
}

/* Every forward once its arguments are checked: PART (all, or one step of expert
 * parallelism's, with its IDS, WEIGHTS or Y), X the caller's routing (experts only) or NULL. */
static moe_status forward_run(const moe_layer *layer, const moe_forward_args *args,
                              moe_layer_part part, const moe_experts_args *x, const int32_t *ids,
                              const float *weights, const float *y)
{
    atomic_fetch_or(layer->state, MOE_LAYER_USED);
    if (args->n_tokens == 0) {
        if (args->trace) args->trace->count = 0;
        return MOE_OK;
    }
    fwd f;
    memset(&f, 0, sizeof f);
    f.l = layer;
    f.a = args;
    f.experts_only = x != NULL;
    f.part = part;
    moe_trace_start(&f.trace, args->trace);
    bind(&f);
    if (x) use_callers_routing(&f, x);
    use_part(&f, ids, weights, y);
    run(&f);
    if (f.route_status != MOE_OK)
        return moe_error(f.route_status, FWD ": layer %d: the router failed after validation",
                         layer->plan.index);
    return f.job.status;
}

/* Both forwards once their arguments are checked: X the caller's routing (experts only), or
 * NULL (the full forward). A placed layer without all the experts runs only in steps. */
static moe_status forward_checked(const moe_layer *layer, const moe_forward_args *args,
                                  const moe_experts_args *x)
{
    const moe_layer_placement *ep = &layer->plan.ep;
    if (ep->slot && ep->n_owned < layer->plan.ld->routing.n_experts)
        return moe_error(MOE_ESTATE,
                         "%s: layer %d is placed on rank %d of %d, which packs %d of its %d "
                         "routed experts: run its forward in steps (moe_ep.h, moe_mpi_forward)",
                         x ? "moe_layer_forward_experts" : FWD, layer->plan.index, ep->rank,
                         ep->n_ranks, ep->n_owned, layer->plan.ld->routing.n_experts);
    return forward_run(layer, args, MOE_PART_FULL, x, NULL, NULL, NULL);
}

moe_status moe_layer_forward_part(const moe_layer *layer, const moe_forward_args *args,
                                  moe_layer_part part, const int32_t *ids, const float *weights,
                                  const float *y)
{
    return forward_run(layer, args, part, NULL, ids, weights, y);
}

moe_status moe_layer_forward(const moe_layer *layer, const moe_forward_args *args)
{
    moe_status st = check_call(FWD, "moe_forward_args", layer, args, args ? args->size : 0,
                               ARGS_MIN_SIZE);
    if (st) return st;
    if (args->n_tokens > 0 && (st = check_args(layer, args))) return st;
    return forward_checked(layer, args, NULL);
}

/* ---- Experts only ------------------------------------------------------------------------- */

#define FWX "moe_layer_forward_experts"
#define XARGS_MIN_SIZE (offsetof(moe_experts_args, trace) + sizeof(moe_trace *))

/* Ids in [0, E) and distinct within their row; weights finite. */
static moe_status check_routing(const moe_layer *l, const moe_experts_args *a)
{
    const int index = l->plan.index, e = l->plan.ld->routing.n_experts;
    const size_t k = a->top_k;
    if (!a->ids || !a->weights)
        return moe_error(MOE_EINVAL, FWX ": layer %d: args->%s is NULL with n_tokens = %zu", index,
                         a->ids ? "weights" : "ids", a->n_tokens);
    if (a->ids_dtype != MOE_DTYPE_I32 && a->ids_dtype != MOE_DTYPE_I64)
        return moe_error(MOE_EDTYPE, FWX ": layer %d: args->ids_dtype %s is not i32 or i64", index,
                         moe_dtype_name(a->ids_dtype));
    const bool i64 = a->ids_dtype == MOE_DTYPE_I64;
    for (size_t t = 0; t < a->n_tokens; t++) {
        for (size_t j = 0; j < k; j++) {
            const size_t at = t * k + j;
            const int64_t id = i64 ? ((const int64_t *)a->ids)[at] : ((const int32_t *)a->ids)[at];
            if (id < 0 || id >= e)
                return moe_error(MOE_ERANGE,
                                 FWX ": layer %d: ids[%zu][%zu] = %lld is outside [0, %d)", index,
                                 t, j, (long long)id, e);
            for (size_t q = 0; q < j; q++) {
                const size_t bq = t * k + q;
                const int64_t prev =
                    i64 ? ((const int64_t *)a->ids)[bq] : ((const int32_t *)a->ids)[bq];
                if (prev == id)
                    return moe_error(MOE_ERANGE,
                                     FWX ": layer %d: ids[%zu][%zu] = %lld repeats ids[%zu][%zu]: "
                                         "a token visits each expert once",
                                     index, t, j, (long long)id, t, q);
            }
            const float w = a->weights[at];
            if (!(w - w == 0.0f))
                return moe_error(MOE_EVALUE, FWX ": layer %d: weights[%zu][%zu] = %g is not finite",
                                 index, t, j, (double)w);
        }
    }
    return MOE_OK;
}

static moe_status check_experts_args(const moe_layer *l, const moe_experts_args *a,
                                     const moe_forward_args *rows)
{
    const int index = l->plan.index;
    if (!l->plan.moe)
        return moe_error(MOE_EINVAL,
                         FWX ": layer %d is a dense layer: it has no routed experts (run it with "
                             "moe_layer_forward)",
                         index);
    const size_t k = (size_t)l->plan.ld->routing.top_k;
    if (a->top_k != k)
        return moe_error(MOE_EINVAL, FWX ": layer %d: args->top_k = %zu, but the layer's top_k is %zu",
                         index, a->top_k, k);
    moe_status st = check_rows(FWX, l, rows);
    if (st) return st;
    return check_routing(l, a);
}

moe_status moe_layer_forward_experts(const moe_layer *layer, const moe_experts_args *args)
{
    moe_status st = check_call(FWX, "moe_experts_args", layer, args, args ? args->size : 0,
                               XARGS_MIN_SIZE);
    if (st) return st;
    /* The rows as a full forward's arguments: the same checks, workspace and steps. */
    moe_forward_args rows;
    memset(&rows, 0, sizeof rows);
    rows.size = sizeof rows;
    rows.n_tokens = args->n_tokens;
    rows.hidden_size = args->hidden_size;
    rows.hidden = args->hidden;
    rows.hidden_dtype = args->hidden_dtype;
    rows.out = args->out;
    rows.workspace = args->workspace;
    rows.workspace_size = args->workspace_size;
    rows.trace = args->trace;
    if (args->n_tokens > 0 && (st = check_experts_args(layer, args, &rows))) return st;
    return forward_checked(layer, &rows, args);
}
