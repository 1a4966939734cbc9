/* Helpers for tests that walk the workload library (te/lib) and the test programs (tests/programs), load
 * programs from source text, and draw random CUDA schedules. Includes testutil.h, whose CHECK counters the helpers
 * count into. */
#ifndef KG_TESTLIB_H
#define KG_TESTLIB_H
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../te/te.h"
#include "../schedule/sched.h"
#include "../gen/random.h"
#include "../lower/ir.h"
#include "../codegen/codegen.h"
#include "../runtime/cpu.h"
#include "../runtime/emu.h"
#include "../runtime/verify.h"
#include "../runtime/pipeline.h"
#include "testutil.h"

#define KG_TEST_MAX_BIND 16
#define KG_TEST_MAX_WORKLOADS 256
/* The input data of the workload walks; their reproduce lines pass it as --seed 7. */
#define KG_TEST_DATA_SEED 7

/* Two small programs for hand-written schedules (te/lib has larger ones with more stages). */
static const char KG_TEST_MATMUL[] =
    "def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {\n"
    "  C[i, j] = sum[k](A[i, k] * B[k, j])\n"
    "}\n";
static const char KG_TEST_SOFTMAX[] =
    "def softmax(X: f32[N, D]) -> (Y: f32[N, D]) {\n"
    "  m[i] = max[j](X[i, j])\n"
    "  e[i, j] = exp(X[i, j] - m[i])\n"
    "  Y[i, j] = e[i, j] / sum[j2](e[i, j2])\n"
    "}\n";

/* Reads bindings "A=1 B=2" (up to the end of the line) into b (names stored in names[]), each value multiplied
 * by scale, plus one when scale > 1 so that scaled sizes do not become multiples of the originals. Returns the
 * number of bindings, or -1 when a word is not NAME=VALUE. */
static inline int kg_test_parse_bindings(const char *s, kg_binding *b, char names[][32], int scale) {
  int n = 0;
  while (*s && *s != '\n' && n < KG_TEST_MAX_BIND) {
    while (*s == ' ') s++;
    if (!*s || *s == '\n') break;
    int len = 0;
    while (s[len] && s[len] != '=' && s[len] != ' ' && s[len] != '\n' && len < 31) len++;
    if (s[len] != '=') return -1;
    memcpy(names[n], s, (size_t)len);
    names[n][len] = 0;
    char *end;
    long long v = strtoll(s + len + 1, &end, 10);
    b[n].name = names[n];
    b[n].value = v * scale + (scale > 1);
    n++;
    s = end;
  }
  return n;
}

/* Reads the "# sizes: A=1 B=2" line of a workload file as kg_test_parse_bindings does. Returns the number of
 * bindings, or -1 without such a line. */
static inline int kg_test_parse_sizes(const char *text, kg_binding *b, char names[][32], int scale) {
  const char *s = strstr(text, "# sizes:");
  if (!s) return -1;
  return kg_test_parse_bindings(s + strlen("# sizes:"), b, names, scale);
}

/* Loads source text (named test.te) with nb bindings; prints the diagnostic and returns NULL when it does not
 * load. */
static inline kg_program *kg_test_load(const char *text, const kg_binding *b, int nb) {
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  kg_program *p = kg_program_load("test.te", text, strlen(text), NULL, b, nb, &diag, &da);
  if (!p) fprintf(stderr, "load failed: %s\n", diag.msg ? diag.msg : "(no message)");
  kg_arena_free(&da);
  return p;
}

/* kg_test_load with the bindings written "A=1 B=2". */
static inline kg_program *kg_test_load_sizes(const char *text, const char *sizes) {
  kg_binding b[KG_TEST_MAX_BIND];
  char names[KG_TEST_MAX_BIND][32];
  int nb = kg_test_parse_bindings(sizes, b, names, 1);
  if (nb < 0) {
    fprintf(stderr, "bad sizes '%s'\n", sizes);
    return NULL;
  }
  return kg_test_load(text, b, nb);
}

/* te/lib/<name>.te loaded with nb bindings; NULL (with a message) when it cannot be read or loaded. */
static inline kg_program *kg_test_load_lib(const char *name, const kg_binding *b, int nb) {
  char path[256];
  snprintf(path, sizeof path, "te/lib/%s.te", name);
  char *text = kg_test_read_file(path, NULL);
  if (!text) {
    fprintf(stderr, "cannot read %s\n", path);
    return NULL;
  }
  kg_program *p = kg_test_load(text, b, nb);
  free(text);
  return p;
}

static inline int kg_test_cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The files the workload walks cover: the .te files of te/lib and of tests/programs, sorted by path (the random
 * schedule tests derive seeds from the position, so the order is fixed). Fills files (heap strings, see
 * kg_test_free_workloads) and returns how many; *nlib (if not NULL) gets how many are library workloads. */
static inline int kg_test_list_workloads(char **files, int max, int *nlib) {
  static const char *const dirs[] = {"te/lib", "tests/programs"};
  int n = 0, lib = 0;
  for (int di = 0; di < 2; di++) {
    DIR *dir = opendir(dirs[di]);
    CHECKF(dir != NULL, "cannot open %s", dirs[di]);
    if (!dir) continue;
    struct dirent *de;
    while ((de = readdir(dir)) && n < max) {
      size_t l = strlen(de->d_name);
      if (l > 3 && !strcmp(de->d_name + l - 3, ".te")) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dirs[di], de->d_name);
        files[n++] = strdup(path);
        lib += di == 0;
      }
    }
    closedir(dir);
  }
  qsort(files, (size_t)n, sizeof files[0], kg_test_cmp_str);
  if (nlib) *nlib = lib;
  return n;
}

static inline void kg_test_free_workloads(char **files, int n) {
  for (int i = 0; i < n; i++) free(files[i]);
}

/* A workload file loaded at its `# sizes:`, with inputs drawn from KG_TEST_DATA_SEED and reference outputs. */
typedef struct kg_test_workload {
  kg_program *p;
  kg_data d;
  char sizes[512]; /* " -D A=1 -D B=2": the sizes for the reproduce lines */
} kg_test_workload;

/* As kg_test_workload_load, with every input and output made type io_dtype (a kg_dtype; -1: as declared). */
static inline int kg_test_workload_load_typed(kg_test_workload *w, const char *path, int io_dtype);
/* Returns 0, or -1 after a failed CHECK (unreadable, no sizes line, does not load). */
static inline int kg_test_workload_load(kg_test_workload *w, const char *path) {
  return kg_test_workload_load_typed(w, path, -1);
}

static inline int kg_test_workload_load_typed(kg_test_workload *w, const char *path, int io_dtype) {
  memset(w, 0, sizeof *w);
  size_t len = 0;
  char *text = kg_test_read_file(path, &len);
  CHECKF(text != NULL, "cannot read %s", path);
  if (!text) return -1;
  kg_binding b[KG_TEST_MAX_BIND];
  char names[KG_TEST_MAX_BIND][32];
  int nb = kg_test_parse_sizes(text, b, names, 1);
  CHECKF(nb >= 0, "%s: no '# sizes:' line", path);
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  w->p = kg_program_load(path, text, len, NULL, b, nb < 0 ? 0 : nb, &diag, &da);
  CHECKF(w->p != NULL, "%s: %s", path, diag.msg ? diag.msg : "?");
  if (w->p && io_dtype >= 0 && kg_program_set_io_dtype(w->p, (kg_dtype)io_dtype, &diag, &da) != 0) {
    CHECKF(0, "%s as %s: %s", path, kg_dtype_names[io_dtype], diag.msg ? diag.msg : "?");
    kg_program_free(w->p);
    w->p = NULL;
  }
  kg_arena_free(&da);
  free(text);
  if (!w->p) return -1;
  for (int k = 0, n = 0; k < nb && n >= 0 && (size_t)n < sizeof w->sizes; k++)
    n += snprintf(w->sizes + n, sizeof w->sizes - (size_t)n, " -D %s=%lld", b[k].name, (long long)b[k].value);
  kg_data_init(&w->d, w->p, KG_TEST_DATA_SEED);
  kg_data_reference(&w->d, w->p, KG_TEST_DATA_SEED);
  return 0;
}

/* w: program text loaded at sizes ("M=4 N=8"), with inputs from seed and their reference. 0, or -1 after a failed
 * CHECK (what names it). */
static inline int kg_test_workload_from_text(kg_test_workload *w, const char *text, const char *sizes, uint64_t seed,
                                             const char *what) {
  memset(w, 0, sizeof *w);
  w->p = kg_test_load_sizes(text, sizes);
  CHECKF(w->p != NULL, "%s: does not load", what);
  if (!w->p) return -1;
  CHECK(kg_data_init(&w->d, w->p, seed) == 0 && kg_data_reference(&w->d, w->p, seed) == 0);
  return 0;
}

static inline void kg_test_workload_free(kg_test_workload *w) {
  if (!w->p) return;
  kg_data_free(&w->d);
  kg_program_free(w->p);
  w->p = NULL;
}

/* KGEN_CFLAGS (the kernel compiler's extra flags, runtime/cpu.c) for a part of a test: kg_test_cflags_set puts
 * extra after the caller's own flags (or, with replace, in their place; extra NULL leaves them), and
 * kg_test_cflags_restore puts back what was there, set or not. */
typedef struct {
  char *saved; /* the caller's value, NULL when unset */
} kg_test_cflags;

static inline void kg_test_cflags_set(kg_test_cflags *c, const char *extra, int replace) {
  const char *cur = getenv("KGEN_CFLAGS");
  c->saved = cur ? strdup(cur) : NULL;
  if (!extra) return;
  char all[2048];
  snprintf(all, sizeof all, "%s %s", replace || !c->saved ? "" : c->saved, extra);
  setenv("KGEN_CFLAGS", all, 1);
}

static inline void kg_test_cflags_restore(kg_test_cflags *c) {
  if (c->saved) setenv("KGEN_CFLAGS", c->saved, 1);
  else unsetenv("KGEN_CFLAGS");
  free(c->saved);
  c->saved = NULL;
}

/* Builds the generated C's prelude, after the lines define ("#define ..." lines or ""), with body (functions
 * written against it; fn_name's runner is fn_name_args) and the epilogue, into m; 0, or the build's failure
 * (m->log). */
static inline int kg_test_build_with_prelude(const char *define, const char *body, const char *fn_name,
                                             kg_cpu_module *m) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_strbuf_puts(&b, define);
  kg_strbuf_puts(&b, kg_codegen_c_prelude());
  /* the vector variants of the functions called in define and body (a macro there that names one must name it
   * as a call: "#define F(x) kg_expf(x)") */
  kg_codegen_c_put_vmath(&b, (const char *const[]){define, body}, 2);
  kg_strbuf_puts(&b, body);
  kg_strbuf_puts(&b, kg_codegen_c_epilogue());
  int rc = kg_cpu_build(b.s, fn_name, m);
  kg_strbuf_free(&b);
  return rc;
}

/* s lowered and printed for the C target as function "kgen" (malloc'd; NULL with the message in err). */
static inline char *kg_test_print_c(const kg_schedule *s, char *err, size_t errlen) {
  kg_arena la;
  kg_arena_init(&la);
  kg_lowered *lw = kg_lower(s, KG_TARGET_C, &la, err, errlen);
  char *src = NULL;
  if (lw && kg_codegen_c(lw, "kgen", &src, err, errlen) != 0) src = NULL;
  kg_arena_free(&la);
  return src;
}

/* Applies the steps of a text trace to s; 0, or -1 at the first failure (the message in err). */
static inline int kg_test_apply_text(kg_schedule *s, const char *text, char *err, size_t errlen) {
  kg_trace t;
  kg_trace_init(&t);
  int rc = kg_trace_parse(&t, "test", text, strlen(text), err, errlen) || kg_schedule_apply_trace(s, &t, err, errlen);
  kg_trace_free(&t);
  return rc ? -1 : 0;
}

/* Lowers, prints, compiles (C target), runs and verifies s against w's reference, each step CHECKed with what
 * and the trace in the message. 1 when verified. */
static inline int kg_test_verify_c(kg_test_workload *w, const kg_schedule *s, const char *what) {
  kg_pipeline pl;
  char err[4096];
  int ok = kg_pipeline_build(s, KG_TARGET_C, &pl, err, sizeof err) == 0;
  char *t = kg_trace_to_text(&s->trace);
  CHECKF(ok, "%s: build failed: %s\ntrace:\n%s", what, err, t);
  if (ok) {
    kg_verify_result v = kg_pipeline_verify(&pl, w->p, &w->d, 0);
    CHECKF(v.ok, "%s: verify failed: %s\ntrace:\n%s", what, v.msg, t);
    ok = v.ok;
  }
  free(t);
  kg_pipeline_free(&pl);
  return ok;
}

/* Runs prog (built for the emulator as m) on w's inputs and verifies the outputs against the reference (1e-4).
 * Temporaries start as NaN and outputs are poisoned, so reading what no kernel wrote fails. 1 when verified; else
 * 0 with the reason in err (the emulator's error, or the verification message). */
static inline int kg_test_emu_verify(const kg_emu_module *m, const kg_cuda_program *prog, kg_test_workload *w,
                                     char *err, size_t errlen) {
  const kg_program *p = w->p;
  int nargs = p->ninputs + p->noutputs + prog->ntemps;
  float **args = calloc((size_t)nargs, sizeof *args);
  for (int k = 0; k < p->ninputs; k++) args[k] = w->d.inputs[k];
  for (int k = 0; k < p->noutputs; k++) args[p->ninputs + k] = w->d.outputs[k];
  for (int k = 0; k < prog->ntemps; k++) {
    size_t n = (size_t)(prog->temp_elems[k] > 0 ? prog->temp_elems[k] : 1);
    float *t = args[p->ninputs + p->noutputs + k] = malloc(n * sizeof(float));
    for (size_t e = 0; e < n; e++) t[e] = __builtin_nanf("");
  }
  kg_data_poison(&w->d, p);
  int ok = kg_emu_run_program(m, prog, args, err, errlen) == 0;
  if (ok) {
    kg_verify_result v = kg_verify(p, &w->d, 1e-4);
    if (!v.ok) snprintf(err, errlen, "%s max_rel_err=%g", v.msg, v.max_rel_err);
    ok = v.ok;
  }
  for (int k = 0; k < prog->ntemps; k++) free(args[p->ninputs + p->noutputs + k]);
  free(args);
  return ok;
}

/* One random CUDA schedule of a workload, drawn, lowered and printed. test_gpu_random reruns test_cuda_random's
 * draws on a device: both draw schedule i (from 0) of workload w (its position in kg_test_list_workloads) from
 * kg_test_cuda_seed(w, i) in KG_TEST_CUDA_STEPS steps. */
#define KG_TEST_CUDA_STEPS 10
typedef struct kg_test_cuda_draw {
  uint64_t seed;
  char *trace; /* heap */
  int lowered, printed;
  char err[2048];
  kg_cuda_program prog; /* when printed */
} kg_test_cuda_draw;

static inline uint64_t kg_test_cuda_seed(int w, int i) { return (uint64_t)w * 100000 + (uint64_t)i + 1; }

/* Draws, lowers and prints into x; returns the schedule (the caller frees it). */
static inline kg_schedule *kg_test_cuda_draw_make(kg_test_cuda_draw *x, const kg_program *p, int w, int i) {
  x->seed = kg_test_cuda_seed(w, i);
  kg_schedule *s = kg_schedule_new(p);
  kg_schedule_random(s, x->seed, KG_TARGET_CUDA, KG_TEST_CUDA_STEPS);
  x->trace = kg_trace_to_text(&s->trace);
  kg_arena la;
  kg_arena_init(&la);
  kg_lowered *lw = kg_lower(s, KG_TARGET_CUDA, &la, x->err, sizeof x->err);
  /* the verifier runs in kg_lower unless NDEBUG; the tests check its invariants in every build */
  x->lowered = lw != NULL && kg_ir_verify(lw, x->err, sizeof x->err) == 0;
  x->printed = lw && kg_codegen_cuda(lw, "kgen", &x->prog, x->err, sizeof x->err) == 0;
  kg_arena_free(&la);
  return s;
}

/* CHECKs that x lowered and printed (path and again, the reproduce command, name it); returns x->printed. */
static inline int kg_test_cuda_draw_check(const kg_test_cuda_draw *x, const char *path, const char *again) {
  CHECKF(x->lowered, "%s seed %llu: lower failed: %s\ntrace:\n%s\nreproduce: %s", path,
         (unsigned long long)x->seed, x->err, x->trace, again);
  if (x->lowered)
    CHECKF(x->printed, "%s seed %llu: codegen cuda failed: %s\ntrace:\n%s\nreproduce: %s", path,
           (unsigned long long)x->seed, x->err, x->trace, again);
  return x->printed;
}

static inline void kg_test_cuda_draw_free(kg_test_cuda_draw *x) {
  if (x->printed) kg_cuda_program_free(&x->prog);
  free(x->trace);
  x->trace = NULL;
}
/* A library workload file (te/lib/NAME.te): its text and its `# sizes:` bindings. */
typedef struct kg_test_wfile {
  char path[256];
  char *text; /* heap: the caller frees it */
  size_t len;
  kg_binding b[KG_TEST_MAX_BIND];
  char names[KG_TEST_MAX_BIND][32];
  int nb;
} kg_test_wfile;

/* Reads te/lib/NAME.te into w; a missing file or `# sizes:` line fails a check and returns -1. */
static inline int kg_test_wfile_read(kg_test_wfile *w, const char *name) {
  memset(w, 0, sizeof *w);
  snprintf(w->path, sizeof w->path, "te/lib/%s.te", name);
  w->text = kg_test_read_file(w->path, &w->len);
  CHECKF(w->text != NULL, "cannot read %s", w->path);
  if (!w->text) return -1;
  w->nb = kg_test_parse_sizes(w->text, w->b, w->names, 1);
  CHECKF(w->nb > 0, "%s: no '# sizes:' line", w->path);
  return w->nb > 0 ? 0 : -1;
}
#endif
