/* Unfused search spaces (kg_space_opts.unfused, `kgen tune --no-fuse`), the baseline of the fusion experiment:
 *   - every library workload and every bench/workloads .te file at its `# sizes:`, on C and on CUDA (sm_90 limits): the
 *     unfused space has sketches, the default schedule keeps every stage at root, and of 64 random points (the
 *     sketches taken in turn) some realize and every one that does keeps every program stage at root, checked
 *     apart from kg_space_check_unfused (the stage states and the trace's steps); how many were rejected for
 *     fusing is printed. C: the first realized point of each sketch builds and verifies; CUDA: every realized point
 *     prints within sm_90's launch limits, and for softmax and mlp_gelu the first realized point of each sketch
 *     runs on the emulator and verifies;
 *   - a sketch that inlines a stage or computes it at another's loop, added to an unfused space, never realizes;
 *   - for the fusion-friendly workloads (softmax, layernorm, bias_gelu_residual, rmsnorm, mlp_gelu) the fused
 *     space does fuse at some point on each target, so the option changes the space;
 *   - kg_tune with no_fuse on the C target (softmax, mlp_gelu, a few trials): the best is verified, every record's
 *     trace and the best's keep every program stage at root; a fusing record planted in the log, faster than any,
 *     is not taken as the best of a no-fuse run, while a fusing run on the same log takes it. */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kgen.h"
#include "testlib.h"
#include "../base/rng.h"
#include "../runtime/nvrtc.h"
#include "../runtime/pipeline.h"
#include "../gen/space.h"
#include "../search/tune.h"
#include "../tlog/tlog.h"

#define POINTS 64

static kg_gpu_limits sm90;
static int have_nvrtc;
static char tmpdir[256];

/* Whether s keeps every program stage at root, judged apart from kg_space_check_unfused: by each stage's state,
 * and by the trace (no compute_inline or compute_at names a program stage). why gets the first offence. */
static int stages_at_root(const kg_schedule *s, char *why, size_t len) {
  for (int i = 0; i < s->nstages; i++)
    if (s->stages[i]->origin == KG_ORIGIN_PROGRAM && s->stages[i]->attach != KG_ATTACH_ROOT) {
      snprintf(why, len, "stage %s is %s", s->stages[i]->name,
               s->stages[i]->attach == KG_ATTACH_INLINE ? "inlined" : "computed at another stage");
      return 0;
    }
  for (int k = 0; k < s->trace.nsteps; k++) {
    const kg_step *st = &s->trace.steps[k];
    if (st->kind != KG_STEP_COMPUTE_INLINE && st->kind != KG_STEP_COMPUTE_AT) continue;
    for (int j = 0; j < s->prog->nstages; j++)
      if (!strcmp(s->prog->stages[j]->name, st->stage)) {
        snprintf(why, len, "step %d: %s %s", k + 1, kg_step_names[st->kind], st->stage);
        return 0;
      }
  }
  return 1;
}

static int is_fusion_friendly(const char *path) {
  static const char *const names[] = {"te/lib/softmax.te", "te/lib/layernorm.te", "te/lib/bias_gelu_residual.te",
                                      "te/lib/rmsnorm.te", "bench/workloads/mlp_gelu.te"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!strcmp(path, names[i])) return 1;
  return 0;
}

static void verify_c(kg_test_workload *w, const kg_schedule *s, const char *what, const char *trace) {
  kg_pipeline pl;
  char err[4096];
  int built = kg_pipeline_build(s, KG_TARGET_C, &pl, err, sizeof err) == 0;
  CHECKF(built, "%s: build failed: %s\ntrace:\n%s", what, err, trace);
  if (built) {
    kg_verify_result v = kg_pipeline_verify(&pl, w->p, &w->d, 0);
    CHECKF(v.ok, "%s: verify failed: %s\ntrace:\n%s", what, v.msg, trace);
  }
  kg_pipeline_free(&pl);
}

/* Prints s as CUDA within sm_90's limits; with emulate, runs it on the emulator against w's reference. */
static void check_cuda(kg_test_workload *w, const kg_schedule *s, const char *what, const char *trace, int emulate) {
  kg_arena a;
  kg_arena_init(&a);
  char err[2048];
  kg_cuda_program prog;
  kg_lowered *lw = kg_lower(s, KG_TARGET_CUDA, &a, err, sizeof err);
  int printed = lw && kg_codegen_cuda(lw, "kgen", &prog, err, sizeof err) == 0;
  kg_arena_free(&a);
  CHECKF(printed, "%s: does not print as CUDA: %s\ntrace:\n%s", what, err, trace);
  if (!printed) return;
  CHECKF(kg_gpu_check_limits(&prog, NULL, &sm90, err, sizeof err) == 0, "%s: %s\ntrace:\n%s", what, err, trace);
  if (emulate) {
    kg_emu_module m;
    int rc = kg_emu_build(&prog, &m);
    CHECKF(rc == 0, "%s: emulator build failed:\n%s", what, m.log ? m.log : "(no log)");
    if (rc == 0)
      CHECKF(kg_test_emu_verify(&m, &prog, w, err, sizeof err), "%s: %s\ntrace:\n%s", what, err, trace);
    kg_emu_module_free(&m);
  }
  kg_cuda_program_free(&prog);
}

/* Some realized point of the fused space fuses a program stage. */
static int fused_space_fuses(const kg_program *p, kg_target_kind target) {
  kg_space *sp = kg_space_new(p, target, target == KG_TARGET_CUDA ? &sm90 : NULL);
  uint64_t rng = 0x66757365ull;
  int found = 0;
  char err[1024];
  for (int i = 0; i < 4 * POINTS && !found; i++) {
    kg_point pt;
    kg_space_sample(sp, i % sp->nsketches, &rng, &pt);
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    found = s && kg_space_check_unfused(s, NULL, 0) != 0;
    kg_schedule_free(s);
  }
  kg_space_free(sp);
  return found;
}

/* The unfused space of one workload on one target. *tried and *rejected count points and rejections for fusing. */
static void check_space(kg_test_workload *w, const char *path, kg_target_kind target, int *tried, int *rejected) {
  const char *tname = target == KG_TARGET_CUDA ? "cuda" : "c";
  kg_space_opts o = {.unfused = 1};
  kg_space *sp = kg_space_new_opts(w->p, target, target == KG_TARGET_CUDA ? &sm90 : NULL, &o);
  CHECKF(sp->nsketches >= 1, "%s %s: no unfused sketch", path, tname);
  CHECK(sp->unfused);
  char why[512], err[1024];
  /* the default schedule the tuner measures first */
  kg_schedule *d = kg_schedule_new(w->p);
  if (target == KG_TARGET_CUDA) kg_schedule_gpu_default(d, 256);
  CHECKF(stages_at_root(d, why, sizeof why) && kg_space_check_unfused(d, err, sizeof err) == 0,
         "%s %s: the default schedule fuses: %s", path, tname, why);
  kg_schedule_free(d);
  int emulate = target == KG_TARGET_CUDA && have_nvrtc &&
                (strstr(path, "softmax") || strstr(path, "mlp_gelu"));
  uint64_t rng = 0x756e6675ull;
  int realized = 0, here_rejected = 0, checked[KG_SPACE_MAX_SKETCHES] = {0};
  for (int i = 0; i < POINTS; i++) {
    int k = i % sp->nsketches;
    kg_point pt;
    kg_space_sample(sp, k, &rng, &pt);
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    if (!s) {
      here_rejected += strstr(err, "unfused search:") != NULL;
      continue;
    }
    realized++;
    char what[600], *trace = kg_trace_to_text(&s->trace);
    snprintf(what, sizeof what, "%s %s sketch %s point %d", path, tname, sp->sketches[k].name, i);
    CHECKF(stages_at_root(s, why, sizeof why), "%s: fuses: %s\ntrace:\n%s", what, why, trace);
    if (target == KG_TARGET_CUDA) check_cuda(w, s, what, trace, emulate && !checked[k]);
    else if (!checked[k]) verify_c(w, s, what, trace);
    checked[k] = 1;
    free(trace);
    kg_schedule_free(s);
  }
  CHECKF(realized > 0, "%s %s: none of %d unfused points realized", path, tname, POINTS);
  printf("  %-32s %-4s %d sketches, %2d/%d realized, %d rejected for fusing\n", path, tname, sp->nsketches, realized,
         POINTS, here_rejected);
  *tried += POINTS;
  *rejected += here_rejected;
  kg_space_free(sp);
  if (is_fusion_friendly(path))
    CHECKF(fused_space_fuses(w->p, target), "%s %s: the fused space never fuses", path, tname);
}

static void check_workload(const char *path, int *tried, int *rejected) {
  kg_test_workload w;
  if (kg_test_workload_load(&w, path) != 0) return;
  check_space(&w, path, KG_TARGET_C, tried, rejected);
  check_space(&w, path, KG_TARGET_CUDA, tried, rejected);
  kg_test_workload_free(&w);
}

/* A rule's mistake does not get through: a sketch added to an unfused space that inlines a stage, or computes one
 * at another's loop, realizes to nothing, with an error naming the stage. */
static int realize_inline_e(const kg_sketch *sk, const kg_point *pt, kg_schedule *s, char *err, size_t errlen) {
  (void)sk, (void)pt;
  kg_step st = {.kind = KG_STEP_COMPUTE_INLINE, .stage = "e"};
  return kg_schedule_apply(s, &st, err, errlen);
}

static int realize_at_m(const kg_sketch *sk, const kg_point *pt, kg_schedule *s, char *err, size_t errlen) {
  (void)sk, (void)pt;
  kg_step st = {.kind = KG_STEP_COMPUTE_AT, .stage = "m", .names = {"e", "i"}, .nnames = 2};
  return kg_schedule_apply(s, &st, err, errlen);
}

static void test_rejects(void) {
  kg_program *p = kg_test_load_sizes(KG_TEST_SOFTMAX, "N=4 D=8");
  CHECK(p != NULL);
  if (!p) return;
  kg_space_opts o = {.unfused = 1};
  kg_space *sp = kg_space_new_opts(p, KG_TARGET_C, NULL, &o);
  CHECK(kg_space_add_sketch(sp, "test/inline", realize_inline_e, NULL) != NULL);
  CHECK(kg_space_add_sketch(sp, "test/at", realize_at_m, NULL) != NULL);
  char err[512];
  kg_point pt = {.sketch = kg_space_find_sketch(sp, "test/inline")};
  kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
  CHECK(s == NULL);
  CHECK_STR_CONTAINS(err, "unfused search: stage 'e' is inlined into its readers");
  kg_schedule_free(s);
  pt.sketch = kg_space_find_sketch(sp, "test/at");
  s = kg_space_realize(sp, &pt, err, sizeof err);
  CHECK(s == NULL);
  CHECK_STR_CONTAINS(err, "unfused search: stage 'm' is computed at stage 'e' loop 'i'");
  kg_schedule_free(s);
  kg_space_free(sp);
  /* the same sketches in a fusing space realize */
  sp = kg_space_new(p, KG_TARGET_C, NULL);
  CHECK(kg_space_add_sketch(sp, "test/inline", realize_inline_e, NULL) != NULL);
  pt.sketch = kg_space_find_sketch(sp, "test/inline");
  s = kg_space_realize(sp, &pt, err, sizeof err);
  CHECKF(s != NULL, "%s", err);
  CHECK(s && kg_space_check_unfused(s, NULL, 0) == -1);
  kg_schedule_free(s);
  kg_space_free(sp);
  kg_program_free(p);
}

/* ---- tuning ---- */

static void opts(kg_tune_opts *o, const char *log, int trials, int no_fuse) {
  memset(o, 0, sizeof *o);
  o->measure.target = KG_TARGET_C;
  o->measure.min_repeat_s = 0.005;
  o->measure.timeout_s = 120; /* a busy machine must not turn a slow candidate into a "timeout" record */
  o->trials = trials;
  o->log_path = log;
  o->seed = 3;
  o->model = KG_MODEL_XGB;
  o->population = 64;
  o->generations = 2;
  o->per_round = 5;
  o->no_fuse = no_fuse;
  o->confirm = -1; /* the planted record's time must stay as planted (test_tune.c has the confirmation) */
}

/* Applies trace to a fresh default schedule of p; NULL when it does not apply. */
static kg_schedule *applied(const kg_program *p, const kg_trace *t) {
  kg_schedule *s = kg_schedule_new(p);
  char err[512];
  if (kg_schedule_apply_trace(s, t, err, sizeof err) == 0) return s;
  fprintf(stderr, "trace does not apply: %s\n", err);
  kg_schedule_free(s);
  return NULL;
}

/* A no-fuse run of p: a verified best, and every record and the best keep every program stage at root. */
static void tune_unfused(const kg_program *p, const char *name, const char *log) {
  kg_tune_task t = {p, name, NULL, NULL};
  kg_tune_opts o;
  opts(&o, log, 10, 1);
  kg_tune_report rep;
  char err[1024], why[512];
  int rc = kg_tune(&t, 1, &o, &rep, err, sizeof err);
  CHECKF(rc == 0, "%s: %s", name, err);
  CHECK(rep.trials == 10);
  CHECKF(rep.tasks[0].best_s > 0 && rep.tasks[0].default_s > 0, "%s: best %g default %g", name, rep.tasks[0].best_s,
         rep.tasks[0].default_s);
  kg_schedule *s = applied(p, &rep.tasks[0].best_trace);
  CHECKF(s && stages_at_root(s, why, sizeof why), "%s: the best fuses: %s", name, s ? why : "does not apply");
  kg_schedule_free(s);
  printf("%s no-fuse: default %.3f ms, best %.3f ms (sketch %s)\n", name, rep.tasks[0].default_s * 1e3,
         rep.tasks[0].best_s * 1e3, rep.tasks[0].best_sketch ? rep.tasks[0].best_sketch : "-");
  kg_tune_report_free(&rep);
  kg_tlog l;
  kg_tlog_init(&l);
  CHECK(kg_tlog_read(&l, log, NULL, err, sizeof err) == 0);
  CHECK(l.n == 10);
  for (int i = 0; i < l.n; i++) {
    CHECKF(!strcmp(l.recs[i].status, "ok"), "%s record %d: %s %s", name, i, l.recs[i].status, l.recs[i].msg);
    s = applied(p, &l.recs[i].trace);
    CHECKF(s && stages_at_root(s, why, sizeof why), "%s record %d fuses: %s", name, i, s ? why : "does not apply");
    kg_schedule_free(s);
  }
  kg_tlog_free(&l);
}

/* A fusing record, faster than anything, planted in a no-fuse run's log: a no-fuse run does not take it as its
 * best, a fusing run does (so the record does match the task, and only the rule keeps it out). */
static void planted_fused_record(const kg_program *p, const char *log) {
  kg_tlog l;
  kg_tlog_init(&l);
  char err[1024], why[512];
  CHECK(kg_tlog_read(&l, log, NULL, err, sizeof err) == 0 && l.n > 0);
  if (l.n == 0) return;
  kg_tlog_record r = l.recs[0];
  kg_trace tr;
  kg_trace_init(&tr);
  static const char fused[] = "compute_inline e\n";
  CHECK(kg_trace_parse(&tr, "planted", fused, strlen(fused), err, sizeof err) == 0);
  double fast = 1e-9;
  r.trace = tr;
  r.status = "ok";
  r.msg = "";
  r.times = &fast;
  r.ntimes = 1;
  r.sketch = NULL;
  r.nknobs = 0;
  kg_tlog_writer *w = kg_tlog_open(log, err, sizeof err);
  CHECKF(w != NULL, "%s", err);
  if (w) {
    CHECK(kg_tlog_append(w, &r, err, sizeof err) == 0);
    CHECK(kg_tlog_flush(w, err, sizeof err) == 0);
    kg_tlog_close(w);
  }
  kg_trace_free(&tr);
  kg_tlog_free(&l);

  kg_tune_task t = {p, "planted", NULL, NULL};
  kg_tune_opts o;
  opts(&o, log, 2, 1);
  kg_tune_report rep;
  CHECKF(kg_tune(&t, 1, &o, &rep, err, sizeof err) == 0, "%s", err);
  CHECK(rep.tasks[0].loaded == 11);
  CHECKF(rep.tasks[0].best_s > 10 * fast, "no-fuse run: best %g s, the planted record's time", rep.tasks[0].best_s);
  kg_schedule *s = applied(p, &rep.tasks[0].best_trace);
  CHECKF(s && stages_at_root(s, why, sizeof why), "no-fuse run after the planted record: best fuses: %s",
         s ? why : "does not apply");
  kg_schedule_free(s);
  kg_tune_report_free(&rep);
  opts(&o, log, 1, 0);
  CHECKF(kg_tune(&t, 1, &o, &rep, err, sizeof err) == 0, "%s", err);
  CHECKF(rep.tasks[0].best_s == fast, "fusing run: best %g s, not the planted record's", rep.tasks[0].best_s);
  kg_tune_report_free(&rep);
}

static void test_tune(void) {
  kg_program *sm = kg_test_load_sizes(KG_TEST_SOFTMAX, "N=64 D=64");
  char *text = kg_test_read_file("bench/workloads/mlp_gelu.te", NULL);
  kg_program *mg = text ? kg_test_load_sizes(text, "M=32 K=24 N=40") : NULL;
  free(text);
  CHECK(sm && mg);
  char log[320];
  if (sm) {
    snprintf(log, sizeof log, "%s/softmax.kglog", tmpdir);
    tune_unfused(sm, "softmax", log);
    planted_fused_record(sm, log);
  }
  if (mg) {
    snprintf(log, sizeof log, "%s/mlp_gelu.kglog", tmpdir);
    tune_unfused(mg, "mlp_gelu", log);
  }
  kg_program_free(sm);
  kg_program_free(mg);
}

int main(void) {
  CHECK(kg_gpu_limits_for_arch("sm_90", &sm90) == 0);
  char why[512];
  have_nvrtc = kg_nvrtc_available(why, sizeof why) == 0;
  if (!have_nvrtc) printf("NVRTC unavailable (%s): emulator runs skipped\n", why);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kgen-test-unfused-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_rejects();
  test_tune();

  char *files[KG_TEST_MAX_WORKLOADS];
  int nlib = 0, n = kg_test_list_workloads(files, KG_TEST_MAX_WORKLOADS, &nlib);
  int tried = 0, rejected = 0, nwl = 0;
  for (int i = 0; i < n; i++)
    if (!strncmp(files[i], "te/lib/", 7)) check_workload(files[i], &tried, &rejected), nwl++;
  kg_test_free_workloads(files, n);
  DIR *dir = opendir("bench/workloads");
  CHECK(dir != NULL);
  struct dirent *de;
  while (dir && (de = readdir(dir))) {
    size_t l = strlen(de->d_name);
    if (l <= 3 || strcmp(de->d_name + l - 3, ".te")) continue;
    char path[512];
    snprintf(path, sizeof path, "bench/workloads/%s", de->d_name);
    check_workload(path, &tried, &rejected);
    nwl++;
  }
  if (dir) closedir(dir);
  CHECKF(nwl >= 16, "only %d workloads", nwl);
  printf("unfused spaces: %d workloads, %d points, %d rejected for fusing (%.1f%%)\n", nwl, tried, rejected,
         tried ? 100.0 * rejected / tried : 0.0);

  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  TEST_END();
}
