/* Exported CUDA headers (codegen/header_cuda.c) built from real programs: library workloads at their `# sizes:`
 * under the default GPU schedule, the hand-written examples/schedules and random GPU schedules, printed with the
 * prefix "<function>_v<variant>", compiled by NVRTC for sm_86 and sm_90 and printed as headers. Then:
 * - every header compiles warning-free alone (gcc -std=c11, g++), all of them in one translation unit (gcc, g++,
 *   nvcc -x cu; nvcc skipped with a message when missing), and under KG_EMULATE without the emulation header it
 *   stops with its #error;
 * - the real path (gcc and g++, linked with -ldl) returns KG_ERR_NO_DRIVER cleanly from every call when libcuda
 *   cannot be loaded (KG_CUDA_LIBRARY pointing at nothing; the default library too on a machine without one), and
 *   its embedded cubins and PTX are byte for byte what NVRTC produced, the cubins 16-byte aligned;
 * - the real path against a fake driver library (built here; KG_CUDA_LIBRARY names it) for devices sm_90, sm_89
 *   and sm_80: the driver gets exactly the expected calls in order (primary context when none is current, the
 *   image the rule picks, each kernel's function and dynamic-shared opt-in, the temporaries allocated on the
 *   caller's stream, each launch with its shape, stream and arguments, the frees, the unloads);
 * - the emulated path (g++ with runtime/cuda_emu.h, several headers in one translation unit) runs every kernel on
 *   the inputs this test wrote and the outputs match the reference evaluator;
 * - a header with two size bindings of matmul, one of them with two variants (different schedules for sm_86 and
 *   sm_90), built for the emulated archs 86, 90, 89, 80 and 100: the variant chosen is the cubin's, then the PTX's
 *   of the highest arch not above the device's (89 runs the sm_86 variant, 100 the sm_90 one), then none (80:
 *   KG_ERR_NO_IMAGE); the dispatcher answers KG_ERR_NO_KERNEL for sizes the header does not hold;
 * - two kernel programs of the same index width pasted into one translation unit compile (the prelude's guard);
 * - kg_header_print refuses a variant whose kernels do not carry the function's name, and a parameter named
 *   like the header's own names.
 * Requires NVRTC and g++; the compilers run two at a time in a temporary folder, kept (and named) on failure. */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../base/strbuf.h"
#include "../codegen/header.h"
#include "../runtime/nvrtc.h"
#include "testlib.h"
#include "testutil.h"

#define MAX_VARIANTS 2
#define MAX_BINDINGS 2
#define MAX_ARCHS 2
#define MAX_PARAMS 8
#define DATA_SEED 11
#define NHEADERS 5 /* softmax, layernorm, attention, matmul, matvec */
#define MATMUL 3  /* the header with two bindings */

typedef struct variant {
  kg_cuda_program prog;
  kg_cubin cubins[MAX_ARCHS];
  kg_header_image images[MAX_ARCHS];
  int ncubins;
  char *trace; /* heap */
} variant;

typedef struct binding {
  kg_program *p;
  kg_data d;
  int64_t sizes[KG_TEST_MAX_BIND];
  char *fn;
  variant vars[MAX_VARIANTS];
  int nvars;
  kg_header_variant hv[MAX_VARIANTS];
} binding;

typedef struct header {
  const char *name; /* the def's name, also the file's: <name>.h */
  binding b[MAX_BINDINGS];
  int nb;
  kg_header_binding hb[MAX_BINDINGS];
  kg_header_spec spec;
  char *signature, *param_dims[MAX_PARAMS];
  const char *param_names[MAX_PARAMS], *size_names[KG_TEST_MAX_BIND];
  int param_is_input[MAX_PARAMS];
  char *text;
} header;

static char dir[64];

/* ---- building headers ---- */

/* Binding bi of h: te/lib/<name>.te at its `# sizes:`, with overrides "NAME=VALUE ..." (may be NULL). */
static int add_binding(header *h, const char *over) {
  char path[256];
  snprintf(path, sizeof path, "te/lib/%s.te", h->name);
  char *text = kg_test_read_file(path, NULL);
  CHECKF(text != NULL, "cannot read %s", path);
  if (!text) return -1;
  kg_binding b[KG_TEST_MAX_BIND], ob[KG_TEST_MAX_BIND];
  char names[KG_TEST_MAX_BIND][32], onames[KG_TEST_MAX_BIND][32];
  int nb = kg_test_parse_sizes(text, b, names, 1);
  int no = over ? kg_test_parse_bindings(over, ob, onames, 1) : 0;
  for (int o = 0; o < no; o++)
    for (int k = 0; k < nb; k++)
      if (!strcmp(b[k].name, ob[o].name)) b[k].value = ob[o].value;
  binding *bd = &h->b[h->nb];
  memset(bd, 0, sizeof *bd);
  bd->p = kg_test_load(text, b, nb < 0 ? 0 : nb);
  free(text);
  CHECKF(bd->p != NULL, "%s does not load", path);
  if (!bd->p) return -1;
  kg_data_init(&bd->d, bd->p, DATA_SEED);
  kg_data_reference(&bd->d, bd->p, DATA_SEED);
  for (int k = 0; k < bd->p->nsizes; k++) bd->sizes[k] = bd->p->sizes[k].value;
  h->nb++;
  return 0;
}

/* The spec of h (filled again after every change: it points into h). */
static void fill_spec(header *h) {
  const kg_program *p = h->b[0].p;
  kg_header_spec *s = &h->spec;
  memset(s, 0, sizeof *s);
  s->name = h->name;
  s->prefix = "kg_";
  s->target = KG_TARGET_CUDA;
  if (!h->signature) {
    kg_strbuf sig;
    kg_strbuf_init(&sig);
    kg_strbuf_printf(&sig, "def %s(", h->name);
    for (int i = 0; i < p->ninputs + p->noutputs; i++) {
      const kg_tensor *t = i < p->ninputs ? p->inputs[i] : p->outputs[i - p->ninputs];
      kg_strbuf d;
      kg_strbuf_init(&d);
      for (int k = 0; k < t->ndim; k++) kg_strbuf_printf(&d, "[%lld]", (long long)t->shape[k]);
      h->param_dims[i] = kg_strbuf_take(&d);
      h->param_names[i] = t->name;
      h->param_is_input[i] = i < p->ninputs;
      kg_strbuf_printf(&sig, "%s%s: f32%s", i == p->ninputs ? ") -> (" : i ? ", " : "", t->name, h->param_dims[i]);
    }
    kg_strbuf_puts(&sig, ")");
    h->signature = kg_strbuf_take(&sig);
    for (int k = 0; k < p->nsizes; k++) h->size_names[k] = p->sizes[k].name;
  }
  s->signature = h->signature;
  s->nparams = p->ninputs + p->noutputs;
  s->param_names = h->param_names;
  s->param_is_input = h->param_is_input;
  s->param_dims = (const char *const *)h->param_dims;
  s->nsizes = p->nsizes;
  s->size_names = h->size_names;
  s->kgen_version = "test";
  for (int i = 0; i < h->nb; i++) {
    kg_header_binding *hb = &h->hb[i];
    memset(hb, 0, sizeof *hb);
    hb->size_values = h->b[i].sizes;
    hb->variants = h->b[i].hv;
    hb->nvariants = h->b[i].nvars;
  }
  s->bindings = h->hb;
  s->nbindings = h->nb;
}

/* A variant of binding bi: the schedule "default", "random" (the first seed from 1 that prints), "trace:<text>" or
 * a file of examples/schedules, printed as <fn>_v<index>, compiled by NVRTC for each arch; its PTX is the first
 * arch's. */
static int add_variant(header *h, int bi, const char *sched, const char *const *archs, int narchs) {
  binding *bd = &h->b[bi];
  fill_spec(h);
  if (!bd->fn) bd->fn = kg_header_fn_name(&h->spec, bi);
  variant *v = &bd->vars[bd->nvars];
  memset(v, 0, sizeof *v);
  char prefix[300], err[2048] = "";
  snprintf(prefix, sizeof prefix, "%s_v%d", bd->fn, bd->nvars);
  int printed = 0;
  for (int seed = 1; seed <= (strcmp(sched, "random") ? 1 : 50) && !printed; seed++) {
    kg_schedule *s = kg_schedule_new(bd->p);
    int ok = 1;
    if (!strcmp(sched, "default")) {
      kg_schedule_gpu_default(s, 64);
    } else if (!strcmp(sched, "random")) {
      kg_schedule_random(s, (uint64_t)seed * 7919 + (uint64_t)bi, KG_TARGET_CUDA, KG_TEST_CUDA_STEPS);
    } else if (!strncmp(sched, "trace:", 6)) {
      kg_trace t;
      kg_trace_init(&t);
      ok = kg_trace_parse(&t, "trace", sched + 6, strlen(sched + 6), err, sizeof err) == 0 &&
           kg_schedule_apply_trace(s, &t, err, sizeof err) == 0;
      kg_trace_free(&t);
    } else {
      char path[256];
      snprintf(path, sizeof path, "examples/schedules/%s.sched", sched);
      size_t len = 0;
      char *text = kg_test_read_file(path, &len);
      kg_trace t;
      kg_trace_init(&t);
      ok = text && kg_trace_parse(&t, path, text, len, err, sizeof err) == 0 &&
           kg_schedule_apply_trace(s, &t, err, sizeof err) == 0;
      kg_trace_free(&t);
      free(text);
    }
    kg_arena la;
    kg_arena_init(&la);
    kg_lowered *f = ok ? kg_lower(s, KG_TARGET_CUDA, &la, err, sizeof err) : NULL;
    printed = f && kg_codegen_cuda(f, prefix, &v->prog, err, sizeof err) == 0;
    if (printed) v->trace = kg_trace_to_text(&s->trace);
    /* the emulator runs every thread of every block: keep random draws to modest blocks */
    for (int k = 0; printed && !strcmp(sched, "random") && k < v->prog.nkernels; k++)
      if (v->prog.kernels[k].block[0] * v->prog.kernels[k].block[1] * v->prog.kernels[k].block[2] > 256) {
        kg_cuda_program_free(&v->prog);
        free(v->trace);
        v->trace = NULL;
        printed = 0;
      }
    kg_arena_free(&la);
    kg_schedule_free(s);
  }
  CHECKF(printed, "%s: schedule %s does not print: %s", bd->fn, sched, err);
  if (!printed) return -1;
  for (int a = 0; a < narchs; a++) {
    int rc = kg_nvrtc_compile(&v->prog, archs[a], &v->cubins[a]);
    CHECKF(rc == 0, "%s: NVRTC %s: %s", prefix, archs[a], v->cubins[a].log ? v->cubins[a].log : "?");
    if (rc != 0) {
      for (int c = 0; c <= a; c++) kg_cubin_free(&v->cubins[c]);
      kg_cuda_program_free(&v->prog);
      free(v->trace);
      return -1;
    }
    v->images[a] = (kg_header_image){.arch = v->cubins[a].arch, .data = v->cubins[a].cubin, .size = v->cubins[a].cubin_size};
  }
  v->ncubins = narchs;
  kg_header_variant *hv = &bd->hv[bd->nvars];
  memset(hv, 0, sizeof *hv);
  hv->prog = &v->prog;
  hv->cubins = v->images;
  hv->ncubins = narchs;
  hv->ptx = v->cubins[0].ptx;
  hv->ptx_arch = v->cubins[0].arch;
  hv->origin.record = "no record: a test schedule";
  hv->origin.trace_text = v->trace;
  bd->nvars++;
  return 0;
}

static char *path_in(const char *name) {
  char *p = malloc(strlen(dir) + strlen(name) + 2);
  sprintf(p, "%s/%s", dir, name);
  return p;
}

static int write_file(const char *name, const void *data, size_t n) {
  char *p = path_in(name);
  FILE *f = fopen(p, "wb");
  int ok = f && fwrite(data, 1, n, f) == n;
  if (f) ok &= fclose(f) == 0;
  CHECKF(ok, "cannot write %s", p);
  free(p);
  return ok ? 0 : -1;
}

/* Prints h's header into <dir>/<name>.h (file), and the inputs of its bindings (in_<fn>_<k>.bin). */
static int print_header(header *h, const char *file) {
  fill_spec(h);
  char err[1024];
  int rc = kg_header_print(&h->spec, &h->text, err, sizeof err);
  CHECKF(rc == 0, "%s: kg_header_print: %s", h->name, err);
  if (rc != 0) return -1;
  CHECK_STR_CONTAINS(h->text, "#ifdef KG_IMPLEMENTATION");
  CHECK_STR_CONTAINS(h->text, "namespace ");
  for (int i = 0; i < h->nb; i++) {
    binding *bd = &h->b[i];
    for (int v = 0; v < bd->nvars; v++) {
      char want[400];
      snprintf(want, sizeof want, "static const unsigned char %s_v%d_ptx[] = {", bd->fn, v);
      CHECK_STR_CONTAINS(h->text, want);
      snprintf(want, sizeof want, "KG_CUDA_ALIGN16 static const unsigned char %s_v%d_cubin_%s[]", bd->fn, v,
               bd->vars[v].cubins[0].arch);
      CHECK_STR_CONTAINS(h->text, want);
      CHECK_STR_CONTAINS(h->text, bd->vars[v].prog.kernels[0].name);
    }
    const kg_program *p = bd->p;
    for (int k = 0; k < p->ninputs; k++) {
      char name[400];
      snprintf(name, sizeof name, "in_%s_%d.bin", bd->fn, k);
      if (write_file(name, bd->d.inputs[k], sizeof(float) * (size_t)kg_tensor_numel(p->inputs[k]))) return -1;
    }
  }
  return write_file(file, h->text, strlen(h->text));
}

static void free_header(header *h) {
  for (int i = 0; i < h->nb; i++) {
    binding *bd = &h->b[i];
    for (int v = 0; v < bd->nvars; v++) {
      for (int c = 0; c < bd->vars[v].ncubins; c++) kg_cubin_free(&bd->vars[v].cubins[c]);
      kg_cuda_program_free(&bd->vars[v].prog);
      free(bd->vars[v].trace);
    }
    kg_data_free(&bd->d);
    kg_program_free(bd->p);
    free(bd->fn);
  }
  for (int i = 0; i < MAX_PARAMS; i++) free(h->param_dims[i]);
  free(h->signature);
  free(h->text);
}

/* ---- the generated programs ---- */

/* The emulated test program over headers hs: per binding, the kernel through kg_<name> (the dispatcher when there
 * are several), on the inputs from <dir>, its outputs written to <argv[1]>; prints "load NAME RC", "call FN RC
 * VARIANT" and "nokernel NAME RC" (the dispatcher asked for sizes it does not hold). */
static void put_emu_program(kg_strbuf *b, header *const *hs, int nh) {
  kg_strbuf_puts(b, "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n");
  for (int i = 0; i < nh; i++) kg_strbuf_printf(b, "#include \"%s.h\"\n", hs[i]->name);
  kg_strbuf_printf(b,
                   "static float *in(const char *name, size_t n) {\n"
                   "  char path[1024];\n"
                   "  snprintf(path, sizeof path, \"%s/%%s\", name);\n"
                   "  FILE *f = fopen(path, \"rb\");\n"
                   "  float *p = (float *)malloc(n * sizeof(float));\n"
                   "  if (!f || fread(p, sizeof(float), n, f) != n) { fprintf(stderr, \"cannot read %%s\\n\", path); exit(2); }\n"
                   "  fclose(f);\n"
                   "  return p;\n"
                   "}\n"
                   "static float *out(size_t n) {\n"
                   "  float *p = (float *)malloc(n * sizeof(float));\n"
                   "  memset(p, 0xff, n * sizeof(float)); /* NaN: an unwritten element fails */\n"
                   "  return p;\n"
                   "}\n"
                   "static void save(const char *outdir, const char *name, const float *p, size_t n) {\n"
                   "  char path[1024];\n"
                   "  snprintf(path, sizeof path, \"%%s/%%s\", outdir, name);\n"
                   "  FILE *f = fopen(path, \"wb\");\n"
                   "  if (!f || fwrite(p, sizeof(float), n, f) != n || fclose(f) != 0) { fprintf(stderr, \"cannot write %%s\\n\", path); exit(2); }\n"
                   "}\n"
                   "int main(int argc, char **argv) {\n"
                   "  if (argc != 2) return 2;\n",
                   dir);
  for (int i = 0; i < nh; i++) {
    const header *h = hs[i];
    kg_strbuf_printf(b, "  printf(\"load %s %%d\\n\", kg_%s_load());\n", h->name, h->name);
    for (int j = 0; j < h->nb; j++) {
      const binding *bd = &h->b[j];
      const kg_program *p = bd->p;
      int np = p->ninputs + p->noutputs;
      kg_strbuf_puts(b, "  {\n");
      for (int k = 0; k < np; k++) {
        const kg_tensor *t = k < p->ninputs ? p->inputs[k] : p->outputs[k - p->ninputs];
        if (k < p->ninputs)
          kg_strbuf_printf(b, "    float *a%d = in(\"in_%s_%d.bin\", %lld);\n", k, bd->fn, k, (long long)kg_tensor_numel(t));
        else
          kg_strbuf_printf(b, "    float *a%d = out(%lld);\n", k, (long long)kg_tensor_numel(t));
      }
      kg_strbuf_printf(b, "    int rc = kg_%s(0, ", h->name);
      for (int k = 0; h->nb > 1 && k < p->nsizes; k++) kg_strbuf_printf(b, "%lld, ", (long long)bd->sizes[k]);
      for (int k = 0; k < np; k++) kg_strbuf_printf(b, "%sa%d", k ? ", " : "", k);
      kg_strbuf_printf(b, ");\n    printf(\"call %s %%d %%d\\n\", rc, %s_variant());\n", bd->fn, bd->fn);
      for (int k = p->ninputs; k < np; k++)
        kg_strbuf_printf(b, "    if (rc == 0) save(argv[1], \"out_%s_%d.bin\", a%d, %lld);\n", bd->fn, k - p->ninputs, k,
                         (long long)kg_tensor_numel(p->outputs[k - p->ninputs]));
      for (int k = 0; k < np; k++) kg_strbuf_printf(b, "    free(a%d);\n", k);
      kg_strbuf_puts(b, "  }\n");
    }
    /* sizes one larger than the first binding's: no kernel */
    kg_strbuf_printf(b, "  printf(\"nokernel %s %%d\\n\", kg_%s_dispatch(0, ", h->name, h->name);
    for (int k = 0; k < h->b[0].p->nsizes; k++) kg_strbuf_printf(b, "%lld, ", (long long)h->b[0].sizes[k] + 1);
    for (int k = 0; k < h->spec.nparams; k++) kg_strbuf_printf(b, "%sNULL", k ? ", " : "");
    kg_strbuf_printf(b, "));\n  kg_%s_unload();\n", h->name);
  }
  kg_strbuf_puts(b, "  return 0;\n}\n");
}

/* The real path, in two files: main.c (declarations only) calls every public function with NULL pointers and
 * prints "call FN RC", "load NAME RC", "variant FN V", "nokernel NAME RC"; impl.c (KG_IMPLEMENTATION) defines them
 * and dumps every embedded image into <argv[1]>/<symbol> with a line "image SYMBOL SIZE ALIGNED". */
static void put_real_programs(kg_strbuf *m, kg_strbuf *im, header *const *hs, int nh) {
  kg_strbuf_puts(m, "#include <stdio.h>\n#include <string.h>\n");
  kg_strbuf_puts(im, "#include <stdint.h>\n#include <stdio.h>\n");
  for (int i = 0; i < nh; i++) {
    kg_strbuf_printf(m, "#include \"%s.h\"\n", hs[i]->name);
    kg_strbuf_printf(im, "#include \"%s.h\"\n", hs[i]->name);
  }
  kg_strbuf_puts(im, "void kg_test_dump(const char *outdir);\n"
                     "static void dump(const char *outdir, const char *name, const void *p, size_t n) {\n"
                     "  char path[1024];\n"
                     "  snprintf(path, sizeof path, \"%s/%s\", outdir, name);\n"
                     "  FILE *f = fopen(path, \"wb\");\n"
                     "  if (f) {\n"
                     "    fwrite(p, 1, n, f);\n"
                     "    fclose(f);\n"
                     "  }\n"
                     "  printf(\"image %s %zu %d\\n\", name, n, (int)((uintptr_t)p % 16 == 0));\n"
                     "}\n"
                     "void kg_test_dump(const char *outdir) {\n");
  kg_strbuf_puts(m, "void kg_test_dump(const char *outdir);\nint main(int argc, char **argv) {\n  if (argc != 2) return 2;\n");
  for (int i = 0; i < nh; i++) {
    const header *h = hs[i];
    for (int j = 0; j < h->nb; j++) {
      const binding *bd = &h->b[j];
      kg_strbuf_printf(m, "  printf(\"call %s %%d\\n\", %s(0, ", bd->fn, bd->fn);
      for (int k = 0; k < h->spec.nparams; k++) kg_strbuf_printf(m, "%sNULL", k ? ", " : "");
      kg_strbuf_printf(m, "));\n  printf(\"variant %s %%d\\n\", %s_variant());\n", bd->fn, bd->fn);
      for (int v = 0; v < bd->nvars; v++) {
        for (int c = 0; c < bd->vars[v].ncubins; c++)
          kg_strbuf_printf(im, "  dump(outdir, \"%s_v%d_cubin_%s\", %s_v%d_cubin_%s, sizeof %s_v%d_cubin_%s);\n", bd->fn,
                           v, bd->vars[v].cubins[c].arch, bd->fn, v, bd->vars[v].cubins[c].arch, bd->fn, v,
                           bd->vars[v].cubins[c].arch);
        kg_strbuf_printf(im, "  dump(outdir, \"%s_v%d_ptx\", %s_v%d_ptx, sizeof %s_v%d_ptx - 1);\n", bd->fn, v, bd->fn, v,
                         bd->fn, v);
      }
    }
    kg_strbuf_printf(m, "  printf(\"load %s %%d\\n\", kg_%s_load());\n", h->name, h->name);
    kg_strbuf_printf(m, "  printf(\"nokernel %s %%d\\n\", kg_%s_dispatch(0, ", h->name, h->name);
    for (int k = 0; k < h->b[0].p->nsizes; k++) kg_strbuf_printf(m, "%lld, ", (long long)h->b[0].sizes[k] + 1);
    for (int k = 0; k < h->spec.nparams; k++) kg_strbuf_printf(m, "%sNULL", k ? ", " : "");
    kg_strbuf_printf(m, "));\n  kg_%s_unload();\n", h->name);
  }
  kg_strbuf_puts(m, "  printf(\"strerror %d\\n\", strcmp(kg_cuda_strerror(KG_ERR_NO_DRIVER), kg_strerror(KG_ERR_NO_DRIVER)) == 0);\n"
                    "  kg_test_dump(argv[1]);\n  return 0;\n}\n");
  kg_strbuf_puts(im, "}\n");
}

/* ---- running commands ---- */

typedef struct job {
  char cmd[4096];
  char log[128]; /* file name in dir */
  int rc;
} job;

/* Runs the jobs (sh -c, output into their logs), at most par at once; fills each rc (exit status, or 128 + the
 * signal). */
static void run_jobs(job *jobs, int n, int par) {
  pid_t pids[16] = {0};
  int slot_job[16];
  int next = 0, running = 0;
  if (par > 16) par = 16;
  while (next < n || running > 0) {
    while (next < n && running < par) {
      int slot = 0;
      while (pids[slot]) slot++;
      char *log = path_in(jobs[next].log);
      fflush(NULL);
      pid_t pid = fork();
      if (pid == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (!f || dup2(1, 2) < 0) _exit(127);
        execl("/bin/sh", "sh", "-c", jobs[next].cmd, (char *)NULL);
        _exit(127);
      }
      free(log);
      CHECKF(pid > 0, "fork: %s", strerror(errno));
      if (pid < 0) {
        jobs[next++].rc = -1;
        continue;
      }
      pids[slot] = pid;
      slot_job[slot] = next++;
      running++;
    }
    int st = 0;
    pid_t pid = wait(&st);
    if (pid < 0) break;
    for (int s = 0; s < par; s++)
      if (pids[s] == pid) {
        jobs[slot_job[s]].rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        pids[s] = 0;
        running--;
      }
  }
}

static char *read_log(const job *j) {
  char *p = path_in(j->log);
  char *text = kg_test_read_file(p, NULL);
  free(p);
  return text ? text : strdup("(no log)");
}

/* CHECKs that j succeeded with an empty log (no warning). */
static void check_clean(const job *j) {
  char *log = read_log(j);
  CHECKF(j->rc == 0 && !log[0], "%s: exit %d:\n%s", j->cmd, j->rc, log);
  free(log);
}

/* The integer after "<what> <name> " in a program's output (the n-th number when several); INT32_MIN when
 * missing. */
static int find_value(const char *out, const char *what, const char *name, int n) {
  char key[512];
  snprintf(key, sizeof key, "%s %s ", what, name);
  for (const char *p = out; (p = strstr(p, key)); p++) {
    if (p != out && p[-1] != '\n') continue;
    p += strlen(key);
    long v = 0;
    for (int i = 0; i <= n; i++) {
      char *end;
      v = strtol(p, &end, 10);
      if (end == p) return INT32_MIN;
      p = end;
    }
    return (int)v;
  }
  return INT32_MIN;
}

/* Reads the outputs an emulated run wrote into outdir and verifies them against the reference. */
static void verify_outputs(binding *bd, const char *outdir, const char *what) {
  const kg_program *p = bd->p;
  kg_data_poison(&bd->d, p);
  for (int k = 0; k < p->noutputs; k++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/out_%s_%d.bin", outdir, bd->fn, k);
    size_t n = (size_t)kg_tensor_numel(p->outputs[k]), len = 0;
    char *data = kg_test_read_file(path, &len);
    CHECKF(data && len == n * sizeof(float), "%s: %s: missing or %zu bytes", what, path, len);
    if (data && len == n * sizeof(float)) memcpy(bd->d.outputs[k], data, len);
    free(data);
  }
  kg_verify_result v = kg_verify(p, &bd->d, 1e-4);
  CHECKF(v.ok, "%s: %s: %s (max_rel_err %g)", what, bd->fn, v.msg, v.max_rel_err);
  if (v.ok) printf("%-10s %-40s verified (max_rel_err %.2g)\n", what, bd->fn, v.max_rel_err);
}

/* ---- the checks ---- */

/* matvec with x staged in shared memory per block: 64 KB at K=16384, so dynamic shared memory with the opt-in. */
#define MATVEC_DYNAMIC                                                                                               \
  "cache_read x shared y\nsplit y i 32\nbind y i.o blockIdx.x\nbind y i.i threadIdx.x\ncompute_at x.shared y i.o\n"  \
  "split x.shared ax0 32\nbind x.shared ax0.i threadIdx.x\n"

static const char *const ARCHS[] = {"sm_86", "sm_90"};
static const char *const SM86[] = {"sm_86"};
static const char *const SM90[] = {"sm_90"};

/* The headers: softmax, layernorm (examples/schedules), attention (random), matmul with two bindings, the first
 * with a default-schedule variant for sm_86 and a tiled one for sm_90, and matvec with 64 KB of dynamic shared
 * memory. 0 when every one was built. */
static int build_headers(header *hs) {
  int ok = 1;
  hs[0].name = "softmax";
  ok &= add_binding(&hs[0], NULL) == 0 && add_variant(&hs[0], 0, "softmax_cross_thread", ARCHS, 2) == 0;
  hs[1].name = "layernorm";
  ok &= add_binding(&hs[1], NULL) == 0 && add_variant(&hs[1], 0, "layernorm_fused", ARCHS, 2) == 0;
  hs[2].name = "attention";
  ok &= add_binding(&hs[2], NULL) == 0 && add_variant(&hs[2], 0, "random", ARCHS, 2) == 0;
  hs[3].name = "matmul";
  ok &= add_binding(&hs[3], NULL) == 0 && add_variant(&hs[3], 0, "default", SM86, 1) == 0 &&
        add_variant(&hs[3], 0, "matmul_shared", SM90, 1) == 0;
  ok &= add_binding(&hs[3], "M=16 N=24 K=8") == 0 && add_variant(&hs[3], 1, "random", ARCHS, 2) == 0;
  hs[4].name = "matvec";
  ok &= add_binding(&hs[4], "M=40 K=16384") == 0 && add_variant(&hs[4], 0, "trace:" MATVEC_DYNAMIC, ARCHS, 2) == 0;
  for (int i = 0; i < NHEADERS && ok; i++) {
    char file[64];
    snprintf(file, sizeof file, "%s.h", hs[i].name);
    ok &= print_header(&hs[i], file) == 0;
  }
  return ok ? 0 : -1;
}

/* Two programs of the same index width (the first variants of softmax and layernorm) pasted into one emulated
 * translation unit: the prelude's guard keeps its definitions single. */
static void write_pasted(const header *hs) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_strbuf_puts(&b, hs[0].b[0].vars[0].prog.source);
  kg_strbuf_puts(&b, hs[1].b[0].vars[0].prog.source);
  CHECK_STR_CONTAINS(hs[0].b[0].vars[0].prog.source, "#ifndef KG_CUDA_PRELUDE\n#define KG_CUDA_PRELUDE\ntypedef int kg_idx;");
  write_file("pasted.cu", b.s, b.len);
  kg_strbuf_free(&b);
}

/* What kg_header_print refuses: a variant printed with another prefix (its kernels could collide with another
 * header's) and a parameter named like the header's own names. */
static void check_refusals(header *h) {
  kg_cuda_program saved = h->b[0].vars[0].prog, other;
  kg_arena la;
  kg_arena_init(&la);
  kg_schedule *s = kg_schedule_new(h->b[0].p);
  kg_schedule_gpu_default(s, 64);
  char err[1024];
  kg_lowered *f = kg_lower(s, KG_TARGET_CUDA, &la, err, sizeof err);
  int printed = f && kg_codegen_cuda(f, "kgen", &other, err, sizeof err) == 0;
  CHECKF(printed, "%s", err);
  if (printed) {
    h->b[0].vars[0].prog = other;
    fill_spec(h);
    char *text = NULL;
    int rc = kg_header_print(&h->spec, &text, err, sizeof err);
    CHECKF(rc == -1 && !text, "a variant named kgen_k0 was accepted");
    CHECK_STR_CONTAINS(err, "print the program with that prefix");
    h->b[0].vars[0].prog = saved;
    kg_cuda_program_free(&other);
    fill_spec(h);
  }
  const char *name = h->param_names[0];
  h->param_names[0] = "kg_params";
  char *text = NULL;
  int rc = kg_header_print(&h->spec, &text, err, sizeof err);
  CHECKF(rc == -1 && !text, "a parameter named kg_params was accepted");
  CHECK_STR_CONTAINS(err, "names starting with kg_ are the CUDA header's");
  h->param_names[0] = name;
  kg_arena_free(&la);
  kg_schedule_free(s);
}

static void check_real(const header *hs, const job *run, int nolib, int driver_present) {
  char *out = read_log(run);
  const char *what = run->log;
  CHECKF(run->rc == 0, "%s: exit %d:\n%s", run->cmd, run->rc, out);
  if (!nolib && driver_present) {
    printf("%s: a CUDA driver loads on this machine: the no-driver answers are checked with KG_CUDA_LIBRARY only\n", what);
    free(out);
    return;
  }
  for (int i = 0; i < NHEADERS; i++) {
    const header *h = &hs[i];
    for (int j = 0; j < h->nb; j++) {
      /* NULL pointers: refused before the driver is looked for */
      CHECKF(find_value(out, "call", h->b[j].fn, 0) == -6, "%s: %s: not KG_ERR_ARG:\n%s", what, h->b[j].fn, out);
      CHECKF(find_value(out, "variant", h->b[j].fn, 0) == -1, "%s: %s_variant:\n%s", what, h->b[j].fn, out);
    }
    CHECKF(find_value(out, "load", h->name, 0) == -3, "%s: kg_%s_load:\n%s", what, h->name, out);
    CHECKF(find_value(out, "nokernel", h->name, 0) == -1, "%s: kg_%s_dispatch:\n%s", what, h->name, out);
  }
  CHECKF(strstr(out, "\nstrerror 1\n") != NULL, "%s: kg_cuda_strerror:\n%s", what, out);
  free(out);
}

/* The images impl.c dumped are NVRTC's, and the cubins are 16-byte aligned. */
static void check_images(const header *hs, const job *run, const char *outdir) {
  char *out = read_log(run);
  for (int i = 0; i < NHEADERS; i++)
    for (int j = 0; j < hs[i].nb; j++) {
      const binding *bd = &hs[i].b[j];
      for (int v = 0; v < bd->nvars; v++)
        for (int c = 0; c <= bd->vars[v].ncubins; c++) {
          const kg_cubin *cb = &bd->vars[v].cubins[c < bd->vars[v].ncubins ? c : 0];
          int is_ptx = c == bd->vars[v].ncubins;
          char sym[400], path[1024];
          if (is_ptx) snprintf(sym, sizeof sym, "%s_v%d_ptx", bd->fn, v);
          else snprintf(sym, sizeof sym, "%s_v%d_cubin_%s", bd->fn, v, cb->arch);
          snprintf(path, sizeof path, "%s/%s", outdir, sym);
          const void *want = is_ptx ? (const void *)cb->ptx : cb->cubin;
          size_t want_len = is_ptx ? strlen(cb->ptx) : cb->cubin_size, len = 0;
          char *got = kg_test_read_file(path, &len);
          CHECKF(got && len == want_len && !memcmp(got, want, len), "%s: %s differs from NVRTC's (%zu bytes, %zu wanted)",
                 run->log, sym, len, want_len);
          free(got);
          if (!is_ptx) CHECKF(find_value(out, "image", sym, 1) == 1, "%s: %s is not 16-byte aligned:\n%s", run->log, sym, out);
        }
    }
  free(out);
}

#define NSMS 5
#define NFAKE 3 /* fake-driver runs: sm_90, sm_89, sm_80 */
/* The emulated archs the two-binding matmul is built for, and the variant each binding must run: binding 0 has v0
 * (sm_86) and v1 (sm_90), binding 1 one variant for sm_86 and sm_90 (PTX sm_86); 89 and 100 take the PTX of the
 * highest arch not above theirs, 80 has none. */
static const int sms[NSMS] = {86, 90, 89, 80, 100};
static const int want_variant[2][NSMS] = {{0, 1, 0, -1, 1}, {0, 0, 0, -1, 0}};

/* ---- the real path against a fake driver ---- */

/* A driver library that answers what the headers call and logs each call that matters to $KG_FAKE_LOG: the
 * device's compute capability is $KG_FAKE_SM; no context is current at first; images are told apart by their
 * length (a cubin's from its ELF header) and an FNV-1a hash; the argument count of each kernel comes from
 * $KG_FAKE_KERNELS ("name count" lines). */
static const char FAKE_DRIVER[] =
    "#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
    "static FILE *out;\nstatic void *current;\nstatic int nloads;\n"
    "static unsigned long long next_addr = 0x10000000ull;\n"
    "static char names[256][128];\nstatic int nargs[256], nnames;\n"
    "static unsigned long long fnv(const unsigned char *p, size_t n) {\n"
    "  unsigned long long h = 1469598103934665603ull;\n"
    "  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;\n"
    "  return h;\n}\n"
    "int cuInit(unsigned flags) {\n"
    "  out = fopen(getenv(\"KG_FAKE_LOG\"), \"w\");\n"
    "  FILE *k = fopen(getenv(\"KG_FAKE_KERNELS\"), \"r\");\n"
    "  if (!out || !k) return 999;\n"
    "  while (nnames < 256 && fscanf(k, \"%127s %d\", names[nnames], &nargs[nnames]) == 2) nnames++;\n"
    "  fclose(k);\n"
    "  setvbuf(out, NULL, _IOLBF, 0);\n"
    "  fprintf(out, \"init %u\\n\", flags);\n"
    "  return 0;\n}\n"
    "int cuCtxGetCurrent(void **c) { *c = current; return 0; }\n"
    "int cuCtxSetCurrent(void *c) { current = c; fprintf(out, \"set_current\\n\"); return 0; }\n"
    "int cuCtxGetDevice(int *d) { *d = 0; return 0; }\n"
    "int cuDeviceGet(int *d, int ordinal) { *d = ordinal; return 0; }\n"
    "int cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)0x5000; fprintf(out, \"retain %d\\n\", d); return 0; }\n"
    "int cuDeviceGetAttribute(int *v, int attr, int dev) {\n"
    "  int sm = atoi(getenv(\"KG_FAKE_SM\"));\n"
    "  if (dev != 0 || (attr != 75 && attr != 76)) return 1;\n"
    "  *v = attr == 75 ? sm / 10 : sm % 10;\n"
    "  return 0;\n}\n"
    "int cuModuleLoadData(void **m, const void *image) {\n"
    "  const unsigned char *p = (const unsigned char *)image;\n"
    "  if (!memcmp(p, \"\\177ELF\", 4)) {\n"
    "    unsigned long long shoff, phoff;\n"
    "    unsigned short ph[4];\n"
    "    memcpy(&phoff, p + 0x20, 8);\n"
    "    memcpy(&shoff, p + 0x28, 8);\n"
    "    memcpy(ph, p + 0x36, 8);\n"
    "    unsigned long long a = phoff + (unsigned long long)ph[0] * ph[1], b = shoff + (unsigned long long)ph[2] * ph[3];\n"
    "    size_t n = (size_t)(a > b ? a : b);\n"
    "    fprintf(out, \"load cubin %zu %llx\\n\", n, fnv(p, n));\n"
    "  } else {\n"
    "    fprintf(out, \"load ptx %zu %llx\\n\", strlen((const char *)p), fnv(p, strlen((const char *)p)));\n"
    "  }\n"
    "  *m = (void *)(uintptr_t)(0x7000 + ++nloads);\n"
    "  return 0;\n}\n"
    "int cuModuleGetFunction(void **f, void *m, const char *name) {\n"
    "  (void)m;\n"
    "  for (int i = 0; i < nnames; i++)\n"
    "    if (!strcmp(names[i], name)) {\n"
    "      *f = (void *)(uintptr_t)(i + 1);\n"
    "      fprintf(out, \"function %s\\n\", name);\n"
    "      return 0;\n"
    "    }\n"
    "  return 500; /* CUDA_ERROR_NOT_FOUND */\n}\n"
    "int cuModuleUnload(void *m) { fprintf(out, \"unload %d\\n\", (int)((uintptr_t)m - 0x7000)); return 0; }\n"
    "int cuFuncSetAttribute(void *f, int attr, int v) {\n"
    "  fprintf(out, \"attribute %s %d %d\\n\", names[(uintptr_t)f - 1], attr, v);\n"
    "  return 0;\n}\n"
    "int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,\n"
    "                   unsigned shared, void *stream, void **params, void **extra) {\n"
    "  int k = (int)((uintptr_t)f - 1);\n"
    "  fprintf(out, \"launch %s %u %u %u %u %u %u %u %lu\", names[k], gx, gy, gz, bx, by, bz, shared,\n"
    "          (unsigned long)(uintptr_t)stream);\n"
    "  for (int i = 0; i < nargs[k]; i++) {\n"
    "    unsigned long long v;\n"
    "    memcpy(&v, params[i], sizeof v);\n"
    "    fprintf(out, \" %llx\", v);\n"
    "  }\n"
    "  fprintf(out, \"%s\\n\", extra ? \" extra\" : \"\");\n"
    "  return 0;\n}\n"
    "int cuMemAllocAsync(unsigned long long *p, size_t bytes, void *stream) {\n"
    "  *p = next_addr;\n"
    "  next_addr += 0x100000;\n"
    "  fprintf(out, \"alloc %zu %lu %llx\\n\", bytes, (unsigned long)(uintptr_t)stream, *p);\n"
    "  return 0;\n}\n"
    "int cuMemFreeAsync(unsigned long long p, void *stream) {\n"
    "  fprintf(out, \"free %llx %lu\\n\", p, (unsigned long)(uintptr_t)stream);\n"
    "  return 0;\n}\n";

#define FAKE_STREAM 0x77

/* The program the fake driver runs: every binding called with the pointers 0x1000, 0x2000, ... on the stream
 * 0x77 ("call FN RC VARIANT"), then each header's _load ("load NAME RC") and _unload. */
static void put_fake_program(kg_strbuf *b, header *const *hs, int nh) {
  kg_strbuf_puts(b, "#include <stdint.h>\n#include <stdio.h>\n");
  for (int i = 0; i < nh; i++) kg_strbuf_printf(b, "#include \"%s.h\"\n", hs[i]->name);
  kg_strbuf_printf(b, "int main(void) {\n  CUstream s = (CUstream)(uintptr_t)%d;\n", FAKE_STREAM);
  for (int i = 0; i < nh; i++) {
    for (int j = 0; j < hs[i]->nb; j++) {
      const char *fn = hs[i]->b[j].fn;
      kg_strbuf_printf(b, "  printf(\"call %s %%d\", %s(s", fn, fn);
      for (int k = 0; k < hs[i]->spec.nparams; k++) kg_strbuf_printf(b, ", (float *)(uintptr_t)0x%x000", k + 1);
      kg_strbuf_printf(b, "));\n  printf(\" %%d\\n\", %s_variant());\n", fn);
    }
    kg_strbuf_printf(b, "  printf(\"load %s %%d\\n\", kg_%s_load());\n  kg_%s_unload();\n", hs[i]->name, hs[i]->name,
                     hs[i]->name);
  }
  kg_strbuf_puts(b, "  return 0;\n}\n");
}

static unsigned long long fnv(const void *data, size_t n) {
  const unsigned char *p = data;
  unsigned long long h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/* The image a device of arch sm (86, 89, 90, 80 here) runs, as the header's rule says: the cubin of that arch,
 * else the PTX of the highest arch not above it; *v the variant (-1: none), *c the cubin (-1: the PTX). */
static void expected_image(const binding *bd, int sm, int *v, int *c) {
  int best = -1, best_arch = 0;
  char want[16];
  snprintf(want, sizeof want, "sm_%d", sm);
  for (int i = 0; i < bd->nvars; i++)
    for (int k = 0; k < bd->vars[i].ncubins; k++)
      if (!strcmp(bd->vars[i].cubins[k].arch, want)) {
        *v = i;
        *c = k;
        return;
      }
  for (int i = 0; i < bd->nvars; i++) {
    int a = atoi(bd->hv[i].ptx_arch + 3);
    if (a <= sm && a > best_arch) best = i, best_arch = a;
  }
  *v = best;
  *c = -1;
}

/* What the fake driver must log, and the program print, for a device of arch sm. */
static void expect_fake(header *hs, int sm, kg_strbuf *log, kg_strbuf *out) {
  unsigned long long addr = 0x10000000ull;
  int nloads = 0;
  kg_strbuf_puts(log, "init 0\nretain 0\nset_current\n");
  for (int i = 0; i < NHEADERS; i++) {
    int loaded[MAX_BINDINGS], load_rc = 0;
    for (int j = 0; j < hs[i].nb; j++) {
      const binding *bd = &hs[i].b[j];
      int v, c;
      expected_image(bd, sm, &v, &c);
      kg_strbuf_printf(out, "call %s %d %d\n", bd->fn, v < 0 ? -4 : 0, v);
      loaded[j] = -1;
      if (v < 0) {
        load_rc = -4;
        continue;
      }
      const variant *va = &bd->vars[v];
      const kg_cuda_program *p = &va->prog;
      if (c >= 0)
        kg_strbuf_printf(log, "load cubin %zu %llx\n", va->cubins[c].cubin_size,
                         fnv(va->cubins[c].cubin, va->cubins[c].cubin_size));
      else
        kg_strbuf_printf(log, "load ptx %zu %llx\n", strlen(va->cubins[0].ptx),
                         fnv(va->cubins[0].ptx, strlen(va->cubins[0].ptx)));
      loaded[j] = ++nloads;
      for (int k = 0; k < p->nkernels; k++) {
        kg_strbuf_printf(log, "function %s\n", p->kernels[k].name);
        if (p->kernels[k].dynamic_shared > 0)
          kg_strbuf_printf(log, "attribute %s 8 %lld\n", p->kernels[k].name, (long long)p->kernels[k].dynamic_shared);
      }
      unsigned long long first = addr;
      for (int t = 0; t < p->ntemps; t++, addr += 0x100000)
        kg_strbuf_printf(log, "alloc %lld %d %llx\n", (long long)(p->temp_elems[t] ? p->temp_elems[t] : 1) * 4,
                         FAKE_STREAM, addr);
      for (int k = 0; k < p->nkernels; k++) {
        const kg_cuda_kernel *kn = &p->kernels[k];
        kg_strbuf_printf(log, "launch %s %lld %lld %lld %lld %lld %lld %lld %d", kn->name, (long long)kn->grid[0],
                         (long long)kn->grid[1], (long long)kn->grid[2], (long long)kn->block[0],
                         (long long)kn->block[1], (long long)kn->block[2], (long long)kn->dynamic_shared, FAKE_STREAM);
        for (int a = 0; a < p->nparams; a++) kg_strbuf_printf(log, " %x000", a + 1);
        for (int t = 0; t < p->ntemps; t++) kg_strbuf_printf(log, " %llx", first + 0x100000ull * (unsigned long long)t);
        kg_strbuf_puts(log, "\n");
      }
      for (int t = 0; t < p->ntemps; t++)
        kg_strbuf_printf(log, "free %llx %d\n", first + 0x100000ull * (unsigned long long)t, FAKE_STREAM);
    }
    kg_strbuf_printf(out, "load %s %d\n", hs[i].name, load_rc);
    for (int j = 0; j < hs[i].nb; j++)
      if (loaded[j] > 0) kg_strbuf_printf(log, "unload %d\n", loaded[j]);
  }
}

/* The fake driver's sources, the program, and the kernels' argument counts. */
static void write_fake(header *hs) {
  header *all[NHEADERS] = {&hs[0], &hs[1], &hs[2], &hs[3], &hs[4]};
  kg_strbuf b;
  kg_strbuf_init(&b);
  write_file("fakecuda.c", FAKE_DRIVER, strlen(FAKE_DRIVER));
  put_fake_program(&b, all, NHEADERS);
  write_file("fake_main.c", b.s, b.len);
  kg_strbuf_free(&b);
  for (int i = 0; i < NHEADERS; i++)
    for (int j = 0; j < hs[i].nb; j++)
      for (int v = 0; v < hs[i].b[j].nvars; v++) {
        const kg_cuda_program *p = &hs[i].b[j].vars[v].prog;
        for (int k = 0; k < p->nkernels; k++) kg_strbuf_printf(&b, "%s %d\n", p->kernels[k].name, p->nparams + p->ntemps);
      }
  write_file("fake_kernels.txt", b.s, b.len);
  kg_strbuf_free(&b);
}

/* The sources of the test programs: emu_all.cpp (every header), emu_mm.cpp (matmul), main.c + impl.c (the real
 * path), one_<name>.c (one header alone), pasted.cu. */
static void write_programs(header *hs) {
  header *all[NHEADERS] = {&hs[0], &hs[1], &hs[2], &hs[3], &hs[4]};
  kg_strbuf b, m, im;
  kg_strbuf_init(&b);
  kg_strbuf_init(&m);
  kg_strbuf_init(&im);
  put_emu_program(&b, all, NHEADERS);
  write_file("emu_all.cpp", b.s, b.len);
  kg_strbuf_free(&b);
  put_emu_program(&b, &all[MATMUL], 1);
  write_file("emu_mm.cpp", b.s, b.len);
  kg_strbuf_free(&b);
  put_real_programs(&m, &im, all, NHEADERS);
  write_file("main.c", m.s, m.len);
  write_file("impl.c", im.s, im.len);
  kg_strbuf_free(&m);
  kg_strbuf_free(&im);
  for (int i = 0; i < NHEADERS; i++) {
    char name[64], text[128];
    snprintf(name, sizeof name, "one_%s.c", hs[i].name);
    snprintf(text, sizeof text, "#include \"%s.h\"\n", hs[i].name);
    write_file(name, text, strlen(text));
  }
  write_pasted(hs);
  write_fake(hs);
}

/* Fills a job: its log file's name and its command (printf-style). */
static void set_job(job *j, const char *log, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_job(job *j, const char *log, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(j->cmd, sizeof j->cmd, fmt, ap);
  va_end(ap);
  snprintf(j->log, sizeof j->log, "%s", log);
  j->rc = -1;
}

/* Every build, two at a time; each must succeed without a word, except the one that must hit the #error. */
static void compile_programs(const header *hs) {
  const char *nvcc = getenv("NVCC");
  if (!nvcc || !*nvcc) nvcc = "/usr/local/cuda/bin/nvcc";
  int have_nvcc = access(nvcc, X_OK) == 0;
  if (!have_nvcc) printf("nvcc skipped: %s is not there (set NVCC)\n", nvcc);
  const char *emu = "g++ -std=c++17 -O1 -Wall -Wextra -Werror -DKG_EMULATE -DKG_IMPLEMENTATION -include runtime/cuda_emu.h";
  const char *gcc = "gcc -std=c11 -Wall -Wextra -Werror";
  const char *gxx = "g++ -Wall -Wextra -Werror -x c++";
  job c[32];
  int nc = 0;
  set_job(&c[nc++], "build_emu_all.log", "%s -I%s -o %s/emu_all %s/emu_all.cpp", emu, dir, dir, dir);
  for (int i = 0; i < NSMS; i++) {
    char log[64];
    snprintf(log, sizeof log, "build_emu_sm%d.log", sms[i]);
    set_job(&c[nc++], log, "%s -DKG_EMULATE_SM=%d -I%s -o %s/emu_sm%d %s/emu_mm.cpp", emu, sms[i], dir, dir, sms[i], dir);
  }
  set_job(&c[nc++], "build_c.log",
      "%s -DKG_IMPLEMENTATION -c -o %s/impl.o %s/impl.c && %s -c -o %s/main.o %s/main.c && gcc -o %s/real_c %s/main.o "
      "%s/impl.o -ldl && %s -DKG_IMPLEMENTATION '-DKG_CUDA_LIBRARY=\"/nonexistent.so\"' -c -o %s/impl_nolib.o "
      "%s/impl.c && gcc -o %s/real_c_nolib %s/main.o %s/impl_nolib.o -ldl",
      gcc, dir, dir, gcc, dir, dir, dir, dir, dir, gcc, dir, dir, dir, dir, dir);
  set_job(&c[nc++], "build_cxx.log",
      "%s -DKG_IMPLEMENTATION -c -o %s/impl_cxx.o %s/impl.c && %s -c -o %s/main_cxx.o %s/main.c && g++ -o %s/real_cxx "
      "%s/main_cxx.o %s/impl_cxx.o -ldl",
      gxx, dir, dir, gxx, dir, dir, dir, dir, dir);
  for (int i = 0; i < NHEADERS; i++) {
    char log[64];
    snprintf(log, sizeof log, "build_one_%s.log", hs[i].name);
    set_job(&c[nc++], log,
        "%s -DKG_IMPLEMENTATION -c -o /dev/null %s/one_%s.c && %s -DKG_IMPLEMENTATION -c -o /dev/null %s/one_%s.c", gcc,
        dir, hs[i].name, gxx, dir, hs[i].name);
  }
  if (have_nvcc)
    set_job(&c[nc++], "build_nvcc.log", "%s -c -x cu -Xcompiler -Wall,-Wextra -DKG_IMPLEMENTATION -o %s/impl_nvcc.o %s/impl.c",
        nvcc, dir, dir);
  set_job(&c[nc++], "build_pasted.log",
      "g++ -std=c++17 -Wall -Wextra -Werror -Wno-unknown-pragmas -DKG_EMULATE -include runtime/cuda_emu.h "
      "-fsyntax-only -x c++ %s/pasted.cu",
      dir);
  set_job(&c[nc++], "build_fake.log",
          "%s -shared -fPIC -o %s/fakecuda.so %s/fakecuda.c && %s -DKG_IMPLEMENTATION '-DKG_CUDA_LIBRARY=\"%s/fakecuda.so\"' "
          "-o %s/fake_main %s/fake_main.c -ldl",
          gcc, dir, dir, gcc, dir, dir, dir);
  int noemu = nc;
  set_job(&c[nc++], "build_noemu.log", "g++ -std=c++17 -DKG_EMULATE -DKG_IMPLEMENTATION -fsyntax-only -x c++ %s/one_softmax.c",
      dir);
  run_jobs(c, nc, 2);
  for (int i = 0; i < noemu; i++) check_clean(&c[i]);
  char *log = read_log(&c[noemu]);
  CHECKF(c[noemu].rc != 0 && strstr(log, "#error") && strstr(log, "include runtime/cuda_emu.h"),
         "KG_EMULATE without cuda_emu.h: exit %d:\n%s", c[noemu].rc, log);
  free(log);
}

/* Runs the programs (emu_all, emu_sm*, real_c, real_c_nolib, real_cxx) and checks what they answer. */
static void run_programs(header *hs) {
  job r[NSMS + 4 + NFAKE];
  char outdirs[NSMS + 2][200];
  for (int i = 0; i < NSMS + 2; i++) {
    char name[32];
    if (i == 0) snprintf(name, sizeof name, "emu_all");
    else if (i <= NSMS) snprintf(name, sizeof name, "emu_sm%d", sms[i - 1]);
    else snprintf(name, sizeof name, "real");
    snprintf(outdirs[i], sizeof outdirs[i], "%s/out_%s", dir, name);
    mkdir(outdirs[i], 0700);
    char log[64];
    snprintf(log, sizeof log, "run_%s.log", name);
    if (i <= NSMS) set_job(&r[i], log, "%s/%s %s", dir, name, outdirs[i]);
  }
  const char *real_out = outdirs[NSMS + 1];
  set_job(&r[NSMS + 1], "run_real_c.log", "%s/real_c %s", dir, real_out);
  set_job(&r[NSMS + 2], "run_real_c_nolib.log", "%s/real_c_nolib %s", dir, real_out);
  set_job(&r[NSMS + 3], "run_real_cxx.log", "%s/real_cxx %s", dir, real_out);
  static const int fake_sms[NFAKE] = {90, 89, 80};
  for (int i = 0; i < NFAKE; i++) {
    char log[64];
    snprintf(log, sizeof log, "run_fake_sm%d.log", fake_sms[i]);
    set_job(&r[NSMS + 4 + i], log, "KG_FAKE_SM=%d KG_FAKE_LOG=%s/fake_sm%d.txt KG_FAKE_KERNELS=%s/fake_kernels.txt %s/fake_main",
            fake_sms[i], dir, fake_sms[i], dir, dir);
  }
  run_jobs(r, NSMS + 4 + NFAKE, 2);

  /* every header in one program, at the default arch (the first cubin's: sm_86 for each binding) */
  char *out = read_log(&r[0]);
  CHECKF(r[0].rc == 0, "emu_all: exit %d:\n%s", r[0].rc, out);
  for (int i = 0; i < NHEADERS; i++) {
    CHECKF(find_value(out, "load", hs[i].name, 0) == 0, "emu_all: kg_%s_load:\n%s", hs[i].name, out);
    CHECKF(find_value(out, "nokernel", hs[i].name, 0) == -1, "emu_all: kg_%s_dispatch:\n%s", hs[i].name, out);
    for (int j = 0; j < hs[i].nb; j++) {
      binding *bd = &hs[i].b[j];
      CHECKF(find_value(out, "call", bd->fn, 0) == 0 && find_value(out, "call", bd->fn, 1) == 0, "emu_all: %s:\n%s",
             bd->fn, out);
      verify_outputs(bd, outdirs[0], "emu_all");
    }
  }
  free(out);
  for (int i = 0; i < NSMS; i++) {
    const job *j = &r[1 + i];
    out = read_log(j);
    CHECKF(j->rc == 0, "%s: exit %d:\n%s", j->cmd, j->rc, out);
    int rc = want_variant[0][i] < 0 ? -4 : 0;
    CHECKF(find_value(out, "load", "matmul", 0) == rc, "sm_%d: kg_matmul_load:\n%s", sms[i], out);
    CHECKF(find_value(out, "nokernel", "matmul", 0) == -1, "sm_%d: kg_matmul_dispatch:\n%s", sms[i], out);
    for (int b = 0; b < 2; b++) {
      binding *bd = &hs[MATMUL].b[b];
      int want = want_variant[b][i];
      CHECKF(find_value(out, "call", bd->fn, 0) == rc && find_value(out, "call", bd->fn, 1) == want,
             "sm_%d: %s: wanted rc %d variant %d:\n%s", sms[i], bd->fn, rc, want, out);
      if (want >= 0) {
        char what[32];
        snprintf(what, sizeof what, "emu_sm%d", sms[i]);
        verify_outputs(bd, outdirs[1 + i], what);
      }
    }
    free(out);
  }
  /* the real path: no driver */
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int driver_present = lib != NULL;
  if (lib) dlclose(lib);
  check_real(hs, &r[NSMS + 1], 0, driver_present);
  check_real(hs, &r[NSMS + 2], 1, driver_present);
  check_real(hs, &r[NSMS + 3], 0, driver_present);
  check_images(hs, &r[NSMS + 1], real_out);
  /* the real path against the fake driver: the calls it gets, in order */
  for (int i = 0; i < NFAKE; i++) {
    const job *j = &r[NSMS + 4 + i];
    kg_strbuf want_log, want_out;
    kg_strbuf_init(&want_log);
    kg_strbuf_init(&want_out);
    expect_fake(hs, fake_sms[i], &want_log, &want_out);
    if (fake_sms[i] == 90) /* matvec's kernel opts in to its dynamic shared memory */
      CHECK_STR_CONTAINS(want_log.s, "attribute kg_matvec_M40_K16384_v0_k0 8 65536\n");
    char *got_out = read_log(j), name[64];
    snprintf(name, sizeof name, "fake_sm%d.txt", fake_sms[i]);
    char *path = path_in(name), *got_log = kg_test_read_file(path, NULL);
    CHECKF(j->rc == 0 && !strcmp(got_out, want_out.s), "%s: exit %d, printed:\n%s\nwanted:\n%s", j->cmd, j->rc, got_out,
           want_out.s);
    CHECKF(got_log && !strcmp(got_log, want_log.s), "fake driver, sm_%d: the driver got:\n%s\nwanted:\n%s", fake_sms[i],
           got_log ? got_log : "(nothing)", want_log.s);
    free(got_out);
    free(got_log);
    free(path);
    kg_strbuf_free(&want_log);
    kg_strbuf_free(&want_out);
  }
}

int main(void) {
  char why[512];
  int have_nvrtc = kg_nvrtc_available(why, sizeof why) == 0;
  CHECKF(have_nvrtc, "NVRTC is needed: %s", why);
  snprintf(dir, sizeof dir, "/tmp/kg_header_cuda_XXXXXX");
  int have_dir = mkdtemp(dir) != NULL;
  CHECKF(have_dir, "mkdtemp: %s", strerror(errno));
  if (!have_nvrtc || !have_dir) TEST_END();

  static header hs[NHEADERS];
  if (build_headers(hs) == 0) {
    check_refusals(&hs[MATMUL]);
    write_programs(hs);
    compile_programs(hs);
    run_programs(hs);
  }
  for (int i = 0; i < NHEADERS; i++) free_header(&hs[i]);
  if (kg_test_failed || getenv("KGEN_TEST_KEEP")) {
    fprintf(stderr, "files kept in %s\n", dir);
  } else {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
  }
  TEST_END();
}
