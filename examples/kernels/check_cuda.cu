/* A CUDA program using kgen's exported CUDA headers for matmul and softmax, the way any user program would: one
 * #include per workload, no kgen library at run time; the header loads libcuda itself and launches its cubin (or
 * JIT-compiles its PTX on an arch it has no cubin for). For every kernel the headers hold (every tuned size binding,
 * listed by kg_<name>_sizes), it runs the kernel through the size dispatcher on random data on the stream it made
 * and checks up to 64 evenly spaced rows of the result against a plain C loop on the host.
 *
 * Build on a GPU machine, with the headers `kgen export LOG --target cuda --arch sm_90 --out DIR` wrote:
 *   nvcc -O2 -IDIR examples/kernels/check_cuda.cu -o check_cuda          (links cudart for the allocations)
 * Build for kgen's CUDA emulator (tests; host memory, no GPU):
 *   g++ -std=c++17 -x c++ -DKG_EMULATE -include runtime/cuda_emu.h -IDIR examples/kernels/check_cuda.cu
 * Exit status 0 when every kernel matches, 1 otherwise. */
#define KG_IMPLEMENTATION
#include "matmul.h"
#include "softmax.h"

#ifndef KG_EMULATE
#include <math.h> /* under the emulator, runtime/cuda_emu.h has declared the math (and clashes with math.h) */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KG_EMULATE
/* the emulator runs kernels on host memory, synchronously */
static int dev_alloc(float **p, size_t bytes) { return (*p = (float *)malloc(bytes)) ? 0 : 1; }
static void dev_free(float *p) { free(p); }
static int to_dev(float *d, const float *h, size_t bytes) { memcpy(d, h, bytes); return 0; }
static int to_host(float *h, const float *d, size_t bytes) { memcpy(h, d, bytes); return 0; }
static int dev_sync(CUstream s) { (void)s; return 0; }
static CUstream make_stream(void) { return 0; }
static void free_stream(CUstream s) { (void)s; }
#else
#include <cuda_runtime.h>
static int dev_alloc(float **p, size_t bytes) { return cudaMalloc((void **)p, bytes) != cudaSuccess; }
static void dev_free(float *p) { cudaFree(p); }
static int to_dev(float *d, const float *h, size_t bytes) {
  return cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess;
}
static int to_host(float *h, const float *d, size_t bytes) {
  return cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost) != cudaSuccess;
}
/* the runtime's cudaStream_t and the driver's CUstream are the same handle */
static int dev_sync(CUstream s) { return cudaStreamSynchronize((cudaStream_t)s) != cudaSuccess; }
static CUstream make_stream(void) {
  cudaStream_t s = 0;
  if (cudaStreamCreate(&s) != cudaSuccess) return 0;
  return (CUstream)s;
}
static void free_stream(CUstream s) { if (s) cudaStreamDestroy((cudaStream_t)s); }
#endif

static int failures;

static float *random_array(size_t n, unsigned *seed) {
  float *a = (float *)malloc(sizeof(float) * (n ? n : 1));
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

static float *upload(const float *h, size_t n) {
  float *d = NULL;
  if (dev_alloc(&d, sizeof(float) * (n ? n : 1)) || (h && to_dev(d, h, sizeof(float) * n))) {
    fprintf(stderr, "cannot allocate or copy %zu floats on the device\n", n);
    exit(2);
  }
  return d;
}

/* Row i of the checked rows: at most 64, evenly spaced, first and last included. */
static int64_t checked_row(int64_t k, int64_t nrows, int64_t *count) {
  *count = nrows < 64 ? nrows : 64;
  return *count == 1 ? 0 : k * (nrows - 1) / (*count - 1);
}

static void report(const char *what, int rc, double worst) {
  if (rc != 0) {
    printf("%-40s FAILED: %s (%d)\n", what, kg_strerror(rc), rc);
    failures++;
    return;
  }
  int ok = worst <= 1e-3;
  printf("%-40s %s max_rel_err=%.2g (64 rows checked at most)\n", what, ok ? "ok" : "MISMATCH", worst);
  if (!ok) failures++;
}

static double rel_err(double got, double want, double scale) {
  double e = fabs(got - want) / fmax(fabs(want), 1e-2 * scale);
  return e == e ? e : 1e300;
}

static void check_matmul(CUstream stream, unsigned *seed) {
  int64_t sz[3];
  for (int k = 0; kg_matmul_sizes(k, sz) == 0; k++) {
    int64_t M = sz[0], K = sz[1], N = sz[2];
    float *A = random_array((size_t)(M * K), seed), *B = random_array((size_t)(K * N), seed);
    float *C = (float *)malloc(sizeof(float) * (size_t)(M * N));
    float *dA = upload(A, (size_t)(M * K)), *dB = upload(B, (size_t)(K * N)), *dC = upload(NULL, (size_t)(M * N));
    int rc = kg_matmul_dispatch(stream, M, K, N, dA, dB, dC);
    if (rc == 0) rc = dev_sync(stream) ? 700 : 0;
    if (rc == 0 && to_host(C, dC, sizeof(float) * (size_t)(M * N))) rc = 700;
    double worst = 0, scale = 0, *want = (double *)malloc(sizeof(double) * (size_t)N);
    int64_t count;
    for (int64_t r = 0; r < (checked_row(0, M, &count), count) && rc == 0; r++) {
      int64_t i = checked_row(r, M, &count);
      for (int64_t j = 0; j < N; j++) want[j] = 0;
      for (int64_t kk = 0; kk < K; kk++)
        for (int64_t j = 0; j < N; j++) want[j] += (double)A[i * K + kk] * B[kk * N + j];
      for (int64_t j = 0; j < N; j++) scale = fmax(scale, fabs(want[j]));
      for (int64_t j = 0; j < N; j++) worst = fmax(worst, rel_err(C[i * N + j], want[j], scale));
    }
    char what[128];
    snprintf(what, sizeof what, "matmul M=%lld K=%lld N=%lld", (long long)M, (long long)K, (long long)N);
    report(what, rc, worst);
    dev_free(dA), dev_free(dB), dev_free(dC);
    free(A), free(B), free(C), free(want);
  }
  float *none = NULL;
  if (kg_matmul_dispatch(stream, 3, 5, 7, none, none, none) != KG_ERR_NO_KERNEL) {
    printf("matmul M=3 K=5 N=7: the dispatcher did not answer KG_ERR_NO_KERNEL\n");
    failures++;
  }
}

static void check_softmax(CUstream stream, unsigned *seed) {
  int64_t sz[2];
  for (int k = 0; kg_softmax_sizes(k, sz) == 0; k++) {
    int64_t N = sz[0], D = sz[1];
    float *X = random_array((size_t)(N * D), seed), *Y = (float *)malloc(sizeof(float) * (size_t)(N * D));
    float *dX = upload(X, (size_t)(N * D)), *dY = upload(NULL, (size_t)(N * D));
    int rc = kg_softmax_dispatch(stream, N, D, dX, dY);
    if (rc == 0) rc = dev_sync(stream) ? 700 : 0;
    if (rc == 0 && to_host(Y, dY, sizeof(float) * (size_t)(N * D))) rc = 700;
    double worst = 0;
    int64_t count;
    for (int64_t r = 0; r < (checked_row(0, N, &count), count) && rc == 0; r++) {
      int64_t i = checked_row(r, N, &count);
      double m = -1e300, s = 0;
      for (int64_t j = 0; j < D; j++) m = fmax(m, X[i * D + j]);
      for (int64_t j = 0; j < D; j++) s += exp(X[i * D + j] - m);
      for (int64_t j = 0; j < D; j++) worst = fmax(worst, rel_err(Y[i * D + j], exp(X[i * D + j] - m) / s, 1.0 / D));
    }
    char what[128];
    snprintf(what, sizeof what, "softmax N=%lld D=%lld", (long long)N, (long long)D);
    report(what, rc, worst);
    dev_free(dX), dev_free(dY);
    free(X), free(Y);
  }
}

int main(void) {
  unsigned seed = 12345;
  CUstream stream = make_stream();
  int rc = kg_matmul_load();
  if (rc == 0) rc = kg_softmax_load();
  if (rc != 0) {
    printf("cannot load the kernels: %s (%d)\n", kg_strerror(rc), rc);
    return 1;
  }
  check_matmul(stream, &seed);
  check_softmax(stream, &seed);
  kg_matmul_unload();
  kg_softmax_unload();
  free_stream(stream);
  printf("%s\n", failures ? "FAILED" : "all kernels match");
  return failures ? 1 : 0;
}
