/* Unions of time intervals, stored as [start, end) pairs in one double array:
 * how much of a timeline is busy, and how much of one activity is not hidden
 * under another (the simulator's and `autohet analyze`'s exposed communication). */
#ifndef AUTOHET_UTIL_INTERVALS_H
#define AUTOHET_UTIL_INTERVALS_H

/* Sorts and merges `pairs` intervals in place; returns the number left.
 * v may be NULL when pairs is 0. */
int ah_intervals_merge(double *v, int pairs);
/* total length of merged intervals */
double ah_intervals_length(const double *v, int pairs);
/* length of (union A) minus (union B), both merged */
double ah_intervals_minus(const double *a, int na, const double *b, int nb);

#endif
