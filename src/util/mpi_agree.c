#include "util/mpi_agree.h"

#include <stdio.h>

int ah_mpi_agree_on_failure(MPI_Comm comm, int rc, char *err, size_t errlen) {
    int me, world;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &world);
    int first_bad = rc != 0 ? me : world, who = world;
    MPI_Allreduce(&first_bad, &who, 1, MPI_INT, MPI_MIN, comm);
    if (who == world)
        return 0;
    char msg[512];
    snprintf(msg, sizeof msg, "rank %d: %s", who, err);
    MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, who, comm);
    snprintf(err, errlen, "%s", msg);
    return -1;
}
