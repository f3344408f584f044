/* fwd_io.h — layer tests: forward buffers with every output poisoned, to see an error wrote none.
 */
#ifndef MOE_TEST_FWD_IO_H
#define MOE_TEST_FWD_IO_H

#include "layer_fixture.h"

#define POISON 0xA5u

/* N tokens of a layer's inputs (hidden states, token ids), outputs and workspace. */
typedef struct fwd_io {
    size_t n, h, e, k;
    float *x, *out, *logits, *w;
    int32_t *ids, *tokens;
    void *ws;
    size_t ws_size;
    moe_trace trace;
} fwd_io;

static inline void io_make(fwd_io *b, const moe_layer *l, size_t n)
{
    const moe_layer_plan *p = &l->plan;
    b->n = n;
    b->h = (size_t)p->desc->hidden;
    b->e = p->moe ? (size_t)p->ld->routing.n_experts : 1;
    b->k = p->moe ? (size_t)p->ld->routing.top_k : 1;
    b->x = malloc(n * b->h * 4);
    b->out = malloc(n * b->h * 4);
    b->logits = malloc(n * b->e * 4);
    b->w = malloc(n * b->k * 4);
    b->ids = malloc(n * b->k * 4);
    b->tokens = malloc(n * 4);
    REQUIRE(b->x && b->out && b->logits && b->w && b->ids && b->tokens);
    fx_hidden(3, n * b->h, b->x);
    for (size_t t = 0; t < n; t++)
        b->tokens[t] = (int32_t)(t * 7 % 1000);
    b->ws = fx_workspace(l, n, &b->ws_size);
}

static inline void io_free(fwd_io *b)
{
    free(b->x);
    free(b->out);
    free(b->logits);
    free(b->w);
    free(b->ids);
    free(b->tokens);
    free(b->ws);
}

static inline void poison(fwd_io *b)
{
    memset(b->out, POISON, b->n * b->h * 4);
    memset(b->logits, POISON, b->n * b->e * 4);
    memset(b->w, POISON, b->n * b->k * 4);
    memset(b->ids, POISON, b->n * b->k * 4);
    memset(&b->trace, POISON, sizeof b->trace);
}

static inline bool all_poison(const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != POISON) return false;
    return true;
}

static inline bool io_untouched(const fwd_io *b)
{
    return all_poison(b->out, b->n * b->h * 4) && all_poison(b->logits, b->n * b->e * 4) &&
           all_poison(b->w, b->n * b->k * 4) && all_poison(b->ids, b->n * b->k * 4) &&
           all_poison(&b->trace, sizeof b->trace);
}

/* Forward arguments for B (fx_args): f32 hidden states, i32 token ids, every output, the
 * trace. */
static inline moe_forward_args args_of(fwd_io *b)
{
    moe_forward_args a = fx_args(b->n, b->h, b->x, b->out, b->ws, b->ws_size);
    a.token_ids = b->tokens;
    a.token_id_dtype = MOE_DTYPE_I32;
    a.logits_out = b->logits;
    a.ids_out = b->ids;
    a.weights_out = b->w;
    a.trace = &b->trace;
    return a;
}

/* Experts-only arguments for B: f32 hidden states, the caller's IDS (of IDS_DT) and weights W,
 * the shared experts added when SHARED; no trace. */
static inline moe_experts_args xargs_of(const fwd_io *b, const void *ids, moe_dtype ids_dt,
                                        const float *w, bool shared)
{
    moe_experts_args a = {.size = sizeof a,
                          .n_tokens = b->n,
                          .hidden_size = b->h,
                          .hidden = b->x,
                          .hidden_dtype = MOE_DTYPE_F32,
                          .top_k = b->k,
                          .ids = ids,
                          .ids_dtype = ids_dt,
                          .weights = w,
                          .shared = shared,
                          .out = b->out,
                          .workspace = b->ws,
                          .workspace_size = b->ws_size};
    return a;
}

#endif
