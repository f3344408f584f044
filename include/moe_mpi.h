/* moe_mpi.h — libmoe_mpi: expert parallelism over an MPI communicator. */
#ifndef MOE_MPI_H
#define MOE_MPI_H

/*
 * libmoe_mpi runs moe_ep.h's steps over MPI: one rank per process (one per NUMA node or per
 * machine: docs/parallel.md), the routed experts split over the ranks of a communicator, the
 * rows moved with MPI_Alltoallv. It is built only where CMake finds MPI, and links libmoe.
 *
 * Every function here is collective: every rank of COMM calls it, in the same order. None
 * hangs on an error: each rank checks what it was given first, the ranks agree on the
 * outcome (an MPI_Allreduce, then the failing rank's message to all), and on any rank's error
 * every rank returns that rank's status, moe_last_error() naming the rank and the cause, with
 * nothing written to any output and no data moved. MPI errors themselves are MPI's
 * (MPI_ERRORS_ARE_FATAL unless the caller sets otherwise).
 */

#include <mpi.h>

#include "moe_ep.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Agreement: every rank passes its own status LOCAL (with moe_last_error() its message when
 * not MOE_OK). Returns MOE_OK on every rank when all passed MOE_OK; otherwise, on every rank,
 * the status of the lowest rank that failed, moe_last_error() "rank R: <its message>". For a
 * caller's own collective checks (a model that opened on some ranks and not on others). */
moe_status moe_mpi_agree(MPI_Comm comm, moe_status local);

/* Creates layer LAYER on every rank of COMM, rank r of n = the communicator's rank and size,
 * packing only its routed experts: EXPERT_RANK NULL places them in contiguous ranges, else
 * it is [n_entries] ranks as moe_ep_placement reads them (the same table on every rank).
 * MODEL may be NULL on a rank whose model did not open: pass that rank's status as
 * MODEL_STATUS (its message in moe_last_error()), MOE_OK elsewhere. A creation that fails on
 * any rank, or a layer whose fingerprint (config fields, formats, recipes, placement table:
 * moe_ep_info) differs from rank 0's, fails on every rank; then *out is untouched. */
moe_status moe_mpi_layer_create(MPI_Comm comm, const moe_model *model, moe_status model_status,
                                int layer, const moe_layer_options *options,
                                const int32_t *expert_rank, size_t n_entries, moe_layer **out);

/* Seconds in each step of the last forward on this rank, and what it sent. */
typedef struct moe_mpi_stats {
    double route_s;       /* gate and router (a dense layer: its whole forward) */
    double dispatch_s;    /* counts and rows to the experts' ranks (MPI_Alltoall, MPI_Alltoallv) */
    double experts_s;     /* this rank's experts on the rows it received */
    double return_s;      /* the output rows back to their tokens' ranks */
    double combine_s;     /* shared experts and the combine */
    uint64_t bytes_sent;  /* rows, ids (llama4: weights) and outputs sent to other ranks */
    size_t rows_received; /* rows this rank's experts ran */
} moe_mpi_stats;

/* The arguments of moe_mpi_forward: this rank's tokens (any number, 0 included). */
typedef struct moe_mpi_forward_args {
    size_t size;            /* sizeof(moe_mpi_forward_args) */
    size_t n_tokens;        /* this rank's T */
    size_t hidden_size;     /* the model's hidden size */
    const void *hidden;     /* [T, hidden] */
    moe_dtype hidden_dtype; /* MOE_DTYPE_F32 or MOE_DTYPE_BF16, the same on every rank */
    const void *token_ids;  /* [T] I32 or I64: hash-routed layers */
    moe_dtype token_id_dtype;
    float *out;           /* [T, hidden] */
    int32_t *ids_out;     /* optional [T, K] */
    float *weights_out;   /* optional [T, K] */
    moe_mpi_stats *stats; /* optional */
} moe_mpi_forward_args;

/* The forward of LAYER (moe_mpi_layer_create's) for every rank's own tokens: each token's
 * output, ids and weights are moe_layer_forward's on one process, bit for bit. A dense layer
 * runs each rank's tokens on that rank. */
moe_status moe_mpi_forward(MPI_Comm comm, const moe_layer *layer, const moe_mpi_forward_args *args);

/* The same with the whole batch on rank ROOT: ARGS is read on ROOT only (other ranks may pass
 * NULL): its rows are spread evenly over the ranks, run with moe_mpi_forward, and the outputs
 * gathered back into ROOT's out, ids_out and weights_out. STATS (optional, any rank) gets
 * that rank's figures. */
moe_status moe_mpi_forward_root(MPI_Comm comm, int root, const moe_layer *layer,
                                const moe_mpi_forward_args *args, moe_mpi_stats *stats);

#ifdef __cplusplus
}
#endif

#endif /* MOE_MPI_H */
