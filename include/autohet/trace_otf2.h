/* OTF2 export of a traced run (docs/analyze.md), readable by otf2-print,
 * Vampir, Score-P tools and ViTE. Built only when Debian's
 * libopen-trace-format2-dev is present (AUTOHET_HAVE_OTF2). */
#ifndef AUTOHET_TRACE_OTF2_H
#define AUTOHET_TRACE_OTF2_H

#include <stddef.h>

/* one timed operation of one rank */
typedef struct {
    int rank;
    int comm; /* 0 = compute stream, 1 = communication stream */
    double ts_us, dur_us;
    const char *region; /* call site: "forward", "dp_allreduce layers 0-3", ... */
} ah_trace_span;

/* 1 when this build can write OTF2 */
int ah_trace_otf2_available(void);

/* Writes DIR/NAME.otf2 (+ DIR/NAME/ and NAME.def): one location group per rank,
 * two locations (compute, communication), one region per distinct call site,
 * an Enter/Leave pair per span; time unit 1 ns from the earliest span.
 * Returns 0, or -1 with a one-line message in err. */
int ah_trace_write_otf2(const char *dir, const char *name, const ah_trace_span *spans, int n, int ranks,
                        char *err, size_t errlen);

#endif
