/* Tuning end to end on the C target (no GPU): short runs improve on the default schedule and every record
 * verifies; the same seed gives the same first round; resuming re-measures nothing, also after a kill -9 in the
 * middle of a round; two tuners appending one log at once leave every record intact; the confirmation measures the
 * fastest again, so that a lucky time does not stay the best.
 *
 * The kill and concurrency cases run the kgen binary ($KGEN, set by tests/run.sh; default build/kgen) as child
 * processes, before this process uses OpenMP (a fork after OpenMP has run is not safe). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "testutil.h"
#include "testlib.h"
#include "../base/strbuf.h"
#include "../base/strset.h"
#include "../search/tune.h"
#include "../tlog/tlog.h"

static char tmpdir[256];

static const char *kgen_bin(void) {
  const char *k = getenv("KGEN");
  return k && *k ? k : "build/kgen";
}

static void path_in_tmp(char *out, size_t len, const char *name) { snprintf(out, len, "%s/%s", tmpdir, name); }

/* Starts `kgen tune matmul ...` writing log; returns its pid. */
static pid_t spawn_tuner(const char *log, const char *seed, const char *trials) {
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    execl(kgen_bin(), kgen_bin(), "tune", "matmul", "-D", "M=48", "-D", "N=40", "-D", "K=36", "--target", "c",
          "--trials", trials, "--per-round", "4", "--population", "64", "--log", log, "--seed", seed,
          "--min-repeat-ms", "5", "--confirm", "0", "--quiet", (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* Reads the log at path into l (initialized here; the caller frees it); a read error fails the test. */
static void read_log(const char *path, kg_tlog *l) {
  kg_tlog_init(l);
  char err[256];
  int rc = kg_tlog_read(l, path, NULL, err, sizeof err);
  CHECKF(rc == 0, "%s: %s", path, err);
}

static int count_records(const char *log, int *skipped_parts) {
  kg_tlog l;
  read_log(log, &l);
  int n = l.n;
  if (skipped_parts) *skipped_parts = l.skipped_parts;
  kg_tlog_free(&l);
  return n;
}

/* Every trace text of the log's records distinct (nothing measured twice). */
static int all_distinct(const char *log, int *n) {
  kg_tlog l;
  read_log(log, &l);
  kg_strset set;
  kg_strset_init(&set);
  int dup = 0;
  for (int i = 0; i < l.n; i++) {
    char *t = kg_trace_to_text(&l.recs[i].trace);
    if (!kg_strset_add(&set, t)) dup++;
    free(t);
  }
  *n = l.n;
  kg_strset_free(&set);
  kg_tlog_free(&l);
  return dup == 0;
}

static void test_kill_and_resume(void) {
  char log[320];
  path_in_tmp(log, sizeof log, "killed.kglog");
  pid_t pid = spawn_tuner(log, "3", "400");
  /* wait until a few rounds are on disk, then kill at a moment that is almost surely inside a round */
  int n = 0;
  for (int i = 0; i < 600 && n < 9; i++) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    n = count_records(log, NULL);
  }
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFSIGNALED(st));
  int skipped = -1, before = count_records(log, &skipped);
  CHECKF(before >= 9, "only %d records before the kill", before);
  CHECK(skipped == 0);
  /* resume: new trials only */
  pid = spawn_tuner(log, "3", "8");
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  int after = 0;
  CHECKF(all_distinct(log, &after), "a schedule was measured twice after resuming");
  CHECKF(after == before + 8, "%d records after resuming (before %d)", after, before);
}

static void test_two_tuners_one_log(void) {
  char log[320];
  path_in_tmp(log, sizeof log, "shared.kglog");
  pid_t a = spawn_tuner(log, "11", "12"), b = spawn_tuner(log, "12", "12");
  int sa, sb;
  waitpid(a, &sa, 0);
  waitpid(b, &sb, 0);
  CHECK(WIFEXITED(sa) && WEXITSTATUS(sa) == 0);
  CHECK(WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
  int skipped = -1, n = count_records(log, &skipped);
  /* both read an empty log, so both measure the default schedule: 12 + 12 records, all intact */
  CHECKF(n == 24, "%d records", n);
  CHECK(skipped == 0);
}

static kg_program *load(const char *text, const char *m, int64_t mv, const char *nname, int64_t nv, const char *k,
                        int64_t kv) {
  kg_binding b[3] = {{m, mv}, {nname, nv}, {k, kv}};
  kg_diag diag = {0};
  kg_arena da;
  kg_arena_init(&da);
  kg_program *p = kg_program_load("t.te", text, strlen(text), NULL, b, k ? 3 : 2, &diag, &da);
  if (!p) fprintf(stderr, "%s", diag.msg);
  kg_arena_free(&da);
  return p;
}

static void base_opts(kg_tune_opts *o, const char *log, int trials, uint64_t seed) {
  memset(o, 0, sizeof *o);
  o->measure.target = KG_TARGET_C;
  o->measure.min_repeat_s = 0.01;
  /* a busy machine must not turn a slow candidate into a "timeout" record: the test wants every record ok */
  o->measure.timeout_s = 120;
  o->trials = trials;
  o->log_path = log;
  o->seed = seed;
  o->model = KG_MODEL_XGB;
  o->population = 128;
  o->generations = 2;
  o->per_round = 8;
  o->confirm = -1; /* the search alone (test_confirm has the confirmation) */
}

/* A short run improves on the default schedule; every record verified (status ok). */
static void test_improves(const char *name, kg_program *p) {
  char log[320];
  path_in_tmp(log, sizeof log, name);
  kg_tune_task t = {p, name, NULL, NULL};
  kg_tune_opts o;
  base_opts(&o, log, 33, 5);
  kg_tune_report rep;
  char err[1024];
  int rc = kg_tune(&t, 1, &o, &rep, err, sizeof err);
  CHECKF(rc == 0, "%s", err);
  CHECK(rep.trials == 33);
  CHECK(rep.tasks[0].default_s > 0);
  CHECKF(rep.tasks[0].best_s > 0 && rep.tasks[0].best_s < rep.tasks[0].default_s * 0.9,
         "%s: best %g s, default %g s", name, rep.tasks[0].best_s, rep.tasks[0].default_s);
  CHECK(rep.tasks[0].best_trace.nsteps > 0);
  printf("%s: default %.3f ms, best %.3f ms after %d trials\n", name, rep.tasks[0].default_s * 1e3,
         rep.tasks[0].best_s * 1e3, rep.trials);
  kg_tune_report_free(&rep);
  kg_tlog l;
  read_log(log, &l);
  CHECK(l.n == 33);
  int ok = 0, bad = -1;
  for (int i = 0; i < l.n; i++) {
    if (!strcmp(l.recs[i].status, "ok")) ok++;
    else if (bad < 0) bad = i;
  }
  CHECKF(ok == l.n, "%s: %d of %d records ok (record %d: %s %s)", name, ok, l.n, bad, bad < 0 ? "" : l.recs[bad].status,
         bad < 0 ? "" : l.recs[bad].msg);
  /* the model was saved beside the log */
  char mp[400];
  snprintf(mp, sizeof mp, "%s.model", log);
  struct stat st;
  CHECK(stat(mp, &st) == 0 && st.st_size > 0);
  kg_tlog_free(&l);
}

/* A search-only run of p (base_opts) of trials on log, then the log read into l (the caller frees it). */
static void tune_and_read(kg_program *p, const char *label, const char *log, int trials, uint64_t seed,
                          int skip_default, kg_tlog *l) {
  kg_tune_task t = {p, label, NULL, NULL};
  kg_tune_opts o;
  base_opts(&o, log, trials, seed);
  o.skip_default = skip_default;
  kg_tune_report rep;
  char err[1024];
  CHECKF(kg_tune(&t, 1, &o, &rep, err, sizeof err) == 0, "%s", err);
  kg_tune_report_free(&rep);
  read_log(log, l);
}

/* The first round's traces, in order. */
static char *first_round(kg_program *p, const char *name, uint64_t seed) {
  char log[320];
  path_in_tmp(log, sizeof log, name);
  kg_tlog l;
  tune_and_read(p, "seeded", log, 8, seed, 1, &l);
  kg_strbuf b;
  kg_strbuf_init(&b);
  for (int i = 0; i < l.n; i++) {
    char *tx = kg_trace_to_text(&l.recs[i].trace);
    kg_strbuf_printf(&b, "%s--\n", tx);
    free(tx);
  }
  CHECK(l.n == 8);
  kg_tlog_free(&l);
  return kg_strbuf_take(&b);
}

static void test_seed(kg_program *p) {
  char *a = first_round(p, "seed-a.kglog", 77), *b = first_round(p, "seed-b.kglog", 77),
       *c = first_round(p, "seed-c.kglog", 78);
  CHECK(a && b && !strcmp(a, b));
  CHECK(a && c && strcmp(a, c) != 0);
  free(a);
  free(b);
  free(c);
}

/* Resuming in process: the second run loads the first's records and measures only new schedules. */
static void test_resume(kg_program *p) {
  char log[320];
  path_in_tmp(log, sizeof log, "resume.kglog");
  kg_tune_task t = {p, "resume", NULL, NULL};
  kg_tune_opts o;
  base_opts(&o, log, 12, 9);
  kg_tune_report rep;
  char err[1024];
  CHECK(kg_tune(&t, 1, &o, &rep, err, sizeof err) == 0);
  double best1 = rep.tasks[0].best_s;
  kg_tune_report_free(&rep);
  CHECK(kg_tune(&t, 1, &o, &rep, err, sizeof err) == 0);
  CHECK(rep.tasks[0].loaded == 12);
  CHECK(rep.tasks[0].trials == 12); /* the default schedule is in the log: not measured again */
  CHECK(rep.tasks[0].best_s > 0 && rep.tasks[0].best_s <= best1);
  CHECK(rep.tasks[0].default_s > 0);     /* known from the log */
  kg_tune_report_free(&rep);
  int n = 0;
  CHECKF(all_distinct(log, &n), "a schedule was measured twice");
  CHECK(n == 24);
}

/* Two workloads share the budget: the warm-up gives each a round. */
static void test_two_tasks(kg_program *a, kg_program *b) {
  char log[320];
  path_in_tmp(log, sizeof log, "two.kglog");
  kg_tune_task t[2] = {{a, "a", NULL, NULL}, {b, "b", NULL, NULL}};
  kg_tune_opts o;
  base_opts(&o, log, 26, 4);
  kg_tune_report rep;
  char err[1024];
  CHECK(kg_tune(t, 2, &o, &rep, err, sizeof err) == 0);
  CHECK(rep.trials == 26);
  CHECK(rep.tasks[0].trials >= 9 && rep.tasks[1].trials >= 9);
  CHECK(rep.tasks[0].trials + rep.tasks[1].trials == 26);
  kg_tune_report_free(&rep);
}

/* How many records of log l hold the trace with text tx. */
static int records_of(const kg_tlog *l, const char *tx) {
  int n = 0;
  for (int i = 0; i < l->n; i++) {
    char *t = kg_trace_to_text(&l->recs[i].trace);
    n += !strcmp(t, tx);
    free(t);
  }
  return n;
}

/* The confirmation: a trace with lucky times (forged here: 1 us, twice, for a schedule that takes far longer) is
 * the search's best, is measured again, and then is the best no more unless its median says so; the tuner's best is
 * the log's best by kg_tlog_pick_best, with the same time; the confirmation's records do not count as trials. */
static void test_confirm(kg_program *p) {
  char log[320];
  path_in_tmp(log, sizeof log, "confirm.kglog");
  char err[1024];
  kg_tlog l;
  tune_and_read(p, "confirm", log, 2, 21, 0, &l); /* the default schedule and one pick */
  CHECK(l.n == 2);
  if (l.n != 2) {
    kg_tlog_free(&l);
    return;
  }
  /* the pick again, lucky */
  char *lucky = kg_trace_to_text(&l.recs[1].trace);
  double real = kg_tlog_record_median(&l.recs[1]), fast = 1e-6;
  kg_tlog_record forged = l.recs[1];
  forged.times = &fast;
  forged.ntimes = 1;
  kg_tlog_writer *w = kg_tlog_open(log, err, sizeof err);
  /* twice: its median is then lucky too (two of three) */
  for (int k = 0; k < 2; k++) CHECKF(w && kg_tlog_append(w, &forged, err, sizeof err) == 0, "%s", err);
  if (w) kg_tlog_close(w);
  kg_tlog_free(&l);
  CHECKF(real > 50 * fast, "the pick took %g s", real);

  kg_tune_task t = {p, "confirm", NULL, NULL};
  kg_tune_opts o;
  base_opts(&o, log, 6, 21);
  kg_tune_report rep;
  o.confirm = 2;
  o.confirm_runs = 2;
  CHECKF(kg_tune(&t, 1, &o, &rep, err, sizeof err) == 0, "%s", err);
  kg_tune_task_result *r = &rep.tasks[0];
  CHECK(rep.trials == 6 && r->trials == 6);
  CHECKF(r->search_best_s == fast, "the search's best %g s", r->search_best_s);
  /* the two fastest, twice each, and at most two more that ranked first afterwards */
  CHECKF(r->confirmed >= 4 && r->confirmed <= 8 && r->confirmed % 2 == 0, "%d confirmations", r->confirmed);
  CHECKF(r->best_s > 10 * fast, "best %g s", r->best_s);
  read_log(log, &l);
  CHECKF(l.n == 4 + 6 + r->confirmed, "%d records", l.n);
  /* the lucky trace: its three records, two more */
  CHECK(records_of(&l, lucky) == 5);
  kg_tlog_workload wl;
  kg_tlog_workload_of(p, &wl);
  kg_tlog_want want = {.wl = &wl, .kind = "c", .prog = p};
  kg_tlog_pick pk;
  kg_tlog_pick_best(&l, &want, &pk);
  CHECK(pk.kind == KG_TLOG_PICK_EXACT);
  if (pk.index >= 0) {
    char *a = kg_trace_to_text(&l.recs[pk.index].trace), *b = kg_trace_to_text(&r->best_trace);
    CHECKF(!strcmp(a, b), "the log's best:\n%s\nthe tuner's:\n%s", a, b);
    CHECKF(pk.median_s == r->best_s, "log %g s, tuner %g s", pk.median_s, r->best_s);
    CHECK(pk.nrecords >= 3); /* a confirmed trace */
    free(a);
    free(b);
  }
  kg_tlog_free(&l);
  kg_tune_report_free(&rep);
  free(lucky);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kgen-test-tune-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_kill_and_resume();
  test_two_tuners_one_log();
  kg_program *mm = load(KG_TEST_MATMUL, "M", 256, "N", 256, "K", 256);
  kg_program *sm = load(KG_TEST_SOFTMAX, "N", 512, "D", 1024, NULL, 0);
  CHECK(mm && sm);
  if (mm && sm) {
    test_improves("matmul.kglog", mm);
    test_improves("softmax.kglog", sm);
    test_seed(mm);
    test_resume(sm);
    test_two_tasks(mm, sm);
    test_confirm(mm);
  }
  kg_program_free(mm);
  kg_program_free(sm);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  TEST_END();
}
