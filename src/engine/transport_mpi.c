/* The MPI transport (transport.h). */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/transport.h"
#include "util/errors.h"

struct ah_group {
    MPI_Comm comm;
    int owned; /* created by split (freed with the group) */
};

typedef struct {
    ah_transport pub;
    ah_group world;
    MPI_Request *pending; /* sends posted and not yet waited for */
    int n_pending, cap_pending;
    MPI_Request *colls; /* collectives started and not yet waited for */
    int n_colls, cap_colls;
} mpi_transport;

static MPI_Datatype mpi_type(ah_dtype t) {
    return t == AH_DT_F64 ? MPI_DOUBLE : t == AH_DT_I32 ? MPI_INT : t == AH_DT_U64 ? MPI_UINT64_T : MPI_FLOAT;
}

static MPI_Op mpi_op(ah_reduce_op op) {
    return op == AH_RED_MAX ? MPI_MAX : op == AH_RED_MIN ? MPI_MIN : MPI_SUM;
}

/* MPI counts are ints: a larger message is a bug upstream (the engine checks
 * micro-batch sizes when it starts) */
static int count_of(size_t n) {
    if (n > INT_MAX) {
        fprintf(stderr, "transport: message of %zu elements exceeds MPI's int count\n", n);
        abort();
    }
    return (int)n;
}

static void tr_split(void *ctx, ah_group *parent, int color, int key, ah_group **out) {
    (void)ctx;
    MPI_Comm c;
    MPI_Comm_split(parent->comm, color < 0 ? MPI_UNDEFINED : color, key, &c);
    *out = NULL;
    if (c == MPI_COMM_NULL)
        return;
    ah_group *g = ah_xcalloc(1, sizeof *g);
    g->comm = c;
    g->owned = 1;
    *out = g;
}

static void tr_group_free(void *ctx, ah_group *g) {
    (void)ctx;
    if (!g || !g->owned)
        return;
    MPI_Comm_free(&g->comm);
    free(g);
}

static int tr_group_size(void *ctx, const ah_group *g) {
    (void)ctx;
    int n;
    MPI_Comm_size(g->comm, &n);
    return n;
}

static int tr_group_rank(void *ctx, const ah_group *g) {
    (void)ctx;
    int r;
    MPI_Comm_rank(g->comm, &r);
    return r;
}

/* a slot for one more request in reqs */
static MPI_Request *next_request(MPI_Request **reqs, int *n, int *cap) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *reqs = ah_xrealloc(*reqs, sizeof(MPI_Request) * (size_t)*cap);
    }
    return &(*reqs)[(*n)++];
}

static void tr_send(void *ctx, const void *buf, size_t bytes, int peer, int tag) {
    mpi_transport *t = ctx;
    MPI_Isend(buf, count_of(bytes), MPI_BYTE, peer, tag, t->world.comm,
              next_request(&t->pending, &t->n_pending, &t->cap_pending));
}

static void tr_recv(void *ctx, void *buf, size_t bytes, int peer, int tag) {
    mpi_transport *t = ctx;
    MPI_Recv(buf, count_of(bytes), MPI_BYTE, peer, tag, t->world.comm, MPI_STATUS_IGNORE);
}

static void tr_wait_sends(void *ctx) {
    mpi_transport *t = ctx;
    MPI_Waitall(t->n_pending, t->pending, MPI_STATUSES_IGNORE);
    t->n_pending = 0;
}

static void tr_sendrecv(void *ctx, const void *sbuf, void *rbuf, size_t bytes, int peer, int tag) {
    mpi_transport *t = ctx;
    MPI_Sendrecv(sbuf, count_of(bytes), MPI_BYTE, peer, tag, rbuf, count_of(bytes), MPI_BYTE, peer, tag,
                 t->world.comm, MPI_STATUS_IGNORE);
}

static void tr_allreduce(void *ctx, ah_group *g, void *buf, size_t count, ah_dtype dt, ah_reduce_op op) {
    (void)ctx;
    MPI_Allreduce(MPI_IN_PLACE, buf, count_of(count), mpi_type(dt), mpi_op(op), g->comm);
}

static void tr_iallreduce(void *ctx, ah_group *g, void *buf, size_t count, ah_dtype dt, ah_reduce_op op) {
    mpi_transport *t = ctx;
    MPI_Iallreduce(MPI_IN_PLACE, buf, count_of(count), mpi_type(dt), mpi_op(op), g->comm,
                   next_request(&t->colls, &t->n_colls, &t->cap_colls));
}

static void tr_wait_collectives(void *ctx) {
    mpi_transport *t = ctx;
    MPI_Waitall(t->n_colls, t->colls, MPI_STATUSES_IGNORE);
    t->n_colls = 0;
}

static void tr_progress(void *ctx) {
    mpi_transport *t = ctx;
    int done;
    if (t->n_colls)
        MPI_Testall(t->n_colls, t->colls, &done, MPI_STATUSES_IGNORE);
}

static void tr_reduce(void *ctx, ah_group *g, void *buf, size_t count, ah_dtype dt, int root) {
    (void)ctx;
    int me;
    MPI_Comm_rank(g->comm, &me);
    MPI_Reduce(me == root ? MPI_IN_PLACE : buf, buf, count_of(count), mpi_type(dt), MPI_SUM, root, g->comm);
}

static void tr_barrier(void *ctx, ah_group *g) {
    (void)ctx;
    MPI_Barrier(g->comm);
}

static void tr_free(void *ctx) {
    mpi_transport *t = ctx;
    free(t->pending);
    free(t->colls);
    free(t);
}

ah_transport *ah__transport_mpi(const void *mpi_comm) {
    int init = 0;
    MPI_Initialized(&init);
    if (!init)
        return NULL;
    mpi_transport *t = ah_xcalloc(1, sizeof *t);
    t->world.comm = *(const MPI_Comm *)mpi_comm;
    t->world.owned = 0;
    ah_transport *p = &t->pub;
    p->name = "mpi";
    p->ctx = t;
    MPI_Comm_rank(t->world.comm, &p->rank);
    MPI_Comm_size(t->world.comm, &p->size);
    p->world = &t->world;
    p->split = tr_split;
    p->group_free = tr_group_free;
    p->group_size = tr_group_size;
    p->group_rank = tr_group_rank;
    p->send = tr_send;
    p->recv = tr_recv;
    p->wait_sends = tr_wait_sends;
    p->sendrecv = tr_sendrecv;
    p->allreduce = tr_allreduce;
    p->iallreduce = tr_iallreduce;
    p->wait_collectives = tr_wait_collectives;
    p->progress = tr_progress;
    p->reduce = tr_reduce;
    p->barrier = tr_barrier;
    p->free_transport = tr_free;
    return p;
}

void ah__transport_free(ah_transport *t) {
    if (t)
        t->free_transport(t->ctx);
}
