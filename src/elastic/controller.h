/* The `autohet run` controller (docs/recovery.md): launches and supervises
 * the MPI training job of the current plan, one virtual node per inventory
 * node, injects preemptions (a list, a spot trace, `autohet preempt`), and on
 * every change of the node set replans and recovers from the layer bitmaps. */
#ifndef AUTOHET_ELASTIC_CONTROLLER_H
#define AUTOHET_ELASTIC_CONTROLLER_H
/* its entry points (ah_run_options, ah_run, ah_run_resume, ah_run_request_preempt,
 * ah_run_watch_rank, ah_run_heartbeat_start) are public: autohet/elastic.h */
#include "autohet/elastic.h"

#endif
