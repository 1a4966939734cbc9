#include "stats.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "xalloc.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

kg_stats kg_stats_of(const double *x, int n) {
  kg_stats s;
  memset(&s, 0, sizeof s);
  if (n <= 0 || !x) return s;
  s.n = n;
  for (int i = 0; i < n; i++) s.nnan += isnan(x[i]) != 0;
  if (s.nnan) {
    /* qsort's order is undefined with a NaN (it compares unordered to everything) */
    s.median = s.min = s.max = s.spread = NAN;
    return s;
  }
  double small[64];
  double *t = n <= 64 ? small : kg_xrealloc(NULL, sizeof(double) * (size_t)n);
  memcpy(t, x, sizeof(double) * (size_t)n);
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  s.min = t[0];
  s.max = t[n - 1];
  s.median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
  s.spread = s.median > 0 ? (s.max - s.min) / s.median : 0;
  if (t != small) free(t);
  return s;
}
