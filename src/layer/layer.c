/* layer.c — moe_layer: create (gate, router, packed groups), logits dtype, explain, describe. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "layer/layer_describe.h"
#include "layer/layer_internal.h"
#include "layer/layer_shared_gate.h"
#include "model/model_handle.h"
#include "route/router_internal.h"

static void release_all(const moe_ckpt *ckpt, const moe_tensor *const *t)
{
    for (int r = 0; r < MOE_LAYER_ROLES; r++)
        moe_ckpt_release(ckpt, t[r]);
}

/* Expert e's slice of each tensor that stacks all N experts along its first dimension
 * (gpt-oss): given back as soon as that expert is packed, so a layer's checkpoint pages and
 * its packed copy are never resident in full at once. Other tensors wait for the group. */
static void release_slices(const moe_ckpt *ckpt, const moe_tensor *const *t, int e, int n)
{
    for (int r = 0; r < MOE_LAYER_ROLES; r++)
        if (t[r] && n > 1 && t[r]->ndim >= 1 && t[r]->shape[0] == n)
            moe_ckpt_release_range(ckpt, t[r], t[r]->nbytes / (uint64_t)n * (uint64_t)e,
                                   t[r]->nbytes / (uint64_t)n);
}

/* The tensors an expert's parts are read from, for giving their pages back. */
typedef struct part_release {
    const moe_ckpt *ckpt;
    const moe_tensor *const *t; /* the expert's own tensors, or the group's stacked ones */
} part_release;

/* moe_expert_pack_done: the packed rows' pages, in whichever tensor holds them. */
static void release_part(void *ctx, const void *lo, size_t bytes)
{
    const part_release *pr = ctx;
    const unsigned char *p = lo;
    for (int r = 0; r < MOE_LAYER_ROLES; r++) {
        const moe_tensor *t = pr->t[r];
        if (!t) continue;
        const unsigned char *b = t->data;
        if (p >= b && (uint64_t)(p - b) <= t->nbytes && bytes <= t->nbytes - (uint64_t)(p - b))
            moe_ckpt_release_range(pr->ckpt, t, (uint64_t)(p - b), bytes);
    }
}

/* Packs checkpoint expert E as packed expert I; PR (when not NULL) gets each packed part's
 * pages back as it goes. */
static moe_status pack_one(moe_layer_group_plan *g, int e, int i, const part_release *pr)
{
    moe_status st = moe_layer_check_scales(g, e);
    if (st) return st;
    moe_weight_src gate, up, down;
    moe_layer_sources(g, e, &gate, &up, &down);
    if (!pr) return moe_expert_group_pack(&g->group, i, &gate, &up, &down);
    return moe_expert_group_pack_parts(&g->group, i, &gate, &up, &down, release_part, (void *)pr);
}

/* Packs every expert of a group with the layer's threads (experts are independent and write
 * disjoint bytes), giving the checkpoint's pages back as it goes: each part's rows as soon as
 * they are packed, then the rest of the expert's own tensors (scales, biases) or its slice of
 * stacked ones, and the whole of the group's tensors once all are. A worker's error message
 * stays in its own thread and may name a row within a part, so the lowest failing expert is
 * packed again here, whole, where the message reaches the caller. */
static moe_status pack_group(moe_layer *l, moe_layer_group_id id)
{
    moe_layer_group_plan *g = &l->plan.groups[id];
    const moe_ckpt *ckpt = moe_model_ckpt_of(l->plan.model);
    char what[96];
    snprintf(what, sizeof what, "layer %d %s", l->plan.index, moe_layer_group_label[id]);
    /* g->n, the resident experts of an aliased group, or a placed group's own (maybe none) */
    const int n = g->group.n_packed;
    moe_status st = n > 0 ? moe_expert_group_alloc(&g->group, what) : MOE_OK;
    if (st) return st;
    int failed = n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(l->plan.threads)
    for (int i = 0; i < n; i++) {
        const int e = moe_layer_packed_expert(&l->plan, id, i);
        const part_release pr = {ckpt, g->per_expert ? g->per_expert[e] : g->one};
        if (pack_one(g, e, i, &pr) != MOE_OK) {
#pragma omp critical(moe_layer_pack)
            failed = i < failed ? i : failed;
        } else if (g->per_expert) {
            release_all(ckpt, g->per_expert[e]);
        } else {
            release_slices(ckpt, g->one, e, g->n);
        }
    }
    if (failed < n) {
        st = pack_one(g, moe_layer_packed_expert(&l->plan, id, failed), failed, NULL);
        return moe_error_context(st ? st : MOE_EVALUE, "%s: ", what);
    }
    release_all(ckpt, g->one);
    return MOE_OK;
}

/* ---- Gate and router -------------------------------------------------------------------- */

/* The gate's own choices and packed bytes, which explain shows (describe shows what
 * moe_select_gate says; the test that the two texts agree checks the gate against it). */
static void gate_view(moe_layer *l)
{
    l->plan.gate_choice[0] = *moe_gate_choice(l->gate, MOE_DTYPE_F32);
    l->plan.gate_choice[1] = *moe_gate_choice(l->gate, MOE_DTYPE_BF16);
    l->plan.gate_bytes = moe_gate_packed_bytes(l->gate);
}

static moe_status create_gate(moe_layer *l)
{
    moe_layer_plan *p = &l->plan;
    const moe_tensor *w = p->router[MOE_ROLE_ROUTER_WEIGHT], *b = p->router[MOE_ROLE_ROUTER_BIAS];
    moe_gate_src src;
    memset(&src, 0, sizeof src);
    src.weight = w->data;
    src.weight_dtype = w->dtype;
    src.bias = b ? b->data : NULL;
    src.bias_dtype = b ? b->dtype : MOE_DTYPE_INVALID;
    src.n_experts = p->ld->routing.n_experts;
    src.hidden = p->desc->hidden;
    /* Undecided stays undecided in the gate too, which then runs f32 (the documented
     * resolution) until moe_layer_set_logits_dtype decides. */
    const moe_dtype logits = p->logits_origin ? p->logits_dtype : MOE_DTYPE_INVALID;
    moe_status st = moe_gate_create(&src, &p->allowed, logits, &l->gate);
    if (st) return moe_error_context(st, "layer %d gate: ", p->index);
    moe_ckpt_release(moe_model_ckpt_of(p->model), w);
    moe_ckpt_release(moe_model_ckpt_of(p->model), b);
    gate_view(l);
    return MOE_OK;
}

static moe_status router_explain(moe_layer_plan *p, moe_router **keep)
{
    moe_router *r = NULL;
    moe_status st = moe_router_create_caps(&p->router_params, &p->allowed, &r);
    if (st) return moe_error_context(st, "layer %d (%s) router: ", p->index, p->desc->model_type);
    p->router_explain = moe_strdup(moe_router_explain(r));
    if (!p->router_explain) {
        moe_router_destroy(r);
        return moe_error(MOE_ENOMEM, "layer %d: copying the router's explain text", p->index);
    }
    if (keep)
        *keep = r;
    else
        moe_router_destroy(r);
    return MOE_OK;
}

/* Everything the layer needs of the model is copied, and the tensor pointers, needed only to
 * pack, are dropped: the model may be closed as soon as create returns. */
static void detach(moe_layer *l)
{
    moe_layer_plan *p = &l->plan;
    l->desc = *p->desc;
    l->desc.layers = NULL;
    l->ld = *p->ld;
    p->desc = &l->desc;
    p->ld = &l->ld;
    p->model = NULL;
    memset(p->router, 0, sizeof p->router);
    p->router_params.correction_bias = NULL;
    p->router_params.tid2eid = NULL;
    for (int id = 0; id < MOE_LG_COUNT_; id++) {
        moe_free(p->groups[id].per_expert);
        p->groups[id].per_expert = NULL;
        memset(p->groups[id].one, 0, sizeof p->groups[id].one);
    }
}

/* ---- Public entry points ------------------------------------------------------------------ */

moe_status moe_layer_create_tuned(const moe_model *model, int layer,
                                  const moe_layer_options *options, const moe_layer_tuning *tuning,
                                  moe_layer **out)
{
    return moe_layer_create_ep_tuned(model, layer, options, tuning, NULL, out);
}

moe_status moe_layer_create_ep_tuned(const moe_model *model, int layer,
                                     const moe_layer_options *options,
                                     const moe_layer_tuning *tuning,
                                     const moe_ep_placement *placement, moe_layer **out)
{
    if (!out) return moe_error(MOE_EINVAL, "moe_layer_create: argument 'out' is NULL");
    moe_layer *l = moe_calloc(1, sizeof *l);
    if (!l) return moe_error(MOE_ENOMEM, "moe_layer_create: allocating layer %d", layer);
    moe_status st = moe_layer_plan_make_ep(model, layer, options, tuning, placement, &l->plan);
    if (st) {
        moe_free(l);
        return st;
    }
    moe_layer_plan *p = &l->plan;
    l->state = moe_malloc(sizeof *l->state);
    if (!l->state) {
        st = moe_error(MOE_ENOMEM, "moe_layer_create: allocating layer %d", layer);
        goto fail;
    }
    atomic_init(l->state, p->logits_origin ? MOE_LAYER_LOGITS_SET : 0u);
    l->team = moe_malloc(sizeof *l->team);
    if (!l->team) {
        st = moe_error(MOE_ENOMEM, "moe_layer_create: allocating layer %d", layer);
        goto fail;
    }
    moe_team_init(l->team, p->threads, p->fixed_threads);
    if (p->moe) {
        if ((st = create_gate(l)) || (st = router_explain(p, &l->router))) goto fail;
        const moe_ckpt *ckpt = moe_model_ckpt_of(model);
        moe_ckpt_release(ckpt, p->router[MOE_ROLE_CORRECTION_BIAS]);
        moe_ckpt_release(ckpt, p->router[MOE_ROLE_TID2EID]);
    }
    if (p->ld->shared_gate) {
        const moe_tensor *w = p->groups[MOE_LG_SHARED].one[MOE_ROLE_SHARED_GATE];
        st = moe_shared_gate_make(w, p->desc->hidden, &l->shared_gate);
        if (st) {
            st = moe_error_context(st, "layer %d shared expert gate: ", p->index);
            goto fail;
        }
    }
    for (int id = 0; id < MOE_LG_COUNT_; id++)
        if (p->groups[id].present && (st = pack_group(l, (moe_layer_group_id)id))) goto fail;
    detach(l);
    l->routed = p->groups[MOE_LG_ROUTED].present ? &p->groups[MOE_LG_ROUTED].group : NULL;
    if (p->groups[MOE_LG_SHARED].present) {
        l->always = &p->groups[MOE_LG_SHARED].group;
        l->always_name = "shared";
    } else if (p->groups[MOE_LG_DENSE].present) {
        l->always = &p->groups[MOE_LG_DENSE].group;
        l->always_name = "dense";
    }
    if ((st = moe_layer_plan_render(p, &l->explain))) goto fail;
    *out = l;
    return MOE_OK;
fail:
    moe_layer_destroy(l);
    return st;
}

moe_status moe_layer_create(const moe_model *model, int layer, const moe_layer_options *options,
                            moe_layer **out)
{
    return moe_layer_create_tuned(model, layer, options, NULL, out);
}

moe_status moe_layer_create_ep(const moe_model *model, int layer, const moe_layer_options *options,
                               const moe_ep_placement *placement, moe_layer **out)
{
    return moe_layer_create_ep_tuned(model, layer, options, NULL, placement, out);
}

void moe_layer_destroy(moe_layer *layer)
{
    if (!layer) return;
    moe_gate_destroy(layer->gate);
    moe_router_destroy(layer->router);
    moe_free(layer->shared_gate);
    moe_layer_plan_free(&layer->plan);
    moe_free(layer->state);
    moe_free(layer->team);
    moe_free(layer->explain);
    moe_free(layer->explain_old);
    moe_free(layer);
}

#define SET "moe_layer_set_logits_dtype"

/* Re-runs the gate's eligibility function with DTYPE and rewrites explain; the caller holds
 * the LOGITS_SET claim. */
static moe_status apply_logits_dtype(moe_layer *l, moe_dtype dtype)
{
    moe_layer_plan *p = &l->plan;
    const moe_dtype old = p->logits_dtype;
    const int old_origin = p->logits_origin;
    moe_status st = moe_gate_set_logits_dtype(l->gate, &p->allowed, dtype);
    if (st) return moe_error_context(st, SET ": layer %d: ", p->index);
    p->logits_dtype = dtype;
    p->logits_origin = 2;
    p->gate_problem.logits_dtype = dtype;
    gate_view(l);
    char *text = NULL;
    st = moe_layer_plan_render(p, &text);
    if (st) { /* put everything back as it was, the gate included */
        (void)moe_gate_set_logits_dtype(l->gate, &p->allowed, old);
        p->logits_dtype = p->gate_problem.logits_dtype = old;
        p->logits_origin = old_origin;
        gate_view(l);
        return st;
    }
    /* Pointers to the old text stay valid: it is kept until destroy (this runs once). */
    moe_free(l->explain_old);
    l->explain_old = l->explain;
    l->explain = text;
    return MOE_OK;
}

moe_status moe_layer_set_logits_dtype(moe_layer *layer, moe_dtype dtype)
{
    if (!layer) return moe_error(MOE_EINVAL, SET ": argument 'layer' is NULL");
    const int index = layer->plan.index;
    if (dtype != MOE_DTYPE_F32 && dtype != MOE_DTYPE_BF16)
        return moe_error(MOE_EINVAL, SET ": layer %d: dtype %s is not f32 or bf16", index,
                         moe_dtype_name(dtype));
    if (!layer->plan.moe)
        return moe_error(MOE_EINVAL, SET ": layer %d is dense: it has no router logits", index);
    unsigned s = atomic_load(layer->state);
    if (s & MOE_LAYER_USED)
        return moe_error(MOE_ESTATE,
                         SET ": layer %d has already run a forward; the logits dtype "
                             "is set once, before the first forward",
                         index);
    if ((s & MOE_LAYER_LOGITS_SET) ||
        !atomic_compare_exchange_strong(layer->state, &s, s | MOE_LAYER_LOGITS_SET))
        return moe_error(MOE_ESTATE, SET ": layer %d: the logits dtype is already decided (%s, %s)",
                         index, moe_dtype_name(layer->plan.logits_dtype),
                         layer->plan.logits_origin == 1 ? "options->logits_dtype"
                                                        : "an earlier call");
    moe_status st = apply_logits_dtype(layer, dtype);
    if (st) atomic_fetch_and(layer->state, ~MOE_LAYER_LOGITS_SET);
    return st;
}

const char *moe_layer_explain(const moe_layer *layer)
{
    return layer && layer->explain ? layer->explain : "";
}

moe_status moe_layer_get_info(const moe_layer *layer, moe_layer_info *info)
{
    static const char fn[] = "moe_layer_get_info";
    if (!layer) return moe_error(MOE_EINVAL, "%s: argument 'layer' is NULL", fn);
    moe_status st = moe_layer_info_check_size(fn, info);
    if (st) return st;
    moe_layer_info_of(&layer->desc, &layer->ld, info);
    return MOE_OK;
}

moe_status moe_layer_describe_tuned(const moe_model *model, int layer,
                                    const moe_layer_options *options,
                                    const moe_layer_tuning *tuning, char **text)
{
    return moe_layer_describe_ep_tuned(model, layer, options, tuning, NULL, text);
}

moe_status moe_layer_describe_ep(const moe_model *model, int layer,
                                 const moe_layer_options *options,
                                 const moe_ep_placement *placement, char **text)
{
    return moe_layer_describe_ep_tuned(model, layer, options, NULL, placement, text);
}

moe_status moe_layer_describe_ep_tuned(const moe_model *model, int layer,
                                       const moe_layer_options *options,
                                       const moe_layer_tuning *tuning,
                                       const moe_ep_placement *placement, char **text)
{
    if (!text) return moe_error(MOE_EINVAL, "moe_layer_describe: argument 'text' is NULL");
    moe_layer_plan plan;
    moe_status st = moe_layer_plan_make_ep(model, layer, options, tuning, placement, &plan);
    if (st) return st;
    if (plan.moe) st = router_explain(&plan, NULL);
    if (!st) st = moe_layer_plan_render(&plan, text);
    moe_layer_plan_free(&plan);
    return st;
}

moe_status moe_layer_describe(const moe_model *model, int layer, const moe_layer_options *options,
                              char **text)
{
    return moe_layer_describe_tuned(model, layer, options, NULL, text);
}
