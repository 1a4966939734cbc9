/* The CLI's one option table and parser (see cli.h): every option is validated and described here once, so it
 * means and refuses the same values in every command that accepts it, and each command's usage is generated. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "../replay/export.h"
#include "../search/dynamic.h"

#define C(cmd) (1u << (cmd))
#define PROGRAM_CMDS (C(CLI_CMD_CHECK) | C(CLI_CMD_LOWER) | C(CLI_CMD_RUN) | C(CLI_CMD_TUNE) | C(CLI_CMD_REPLAY))
#define MEASURE_CMDS (C(CLI_CMD_RUN) | C(CLI_CMD_TUNE) | C(CLI_CMD_REPLAY))

static const struct {
  const char *name, *synopsis, *notes;
} commands[CLI_CMD_COUNT] = {
    [CLI_CMD_CHECK] = {"check", "FILE.te|NAME [-D NAME=VALUE]... [OPTIONS]",
                       "  checks a program and prints its tensors and stages\n"},
    [CLI_CMD_LOWER] = {"lower", "FILE.te|NAME -D ... [OPTIONS]",
                       "  prints the stages, the schedule, the loop-nest IR and the code (--dump: one of them)\n"},
    [CLI_CMD_RUN] = {"run", "FILE.te|NAME -D ... [OPTIONS]", "  builds, verifies and times one schedule\n"},
    [CLI_CMD_TUNE] = {"tune",
                      "FILE.te|NAME [-D NAME=VALUE]... [FILE.te|NAME [-D ...]]... [OPTIONS]\n"
                      "       kgen tune FILE.te|NAME [-D ...] --dynamic NAME=LO..HI [--buckets N]\n"
                      "                 | --shapes NAME=V1,V2,... [--exchange K] [OPTIONS]:\n"
                      "                 a few schedules serving a whole range of one size",
                      "  -D after a workload binds its sizes; -D before the first workload binds every workload's\n"
                      "  (see docs/tuning.md)\n"},
    [CLI_CMD_SHOW] = {"show", "LOG [--best]",
                      "  prints a tuning log's records (--best: the best trace of each workload)\n"},
    [CLI_CMD_REPLAY] = {"replay", "LOG [FILE.te|NAME [-D NAME=VALUE]...] [OPTIONS]",
                        "  rebuilds, verifies and times the best logged schedule of each workload (or of the one\n"
                        "  named)\n"},
    [CLI_CMD_EXPORT] = {"export", "LOG [FILE.te|NAME]... [OPTIONS]",
                        "  writes DIR/NAME.h per workload of the log: its best kernels, one per size binding, as a\n"
                        "  self-contained C header (C: OpenMP function; CUDA: cubin per --arch plus PTX, launched\n"
                        "  via libcuda)\n"},
};

/* ---- validators: 0, or -1 with the message (naming the option and the value) in msg ---- */

typedef struct cli_option cli_option;
typedef int (*check_fn)(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen);

struct cli_option {
  cli_opt id;
  const char *name;
  const char *arg; /* the value's placeholder in the usage; NULL: a flag */
  unsigned cmds;   /* the commands that accept it */
  check_fn check;  /* NULL: any value */
  double lo, hi;   /* check_count, check_positive: the range */
  const char *help;
};

static int check_binding(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  (void)o;
  if (cli_parse_binding(val, &out->b) == 0) return 0;
  snprintf(msg, msglen, "bad size binding '%s' (want -D NAME=VALUE)", val);
  return -1;
}

static int check_seed(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  if (cli_parse_u64(val, &out->u) == 0) return 0;
  snprintf(msg, msglen, "bad %s '%s' (want a number from 0 to 2^64-1)", o->name, val);
  return -1;
}

static int check_count(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  if (cli_parse_u64(val, &out->u) == 0 && (double)out->u >= o->lo && (double)out->u <= o->hi) return 0;
  snprintf(msg, msglen, "bad %s '%s' (want %.0f to %.0f)", o->name, val, o->lo, o->hi);
  return -1;
}

/* Whether val is a whole decimal number (strtod's syntax, in range), into *d. */
static int parse_number(const char *val, double *d) {
  char *end;
  errno = 0;
  *d = strtod(val, &end);
  return end != val && !*end && !errno;
}

/* A positive decimal number up to hi (hi 0: no limit). */
static int check_positive(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  if (parse_number(val, &out->d) && out->d > 0 && (o->hi <= 0 || out->d <= o->hi)) return 0;
  if (o->hi > 0) snprintf(msg, msglen, "bad %s '%s' (want a number over 0, at most %g)", o->name, val, o->hi);
  else snprintf(msg, msglen, "bad %s '%s' (want a number over 0)", o->name, val);
  return -1;
}

/* The early cut's factor: 0 (off), or at least lo (below it the cut would take candidates within the noise of the
 * best), at most hi. */
static int check_cut(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  if (parse_number(val, &out->d) && (out->d == 0 || (out->d >= o->lo && out->d <= o->hi))) return 0;
  snprintf(msg, msglen, "bad %s '%s' (want 0 for none, or a factor from %g to %g)", o->name, val, o->lo, o->hi);
  return -1;
}

/* A share from lo to hi, both included. */
static int check_share(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  if (parse_number(val, &out->d) && out->d >= o->lo && out->d <= o->hi) return 0;
  snprintf(msg, msglen, "bad %s '%s' (want a number from %g to %g)", o->name, val, o->lo, o->hi);
  return -1;
}

static int check_target(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  (void)o;
  (void)out;
  if (!strcmp(val, "c") || !strcmp(val, "cuda") || !strcmp(val, "auto")) return 0;
  snprintf(msg, msglen, "unknown target '%s' (c, cuda, auto)", val);
  return -1;
}

static int check_model(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  (void)o;
  (void)out;
  if (!strcmp(val, "xgb") || !strcmp(val, "random")) return 0;
  snprintf(msg, msglen, "unknown model '%s' (xgb, random)", val);
  return -1;
}

static int check_dump(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  static const char *const dumps[] = {"tokens", "ast", "stages", "schedule", "ir", "c", "cuda", "report"};
  (void)o;
  (void)out;
  for (size_t i = 0; i < sizeof dumps / sizeof dumps[0]; i++)
    if (!strcmp(val, dumps[i])) return 0;
  snprintf(msg, msglen, "unknown --dump '%s' (tokens, ast, stages, schedule, ir, c, cuda, report)", val);
  return -1;
}

static int arch_known(const char *a, char *msg, size_t msglen) {
  kg_gpu_limits lim;
  if (kg_gpu_limits_for_arch(a, &lim) == 0) return 1;
  snprintf(msg, msglen, "unknown arch '%s' (e.g. sm_86, sm_90)", a);
  return 0;
}

static int check_arch(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  (void)o;
  (void)out;
  return arch_known(val, msg, msglen) ? 0 : -1;
}

/* ARCH[,ARCH]...: each one known, at most KG_EXPORT_MAX_ARCHS. */
static int check_arch_list(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  (void)o;
  (void)out;
  char list[1024];
  if (strlen(val) >= sizeof list) {
    snprintf(msg, msglen, "arch list too long: '%s'", val);
    return -1;
  }
  snprintf(list, sizeof list, "%s", val);
  int n = 0;
  char *save = NULL;
  for (char *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save), n++) {
    if (!arch_known(s, msg, msglen)) return -1;
    if (n >= KG_EXPORT_MAX_ARCHS) {
      snprintf(msg, msglen, "too many archs in '%s'", val);
      return -1;
    }
  }
  if (n > 0) return 0;
  snprintf(msg, msglen, "bad arch list '%s'", val);
  return -1;
}

static int check_dtype(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  (void)o;
  for (int t = 0; t < KG_DT_COUNT; t++)
    if (!strcmp(val, kg_dtype_names[t])) {
      out->u = (uint64_t)t;
      return 0;
    }
  snprintf(msg, msglen, "bad --dtype '%s' (want f32, f16 or bf16)", val);
  return -1;
}

static int check_dynamic(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  (void)o;
  (void)out;
  char name[64];
  kg_dynamic_size d;
  int nvals = 0;
  int64_t vals[1];
  /* a list of values is --shapes's */
  if (cli_parse_dynamic(val, name, &d, vals, 1, &nvals) == 0 && nvals == 0) return 0;
  snprintf(msg, msglen, "bad --dynamic '%s' (want NAME or NAME=LO..HI)", val);
  return -1;
}

static int check_shapes(const cli_option *o, const char *val, cli_arg *out, char *msg, size_t msglen) {
  (void)o;
  (void)out;
  char name[64];
  kg_dynamic_size d;
  int nvals = 0;
  int64_t vals[KG_DYN_MAX_BUCKETS];
  if (cli_parse_dynamic(val, name, &d, vals, KG_DYN_MAX_BUCKETS, &nvals) == 0 && nvals > 0) return 0;
  snprintf(msg, msglen, "bad --shapes '%s' (want NAME=V1,V2,...)", val);
  return -1;
}

/* ---- the table ---- */

static const cli_option options[] = {
    {CLI_OPT_D, "-D", "NAME=VALUE", PROGRAM_CMDS, check_binding, 0, 0,
     "bind a size variable (every size variable must be bound)"},
    {CLI_OPT_DEF, "--def", "NAME", PROGRAM_CMDS, NULL, 0, 0,
     "the def to use in a file with several (default: the first)"},
    {CLI_OPT_DYNAMIC, "--dynamic", "NAME[=LO..HI]",
     C(CLI_CMD_CHECK) | C(CLI_CMD_LOWER) | C(CLI_CMD_RUN) | C(CLI_CMD_TUNE), check_dynamic, 0, 0,
     "keep size NAME symbolic: one kernel for every value in LO..HI (-D gives the\n"
     "value a run uses; default range: 1 to what keeps tensors under 2^31 elements;\n"
     "tune: a range, tuned in buckets)"},
    {CLI_OPT_DTYPE, "--dtype", "f32|f16|bf16", C(CLI_CMD_CHECK) | C(CLI_CMD_LOWER) | C(CLI_CMD_RUN) | C(CLI_CMD_TUNE),
     check_dtype, 0, 0,
     "make every input and output of the program this type, as if its signature\n"
     "said so (intermediates keep theirs): a workload run in f16 or bf16"},
    {CLI_OPT_TF32, "--tf32", NULL, C(CLI_CMD_CHECK) | C(CLI_CMD_LOWER) | C(CLI_CMD_RUN) | C(CLI_CMD_TUNE), NULL, 0, 0,
     "allow TF32: a sum of products of two f32 reads may run on the tensor cores\n"
     "with its operands rounded to TF32 (10 mantissa bits; f32 accumulation). Another\n"
     "workload than the f32 one: the log records it, verification allows the rounding"},
    {CLI_OPT_SHAPES, "--shapes", "NAME=V1,V2,...", C(CLI_CMD_TUNE), check_shapes, 0, 0,
     "tune size NAME dynamic, one bucket per value listed"},
    {CLI_OPT_BUCKETS, "--buckets", "N", C(CLI_CMD_TUNE), check_count, 1, KG_DYN_MAX_BUCKETS,
     "--dynamic: how many buckets the range is tuned in"},
    {CLI_OPT_EXCHANGE, "--exchange", "K", C(CLI_CMD_TUNE), check_count, 1, KG_DYN_MAX_BUCKETS,
     "--dynamic, --shapes: each bucket also measures its K best neighbours' schedules"},
    {CLI_OPT_SCHEDULE, "--schedule", "FILE", C(CLI_CMD_LOWER) | C(CLI_CMD_RUN), NULL, 0, 0,
     "a schedule trace, one primitive per line (see docs/schedules.md)"},
    {CLI_OPT_RANDOM_SCHEDULE, "--random-schedule", "SEED", C(CLI_CMD_LOWER) | C(CLI_CMD_RUN), check_seed, 0, 0,
     "a random legal schedule drawn from SEED"},
    {CLI_OPT_RANDOM_STEPS, "--random-steps", "N", C(CLI_CMD_LOWER) | C(CLI_CMD_RUN), check_count, 0, 1000,
     "--random-schedule: how many steps to draw (default 10)"},
    {CLI_OPT_TARGET, "--target", "c|cuda|auto", C(CLI_CMD_CHECK) | C(CLI_CMD_LOWER) | MEASURE_CMDS | C(CLI_CMD_EXPORT),
     check_target, 0, 0,
     "code generation target; auto (the default) is cuda when a GPU is present,\n"
     "else c (export: the log's target)"},
    {CLI_OPT_EMULATE, "--emulate", NULL, MEASURE_CMDS, NULL, 0, 0,
     "run CUDA on the CPU emulator (implies --target cuda)"},
    {CLI_OPT_ARCH, "--arch", "sm_XX", MEASURE_CMDS | C(CLI_CMD_LOWER), check_arch, 0, 0,
     "compile CUDA for this arch (default: the device's, else sm_86)"},
    {CLI_OPT_ARCH, "--arch", "sm_XX[,sm_YY]...", C(CLI_CMD_EXPORT), check_arch_list, 0, 0,
     "the archs a CUDA header carries a cubin for (default sm_86)"},
    {CLI_OPT_MEASURE, "--measure", NULL, C(CLI_CMD_RUN), NULL, 0, 0,
     "run in the measurement harness (isolated worker process) and report median,\n"
     "spread, GFLOP/s, GB/s and the kernels' resources"},
    {CLI_OPT_FLUSH_L2, "--flush-l2", NULL, C(CLI_CMD_RUN), NULL, 0, 0,
     "(GPU, --measure) flush the L2 cache between repeats"},
    {CLI_OPT_TIMEOUT, "--timeout", "S", MEASURE_CMDS, check_positive, 0, 1e6,
     "seconds a measured run may take before it is killed (default 10)"},
    {CLI_OPT_MIN_REPEAT_MS, "--min-repeat-ms", "MS", MEASURE_CMDS, check_positive, 0, 1e6,
     "repeat a timed run until this much time has passed (over 0; default 100)"},
    {CLI_OPT_SEED, "--seed", "S", C(CLI_CMD_RUN) | C(CLI_CMD_TUNE), check_seed, 0, 0,
     "the random seed: run's input data, tune's search (default 1)"},
    {CLI_OPT_RTOL, "--rtol", "X", C(CLI_CMD_RUN), check_positive, 0, 0,
     "the relative tolerance of the verification (default 1e-4)"},
    {CLI_OPT_SAVE, "--save", "DIR", C(CLI_CMD_RUN), NULL, 0, 0, "write inputs and outputs as NumPy .npy files"},
    {CLI_OPT_LOAD, "--load", "DIR", C(CLI_CMD_RUN), NULL, 0, 0, "read inputs from NumPy .npy files"},
    {CLI_OPT_DUMP, "--dump", "tokens|ast|stages|schedule|ir|c|cuda|report", C(CLI_CMD_CHECK) | C(CLI_CMD_LOWER),
     check_dump, 0, 0,
     "print one stage of the pipeline (check: tokens, ast or stages); report: each\n"
     "CUDA kernel's static quality (compiled with NVRTC for --arch, default sm_90)"},
    {CLI_OPT_TRIALS, "--trials", "N", C(CLI_CMD_TUNE), check_count, 1, 1000000,
     "measurements this run, over all workloads (default 64)"},
    {CLI_OPT_LOG, "--log", "FILE", C(CLI_CMD_TUNE), NULL, 0, 0,
     "the tuning log: read first (resume: the search measures nothing twice), appended to\n"
     "(default NAME.TARGET.kglog for the first workload; FILE.model beside it)"},
    {CLI_OPT_MODEL, "--model", "xgb|random", C(CLI_CMD_TUNE), check_model, 0, 0,
     "rank candidates with the XGBoost cost model (default) or not at all"},
    {CLI_OPT_POPULATION, "--population", "N", C(CLI_CMD_TUNE), check_count, 1, 100000,
     "candidates per generation of the evolutionary search"},
    {CLI_OPT_GENERATIONS, "--generations", "N", C(CLI_CMD_TUNE), check_count, 1, 100000,
     "generations of the evolutionary search per round"},
    {CLI_OPT_PER_ROUND, "--per-round", "N", C(CLI_CMD_TUNE), check_count, 1, 100000, "candidates measured per round"},
    {CLI_OPT_BEST_OUT, "--best-out", "FILE", C(CLI_CMD_TUNE), NULL, 0, 0,
     "write the first workload's best trace to FILE"},
    {CLI_OPT_CONFIRM, "--confirm", "N", C(CLI_CMD_TUNE), check_count, 0, 1000,
     "after the search, measure each workload's N fastest schedules again (default 3;\n"
     "0: none) and take the best by the median of its measurements"},
    {CLI_OPT_CONFIRM_RUNS, "--confirm-runs", "R", C(CLI_CMD_TUNE), check_count, 1, 100,
     "how many more times --confirm measures each (default 2)"},
    {CLI_OPT_EARLY_CUT, "--early-cut", "F", C(CLI_CMD_TUNE), check_cut, 2, 1000,
     "C target: time a candidate by one run when it and its verification run each took F\n"
     "times the fastest time so far (and a quarter of --min-repeat-ms); default 4, 0: never"},
    {CLI_OPT_SKETCH_SHARE, "--sketch-share", "F", C(CLI_CMD_TUNE), check_share, 0, 1,
     "the share of each round's model-ranked picks spread evenly over the search space's\n"
     "sketches, each its best-scored (0 to 1; default 0.5, 0: by score alone)"},
    {CLI_OPT_NO_FUSE, "--no-fuse", NULL, C(CLI_CMD_TUNE), NULL, 0, 0,
     "search unfused schedules only: every stage its own loop nest (CUDA: kernel),\n"
     "none inlined or computed inside another (default log NAME.TARGET.nofuse.kglog)"},
    {CLI_OPT_QUIET, "--quiet", NULL, C(CLI_CMD_TUNE), NULL, 0, 0, "no progress on stderr"},
    {CLI_OPT_RANK0_IDLE, "--rank0-idle", NULL, C(CLI_CMD_TUNE), NULL, 0, 0,
     "(under mpirun) rank 0 searches and logs but measures nothing"},
    {CLI_OPT_WORKER_TIMEOUT, "--worker-timeout", "S", C(CLI_CMD_TUNE), check_positive, 0, 1e7,
     "(under mpirun) drop a rank that holds candidates and says nothing for S seconds;\n"
     "its candidates go to the others (default: from --timeout, at least 10 minutes)"},
    {CLI_OPT_BEST, "--best", NULL, C(CLI_CMD_SHOW), NULL, 0, 0, "only the best record of each workload, as a trace"},
    {CLI_OPT_LIB, "--lib", "DIR", C(CLI_CMD_REPLAY) | C(CLI_CMD_EXPORT), NULL, 0, 0,
     "also look for a logged workload's program as DIR/NAME.te (repeatable)"},
    {CLI_OPT_OUT, "--out", "DIR", C(CLI_CMD_EXPORT), NULL, 0, 0, "the folder the headers go to (default .)"},
    {CLI_OPT_WORKLOAD, "--workload", "NAME", C(CLI_CMD_EXPORT), NULL, 0, 0, "export only this workload of the log"},
    {CLI_OPT_PREFIX, "--prefix", "P", C(CLI_CMD_EXPORT), NULL, 0, 0,
     "the prefix of the header's public names (default kg_)"},
    {CLI_OPT_ALLOW_EMULATED, "--allow-emulated", NULL, C(CLI_CMD_EXPORT), NULL, 0, 0,
     "CUDA: also export records timed on the CUDA emulator (by default passed over:\n"
     "the emulator's clock does not rank GPU kernels)"},
};
#define NOPTIONS ((int)(sizeof options / sizeof options[0]))

const char *cli_cmd_name(cli_cmd cmd) { return commands[cmd].name; }

int cli_cmd_find(const char *name) {
  for (int c = 0; c < CLI_CMD_COUNT; c++)
    if (!strcmp(commands[c].name, name)) return c;
  return -1;
}

/* ---- usage ---- */

static void print_option(FILE *f, const cli_option *o) {
  char head[96];
  snprintf(head, sizeof head, "%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
  /* the help's continuation lines line up under its first */
  if (strlen(head) > 24) fprintf(f, "  %s\n  %-24s ", head, "");
  else fprintf(f, "  %-24s ", head);
  for (const char *h = o->help; *h; h++) {
    fputc(*h, f);
    if (*h == '\n') fprintf(f, "  %-24s ", "");
  }
  fputc('\n', f);
}

void cli_usage(cli_cmd cmd, FILE *f) {
  fprintf(f, "usage: kgen %s %s\n%s", commands[cmd].name, commands[cmd].synopsis, commands[cmd].notes);
  fprintf(f, "options:\n");
  for (int i = 0; i < NOPTIONS; i++)
    if (options[i].cmds & C(cmd)) print_option(f, &options[i]);
  fprintf(f, "  %-24s this text\n", "--help");
}

void cli_usage_all(FILE *f) {
  fprintf(f, "usage:\n  kgen --version | --help\n");
  for (int c = 0; c < CLI_CMD_COUNT; c++) fprintf(f, "  kgen %s %s\n", commands[c].name, commands[c].synopsis);
  fprintf(f, "options (kgen COMMAND --help lists the command's own):\n");
  for (int i = 0; i < NOPTIONS; i++) {
    int first = 1;
    for (int k = 0; k < i && first; k++) first = options[k].id != options[i].id;
    if (!first) continue; /* one line per option, the first row's */
    print_option(f, &options[i]);
  }
  fprintf(f, "A bare NAME resolves to the workload library: $KGEN_LIB/NAME.te, else te/lib/NAME.te of the source tree\n"
             "kgen was built in, else share/kgen/lib/NAME.te of the tree it is installed in.\n");
}

int cli_usage_error(cli_cmd cmd, const char *fmt, const char *arg) {
  fprintf(stderr, "kgen %s: ", commands[cmd].name);
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  cli_usage(cmd, stderr);
  return 2;
}

/* ---- the parser ---- */

/* The row of option name for cmd; NULL when no command has it. *other: a command of another row of that name. */
static const cli_option *find_option(const char *name, cli_cmd cmd, unsigned *others) {
  const cli_option *o = NULL;
  *others = 0;
  for (int i = 0; i < NOPTIONS; i++) {
    if (strcmp(options[i].name, name)) continue;
    if (options[i].cmds & C(cmd)) o = &options[i];
    *others |= options[i].cmds;
  }
  return o;
}

/* "run, tune and replay" */
static void list_cmds(unsigned cmds, char *out, size_t outlen) {
  int n = 0, total = 0;
  for (int c = 0; c < CLI_CMD_COUNT; c++) total += (cmds >> c) & 1;
  out[0] = 0;
  for (int c = 0; c < CLI_CMD_COUNT; c++)
    if (cmds & C(c)) {
      size_t l = strlen(out);
      snprintf(out + l, outlen - l, "%s%s", n == 0 ? "" : n == total - 1 ? " and " : ", ", commands[c].name);
      n++;
    }
}

int cli_parse(cli_cmd cmd, int argc, char **argv, int from, cli_arg *out, int *nout) {
  char msg[1200];
  *nout = 0;
  for (int i = from; i < argc; i++) {
    const char *a = argv[i];
    cli_arg *r = &out[(*nout)++];
    memset(r, 0, sizeof *r);
    r->name = a;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      cli_usage(cmd, stdout);
      exit(0);
    }
    if (a[0] != '-' || !a[1]) {
      r->id = CLI_OPT_ARG;
      r->val = a;
      continue;
    }
    /* -D takes its value attached (-DN=4) or as the next argument */
    int attached = !strncmp(a, "-D", 2) && a[2];
    unsigned others;
    const cli_option *o = find_option(attached ? "-D" : a, cmd, &others);
    if (!o && !others) return cli_usage_error(cmd, "unknown option '%s'", a);
    if (!o) {
      char cmds[160];
      list_cmds(others, cmds, sizeof cmds);
      snprintf(msg, sizeof msg, "%s goes with %s", a, cmds);
      return cli_usage_error(cmd, "%s", msg);
    }
    r->id = o->id;
    r->name = o->name;
    if (o->arg) {
      if (attached) {
        r->val = a + 2;
      } else {
        if (i + 1 >= argc) return cli_usage_error(cmd, "option %s needs a value", a);
        r->val = argv[++i];
      }
      if (o->check && o->check(o, r->val, r, msg, sizeof msg)) return cli_usage_error(cmd, "%s", msg);
    }
  }
  return 0;
}
