/* mpi_root.c — libmoe_mpi: the whole batch on one rank, spread evenly, run, gathered back. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "moe_mpi.h"
#include "mpi/mpi_internal.h"

#define ROOT "moe_mpi_forward_root"
#define ARGS_MIN_SIZE (offsetof(moe_mpi_forward_args, stats) + sizeof(moe_mpi_stats *))

/* What the root tells every rank about the batch. */
typedef struct batch {
    unsigned long long n_tokens;
    int hidden_dtype, token_id_dtype;
    int has_ids;                /* token ids given */
    int want_ids, want_weights; /* the root asked for ids_out, weights_out */
} batch;

/* The root's arguments, before anything moves. */
static moe_status check_root(const moe_mpi_forward_args *a, int n, const moe_layer_info *li)
{
    if (!a) return moe_error(MOE_EINVAL, ROOT ": argument 'args' is NULL on the root");
    if (a->size < ARGS_MIN_SIZE)
        return moe_error(MOE_EINVAL,
                         ROOT ": args->size = %zu is smaller than the %zu bytes this version "
                              "reads (set it to sizeof(moe_mpi_forward_args))",
                         a->size, (size_t)ARGS_MIN_SIZE);
    if (a->hidden_size != (size_t)li->hidden_size)
        return moe_error(MOE_EINVAL,
                         ROOT ": layer %d: args->hidden_size = %zu, but the model's hidden size "
                              "is %lld",
                         li->index, a->hidden_size, (long long)li->hidden_size);
    if (a->hidden_dtype != MOE_DTYPE_F32 && a->hidden_dtype != MOE_DTYPE_BF16)
        return moe_error(MOE_EDTYPE, ROOT ": layer %d: args->hidden_dtype %s is not f32 or bf16",
                         li->index, moe_dtype_name(a->hidden_dtype));
    if (a->token_ids && a->token_id_dtype != MOE_DTYPE_I32 && a->token_id_dtype != MOE_DTYPE_I64)
        return moe_error(MOE_EDTYPE, ROOT ": layer %d: args->token_id_dtype %s is not i32 or i64",
                         li->index, moe_dtype_name(a->token_id_dtype));
    if (a->n_tokens > 0 && (!a->hidden || !a->out))
        return moe_error(MOE_EINVAL, ROOT ": layer %d: args->%s is NULL with n_tokens = %zu",
                         li->index, a->hidden ? "out" : "hidden", a->n_tokens);
    if (a->n_tokens / (size_t)n >= (size_t)INT_MAX / 2)
        return moe_error(MOE_EOVERFLOW, ROOT ": n_tokens = %zu is more than one call spreads",
                         a->n_tokens);
    return MOE_OK;
}

/* Rank r's share of T tokens: T·(r+1)/n - T·r/n, the first at T·r/n. */
static void shares(unsigned long long t, int n, int *count, int *first)
{
    for (int r = 0; r < n; r++) {
        first[r] = (int)(t * (unsigned long long)r / (unsigned long long)n);
        count[r] = (int)(t * (unsigned long long)(r + 1) / (unsigned long long)n) - first[r];
    }
}

/* Gathers each rank's [count, width] block of ELEM-byte elements into the root's DST. */
static void gather(MPI_Comm comm, int root, const void *src, int count, void *dst,
                   const int *counts, const int *firsts, size_t width, size_t elem)
{
    MPI_Datatype row;
    MPI_Type_contiguous((int)(width * elem), MPI_BYTE, &row);
    MPI_Type_commit(&row);
    MPI_Gatherv(src, count, row, dst, counts, firsts, row, root, comm);
    MPI_Type_free(&row);
}

/* "rank R: MSG" as "rank R (rows A..B of the batch): MSG". */
static moe_status with_share(moe_status st, int bad, int first, int count)
{
    char head[32], msg[1024];
    const int n = snprintf(head, sizeof head, "rank %d: ", bad);
    const char *m = moe_last_error();
    if (!strncmp(m, head, (size_t)n)) m += n;
    snprintf(msg, sizeof msg, "%s", m);
    return moe_error(st, "rank %d (rows %d..%d of the batch): %s", bad, first, first + count - 1,
                     msg);
}

moe_status moe_mpi_forward_root(MPI_Comm comm, int root, const moe_layer *layer,
                                const moe_mpi_forward_args *args, moe_mpi_stats *stats)
{
    int rank = 0, n = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &n);
    moe_layer_info li = {.size = sizeof li};
    moe_status st = layer ? moe_layer_get_info(layer, &li)
                          : moe_error(MOE_EINVAL, ROOT ": argument 'layer' is NULL");
    if (!st && (root < 0 || root >= n))
        st = moe_error(MOE_EINVAL, ROOT ": root %d is outside [0, %d)", root, n);
    if (!st && rank == root) st = check_root(args, n, &li);
    st = moe_mpi_agree(comm, st);
    if (st) return st;
    batch b = {0, 0, 0, 0, 0, 0};
    if (rank == root)
        b = (batch){args->n_tokens,          (int)args->hidden_dtype, (int)args->token_id_dtype,
                    args->token_ids != NULL, args->ids_out != NULL,   args->weights_out != NULL};
    MPI_Bcast(&b, (int)sizeof b, MPI_BYTE, root, comm);
    int *count = malloc((size_t)n * sizeof(int)), *first = malloc((size_t)n * sizeof(int));
    const size_t h = (size_t)li.hidden_size, k = (size_t)li.top_k;
    const size_t xb = b.hidden_dtype == MOE_DTYPE_BF16 ? 2 : 4;
    const size_t ib = b.token_id_dtype == MOE_DTYPE_I64 ? 8 : 4;
    if (count && first) shares(b.n_tokens, n, count, first);
    const size_t mine = count && first ? (size_t)count[rank] : 0;
    void *x = malloc(mine * h * xb + 1), *ids_in = malloc(mine * ib + 1);
    float *out = malloc(mine * h * sizeof(float) + 1), *w = malloc(mine * k * sizeof(float) + 1);
    int32_t *ids = malloc(mine * k * sizeof(int32_t) + 1);
    st = !count || !first || !x || !ids_in || !out || !w || !ids
             ? moe_error(MOE_ENOMEM, ROOT ": allocating rank %d's share of %zu tokens", rank, mine)
             : MOE_OK;
    st = moe_mpi_agree(comm, st);
    if (!st) {
        MPI_Datatype xrow, idrow;
        MPI_Type_contiguous((int)(h * xb), MPI_BYTE, &xrow);
        MPI_Type_contiguous((int)ib, MPI_BYTE, &idrow);
        MPI_Type_commit(&xrow);
        MPI_Type_commit(&idrow);
        MPI_Scatterv(rank == root ? args->hidden : NULL, count, first, xrow, x, count[rank], xrow,
                     root, comm);
        if (b.has_ids)
            MPI_Scatterv(rank == root ? args->token_ids : NULL, count, first, idrow, ids_in,
                         count[rank], idrow, root, comm);
        MPI_Type_free(&xrow);
        MPI_Type_free(&idrow);
        const moe_mpi_forward_args la = {.size = sizeof la,
                                         .n_tokens = mine,
                                         .hidden_size = h,
                                         .hidden = x,
                                         .hidden_dtype = (moe_dtype)b.hidden_dtype,
                                         .token_ids = b.has_ids ? ids_in : NULL,
                                         .token_id_dtype = (moe_dtype)b.token_id_dtype,
                                         .out = out,
                                         .ids_out = ids,
                                         .weights_out = w,
                                         .stats = stats};
        st = moe_mpi_forward(comm, layer, &la);
        const int bad = moe_mpi_failed_rank();
        if (st && bad >= 0 && bad < n) /* a row index in the message is within that share */
            st = with_share(st, bad, first[bad], count[bad]);
    }
    if (!st) { /* every rank succeeded: the root's outputs are written now, and only now */
        gather(comm, root, out, (int)mine, rank == root ? args->out : NULL, count, first, h, 4);
        if (b.want_ids && k)
            gather(comm, root, ids, (int)mine, rank == root ? args->ids_out : NULL, count, first, k,
                   4);
        if (b.want_weights && k)
            gather(comm, root, w, (int)mine, rank == root ? args->weights_out : NULL, count, first,
                   k, 4);
    }
    free(count);
    free(first);
    free(x);
    free(ids_in);
    free(out);
    free(w);
    free(ids);
    return st;
}
