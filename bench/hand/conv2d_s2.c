/* A hand-written stride-2 3x3 convolution (te/lib/conv2d.te at N=1 C=64 56x56 F=128, padding 1) with the output
 * channels in the AVX-512 lanes: the weights packed [F/16][C][3][3][16], each of XT consecutive output pixels'
 * input value broadcast, XT x 16 accumulators in registers. The form lower/unrollidx.c's index bases were measured
 * against (bench/results/hoist-amd-2026-12-08.md). Prints a checksum and the best of 300 runs.
 * usage: THREADS=1 bench/hand/run.sh conv2d_s2 [XT]   (XT: pixels per register tile, default 7) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
enum { C = 64, H = 56, W = 56, F = 128, OH = 28, OW = 28, PH = 58, PW = 58 };
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static float P[C][PH][PW], Kb[F/16][C][3][3][16], Y[F][OH][OW];
#ifndef XT
#define XT 4
#endif
__attribute__((noinline)) void conv(void) {
  #pragma omp parallel for collapse(2)
  for (int y = 0; y < OH; y++)
    for (int fo = 0; fo < F / 16; fo++)
      for (int x0 = 0; x0 < OW; x0 += XT) {
        __m512 acc[XT];
        for (int i = 0; i < XT; i++) acc[i] = _mm512_setzero_ps();
        for (int c = 0; c < C; c++)
          for (int r = 0; r < 3; r++)
            for (int s = 0; s < 3; s++) {
              __m512 k = _mm512_loadu_ps(Kb[fo][c][r][s]);
              const float *p = &P[c][2 * y + r][2 * x0 + s];
              #pragma GCC unroll 16
              for (int i = 0; i < XT; i++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(p[2 * i]), k, acc[i]);
            }
        float t[16];
        for (int i = 0; i < XT; i++) { _mm512_storeu_ps(t, acc[i]); for (int f = 0; f < 16; f++) Y[fo * 16 + f][y][x0 + i] = t[f]; }
      }
}
int main(void) {
  for (int c = 0; c < C; c++) for (int h = 0; h < PH; h++) for (int w = 0; w < PW; w++) P[c][h][w] = (h && w && h <= H && w <= W) ? (float)((c * 7 + h * 3 + w) % 11) * 0.1f : 0;
  for (int f = 0; f < F; f++) for (int c = 0; c < C; c++) for (int r = 0; r < 3; r++) for (int s = 0; s < 3; s++) Kb[f / 16][c][r][s][f % 16] = (float)((f + c * 3 + r + s) % 7) * 0.1f;
  conv(); double best = 1;
  for (int it = 0; it < 300; it++) { double t0 = now(); conv(); double t = now() - t0; if (t < best) best = t; }
  double cs = 0; for (int f = 0; f < F; f++) cs += Y[f][3][5];
  printf("cs %g ", cs);
  printf("XT=%d min %.3f ms  %.1f GFLOP/s\n", XT, best * 1e3, 2.0 * F * C * 9 * OH * OW / best / 1e9);
}
