/* Dynamic sizes on the C target: one compiled kernel serves every value of a dynamic size.
 *
 * Every library workload (te/lib) is loaded at its `# sizes:`, its leading size is made dynamic, and kernels are
 * built from the default schedule, a few random C schedules and (matmul) hand-written tiled, vectorized and
 * parallel ones. Each kernel then runs at more than ten values of the size (odd, prime and powers of two, in an
 * order that shrinks and regrows the cached workspaces of global temporaries), and its outputs are compared with
 * the reference evaluator on the program loaded at that value. The size-range check (KG_C_ERR_SIZE for 0 and for
 * a value above the range, outputs untouched), an explicit range, several dynamic sizes at once, concurrent calls
 * at different sizes, a schedule that cannot be lowered with a dynamic size, and the measurement harness (whose
 * worker passes the bound values) are checked too. */
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../codegen/codegen.h"
#include "../runtime/cpu.h"
#include "../runtime/measure.h"
#include "../runtime/verify.h"
#include "../lower/ir.h"
#include "testlib.h"
#include "testutil.h"

#define MAX_DYN 2
#define NVALUES 10
/* The swept size's values: odd, prime and powers of two, not sorted, so that a cached workspace is reused
 * smaller and regrown larger. */
static const int64_t sweep[NVALUES] = {13, 1, 257, 2, 97, 3, 128, 7, 64, 31};
/* Every other dynamic size of a case cycles through these while the first is swept. */
static const int64_t others[5] = {1, 2, 5, 17, 3};
/* Random schedules per case that must lower (drawn from fixed seeds, at most 4 tries each);
 * KGEN_DYNAMIC_RANDOM_SCHEDULES overrides the count (the default keeps the test under half a minute). */
static int nrandom_want = 3;

/* A register tile along the dynamic M (codegen/c.c's register accumulation): ragged in the last tile only, so
 * printed twice, the accumulator for full tiles and the plain loop for the last. */
#define RACC_TRACE "tile C i j 4 10\nsplit C k 4\nreorder C i.o j.o k.o k.i i.i j.i\nunroll C i.i\nvectorize C j.i\n" \
                   "parallel C i.o\n"

/* A workload with dynamic sizes: dyn[0] is swept; lo/hi 0 ask for the default range (which, with two sizes,
 * leaves the second no room beyond its bound value: those cases give explicit ranges). */
typedef struct dcase {
  const char *name; /* te/lib/<name>.te */
  const char *dyn[MAX_DYN];
  int ndyn;
  int64_t lo[MAX_DYN], hi[MAX_DYN];
  const char *traces[5]; /* hand-written schedules, besides the default and the random ones */
} dcase;

static const dcase cases[] = {
    {"attention", {"S"}, 1, {0}, {0}, {NULL}},
    {"attention", {"B", "S"}, 2, {1, 1}, {512, 64}, {NULL}},
    {"batch_matmul", {"L"}, 1, {0}, {0}, {NULL}},
    {"bias_gelu_residual", {"N"}, 1, {0}, {0}, {NULL}},
    {"conv2d", {"N"}, 1, {0}, {0}, {NULL}},
    {"depthwise_conv2d", {"N"}, 1, {0}, {0}, {NULL}},
    {"layernorm", {"N"}, 1, {0}, {0}, {NULL}},
    {"matmul",
     {"M"},
     1,
     {0},
     {0},
     {"split C j 4\nreorder C i j.o k j.i\nfuse C i j.o\nparallel C i*j.o\nvectorize C j.i\nsplit C k 3\n"
      "unroll C k.i\n",
      "tile C i j 8 6\nsplit C k 4\nreorder C i.o j.o k.o i.i k.i j.i\nparallel C i.o\nvectorize C j.i\nunroll C i.i\n",
      "cache_write C local\ncache_read A local C.local\ntile C i j 4 8\ncompute_at C.local C j.o\n"
      "split C.local k 4\ncompute_at A.local C.local k.o\nparallel C i.o\nvectorize C j.i\n",
      RACC_TRACE, NULL}},
    {"matmul",
     {"M", "K"},
     2,
     {1, 1},
     {512, 64},
     {"tile C i j 8 4\nsplit C k 4\nparallel C i.o\nvectorize C j.i\n", NULL}},
    {"matvec", {"M"}, 1, {0}, {0}, {NULL}},
    {"maxpool2d", {"N"}, 1, {0}, {0}, {NULL}},
    {"mlp_epilogue", {"M"}, 1, {0}, {0}, {NULL}},
    {"reduce_rows", {"N"}, 1, {0}, {0}, {NULL}},
    {"rmsnorm", {"N"}, 1, {0}, {0}, {NULL}},
    {"softmax", {"N"}, 1, {0}, {0}, {"split Y i 4\nparallel Y i.o\nvectorize Y j\n", NULL}},
    {"transpose",
     {"M"},
     1,
     {0},
     {0},
     {"tile Y j i 8 8\nparallel Y j.o\nvectorize Y i.i\n",
      /* a stage attached inside a fused loop whose inner part is the dynamic M (random seed 15005) */
      "cache_read X local Y\nvectorize X.local ax1\nfuse Y j i\ncompute_at X.local Y j*i\nparallel Y j*i\n"
      "split X.local ax0 16\n",
      NULL}},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))
#define NTRACES ((int)(sizeof cases[0].traces / sizeof cases[0].traces[0]))


/* The program with the sizes named in c->dyn at vals (NULL: the file's bindings). */
static kg_program *load_at(const kg_test_wfile *w, const dcase *c, const int64_t *vals) {
  kg_binding b[KG_TEST_MAX_BIND];
  memcpy(b, w->b, sizeof(kg_binding) * (size_t)w->nb);
  for (int j = 0; vals && j < c->ndyn; j++)
    for (int i = 0; i < w->nb; i++)
      if (!strcmp(b[i].name, c->dyn[j])) b[i].value = vals[j];
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  kg_program *p = kg_program_load(w->path, w->text, w->len, NULL, b, w->nb, &diag, &da);
  CHECKF(p != NULL, "%s: %s", w->path, diag.msg ? diag.msg : "?");
  kg_arena_free(&da);
  return p;
}

/* The program at the file's bindings with c's sizes made dynamic. */
static kg_program *load_dynamic(const kg_test_wfile *w, const dcase *c) {
  kg_program *p = load_at(w, c, NULL);
  if (!p) return NULL;
  kg_dynamic_size d[MAX_DYN];
  for (int j = 0; j < c->ndyn; j++) d[j] = (kg_dynamic_size){c->dyn[j], c->lo[j], c->hi[j]};
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  int rc = kg_program_set_dynamic(p, d, c->ndyn, &diag, &da);
  CHECKF(rc == 0, "%s: set_dynamic %s: %s", w->path, c->dyn[0], diag.msg ? diag.msg : "?");
  kg_arena_free(&da);
  if (rc != 0) {
    kg_program_free(p);
    return NULL;
  }
  return p;
}

/* c's workload file read (into w) and loaded with c's sizes dynamic; NULL after a failed CHECK, w then empty. */
static kg_program *case_load(kg_test_wfile *w, const dcase *c) {
  kg_program *p = kg_test_wfile_read(w, c->name) == 0 ? load_dynamic(w, c) : NULL;
  if (!p) {
    free(w->text);
    w->text = NULL;
  }
  return p;
}

/* Kernels built, and how many of them hold a full-tile register accumulation (codegen/c.c), for the summary. */
static int nkernels, nversioned;

/* A compiled kernel and what the test needs of its lowering. */
typedef struct kernel {
  kg_cpu_module m;
  int (*call)(float **args); /* the test's entry that returns the status (kgtest_call) */
  int nparams, nsizes;
  int64_t lo[MAX_DYN], hi[MAX_DYN];
  char *code, *trace;
  char what[256];
} kernel;

static void kernel_free(kernel *k) {
  kg_cpu_module_free(&k->m);
  free(k->code);
  free(k->trace);
  memset(k, 0, sizeof *k);
}

/* The generated unit plus `int kgtest_call(float **args)`, which calls the function as the _args wrapper does
 * but returns its status. */
static char *with_status_entry(const char *code, const kg_lowered *f) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_strbuf_puts(&b, code);
  kg_strbuf_puts(&b, "\nint kgtest_call(float **args);\nint kgtest_call(float **args) {\n");
  kg_strbuf_printf(&b, "  const int64_t *s = (const int64_t *)(const void *)args[%d];\n  return kernel(", f->nparams);
  for (int i = 0; i < f->nsize_vars; i++) kg_strbuf_printf(&b, "%ss[%d]", i ? ", " : "", i);
  for (int i = 0; i < f->nparams; i++) kg_strbuf_printf(&b, "%sargs[%d]", i || f->nsize_vars ? ", " : "", i);
  kg_strbuf_puts(&b, ");\n}\n");
  return kg_strbuf_take(&b);
}

/* Lowers, prints and compiles s (with -Wall -Wextra -Werror). 1 when built; 0 when lowering refused the schedule
 * (*lower_err gets the reason); -1 after a failed CHECK. */
static int kernel_build(kernel *k, const kg_schedule *s, const char *what, char *lower_err, size_t errlen) {
  memset(k, 0, sizeof *k);
  snprintf(k->what, sizeof k->what, "%s", what);
  k->trace = kg_trace_to_text(&s->trace);
  kg_arena a;
  kg_arena_init(&a);
  char err[4096] = "";
  kg_lowered *f = kg_lower(s, KG_TARGET_C, &a, err, sizeof err);
  if (!f) {
    snprintf(lower_err, errlen, "%s", err);
    kg_arena_free(&a);
    return 0;
  }
  CHECKF(kg_ir_verify(f, err, sizeof err) == 0, "%s: %s", what, err);
  CHECKF(f->nsize_vars >= 1 && f->nsize_vars <= MAX_DYN, "%s: %d dynamic sizes in the lowered function", what,
         f->nsize_vars);
  int rc = -1;
  char *code = NULL;
  if (f->nsize_vars < 1 || f->nsize_vars > MAX_DYN) goto done;
  k->nparams = f->nparams;
  k->nsizes = f->nsize_vars;
  for (int i = 0; i < f->nsize_vars; i++) k->lo[i] = f->size_lo[i], k->hi[i] = f->size_hi[i];
  int printed = kg_codegen_c(f, "kernel", &code, err, sizeof err) == 0;
  CHECKF(printed, "%s: codegen: %s\ntrace:\n%s", what, err, k->trace);
  if (!printed) goto done;
  /* sizes first, then the buffers; the range check before anything else */
  kg_strbuf sig;
  kg_strbuf_init(&sig);
  kg_strbuf_printf(&sig, "int kernel(int64_t %s, ", f->size_vars[0]->name);
  char *want = kg_strbuf_take(&sig);
  CHECK_STR_CONTAINS(code, want);
  free(want);
  char ret[64];
  snprintf(ret, sizeof ret, ") return %d; /* a size outside the range", KG_C_ERR_SIZE);
  CHECK_STR_CONTAINS(code, ret);
  CHECK_STR_CONTAINS(code, "kg_sizes = (const int64_t *)(const void *)args[");
  k->code = with_status_entry(code, f);
  nkernels++;
  nversioned += strstr(code, "full tiles: constant extents") != NULL;
  const char *old_cc = getenv("CC");
  char *saved = old_cc ? strdup(old_cc) : NULL;
  setenv("CC", "cc -Wall -Wextra -Werror", 1);
  int built = kg_cpu_build(k->code, "kernel", &k->m) == 0;
  if (saved) setenv("CC", saved, 1);
  else unsetenv("CC");
  free(saved);
  CHECKF(built, "%s: build: %.2000s\ntrace:\n%s", what, k->m.log ? k->m.log : "?", k->trace);
  if (!built) goto done;
  *(void **)(&k->call) = dlsym(k->m.handle, "kgtest_call");
  CHECK(k->call != NULL);
  rc = k->call ? 1 : -1;
done:
  free(code);
  kg_arena_free(&a);
  return rc;
}

/* p's schedule from trace text, or NULL with the reason in err. */
static kg_schedule *schedule_from_text(const kg_program *p, const char *text, char *err, size_t errlen) {
  kg_schedule *s = kg_schedule_new(p);
  kg_trace tr;
  kg_trace_init(&tr);
  int applied = kg_trace_parse(&tr, "trace", text, strlen(text), err, errlen) == 0 &&
                kg_schedule_apply_trace(s, &tr, err, errlen) == 0;
  kg_trace_free(&tr);
  if (!applied) {
    kg_schedule_free(s);
    return NULL;
  }
  return s;
}

/* kernel_build on p's default schedule. */
static int kernel_build_default(kernel *k, const kg_program *p, const char *what, char *err, size_t errlen) {
  kg_schedule *s = kg_schedule_new(p);
  int rc = kernel_build(k, s, what, err, errlen);
  kg_schedule_free(s);
  return rc;
}

/* The argument array: the data's buffers, then the sizes (what the _args wrapper reads). */
static float **make_args(const kg_data *d, const int64_t *sizes) {
  float **args = malloc(sizeof(float *) * (size_t)(d->ninputs + d->noutputs + 1));
  int n = 0;
  for (int i = 0; i < d->ninputs; i++) args[n++] = d->inputs[i];
  for (int i = 0; i < d->noutputs; i++) args[n++] = d->outputs[i];
  args[n] = (float *)(uintptr_t)sizes;
  return args;
}

/* Runs k at vals (c's sizes) through the runner's path (kg_cpu_call_sizes) and verifies it. 1 when verified. */
static int run_at(const kernel *k, const kg_test_wfile *w, const dcase *c, const int64_t *vals) {
  kg_program *q = load_at(w, c, vals);
  if (!q) return 0;
  kg_data d;
  kg_data_init(&d, q, KG_TEST_DATA_SEED);
  kg_data_reference(&d, q, KG_TEST_DATA_SEED);
  kg_data_poison(&d, q);
  float **args = make_args(&d, vals);
  kg_cpu_call_sizes(&k->m, args, d.ninputs + d.noutputs, vals, k->nsizes);
  kg_verify_result v = kg_verify(q, &d, 1e-4);
  char at[128];
  int n = 0;
  for (int j = 0; j < c->ndyn; j++)
    n += snprintf(at + n, sizeof at - (size_t)n, " %s=%lld", c->dyn[j], (long long)vals[j]);
  CHECKF(v.ok, "%s at%s: %s max_rel_err=%g\ntrace:\n%s", k->what, at, v.msg, v.max_rel_err, k->trace);
  free(args);
  kg_data_free(&d);
  kg_program_free(q);
  return v.ok;
}

/* The status entry at vals, which must refuse them (KG_C_ERR_SIZE) and leave the outputs as they were. The
 * buffers are those of the program at its bound values: a refused call touches none. */
static void check_refused(const kernel *k, const kg_program *p, const int64_t *vals, const char *why) {
  kg_data d;
  kg_data_init(&d, p, KG_TEST_DATA_SEED);
  kg_data_poison(&d, p);
  float **args = make_args(&d, vals);
  int st = k->call(args);
  CHECKF(st == KG_C_ERR_SIZE, "%s: %s (%lld): status %d, not %d", k->what, why, (long long)vals[0], st,
         KG_C_ERR_SIZE);
  kg_data before;
  kg_data_init(&before, p, KG_TEST_DATA_SEED);
  kg_data_poison(&before, p);
  int same = 1;
  for (int i = 0; i < d.noutputs; i++)
    same &= !memcmp(d.outputs[i], before.outputs[i], sizeof(float) * (size_t)kg_tensor_numel(p->outputs[i]));
  CHECKF(same, "%s: %s: the refused call wrote outputs", k->what, why);
  kg_data_free(&before);
  free(args);
  kg_data_free(&d);
}

/* Every check of one kernel: the sweep, the bound values through the status entry, the range's edges. */
static void check_kernel(const kernel *k, const kg_test_wfile *w, const dcase *c, const kg_program *p) {
  int ok = 0;
  int64_t vals[MAX_DYN], bound[MAX_DYN];
  for (int j = 0; j < c->ndyn; j++) {
    for (int i = 0; i < p->nsizes; i++)
      if (!strcmp(p->sizes[i].name, c->dyn[j])) bound[j] = p->sizes[i].value;
  }
  for (int v = 0; v < NVALUES; v++) {
    vals[0] = sweep[v];
    for (int j = 1; j < c->ndyn; j++) vals[j] = others[(v + j) % 5];
    ok += run_at(k, w, c, vals);
  }
  /* the bound values, with the status */
  kg_data d;
  kg_data_init(&d, p, KG_TEST_DATA_SEED);
  kg_data_reference(&d, p, KG_TEST_DATA_SEED);
  kg_data_poison(&d, p);
  float **args = make_args(&d, bound);
  int st = k->call(args);
  CHECKF(st == 0, "%s: status %d at the bound values", k->what, st);
  kg_verify_result v = kg_verify(p, &d, 1e-4);
  CHECKF(v.ok, "%s at the bound values: %s\ntrace:\n%s", k->what, v.msg, k->trace);
  free(args);
  kg_data_free(&d);
  /* out of range: 0, and one past the top, for the swept size and (another) for the second */
  memcpy(vals, bound, sizeof vals);
  vals[0] = 0;
  check_refused(k, p, vals, "size 0");
  vals[0] = k->hi[0] + 1;
  check_refused(k, p, vals, "size above the range");
  if (c->ndyn > 1) {
    memcpy(vals, bound, sizeof vals);
    vals[1] = k->hi[1] + 1;
    check_refused(k, p, vals, "second size above the range");
  }
  if (getenv("KGEN_TEST_VERBOSE")) printf("  %-60s %d/%d sizes verified\n", k->what, ok, NVALUES);
}

static void test_case(const dcase *c, int ci) {
  kg_test_wfile w;
  kg_program *p = case_load(&w, c);
  if (!p) return;
  char what[256], err[4096], dyn[64];
  snprintf(dyn, sizeof dyn, "%s%s%s", c->dyn[0], c->ndyn > 1 ? "," : "", c->ndyn > 1 ? c->dyn[1] : "");
  kernel k;
  int built = 0, refused = 0;
  /* the default schedule */
  snprintf(what, sizeof what, "%s (%s dynamic) default", c->name, dyn);
  int rc = kernel_build_default(&k, p, what, err, sizeof err);
  CHECKF(rc != 0, "%s: lower failed: %s", what, err);
  if (rc == 1) check_kernel(&k, &w, c, p), built++;
  if (rc >= 0) kernel_free(&k);
  /* hand-written ones */
  for (int t = 0; t < NTRACES && c->traces[t]; t++) {
    kg_schedule *s = schedule_from_text(p, c->traces[t], err, sizeof err);
    CHECKF(s != NULL, "%s trace %d: %s", c->name, t, err);
    snprintf(what, sizeof what, "%s (%s dynamic) trace %d", c->name, dyn, t);
    rc = s ? kernel_build(&k, s, what, err, sizeof err) : -1;
    CHECKF(rc != 0, "%s: lower failed: %s\ntrace:\n%s", what, err, c->traces[t]);
    if (rc == 1 && !strcmp(c->traces[t], RACC_TRACE)) {
      CHECK_STR_CONTAINS(k.code, "if (kg_min64(4, M - i_o * 4) >= 4) { /* full tiles: constant extents */");
      CHECK_STR_CONTAINS(k.code, "float kg_acc0[40];");
    }
    if (rc == 1) check_kernel(&k, &w, c, p), built++;
    if (rc >= 0) kernel_free(&k);
    kg_schedule_free(s);
  }
  /* random ones from fixed seeds; lowering may refuse some (a region that would follow a dynamic size), with a
   * message */
  int nrandom = 0;
  for (int i = 0; i < 4 * nrandom_want && nrandom < nrandom_want; i++) {
    uint64_t seed = (uint64_t)ci * 1000 + (uint64_t)i + 1;
    kg_schedule *s = kg_schedule_new(p);
    kg_schedule_random(s, seed, KG_TARGET_C, 4 + i % 8);
    snprintf(what, sizeof what, "%s (%s dynamic) random seed %llu", c->name, dyn,
             (unsigned long long)seed);
    rc = kernel_build(&k, s, what, err, sizeof err);
    if (rc == 0) {
      CHECKF(!strncmp(err, "lower: ", 7), "%s: lowering failed without a message: '%s'", what, err);
      refused++;
      if (getenv("KGEN_TEST_VERBOSE")) printf("  %s: refused: %s\n", what, err);
    }
    if (rc == 1) check_kernel(&k, &w, c, p), built++, nrandom++;
    if (rc >= 0) kernel_free(&k);
    kg_schedule_free(s);
  }
  CHECKF(nrandom >= 1 || nrandom_want == 0, "%s (%s dynamic): no random schedule lowered in %d draws", c->name, dyn,
         4 * nrandom_want);
  printf("%-20s %-4s %d kernels verified at %d sizes each, %d random schedules refused\n", c->name, dyn, built,
         NVALUES, refused);
  fflush(stdout);
  kg_program_free(p);
  free(w.text);
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
    for (int c = 0; c < NCASES; c++)
      found |= strlen(cases[c].name) == l - 3 && !strncmp(cases[c].name, de->d_name, l - 3);
    CHECKF(found, "te/lib/%s has no dynamic-size case in this test", de->d_name);
  }
  closedir(dir);
  CHECK(n >= 14);
}

/* An explicit range: the code serves exactly [lo, hi]. */
static void test_explicit_range(void) {
  const dcase c = {"matmul", {"M"}, 1, {2}, {300}, {NULL}};
  kg_test_wfile w;
  kg_program *p = case_load(&w, &c);
  if (!p) return;
  kernel k;
  char err[4096] = "";
  int rc = kernel_build_default(&k, p, "matmul M=2..300 default", err, sizeof err);
  CHECKF(rc == 1, "explicit range: %s", err);
  if (rc == 1) {
    CHECK(k.lo[0] == 2 && k.hi[0] == 300);
    CHECK_STR_CONTAINS(k.code, "M < INT64_C(2) || M > INT64_C(300)");
    int64_t v = 300;
    CHECK(run_at(&k, &w, &c, &v));
    v = 2;
    CHECK(run_at(&k, &w, &c, &v));
    v = 1;
    check_refused(&k, p, &v, "below the range");
    v = 301;
    check_refused(&k, p, &v, "above the range");
  }
  if (rc >= 0) kernel_free(&k);
  kg_program_free(p);
  free(w.text);
}

/* A stage computed at a loop inside which its region still spans the dynamic dimension has no constant size:
 * lowering refuses it with a message, where the same trace lowers with M static. */
static void test_refused_schedule(void) {
  const dcase c = {"matmul", {"M"}, 1, {0}, {0}, {NULL}};
  const char *trace = "reorder C j k i\ncache_read A local C\ncompute_at A.local C k\n";
  kg_test_wfile w;
  if (kg_test_wfile_read(&w, c.name) != 0) {
    free(w.text);
    return;
  }
  for (int dyn = 0; dyn < 2; dyn++) {
    kg_program *p = dyn ? load_dynamic(&w, &c) : load_at(&w, &c, NULL);
    if (!p) continue;
    char err[4096] = "";
    kg_schedule *s = schedule_from_text(p, trace, err, sizeof err);
    CHECKF(s != NULL, "refused schedule: trace: %s", err);
    if (s) {
      kg_arena a;
      kg_arena_init(&a);
      err[0] = 0;
      kg_lowered *f = kg_lower(s, KG_TARGET_C, &a, err, sizeof err);
      if (dyn) {
        CHECKF(f == NULL, "a region spanning dynamic M lowered");
        CHECK_STR_CONTAINS(err, "lower: stage A.local");
        CHECK_STR_CONTAINS(err, "dynamic size");
      } else {
        CHECKF(f != NULL, "the static program does not lower: %s", err);
      }
      kg_arena_free(&a);
    }
    kg_schedule_free(s);
    kg_program_free(p);
  }
  free(w.text);
}

/* Concurrent calls at different sizes share the cached workspaces of the global temporaries (taken and given back
 * atomically, regrown when a call needs more): softmax's m and e. */
static void test_concurrent_calls(void) {
  const dcase c = {"softmax", {"N"}, 1, {0}, {0}, {NULL}};
  kg_test_wfile w;
  kg_program *p = case_load(&w, &c);
  if (!p) return;
  kernel k;
  char err[4096] = "";
  int rc = kernel_build_default(&k, p, "softmax concurrent", err, sizeof err);
  CHECKF(rc == 1, "concurrent: %s", err);
  if (rc == 1) {
    CHECK_STR_CONTAINS(k.code, "kg_ws_take_dyn(&kg_ws_kernel_");
    enum { NT = 4, ROUNDS = 20 };
    static const int64_t vals[NT] = {3, 211, 1, 64};
    kg_program *q[NT];
    kg_data d[NT];
    for (int t = 0; t < NT; t++) {
      q[t] = load_at(&w, &c, &vals[t]);
      kg_data_init(&d[t], q[t], KG_TEST_DATA_SEED);
      kg_data_reference(&d[t], q[t], KG_TEST_DATA_SEED);
    }
    int bad = 0;
#pragma omp parallel for num_threads(NT) schedule(static, 1) reduction(+ : bad)
    for (int t = 0; t < NT; t++) {
      for (int r = 0; r < ROUNDS; r++) {
        kg_data_poison(&d[t], q[t]);
        float **args = make_args(&d[t], &vals[t]);
        int st = k.call(args);
        free(args);
        kg_verify_result v = kg_verify(q[t], &d[t], 1e-4);
        bad += st != 0 || !v.ok;
      }
    }
    CHECKF(bad == 0, "%d concurrent calls failed", bad);
    for (int t = 0; t < NT; t++) {
      kg_data_free(&d[t]);
      kg_program_free(q[t]);
    }
  }
  if (rc >= 0) kernel_free(&k);
  kg_program_free(p);
  free(w.text);
}

/* The measurement harness runs the dynamic kernel at the program's bound values: its worker gets them with the
 * buffers and passes them after the buffers, so candidates verify and are timed. */
static void test_measure_dynamic(void) {
  const dcase c = {"layernorm", {"N"}, 1, {0}, {0}, {NULL}};
  kg_test_wfile w;
  kg_program *p = case_load(&w, &c);
  if (!p) return;
  kg_measure_opts o = {.target = KG_TARGET_C, .min_repeat_s = 0.01, .seed = KG_TEST_DATA_SEED, .build_threads = 2};
  char err[1024] = "";
  kg_measurer *m = kg_measurer_new(p, &o, err, sizeof err);
  CHECKF(m != NULL, "measurer: %s", err);
  if (m) {
    kg_trace tr;
    kg_trace_init(&tr);
    const char *text = "split Y i 4\nparallel Y i.o\nvectorize Y j\n";
    CHECK(kg_trace_parse(&tr, "trace", text, strlen(text), err, sizeof err) == 0);
    kg_candidate cand[2] = {{NULL, NULL}, {&tr, NULL}};
    kg_measure_result r[2];
    kg_measure_batch(m, cand, 2, r);
    for (int i = 0; i < 2; i++) {
      CHECKF(r[i].status == KG_STATUS_OK, "measured candidate %d: %s: %s", i, kg_status_names[r[i].status], r[i].msg);
      CHECK(r[i].runs >= 3 && r[i].median_s > 0);
      kg_measure_result_free(&r[i]);
    }
    kg_trace_free(&tr);
    kg_measurer_free(m);
  }
  kg_program_free(p);
  free(w.text);
}

int main(int argc, char **argv) {
  int only = argc > 1 ? atoi(argv[1]) : -1; /* one case by index, for debugging */
  const char *env = getenv("KGEN_DYNAMIC_RANDOM_SCHEDULES");
  if (env) nrandom_want = atoi(env);
  test_every_workload_covered();
  for (int c = 0; c < NCASES; c++)
    if (only < 0 || only == c) test_case(&cases[c], c);
  if (only < 0) {
    test_explicit_range();
    test_refused_schedule();
    test_concurrent_calls();
    test_measure_dynamic();
  }
  printf("%d kernels built, %d with full-tile register accumulation\n", nkernels, nversioned);
  TEST_END();
}
