/* gpu_wellformed: how much of kgen's GPU search is well-formed for a static shape? Draws N random GPU schedules
 * (kg_schedule_random, the tests' draws) and N sketch samples (the tuner's space) of one workload, compiles each
 * with NVRTC for the arch, and counts, by the static quality report (runtime/quality.h), the kernels that are
 * well-formed in issue 22's sense: a block of at least 128 threads in whole warps, shared-memory staging, no
 * spills, 128-bit global loads. Prints the fractions, the best analytical estimate (runtime/estimate.h) among the
 * well-formed ones, and with --verbose each draw.
 *
 *   gpu_wellformed FILE.te [-D NAME=VALUE]... [--arch sm_90] [--samples N] [--seed S] [--verbose]
 *
 * Needs NVRTC, not a GPU. A multi-kernel program counts as well-formed when its kernel of the longest estimated
 * time does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/rng.h"
#include "../gen/random.h"
#include "../gen/space.h"
#include "../runtime/estimate.h"
#include "../runtime/pipeline.h"
#include "bench_load.h"

#define MAX_BIND 16

static int usage(void) {
  fprintf(stderr, "usage: gpu_wellformed FILE.te [-D NAME=VALUE]... [--arch sm_90] [--samples N] [--seed S] "
                  "[--verbose]\n");
  return 2;
}

/* 1 when the built program's busiest kernel is well-formed; its estimate in *est (0: none). -1: did not build. */
static int judge(const kg_program *p, const kg_schedule *s, const char *arch, double *est, char *why, size_t wl) {
  kg_build_opts o = {.target = KG_TARGET_CUDA, .stop = KG_BUILD_COMPILE, .sched = s, .arch = arch,
                     .at_bound_sizes = 1};
  kg_build b;
  int rc = -1;
  *est = 0;
  if (kg_candidate_build(p, &o, &b) == 0 && b.have_cubin) {
    int n = b.front.cuda.nkernels;
    kg_kernel_quality *q = calloc((size_t)n + 1, sizeof *q);
    kg_kernel_estimate *k = calloc((size_t)n + 1, sizeof *k);
    char e[256] = "out of memory";
    double s_all = q && k ? kg_cuda_estimate_build(&b.front.cuda, &b.cubin, b.front.ir, arch, q, k, e, sizeof e) : -1;
    if (s_all > 0) {
      *est = s_all;
      const kg_kernel_quality *x = &q[kg_cuda_estimate_busiest(k, n)];
      rc = kg_cuda_quality_well_formed(x);
      snprintf(why, wl, "%d threads, %s, %lld B spilled, %d-bit loads", x->threads,
               x->shared_staged ? "staged" : "not staged", (long long)x->spill_bytes, x->load_bits);
    } else {
      snprintf(why, wl, "no report: %s", e);
    }
    free(q);
    free(k);
  } else {
    snprintf(why, wl, "%.200s", b.front.error.msg);
  }
  kg_build_free(&b);
  return rc;
}

int main(int argc, char **argv) {
  const char *file = NULL, *arch = "sm_90";
  kg_binding bind[MAX_BIND];
  int nb = 0, samples = 64, verbose = 0;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-D") && i + 1 < argc && nb < MAX_BIND) {
      if (bench_parse_binding(argv[++i], &bind[nb++]) != 0) return usage();
    } else if (!strcmp(argv[i], "--arch") && i + 1 < argc) {
      arch = argv[++i];
    } else if (!strcmp(argv[i], "--samples") && i + 1 < argc) {
      samples = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--verbose")) {
      verbose = 1;
    } else if (argv[i][0] != '-' && !file) {
      file = argv[i];
    } else {
      return usage();
    }
  }
  if (!file || samples < 1) return usage();
  kg_program *p = bench_load_program("gpu_wellformed", file, bind, nb);
  if (!p) return 1;
  kg_gpu_limits lim;
  if (kg_gpu_limits_for_arch(arch, &lim) != 0) {
    fprintf(stderr, "gpu_wellformed: unknown arch %s\n", arch);
    return 1;
  }
  kg_space *sp = kg_space_new(p, KG_TARGET_CUDA, &lim);
  for (int mode = 0; mode < 2; mode++) {
    int built = 0, good = 0;
    double best = 0;
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t)mode;
    for (int i = 0; i < samples; i++) {
      kg_schedule *s = NULL;
      char err[512] = "";
      const char *sk = "random";
      if (mode == 0) {
        s = kg_schedule_new(p);
        kg_schedule_random(s, seed * 1000003ull + (uint64_t)i, KG_TARGET_CUDA, 1);
      } else {
        kg_point pt;
        int which = (int)(kg_rng_next(&rng) % (uint64_t)sp->nsketches);
        kg_space_sample(sp, which, &rng, &pt);
        s = kg_space_realize(sp, &pt, err, sizeof err);
        sk = sp->sketches[which].name;
      }
      double est = 0;
      char why[512];
      int wf = s ? judge(p, s, arch, &est, why, sizeof why) : -1;
      if (!s) snprintf(why, sizeof why, "does not realize: %.200s", err);
      if (wf >= 0) built++;
      if (wf == 1) {
        good++;
        if (est > 0 && (best == 0 || est < best)) best = est;
      }
      if (verbose) printf("%s %3d %-24s %s: %s (estimate %.4g ms)\n", mode ? "sketch" : "random", i, sk,
                          wf == 1 ? "well-formed" : wf == 0 ? "not" : "failed", why, est * 1e3);
      if (s) kg_schedule_free(s);
    }
    printf("%s: %d of %d built, %d well-formed (%.0f%% of the draws)", mode ? "sketch samples" : "random schedules",
           built, samples, good, 100.0 * good / samples);
    if (best > 0) printf(", best estimate among them %.4g ms", best * 1e3);
    printf("\n");
  }
  kg_space_free(sp);
  kg_program_free(p);
  return 0;
}
