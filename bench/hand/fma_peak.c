/* The machine's peak of f32 multiply-adds: the compute roof of a compute-bound kernel (conv2d, matmul), as
 * bench/copy_bw.c is the memory roof. Each OpenMP thread runs ACC independent chains of FMAs on registers, 512-bit
 * (AVX-512) and 256-bit (AVX2), long enough for the latency of each to hide behind the others; the distinct
 * starting values and the empty asm keep the compiler from merging the chains or hoisting the products.
 *   fma_peak [SECONDS]   (threads: OMP_NUM_THREADS)
 * Prints, per width, the FMA instructions per second of one thread and of all of them, and GFLOP/s (2 flops per
 * lane). On the 2-core AMD EPYC (2026-12-07): one 512-bit or two 256-bit FMAs per cycle and core, about 115
 * GFLOP/s per core (a first version, whose chains gcc had merged into one, had suggested three times that). */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ACC = 24 };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define RUN(T, SET1, FMA, ADD, LANES)                                                                              \
  static double run_##T(long iters, float *sink) {                                                                 \
    T a[ACC], k = SET1(0.999f), x = SET1(1e-4f);                                                                   \
    for (int j = 0; j < ACC; j++) a[j] = SET1(0.5f + 0.01f * (float)j);                                            \
    double t0 = now_s();                                                                                           \
    for (long i = 0; i < iters; i++) {                                                                             \
      __asm__("" : "+v"(x), "+v"(k));                                                                              \
      _Pragma("GCC unroll 24") for (int j = 0; j < ACC; j++) a[j] = FMA(a[j], k, x);                               \
    }                                                                                                              \
    double t = now_s() - t0;                                                                                       \
    T s = a[0];                                                                                                    \
    for (int j = 1; j < ACC; j++) s = ADD(s, a[j]);                                                                \
    float v[LANES];                                                                                                \
    memcpy(v, &s, sizeof v);                                                                                       \
    *sink += v[0];                                                                                                 \
    return t;                                                                                                      \
  }
#ifdef __AVX512F__
RUN(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, 16)
#endif
#ifdef __AVX2__
RUN(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, 8)
#endif

static void report(const char *what, int lanes, double (*fn)(long, float *), double seconds) {
  int nt = omp_get_max_threads();
  double rate_one = 0, rate_all = 0;
  float sink = 0;
  /* calibrate: iterations for about the asked time on one thread */
  long iters = 1000000;
  double t = fn(iters, &sink);
  iters = (long)(iters * seconds / (t > 1e-6 ? t : 1e-6));
  if (iters < 1000) iters = 1000;
  rate_one = (double)iters * ACC / fn(iters, &sink);
  double worst = 0;
#pragma omp parallel reduction(max : worst) reduction(+ : sink)
  {
    double tt = fn(iters, &sink);
    if (tt > worst) worst = tt;
  }
  rate_all = (double)iters * ACC * nt / worst;
  printf("%s: one thread %.2f G FMA/s (%.1f GFLOP/s); %d threads %.2f G FMA/s (%.1f GFLOP/s)%s\n", what,
         rate_one * 1e-9, rate_one * 2 * lanes * 1e-9, nt, rate_all * 1e-9, rate_all * 2 * lanes * 1e-9,
         sink == 12345.0f ? " " : "");
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 0.5;
#ifdef __AVX512F__
  report("512-bit", 16, run___m512, seconds);
#endif
#ifdef __AVX2__
  report("256-bit", 8, run___m256, seconds);
#endif
#if !defined(__AVX2__)
  (void)seconds;
  puts("fma_peak: needs AVX2 or AVX-512");
#endif
  return 0;
}
