/* The measurement harness on the C target (no GPU needed): one batch mixing good candidates with every kind of
 * failure (illegal trace, compiler error, out-of-bounds write, input write, hang, wrong values, an unwritten
 * element), each recorded with its status while the harness keeps going and later candidates still measure;
 * then the run lock that measurers sharing a machine take turns on, and the CUDA emulator path. */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../base/clock.h"
#include "../runtime/measure.h"
#include "../runtime/pch.h"
#include "testlib.h"

#define M_ 33
#define N_ 20
#define K_ 17

static kg_program *load_matmul(void) {
  kg_binding b[] = {{"M", M_}, {"N", N_}, {"K", K_}};
  return kg_test_load_lib("matmul", b, 3);
}

/* A correct matmul with the generated entry's calling convention, optionally leaving one element unwritten or
 * adding an error; head goes before the function and prologue at its start. */
static char *matmul_source_with(const char *head, const char *prologue, int skip_i, int skip_j, float add) {
  char *s = malloc(2048);
  snprintf(s, 2048,
           "%s"
           "void kgen_entry_args(float **a) {\n"
           "%s"
           "  for (int i = 0; i < %d; i++)\n"
           "    for (int j = 0; j < %d; j++) {\n"
           "      if (i == %d && j == %d) continue;\n"
           "      float acc = 0;\n"
           "      for (int k = 0; k < %d; k++) acc += a[0][i * %d + k] * a[1][k * %d + j];\n"
           "      a[2][i * %d + j] = acc + %ff;\n"
           "    }\n"
           "}\n",
           head, prologue, M_, N_, skip_i, skip_j, K_, K_, N_, N_, add);
  return s;
}
static char *matmul_source(int skip_i, int skip_j, float add) { return matmul_source_with("", "", skip_i, skip_j, add); }

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

/* KGEN_TEST_VERBOSE=1 prints every result (to see the messages the harness gives). */
static void show(const char *what, const kg_measure_result *r, int n) {
  if (!getenv("KGEN_TEST_VERBOSE")) return;
  for (int i = 0; i < n; i++)
    printf("%s[%d]: %s compile %.3f s, median %.3g s [%.3g, %.3g] x%d, %.3g GFLOP/s, err %.2g: %s\n", what, i,
           kg_status_names[r[i].status], r[i].compile_s, r[i].median_s, r[i].min_s, r[i].max_s, r[i].runs,
           r[i].gflops, r[i].max_rel_err, r[i].msg);
}

static void check_ok(const kg_measure_result *r, double flops, double min_repeat_s, const char *what) {
  CHECKF(r->status == KG_STATUS_OK, "%s: %s: %s", what, kg_status_names[r->status], r->msg);
  if (r->status != KG_STATUS_OK) return;
  CHECKF(r->runs >= 3, "%s: %d runs", what, r->runs);
  CHECK(r->times != NULL);
  double total = 0, mn = INFINITY, mx = 0;
  for (int i = 0; r->times && i < r->runs; i++) {
    total += r->times[i];
    mn = fmin(mn, r->times[i]);
    mx = fmax(mx, r->times[i]);
  }
  CHECKF(total >= min_repeat_s, "%s: %g s of repeats", what, total);
  CHECK(r->min_s == mn && r->max_s == mx);
  CHECK(r->min_s <= r->median_s && r->median_s <= r->max_s);
  CHECK(r->median_s > 0);
  CHECK(r->gflops > 0 && r->gbps > 0);
  CHECK(fabs(r->gflops - flops / r->median_s * 1e-9) <= 1e-9 * r->gflops);
  CHECK(r->compile_s > 0);
  CHECK(r->max_rel_err < 1e-3);
}

static void test_cpu_faults(const kg_program *p, const char *tmp) {
  kg_measure_opts o = {0};
  o.target = KG_TARGET_C;
  o.timeout_s = 5; /* the hanging candidate costs this much; the others must not come near it on a busy machine */
  o.min_repeat_s = 0.02;
  o.seed = 5;
  o.build_threads = 2;
  char err[512];
  kg_measurer *m = kg_measurer_new(p, &o, err, sizeof err);
  CHECKF(m != NULL, "%s", err);
  if (!m) return;
  CHECK(kg_measurer_runner(m) == KG_RUNNER_CPU);
  CHECK(strlen(kg_measurer_device(m)) > 0);
  CHECK(strlen(kg_measurer_arch(m)) > 0);
  CHECK(kg_measurer_worker_starts(m) == 1);

  kg_schedule *rs = kg_schedule_new(p);
  kg_schedule_random(rs, 7, KG_TARGET_C, 6);
  kg_trace bad;
  kg_trace_init(&bad);
  const char *bad_text = "split C nosuchloop 4\n";
  CHECK(kg_trace_parse(&bad, "bad", bad_text, strlen(bad_text), err, sizeof err) == 0);
  kg_trace tiled;
  kg_trace_init(&tiled);
  const char *tiled_text = "split C i 8\nsplit C j 4\nreorder C i.o j.o i.i j.i\nparallel C i.o\n";
  CHECK(kg_trace_parse(&tiled, "tiled", tiled_text, strlen(tiled_text), err, sizeof err) == 0);

  char *unwritten = matmul_source(5, 7, 0), *wrong = matmul_source(-1, -1, 0.5f), *good = matmul_source(-1, -1, 0);
  char overrun[256];
  /* the output's data ends within 64 bytes of its guard page: 16 floats past the end is inside the guard */
  snprintf(overrun, sizeof overrun, "void kgen_entry_args(float **a) { a[2][%d + 16] = 1.0f; }\n", M_ * N_);
  enum { DEFAULT, RANDOM, ILLEGAL, NOCOMPILE, OVERRUN, INPUT_WRITE, HANG, WRONG, UNWRITTEN, AFTER, TILED, GOOD, NC };
  kg_candidate c[NC] = {
      [DEFAULT] = {NULL, NULL},
      [RANDOM] = {&rs->trace, NULL},
      [ILLEGAL] = {&bad, NULL},
      [NOCOMPILE] = {NULL, "void kgen_entry_args(float **a) { this is not C; }\n"},
      [OVERRUN] = {NULL, overrun},
      [INPUT_WRITE] = {NULL, "void kgen_entry_args(float **a) { a[0][3] = 0.0f; }\n"},
      [HANG] = {NULL, "void kgen_entry_args(float **a) { (void)a; volatile int go = 1; while (go) {} }\n"},
      [WRONG] = {NULL, wrong},
      [UNWRITTEN] = {NULL, unwritten},
      [AFTER] = {NULL, NULL},
      [TILED] = {&tiled, NULL},
      [GOOD] = {NULL, good},
  };
  kg_measure_result r[NC];
  double t0 = kg_now_s();
  kg_measure_batch(m, c, NC, r);
  double batch_s = kg_now_s() - t0;
  show("cpu", r, NC);
  double flops = kg_program_flops(p);

  check_ok(&r[DEFAULT], flops, o.min_repeat_s, "default");
  check_ok(&r[RANDOM], flops, o.min_repeat_s, "random");
  check_ok(&r[AFTER], flops, o.min_repeat_s, "default after the faults");
  check_ok(&r[TILED], flops, o.min_repeat_s, "tiled");
  check_ok(&r[GOOD], flops, o.min_repeat_s, "hand-written");

  CHECKF(r[ILLEGAL].status == KG_STATUS_COMPILE_ERROR, "%s", kg_status_names[r[ILLEGAL].status]);
  CHECK_STR_CONTAINS((const char *)r[ILLEGAL].msg, "nosuchloop");
  CHECKF(r[NOCOMPILE].status == KG_STATUS_COMPILE_ERROR, "%s", kg_status_names[r[NOCOMPILE].status]);
  CHECK_STR_CONTAINS((const char *)r[NOCOMPILE].msg, "C compiler failed");
  CHECK_STR_CONTAINS((const char *)r[NOCOMPILE].msg, "error");
  CHECKF(r[OVERRUN].status == KG_STATUS_RUNTIME_ERROR, "%s: %s", kg_status_names[r[OVERRUN].status], r[OVERRUN].msg);
  CHECK_STR_CONTAINS((const char *)r[OVERRUN].msg, "SIGSEGV");
  CHECKF(r[INPUT_WRITE].status == KG_STATUS_RUNTIME_ERROR, "%s: %s", kg_status_names[r[INPUT_WRITE].status],
         r[INPUT_WRITE].msg);
  CHECK_STR_CONTAINS((const char *)r[INPUT_WRITE].msg, "SIGSEGV");
  CHECKF(r[HANG].status == KG_STATUS_TIMEOUT, "%s: %s", kg_status_names[r[HANG].status], r[HANG].msg);
  CHECKF(r[WRONG].status == KG_STATUS_WRONG_ANSWER, "%s: %s", kg_status_names[r[WRONG].status], r[WRONG].msg);
  CHECK(r[WRONG].max_rel_err > 1e-3);
  CHECKF(r[UNWRITTEN].status == KG_STATUS_WRONG_ANSWER, "%s", kg_status_names[r[UNWRITTEN].status]);
  CHECK_STR_CONTAINS((const char *)r[UNWRITTEN].msg, "unwritten");
  CHECK_STR_CONTAINS((const char *)r[UNWRITTEN].msg, "C[5,7]");
  for (int i = 0; i < NC; i++) {
    if (r[i].status != KG_STATUS_OK) CHECKF(r[i].runs == 0 && r[i].times == NULL, "candidate %d", i);
    CHECK(r[i].res == NULL && r[i].nres == 0); /* resources are a CUDA matter */
  }
  /* the overrun, the input write and the hang each cost the worker its life */
  CHECKF(kg_measurer_worker_starts(m) == 4, "%d starts", kg_measurer_worker_starts(m));
  CHECKF(batch_s < 120, "the batch took %.1f s (the hang was not cut?)", batch_s);

  /* the next batch reuses the worker and the cached data */
  for (int i = 0; i < NC; i++) kg_measure_result_free(&r[i]);
  kg_candidate again[2] = {{NULL, NULL}, {&rs->trace, NULL}};
  kg_measure_batch(m, again, 2, r);
  check_ok(&r[0], flops, o.min_repeat_s, "second batch, default");
  check_ok(&r[1], flops, o.min_repeat_s, "second batch, random");
  CHECK(kg_measurer_worker_starts(m) == 4);
  for (int i = 0; i < 2; i++) kg_measure_result_free(&r[i]);

  /* verify-only: no times */
  kg_measurer_free(m);
  o.no_timing = 1;
  m = kg_measurer_new(p, &o, err, sizeof err);
  CHECKF(m != NULL, "%s", err);
  if (m) {
    kg_measure_batch(m, again, 1, r);
    CHECK(r[0].status == KG_STATUS_OK && r[0].runs == 0 && r[0].times == NULL && r[0].median_s == 0);
    kg_measure_result_free(&r[0]);
    kg_measurer_free(m);
  }
  /* the precompiled header's folder lives as long as the process (runtime/pch.h): released first */
  kg_pch_release();
  CHECKF(count_entries(tmp) == 0, "%d build folders left in %s", count_entries(tmp), tmp);

  free(unwritten);
  free(wrong);
  free(good);
  kg_trace_free(&bad);
  kg_trace_free(&tiled);
  kg_schedule_free(rs);
}

/* The emulator runner: the default (the naive GPU mapping) and the same mapping with 64 threads, plus faults the
 * worker survives: a kernel writing past its output (SIGSEGV in the worker) and one returning wrong values. */
static char *cuda_source(long long offset, const char *extra) {
  char *s = malloc(1024);
  snprintf(s, 1024,
           "extern \"C\" __global__ void kgen_k0(const float* __restrict__ A, const float* __restrict__ B,\n"
           "                                    float* __restrict__ C) {\n"
           "  int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
           "  if (t < %d) C[t + %lldLL] = 1.0f;\n"
           "  %s\n"
           "}\n"
           "#ifdef KG_EMULATE\n"
           "extern \"C\" void kgen_k0__emu(float **a) { kgen_k0(a[0], a[1], a[2]); }\n"
           "#endif\n",
           M_ * N_, offset, extra);
  return s;
}

static void test_emulator(const kg_program *p) {
  kg_measure_opts o = {0};
  o.target = KG_TARGET_CUDA;
  o.emulate = 1;
  o.timeout_s = 20;
  o.min_repeat_s = 0.01;
  o.seed = 9;
  o.build_threads = 2;
  char err[512];
  kg_measurer *m = kg_measurer_new(p, &o, err, sizeof err);
  CHECKF(m != NULL, "%s", err);
  if (!m) return;
  CHECK(kg_measurer_runner(m) == KG_RUNNER_EMULATOR);
  CHECK(strcmp(kg_measurer_arch(m), "sm_86") == 0);
  kg_schedule *g = kg_schedule_new(p);
  kg_schedule_gpu_default(g, 64);
  /* a legal schedule whose block is beyond every GPU's 1024 threads: resource_limit, never run */
  kg_trace big;
  kg_trace_init(&big);
  static const char big_text[] = "split C i 2048\nbind C i.i threadIdx.x\n";
  CHECK(kg_trace_parse(&big, "big", big_text, strlen(big_text), err, sizeof err) == 0);
  char *overrun = cuda_source(M_ * N_ + 16, ""), *wrong = cuda_source(0, "");
  enum { DEFAULT, G64, OVERRUN, WRONG, BIG, AFTER, NC };
  kg_candidate c[NC] = {{NULL, NULL}, {&g->trace, NULL}, {NULL, overrun}, {NULL, wrong}, {&big, NULL},
                        {&g->trace, NULL}};
  kg_measure_result r[NC];
  kg_measure_batch(m, c, NC, r);
  show("emulator", r, NC);
  {
    double flops = kg_program_flops(p);
    check_ok(&r[DEFAULT], flops, o.min_repeat_s, "emulator default");
    check_ok(&r[G64], flops, o.min_repeat_s, "emulator gpu_default 64");
    check_ok(&r[AFTER], flops, o.min_repeat_s, "emulator after the faults");
    CHECKF(r[OVERRUN].status == KG_STATUS_RUNTIME_ERROR, "%s: %s", kg_status_names[r[OVERRUN].status],
           r[OVERRUN].msg);
    CHECK_STR_CONTAINS((const char *)r[OVERRUN].msg, "SIGSEGV");
    CHECKF(r[WRONG].status == KG_STATUS_WRONG_ANSWER, "%s: %s", kg_status_names[r[WRONG].status], r[WRONG].msg);
    CHECKF(r[BIG].status == KG_STATUS_RESOURCE_LIMIT, "%s: %s", kg_status_names[r[BIG].status], r[BIG].msg);
    CHECK_STR_CONTAINS((const char *)r[BIG].msg, "threadIdx.x extent 2048 exceeds the limit 1024");
    CHECKF(kg_measurer_worker_starts(m) == 2, "%d starts", kg_measurer_worker_starts(m));
  }
  kg_trace_free(&big);
  for (int i = 0; i < NC; i++) kg_measure_result_free(&r[i]);
  free(overrun);
  free(wrong);
  kg_schedule_free(g);
  kg_measurer_free(m);
}

/* The GPU runner, when this machine has one (else kg_measurer_new must refuse with the reason): good candidates
 * with their ptxas resources, an illegal address (the worker restarts), an input write, a wrong answer. */
static void test_gpu(const kg_program *p) {
  kg_measure_opts o = {0};
  o.target = KG_TARGET_CUDA;
  o.timeout_s = 20;
  o.min_repeat_s = 0.02;
  o.flush_l2 = 1;
  o.seed = 11;
  char err[512] = "";
  kg_measurer *m = kg_measurer_new(p, &o, err, sizeof err);
  if (!m) {
    CHECK(err[0] != 0);
    printf("test_measure: GPU checks skipped: %s\n", err);
    return;
  }
  CHECK(kg_measurer_runner(m) == KG_RUNNER_GPU);
  CHECK(strncmp(kg_measurer_arch(m), "sm_", 3) == 0);
  printf("test_measure: GPU: %s, %s\n", kg_measurer_device(m), kg_measurer_arch(m));
  kg_schedule *g = kg_schedule_new(p);
  kg_schedule_gpu_default(g, 64);
  char *far = cuda_source(1LL << 34, ""), *wrong = cuda_source(0, "");
  char *input = cuda_source(0, "if (t == 0) ((float *)A)[3] = 0.0f;");
  enum { DEFAULT, FAR, AFTER, INPUT, WRONG, G64, NC };
  kg_candidate c[NC] = {{NULL, NULL}, {NULL, far}, {&g->trace, NULL}, {NULL, input}, {NULL, wrong}, {&g->trace, NULL}};
  kg_measure_result r[NC];
  kg_measure_batch(m, c, NC, r);
  show("gpu", r, NC);
  double flops = kg_program_flops(p);
  check_ok(&r[DEFAULT], flops, o.min_repeat_s, "gpu default");
  check_ok(&r[AFTER], flops, o.min_repeat_s, "gpu after the illegal address");
  check_ok(&r[G64], flops, o.min_repeat_s, "gpu after the input write");
  CHECK(r[DEFAULT].nres == 1 && r[DEFAULT].res && r[DEFAULT].res[0].registers > 0);
  CHECKF(r[FAR].status == KG_STATUS_RUNTIME_ERROR, "%s: %s", kg_status_names[r[FAR].status], r[FAR].msg);
  CHECK_STR_CONTAINS((const char *)r[FAR].msg, "CUDA_ERROR");
  CHECKF(r[INPUT].status == KG_STATUS_RUNTIME_ERROR, "%s: %s", kg_status_names[r[INPUT].status], r[INPUT].msg);
  CHECK_STR_CONTAINS((const char *)r[INPUT].msg, "input");
  CHECKF(r[WRONG].status == KG_STATUS_WRONG_ANSWER, "%s: %s", kg_status_names[r[WRONG].status], r[WRONG].msg);
  CHECKF(kg_measurer_worker_starts(m) == 2, "%d starts", kg_measurer_worker_starts(m));
  for (int i = 0; i < NC; i++) kg_measure_result_free(&r[i]);
  free(far);
  free(wrong);
  free(input);
  kg_schedule_free(g);
  kg_measurer_free(m);
}

/* The run lock (kg_measure_opts.run_lock) held by another process: a running holder is waited for (past the
 * one second that tells a stopped one), a stopped holder is not: the batch runs without the lock and says so.
 * Either way the holder's pid is in the file while it holds it. */
/* A correct matmul that also spins for ms milliseconds per run: a slow candidate whose time is known ... */
/* ... or on its first run only (first_only): a first run far slower than the rest. */
static char *spin_source(int ms, int first_only) {
  char spin[640];
  snprintf(spin, sizeof spin,
           "  static int runs;\n"
           "  if (%d && runs++) goto go;\n"
           "  struct timespec t0, t;\n"
           "  clock_gettime(CLOCK_MONOTONIC, &t0);\n"
           "  do clock_gettime(CLOCK_MONOTONIC, &t);\n"
           "  while ((t.tv_sec - t0.tv_sec) * 1000.0 + (t.tv_nsec - t0.tv_nsec) * 1e-6 < %d);\n"
           "go:\n",
           first_only, ms);
  return matmul_source_with("#define _POSIX_C_SOURCE 200809L\n#include <time.h>\n", spin, -1, -1, 0);
}
static char *slow_source(int ms) { return spin_source(ms, 0); }

/* One candidate measured under o by a new measurer told of a best time (hint, 0: none). */
static void measure_hinted(const kg_program *p, const kg_measure_opts *o, double hint, const char *src,
                           kg_measure_result *r) {
  char err[512];
  kg_measurer *m = kg_measurer_new(p, o, err, sizeof err);
  CHECKF(m != NULL, "%s", err);
  memset(r, 0, sizeof *r);
  if (!m) return;
  kg_measurer_hint_best(m, hint);
  kg_candidate c = {NULL, src};
  kg_measure_batch(m, &c, 1, r);
  kg_measurer_free(m);
}

/* The early cut: a candidate whose verification run and one more run are early_cut times the fastest timed so far
 * (in this batch, an earlier one, or a hint) and long enough for repeats to cost something is timed by that run;
 * one below the factor, one too short to matter, one slow on its first run only, and everything with the cut off
 * get their repeats. The bars are set far from the spins' times, so that a loaded machine does not decide. */
static void test_early_cut(const kg_program *p) {
  kg_measure_opts o = {.target = KG_TARGET_C, .timeout_s = 10, .min_repeat_s = 0.1, .build_threads = 1, .early_cut = 4};
  char err[512];
  char *good = matmul_source(-1, -1, 0), *slow = slow_source(80), *brief = slow_source(10);
  char *cold = spin_source(200, 1);
  double flops = kg_program_flops(p);
  kg_measurer *m = kg_measurer_new(p, &o, err, sizeof err);
  CHECKF(m != NULL, "%s", err);
  if (!m) return;
  /* the first slow one has nothing to be compared with; the good one then sets the bar */
  kg_candidate c[3] = {{NULL, slow}, {NULL, good}, {NULL, slow}};
  kg_measure_result r[3];
  kg_measure_batch(m, c, 3, r);
  show("cut", r, 3);
  check_ok(&r[0], flops, o.min_repeat_s, "slow, first");
  CHECK(r[0].cut == 0 && r[0].median_s >= 0.08);
  check_ok(&r[1], flops, o.min_repeat_s, "good");
  CHECK(r[1].cut == 0);
  CHECKF(r[2].status == KG_STATUS_OK, "%s", r[2].msg);
  CHECKF(r[2].cut == 1 && r[2].runs == 1 && r[2].times, "cut %d, %d runs", r[2].cut, r[2].runs);
  if (r[2].times) CHECK(r[2].times[0] >= 0.08 && r[2].median_s == r[2].times[0] && r[2].min_s == r[2].max_s);
  CHECK(r[2].gflops > 0 && r[2].median_s < 1);
  CHECK_STR_CONTAINS((const char *)r[2].msg, "early cut");
  for (int i = 0; i < 3; i++) kg_measure_result_free(&r[i]);
  kg_measurer_free(m);

  /* a hint is the bar before anything is timed: 80 ms against 5 ms is cut, against 100 ms it is timed in full */
  measure_hinted(p, &o, 0.005, slow, &r[0]);
  CHECKF(r[0].status == KG_STATUS_OK && r[0].cut == 1 && r[0].runs == 1, "hint 5 ms: %s, cut %d, %d runs", r[0].msg,
         r[0].cut, r[0].runs);
  kg_measure_result_free(&r[0]);
  /* timed in full: within the factor of a hint (80 ms against 100 ms); slow on its verification run only (200 ms,
   * the second look finds it fast); 10 times the bar but under a quarter of a 1 s min_repeat (its repeats cost
   * little more); and anything with the cut off */
  kg_measure_opts floor = o, off = o;
  floor.min_repeat_s = 1.0;
  off.early_cut = 0;
  struct {
    const kg_measure_opts *o;
    double hint;
    const char *src, *what;
    double max_median;
  } full[] = {{&o, 0.1, slow, "hint 100 ms", 1}, {&o, 0.02, cold, "slow first run", 0.05},
              {&floor, 0.001, brief, "brief", 1}, {&off, 0.005, slow, "slow, no cut", 1}};
  for (size_t i = 0; i < sizeof full / sizeof full[0]; i++) {
    measure_hinted(p, full[i].o, full[i].hint, full[i].src, &r[0]);
    check_ok(&r[0], flops, full[i].o->min_repeat_s, full[i].what);
    CHECKF(r[0].cut == 0 && r[0].median_s < full[i].max_median, "%s: cut %d, median %g s", full[i].what, r[0].cut,
           r[0].median_s);
    kg_measure_result_free(&r[0]);
  }
  free(good);
  free(slow);
  free(brief);
  free(cold);
}

static void test_run_lock(const kg_program *p, const char *tmp) {
  char path[256];
  snprintf(path, sizeof path, "%s.lock", tmp); /* beside tmp: tmp must end empty */
  int go[2], ready[2];
  if (pipe(go) != 0 || pipe(ready) != 0) {
    CHECK(0);
    return;
  }
  pid_t holder = fork();
  if (holder == 0) {
    /* holds the lock; after a byte on go, holds it 1.5 s more and exits (which releases it) */
    int fd = open(path, O_RDWR | O_CREAT, 0666);
    char pid[32], c = 0;
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (fd < 0 || flock(fd, LOCK_EX) != 0 || ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) _exit(1);
    if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(1);
    usleep(1500000);
    _exit(0);
  }
  char c;
  CHECK(holder > 0 && read(ready[0], &c, 1) == 1);
  kg_measure_opts o = {0};
  o.target = KG_TARGET_C;
  o.timeout_s = 5;
  o.min_repeat_s = 0.01;
  o.build_threads = 1;
  o.run_lock = path;
  char err[512];
  kg_measurer *m = kg_measurer_new(p, &o, err, sizeof err);
  CHECKF(m != NULL, "%s", err);
  if (m && holder > 0) {
    kg_candidate cand = {NULL, NULL};
    kg_measure_result r;
    /* stopped holder: not waited for */
    kill(holder, SIGSTOP);
    double t0 = kg_now_s();
    kg_measure_batch(m, &cand, 1, &r);
    double waited = kg_now_s() - t0;
    CHECKF(r.status == KG_STATUS_OK && r.runs > 0, "%s", r.msg);
    CHECK(r.unlocked == 1);
    CHECKF(waited < 4.5, "%.2f s with a stopped holder", waited); /* one second of stop, then the run */
    kg_measure_result_free(&r);
    /* the same holder running, and giving the lock back 1.5 s after go: waited for */
    kill(holder, SIGCONT);
    CHECK(write(go[1], "g", 1) == 1);
    t0 = kg_now_s();
    kg_measure_batch(m, &cand, 1, &r);
    waited = kg_now_s() - t0;
    CHECKF(r.status == KG_STATUS_OK && r.runs > 0, "%s", r.msg);
    CHECK(r.unlocked == 0);
    CHECKF(waited > 1.3, "%.2f s: the running holder was not waited for", waited);
    kg_measure_result_free(&r);
    char pid[32] = "";
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && read(fd, pid, sizeof pid - 1) > 0);
    CHECKF(strtol(pid, NULL, 10) == (long)getpid(), "the file names %s", pid);
    if (fd >= 0) close(fd);
  }
  if (holder > 0) {
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
  }
  kg_measurer_free(m);
  for (int i = 0; i < 2; i++) close(go[i]), close(ready[i]);
  unlink(path);
}

int main(void) {
  /* a private TMPDIR: every build folder must be gone at the end */
  char tmp[] = "/tmp/kgen-test-measure-XXXXXX";
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("TMPDIR", tmp, 1);
  kg_program *p = load_matmul();
  CHECK(p != NULL);
  if (p) {
    test_cpu_faults(p, tmp);
    test_run_lock(p, tmp);
    test_early_cut(p);
    test_emulator(p);
    test_gpu(p);
    kg_program_free(p);
  }
  /* the precompiled header's folder lives as long as the process (runtime/pch.h): released first */
  kg_pch_release();
  CHECKF(count_entries(tmp) == 0, "%d build folders left in %s", count_entries(tmp), tmp);
  rmdir(tmp);
  TEST_END();
}
