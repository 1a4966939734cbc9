/* `kgen replay` and `kgen export`: argument parsing, finding each logged workload's program, and printing, around
 * replay/replay.h and replay/export.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "../base/clock.h"
#include "../base/strbuf.h"
#include "../replay/export.h"
#include "../replay/replay.h"

#define MAX_FILES 64

#define replay_usage(fmt, arg) cli_usage_error(CLI_CMD_REPLAY, fmt, arg)
#define export_usage(fmt, arg) cli_usage_error(CLI_CMD_EXPORT, fmt, arg)

/* Where the programs of a log's workloads are looked for: files named on the command line (a def of the
 * workload's name in one of them), then NAME.te in each --lib folder, then the workload library. */
typedef struct finder {
  const char *files[MAX_FILES];
  int nfiles;
  const char *libs[MAX_FILES];
  int nlibs;
} finder;

/* A bare NAME given on the command line is looked for in the --lib folders first (then, by the caller, in the
 * library). The path returned lives until the next call. */
static const char *lib_path(const finder *fd, const char *arg) {
  static char path[4096];
  struct stat st;
  if (strchr(arg, '/') || strstr(arg, ".te")) return arg;
  for (int i = 0; i < fd->nlibs; i++) {
    snprintf(path, sizeof path, "%s/%s.te", fd->libs[i], arg);
    if (stat(path, &st) == 0) return path;
  }
  return arg;
}

/* p loaded from path as def `name` with sizes b; NULL (and *why set) when it cannot be. */
static kg_program *load_def(const char *path, const char *name, const kg_binding *b, int nb, char *why,
                            size_t whylen) {
  size_t len;
  char *text = cli_read_file(path, &len, why, whylen);
  if (!text) return NULL;
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  kg_program *p = kg_program_load(path, text, len, name, b, nb, &diag, &da);
  if (!p) {
    /* the first line of the diagnostic is enough to say why */
    const char *m = diag.msg ? diag.msg : "cannot load";
    const char *nl = strchr(m, '\n');
    snprintf(why, whylen, "%.*s", (int)(nl ? nl - m : (long)strlen(m)), m);
  }
  kg_arena_free(&da);
  free(text);
  return p;
}

/* The program of record r's workload: the first candidate whose program, checked with r's sizes, has r's hash.
 * NULL with why (what was tried) when none does. */
static kg_program *find_program(const finder *fd, const kg_tlog_record *r, char *why, size_t whylen) {
  kg_binding b[KG_TLOG_MAX_SIZES];
  for (int k = 0; k < r->workload.nsizes; k++) b[k] = (kg_binding){r->workload.size_names[k], r->workload.size_values[k]};
  kg_strbuf tried;
  kg_strbuf_init(&tried);
  int ncand = fd->nfiles + fd->nlibs + 1;
  kg_program *found = NULL;
  for (int c = 0; c < ncand && !found; c++) {
    char *path;
    if (c < fd->nfiles) {
      path = strdup(fd->files[c]);
    } else if (c < fd->nfiles + fd->nlibs) {
      kg_strbuf pb;
      kg_strbuf_init(&pb);
      kg_strbuf_printf(&pb, "%s/%s.te", fd->libs[c - fd->nfiles], r->workload.name);
      path = kg_strbuf_take(&pb);
      struct stat st;
      if (stat(path, &st) != 0) {
        free(path);
        continue;
      }
    } else {
      path = cli_resolve_program(r->workload.name);
    }
    char w[512];
    kg_program *p = load_def(path, r->workload.name, b, r->workload.nsizes, w, sizeof w);
    if (p && r->workload.io_dtype > 0) {
      /* tuned with --dtype: the same retyping */
      kg_arena da;
      kg_arena_init(&da);
      kg_diag d = {0};
      if (kg_program_set_io_dtype(p, (kg_dtype)(r->workload.io_dtype - 1), &d, &da) != 0) {
        snprintf(w, sizeof w, "%s: %s", path, d.msg ? d.msg : "cannot retype");
        kg_program_free(p);
        p = NULL;
      }
      kg_arena_free(&da);
    }
    if (p) p->tf32 = r->workload.tf32; /* tuned with --tf32: the same permission */
    if (p && r->ndyn > 0) {
      /* a dynamic kernel's record: the same sizes kept symbolic over the same ranges */
      kg_dynamic_size dyn[KG_TLOG_MAX_SIZES];
      for (int k = 0; k < r->ndyn; k++) dyn[k] = (kg_dynamic_size){r->dyn_names[k], r->dyn_lo[k], r->dyn_hi[k]};
      kg_arena da;
      kg_arena_init(&da);
      kg_diag d = {0};
      if (kg_program_set_dynamic(p, dyn, r->ndyn, &d, &da) != 0) {
        snprintf(w, sizeof w, "%s: %s", path, d.msg ? d.msg : "bad dynamic sizes");
        kg_program_free(p);
        p = NULL;
      }
      kg_arena_free(&da);
    }
    if (p) {
      kg_tlog_workload wl;
      kg_tlog_workload_of(p, &wl);
      if (!strcmp(wl.hash, r->workload.hash)) {
        found = p;
      } else {
        snprintf(w, sizeof w, "%s: def %s has hash %s, not %s (the program changed since the log was written)", path,
                 r->workload.name, wl.hash, r->workload.hash);
        kg_program_free(p);
      }
    }
    if (!found) kg_strbuf_printf(&tried, "%s%s", tried.len ? "; " : "", w);
    free(path);
  }
  snprintf(why, whylen, "%s", tried.len ? tried.s : "no program to try");
  kg_strbuf_free(&tried);
  return found;
}

/* ---- replay ---- */

/* The name of the first def in the file at path (heap), or NULL. */
static char *first_def_name(const char *path) {
  size_t len;
  char err[256];
  char *text = cli_read_file(path, &len, err, sizeof err);
  if (!text) return NULL;
  kg_arena a;
  kg_arena_init(&a);
  kg_diag diag = {0};
  kg_source src = {.name = path, .text = text, .len = len};
  kg_module *mod = kg_parse_module(&a, &src, &diag);
  char *name = mod && mod->ndefs > 0 ? strdup(mod->defs[0]->name) : NULL;
  kg_arena_free(&a);
  free(text);
  return name;
}

static int replay_one(const kg_program *p, const kg_tlog *log, const char *log_path, const kg_measure_opts *mo) {
  char err[1024];
  kg_replay_result r;
  /* sizes that cannot fit are the user's error (exit 1), said before a measurer (or a device) is tried */
  if (kg_data_check_memory(p, err, sizeof err) != 0) {
    fprintf(stderr, "kgen replay: %s\n", err);
    return 1;
  }
  if (kg_replay(p, log, mo, &r, err, sizeof err) != 0) {
    fprintf(stderr, "kgen replay: %s\n", err);
    return 3;
  }
  kg_tlog_workload wl;
  kg_tlog_workload_of(p, &wl);
  printf("%s", wl.name);
  for (int k = 0; k < wl.nsizes; k++) printf(" %s=%lld", wl.size_names[k], (long long)wl.size_values[k]);
  printf(" on %s %s (%s):\n", mo->target == KG_TARGET_CUDA ? "cuda" : "c", r.arch, r.device);
  for (const char *l = r.pick.skipped; *l;) {
    const char *nl = strchr(l, '\n');
    int n = nl ? (int)(nl - l) : (int)strlen(l);
    fprintf(stderr, "kgen replay: warning: %s: %.*s: passed over\n", log_path, n, l);
    l += n + (nl != NULL);
  }
  if (r.warning[0]) fprintf(stderr, "kgen replay: warning: %s\n", r.warning);
  if (r.rec) {
    printf("  record %d of %s, measured on %s (%s)%s%s\n", r.pick.index + 1, log_path, r.rec->target.device,
           r.rec->target.arch, r.rec->sketch ? ", sketch " : "", r.rec->sketch ? r.rec->sketch : "");
    char *text = kg_trace_to_text(&r.rec->trace);
    printf("  trace (%d steps):\n", r.rec->trace.nsteps);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) printf("    %s\n", line);
    free(text);
  } else {
    printf("  the default schedule (no record)\n");
  }
  int rc = 0;
  if (r.meas.status != KG_STATUS_OK) {
    printf("  %s: %s\n", kg_status_names[r.meas.status], r.meas.msg);
    rc = 1;
  } else {
    printf("  verify: ok max_rel_err=%.3g\n", r.meas.max_rel_err);
    char now[32], logged[32];
    kg_format_seconds(now, sizeof now, r.meas.median_s);
    if (!mo->no_timing) {
      printf("  time: %s now", now);
      if (r.rec && kg_tlog_record_estimated(r.rec)) {
        /* an emulator record's time is an estimate for its arch: no ratio with what ran here */
        kg_format_seconds(logged, sizeof logged, r.pick.median_s);
        printf(", %s estimated in the log", logged);
      } else if (r.rec) {
        kg_format_seconds(logged, sizeof logged, r.pick.median_s);
        printf(", %s logged (now/logged %.2f)", logged, r.meas.median_s / r.pick.median_s);
      }
      printf(", compile %.2f s\n", r.meas.compile_s);
    }
  }
  kg_replay_result_free(&r);
  return rc;
}

int cli_replay(int argc, char **argv) {
  const char *log_path = NULL, *file = NULL, *def = NULL;
  kg_binding b[MAX_BINDINGS];
  int nb = 0, target_auto = 1;
  finder fd = {0};
  kg_measure_opts mo = {.target = KG_TARGET_C, .seed = 1};
  cli_arg *args = calloc((size_t)argc, sizeof *args);
  int nargs = 0, prc = args ? cli_parse(CLI_CMD_REPLAY, argc, argv, 2, args, &nargs) : 1;
  for (int i = 0; i < nargs && prc == 0; i++) {
    const cli_arg *r = &args[i];
    const char *val = r->val;
    switch (r->id) {
      case CLI_OPT_D:
        if (nb >= MAX_BINDINGS) prc = replay_usage("bad size binding '%s' (too many)", val);
        else b[nb++] = r->b;
        break;
      case CLI_OPT_TARGET:
        target_auto = !strcmp(val, "auto");
        if (!target_auto) mo.target = !strcmp(val, "c") ? KG_TARGET_C : KG_TARGET_CUDA;
        break;
      case CLI_OPT_EMULATE:
        mo.emulate = 1;
        mo.target = KG_TARGET_CUDA;
        target_auto = 0;
        break;
      case CLI_OPT_ARCH: mo.arch = val; break;
      case CLI_OPT_DEF: def = val; break;
      case CLI_OPT_LIB:
        if (fd.nlibs >= MAX_FILES) prc = replay_usage("too many %s", r->name);
        else fd.libs[fd.nlibs++] = val;
        break;
      case CLI_OPT_TIMEOUT: mo.timeout_s = r->d; break;
      case CLI_OPT_MIN_REPEAT_MS: mo.min_repeat_s = r->d / 1e3; break;
      case CLI_OPT_ARG:
        if (!log_path) log_path = val;
        else if (!file) file = val;
        else prc = replay_usage("unexpected argument '%s'", val);
        break;
      default: prc = replay_usage("option %s is not handled here", r->name); break;
    }
  }
  free(args);
  if (prc) return prc;
  if (!log_path) return replay_usage("%s", "missing LOG");
  if (mo.emulate && !target_auto && mo.target != KG_TARGET_CUDA)
    return replay_usage("%s", "--emulate goes with --target cuda");
  if (mo.arch && mo.target != KG_TARGET_CUDA && !target_auto)
    return replay_usage("%s", "--arch goes with --target cuda");
  int erc = cli_env_check("replay", mo.target, mo.emulate, target_auto);
  if (erc) return erc;
  if (target_auto) {
    char why[256];
    mo.target = kg_cudrv_probe(why, sizeof why) ? KG_TARGET_CUDA : KG_TARGET_C;
  }
  kg_tlog log;
  if (cli_read_log("replay", log_path, &log, 1) != 0) return 1;
  int rc = 0;
  if (file && nb > 0) {
    /* one program, as named */
    kg_program *p = cli_load_program(lib_path(&fd, file), def, b, nb, NULL, 0, -1, 0);
    if (!p) {
      kg_tlog_free(&log);
      return 1;
    }
    rc = replay_one(p, &log, log_path, &mo);
    kg_program_free(p);
  } else {
    /* every binding of the log (of the named workload) */
    char *only = NULL, *resolved = NULL;
    if (file) {
      resolved = cli_resolve_program(lib_path(&fd, file));
      only = def ? strdup(def) : first_def_name(resolved);
      if (!only) {
        fprintf(stderr, "kgen replay: cannot read a def from '%s'\n", resolved);
        free(resolved);
        kg_tlog_free(&log);
        return 1;
      }
      fd.files[fd.nfiles++] = resolved;
    }
    int *first, nw = kg_tlog_workloads(&log, &first), done = 0;
    for (int w = 0; w < nw; w++) {
      const kg_tlog_record *r = &log.recs[first[w]];
      if (only && strcmp(r->workload.name, only)) continue;
      char why[2048];
      kg_program *p = find_program(&fd, r, why, sizeof why);
      if (!p) {
        fprintf(stderr, "kgen replay: warning: %s [%s]: skipped, no program: %s\n", r->workload.name,
                r->workload.hash, why);
        rc = rc ? rc : 1;
        continue;
      }
      int one = replay_one(p, &log, log_path, &mo);
      if (one > rc) rc = one;
      done++;
      kg_program_free(p);
    }
    if (only && !done) {
      fprintf(stderr, "kgen replay: warning: %s holds no record of %s; bind its sizes with -D to replay its default "
                      "schedule\n", log_path, only);
      rc = 1;
    }
    free(first);
    free(only);
    free(resolved);
  }
  kg_tlog_free(&log);
  return rc;
}

/* ---- export ---- */

/* DIR/NAME.h written whole, then renamed over the old one: a reader never sees half a header. */
/* mkdir -p: dir and its missing parents (an existing non-folder is left for the caller's check). 0, or -1 with
 * the reason in why. */
static int make_dirs(const char *dir, char *why, size_t whylen) {
  char *path = strdup(dir);
  if (!path) {
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  int rc = 0;
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p) continue;
    char c = *p;
    *p = 0;
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
      snprintf(why, whylen, "%s: %s", path, strerror(errno));
      rc = -1;
    }
    *p = c;
    if (!c || rc) break;
  }
  free(path);
  return rc;
}

static int write_header(const char *dir, const char *name, const char *text) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s.h", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) {
    fprintf(stderr, "kgen export: cannot write '%s': %s\n", tmp, strerror(errno));
    return -1;
  }
  size_t len = strlen(text);
  int bad = fwrite(text, 1, len, f) != len;
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    fprintf(stderr, "kgen export: cannot write '%s': %s\n", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  printf("%s\n", path);
  return 0;
}

int cli_export(int argc, char **argv) {
  const char *log_path = NULL, *out_dir = ".", *only = NULL;
  kg_export_opts o = {.target = KG_TARGET_C};
  int target_given = 0;
  finder fd = {0};
  char arch_list[1024]; /* --arch's list, split in place: o.archs point into it */
  cli_arg *args = calloc((size_t)argc, sizeof *args);
  int nargs = 0, prc = args ? cli_parse(CLI_CMD_EXPORT, argc, argv, 2, args, &nargs) : 1;
  for (int i = 0; i < nargs && prc == 0; i++) {
    const cli_arg *r = &args[i];
    const char *val = r->val;
    switch (r->id) {
      case CLI_OPT_OUT: out_dir = val; break;
      case CLI_OPT_WORKLOAD: only = val; break;
      case CLI_OPT_TARGET:
        /* auto: the log's target, as without the option */
        target_given = strcmp(val, "auto") != 0;
        o.target = !strcmp(val, "cuda") ? KG_TARGET_CUDA : KG_TARGET_C;
        break;
      case CLI_OPT_ARCH:
        /* the list is validated: split it in place, o.archs point into it */
        snprintf(arch_list, sizeof arch_list, "%s", val);
        o.narchs = 0;
        for (char *s = strtok(arch_list, ","); s && o.narchs < KG_EXPORT_MAX_ARCHS; s = strtok(NULL, ","))
          o.archs[o.narchs++] = s;
        break;
      case CLI_OPT_PREFIX: o.prefix = val; break;
      case CLI_OPT_ALLOW_EMULATED: o.allow_emulated = 1; break;
      case CLI_OPT_LIB:
        if (fd.nlibs >= MAX_FILES) prc = export_usage("too many %s", r->name);
        else fd.libs[fd.nlibs++] = val;
        break;
      case CLI_OPT_ARG:
        if (!log_path) log_path = val;
        else if (fd.nfiles >= MAX_FILES) prc = export_usage("too many programs%s", "");
        else fd.files[fd.nfiles++] = val;
        break;
      default: prc = export_usage("option %s is not handled here", r->name); break;
    }
  }
  free(args);
  if (prc) return prc;
  if (!log_path) {
    return export_usage("%s", "missing LOG");
  }
  if (o.narchs && target_given && o.target != KG_TARGET_CUDA) {
    return export_usage("%s", "--arch goes with --target cuda");
  }
  kg_tlog log;
  if (cli_read_log("export", log_path, &log, 1) != 0) {
    return 1;
  }
  /* No --target: the log's (when its records all have one kind). */
  if (!target_given && o.narchs) o.target = KG_TARGET_CUDA;
  if (!target_given && !o.narchs) {
    int c = 0, cuda = 0;
    for (int i = 0; i < log.n; i++) *(!strcmp(log.recs[i].target.kind, "cuda") ? &cuda : &c) = 1;
    if (c && cuda) {
      fprintf(stderr, "kgen export: %s holds records of both targets: say --target c or --target cuda\n", log_path);
      kg_tlog_free(&log);
      return 2;
    }
    o.target = cuda ? KG_TARGET_CUDA : KG_TARGET_C;
  }
  o.log_path = log_path;
  char *resolved_files[MAX_FILES];
  for (int i = 0; i < fd.nfiles; i++) fd.files[i] = resolved_files[i] = cli_resolve_program(lib_path(&fd, fd.files[i]));
  struct stat st;
  char why[512] = "";
  if (make_dirs(out_dir, why, sizeof why) != 0 || stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    if (why[0]) fprintf(stderr, "kgen export: cannot create the folder '%s': %s\n", out_dir, why);
    else fprintf(stderr, "kgen export: '%s' is not a folder\n", out_dir);
    kg_tlog_free(&log);
    for (int i = 0; i < fd.nfiles; i++) free(resolved_files[i]);
    return 1;
  }
  int *first, nw = kg_tlog_workloads(&log, &first);
  int rc = 0, matched = 0;
  /* one header per workload name and variant (--dtype, --tf32: another workload, another header), holding every
   * binding of it the log has */
#define SAME_VARIANT(a, b)                                                                                  \
  (!strcmp((a)->workload.name, (b)->workload.name) && (a)->workload.io_dtype == (b)->workload.io_dtype &&   \
   (a)->workload.tf32 == (b)->workload.tf32)
  for (int w = 0; w < nw; w++) {
    const kg_tlog_record *r0 = &log.recs[first[w]];
    int earlier = 0;
    for (int v = 0; v < w && !earlier; v++) earlier = SAME_VARIANT(&log.recs[first[v]], r0);
    if (earlier || (only && strcmp(r0->workload.name, only))) continue;
    matched++;
    const kg_program *progs[256];
    kg_program *owned[256];
    int np = 0;
    /* A header holds either kernels specialized to their sizes or dynamic ones: when the log has dynamic
     * records of the workload, they win. */
    int ndynw = 0, nstatw = 0;
    for (int v = w; v < nw; v++)
      if (SAME_VARIANT(&log.recs[first[v]], r0)) *(log.recs[first[v]].ndyn ? &ndynw : &nstatw) += 1;
    if (ndynw && nstatw)
      fprintf(stderr, "kgen export: warning: %s: the log holds dynamic and specialized records; exporting the %d dynamic "
                      "binding%s only\n", r0->workload.name, ndynw, ndynw == 1 ? "" : "s");
    for (int v = w; v < nw && np < 256; v++) {
      const kg_tlog_record *r = &log.recs[first[v]];
      if (!SAME_VARIANT(r, r0)) continue;
      if (ndynw && !r->ndyn) continue;
      char why[2048];
      kg_program *p = find_program(&fd, r, why, sizeof why);
      if (!p) {
        fprintf(stderr, "kgen export: warning: %s [%s]: skipped, no program: %s\n", r->workload.name, r->workload.hash, why);
        continue;
      }
      owned[np] = p;
      progs[np++] = p;
    }
    if (!np) {
      rc = 1;
      continue;
    }
    char *header = NULL, *warnings = NULL, err[2048];
    if (kg_export_header(progs, np, &log, &o, &header, &warnings, err, sizeof err) != 0) {
      fprintf(stderr, "kgen export: %s\n", err);
      rc = 1;
    } else {
      for (char *line = strtok(warnings, "\n"); line; line = strtok(NULL, "\n"))
        fprintf(stderr, "kgen export: warning: %s\n", line);
      char vname[256];
      if (write_header(out_dir, kg_export_variant_name(progs[0], vname, sizeof vname), header) != 0) rc = 1;
    }
    free(header);
    free(warnings);
    for (int i = 0; i < np; i++) kg_program_free(owned[i]);
  }
#undef SAME_VARIANT
  if (only && !matched) {
    fprintf(stderr, "kgen export: %s holds no record of workload '%s'\n", log_path, only);
    rc = 1;
  } else if (!nw) {
    fprintf(stderr, "kgen export: %s holds no record\n", log_path);
    rc = 1;
  }
  free(first);
  for (int i = 0; i < fd.nfiles; i++) free(resolved_files[i]);
  kg_tlog_free(&log);
  return rc;
}
