/* sketch_sample: how good are the CPU sketches under plain random sampling? For one workload, draws N random
 * points of every sketch of its C-target search space, realizes them, measures them with the measurement harness
 * and reports, per sketch, how many realized and measured ok and the best time with its trace. With --trace
 * FILE... it measures those hand-written traces instead (to compare the sketches with schedules written by hand).
 *
 *   sketch_sample FILE.te [-D NAME=VALUE]... [--samples N] [--seed S] [--sketch NAME] [--trace FILE]...
 *
 * A benchmark tool, not a test: its figures depend on the machine and its load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/rng.h"
#include "../codegen/codegen.h"
#include "../runtime/measure.h"
#include "../gen/space.h"
#include "bench_load.h"

#define MAX_BIND 16
#define MAX_TRACES 16
#define BATCH 16

static int usage(void) {
  fprintf(stderr, "usage: sketch_sample FILE.te [-D NAME=VALUE]... [--samples N] [--seed S] [--sketch NAME] "
                  "[--trace FILE]...\n");
  return 2;
}

/* Measures n traces; prints each when verbose; returns the index of the fastest ok one (-1: none). */
static int measure(kg_measurer *m, kg_trace **tr, int n, double *best_s, int *nok, int verbose) {
  int best = -1;
  for (int at = 0; at < n; at += BATCH) {
    int k = n - at < BATCH ? n - at : BATCH;
    kg_candidate c[BATCH];
    kg_measure_result r[BATCH];
    for (int i = 0; i < k; i++) c[i] = (kg_candidate){.trace = tr[at + i], .source = NULL};
    kg_measure_batch(m, c, k, r);
    for (int i = 0; i < k; i++) {
      if (r[i].status == KG_STATUS_OK) {
        (*nok)++;
        if (best < 0 || r[i].median_s < *best_s) {
          best = at + i;
          *best_s = r[i].median_s;
        }
      }
      if (verbose)
        printf("  %-14s %9.3f ms %7.1f GFLOP/s %s\n", kg_status_names[r[i].status], r[i].median_s * 1e3,
               r[i].gflops, r[i].status == KG_STATUS_OK ? "" : r[i].msg);
      kg_measure_result_free(&r[i]);
    }
  }
  return best;
}

int main(int argc, char **argv) {
  const char *file = NULL, *only = NULL, *traces[MAX_TRACES];
  int ntraces = 0, samples = 50, nb = 0, dump = 0;
  uint64_t seed = 1;
  kg_binding b[MAX_BIND];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-D") && i + 1 < argc && nb < MAX_BIND) {
      if (bench_parse_binding(argv[++i], &b[nb++]) != 0) return usage();
    } else if (!strcmp(argv[i], "--samples") && i + 1 < argc) {
      samples = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = strtoull(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--sketch") && i + 1 < argc) {
      only = argv[++i];
    } else if (!strcmp(argv[i], "--dump")) {
      dump = 1;
    } else if (!strcmp(argv[i], "--trace") && i + 1 < argc && ntraces < MAX_TRACES) {
      traces[ntraces++] = argv[++i];
    } else if (argv[i][0] != '-' && !file) {
      file = argv[i];
    } else {
      return usage();
    }
  }
  if (!file || samples < 1) return usage();
  size_t len;
  kg_program *p = bench_load_program("sketch_sample", file, b, nb);
  if (!p) return 1;
  kg_measure_opts o = {.target = KG_TARGET_C, .min_repeat_s = 0.2, .seed = 7};
  char err[4096];
  kg_measurer *m = kg_measurer_new(p, &o, err, sizeof err);
  if (!m) {
    fprintf(stderr, "sketch_sample: %s\n", err);
    return 1;
  }
  if (ntraces) {
    kg_trace *tr[MAX_TRACES];
    for (int i = 0; i < ntraces; i++) {
      tr[i] = malloc(sizeof *tr[i]);
      kg_trace_init(tr[i]);
      char *t = kg_file_read(traces[i], KG_FILE_MAX_TEXT, &len, err, sizeof err);
      if (!t || kg_trace_parse(tr[i], traces[i], t, len, err, sizeof err) != 0) {
        fprintf(stderr, "sketch_sample: %s%s%s\n", t ? traces[i] : "", t ? ": " : "", err);
        return 1;
      }
      free(t);
      if (dump) {
        kg_schedule *s = kg_schedule_new(p);
        kg_arena la;
        kg_arena_init(&la);
        kg_lowered *lw = kg_schedule_apply_trace(s, tr[i], err, sizeof err) ? NULL : kg_lower(s, KG_TARGET_C, &la, err, sizeof err);
        char *src = NULL;
        if (lw && kg_codegen_c(lw, "kgen_entry", &src, err, sizeof err) == 0) printf("%s", src);
        else fprintf(stderr, "sketch_sample: %s\n", err);
        free(src);
        kg_arena_free(&la);
        kg_schedule_free(s);
      } else {
        printf("%s\n", traces[i]);
      }
      double best_s = 0;
      int nok = 0;
      if (!dump) measure(m, &tr[i], 1, &best_s, &nok, 1);
    }
    for (int i = 0; i < ntraces; i++) {
      kg_trace_free(tr[i]);
      free(tr[i]);
    }
  } else {
    kg_space *sp = kg_space_new(p, KG_TARGET_C, NULL);
    uint64_t rng = seed;
    for (int si = 0; si < sp->nsketches; si++) {
      if (only && strcmp(only, sp->sketches[si].name)) continue;
      kg_schedule **sch = calloc((size_t)samples, sizeof *sch);
      kg_trace **tr = calloc((size_t)samples, sizeof *tr);
      int n = 0;
      for (int i = 0; i < samples; i++) {
        kg_point pt;
        kg_space_sample(sp, si, &rng, &pt);
        kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
        if (!s) continue;
        sch[n] = s;
        tr[n++] = &s->trace;
      }
      double best_s = 0;
      int nok = 0, best = measure(m, tr, n, &best_s, &nok, 0);
      printf("%-24s realized %3d/%d  ok %3d  best %9.3f ms %7.1f GFLOP/s\n", sp->sketches[si].name, n, samples,
             nok, best >= 0 ? best_s * 1e3 : 0.0, best >= 0 ? kg_program_flops(p) / best_s * 1e-9 : 0.0);
      if (best >= 0) {
        char *t = kg_trace_to_text(tr[best]);
        printf("%s\n", t);
        free(t);
      }
      fflush(stdout);
      for (int i = 0; i < n; i++) kg_schedule_free(sch[i]);
      free(sch);
      free(tr);
    }
    kg_space_free(sp);
  }
  kg_measurer_free(m);
  kg_program_free(p);
  return 0;
}
