/* The tuner with a pool of workers (search/pool.h), here kg_pool_local's threads, which is what every MPI rank
 * measures with (dist/ adds the messages): every trial logged once and named by its worker, results from several
 * workers, the budget kept, resume adds only new schedules, and workers on different devices each get their own
 * search, logged with their own target. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "testlib.h"
#include "../base/strset.h"
#include "../search/pool.h"
#include "../search/tune.h"
#include "../tlog/tlog.h"

static char tmpdir[256];

static kg_program *load_matmul(int64_t m, int64_t n, int64_t k) {
  kg_binding b[3] = {{"M", m}, {"N", n}, {"K", k}};
  kg_diag diag = {0};
  kg_arena da;
  kg_arena_init(&da);
  kg_program *p = kg_program_load("t.te", KG_TEST_MATMUL, strlen(KG_TEST_MATMUL), NULL, b, 3, &diag, &da);
  if (!p) fprintf(stderr, "%s", diag.msg);
  kg_arena_free(&da);
  return p;
}

static void opts(kg_tune_opts *o, const char *log, int trials, kg_pool *pool) {
  memset(o, 0, sizeof *o);
  o->measure.target = KG_TARGET_C;
  o->measure.min_repeat_s = 0.005;
  o->measure.timeout_s = 120;
  o->trials = trials;
  o->log_path = log;
  o->seed = 11;
  o->model = KG_MODEL_XGB;
  o->population = 64;
  o->generations = 2;
  o->per_round = 6;
  o->pool = pool;
  o->confirm = -1; /* the search alone, except where a test asks for the confirmation */
}

typedef struct log_facts {
  int n, dup, no_worker, by_rank[4], devices;
  char device[2][256];
} log_facts;

static void facts(const char *path, log_facts *f) {
  memset(f, 0, sizeof *f);
  kg_tlog l;
  kg_tlog_init(&l);
  char err[256];
  CHECKF(kg_tlog_read(&l, path, NULL, err, sizeof err) == 0, "%s", err);
  CHECK(l.skipped_parts == 0);
  kg_strset seen;
  kg_strset_init(&seen);
  for (int i = 0; i < l.n; i++) {
    const kg_tlog_record *r = &l.recs[i];
    /* a schedule is measured once per device */
    char *t = kg_trace_to_text(&r->trace);
    size_t len = strlen(t) + strlen(r->target.device) + 2;
    char *key = malloc(len);
    snprintf(key, len, "%s|%s", r->target.device, t);
    if (!kg_strset_add(&seen, key)) f->dup++;
    free(key);
    free(t);
    if (!r->worker_host) f->no_worker++;
    else if (r->worker_rank >= 0 && r->worker_rank < 4) f->by_rank[r->worker_rank]++;
    int d = 0;
    while (d < f->devices && strcmp(f->device[d], r->target.device)) d++;
    if (d == f->devices && d < 2) snprintf(f->device[f->devices++], sizeof f->device[0], "%s", r->target.device);
  }
  f->n = l.n;
  kg_strset_free(&seen);
  kg_tlog_free(&l);
}

/* Two workers of one device: every trial logged once, both measured some, the budget is exact, resume adds only
 * new schedules. */
static void test_one_group(kg_program *p) {
  char log[320];
  snprintf(log, sizeof log, "%s/pool.kglog", tmpdir);
  kg_pool *pool = kg_pool_local_new(2, 2, NULL);
  CHECK(pool && pool->ngroups == 1 && pool->nworkers == 2);
  if (!pool) return;
  kg_tune_task t = {p, "matmul", NULL, NULL};
  kg_tune_opts o;
  opts(&o, log, 20, pool);
  kg_tune_report rep;
  char err[2048];
  int rc = kg_tune(&t, 1, &o, &rep, err, sizeof err);
  CHECKF(rc == 0, "%s", err);
  CHECKF(rep.trials == 20, "%d trials", rep.trials);
  CHECK(rep.ntasks == 1 && rep.tasks[0].input == 0 && rep.tasks[0].best_s > 0);
  CHECK(rep.tasks[0].default_s > 0);
  CHECK(rep.rounds >= 3); /* 19 picks at 6 per round */
  kg_tune_report_free(&rep);
  log_facts f;
  facts(log, &f);
  CHECKF(f.n == 20 && f.dup == 0 && f.no_worker == 0, "%d records, %d twice, %d without a worker", f.n, f.dup,
         f.no_worker);
  CHECKF(f.by_rank[0] > 0 && f.by_rank[1] > 0 && f.by_rank[0] + f.by_rank[1] == 20, "worker 0: %d, worker 1: %d",
         f.by_rank[0], f.by_rank[1]);
  /* resume: 10 more, none measured before */
  opts(&o, log, 10, pool);
  rc = kg_tune(&t, 1, &o, &rep, err, sizeof err);
  CHECKF(rc == 0, "%s", err);
  CHECK(rep.trials == 10 && rep.tasks[0].loaded == 20);
  kg_tune_report_free(&rep);
  facts(log, &f);
  CHECKF(f.n == 30 && f.dup == 0, "%d records, %d twice", f.n, f.dup);
  /* the confirmation through the pool: the two fastest twice more each (at most two more join), logged with
   * their workers, not counted as trials */
  opts(&o, log, 4, pool);
  o.confirm = 2;
  o.confirm_runs = 2;
  rc = kg_tune(&t, 1, &o, &rep, err, sizeof err);
  CHECKF(rc == 0, "%s", err);
  int conf = rep.tasks[0].confirmed;
  CHECKF(rep.trials == 4 && conf >= 4 && conf <= 8 && rep.tasks[0].best_s > 0, "%d trials, %d confirmations",
         rep.trials, conf);
  kg_tune_report_free(&rep);
  facts(log, &f);
  CHECKF(f.n == 34 + conf && f.dup == conf && f.no_worker == 0, "%d records, %d twice, %d without a worker", f.n,
         f.dup, f.no_worker);
  pool->free(pool);
}

/* Workers on two devices: one search per device, each record with its worker's device, each worker measuring only
 * its own device's candidates. */
static void test_two_groups(kg_program *p) {
  char log[320];
  snprintf(log, sizeof log, "%s/groups.kglog", tmpdir);
  const char *suffix[2] = {"", " second-model"};
  kg_pool *pool = kg_pool_local_new(2, 1, suffix);
  CHECK(pool && pool->ngroups == 2);
  if (!pool) return;
  kg_tune_task t = {p, "matmul", NULL, NULL};
  kg_tune_opts o;
  opts(&o, log, 16, pool);
  kg_tune_report rep;
  char err[2048];
  int rc = kg_tune(&t, 1, &o, &rep, err, sizeof err);
  CHECKF(rc == 0, "%s", err);
  CHECK(rep.ntasks == 2 && rep.tasks[0].input == 0 && rep.tasks[1].input == 0);
  CHECK(strcmp(rep.tasks[0].device, rep.tasks[1].device) != 0);
  CHECK(rep.tasks[0].trials > 0 && rep.tasks[1].trials > 0 && rep.trials == 16);
  CHECK(rep.tasks[0].default_s > 0 && rep.tasks[1].default_s > 0);
  kg_tune_report_free(&rep);
  log_facts f;
  facts(log, &f);
  CHECKF(f.n == 16 && f.dup == 0 && f.devices == 2, "%d records, %d twice, %d devices", f.n, f.dup, f.devices);
  /* worker 1 is the second model: its records carry that device, and worker 0's do not */
  kg_tlog l;
  kg_tlog_init(&l);
  CHECK(kg_tlog_read(&l, log, NULL, err, sizeof err) == 0);
  int wrong = 0;
  for (int i = 0; i < l.n; i++)
    wrong += (strstr(l.recs[i].target.device, "second-model") != NULL) != (l.recs[i].worker_rank == 1);
  CHECKF(wrong == 0, "%d records whose device is not their worker's", wrong);
  kg_tlog_free(&l);
  pool->free(pool);
}

/* A pool whose submit fails once the confirmation has sent `ok` measurements (its tags start at INT64_MAX / 2):
 * the rest forwards to a local pool. */
typedef struct flaky_pool {
  kg_pool base;
  kg_pool *inner;
  int ok, sent;
} flaky_pool;

static int flaky_open(kg_pool *pl, const kg_program *p, const kg_measure_opts *o, kg_pool_target *targets,
                      char *err, size_t errlen) {
  flaky_pool *f = (flaky_pool *)pl;
  return f->inner->open(f->inner, p, o, targets, err, errlen);
}
static int flaky_room(kg_pool *pl, int group) {
  flaky_pool *f = (flaky_pool *)pl;
  return f->inner->room(f->inner, group);
}
static int flaky_submit(kg_pool *pl, int handle, int group, const kg_trace *trace, int64_t tag, char *err,
                        size_t errlen) {
  flaky_pool *f = (flaky_pool *)pl;
  if (tag >= INT64_MAX / 2 && f->sent++ >= f->ok) {
    snprintf(err, errlen, "flaky pool: the link to the workers broke");
    return -1;
  }
  return f->inner->submit(f->inner, handle, group, trace, tag, err, errlen);
}
static int flaky_wait(kg_pool *pl, kg_pool_result *out, char *err, size_t errlen) {
  flaky_pool *f = (flaky_pool *)pl;
  return f->inner->wait(f->inner, out, err, errlen);
}
static void flaky_free(kg_pool *pl) {
  flaky_pool *f = (flaky_pool *)pl;
  f->inner->free(f->inner);
}

/* The confirmation through a pool whose submit fails partway: the tune fails with the pool's error, and what the
 * workers measured before (the search, and the confirmations that went out) is in the log. */
static void test_confirm_submit_fails(kg_program *p) {
  char log[320];
  snprintf(log, sizeof log, "%s/flaky.kglog", tmpdir);
  kg_pool *inner = kg_pool_local_new(2, 1, NULL);
  CHECK(inner != NULL);
  if (!inner) return;
  flaky_pool f = {{flaky_open, flaky_room, flaky_submit, flaky_wait, flaky_free, inner->ngroups, inner->nworkers},
                  inner, 2, 0};
  kg_tune_task t = {p, "matmul", NULL, NULL};
  kg_tune_opts o;
  opts(&o, log, 8, &f.base);
  o.confirm = 3;
  o.confirm_runs = 2;
  kg_tune_report rep;
  char err[2048] = "";
  int rc = kg_tune(&t, 1, &o, &rep, err, sizeof err);
  CHECKF(rc == -1 && strstr(err, "the link to the workers broke"), "rc %d: %s", rc, err);
  kg_tune_report_free(&rep);
  log_facts lf;
  facts(log, &lf);
  CHECKF(lf.n == 8 + 2 && lf.dup == 2 && lf.no_worker == 0, "%d records, %d twice, %d without a worker", lf.n,
         lf.dup, lf.no_worker);
  f.base.free(&f.base);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kgen-test-tune-pool-XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  kg_program *p = load_matmul(64, 48, 40);
  CHECK(p != NULL);
  if (p) {
    test_one_group(p);
    test_two_groups(p);
    test_confirm_submit_fails(p);
  }
  kg_program_free(p);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  TEST_END();
}
