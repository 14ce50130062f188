/* The communication seam of the training engine: what a step needs to move
 * data between ranks, over opaque groups (communicators). transport_mpi.c
 * implements it with MPI (host or CUDA-aware buffers); an NCCL transport
 * implements the same table in its own files. Buffers are transport addresses
 * (ah__dptr_transport of a backend buffer), never dereferenced here by the
 * caller. Checkpoints and recovery (src/ckpt/, its peer fetch with MPI
 * one-sided gets included) and trace collection move host data and use MPI
 * directly as the engine's control plane (docs/engine.md).
 *
 * Ordering: sends are non-blocking and complete at wait_sends; receives and
 * collectives block, except iallreduce, which completes at wait_collectives.
 * All members of a group call its collectives in the same order (the schedule
 * programs guarantee it). */
#ifndef AUTOHET_ENGINE_TRANSPORT_H
#define AUTOHET_ENGINE_TRANSPORT_H
#include <stddef.h>
#include <stdint.h>

typedef struct ah_group ah_group; /* a set of ranks with a private channel */

typedef enum { AH_DT_F32 = 0, AH_DT_F64, AH_DT_I32, AH_DT_U64 } ah_dtype;
typedef enum { AH_RED_SUM = 0, AH_RED_MAX, AH_RED_MIN } ah_reduce_op;

typedef struct ah_transport ah_transport;
struct ah_transport {
    const char *name;
    void *ctx;
    int rank, size;  /* of the world group */
    ah_group *world; /* every rank of the job's training part */
    /* the members of parent with the same color (< 0: not a member, *out = NULL),
     * ranked by key; collective over parent */
    void (*split)(void *ctx, ah_group *parent, int color, int key, ah_group **out);
    void (*group_free)(void *ctx, ah_group *g);
    int (*group_size)(void *ctx, const ah_group *g);
    int (*group_rank)(void *ctx, const ah_group *g);
    /* point to point between world ranks */
    void (*send)(void *ctx, const void *buf, size_t bytes, int peer, int tag); /* non-blocking */
    void (*recv)(void *ctx, void *buf, size_t bytes, int peer, int tag);       /* blocking */
    void (*wait_sends)(void *ctx);                                            /* every send posted so far */
    void (*sendrecv)(void *ctx, const void *sbuf, void *rbuf, size_t bytes, int peer, int tag);
    /* collectives, blocking, in place */
    void (*allreduce)(void *ctx, ah_group *g, void *buf, size_t count, ah_dtype t, ah_reduce_op op);
    /* the same, started (non-blocking): buf is the transport's until wait_collectives */
    void (*iallreduce)(void *ctx, ah_group *g, void *buf, size_t count, ah_dtype t, ah_reduce_op op);
    void (*wait_collectives)(void *ctx); /* every iallreduce started so far */
    void (*progress)(void *ctx);         /* moves the started ones on, without waiting */
    /* sum onto root's buffer (root: rank in g) */
    void (*reduce)(void *ctx, ah_group *g, void *buf, size_t count, ah_dtype t, int root);
    void (*barrier)(void *ctx, ah_group *g);
    void (*free_transport)(void *ctx);
};

/* MPI over the communicator `comm` (an MPI_Comm passed as a pointer to it, so
 * that this header needs no MPI). Returns NULL if MPI is not initialised. */
ah_transport *ah__transport_mpi(const void *mpi_comm);
void ah__transport_free(ah_transport *t);

static inline void ah__tr_allreduce_sum_f32(ah_transport *t, ah_group *g, void *buf, size_t n) {
    t->allreduce(t->ctx, g, buf, n, AH_DT_F32, AH_RED_SUM);
}

#endif
