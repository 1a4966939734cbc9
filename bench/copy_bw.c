/* The machine's copy bandwidth at a given footprint: a scaled copy y = a * x over OpenMP threads, the reference
 * rate of every memory-bound kernel in bench/suite.sh (a kernel that reads its inputs and writes its outputs once
 * cannot beat a copy of the same bytes by much).
 *
 *   copy_bw BYTES [--threads N] [--samples N] [--min-ms MS]
 *
 * BYTES is the footprint: x and y together (each BYTES / 2, floats), as a kernel's inputs and outputs together.
 * Each sample repeats the copy until it lasts MS milliseconds (at least one copy); the median of the samples is
 * reported, its rate counting the bytes read and the bytes written. Both arrays are first touched by the threads
 * that copy them, with the same static split, so that page faults and remote pages are not timed.
 * Output: one line "copy_bw bytes=N threads=N samples=N reps=N median_ms=X min_ms=X max_ms=X gbps=X".
 * Exit status: 0, or 2 on a usage error or when the arrays cannot be allocated. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int parse_count(const char *s, long long lo, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo) return 0;
  *out = v;
  return 1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* one scaled copy; the scale is read from memory so that the compiler cannot turn it into a memcpy */
static void copy_scaled(float *restrict y, const float *restrict x, long long n, const volatile float *scale) {
  float a = *scale;
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < n; i++) y[i] = a * x[i];
}

static int usage(void) {
  fprintf(stderr, "usage: copy_bw BYTES [--threads N] [--samples N] [--min-ms MS]\n");
  return 2;
}

int main(int argc, char **argv) {
  long long bytes = -1, threads = omp_get_max_threads(), samples = 11, min_ms = 20;
  for (int i = 1; i < argc; i++) {
    long long *dst = NULL, lo = 1;
    if (!strcmp(argv[i], "--threads")) dst = &threads;
    else if (!strcmp(argv[i], "--samples")) dst = &samples;
    else if (!strcmp(argv[i], "--min-ms")) dst = &min_ms, lo = 0;
    if (dst) {
      if (i + 1 >= argc || !parse_count(argv[i + 1], lo, dst)) {
        fprintf(stderr, "copy_bw: %s wants an integer >= %lld\n", argv[i], lo);
        return usage();
      }
      i++;
    } else if (bytes >= 0) {
      fprintf(stderr, "copy_bw: unexpected argument '%s'\n", argv[i]);
      return usage();
    } else if (!parse_count(argv[i], 8, &bytes)) {
      fprintf(stderr, "copy_bw: BYTES wants an integer >= 8, not '%s'\n", argv[i]);
      return usage();
    }
  }
  if (bytes < 0) return usage();
  if (samples > 1000 || threads > 4096) {
    fprintf(stderr, "copy_bw: at most 1000 samples and 4096 threads\n");
    return usage();
  }
  omp_set_num_threads((int)threads);
  long long n = bytes / 8; /* floats per array: x and y together are the footprint */
  float *x = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
  float *y = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
  if (!x || !y) {
    fprintf(stderr, "copy_bw: cannot allocate 2 x %lld bytes\n", n * 4);
    return 2;
  }
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < n; i++) {
    x[i] = (float)(i % 1024) * 0.5f;
    y[i] = 0.0f;
  }
  volatile float scale = 3.0f;
  copy_scaled(y, x, n, &scale); /* warm-up: the thread pool started, the caches in their steady state */
  for (long long i = 0; i < n; i += 4099)
    if (y[i] != 3.0f * x[i]) {
      fprintf(stderr, "copy_bw: wrong copy at %lld\n", i);
      return 2;
    }
  long long reps = 1;
  for (;;) { /* the reps that make one sample last min_ms */
    double t0 = now_s();
    for (long long r = 0; r < reps; r++) copy_scaled(y, x, n, &scale);
    double dt = now_s() - t0;
    if (dt * 1e3 >= (double)min_ms || reps >= (1LL << 30)) break;
    long long want = dt > 0 ? (long long)((double)reps * (double)min_ms / (dt * 1e3) * 1.1) + 1 : reps * 2;
    reps = want > reps * 2 ? want : reps * 2;
  }
  double per[1000];
  for (long long s = 0; s < samples; s++) {
    double t0 = now_s();
    for (long long r = 0; r < reps; r++) copy_scaled(y, x, n, &scale);
    per[s] = (now_s() - t0) / (double)reps;
  }
  qsort(per, (size_t)samples, sizeof *per, cmp_double);
  double med = samples % 2 ? per[samples / 2] : 0.5 * (per[samples / 2 - 1] + per[samples / 2]);
  printf("copy_bw bytes=%lld threads=%lld samples=%lld reps=%lld median_ms=%.6g min_ms=%.6g max_ms=%.6g gbps=%.6g\n",
         n * 8, threads, samples, reps, med * 1e3, per[0] * 1e3, per[samples - 1] * 1e3,
         (double)(n * 8) / med / 1e9);
  free(x);
  free(y);
  return 0;
}
