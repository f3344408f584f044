/* layer_placement.c — which rank packs which routed expert; bytes per rank; fingerprint. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "layer/layer_internal.h"

#define PLACEMENT_MIN_SIZE (offsetof(moe_ep_placement, n_entries) + sizeof(size_t))

void moe_layer_placement_free(moe_layer_placement *ep)
{
    moe_free(ep->expert_rank);
    moe_free(ep->slot);
    moe_free(ep->owned);
    memset(ep, 0, sizeof *ep);
    ep->n_ranks = 1;
}

/* The caller's table, or the contiguous default, into ep->expert_rank; every entry checked. */
static moe_status fill_ranks(moe_layer_plan *p, const moe_ep_placement *pl, int e_n)
{
    moe_layer_placement *ep = &p->ep;
    const int n = pl->n_ranks;
    if (!pl->expert_rank) {
        for (int e = 0; e < e_n; e++) /* floor(e · n / E): int64, no overflow */
            ep->expert_rank[e] = (int32_t)((int64_t)e * n / e_n);
        return MOE_OK;
    }
    if (pl->n_entries != (size_t)e_n)
        return moe_error(MOE_EINVAL,
                         "layer %d: placement->n_entries = %zu, but the layer has %d routed "
                         "experts (one rank per expert)",
                         p->index, pl->n_entries, e_n);
    for (int e = 0; e < e_n; e++) {
        const int32_t r = pl->expert_rank[e];
        if (r < 0 || r >= n)
            return moe_error(MOE_ERANGE,
                             "layer %d: placement->expert_rank[%d] = %d is outside [0, %d) "
                             "(n_ranks)",
                             p->index, e, (int)r, n);
        ep->expert_rank[e] = r;
    }
    ep->table = true;
    return MOE_OK;
}

moe_status moe_layer_placement_make(moe_layer_plan *p, const moe_ep_placement *pl)
{
    moe_layer_placement *ep = &p->ep;
    memset(ep, 0, sizeof *ep);
    ep->n_ranks = 1;
    if (!pl) return MOE_OK;
    if (pl->size < PLACEMENT_MIN_SIZE)
        return moe_error(MOE_EINVAL,
                         "layer %d: placement->size = %zu is smaller than the %zu bytes this "
                         "version reads (set it to sizeof(moe_ep_placement))",
                         p->index, pl->size, (size_t)PLACEMENT_MIN_SIZE);
    if (pl->n_ranks < 1 || pl->rank < 0 || pl->rank >= pl->n_ranks)
        return moe_error(MOE_EINVAL,
                         "layer %d: placement rank %d of n_ranks %d: n_ranks must be at least 1 "
                         "and rank in [0, n_ranks)",
                         p->index, pl->rank, pl->n_ranks);
    ep->rank = pl->rank;
    ep->n_ranks = pl->n_ranks;
    if (!p->moe) return MOE_OK; /* a dense layer: every rank packs its MLP */
    const int e_n = p->ld->routing.n_experts;
    ep->expert_rank = moe_malloc((size_t)e_n * sizeof(int32_t));
    ep->slot = moe_malloc((size_t)e_n * sizeof(int32_t));
    ep->owned = moe_malloc((size_t)e_n * sizeof(int32_t));
    if (!ep->expert_rank || !ep->slot || !ep->owned)
        return moe_error(MOE_ENOMEM, "layer %d: allocating the placement of %d experts", p->index,
                         e_n);
    moe_status st = fill_ranks(p, pl, e_n);
    if (st) return st;
    for (int e = 0; e < e_n; e++) {
        ep->slot[e] = ep->expert_rank[e] == ep->rank ? ep->n_owned : -1;
        if (ep->slot[e] >= 0) ep->owned[ep->n_owned++] = e;
    }
    return MOE_OK;
}

int moe_layer_packed_expert(const moe_layer_plan *p, moe_layer_group_id id, int i)
{
    return id == MOE_LG_ROUTED && p->ep.owned ? p->ep.owned[i] : i;
}

size_t moe_layer_rank_bytes(const moe_layer_plan *p, int r)
{
    size_t total = p->gate_bytes;
    for (int id = 0; id < MOE_LG_COUNT_; id++) {
        const moe_layer_group_plan *g = &p->groups[id];
        if (!g->present) continue;
        if (id != MOE_LG_ROUTED || !p->ep.expert_rank) {
            total += g->group.packed_bytes;
            continue;
        }
        size_t n = 0;
        for (int e = 0; e < g->n; e++)
            n += p->ep.expert_rank[e] == r;
        total += n * g->group.expert_stride; /* at most the one-rank size, which fits */
    }
    return total;
}

/* ---- Explain ------------------------------------------------------------------------------ */

typedef struct text {
    char *buf;
    size_t len, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        char *b = moe_realloc(t->buf, t->cap * 2 + (size_t)n);
        if (!b) {
            t->oom = true;
            return;
        }
        t->buf = b;
        t->cap = t->cap * 2 + (size_t)n;
    }
}

/* Rank R's experts as runs ("0-7, 12"). */
static void put_runs(text *t, const moe_layer_plan *p, int r)
{
    const int e_n = p->ld->routing.n_experts;
    bool first = true;
    int n = 0;
    for (int e = 0; e < e_n; e++) {
        if (p->ep.expert_rank[e] != r || (e > 0 && p->ep.expert_rank[e - 1] == r)) continue;
        int last = e;
        while (last + 1 < e_n && p->ep.expert_rank[last + 1] == r)
            last++;
        put(t, "%s%d", first ? "" : ", ", e);
        if (last > e) put(t, "-%d", last);
        first = false;
        n += last - e + 1;
    }
    put(t, "%s (%d)", first ? "none" : "", n);
}

moe_status moe_layer_placement_render(const moe_layer_plan *p, char **out)
{
    text t = {moe_malloc(256), 0, 256, false};
    if (!t.buf) return moe_error(MOE_ENOMEM, "layer %d: allocating the placement text", p->index);
    t.buf[0] = '\0';
    const moe_layer_placement *ep = &p->ep;
    if (ep->n_ranks > 1 || ep->expert_rank) {
        put(&t, "  placement: rank %d of %d; ", ep->rank, ep->n_ranks);
        if (!ep->expert_rank)
            put(&t, "a dense layer: every rank packs its MLP\n");
        else
            put(&t, "routed experts %s\n",
                ep->table ? "by the caller's table (placement->expert_rank)"
                          : "in contiguous ranges (expert e on rank floor(e·n/E))");
        if (ep->expert_rank && p->ld->scale_input)
            put(&t, "    rows travel with their routing weights: the expert's rank forms x * w "
                    "(moe_ep_rows_args.weights), as one process does\n");
        for (int r = 0; r < ep->n_ranks && ep->expert_rank; r++) {
            put(&t, "    rank %d: experts ", r);
            put_runs(&t, p, r);
            put(&t, ", %zu packed bytes%s\n", moe_layer_rank_bytes(p, r),
                r == ep->rank ? " (this rank)" : "");
        }
    }
    if (t.oom) {
        moe_free(t.buf);
        return moe_error(MOE_ENOMEM, "layer %d: allocating the placement text", p->index);
    }
    *out = t.buf;
    return MOE_OK;
}

/* ---- Fingerprint -------------------------------------------------------------------------- */

/* FNV-1a over the bytes of each field fed in (fields one by one: no padding bytes). */
static void feed(uint64_t *h, const void *v, size_t n)
{
    const unsigned char *c = v;
    for (size_t i = 0; i < n; i++) {
        *h ^= c[i];
        *h *= 0x100000001b3ull;
    }
}

#define FEED(h, x) feed(h, &(x), sizeof(x))

static void feed_mlp(uint64_t *h, const moe_mlp_desc *m)
{
    FEED(h, m->hidden);
    FEED(h, m->intermediate);
    FEED(h, m->format);
    FEED(h, m->scale_dtype);
    FEED(h, m->block_out);
    FEED(h, m->block_in);
    FEED(h, m->activation);
    FEED(h, m->swiglu_limit);
    FEED(h, m->alpha);
    FEED(h, m->has_bias);
}

/* Every field of the model, layer, routing and MLP descriptions that the layer's math reads,
 * and of the plan: the router weight's, correction bias's and shared gate's dtypes, the
 * recipes, the logits dtype, each group's formats and packed expert layout, the ranks and
 * the expert -> rank table. Left out on purpose:
 * - this rank's own part of the placement (rank, slot, owned, n_owned): it differs by rank;
 * - the machine's choices (allowed, each group's kernel set ks, gate_choice, cvt_bf16,
 *   gate_bytes): each rank selects for its own CPU (what they pack shows in expert_stride);
 * - threads, threads_default, fixed_threads: no output depends on them (docs/design.md,
 *   principle 7);
 * - resident_experts: a tuning of moe bench the public API cannot ask for, and a placed
 *   layer ignores;
 * - what follows from fed fields: moe, recipe_used, router_params (but its correction bias
 *   dtype), gate_problem (but its weight dtype; its input dtype is each forward's), each
 *   group's n, mlp, stacked and gate_up_halves;
 * - what does not change the numbers: logits_origin, recipe_default, placement.table (the
 *   table itself is fed), the tid2eid dtype (ids are read in their width), texts and tensor
 *   pointers (cleared in a created layer), the model's n_layers, num_hash_layers (the layer's
 *   kind is fed) and router_dtype (the router weight's own dtype is fed). */
uint64_t moe_layer_fingerprint(const moe_layer_plan *p)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const moe_model_desc *d = p->desc;
    const moe_layer_desc *ld = p->ld;
    FEED(&h, d->family);
    feed(&h, d->model_type, strnlen(d->model_type, sizeof d->model_type));
    FEED(&h, d->hidden);
    FEED(&h, d->vocab_size);
    FEED(&h, p->index);
    FEED(&h, ld->kind);
    const moe_routing_desc *r = &ld->routing;
    FEED(&h, r->method);
    FEED(&h, r->score);
    FEED(&h, r->n_experts);
    FEED(&h, r->top_k);
    FEED(&h, r->n_group);
    FEED(&h, r->topk_group);
    FEED(&h, r->has_correction_bias);
    FEED(&h, r->has_router_bias);
    FEED(&h, r->norm_topk_prob);
    FEED(&h, r->routed_scaling_factor);
    FEED(&h, r->renorm_min);
    FEED(&h, ld->n_shared);
    FEED(&h, ld->shared_gate);
    FEED(&h, ld->scale_input);
    feed_mlp(&h, &ld->experts);
    feed_mlp(&h, &ld->shared);
    feed_mlp(&h, &ld->dense);
    FEED(&h, p->recipe);
    FEED(&h, p->logits_dtype);
    if (p->moe) FEED(&h, p->gate_problem.weight_dtype);
    if (p->moe && r->has_correction_bias) FEED(&h, p->router_params.correction_bias_dtype);
    if (ld->shared_gate) FEED(&h, p->shared_gate_dtype);
    for (int id = 0; id < MOE_LG_COUNT_; id++) {
        const moe_layer_group_plan *g = &p->groups[id];
        FEED(&h, g->present);
        if (!g->present) continue;
        FEED(&h, g->weight_dtype);
        FEED(&h, g->scale_dtype);
        FEED(&h, g->bias_dtype);
        FEED(&h, g->recipe);
        FEED(&h, g->group.expert_stride);
    }
    FEED(&h, p->ep.n_ranks);
    if (p->ep.expert_rank)
        feed(&h, p->ep.expert_rank, (size_t)ld->routing.n_experts * sizeof(int32_t));
    return h;
}
