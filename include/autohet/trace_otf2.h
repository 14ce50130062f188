/* OTF2 export of a traced run (docs/analyze.md), readable by otf2-print,
 * Vampir, Score-P tools and ViTE. Built only when Debian's
 * libopen-trace-format2-dev is present (AUTOHET_HAVE_OTF2). */
#ifndef AUTOHET_TRACE_OTF2_H
#define AUTOHET_TRACE_OTF2_H

#include <stddef.h>

#include "autohet/trace.h"

/* 1 when this build can write OTF2 */
int ah_trace_otf2_available(void);

/* Writes the trace records as DIR/NAME.otf2 (+ DIR/NAME/ and NAME.def): one
 * location group per rank, one location per thread of the Chrome trace
 * (stream and lane: compute, tp, p2p, dp, "p2p #2"...), one region per
 * distinct call site (ah_trace_site_name), an Enter/Leave pair per record;
 * time unit 1 ns. Without a clock correction (clk NULL or not present) times
 * count from the earliest record; with one, every location's events are on
 * its rank's own CLOCK_MONOTONIC (ns) with two ClockOffset definitions (the
 * offsets to rank 0's clock at the start and end measurements, the residual
 * as their standard deviation), which OTF2 readers interpolate to put every
 * event on rank 0's clock, and ClockProperties on rank 0's clock. Records
 * of ranks outside [0, ranks) are refused. Returns 0, or -1 with a one-line
 * message in err. */
int ah_trace_write_otf2(const char *dir, const char *name, const ah_trace_event *ev, int n, int ranks,
                        const ah_trace_clock *clk, char *err, size_t errlen);

#endif
