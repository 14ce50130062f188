/* Small statistics shared by the verification reports. */
#ifndef AUTOHET_UTIL_STATS_H
#define AUTOHET_UTIL_STATS_H

/* Kendall's tau between the rankings by a[] and by b[] over the n items with
 * both values > 0 (items without one, e.g. a failed simulation, are left out):
 * (concordant - discordant) / (concordant + discordant); 1 with no pair. */
double ah_kendall_tau(const double *a, const double *b, int n);

/* The median of v[0..n-1] (sorted in place; the mean of the middle two when n is even); 0 when n < 1. */
double ah_median(double *v, int n);

#endif
