/* Search hygiene for static shapes: how much of kgen's GPU search is well-formed for a static 4096^3 SGEMM
 * (kg_cuda_quality_well_formed: blocks of at least 128 threads in whole warps, shared staging, no spills, 128-bit
 * global loads), each candidate compiled with NVRTC for sm_90:
 * - the random GPU schedules (kg_schedule_random, what the tests draw): at least a quarter well-formed;
 * - the tuner's sketch samples: some well-formed, none of its tiles an odd size that leaves a remainder, and every
 *   tiled kernel's block in whole warps;
 * - the estimate (runtime/estimate.h) ranks the best well-formed random schedule ahead of the median one.
 * The draws are seeded: the counts are the same on every run. Skipped without NVRTC. */
#include <stdint.h>
#include <string.h>
#include "kgen.h"
#include "base/rng.h"
#include "gen/random.h"
#include "gen/space.h"
#include "runtime/estimate.h"
#include "runtime/pipeline.h"
#include "testlib.h"

static const char *const arch = "sm_90";

/* What judge learns of the busiest kernel besides its verdict. */
typedef struct facts {
  int threads, stages, banks, spills, load_bits;
} facts;

/* 1 when s's kernel of the longest estimated time is well-formed, 0 when not, -1 when it does not build; the
 * estimate in *est. */
static int judge(const kg_program *p, const kg_schedule *s, double *est, facts *fx) {
  kg_build_opts o = {.target = KG_TARGET_CUDA, .stop = KG_BUILD_COMPILE, .sched = s, .arch = arch,
                     .at_bound_sizes = 1};
  kg_build b;
  int rc = -1;
  *est = 0;
  memset(fx, 0, sizeof *fx);
  if (kg_candidate_build(p, &o, &b) == 0 && b.have_cubin) {
    int n = b.front.cuda.nkernels;
    kg_kernel_quality q[8];
    kg_kernel_estimate k[8];
    char why[256];
    if (n <= 8 &&
        (*est = kg_cuda_estimate_build(&b.front.cuda, &b.cubin, b.front.ir, arch, q, k, why, sizeof why)) > 0) {
      int busiest = kg_cuda_estimate_busiest(k, n);
      rc = kg_cuda_quality_well_formed(&q[busiest]);
      fx->threads = q[busiest].threads;
      fx->stages = k[busiest].work.pipeline;
      fx->banks = k[busiest].work.bank_degree;
      fx->spills = q[busiest].spill_bytes > 0;
      fx->load_bits = q[busiest].load_bits;
    }
  }
  kg_build_free(&b);
  return rc;
}

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static void test_random(const kg_program *p) {
  enum { N = 60 };
  int good = 0, built = 0, piped = 0;
  double est[N];
  int nest = 0;
  double best_good = 0;
  for (int i = 0; i < N; i++) {
    kg_schedule *s = kg_schedule_new(p);
    kg_schedule_random(s, 7000 + (uint64_t)i, KG_TARGET_CUDA, 1);
    double e;
    facts fx;
    int wf = judge(p, s, &e, &fx);
    built += wf >= 0;
    good += wf == 1;
    piped += wf == 1 && fx.stages >= 2;
    if (e > 0) est[nest++] = e;
    if (wf == 1 && (best_good == 0 || e < best_good)) best_good = e;
    kg_schedule_free(s);
  }
  printf("random GPU schedules of a 4096^3 SGEMM: %d of %d built, %d well-formed, %d of them pipelined\n", built, N,
         good, piped);
  CHECKF(built == N, "%d of %d random schedules built", built, N);
  CHECKF(4 * good >= N, "%d of %d well-formed, want a quarter", good, N);
  CHECKF(piped > 0, "none of the %d well-formed random schedules is pipelined", good);
  qsort(est, (size_t)nest, sizeof *est, cmp_d);
  CHECKF(nest > 0 && best_good > 0 && best_good < est[nest / 2], "best well-formed %g s, median %g s", best_good,
         nest ? est[nest / 2] : 0.0);
}

static void test_sketches(const kg_program *p) {
  kg_gpu_limits lim;
  CHECK(kg_gpu_limits_for_arch(arch, &lim) == 0);
  kg_space *sp = kg_space_new(p, KG_TARGET_CUDA, &lim);
  /* tile knobs: powers of two and divisors of 4096 only, i.e. powers of two */
  int odd = 0;
  for (int i = 0; i < sp->nsketches; i++)
    for (int k = 0; k < sp->sketches[i].nknobs; k++) {
      const kg_knob *kn = &sp->sketches[i].knobs[k];
      if (kn->kind != KG_KNOB_TILE) continue;
      for (int v = 0; v < kn->nvalues; v++) odd += (kn->values[v] & (kn->values[v] - 1)) != 0;
    }
  CHECKF(odd == 0, "%d tile values of the 4096^3 SGEMM's sketches are not powers of two", odd);
  enum { N = 200 };
  uint64_t rng = 99;
  int good = 0, tiled = 0, partial = 0, piped = 0;
  double best = 0;
  facts bf;
  memset(&bf, 0, sizeof bf);
  for (int i = 0; i < N; i++) {
    kg_point pt;
    int which = (int)(kg_rng_next(&rng) % (uint64_t)sp->nsketches);
    kg_space_sample(sp, which, &rng, &pt);
    char err[512];
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    if (!s) continue;
    double e;
    facts fx;
    int wf = judge(p, s, &e, &fx);
    good += wf == 1;
    piped += wf == 1 && fx.stages >= 2;
    if (wf >= 0 && e > 0 && (best == 0 || e < best)) best = e, bf = fx;
    if (!strncmp(sp->sketches[which].name, "gpu/tile", 8)) {
      tiled++;
      partial += fx.threads % 32 != 0;
    }
    kg_schedule_free(s);
  }
  printf("sketch samples: %d of %d well-formed (%d pipelined); %d tiled, %d of them in partial warps\n", good, N,
         piped, tiled, partial);
  printf("best by estimate: %.4g ms, %d threads, %d pipeline stages, %d-way banks, %s, %d-bit loads\n", best * 1e3,
         bf.threads, bf.stages, bf.banks, bf.spills ? "spills" : "no spills", bf.load_bits);
  CHECKF(good >= 2, "%d of %d sketch samples well-formed", good, N);
  CHECKF(tiled > 0 && partial == 0, "%d of %d tiled samples have partial warps", partial, tiled);
  kg_space_free(sp);
}

int main(void) {
  char why[512];
  if (kg_nvrtc_available(why, sizeof why) != 0) {
    printf("skip: no NVRTC: %s\n", why);
    TEST_END();
  }
  kg_binding b[3] = {{"M", 4096}, {"N", 4096}, {"K", 4096}};
  kg_program *p = kg_test_load_lib("matmul", b, 3);
  CHECK(p != NULL);
  if (p) {
    test_random(p);
    test_sketches(p);
    kg_program_free(p);
  }
  TEST_END();
}
