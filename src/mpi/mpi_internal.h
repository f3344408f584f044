/* mpi_internal.h — internal to libmoe_mpi: which rank the last failed agreement named. */
#ifndef MOE_MPI_MPI_INTERNAL_H
#define MOE_MPI_MPI_INTERNAL_H

/* The rank the calling thread's last failed moe_mpi_agree named (-1 before any failure). */
int moe_mpi_failed_rank(void);

#endif
