/* The pipeline written once:
 *   - kg_stats_of (base/stats.h): odd and even counts, one value, none, a NaN anywhere, more values than fit the
 *     stack copy, the input left unsorted;
 *   - kg_time_repeats (runtime/timing.h): one untimed warm-up, at least 3 repeats, repeats until min_total_s of
 *     work, the cap, a run's error stopping the loop (the warm-up's too), self-timed runs;
 *   - kg_candidate_build (runtime/pipeline.h) on a matmul: every stop stage on C and CUDA holds what it should and
 *     nothing past it; an illegal trace fails at the schedule stage naming the primitive and the step; a GPU-bound
 *     loop on C fails to lower or print; a C compile error carries the compiler's log; the C build verifies; the
 *     CUDA default schedule is kg_schedule_gpu_default's; NVRTC (where it loads, no GPU needed) gives a cubin and
 *     per-kernel resources; tight limits fail at the limits stage as a resource limit; the emulator build runs
 *     and verifies. */
#include <math.h>
#include "kgen.h"
#include "testlib.h"

/* ---- statistics ---- */

static void test_stats(void) {
  double odd[] = {3, 1, 2};
  kg_stats s = kg_stats_of(odd, 3);
  CHECK(s.n == 3 && s.nnan == 0);
  CHECK(s.median == 2 && s.min == 1 && s.max == 3);
  CHECK(fabs(s.spread - 1.0) < 1e-12);
  CHECK(odd[0] == 3 && odd[1] == 1 && odd[2] == 2); /* not sorted in place */

  double even[] = {4, 1, 3, 2};
  s = kg_stats_of(even, 4);
  CHECK(s.median == 2.5 && s.min == 1 && s.max == 4);

  double one[] = {5};
  s = kg_stats_of(one, 1);
  CHECK(s.n == 1 && s.median == 5 && s.min == 5 && s.max == 5 && s.spread == 0);

  s = kg_stats_of(NULL, 0);
  CHECK(s.n == 0 && s.median == 0 && s.min == 0 && s.max == 0);

  double nan1[] = {1, NAN, 2};
  s = kg_stats_of(nan1, 3);
  CHECK(s.nnan == 1 && isnan(s.median) && isnan(s.min) && isnan(s.max));
  double nan_last[] = {1, 2, 3, 4, NAN};
  s = kg_stats_of(nan_last, 5);
  CHECK(s.nnan == 1 && isnan(s.median));

  /* past the 64 values of the stack copy: 0..99 in a scrambled order */
  double many[100];
  for (int i = 0; i < 100; i++) many[i] = (double)((i * 37) % 100);
  s = kg_stats_of(many, 100);
  CHECK(s.median == 49.5 && s.min == 0 && s.max == 99);
  s = kg_stats_of(many, 99); /* drops the value 63 (99 * 37 % 100): the middle of the rest is 49 */
  CHECK(s.median == 49);

  double zero[] = {0, 0};
  s = kg_stats_of(zero, 2);
  CHECK(s.median == 0 && s.spread == 0);
}

/* ---- the timing loop ---- */

typedef struct fake {
  int runs, timed;  /* calls of run and run_timed */
  double dt;        /* what run_timed reports */
  int fail_at;      /* the call (1-based, over both) that fails; 0: none */
} fake;
static int fake_run(void *ctx) {
  fake *f = ctx;
  f->runs++;
  return f->fail_at && f->runs + f->timed == f->fail_at ? 7 : 0;
}
static int fake_timed(void *ctx, double *s) {
  fake *f = ctx;
  f->timed++;
  *s = f->dt;
  return f->fail_at && f->runs + f->timed == f->fail_at ? 9 : 0;
}

static void test_timing(void) {
  fake f = {0};
  kg_timer_ops ops = {fake_run, NULL, &f};
  kg_repeats r;
  CHECK(kg_time_repeats(&ops, 0, 0, &r) == 0);
  CHECK(f.runs == 1 + KG_TIME_MIN_RUNS && r.n == KG_TIME_MIN_RUNS); /* warm-up + 3 */
  CHECK(r.st.n == r.n && r.st.min <= r.st.median && r.st.median <= r.st.max);
  kg_repeats_free(&r);

  /* self-timed: the warm-up is run, the repeats run_timed; 0.25 s each until 1 s of work */
  memset(&f, 0, sizeof f);
  f.dt = 0.25;
  kg_timer_ops tops = {fake_run, fake_timed, &f};
  CHECK(kg_time_repeats(&tops, 1.0, 0, &r) == 0);
  CHECK(f.runs == 1 && f.timed == 4 && r.n == 4);
  CHECK(r.total_s == 1.0 && r.st.median == 0.25 && r.times[3] == 0.25);
  kg_repeats_free(&r);

  /* the cap wins over the work still missing */
  memset(&f, 0, sizeof f);
  f.dt = 0.25;
  CHECK(kg_time_repeats(&tops, 100.0, 10, &r) == 0);
  CHECK(r.n == 10 && f.timed == 10);
  kg_repeats_free(&r);

  /* an error stops the loop and is returned, the runs before it kept */
  memset(&f, 0, sizeof f);
  f.dt = 0.25;
  f.fail_at = 3; /* warm-up, timed, timed (fails) */
  CHECK(kg_time_repeats(&tops, 1.0, 0, &r) == 9);
  CHECK(r.n == 1 && f.timed == 2);
  kg_repeats_free(&r);
  memset(&f, 0, sizeof f);
  f.fail_at = 1; /* the warm-up */
  CHECK(kg_time_repeats(&tops, 1.0, 0, &r) == 7);
  CHECK(r.n == 0 && f.timed == 0);
  kg_repeats_free(&r);
}

/* ---- the candidate builder ---- */

static int parse(kg_trace *t, const char *text) {
  char err[512];
  kg_trace_init(t);
  int rc = kg_trace_parse(t, "test", text, strlen(text), err, sizeof err);
  if (rc) fprintf(stderr, "%s\n", err);
  return rc;
}

/* Runs a C build on fresh data and verifies it. */
static int verifies_c(const kg_program *p, const kg_build_opts *o) {
  kg_pipeline pl;
  int ok = kg_pipeline_build_opts(p, o, &pl) == 0;
  kg_data d;
  if (ok && kg_data_init(&d, p, 3) == 0) {
    kg_data_reference(&d, p, 3);
    kg_verify_result v = kg_pipeline_verify(&pl, p, &d, 1e-4);
    ok = v.ok;
    kg_timing t = kg_pipeline_time(&pl, &d, 0);
    ok = ok && t.runs >= 3 && t.min_s <= t.median_s && t.median_s <= t.max_s;
    kg_data_free(&d);
  } else {
    ok = 0;
  }
  kg_pipeline_free(&pl);
  return ok;
}

static void test_build_c(const kg_program *p) {
  kg_build b;
  kg_build_opts o = {.target = KG_TARGET_C, .stop = KG_BUILD_SCHEDULE};
  CHECK(kg_candidate_build(p, &o, &b) == 0);
  CHECK(b.front.sched && b.front.sched->trace.nsteps == 0 && !b.front.ir && !b.front.c_source && !b.have_cpu);
  CHECK(!b.front.error.failed);
  kg_build_free(&b);

  kg_trace tiled;
  CHECK(parse(&tiled, "split C i 8\nsplit C j 4\nreorder C i.o j.o i.i j.i\nparallel C i.o\n") == 0);
  o.trace = &tiled;
  o.stop = KG_BUILD_LOWER;
  CHECK(kg_candidate_build(p, &o, &b) == 0);
  CHECK(b.front.sched->trace.nsteps == 4 && b.front.ir && !b.front.c_source);
  kg_build_free(&b);

  o.stop = KG_BUILD_PRINT;
  CHECK(kg_candidate_build(p, &o, &b) == 0);
  CHECK(b.front.c_source && !b.have_cpu);
  CHECK_STR_CONTAINS(b.front.c_source, "kgen_entry_args");
  CHECK_STR_CONTAINS(b.front.c_source, "#pragma omp");
  kg_build_free(&b);

  o.c_function = 1;
  o.name = "my_matmul";
  CHECK(kg_candidate_build(p, &o, &b) == 0);
  CHECK_STR_CONTAINS(b.front.c_source, "int my_matmul(");
  CHECK(b.front.c_source && !strstr(b.front.c_source, "my_matmul_args"));
  kg_build_free(&b);
  o.stop = KG_BUILD_COMPILE; /* a bare function has no entry point to load */
  CHECK(kg_candidate_build(p, &o, &b) != 0 && b.front.error.stage == KG_BUILD_COMPILE);
  kg_build_free(&b);
  o.c_function = 0;
  o.name = NULL;

  CHECK(kg_candidate_build(p, &o, &b) == 0);
  CHECK(b.have_cpu && b.cpu.handle && b.cpu.fn && b.front.c_source);
  kg_build_free(&b);
  CHECK(verifies_c(p, &o));
  o.trace = NULL;
  CHECK(verifies_c(p, &o));

  /* an illegal step: the schedule stage, the step's index and line, the primitive named */
  kg_trace bad;
  CHECK(parse(&bad, "split C i 8\nsplit C nosuchloop 4\n") == 0);
  o.trace = &bad;
  CHECK(kg_candidate_build(p, &o, &b) == -1);
  const kg_build_error *e = &b.front.error;
  CHECK(e->failed && e->stage == KG_BUILD_SCHEDULE && e->step == 1);
  CHECK(!strncmp(e->msg, "line 2: ", 8) && e->step_msg == 8);
  CHECK_STR_CONTAINS(e->msg + e->step_msg, "split");
  CHECK_STR_CONTAINS(e->msg, "nosuchloop");
  CHECK(!b.front.ir && !b.front.c_source && !b.have_cpu);
  CHECK(!strcmp(kg_build_stage_name(e->stage), "schedule"));
  kg_build_free(&b);

  /* a loop bound to a GPU index has no C: it fails before compiling, at lowering or printing */
  kg_trace gpu;
  CHECK(parse(&gpu, "bind C i blockIdx.x\n") == 0);
  o.trace = &gpu;
  CHECK(kg_candidate_build(p, &o, &b) == -1);
  CHECKF(b.front.error.stage == KG_BUILD_LOWER || b.front.error.stage == KG_BUILD_PRINT, "stage %s: %s",
         kg_build_stage_name(b.front.error.stage), b.front.error.msg);
  CHECK(!b.have_cpu && b.front.error.msg[0]);
  kg_build_free(&b);

  /* a compile error: the compiler's log, the tool named */
  o.trace = NULL;
  o.source = "void kgen_entry_args(float **a) { this is not C; }\n";
  CHECK(kg_candidate_build(p, &o, &b) == -1);
  e = &b.front.error;
  CHECK(e->stage == KG_BUILD_COMPILE && b.tool == KG_BUILD_TOOL_CC && !e->env_fault);
  CHECK(!strncmp(e->msg, "C compiler failed:\n", 19) && e->log && strstr(e->msg, e->log));
  kg_build_free(&b);
  /* a replacement source that compiles is what gets loaded */
  o.source = "void kgen_entry_args(float **a) { (void)a; }\n";
  CHECK(kg_candidate_build(p, &o, &b) == 0 && b.cpu.fn);
  kg_build_free(&b);

  kg_trace_free(&tiled);
  kg_trace_free(&bad);
  kg_trace_free(&gpu);
}

static void test_build_cuda(const kg_program *p) {
  kg_build b;
  kg_build_opts o = {.target = KG_TARGET_CUDA, .stop = KG_BUILD_SCHEDULE};
  CHECK(kg_candidate_build(p, &o, &b) == 0);
  kg_schedule *ref = kg_schedule_new(p);
  kg_schedule_gpu_default(ref, KG_FRONT_GPU_THREADS);
  char *want = kg_trace_to_text(&ref->trace), *got = kg_trace_to_text(&b.front.sched->trace);
  CHECK(ref->trace.nsteps > 0 && !strcmp(want, got));
  free(want);
  free(got);
  kg_schedule_free(ref);
  kg_schedule *dc = kg_front_default_schedule(p, KG_TARGET_C), *dg = kg_front_default_schedule(p, KG_TARGET_CUDA);
  CHECK(dc->trace.nsteps == 0 && dg->trace.nsteps == b.front.sched->trace.nsteps);
  kg_schedule_free(dc);
  kg_schedule_free(dg);
  CHECK(!b.front.ir && !b.front.have_cuda);
  kg_build_free(&b);

  o.stop = KG_BUILD_LOWER;
  CHECK(kg_candidate_build(p, &o, &b) == 0 && b.front.ir && !b.front.have_cuda);
  kg_build_free(&b);

  o.stop = KG_BUILD_PRINT;
  o.name = "mm";
  CHECK(kg_candidate_build(p, &o, &b) == 0 && b.front.have_cuda && !b.have_cubin && !b.have_emu);
  CHECK(b.front.cuda.nkernels >= 1 && !strcmp(b.front.cuda.kernels[0].name, "mm_k0"));
  CHECK_STR_CONTAINS(b.front.cuda.source, "__global__");
  kg_build_free(&b);
  o.name = NULL;

  /* the caller's schedule, lowered as it is (what the cost model and the launch rules do) */
  kg_schedule *own = kg_schedule_new(p);
  kg_schedule_gpu_default(own, 64);
  o.sched = own;
  CHECK(kg_candidate_build(p, &o, &b) == 0 && b.front.sched == own && !b.front.owned);
  CHECK(b.front.have_cuda && b.front.cuda.kernels[0].block[0] * b.front.cuda.kernels[0].block[1] *
                               b.front.cuda.kernels[0].block[2] <= 64);
  kg_build_free(&b);
  kg_schedule_free(own);
  o.sched = NULL;

  /* an illegal step on CUDA too */
  kg_trace bad;
  CHECK(parse(&bad, "reorder C nosuchloop i\n") == 0);
  o.trace = &bad;
  CHECK(kg_candidate_build(p, &o, &b) == -1);
  CHECK(b.front.error.stage == KG_BUILD_SCHEDULE && b.front.error.step == 0);
  CHECK_STR_CONTAINS(b.front.error.msg + b.front.error.step_msg, "reorder");
  kg_build_free(&b);
  o.trace = NULL;

  o.stop = KG_BUILD_COMPILE;
  CHECK(kg_candidate_build(p, &o, &b) == -1 && b.front.error.stage == KG_BUILD_COMPILE); /* no arch */
  CHECK_STR_CONTAINS(b.front.error.msg, "arch");
  kg_build_free(&b);

  o.arch = "sm_90";
  char why[256];
  int nvrtc = kg_nvrtc_available(why, sizeof why) == 0;
  if (nvrtc) {
    CHECK(kg_candidate_build(p, &o, &b) == 0);
    CHECK(b.have_cubin && b.cubin.cubin_size > 0 && b.cubin.ptx && b.cubin.nres == b.front.cuda.nkernels);
    CHECK(!b.have_emu);
    kg_build_free(&b);
    /* limits tighter than the default's 256 threads: the limits stage, a resource limit */
    kg_gpu_limits tight;
    CHECK(kg_gpu_limits_for_arch("sm_90", &tight) == 0);
    tight.max_threads_per_block = 32;
    o.limits = &tight;
    CHECK(kg_candidate_build(p, &o, &b) == -1);
    CHECK(b.front.error.stage == KG_BUILD_LIMITS && b.front.error.over_limit);
    CHECK(b.have_cubin && b.cubin.nres > 0); /* compiled, then rejected: the resources are there */
    kg_build_free(&b);
    o.limits = NULL;
    /* a source NVRTC rejects: the compile stage with its log */
    o.source = "extern \"C\" __global__ void kgen_k0(void) { this is not CUDA; }\n";
    CHECK(kg_candidate_build(p, &o, &b) == -1);
    CHECK(b.front.error.stage == KG_BUILD_COMPILE && b.tool == KG_BUILD_TOOL_NVRTC);
    CHECK(!strncmp(b.front.error.msg, "NVRTC failed:\n", 14));
    kg_build_free(&b);
    o.source = NULL;
  } else {
    printf("skip: NVRTC checks (%s)\n", why);
  }
  o.arch = "sm_77";
  CHECK(kg_candidate_build(p, &o, &b) == -1);
  CHECK(nvrtc ? b.front.error.stage == KG_BUILD_LIMITS || b.front.error.stage == KG_BUILD_COMPILE
              : b.front.error.stage == KG_BUILD_COMPILE);
  kg_build_free(&b);

  /* the emulator: the arch's limits, NVRTC where it loads, the host build; it runs and verifies */
  o.arch = "sm_90";
  o.emulate = 1;
  CHECK(kg_candidate_build(p, &o, &b) == 0);
  CHECK(b.have_emu && b.emu.handle && b.have_cubin == nvrtc);
  kg_data d;
  if (b.have_emu && kg_data_init(&d, p, 5) == 0) {
    kg_data_reference(&d, p, 5);
    kg_data_poison(&d, p);
    const kg_cuda_program *cp = &b.front.cuda;
    int na = p->ninputs + p->noutputs + cp->ntemps;
    float **args = calloc((size_t)na + 1, sizeof *args);
    int n = 0;
    for (int i = 0; i < p->ninputs; i++) args[n++] = d.inputs[i];
    for (int i = 0; i < p->noutputs; i++) args[n++] = d.outputs[i];
    for (int t = 0; t < cp->ntemps; t++) args[n++] = calloc((size_t)cp->temp_elems[t] + 1, sizeof(float));
    char err[512];
    CHECKF(kg_emu_run_program(&b.emu, cp, args, err, sizeof err) == 0, "%s", err);
    kg_verify_result v = kg_verify(p, &d, 1e-4);
    CHECKF(v.ok, "%s", v.msg);
    for (int t = 0; t < cp->ntemps; t++) free(args[p->ninputs + p->noutputs + t]);
    free(args);
    kg_data_free(&d);
  }
  kg_build_free(&b);
  kg_trace_free(&bad);
}

int main(void) {
  test_stats();
  test_timing();
  kg_program *p = kg_test_load_sizes(KG_TEST_MATMUL, "M=48 N=40 K=24");
  CHECK(p != NULL);
  if (p) {
    test_build_c(p);
    test_build_cuda(p);
    kg_program_free(p);
  }
  TEST_END();
}
