/* libFuzzer: a heartbeat datagram as autohet run's controller reads it from the network (heartbeat.c). */
#include "fuzz_common.h"

#include <string.h>

#include "elastic/run_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char msg[320]; /* the controller's receive buffer: a longer datagram is cut */
    size_t n = size < sizeof msg - 1 ? size : sizeof msg - 1;
    memcpy(msg, data, n);
    msg[n] = 0;
    run_beat_msg m;
    if (run_beat_parse(msg, &m) == 0 &&
        (m.n_stuck < 0 || m.n_stuck > RUN_MAX_STUCK_PEERS || m.rank < 0 || m.probe_got < 0 || m.probe_got > 16))
        __builtin_trap();
    return 0;
}
