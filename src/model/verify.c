/* verify.c — each layer's tensor table against a checkpoint: found, missing, wrong, unexpected. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/shape_text.h"
#include "model/verify.h"

#define MSG_CAP 512

typedef struct walker {
    const moe_model_desc *desc;
    const moe_ckpt *ckpt;
    moe_verify_fn fn;
    void *ctx;
    bool strict; /* stop at the first problem */
    moe_verify_summary sum;
    moe_status first;        /* status of the first problem, MOE_OK while none */
    char first_msg[MSG_CAP]; /* and its message, restored as the last error at the end */
} walker;

const moe_tensor *moe_model_find_tensor(const moe_model_desc *desc, const moe_ckpt *ckpt,
                                        const moe_tensor_spec *spec)
{
    const moe_tensor *t = moe_ckpt_find(ckpt, spec->name);
    if (t) return t;
    char alt[sizeof spec->name + 16];
    if (moe_model_alt_name(desc, spec->name, alt, sizeof alt)) return moe_ckpt_find(ckpt, alt);
    return NULL;
}

static void mask_str(char *buf, size_t cap, uint32_t mask)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int d = 1; d < MOE_DTYPE_COUNT_ && n < cap; d++)
        if (mask & (1u << (unsigned)d))
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "",
                                  moe_dtype_name((moe_dtype)d));
}

static bool shape_matches(const moe_tensor_spec *s, const moe_tensor *t)
{
    if (s->ndim != t->ndim) return false;
    for (int i = 0; i < s->ndim; i++)
        if (s->shape[i] != t->shape[i]) return false;
    return true;
}

/* Classifies SPEC against T (NULL when absent) and writes the message of a problem. */
static moe_verify_kind classify(const moe_tensor_spec *s, const moe_tensor *t, char *msg)
{
    char want[96], got[96], dts[160];
    moe_shape_text(s->shape, s->ndim, want, sizeof want);
    msg[0] = '\0';
    if (!t) {
        if (s->optional) return MOE_VERIFY_ABSENT;
        snprintf(msg, MSG_CAP, "layer %d: tensor '%s' is missing (expected %s %s)", s->layer,
                 s->name, moe_dtype_name(s->dtype), want);
        return MOE_VERIFY_MISSING;
    }
    if ((unsigned)t->dtype >= 32u || !(s->dtype_mask & (1u << (unsigned)t->dtype))) {
        mask_str(dts, sizeof dts, s->dtype_mask);
        snprintf(msg, MSG_CAP, "layer %d: tensor '%s' (%s) has dtype %s; accepted: %s", s->layer,
                 t->name, t->file ? t->file : "?", moe_dtype_name(t->dtype), dts);
        return MOE_VERIFY_BAD_DTYPE;
    }
    if (!shape_matches(s, t)) {
        moe_shape_text(t->shape, t->ndim < MOE_MAX_DIMS ? t->ndim : MOE_MAX_DIMS, got, sizeof got);
        snprintf(msg, MSG_CAP, "layer %d: tensor '%s' (%s) has shape %s; expected %s", s->layer,
                 t->name, t->file ? t->file : "?", got, want);
        return MOE_VERIFY_BAD_SHAPE;
    }
    return MOE_VERIFY_FOUND;
}

static moe_status status_of(moe_verify_kind k)
{
    switch (k) {
    case MOE_VERIFY_MISSING: return MOE_EMISSING;
    case MOE_VERIFY_BAD_DTYPE: return MOE_EDTYPE;
    case MOE_VERIFY_BAD_SHAPE: return MOE_ESHAPE;
    default: return MOE_OK;
    }
}

moe_status moe_model_find_checked(const moe_model_desc *desc, const moe_ckpt *ckpt,
                                  const moe_tensor_spec *spec, const moe_tensor **out)
{
    const moe_tensor *t = moe_model_find_tensor(desc, ckpt, spec);
    char msg[MSG_CAP];
    const moe_verify_kind k = classify(spec, t, msg);
    *out = k == MOE_VERIFY_FOUND ? t : NULL;
    const moe_status st = status_of(k);
    return st ? moe_error(st, "%s", msg) : MOE_OK;
}

static void count(moe_verify_summary *s, moe_verify_kind k)
{
    switch (k) {
    case MOE_VERIFY_FOUND: s->found++; break;
    case MOE_VERIFY_MISSING: s->missing++; break;
    case MOE_VERIFY_BAD_DTYPE: s->bad_dtype++; break;
    case MOE_VERIFY_BAD_SHAPE: s->bad_shape++; break;
    case MOE_VERIFY_ABSENT: s->absent++; break;
    case MOE_VERIFY_UNEXPECTED: s->unexpected++; break;
    }
}

/* Records and reports one item. A non-OK return stops the walk. */
static moe_status emit(walker *w, moe_verify_item *item, const char *msg)
{
    count(&w->sum, item->kind);
    item->status = status_of(item->kind);
    item->message = msg;
    if (item->status && w->first == MOE_OK) {
        w->first = item->status;
        snprintf(w->first_msg, sizeof w->first_msg, "%s", msg);
    }
    if (item->status && w->strict) return moe_error(item->status, "%s", msg);
    return w->fn ? w->fn(w->ctx, item) : MOE_OK;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
    return x < y ? -1 : x > y;
}

/* The index of the first checkpoint tensor whose name is >= KEY (names are sorted). */
static size_t lower_bound(const moe_ckpt *ckpt, const char *key)
{
    size_t lo = 0, hi = moe_ckpt_count(ckpt);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(moe_ckpt_tensor(ckpt, mid)->name, key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Reports the tensors named PREFIX... that are not among the sorted FOUND pointers. */
static moe_status unexpected_under(walker *w, int layer, const char *prefix,
                                   const moe_tensor **found, size_t n_found)
{
    const size_t plen = strlen(prefix), n = moe_ckpt_count(w->ckpt);
    for (size_t i = lower_bound(w->ckpt, prefix); i < n; i++) {
        const moe_tensor *t = moe_ckpt_tensor(w->ckpt, i);
        if (strncmp(t->name, prefix, plen) != 0) break;
        if (n_found && bsearch(&t, found, n_found, sizeof *found, cmp_ptr)) continue;
        char msg[MSG_CAP], got[96];
        moe_shape_text(t->shape, t->ndim < MOE_MAX_DIMS ? t->ndim : MOE_MAX_DIMS, got, sizeof got);
        snprintf(msg, sizeof msg,
                 "layer %d: unexpected tensor '%s' (%s %s) matches no expected tensor", layer,
                 t->name, moe_dtype_name(t->dtype), got);
        moe_verify_item item = {MOE_VERIFY_UNEXPECTED, layer, NULL, t, MOE_OK, NULL};
        moe_status st = emit(w, &item, msg);
        if (st) return st;
    }
    return MOE_OK;
}

/* The namespaces of a layer where every tensor should be one of ours. */
static int namespaces(const moe_model_desc *d, int layer, char prefixes[2][64])
{
    switch (d->family) {
    case MOE_FAMILY_MIXTRAL:
    case MOE_FAMILY_MINIMAX_M2:
        snprintf(prefixes[0], 64, "model.layers.%d.block_sparse_moe.", layer);
        return 1;
    case MOE_FAMILY_KIMI_K25:
        snprintf(prefixes[0], 64, "language_model.model.layers.%d.mlp.", layer);
        snprintf(prefixes[1], 64, "language_model.model.blocks.%d.mlp.", layer);
        return 2;
    case MOE_FAMILY_DEEPSEEK_V4:
        snprintf(prefixes[0], 64, "layers.%d.ffn.", layer);
        snprintf(prefixes[1], 64, "model.layers.%d.ffn.", layer);
        return 2;
    case MOE_FAMILY_QWEN3_5_MOE:
        snprintf(prefixes[0], 64, "model.language_model.layers.%d.mlp.", layer);
        return 1;
    case MOE_FAMILY_LLAMA4:
        snprintf(prefixes[0], 64, "language_model.model.layers.%d.feed_forward.", layer);
        return 1;
    default: snprintf(prefixes[0], 64, "model.layers.%d.mlp.", layer); return 1;
    }
}

static bool is_weight_role(moe_tensor_role r)
{
    return r == MOE_ROLE_GATE || r == MOE_ROLE_UP || r == MOE_ROLE_DOWN || r == MOE_ROLE_GATE_UP;
}

/* The projections of one group (routed experts, shared experts, dense MLP) share a dtype:
 * the expert kernels run a group with one format (layer creation refuses the mix too). FIRST
 * holds each group's first projection found; a later one of another dtype is BAD_DTYPE. */
static moe_verify_kind check_group_dtype(const moe_tensor_spec *s, const moe_tensor *t,
                                         const moe_tensor *first[4], char *msg)
{
    if (!is_weight_role(s->role) || (unsigned)s->group >= 4u) return MOE_VERIFY_FOUND;
    const moe_tensor *f = first[s->group];
    if (!f) {
        first[s->group] = t;
        return MOE_VERIFY_FOUND;
    }
    if (moe_same_weight_dtype(f->dtype, t->dtype)) return MOE_VERIFY_FOUND;
    snprintf(msg, MSG_CAP,
             "layer %d: tensor '%s' (%s) has dtype %s but '%s' is %s: the projections of the %s "
             "group must share a dtype",
             s->layer, t->name, t->file ? t->file : "?", moe_dtype_name(t->dtype), f->name,
             moe_dtype_name(f->dtype), moe_tensor_group_name(s->group));
    return MOE_VERIFY_BAD_DTYPE;
}

static moe_status walk_specs(walker *w, const moe_tensor_spec *specs, size_t n,
                             const moe_tensor **found, size_t *n_found)
{
    *n_found = 0;
    const moe_tensor *first[4] = {NULL, NULL, NULL, NULL};
    for (size_t i = 0; i < n; i++) {
        char msg[MSG_CAP];
        const moe_tensor *t = moe_model_find_tensor(w->desc, w->ckpt, &specs[i]);
        moe_verify_kind kind = classify(&specs[i], t, msg);
        if (kind == MOE_VERIFY_FOUND) kind = check_group_dtype(&specs[i], t, first, msg);
        moe_verify_item item = {kind, specs[i].layer, &specs[i], t, MOE_OK, NULL};
        w->sum.specs++;
        if (t) found[(*n_found)++] = t;
        moe_status st = emit(w, &item, msg);
        if (st) return st;
    }
    return MOE_OK;
}

static moe_status walk_layer(walker *w, int layer)
{
    moe_tensor_spec *specs = NULL;
    size_t n = 0, n_found = 0;
    moe_status st = moe_model_layer_tensors(w->desc, layer, &specs, &n);
    if (st) return st;
    const moe_tensor **found = moe_calloc(n ? n : 1, sizeof *found);
    if (!found) {
        st = moe_error(MOE_ENOMEM, "layer %d: allocating %zu tensor slots", layer, n);
        goto done;
    }
    if ((st = walk_specs(w, specs, n, found, &n_found))) goto done;
    qsort(found, n_found, sizeof *found, cmp_ptr);
    char prefixes[2][64];
    int np = namespaces(w->desc, layer, prefixes);
    for (int p = 0; p < np && !st; p++)
        st = unexpected_under(w, layer, prefixes[p], found, n_found);
done:
    moe_free(found);
    moe_free(specs);
    return st;
}

static moe_status walk(walker *w)
{
    if (!w->desc || !w->ckpt)
        return moe_error(MOE_EINVAL, "moe_model_verify: argument 'desc' or 'ckpt' is NULL");
    for (int layer = 0; layer < w->desc->n_layers; layer++) {
        moe_status st = walk_layer(w, layer);
        if (st) return st;
    }
    if (w->first) return moe_error(w->first, "%s", w->first_msg);
    return MOE_OK;
}

moe_status moe_model_verify(const moe_model_desc *desc, const moe_ckpt *ckpt)
{
    walker w;
    memset(&w, 0, sizeof w);
    w.desc = desc;
    w.ckpt = ckpt;
    w.strict = true;
    return walk(&w);
}

moe_status moe_model_verify_each(const moe_model_desc *desc, const moe_ckpt *ckpt, moe_verify_fn fn,
                                 void *ctx, moe_verify_summary *summary)
{
    walker w;
    memset(&w, 0, sizeof w);
    w.desc = desc;
    w.ckpt = ckpt;
    w.fn = fn;
    w.ctx = ctx;
    moe_status st = walk(&w);
    if (summary) *summary = w.sum;
    return st;
}

/* ---- Formats from the stored dtype ------------------------------------------------------ */

/* The description's MLP of GROUP in layer L (NULL for the router). */
static moe_mlp_desc *group_mlp(moe_layer_desc *l, moe_tensor_group group)
{
    switch (group) {
    case MOE_GROUP_ROUTED: return &l->experts;
    case MOE_GROUP_SHARED: return &l->shared;
    case MOE_GROUP_DENSE: return &l->dense;
    default: return NULL;
    }
}

moe_status moe_model_resolve_formats(moe_model_desc *desc, const moe_ckpt *ckpt)
{
    if (!desc || !ckpt)
        return moe_error(MOE_EINVAL,
                         "moe_model_resolve_formats: argument 'desc' or 'ckpt' is NULL");
    for (int layer = 0; layer < desc->n_layers; layer++) {
        moe_tensor_spec *specs = NULL;
        size_t n = 0;
        moe_status st = moe_model_layer_tensors(desc, layer, &specs, &n);
        if (st) return st;
        bool seen[4] = {false, false, false, false};
        for (size_t i = 0; i < n; i++) {
            const moe_tensor_spec *s = &specs[i];
            moe_mlp_desc *m = group_mlp(&desc->layers[layer], s->group);
            if (!m || !is_weight_role(s->role) || seen[s->group]) continue;
            const moe_tensor *t = moe_model_find_tensor(desc, ckpt, s);
            if (!t) continue;
            seen[s->group] = true;
            if (m->format != MOE_WFMT_BF16) continue;
            if (t->dtype == MOE_DTYPE_F32) m->format = MOE_WFMT_F32;
            if (t->dtype == MOE_DTYPE_F16) m->format = MOE_WFMT_F16;
        }
        moe_free(specs);
    }
    return MOE_OK;
}
