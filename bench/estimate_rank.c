/* estimate_rank: how well does the analytical estimate (runtime/estimate.h) rank what a GPU measured? Reads a
 * tuning log, takes every successful record measured on a GPU (runner "gpu"), rebuilds its trace for the record's
 * arch (NVRTC: registers, spills, occupancy), estimates it, and reports per workload the Spearman rank correlation
 * of estimate and measured median over all those records and over the estimate's top N, and what the estimate's
 * first choice measured against the best measured record.
 *
 *   estimate_rank LOG... [--lib DIR] [--top N] [--max N] [--tsv FILE]
 *
 * The workload's program is DIR/NAME.te (default te/lib) at the record's sizes; a record whose workload hash no
 * longer matches that program is passed over, as is one whose trace no longer applies. --max keeps at most N
 * records per workload (evenly spaced in the log), --tsv writes one line per record (workload, measured seconds,
 * estimated seconds). Needs NVRTC, not a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../runtime/estimate.h"
#include "../runtime/pipeline.h"
#include "../tlog/tlog.h"
#include "bench_load.h"

static int usage(void) {
  fprintf(stderr, "usage: estimate_rank LOG... [--lib DIR] [--top N] [--max N] [--tsv FILE]\n");
  return 2;
}

typedef struct pair {
  double meas, est;
} pair;

/* Ranks (1-based, ties averaged) of v[0..n). */
static void ranks(const double *v, int n, double *r) {
  for (int i = 0; i < n; i++) {
    int less = 0, equal = 0;
    for (int j = 0; j < n; j++) less += v[j] < v[i], equal += v[j] == v[i];
    r[i] = less + (equal + 1) / 2.0;
  }
}

/* Spearman's rho of the pairs: Pearson's correlation of their ranks. */
static double spearman(const pair *p, int n) {
  if (n < 3) return NAN;
  double *a = malloc(sizeof(double) * (size_t)n * 4), *b = a + n, *ra = a + 2 * n, *rb = a + 3 * n;
  for (int i = 0; i < n; i++) a[i] = p[i].meas, b[i] = p[i].est;
  ranks(a, n, ra);
  ranks(b, n, rb);
  double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
  for (int i = 0; i < n; i++) ma += ra[i] / n, mb += rb[i] / n;
  for (int i = 0; i < n; i++) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  free(a);
  return saa > 0 && sbb > 0 ? sab / sqrt(saa * sbb) : NAN;
}

static int by_est(const void *x, const void *y) {
  double a = ((const pair *)x)->est, b = ((const pair *)y)->est;
  return (a > b) - (a < b);
}

/* The program of workload w from lib, or NULL with a note. */
static kg_program *load_workload(const char *lib, const kg_tlog_workload *w) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.te", lib, w->name);
  kg_binding b[KG_TLOG_MAX_SIZES];
  for (int i = 0; i < w->nsizes; i++) b[i] = (kg_binding){w->size_names[i], w->size_values[i]};
  kg_program *p = bench_load_program("estimate_rank", path, b, w->nsizes);
  if (!p) return NULL;
  kg_tlog_workload now;
  kg_tlog_workload_of(p, &now);
  if (strcmp(now.hash, w->hash) != 0) {
    printf("%s: the log's workload (hash %s) is not %s's program now (hash %s): passed over\n", w->name, w->hash,
           path, now.hash);
    kg_program_free(p);
    return NULL;
  }
  return p;
}

/* The estimate of record r's trace, or -1. */
static double estimate_record(const kg_program *p, const kg_tlog_record *r) {
  kg_build_opts o = {.target = KG_TARGET_CUDA, .stop = KG_BUILD_COMPILE, .trace = &r->trace, .arch = r->target.arch,
                     .at_bound_sizes = 1};
  kg_build b;
  double s = -1;
  if (kg_candidate_build(p, &o, &b) == 0 && b.have_cubin && b.front.ir) {
    kg_kernel_quality *q = calloc((size_t)b.front.cuda.nkernels + 1, sizeof *q);
    char why[256];
    if (q) s = kg_cuda_estimate_build(&b.front.cuda, &b.cubin, b.front.ir, r->target.arch, q, NULL, why, sizeof why);
    free(q);
  }
  kg_build_free(&b);
  return s;
}

int main(int argc, char **argv) {
  const char *lib = "te/lib", *tsv = NULL;
  const char *logs[64];
  int nlogs = 0, top = 20, max = 400;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--lib") && i + 1 < argc) lib = argv[++i];
    else if (!strcmp(argv[i], "--top") && i + 1 < argc) top = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tsv") && i + 1 < argc) tsv = argv[++i];
    else if (argv[i][0] == '-' || nlogs == 64) return usage();
    else logs[nlogs++] = argv[i];
  }
  if (!nlogs || top < 2 || max < 2) return usage();
  FILE *out = tsv ? fopen(tsv, "w") : NULL;
  if (tsv && !out) {
    fprintf(stderr, "estimate_rank: cannot write %s\n", tsv);
    return 1;
  }
  if (out) fprintf(out, "log\tworkload\tmeasured_s\testimate_s\n");
  printf("%-28s %-28s %7s %9s %9s %12s %12s\n", "log", "workload", "records", "rho(all)", "rho(top)", "est. 1st",
         "best");
  for (int li = 0; li < nlogs; li++) {
    kg_tlog log;
    kg_tlog_init(&log);
    char err[512];
    if (kg_tlog_read(&log, logs[li], NULL, err, sizeof err) != 0) {
      fprintf(stderr, "estimate_rank: %s\n", err);
      return 1;
    }
    int *first = NULL, nw = kg_tlog_workloads(&log, &first);
    const char *base = strrchr(logs[li], '/') ? strrchr(logs[li], '/') + 1 : logs[li];
    for (int wi = 0; wi < nw; wi++) {
      const kg_tlog_workload *w = &log.recs[first[wi]].workload;
      int *idx = malloc(sizeof(int) * (size_t)(log.n + 1)), n = 0;
      for (int i = 0; i < log.n; i++) {
        const kg_tlog_record *r = &log.recs[i];
        if (!strcmp(r->workload.hash, w->hash) && !strcmp(r->target.kind, "cuda") && !strcmp(r->target.runner, "gpu") &&
            kg_tlog_record_ok(r))
          idx[n++] = i;
      }
      kg_program *p = n >= 3 ? load_workload(lib, w) : NULL;
      if (!p) {
        free(idx);
        continue;
      }
      int keep = n < max ? n : max;
      pair *pr = malloc(sizeof(pair) * (size_t)keep);
      int *ok = calloc((size_t)keep, sizeof(int));
#pragma omp parallel for schedule(dynamic, 1)
      for (int k = 0; k < keep; k++) {
        const kg_tlog_record *r = &log.recs[idx[(int64_t)k * n / keep]];
        pr[k].meas = kg_tlog_record_median(r);
        pr[k].est = estimate_record(p, r);
        ok[k] = pr[k].est > 0;
      }
      int m = 0;
      for (int k = 0; k < keep; k++)
        if (ok[k]) {
          if (out) fprintf(out, "%s\t%s\t%.9g\t%.9g\n", base, w->name, pr[k].meas, pr[k].est);
          pr[m++] = pr[k];
        }
      double rho = spearman(pr, m), best = INFINITY;
      for (int k = 0; k < m; k++) best = fmin(best, pr[k].meas);
      qsort(pr, (size_t)m, sizeof *pr, by_est);
      double rho_top = spearman(pr, m < top ? m : top);
      printf("%-28s %-28s %7d %9.3f %9.3f %9.1f us %9.1f us\n", base, w->name, m, rho, rho_top,
             m ? pr[0].meas * 1e6 : NAN, best * 1e6);
      free(pr);
      free(ok);
      free(idx);
      kg_program_free(p);
    }
    free(first);
    kg_tlog_free(&log);
  }
  if (out) fclose(out);
  return 0;
}
