/* The measured time of one message: the piecewise alpha-beta model of a
 * comm profile's point-to-point `latency` fit (autohet commbench --json,
 * docs/commbench.md), read once here for the planner, the simulator and the
 * stack breakdown of autohet analyze. */
#ifndef AUTOHET_LINK_MODEL_H
#define AUTOHET_LINK_MODEL_H
#include <stddef.h>

/* t(m) = alpha + m / beta of the regime m falls in (the first with
 * max_bytes >= m, the last beyond them all); n = 0: no model. */
#define AH_LINK_MAX_REGIMES 8
/* What a comm profile's figures may be: a bandwidth from 1 kB/s up (a fit
 * with no visible bandwidth term writes 1e9 GB/s), a latency or regime
 * intercept within 1000 s; beyond, a time in nanoseconds overflows. */
#define AH_LINK_MIN_GBPS 1e-6
#define AH_LINK_MAX_GBPS 1e12
#define AH_LINK_MAX_ABS_US 1e9
/* What a measurement can give, tighter than the guards above: a link's bandwidth (a fit's large-message beta,
 * a links{} matrix entry) from 100 kB/s, well below the 10 Mbit/s (1.25e-3 GB/s) tests/cli_hosts_commbench.sh
 * throttles a host to; a latency (a fit's small-message alpha) up to 1 s. A middle regime's beta may be far
 * lower (a protocol step between two small sizes, such as a delayed ACK), so only the guard applies to it. */
#define AH_LINK_MIN_MEASURED_GBPS 1e-4
#define AH_LINK_MAX_LATENCY_US 1e6
typedef struct {
    int n;
    double max_bytes[AH_LINK_MAX_REGIMES]; /* the last regime's is ignored */
    double alpha_us[AH_LINK_MAX_REGIMES], beta_GBps[AH_LINK_MAX_REGIMES];
    char source[160]; /* where the figures came from, for the report */
} ah_link_model;

/* alpha 5 us (the planner's default intra-node latency) and beta 10 GB/s (the
 * "cpu" device's intra-node link): the model without a comm profile */
void ah_link_model_default(ah_link_model *m);
/* The `latency` fit (one-way ping-pong time, osu_latency) of a comm profile
 * for link_class ("intra-node" / "inter-node"; NULL: the intra-node one, else
 * the first). Returns 0; 1 when the profile has no such fit (m->n = 0); or -1
 * with a message naming the file and field. */
int ah_link_model_read_class(const char *path, const char *link_class, ah_link_model *m, char *err,
                             size_t errlen);
/* The same for NULL, a missing fit being an error (-1) */
int ah_link_model_read(const char *path, ah_link_model *m, char *err, size_t errlen);
/* microseconds for one message of `bytes` (at least the first regime's latency) */
double ah_link_us(const ah_link_model *m, double bytes);
/* What a link carries with flows at once as a multiple of one flow, from a comm profile's shared-link pair
 * (aggregate GB/s of the flows at once, GB/s of one flow measured the same way): their ratio, at least 1;
 * 1 where either is missing (<= 0). The one reading of links{}' shared matrices. */
double ah_link_shared_gain(double all_gbs, double one_gbs);

#endif
