/* kgen's vector exp, erf and tanh (the C prelude's kg_expf, kg_erff, kg_tanhf, codegen/c.c) against glibc's libmvec
 * expf, erff and tanhf, which kgen's kernels called before: ns per element over a vector loop of 1024 floats in
 * cache, 1 thread, exp as softmax calls it (x - max), erf as GELU does (0.5 h (1 + erf(h / sqrt 2))), tanh
 * alone; three rounds.
 * bench/hand/run.sh vmath compiles it with the prelude kgen prints (kgen lower --dump c) included first. */
#include <math.h>
#include <stdio.h>
#include <time.h>
/* the kernels' own vector width (the prelude's options end with its kernels) */
#if defined(__AVX512F__)
#pragma GCC target("prefer-vector-width=512")
#endif
__attribute__((simd("notinbranch"), const)) float expf(float);
__attribute__((simd("notinbranch"), const)) float erff(float);
__attribute__((simd("notinbranch"), const)) float tanhf(float);
#define LOOPS(F, tag)                                                                                    \
  __attribute__((noinline)) static void exp_##tag(const float *restrict x, float *restrict y, int n, float m) { \
    _Pragma("omp simd") for (int i = 0; i < n; i++) y[i] = F##expf(x[i] - m);                          \
  }                                                                                                      \
  __attribute__((noinline)) static void gelu_##tag(const float *restrict x, float *restrict y, int n) {  \
    _Pragma("omp simd") for (int i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + F##erff(x[i] * 0.70710678f)); \
  }                                                                                                      \
  __attribute__((noinline)) static void tanh_##tag(const float *restrict x, float *restrict y, int n) {  \
    _Pragma("omp simd") for (int i = 0; i < n; i++) y[i] = F##tanhf(x[i]);                             \
  }
LOOPS(, libmvec)
LOOPS(kg_, kgen)
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
int main(void) {
  enum { L = 1024, R = 20000 };
  static float a[L], b[L];
  for (int i = 0; i < L; i++) a[i] = (float)((i * 37) % 1000) / 100.0f - 5.0f;
  printf("ns per element: exp libmvec, exp kgen, GELU libmvec, GELU kgen, tanh libmvec, tanh kgen\n");
  for (int round = 0; round < 3; round++) {
    double t[7];
    t[0] = now();
    for (int r = 0; r < R; r++) exp_libmvec(a, b, L, (float)(r & 1));
    t[1] = now();
    for (int r = 0; r < R; r++) exp_kgen(a, b, L, (float)(r & 1));
    t[2] = now();
    for (int r = 0; r < R; r++) gelu_libmvec(a, b, L);
    t[3] = now();
    for (int r = 0; r < R; r++) gelu_kgen(a, b, L);
    t[4] = now();
    for (int r = 0; r < R; r++) tanh_libmvec(a, b, L);
    t[5] = now();
    for (int r = 0; r < R; r++) tanh_kgen(a, b, L);
    t[6] = now();
    for (int k = 0; k < 6; k++) printf("%s%.3f", k ? " " : "", (t[k + 1] - t[k]) / R / L * 1e9);
    printf("\n");
  }
  return 0;
}
