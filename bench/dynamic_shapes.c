/* dynamic_shapes: the shape-transition benchmark. A serving-like sequence of calls whose size (e.g.
 * matmul's M) changes from call to call, run three ways:
 *   specialize  at each new size, the tuned schedule compiled with every size static, then the call; a size seen
 *               before reuses its kernel
 *   dynamic     the same tuned schedule compiled once with the size dynamic (the first call pays the compile);
 *               every call passes the size
 *   buckets     the range-tuned bucket set of a log (`kgen tune --dynamic`): each bucket's kernel (dynamic, its own
 *               tuned schedule) compiled at the first call whose size falls in the bucket; calls dispatched by
 *               bucket. Buckets whose best schedules are the same trace share one kernel (one compile).
 * The "tuned schedule" of specialize and dynamic is the best record of the log's bucket holding the sequence's
 * largest size, applied to the program at each size (split factors need not divide, so a trace applies anywhere).
 * A dynamic kernel is built from the program at the value its bucket was tuned at: the kernel the tuner measured.
 *
 * Per call it records the compile cost (scheduling, lowering, printing, and cc + dlopen on the CPU or NVRTC +
 * module load on the GPU: what a system compiling on demand pays) and the call's time (wall clock on the CPU, CUDA
 * events on the GPU), and verifies the output against the reference evaluator (computed once per size, before
 * anything is timed). Then the steady state: per distinct size, each approach's warmed kernel timed call by call for
 * --min-ms in interleaved rounds (drift hits every approach alike), the lowest of the rounds' medians; the
 * summary's steady-state ratio is the geometric mean over sizes of approach / specialize.
 *
 *   dynamic_shapes --workload FILE.te|NAME --log LOG --out DIR [-D NAME=VALUE]... [--size NAME] [--range LO..HI]
 *                  [--calls N] [--seed S] [--recur P] [--min-ms MS] [--target c|cuda] [--emulate]
 *
 * --size and --range default to the log's range-tuned records. The sequence: --calls sizes, each one a log-uniform
 * draw over the range or, with probability --recur (0.3), the size of an earlier call. --emulate runs the CUDA
 * target on the CUDA emulator (runtime/emu.h): it checks the GPU path's kernels without a GPU; its times mean
 * nothing.
 *
 * Writes DIR/calls.tsv (call, M, approach, kernel, compile_s, run_s, cumulative_s, verify), DIR/steady.tsv (M,
 * approach, median_s, runs, ratio_vs_specialize), DIR/summary.tsv (per approach), DIR/meta.tsv (what was run: key,
 * tab, value) and the schedules used (DIR/tuned.sched, DIR/bucket-LO-HI.sched); bench/dynamic_report.py turns them
 * into a table and a plot. Exit status: 0, 1 when a call did not verify or a kernel could not be built, 2 on a
 * usage error, 3 when the target cannot run here (no GPU).
 *
 * A benchmark tool, not a test: its figures depend on the machine and its load. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../base/clock.h"
#include "../base/rng.h"
#include "../base/strbuf.h"
#include "../base/xalloc.h"
#include "../codegen/codegen.h"
#include "../runtime/cpu.h"
#include "../runtime/cudrv.h"
#include "../runtime/emu.h"
#include "../runtime/verify.h"
#include "../tlog/tlog.h"

#define MAX_BIND 16
#define MAX_BUCKETS 64
#define NAPPROACH 3
#define STEADY_ROUNDS 5
#define STEADY_MIN_CALLS 3 /* per round */
#define STEADY_MAX_CALLS 1000000

enum { SPECIALIZE, DYNAMIC, BUCKETS };
static const char *const approach_names[NAPPROACH] = {"specialize", "dynamic", "buckets"};

typedef enum { RUN_CPU, RUN_GPU, RUN_EMU } runner;

typedef struct opts {
  const char *workload, *size, *log, *out, *target;
  char *size_owned; /* size, when read from the log */
  kg_binding b[MAX_BIND];
  int nb;
  int64_t lo, hi; /* 0: from the log */
  int calls, emulate;
  uint64_t seed;
  double recur;  /* probability that a call repeats a size seen before */
  double min_ms; /* steady state: time per size and approach */
} opts;

/* A compiled kernel: static (nsizes 0) or taking the dynamic size at run time. */
typedef struct kernel {
  int built, nsizes;
  double compile_s;
  kg_cpu_module cpu;  /* RUN_CPU */
  kg_cuda_program cp; /* RUN_GPU, RUN_EMU */
  kg_cudrv_module gpu; /* RUN_GPU */
  kg_emu_module emu;  /* RUN_EMU */
  kg_devptr *dtemps;  /* RUN_GPU: the global temporaries, at their most (cp.temp_elems) */
  float **htemps;     /* RUN_EMU: the same on the host */
} kernel;

/* One bucket of the range-tuned log: the values it serves, the value it was tuned at, its best trace. */
typedef struct bucket {
  int64_t lo, hi, value;
  double best_s;
  char *trace_text;
  kg_trace trace;
  int kernel; /* index into the bucket kernels (buckets with the same trace share one) */
} bucket;

/* One distinct size of the sequence: its program (all sizes static), data with the reference, the specialized
 * kernel, and the steady-state samples of each approach. */
typedef struct size_case {
  int64_t m;
  kg_program *p;
  kg_data d;
  float **args;       /* inputs, outputs, then the size (what a dynamic C kernel's wrapper reads) */
  kg_devptr *dparams; /* RUN_GPU: inputs (copied once) and outputs on the device */
  int64_t sizes[1];
  kernel spec;
  double *samples[NAPPROACH];
  int nsamples[NAPPROACH], capsamples[NAPPROACH];
  double median[NAPPROACH];
} size_case;

typedef struct workload {
  char *path, *text;
  size_t len;
} workload;

typedef struct bench {
  opts o;
  runner rn;
  const char *kind; /* the log's target kind: "c" or "cuda" */
  char device[400];
  kg_cudrv_device dev;
  kg_cudrv_event_timer timer;
  workload w;
  kg_program *dyn; /* dynamic over the range, bound at its top */
  int kdyn;        /* the dynamic size's index */
  bucket bk[MAX_BUCKETS];
  int nbk, nkern;
  int owner[MAX_BUCKETS]; /* the first bucket of each bucket kernel */
  const bucket *tuned;
  int64_t *seq, *distinct;
  int ns;
  size_case *sc;
  kernel dynk, *bkern;
  double cum[NAPPROACH], compile[NAPPROACH], run[NAPPROACH];
  int compiles[NAPPROACH], verified[NAPPROACH], failed;
} bench;

static int usage(const char *why) {
  if (why) fprintf(stderr, "dynamic_shapes: %s\n", why);
  fprintf(stderr,
          "usage: dynamic_shapes --workload FILE.te|NAME --log LOG --out DIR [-D NAME=VALUE]... [--size NAME]\n"
          "                      [--range LO..HI] [--calls N] [--seed S] [--recur P] [--min-ms MS]\n"
          "                      [--target c|cuda] [--emulate]\n");
  return 2;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  kg_strbuf b;
  kg_strbuf_init(&b);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) kg_strbuf_putn(&b, chunk, n);
  fclose(f);
  *len = b.len;
  if (!b.s) kg_strbuf_puts(&b, "");
  return kg_strbuf_take(&b);
}

static int parse_i64(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno || end == s || *end) return -1;
  *v = x;
  return 0;
}

static int parse_double(const char *s, double *v) {
  char *end;
  *v = strtod(s, &end);
  return *end || end == s ? -1 : 0;
}

static int parse_range(const char *v, int64_t *lo, int64_t *hi) {
  const char *dots = strstr(v, "..");
  char a[32];
  if (!dots || (size_t)(dots - v) >= sizeof a) return -1;
  memcpy(a, v, (size_t)(dots - v));
  a[dots - v] = 0;
  return parse_i64(a, lo) || parse_i64(dots + 2, hi) || *lo < 1 || *hi < *lo ? -1 : 0;
}

static int parse_opts(int argc, char **argv, opts *o) {
  memset(o, 0, sizeof *o);
  o->calls = 60;
  o->seed = 1;
  o->recur = 0.3;
  o->min_ms = 20;
  o->target = "c";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int64_t x;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(NULL);
    if (!strcmp(a, "--emulate")) {
      o->emulate = 1;
      continue;
    }
    if (i + 1 >= argc) return usage("an option without its value");
    const char *v = argv[++i];
    if (!strcmp(a, "--workload")) o->workload = v;
    else if (!strcmp(a, "--log")) o->log = v;
    else if (!strcmp(a, "--out")) o->out = v;
    else if (!strcmp(a, "--size")) o->size = v;
    else if (!strcmp(a, "--target")) o->target = v;
    else if (!strcmp(a, "-D")) {
      const char *eq = strchr(v, '=');
      if (!eq || eq == v || o->nb >= MAX_BIND || parse_i64(eq + 1, &x)) return usage("bad -D (want NAME=VALUE)");
      o->b[o->nb].name = strndup(v, (size_t)(eq - v));
      o->b[o->nb++].value = x;
    } else if (!strcmp(a, "--range")) {
      if (parse_range(v, &o->lo, &o->hi)) return usage("bad --range (want LO..HI with 1 <= LO <= HI)");
    } else if (!strcmp(a, "--calls")) {
      if (parse_i64(v, &x) || x < 1 || x > 1000000) return usage("bad --calls");
      o->calls = (int)x;
    } else if (!strcmp(a, "--seed")) {
      if (parse_i64(v, &x) || x < 0) return usage("bad --seed");
      o->seed = (uint64_t)x;
    } else if (!strcmp(a, "--recur")) {
      if (parse_double(v, &o->recur) || !(o->recur >= 0 && o->recur < 1)) return usage("bad --recur (0 <= P < 1)");
    } else if (!strcmp(a, "--min-ms")) {
      if (parse_double(v, &o->min_ms) || !(o->min_ms > 0)) return usage("bad --min-ms");
    } else {
      return usage("unknown option");
    }
  }
  if (!o->workload || !o->log || !o->out) return usage("--workload, --log and --out are required");
  if (strcmp(o->target, "c") && strcmp(o->target, "cuda")) return usage("--target is c or cuda");
  if (o->emulate && strcmp(o->target, "cuda")) return usage("--emulate goes with --target cuda");
  return 0;
}

/* A bare name (no '/', no ".te") is a workload of the library (te/lib), as for kgen. */
static char *resolve_workload(const char *w) {
  struct stat st;
  if (strchr(w, '/') || strstr(w, ".te") || stat(w, &st) == 0) return strdup(w);
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_strbuf_printf(&b, "te/lib/%s.te", w);
  return kg_strbuf_take(&b);
}

/* The program at the options' bindings with the size bound to value; dynamic over [lo, hi] when dyn is set. NULL
 * with the message printed. */
static kg_program *load_at(const bench *B, int64_t value, int dyn, int64_t lo, int64_t hi) {
  const opts *o = &B->o;
  kg_binding b[MAX_BIND + 1];
  int n = 0;
  for (int i = 0; i < o->nb; i++)
    if (strcmp(o->b[i].name, o->size)) b[n++] = o->b[i];
  b[n++] = (kg_binding){o->size, value};
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  kg_program *p = kg_program_load(B->w.path, B->w.text, B->w.len, NULL, b, n, &diag, &da);
  if (p && dyn) {
    kg_dynamic_size d = {o->size, lo, hi};
    if (kg_program_set_dynamic(p, &d, 1, &diag, &da) != 0) {
      kg_program_free(p);
      p = NULL;
    }
  }
  if (!p) fprintf(stderr, "dynamic_shapes: %s", diag.msg ? diag.msg : "cannot load the workload\n");
  kg_arena_free(&da);
  return p;
}

/* ---- kernels: build and call on the three runners ---- */

/* Compiles the lowered f into k for the runner. 0, or -1 with the reason printed. */
static int kernel_compile(bench *B, kernel *k, const kg_lowered *f, const char *what) {
  char err[4096] = "";
  if (B->rn == RUN_CPU) {
    char *src = NULL;
    if (kg_codegen_c(f, "kgen_dyn", &src, err, sizeof err) != 0) {
      fprintf(stderr, "dynamic_shapes: %s: cannot print C: %s\n", what, err);
      return -1;
    }
    int rc = kg_cpu_build(src, "kgen_dyn", &k->cpu);
    free(src);
    if (rc != 0) {
      fprintf(stderr, "dynamic_shapes: %s: cannot compile: %.2000s\n", what, k->cpu.log ? k->cpu.log : "?");
      kg_cpu_module_free(&k->cpu);
      return -1;
    }
    return 0;
  }
  if (kg_codegen_cuda(f, "kgdyn", &k->cp, err, sizeof err) != 0) {
    fprintf(stderr, "dynamic_shapes: %s: cannot print CUDA: %s\n", what, err);
    return -1;
  }
  int nt = k->cp.ntemps;
  if (B->rn == RUN_EMU) {
    if (kg_emu_build(&k->cp, &k->emu) != 0) {
      fprintf(stderr, "dynamic_shapes: %s: cannot compile for the emulator: %.2000s\n", what,
              k->emu.log ? k->emu.log : "?");
      kg_emu_module_free(&k->emu);
      kg_cuda_program_free(&k->cp);
      return -1;
    }
    k->htemps = kg_xrealloc(NULL, sizeof(float *) * (size_t)(nt + 1));
    for (int t = 0; t < nt; t++) k->htemps[t] = kg_xrealloc(NULL, sizeof(float) * (size_t)k->cp.temp_elems[t]);
    return 0;
  }
  kg_cubin cb;
  memset(&cb, 0, sizeof cb);
  int rc = -1;
  if (kg_nvrtc_compile(&k->cp, B->dev.arch, &cb) != 0)
    fprintf(stderr, "dynamic_shapes: %s: NVRTC: %.2000s\n", what, cb.log ? cb.log : "?");
  else if (kg_gpu_check_limits(&k->cp, &cb, &B->dev.limits, err, sizeof err) != 0)
    fprintf(stderr, "dynamic_shapes: %s: %s\n", what, err);
  else if (kg_cudrv_module_load(&k->gpu, &k->cp, cb.cubin, err, sizeof err) != 0)
    fprintf(stderr, "dynamic_shapes: %s: %s\n", what, err);
  else
    rc = 0;
  kg_cubin_free(&cb);
  if (rc != 0) {
    kg_cuda_program_free(&k->cp);
    return -1;
  }
  k->dtemps = kg_xrealloc(NULL, sizeof(kg_devptr) * (size_t)(nt + 1));
  memset(k->dtemps, 0, sizeof(kg_devptr) * (size_t)(nt + 1));
  for (int t = 0; t < nt && rc == 0; t++)
    if (kg_cudrv_alloc(&k->dtemps[t], 4 * (size_t)(k->cp.temp_elems[t] ? k->cp.temp_elems[t] : 1), err,
                      sizeof err) != 0) {
      fprintf(stderr, "dynamic_shapes: %s: %s\n", what, err);
      rc = -1;
    }
  if (rc != 0) {
    for (int t = 0; t < nt; t++)
      if (k->dtemps[t]) kg_cudrv_free(k->dtemps[t]);
    free(k->dtemps);
    kg_cudrv_module_unload(&k->gpu);
    kg_cuda_program_free(&k->cp);
  }
  return rc;
}

/* Schedules p with trace, lowers, prints and compiles it; the compile cost is the wall time of all of it. 0, or -1
 * with the reason printed. */
static int kernel_build(bench *B, kernel *k, const kg_program *p, const kg_trace *trace, const char *what) {
  memset(k, 0, sizeof *k);
  char err[4096] = "";
  double t0 = kg_now_s();
  kg_schedule *s = kg_schedule_new(p);
  int rc = -1;
  kg_arena a;
  kg_arena_init(&a);
  if (kg_schedule_apply_trace(s, trace, err, sizeof err) != 0) {
    fprintf(stderr, "dynamic_shapes: %s: the trace does not apply: %s\n", what, err);
    goto done;
  }
  kg_lowered *f = kg_lower(s, B->rn == RUN_CPU ? KG_TARGET_C : KG_TARGET_CUDA, &a, err, sizeof err);
  if (!f) {
    fprintf(stderr, "dynamic_shapes: %s: cannot lower: %s\n", what, err);
    goto done;
  }
  k->nsizes = f->nsize_vars;
  if (kernel_compile(B, k, f, what) != 0) goto done;
  k->built = 1;
  rc = 0;
done:
  k->compile_s = kg_now_s() - t0;
  kg_arena_free(&a);
  kg_schedule_free(s);
  return rc;
}

static void kernel_free(bench *B, kernel *k) {
  if (!k->built) return;
  if (B->rn == RUN_CPU) kg_cpu_module_free(&k->cpu);
  if (B->rn == RUN_EMU) {
    kg_emu_module_free(&k->emu);
    for (int t = 0; t < k->cp.ntemps; t++) free(k->htemps[t]);
    free(k->htemps);
  }
  if (B->rn == RUN_GPU) {
    kg_cudrv_module_unload(&k->gpu);
    for (int t = 0; t < k->cp.ntemps; t++) kg_cudrv_free(k->dtemps[t]);
    free(k->dtemps);
  }
  if (B->rn != RUN_CPU) kg_cuda_program_free(&k->cp);
  k->built = 0;
}

/* One call of k on sc's buffers; *t gets its time. A dynamic kernel gets the size (the C wrapper reads it from
 * args[nparams]); argument arrays are ready beforehand so the timed region holds the call alone. 0, or -1 with the
 * reason printed (a launch that failed). */
static int kernel_call(bench *B, const kernel *k, const size_case *sc, double *t) {
  int np = sc->d.ninputs + sc->d.noutputs;
  const int64_t *sizes = k->nsizes ? sc->sizes : NULL;
  char err[1024] = "";
  int rc = 0;
  if (B->rn == RUN_CPU) {
    double t0 = kg_now_s();
    kg_cpu_call(&k->cpu, sc->args, k->nsizes ? np + 1 : np);
    *t = kg_now_s() - t0;
    return 0;
  }
  int nt = k->cp.ntemps;
  if (B->rn == RUN_EMU) {
    float **args = kg_xrealloc(NULL, sizeof(float *) * (size_t)(np + nt + 1));
    memcpy(args, sc->args, sizeof(float *) * (size_t)np);
    for (int i = 0; i < nt; i++) args[np + i] = k->htemps[i];
    double t0 = kg_now_s();
    rc = kg_emu_run_program_sizes(&k->emu, &k->cp, args, sizes, err, sizeof err);
    *t = kg_now_s() - t0;
    free(args);
  } else {
    kg_devptr args[64];
    if (np + nt > (int)(sizeof args / sizeof *args)) {
      fprintf(stderr, "dynamic_shapes: too many buffers (%d)\n", np + nt);
      return -1;
    }
    memcpy(args, sc->dparams, sizeof(kg_devptr) * (size_t)np);
    for (int i = 0; i < nt; i++) args[np + i] = k->dtemps[i];
    rc = kg_cudrv_timer_start(&B->timer, err, sizeof err);
    if (rc == 0) rc = kg_cudrv_launch_program_sizes(&k->gpu, &k->cp, args, sizes, err, sizeof err);
    if (rc == 0) rc = kg_cudrv_timer_stop(&B->timer, t, err, sizeof err);
  }
  if (rc != 0) fprintf(stderr, "dynamic_shapes: M=%lld: %s\n", (long long)sc->m, err);
  return rc;
}

/* A call whose outputs are checked: outputs poisoned first (on the device too), the call timed, the outputs
 * brought back and compared with the reference. 1 when verified. */
static int call_verified(bench *B, const kernel *k, size_case *sc, double *t, const char *what) {
  char err[1024] = "";
  kg_data_poison(&sc->d, sc->p);
  int rc = 0;
  for (int i = 0; B->rn == RUN_GPU && i < sc->d.noutputs && rc == 0; i++)
    rc = kg_cudrv_htod(sc->dparams[sc->d.ninputs + i], sc->d.outputs[i],
                      4 * (size_t)kg_tensor_numel(sc->p->outputs[i]), err, sizeof err);
  *t = 0;
  if (rc == 0) rc = kernel_call(B, k, sc, t);
  for (int i = 0; B->rn == RUN_GPU && i < sc->d.noutputs && rc == 0; i++)
    rc = kg_cudrv_dtoh(sc->d.outputs[i], sc->dparams[sc->d.ninputs + i],
                      4 * (size_t)kg_tensor_numel(sc->p->outputs[i]), err, sizeof err);
  if (rc != 0) {
    if (err[0]) fprintf(stderr, "dynamic_shapes: %s: %s\n", what, err);
    return 0;
  }
  kg_verify_result v = kg_verify(sc->p, &sc->d, 0);
  if (!v.ok) fprintf(stderr, "dynamic_shapes: %s: verify FAILED: %s\n", what, v.msg);
  return v.ok;
}

/* ---- the log's buckets ---- */

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? -1 : a > b;
}
static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}
static int cmp_bucket(const void *x, const void *y) {
  return cmp_i64(&((const bucket *)x)->lo, &((const bucket *)y)->lo);
}

/* The dynamic size and its range from the log's first range-tuned record of the workload, where the options do
 * not give them. 0, or -1 with the reason printed. */
static int range_from_log(const kg_tlog *log, const char *def, const char *kind, opts *o) {
  for (int i = 0; i < log->n; i++) {
    const kg_tlog_record *r = &log->recs[i];
    if (strcmp(r->workload.name, def) || strcmp(r->target.kind, kind) || r->ndyn != 1) continue;
    if (o->size && strcmp(r->dyn_names[0], o->size)) continue;
    if (!o->size) o->size = o->size_owned = strdup(r->dyn_names[0]); /* the log's strings go with it */
    if (!o->lo) o->lo = r->dyn_lo[0], o->hi = r->dyn_hi[0];
    return 0;
  }
  fprintf(stderr, "dynamic_shapes: %s: no record of %s with one dynamic size%s%s on the %s target (tune with "
                  "`kgen tune ... --dynamic NAME=LO..HI`)\n",
          o->log, def, o->size ? " " : "", o->size ? o->size : "", kind);
  return -1;
}

/* The buckets of the log for B->dyn: every bucket its records name, each with the best record measured at its
 * value (kg_tlog_pick_best on the workload rebound there, so records of other bindings do not count). Fills
 * B->bk and B->nbk; 0, or -1 with the reason printed. */
static int buckets_from_log(bench *B, const kg_tlog *log) {
  const kg_size_var *sv = &B->dyn->sizes[B->kdyn];
  bucket *bk = B->bk;
  int nb = 0;
  for (int i = 0; i < log->n; i++) {
    const kg_tlog_record *r = &log->recs[i];
    if (strcmp(r->workload.name, B->dyn->def->name) || strcmp(r->target.kind, B->kind) || r->ndyn != 1 ||
        strcmp(r->dyn_names[0], sv->name) || r->dyn_lo[0] != sv->lo || r->dyn_hi[0] != sv->hi)
      continue;
    int64_t value = -1;
    for (int s = 0; s < r->workload.nsizes; s++)
      if (!strcmp(r->workload.size_names[s], sv->name)) value = r->workload.size_values[s];
    int seen = 0;
    for (int b = 0; b < nb && !seen; b++) seen = bk[b].lo == r->bucket_lo[0] && bk[b].hi == r->bucket_hi[0];
    if (seen || value < 0) continue;
    if (nb == MAX_BUCKETS) {
      fprintf(stderr, "dynamic_shapes: more than %d buckets in the log\n", MAX_BUCKETS);
      return -1;
    }
    memset(&bk[nb], 0, sizeof bk[nb]);
    bk[nb].lo = r->bucket_lo[0];
    bk[nb].hi = r->bucket_hi[0];
    bk[nb].value = value;
    nb++;
  }
  int kept = 0;
  for (int b = 0; b < nb; b++) {
    kg_arena da;
    kg_arena_init(&da);
    kg_diag diag = {0};
    kg_program *q = kg_program_rebind(B->dyn, B->kdyn, bk[b].value, &diag, &da);
    kg_arena_free(&da);
    if (!q) continue;
    kg_tlog_workload wl;
    kg_tlog_workload_of(q, &wl);
    kg_tlog_want want = {.wl = &wl, .kind = B->kind};
    kg_tlog_pick pick;
    kg_tlog_pick_best(log, &want, &pick);
    if (pick.kind != KG_TLOG_PICK_NONE) {
      bucket x = bk[b];
      x.best_s = pick.median_s;
      kg_trace_init(&x.trace);
      const kg_trace *t = &log->recs[pick.index].trace;
      for (int s = 0; s < t->nsteps; s++) kg_trace_push(&x.trace, &t->steps[s]);
      x.trace_text = kg_trace_to_text(&x.trace);
      bk[kept++] = x;
    }
    kg_program_free(q);
  }
  B->nbk = kept;
  if (kept == 0) {
    fprintf(stderr, "dynamic_shapes: no successful range-tuned record of %s with %s=%lld..%lld at these bindings "
                    "in the log\n",
            B->dyn->def->name, sv->name, (long long)sv->lo, (long long)sv->hi);
    return -1;
  }
  qsort(bk, (size_t)kept, sizeof *bk, cmp_bucket);
  for (int b = 1; b < kept; b++)
    if (bk[b].lo <= bk[b - 1].hi) {
      fprintf(stderr, "dynamic_shapes: the log holds overlapping buckets (%lld..%lld and %lld..%lld): several range "
                      "tunings of this workload; give a log of one\n",
              (long long)bk[b - 1].lo, (long long)bk[b - 1].hi, (long long)bk[b].lo, (long long)bk[b].hi);
      return -1;
    }
  /* buckets with the same best trace share a kernel */
  B->nkern = 0;
  for (int b = 0; b < kept; b++) {
    bk[b].kernel = -1;
    for (int c = 0; c < b && bk[b].kernel < 0; c++)
      if (!strcmp(bk[c].trace_text, bk[b].trace_text)) bk[b].kernel = bk[c].kernel;
    if (bk[b].kernel < 0) B->owner[B->nkern] = b, bk[b].kernel = B->nkern++;
  }
  return 0;
}

static int bucket_of(const bench *B, int64_t m) {
  for (int b = 0; b < B->nbk; b++)
    if (B->bk[b].lo <= m && m <= B->bk[b].hi) return b;
  return -1;
}

/* ---- the experiment ---- */

/* Log-uniform draws over [lo, hi]; with probability recur a call repeats the size of an earlier call (drawn
 * uniformly among the calls so far, so sizes that recurred recur more, as popular shapes do in serving). */
static void make_sequence(const opts *o, int64_t *seq) {
  uint64_t st = o->seed * 0x2545f4914f6cdd1dull + 12345;
  for (int i = 0; i < o->calls; i++) {
    double u = (double)(kg_rng_next(&st) >> 11) * (1.0 / 9007199254740992.0);
    if (i > 0 && u < o->recur) {
      seq[i] = seq[kg_rng_next(&st) % (uint64_t)i];
      continue;
    }
    double v = (double)(kg_rng_next(&st) >> 11) * (1.0 / 9007199254740992.0);
    int64_t m = (int64_t)floor(exp(log((double)o->lo) + v * (log((double)o->hi + 1) - log((double)o->lo))));
    seq[i] = m < o->lo ? o->lo : m > o->hi ? o->hi : m;
  }
}

/* The sequence, its distinct sizes (sorted), and every size's program, data and reference; on the GPU its
 * buffers. 0, or -1 with the reason printed. */
static int prepare_sizes(bench *B) {
  const opts *o = &B->o;
  B->seq = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)o->calls);
  make_sequence(o, B->seq);
  B->distinct = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)o->calls);
  memcpy(B->distinct, B->seq, sizeof(int64_t) * (size_t)o->calls);
  qsort(B->distinct, (size_t)o->calls, sizeof *B->distinct, cmp_i64);
  B->ns = 0;
  for (int i = 0; i < o->calls; i++)
    if (i == 0 || B->distinct[i] != B->distinct[B->ns - 1]) B->distinct[B->ns++] = B->distinct[i];
  for (int i = 0; i < B->ns; i++)
    if (bucket_of(B, B->distinct[i]) < 0) {
      fprintf(stderr, "dynamic_shapes: %s=%lld is in none of the log's buckets\n", o->size, (long long)B->distinct[i]);
      return -1;
    }
  B->tuned = &B->bk[bucket_of(B, B->distinct[B->ns - 1])];
  B->sc = calloc((size_t)B->ns, sizeof *B->sc);
  double need = 0, have = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
  for (int i = 0; i < B->ns; i++) {
    B->sc[i].m = B->distinct[i];
    B->sc[i].p = load_at(B, B->sc[i].m, 0, 0, 0);
    if (!B->sc[i].p) return -1;
    need += kg_data_bytes(B->sc[i].p);
  }
  /* every size's data and reference stay in memory for the whole run */
  if (have > 0 && need > 0.8 * have) {
    fprintf(stderr, "dynamic_shapes: the data of the %d sizes needs %.3g GB; this machine has %.3g GB (fewer calls or "
                    "a smaller range)\n", B->ns, need / 1e9, have / 1e9);
    return -1;
  }
  for (int i = 0; i < B->ns; i++) {
    size_case *s = &B->sc[i];
    uint64_t seed = o->seed + (uint64_t)s->m;
    if (kg_data_init(&s->d, s->p, seed) || kg_data_reference(&s->d, s->p, seed) == -2) {
      fprintf(stderr, "dynamic_shapes: not enough memory for the data of size %lld\n", (long long)s->m);
      return -1;
    }
    int np = s->d.ninputs + s->d.noutputs;
    s->args = kg_xrealloc(NULL, sizeof(float *) * (size_t)(np + 1));
    for (int j = 0; j < s->d.ninputs; j++) s->args[j] = s->d.inputs[j];
    for (int j = 0; j < s->d.noutputs; j++) s->args[s->d.ninputs + j] = s->d.outputs[j];
    s->sizes[0] = s->m;
    s->args[np] = (float *)(uintptr_t)s->sizes; /* the C wrapper casts it back (codegen.h) */
    if (B->rn != RUN_GPU) continue;
    char err[512];
    s->dparams = kg_xrealloc(NULL, sizeof(kg_devptr) * (size_t)np);
    for (int j = 0; j < np; j++) {
      const kg_tensor *t = j < s->d.ninputs ? s->p->inputs[j] : s->p->outputs[j - s->d.ninputs];
      size_t bytes = 4 * (size_t)kg_tensor_numel(t);
      if (kg_cudrv_alloc(&s->dparams[j], bytes ? bytes : 4, err, sizeof err) != 0 ||
          (j < s->d.ninputs && kg_cudrv_htod(s->dparams[j], s->d.inputs[j], bytes, err, sizeof err) != 0)) {
        fprintf(stderr, "dynamic_shapes: M=%lld: %s\n", (long long)s->m, err);
        return -1;
      }
    }
  }
  return 0;
}

/* The kernel approach a calls for size case s (bucket b), built first when it does not exist yet (its compile
 * cost in *compile_s, else 0). NULL when it cannot be built. */
static kernel *kernel_for(bench *B, int a, size_case *s, int b, double *compile_s) {
  kernel *k = a == SPECIALIZE ? &s->spec : a == DYNAMIC ? &B->dynk : &B->bkern[B->bk[b].kernel];
  *compile_s = 0;
  if (k->built) return k;
  const bucket *src = a == DYNAMIC ? B->tuned : &B->bk[B->owner[B->bk[b].kernel]];
  char what[160];
  if (a == SPECIALIZE) snprintf(what, sizeof what, "specialize kernel %s=%lld", B->o.size, (long long)s->m);
  else snprintf(what, sizeof what, "%s kernel %lld..%lld", approach_names[a], (long long)src->lo, (long long)src->hi);
  kg_program *q = NULL;
  const kg_program *p = s->p;
  if (a != SPECIALIZE) {
    /* the kernel the tuner measured: the dynamic program at the value its bucket was tuned at */
    kg_arena da;
    kg_arena_init(&da);
    kg_diag diag = {0};
    q = kg_program_rebind(B->dyn, B->kdyn, src->value, &diag, &da);
    if (!q) fprintf(stderr, "dynamic_shapes: %s: %s", what, diag.msg ? diag.msg : "cannot rebind\n");
    kg_arena_free(&da);
    if (!q) return NULL;
    p = q;
  }
  int rc = kernel_build(B, k, p, a == SPECIALIZE ? &B->tuned->trace : &src->trace, what);
  kg_program_free(q);
  if (rc != 0) return NULL;
  if ((a == SPECIALIZE) != (k->nsizes == 0)) {
    fprintf(stderr, "dynamic_shapes: %s: %d dynamic sizes in the lowered function\n", what, k->nsizes);
    return NULL;
  }
  *compile_s = k->compile_s;
  B->compiles[a]++;
  return k;
}

static size_case *case_of(bench *B, int64_t m) {
  const int64_t *at = bsearch(&m, B->distinct, (size_t)B->ns, sizeof *B->distinct, cmp_i64);
  return &B->sc[at - B->distinct];
}

/* The sequence: each call through the three approaches in turn, written to calls.tsv. 0, or -1 when a kernel
 * could not be built or the file written. */
static int run_sequence(bench *B) {
  char path[4096];
  snprintf(path, sizeof path, "%s/calls.tsv", B->o.out);
  FILE *fc = fopen(path, "w");
  if (!fc) {
    fprintf(stderr, "dynamic_shapes: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(fc, "call\tM\tapproach\tkernel\tcompile_s\trun_s\tcumulative_s\tverify\n");
  for (int c = 0; c < B->o.calls; c++) {
    int64_t m = B->seq[c];
    size_case *s = case_of(B, m);
    int b = bucket_of(B, m);
    /* the approaches take turns at going first, so none always finds the caches warmed by another's call */
    for (int turn = 0; turn < NAPPROACH; turn++) {
      int a = (c + turn) % NAPPROACH;
      double comp, t;
      kernel *k = kernel_for(B, a, s, b, &comp);
      if (!k) {
        fclose(fc);
        return -1;
      }
      char label[64], what[128];
      if (a == SPECIALIZE) snprintf(label, sizeof label, "%s=%lld", B->o.size, (long long)m);
      else if (a == DYNAMIC)
        snprintf(label, sizeof label, "%lld..%lld", (long long)B->tuned->lo, (long long)B->tuned->hi);
      else snprintf(label, sizeof label, "%lld..%lld", (long long)B->bk[b].lo, (long long)B->bk[b].hi);
      snprintf(what, sizeof what, "call %d (%s=%lld), %s", c, B->o.size, (long long)m, approach_names[a]);
      int ok = call_verified(B, k, s, &t, what);
      B->verified[a] += ok;
      B->failed += !ok;
      B->compile[a] += comp;
      B->run[a] += t;
      B->cum[a] += comp + t;
      fprintf(fc, "%d\t%lld\t%s\t%s\t%.9f\t%.9f\t%.9f\t%s\n", c, (long long)m, approach_names[a], label, comp, t,
              B->cum[a], ok ? "ok" : "FAILED");
    }
  }
  return fclose(fc) == 0 ? 0 : -1;
}

static void add_sample(size_case *sc, int a, double t) {
  if (sc->nsamples[a] == sc->capsamples[a]) {
    sc->capsamples[a] = sc->capsamples[a] ? 2 * sc->capsamples[a] : 64;
    sc->samples[a] = kg_xrealloc(sc->samples[a], sizeof(double) * (size_t)sc->capsamples[a]);
  }
  sc->samples[a][sc->nsamples[a]++] = t;
}

static double median_of(double *x, int n) {
  qsort(x, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The steady state: per size, each approach's warmed kernel in STEADY_ROUNDS interleaved rounds (the approaches
 * take turns at going first), then one more verified call each. A size's time is the lowest of its rounds' medians:
 * a round that another process disturbed (a descheduled OpenMP thread costs a whole time slice) does not count,
 * and a disturbance long enough to spoil every round spoils them all alike. Every kernel exists: each size was
 * called in the sequence. */
static void run_steady(bench *B) {
  double round_s = B->o.min_ms / 1000.0 / STEADY_ROUNDS;
  for (int i = 0; i < B->ns; i++) {
    size_case *s = &B->sc[i];
    const kernel *ks[NAPPROACH] = {&s->spec, &B->dynk, &B->bkern[B->bk[bucket_of(B, s->m)].kernel]};
    double t;
    int bad = 0;
    for (int a = 0; a < NAPPROACH; a++) bad |= kernel_call(B, ks[a], s, &t) != 0; /* warm-up */
    for (int r = 0; r < STEADY_ROUNDS && !bad; r++)
      for (int turn = 0; turn < NAPPROACH && !bad; turn++) {
        int a = (r + turn) % NAPPROACH, start = s->nsamples[a];
        double spent = 0;
        for (int n = 0; (spent < round_s || n < STEADY_MIN_CALLS) && n < STEADY_MAX_CALLS; n++) {
          if (kernel_call(B, ks[a], s, &t) != 0) {
            bad = 1;
            break;
          }
          add_sample(s, a, t);
          spent += t;
        }
        if (s->nsamples[a] > start) {
          double med = median_of(s->samples[a] + start, s->nsamples[a] - start);
          if (s->median[a] == 0 || med < s->median[a]) s->median[a] = med;
        }
      }
    for (int a = 0; a < NAPPROACH; a++) {
      char what[128];
      snprintf(what, sizeof what, "steady state %s=%lld, %s", B->o.size, (long long)s->m, approach_names[a]);
      B->failed += !call_verified(B, ks[a], s, &t, what);
    }
  }
}

static int write_text(const char *dir, const char *name, const char *text) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "dynamic_shapes: cannot write %s: %s\n", path, strerror(errno));
    return -1;
  }
  fputs(text, f);
  return fclose(f);
}

static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *c = strchr(line, ':');
    if (!strncmp(line, "model name", 10) && c) {
      c += 1 + (c[1] == ' ');
      c[strcspn(c, "\n")] = 0;
      snprintf(buf, len, "%s", c);
      break;
    }
  }
  fclose(f);
}

/* steady.tsv, summary.tsv (printed too), meta.tsv and the schedules. 0, or -1 when a file could not be written. */
static int write_results(bench *B) {
  const opts *o = &B->o;
  kg_strbuf st, sm, mb;
  kg_strbuf_init(&st);
  kg_strbuf_init(&sm);
  kg_strbuf_init(&mb);
  kg_strbuf_puts(&st, "M\tapproach\tmedian_s\truns\tratio_vs_specialize\n");
  double logsum[NAPPROACH] = {0};
  int nratio[NAPPROACH] = {0};
  for (int i = 0; i < B->ns; i++)
    for (int a = 0; a < NAPPROACH; a++) {
      const size_case *s = &B->sc[i];
      double ratio = s->median[SPECIALIZE] > 0 ? s->median[a] / s->median[SPECIALIZE] : 0;
      if (ratio > 0) logsum[a] += log(ratio), nratio[a]++;
      kg_strbuf_printf(&st, "%lld\t%s\t%.9g\t%d\t%.6f\n", (long long)s->m, approach_names[a], s->median[a],
                       s->nsamples[a], ratio);
    }
  kg_strbuf_puts(&sm, "approach\tcumulative_s\tcompile_s\tcompiles\trun_s\tsteady_ratio\tverified\tcalls\n");
  for (int a = 0; a < NAPPROACH; a++) {
    double ratio = nratio[a] ? exp(logsum[a] / nratio[a]) : 0;
    kg_strbuf_printf(&sm, "%s\t%.6f\t%.6f\t%d\t%.6f\t%.4f\t%d\t%d\n", approach_names[a], B->cum[a], B->compile[a],
                     B->compiles[a], B->run[a], ratio, B->verified[a], o->calls);
    printf("  %-10s cumulative %9.3f s  compile %9.3f s (%3d kernels)  run %9.4f s  steady state %.3fx  verified "
           "%d/%d\n",
           approach_names[a], B->cum[a], B->compile[a], B->compiles[a], B->run[a], ratio, B->verified[a], o->calls);
  }
  kg_strbuf_printf(&mb, "workload\t%s\nfile\t%s\ntarget\t%s%s\ndevice\t%s\nsize\t%s\nrange\t%lld..%lld\nbindings\t",
                   B->dyn->def->name, B->w.path, o->target, o->emulate ? " (emulator)" : "", B->device, o->size,
                   (long long)o->lo, (long long)o->hi);
  for (int i = 0, first = 1; i < B->dyn->nsizes; i++)
    if (i != B->kdyn) {
      kg_strbuf_printf(&mb, "%s%s=%lld", first ? "" : " ", B->dyn->sizes[i].name, (long long)B->dyn->sizes[i].value);
      first = 0;
    }
  kg_strbuf_printf(&mb, "\ncalls\t%d\ndistinct\t%d\nseed\t%llu\nrecur\t%g\nmin_ms\t%g\nlog\t%s\n", o->calls, B->ns,
                   (unsigned long long)o->seed, o->recur, o->min_ms, o->log);
  kg_strbuf_printf(&mb, "tuned_bucket\t%lld..%lld\nbucket_kernels\t%d\nsequence\t", (long long)B->tuned->lo,
                   (long long)B->tuned->hi, B->nkern);
  for (int c = 0; c < o->calls; c++) kg_strbuf_printf(&mb, "%s%lld", c ? "," : "", (long long)B->seq[c]);
  kg_strbuf_puts(&mb, "\n");
  int rc = 0;
  for (int b = 0; b < B->nbk; b++) {
    const bucket *k = &B->bk[b], *own = &B->bk[B->owner[k->kernel]];
    /* bucket, its range, the value it was tuned at, its best time there, the bucket whose kernel it shares */
    kg_strbuf_printf(&mb, "bucket\t%lld..%lld\t%lld\t%.9g\t%lld..%lld\n", (long long)k->lo, (long long)k->hi,
                     (long long)k->value, k->best_s, (long long)own->lo, (long long)own->hi);
    char name[96];
    snprintf(name, sizeof name, "bucket-%lld-%lld.sched", (long long)k->lo, (long long)k->hi);
    rc |= write_text(o->out, name, k->trace_text);
  }
  rc |= write_text(o->out, "steady.tsv", st.s);
  rc |= write_text(o->out, "summary.tsv", sm.s);
  rc |= write_text(o->out, "meta.tsv", mb.s);
  rc |= write_text(o->out, "tuned.sched", B->tuned->trace_text);
  kg_strbuf_free(&st);
  kg_strbuf_free(&sm);
  kg_strbuf_free(&mb);
  return rc ? -1 : 0;
}

/* The runner for the target: the CPU, the GPU (opened here) or the emulator. 0, or 3 with the reason printed. */
static int open_runner(bench *B) {
  char err[512];
  B->kind = B->o.target;
  if (!strcmp(B->o.target, "c")) {
    B->rn = RUN_CPU;
    cpu_model(B->device, sizeof B->device);
    return 0;
  }
  if (B->o.emulate) {
    B->rn = RUN_EMU;
    snprintf(B->device, sizeof B->device, "CUDA emulator");
    return 0;
  }
  B->rn = RUN_GPU;
  if (kg_nvrtc_available(err, sizeof err) != 0) {
    fprintf(stderr, "cuda: no NVRTC: %s\n", err);
    return 3;
  }
  if (kg_cudrv_open(&B->dev, err, sizeof err) != 0) {
    fprintf(stderr, "cuda: no GPU: %s (--emulate runs the CUDA kernels on the emulator)\n", err);
    return 3;
  }
  if (kg_cudrv_timer_init(&B->timer, err, sizeof err) != 0) {
    fprintf(stderr, "cuda: %s\n", err);
    return 3;
  }
  snprintf(B->device, sizeof B->device, "%s (%s)", B->dev.name, B->dev.arch);
  return 0;
}

/* The workload, the log, the dynamic program and the buckets. 0, or -1 with the reason printed. */
static int load_inputs(bench *B) {
  opts *o = &B->o;
  B->w.path = resolve_workload(o->workload);
  B->w.text = read_file(B->w.path, &B->w.len);
  if (!B->w.text) {
    fprintf(stderr, "dynamic_shapes: cannot read %s: %s\n", B->w.path, strerror(errno));
    return -1;
  }
  /* the def's name, to find the log's records before the size is known */
  char *def_name = NULL;
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  kg_source src = {B->w.path, B->w.text, B->w.len};
  kg_module *mod = kg_parse_module(&da, &src, &diag);
  if (mod && mod->ndefs > 0) def_name = strdup(mod->defs[0]->name);
  else fprintf(stderr, "dynamic_shapes: %s", diag.msg ? diag.msg : "cannot parse the workload\n");
  kg_arena_free(&da);
  if (!def_name) return -1;
  kg_tlog log;
  kg_tlog_init(&log);
  char err[1024];
  int missing = 0, rc = -1;
  if (kg_tlog_read(&log, o->log, &missing, err, sizeof err) != 0 || missing) {
    fprintf(stderr, "dynamic_shapes: %s: %s\n", o->log, missing ? "no such log" : err);
    goto out;
  }
  if ((!o->size || !o->lo) && range_from_log(&log, def_name, B->kind, o) != 0) goto out;
  /* dynamic over the range, bound at its top as `kgen tune --dynamic` binds it */
  B->dyn = load_at(B, o->hi, 1, o->lo, o->hi);
  if (!B->dyn) goto out;
  for (int i = 0; i < B->dyn->nsizes; i++)
    if (!strcmp(B->dyn->sizes[i].name, o->size)) B->kdyn = i;
  rc = buckets_from_log(B, &log);
out:
  kg_tlog_free(&log);
  free(def_name);
  return rc;
}

static void bench_free(bench *B) {
  for (int i = 0; B->sc && i < B->ns; i++) {
    size_case *s = &B->sc[i];
    kernel_free(B, &s->spec);
    for (int a = 0; a < NAPPROACH; a++) free(s->samples[a]);
    for (int j = 0; s->dparams && j < s->d.ninputs + s->d.noutputs; j++) kg_cudrv_free(s->dparams[j]);
    free(s->dparams);
    free(s->args);
    if (s->p) kg_data_free(&s->d);
    kg_program_free(s->p);
  }
  free(B->sc);
  kernel_free(B, &B->dynk);
  for (int k = 0; B->bkern && k < B->nkern; k++) kernel_free(B, &B->bkern[k]);
  free(B->bkern);
  for (int b = 0; b < B->nbk; b++) {
    free(B->bk[b].trace_text);
    kg_trace_free(&B->bk[b].trace);
  }
  if (B->rn == RUN_GPU && B->timer.start) kg_cudrv_timer_free(&B->timer);
  kg_program_free(B->dyn);
  free(B->seq);
  free(B->distinct);
  free(B->w.text);
  free(B->w.path);
  for (int i = 0; i < B->o.nb; i++) free((void *)B->o.b[i].name);
  free(B->o.size_owned);
}

int main(int argc, char **argv) {
  static bench B;
  int rc = parse_opts(argc, argv, &B.o);
  if (rc) return rc;
  if ((rc = open_runner(&B)) != 0) return rc;
  struct stat st;
  if ((mkdir(B.o.out, 0777) != 0 && errno != EEXIST) || stat(B.o.out, &st) != 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "dynamic_shapes: cannot create the folder %s: %s\n", B.o.out,
            errno == EEXIST ? "a file of that name exists" : strerror(errno));
    return 1;
  }
  rc = 1;
  if (load_inputs(&B) != 0 || prepare_sizes(&B) != 0) goto out;
  printf("dynamic_shapes: %s, %s=%lld..%lld dynamic, on %s: %d calls (%d distinct sizes), %d buckets (%d distinct "
         "schedules); tuned schedule: bucket %lld..%lld\n",
         B.dyn->def->name, B.o.size, (long long)B.o.lo, (long long)B.o.hi, B.device, B.o.calls, B.ns, B.nbk, B.nkern,
         (long long)B.tuned->lo, (long long)B.tuned->hi);
  fflush(stdout);
  B.bkern = calloc((size_t)B.nkern, sizeof *B.bkern);
  if (run_sequence(&B) != 0) goto out;
  printf("sequence: cumulative specialize %.3f s, dynamic %.3f s, buckets %.3f s\n", B.cum[SPECIALIZE],
         B.cum[DYNAMIC], B.cum[BUCKETS]);
  fflush(stdout);
  run_steady(&B);
  if (write_results(&B) != 0) goto out;
  if (B.failed) printf("dynamic_shapes: %d calls did not verify\n", B.failed);
  else printf("every call verified\n");
  printf("results in %s\n", B.o.out);
  rc = B.failed ? 1 : 0;
out:
  bench_free(&B);
  return rc;
}
