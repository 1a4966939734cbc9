/* The tuner: tasks share a trial budget and one cost model; each round picks a task, evolves candidates for it,
 * measures them, logs every result, retrains the model. See tune.h for the contract.
 *
 *   load the log (records of each task's workload and target) -> seen set, training rows, best so far
 *   measure each task's default schedule (once per log)
 *   loop: pick a task (round-robin warm-up, then the largest expected gain per trial)
 *         evolve (search/evolve.c) -> picks not seen before
 *         measure them (runtime/measure.h), append a record per result, fsync
 *         retrain the model on every measured row, save it beside the log */
#include "tune.h"
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "evolve.h"
#include "pool.h"
#include "../base/version.h"
#include "../base/clock.h"
#include "../base/stats.h"
#include "../base/strbuf.h"
#include "../base/strset.h"
#include "../base/xalloc.h"
#include "../codegen/front.h"
#include "../runtime/estimate.h"
#include "../runtime/pipeline.h"
#include "../tlog/tlog.h"

/* A result that may rank a trace (a trace's time is the median of its results, tlog.h kg_tlog_trace_times): a time,
 * or INFINITY for a failure. */
typedef struct tres {
  char *text;
  double t;
  const char *sketch; /* NULL when unknown */
} tres;

/* Rows the model learns from: one per measured candidate of a task. */
typedef struct row {
  float feat[KG_NFEATURES];
  double median_s; /* 0: failed */
} row;

typedef struct task {
  const kg_tune_task *t;
  kg_measurer *m;
  kg_space *sp;
  kg_tlog_workload wl;
  kg_tlog_target target;
  kg_strset seen;       /* trace texts measured (this run or the log) */
  row *rows;
  int nrows, caprows;
  kg_point *pts;        /* points of successful measurements, for seeding evolution */
  double *pts_s;
  int npts, cappts;
  tres *res;            /* every result that may rank a trace (note_result), for the confirmation */
  int nres, capres;
  int confirmed;        /* measurements of the confirmation */
  double search_best_s; /* the fastest single result before the confirmation (0: none, or no confirmation) */
  double best_s;        /* 0: none yet */
  char *best_text;
  const char *best_sketch;
  double best_before;   /* best_s before this task's last round */
  int last_trials;      /* trials in this task's last round */
  int rounds, trials, loaded, failed, cut, exhausted;
  double default_s;
  char *default_text;   /* the default schedule's trace text (empty on C, the naive GPU mapping on CUDA) */
  char device_name[256], versions[512];
  int input;            /* the caller's task it tunes (one per group of a pool's workers) */
  kg_runner runner;
  char arch[64];        /* "" when the target has none */
  /* with a pool (tune.h): the group of workers that measures it, its program's handle, the picks of its last round
   * not yet submitted (queue[qhead..nqueue)), and the workers' phase times for its results */
  int group, handle;
  kg_evolve_pick *queue;
  int nqueue, qhead;
  double build_s, run_s;
} task;

static double wall_unix(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int seen_fn(void *ctx, const char *text) { return kg_strset_has(&((task *)ctx)->seen, text); }

/* The CUDA tuner's prior (search/evolve.h): candidate s's analytical estimate on the task's arch (runtime/estimate.h),
 * printed but not compiled, each kernel at the registers its per-thread arrays suggest. Thread-safe: one build per
 * call. */
static double estimate_prior(void *ctx, const kg_schedule *s) {
  const task *tk = ctx;
  const char *arch = tk->arch;
  kg_build_opts bo = {.target = KG_TARGET_CUDA, .stop = KG_BUILD_PRINT, .sched = s, .arch = arch, .at_bound_sizes = 1};
  kg_build b;
  double est = -1;
  if (kg_candidate_build(tk->t->prog, &bo, &b) == 0 && b.front.ir && b.front.cuda.nkernels > 0) {
    int n = b.front.cuda.nkernels;
    kg_kernel_quality *q = kg_xrealloc(NULL, sizeof *q * (size_t)n);
    kg_kernel_estimate *k = kg_xrealloc(NULL, sizeof *k * (size_t)n);
    char why[256];
    est = kg_cuda_estimate_build(&b.front.cuda, NULL, b.front.ir, arch, q, k, why, sizeof why);
    free(q);
    free(k);
  }
  kg_build_free(&b);
  return est;
}

static void add_row(task *tk, const float *feat, double median_s) {
  if (tk->nrows == tk->caprows) {
    tk->caprows = tk->caprows ? tk->caprows * 2 : 256;
    tk->rows = kg_xrealloc(tk->rows, sizeof *tk->rows * (size_t)tk->caprows);
  }
  row *r = &tk->rows[tk->nrows++];
  memcpy(r->feat, feat, sizeof r->feat);
  r->median_s = median_s;
}

static void add_point(task *tk, const kg_point *pt, double s) {
  if (tk->npts == tk->cappts) {
    tk->cappts = tk->cappts ? tk->cappts * 2 : 64;
    tk->pts = kg_xrealloc(tk->pts, sizeof *tk->pts * (size_t)tk->cappts);
    tk->pts_s = kg_xrealloc(tk->pts_s, sizeof *tk->pts_s * (size_t)tk->cappts);
  }
  tk->pts[tk->npts] = *pt;
  tk->pts_s[tk->npts++] = s;
}

static void add_result(task *tk, const char *text, double t, const char *sketch) {
  if (tk->nres == tk->capres) {
    tk->capres = tk->capres ? tk->capres * 2 : 64;
    tk->res = kg_xrealloc(tk->res, sizeof *tk->res * (size_t)tk->capres);
  }
  tk->res[tk->nres++] = (tres){kg_xstrdup(text), t > 0 ? t : INFINITY, sketch};
}

/* A result that may be tk's best (0: it failed). */
static void note_result(task *tk, double median_s, const char *text, const char *sketch) {
  add_result(tk, text, median_s, sketch);
  if (median_s <= 0 || (tk->best_s > 0 && median_s >= tk->best_s)) return;
  tk->best_s = median_s;
  free(tk->best_text);
  size_t len = strlen(text) + 1;
  tk->best_text = kg_xrealloc(NULL, len);
  memcpy(tk->best_text, text, len);
  tk->best_sketch = sketch;
}

/* The best measured points of tk (at most max), fastest first. */
static int best_points(const task *tk, kg_point *out, int max) {
  int n = 0;
  int *idx = kg_xrealloc(NULL, sizeof(int) * (size_t)(tk->npts + 1));
  for (int i = 0; i < tk->npts; i++) idx[n++] = i;
  /* selection of the max fastest; npts is small (trials) so a partial selection sort is enough */
  int k = n < max ? n : max;
  for (int i = 0; i < k; i++) {
    int b = i;
    for (int j = i + 1; j < n; j++)
      if (tk->pts_s[idx[j]] < tk->pts_s[idx[b]]) b = j;
    int t = idx[i];
    idx[i] = idx[b];
    idx[b] = t;
    out[i] = tk->pts[idx[i]];
  }
  free(idx);
  return k;
}

/* Trains the model on every row of every task: label = the task's best time / the row's time (failed: 0). */
static int retrain(kg_model *model, task *tasks, int ntasks, char *err, size_t errlen) {
  int n = 0;
  for (int i = 0; i < ntasks; i++) n += tasks[i].nrows;
  if (n == 0) return 0;
  float *x = kg_xrealloc(NULL, sizeof(float) * KG_NFEATURES * (size_t)n);
  float *y = kg_xrealloc(NULL, sizeof(float) * (size_t)n);
  int k = 0;
  for (int i = 0; i < ntasks; i++) {
    double best = 0;
    for (int r = 0; r < tasks[i].nrows; r++) {
      double t = tasks[i].rows[r].median_s;
      if (t > 0 && (best == 0 || t < best)) best = t;
    }
    for (int r = 0; r < tasks[i].nrows; r++, k++) {
      memcpy(x + (size_t)KG_NFEATURES * k, tasks[i].rows[r].feat, sizeof(float) * KG_NFEATURES);
      y[k] = tasks[i].rows[r].median_s > 0 && best > 0 ? (float)(best / tasks[i].rows[r].median_s) : 0.0f;
    }
  }
  int rc = kg_model_train(model, x, y, n, err, errlen);
  free(x);
  free(y);
  return rc;
}

/* The time that ranks a result: on the emulator its analytical estimate for the arch (runtime/estimate.h), since the
 * emulator's clock says how a CPU runs the kernel, not a GPU; elsewhere its median. 0: failed. */
static double rank_time(const task *tk, const kg_measure_result *res) {
  if (res->status != KG_STATUS_OK) return 0;
  if (tk->runner == KG_RUNNER_EMULATOR && res->estimate_s > 0) return res->estimate_s;
  return res->median_s;
}

/* The record of one measurement. */
static void fill_record(kg_tlog_record *r, const task *tk, const kg_trace *trace, const kg_measure_result *res,
                        const kg_space *sp, const kg_point *pt) {
  memset(r, 0, sizeof *r);
  r->v = KG_TLOG_VERSION;
  r->workload = tk->wl;
  r->target = tk->target;
  r->trace = *trace; /* borrowed: encoding only reads it */
  r->status = kg_status_names[res->status];
  r->msg = res->status == KG_STATUS_OK && !res->cut ? "" : res->msg; /* an early cut says so */
  r->times = res->status == KG_STATUS_OK ? res->times : NULL;
  r->ntimes = res->status == KG_STATUS_OK ? res->runs : 0;
  r->compile_s = res->compile_s;
  if (res->status == KG_STATUS_OK && tk->runner == KG_RUNNER_EMULATOR) r->estimate_s = res->estimate_s;
  r->flops = kg_program_flops(tk->t->prog);
  r->bytes = kg_program_bytes(tk->t->prog);
  r->time = wall_unix();
  r->kgen = KGEN_VERSION;
  kg_tlog_dynamic_of(tk->t->prog, tk->t->bucket_lo, tk->t->bucket_hi, r);
  if (pt) {
    r->sketch = sp->sketches[pt->sketch].name;
    r->nknobs = pt->nknobs < KG_TLOG_MAX_KNOBS ? pt->nknobs : KG_TLOG_MAX_KNOBS;
    memcpy(r->knobs, pt->knobs, sizeof(int64_t) * (size_t)r->nknobs);
  }
}

/* who: the worker of a pool that measured it (NULL: this process). */
static int log_result(kg_tlog_writer *w, const task *tk, const kg_trace *trace, const kg_measure_result *res,
                      const kg_point *pt, const kg_pool_result *who, char *err, size_t errlen) {
  if (!w) return 0;
  kg_tlog_record r;
  fill_record(&r, tk, trace, res, tk->sp, pt);
  if (who) {
    r.worker_host = who->host;
    r.worker_rank = who->rank;
  }
  return kg_tlog_append(w, &r, err, errlen);
}

/* Whether a record of the log belongs to task tk (same workload identity, same target and device). */
static int record_matches(const kg_tlog_record *r, const task *tk) {
  return !strcmp(r->workload.hash, tk->wl.hash) && !strcmp(r->workload.name, tk->wl.name) &&
         !strcmp(r->target.kind, tk->target.kind) && !strcmp(r->target.arch, tk->target.arch) &&
         !strcmp(r->target.device, tk->target.device) && !strcmp(r->target.versions, tk->target.versions);
}

/* Whether a time measured for tk is one a machine can reach (tlog.h): an implausible one is never the best. */
static int plausible(const task *tk, double median_s, const kg_tlog_record *r, char *why, size_t whylen) {
  kg_tlog_record one;
  if (!r) {
    memset(&one, 0, sizeof one);
    one.times = &median_s;
    one.ntimes = 1;
    r = &one;
  }
  double flops = kg_program_flops(tk->t->prog), bytes = kg_program_bytes(tk->t->prog);
  return kg_tlog_record_plausible(r, &flops, &bytes, why, whylen);
}

/* A log record passed over as tk's best: counted, the first one said in the report. */
static void pass_over(kg_tune_report *rep, int index, const char *why) {
  if (!rep->log_passed_over++)
    snprintf(rep->log_passed_note, sizeof rep->log_passed_note, "record %d: %s", index + 1, why);
}

/* Loads tk's records log->recs[from..n): seen texts, rows (features recomputed from the traces, in parallel),
 * points when the record names a sketch of this space, and the best. appended: records another tuner appended
 * since the last read, of which those already seen (this tuner's own among them) are left out. A record whose
 * trace no longer applies or whose time is implausible counts as seen but is not the best, nor learned from
 * when implausible. */
static void load_records(task *tk, const kg_tlog *log, int from, int appended, kg_tune_report *rep) {
  int *idx = kg_xrealloc(NULL, sizeof(int) * (size_t)(log->n + 1));
  int n = 0;
  for (int i = from; i < log->n; i++)
    if (record_matches(&log->recs[i], tk)) idx[n++] = i;
  if (appended) {
    int kept = 0;
    for (int k = 0; k < n; k++) {
      char *text = kg_trace_to_text(&log->recs[idx[k]].trace);
      if (!kg_strset_has(&tk->seen, text)) idx[kept++] = idx[k];
      free(text);
    }
    n = kept;
  }
  float *feat = kg_xrealloc(NULL, sizeof(float) * KG_NFEATURES * (size_t)(n + 1));
  int *ok = kg_xrealloc(NULL, sizeof(int) * (size_t)(n + 1));
  int *fused = kg_xrealloc(NULL, sizeof(int) * (size_t)(n + 1)); /* no-fuse run: the record may not be the best */
  int *applies = kg_xrealloc(NULL, sizeof(int) * (size_t)(n + 1));
#pragma omp parallel for schedule(dynamic, 4)
  for (int k = 0; k < n; k++) {
    char err[256];
    kg_schedule *s = kg_schedule_new(tk->t->prog);
    int applied = applies[k] = kg_schedule_apply_trace(s, &log->recs[idx[k]].trace, err, sizeof err) == 0;
    ok[k] = applied && kg_features_extract(s, tk->sp->target, feat + (size_t)KG_NFEATURES * k) == 0;
    /* a trace that no longer applies is nobody's best: its time is not this program's */
    fused[k] = tk->sp->unfused && (!applied || kg_space_check_unfused(s, NULL, 0) != 0);
    kg_schedule_free(s);
  }
  for (int k = 0; k < n; k++) {
    const kg_tlog_record *r = &log->recs[idx[k]];
    char *text = kg_trace_to_text(&r->trace);
    kg_strset_add(&tk->seen, text);
    double med = kg_tlog_record_ok(r) ? kg_tlog_record_rank_s(r) : 0;
    char why[512];
    if (med > 0 && !plausible(tk, med, r, why, sizeof why)) {
      pass_over(rep, idx[k], why);
      free(text);
      tk->loaded++;
      continue;
    }
    if (med > 0 && !applies[k]) {
      /* a damaged record, or one of an older kgen whose steps meant something else */
      char e[256];
      kg_schedule *s = kg_schedule_new(tk->t->prog);
      kg_schedule_apply_trace(s, &r->trace, e, sizeof e);
      kg_schedule_free(s);
      snprintf(why, sizeof why, "its trace no longer applies (%s)", e);
      pass_over(rep, idx[k], why);
      med = 0;
    }
    if (ok[k]) add_row(tk, feat + (size_t)KG_NFEATURES * k, med);
    if (fused[k]) { /* in a no-fuse run, a record that fuses (or no longer applies): seen, learned from, not best */
      free(text);
      tk->loaded++;
      continue;
    }
    int sk = r->sketch ? kg_space_find_sketch(tk->sp, r->sketch) : -1;
    const char *skname = sk >= 0 ? tk->sp->sketches[sk].name : NULL;
    if (sk >= 0 && med > 0) {
      kg_point pt;
      memset(&pt, 0, sizeof pt);
      pt.sketch = sk;
      pt.nknobs = r->nknobs;
      memcpy(pt.knobs, r->knobs, sizeof(int64_t) * (size_t)r->nknobs);
      if (kg_space_point_valid(tk->sp, &pt)) add_point(tk, &pt, med);
    }
    note_result(tk, med, text, skname);
    if (!strcmp(text, tk->default_text) && med > 0) tk->default_s = med;
    free(text);
    tk->loaded++;
  }
  free(idx);
  free(feat);
  free(ok);
  free(fused);
  free(applies);
}

/* The log's emulator records of tk's workload on tk's arch that carry an estimate, best first, at most max, their
 * traces distinct and not yet measured by tk: *out (heap) gets their indices. Returns how many. */
static int estimated_top(const task *tk, const kg_tlog *log, int max, int **out) {
  int n = 0;
  int *idx = kg_xrealloc(NULL, sizeof(int) * (size_t)(log->n + 1));
  for (int i = 0; i < log->n; i++) {
    const kg_tlog_record *r = &log->recs[i];
    if (!strcmp(r->workload.hash, tk->wl.hash) && !strcmp(r->workload.name, tk->wl.name) &&
        !strcmp(r->target.kind, tk->target.kind) && !strcmp(r->target.arch, tk->target.arch) &&
        kg_tlog_record_estimated(r) && kg_tlog_record_ok(r) && plausible(tk, r->estimate_s, r, NULL, 0))
      idx[n++] = i;
  }
  /* selection of the best max by estimate; each trace once */
  int k = 0;
  kg_strset taken;
  kg_strset_init(&taken);
  for (int i = 0; i < n && k < max; i++) {
    int b = i;
    for (int j = i + 1; j < n; j++)
      if (log->recs[idx[j]].estimate_s < log->recs[idx[b]].estimate_s) b = j;
    int t = idx[i];
    idx[i] = idx[b];
    idx[b] = t;
    char *text = kg_trace_to_text(&log->recs[idx[i]].trace);
    if (!kg_strset_has(&tk->seen, text) && !kg_strset_has(&taken, text)) {
      kg_strset_add(&taken, text);
      idx[k++] = idx[i];
    }
    free(text);
  }
  kg_strset_free(&taken);
  *out = idx;
  return k;
}

static kg_schedule *default_schedule(const task *tk) { return kg_front_default_schedule(tk->t->prog, tk->sp->target); }

/* A result that is the environment's fault (runtime/measure.h) stops tuning: it says nothing about the candidate,
 * and every other candidate would meet the same fault. Such results are never logged. The default schedule is
 * the naive code kgen prints for any program, the first candidate of a new log: when it does not build or
 * crashes, every candidate would fail alike, and the toolchain (or kgen) is to blame, not a candidate. Returns 0,
 * or -1 with err. */
static int env_stop(const task *tk, const kg_measure_result *res, int is_default, char *err, size_t errlen) {
  int default_broken =
      is_default && (res->status == KG_STATUS_COMPILE_ERROR || res->status == KG_STATUS_RUNTIME_ERROR);
  if (!res->env_fault && !default_broken) return 0;
  snprintf(err, errlen,
           "%s: stopped by a fault of the environment, not of the candidates (nothing was logged against them; "
           "fix it and run again)%s:\n%s",
           tk->t->label, res->env_fault ? "" : ": the default schedule, kgen's naive code, fails", res->msg);
  return -1;
}

/* The schedule a fixed candidate of tk measures (given: a trace applied to the default schedule; NULL: the default
 * schedule itself), and its trace text (*text, heap). A given trace that does not apply to tk is measured all the
 * same: the harness records why it failed. */
static kg_schedule *fixed_schedule(const task *tk, const kg_trace *given, char **text) {
  kg_schedule *s = given ? kg_schedule_new(tk->t->prog) : default_schedule(tk);
  if (given) {
    char e[256];
    if (kg_schedule_apply_trace(s, given, e, sizeof e) != 0) {
      kg_schedule_free(s);
      s = kg_schedule_new(tk->t->prog);
      kg_trace_free(&s->trace);
      kg_trace_init(&s->trace);
      for (int i = 0; i < given->nsteps; i++) kg_trace_push(&s->trace, &given->steps[i]);
    }
  }
  *text = kg_trace_to_text(&s->trace);
  return s;
}

/* What a fixed candidate's result (not the environment's fault) leaves: its record, a row, seen, maybe the best. */
static int absorb_fixed(task *tk, kg_schedule *s, const char *text, int is_default, const kg_measure_result *res,
                        const kg_pool_result *who, kg_tlog_writer *w, char *err, size_t errlen) {
  int rc = log_result(w, tk, &s->trace, res, NULL, who, err, errlen);
  float f[KG_NFEATURES];
  double med = rank_time(tk, res);
  if (kg_features_extract(s, tk->sp->target, f) == 0) add_row(tk, f, med);
  kg_strset_add(&tk->seen, text);
  /* in a no-fuse run a given trace that fuses is measured as asked, but is not the best; the default schedule
   * keeps every stage at root on both targets (checked in tests), so it always counts */
  if ((!tk->sp->unfused || kg_space_check_unfused(s, NULL, 0) == 0) && plausible(tk, med, NULL, NULL, 0))
    note_result(tk, med, text, NULL);
  if (is_default) tk->default_s = med;
  tk->trials++;
  if (res->status != KG_STATUS_OK) tk->failed++;
  tk->cut += res->cut;
  return rc;
}

/* Measures one schedule of tk (given: a trace applied to the default schedule; NULL: the default schedule itself)
 * unless the log holds it. */
static int measure_one(task *tk, const kg_trace *given, kg_tlog_writer *w, int *trials, char *err, size_t errlen) {
  char *text;
  kg_schedule *s = fixed_schedule(tk, given, &text);
  int rc = 0;
  if (!kg_strset_has(&tk->seen, text)) {
    kg_candidate c = {&s->trace, NULL};
    kg_measure_result res;
    kg_measurer_hint_best(tk->m, tk->best_s);
    kg_measure_batch(tk->m, &c, 1, &res);
    if (env_stop(tk, &res, !given, err, errlen)) {
      kg_measure_result_free(&res);
      kg_schedule_free(s);
      free(text);
      return -1;
    }
    rc = absorb_fixed(tk, s, text, !given, &res, NULL, w, err, errlen);
    (*trials)++;
    kg_measure_result_free(&res);
  }
  kg_schedule_free(s);
  free(text);
  return rc;
}

/* Ansor's task scheduler, for a sum of latencies: after each task's first round, the task with the largest
 * expected latency drop per trial, mixing the drop seen in its last round (backward) with an optimistic forward
 * estimate (its latency spread over the trials it has had). Only tasks of group (a pool's workers on one target;
 * -1: any) compete. -1 when every such task ran dry. */
static int pick_task(task *tasks, int ntasks, int group) {
  for (int i = 0; i < ntasks; i++)
    if ((group < 0 || tasks[i].group == group) && !tasks[i].exhausted && tasks[i].rounds == 0) return i;
  int best = -1;
  double best_g = -1;
  for (int i = 0; i < ntasks; i++) {
    task *tk = &tasks[i];
    if ((group >= 0 && tk->group != group) || tk->exhausted) continue;
    double back = tk->last_trials > 0 && tk->best_before > 0 ? (tk->best_before - tk->best_s) / tk->last_trials : 0;
    double fwd = tk->best_s > 0 ? tk->best_s / (tk->trials > 0 ? tk->trials : 1) : 1;
    double g = 0.2 * back + 0.8 * fwd;
    if (g > best_g) best_g = g, best = i;
  }
  return best;
}

/* GFLOP/s for arithmetic-heavy workloads, GB/s for memory-bound ones (fewer than 4 FLOPs per byte). */
static void fmt_rate(char *buf, size_t len, const kg_program *p, double s) {
  double flops = kg_program_flops(p), bytes = kg_program_bytes(p);
  if (s <= 0) snprintf(buf, len, "-");
  else if (bytes > 0 && flops / bytes < 4) snprintf(buf, len, "%.1f GB/s", bytes / s * 1e-9);
  else snprintf(buf, len, "%.1f GFLOP/s", flops / s * 1e-9);
}

static void progress(const kg_tune_opts *o, const task *tk, int done, int total, double acc, double build_s,
                     double measure_s, double search_s, double elapsed) {
  if (!o->progress) return;
  char t[32], r[32], a[16];
  kg_format_seconds(t, sizeof t, tk->best_s);
  fmt_rate(r, sizeof r, tk->t->prog, tk->best_s);
  if (acc >= 0) snprintf(a, sizeof a, "%.2f", acc);
  else snprintf(a, sizeof a, "-");
  double left = done > 0 ? elapsed / done * (total - done) : 0;
  fprintf(o->progress,
          "%s[%d/%d trials] %s: best %s%s (%s) | model acc %s | build %.0fs measure %.0fs search %.0fs | "
          "elapsed %.0fs, ~%.0fs left%s",
          o->progress_inplace ? "\r\033[K" : "", done, total, tk->t->label,
          tk->runner == KG_RUNNER_EMULATOR ? "estimated " : "", t, r, a, build_s, measure_s, search_s,
          elapsed, left, o->progress_inplace ? "" : "\n");
  fflush(o->progress);
}

static void task_free(task *tk) {
  kg_measurer_free(tk->m);
  if (tk->queue) kg_evolve_picks_free(tk->queue + tk->qhead, tk->nqueue - tk->qhead);
  free(tk->queue);
  kg_space_free(tk->sp);
  kg_strset_free(&tk->seen);
  free(tk->rows);
  free(tk->pts);
  free(tk->pts_s);
  free(tk->best_text);
  free(tk->default_text);
  for (int i = 0; i < tk->nres; i++) free(tk->res[i].text);
  free(tk->res);
}

static char *model_path(const char *log_path) {
  size_t len = strlen(log_path) + 8;
  char *p = kg_xrealloc(NULL, len);
  snprintf(p, len, "%s.model", log_path);
  return p;
}

/* The picks of a new round for tk (*picks, heap): up to want candidates not seen before. 0 marks tk exhausted. */
static int evolve_picks(task *tk, kg_model *model, const kg_tune_opts *o, int want, uint64_t *rng,
                        kg_tune_report *rep, kg_evolve_pick **picks) {
  double t0 = kg_now_s();
  kg_evolve_opts eo = {o->population, o->generations, o->mutation_prob, o->eps, NULL, NULL, o->sketch_share};
  /* on CUDA, the untrained model's round is ranked by the analytical estimate (the emulator's and the GPU's alike) */
  if (o->measure.target == KG_TARGET_CUDA && tk->arch[0]) {
    eo.prior = estimate_prior;
    eo.prior_ctx = tk;
  }
  int nseeds_max = o->population / 4 > 0 ? o->population / 4 : 1;
  kg_point *seeds = kg_xrealloc(NULL, sizeof *seeds * (size_t)nseeds_max);
  int nseeds = best_points(tk, seeds, nseeds_max);
  *picks = kg_xrealloc(NULL, sizeof **picks * (size_t)(want > 0 ? want : 1));
  int nrealized = 0, nfailed = 0;
  int n = kg_evolve_round(tk->sp, model, seeds, nseeds, seen_fn, tk, &eo, rng, *picks, want, &nrealized, &nfailed);
  free(seeds);
  rep->search_s += kg_now_s() - t0;
  tk->rounds++;
  if (n == 0) tk->exhausted = 1;
  tk->best_before = tk->best_s;
  tk->last_trials = n;
  return n;
}

/* What a search pick's result (not the environment's fault) leaves: its record, a row, seen, a seed point, maybe the
 * best, and (when the model predicted it) a score and label for the model's accuracy. */
static int absorb_pick(task *tk, const kg_evolve_pick *pk, const kg_trace *trace, const kg_measure_result *res,
                       const kg_pool_result *who, kg_tlog_writer *w, float *score, float *label, int *nscored,
                       char *err, size_t errlen) {
  double med = rank_time(tk, res);
  int rc = log_result(w, tk, trace, res, &pk->pt, who, err, errlen);
  add_row(tk, pk->features, med);
  kg_strset_add(&tk->seen, pk->trace_text);
  if (med > 0 && plausible(tk, med, NULL, NULL, 0)) {
    add_point(tk, &pk->pt, med);
    note_result(tk, med, pk->trace_text, tk->sp->sketches[pk->pt.sketch].name);
  }
  if (res->status != KG_STATUS_OK) tk->failed++;
  tk->cut += res->cut;
  tk->trials++;
  if (!pk->random) { /* random picks carry no prediction */
    score[*nscored] = pk->score;
    label[(*nscored)++] = med > 0 ? (float)(1.0 / med) : 0.0f;
  }
  return rc;
}

/* Retrains the model on every row and saves it beside the log. 0, or -1 with err. */
static int learn(kg_model *model, task *tasks, int ntasks, const kg_tune_opts *o, kg_tune_report *rep, char *err,
                 size_t errlen) {
  double t1 = kg_now_s();
  if (kg_model_kind_of(model) == KG_MODEL_XGB) {
    if (retrain(model, tasks, ntasks, err, errlen)) return -1;
    if (o->log_path && kg_model_trained(model)) {
      char *mp = model_path(o->log_path);
      char e[512];
      /* the model is a cache: a failure to save it costs retraining on resume, not data */
      if (kg_model_save(model, mp, e, sizeof e) && o->progress) fprintf(o->progress, "kgen: warning: %s\n", e);
      free(mp);
    }
  }
  rep->search_s += kg_now_s() - t1;
  return 0;
}

/* One round for task tk: evolve, measure, log, learn. Returns 0, or -1 with err (the log failed). */
static int run_round(task *tk, task *tasks, int ntasks, kg_model *model, kg_tlog_writer *w, const kg_tune_opts *o,
                     int want, uint64_t *rng, kg_tune_report *rep, char *err, size_t errlen) {
  int trained = kg_model_trained(model);
  kg_evolve_pick *picks;
  int n = evolve_picks(tk, model, o, want, rng, rep, &picks);
  if (n == 0) {
    free(picks);
    return 0;
  }
  /* realize again for the traces (realization is deterministic; schedules are not kept through evolution) */
  kg_schedule **s = kg_xrealloc(NULL, sizeof *s * (size_t)n);
  kg_candidate *c = kg_xrealloc(NULL, sizeof *c * (size_t)n);
  kg_measure_result *res = kg_xrealloc(NULL, sizeof *res * (size_t)n);
  for (int i = 0; i < n; i++) {
    char e[256];
    s[i] = kg_space_realize(tk->sp, &picks[i].pt, e, sizeof e);
    assert(s[i] && "realization is deterministic: a picked point realized before");
    c[i].trace = &s[i]->trace;
    c[i].source = NULL;
  }
  /* Measured and logged a chunk at a time (each chunk still built in parallel): a tuning stopped in the middle of a
   * round (a time limit, SIGTERM) keeps every chunk before the one it was measuring. A round of slow candidates
   * takes minutes (64 of a 4096 x 1024 x 1024 MLP on a 2-core AVX2 machine: over 7), and measured all at once a
   * whole round was lost with it. */
  int env = -1; /* the first result that is the environment's fault: the others are logged, then tuning stops */
  int rc = 0, measured = 0;
  float *score = kg_xrealloc(NULL, sizeof(float) * (size_t)n), *label = kg_xrealloc(NULL, sizeof(float) * (size_t)n);
  int nscored = 0, before = tk->trials;
  /* two candidates per core (4 to 32): the builds of a part keep every core busy */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int chunk = ncpu <= 2 ? 4 : ncpu >= 16 ? 32 : (int)(2 * ncpu);
  for (int c0 = 0; c0 < n && rc == 0 && env < 0; c0 += chunk) {
    int cn = n - c0 < chunk ? n - c0 : chunk;
    kg_measurer_hint_best(tk->m, tk->best_s);
    kg_measure_batch(tk->m, c + c0, cn, res + c0);
    measured = c0 + cn;
    for (int i = c0; i < measured && env < 0; i++)
      if (res[i].env_fault) env = i;
    for (int i = c0; i < measured && rc == 0; i++)
      if (!res[i].env_fault)
        rc = absorb_pick(tk, &picks[i], &s[i]->trace, &res[i], NULL, w, score, label, &nscored, err, errlen);
    if (rc == 0 && w) rc = kg_tlog_flush(w, err, errlen);
  }
  rep->trials += tk->trials - before;
  rep->last_accuracy =
      trained && kg_model_kind_of(model) == KG_MODEL_XGB ? kg_model_pair_accuracy(score, label, nscored) : -1;
  if (rc == 0 && env >= 0) rc = env_stop(tk, &res[env], 0, err, errlen);
  for (int i = 0; i < measured; i++) kg_measure_result_free(&res[i]);
  for (int i = 0; i < n; i++) kg_schedule_free(s[i]);
  free(score);
  free(label);
  free(s);
  free(c);
  free(res);
  kg_evolve_picks_free(picks, n);
  free(picks);
  if (rc) return rc;
  return learn(model, tasks, ntasks, o, rep, err, errlen);
}

/* Before each round and each single measurement: the records other tuners appended to the log since it was last
 * read join what each task knows (seen, learned from, the best), so that nothing they measured is measured again
 * (what they measure meanwhile may be). Once another writer
 * shows up (more bytes appended than this tuner wrote), the random stream is salted once with where this tuner's
 * first record landed in the file, which differs between any two writers: two tuners started with the same seed
 * then stop proposing the same candidates in lockstep. A tuner alone on its log never salts (same seed, same
 * candidates). */
static int reread_log(kg_tlog *log, kg_tlog_writer *w, size_t *own_read, task *tasks, int ntasks,
                      const kg_tune_opts *o, uint64_t *rng, kg_tune_report *rep, char *err, size_t errlen) {
  if (!o->log_path || !w) return 0;
  size_t before = log->offset;
  int from = log->n;
  if (kg_tlog_read_more(log, o->log_path, err, errlen) < 0) return -1;
  size_t own = kg_tlog_written(w) - *own_read; /* what this tuner appended since the last read */
  *own_read = kg_tlog_written(w);
  if (log->offset > before + own && !rep->log_shared && kg_tlog_first_offset(w) >= 0) {
    rep->log_shared = 1;
    *rng ^= ((uint64_t)kg_tlog_first_offset(w) + 1) * 0x9e3779b97f4a7c15ull;
  }
  for (int i = 0; i < ntasks && log->n > from; i++) {
    int loaded = tasks[i].loaded;
    load_records(&tasks[i], log, from, 1, rep);
    rep->log_appended += tasks[i].loaded - loaded;
  }
  return 0;
}

/* ---- tuning with a pool of workers (tune.h: kg_tune_opts.pool) ---- */

/* A candidate out with the pool. */
typedef struct flight {
  int64_t tag;
  int task;
  kg_schedule *s;      /* its schedule: the record's trace */
  char *text;          /* its trace text */
  int fixed;           /* 0: a search pick; 1: the default schedule; 2: a given schedule; 3: one the log's estimates
                        * ranked best */
  kg_evolve_pick pick; /* fixed == 0 */
} flight;

typedef struct pooled {
  task *tasks;
  int ntasks;
  kg_model *model;
  kg_tlog_writer *w;
  kg_tlog *log;
  size_t *own_read;
  const kg_tune_opts *o;
  uint64_t *rng;
  kg_tune_report *rep;
  flight *fl;          /* out with the pool */
  int nfl, capfl;
  int64_t next_tag;
  flight *fixed;       /* fixed candidates not yet out, in order */
  int nfixed, fixed_head;
  float *score, *label;/* the picks' predictions and outcomes since the model last learned */
  int nscored, since_learn, trained;
  int stopping;        /* an error happened: nothing more goes out; what is out is still taken and logged */
  double start;
} pooled;

static flight *flight_add(pooled *p) {
  if (p->nfl == p->capfl) {
    p->capfl = p->capfl ? 2 * p->capfl : 32;
    p->fl = kg_xrealloc(p->fl, sizeof *p->fl * (size_t)p->capfl);
  }
  flight *f = &p->fl[p->nfl++];
  memset(f, 0, sizeof *f);
  return f;
}

static void flight_free(flight *f) {
  kg_schedule_free(f->s);
  free(f->text);
  if (!f->fixed) kg_evolve_picks_free(&f->pick, 1);
}

/* Queues tk's fixed candidate (given NULL: its default schedule) unless tk has seen it; seen from now on. */
static void queue_fixed(pooled *p, int ti, const kg_trace *given, int kind) {
  task *tk = &p->tasks[ti];
  char *text;
  kg_schedule *s = fixed_schedule(tk, given, &text);
  if (kg_strset_has(&tk->seen, text)) {
    kg_schedule_free(s);
    free(text);
    return;
  }
  kg_strset_add(&tk->seen, text);
  p->fixed = kg_xrealloc(p->fixed, sizeof *p->fixed * (size_t)(p->nfixed + 1));
  flight *f = &p->fixed[p->nfixed++];
  memset(f, 0, sizeof *f);
  f->task = ti;
  f->s = s;
  f->text = text;
  f->fixed = kind;
}

static int send(pooled *p, flight *f, char *err, size_t errlen) {
  f->tag = p->next_tag++;
  task *tk = &p->tasks[f->task];
  flight *out = flight_add(p);
  *out = *f;
  if (p->o->pool->submit(p->o->pool, tk->handle, tk->group, &out->s->trace, out->tag, err, errlen)) {
    p->nfl--;
    flight_free(f);
    return -1;
  }
  return 0;
}

/* Sends candidates while some group has room and the budget is not spent: the fixed ones first, then the picks of
 * each group's tasks, evolving a new round for a task whose picks are all out. 0, or -1 with err. */
static int fill(pooled *p, char *err, size_t errlen) {
  const kg_tune_opts *o = p->o;
  kg_pool *pl = o->pool;
  for (int g = 0; g < pl->ngroups && !p->stopping; g++) {
    while (p->rep->trials + p->nfl < o->trials && pl->room(pl, g) > 0) {
      /* the next fixed candidate of this group */
      int k = p->fixed_head;
      while (k < p->nfixed && (p->fixed[k].s == NULL || p->tasks[p->fixed[k].task].group != g)) k++;
      if (k < p->nfixed) {
        flight f = p->fixed[k];
        p->fixed[k].s = NULL; /* taken */
        if (k == p->fixed_head) p->fixed_head++;
        if (send(p, &f, err, errlen)) return -1;
        continue;
      }
      int ti = -1;
      for (int i = 0; i < p->ntasks && ti < 0; i++)
        if (p->tasks[i].group == g && p->tasks[i].qhead < p->tasks[i].nqueue) ti = i;
      if (ti < 0) {
        if ((ti = pick_task(p->tasks, p->ntasks, g)) < 0) break; /* this group's spaces ran dry */
        task *tk = &p->tasks[ti];
        if (reread_log(p->log, p->w, p->own_read, p->tasks, p->ntasks, o, p->rng, p->rep, err, errlen)) return -1;
        int left = o->trials - p->rep->trials - p->nfl;
        int want = o->per_round < left ? o->per_round : left;
        if (tk->queue) kg_evolve_picks_free(tk->queue + tk->qhead, tk->nqueue - tk->qhead);
        free(tk->queue);
        tk->nqueue = evolve_picks(tk, p->model, o, want, p->rng, p->rep, &tk->queue);
        tk->qhead = 0;
        if (tk->nqueue == 0) continue;
        p->rep->rounds++;
        /* queued picks are seen: no later round picks them again */
        for (int i = 0; i < tk->nqueue; i++) kg_strset_add(&tk->seen, tk->queue[i].trace_text);
      }
      task *tk = &p->tasks[ti];
      flight f;
      memset(&f, 0, sizeof f);
      f.task = ti;
      f.pick = tk->queue[tk->qhead++];
      char e[256];
      f.s = kg_space_realize(tk->sp, &f.pick.pt, e, sizeof e);
      assert(f.s && "realization is deterministic: a picked point realized before");
      if (send(p, &f, err, errlen)) return -1;
    }
  }
  return 0;
}

static void pooled_progress(pooled *p, const task *tk) {
  double b = 0, m = 0;
  for (int i = 0; i < p->ntasks; i++) b += p->tasks[i].build_s, m += p->tasks[i].run_s;
  p->rep->build_s = b;
  p->rep->measure_s = m;
  progress(p->o, tk, p->rep->trials, p->o->trials, p->rep->last_accuracy, b, m, p->rep->search_s,
           kg_now_s() - p->start);
}

/* Takes one result: logs it (fsynced), learns from it, and retrains the model every per_round picks. 1 when one
 * was taken, 0 when nothing is out, -1 with err (what is out may still come), -2 with err (the pool failed: nothing
 * more comes). */
static int take_one(pooled *p, char *err, size_t errlen) {
  kg_pool_result r;
  int got = p->o->pool->wait(p->o->pool, &r, err, errlen);
  if (got <= 0) return got < 0 ? -2 : 0;
  int k = 0;
  while (k < p->nfl && p->fl[k].tag != r.tag) k++;
  assert(k < p->nfl && "a pool answers only what was submitted");
  flight f = p->fl[k];
  p->fl[k] = p->fl[--p->nfl];
  task *tk = &p->tasks[f.task];
  tk->build_s += r.build_s;
  tk->run_s += r.run_s;
  int rc = 0;
  if (r.res.env_fault) {
    /* the worker's environment, not the candidate: stop (the others out are still taken and logged) */
    if (!p->stopping) {
      char msg[sizeof r.res.msg];
      snprintf(msg, sizeof msg, "worker rank %d on %.100s: %.1900s", r.rank, r.host, r.res.msg);
      memcpy(r.res.msg, msg, sizeof msg);
      rc = env_stop(tk, &r.res, 0, err, errlen);
    }
  } else {
    int before = tk->trials;
    if (f.fixed) {
      rc = absorb_fixed(tk, f.s, f.text, f.fixed == 1, &r.res, &r, p->w, err, errlen);
      if (f.fixed == 3) p->rep->from_estimates++;
      if (rc == 0 && f.fixed == 1) rc = env_stop(tk, &r.res, 1, err, errlen);
    } else {
      rc = absorb_pick(tk, &f.pick, &f.s->trace, &r.res, &r, p->w, p->score, p->label, &p->nscored, err, errlen);
      p->since_learn++;
    }
    p->rep->trials += tk->trials - before;
    if (rc == 0 && p->w) rc = kg_tlog_flush(p->w, err, errlen);
  }
  kg_measure_result_free(&r.res);
  flight_free(&f);
  if (rc == 0 && !p->stopping && (p->since_learn >= p->o->per_round || (p->since_learn > 0 && p->nfl == 0))) {
    p->rep->last_accuracy = p->trained && kg_model_kind_of(p->model) == KG_MODEL_XGB
                                ? kg_model_pair_accuracy(p->score, p->label, p->nscored)
                                : -1;
    p->nscored = p->since_learn = 0;
    rc = learn(p->model, p->tasks, p->ntasks, p->o, p->rep, err, errlen);
    p->trained = kg_model_trained(p->model);
    pooled_progress(p, tk);
  }
  return rc ? -1 : 1;
}

static int tune_pooled(task *tasks, int ntasks, kg_model *model, kg_tlog_writer *w, kg_tlog *log, size_t *own_read,
                       const kg_tune_opts *o, uint64_t *rng, kg_tune_report *rep, double start, char *err,
                       size_t errlen) {
  pooled p = {.tasks = tasks, .ntasks = ntasks, .model = model, .w = w, .log = log, .own_read = own_read, .o = o,
               .rng = rng, .rep = rep, .start = start};
  p.score = kg_xrealloc(NULL, sizeof(float) * (size_t)(o->trials + 1));
  p.label = kg_xrealloc(NULL, sizeof(float) * (size_t)(o->trials + 1));
  p.trained = kg_model_trained(model);
  for (int i = 0; i < ntasks && !o->skip_default; i++) queue_fixed(&p, i, NULL, 1);
  for (int g = 0; g < o->ngiven; g++)
    for (int i = 0; i < ntasks; i++) queue_fixed(&p, i, o->given[g], 2);
  /* on a GPU, what tuning without one ranked best is measured first (its records carry estimates, not times) */
  for (int i = 0; i < ntasks; i++) {
    if (tasks[i].runner != KG_RUNNER_GPU) continue;
    int *top = NULL, ntop = estimated_top(&tasks[i], log, o->per_round, &top);
    for (int k = 0; k < ntop; k++) queue_fixed(&p, i, &log->recs[top[k]].trace, 3);
    free(top);
  }
  int rc = 0;
  char first[2048] = "";
  for (;;) {
    if (!p.stopping && fill(&p, err, errlen)) {
      p.stopping = 1, rc = -1;
      snprintf(first, sizeof first, "%s", err);
    }
    int got = take_one(&p, err, errlen);
    if (got == 0) break;
    if (got < 0 && !p.stopping) {
      p.stopping = 1, rc = -1;
      snprintf(first, sizeof first, "%s", err);
    }
    if (got == -2) break;
  }
  if (rc) snprintf(err, errlen, "%s", first);
  if (rc == 0 && w) rc = kg_tlog_flush(w, err, errlen);
  for (int i = 0; i < p.nfl; i++) flight_free(&p.fl[i]);
  for (int i = p.fixed_head; i < p.nfixed; i++)
    if (p.fixed[i].s) flight_free(&p.fixed[i]);
  free(p.fl);
  free(p.fixed);
  free(p.score);
  free(p.label);
  return rc;
}

/* ---- confirmation: the best traces measured again ---- */

/* A trace's results together: the median of its times (a failure counts as infinitely slow), and what ranks it
 * (kg_tlog_trace_times: a single time times the factor of the re-measured ones). */
typedef struct ranked_trace {
  const char *text, *sketch;
  double median, rank;
  int n, first; /* how many results; the index of its first */
} ranked_trace;

/* Over pointers into one task's results: by text, then in the order they came. */
static int by_text(const void *x, const void *y) {
  const tres *a = *(const tres *const *)x, *b = *(const tres *const *)y;
  int c = strcmp(a->text, b->text);
  return c ? c : (a > b) - (a < b);
}

static int by_rank(const void *x, const void *y) {
  const ranked_trace *a = x, *b = y;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  return a->first - b->first;
}

/* tk's traces with a finite time, fastest first by their ranking time (ties to the earlier measured), as
 * kg_tlog_trace_times ranks the log's: *out (heap). Returns how many. */
static int traces_ranked(const task *tk, ranked_trace **out) {
  const tres **p = kg_xrealloc(NULL, sizeof *p * (size_t)(tk->nres + 1));
  for (int i = 0; i < tk->nres; i++) p[i] = &tk->res[i];
  qsort(p, (size_t)tk->nres, sizeof *p, by_text);
  ranked_trace *r = kg_xrealloc(NULL, sizeof *r * (size_t)(tk->nres + 1));
  double *t = kg_xrealloc(NULL, sizeof *t * (size_t)(tk->nres + 1));
  double *ratios = kg_xrealloc(NULL, sizeof *ratios * (size_t)(tk->nres + 1));
  int n = 0, nratios = 0;
  for (int a = 0; a < tk->nres;) {
    int z = a;
    const char *sketch = NULL;
    while (z < tk->nres && !strcmp(p[z]->text, p[a]->text)) {
      t[z - a] = p[z]->t;
      if (!sketch) sketch = p[z]->sketch;
      z++;
    }
    double m = kg_stats_of(t, z - a).median;
    ratios[nratios++] = kg_tlog_remeasure_ratio(t, z - a);
    if (isfinite(m)) r[n++] = (ranked_trace){p[a]->text, sketch, m, m, z - a, (int)(p[a] - tk->res)};
    a = z;
  }
  double single = kg_tlog_single_factor(ratios, nratios);
  for (int i = 0; i < n; i++)
    r[i].rank = kg_tlog_rank_time(r[i].median, r[i].n, single);
  free(p);
  free(t);
  free(ratios);
  qsort(r, (size_t)n, sizeof *r, by_rank);
  *out = r;
  return n;
}

/* Measures each of tk's traces texts[0..n) once, in that order (a pool's workers may run them side by side),
 * logging each result and adding it to tk's results. 0, or -1 with err (the log failed, the environment
 * failed). */
static int remeasure(task *tk, char *const *texts, int n, const kg_tune_opts *o, kg_tlog_writer *w,
                     int64_t *next_tag, char *err, size_t errlen) {
  if (n <= 0) return 0;
  kg_schedule **s = kg_xrealloc(NULL, sizeof *s * (size_t)n);
  kg_candidate *c = kg_xrealloc(NULL, sizeof *c * (size_t)n);
  kg_measure_result *res = kg_xrealloc(NULL, sizeof *res * (size_t)n);
  kg_pool_result *who = kg_xrealloc(NULL, sizeof *who * (size_t)n);
  int *got = kg_xrealloc(NULL, sizeof *got * (size_t)n);
  memset(c, 0, sizeof *c * (size_t)n); /* (filled below; gcc cannot tell) */
  int rc = 0, nsent = 0;
  for (int i = 0; i < n; i++) {
    kg_trace tr;
    kg_trace_init(&tr);
    char e[256], *text;
    /* the text is what a schedule of this program printed: it parses */
    int parsed = kg_trace_parse(&tr, "confirm", texts[i], strlen(texts[i]), e, sizeof e) == 0;
    assert(parsed && "a trace text of a measured schedule parses");
    (void)parsed;
    s[i] = fixed_schedule(tk, &tr, &text);
    kg_trace_free(&tr);
    free(text);
    c[i] = (kg_candidate){&s[i]->trace, NULL};
    got[i] = 0;
  }
  if (!o->pool) {
    kg_measure_batch(tk->m, c, n, res);
    for (int i = 0; i < n; i++) got[i] = 1;
  } else {
    int64_t tag0 = *next_tag;
    for (int i = 0; i < n && rc == 0; i++)
      if (!(rc = o->pool->submit(o->pool, tk->handle, tk->group, c[i].trace, (*next_tag)++, err, errlen))) nsent++;
    /* what went out comes back, also after a failed submit */
    for (int k = 0; k < nsent; k++) {
      kg_pool_result r;
      char e[1024];
      int g = o->pool->wait(o->pool, &r, e, sizeof e);
      if (g <= 0) {
        if (rc == 0) {
          rc = -1;
          snprintf(err, errlen, "%s", g < 0 ? e : "the pool lost a confirmation measurement");
        }
        break;
      }
      int i = (int)(r.tag - tag0);
      assert(i >= 0 && i < nsent && !got[i] && "a pool answers only what was submitted");
      who[i] = r;
      res[i] = r.res;
      got[i] = 1;
      tk->build_s += r.build_s;
      tk->run_s += r.run_s;
    }
  }
  /* every measurement that came back is logged, also after a failed submit or wait (whose error is the one
   * reported): it was made, and a later run then need not make it again */
  char lerr[1024];
  int lrc = 0;
  for (int i = 0; i < n; i++) {
    if (!got[i]) continue;
    if (lrc == 0 && res[i].env_fault) lrc = env_stop(tk, &res[i], 0, lerr, sizeof lerr);
    if (lrc == 0 && !res[i].env_fault) {
      lrc = log_result(w, tk, &s[i]->trace, &res[i], NULL, o->pool ? &who[i] : NULL, lerr, sizeof lerr);
      double t = rank_time(tk, &res[i]);
      if (t <= 0 || plausible(tk, t, NULL, NULL, 0)) add_result(tk, texts[i], t, NULL);
      tk->confirmed++;
    }
    kg_measure_result_free(&res[i]);
  }
  if (lrc == 0 && w) lrc = kg_tlog_flush(w, lerr, sizeof lerr);
  if (rc == 0 && lrc != 0) {
    rc = lrc;
    snprintf(err, errlen, "%s", lerr);
  }
  for (int i = 0; i < n; i++) kg_schedule_free(s[i]);
  free(s);
  free(c);
  free(res);
  free(who);
  free(got);
  return rc;
}

/* The confirmation (tune.h): tk's fastest traces measured o->confirm_runs more times, round by round (each round
 * all of them, so that a slow spell of the machine falls on all alike); while the first by ranking time is one that
 * was not among them (its single time was lucky), it joins them and is measured as often. tk's best is then the
 * first trace by ranking time (the median of its results; a single result times the factor by which the re-measured
 * traces came back), as kg_tlog_pick_best ranks the log. 0, or -1 with err. */
static int confirm_task(task *tk, const kg_tune_opts *o, kg_tlog_writer *w, int64_t *next_tag, char *err,
                        size_t errlen) {
  ranked_trace *r;
  int nr = traces_ranked(tk, &r);
  int k = nr < o->confirm ? nr : o->confirm, n = 0, rc = 0;
  char **set = kg_xrealloc(NULL, sizeof *set * (size_t)(2 * k + 1));
  for (int i = 0; i < k; i++) set[n++] = kg_xstrdup(r[i].text);
  free(r);
  if (k > 0 && o->progress)
    fprintf(o->progress, "%s: confirming the %d fastest schedule%s (%d more run%s each)\n", tk->t->label, k,
            k == 1 ? "" : "s", o->confirm_runs, o->confirm_runs == 1 ? "" : "s");
  tk->search_best_s = tk->best_s;
  for (int run = 0; run < o->confirm_runs && rc == 0 && n > 0; run++)
    rc = remeasure(tk, set, n, o, w, next_tag, err, errlen);
  /* a trace measured once that now ranks first joins (at most k of them: each round of this can only happen
   * while the confirmed ones turned out slower than they looked) */
  for (int extra = 0; extra < k && rc == 0; extra++) {
    nr = traces_ranked(tk, &r);
    int known = nr == 0;
    for (int i = 0; i < n && !known; i++) known = !strcmp(set[i], r[0].text);
    if (!known) set[n++] = kg_xstrdup(r[0].text);
    free(r);
    if (known) break;
    for (int run = 0; run < o->confirm_runs && rc == 0; run++)
      rc = remeasure(tk, set + n - 1, 1, o, w, next_tag, err, errlen);
  }
  nr = traces_ranked(tk, &r);
  free(tk->best_text);
  tk->best_text = NULL;
  tk->best_s = 0;
  tk->best_sketch = NULL;
  if (nr > 0) {
    tk->best_s = r[0].median;
    tk->best_text = kg_xstrdup(r[0].text);
    tk->best_sketch = r[0].sketch;
  }
  free(r);
  for (int i = 0; i < n; i++) free(set[i]);
  free(set);
  return rc;
}

/* The confirmation of every task that ranks by measured times (the emulator's records rank by a deterministic
 * estimate: nothing to confirm). */
static int confirm_all(task *tasks, int ntasks, const kg_tune_opts *o, kg_tlog_writer *w, int64_t *next_tag,
                       char *err, size_t errlen) {
  for (int i = 0; i < ntasks; i++)
    if (o->confirm > 0 && o->confirm_runs > 0 && tasks[i].runner != KG_RUNNER_EMULATOR &&
        confirm_task(&tasks[i], o, w, next_tag, err, errlen))
      return -1;
  return 0;
}

/* The report's building and measuring times so far: the measurers' (a pool's workers' as they reported them). */
static void phase_times(task *tasks, int ntasks, kg_tune_report *rep) {
  rep->build_s = rep->measure_s = 0;
  for (int i = 0; i < ntasks; i++) {
    double b = tasks[i].build_s, m = tasks[i].run_s;
    if (tasks[i].m) kg_measurer_phase_times(tasks[i].m, &b, &m);
    rep->build_s += b;
    rep->measure_s += m;
  }
}

int kg_tune(const kg_tune_task *tasks_in, int ninputs, const kg_tune_opts *oin, kg_tune_report *rep, char *err,
            size_t errlen) {
  memset(rep, 0, sizeof *rep);
  /* one task per caller's task and group of the pool's workers (one group without a pool) */
  int ngroups = oin->pool ? oin->pool->ngroups : 1, ntasks = ninputs * ngroups;
  rep->last_accuracy = -1;
  kg_tune_opts o = *oin;
  if (o.trials <= 0) o.trials = 64;
  /* the emulator's clock ranks nothing (the estimate does): a few timed runs keep a record's times, no more */
  if (o.measure.target == KG_TARGET_CUDA && o.measure.emulate && o.measure.min_repeat_s <= 0)
    o.measure.min_repeat_s = 1e-9;
  if (o.population <= 0) o.population = o.measure.target == KG_TARGET_CUDA ? 2048 : 512;
  if (o.generations <= 0) o.generations = 4;
  if (o.per_round <= 0) {
    /* The model learns between rounds only: one 64-trial round for a 64-trial run would pick every candidate
     * with an untrained model. At least four rounds per task for small budgets; 8..64 per round keeps each
     * batch large enough to keep the compilers busy and the model's refits cheap. */
    int per = o.trials / (4 * (ninputs > 0 ? ninputs : 1));
    o.per_round = per < 8 ? 8 : per > 64 ? 64 : per;
  }
  if (o.eps == 0) o.eps = 0.05;
  if (o.eps < 0) o.eps = 0;
  if (o.mutation_prob <= 0) o.mutation_prob = 0.85;
  if (o.sketch_share == 0) o.sketch_share = 0.5;
  if (o.sketch_share < 0) o.sketch_share = 0;
  if (o.confirm == 0) o.confirm = 3;
  if (o.confirm_runs <= 0) o.confirm_runs = 2;
  if (o.measure.early_cut == 0) o.measure.early_cut = 4;
  double start = kg_now_s();
  rep->tasks = kg_xrealloc(NULL, sizeof *rep->tasks * (size_t)(ntasks ? ntasks : 1));
  memset(rep->tasks, 0, sizeof *rep->tasks * (size_t)(ntasks ? ntasks : 1));
  for (int i = 0; i < ntasks; i++) kg_trace_init(&rep->tasks[i].best_trace);

  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_writer *w = NULL;
  kg_model *model = NULL;
  task *tasks = kg_xrealloc(NULL, sizeof *tasks * (size_t)(ntasks ? ntasks : 1));
  memset(tasks, 0, sizeof *tasks * (size_t)(ntasks ? ntasks : 1));
  int rc = -1, ntasks_made = 0;
  uint64_t rng = o.seed ^ 0x6b67656e74756e65ull; /* "kgentune" */

  if (o.log_path) {
    if (kg_tlog_read(&log, o.log_path, NULL, err, errlen)) goto out;
    if (!(w = kg_tlog_open(o.log_path, err, errlen))) goto out;
  }
  int model_loaded = 0;
  if (o.model == KG_MODEL_XGB && o.log_path) {
    char *mp = model_path(o.log_path), e[256];
    if (access(mp, R_OK) == 0 && (model = kg_model_load(mp, o.seed, e, sizeof e))) model_loaded = 1;
    free(mp);
  }
  if (!model) model = kg_model_new(o.model, o.seed);

  kg_pool_target targets[KG_POOL_MAX_GROUPS];
  if (ngroups > KG_POOL_MAX_GROUPS) {
    snprintf(err, errlen, "the pool's workers measure on %d different targets (at most %d)", ngroups,
             KG_POOL_MAX_GROUPS);
    goto out;
  }
  for (int in = 0, i = 0; in < ninputs; in++) {
    int handle = -1;
    if (o.pool) {
      char e[1024];
      if ((handle = o.pool->open(o.pool, tasks_in[in].prog, &o.measure, targets, e, sizeof e)) < 0) {
        snprintf(err, errlen, "%s: %s", tasks_in[in].label, e);
        goto out;
      }
    }
    for (int g = 0; g < ngroups; g++) {
      if (o.pool && (int)targets[g].runner == -1) continue; /* no worker of this group measures it */
      task *tk = &tasks[i];
      tk->t = &tasks_in[in];
      tk->input = in;
      tk->group = g;
      tk->handle = handle;
      kg_strset_init(&tk->seen);
      ntasks_made = ++i;
      char e[1024];
      const kg_gpu_limits *limits = NULL;
      const char *device;
      if (o.pool) {
        kg_pool_target *tg = &targets[g];
        tk->runner = tg->runner;
        snprintf(tk->arch, sizeof tk->arch, "%s", tg->arch);
        limits = tg->has_limits ? &tg->limits : NULL;
        device = tg->device;
      } else {
        if (!(tk->m = kg_measurer_new(tk->t->prog, &o.measure, e, sizeof e))) {
          snprintf(err, errlen, "%s: %s", tk->t->label, e);
          goto out;
        }
        tk->runner = kg_measurer_runner(tk->m);
        snprintf(tk->arch, sizeof tk->arch, "%s", kg_measurer_arch(tk->m) ? kg_measurer_arch(tk->m) : "");
        limits = kg_measurer_limits(tk->m);
        device = kg_measurer_device(tk->m);
      }
      /* C: the space's register tiles fit the vector unit the kernels are compiled for (its level's name is the
       * measurer's, or the pool target's, arch) */
      kg_space_opts so = {.unfused = o.no_fuse,
                          .cpu = o.measure.target == KG_TARGET_C ? kg_cpu_arch_find(tk->arch) : NULL};
      tk->sp = kg_space_new_opts(tk->t->prog, o.measure.target, limits, &so);
      kg_tlog_workload_of(tk->t->prog, &tk->wl);
      tk->target.kind = o.measure.target == KG_TARGET_CUDA ? "cuda" : "c";
      tk->target.arch = tk->arch;
      kg_device_split(device, tk->device_name, sizeof tk->device_name, tk->versions, sizeof tk->versions);
      tk->target.device = tk->device_name;
      tk->target.versions = tk->versions;
      tk->target.runner = kg_runner_names[tk->runner];
      kg_schedule *ds = default_schedule(tk);
      tk->default_text = kg_trace_to_text(&ds->trace);
      kg_schedule_free(ds);
      load_records(tk, &log, 0, 0, rep);
    }
  }
  ntasks = ntasks_made;
  if (!model_loaded && o.model == KG_MODEL_XGB && retrain(model, tasks, ntasks, err, errlen)) goto out;
  size_t own_read = 0; /* (each measurement below first picks up what other tuners appended) */
  if (o.pool) {
    if (tune_pooled(tasks, ntasks, model, w, &log, &own_read, &o, &rng, rep, start, err, errlen)) goto out;
    int64_t tag = INT64_MAX / 2; /* the search's tags count up from 0 */
    if (confirm_all(tasks, ntasks, &o, w, &tag, err, errlen)) goto out;
    phase_times(tasks, ntasks, rep);
    rc = 0;
    goto out;
  }
  int done = 0;
  for (int i = 0; i < ntasks && !o.skip_default && done < o.trials; i++)
    if (reread_log(&log, w, &own_read, tasks, ntasks, &o, &rng, rep, err, errlen) ||
        measure_one(&tasks[i], NULL, w, &done, err, errlen))
      goto out;
  for (int g = 0; g < o.ngiven; g++)
    for (int i = 0; i < ntasks && done < o.trials; i++)
      if (reread_log(&log, w, &own_read, tasks, ntasks, &o, &rng, rep, err, errlen) ||
          measure_one(&tasks[i], o.given[g], w, &done, err, errlen))
        goto out;
  /* on a GPU, what tuning without one ranked best is measured first (its records carry estimates, not times) */
  for (int i = 0; i < ntasks && done < o.trials; i++) {
    if (tasks[i].runner != KG_RUNNER_GPU) continue;
    int *top = NULL, ntop = estimated_top(&tasks[i], &log, o.per_round, &top);
    for (int k = 0; k < ntop && done < o.trials; k++) {
      int before = done;
      if (reread_log(&log, w, &own_read, tasks, ntasks, &o, &rng, rep, err, errlen) ||
          measure_one(&tasks[i], &log.recs[top[k]].trace, w, &done, err, errlen)) {
        free(top);
        goto out;
      }
      rep->from_estimates += done > before;
    }
    free(top);
  }
  if (w && kg_tlog_flush(w, err, errlen)) goto out;
  rep->trials = done;
  while (rep->trials < o.trials) {
    int ti = pick_task(tasks, ntasks, -1);
    if (ti < 0) break; /* every space ran dry */
    if (reread_log(&log, w, &own_read, tasks, ntasks, &o, &rng, rep, err, errlen)) goto out;
    int want = o.per_round < o.trials - rep->trials ? o.per_round : o.trials - rep->trials;
    if (run_round(&tasks[ti], tasks, ntasks, model, w, &o, want, &rng, rep, err, errlen)) goto out;
    if (tasks[ti].exhausted) continue; /* nothing was measured */
    rep->rounds++;
    phase_times(tasks, ntasks, rep);
    progress(&o, &tasks[ti], rep->trials, o.trials, rep->last_accuracy, rep->build_s, rep->measure_s, rep->search_s,
             kg_now_s() - start);
  }
  if (o.progress && o.progress_inplace) fputc('\n', o.progress);
  if (confirm_all(tasks, ntasks, &o, w, NULL, err, errlen)) goto out;
  phase_times(tasks, ntasks, rep);
  rc = 0;
out:
  rep->log_skipped_parts = log.skipped_parts;
  rep->log_skipped_bytes = log.skipped_bytes;
  rep->log_skipped_newer = log.skipped_newer;
  rep->ntasks = ntasks_made;
  for (int i = 0; i < ntasks_made; i++) {
    task *tk = &tasks[i];
    kg_tune_task_result *tr = &rep->tasks[i];
    tr->input = tk->input;
    snprintf(tr->device, sizeof tr->device, "%s", tk->device_name);
    tr->trials = tk->trials;
    tr->loaded = tk->loaded;
    tr->failed = tk->failed;
    tr->cut = tk->cut;
    tr->default_s = tk->default_s;
    tr->best_s = tk->best_s;
    tr->confirmed = tk->confirmed;
    tr->search_best_s = tk->search_best_s;
    tr->exhausted = tk->exhausted;
    if (tk->sp) {
      tr->space_points = kg_space_size(tk->sp);
      tr->space_sketches = tk->sp->nsketches;
    }
    if (tk->best_s > 0) {
      tr->best_gflops = kg_program_flops(tk->t->prog) / tk->best_s * 1e-9;
      tr->best_gbps = kg_program_bytes(tk->t->prog) / tk->best_s * 1e-9;
      char e[64];
      kg_trace_parse(&tr->best_trace, "best", tk->best_text, strlen(tk->best_text), e, sizeof e);
      tr->best_sketch = tk->best_sketch; /* points into the space: copied below before it is freed */
      if (tk->best_sketch) {
        size_t len = strlen(tk->best_sketch) + 1;
        char *copy = kg_arena_alloc(&tr->best_trace.arena, len);
        memcpy(copy, tk->best_sketch, len);
        tr->best_sketch = copy;
      }
    }
    task_free(tk);
  }
  free(tasks);
  kg_model_free(model);
  if (w) kg_tlog_close(w);
  kg_tlog_free(&log);
  rep->elapsed_s = kg_now_s() - start;
  return rc;
}

void kg_tune_report_free(kg_tune_report *rep) {
  for (int i = 0; i < rep->ntasks; i++) kg_trace_free(&rep->tasks[i].best_trace);
  free(rep->tasks);
  memset(rep, 0, sizeof *rep);
}
