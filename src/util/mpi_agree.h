/* A failure agreed on by every rank of a communicator: for collective calls
 * whose ranks fail separately (a checkpoint, a restore, weights loading) and
 * must all return the same result. */
#ifndef AUTOHET_UTIL_MPI_AGREE_H
#define AUTOHET_UTIL_MPI_AGREE_H
#include <mpi.h>
#include <stddef.h>

/* Collective over comm: 0 when rc is 0 on every rank; otherwise -1 on every
 * rank, with err = "rank R: <its reason>" of the first failing rank. */
int ah_mpi_agree_on_failure(MPI_Comm comm, int rc, char *err, size_t errlen);

#endif
