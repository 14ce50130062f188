/* Compute orders of the pipeline schedules: in which order one stage runs the
 * forwards and backwards of its chunks and micro-batches. */
#include <strings.h>

#include "autohet/schedule.h"

static const char *const sched_names[AH_SCHED_KINDS] = {"1f1b", "gpipe", "interleaved"};

const char *ah_schedule_name(ah_schedule s) {
    return s >= 0 && s < AH_SCHED_KINDS ? sched_names[s] : "?";
}

int ah_schedule_parse(const char *s, ah_schedule *out) {
    for (int k = 0; k < AH_SCHED_KINDS; k++)
        if (s && strcasecmp(s, sched_names[k]) == 0) {
            *out = (ah_schedule)k;
            return 0;
        }
    return -1;
}

/* 1F1B (PipeDream-flush, Megatron's default): stage j of S first runs
 * min(S - j - 1, m) warm-up forwards, then alternates one forward and one
 * backward, then drains the remaining backwards. It keeps at most S - j
 * micro-batches in flight. */
static void order_1f1b(int S, int j, int m, ah_compute_op *out) {
    int warm = S - j - 1 < m ? S - j - 1 : m;
    int n = 0, f = 0, b = 0;
    for (; f < warm; f++)
        out[n++] = (ah_compute_op){0, 0, f};
    while (f < m) {
        out[n++] = (ah_compute_op){0, 0, f++};
        out[n++] = (ah_compute_op){1, 0, b++};
    }
    while (b < m)
        out[n++] = (ah_compute_op){1, 0, b++};
}

/* GPipe: all forwards, then all backwards (last micro-batch first). Keeps all
 * m micro-batches in flight. */
static void order_gpipe(int m, ah_compute_op *out) {
    int n = 0;
    for (int i = 0; i < m; i++)
        out[n++] = (ah_compute_op){0, 0, i};
    for (int i = m - 1; i >= 0; i--)
        out[n++] = (ah_compute_op){1, 0, i};
}

/* The k-th forward (backward) of an interleaved stage: micro-batches go in
 * groups of S, each group through chunk 0, then chunk 1, ... (backwards
 * through the chunks in reverse), as Megatron-LM's
 * forward_backward_pipelining_with_interleaving. */
static ah_compute_op interleaved_op(int S, int V, int k, int backward) {
    int in_group = k % (S * V), chunk = in_group / S;
    if (backward)
        chunk = V - 1 - chunk;
    return (ah_compute_op){backward, chunk, (k / (S * V)) * S + in_group % S};
}

/* Interleaved 1F1B: stage j warms up with (S - j - 1) * 2 + (V - 1) * S
 * forwards (all of them when m == S), then alternates, then drains. The
 * bubble shrinks by V against 1F1B at the price of V times the sends. */
static void order_interleaved(int S, int V, int j, int m, ah_compute_op *out) {
    int total = m * V, warm = m == S ? total : (S - j - 1) * 2 + (V - 1) * S;
    if (warm > total)
        warm = total;
    int n = 0, f = 0, b = 0;
    for (; f < warm; f++)
        out[n++] = interleaved_op(S, V, f, 0);
    while (f < total) {
        out[n++] = interleaved_op(S, V, f++, 0);
        out[n++] = interleaved_op(S, V, b++, 1);
    }
    while (b < total)
        out[n++] = interleaved_op(S, V, b++, 1);
}

void ah_schedule_order(ah_schedule s, int S, int V, int j, int m, ah_compute_op *out) {
    if (s == AH_SCHED_GPIPE)
        order_gpipe(m, out);
    else if (s == AH_SCHED_INTERLEAVED && V > 1)
        order_interleaved(S, V, j, m, out);
    else
        order_1f1b(S, j, m, out);
}
