/* The CLI's shared helpers (cli/util.c) and its commands in files of their own. */
#ifndef KG_CLI_H
#define KG_CLI_H
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include "kgen.h"

#define MAX_BINDINGS 64

/* ---- the commands' options (cli/options.c): one table, one parser, the usage texts generated from it ---- */

typedef enum {
  CLI_CMD_CHECK,
  CLI_CMD_LOWER,
  CLI_CMD_RUN,
  CLI_CMD_TUNE,
  CLI_CMD_SHOW,
  CLI_CMD_REPLAY,
  CLI_CMD_EXPORT,
  CLI_CMD_COUNT
} cli_cmd;

typedef enum {
  CLI_OPT_ARG, /* not an option: a positional argument */
  CLI_OPT_D,
  CLI_OPT_DEF,
  CLI_OPT_DYNAMIC,
  CLI_OPT_DTYPE,
  CLI_OPT_TF32,
  CLI_OPT_SHAPES,
  CLI_OPT_BUCKETS,
  CLI_OPT_EXCHANGE,
  CLI_OPT_SCHEDULE,
  CLI_OPT_RANDOM_SCHEDULE,
  CLI_OPT_RANDOM_STEPS,
  CLI_OPT_TARGET,
  CLI_OPT_EMULATE,
  CLI_OPT_ARCH,
  CLI_OPT_MEASURE,
  CLI_OPT_FLUSH_L2,
  CLI_OPT_TIMEOUT,
  CLI_OPT_MIN_REPEAT_MS,
  CLI_OPT_SEED,
  CLI_OPT_RTOL,
  CLI_OPT_SAVE,
  CLI_OPT_LOAD,
  CLI_OPT_DUMP,
  CLI_OPT_TRIALS,
  CLI_OPT_LOG,
  CLI_OPT_MODEL,
  CLI_OPT_POPULATION,
  CLI_OPT_GENERATIONS,
  CLI_OPT_PER_ROUND,
  CLI_OPT_BEST_OUT,
  CLI_OPT_NO_FUSE,
  CLI_OPT_CONFIRM,
  CLI_OPT_CONFIRM_RUNS,
  CLI_OPT_EARLY_CUT,
  CLI_OPT_SKETCH_SHARE,
  CLI_OPT_QUIET,
  CLI_OPT_RANK0_IDLE,
  CLI_OPT_WORKER_TIMEOUT,
  CLI_OPT_BEST,
  CLI_OPT_LIB,
  CLI_OPT_OUT,
  CLI_OPT_WORKLOAD,
  CLI_OPT_PREFIX,
  CLI_OPT_ALLOW_EMULATED
} cli_opt;

/* One parsed argument, in command-line order. Its value is validated: u holds a count or seed, d a number of
 * seconds, milliseconds or a tolerance, b a -D binding. */
typedef struct cli_arg {
  cli_opt id;
  const char *name; /* the option ("-D" also for -DNAME=VALUE), or the argument itself */
  const char *val;  /* NULL for a flag */
  uint64_t u;
  double d;
  kg_binding b;
} cli_arg;

const char *cli_cmd_name(cli_cmd cmd);
int cli_cmd_find(const char *name); /* the command of that name, or -1 */
/* Parses argv[from..argc-1] for cmd into out (room for argc entries), *n of them. 0, or the exit status 2 of a
 * usage error (printed: an option cmd does not take, a missing or bad value; each option validates its value the
 * same way in every command). --help / -h prints cmd's usage on stdout and exits 0. */
int cli_parse(cli_cmd cmd, int argc, char **argv, int from, cli_arg *out, int *n);
/* "kgen CMD: " + fmt (one %s: arg) + cmd's usage on stderr; returns the exit status 2. */
int cli_usage_error(cli_cmd cmd, const char *fmt, const char *arg);
void cli_usage(cli_cmd cmd, FILE *f); /* cmd's usage: synopsis and options, from the table */
void cli_usage_all(FILE *f);         /* kgen --help */

int cli_parse_u64(const char *s, uint64_t *v);            /* 0, or -1 when s is not a decimal number */
int cli_parse_binding(const char *s, kg_binding *b);     /* NAME=VALUE; 0 or -1 */
/* A program or schedule file, at most KG_FILE_MAX_TEXT bytes and a regular file (base/file.h); NULL with
 * "PATH: reason" in err. */
char *cli_read_file(const char *path, size_t *len, char *err, size_t errlen);
/* A bare name (no '/', no ".te", not a file) resolves into the workload library. Caller frees. */
char *cli_resolve_program(const char *arg);
/* Resolves and reads a program's text (*path: the resolved path, caller frees both); prints why on failure. */
char *cli_read_program(const char *file, char **path, size_t *len);
/* --dynamic NAME or NAME=LO..HI (a range) or NAME=V1,V2,... (sizes: lo/hi are their extremes, and *vals, when
 * non-NULL, gets the list, up to maxvals; *nvals its count, 0 for a range). d->name points into name[64], which
 * the caller keeps. 0, or -1 when malformed. */
int cli_parse_dynamic(const char *s, char name[64], kg_dynamic_size *d, int64_t *vals, int maxvals, int *nvals);
/* Loads and checks a program, then marks the sizes in dyn dynamic (ndyn may be 0); prints the error and returns
 * NULL on failure. */
kg_program *cli_load_program(const char *file, const char *def, const kg_binding *b, int nb,
                             const kg_dynamic_size *dyn, int ndyn, int io_dtype, int tf32);

/* Reads a tuning log for command cmd; prints why and returns -1 (log freed) when it is missing or unreadable, or
 * (need_records) holds no record this kgen can use: empty, all garbage, or only records of a newer format. Says on
 * stderr what the reader skipped (cli_log_notes). */
int cli_read_log(const char *cmd, const char *path, kg_tlog *log, int need_records);
/* One warning line on stderr per stretch the reader skipped: "kgen CMD: warning: LOG: skipped N bytes at offset
 * X (not a record)", or a record of a newer format version. */
void cli_log_notes(const char *cmd, const char *path, const kg_tlog *log);

/* cli/env.c: at start, install the build folders' signal cleanup and remove those of dead kgen processes. */
void cli_env_start(void);
/* Before work on target (or auto): a set but unusable KGEN_CUDA_LIB or KGEN_NVRTC is an error naming it (printed,
 * for command cmd). 0, or the exit status 1. */
int cli_env_check(const char *cmd, kg_target_kind target, int emulate, int target_auto);

int cli_tune(int argc, char **argv); /* kgen tune ...: exit status */
int cli_show(int argc, char **argv); /* kgen show ...: exit status */
int cli_replay(int argc, char **argv); /* kgen replay ...: exit status */
int cli_export(int argc, char **argv); /* kgen export ...: exit status */
#endif
