/* Dynamic sizes on the CUDA target: one compiled kernel program serves every value of a dynamic size.
 *
 * Every library workload (te/lib) is loaded at its `# sizes:` with its leading size made dynamic, and kernel
 * programs are printed from the default GPU schedule, two random CUDA schedules and (matmul) a tiled
 * shared-memory one. Each program is compiled with NVRTC for sm_86 and sm_90 and built ONCE for the emulator,
 * and that one build runs at ten values of the size (odd, prime and powers of two, unsorted): the grids and the
 * temporaries' sizes come from the value (kg_cuda_program_grid), every buffer ends at an inaccessible page (an
 * overrun is a crash, not a silent pass), and the outputs are compared with the reference evaluator on the program
 * loaded at that value. Also: a value outside the range is refused before anything runs, a threadIdx-bound loop or
 * a cross-thread reduction whose extent follows a dynamic size is an error (not a crash), grid limits are checked
 * with the sizes at their hi, and the extent programs evaluate and print as their IR says. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../base/strbuf.h"
#include "../codegen/codegen.h"
#include "../codegen/header.h"
#include "../runtime/emu.h"
#include "../runtime/measure.h"
#include "../runtime/nvrtc.h"
#include "../runtime/verify.h"
#include "../lower/ir.h"
#include "../lower/bounds.h"
#include "testlib.h"
#include "testutil.h"

#define NVALUES 10
/* The swept values: odd, prime and powers of two, unsorted (a grid and the temporaries change every run). */
static const int64_t sweep[NVALUES] = {13, 1, 257, 2, 97, 3, 128, 7, 64, 31};
#define NRANDOM 2
#define MAX_DRAWS 24

typedef struct dcase {
  const char *name; /* te/lib/<name>.te */
  const char *dyn;  /* its leading size */
} dcase;

static const dcase cases[] = {
    {"attention", "S"},   {"batch_matmul", "L"}, {"bias_gelu_residual", "N"}, {"conv2d", "N"},
    {"depthwise_conv2d", "N"}, {"layernorm", "N"}, {"matmul", "M"},         {"matvec", "M"},
    {"maxpool2d", "N"},   {"mlp_epilogue", "M"}, {"reduce_rows", "N"},      {"rmsnorm", "N"},
    {"softmax", "N"},     {"transpose", "M"},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* The tiled shared-memory matmul of test_cuda_codegen: blocks of 32 x 32 (blockIdx.y over M), 8 x 8 threads,
 * A and B staged in shared memory per k-slice, C accumulated in registers, B fetched with float4. */
static const char *const MM_TILED =
    "cache_write C local\n"
    "tile C i j 32 32\n"
    "split C i.i 4\n"
    "split C j.i 4\n"
    "reorder C i.o j.o i.i.o j.i.o i.i.i j.i.i\n"
    "bind C i.o blockIdx.y\n"
    "bind C j.o blockIdx.x\n"
    "bind C i.i.o threadIdx.y\n"
    "bind C j.i.o threadIdx.x\n"
    "compute_at C.local C j.i.o\n"
    "split C.local k 8\n"
    "reorder C.local k.o k.i i j\n"
    "cache_read A shared C.local\n"
    "cache_read B shared C.local\n"
    "compute_at A.shared C.local k.o\n"
    "compute_at B.shared C.local k.o\n"
    "split A.shared ax0 8\n"
    "bind A.shared ax0.i threadIdx.y\n"
    "bind A.shared ax1 threadIdx.x\n"
    "split B.shared ax1 4\n"
    "reorder B.shared ax0 ax1.o ax1.i\n"
    "bind B.shared ax0 threadIdx.y\n"
    "bind B.shared ax1.o threadIdx.x\n"
    "vectorize B.shared ax1.i\n";

static int have_nvrtc;

/* ---- workloads ---- */


/* The program with size `dyn` at value (value < 0: the file's binding), made dynamic over [lo, hi] when
 * dynamic (lo = hi = 0: the default range). */
static kg_program *load_at(const kg_test_wfile *w, const char *dyn, int64_t value, int dynamic, int64_t lo, int64_t hi) {
  kg_binding b[KG_TEST_MAX_BIND];
  memcpy(b, w->b, sizeof(kg_binding) * (size_t)w->nb);
  for (int i = 0; value >= 0 && i < w->nb; i++)
    if (!strcmp(b[i].name, dyn)) b[i].value = value;
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  kg_program *p = kg_program_load(w->path, w->text, w->len, NULL, b, w->nb, &diag, &da);
  CHECKF(p != NULL, "%s at %s=%lld: %s", w->path, dyn, (long long)value, diag.msg ? diag.msg : "?");
  if (p && dynamic) {
    kg_dynamic_size d = {dyn, lo, hi};
    int rc = kg_program_set_dynamic(p, &d, 1, &diag, &da);
    CHECKF(rc == 0, "%s: set_dynamic %s: %s", w->path, dyn, diag.msg ? diag.msg : "?");
    if (rc != 0) {
      kg_program_free(p);
      p = NULL;
    }
  }
  kg_arena_free(&da);
  return p;
}

/* ---- buffers that end at an inaccessible page ---- */

typedef struct gbuf {
  float *p;
  void *map;
  size_t maplen;
} gbuf;

static void gbuf_alloc(gbuf *g, int64_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(float);
  size_t data = (bytes + page - 1) / page * page;
  g->maplen = data + page;
  g->map = mmap(NULL, g->maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (g->map == MAP_FAILED) abort();
  if (mprotect((char *)g->map + data, page, PROT_NONE) != 0) abort();
  /* the last element just before the guard, kept 16-byte aligned (float4 accesses) */
  uintptr_t start = ((uintptr_t)g->map + data - bytes) & ~(uintptr_t)15;
  g->p = (float *)start;
}

static void gbuf_free(gbuf *g) {
  if (g->map) munmap(g->map, g->maplen);
  memset(g, 0, sizeof *g);
}

/* ---- one kernel program ---- */

typedef struct job {
  const dcase *c;
  const kg_test_wfile *w;
  char what[256];
  char *trace;
  kg_cuda_program cp;
  int64_t lo, hi;
  int compiled[2]; /* sm_86, sm_90 */
  char *nvrtc_log[2];
  kg_emu_module m;
  int built;
} job;

static const char *const archs[2] = {"sm_86", "sm_90"};

/* Lowers and prints s. 1 printed; 0 refused (why in err: lowering, or kg_codegen_cuda's -1/-2 with *cg_rc). */
static int job_print(job *j, const kg_schedule *s, int *cg_rc, char *err, size_t errlen) {
  kg_arena a;
  kg_arena_init(&a);
  *cg_rc = 0;
  j->trace = kg_trace_to_text(&s->trace);
  kg_lowered *f = kg_lower(s, KG_TARGET_CUDA, &a, err, errlen);
  int rc = 0;
  if (f) {
    CHECKF(kg_ir_verify(f, err, errlen) == 0, "%s: %s", j->what, err);
    CHECKF(f->nsize_vars == 1, "%s: %d dynamic sizes in the lowered function", j->what, f->nsize_vars);
    *cg_rc = kg_codegen_cuda(f, "kgen", &j->cp, err, errlen);
    if (*cg_rc == 0) {
      rc = 1;
      j->lo = f->size_lo[0];
      j->hi = f->size_hi[0];
      CHECK(j->cp.nsizes == 1 && !strcmp(j->cp.size_names[0], j->c->dyn) && j->cp.size_lo[0] == j->lo &&
            j->cp.size_hi[0] == j->hi);
      char want[128];
      snprintf(want, sizeof want, "(long long kg_size_%s, ", j->c->dyn);
      CHECK_STR_CONTAINS(j->cp.source, want);
      snprintf(want, sizeof want, "const kg_idx %s = (kg_idx)kg_size_%s;", j->c->dyn, j->c->dyn);
      CHECK_STR_CONTAINS(j->cp.source, want);
      CHECK_STR_CONTAINS(j->cp.source, "const long long *kg_s = (const long long *)(const void *)a[");
      /* the grids and temporaries at the hi are what the table holds */
      int64_t(*grid)[3] = calloc((size_t)j->cp.nkernels + 1, sizeof *grid);
      int64_t *temps = calloc((size_t)j->cp.ntemps + 1, sizeof *temps);
      char why[256];
      int g = kg_cuda_program_grid(&j->cp, &j->hi, grid, temps, why, sizeof why);
      CHECKF(g == 0, "%s: grid at the hi: %s", j->what, why);
      for (int k = 0; g == 0 && k < j->cp.nkernels; k++)
        for (int d = 0; d < 3; d++)
          CHECKF(grid[k][d] == j->cp.kernels[k].grid[d], "%s: kernel %d grid %c: %lld at the hi, %lld in the table",
                 j->what, k, "xyz"[d], (long long)grid[k][d], (long long)j->cp.kernels[k].grid[d]);
      for (int t = 0; g == 0 && t < j->cp.ntemps; t++)
        CHECKF(temps[t] == j->cp.temp_elems[t], "%s: temporary %d: %lld elements at the hi, %lld in the table",
               j->what, t, (long long)temps[t], (long long)j->cp.temp_elems[t]);
      free(grid);
      free(temps);
    }
  }
  kg_arena_free(&a);
  return rc;
}

/* NVRTC for both archs and the emulator build (run on OpenMP threads: both are thread-safe). */
static void job_build(job *j) {
  for (int a = 0; a < 2 && have_nvrtc; a++) {
    kg_cubin cb;
    memset(&cb, 0, sizeof cb);
    j->compiled[a] = kg_nvrtc_compile(&j->cp, archs[a], &cb) == 0;
    if (!j->compiled[a] && cb.log) j->nvrtc_log[a] = strdup(cb.log);
    kg_cubin_free(&cb);
  }
  j->built = kg_emu_build(&j->cp, &j->m) == 0;
}

/* Runs the built program at value v on guarded copies of the buffers and verifies it. 1 when verified. */
static int job_run(job *j, int64_t v) {
  kg_program *q = load_at(j->w, j->c->dyn, v, 0, 0, 0);
  if (!q) return 0;
  kg_data d;
  kg_data_init(&d, q, KG_TEST_DATA_SEED);
  kg_data_reference(&d, q, KG_TEST_DATA_SEED);
  kg_data_poison(&d, q);
  int nio = q->ninputs + q->noutputs, nb = nio + j->cp.ntemps;
  int64_t(*grid)[3] = calloc((size_t)j->cp.nkernels + 1, sizeof *grid);
  int64_t *temps = calloc((size_t)j->cp.ntemps + 1, sizeof *temps);
  char err[1024];
  int ok = kg_cuda_program_grid(&j->cp, &v, grid, temps, err, sizeof err) == 0;
  CHECKF(ok, "%s at %s=%lld: %s", j->what, j->c->dyn, (long long)v, err);
  gbuf *g = calloc((size_t)nb + 1, sizeof *g);
  float **args = calloc((size_t)nb + 1, sizeof *args);
  for (int i = 0; ok && i < nb; i++) {
    const kg_tensor *t = i < q->ninputs ? q->inputs[i] : i < nio ? q->outputs[i - q->ninputs] : NULL;
    int64_t n = t ? kg_tensor_numel(t) : temps[i - nio];
    if (!t) CHECKF(n <= j->cp.temp_elems[i - nio], "%s: temporary %d: %lld elements at %lld, more than the %lld at the hi",
                   j->what, i - nio, (long long)n, (long long)v, (long long)j->cp.temp_elems[i - nio]);
    gbuf_alloc(&g[i], n);
    args[i] = g[i].p;
    if (i < q->ninputs) memcpy(g[i].p, d.inputs[i], sizeof(float) * (size_t)n);
    else if (t) memcpy(g[i].p, d.outputs[i - q->ninputs], sizeof(float) * (size_t)n);
    else
      for (int64_t e = 0; e < n; e++) g[i].p[e] = __builtin_nanf("");
  }
  if (ok) {
    ok = kg_emu_run_program_sizes(&j->m, &j->cp, args, &v, err, sizeof err) == 0;
    CHECKF(ok, "%s at %s=%lld: emulator: %s\ntrace:\n%s", j->what, j->c->dyn, (long long)v, err, j->trace);
  }
  if (ok) {
    for (int o = 0; o < q->noutputs; o++)
      memcpy(d.outputs[o], g[q->ninputs + o].p, sizeof(float) * (size_t)kg_tensor_numel(q->outputs[o]));
    kg_verify_result r = kg_verify(q, &d, 1e-4);
    CHECKF(r.ok, "%s at %s=%lld: %s (max_rel_err %g)\ntrace:\n%s", j->what, j->c->dyn, (long long)v, r.msg,
           r.max_rel_err, j->trace);
    ok = r.ok;
  }
  for (int i = 0; i < nb; i++) gbuf_free(&g[i]);
  free(g);
  free(args);
  free(grid);
  free(temps);
  kg_data_free(&d);
  kg_program_free(q);
  return ok;
}

/* A value outside the range is refused before any kernel runs (the buffers would not even be large enough). */
static void job_refuse(job *j, int64_t v) {
  float *args[64] = {0};
  char err[512] = "";
  int rc = j->cp.nparams + j->cp.ntemps < 64 ? kg_emu_run_program_sizes(&j->m, &j->cp, args, &v, err, sizeof err) : -1;
  CHECKF(rc == -1, "%s: %s=%lld outside %lld..%lld ran", j->what, j->c->dyn, (long long)v, (long long)j->lo,
         (long long)j->hi);
  CHECK_STR_CONTAINS(err, "outside the range");
  /* without the sizes at all */
  rc = kg_emu_run_program(&j->m, &j->cp, args, err, sizeof err);
  CHECK(rc == -1);
  CHECK_STR_CONTAINS(err, "none were given");
}

static void job_check(job *j) {
  for (int a = 0; a < 2 && have_nvrtc; a++)
    CHECKF(j->compiled[a], "%s: NVRTC %s failed:\n%s\n%s", j->what, archs[a], j->nvrtc_log[a] ? j->nvrtc_log[a] : "?",
           j->cp.source);
  CHECKF(j->built, "%s: emulator build:\n%s\n%s", j->what, j->m.log ? j->m.log : "?", j->cp.source);
  if (!j->built) return;
  int ok = 0;
  for (int v = 0; v < NVALUES; v++)
    if (sweep[v] >= j->lo && sweep[v] <= j->hi) ok += job_run(j, sweep[v]);
  CHECKF(ok == NVALUES, "%s: %d of %d sizes verified", j->what, ok, NVALUES);
  /* and at the bound value the schedule was built on */
  int64_t bound = -1;
  for (int i = 0; i < j->w->nb; i++)
    if (!strcmp(j->w->b[i].name, j->c->dyn)) bound = j->w->b[i].value;
  CHECKF(job_run(j, bound), "%s: not verified at the bound value %s=%lld", j->what, j->c->dyn, (long long)bound);
  job_refuse(j, 0);
  job_refuse(j, j->hi + 1);
  if (getenv("KGEN_TEST_VERBOSE")) printf("  %-60s %d/%d sizes verified\n", j->what, ok, NVALUES);
  if (getenv("KGEN_TEST_SOURCES")) printf("%s\ntrace:\n%s\n%s\n", j->what, j->trace, j->cp.source);
}

static void job_free(job *j) {
  free(j->trace);
  for (int a = 0; a < 2; a++) free(j->nvrtc_log[a]);
  kg_emu_module_free(&j->m);
  kg_cuda_program_free(&j->cp);
}

/* ---- the workloads ---- */

static job *jobs;
static int njobs, capjobs;
static kg_test_wfile files[NCASES];

static job *job_new(int ci, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static job *job_new(int ci, const char *fmt, ...) {
  if (njobs == capjobs) {
    capjobs = capjobs ? 2 * capjobs : 64;
    jobs = realloc(jobs, sizeof *jobs * (size_t)capjobs);
  }
  job *j = &jobs[njobs];
  memset(j, 0, sizeof *j);
  j->c = &cases[ci];
  j->w = &files[ci];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(j->what, sizeof j->what, fmt, ap);
  va_end(ap);
  return j;
}

/* Applies trace text to a new schedule of p; NULL (after a failed CHECK) when it does not apply. */
static kg_schedule *schedule_from(const kg_program *p, const char *text, const char *what) {
  kg_schedule *s = kg_schedule_new(p);
  kg_trace tr;
  kg_trace_init(&tr);
  char err[1024];
  int ok = kg_trace_parse(&tr, "trace", text, strlen(text), err, sizeof err) == 0 &&
           kg_schedule_apply_trace(s, &tr, err, sizeof err) == 0;
  kg_trace_free(&tr);
  CHECKF(ok, "%s: %s", what, err);
  if (!ok) {
    kg_schedule_free(s);
    return NULL;
  }
  return s;
}

/* The default schedule, NRANDOM random ones that print, and (matmul) the tiled one, printed into jobs. */
static void collect(int ci) {
  const dcase *c = &cases[ci];
  if (kg_test_wfile_read(&files[ci], c->name) != 0) return;
  kg_program *p = load_at(&files[ci], c->dyn, -1, 1, 0, 0);
  if (!p) return;
  char err[2048];
  int cg;
  kg_schedule *s = kg_schedule_new(p);
  kg_schedule_gpu_default(s, 256);
  job *j = job_new(ci, "%s (%s dynamic) default", c->name, c->dyn);
  int rc = job_print(j, s, &cg, err, sizeof err);
  CHECKF(rc == 1, "%s: %s", j->what, err);
  if (rc == 1) njobs++;
  else job_free(j);
  kg_schedule_free(s);

  /* Random schedules are drawn on the program with the size static (the drawer checks its launch rules on
   * constant extents) and replayed on the dynamic one. */
  kg_program *ps = load_at(&files[ci], c->dyn, -1, 0, 0, 0);
  int nrandom = 0, refused[4] = {0}; /* lowering, dynamic thread extent, limit, other illegal */
  for (int i = 0; ps && i < MAX_DRAWS && nrandom < NRANDOM; i++) {
    uint64_t seed = (uint64_t)ci * 1000 + (uint64_t)i + 1;
    kg_schedule *s0 = kg_schedule_new(ps);
    kg_schedule_random(s0, seed, KG_TARGET_CUDA, KG_TEST_CUDA_STEPS);
    char *text = kg_trace_to_text(&s0->trace);
    kg_schedule_free(s0);
    j = job_new(ci, "%s (%s dynamic) random seed %llu", c->name, c->dyn, (unsigned long long)seed);
    s = schedule_from(p, text, j->what);
    free(text);
    if (!s) continue;
    rc = job_print(j, s, &cg, err, sizeof err);
    if (rc == 1) {
      njobs++;
      nrandom++;
    } else {
      int kind = cg == 0 ? 0 : strstr(err, "follows the dynamic size") ? 1 : cg == -2 ? 2 : 3;
      CHECKF(!strncmp(err, kind ? "codegen cuda: " : "lower: ", kind ? 14 : 7), "%s: refused without a message: '%s'",
             j->what, err);
      refused[kind]++;
      if (getenv("KGEN_TEST_VERBOSE")) printf("  %s: refused: %s\n", j->what, err);
      job_free(j);
    }
    kg_schedule_free(s);
  }
  CHECKF(nrandom == NRANDOM, "%s (%s dynamic): %d random schedules printed in %d draws", c->name, c->dyn, nrandom,
         MAX_DRAWS);
  kg_program_free(ps);
  printf("%-20s %s: default + %d random schedules printed; refused: %d lowering, %d dynamic thread extent, %d limit, "
         "%d other\n",
         c->name, c->dyn, nrandom, refused[0], refused[1], refused[2], refused[3]);
  kg_program_free(p);

  if (!strcmp(c->name, "matmul")) {
    /* the tiled schedule: blockIdx.y over (M + 31) / 32 goes past 65535 at the default range's hi, a limit
     * (-2); with M up to 4096 it prints */
    p = load_at(&files[ci], c->dyn, -1, 1, 0, 0);
    s = p ? schedule_from(p, MM_TILED, "matmul tiled") : NULL;
    if (s) {
      j = job_new(ci, "matmul (M dynamic) tiled, default range");
      rc = job_print(j, s, &cg, err, sizeof err);
      CHECKF(rc == 0 && cg == -2, "%s: printed (%d, %d) at M up to %lld", j->what, rc, cg, (long long)j->hi);
      CHECK_STR_CONTAINS(err, "blockIdx.y extent");
      CHECK_STR_CONTAINS(err, "exceeds the limit 65535 (with the dynamic sizes at the top of their ranges)");
      job_free(j);
      kg_schedule_free(s);
    }
    kg_program_free(p);
    p = load_at(&files[ci], c->dyn, -1, 1, 1, 4096);
    s = p ? schedule_from(p, MM_TILED, "matmul tiled") : NULL;
    if (s) {
      j = job_new(ci, "matmul (M=1..4096 dynamic) tiled shared");
      rc = job_print(j, s, &cg, err, sizeof err);
      CHECKF(rc == 1, "%s: %s", j->what, err);
      if (rc == 1) {
        CHECK(j->cp.grid_dyn && j->cp.grid_dyn[0][1].n > 0 && j->cp.grid_dyn[0][0].n == 0);
        CHECK(j->cp.kernels[0].grid[1] == 128 && j->cp.kernels[0].block[0] == 8 && j->cp.kernels[0].block[1] == 8);
        CHECK_STR_CONTAINS(j->cp.source, "__shared__ __align__(16) float A_shared[256];");
        CHECK_STR_CONTAINS(j->cp.source, "__syncthreads();");
        njobs++;
      } else {
        job_free(j);
      }
      kg_schedule_free(s);
    }
    kg_program_free(p);
  }
}

/* ---- what must be refused ---- */

/* A thread count is compiled into the kernel: a threadIdx-bound loop, or a cross-thread reduction, whose extent
 * follows a dynamic size is an error with a message; the same schedule with the size static prints. */
static void test_dynamic_thread_extent(void) {
  static const struct {
    const char *file, *dyn, *trace, *stage, *loop;
  } t[] = {
      {"matmul", "M", "bind C i threadIdx.x\nbind C j blockIdx.x\n", "C", "i"},
      {"matmul", "M", "split C i 4\nbind C i.o threadIdx.y\nbind C i.i threadIdx.x\n", "C", "i.o"},
      /* the reduction range is the dynamic size: the cross-thread reduction's loop follows it */
      {"reduce_rows", "D", "bind Y i blockIdx.x\nbind Y j threadIdx.x\n", "Y", "j"},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    kg_test_wfile w;
    if (kg_test_wfile_read(&w, t[i].file) != 0) {
      free(w.text);
      continue;
    }
    for (int dyn = 0; dyn < 2; dyn++) {
      kg_program *p = load_at(&w, t[i].dyn, -1, dyn, 0, 0);
      kg_schedule *s = p ? schedule_from(p, t[i].trace, t[i].trace) : NULL;
      if (s) {
        kg_arena a;
        kg_arena_init(&a);
        char err[1024] = "";
        kg_lowered *f = kg_lower(s, KG_TARGET_CUDA, &a, err, sizeof err);
        CHECKF(f != NULL, "%s: %s", t[i].trace, err);
        if (f) {
          kg_cuda_program cp;
          int rc = kg_codegen_cuda(f, "kgen", &cp, err, sizeof err);
          if (dyn) {
            char want[256];
            snprintf(want, sizeof want, "codegen cuda: stage %s: loop %s bound to ", t[i].stage, t[i].loop);
            CHECKF(rc == -1, "%s %s dynamic: printed", t[i].file, t[i].dyn);
            CHECK_STR_CONTAINS(err, want);
            snprintf(want, sizeof want, " follows the dynamic size %s", t[i].dyn);
            CHECK_STR_CONTAINS(err, want);
          } else {
            CHECKF(rc == 0, "%s static: %s", t[i].file, err);
            if (rc == 0) kg_cuda_program_free(&cp);
          }
        }
        kg_arena_free(&a);
        kg_schedule_free(s);
      }
      kg_program_free(p);
    }
    free(w.text);
  }
}

/* ---- a dynamic and a constant extent on one block index ---- */

/* Hand-made IR (lowering makes no such kernel from the library's schedules): one kernel whose blockIdx.x loops
 * are M (dynamic, 1..100) and 5. The grid is max(M, 5) at launch, and both loops are guarded, the dynamic one by
 * its expression; run at M = 3 and M = 50 on buffers that end at a guard page. */
static void test_mixed_block_extents(void) {
  kg_arena a;
  kg_arena_init(&a);
  kg_irvar *M = KG_NEW(&a, kg_irvar), *bi = KG_NEW(&a, kg_irvar), *bj = KG_NEW(&a, kg_irvar);
  *M = (kg_irvar){"M", 0};
  *bi = (kg_irvar){"bi", 1};
  *bj = (kg_irvar){"bj", 2};
  kg_buffer *out = KG_NEW(&a, kg_buffer), *out2 = KG_NEW(&a, kg_buffer);
  *out = (kg_buffer){.name = "out", .id = 0, .scope = KG_SCOPE_GLOBAL, .size = 100, .param_index = 0};
  *out2 = (kg_buffer){.name = "out2", .id = 1, .scope = KG_SCOPE_GLOBAL, .size = 5, .param_index = 1};
  kg_irstmt *item = kg_ir_seq(&a);
  kg_ir_seq_push(&a, item,
                 kg_ir_for(&a, bi, kg_ir_var(&a, M), KG_LOOP_BOUND, KG_THREAD_BLOCK_X, "i", "A",
                           kg_ir_store(&a, out, kg_ir_var(&a, bi), kg_ir_float(&a, 1.0))));
  kg_ir_seq_push(&a, item,
                 kg_ir_for(&a, bj, kg_ir_int(&a, 5), KG_LOOP_BOUND, KG_THREAD_BLOCK_X, "j", "B",
                           kg_ir_store(&a, out2, kg_ir_var(&a, bj), kg_ir_float(&a, 2.0))));
  kg_irstmt *body = kg_ir_seq(&a);
  kg_ir_seq_push(&a, body, item);
  kg_buffer *params[2] = {out, out2};
  kg_irvar *svars[1] = {M};
  int ids[1] = {0};
  int64_t lo[1] = {1}, hi[1] = {100}, value[1] = {7};
  kg_lowered f = {.name = "mixed", .target = KG_TARGET_CUDA, .size_vars = svars, .size_ids = ids, .size_lo = lo,
                  .size_hi = hi, .size_value = value, .nsize_vars = 1, .params = params, .nparams = 2, .body = body,
                  .n_buffers = 2, .n_vars = 3};
  kg_cuda_program cp;
  char err[1024];
  /* the launch shape and the guards are lowering's last pass */
  CHECKF(kg_lower_launch(&a, &f, err, sizeof err) == 0, "mixed extents: %s", err);
  CHECK(f.nlaunch == 1 && f.launch[0].ok && f.launch[0].ext[KG_THREAD_BLOCK_X] == 100 &&
        f.launch[0].ext_c[KG_THREAD_BLOCK_X] == 5 && f.launch[0].ndyn[KG_THREAD_BLOCK_X] == 1 &&
        f.launch[0].dyn_lo[KG_THREAD_BLOCK_X] == 1);
  CHECK(kg_ir_is_launch_guard(item->seq.items[0]) && kg_ir_is_launch_guard(item->seq.items[1]));
  int rc = kg_codegen_cuda(&f, "kgen", &cp, err, sizeof err);
  CHECKF(rc == 0, "mixed extents: %s", err);
  if (rc == 0) {
    CHECK_STR_CONTAINS(cp.source, "if ((kg_idx)blockIdx.x < (M)) { /* A.i */");
    CHECK_STR_CONTAINS(cp.source, "if ((int)blockIdx.x < 5) { /* B.j */");
    CHECK(cp.kernels[0].grid[0] == 100 && cp.grid_dyn && cp.grid_dyn[0][0].n > 0);
    kg_emu_module m;
    int built = kg_emu_build(&cp, &m) == 0;
    CHECKF(built, "mixed extents: %s", m.log ? m.log : "?");
    for (int64_t v = 3; built && v <= 50; v += 47) {
      int64_t grid[1][3];
      CHECK(kg_cuda_program_grid(&cp, &v, grid, NULL, err, sizeof err) == 0 && grid[0][0] == (v > 5 ? v : 5));
      gbuf g[2];
      gbuf_alloc(&g[0], v);
      gbuf_alloc(&g[1], 5);
      float *args[2] = {g[0].p, g[1].p};
      rc = kg_emu_run_program_sizes(&m, &cp, args, &v, err, sizeof err);
      CHECKF(rc == 0, "mixed extents at M=%lld: %s", (long long)v, err);
      int bad = 0;
      for (int64_t i = 0; i < v; i++) bad += g[0].p[i] != 1.0f;
      for (int64_t i = 0; i < 5; i++) bad += g[1].p[i] != 2.0f;
      CHECKF(rc != 0 || bad == 0, "mixed extents at M=%lld: %d wrong elements", (long long)v, bad);
      gbuf_free(&g[0]);
      gbuf_free(&g[1]);
    }
    kg_emu_module_free(&m);
    kg_cuda_program_free(&cp);
  }
  kg_arena_free(&a);
}

/* ---- extent programs ---- */

static void test_extent_programs(void) {
  /* (M + 63) floordiv 64 */
  kg_cuda_xstep ceil64[] = {{KG_CUDA_X_SIZE, 0}, {KG_CUDA_X_CONST, 63}, {KG_CUDA_X_ADD, 0}, {KG_CUDA_X_CONST, 64},
                            {KG_CUDA_X_FLOORDIV, 0}};
  kg_cuda_extent x = {ceil64, 5};
  int64_t s[2] = {1, 0};
  CHECK(kg_cuda_extent_eval(&x, s) == 1);
  s[0] = 64;
  CHECK(kg_cuda_extent_eval(&x, s) == 1);
  s[0] = 65;
  CHECK(kg_cuda_extent_eval(&x, s) == 2);
  const char *names[] = {"M", "N"};
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_cuda_extent_print(&b, &x, names);
  CHECKF(!strcmp(b.s, "kg_cuda_xfloordiv((M + 63LL), 64LL)"), "printed '%s'", b.s);
  kg_strbuf_free(&b);
  /* max(min(M * N, 100) - 7 floormod N, 3): floor semantics of a negative operand, both orders of operands */
  kg_cuda_xstep y[] = {{KG_CUDA_X_SIZE, 0}, {KG_CUDA_X_SIZE, 1}, {KG_CUDA_X_MUL, 0}, {KG_CUDA_X_CONST, 100},
                       {KG_CUDA_X_MIN, 0},  {KG_CUDA_X_CONST, -7}, {KG_CUDA_X_SIZE, 1}, {KG_CUDA_X_FLOORMOD, 0},
                       {KG_CUDA_X_SUB, 0},  {KG_CUDA_X_CONST, 3},  {KG_CUDA_X_MAX, 0}};
  kg_cuda_extent xy = {y, 11};
  int64_t s2[2] = {5, 4}; /* min(20, 100) - (-7 mod 4 = 1) = 19 */
  CHECK(kg_cuda_extent_eval(&xy, s2) == 19);
  s2[0] = 1, s2[1] = 1; /* 1 - 0 = 1 -> max 3 */
  CHECK(kg_cuda_extent_eval(&xy, s2) == 3);
  s2[0] = 50, s2[1] = 3; /* 100 - (-7 mod 3 = 2) = 98 */
  CHECK(kg_cuda_extent_eval(&xy, s2) == 98);
  kg_strbuf_init(&b);
  kg_cuda_extent_print(&b, &xy, names);
  CHECKF(!strcmp(b.s, "kg_cuda_xmax((kg_cuda_xmin((M * N), 100LL) - kg_cuda_xfloormod((-7LL), N)), 3LL)"), "printed '%s'",
         b.s);
  kg_strbuf_free(&b);
  /* malformed programs and overflow evaluate to -1 */
  kg_cuda_extent bad = {y, 3}; /* M, N, * : fine */
  CHECK(kg_cuda_extent_eval(&bad, s2) == 150);
  bad.n = 2; /* two values left */
  CHECK(kg_cuda_extent_eval(&bad, s2) == -1);
  kg_cuda_xstep ov[] = {{KG_CUDA_X_CONST, INT64_MAX}, {KG_CUDA_X_SIZE, 0}, {KG_CUDA_X_MUL, 0}};
  kg_cuda_extent xo = {ov, 3};
  CHECK(kg_cuda_extent_eval(&xo, s2) == -1);
  kg_cuda_xstep dz[] = {{KG_CUDA_X_SIZE, 0}, {KG_CUDA_X_CONST, 0}, {KG_CUDA_X_FLOORDIV, 0}};
  kg_cuda_extent xz = {dz, 3};
  CHECK(kg_cuda_extent_eval(&xz, s2) == -1);
}

/* ---- an exported header of dynamic kernels ---- */

/* The main program of the header test: matmul at M up to 4096 (tiled) and softmax at any N (the default mapping,
 * whose temporaries follow N), each through its binding's function at eleven sizes against plain loops, and
 * refused (KG_ERR_SIZE, outputs untouched) outside its range. Returns the number of failures. */
static const char header_main[] =
    "/* compiled with the emulation header force-included, which declares the math functions itself */\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include \"matmul.h\"\n"
    "#include \"softmax.h\"\n"
    "static float val(long long i, int salt) { return (float)((i * 37 + salt * 11) % 19) / 19.0f - 0.5f; }\n"
    "int main(void) {\n"
    "  static const long long sizes[] = {1, 2, 3, 5, 7, 13, 31, 64, 97, 128, 257};\n"
    "  int bad = 0;\n"
    "  for (int si = 0; si < 11; si++) {\n"
    "    long long M = sizes[si];\n"
    "    float *A = (float *)malloc(sizeof(float) * M * MM_K), *B = (float *)malloc(sizeof(float) * MM_K * MM_N);\n"
    "    float *C = (float *)malloc(sizeof(float) * M * MM_N);\n"
    "    for (long long i = 0; i < M * MM_K; i++) A[i] = val(i, 1);\n"
    "    for (long long i = 0; i < MM_K * MM_N; i++) B[i] = val(i, 2);\n"
    "    for (long long i = 0; i < M * MM_N; i++) C[i] = __builtin_nanf(\"\");\n"
    "    int rc = MM_FN(NULL, M, A, B, C);\n"
    "    if (rc != 0) { printf(\"matmul M=%lld: %s\\n\", M, kg_strerror(rc)); bad++; }\n"
    "    for (long long i = 0; rc == 0 && i < M; i++)\n"
    "      for (long long j = 0; j < MM_N; j++) {\n"
    "        float ref = 0;\n"
    "        for (long long k = 0; k < MM_K; k++) ref += A[i * MM_K + k] * B[k * MM_N + j];\n"
    "        if (!(fabsf(C[i * MM_N + j] - ref) <= 1e-4f * (1 + fabsf(ref)))) {\n"
    "          if (bad++ < 5) printf(\"matmul M=%lld: C[%lld,%lld] = %g, not %g\\n\", M, i, j, C[i * MM_N + j], ref);\n"
    "        }\n"
    "      }\n"
    "    long long N = M;\n"
    "    float *X = (float *)malloc(sizeof(float) * N * SM_D), *Y = (float *)malloc(sizeof(float) * N * SM_D);\n"
    "    for (long long i = 0; i < N * SM_D; i++) X[i] = 4 * val(i, 3), Y[i] = __builtin_nanf(\"\");\n"
    "    rc = SM_FN(NULL, N, X, Y);\n"
    "    if (rc != 0) { printf(\"softmax N=%lld: %s\\n\", N, kg_strerror(rc)); bad++; }\n"
    "    for (long long i = 0; rc == 0 && i < N; i++) {\n"
    "      float m = -__builtin_inff(), s = 0;\n"
    "      for (long long j = 0; j < SM_D; j++) m = fmaxf(m, X[i * SM_D + j]);\n"
    "      for (long long j = 0; j < SM_D; j++) s += expf(X[i * SM_D + j] - m);\n"
    "      for (long long j = 0; j < SM_D; j++) {\n"
    "        float ref = expf(X[i * SM_D + j] - m) / s;\n"
    "        if (!(fabsf(Y[i * SM_D + j] - ref) <= 1e-4f * (1 + fabsf(ref)))) {\n"
    "          if (bad++ < 5) printf(\"softmax N=%lld: Y[%lld,%lld] = %g, not %g\\n\", N, i, j, Y[i * SM_D + j], ref);\n"
    "        }\n"
    "      }\n"
    "    }\n"
    "    /* outside the ranges: refused before anything runs */\n"
    "    C[0] = 42.0f, Y[0] = 43.0f;\n"
    "    if (MM_FN(NULL, 0, A, B, C) != KG_ERR_SIZE || MM_FN(NULL, 4097, A, B, C) != KG_ERR_SIZE || C[0] != 42.0f) {\n"
    "      printf(\"matmul: a size outside 1..4096 was not refused\\n\");\n"
    "      bad++;\n"
    "    }\n"
    "    if (SM_FN(NULL, 0, X, Y) != KG_ERR_SIZE || SM_FN(NULL, SM_HI + 1, X, Y) != KG_ERR_SIZE || Y[0] != 43.0f) {\n"
    "      printf(\"softmax: a size outside its range was not refused\\n\");\n"
    "      bad++;\n"
    "    }\n"
    "    free(A), free(B), free(C), free(X), free(Y);\n"
    "  }\n"
    "  printf(\"%d failures\\n\", bad);\n"
    "  return bad != 0;\n"
    "}\n";

typedef struct hdr {
  const char *name;
  kg_program *p;
  kg_cuda_program cp;
  kg_cubin cb;
  char *fn, *sig, *dims[8];
  const char *pnames[8], *snames[8];
  int pin[8], sdyn[8];
  int64_t values[8], lo[8], hi[8];
  kg_header_spec spec;
  kg_header_binding bd;
  kg_header_variant var;
  kg_header_image img;
} hdr;

/* The header of workload name (its size dyn dynamic over [lo, hi]; 0, 0: the default range) under the schedule
 * trace (NULL: the default mapping), written as dir/<name>.h. 0, or -1 after a failed CHECK. */
static int hdr_write(hdr *h, const char *name, const char *dyn, int64_t lo, int64_t hi, const char *trace,
                     const char *dir) {
  memset(h, 0, sizeof *h);
  h->name = name;
  kg_test_wfile w;
  if (kg_test_wfile_read(&w, name) != 0) {
    free(w.text);
    return -1;
  }
  h->p = load_at(&w, dyn, -1, 1, lo, hi);
  free(w.text);
  if (!h->p) return -1;
  const kg_program *p = h->p;
  kg_strbuf sig;
  kg_strbuf_init(&sig);
  kg_strbuf_printf(&sig, "def %s(", name);
  for (int i = 0; i < p->ninputs + p->noutputs; i++) {
    const kg_tensor *t = i < p->ninputs ? p->inputs[i] : p->outputs[i - p->ninputs];
    kg_strbuf d;
    kg_strbuf_init(&d);
    for (int k = 0; k < t->ndim; k++) kg_strbuf_printf(&d, "[%lld]", (long long)t->shape[k]);
    h->dims[i] = kg_strbuf_take(&d);
    h->pnames[i] = t->name;
    h->pin[i] = i < p->ninputs;
    kg_strbuf_printf(&sig, "%s%s: f32%s", i == p->ninputs ? ") -> (" : i ? ", " : "", t->name, h->dims[i]);
  }
  kg_strbuf_puts(&sig, ")");
  h->sig = kg_strbuf_take(&sig);
  for (int k = 0; k < p->nsizes; k++) {
    h->snames[k] = p->sizes[k].name;
    h->sdyn[k] = p->sizes[k].dynamic;
    h->values[k] = p->sizes[k].value;
    h->lo[k] = p->sizes[k].dynamic ? p->sizes[k].lo : p->sizes[k].value;
    h->hi[k] = p->sizes[k].dynamic ? p->sizes[k].hi : p->sizes[k].value;
  }
  kg_header_spec *s = &h->spec;
  s->name = name;
  s->prefix = "kg_";
  s->target = KG_TARGET_CUDA;
  s->signature = h->sig;
  s->nparams = p->ninputs + p->noutputs;
  s->param_names = h->pnames;
  s->param_is_input = h->pin;
  s->param_dims = (const char *const *)h->dims;
  s->nsizes = p->nsizes;
  s->size_names = h->snames;
  s->size_dynamic = h->sdyn;
  s->kgen_version = "test";
  h->bd.size_values = h->values;
  h->bd.range_lo = h->lo;
  h->bd.range_hi = h->hi;
  h->bd.variants = &h->var;
  h->bd.nvariants = 1;
  s->bindings = &h->bd;
  s->nbindings = 1;
  h->fn = kg_header_fn_name(s, 0);
  /* the kernels carry the function's name */
  char prefix[300], err[2048];
  snprintf(prefix, sizeof prefix, "%s_v0", h->fn);
  kg_schedule *sc = trace ? schedule_from(p, trace, name) : kg_schedule_new(p);
  if (!sc) return -1;
  if (!trace) kg_schedule_gpu_default(sc, 256);
  kg_arena a;
  kg_arena_init(&a);
  kg_lowered *f = kg_lower(sc, KG_TARGET_CUDA, &a, err, sizeof err);
  int rc = f && kg_codegen_cuda(f, prefix, &h->cp, err, sizeof err) == 0 ? 0 : -1;
  kg_arena_free(&a);
  kg_schedule_free(sc);
  CHECKF(rc == 0, "header %s: %s", name, err);
  if (rc != 0) return -1;
  rc = kg_nvrtc_compile(&h->cp, "sm_90", &h->cb);
  CHECKF(rc == 0, "header %s: NVRTC: %s", name, h->cb.log ? h->cb.log : "?");
  if (rc != 0) return -1;
  h->img = (kg_header_image){"sm_90", h->cb.cubin, h->cb.cubin_size};
  h->var.prog = &h->cp;
  h->var.cubins = &h->img;
  h->var.ncubins = 1;
  h->var.ptx = h->cb.ptx;
  h->var.ptx_arch = "sm_90";
  char *text = NULL;
  rc = kg_header_print(s, &text, err, sizeof err);
  CHECKF(rc == 0, "header %s: %s", name, err);
  if (rc != 0) return -1;
  char path[512];
  snprintf(path, sizeof path, "%s/%s.h", dir, name);
  FILE *fp = fopen(path, "w");
  CHECK(fp != NULL);
  if (fp) {
    fputs(text, fp);
    fclose(fp);
  }
  /* the binding's function takes the size first, checks its range and computes the grid from it */
  char want[512];
  snprintf(want, sizeof want, "int %s(CUstream stream, int64_t %s, ", h->fn, dyn);
  CHECK_STR_CONTAINS(text, want);
  snprintf(want, sizeof want, "if (%s < %lldLL || %s > %lldLL) return KG_ERR_SIZE;", dyn,
           (long long)h->cp.size_lo[0], dyn, (long long)h->cp.size_hi[0]);
  CHECK_STR_CONTAINS(text, want);
  snprintf(want, sizeof want, "static int %s_v0_extent(const long long *kg_s, int kg_which, long long *kg_v) {", h->fn);
  CHECK_STR_CONTAINS(text, want);
  free(text);
  return fp ? 0 : -1;
}

/* The bound value of size name in h's program. */
static int64_t hdr_size(const hdr *h, const char *name) {
  for (int k = 0; k < h->p->nsizes; k++)
    if (!strcmp(h->p->sizes[k].name, name)) return h->p->sizes[k].value;
  CHECKF(0, "%s has no size %s", h->name, name);
  return 1;
}

static void hdr_free(hdr *h) {
  kg_cubin_free(&h->cb);
  kg_cuda_program_free(&h->cp);
  kg_program_free(h->p);
  free(h->fn);
  free(h->sig);
  for (int i = 0; i < 8; i++) free(h->dims[i]);
}

static void test_header(void) {
  if (!have_nvrtc) {
    printf("the exported header's check is skipped: no NVRTC for its cubins\n");
    return;
  }
  char dir[] = "/tmp/kg_dynamic_cuda_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  hdr mm, sm;
  int ok = hdr_write(&mm, "matmul", "M", 1, 4096, MM_TILED, dir) == 0 && hdr_write(&sm, "softmax", "N", 0, 0, NULL, dir) == 0;
  if (ok) {
    /* softmax's temporaries follow N: the header sizes them at each call */
    CHECKF(sm.cp.ntemps >= 1 && sm.cp.temp_dyn, "softmax: %d temporaries", sm.cp.ntemps);
    for (int t = 0; t < sm.cp.ntemps && sm.cp.temp_dyn; t++) CHECK(sm.cp.temp_dyn[t].n > 0);
    char path[512];
    snprintf(path, sizeof path, "%s/main.c", dir);
    FILE *fp = fopen(path, "w");
    CHECK(fp != NULL);
    if (fp) {
      fprintf(fp, "#define MM_FN %s\n#define MM_K %lld\n#define MM_N %lld\n", mm.fn, (long long)hdr_size(&mm, "K"),
              (long long)hdr_size(&mm, "N"));
      fprintf(fp, "#define SM_FN %s\n#define SM_D %lld\n#define SM_HI %lldLL\n", sm.fn, (long long)hdr_size(&sm, "D"),
              (long long)sm.cp.size_hi[0]);
      fputs(header_main, fp);
      fclose(fp);
    }
    char cmd[2048];
    /* the emulated path runs the kernels; the real path compiles as C and C++ and refuses out-of-range sizes
     * before it looks for a driver */
    snprintf(cmd, sizeof cmd,
             "cd %s && g++ -std=c++17 -O1 -Wall -Wextra -Werror -DKG_EMULATE -DKG_IMPLEMENTATION "
             "-include %s/runtime/cuda_emu.h -x c++ main.c -o emu > build.log 2>&1 && ./emu > run.log 2>&1",
             dir, getenv("PWD") ? getenv("PWD") : ".");
    int rc = system(cmd);
    CHECKF(rc == 0, "the emulated header program failed (%s): see %s/build.log and %s/run.log", cmd, dir, dir);
    snprintf(cmd, sizeof cmd,
             "cd %s && gcc -std=c11 -Wall -Wextra -Werror -DKG_IMPLEMENTATION -c -x c matmul.h -o mm_c.o && "
             "gcc -std=c11 -Wall -Wextra -Werror -DKG_IMPLEMENTATION -c -x c softmax.h -o sm_c.o && "
             "g++ -Wall -Wextra -Werror -DKG_IMPLEMENTATION -c -x c++ matmul.h -o mm_cxx.o > real.log 2>&1",
             dir);
    int rc2 = system(cmd);
    CHECKF(rc2 == 0, "the real path does not compile (%s)", cmd);
    if (rc == 0 && rc2 == 0) {
      snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
      if (!getenv("KGEN_TEST_KEEP")) CHECK(system(cmd) == 0); /* else kept for reading */
      printf("exported header: matmul (M 1..4096, tiled) and softmax (N dynamic) verified on the emulator at 11 sizes\n");
    }
  }
  hdr_free(&mm);
  hdr_free(&sm);
}

/* ---- the measurement harness ---- */

/* A dynamic program measured on the emulator runs its one kernel program at the bound values: the launch table
 * the worker gets is resolved there, and the sizes reach the kernels. */
static void test_measure_emulator(void) {
  kg_test_wfile w;
  if (kg_test_wfile_read(&w, "softmax") != 0) {
    free(w.text);
    return;
  }
  kg_program *p = load_at(&w, "N", -1, 1, 0, 0);
  free(w.text);
  if (!p) return;
  kg_measure_opts o = {0};
  o.target = KG_TARGET_CUDA;
  o.emulate = 1;
  o.timeout_s = 20;
  o.no_timing = 1;
  o.seed = 3;
  o.build_threads = 2;
  char err[512];
  kg_measurer *m = kg_measurer_new(p, &o, err, sizeof err);
  CHECKF(m != NULL, "measurer: %s", err);
  if (m) {
    kg_trace t;
    kg_trace_init(&t);
    const char *text = "compute_inline e\nbind m i blockIdx.x\nsplit m j 64\nbind m j.i threadIdx.x\n"
                       "bind Y.r0 i blockIdx.x\nsplit Y.r0 j2 16\nreorder Y.r0 j2.i j2.o\nbind Y.r0 j2.i threadIdx.x\n"
                       "split Y i 2\nbind Y i.o blockIdx.x\nbind Y i.i threadIdx.y\nsplit Y j 32\nbind Y j.i threadIdx.x\n";
    CHECK(kg_trace_parse(&t, "trace", text, strlen(text), err, sizeof err) == 0);
    kg_candidate c[2] = {{NULL, NULL}, {&t, NULL}};
    kg_measure_result r[2];
    kg_measure_batch(m, c, 2, r);
    for (int i = 0; i < 2; i++) {
      CHECKF(r[i].status == KG_STATUS_OK, "measure %s: %s: %s", i ? "cross-thread" : "default",
             kg_status_names[r[i].status], r[i].msg);
      kg_measure_result_free(&r[i]);
    }
    kg_trace_free(&t);
    kg_measurer_free(m);
  }
  kg_program_free(p);
}

/* Every library workload has a case. */
static void test_every_workload_covered(void) {
  DIR *dir = opendir("te/lib");
  CHECK(dir != NULL);
  if (!dir) return;
  struct dirent *de;
  int n = 0;
  while ((de = readdir(dir))) {
    size_t l = strlen(de->d_name);
    if (l <= 3 || strcmp(de->d_name + l - 3, ".te")) continue;
    n++;
    int found = 0;
    for (int c = 0; c < NCASES; c++) found |= strlen(cases[c].name) == l - 3 && !strncmp(cases[c].name, de->d_name, l - 3);
    CHECKF(found, "te/lib/%s has no dynamic-size case in this test", de->d_name);
  }
  closedir(dir);
  CHECK(n >= 14);
}

int main(int argc, char **argv) {
  int only = argc > 1 ? atoi(argv[1]) : -1; /* one case by index, for debugging */
  char why[256];
  have_nvrtc = kg_nvrtc_available(why, sizeof why) == 0;
  if (!have_nvrtc) printf("NVRTC not available (%s): the sm_86/sm_90 compiles are skipped\n", why);
  test_every_workload_covered();
  test_extent_programs();
  test_dynamic_thread_extent();
  test_mixed_block_extents();
  if (only < 0) {
    test_header();
    test_measure_emulator();
  }
  for (int c = 0; c < NCASES; c++)
    if (only < 0 || only == c) collect(c);
  /* the compiles dominate: both archs and the emulator build of every program on all cores */
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < njobs; i++) job_build(&jobs[i]);
  for (int i = 0; i < njobs; i++) {
    job_check(&jobs[i]);
    job_free(&jobs[i]);
  }
  printf("%d kernel programs compiled (NVRTC sm_86, sm_90%s) and verified on the emulator at %d sizes each\n", njobs,
         have_nvrtc ? "" : ": skipped", NVALUES);
  free(jobs);
  for (int c = 0; c < NCASES; c++) free(files[c].text);
  TEST_END();
}
