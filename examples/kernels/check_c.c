/* A C program using kgen's exported headers the way any user program would: one #include per workload, no kgen
 * library, no kgen at run time. For every kernel the headers hold (every tuned size binding, listed by
 * kg_<name>_sizes), it runs the kernel through the size dispatcher on random data and checks it against a plain C
 * loop written here from the workload's definition (te/lib/NAME.te, bench/workloads/conv2d_3x3.te), timing both.
 *
 * Build (what `make` does, with the headers `make kernels` exports from tuning_logs/ into build/kernels/c):
 *   cc -std=c11 -O3 -march=native -fopenmp -Ibuild/kernels/c examples/kernels/check_c.c -lm -o check_c
 * Exit status 0 when every kernel matches, 1 otherwise. */
#define KG_IMPLEMENTATION
#include "matmul.h"
#include "softmax.h"
#include "layernorm.h"
#include "bias_gelu_residual.h"
#include "conv2d_3x3.h"
#include "attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int failures;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The kernel's time: its best of three calls after a first one (which starts OpenMP's threads and faults the
 * temporaries' pages in). rc keeps the first call's status. */
#define TIME_KERNEL(t, rc, call)                         \
  do {                                                  \
    (rc) = (call);                                      \
    (t) = 1e30;                                         \
    for (int rep_ = 0; rep_ < 3 && (rc) == 0; rep_++) { \
      double s_ = now();                                \
      (void)(call);                                     \
      s_ = now() - s_;                                  \
      if (s_ < (t)) (t) = s_;                           \
    }                                                   \
  } while (0)

static float *random_array(size_t n, unsigned *seed) {
  float *a = malloc(sizeof(float) * (n ? n : 1));
  if (!a) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    a[i] = (float)((*seed >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
  }
  return a;
}

/* The kernel's output against the plain loop's: |got - want| / max(|want|, 1e-2 * max |want|), as kgen's own
 * verification measures it; f32 kernels that sum in another order stay well within 1e-3. */
static void compare(const char *what, const float *got, const double *want, size_t n, int rc, double t_kernel,
                    double t_plain) {
  if (rc != 0) {
    printf("%-44s FAILED: %s\n", what, kg_strerror(rc));
    failures++;
    return;
  }
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
  for (size_t i = 0; i < n; i++) {
    double e = fabs(got[i] - want[i]) / fmax(fabs(want[i]), 1e-2 * scale);
    if (!(e <= worst)) worst = e; /* NaN counts as the worst */
  }
  int ok = worst <= 1e-3;
  printf("%-44s %s max_rel_err=%.2g  kernel %.3f ms, plain loop %.3f ms\n", what, ok ? "ok" : "MISMATCH", worst,
         t_kernel * 1e3, t_plain * 1e3);
  if (!ok) failures++;
}

static void check_matmul(unsigned *seed) {
  int64_t sz[3];
  for (int k = 0; kg_matmul_sizes(k, sz) == 0; k++) {
    int64_t M = sz[0], K = sz[1], N = sz[2];
    float *A = random_array((size_t)(M * K), seed), *B = random_array((size_t)(K * N), seed);
    float *C = malloc(sizeof(float) * (size_t)(M * N));
    double *want = calloc((size_t)(M * N), sizeof(double));
    int rc;
    double t_kernel;
    TIME_KERNEL(t_kernel, rc, kg_matmul_dispatch(M, K, N, A, B, C));
    double t1 = now();
    for (int64_t i = 0; i < M; i++)
      for (int64_t kk = 0; kk < K; kk++)
        for (int64_t j = 0; j < N; j++) want[i * N + j] += (double)A[i * K + kk] * B[kk * N + j];
    char what[128];
    snprintf(what, sizeof what, "matmul M=%lld K=%lld N=%lld", (long long)M, (long long)K, (long long)N);
    compare(what, C, want, (size_t)(M * N), rc, t_kernel, now() - t1);
    free(A), free(B), free(C), free(want);
  }
  /* sizes no kernel was tuned for: the dispatcher says so */
  float x = 0;
  if (kg_matmul_dispatch(3, 5, 7, &x, &x, &x) != KG_ERR_NO_KERNEL) {
    printf("matmul M=3 K=5 N=7: the dispatcher did not answer KG_ERR_NO_KERNEL\n");
    failures++;
  }
}

static void check_softmax(unsigned *seed) {
  int64_t sz[2];
  for (int k = 0; kg_softmax_sizes(k, sz) == 0; k++) {
    int64_t N = sz[0], D = sz[1];
    float *X = random_array((size_t)(N * D), seed), *Y = malloc(sizeof(float) * (size_t)(N * D));
    double *want = malloc(sizeof(double) * (size_t)(N * D));
    int rc;
    double t_kernel;
    TIME_KERNEL(t_kernel, rc, kg_softmax_dispatch(N, D, X, Y));
    double t1 = now();
    for (int64_t i = 0; i < N; i++) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < D; j++) m = fmax(m, X[i * D + j]);
      for (int64_t j = 0; j < D; j++) s += exp(X[i * D + j] - m);
      for (int64_t j = 0; j < D; j++) want[i * D + j] = exp(X[i * D + j] - m) / s;
    }
    char what[128];
    snprintf(what, sizeof what, "softmax N=%lld D=%lld", (long long)N, (long long)D);
    compare(what, Y, want, (size_t)(N * D), rc, t_kernel, now() - t1);
    free(X), free(Y), free(want);
  }
}

static void check_layernorm(unsigned *seed) {
  int64_t sz[2];
  for (int k = 0; kg_layernorm_sizes(k, sz) == 0; k++) {
    int64_t N = sz[0], D = sz[1];
    float *X = random_array((size_t)(N * D), seed), *g = random_array((size_t)D, seed), *b = random_array((size_t)D, seed);
    float *Y = malloc(sizeof(float) * (size_t)(N * D));
    double *want = malloc(sizeof(double) * (size_t)(N * D));
    int rc;
    double t_kernel;
    TIME_KERNEL(t_kernel, rc, kg_layernorm_dispatch(N, D, X, g, b, Y));
    double t1 = now();
    for (int64_t i = 0; i < N; i++) {
      double mu = 0, v = 0;
      for (int64_t j = 0; j < D; j++) mu += X[i * D + j];
      mu /= (double)D;
      for (int64_t j = 0; j < D; j++) v += (X[i * D + j] - mu) * (X[i * D + j] - mu);
      v /= (double)D;
      for (int64_t j = 0; j < D; j++) want[i * D + j] = (X[i * D + j] - mu) / sqrt(v + 1e-5) * g[j] + b[j];
    }
    char what[128];
    snprintf(what, sizeof what, "layernorm N=%lld D=%lld", (long long)N, (long long)D);
    compare(what, Y, want, (size_t)(N * D), rc, t_kernel, now() - t1);
    free(X), free(g), free(b), free(Y), free(want);
  }
}

static void check_bias_gelu_residual(unsigned *seed) {
  int64_t sz[2];
  for (int k = 0; kg_bias_gelu_residual_sizes(k, sz) == 0; k++) {
    int64_t N = sz[0], D = sz[1];
    float *X = random_array((size_t)(N * D), seed), *bias = random_array((size_t)D, seed);
    float *R = random_array((size_t)(N * D), seed), *Y = malloc(sizeof(float) * (size_t)(N * D));
    double *want = malloc(sizeof(double) * (size_t)(N * D));
    int rc;
    double t_kernel;
    TIME_KERNEL(t_kernel, rc, kg_bias_gelu_residual_dispatch(N, D, X, bias, R, Y));
    double t1 = now();
    for (int64_t i = 0; i < N * D; i++) {
      double h = (double)X[i] + bias[i % D];
      want[i] = 0.5 * h * (1.0 + erf(h * 0.7071067811865476)) + R[i];
    }
    char what[128];
    snprintf(what, sizeof what, "bias_gelu_residual N=%lld D=%lld", (long long)N, (long long)D);
    compare(what, Y, want, (size_t)(N * D), rc, t_kernel, now() - t1);
    free(X), free(bias), free(R), free(Y), free(want);
  }
}

static void check_conv2d_3x3(unsigned *seed) {
  int64_t sz[5];
  for (int k = 0; kg_conv2d_3x3_sizes(k, sz) == 0; k++) {
    int64_t N = sz[0], C = sz[1], H = sz[2], W = sz[3], F = sz[4];
    float *X = random_array((size_t)(N * C * H * W), seed), *K = random_array((size_t)(F * C * 9), seed);
    float *Y = malloc(sizeof(float) * (size_t)(N * F * H * W));
    double *want = calloc((size_t)(N * F * H * W), sizeof(double));
    int rc;
    double t_kernel;
    TIME_KERNEL(t_kernel, rc, kg_conv2d_3x3_dispatch(N, C, H, W, F, X, K, Y));
    double t1 = now();
    /* stride 1, padding 1: the output has the input's height and width */
    for (int64_t n = 0; n < N; n++)
      for (int64_t f = 0; f < F; f++)
        for (int64_t c = 0; c < C; c++)
          for (int64_t r = 0; r < 3; r++)
            for (int64_t s = 0; s < 3; s++)
              for (int64_t y = 0; y < H; y++)
                for (int64_t x = 0; x < W; x++) {
                  int64_t h = y + r - 1, w = x + s - 1;
                  if (h < 0 || h >= H || w < 0 || w >= W) continue;
                  want[((n * F + f) * H + y) * W + x] += (double)X[((n * C + c) * H + h) * W + w] * K[(f * C + c) * 9 + r * 3 + s];
                }
    char what[128];
    snprintf(what, sizeof what, "conv2d_3x3 N=%lld C=%lld H=%lld W=%lld F=%lld", (long long)N, (long long)C,
             (long long)H, (long long)W, (long long)F);
    compare(what, Y, want, (size_t)(N * F * H * W), rc, t_kernel, now() - t1);
    free(X), free(K), free(Y), free(want);
  }
}

static void check_attention(unsigned *seed) {
  int64_t sz[5];
  for (int k = 0; kg_attention_sizes(k, sz) == 0; k++) {
    int64_t B = sz[0], S = sz[1], D = sz[2], T = sz[3], E = sz[4];
    float *Q = random_array((size_t)(B * S * D), seed), *K = random_array((size_t)(B * T * D), seed);
    float *V = random_array((size_t)(B * T * E), seed), *O = malloc(sizeof(float) * (size_t)(B * S * E));
    double *want = calloc((size_t)(B * S * E), sizeof(double)), *p = malloc(sizeof(double) * (size_t)T);
    int rc;
    double t_kernel;
    TIME_KERNEL(t_kernel, rc, kg_attention_dispatch(B, S, D, T, E, Q, K, V, O));
    double t1 = now();
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < S; i++) {
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < T; j++) {
          double s = 0;
          for (int64_t d = 0; d < D; d++) s += (double)Q[(b * S + i) * D + d] * K[(b * T + j) * D + d];
          p[j] = s / sqrt((double)D);
          m = fmax(m, p[j]);
        }
        for (int64_t j = 0; j < T; j++) sum += p[j] = exp(p[j] - m);
        for (int64_t j = 0; j < T; j++)
          for (int64_t c = 0; c < E; c++) want[(b * S + i) * E + c] += p[j] * V[(b * T + j) * E + c] / sum;
      }
    char what[128];
    snprintf(what, sizeof what, "attention B=%lld S=%lld D=%lld T=%lld E=%lld", (long long)B, (long long)S,
             (long long)D, (long long)T, (long long)E);
    compare(what, O, want, (size_t)(B * S * E), rc, t_kernel, now() - t1);
    free(Q), free(K), free(V), free(O), free(want), free(p);
  }
}

int main(void) {
  unsigned seed = 12345;
  check_matmul(&seed);
  check_softmax(&seed);
  check_layernorm(&seed);
  check_bias_gelu_residual(&seed);
  check_conv2d_3x3(&seed);
  check_attention(&seed);
  printf("%s\n", failures ? "FAILED" : "all kernels match");
  return failures ? 1 : 0;
}
