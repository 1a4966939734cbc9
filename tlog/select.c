/* Choosing records of a log: the best one for a workload on a target, with a fallback to the nearest target, and
 * the workloads a log holds (tlog/tlog.h). Deterministic: only the log's contents and order matter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../base/xalloc.h"
#include "status.h"
#include "tlog.h"

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
  double median; /* the ranking time (kg_tlog_record_rank_s) */
} cand;

/* Most preferred first: the closest target, then a measurement before an estimate, then the lowest time, then the
 * earliest record. */
static int by_preference(const void *x, const void *y) {
  const cand *a = x, *b = y;
  if (a->close != b->close) return b->close - a->close;
  if (a->estimated != b->estimated) return a->estimated - b->estimated;
  if (a->median != b->median) return a->median < b->median ? -1 : 1;
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
  for (int i = 0; i < log->n; i++) {
    const kg_tlog_record *r = &log->recs[i];
    if (!same_workload(r, w) || strcmp(r->target.kind, w->kind)) continue;
    any_kind = 1;
    if (r->flops > flops) flops = r->flops;
    if (r->bytes > bytes) bytes = r->bytes;
    if (kg_tlog_record_ok(r))
      c[n++] = (cand){i, closeness(r, w), kg_tlog_record_estimated(r), kg_tlog_record_rank_s(r)};
  }
  /* the workload's counts: the program's, else the largest its records give (a record cannot hide behind 0) */
  if (w->prog) flops = kg_program_flops(w->prog), bytes = kg_program_bytes(w->prog);
  qsort(c, (size_t)n, sizeof *c, by_preference);
  int best = -1, best_close = -1;
  double best_t = 0;
  kg_strbuf sk;
  kg_strbuf_init(&sk);
  for (int k = 0; k < n && best < 0; k++) {
    char why[768];
    if (record_usable(&log->recs[c[k].index], w, flops, bytes, why, sizeof why)) {
      best = c[k].index, best_close = c[k].close, best_t = c[k].median;
    } else {
      out->nskipped++;
      kg_strbuf_printf(&sk, "record %d: %s\n", c[k].index + 1, why);
    }
  }
  free(c);
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
