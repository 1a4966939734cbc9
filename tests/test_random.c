/* Every library workload (te/lib) and every test program (tests/programs: language corners the library does not
 * reach, such as several outputs, scalars, explicit ranges, / and % in indices) under many random legal
 * schedules on the C target, each lowered, printed, compiled, run and verified against the reference evaluator.
 * A failure prints the trace and the `kgen run ... --random-schedule SEED` command that reproduces it.
 * KGEN_RANDOM_SCHEDULES overrides the count per workload (default 50). */
#include <stdint.h>
#include "kgen.h"
#include "testlib.h"
#include "testutil.h"

int main(void) {
  int per = 50;
  const char *env = getenv("KGEN_RANDOM_SCHEDULES");
  if (env) per = atoi(env);
  char *files[KG_TEST_MAX_WORKLOADS];
  int nlib = 0, nfiles = kg_test_list_workloads(files, KG_TEST_MAX_WORKLOADS, &nlib);
  CHECKF(nlib >= 14, "only %d workloads in te/lib", nlib);
  int total_ok = 0, total_steps = 0;
  for (int w = 0; w < nfiles; w++) {
    const char *path = files[w];
    kg_test_workload wl;
    if (kg_test_workload_load(&wl, path) != 0) continue;
    kg_program *p = wl.p;
    int ok_here = 0;
    /* Seed 0 is the default schedule (no steps). */
    for (int i = 0; i <= per; i++) {
      uint64_t seed = (uint64_t)w * 100000 + (uint64_t)i;
      kg_schedule *s = kg_schedule_new(p);
      int nsteps = 4 + i % 12;
      if (i > 0) kg_schedule_random(s, seed, KG_TARGET_C, nsteps);
      total_steps += s->trace.nsteps;
      char err[8192];
      kg_pipeline pl;
      int built = kg_pipeline_build(s, KG_TARGET_C, &pl, err, sizeof err) == 0;
      char *trace = kg_trace_to_text(&s->trace);
      char again[1024];
      snprintf(again, sizeof again, "kgen run %s%s --seed 7 --random-schedule %llu --random-steps %d", path,
               wl.sizes, (unsigned long long)seed, nsteps);
      CHECKF(built, "%s seed %llu: build failed: %s\ntrace:\n%s\nreproduce: %s", path, (unsigned long long)seed,
             err, trace, again);
      if (built) {
        char verr[1024];
        CHECKF(kg_ir_verify(pl.b.front.ir, verr, sizeof verr) == 0, "%s seed %llu: %s\ntrace:\n%s\nreproduce: %s", path,
               (unsigned long long)seed, verr, trace, again);
        kg_verify_result v = kg_pipeline_verify(&pl, p, &wl.d, 1e-4);
        CHECKF(v.ok, "%s seed %llu: %s max_rel_err=%g\ntrace:\n%s\nreproduce: %s", path, (unsigned long long)seed,
               v.msg, v.max_rel_err, trace, again);
        ok_here += v.ok;
      }
      free(trace);
      kg_pipeline_free(&pl);
      kg_schedule_free(s);
    }
    printf("%-32s %d/%d schedules verified\n", path, ok_here, per + 1);
    fflush(stdout);
    total_ok += ok_here;
    kg_test_workload_free(&wl);
  }
  printf("%d schedules verified, %d random steps in all\n", total_ok, total_steps);
  kg_test_free_workloads(files, nfiles);
  TEST_END();
}
