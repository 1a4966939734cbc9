/* Every library workload (te/lib) and every test program (tests/programs: several outputs, scalars, explicit
 * ranges) at its `# sizes:` under many random CUDA schedules (kg_schedule_random with KG_TARGET_CUDA): each is
 * lowered for CUDA and printed (kg_codegen_cuda), compiled with NVRTC for sm_86 and sm_90 with the ptxas resources
 * reported (registers > 0 for every kernel) and checked against that arch's limits, then run on the CUDA emulator
 * and compared with the reference evaluator. The compiles (NVRTC and the emulator's host compiler) run on two
 * OpenMP threads; the emulator runs one launch at a time.
 *
 * The schedules must cover what the GPU generator draws: across the run, at least one schedule binds loops, stages
 * data in shared memory, accumulates in registers (cache_write local), vectorizes, and reduces across threads; and
 * a seed drawn twice gives the same schedule. A failure prints the workload, the seed, the trace and the command
 * that reproduces it. KGEN_GPU_RANDOM_SCHEDULES overrides the count per workload (default 30). Requires NVRTC and
 * a C++ compiler. */
#include <stdint.h>
#include "kgen.h"
#include "base/clock.h"
#include "runtime/emu.h"
#include "runtime/nvrtc.h"
#include "testlib.h"
#include "testutil.h"

enum {
  F_BIND, F_SHARED, F_LOCAL, F_VECTORIZE, F_CROSS_THREAD, F_UNROLL, F_INLINE, F_RFACTOR, F_PER_THREAD, F_VTHREAD,
  F_PAD, F_COUNT
};
static const char *const feature_names[F_COUNT] = {"bind",       "shared", "local",   "vectorize",
                                                   "cross-thread reduction", "unroll", "inline", "rfactor",
                                                   "per-thread", "vthread", "padded shared rows"};
/* the features GPU schedules must cover; the others are reported only */
static const int required[F_COUNT] = {1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1};

static void features_of(const kg_schedule *s, int *has) {
  memset(has, 0, sizeof(int) * F_COUNT);
  for (int i = 0; i < s->nstages; i++) {
    const kg_sstage *st = s->stages[i];
    if (st->scope == KG_SCOPE_SHARED) has[F_SHARED] = 1;
    if (st->pad) has[F_PAD] = 1;
    if (st->origin == KG_ORIGIN_CACHE_WRITE && st->scope == KG_SCOPE_LOCAL) has[F_LOCAL] = 1;
    if (st->origin == KG_ORIGIN_RFACTOR) has[F_RFACTOR] = 1;
    if (st->attach == KG_ATTACH_INLINE) has[F_INLINE] = 1;
    if (st->attach == KG_ATTACH_AT && st->scope == KG_SCOPE_GLOBAL) has[F_PER_THREAD] = 1;
    for (int l = 0; l < st->nleaves; l++) {
      const kg_iter *it = st->leaves[l];
      if (it->kind == KG_LOOP_BOUND) has[F_BIND] = 1;
      if (it->kind == KG_LOOP_VECTORIZED) has[F_VECTORIZE] = 1;
      if (it->kind == KG_LOOP_UNROLLED) has[F_UNROLL] = 1;
      if (it->kind == KG_LOOP_BOUND && it->tag == KG_THREAD_VTHREAD) has[F_VTHREAD] = 1;
      if (it->kind == KG_LOOP_BOUND && it->is_reduce && it->tag >= KG_THREAD_THREAD_X && it->tag <= KG_THREAD_THREAD_Z)
        has[F_CROSS_THREAD] = 1;
    }
  }
}

/* One random schedule of a workload, through every stage of the check. */
typedef struct cand {
  kg_test_cuda_draw x;
  kg_cubin cubin[2];
  int nvrtc_rc[2];
  kg_emu_module emu;
  int emu_rc;
} cand;

static const char *const arches[2] = {"sm_86", "sm_90"};

int main(void) {
  int per = 30;
  const char *env = getenv("KGEN_GPU_RANDOM_SCHEDULES");
  if (env) per = atoi(env);
  if (per < 1) per = 1;
  char why[512];
  int have_nvrtc = kg_nvrtc_available(why, sizeof why) == 0;
  CHECKF(have_nvrtc, "NVRTC is needed: %s", why);
  kg_gpu_limits lim[2];
  for (int a = 0; a < 2; a++) CHECK(kg_gpu_limits_for_arch(arches[a], &lim[a]) == 0);

  char *files[KG_TEST_MAX_WORKLOADS];
  int nlib = 0, nfiles = kg_test_list_workloads(files, KG_TEST_MAX_WORKLOADS, &nlib);
  CHECKF(nlib >= 14, "only %d workloads in te/lib", nlib);

  int feat_count[F_COUNT] = {0};
  int total = 0, total_printed = 0, total_ok = 0;
  double t_start = kg_now_s();
  for (int w = 0; w < nfiles; w++) {
    const char *path = files[w];
    kg_test_workload wl;
    if (kg_test_workload_load(&wl, path) != 0) continue;
    kg_program *p = wl.p;

    /* draw, lower and print (serial: cheap) */
    cand *c = calloc((size_t)per, sizeof *c);
    for (int i = 0; i < per; i++) {
      kg_test_cuda_draw *x = &c[i].x;
      kg_schedule *s = kg_test_cuda_draw_make(x, p, w, i);
      int has[F_COUNT];
      features_of(s, has);
      for (int f = 0; f < F_COUNT; f++) feat_count[f] += has[f];
      if (i == 0) {
        /* same seed, same schedule */
        kg_schedule *again = kg_schedule_new(p);
        kg_schedule_random(again, x->seed, KG_TARGET_CUDA, KG_TEST_CUDA_STEPS);
        char *t2 = kg_trace_to_text(&again->trace);
        CHECKF(!strcmp(t2, x->trace), "%s seed %llu: drawn twice, two schedules:\n%s\n---\n%s", path,
               (unsigned long long)x->seed, x->trace, t2);
        free(t2);
        kg_schedule_free(again);
      }
      kg_schedule_free(s);
    }
    /* compile: NVRTC for both arches and the emulator's host compile, two at a time */
#pragma omp parallel for num_threads(2) schedule(dynamic)
    for (int job = 0; job < 3 * per; job++) {
      cand *cd = &c[job / 3];
      int kind = job % 3;
      if (!cd->x.printed) continue;
      if (kind < 2) cd->nvrtc_rc[kind] = kg_nvrtc_compile(&cd->x.prog, arches[kind], &cd->cubin[kind]);
      else cd->emu_rc = kg_emu_build(&cd->x.prog, &cd->emu);
    }
    /* check, run on the emulator, compare */
    int ok_here = 0;
    for (int i = 0; i < per; i++) {
      cand *cd = &c[i];
      const kg_test_cuda_draw *x = &cd->x;
      char again[1024];
      snprintf(again, sizeof again, "kgen run %s%s --seed 7 --target cuda --emulate --random-schedule %llu", path,
               wl.sizes, (unsigned long long)x->seed);
#define CTX "%s seed %llu: "
#define CTXA path, (unsigned long long)x->seed
#define TAIL "\ntrace:\n%s\nreproduce: %s"
#define TAILA x->trace, again
      if (!kg_test_cuda_draw_check(x, path, again)) continue;
      total_printed++;
      int good = 1;
      for (int a = 0; a < 2; a++) {
        kg_cubin *cb = &cd->cubin[a];
        CHECKF(cd->nvrtc_rc[a] == 0, CTX "NVRTC %s failed:\n%s\nsource:\n%s" TAIL, CTXA, arches[a],
               cb->log ? cb->log : "(no log)", x->prog.source, TAILA);
        if (cd->nvrtc_rc[a] != 0) {
          good = 0;
          continue;
        }
        CHECKF(cb->nres == x->prog.nkernels, CTX "%s: %d resource reports for %d kernels" TAIL, CTXA, arches[a],
               cb->nres, x->prog.nkernels, TAILA);
        for (int k = 0; k < cb->nres; k++)
          CHECKF(cb->res[k].registers > 0, CTX "%s: kernel %s: %d registers reported" TAIL, CTXA, arches[a],
                 cb->res[k].name, cb->res[k].registers, TAILA);
        char lw[512];
        int fits = kg_gpu_check_limits(&x->prog, cb, &lim[a], lw, sizeof lw) == 0;
        CHECKF(fits, CTX "%s: over the limits: %s" TAIL, CTXA, arches[a], lw, TAILA);
        good &= fits && cb->nres == x->prog.nkernels;
      }
      CHECKF(cd->emu_rc == 0, CTX "emulator build failed:\n%s\nsource:\n%s" TAIL, CTXA,
             cd->emu.log ? cd->emu.log : "(no log)", x->prog.source, TAILA);
      if (cd->emu_rc == 0) {
        char rerr[1024];
        int ok = kg_test_emu_verify(&cd->emu, &x->prog, &wl, rerr, sizeof rerr);
        CHECKF(ok, CTX "emulator: %s\nsource:\n%s" TAIL, CTXA, rerr, x->prog.source, TAILA);
        good &= ok;
      } else {
        good = 0;
      }
      ok_here += good;
    }
    for (int i = 0; i < per; i++) {
      if (c[i].x.printed) {
        for (int a = 0; a < 2; a++) kg_cubin_free(&c[i].cubin[a]);
        kg_emu_module_free(&c[i].emu);
      }
      kg_test_cuda_draw_free(&c[i].x);
    }
    free(c);
    printf("%-32s %d/%d random CUDA schedules verified (%.0f s so far)\n", path, ok_here, per,
           kg_now_s() - t_start);
    fflush(stdout);
    total += per;
    total_ok += ok_here;
    kg_test_workload_free(&wl);
  }
  printf("%d/%d schedules printed as CUDA (%.1f%%), %d verified on the emulator and compiled for sm_86 and sm_90\n",
         total_printed, total, total ? 100.0 * total_printed / total : 0.0, total_ok);
  printf("schedules with each feature:");
  for (int f = 0; f < F_COUNT; f++) printf(" %s %d%s", feature_names[f], feat_count[f], f + 1 < F_COUNT ? "," : "\n");
  for (int f = 0; f < F_COUNT; f++)
    if (required[f]) CHECKF(feat_count[f] > 0, "no random schedule used %s", feature_names[f]);
  kg_test_free_workloads(files, nfiles);
  TEST_END();
}
