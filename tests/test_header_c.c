/* Exported C headers (codegen/header_c.c with codegen/header.c and the C printer's pieces), end to end: library
 * workloads at their test sizes under the default schedule, random CPU schedules and tuned traces are lowered,
 * printed with kg_codegen_c_function and assembled by kg_header_print; then
 *   - each header compiles warning-free alone: gcc -std=c11 (with and without -fopenmp, with and without
 *     KG_IMPLEMENTATION), g++, clang and nvcc -x cu when present (skipped with a message when not);
 *   - a generated driver includes every header in one translation unit with KG_IMPLEMENTATION (and a second
 *     translation unit includes them without it and calls one kernel, so declarations and single definitions
 *     link), built as C and as C++, reads the inputs this test wrote, calls each kernel through its per-binding
 *     name, the dispatcher and kg_<name>, and writes the outputs, which are compared with the reference
 *     evaluator; a header holding two size bindings dispatches each and answers KG_ERR_NO_KERNEL for other
 *     sizes; kernels whose temporaries cannot be allocated (a global one, and a local region inside a parallel
 *     loop) return KG_ERR_OUT_OF_MEMORY;
 *   - the opening comment names the workload, the sizes, the target and every step of the trace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <unistd.h>
#include "../base/strbuf.h"
#include "../codegen/header.h"
#include "../runtime/compiler.h"
#include "../codegen/kernel_flags.h"
#include "testlib.h"

#define MAX_BIND 2
#define MAX_PARAMS 8
#define NVCC "/usr/local/cuda/bin/nvcc"

/* One header to export: a workload with one or two size bindings, each under its own schedule. */
typedef struct hcase {
  const char *workload; /* te/lib name */
  const char *prefix;
  int nbind;
  const char *sizes[MAX_BIND]; /* NULL: the file's `# sizes:` */
  const char *trace[MAX_BIND]; /* trace text; NULL: a random CPU schedule from seed */
  uint64_t seed[MAX_BIND];
  int oom; /* sizes too large to allocate: not verified, called under an address-space limit instead */
} hcase;

/* A tiled, parallel, vectorized matmul with a register accumulator (docs/schedules.md's, at test sizes). */
static const char MATMUL_TUNED[] = "cache_write C local\ntile C i j 8 8\nparallel C i.o\ncompute_at C.local C j.o\n"
                                   "split C.local k 4\nreorder C.local k.o k.i i j\nvectorize C.local j\n";
/* A 30 KB local region (on the heap) inside a parallel loop. */
static const char MATMUL_HEAP[] = "split C i 8\nparallel C i.o\ncache_read B local C\ncompute_at B.local C i.o\n"
                                  "vectorize B.local ax1\n";
/* softmax's best trace in tuning_logs/softmax.c.kglog: exp inlined into vectorized loops and a reduction */
static const char SOFTMAX_TUNED[] =
    "split Y j 64\nvectorize Y j.i\nparallel Y i\nrfactor Y.r0 j2 32\nreorder Y.r0.rf i j2.o j2.i\n"
    "vectorize Y.r0.rf j2.i\ncompute_at Y.r0 Y i\ncompute_at Y.r0.rf Y.r0 i\ncompute_inline e\nrfactor m j 32\n"
    "reorder m.rf i j.o j.i\nvectorize m.rf j.i\nparallel m i\ncompute_at m.rf m i\n";
static const char MATMUL_OOM[] = "cache_read B local C\ncompute_at B.local C i\nparallel C i\n";

static const hcase cases[] = {
    {"matmul", "kg_", 1, {NULL}, {""}, {0}, 0},
    {"matmul", "kgt_", 1, {NULL}, {MATMUL_TUNED}, {0}, 0},
    {"matmul", "kgm_", 2, {NULL, "M=64 N=80 K=96"}, {NULL, MATMUL_HEAP}, {11, 0}, 0},
    {"softmax", "kg_", 1, {NULL}, {""}, {0}, 0},
    {"softmax", "kgt_", 1, {NULL}, {SOFTMAX_TUNED}, {0}, 0},
    {"layernorm", "kg_", 1, {NULL}, {NULL}, {21}, 0},
    {"conv2d", "kg_", 1, {NULL}, {NULL}, {31}, 0},
    {"attention", "kg_", 1, {NULL}, {NULL}, {41}, 0},
    /* the rest of the library, each under a random CPU schedule: every library workload's export runs */
    {"batch_matmul", "kg_", 1, {NULL}, {NULL}, {51}, 0},
    {"bias_gelu_residual", "kg_", 1, {NULL}, {NULL}, {52}, 0},
    {"depthwise_conv2d", "kg_", 1, {NULL}, {NULL}, {53}, 0},
    {"matvec", "kg_", 1, {NULL}, {NULL}, {54}, 0},
    {"maxpool2d", "kg_", 1, {NULL}, {NULL}, {55}, 0},
    {"mlp_epilogue", "kg_", 1, {NULL}, {NULL}, {56}, 0},
    {"reduce_rows", "kg_", 1, {NULL}, {NULL}, {57}, 0},
    {"rmsnorm", "kg_", 1, {NULL}, {NULL}, {58}, 0},
    {"transpose", "kg_", 1, {NULL}, {NULL}, {59}, 0},
    /* e: 2^40 floats */
    {"softmax", "oom_", 1, {"N=1048576 D=1048576"}, {""}, {0}, 1},
    /* B.local: 2^40 floats in each iteration of a parallel loop */
    {"matmul", "oom_", 1, {"M=2 N=1048576 K=1048576"}, {MATMUL_OOM}, {0}, 1},
};
#define NCASES ((int)(sizeof cases / sizeof *cases))

/* What a case became: the programs, their data, the spec and the header. */
typedef struct hbuilt {
  int ok;
  kg_program *p[MAX_BIND];
  kg_data d[MAX_BIND];
  int64_t sizes[MAX_BIND][KG_TEST_MAX_BIND];
  char *c_function[MAX_BIND], *trace_text[MAX_BIND], *fn[MAX_BIND];
  kg_header_binding hb[MAX_BIND];
  const char *pnames[MAX_PARAMS], *snames[KG_TEST_MAX_BIND];
  int pin[MAX_PARAMS];
  char *pdims[MAX_PARAMS];
  char *signature;
  kg_header_spec spec;
  char *header;
  char file[64];
} hbuilt;

/* The def line of the workload's source ("def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N])"). */
static char *def_line(const char *text) {
  const char *d = strstr(text, "\ndef ");
  if (!d) return strdup("?");
  d++;
  const char *end = strchr(d, '{');
  size_t n = end ? (size_t)(end - d) : strlen(d);
  while (n && d[n - 1] == ' ') n--;
  return strndup(d, n);
}

/* A parameter's shape as the comment shows it, from the def line: "A: f32[M, K]" -> "[M][K]". */
static char *param_dims(const char *def, const char *name) {
  kg_strbuf key, d;
  kg_strbuf_init(&key);
  kg_strbuf_init(&d);
  kg_strbuf_printf(&key, "%s: f32[", name);
  const char *at = strstr(def, key.s);
  kg_strbuf_putc(&d, '[');
  for (const char *c = at ? at + strlen(key.s) : "?]"; *c && *c != ']'; c++)
    if (*c == ',') kg_strbuf_puts(&d, "][");
    else if (*c != ' ') kg_strbuf_putc(&d, *c);
  kg_strbuf_putc(&d, ']');
  kg_strbuf_free(&key);
  return kg_strbuf_take(&d);
}

/* Loads, schedules, lowers and prints binding b of case c into h. 0, or -1 after a failed CHECK. */
static int build_binding(const hcase *c, hbuilt *h, int b, const char *text) {
  kg_binding bind[KG_TEST_MAX_BIND];
  char names[KG_TEST_MAX_BIND][32];
  int nb = c->sizes[b] ? kg_test_parse_bindings(c->sizes[b], bind, names, 1) : kg_test_parse_sizes(text, bind, names, 1);
  CHECKF(nb > 0, "%s: bad sizes", c->workload);
  if (nb <= 0) return -1;
  kg_program *p = h->p[b] = kg_test_load(text, bind, nb);
  CHECKF(p != NULL, "%s: does not load", c->workload);
  if (!p) return -1;
  kg_schedule *s = kg_schedule_new(p);
  char err[2048] = "";
  int ok = 1;
  if (c->trace[b]) {
    kg_trace t;
    kg_trace_init(&t);
    ok = kg_trace_parse(&t, "trace", c->trace[b], strlen(c->trace[b]), err, sizeof err) == 0 &&
         kg_schedule_apply_trace(s, &t, err, sizeof err) == 0;
    kg_trace_free(&t);
  } else {
    kg_schedule_random(s, c->seed[b], KG_TARGET_C, 10);
  }
  h->trace_text[b] = kg_trace_to_text(&s->trace);
  kg_arena a;
  kg_arena_init(&a);
  kg_lowered *f = ok ? kg_lower(s, KG_TARGET_C, &a, err, sizeof err) : NULL;
  for (int k = 0; k < p->nsizes; k++) h->sizes[b][k] = p->sizes[k].value;
  h->hb[b].size_values = h->sizes[b];
  /* the name kg_header_fn_name gives this binding (the spec's other fields are not needed for it yet) */
  kg_header_spec naming = {.name = p->def->name, .prefix = c->prefix, .nsizes = p->nsizes, .bindings = h->hb};
  for (int k = 0; k < p->nsizes; k++) h->snames[k] = p->sizes[k].name;
  naming.size_names = h->snames;
  h->fn[b] = kg_header_fn_name(&naming, b);
  ok = f && kg_codegen_c_function(f, h->fn[b], &h->c_function[b], err, sizeof err) == 0;
  CHECKF(ok, "%s%s seed %llu: %s\ntrace:\n%s", c->prefix, c->workload, (unsigned long long)c->seed[b], err,
         h->trace_text[b]);
  kg_arena_free(&a);
  kg_schedule_free(s);
  if (!ok) return -1;
  h->hb[b].c_function = h->c_function[b];
  h->hb[b].origin = (kg_header_origin){.trace_text = h->trace_text[b],
                                       .record = c->trace[b] && !*c->trace[b] ? NULL : "test_header_c",
                                       .device = "the test machine",
                                       .arch = "x86-64",
                                       .time_s = 1e-3 * (b + 1)};
  if (!c->oom) {
    kg_data_init(&h->d[b], p, KG_TEST_DATA_SEED + (uint64_t)b);
    kg_data_reference(&h->d[b], p, KG_TEST_DATA_SEED + (uint64_t)b);
  }
  return 0;
}

static void build_case(const hcase *c, hbuilt *h, int index) {
  memset(h, 0, sizeof *h);
  char path[256];
  snprintf(path, sizeof path, "te/lib/%s.te", c->workload);
  char *text = kg_test_read_file(path, NULL);
  CHECKF(text != NULL, "cannot read %s", path);
  if (!text) return;
  int ok = 1;
  for (int b = 0; b < c->nbind && ok; b++) ok = build_binding(c, h, b, text) == 0;
  h->signature = def_line(text);
  free(text);
  if (!ok) return;
  const kg_program *p = h->p[0];
  int np = p->ninputs + p->noutputs;
  CHECK(np <= MAX_PARAMS);
  if (np > MAX_PARAMS) return;
  for (int i = 0; i < np; i++) {
    const kg_tensor *t = i < p->ninputs ? p->inputs[i] : p->outputs[i - p->ninputs];
    h->pnames[i] = t->name;
    h->pin[i] = i < p->ninputs;
    h->pdims[i] = param_dims(h->signature, t->name);
  }
  h->spec = (kg_header_spec){.name = p->def->name,
                             .prefix = c->prefix,
                             .target = KG_TARGET_C,
                             .signature = h->signature,
                             .nparams = np,
                             .param_names = h->pnames,
                             .param_is_input = h->pin,
                             .param_dims = (const char *const *)h->pdims,
                             .nsizes = p->nsizes,
                             .size_names = h->snames,
                             .bindings = h->hb,
                             .nbindings = c->nbind,
                             .log_path = "tuning_logs/test.kglog",
                             .kgen_version = "test"};
  char err[512] = "";
  int rc = kg_header_print(&h->spec, &h->header, err, sizeof err);
  CHECKF(rc == 0, "%s%s: %s", c->prefix, c->workload, err);
  snprintf(h->file, sizeof h->file, "h%d_%s%s.h", index, c->prefix, c->workload);
  h->ok = rc == 0;
}

static void free_case(const hcase *c, hbuilt *h) {
  for (int b = 0; b < c->nbind; b++) {
    if (h->p[b] && !c->oom && h->d[b].inputs) kg_data_free(&h->d[b]);
    if (h->p[b]) kg_program_free(h->p[b]);
    free(h->c_function[b]);
    free(h->trace_text[b]);
    free(h->fn[b]);
  }
  for (int i = 0; i < MAX_PARAMS; i++) free(h->pdims[i]);
  free(h->signature);
  free(h->header);
}

/* The opening comment (up to its first closing): workload, sizes, target, and each step of every trace. */
static void check_comment(const hcase *c, const hbuilt *h) {
  const char *end = strstr(h->header, "*/");
  CHECK(strncmp(h->header, "/* ", 3) == 0 && end != NULL);
  if (!end) return;
  char *comment = strndup(h->header, (size_t)(end - h->header));
  char want[512];
  snprintf(want, sizeof want, "%s%s: %s, exported by kgen test for the C (OpenMP) target", c->prefix,
           h->spec.name, h->spec.name);
  CHECK_STR_CONTAINS(comment, want);
  CHECK_STR_CONTAINS(comment, h->signature);
  for (int b = 0; b < c->nbind; b++) {
    kg_strbuf s;
    kg_strbuf_init(&s);
    kg_strbuf_printf(&s, "%s:", h->fn[b]);
    for (int k = 0; k < h->spec.nsizes; k++) kg_strbuf_printf(&s, " %s=%lld", h->snames[k], (long long)h->sizes[b][k]);
    CHECK_STR_CONTAINS(comment, s.s);
    kg_strbuf_free(&s);
    /* every step, one a line */
    const char *t = h->trace_text[b];
    if (!*t) CHECK_STR_CONTAINS(comment, "trace: (none: the default schedule)");
    while (*t) {
      const char *nl = strchr(t, '\n');
      size_t n = nl ? (size_t)(nl - t) : strlen(t);
      snprintf(want, sizeof want, " *       %.*s\n", (int)n, t);
      CHECK_STR_CONTAINS(comment, want);
      t += n + (nl ? 1 : 0);
    }
  }
  free(comment);
}

/* ---- commands, run two at a time ---- */

typedef struct job {
  char *argv[24];
  char what[256];
  int rc;
  char *out;
} job;

typedef struct jobs {
  job *j;
  int n, cap;
} jobs;

/* Adds a command given as one line of words (no quoting needed: every word is plain). */
static void job_add(jobs *js, const char *what, const char *line) {
  if (js->n == js->cap) {
    js->cap = js->cap ? 2 * js->cap : 64;
    js->j = realloc(js->j, sizeof *js->j * (size_t)js->cap);
  }
  job *j = &js->j[js->n++];
  memset(j, 0, sizeof *j);
  snprintf(j->what, sizeof j->what, "%s: %s", what, line);
  char *words = strdup(line);
  int n = kg_compiler_split_words(words, j->argv, 23);
  for (int i = 0; i < n; i++) j->argv[i] = strdup(j->argv[i]);
  j->argv[n] = NULL;
  free(words);
}

static void jobs_run(jobs *js, const char *dir) {
#pragma omp parallel for schedule(dynamic) num_threads(2)
  for (int i = 0; i < js->n; i++) js->j[i].rc = kg_compiler_run_command(js->j[i].argv, dir, &js->j[i].out);
}

/* Every job exited 0 and printed no warning. */
static void jobs_check(jobs *js) {
  for (int i = 0; i < js->n; i++) {
    job *j = &js->j[i];
    CHECKF(j->rc == 0 && !(j->out && strcasestr(j->out, "warning")), "%s: exit %d\n%s", j->what, j->rc,
           j->out ? j->out : "");
  }
}

static void jobs_free(jobs *js) {
  for (int i = 0; i < js->n; i++) {
    for (int k = 0; js->j[i].argv[k]; k++) free(js->j[i].argv[k]);
    free(js->j[i].out);
  }
  free(js->j);
  memset(js, 0, sizeof *js);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static int have(const char *path) { return access(path, X_OK) == 0; }

/* Each header alone, in a file that includes it (inc<i>.c), with every compiler and mode. */
static void test_compile_alone(const char *dir, hbuilt *h) {
  int clang = have("/usr/bin/clang") && have("/usr/bin/clang++"), nvcc = have(NVCC);
  if (!clang) printf("test_header_c: clang skipped: /usr/bin/clang or clang++ is missing\n");
  if (!nvcc) printf("test_header_c: nvcc skipped: %s is missing\n", NVCC);
  jobs js = {0};
  for (int i = 0; i < NCASES; i++) {
    if (!h[i].ok) continue;
    char inc[64], text[128], line[512];
    snprintf(inc, sizeof inc, "inc%d.c", i);
    snprintf(text, sizeof text, "#include \"%s\"\n", h[i].file);
    CHECK(kg_compiler_write_file(dir, inc, text) == 0);
    static const char *const modes[] = {
        "gcc -std=c11 -Wall -Wextra -Werror -c",
        "gcc -std=c11 -Wall -Wextra -Werror -fopenmp -c",
        "gcc -std=c11 -Wall -Wextra -Werror -O2 -DKG_IMPLEMENTATION -c",
        /* the flags kgen measures kernels with (-march=native: the AVX-512 options where the machine has them) */
        "gcc " KG_KERNEL_CFLAGS " -Wall -Wextra -Werror -DKG_IMPLEMENTATION -c",
        "g++ -Wall -Wextra -Werror -x c++ -c",
        "g++ -Wall -Wextra -Werror -O2 -fopenmp -DKG_IMPLEMENTATION -x c++ -c",
        "g++ -Wall -Wextra -Werror -O2 -DKG_IMPLEMENTATION -x c++ -c",
    };
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
      snprintf(line, sizeof line, "%s %s -o inc%d_%zu.o", modes[m], inc, i, m);
      job_add(&js, h[i].file, line);
    }
    if (clang) {
      snprintf(line, sizeof line,
               "clang -std=c11 -Wall -Wextra -Werror -O2 -march=native -fopenmp -DKG_IMPLEMENTATION -c %s -o inc%d_clang.o",
               inc, i);
      job_add(&js, h[i].file, line);
      snprintf(line, sizeof line, "clang++ -Wall -Wextra -Werror -O2 -DKG_IMPLEMENTATION -x c++ -c %s -o inc%d_clangxx.o",
               inc, i);
      job_add(&js, h[i].file, line);
    }
    if (nvcc) {
      snprintf(line, sizeof line, NVCC " -c -x cu -Xcompiler -Wall,-Wextra -DKG_IMPLEMENTATION %s -o inc%d_nvcc.o",
               inc, i);
      job_add(&js, h[i].file, line);
      if (i == 0) {
        snprintf(line, sizeof line, NVCC " -c -x cu -Xcompiler -Wall,-Wextra %s -o inc%d_nvcc_decl.o", inc, i);
        job_add(&js, h[i].file, line);
      }
    }
  }
  jobs_run(&js, dir);
  jobs_check(&js);
  jobs_free(&js);
}

/* ---- the driver ---- */

static void put_includes(kg_strbuf *b, const hbuilt *h) {
  for (int i = 0; i < NCASES; i++)
    if (h[i].ok) kg_strbuf_printf(b, "#include \"%s\"\n", h[i].file);
}

static int64_t numel(const kg_program *p, int k) {
  return kg_tensor_numel(k < p->ninputs ? p->inputs[k] : p->outputs[k - p->ninputs]);
}

/* The size arguments of binding b ("33, 17, 20, "). */
static void put_size_args(kg_strbuf *s, const hbuilt *h, int b) {
  for (int k = 0; k < h->spec.nsizes; k++) kg_strbuf_printf(s, "%lld, ", (long long)h->sizes[b][k]);
}

/* The calls of binding b of case i: through its own name (v0), the dispatcher (v1) and kg_<name> (v2); case 0
 * also through the other translation unit (v3). Outputs are poisoned (all-ones: a NaN) before each call. */
static void put_binding_calls(kg_strbuf *s, int i, const hcase *c, const hbuilt *h, int b) {
  const kg_program *p = h->p[b];
  int np = p->ninputs + p->noutputs;
  kg_strbuf_printf(s, "  { /* %s */\n", h->fn[b]);
  for (int k = 0; k < np; k++)
    if (k < p->ninputs)
      kg_strbuf_printf(s, "    float *a%d = load(\"in_%d_%d_%d.bin\", %lld);\n", k, i, b, k, (long long)numel(p, k));
    else
      kg_strbuf_printf(s, "    float *a%d = (float *)malloc(sizeof(float) * %lld);\n", k, (long long)numel(p, k));
  int nv = i == 0 ? 4 : 3;
  for (int v = 0; v < nv; v++) {
    for (int k = p->ninputs; k < np; k++) kg_strbuf_printf(s, "    memset(a%d, 0xff, sizeof(float) * %lld);\n", k, (long long)numel(p, k));
    kg_strbuf call;
    kg_strbuf_init(&call);
    if (v == 0) kg_strbuf_printf(&call, "%s(", h->fn[b]);
    if (v == 1) kg_strbuf_printf(&call, "%s%s_dispatch(", c->prefix, h->spec.name);
    if (v == 2) kg_strbuf_printf(&call, "%s%s(", c->prefix, h->spec.name);
    if (v == 3) kg_strbuf_puts(&call, "other_call(");
    if (v == 1 || (v == 2 && c->nbind > 1)) put_size_args(&call, h, b);
    for (int k = 0; k < np; k++) kg_strbuf_printf(&call, "%sa%d", k ? ", " : "", k);
    kg_strbuf_puts(&call, ")");
    kg_strbuf_printf(s, "    expect(%s, KG_OK, \"%s v%d\");\n", call.s, h->fn[b], v);
    kg_strbuf_free(&call);
    for (int k = p->ninputs; k < np; k++)
      kg_strbuf_printf(s, "    save(\"out_%d_%d_%d_%d.bin\", a%d, %lld);\n", i, b, v, k - p->ninputs, k,
                       (long long)numel(p, k));
  }
  for (int k = 0; k < np; k++) kg_strbuf_printf(s, "    free(a%d);\n", k);
  kg_strbuf_puts(s, "  }\n");
}

/* A call with NULL pointers that must return want without touching them. */
static void put_null_call(kg_strbuf *s, const char *fn, const hbuilt *h, int with_sizes, const int64_t *sizes,
                          const char *want) {
  kg_strbuf_printf(s, "  expect(%s(", fn);
  if (with_sizes)
    for (int k = 0; k < h->spec.nsizes; k++) kg_strbuf_printf(s, "%lld, ", (long long)sizes[k]);
  for (int k = 0; k < h->spec.nparams; k++) kg_strbuf_printf(s, "%sNULL", k ? ", " : "");
  kg_strbuf_printf(s, "), %s, \"%s\");\n", want, fn);
}

static char *driver_main(const hbuilt *h) {
  kg_strbuf s;
  kg_strbuf_init(&s);
  kg_strbuf_puts(&s, "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <sys/resource.h>\n"
                     "#define KG_IMPLEMENTATION\n");
  put_includes(&s, h);
  kg_strbuf_puts(&s, "int other_call(");
  kg_header_put_params(&s, &h[0].spec, 1);
  kg_strbuf_puts(&s, ");\n");
  kg_strbuf_puts(&s,
                 "static int fails, calls;\n"
                 "static float *load(const char *path, size_t n) {\n"
                 "  float *p = (float *)malloc(sizeof(float) * n);\n"
                 "  FILE *f = fopen(path, \"rb\");\n"
                 "  if (!f || fread(p, sizeof(float), n, f) != n) { fprintf(stderr, \"cannot read %s\\n\", path); exit(2); }\n"
                 "  fclose(f);\n"
                 "  return p;\n"
                 "}\n"
                 "static void save(const char *path, const float *p, size_t n) {\n"
                 "  FILE *f = fopen(path, \"wb\");\n"
                 "  if (!f || fwrite(p, sizeof(float), n, f) != n || fclose(f) != 0) { fprintf(stderr, \"cannot write %s\\n\", path); exit(2); }\n"
                 "}\n"
                 "static void expect(int got, int want, const char *what) {\n"
                 "  calls++;\n"
                 "  if (got == want) return;\n"
                 "  fprintf(stderr, \"%s: returned %d (%s), wanted %d (%s)\\n\", what, got, kg_strerror(got), want, kg_strerror(want));\n"
                 "  fails++;\n"
                 "}\n"
                 "int main(void) {\n");
  for (int i = 0; i < NCASES; i++) {
    const hcase *c = &cases[i];
    if (!h[i].ok || c->oom) continue;
    for (int b = 0; b < c->nbind; b++) put_binding_calls(&s, i, c, &h[i], b);
    /* sizes no kernel was tuned for (the first size one more than any binding's) */
    int64_t other[KG_TEST_MAX_BIND];
    for (int k = 0; k < h[i].spec.nsizes; k++) other[k] = h[i].sizes[0][k];
    for (int b = 0; b < c->nbind; b++) other[0] = other[0] > h[i].sizes[b][0] ? other[0] : h[i].sizes[b][0];
    other[0]++;
    char fn[256];
    snprintf(fn, sizeof fn, "%s%s_dispatch", c->prefix, h[i].spec.name);
    put_null_call(&s, fn, &h[i], 1, other, "KG_ERR_NO_KERNEL");
    if (c->nbind > 1) {
      snprintf(fn, sizeof fn, "%s%s", c->prefix, h[i].spec.name);
      put_null_call(&s, fn, &h[i], 1, other, "KG_ERR_NO_KERNEL");
      /* the second binding's sizes but the first one's last size: every size counts */
      memcpy(other, h[i].sizes[1], sizeof other);
      other[h[i].spec.nsizes - 1] = h[i].sizes[0][h[i].spec.nsizes - 1];
      put_null_call(&s, fn, &h[i], 1, other, "KG_ERR_NO_KERNEL");
    }
  }
  /* The local region too large for the stack (MATMUL_HEAP's B.local, in each iteration of a parallel loop) comes
   * back to its site's pool after the calls above, to be taken by the next call instead of a fresh allocation. */
  for (int i = 0; i < NCASES; i++)
    for (int b = 0; h[i].ok && !cases[i].oom && b < cases[i].nbind; b++)
      if (cases[i].trace[b] == MATMUL_HEAP) {
        CHECKF(strstr(h[i].c_function[b], "kg_pool_take(kg_lp_") != NULL, "%s: no pooled local region", h[i].fn[b]);
        kg_strbuf_printf(&s,
                         "  { int held = 0;\n"
                         "    for (int k = 0; k < KG_POOL_SLOTS; k++) held += kg_lp_%s_0[k] != NULL;\n"
                         "    calls++;\n"
                         "    if (!held) { fprintf(stderr, \"%s: its pool holds no block after the calls\\n\");\n"
                         "      fails++; } }\n",
                         h[i].fn[b], h[i].fn[b]);
      }
  /* Out of memory: the temporaries are 4 TiB, beyond any address-space limit and overcommit policy; the kernels
   * must return before touching their (one-float) arguments. */
  kg_strbuf_puts(&s, "  struct rlimit rl;\n"
                     "  if (getrlimit(RLIMIT_AS, &rl) != 0) { perror(\"getrlimit\"); return 2; }\n"
                     "  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > ((rlim_t)1 << 38)) rl.rlim_cur = (rlim_t)1 << 38;\n"
                     "  if (setrlimit(RLIMIT_AS, &rl) != 0) { perror(\"setrlimit\"); return 2; }\n");
  /* (NULL pointers would be refused first, with KG_ERR_ARG) */
  kg_strbuf_puts(&s, "  static float kg_one[64]; /* one float per argument: distinct (restrict) */\n");
  for (int i = 0; i < NCASES; i++)
    if (h[i].ok && cases[i].oom) {
      kg_strbuf_printf(&s, "  expect(%s(", h[i].fn[0]);
      for (int k = 0; k < h[i].spec.nparams; k++) kg_strbuf_printf(&s, "%skg_one + %d", k ? ", " : "", k);
      kg_strbuf_printf(&s, "), KG_ERR_OUT_OF_MEMORY, \"%s\");\n", h[i].fn[0]);
      put_null_call(&s, h[i].fn[0], &h[i], 0, NULL, "KG_ERR_ARG");
    }
  kg_strbuf_puts(&s, "  printf(\"driver: %d calls, %d failed\\n\", calls, fails);\n  return fails != 0;\n}\n");
  return kg_strbuf_take(&s);
}

/* The second translation unit: the headers without KG_IMPLEMENTATION, and a call of case 0's kernel. */
static char *driver_other(const hbuilt *h) {
  kg_strbuf s;
  kg_strbuf_init(&s);
  put_includes(&s, h);
  kg_strbuf_puts(&s, "int other_call(");
  kg_header_put_params(&s, &h[0].spec, 1);
  kg_strbuf_printf(&s, ");\nint other_call(");
  kg_header_put_params(&s, &h[0].spec, 1);
  kg_strbuf_printf(&s, ") {\n  return %s(", h[0].fn[0]);
  kg_header_put_params(&s, &h[0].spec, 0);
  kg_strbuf_puts(&s, ");\n}\n");
  return kg_strbuf_take(&s);
}

static int write_floats(const char *dir, const char *name, const float *p, int64_t n) {
  char *path = kg_compiler_join_path(dir, name);
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(p, sizeof(float), (size_t)n, f) == (size_t)n;
  if (f) ok &= fclose(f) == 0;
  free(path);
  return ok ? 0 : -1;
}

static int read_floats(const char *dir, const char *name, float *p, int64_t n) {
  char *path = kg_compiler_join_path(dir, name);
  FILE *f = fopen(path, "rb");
  int ok = f && fread(p, sizeof(float), (size_t)n, f) == (size_t)n;
  if (f) fclose(f);
  free(path);
  return ok ? 0 : -1;
}

/* The outputs of every verified call, compared with the reference. */
static void check_outputs(const char *dir, const char *lang, hbuilt *h) {
  for (int i = 0; i < NCASES; i++) {
    const hcase *c = &cases[i];
    if (!h[i].ok || c->oom) continue;
    for (int b = 0; b < c->nbind; b++) {
      const kg_program *p = h[i].p[b];
      for (int v = 0; v < (i == 0 ? 4 : 3); v++) {
        int rd = 0;
        for (int k = 0; k < p->noutputs; k++) {
          char name[64];
          snprintf(name, sizeof name, "out_%d_%d_%d_%d.bin", i, b, v, k);
          rd |= read_floats(dir, name, h[i].d[b].outputs[k], kg_tensor_numel(p->outputs[k]));
        }
        CHECKF(rd == 0, "%s: %s v%d: no output", lang, h[i].fn[b], v);
        kg_verify_result r = kg_verify(p, &h[i].d[b], 1e-4);
        CHECKF(r.ok, "%s: %s v%d: %s (max_rel_err %g)\ntrace:\n%s", lang, h[i].fn[b], v, r.msg, r.max_rel_err,
               h[i].trace_text[b]);
      }
    }
  }
}

static void test_driver(const char *dir, hbuilt *h) {
  if (!h[0].ok) return;
  for (int i = 0; i < NCASES; i++)
    for (int b = 0; h[i].ok && !cases[i].oom && b < cases[i].nbind; b++)
      for (int k = 0; k < h[i].p[b]->ninputs; k++) {
        char name[64];
        snprintf(name, sizeof name, "in_%d_%d_%d.bin", i, b, k);
        CHECK(write_floats(dir, name, h[i].d[b].inputs[k], kg_tensor_numel(h[i].p[b]->inputs[k])) == 0);
      }
  char *m = driver_main(h), *o = driver_other(h);
  CHECK(kg_compiler_write_file(dir, "main.c", m) == 0);
  CHECK(kg_compiler_write_file(dir, "other.c", o) == 0);
  free(m);
  free(o);
  jobs js = {0};
  job_add(&js, "driver (C)",
          "gcc " KG_KERNEL_CFLAGS " -Wall -Wextra -Werror main.c other.c -o driver_c -lm");
  job_add(&js, "driver (C++)", "g++ -Wall -Wextra -Werror -O2 -fopenmp -x c++ main.c other.c -o driver_cxx");
  jobs_run(&js, dir);
  jobs_check(&js);
  for (int l = 0; l < 2; l++) {
    if (js.j[l].rc != 0) continue;
    char *argv[] = {l ? "./driver_cxx" : "./driver_c", NULL}, *out = NULL;
    int rc = kg_compiler_run_command(argv, dir, &out);
    CHECKF(rc == 0 && out && strstr(out, " 0 failed"), "%s: exit %d\n%s", argv[0], rc, out ? out : "");
    free(out);
    if (rc == 0) check_outputs(dir, l ? "C++" : "C", h);
  }
  jobs_free(&js);
}

/* The spec is checked: a binding without its function is an error that names it. */
static void test_spec_errors(hbuilt *h) {
  if (!h[2].ok) return;
  kg_header_binding hb[MAX_BIND];
  memcpy(hb, h[2].hb, sizeof hb);
  hb[1].c_function = NULL;
  kg_header_spec s = h[2].spec;
  s.bindings = hb;
  char *out = NULL, err[512] = "";
  CHECK(kg_header_print(&s, &out, err, sizeof err) == -1 && out == NULL);
  CHECK_STR_CONTAINS(err, h[2].fn[1]);
  CHECK_STR_CONTAINS(err, "no C function");
}

int main(void) {
  hbuilt h[NCASES];
  for (int i = 0; i < NCASES; i++) build_case(&cases[i], &h[i], i);
  char *log = NULL;
  char *dir = kg_compiler_make_dir("kg_test_header_c_", &log);
  CHECKF(dir != NULL, "%s", log ? log : "?");
  free(log);
  for (int i = 0; dir && i < NCASES; i++) {
    if (!h[i].ok) continue;
    check_comment(&cases[i], &h[i]);
    CHECK(kg_compiler_write_file(dir, h[i].file, h[i].header) == 0);
  }
  test_spec_errors(h);
  if (dir) {
    test_compile_alone(dir, h);
    test_driver(dir, h);
    /* kept for a look when something failed, or when KG_TEST_KEEP is set */
    if (kg_test_failed || getenv("KG_TEST_KEEP")) printf("test_header_c: the headers and drivers are kept in %s\n", dir);
    else CHECK(nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0);
  }
  for (int i = 0; i < NCASES; i++) free_case(&cases[i], &h[i]);
  free(dir);
  TEST_END();
}
