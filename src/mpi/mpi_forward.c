/* mpi_forward.c — libmoe_mpi: moe_ep.h's steps over MPI_Alltoallv. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "moe_mpi.h"

#define FWD "moe_mpi_forward"
#define ARGS_MIN_SIZE (offsetof(moe_mpi_forward_args, stats) + sizeof(moe_mpi_stats *))

/* What a forward holds: the layer's shape, this rank's buffers (all freed by forward_free). */
typedef struct fwd {
    MPI_Comm comm;
    int rank, n;
    const moe_layer *l;
    const moe_mpi_forward_args *a;
    moe_layer_info li;
    size_t h, k, xb; /* hidden, top_k, bytes of one input element */
    size_t tk;       /* T · K */
    bool scales;     /* the weights scale the experts' inputs: each row travels with its weight */
    void *ws;        /* the steps' workspace */
    int32_t *ids;    /* [T, K] */
    float *w;        /* [T, K] */
    float *out;      /* [T, H]: written to the caller's out once every rank succeeded */
    int64_t *tags;   /* [T · K] in send order */
    int *scount, *sdisp, *rcount, *rdisp; /* rows to / from each rank */
    unsigned char *sx;                    /* rows sent, in tag order */
    int32_t *sex;                         /* their experts */
    float *sw;                            /* their weights (scales only) */
    unsigned char *rx;                    /* rows received */
    int32_t *rex;
    float *rw;
    float *ry;    /* outputs of the rows received */
    float *sy;    /* outputs of the rows sent, back in tag order */
    float *yhome; /* [T · K, H] by tag */
    size_t rows;  /* rows received */
    MPI_Datatype xrow, yrow;
    bool types;
} fwd;

static void forward_free(fwd *f)
{
    free(f->ws);
    free(f->ids);
    free(f->w);
    free(f->out);
    free(f->tags);
    free(f->scount);
    free(f->sdisp);
    free(f->rcount);
    free(f->rdisp);
    free(f->sx);
    free(f->sex);
    free(f->sw);
    free(f->rx);
    free(f->rex);
    free(f->rw);
    free(f->ry);
    free(f->sy);
    free(f->yhome);
    if (f->types) {
        MPI_Type_free(&f->xrow);
        MPI_Type_free(&f->yrow);
    }
}

/* N elements of SIZE bytes (at least one byte, so 0 tokens is not a failed allocation). */
static void *alloc_n(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) return NULL;
    const size_t bytes = n * size;
    return malloc(bytes > 0 ? bytes : 1);
}

static void *alloc_ws(size_t bytes)
{
    const size_t b = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, b ? b : 64);
}

static moe_status oom(const char *what)
{
    return moe_error(MOE_ENOMEM, FWD ": allocating %s", what);
}

/* This rank's arguments, before anything moves. */
static moe_status check_local(fwd *f)
{
    const moe_mpi_forward_args *a = f->a;
    if (!f->l) return moe_error(MOE_EINVAL, FWD ": argument 'layer' is NULL");
    if (!a) return moe_error(MOE_EINVAL, FWD ": argument 'args' is NULL");
    if (a->size < ARGS_MIN_SIZE)
        return moe_error(MOE_EINVAL,
                         FWD ": args->size = %zu is smaller than the %zu bytes this version reads "
                             "(set it to sizeof(moe_mpi_forward_args))",
                         a->size, (size_t)ARGS_MIN_SIZE);
    f->li.size = sizeof f->li;
    moe_status st = moe_layer_get_info(f->l, &f->li);
    if (st) return st;
    f->h = (size_t)f->li.hidden_size;
    f->k = (size_t)f->li.top_k;
    moe_ep_info ei = {.size = sizeof ei};
    if ((st = moe_ep_get_info(f->l, &ei))) return st;
    f->scales = ei.scales_input != 0;
    if (a->hidden_size != f->h)
        return moe_error(MOE_EINVAL,
                         FWD ": layer %d: args->hidden_size = %zu, but the model's hidden size is "
                             "%zu",
                         f->li.index, a->hidden_size, f->h);
    if (a->hidden_dtype != MOE_DTYPE_F32 && a->hidden_dtype != MOE_DTYPE_BF16)
        return moe_error(MOE_EDTYPE, FWD ": layer %d: args->hidden_dtype %s is not f32 or bf16",
                         f->li.index, moe_dtype_name(a->hidden_dtype));
    if (a->n_tokens > 0 && (!a->hidden || !a->out))
        return moe_error(MOE_EINVAL, FWD ": layer %d: args->%s is NULL with n_tokens = %zu",
                         f->li.index, a->hidden ? "out" : "hidden", a->n_tokens);
    f->xb = a->hidden_dtype == MOE_DTYPE_BF16 ? 2 : 4;
    if (a->n_tokens > (size_t)INT_MAX / (f->k ? f->k : 1))
        return moe_error(MOE_EOVERFLOW,
                         FWD ": layer %d: n_tokens = %zu is more than one call moves", f->li.index,
                         a->n_tokens);
    f->tk = a->n_tokens * f->k;
    return MOE_OK;
}

/* The same input dtype on every rank (rows move between them as they are). */
static moe_status agree_dtype(fwd *f)
{
    int d = (int)f->a->hidden_dtype, lo = 0, hi = 0;
    MPI_Allreduce(&d, &lo, 1, MPI_INT, MPI_MIN, f->comm);
    MPI_Allreduce(&d, &hi, 1, MPI_INT, MPI_MAX, f->comm);
    if (lo != hi)
        return moe_error(MOE_EDTYPE,
                         FWD ": layer %d: the ranks' hidden dtypes differ (%s and %s): every rank "
                             "passes the same",
                         f->li.index, moe_dtype_name((moe_dtype)lo), moe_dtype_name((moe_dtype)hi));
    return MOE_OK;
}

/* A dense layer: each rank's tokens on that rank. */
static moe_status dense(fwd *f)
{
    const moe_mpi_forward_args *a = f->a;
    const double t0 = MPI_Wtime();
    moe_status st = MOE_OK;
    const size_t wsb = moe_ep_workspace_size(f->l, a->n_tokens, 0);
    f->ws = alloc_ws(wsb);
    f->out = alloc_n(a->n_tokens * f->h, sizeof(float));
    if (!f->ws || !f->out) st = oom("the dense layer's buffers");
    if (!st && a->n_tokens > 0) {
        moe_forward_args fa = {.size = sizeof fa,
                               .n_tokens = a->n_tokens,
                               .hidden_size = f->h,
                               .hidden = a->hidden,
                               .hidden_dtype = a->hidden_dtype,
                               .token_ids = a->token_ids,
                               .token_id_dtype = a->token_id_dtype,
                               .out = f->out,
                               .workspace = f->ws,
                               .workspace_size = wsb};
        st = moe_layer_forward(f->l, &fa);
    }
    st = moe_mpi_agree(f->comm, st);
    if (st) return st;
    if (a->n_tokens) memcpy(a->out, f->out, a->n_tokens * f->h * sizeof(float));
    if (a->stats) {
        memset(a->stats, 0, sizeof *a->stats);
        a->stats->route_s = MPI_Wtime() - t0;
    }
    return MOE_OK;
}

/* Step 1 and 2: route this rank's tokens, then the send plan and the rows in tag order. */
static moe_status route(fwd *f)
{
    const moe_mpi_forward_args *a = f->a;
    const size_t t_n = a->n_tokens, n = (size_t)f->n, rb = f->h * f->xb;
    f->ids = alloc_n(f->tk, sizeof(int32_t));
    f->w = alloc_n(f->tk, sizeof(float));
    f->out = alloc_n(t_n * f->h, sizeof(float));
    f->tags = alloc_n(f->tk, sizeof(int64_t));
    f->sx = alloc_n(f->tk, rb);
    f->sex = alloc_n(f->tk, sizeof(int32_t));
    f->sw = f->scales ? alloc_n(f->tk, sizeof(float)) : NULL;
    f->sy = alloc_n(f->tk * f->h, sizeof(float));
    f->yhome = alloc_n(f->tk * f->h, sizeof(float));
    f->scount = alloc_n(n, sizeof(int));
    f->sdisp = alloc_n(n, sizeof(int));
    f->rcount = alloc_n(n, sizeof(int));
    f->rdisp = alloc_n(n, sizeof(int));
    f->ws = alloc_ws(moe_ep_workspace_size(f->l, t_n, 0));
    if (!f->ids || !f->w || !f->out || !f->tags || !f->sx || !f->sex || (f->scales && !f->sw) ||
        !f->sy || !f->yhome || !f->scount || !f->sdisp || !f->rcount || !f->rdisp || !f->ws)
        return oom("this rank's routing buffers");
    if (t_n == 0) {
        memset(f->scount, 0, n * sizeof(int));
        return MOE_OK;
    }
    moe_forward_args fa = {.size = sizeof fa,
                           .n_tokens = t_n,
                           .hidden_size = f->h,
                           .hidden = a->hidden,
                           .hidden_dtype = a->hidden_dtype,
                           .token_ids = a->token_ids,
                           .token_id_dtype = a->token_id_dtype,
                           .ids_out = f->ids,
                           .weights_out = f->w,
                           .workspace = f->ws,
                           .workspace_size = moe_ep_workspace_size(f->l, t_n, 0)};
    moe_status st = moe_ep_route(f->l, &fa);
    if (st) return st;
    size_t *counts = alloc_n(n, sizeof(size_t));
    if (!counts) return oom("the send counts");
    st = moe_ep_send_plan(f->l, t_n, f->ids, counts, f->tags);
    for (size_t r = 0; r < n; r++)
        f->scount[r] = (int)counts[r]; /* at most T · K, checked against INT_MAX */
    free(counts);
    if (st) return st;
    for (size_t i = 0; i < f->tk; i++) {
        const size_t tag = (size_t)f->tags[i];
        memcpy(f->sx + i * rb, (const unsigned char *)a->hidden + tag / f->k * rb, rb);
        f->sex[i] = f->ids[tag];
        if (f->scales) f->sw[i] = f->w[tag];
    }
    return MOE_OK;
}

static void prefix(const int *count, int *disp, int n)
{
    int at = 0;
    for (int r = 0; r < n; r++) {
        disp[r] = at;
        at += count[r];
    }
}

/* Step 3: counts, then rows and their experts (and weights, where they scale the inputs) to
 * the experts' ranks. */
static moe_status dispatch(fwd *f)
{
    MPI_Alltoall(f->scount, 1, MPI_INT, f->rcount, 1, MPI_INT, f->comm);
    long long total = 0;
    for (int r = 0; r < f->n; r++)
        total += f->rcount[r];
    moe_status st = MOE_OK;
    if (total > INT_MAX)
        st = moe_error(MOE_EOVERFLOW, FWD ": rank %d receives %lld rows, more than one call moves",
                       f->rank, total);
    f->rows = (size_t)total;
    if (!st) {
        f->rx = alloc_n(f->rows, f->h * f->xb);
        f->rex = alloc_n(f->rows, sizeof(int32_t));
        f->ry = alloc_n(f->rows * f->h, sizeof(float));
        f->rw = f->scales ? alloc_n(f->rows, sizeof(float)) : NULL;
        if (!f->rx || !f->rex || !f->ry || (f->scales && !f->rw)) st = oom("the rows received");
    }
    st = moe_mpi_agree(f->comm, st);
    if (st) return st;
    prefix(f->scount, f->sdisp, f->n);
    prefix(f->rcount, f->rdisp, f->n);
    MPI_Alltoallv(f->sx, f->scount, f->sdisp, f->xrow, f->rx, f->rcount, f->rdisp, f->xrow,
                  f->comm);
    MPI_Alltoallv(f->sex, f->scount, f->sdisp, MPI_INT32_T, f->rex, f->rcount, f->rdisp,
                  MPI_INT32_T, f->comm);
    if (f->scales)
        MPI_Alltoallv(f->sw, f->scount, f->sdisp, MPI_FLOAT, f->rw, f->rcount, f->rdisp, MPI_FLOAT,
                      f->comm);
    return MOE_OK;
}

/* Step 4: this rank's experts on the rows received. */
static moe_status experts(fwd *f)
{
    moe_status st = MOE_OK;
    if (f->rows > 0) {
        const size_t wsb = moe_ep_workspace_size(f->l, 0, f->rows);
        void *ws = alloc_ws(wsb);
        if (!ws) {
            st = oom("the experts' workspace");
        } else {
            const moe_ep_rows_args ra = {.size = sizeof ra,
                                         .n_rows = f->rows,
                                         .hidden_size = f->h,
                                         .rows = f->rx,
                                         .rows_dtype = f->a->hidden_dtype,
                                         .experts = f->rex,
                                         .y = f->ry,
                                         .workspace = ws,
                                         .workspace_size = wsb,
                                         .weights = f->rw};
            st = moe_ep_experts(f->l, &ra);
            free(ws);
        }
    }
    return moe_mpi_agree(f->comm, st);
}

/* Step 5: the outputs back to their tokens' ranks, placed by tag. */
static void give_back(fwd *f)
{
    MPI_Alltoallv(f->ry, f->rcount, f->rdisp, f->yrow, f->sy, f->scount, f->sdisp, f->yrow,
                  f->comm);
    for (size_t i = 0; i < f->tk; i++)
        memcpy(f->yhome + (size_t)f->tags[i] * f->h, f->sy + i * f->h, f->h * sizeof(float));
}

/* Step 6: the shared experts and the combine, at home. */
static moe_status combine_home(fwd *f)
{
    const moe_mpi_forward_args *a = f->a;
    moe_status st = MOE_OK;
    if (a->n_tokens > 0) {
        const moe_ep_combine_args ca = {.size = sizeof ca,
                                        .n_tokens = a->n_tokens,
                                        .hidden_size = f->h,
                                        .hidden = a->hidden,
                                        .hidden_dtype = a->hidden_dtype,
                                        .weights = f->w,
                                        .y = f->yhome,
                                        .out = f->out,
                                        .workspace = f->ws,
                                        .workspace_size =
                                            moe_ep_workspace_size(f->l, a->n_tokens, 0)};
        st = moe_ep_combine(f->l, &ca);
    }
    return moe_mpi_agree(f->comm, st);
}

/* The bytes this rank sent to other ranks: rows, experts (and weights) out, outputs back. */
static uint64_t bytes_sent(const fwd *f)
{
    uint64_t b = 0;
    for (int r = 0; r < f->n; r++)
        if (r != f->rank)
            b += (uint64_t)f->scount[r] *
                     (f->h * f->xb + sizeof(int32_t) + (f->scales ? sizeof(float) : 0)) +
                 (uint64_t)f->rcount[r] * f->h * sizeof(float);
    return b;
}

/* An MoE layer: the steps, each agreed on before the next moves data. */
static moe_status routed(fwd *f)
{
    const moe_mpi_forward_args *a = f->a;
    double t[6];
    t[0] = MPI_Wtime();
    moe_status st = moe_mpi_agree(f->comm, route(f));
    if (st) return st;
    t[1] = MPI_Wtime();
    if (MPI_Type_contiguous((int)(f->h * f->xb), MPI_BYTE, &f->xrow) != MPI_SUCCESS ||
        MPI_Type_contiguous((int)f->h, MPI_FLOAT, &f->yrow) != MPI_SUCCESS)
        return moe_error(MOE_EINVAL, FWD ": MPI_Type_contiguous failed for rows of %zu", f->h);
    MPI_Type_commit(&f->xrow);
    MPI_Type_commit(&f->yrow);
    f->types = true;
    if ((st = dispatch(f))) return st;
    t[2] = MPI_Wtime();
    if ((st = experts(f))) return st;
    t[3] = MPI_Wtime();
    give_back(f);
    t[4] = MPI_Wtime();
    if ((st = combine_home(f))) return st;
    t[5] = MPI_Wtime();
    const size_t t_n = a->n_tokens;
    if (t_n) memcpy(a->out, f->out, t_n * f->h * sizeof(float));
    if (t_n && a->ids_out) memcpy(a->ids_out, f->ids, f->tk * sizeof(int32_t));
    if (t_n && a->weights_out) memcpy(a->weights_out, f->w, f->tk * sizeof(float));
    if (a->stats) {
        a->stats->route_s = t[1] - t[0];
        a->stats->dispatch_s = t[2] - t[1];
        a->stats->experts_s = t[3] - t[2];
        a->stats->return_s = t[4] - t[3];
        a->stats->combine_s = t[5] - t[4];
        a->stats->bytes_sent = bytes_sent(f);
        a->stats->rows_received = f->rows;
    }
    return MOE_OK;
}

moe_status moe_mpi_forward(MPI_Comm comm, const moe_layer *layer, const moe_mpi_forward_args *args)
{
    fwd f;
    memset(&f, 0, sizeof f);
    f.comm = comm;
    f.l = layer;
    f.a = args;
    MPI_Comm_rank(comm, &f.rank);
    MPI_Comm_size(comm, &f.n);
    moe_status st = moe_mpi_agree(comm, check_local(&f));
    if (!st) st = agree_dtype(&f);
    if (!st) st = f.li.kind == MOE_LAYER_DENSE ? dense(&f) : routed(&f);
    forward_free(&f);
    return st;
}
