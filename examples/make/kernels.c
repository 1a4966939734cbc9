/* A plain C program including a kernel kgen exported from a tuning log (reduce_rows, from
 * tuning_logs/reduce_rows.c.kglog), built by examples/make/Makefile through the installed kgen.mk. It runs every
 * tuned size binding of the header on random data and checks it against a plain loop. Exit status 0 when all match. */
#define KG_IMPLEMENTATION
#include "reduce_rows.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  int bad = 0, n = 0;
  int64_t sz[2]; /* N, D: the def's sizes in order */
  for (int k = 0; kg_reduce_rows_sizes(k, sz) == 0; k++, n++) {
    int64_t N = sz[0], D = sz[1];
    float *X = malloc((size_t)(N * D) * sizeof *X), *Y = malloc((size_t)N * sizeof *Y);
    if (!X || !Y) return 2;
    srand(7);
    for (int64_t i = 0; i < N * D; i++) X[i] = (float)rand() / RAND_MAX - 0.5f;
    int rc = kg_reduce_rows_dispatch(N, D, X, Y);
    if (rc != 0) {
      printf("reduce_rows N=%lld D=%lld: %s\n", (long long)N, (long long)D, kg_strerror(rc));
      bad = 1;
    }
    for (int64_t i = 0; i < N && rc == 0; i++) {
      double want = 0;
      for (int64_t j = 0; j < D; j++) want += X[i * D + j];
      if (fabs(Y[i] - want) > 1e-3 * (1 + fabs(want))) {
        printf("reduce_rows N=%lld D=%lld: Y[%lld] = %g, want %g\n", (long long)N, (long long)D, (long long)i, Y[i],
               want);
        bad = 1;
        break;
      }
    }
    if (!bad) printf("reduce_rows N=%lld D=%lld ok\n", (long long)N, (long long)D);
    free(X);
    free(Y);
  }
  if (n == 0) {
    printf("the header has no kernels\n");
    bad = 1;
  }
  return bad;
}
