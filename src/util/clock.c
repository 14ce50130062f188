#include "util/clock.h"

#include <time.h>

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double ah_now_s(void) {
    return clock_s(CLOCK_MONOTONIC);
}

double ah_wall_clock_s(void) {
    return clock_s(CLOCK_REALTIME);
}
