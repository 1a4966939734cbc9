/* A plain C program including a kernel kgen exported from a tuning log (matvec, from tuning_logs/matvec.c.kglog),
 * built by examples/cmake/CMakeLists.txt through the installed package's kgen_add_kernels. It runs every tuned size
 * binding of the header on random data and checks it against a plain loop. Exit status 0 when all match. */
#define KG_IMPLEMENTATION
#include "matvec.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  int bad = 0, n = 0;
  int64_t sz[2]; /* M, K: the def's sizes in order */
  for (int k = 0; kg_matvec_sizes(k, sz) == 0; k++, n++) {
    int64_t M = sz[0], K = sz[1];
    float *A = malloc((size_t)(M * K) * sizeof *A), *x = malloc((size_t)K * sizeof *x),
          *y = malloc((size_t)M * sizeof *y);
    if (!A || !x || !y) return 2;
    srand(7);
    for (int64_t i = 0; i < M * K; i++) A[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int64_t i = 0; i < K; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    int rc = kg_matvec_dispatch(M, K, A, x, y);
    if (rc != 0) {
      printf("matvec M=%lld K=%lld: %s\n", (long long)M, (long long)K, kg_strerror(rc));
      bad = 1;
    }
    for (int64_t i = 0; i < M && rc == 0; i++) {
      double want = 0;
      for (int64_t j = 0; j < K; j++) want += (double)A[i * K + j] * x[j];
      if (fabs(y[i] - want) > 1e-3 * (1 + fabs(want))) {
        printf("matvec M=%lld K=%lld: y[%lld] = %g, want %g\n", (long long)M, (long long)K, (long long)i, y[i], want);
        bad = 1;
        break;
      }
    }
    if (!bad) printf("matvec M=%lld K=%lld ok\n", (long long)M, (long long)K);
    free(A);
    free(x);
    free(y);
  }
  if (n == 0) {
    printf("the header has no kernels\n");
    bad = 1;
  }
  return bad;
}
