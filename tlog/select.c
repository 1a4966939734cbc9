/* Choosing records of a log: the best one for a workload on a target, with a fallback to the nearest target, and
 * the workloads a log holds (tlog/tlog.h). Deterministic: only the log's contents and order matter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "../base/stats.h"
#include "../base/strbuf.h"
#include "../base/xalloc.h"
#include "status.h"
#include "tlog.h"

/* ---- a trace's time: the median of its records ---- */

typedef struct keyed {
  char *key; /* workload, target, then the trace text: records of one trace on one target sort together */
  size_t target_len; /* the key's workload-and-target prefix */
  int index;
} keyed;

static int by_key(const void *x, const void *y) {
  const keyed *a = x, *b = y;
  int c = strcmp(a->key, b->key);
  return c ? c : a->index - b->index;
}

double kg_tlog_remeasure_ratio(const double *t, int n) {
  if (n < 2 || !(t[0] > 0) || !isfinite(t[0])) return NAN;
  double later = kg_stats_of(t + 1, n - 1).median;
  return isfinite(later) && later > 0 ? later / t[0] : NAN;
}

double kg_tlog_single_factor(const double *ratios, int n) {
  double *r = kg_xrealloc(NULL, sizeof *r * (size_t)(n + 1));
  int m = 0;
  for (int i = 0; i < n; i++)
    if (isfinite(ratios[i]) && ratios[i] > 0) r[m++] = ratios[i];
  double f = m ? kg_stats_of(r, m).median : 1;
  free(r);
  return f > 1 ? f : 1;
}

double kg_tlog_rank_time(double median, int n, double single) {
  return n == 1 ? median * single : median;
}

void kg_tlog_trace_times(const kg_tlog *log, double *times, double *rank, int *counts, int *first) {
  keyed *k = kg_xrealloc(NULL, sizeof *k * (size_t)(log->n + 1));
  for (int i = 0; i < log->n; i++) {
    const kg_tlog_record *r = &log->recs[i];
    kg_strbuf b;
    kg_strbuf_init(&b);
    /* the target as the tuner matches it (its versions too: another compiler or driver is another target), each
     * field after its length, so that no two distinct tuples give one prefix whatever bytes they hold */
    const char *f[6] = {r->workload.hash, r->workload.name, r->target.kind, r->target.arch, r->target.device,
                        r->target.versions ? r->target.versions : ""};
    for (int j = 0; j < 6; j++) kg_strbuf_printf(&b, "%zu:%s;", strlen(f[j]), f[j]);
    size_t tl = b.len;
    char *text = kg_trace_to_text(&r->trace);
    kg_strbuf_puts(&b, text);
    free(text);
    k[i] = (keyed){kg_strbuf_take(&b), tl, i};
    times[i] = 0;
    if (rank) rank[i] = 0;
    if (counts) counts[i] = 0;
    if (first) first[i] = -1;
  }
  qsort(k, (size_t)log->n, sizeof *k, by_key);
  double *t = kg_xrealloc(NULL, sizeof *t * (size_t)(log->n + 1));
  char *timed = kg_xrealloc(NULL, (size_t)(log->n + 1)); /* by position in k: ok with a plausible time */
  /* per trace, at its first position in k: its median, how many results, the position after its last record,
   * whether an estimate ranks it (an emulator record: deterministic, never re-measured); per group the traces'
   * re-measurement ratios */
  double *med = kg_xrealloc(NULL, sizeof *med * (size_t)(log->n + 1));
  int *cnt = kg_xrealloc(NULL, sizeof *cnt * (size_t)(log->n + 1));
  int *end = kg_xrealloc(NULL, sizeof *end * (size_t)(log->n + 1));
  char *est = kg_xrealloc(NULL, (size_t)(log->n + 1));
  double *ratios = kg_xrealloc(NULL, sizeof *ratios * (size_t)(log->n + 1));
  for (int g0 = 0; g0 < log->n;) {
    /* the workload's counts on this target: the largest its records give (as kgen show judges them) */
    int g1 = g0;
    double flops = 0, bytes = 0;
    while (g1 < log->n && k[g1].target_len == k[g0].target_len &&
           !strncmp(k[g1].key, k[g0].key, k[g0].target_len)) {
      const kg_tlog_record *r = &log->recs[k[g1].index];
      if (r->flops > flops) flops = r->flops;
      if (r->bytes > bytes) bytes = r->bytes;
      g1++;
    }
    int nratios = 0;
    for (int a = g0; a < g1;) {
      int z = a, nt = 0, nok = 0;
      est[a] = 0;
      while (z < g1 && !strcmp(k[z].key, k[a].key)) {
        const kg_tlog_record *r = &log->recs[k[z].index];
        timed[z] = kg_tlog_record_ok(r) && kg_tlog_record_plausible(r, &flops, &bytes, NULL, 0);
        if (!kg_tlog_record_ok(r))
          t[nt++] = INFINITY;
        else if (timed[z])
          t[nt++] = kg_tlog_record_rank_s(r), nok++;
        est[a] |= kg_tlog_record_estimated(r);
        z++;
      }
      med[a] = nok ? kg_stats_of(t, nt).median : 0;
      cnt[a] = nt;
      end[a] = z;
      if (!est[a]) ratios[nratios++] = kg_tlog_remeasure_ratio(t, nt);
      a = z;
    }
    double single = kg_tlog_single_factor(ratios, nratios);
    for (int a = g0; a < g1; a = end[a]) {
      int lead = -1; /* the trace's first record with a time (k is in index order within a key) */
      for (int j = a; j < end[a]; j++) {
        if (timed[j]) {
          times[k[j].index] = med[a];
          if (rank) rank[k[j].index] = est[a] ? med[a] : kg_tlog_rank_time(med[a], cnt[a], single);
          if (counts) counts[k[j].index] = cnt[a];
          if (lead < 0) lead = k[j].index;
          if (first) first[k[j].index] = lead;
        }
      }
    }
    g0 = g1;
  }
  for (int i = 0; i < log->n; i++) free(k[i].key);
  free(k);
  free(t);
  free(timed);
  free(med);
  free(cnt);
  free(end);
  free(est);
  free(ratios);
}

static int same_workload(const kg_tlog_record *r, const kg_tlog_want *w) {
  return !strcmp(r->workload.hash, w->wl->hash) && !strcmp(r->workload.name, w->wl->name);
}

/* How close r's target is to the wanted one: same arch counts more than same device (a trace tuned for an arch
 * respects its limits; the device only shifts the balance). */
static int closeness(const kg_tlog_record *r, const kg_tlog_want *w) {
  return 2 * (!w->arch || !strcmp(r->target.arch, w->arch)) + (!w->device || !strcmp(r->target.device, w->device));
}

static void put_workload(kg_strbuf *b, const kg_tlog_workload *wl) {
  kg_strbuf_puts(b, wl->name);
  for (int k = 0; k < wl->nsizes; k++) kg_strbuf_printf(b, " %s=%lld", wl->size_names[k], (long long)wl->size_values[k]);
}

typedef struct cand {
  int index, close;
  int estimated; /* ranked by the analytical estimate (an emulator record), not by a measurement */
  double median; /* its trace's time (kg_tlog_trace_times), else its own (kg_tlog_record_rank_s) */
  double rank;   /* what ranks it: its trace's ranking time, else its own */
  int nrecords;  /* the records that time is the median of */
} cand;

/* Most preferred first: the closest target, then a measurement before an estimate, then the lowest time, then the
 * earliest record (so the first record of the best trace). */
static int by_preference(const void *x, const void *y) {
  const cand *a = x, *b = y;
  if (a->close != b->close) return b->close - a->close;
  if (a->estimated != b->estimated) return a->estimated - b->estimated;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  return a->index - b->index;
}

/* Whether record r may be used for w: a plausible result, a trace that applies to w->prog, and w's own check. */
static int record_usable(const kg_tlog_record *r, const kg_tlog_want *w, double flops, double bytes, char *why,
                         size_t whylen) {
  if (w->skip_emulated && r->target.runner && !strcmp(r->target.runner, kg_runner_names[KG_RUNNER_EMULATOR])) {
    snprintf(why, whylen, "timed on the CUDA emulator, whose clock does not rank GPU kernels (tune on a GPU, or "
                          "export with --allow-emulated)");
    return 0;
  }
  if (!kg_tlog_record_plausible(r, &flops, &bytes, why, whylen)) return 0;
  if (w->prog) {
    char e[512];
    kg_schedule *s = kg_schedule_new(w->prog);
    int applies = kg_schedule_apply_trace(s, &r->trace, e, sizeof e) == 0;
    kg_schedule_free(s);
    if (!applies) {
      snprintf(why, whylen, "its trace no longer applies (%s)", e);
      return 0;
    }
  }
  return !w->usable || w->usable(w->ctx, r, why, whylen);
}

void kg_tlog_pick_best(const kg_tlog *log, const kg_tlog_want *w, kg_tlog_pick *out) {
  memset(out, 0, sizeof *out);
  out->kind = KG_TLOG_PICK_NONE;
  out->index = -1;
  int any_kind = 0, n = 0;
  double flops = 0, bytes = 0;
  cand *c = kg_xrealloc(NULL, sizeof *c * (size_t)(log->n + 1));
  double *tt = kg_xrealloc(NULL, sizeof *tt * (size_t)(log->n + 1));
  double *tr = kg_xrealloc(NULL, sizeof *tr * (size_t)(log->n + 1));
  int *tn = kg_xrealloc(NULL, sizeof *tn * (size_t)(log->n + 1));
  kg_tlog_trace_times(log, tt, tr, tn, NULL);
  kg_strbuf sk;
  kg_strbuf_init(&sk);
  for (int i = 0; i < log->n; i++) {
    const kg_tlog_record *r = &log->recs[i];
    if (!same_workload(r, w) || strcmp(r->target.kind, w->kind)) continue;
    any_kind = 1;
    if (r->flops > flops) flops = r->flops;
    if (r->bytes > bytes) bytes = r->bytes;
    if (kg_tlog_record_ok(r) && isinf(tt[i])) {
      out->nskipped++;
      kg_strbuf_printf(&sk, "record %d: its trace failed in at least half of its %d measurements\n", i + 1, tn[i]);
    } else if (kg_tlog_record_ok(r))
      c[n++] = (cand){i, closeness(r, w), kg_tlog_record_estimated(r), tt[i] > 0 ? tt[i] : kg_tlog_record_rank_s(r),
                      tt[i] > 0 ? tr[i] : kg_tlog_record_rank_s(r), tt[i] > 0 ? tn[i] : 1};
  }
  /* the workload's counts: the program's, else the largest its records give (a record cannot hide behind 0) */
  if (w->prog) flops = kg_program_flops(w->prog), bytes = kg_program_bytes(w->prog);
  qsort(c, (size_t)n, sizeof *c, by_preference);
  int best = -1, best_close = -1, best_n = 0;
  double best_t = 0;
  for (int k = 0; k < n && best < 0; k++) {
    char why[768];
    if (record_usable(&log->recs[c[k].index], w, flops, bytes, why, sizeof why)) {
      best = c[k].index, best_close = c[k].close, best_t = c[k].median, best_n = c[k].nrecords;
    } else {
      out->nskipped++;
      kg_strbuf_printf(&sk, "record %d: %s\n", c[k].index + 1, why);
    }
  }
  free(c);
  free(tt);
  free(tr);
  free(tn);
  /* whole lines only */
  size_t keep = sk.len < sizeof out->skipped ? sk.len : 0;
  if (!keep)
    for (size_t i = 0; i < sk.len && i + 1 < sizeof out->skipped; i++)
      if (sk.s[i] == '\n') keep = i + 1;
  if (keep) memcpy(out->skipped, sk.s, keep);
  out->skipped[keep] = 0;
  kg_strbuf_free(&sk);
  kg_strbuf b;
  kg_strbuf_init(&b);
  if (best < 0) {
    kg_strbuf_printf(&b, "no %s record of ", out->nskipped ? "usable" : "successful");
    put_workload(&b, w->wl);
    kg_strbuf_printf(&b, " for the %s target%s", w->kind,
                     out->nskipped ? " (every successful one was passed over)"
                     : any_kind    ? " (every record failed)"
                                   : "");
  } else {
    const kg_tlog_record *r = &log->recs[best];
    out->index = best;
    out->median_s = best_t;
    out->nrecords = best_n;
    out->kind = best_close == 3 ? KG_TLOG_PICK_EXACT : KG_TLOG_PICK_NEAREST;
    if (w->arch && strcmp(r->target.arch, w->arch))
      kg_strbuf_printf(&b, "arch %s (wanted %s)", r->target.arch, w->arch);
    if (w->device && strcmp(r->target.device, w->device))
      kg_strbuf_printf(&b, "%sdevice %s (wanted %s)", b.len ? ", " : "", r->target.device, w->device);
  }
  snprintf(out->differs, sizeof out->differs, "%s", b.len ? b.s : "");
  kg_strbuf_free(&b);
}

int kg_tlog_workloads(const kg_tlog *log, int **first) {
  int n = 0;
  *first = kg_xrealloc(NULL, sizeof(int) * (size_t)(log->n + 1));
  for (int i = 0; i < log->n; i++) {
    const kg_tlog_record *r = &log->recs[i];
    int seen = 0;
    for (int j = 0; j < n && !seen; j++) {
      const kg_tlog_record *q = &log->recs[(*first)[j]];
      seen = !strcmp(q->workload.hash, r->workload.hash) && !strcmp(q->workload.name, r->workload.name);
    }
    if (!seen) (*first)[n++] = i;
  }
  return n;
}
