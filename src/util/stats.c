#include "util/stats.h"

#include <stdlib.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ah_median(double *v, int n) {
    if (n < 1)
        return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double ah_kendall_tau(const double *a, const double *b, int n) {
    long long conc = 0, disc = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (!(a[i] > 0 && a[j] > 0 && b[i] > 0 && b[j] > 0))
                continue;
            double d = (a[i] - a[j]) * (b[i] - b[j]);
            conc += d > 0;
            disc += d < 0;
        }
    return conc + disc > 0 ? (double)(conc - disc) / (double)(conc + disc) : 1.0;
}
