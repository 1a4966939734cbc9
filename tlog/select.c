/* Choosing records of a log: the best one for a workload on a target, with a fallback to the nearest target, and
 * the workloads a log holds (tlog/tlog.h). Deterministic: only the log's contents and order matter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../base/xalloc.h"
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

void kg_tlog_pick_best(const kg_tlog *log, const kg_tlog_want *w, kg_tlog_pick *out) {
  memset(out, 0, sizeof *out);
  out->kind = KG_TLOG_PICK_NONE;
  out->index = -1;
  int best = -1, best_close = -1;
  double best_t = 0;
  int any_kind = 0;
  for (int i = 0; i < log->n; i++) {
    const kg_tlog_record *r = &log->recs[i];
    if (!same_workload(r, w) || strcmp(r->target.kind, w->kind)) continue;
    any_kind = 1;
    if (!kg_tlog_record_ok(r)) continue;
    int c = closeness(r, w);
    double t = kg_tlog_record_median(r);
    if (c > best_close || (c == best_close && t < best_t)) {
      best = i;
      best_close = c;
      best_t = t;
    }
  }
  kg_strbuf b;
  kg_strbuf_init(&b);
  if (best < 0) {
    kg_strbuf_printf(&b, "no successful record of ");
    put_workload(&b, w->wl);
    kg_strbuf_printf(&b, " for the %s target%s", w->kind, any_kind ? " (every record failed)" : "");
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
