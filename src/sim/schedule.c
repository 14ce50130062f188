/* Pipeline schedules: the order in which one stage runs its forward and
 * backward operations. Kept apart from what an operation costs so that other
 * schedules (interleaved, zero-bubble) can be added without touching the
 * engine. */
#include "autohet/sim.h"

/* 1F1B (PipeDream-flush, Megatron's default): stage j of S first runs
 * min(S - j - 1, m) warm-up forwards, then alternates one forward and one
 * backward, then drains the remaining backwards. It keeps at most S - j
 * micro-batches in flight. */
static void program_1f1b(int S, int j, int m, ah_sched_op *out) {
    int warm = S - j - 1 < m ? S - j - 1 : m;
    int n = 0, f = 0, b = 0;
    for (; f < warm; f++)
        out[n++] = (ah_sched_op){0, f};
    while (f < m) {
        out[n++] = (ah_sched_op){0, f++};
        out[n++] = (ah_sched_op){1, b++};
    }
    while (b < m)
        out[n++] = (ah_sched_op){1, b++};
}

/* GPipe: all forwards, then all backwards (last micro-batch first). Keeps all
 * m micro-batches in flight. */
static void program_gpipe(int m, ah_sched_op *out) {
    int n = 0;
    for (int i = 0; i < m; i++)
        out[n++] = (ah_sched_op){0, i};
    for (int i = m - 1; i >= 0; i--)
        out[n++] = (ah_sched_op){1, i};
}

void ah_schedule_program(ah_schedule s, int S, int j, int m, ah_sched_op *out) {
    if (s == AH_SCHED_GPIPE)
        program_gpipe(m, out);
    else
        program_1f1b(S, j, m, out);
}
