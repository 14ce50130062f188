#include "util/intervals.h"

#include <stdlib.h>

static int cmp_pair(const void *x, const void *y) {
    const double *a = x, *b = y;
    return (a[0] > b[0]) - (a[0] < b[0]);
}

int ah_intervals_merge(double *v, int pairs) {
    if (pairs <= 0) /* v may be NULL: a stage with no communication at all (one GPU) */
        return 0;
    qsort(v, (size_t)pairs, 2 * sizeof(double), cmp_pair);
    int n = 0;
    for (int i = 0; i < pairs; i++) {
        if (n > 0 && v[2 * i] <= v[2 * n - 1]) {
            if (v[2 * i + 1] > v[2 * n - 1])
                v[2 * n - 1] = v[2 * i + 1];
        } else {
            v[2 * n] = v[2 * i];
            v[2 * n + 1] = v[2 * i + 1];
            n++;
        }
    }
    return n;
}

double ah_intervals_minus(const double *a, int na, const double *b, int nb) {
    double total = 0;
    int j = 0;
    for (int i = 0; i < na; i++) {
        double s = a[2 * i], t = a[2 * i + 1];
        while (j < nb && b[2 * j + 1] <= s)
            j++;
        double cur = s;
        for (int k = j; k < nb && b[2 * k] < t; k++) {
            if (b[2 * k] > cur)
                total += b[2 * k] - cur;
            if (b[2 * k + 1] > cur)
                cur = b[2 * k + 1];
        }
        if (t > cur)
            total += t - cur;
    }
    return total;
}

double ah_intervals_length(const double *v, int pairs) {
    double s = 0;
    for (int i = 0; i < pairs; i++)
        s += v[2 * i + 1] - v[2 * i];
    return s;
}
