/* Tuning for a range of sizes: buckets, a shared search, then an exchange of the buckets' best schedules (see
 * dynamic.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dynamic.h"
#include "pool.h"
#include "../base/clock.h"
#include "../base/strbuf.h"
#include "../tlog/tlog.h"

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? -1 : a > b;
}

/* The geometric mean of a and b, rounded, kept strictly inside (a, b] so that buckets never overlap. */
static int64_t geo_mid(int64_t a, int64_t b) {
  int64_t m = (int64_t)llround(sqrt((double)a * (double)b));
  if (m <= a) m = a + 1;
  if (m > b) m = b;
  return m;
}

int kg_dyn_buckets(int64_t lo, int64_t hi, int n, const int64_t *shapes, int nshapes, kg_dyn_bucket *out) {
  int nb = 0;
  if (shapes && nshapes > 0) {
    int64_t v[KG_DYN_MAX_BUCKETS];
    int nv = 0;
    for (int i = 0; i < nshapes; i++) {
      int dup = 0;
      for (int j = 0; j < nv; j++) dup |= v[j] == shapes[i];
      if (!dup && nv < KG_DYN_MAX_BUCKETS) v[nv++] = shapes[i];
    }
    qsort(v, (size_t)nv, sizeof *v, cmp_i64);
    for (int i = 0; i < nv; i++) {
      memset(&out[nb], 0, sizeof out[nb]);
      out[nb].value = v[i];
      out[nb].lo = i == 0 ? lo : geo_mid(v[i - 1], v[i]);
      out[nb].hi = i == nv - 1 ? hi : geo_mid(v[i], v[i + 1]) - 1;
      nb++;
    }
    return nb;
  }
  if (n < 1) n = 4;
  if (n > KG_DYN_MAX_BUCKETS) n = KG_DYN_MAX_BUCKETS;
  if (n > hi - lo + 1) n = (int)(hi - lo + 1);
  double r = log((double)hi / (double)lo);
  int64_t start = lo;
  for (int i = 0; i < n && start <= hi; i++) {
    int64_t end = i == n - 1 ? hi : (int64_t)llround((double)lo * exp(r * (i + 1) / n)) - 1;
    if (end < start) end = start;
    if (end > hi) end = hi;
    memset(&out[nb], 0, sizeof out[nb]);
    out[nb].lo = start;
    out[nb].hi = end;
    out[nb].value = geo_mid(start - 1 > 0 ? start - 1 : start, end);
    if (out[nb].value < start) out[nb].value = start;
    nb++;
    start = end + 1;
  }
  if (nb > 0) out[nb - 1].hi = hi;
  return nb;
}

void kg_dyn_report_free(kg_dyn_report *rep) {
  for (int i = 0; i < rep->nbuckets; i++) free(rep->buckets[i].trace);
  memset(rep, 0, sizeof *rep);
}

typedef struct cand {
  char *text;
  kg_trace trace;
  int from;
} cand;

static int rec_of(const kg_tlog_record *r, const kg_tlog_workload *wl, const char *kind) {
  return !strcmp(r->workload.hash, wl->hash) && !strcmp(r->workload.name, wl->name) && !strcmp(r->target.kind, kind);
}

/* Is text among the traces the log holds for the workload? */
static int logged(const kg_tlog *log, const kg_tlog_workload *wl, const char *kind, const char *text) {
  for (int i = 0; i < log->n; i++) {
    if (!rec_of(&log->recs[i], wl, kind)) continue;
    char *t = kg_trace_to_text(&log->recs[i].trace);
    int same = !strcmp(t, text);
    free(t);
    if (same) return 1;
  }
  return 0;
}

typedef struct ranked {
  int idx;
  double med;
} ranked;
static int cmp_ranked(const void *x, const void *y) {
  const ranked *a = x, *b = y;
  return a->med < b->med ? -1 : a->med > b->med ? 1 : a->idx - b->idx;
}

int kg_tune_dynamic(const kg_program *p, const kg_dyn_tune_opts *o, kg_dyn_report *rep, char *err, size_t errlen) {
  memset(rep, 0, sizeof *rep);
  double t0 = kg_now_s();
  int k = -1, ndyn = 0;
  for (int i = 0; i < p->nsizes; i++)
    if (p->sizes[i].dynamic) k = i, ndyn++;
  if (ndyn != 1) {
    snprintf(err, errlen, "tuning for a range takes exactly one dynamic size (%s has %d)", p->def->name, ndyn);
    return -1;
  }
  if (!o->tune.log_path) {
    snprintf(err, errlen, "tuning for a range needs a log");
    return -1;
  }
  const kg_size_var *sv = &p->sizes[k];
  for (int i = 0; i < o->nshapes; i++)
    if (o->shapes[i] < sv->lo || o->shapes[i] > sv->hi) {
      snprintf(err, errlen, "--shapes: %s=%lld is outside %lld..%lld", sv->name, (long long)o->shapes[i],
               (long long)sv->lo, (long long)sv->hi);
      return -1;
    }
  int nb = kg_dyn_buckets(sv->lo, sv->hi, o->nbuckets, o->shapes, o->nshapes, rep->buckets);
  rep->nbuckets = nb;
  const char *kind = o->tune.measure.target == KG_TARGET_CUDA ? "cuda" : "c";

  kg_program *progs[KG_DYN_MAX_BUCKETS] = {0};
  kg_tune_task tasks[KG_DYN_MAX_BUCKETS];
  kg_strbuf labels[KG_DYN_MAX_BUCKETS];
  kg_tlog_workload wls[KG_DYN_MAX_BUCKETS];
  int64_t blo[KG_DYN_MAX_BUCKETS], bhi[KG_DYN_MAX_BUCKETS];
  cand *cands = NULL;
  int ncands = 0, rc = -1;
  kg_tlog log;
  kg_tlog_init(&log);
  kg_arena da;
  kg_arena_init(&da);
  for (int b = 0; b < nb; b++) kg_strbuf_init(&labels[b]);
  for (int b = 0; b < nb; b++) {
    kg_diag d = {0};
    progs[b] = kg_program_rebind(p, k, rep->buckets[b].value, &d, &da);
    if (!progs[b]) {
      snprintf(err, errlen, "%s=%lld: %s", sv->name, (long long)rep->buckets[b].value, d.msg ? d.msg : "error");
      goto out;
    }
    blo[b] = rep->buckets[b].lo;
    bhi[b] = rep->buckets[b].hi;
    kg_strbuf_printf(&labels[b], "%s %s=%lld (%lld..%lld)", p->def->name, sv->name,
                     (long long)rep->buckets[b].value, (long long)blo[b], (long long)bhi[b]);
    tasks[b] = (kg_tune_task){progs[b], labels[b].s, &blo[b], &bhi[b]};
    kg_tlog_workload_of(progs[b], &wls[b]);
  }

  /* a bucket's best is one schedule; workers on several devices would give one per device */
  if (o->tune.pool && o->tune.pool->ngroups > 1) {
    snprintf(err, errlen, "a range tuning runs on workers of one device model; these measure on %d",
             o->tune.pool->ngroups);
    goto out;
  }
  /* 1. the search: every bucket's value a task, one budget, one model; rounds small enough that every bucket
   * gets a few before the budget is spent */
  kg_tune_opts o1 = o->tune;
  if (o1.per_round <= 0) {
    int budget = o1.trials > 0 ? o1.trials : 64;
    o1.per_round = budget / (2 * nb) > 4 ? budget / (2 * nb) : 4;
    if (o1.per_round > 64) o1.per_round = 64;
  }
  kg_tune_report r1;
  if (kg_tune(tasks, nb, &o1, &r1, err, errlen) != 0) {
    kg_tune_report_free(&r1);
    goto out;
  }
  rep->trials += r1.trials;
  for (int b = 0; b < nb; b++) rep->buckets[b].own_s = r1.tasks[b].best_s;
  kg_tune_report_free(&r1);

  /* 2. the exchange: each bucket's best few schedules, measured at every bucket's value */
  char lerr[512];
  if (kg_tlog_read(&log, o->tune.log_path, NULL, lerr, sizeof lerr) != 0) {
    snprintf(err, errlen, "%s", lerr);
    goto out;
  }
  int top = o->top > 0 ? o->top : 2;
  cands = calloc((size_t)(nb * top + 1), sizeof *cands);
  ranked *rk = calloc((size_t)log.n + 1, sizeof *rk);
  if (!cands || !rk) {
    free(rk);
    snprintf(err, errlen, "out of memory");
    goto out;
  }
  for (int b = 0; b < nb; b++) {
    int n = 0;
    for (int i = 0; i < log.n; i++)
      if (rec_of(&log.recs[i], &wls[b], kind) && kg_tlog_record_ok(&log.recs[i]))
        rk[n++] = (ranked){i, kg_tlog_record_rank_s(&log.recs[i])};
    qsort(rk, (size_t)n, sizeof *rk, cmp_ranked);
    int taken = 0;
    for (int j = 0; j < n && taken < top; j++) {
      char *t = kg_trace_to_text(&log.recs[rk[j].idx].trace);
      int dup = 0;
      for (int c = 0; c < ncands && !dup; c++) dup = !strcmp(cands[c].text, t);
      if (dup) {
        free(t);
        continue;
      }
      cands[ncands].text = t;
      cands[ncands].from = b;
      kg_trace_init(&cands[ncands].trace);
      const kg_trace *src = &log.recs[rk[j].idx].trace;
      for (int s = 0; s < src->nsteps; s++) kg_trace_push(&cands[ncands].trace, &src->steps[s]);
      ncands++;
      taken++;
    }
  }
  free(rk);
  int missing = 0;
  for (int c = 0; c < ncands; c++)
    for (int b = 0; b < nb; b++) missing += !logged(&log, &wls[b], kind, cands[c].text);
  if (missing > 0) {
    kg_dyn_tune_opts o2 = *o;
    const kg_trace **given = calloc((size_t)ncands, sizeof *given);
    if (!given) {
      snprintf(err, errlen, "out of memory");
      goto out;
    }
    for (int c = 0; c < ncands; c++) given[c] = &cands[c].trace;
    o2.tune.given = given;
    o2.tune.ngiven = ncands;
    o2.tune.trials = missing;
    o2.tune.skip_default = 1;
    kg_tune_report r2;
    int trc = kg_tune(tasks, nb, &o2.tune, &r2, err, errlen);
    rep->trials += r2.trials;
    kg_tune_report_free(&r2);
    free(given);
    if (trc != 0) goto out;
    kg_tlog_free(&log);
    kg_tlog_init(&log);
    if (kg_tlog_read(&log, o->tune.log_path, NULL, lerr, sizeof lerr) != 0) {
      snprintf(err, errlen, "%s", lerr);
      goto out;
    }
  }

  /* 3. each bucket keeps the schedule measured best at its value */
  for (int b = 0; b < nb; b++) {
    kg_tlog_want w = {.wl = &wls[b], .kind = kind};
    kg_tlog_pick pick;
    kg_tlog_pick_best(&log, &w, &pick);
    if (pick.kind == KG_TLOG_PICK_NONE) continue;
    kg_dyn_bucket *bk = &rep->buckets[b];
    bk->best_s = pick.median_s;
    bk->trace = kg_trace_to_text(&log.recs[pick.index].trace);
    bk->from = b;
    for (int c = 0; c < ncands; c++)
      if (!strcmp(cands[c].text, bk->trace)) bk->from = cands[c].from;
  }
  for (int b = 0; b < nb; b++) {
    int seen = 0;
    for (int c = 0; c < b && !seen; c++)
      seen = rep->buckets[b].trace && rep->buckets[c].trace && !strcmp(rep->buckets[b].trace, rep->buckets[c].trace);
    rep->distinct += rep->buckets[b].trace && !seen;
  }
  rc = 0;
out:
  rep->elapsed_s = kg_now_s() - t0;
  for (int c = 0; c < ncands; c++) {
    free(cands[c].text);
    kg_trace_free(&cands[c].trace);
  }
  free(cands);
  kg_tlog_free(&log);
  for (int b = 0; b < nb; b++) {
    kg_program_free(progs[b]);
    kg_strbuf_free(&labels[b]);
  }
  kg_arena_free(&da);
  return rc;
}
