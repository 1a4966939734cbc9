/* kgen: the command-line front end. Thin: every stage lives in libkgen (include/kgen.h); this file parses
 * arguments, reads files and prints. Exit status: 0 ok, 1 user-input error or failed verification, 2 usage,
 * 3 no CUDA device for --target cuda. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kgen.h"
#include "../base/strbuf.h"
#include "../te/lex.h"
#include "../base/clock.h"
#include "cli.h"
#include "../dist/dist.h"
#include "../runtime/quality.h"
#include "../runtime/estimate.h"


typedef struct options {
  const char *cmd, *file, *def, *schedule_file, *save_dir, *load_dir, *dump;
  cli_cmd ccmd;
  kg_binding bindings[MAX_BINDINGS];
  int nbindings;
  kg_dynamic_size dyn[MAX_BINDINGS]; /* --dynamic */
  char dyn_names[MAX_BINDINGS][64];
  int ndyn;
  int io_dtype; /* --dtype, or -1 */
  int tf32;     /* --tf32 */
  int random_schedule, random_steps, random_steps_given;
  uint64_t random_seed, data_seed;
  kg_target_kind target;
  int target_auto, emulate, measure, flush_l2;
  const char *arch;
  double rtol, min_repeat_ms, timeout_s;
} options;

static int usage_error(const options *o, const char *fmt, const char *arg) {
  return cli_usage_error(o->ccmd, fmt, arg);
}

/* An option that only CUDA has picks the CUDA target, unless another was named: then -1 (a usage error). */
static int need_cuda(options *o) {
  if (!o->target_auto && o->target != KG_TARGET_CUDA) return -1;
  o->target = KG_TARGET_CUDA;
  o->target_auto = 0;
  return 0;
}

/* Returns 0, or the exit status of a usage error. */
static int parse_args(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->target = KG_TARGET_C;
  o->target_auto = 1;
  o->rtol = 1e-4;
  o->min_repeat_ms = 100;
  o->random_steps = 10;
  o->io_dtype = -1;
  o->data_seed = 1;
  if (argc < 2) {
    fprintf(stderr, "kgen: missing command\n");
    cli_usage_all(stderr);
    return 2;
  }
  o->cmd = argv[1];
  if (!strcmp(o->cmd, "-h") || !strcmp(o->cmd, "--help") || !strcmp(o->cmd, "help")) {
    cli_usage_all(stdout);
    exit(0);
  }
  if (!strcmp(o->cmd, "--version")) {
    printf("kgen %s\n", KGEN_VERSION);
    printf("distributed tuning (mpirun kgen tune): %s\n",
           kg_dist_available() ? "yes, built with MPI" : "no, built without MPI (none was found)");
    exit(0);
  }
  int cmd = cli_cmd_find(o->cmd);
  if (cmd != CLI_CMD_CHECK && cmd != CLI_CMD_LOWER && cmd != CLI_CMD_RUN) {
    fprintf(stderr, "kgen: unknown command '%s'\n", o->cmd);
    cli_usage_all(stderr);
    return 2;
  }
  o->ccmd = (cli_cmd)cmd;
  cli_arg *args = calloc((size_t)argc, sizeof *args);
  int nargs = 0, rc = args ? cli_parse(o->ccmd, argc, argv, 2, args, &nargs) : 1;
  for (int i = 0; i < nargs && rc == 0; i++) {
    const cli_arg *r = &args[i];
    switch (r->id) {
      case CLI_OPT_D:
        if (o->nbindings >= MAX_BINDINGS) rc = usage_error(o, "bad size binding '%s' (too many)", r->val);
        else o->bindings[o->nbindings++] = r->b;
        break;
      case CLI_OPT_DYNAMIC:
        if (o->ndyn >= MAX_BINDINGS) rc = usage_error(o, "bad --dynamic '%s' (too many)", r->val);
        else cli_parse_dynamic(r->val, o->dyn_names[o->ndyn], &o->dyn[o->ndyn], NULL, 0, NULL), o->ndyn++;
        break;
      case CLI_OPT_DEF: o->def = r->val; break;
      case CLI_OPT_DTYPE: o->io_dtype = (int)r->u; break;
      case CLI_OPT_TF32: o->tf32 = 1; break;
      case CLI_OPT_SCHEDULE: o->schedule_file = r->val; break;
      case CLI_OPT_RANDOM_SCHEDULE:
        o->random_seed = r->u;
        o->random_schedule = 1;
        break;
      case CLI_OPT_RANDOM_STEPS:
        o->random_steps = (int)r->u;
        o->random_steps_given = 1;
        break;
      case CLI_OPT_SEED: o->data_seed = r->u; break;
      case CLI_OPT_TARGET:
        o->target_auto = !strcmp(r->val, "auto");
        o->target = !strcmp(r->val, "cuda") ? KG_TARGET_CUDA : KG_TARGET_C;
        break;
      case CLI_OPT_EMULATE: o->emulate = 1; break;
      case CLI_OPT_MEASURE: o->measure = 1; break;
      case CLI_OPT_FLUSH_L2: o->flush_l2 = 1; break;
      case CLI_OPT_ARCH: o->arch = r->val; break;
      case CLI_OPT_TIMEOUT: o->timeout_s = r->d; break;
      case CLI_OPT_SAVE: o->save_dir = r->val; break;
      case CLI_OPT_LOAD: o->load_dir = r->val; break;
      case CLI_OPT_DUMP: o->dump = r->val; break;
      case CLI_OPT_RTOL: o->rtol = r->d; break;
      case CLI_OPT_MIN_REPEAT_MS: o->min_repeat_ms = r->d; break;
      case CLI_OPT_ARG:
        if (!o->file) o->file = r->val;
        else rc = usage_error(o, "unexpected argument '%s'", r->val);
        break;
      default: rc = usage_error(o, "option %s is not handled here", r->name); break;
    }
  }
  free(args);
  if (rc) return rc;
  if (!o->file) return usage_error(o, "%s", "missing program (FILE.te or a library NAME)");
  if (o->schedule_file && o->random_schedule)
    return usage_error(o, "%s", "--schedule and --random-schedule exclude each other");
  if (o->random_steps_given && !o->random_schedule)
    return usage_error(o, "%s", "--random-steps goes with --random-schedule");
  if (o->emulate && need_cuda(o)) return usage_error(o, "%s", "--emulate goes with --target cuda");
  if (o->dump && !strcmp(o->dump, "cuda") && need_cuda(o)) return usage_error(o, "%s", "--dump cuda goes with --target cuda");
  if (o->dump && !strcmp(o->dump, "report") && need_cuda(o))
    return usage_error(o, "%s", "--dump report goes with --target cuda");
  if (o->dump && !strcmp(o->dump, "c") && o->target_auto) o->target_auto = 0; /* asking for C means the C target */
  if (o->arch && !o->target_auto && o->target != KG_TARGET_CUDA)
    return usage_error(o, "%s", "--arch goes with --target cuda");
  if (o->dump && !strcmp(o->dump, "c") && o->target == KG_TARGET_CUDA)
    return usage_error(o, "%s", "--dump c goes with --target c (use --dump cuda)");
  if (!strcmp(o->cmd, "check") && o->dump && strcmp(o->dump, "tokens") && strcmp(o->dump, "ast") &&
      strcmp(o->dump, "stages"))
    return usage_error(o, "check dumps tokens, ast or stages, not '%s'", o->dump);
  return 0;
}

/* Reads a whole file (binary-safe). */


/* --dump tokens: the lexer's output, one token per line. Works on files that do not check. */
static int dump_tokens(const char *path, const char *text, size_t len) {
  static const char *const kinds[] = {"eof", "ident", "num", "punct"};
  kg_source src = {path, text, len};
  kg_arena a;
  kg_arena_init(&a);
  kg_diag diag = {0};
  kg_lexer lx;
  kg_lex_init(&lx, &src, &diag, &a);
  kg_token t;
  int rc = 0;
  for (;;) {
    if (kg_lex_next(&lx, &t)) {
      fputs(diag.msg, stderr);
      rc = 1;
      break;
    }
    printf("%d:%d %s %.*s\n", t.pos.line, t.pos.col, kinds[t.kind], (int)(t.len > 80 ? 80 : t.len), t.s);
    if (t.kind == KG_TK_EOF) break;
  }
  kg_arena_free(&a);
  return rc;
}

/* --dump ast: the checked def as written (reductions still nested), with every tensor's shape. */
static void dump_ast(const kg_program *p) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  for (int i = 0; i < p->def->nstmts; i++) {
    const kg_stmt *st = p->def->stmts[i];
    kg_strbuf_printf(&b, "%d:%d %s[", st->pos.line, st->pos.col, st->lhs->name);
    for (int k = 0; k < st->nidx; k++) kg_strbuf_printf(&b, "%s%s", k ? ", " : "", st->idx[k]->name);
    kg_strbuf_printf(&b, "] : %s[", kg_dtype_names[st->lhs->dtype]);
    for (int d = 0; d < st->lhs->ndim; d++) kg_strbuf_printf(&b, "%s%lld", d ? ", " : "", (long long)st->lhs->shape[d]);
    kg_strbuf_puts(&b, "] = ");
    kg_expr_print(&b, p, st->rhs);
    kg_strbuf_putc(&b, '\n');
  }
  fputs(b.s ? b.s : "", stdout);
  kg_strbuf_free(&b);
}

static kg_program *load_program(const options *o) {
  if (o->dump && !strcmp(o->dump, "tokens")) {
    char *path;
    size_t len;
    char *text = cli_read_program(o->file, &path, &len);
    if (!text) return NULL;
    int rc = dump_tokens(path, text, len);
    free(text);
    free(path);
    exit(rc);
  }
  return cli_load_program(o->file, o->def, o->bindings, o->nbindings, o->dyn, o->ndyn, o->io_dtype, o->tf32);
}

static void print_shape(const kg_tensor *t) {
  printf("%s[", kg_dtype_names[t->dtype]);
  for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
  printf("]");
}

static int cmd_check(const options *o, kg_program *p) {
  if (o->dump && !strcmp(o->dump, "ast")) {
    dump_ast(p);
    return 0;
  }
  if (o->dump && !strcmp(o->dump, "stages")) {
    char *canon = kg_program_canonical(p);
    fputs(canon, stdout);
    free(canon);
    return 0;
  }
  static const char *const kinds[] = {"input", "output", "temp"};
  printf("def %s\n", p->def->name);
  for (int i = 0; i < p->nsizes; i++) printf("  size %s = %lld\n", p->sizes[i].name, (long long)p->sizes[i].value);
  for (int i = 0; i < p->ntensors; i++) {
    const kg_tensor *t = p->tensors[i];
    printf("  %-6s %s: ", kinds[t->kind], t->name);
    print_shape(t);
    printf("\n");
  }
  char *canon = kg_program_canonical(p);
  printf("stages:\n%s", canon);
  free(canon);
  return 0;
}

/* What the candidate is built from: --schedule FILE (its trace, parsed into *t), --random-schedule SEED (a
 * schedule drawn into *rs), or neither (the target's default). -1 on error (printed). */
static int schedule_input(const options *o, kg_program *p, kg_trace *t, kg_schedule **rs) {
  kg_trace_init(t);
  *rs = NULL;
  char err[2048];
  if (o->schedule_file) {
    size_t len;
    char *text = cli_read_file(o->schedule_file, &len, err, sizeof err);
    if (!text) {
      fprintf(stderr, "kgen: cannot read schedule %s\n", err);
      return -1;
    }
    int rc = kg_trace_parse(t, o->schedule_file, text, len, err, sizeof err);
    free(text);
    if (rc) {
      fprintf(stderr, "%s\n", err);
      return -1;
    }
  } else if (o->random_schedule) {
    *rs = kg_schedule_new(p);
    kg_schedule_random(*rs, o->random_seed, o->target, o->random_steps);
    printf("schedule: random seed %llu (%d steps)\n", (unsigned long long)o->random_seed, (*rs)->trace.nsteps);
  }
  return 0;
}

/* The build options for what schedule_input gave. */
static kg_build_opts build_opts(const options *o, const kg_trace *t, const kg_schedule *rs, kg_build_stage stop) {
  kg_build_opts bo = {.target = o->target, .stop = stop, .trace = o->schedule_file ? t : NULL, .sched = rs};
  return bo;
}

/* An illegal step of the schedule file, reported at its line. */
static void report_schedule_error(const options *o, const kg_trace *t, const kg_build_error *e) {
  int line = e->step >= 0 && e->step < t->nsteps ? t->steps[e->step].line : 0;
  fprintf(stderr, "%s:%d: error: %s\n", o->schedule_file ? o->schedule_file : "schedule", line, e->msg + e->step_msg);
}

/* The analytical estimate's line (runtime/estimate.h) under a quality report, or why there is none. */
static void estimate_line(kg_strbuf *sb, const kg_lowered *ir, const kg_kernel_quality *q, int n, const char *arch) {
  if (!ir) return;
  kg_kernel_estimate *k = calloc((size_t)n + 1, sizeof *k);
  char why[512], line[2048];
  double s = k ? kg_cuda_estimate(ir, q, n, arch, k, why, sizeof why) : -1;
  if (s >= 0) {
    kg_cuda_estimate_line(k, n, s, arch, line, sizeof line);
    kg_strbuf_printf(sb, "%s\n", line);
  } else {
    kg_strbuf_printf(sb, "no estimate: %s\n", k ? why : "out of memory");
  }
  free(k);
}

/* --dump report: each kernel compiled with NVRTC for arch and its static quality (runtime/quality.h), a line
 * each (kgen run --measure prints the same lines from the build it measured). 1 when NVRTC is missing or the
 * compile fails (the log says why). */
static int quality_report(kg_strbuf *sb, const kg_cuda_program *cp, const kg_lowered *ir, const char *arch) {
  kg_cubin c;
  if (kg_nvrtc_compile(cp, arch, &c) != 0) {
    fprintf(stderr, "kgen: cannot compile for %s: %s\n", arch, c.log ? c.log : "NVRTC failed");
    kg_cubin_free(&c);
    return 1;
  }
  kg_kernel_quality *q = calloc((size_t)cp->nkernels, sizeof *q);
  char why[512];
  int rc = 0;
  if (!q || kg_cuda_quality(cp, &c, arch, q, why, sizeof why) != 0) {
    fprintf(stderr, "kgen: no quality report: %s\n", q ? why : "out of memory");
    rc = 1;
  } else {
    if (ir) kg_cuda_quality_ir(ir, q, cp->nkernels);
    kg_strbuf_printf(sb, "// ---- static quality (%s, NVRTC %s) ----\n", arch, kg_nvrtc_version());
    for (int k = 0; k < cp->nkernels; k++) {
      char line[1024];
      kg_cuda_quality_line(&q[k], arch, line, sizeof line);
      kg_strbuf_printf(sb, "%s\n", line);
    }
    estimate_line(sb, ir, q, cp->nkernels, arch);
  }
  free(q);
  kg_cubin_free(&c);
  return rc;
}

static int cmd_lower(const options *o, kg_program *p) {
  kg_trace t;
  kg_schedule *rs;
  if (schedule_input(o, p, &t, &rs)) return 1;
  const char *d = o->dump;
  /* as far as the dump asked for needs: the printed code, the IR, or only the schedule */
  int want_report = d && !strcmp(d, "report") && o->target == KG_TARGET_CUDA;
  int want_print = !d || (!strcmp(d, "c") && o->target == KG_TARGET_C) ||
                   (!strcmp(d, "cuda") && o->target == KG_TARGET_CUDA) || want_report;
  int want_lower = want_print || (d && (!strcmp(d, "ir") || !strcmp(d, "c") || !strcmp(d, "cuda")));
  kg_build_opts bo = build_opts(o, &t, rs, want_print ? KG_BUILD_PRINT : want_lower ? KG_BUILD_LOWER : KG_BUILD_SCHEDULE);
  kg_build b;
  int brc = kg_candidate_build(p, &bo, &b);
  const kg_build_error *e = &b.front.error;
  int rc = 0;
  if (brc && e->stage == KG_BUILD_SCHEDULE) {
    report_schedule_error(o, &t, e);
    rc = 1;
    goto done;
  }
  kg_strbuf sb;
  kg_strbuf_init(&sb);
  if (d && !strcmp(d, "ast")) dump_ast(p);
  if (!d || !strcmp(d, "stages")) {
    char *canon = kg_program_canonical(p);
    kg_strbuf_printf(&sb, "// ---- stages ----\n%s", canon);
    free(canon);
  }
  if (!d || !strcmp(d, "schedule")) {
    char *trace = kg_trace_to_text(&b.front.sched->trace);
    kg_strbuf_printf(&sb, "// ---- schedule (trace) ----\n%s", trace);
    free(trace);
    kg_schedule_dump(&sb, b.front.sched);
  }
  if (want_lower && brc && e->stage == KG_BUILD_LOWER) {
    fprintf(stderr, "kgen: cannot lower: %s\n", e->msg);
    rc = 1;
  } else if (want_lower) {
    if (!d || !strcmp(d, "ir")) {
      kg_strbuf_puts(&sb, "// ---- loop-nest IR ----\n");
      kg_ir_print(&sb, b.front.ir);
    }
    if (want_print && brc) {
      fprintf(stderr, "kgen: cannot print %s: %s\n", o->target == KG_TARGET_CUDA ? "CUDA" : "C", e->msg);
      rc = 1;
    } else if (want_report) {
      rc = quality_report(&sb, &b.front.cuda, b.front.ir, o->arch ? o->arch : "sm_90");
    } else if (want_print && o->target == KG_TARGET_CUDA) {
      const kg_cuda_program *cp = &b.front.cuda;
      kg_strbuf_puts(&sb, "// ---- CUDA ----\n");
      for (int k = 0; k < cp->nkernels; k++) {
        const kg_cuda_kernel *kk = &cp->kernels[k];
        kg_strbuf_printf(&sb, "// launch %s: grid (%lld, %lld, %lld) block (%lld, %lld, %lld) shared %lld B%s\n",
                         kk->name, (long long)kk->grid[0], (long long)kk->grid[1], (long long)kk->grid[2],
                         (long long)kk->block[0], (long long)kk->block[1], (long long)kk->block[2],
                         (long long)(kk->static_shared + kk->dynamic_shared), kk->dynamic_shared ? " (dynamic)" : "");
      }
      kg_strbuf_puts(&sb, cp->source);
    } else if (want_print) {
      kg_strbuf_printf(&sb, "// ---- C (OpenMP) ----\n%s", b.front.c_source);
    }
  }
  if (sb.s) fputs(sb.s, stdout);
  kg_strbuf_free(&sb);
done:
  kg_build_free(&b);
  if (rs) kg_schedule_free(rs);
  kg_trace_free(&t);
  return rc;
}

static int load_inputs(const options *o, const kg_program *p, kg_data *d) {
  char path[PATH_MAX], err[512];
  for (int i = 0; i < p->ninputs; i++) {
    const kg_tensor *t = p->inputs[i];
    snprintf(path, sizeof path, "%s/%s.npy", o->load_dir, t->name);
    void *x = kg_npy_load(path, t->dtype, t->ndim, t->shape, err, sizeof err);
    if (!x) {
      fprintf(stderr, "kgen: %s\n", err); /* the message names the file */
      return -1;
    }
    memcpy(d->inputs[i], x, (size_t)kg_dtype_size[t->dtype] * (size_t)kg_tensor_numel(t));
    free(x);
  }
  return 0;
}

static int save_tensors(const options *o, const kg_program *p, const kg_data *d) {
  char path[PATH_MAX], err[512];
  if (mkdir(o->save_dir, 0777) && errno != EEXIST) {
    fprintf(stderr, "kgen: cannot create '%s': %s\n", o->save_dir, strerror(errno));
    return -1;
  }
  for (int i = 0; i < p->ninputs + p->noutputs; i++) {
    const kg_tensor *t = i < p->ninputs ? p->inputs[i] : p->outputs[i - p->ninputs];
    const float *x = i < p->ninputs ? d->inputs[i] : d->outputs[i - p->ninputs];
    snprintf(path, sizeof path, "%s/%s.npy", o->save_dir, t->name);
    if (kg_npy_save(path, x, t->dtype, t->ndim, t->shape, err, sizeof err)) {
      fprintf(stderr, "kgen: %s\n", err); /* the message names the file */
      return -1;
    }
  }
  return 0;
}

/* A run that cannot fit in memory is a user error, said before anything is allocated (the same check and
 * message as tune and replay: runtime/verify.h). */
static int check_memory(const kg_program *p) {
  char err[512];
  if (kg_data_check_memory(p, err, sizeof err) == 0) return 0;
  fprintf(stderr, "kgen: error: %s\n", err);
  return -1;
}

static void print_time(const char *label, double median, double lo, double hi, int runs) {
  /* microseconds below a millisecond, so small kernels keep their digits */
  double unit = median < 1e-3 ? 1e6 : 1e3;
  const char *uname = median < 1e-3 ? "us" : "ms";
  printf("%s: %.4g %s (median of %d runs, min %.4g, max %.4g)\n", label, median * unit, uname, runs, lo * unit,
         hi * unit);
}

static void free_input(kg_build *b, kg_schedule *rs, kg_trace *t) {
  kg_build_free(b);
  if (rs) kg_schedule_free(rs);
  kg_trace_free(t);
}

/* kgen run through the measurement harness: the CUDA target (GPU or emulator), or --measure on either target.
 * The kernel runs in a worker process, so a fault or a hang is reported, never a crash. */
static int cmd_run_measured(const options *o, kg_program *p) {
  if (check_memory(p)) return 1;
  kg_trace t;
  kg_schedule *rs;
  if (schedule_input(o, p, &t, &rs)) return 1;
  /* the schedule here, so that an illegal step is reported at its line before any data is drawn; the measurer
   * builds the rest from its trace */
  kg_build_opts bo = build_opts(o, &t, rs, KG_BUILD_SCHEDULE);
  kg_build sb;
  if (kg_candidate_build(p, &bo, &sb)) {
    report_schedule_error(o, &t, &sb.front.error);
    kg_build_free(&sb);
    if (rs) kg_schedule_free(rs);
    kg_trace_free(&t);
    return 1;
  }
  const kg_schedule *s = sb.front.sched;
  if (o->target == KG_TARGET_CUDA && !o->schedule_file && !o->random_schedule)
    printf("schedule: naive GPU mapping (%d steps)\n", s->trace.nsteps);
  kg_measure_opts mo;
  memset(&mo, 0, sizeof mo);
  mo.target = o->target;
  mo.emulate = o->emulate;
  mo.arch = o->arch;
  mo.quality = o->measure;
  mo.min_repeat_s = o->min_repeat_ms / 1000.0;
  mo.timeout_s = o->timeout_s;
  mo.flush_l2 = o->flush_l2;
  mo.rtol = o->rtol;
  mo.seed = o->data_seed;
  char err[4096];
  /* --load: the user's inputs go to the measurer, which computes the reference on them as they are */
  kg_data loaded;
  memset(&loaded, 0, sizeof loaded);
  if (o->load_dir) {
    if (kg_data_init(&loaded, p, o->data_seed)) {
      kg_data_oom_message(p, 0, err, sizeof err);
      fprintf(stderr, "kgen: error: %s\n", err);
      free_input(&sb, rs, &t);
      return 1;
    }
    if (load_inputs(o, p, &loaded)) {
      kg_data_free(&loaded);
      free_input(&sb, rs, &t);
      return 1;
    }
    mo.inputs = loaded.inputs;
  }
  double t_ref = kg_now_s();
  kg_measurer *m = kg_measurer_new(p, &mo, err, sizeof err);
  if (o->load_dir) kg_data_free(&loaded);
  if (!m) {
    fprintf(stderr, "kgen: %s\n", err);
    free_input(&sb, rs, &t);
    return 1;
  }
  printf("target: %s on %s (%s)\n", o->target == KG_TARGET_CUDA ? "cuda" : "c", kg_measurer_device(m),
         kg_measurer_arch(m));
  printf("reference: %.3f s\n", kg_now_s() - t_ref);
  kg_candidate c = {&s->trace, NULL};
  kg_measure_result r;
  kg_measure_batch(m, &c, 1, &r);
  int rc = 1;
  if (r.status == KG_STATUS_COMPILE_ERROR || r.status == KG_STATUS_RESOURCE_LIMIT) {
    fprintf(stderr, "kgen: build failed (%s): %s\n", kg_status_names[r.status], r.msg);
    goto out;
  }
  printf("compile: %.3f s\n", r.compile_s);
  if (r.status == KG_STATUS_RUNTIME_ERROR || r.status == KG_STATUS_TIMEOUT) {
    printf("run: FAILED (%s) %s\n", kg_status_names[r.status], r.msg);
    goto out;
  }
  if (o->save_dir) {
    /* the outputs the worker left in the shared buffers (a GPU's copied back), wrong ones included, as a plain
     * run saves them: any run can be checked by an independent program */
    kg_data view;
    memset(&view, 0, sizeof view);
    view.ninputs = p->ninputs;
    view.noutputs = p->noutputs;
    view.inputs = calloc((size_t)p->ninputs + 1, sizeof *view.inputs);
    view.outputs = calloc((size_t)p->noutputs + 1, sizeof *view.outputs);
    int saved = -1;
    if (view.inputs && view.outputs) {
      for (int i = 0; i < p->ninputs; i++) view.inputs[i] = (float *)kg_measurer_buffer(m, i);
      for (int i = 0; i < p->noutputs; i++) view.outputs[i] = (float *)kg_measurer_buffer(m, p->ninputs + i);
      saved = save_tensors(o, p, &view);
    }
    free(view.inputs);
    free(view.outputs);
    if (saved) goto out;
  }
  if (r.status == KG_STATUS_WRONG_ANSWER) {
    printf("verify: FAILED max_rel_err=%.3g %s\n", r.max_rel_err, r.msg);
    goto out;
  }
  if (r.runs > 0) print_time(kg_measurer_runner(m) == KG_RUNNER_EMULATOR ? "time (emulator)" : "time", r.median_s,
                             r.min_s, r.max_s, r.runs);
  if (o->measure && r.runs > 0) {
    printf("throughput: %.4g GFLOP/s, %.4g GB/s; spread (max-min)/median %.1f%%\n", r.gflops, r.gbps,
           r.median_s > 0 ? 100.0 * (r.max_s - r.min_s) / r.median_s : 0.0);
    for (int k = 0; k < r.nres; k++)
      printf("kernel %s: %d registers, %lld B spill stores, %lld B spill loads, %lld B static shared, %lld B local\n",
             r.res[k].name, r.res[k].registers, (long long)r.res[k].spill_stores, (long long)r.res[k].spill_loads,
             (long long)r.res[k].static_shared, (long long)r.res[k].local_bytes);
    /* the static quality of what ran, for the arch it was built for */
    for (int k = 0; k < r.nquality; k++) {
      char line[1024];
      kg_cuda_quality_line(&r.quality[k], kg_measurer_arch(m), line, sizeof line);
      printf("%s\n", line);
    }
    if (r.estimate_s > 0) printf("%s\n", r.estimate_line);
  }
  printf("verify: ok max_rel_err=%.3g\n", r.max_rel_err);
  rc = 0;
out:
  kg_measure_result_free(&r);
  kg_measurer_free(m);
  free_input(&sb, rs, &t);
  return rc;
}

static int cmd_run(const options *o, kg_program *p) {
  if (o->target == KG_TARGET_CUDA || o->measure) return cmd_run_measured(o, p);
  if (check_memory(p)) return 1;
  kg_trace t;
  kg_schedule *rs;
  if (schedule_input(o, p, &t, &rs)) return 1;
  int rc = 1;
  char err[8192];
  kg_pipeline pl;
  kg_build_opts bo = build_opts(o, &t, rs, KG_BUILD_COMPILE);
  int built = kg_pipeline_build_opts(p, &bo, &pl) == 0;
  const kg_build_error *e = &pl.b.front.error;
  if (!built && e->stage == KG_BUILD_SCHEDULE) {
    report_schedule_error(o, &t, e);
    goto out_build;
  }
  kg_data d;
  if (kg_data_init(&d, p, o->data_seed)) {
    kg_data_oom_message(p, 0, err, sizeof err);
    fprintf(stderr, "kgen: error: %s\n", err);
    goto out_build;
  }
  if (o->load_dir && load_inputs(o, p, &d)) goto out;
  if (!built) {
    fprintf(stderr, "kgen: build failed: %s\n", e->msg);
    goto out;
  }
  printf("compile: %.3f s\n", pl.b.cpu.compile_s);
  /* With --load the inputs are the user's: compute the reference on them as they are. */
  double t_ref = kg_now_s();
  int ref_rc = o->load_dir ? kg_data_reference_as_is(&d, p) : kg_data_reference(&d, p, o->data_seed);
  if (ref_rc == -2) {
    kg_data_oom_message(p, 1, err, sizeof err);
    fprintf(stderr, "kgen: error: %s\n", err);
    goto out;
  }
  printf("reference: %.3f s\n", kg_now_s() - t_ref);
  kg_verify_result v = kg_pipeline_verify(&pl, p, &d, o->rtol);
  if (o->save_dir && save_tensors(o, p, &d)) goto out;
  kg_timing tm = kg_pipeline_time(&pl, &d, o->min_repeat_ms / 1000.0);
  print_time("time", tm.median_s, tm.min_s, tm.max_s, tm.runs);
  if (v.ok) {
    printf("verify: ok max_rel_err=%.3g\n", v.max_rel_err);
    rc = 0;
  } else {
    printf("verify: FAILED max_rel_err=%.3g %s\n", v.max_rel_err, v.msg);
  }
out:
  kg_data_free(&d);
out_build:
  kg_pipeline_free(&pl);
  if (rs) kg_schedule_free(rs);
  kg_trace_free(&t);
  return rc;
}

/* --target auto: CUDA when a GPU answers, else C. --target cuda on the GPU without one: a one-line reason and
 * exit status 3 (the emulator and `lower` need no device). */
static int resolve_target(options *o) {
  char why[512];
  if (o->target_auto) {
    if (!strcmp(o->cmd, "check")) return 0;
    o->target = kg_cudrv_probe(why, sizeof why) ? KG_TARGET_CUDA : KG_TARGET_C;
    o->target_auto = 0;
    return 0;
  }
  if (o->target == KG_TARGET_CUDA && !o->emulate && !strcmp(o->cmd, "run") && !kg_cudrv_probe(why, sizeof why)) {
    fprintf(stderr, "kgen: cannot run on a GPU: %s (try --emulate, or --target c)\n", why);
    return 3;
  }
  return 0;
}

int main(int argc, char **argv) {
  cli_env_start();
  if (argc >= 2 && !strcmp(argv[1], "tune")) return cli_tune(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "show")) return cli_show(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "replay")) return cli_replay(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "export")) return cli_export(argc, argv);
  options o;
  int rc = parse_args(argc, argv, &o);
  if (rc) return rc;
  if (!strcmp(o.cmd, "run") && (rc = cli_env_check("run", o.target, o.emulate, o.target_auto))) return rc;
  rc = resolve_target(&o);
  if (rc) return rc;
  kg_program *p = load_program(&o);
  if (!p) return 1;
  if (!strcmp(o.cmd, "check")) rc = cmd_check(&o, p);
  else if (!strcmp(o.cmd, "lower")) rc = cmd_lower(&o, p);
  else rc = cmd_run(&o, p);
  kg_program_free(p);
  return rc;
}
