/* `kgen tune` and `kgen show`: argument parsing and printing around search/tune.h and tlog/tlog.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "../base/clock.h"
#include "../base/strbuf.h"
#include "../dist/dist.h"
#include "../search/dynamic.h"
#include "../search/tune.h"
#include "../tlog/tlog.h"

#define MAX_WORKLOADS 32

#define tune_usage(fmt, arg) cli_usage_error(CLI_CMD_TUNE, fmt, arg)

typedef struct workload {
  const char *file;
  kg_binding b[MAX_BINDINGS];
  int nb;
} workload;

/* A file written only when tuning ends (--best-out) is tried now: a path that cannot be written would otherwise
 * cost the whole run. Leaves no file behind that was not there. 0, or -1 with errno. */
static int check_writable(const char *path) {
  struct stat st;
  int existed = stat(path, &st) == 0;
  if (existed && S_ISDIR(st.st_mode)) {
    errno = EISDIR;
    return -1;
  }
  /* O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of blocking here */
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd < 0) return -1;
  close(fd);
  if (!existed) unlink(path);
  return 0;
}

static void print_summary(const kg_tune_task *tasks, const kg_tune_report *rep, const char *target,
                          const char *log_path) {
  /* on the emulator the times that rank are the analytical estimates for the arch (runtime/estimate.h) */
  const char *est = !strcmp(target, "emulator") ? "estimated " : "";
  for (int i = 0; i < rep->ntasks; i++) {
    const kg_tune_task_result *r = &rep->tasks[i];
    char d[32], b[32];
    kg_format_seconds(d, sizeof d, r->default_s);
    kg_format_seconds(b, sizeof b, r->best_s);
    /* a distributed tuning over different devices tunes each workload once per device */
    int per_device = (i > 0 && rep->tasks[i - 1].input == r->input) ||
                     (i + 1 < rep->ntasks && rep->tasks[i + 1].input == r->input);
    if (per_device) printf("%s on %s (%s):\n", tasks[r->input].label, target, r->device);
    else printf("%s on %s:\n", tasks[r->input].label, target);
    if (r->space_points)
      printf("  search space: %llu points in %d sketch%s\n", (unsigned long long)r->space_points, r->space_sketches,
             r->space_sketches == 1 ? "" : "es");
    printf("  trials: %d this run (%d failed), %d from the log\n", r->trials, r->failed, r->loaded);
    if (r->cut > 0)
      printf("  early cut: %d timed by one run, --early-cut times the fastest or slower\n", r->cut);
    if (r->exhausted)
      printf("  search space exhausted: no schedule left that was not measured (%d in all)\n", r->trials + r->loaded);
    if (r->default_s > 0) printf("  default schedule: %s%s\n", est, d);
    if (r->best_s > 0) {
      printf("  best: %s%s (%.2f GFLOP/s, %.2f GB/s)", est, b, r->best_gflops, r->best_gbps);
      if (r->default_s > 0) printf(", %.2fx the default schedule", r->default_s / r->best_s);
      printf("%s%s\n", r->best_sketch ? ", sketch " : "", r->best_sketch ? r->best_sketch : "");
      if (r->confirmed > 0) {
        char f[32];
        kg_format_seconds(f, sizeof f, r->search_best_s);
        printf("  confirmed: %d more measurements of the fastest; the best is the lowest median, a schedule measured "
               "once ranked as its re-measured peers came back (the fastest single one: %s)\n", r->confirmed, f);
      }
      char *text = kg_trace_to_text(&r->best_trace);
      printf("  trace (%d steps):\n", r->best_trace.nsteps);
      for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) printf("    %s\n", line);
      free(text);
    } else {
      printf("  best: none (no candidate ran correctly)\n");
    }
  }
  if (*est) printf("(estimated: the analytical estimate of each candidate's time on the arch, a model; the emulator "
                  "only verified them)\n");
  if (rep->from_estimates)
    printf("measured first: %d schedule%s that the log's emulator records ranked best by estimate\n",
           rep->from_estimates, rep->from_estimates == 1 ? "" : "s");
  printf("time: %.1f s (build %.1f s, measure %.1f s, search and model %.1f s), %d rounds\n", rep->elapsed_s,
         rep->build_s, rep->measure_s, rep->search_s, rep->rounds);
  if (log_path) printf("log: %s (model: %s.model)\n", log_path, log_path);
}

/* kgen tune ... --dynamic / --shapes: the buckets of one dynamic size (search/dynamic.h). */
static int tune_range(const char *file, const char *def, const kg_binding *g, int ng, const kg_binding *b, int nb,
                      const kg_dynamic_size *dyn, kg_dyn_tune_opts *dopt, kg_tune_opts *o, const char *log_path,
                      int quiet, kg_dist *dist, int io_dtype, int tf32) {
  kg_binding all[2 * MAX_BINDINGS + 1];
  int n = 0, bound = 0;
  for (int k = 0; k < ng; k++) all[n++] = g[k];
  for (int k = 0; k < nb; k++) all[n++] = b[k];
  for (int k = 0; k < n; k++) bound |= !strcmp(all[k].name, dyn->name);
  /* the value the program is checked at; each bucket then measures at its own */
  if (!bound) all[n++] = (kg_binding){dyn->name, dyn->hi};
  kg_program *p = cli_load_program(file, def, all, n, dyn, 1, io_dtype, tf32);
  if (!p) return 1;
  const char *tname = o->measure.target == KG_TARGET_CUDA ? (o->measure.emulate ? "emulator" : "cuda") : "c";
  char default_log[512];
  if (!log_path) {
    snprintf(default_log, sizeof default_log, "%s.%s%s.dyn.kglog", p->def->name, tname, o->no_fuse ? ".nofuse" : "");
    log_path = default_log;
  }
  o->log_path = log_path;
  if (!quiet) {
    o->progress = stderr;
    o->progress_inplace = isatty(2);
  }
  dopt->tune = *o;
  kg_dyn_report rep;
  char err[2048];
  if (!quiet)
    fprintf(stderr, "tuning %s for %s=%lld..%lld on %s, %d trials, log %s\n", p->def->name, dyn->name,
            (long long)dyn->lo, (long long)dyn->hi, tname, o->trials > 0 ? o->trials : 64, log_path);
  int rc = kg_tune_dynamic(p, dopt, &rep, err, sizeof err);
  if (rc) fprintf(stderr, "kgen: tune: %s\n", err);
  printf("%s, %s dynamic, on %s: %d buckets, %d distinct schedules, %d trials, %.1f s\n", p->def->name, dyn->name,
         tname, rep.nbuckets, rep.distinct, rep.trials, rep.elapsed_s);
  printf("  %-16s %-10s %-12s %-12s %s\n", "bucket", "measured", "best", "own search", "schedule from");
  for (int i = 0; i < rep.nbuckets; i++) {
    const kg_dyn_bucket *bk = &rep.buckets[i];
    char range[48], at[32], best[32], own[32];
    snprintf(range, sizeof range, "%lld..%lld", (long long)bk->lo, (long long)bk->hi);
    snprintf(at, sizeof at, "%s=%lld", dyn->name, (long long)bk->value);
    kg_format_seconds(best, sizeof best, bk->best_s);
    kg_format_seconds(own, sizeof own, bk->own_s);
    printf("  %-16s %-10s %-12s %-12s bucket %lld..%lld\n", range, at, best, own, (long long)rep.buckets[bk->from].lo,
           (long long)rep.buckets[bk->from].hi);
  }
  printf("log: %s (export: kgen export %s)\n", log_path, log_path);
  kg_dist_summary(dist, stdout);
  for (int i = 0; i < rep.nbuckets && rc == 0; i++)
    if (rep.buckets[i].best_s <= 0) {
      fprintf(stderr, "kgen: tune: no candidate of bucket %lld..%lld ran correctly (see kgen show %s)\n",
              (long long)rep.buckets[i].lo, (long long)rep.buckets[i].hi, log_path);
      rc = 1;
    }
  kg_dyn_report_free(&rep);
  kg_program_free(p);
  return rc ? 1 : 0;
}

static int tune_main(int argc, char **argv, kg_dist *dist);

/* Under mpirun (dist/dist.h): ranks > 0 serve rank 0, which runs the tuning as a local tune would, with a pool of
 * every rank's measurers. */
int cli_tune(int argc, char **argv) {
  kg_dist *d = NULL;
  char err[1024];
  int s = kg_dist_start(&d, err, sizeof err);
  if (s < 0) {
    fprintf(stderr, "kgen tune: %s\n", err);
    return 2;
  }
  if (s == 1 && kg_dist_rank(d) > 0) return kg_dist_serve(d);
  return kg_dist_end(d, tune_main(argc, argv, d));
}

static int tune_main(int argc, char **argv, kg_dist *dist) {
  kg_dist_opts distopt = {0, 0};
  workload wl[MAX_WORKLOADS];
  int nwl = 0;
  kg_binding global[MAX_BINDINGS];
  int nglobal = 0;
  kg_tune_opts o;
  memset(&o, 0, sizeof o);
  o.seed = 1;
  o.measure.target = KG_TARGET_C;
  int target_auto = 1, quiet = 0;
  const char *log_path = NULL, *best_out = NULL, *def = NULL;
  char default_log[512];
  kg_dyn_tune_opts dopt;
  memset(&dopt, 0, sizeof dopt);
  kg_dynamic_size dyn = {0};
  char dyn_name[64];
  int64_t shapes[KG_DYN_MAX_BUCKETS];
  int has_dyn = 0, io_dtype = -1, tf32 = 0;
  cli_arg *args = calloc((size_t)argc, sizeof *args);
  int nargs = 0, prc = args ? cli_parse(CLI_CMD_TUNE, argc, argv, 2, args, &nargs) : 1;
  for (int i = 0; i < nargs && prc == 0; i++) {
    const cli_arg *r = &args[i];
    const char *val = r->val;
    switch (r->id) {
      case CLI_OPT_D: {
        kg_binding *dst = nwl ? &wl[nwl - 1].b[wl[nwl - 1].nb] : &global[nglobal];
        int *cnt = nwl ? &wl[nwl - 1].nb : &nglobal;
        if (*cnt >= MAX_BINDINGS) prc = tune_usage("bad size binding '%s' (too many)", val);
        else *dst = r->b, (*cnt)++;
        break;
      }
      case CLI_OPT_TARGET:
        target_auto = !strcmp(val, "auto");
        if (!target_auto) o.measure.target = !strcmp(val, "cuda") ? KG_TARGET_CUDA : KG_TARGET_C;
        break;
      case CLI_OPT_TRIALS: o.trials = (int)r->u; break;
      case CLI_OPT_DTYPE: io_dtype = (int)r->u; break;
      case CLI_OPT_TF32: tf32 = 1; break;
      case CLI_OPT_POPULATION: o.population = (int)r->u; break;
      case CLI_OPT_GENERATIONS: o.generations = (int)r->u; break;
      case CLI_OPT_PER_ROUND: o.per_round = (int)r->u; break;
      case CLI_OPT_LOG: log_path = val; break;
      case CLI_OPT_BEST_OUT: best_out = val; break;
      case CLI_OPT_DEF: def = val; break;
      case CLI_OPT_SEED: o.seed = r->u; break;
      case CLI_OPT_MODEL: o.model = !strcmp(val, "xgb") ? KG_MODEL_XGB : KG_MODEL_RANDOM; break;
      case CLI_OPT_EMULATE:
        o.measure.emulate = 1;
        o.measure.target = KG_TARGET_CUDA;
        target_auto = 0;
        break;
      case CLI_OPT_ARCH: o.measure.arch = val; break;
      case CLI_OPT_TIMEOUT: o.measure.timeout_s = r->d; break;
      case CLI_OPT_MIN_REPEAT_MS: o.measure.min_repeat_s = r->d / 1000; break;
      case CLI_OPT_DYNAMIC:
      case CLI_OPT_SHAPES: {
        int ns = 0, shp = r->id == CLI_OPT_SHAPES;
        if (has_dyn) {
          prc = tune_usage("%s", "one --dynamic or --shapes only");
          break;
        }
        cli_parse_dynamic(val, dyn_name, &dyn, shp ? shapes : NULL, KG_DYN_MAX_BUCKETS, &ns);
        /* a tuning needs the range's ends, which it splits into buckets */
        if (!shp && !(dyn.lo > 0)) {
          prc = tune_usage("bad --dynamic '%s' (tune wants NAME=LO..HI)", val);
          break;
        }
        dopt.shapes = shp ? shapes : NULL;
        dopt.nshapes = ns;
        has_dyn = 1;
        break;
      }
      case CLI_OPT_BUCKETS: dopt.nbuckets = (int)r->u; break;
      case CLI_OPT_EXCHANGE: dopt.top = (int)r->u; break;
      case CLI_OPT_QUIET: quiet = 1; break;
      case CLI_OPT_RANK0_IDLE: distopt.rank0_idle = 1; break;
      case CLI_OPT_WORKER_TIMEOUT: distopt.worker_timeout_s = r->d; break;
      case CLI_OPT_NO_FUSE: o.no_fuse = 1; break;
      case CLI_OPT_CONFIRM: o.confirm = r->u ? (int)r->u : -1; break;
      case CLI_OPT_CONFIRM_RUNS: o.confirm_runs = (int)r->u; break;
      case CLI_OPT_EARLY_CUT: o.measure.early_cut = r->d > 0 ? r->d : -1; break;
      case CLI_OPT_SKETCH_SHARE: o.sketch_share = r->d > 0 ? r->d : -1; break;
      case CLI_OPT_ARG:
        if (nwl >= MAX_WORKLOADS) {
          prc = tune_usage("too many workloads (at most 32), at '%s'", val);
          break;
        }
        wl[nwl].file = val;
        wl[nwl].nb = 0;
        nwl++;
        break;
      default: prc = tune_usage("option %s is not handled here", r->name); break;
    }
  }
  free(args);
  if (prc) return prc;
  if (nwl == 0) return tune_usage("%s", "missing workload (FILE.te or a library NAME)");
  if (best_out && check_writable(best_out) != 0) {
    fprintf(stderr, "kgen tune: cannot write --best-out '%s': %s\n", best_out, strerror(errno));
    return 1;
  }
  if (o.measure.emulate && !target_auto && o.measure.target != KG_TARGET_CUDA)
    return tune_usage("%s", "--emulate goes with --target cuda");
  /* as in run and replay: with auto, an --arch is for the GPU if one answers */
  if (o.measure.arch && !target_auto && o.measure.target != KG_TARGET_CUDA)
    return tune_usage("%s", "--arch goes with --target cuda");
  char why[512];
  int erc = cli_env_check("tune", o.measure.target, o.measure.emulate, target_auto);
  if (erc) return erc;
  if (target_auto) o.measure.target = kg_cudrv_probe(why, sizeof why) ? KG_TARGET_CUDA : KG_TARGET_C;
  else if (o.measure.target == KG_TARGET_CUDA && !o.measure.emulate && !kg_cudrv_probe(why, sizeof why)) {
    fprintf(stderr, "kgen: cannot tune on a GPU: %s (try --emulate, or --target c)\n", why);
    return 3;
  }
  if ((distopt.rank0_idle || distopt.worker_timeout_s > 0) && !dist)
    return tune_usage("%s", "--rank0-idle and --worker-timeout go with a tuning under mpirun");
  if (dist) {
    if (!(o.pool = kg_dist_pool(dist, &o.measure, &distopt, why, sizeof why))) {
      fprintf(stderr, "kgen tune: %s\n", why);
      return 1;
    }
    if (!quiet)
      fprintf(stderr, "distributed over %d MPI ranks: %d measure, on %d target%s\n", kg_dist_size(dist),
              o.pool->nworkers, o.pool->ngroups, o.pool->ngroups == 1 ? "" : "s");
  }
  if (has_dyn) {
    if (nwl != 1) return tune_usage("%s", "--dynamic and --shapes tune one workload");
    /* a range tuning keeps one best schedule per bucket, not one: kgen export writes them all */
    if (best_out) return tune_usage("%s", "--best-out goes with a tuning of fixed sizes (a range has a best per bucket: use kgen export)");
    return tune_range(wl[0].file, def, global, nglobal, wl[0].b, wl[0].nb, &dyn, &dopt, &o, log_path, quiet,
                      dist, io_dtype, tf32);
  }

  kg_program *progs[MAX_WORKLOADS] = {0};
  kg_tune_task tasks[MAX_WORKLOADS];
  kg_strbuf labels[MAX_WORKLOADS];
  int rc = 0, nprog = 0;
  for (int i = 0; i < nwl && rc == 0; i++, nprog++) {
    kg_binding all[2 * MAX_BINDINGS];
    int n = 0;
    for (int k = 0; k < nglobal; k++) all[n++] = global[k];
    for (int k = 0; k < wl[i].nb; k++) all[n++] = wl[i].b[k];
    progs[i] = cli_load_program(wl[i].file, def, all, n, NULL, 0, io_dtype, tf32);
    kg_strbuf_init(&labels[i]);
    if (!progs[i]) {
      rc = 1;
      continue;
    }
    kg_strbuf_puts(&labels[i], progs[i]->def->name);
    for (int k = 0; k < progs[i]->nsizes; k++)
      kg_strbuf_printf(&labels[i], " %s=%lld", progs[i]->sizes[k].name, (long long)progs[i]->sizes[k].value);
    tasks[i] = (kg_tune_task){progs[i], labels[i].s, NULL, NULL};
  }
  if (rc == 0) {
    const char *tname = o.measure.target == KG_TARGET_CUDA ? (o.measure.emulate ? "emulator" : "cuda") : "c";
    if (!log_path) {
      /* its own log by default: a fusing run's records in it would not count (search/tune.h) */
      snprintf(default_log, sizeof default_log, "%s.%s%s.kglog", progs[0]->def->name, tname,
               o.no_fuse ? ".nofuse" : "");
      log_path = default_log;
    }
    o.log_path = log_path;
    if (!quiet) {
      o.progress = stderr;
      o.progress_inplace = isatty(2);
      fprintf(stderr, "tuning %d workload%s on %s%s, %d trials, model %s, seed %llu, log %s\n", nwl,
              nwl == 1 ? "" : "s", tname, o.no_fuse ? ", unfused (each stage its own loop nest)" : "",
              o.trials > 0 ? o.trials : 64, o.model == KG_MODEL_XGB ? "xgb" : "random", (unsigned long long)o.seed,
              log_path);
    }
    kg_tune_report rep;
    char err[2048];
    int trc = kg_tune(tasks, nwl, &o, &rep, err, sizeof err);
    if (rep.log_skipped_parts)
      fprintf(stderr, "kgen: warning: the log had %d corrupt part%s (%zu bytes), skipped\n", rep.log_skipped_parts,
              rep.log_skipped_parts == 1 ? "" : "s", rep.log_skipped_bytes);
    if (rep.log_skipped_newer)
      fprintf(stderr, "kgen: warning: %s: %d record%s of a newer format version than this kgen's (%d), not used\n",
              log_path, rep.log_skipped_newer, rep.log_skipped_newer == 1 ? "" : "s", KG_TLOG_VERSION);
    if (rep.log_passed_over)
      fprintf(stderr, "kgen: warning: %s: %d record%s not taken as best, e.g. %s\n", log_path, rep.log_passed_over,
              rep.log_passed_over == 1 ? "" : "s", rep.log_passed_note);
    if (trc) {
      fprintf(stderr, "kgen: tune: %s\n", err);
      rc = 1;
    }
    print_summary(tasks, &rep, tname, log_path);
    kg_dist_summary(dist, stdout);
    /* a run that leaves a workload with no working schedule at all has failed, whatever it logged */
    for (int i = 0; i < rep.ntasks && trc == 0; i++)
      if (rep.tasks[i].best_s <= 0) {
        fprintf(stderr, "kgen: tune: no candidate of %s ran correctly (see kgen show %s)\n", tasks[rep.tasks[i].input].label,
                log_path);
        rc = 1;
      }
    if (best_out && rep.ntasks > 0 && rep.tasks[0].best_s > 0) {
      char *text = kg_trace_to_text(&rep.tasks[0].best_trace);
      FILE *f = fopen(best_out, "w");
      if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "kgen: cannot write '%s': %s\n", best_out, strerror(errno));
        rc = 1;
      }
      free(text);
    }
    kg_tune_report_free(&rep);
  }
  for (int i = 0; i < nprog; i++) {
    kg_program_free(progs[i]);
    kg_strbuf_free(&labels[i]);
  }
  return rc;
}

int cli_show(int argc, char **argv) {
  const char *path = NULL;
  int best = 0, rc = 0, nargs = 0;
  cli_arg *args = calloc((size_t)argc, sizeof *args);
  if (!args || (rc = cli_parse(CLI_CMD_SHOW, argc, argv, 2, args, &nargs))) {
    free(args);
    return rc ? rc : 1;
  }
  for (int i = 0; i < nargs && rc == 0; i++) {
    if (args[i].id == CLI_OPT_BEST) best = 1;
    else if (args[i].id != CLI_OPT_ARG || path) rc = cli_usage_error(CLI_CMD_SHOW, "unexpected argument '%s'", args[i].name);
    else path = args[i].val;
  }
  free(args);
  if (rc) return rc;
  if (!path) return cli_usage_error(CLI_CMD_SHOW, "%s", "missing LOG");
  kg_tlog log;
  if (cli_read_log("show", path, &log, 1) != 0) return 1;
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_tlog_show(&b, &log, best);
  fputs(b.s ? b.s : "", stdout);
  kg_strbuf_free(&b);
  kg_tlog_free(&log);
  return 0;
}
