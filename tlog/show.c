/* `kgen show`: a log summarised per workload and target. The output depends only on the log's contents (groups in
 * order of first appearance, ties to the earlier record), so tests can compare it. Records are numbered from 1
 * in the order the log holds its intact records. What the reader skipped is not part of it: the caller says so
 * on stderr (cli/util.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../base/xalloc.h"
#include "status.h"
#include "tlog.h"

#define SHOW_TOP 5

typedef struct ranked {
  double median; /* its trace's time (kg_tlog_trace_times) */
  double rank;   /* and its ranking time */
  int rec;       /* index in the log: the trace's first record */
  int n;         /* the records that time is the median of */
} ranked;

static int by_median(const void *x, const void *y) {
  const ranked *a = x, *b = y;
  return a->rank < b->rank ? -1 : a->rank > b->rank ? 1 : (a->rec > b->rec) - (a->rec < b->rec);
}

/* Who measured a group's records (a distributed tuning's worker map), and how many. */
typedef struct measurer_count {
  const char *host; /* NULL: records without a worker (a local tuning) */
  int rank, n;
} measurer_count;

typedef struct group {
  const kg_tlog_record *key; /* its first record */
  int n;
  int by_status[KG_STATUS_COUNT];
  struct ranked *ok; /* distinct traces with a time, fastest first once sorted */
  int nok;
  int implausible;   /* successful records whose time no machine can reach: not ranked */
  measurer_count *by_worker; /* in order of first appearance */
  int nworkers, any_worker;
} group;

static void put_text(kg_strbuf *b, const char *s);

/* Whether r was measured by m's worker (records without a worker count as one, "local"). */
static int measured_by(const measurer_count *m, const kg_tlog_record *r) {
  if (!m->host || !r->worker_host) return m->host == r->worker_host;
  return m->rank == r->worker_rank && !strcmp(m->host, r->worker_host);
}

static void count_worker(group *g, const kg_tlog_record *r) {
  int k = 0;
  while (k < g->nworkers && !measured_by(&g->by_worker[k], r)) k++;
  if (k == g->nworkers) {
    g->by_worker = kg_xrealloc(g->by_worker, sizeof *g->by_worker * (size_t)(g->nworkers + 1));
    g->by_worker[g->nworkers++] = (measurer_count){r->worker_host, r->worker_rank, 0};
  }
  g->by_worker[k].n++;
  g->any_worker |= r->worker_host != NULL;
}

/* "  measured by 3 workers: rank 0 on node1 12, rank 1 on node1 11, rank 2 on node2 12": only for a log a
 * distributed tuning wrote to. */
static void put_workers(kg_strbuf *b, const group *g) {
  if (!g->any_worker) return;
  kg_strbuf_printf(b, "  measured by %d worker%s:", g->nworkers, g->nworkers == 1 ? "" : "s");
  for (int k = 0; k < g->nworkers; k++) {
    const measurer_count *m = &g->by_worker[k];
    kg_strbuf_puts(b, k ? ", " : " ");
    if (m->host) {
      kg_strbuf_printf(b, "rank %d on ", m->rank);
      put_text(b, m->host);
    } else {
      kg_strbuf_puts(b, "local");
    }
    kg_strbuf_printf(b, " %d", m->n);
  }
  kg_strbuf_putc(b, '\n');
}

static int same_group(const kg_tlog_record *a, const kg_tlog_record *b) {
  return strcmp(a->workload.name, b->workload.name) == 0 && strcmp(a->workload.hash, b->workload.hash) == 0 &&
         strcmp(a->target.kind, b->target.kind) == 0 && strcmp(a->target.arch, b->target.arch) == 0 &&
         strcmp(a->target.device, b->target.device) == 0;
}

/* Strings from a log may hold anything: control bytes are shown escaped so that one record cannot break the
 * layout. */
static void put_text(kg_strbuf *b, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c < 0x20 || c == 0x7f)
      kg_strbuf_printf(b, "\\x%02x", c);
    else
      kg_strbuf_putc(b, (char)c);
  }
}

static void put_seconds(kg_strbuf *b, double s) {
  if (s >= 1)
    kg_strbuf_printf(b, "%.3f s", s);
  else if (s >= 1e-3)
    kg_strbuf_printf(b, "%.3f ms", s * 1e3);
  else
    kg_strbuf_printf(b, "%.3f us", s * 1e6);
}

/* "12.300 ms (174.2 GFLOP/s, 1.0 GB/s)": the rates only where the workload's counts are known; "estimated " before
 * an emulator record's estimate. */
static void put_timing(kg_strbuf *b, const kg_tlog_record *r, double median) {
  if (kg_tlog_record_estimated(r)) kg_strbuf_puts(b, "estimated ");
  put_seconds(b, median);
  if (r->flops > 0 || r->bytes > 0) {
    kg_strbuf_puts(b, " (");
    if (r->flops > 0) kg_strbuf_printf(b, "%.1f GFLOP/s", r->flops / median * 1e-9);
    if (r->bytes > 0) kg_strbuf_printf(b, "%s%.1f GB/s", r->flops > 0 ? ", " : "", r->bytes / median * 1e-9);
    kg_strbuf_putc(b, ')');
  }
}

static void put_header(kg_strbuf *b, const kg_tlog_record *r) {
  put_text(b, r->workload.name);
  kg_strbuf_printf(b, " [%s]", r->workload.hash);
  for (int i = 0; i < r->workload.nsizes; i++) {
    kg_strbuf_putc(b, ' ');
    put_text(b, r->workload.size_names[i]);
    kg_strbuf_printf(b, "=%lld", (long long)r->workload.size_values[i]);
  }
  for (int i = 0; i < r->ndyn; i++) {
    kg_strbuf_puts(b, i ? ", " : " (dynamic ");
    put_text(b, r->dyn_names[i]);
    kg_strbuf_printf(b, " in %lld..%lld, bucket %lld..%lld", (long long)r->dyn_lo[i], (long long)r->dyn_hi[i],
                     (long long)r->bucket_lo[i], (long long)r->bucket_hi[i]);
    if (i == r->ndyn - 1) kg_strbuf_putc(b, ')');
  }
  kg_strbuf_printf(b, " on %s ", r->target.kind);
  put_text(b, r->target.arch);
  kg_strbuf_puts(b, " (");
  put_text(b, r->target.device);
  kg_strbuf_puts(b, ")\n");
}

/* ", median of 3 records" for a trace measured more than once (tune's confirmation, search/tune.h); ", measured
 * once, ranked as 2.100 ms" where the log's re-measured traces came back at another speed (kg_tlog_trace_times) */
static void put_count(kg_strbuf *b, const ranked *t) {
  if (t->n > 1) kg_strbuf_printf(b, ", median of %d records", t->n);
  if (t->n == 1 && t->rank != t->median) {
    kg_strbuf_puts(b, ", measured once, ranked as ");
    put_seconds(b, t->rank);
  }
}

static void put_best(kg_strbuf *b, const kg_tlog *log, const group *g) {
  if (!g->nok) {
    kg_strbuf_puts(b, "  best: none (no successful measurement)\n");
    return;
  }
  int i = g->ok[0].rec;
  const kg_tlog_record *r = &log->recs[i];
  kg_strbuf_puts(b, "  best: ");
  put_timing(b, r, g->ok[0].median);
  kg_strbuf_printf(b, " at record %d", i + 1);
  put_count(b, &g->ok[0]);
  if (r->sketch) {
    kg_strbuf_puts(b, ", sketch ");
    put_text(b, r->sketch);
  }
  kg_strbuf_putc(b, '\n');
  if (r->trace.nsteps == 0) {
    kg_strbuf_puts(b, "    (default schedule)\n");
    return;
  }
  for (int s = 0; s < r->trace.nsteps; s++) {
    kg_strbuf_puts(b, "    ");
    kg_step_to_text(b, &r->trace.steps[s]);
    kg_strbuf_putc(b, '\n');
  }
}

void kg_tlog_show(kg_strbuf *out, const kg_tlog *log, int best_only) {
  group *g = NULL;
  int ng = 0;
  double *tt = kg_xrealloc(NULL, sizeof *tt * (size_t)(log->n + 1));
  int *tn = kg_xrealloc(NULL, sizeof *tn * (size_t)(log->n + 1));
  int *tf = kg_xrealloc(NULL, sizeof *tf * (size_t)(log->n + 1));
  double *tr = kg_xrealloc(NULL, sizeof *tr * (size_t)(log->n + 1));
  kg_tlog_trace_times(log, tt, tr, tn, tf);
  for (int i = 0; i < log->n; i++) {
    const kg_tlog_record *r = &log->recs[i];
    int k = 0;
    while (k < ng && !same_group(g[k].key, r)) k++;
    if (k == ng) {
      g = kg_xrealloc(g, sizeof *g * (size_t)(ng + 1));
      memset(&g[ng++], 0, sizeof *g);
      g[k].key = r;
    }
    g[k].n++;
    count_worker(&g[k], r);
    for (int s = 0; s < KG_STATUS_COUNT; s++)
      if (strcmp(r->status, kg_status_names[s]) == 0) g[k].by_status[s]++;
    if (kg_tlog_record_ok(r) && tt[i] <= 0) g[k].implausible++;
    if (tt[i] > 0 && !isinf(tt[i]) && tf[i] == i) { /* each trace once, at its first record */
      g[k].ok = kg_xrealloc(g[k].ok, sizeof *g[k].ok * (size_t)(g[k].nok + 1));
      g[k].ok[g[k].nok++] = (ranked){tt[i], tr[i], i, tn[i]};
    }
  }
  free(tt);
  free(tr);
  free(tn);
  free(tf);
  if (log->n == 0) kg_strbuf_puts(out, "no records\n");
  for (int k = 0; k < ng; k++) {
    if (k) kg_strbuf_putc(out, '\n');
    if (g[k].nok > 1) qsort(g[k].ok, (size_t)g[k].nok, sizeof *g[k].ok, by_median);
    put_header(out, g[k].key);
    if (!best_only) {
      kg_strbuf_printf(out, "  records: %d (", g[k].n);
      const char *sep = "";
      for (int s = 0; s < KG_STATUS_COUNT; s++)
        if (g[k].by_status[s]) {
          kg_strbuf_printf(out, "%s%s %d", sep, kg_status_names[s], g[k].by_status[s]);
          sep = ", ";
        }
      kg_strbuf_puts(out, ")");
      if (g[k].implausible)
        kg_strbuf_printf(out, ", %d with an implausible time, not ranked", g[k].implausible);
      kg_strbuf_putc(out, '\n');
      put_workers(out, &g[k]);
    }
    put_best(out, log, &g[k]);
    if (!best_only && g[k].nok > 1) {
      int top = g[k].nok < SHOW_TOP ? g[k].nok : SHOW_TOP;
      kg_strbuf_printf(out, "  top %d:\n", top);
      for (int t = 0; t < top; t++) {
        int i = g[k].ok[t].rec;
        kg_strbuf_puts(out, "    ");
        put_timing(out, &log->recs[i], g[k].ok[t].median);
        kg_strbuf_printf(out, "  record %d", i + 1);
        put_count(out, &g[k].ok[t]);
        if (log->recs[i].sketch) {
          kg_strbuf_puts(out, ", sketch ");
          put_text(out, log->recs[i].sketch);
        }
        kg_strbuf_putc(out, '\n');
      }
    }
    free(g[k].ok);
    free(g[k].by_worker);
  }
  free(g);
}
