/* One vocabulary of what a training step does (libuv's UV_ERRNO_MAP is the
 * model): the schedule's program ops (autohet/schedule.h), the engine's trace
 * records (autohet/trace.h) and the simulator's events (autohet/sim.h) are
 * kinds of one table, which gives each its name (the trace files' event
 * names and args.kind, the simulator's JSON), its stream and the engine's
 * trace site. Owned by src/schedule/ (ops.c). */
#ifndef AUTOHET_OPS_H
#define AUTOHET_OPS_H

/* X(KIND, name, stream, site): the engine's trace site of the kind's records
 * (a call site of the transport, numbered once for every rank; a bucket's
 * all-reduce is the DP site plus its bucket index; -1: compute, no site).
 * The order is the trace records' (their kind field). */
#define AH_OP_MAP(X)                                                                                         \
    X(FORWARD, "forward", COMPUTE, -1)                                                                       \
    X(BACKWARD, "backward", COMPUTE, -1)                                                                     \
    X(OPTIMIZER, "optimizer", COMPUTE, -1)        /* clip + AdamW of the held layers */                      \
    X(RECV_ACTIVATION, "recv_activation", P2P, 3) /* the previous chunk's activation (waiting, receiving) */ \
    X(RECV_GRADIENT, "recv_gradient", P2P, 4)     /* the next chunk's activation gradient */                 \
    X(SEND_ACTIVATION, "send_activation", P2P, 6) /* non-blocking, after the forward */                      \
    X(SEND_GRADIENT, "send_gradient", P2P, 7)     /* non-blocking, after the backward */                     \
    X(SEND_WAIT, "send_wait", P2P, 5)             /* completing every posted send */                         \
    X(TP_ALLREDUCE, "tp_allreduce", TP, 1)        /* inside a forward or backward */                         \
    X(DP_ALLREDUCE, "dp_allreduce", DP, 8)        /* the layer-wise gradient all-reduce of one bucket */     \
    X(TIED_SYNC, "tied_sync", DP, 2)              /* the tied embedding's gradient, first and last stage */  \
    X(STEP_SYNC, "step_sync", DP, 0)              /* the global loss (and gradient norm) reduction */  \
    X(DP_WAIT, "dp_wait", DP, -1)                 /* completing every started bucket all-reduce (--overlap-dp; \
                                                   * traced as the all-reduces' own records) */                \
    X(CHECKPOINT, "checkpoint", COMPUTE, -1)      /* a save between steps on the training thread: the held  \
                                                   * layers to a tier, or waiting for the background copy   \
                                                   * (a record's bucket field: ah_ckpt_trace_tier); traced   \
                                                   * by the engine, never a program op or simulated */

typedef enum {
#define AH_OP_ENUM_(kind, name, stream, site) AH_OP_##kind,
    AH_OP_MAP(AH_OP_ENUM_)
#undef AH_OP_ENUM_
        AH_OP_KINDS
} ah_op_kind;

/* where an op's time is drawn: one track per stream (a stream whose operations overlap gets lanes) */
typedef enum { AH_STREAM_COMPUTE = 0, AH_STREAM_TP, AH_STREAM_P2P, AH_STREAM_DP, AH_STREAMS } ah_stream;

/* "forward", "recv_activation", ...; NULL out of range */
const char *ah_op_kind_name(ah_op_kind k);
/* the kind with that name, or -1 */
int ah_op_kind_parse(const char *name);
ah_stream ah_op_kind_stream(ah_op_kind k);
/* the engine's trace site of the kind (-1: compute) */
int ah_op_kind_site(ah_op_kind k);
/* "compute", "tp", "p2p", "dp"; "unknown" out of range */
const char *ah_stream_name(ah_stream s);

#endif
