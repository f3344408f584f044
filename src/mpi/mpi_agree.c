/* mpi_agree.c — libmoe_mpi: one outcome on every rank (agreement), and the collective create. */
#include <limits.h>
#include <stdio.h>

#include "core/error.h"
#include "moe_mpi.h"
#include "mpi/mpi_internal.h"

/* The message of a failing rank, as every rank reports it. */
#define MSG_BYTES 1024

/* The rank the last failed agreement on this thread named (mpi_internal.h). */
static _Thread_local int failed_rank = -1;

int moe_mpi_failed_rank(void) { return failed_rank; }

moe_status moe_mpi_agree(MPI_Comm comm, moe_status local)
{
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    int mine = local != MOE_OK ? rank : INT_MAX, first = INT_MAX;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == INT_MAX) return MOE_OK;
    struct {
        int status;
        char msg[MSG_BYTES];
    } m = {0, {0}};
    if (rank == first) {
        m.status = (int)local;
        snprintf(m.msg, sizeof m.msg, "%s", moe_last_error());
    }
    MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, first, comm);
    failed_rank = first;
    return moe_error((moe_status)m.status, "rank %d: %s", first, m.msg);
}

moe_status moe_mpi_layer_create(MPI_Comm comm, const moe_model *model, moe_status model_status,
                                int layer, const moe_layer_options *options,
                                const int32_t *expert_rank, size_t n_entries, moe_layer **out)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    moe_layer *l = NULL;
    moe_status st = model_status;
    if (!st && !out) st = moe_error(MOE_EINVAL, "moe_mpi_layer_create: argument 'out' is NULL");
    if (!st && !model) st = moe_error(MOE_EINVAL, "moe_mpi_layer_create: argument 'model' is NULL");
    if (!st) {
        const moe_ep_placement pl = {sizeof pl, rank, size, expert_rank, n_entries};
        st = moe_layer_create_ep(model, layer, options, &pl, &l);
    }
    moe_ep_info info = {.size = sizeof info};
    if (!st) st = moe_ep_get_info(l, &info);
    st = moe_mpi_agree(comm, st);
    if (!st) {
        /* Every rank's fingerprint against rank 0's: the lowest rank that differs is named. */
        unsigned long long fp0 = info.fingerprint;
        MPI_Bcast(&fp0, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
        int mine = info.fingerprint != fp0 ? rank : INT_MAX, first = INT_MAX;
        MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
        if (first != INT_MAX)
            st = moe_error(MOE_ECONFIG,
                           "rank %d: layer %d differs from rank 0's (its config.json, "
                           "quantisation, recipe or placement table: fingerprints differ): the "
                           "ranks must load the same model with the same options",
                           first, layer);
    }
    if (st) {
        moe_layer_destroy(l);
        return st;
    }
    *out = l;
    return MOE_OK;
}
