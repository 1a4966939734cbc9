/* A hand-written 4096 x 4096 f32 transpose (Y[j, i] = X[i, j]) with 16 x 16 blocks transposed in AVX-512 registers,
 * the reference lower/transpose.c was designed against (bench/results/transpose-tiles-amd-2026-12-07.md). Blocks
 * of TI rows of X by TJ of its columns, one OpenMP task each; prints the best of 30 runs and checks the result.
 * usage: bench/hand/run.sh transpose [TI TJ] */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
#include <omp.h>
#define M 4096
#define N 4096
static inline void tr16(const float *src, int64_t ss, float *dst, int64_t ds) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ss);
  for (int i = 0; i < 8; i++) {
    t[2*i] = _mm512_unpacklo_ps(r[2*i], r[2*i+1]);
    t[2*i+1] = _mm512_unpackhi_ps(r[2*i], r[2*i+1]);
  }
  for (int i = 0; i < 4; i++) {
    r[4*i]   = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[4*i]), _mm512_castps_pd(t[4*i+2])));
    r[4*i+1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[4*i]), _mm512_castps_pd(t[4*i+2])));
    r[4*i+2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[4*i+1]), _mm512_castps_pd(t[4*i+3])));
    r[4*i+3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[4*i+1]), _mm512_castps_pd(t[4*i+3])));
  }
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) {
      t[8*i+j]   = _mm512_shuffle_f32x4(r[8*i+j], r[8*i+4+j], 0x88);
      t[8*i+4+j] = _mm512_shuffle_f32x4(r[8*i+j], r[8*i+4+j], 0xdd);
    }
  for (int j = 0; j < 8; j++) {
    r[j]   = _mm512_shuffle_f32x4(t[j], t[8+j], 0x88);
    r[8+j] = _mm512_shuffle_f32x4(t[j], t[8+j], 0xdd);
  }
  /* r[k] now holds column k of the block */
  for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ds, r[i]);
}
int main(int argc, char **argv) {
  int TI = argc > 1 ? atoi(argv[1]) : 64, TJ = argc > 2 ? atoi(argv[2]) : 64;
  if (TI < 16 || TJ < 16 || TI % 16 || TJ % 16 || M % TI || N % TJ) {
    fprintf(stderr, "TI and TJ must be multiples of 16 that divide %d and %d\n", M, N);
    return 2;
  }
  float *X = aligned_alloc(64, sizeof(float) * M * N), *Y = aligned_alloc(64, sizeof(float) * M * N);
  for (int64_t i = 0; i < (int64_t)M * N; i++) X[i] = (float)(i % 1000003);
  double best = 1e9;
  for (int rep = 0; rep < 30; rep++) {
    double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
    for (int64_t bt = 0; bt < (M / TI) * (N / TJ); bt++) {
      int64_t i0 = (bt / (N / TJ)) * TI, j0 = (bt % (N / TJ)) * TJ;
      for (int64_t jj = 0; jj < TJ; jj += 16)
        for (int64_t ii = 0; ii < TI; ii += 16)
          tr16(X + (i0 + ii) * N + j0 + jj, N, Y + (j0 + jj) * M + i0 + ii, M);
    }
    double t = omp_get_wtime() - t0;
    if (t < best) best = t;
  }
  int bad = 0;
  for (int64_t i = 0; i < M; i += 7)
    for (int64_t j = 0; j < N; j += 13) bad += Y[j * M + i] != X[i * N + j];
  printf("TI=%d TJ=%d best %.2f ms  %.1f GB/s %s\n", TI, TJ, best * 1e3, 2.0 * M * N * 4 / best / 1e9,
         bad ? "WRONG" : "ok");
  free(X);
  free(Y);
  return bad != 0;
}
