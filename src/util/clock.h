/* Clocks in seconds, as doubles. */
#ifndef AUTOHET_UTIL_CLOCK_H
#define AUTOHET_UTIL_CLOCK_H

/* monotonic, from an arbitrary origin: for durations */
double ah_now_s(void);
/* wall-clock (CLOCK_REALTIME): comparable between the processes of one machine */
double ah_wall_clock_s(void);

#endif
