/* layer_plan.c — what a layer will be: options resolved, tensors checked, every kernel chosen. */
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/checked.h"
#include "core/error.h"
#include "layer/layer_internal.h"
#include "model/model_handle.h"
#include "model/verify.h"

/* A generous bound on worker threads: far above any socket, far below where per-thread
 * bookkeeping matters. */
#define MAX_THREADS 4096

/* The bytes of moe_layer_options this version needs, and those that hold experts_recipe. */
#define OPTIONS_MIN_SIZE (offsetof(moe_layer_options, logits_dtype) + sizeof(moe_dtype))
#define RECIPE_END (offsetof(moe_layer_options, experts_recipe) + sizeof(moe_experts_recipe))
#define FIXED_THREADS_END (offsetof(moe_layer_options, fixed_threads) + sizeof(bool))

const char *const moe_layer_group_label[MOE_LG_COUNT_] = {"routed experts", "shared experts",
                                                          "dense mlp"};

/* ---- Options ---------------------------------------------------------------------------- */

static moe_status resolve_options(const moe_layer_options *o, int layer, moe_layer_plan *p)
{
    int threads = 0;
    moe_dtype logits = MOE_DTYPE_INVALID;
    moe_experts_recipe recipe = MOE_EXPERTS_RECIPE_DEFAULT;
    bool fixed = false;
    if (o) {
        if (o->size < OPTIONS_MIN_SIZE)
            return moe_error(MOE_EINVAL,
                             "layer %d: options->size = %zu is smaller than the %zu bytes this "
                             "version reads (set it to sizeof(moe_layer_options))",
                             layer, o->size, (size_t)OPTIONS_MIN_SIZE);
        threads = o->threads;
        logits = o->logits_dtype;
        if (o->size >= RECIPE_END) recipe = o->experts_recipe;
        if (o->size >= FIXED_THREADS_END) fixed = o->fixed_threads;
    }
    if (threads < 0 || threads > MAX_THREADS)
        return moe_error(MOE_EINVAL,
                         "layer %d: options->threads = %d is outside [0, %d] (0 = the "
                         "number of cores)",
                         layer, threads, MAX_THREADS);
    if (logits != MOE_DTYPE_INVALID && logits != MOE_DTYPE_F32 && logits != MOE_DTYPE_BF16)
        return moe_error(MOE_EINVAL,
                         "layer %d: options->logits_dtype = %s is not f32, bf16 or invalid (decide "
                         "later)",
                         layer, moe_dtype_name(logits));
    if (recipe != MOE_EXPERTS_RECIPE_DEFAULT && recipe != MOE_EXPERTS_RECIPE_F32 &&
        recipe != MOE_EXPERTS_RECIPE_BF16 && recipe != MOE_EXPERTS_RECIPE_TILE)
        return moe_error(MOE_EINVAL,
                         "layer %d: options->experts_recipe = %d is not default (0), f32 (1), "
                         "bf16 (2) or tile (3)",
                         layer, (int)recipe);
    p->threads_default = threads == 0;
    if (threads == 0) threads = omp_get_num_procs();
    p->threads = threads > 0 ? threads : 1;
    p->fixed_threads = fixed;
    p->logits_origin = logits == MOE_DTYPE_INVALID ? 0 : 1;
    p->logits_dtype = logits == MOE_DTYPE_INVALID ? MOE_DTYPE_F32 : logits;
    p->recipe_default = recipe == MOE_EXPERTS_RECIPE_DEFAULT;
    p->recipe = recipe == MOE_EXPERTS_RECIPE_BF16   ? MOE_RECIPE_BF16
                : recipe == MOE_EXPERTS_RECIPE_TILE ? MOE_RECIPE_TILE
                                                    : MOE_RECIPE_F32;
    return MOE_OK;
}

/* ---- Tensors ---------------------------------------------------------------------------- */

/* Files tensor T of spec S in the plan's tables. */
static void file_tensor(moe_layer_plan *p, const moe_tensor_spec *s, const moe_tensor *t)
{
    if ((unsigned)s->role >= MOE_LAYER_ROLES) return;
    switch (s->group) {
    case MOE_GROUP_ROUTER: p->router[s->role] = t; break;
    case MOE_GROUP_ROUTED:
        if (p->groups[MOE_LG_ROUTED].per_expert && s->expert >= 0 &&
            s->expert < p->groups[MOE_LG_ROUTED].n)
            p->groups[MOE_LG_ROUTED].per_expert[s->expert][s->role] = t;
        else
            p->groups[MOE_LG_ROUTED].one[s->role] = t;
        break;
    case MOE_GROUP_SHARED: p->groups[MOE_LG_SHARED].one[s->role] = t; break;
    case MOE_GROUP_DENSE: p->groups[MOE_LG_DENSE].one[s->role] = t; break;
    }
}

static moe_status find_tensors(moe_layer_plan *p)
{
    moe_tensor_spec *specs = NULL;
    size_t n = 0;
    moe_status st = moe_model_layer_tensors(p->desc, p->index, &specs, &n);
    if (st) return st;
    for (size_t i = 0; i < n && !st; i++) {
        const moe_tensor *t;
        st = moe_model_find_checked(p->desc, moe_model_ckpt_of(p->model), &specs[i], &t);
        if (!st && t) file_tensor(p, &specs[i], t);
    }
    moe_free(specs);
    return st;
}

/* The files may have changed since open: a mapped file that shrank raises SIGBUS on the first
 * read of a lost page, so every file holding one of the layer's tensors is measured again
 * before anything reads them (docs/checkpoints.md, "Files that change after open"). */
static moe_status check_files(const moe_layer_plan *p)
{
    const moe_ckpt *ck = moe_model_ckpt_of(p->model);
    moe_status st = moe_ckpt_check_files(ck, p->router, MOE_LAYER_ROLES);
    for (int id = 0; id < MOE_LG_COUNT_ && !st; id++) {
        const moe_layer_group_plan *g = &p->groups[id];
        st = moe_ckpt_check_files(ck, g->one, MOE_LAYER_ROLES);
        if (!st && g->per_expert)
            st = moe_ckpt_check_files(ck, g->per_expert[0], (size_t)g->n * MOE_LAYER_ROLES);
    }
    return st ? moe_error_context(st, "layer %d: ", p->index) : MOE_OK;
}

/* ---- Groups ----------------------------------------------------------------------------- */

/* The dtype every tensor of ROLE in the group has (and *one, the first of them); MOE_EDTYPE
 * naming two that differ. */
static moe_status common_dtype(const moe_layer_plan *p, const moe_layer_group_plan *g,
                               moe_tensor_role role, moe_dtype *out, const moe_tensor **one)
{
    const moe_tensor *first = NULL;
    const int n = g->per_expert ? g->n : 0;
    for (int e = -1; e < n; e++) {
        const moe_tensor *t = e < 0 ? g->one[role] : g->per_expert[e][role];
        if (!t) continue;
        if (!first) first = t;
        if (!moe_same_weight_dtype(t->dtype, first->dtype))
            return moe_error(MOE_EDTYPE,
                             "layer %d: tensor '%s' is %s but '%s' is %s: the %s of one group "
                             "must share a dtype",
                             p->index, t->name, moe_dtype_name(t->dtype), first->name,
                             moe_dtype_name(first->dtype), moe_tensor_role_name(role));
    }
    /* Some writers label E8M0 scale bytes U8; they are the same bytes. (Packed E2M1 codes
     * come as U8 or I8 too, and stay so: the kernels read either.) */
    const bool scale = role == MOE_ROLE_GATE_SCALE || role == MOE_ROLE_UP_SCALE ||
                       role == MOE_ROLE_DOWN_SCALE || role == MOE_ROLE_GATE_UP_SCALE;
    *out = !first                                  ? MOE_DTYPE_INVALID
           : scale && first->dtype == MOE_DTYPE_U8 ? MOE_DTYPE_F8_E8M0
                                                   : first->dtype;
    *one = first;
    return MOE_OK;
}

static moe_status group_dtypes(const moe_layer_plan *p, moe_layer_group_plan *g)
{
    static const moe_tensor_role weights[] = {MOE_ROLE_GATE, MOE_ROLE_UP, MOE_ROLE_DOWN,
                                              MOE_ROLE_GATE_UP};
    static const moe_tensor_role scales[] = {MOE_ROLE_GATE_SCALE, MOE_ROLE_UP_SCALE,
                                             MOE_ROLE_DOWN_SCALE, MOE_ROLE_GATE_UP_SCALE};
    static const moe_tensor_role biases[] = {MOE_ROLE_GATE_UP_BIAS, MOE_ROLE_DOWN_BIAS};
    moe_dtype *outs[3] = {&g->weight_dtype, &g->scale_dtype, &g->bias_dtype};
    const moe_tensor_role *lists[3] = {weights, scales, biases};
    const size_t counts[3] = {4, 4, 2};
    for (int l = 0; l < 3; l++) {
        *outs[l] = MOE_DTYPE_INVALID;
        const moe_tensor *seen = NULL;
        for (size_t i = 0; i < counts[l]; i++) {
            moe_dtype d = MOE_DTYPE_INVALID;
            const moe_tensor *t = NULL;
            moe_status st = common_dtype(p, g, lists[l][i], &d, &t);
            if (st) return st;
            if (d == MOE_DTYPE_INVALID) continue;
            if (seen && !moe_same_weight_dtype(*outs[l], d))
                return moe_error(MOE_EDTYPE,
                                 "layer %d: tensor '%s' is %s but '%s' is %s: a group's "
                                 "projections must share a dtype",
                                 p->index, t->name, moe_dtype_name(t->dtype), seen->name,
                                 moe_dtype_name(seen->dtype));
            if (!seen) {
                seen = t;
                *outs[l] = d;
            }
        }
    }
    return MOE_OK;
}

/* Whether some E8M0 scale of the group lies outside what the tile recipe folds into bf16
 * weights (kernels/expert.h, "The tile recipe"): read only when MXFP4 experts are asked the
 * tile recipe, since it touches every scale byte (1/16 of the codes' bytes). */
static bool scales_unfoldable(const moe_layer_group_plan *g)
{
    static const moe_tensor_role roles[] = {MOE_ROLE_GATE_SCALE, MOE_ROLE_UP_SCALE,
                                            MOE_ROLE_DOWN_SCALE, MOE_ROLE_GATE_UP_SCALE};
    const int n = g->per_expert ? g->n : 0;
    for (int e = -1; e < n; e++)
        for (size_t r = 0; r < sizeof roles / sizeof roles[0]; r++) {
            const moe_tensor *t = e < 0 ? g->one[roles[r]] : g->per_expert[e][roles[r]];
            if (!t) continue;
            const unsigned char *b = t->data;
            bool bad = false;
            for (uint64_t i = 0; i < t->nbytes; i++)
                bad |= !moe_tile_mx_scale_ok(b[i]);
            if (bad) return true;
        }
    return false;
}

/* The eligibility function of the expert kernel sets, once per group. */
static moe_status select_group(const moe_layer_plan *p, moe_layer_group_plan *g,
                               moe_layer_group_id id)
{
    moe_expert_problem prob;
    memset(&prob, 0, sizeof prob);
    prob.format = (int)g->mlp.format;
    prob.weight_dtype = g->weight_dtype;
    prob.scale_dtype = g->scale_dtype;
    prob.hidden = g->mlp.hidden;
    prob.intermediate = g->mlp.intermediate;
    prob.activation = (int)g->mlp.activation;
    prob.has_bias = g->mlp.has_bias;
    const bool mx = g->mlp.format == MOE_WFMT_MXFP4;
    /* MXFP4 and INT4 groups run q8 unless the tile recipe is asked for (neither has bf16). */
    const bool q4 = mx || g->mlp.format == MOE_WFMT_INT4_GROUP;
    prob.recipe = q4 && p->recipe != MOE_RECIPE_TILE ? MOE_RECIPE_Q8 : p->recipe;
    prob.mx_scales_unfoldable = mx && p->recipe == MOE_RECIPE_TILE && scales_unfoldable(g);
    moe_expert_choice c;
    moe_status st = moe_select_experts(&p->allowed, &prob, &c);
    if (st) return moe_error_context(st, "layer %d %s: ", p->index, moe_layer_group_label[id]);
    g->ks = c.set;
    g->recipe = c.recipe;
    snprintf(g->reason, sizeof g->reason, "%s", c.reason);
    return MOE_OK;
}

static moe_act_params act_of(const moe_mlp_desc *m)
{
    moe_act_params a;
    a.kind = (int)m->activation;
    a.limit = m->swiglu_limit;
    a.alpha = m->alpha;
    return a;
}

static moe_status plan_group(moe_layer_plan *p, moe_layer_group_id id)
{
    moe_layer_group_plan *g = &p->groups[id];
    moe_status st = group_dtypes(p, g);
    if (st) return st;
    if ((st = select_group(p, g, id))) return st;
    const moe_act_params act = act_of(&g->mlp);
    char what[96];
    snprintf(what, sizeof what, "layer %d %s", p->index, moe_layer_group_label[id]);
    st = moe_expert_group_plan(&g->group, g->ks, g->n, g->mlp.hidden, g->mlp.intermediate, &act,
                               what);
    if (st) return st;
    if (id == MOE_LG_ROUTED && p->ep.slot) { /* placed: only this rank's experts */
        g->group.n_packed = p->ep.n_owned;
        g->group.packed_bytes = (size_t)p->ep.n_owned * g->group.expert_stride;
        g->group.slot = p->ep.slot;
        g->group.packed_ids = p->ep.owned;
        g->group.scale_input = p->ld->scale_input;
    } else if (id == MOE_LG_ROUTED) {
        moe_expert_group_alias(&g->group, p->resident_experts);
        g->group.scale_input = p->ld->scale_input;
    }
    p->recipe_used[g->recipe] = true;
    return MOE_OK;
}

/* Which groups the layer has, their descriptions, and room for per-expert tensors. */
static moe_status layout_groups(moe_layer_plan *p)
{
    const moe_layer_desc *ld = p->ld;
    if (ld->kind == MOE_LAYER_DENSE) {
        p->groups[MOE_LG_DENSE].present = true;
        p->groups[MOE_LG_DENSE].n = 1;
        p->groups[MOE_LG_DENSE].mlp = ld->dense;
    } else {
        moe_layer_group_plan *r = &p->groups[MOE_LG_ROUTED];
        r->present = true;
        r->n = ld->routing.n_experts;
        r->mlp = ld->experts;
        r->stacked = p->desc->family == MOE_FAMILY_GPT_OSS || p->desc->family == MOE_FAMILY_LLAMA4;
        r->gate_up_halves = p->desc->family == MOE_FAMILY_LLAMA4;
        if (ld->n_shared > 0) {
            p->groups[MOE_LG_SHARED].present = true;
            p->groups[MOE_LG_SHARED].n = 1;
            p->groups[MOE_LG_SHARED].mlp = ld->shared;
        }
    }
    moe_layer_group_plan *r = &p->groups[MOE_LG_ROUTED];
    if (r->present && !r->stacked) {
        r->per_expert = moe_calloc((size_t)r->n, sizeof *r->per_expert);
        if (!r->per_expert)
            return moe_error(MOE_ENOMEM, "layer %d: allocating the tensor table of %d experts",
                             p->index, r->n);
    }
    return MOE_OK;
}

/* ---- Gate, router, activations ----------------------------------------------------------- */

static moe_status plan_gate(moe_layer_plan *p)
{
    const moe_tensor *w = p->router[MOE_ROLE_ROUTER_WEIGHT];
    const moe_tensor *b = p->router[MOE_ROLE_ROUTER_BIAS];
    moe_gate_problem *g = &p->gate_problem;
    g->weight_dtype = w->dtype;
    g->logits_dtype = p->logits_dtype;
    g->has_bias = b != NULL;
    g->n_experts = p->ld->routing.n_experts;
    g->hidden = p->desc->hidden;
    static const moe_dtype inputs[2] = {MOE_DTYPE_F32, MOE_DTYPE_BF16};
    for (int i = 0; i < 2; i++) {
        g->input_dtype = inputs[i];
        moe_status st = moe_select_gate(&p->allowed, g, &p->gate_choice[i]);
        if (st) return moe_error_context(st, "layer %d gate: ", p->index);
    }
    /* What moe_gate_packed_bytes reports once built: the packed weight and the f32 bias. */
    const moe_packing *pk = p->gate_choice[0].packing;
    if (pk && pk->bytes) {
        moe_status st = pk->bytes(g->n_experts, g->hidden, &p->gate_bytes);
        if (st) return moe_error_context(st, "layer %d gate: ", p->index);
    }
    if (g->has_bias) p->gate_bytes += (size_t)g->n_experts * sizeof(float);
    moe_router_params *r = &p->router_params;
    *r = moe_router_params_of(p->desc, &p->ld->routing);
    const moe_tensor *cb = p->router[MOE_ROLE_CORRECTION_BIAS];
    const moe_tensor *table = p->router[MOE_ROLE_TID2EID];
    if (cb) {
        r->correction_bias = cb->data;
        r->correction_bias_dtype = cb->dtype;
    }
    if (table) {
        r->tid2eid = table->data;
        r->tid2eid_dtype = table->dtype;
    }
    return MOE_OK;
}

static moe_status plan_activations(moe_layer_plan *p)
{
    if (!moe_layer_needs_f32_rows(p)) return MOE_OK;
    const moe_cvt_problem prob = {(size_t)p->desc->hidden};
    moe_status st =
        moe_select_cvt(MOE_KERNEL_FAMILY_CVT_BF16_F32, &p->allowed, &prob, &p->cvt_bf16);
    if (st) return moe_error_context(st, "layer %d activations: ", p->index);
    return MOE_OK;
}

/* The caps and the resident experts: the caller's, or the defaults. */
static moe_status resolve_tuning(const moe_layer_tuning *t, int layer, moe_layer_plan *p)
{
    if (t && t->allowed) {
        p->allowed = moe_cpu_caps_normalize(*t->allowed);
    } else {
        moe_cpu_info info;
        moe_status st = moe_cpu_query(&info);
        if (st) return st;
        p->allowed = info.allowed;
    }
    if (t && t->resident_experts < 0)
        return moe_error(MOE_EINVAL, "layer %d: resident experts %d is negative", layer,
                         t->resident_experts);
    p->resident_experts = t ? t->resident_experts : 0;
    return MOE_OK;
}

moe_status moe_layer_plan_make(const moe_model *model, int layer, const moe_layer_options *options,
                               const moe_layer_tuning *tuning, moe_layer_plan *plan)
{
    return moe_layer_plan_make_ep(model, layer, options, tuning, NULL, plan);
}

moe_status moe_layer_plan_make_ep(const moe_model *model, int layer,
                                  const moe_layer_options *options, const moe_layer_tuning *tuning,
                                  const moe_ep_placement *placement, moe_layer_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    if (!model) return moe_error(MOE_EINVAL, "moe_layer_create: argument 'model' is NULL");
    const moe_model_desc *d = moe_model_desc_of(model);
    if (layer < 0 || layer >= d->n_layers)
        return moe_error(MOE_EINVAL, "moe_layer_create: layer %d is outside [0, %d)", layer,
                         d->n_layers);
    plan->model = model;
    plan->desc = d;
    plan->ld = &d->layers[layer];
    plan->index = layer;
    plan->moe = plan->ld->kind != MOE_LAYER_DENSE;
    moe_status st = resolve_tuning(tuning, layer, plan);
    if (!st) st = resolve_options(options, layer, plan);
    if (!st) st = layout_groups(plan);
    if (!st) st = moe_layer_placement_make(plan, placement);
    if (!st) st = find_tensors(plan);
    /* Before plan_group, which reads MXFP4 scale bytes when the tile recipe is asked. */
    if (!st) st = check_files(plan);
    for (int id = 0; id < MOE_LG_COUNT_ && !st; id++)
        if (plan->groups[id].present) st = plan_group(plan, (moe_layer_group_id)id);
    if (!st && plan->moe) st = plan_gate(plan);
    if (!st && plan->ld->shared_gate)
        plan->shared_gate_dtype = plan->groups[MOE_LG_SHARED].one[MOE_ROLE_SHARED_GATE]->dtype;
    if (!st) st = plan_activations(plan);
    if (st) moe_layer_plan_free(plan);
    return st;
}

void moe_layer_plan_free(moe_layer_plan *plan)
{
    if (!plan) return;
    for (int id = 0; id < MOE_LG_COUNT_; id++) {
        moe_free(plan->groups[id].per_expert);
        plan->groups[id].per_expert = NULL;
        moe_expert_group_free(&plan->groups[id].group);
    }
    moe_free(plan->router_explain);
    plan->router_explain = NULL;
    moe_layer_placement_free(&plan->ep);
}

/* ---- Workspace -------------------------------------------------------------------------- */

const moe_expert_group *moe_layer_q8_group(const moe_layer_plan *p)
{
    for (int id = 0; id < MOE_LG_COUNT_; id++)
        if (p->groups[id].present && p->groups[id].recipe == MOE_RECIPE_Q8)
            return &p->groups[id].group;
    return NULL;
}

/* The layer's own arrays, then the engine's, in the order forward binds them. */
void moe_layer_carve(const moe_layer_plan *p, moe_carve *c, size_t n_tokens, moe_layer_bufs *b)
{
    moe_layer_carve_part(p, c, n_tokens, MOE_PART_FULL, b);
}

/* ROUTE: the logits only (the gate reads the input rows in place). ROWS: the activations and
 * the routed group's arrays at top_k 1. COMBINE: the activations and the always-on MLP's. */
void moe_layer_carve_part(const moe_layer_plan *p, moe_carve *c, size_t n_tokens,
                          moe_layer_part part, moe_layer_bufs *b)
{
    if (part == MOE_PART_ROUTE) {
        memset(b, 0, sizeof *b);
        size_t te;
        if (moe_mul_overflow_size(n_tokens, (size_t)p->ld->routing.n_experts, &te)) te = SIZE_MAX;
        b->logits = moe_carve_take(c, te, sizeof(float));
        return;
    }
    const size_t h = (size_t)p->desc->hidden;
    size_t th;
    memset(b, 0, sizeof *b);
    if (moe_mul_overflow_size(n_tokens, h, &th)) th = SIZE_MAX;
    if (moe_layer_needs_f32_rows(p)) b->act_f32 = moe_carve_take(c, th, sizeof(float));
    if (moe_layer_uses_bf16_rows(p)) b->act_bf16 = moe_carve_take(c, th, sizeof(uint16_t));
    const moe_expert_group *q8 = moe_layer_q8_group(p);
    if (q8) b->act_q8 = moe_carve_take(c, n_tokens, q8->x_row_bytes);
    const moe_expert_group *routed = NULL, *always = NULL;
    int k = 0;
    if (p->moe) {
        const size_t e = (size_t)p->ld->routing.n_experts;
        k = p->ld->routing.top_k;
        size_t te, tk;
        if (moe_mul_overflow_size(n_tokens, e, &te)) te = SIZE_MAX;
        if (moe_mul_overflow_size(n_tokens, (size_t)k, &tk)) tk = SIZE_MAX;
        if (part == MOE_PART_FULL) {
            b->logits = moe_carve_take(c, te, sizeof(float));
            b->ids = moe_carve_take(c, tk, sizeof(int32_t));
            b->weights = moe_carve_take(c, tk, sizeof(float));
        }
        if (p->ld->shared_gate && part != MOE_PART_ROUTE && part != MOE_PART_ROWS)
            b->shared_scale = moe_carve_take(c, n_tokens, sizeof(float));
        if (part != MOE_PART_COMBINE) routed = &p->groups[MOE_LG_ROUTED].group;
        if (part != MOE_PART_ROWS && p->groups[MOE_LG_SHARED].present)
            always = &p->groups[MOE_LG_SHARED].group;
        if (part == MOE_PART_ROWS) k = 1;
    } else {
        always = &p->groups[MOE_LG_DENSE].group;
    }
    moe_experts_ws_carve(c, &b->ws, routed, k, always, n_tokens);
}

size_t moe_layer_part_workspace(const moe_layer_plan *plan, size_t n_tokens, moe_layer_part part)
{
    if (n_tokens == 0) return 0;
    moe_carve c = {NULL, 0, false};
    moe_layer_bufs b;
    moe_layer_carve_part(plan, &c, n_tokens, part, &b);
    return c.overflow ? 0 : c.used;
}

size_t moe_layer_plan_workspace(const moe_layer_plan *plan, size_t n_tokens)
{
    if (n_tokens == 0) return 0;
    moe_carve c = {NULL, 0, false};
    moe_layer_bufs b;
    moe_layer_carve(plan, &c, n_tokens, &b);
    return c.overflow ? 0 : c.used;
}
