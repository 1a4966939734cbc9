/* exp over 1024 floats two ways, as a softmax row computes it: glibc's libmvec (_ZGVeN16v_expf, a call per 16
 * lanes, what kgen's C prelude uses) and an inline AVX-512 exp (Cody-Waite range reduction, Cephes' polynomial,
 * one vscalefps for 2^n, which handles overflow and subnormal results; clamping with the constant first keeps
 * NaN). Prints the inline one's largest error in ulps against exp in double over 16M random bit patterns (and
 * whether NaN, the infinities, overflow and underflow come out right), then three rounds of both timings.
 * The reference for the softmax note in bench/results/standing-amd-2026-12-07.md.
 * usage: bench/hand/run.sh expf */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
__attribute__((simd("notinbranch"), const)) float expf(float);
static inline __m512 vexp(__m512 x) {
  __m512 xc = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
}
__attribute__((noinline)) static void f_lib(const float *restrict x, float *restrict y, int len, float m) {
#pragma omp simd
  for (int i = 0; i < len; i++) y[i] = expf(x[i] - m);
}
__attribute__((noinline)) static void f_v(const float *restrict x, float *restrict y, int len, float m) {
  __m512 mm = _mm512_set1_ps(m);
  for (int i = 0; i < len; i += 16) _mm512_storeu_ps(y + i, vexp(_mm512_sub_ps(_mm512_loadu_ps(x + i), mm)));
}
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
int main(void) {
  enum { N = 1 << 20 };
  static float x[N], y[N];
  uint32_t s = 1;
  double worst = 0;
  long bad = 0;
  for (int rep = 0; rep < 16; rep++) {
    for (int i = 0; i < N; i++) {
      s = s * 1664525u + 1013904223u;
      memcpy(&x[i], &s, 4);
    }
    x[0] = NAN, x[1] = INFINITY, x[2] = -INFINITY, x[3] = 88.72f, x[4] = -87.5f, x[5] = -103.9f, x[6] = 0;
    f_v(x, y, N, 0.0f);
    for (int i = 0; i < N; i++) {
      float rf = (float)exp((double)x[i]);
      if (isnan(x[i]) || isinf(rf) || rf == 0) {
        bad += isnan(x[i]) ? !isnan(y[i]) : (y[i] != rf && fabsf(y[i] - rf) > 3e-45f);
        continue;
      }
      double ulp = (double)nextafterf(fabsf(rf), INFINITY) - fabsf(rf), e = fabs(y[i] - exp((double)x[i])) / ulp;
      if (e > worst) worst = e;
    }
  }
  printf("inline vscalef exp: largest error %.2f ulp over %d values, %ld special cases wrong\n", worst, 16 * N, bad);
  static float a[1024], b[1024];
  for (int i = 0; i < 1024; i++) a[i] = (float)((i * 37) % 1000) / 10.0f - 50.0f;
  for (int round = 0; round < 3; round++) {
    double t0 = now();
    for (int r = 0; r < 20000; r++) f_lib(a, b, 1024, (float)(r & 1));
    double t1 = now();
    for (int r = 0; r < 20000; r++) f_v(a, b, 1024, (float)(r & 1));
    double t2 = now();
    printf("libmvec %.3f ns/element, inline vscalef %.3f ns/element\n", (t1 - t0) / 20000 / 1024 * 1e9,
           (t2 - t1) / 20000 / 1024 * 1e9);
  }
  return 0;
}
