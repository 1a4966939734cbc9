#include "pipeline.h"
#include "../base/xalloc.h"
#include "../base/clock.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const entry_name = "kgen_entry";

int kg_pipeline_build(const kg_schedule *s, kg_target_kind target, kg_pipeline *pl, char *err, size_t errlen) {
  memset(pl, 0, sizeof *pl);
  kg_arena_init(&pl->arena);
  pl->ir = kg_lower(s, target, &pl->arena, err, errlen);
  if (!pl->ir) return -1;
  pl->nsizes = pl->ir->nsize_vars;
  pl->sizes = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)(pl->nsizes + 1));
  for (int i = 0; i < pl->nsizes; i++) pl->sizes[i] = s->prog->sizes[pl->ir->size_ids[i]].value;
  if (kg_codegen_c(pl->ir, entry_name, &pl->source, err, errlen) != 0) return -1;
  if (kg_cpu_build(pl->source, entry_name, &pl->mod) != 0) {
    snprintf(err, errlen, "C compiler failed:\n%s", pl->mod.log ? pl->mod.log : "(no output)");
    return -1;
  }
  pl->built = 1;
  return 0;
}

void kg_pipeline_free(kg_pipeline *pl) {
  if (pl->built || pl->mod.dir || pl->mod.log) kg_cpu_module_free(&pl->mod);
  free(pl->source);
  free(pl->sizes);
  kg_arena_free(&pl->arena);
  memset(pl, 0, sizeof *pl);
}

/* A def may have any number of parameters: the argument array is sized from the data. */
static void call_kernel(kg_pipeline *pl, kg_data *d) {
  float **args = kg_xrealloc(NULL, sizeof(float *) * (size_t)(d->ninputs + d->noutputs));
  int n = 0;
  for (int i = 0; i < d->ninputs; i++) args[n++] = d->inputs[i];
  for (int i = 0; i < d->noutputs; i++) args[n++] = d->outputs[i];
  kg_cpu_call_sizes(&pl->mod, args, n, pl->sizes, pl->nsizes);
  free(args);
}

kg_verify_result kg_pipeline_verify(kg_pipeline *pl, const kg_program *p, kg_data *d, double rtol) {
  kg_data_poison(d, p);
  call_kernel(pl, d);
  return kg_verify(p, d, rtol);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

kg_timing kg_pipeline_time(kg_pipeline *pl, kg_data *d, double min_total_s) {
  kg_timing t = {0};
  call_kernel(pl, d); /* warm-up: page faults, OpenMP thread pool */
  int cap = 64, n = 0;
  double *times = kg_xrealloc(NULL, sizeof(double) * (size_t)cap), total = 0;
  while (n < 3 || (total < min_total_s && n < 100000)) {
    double t0 = kg_now_s();
    call_kernel(pl, d);
    double dt = kg_now_s() - t0;
    if (n == cap) {
      cap *= 2;
      times = kg_xrealloc(times, sizeof(double) * (size_t)cap);
    }
    times[n++] = dt;
    total += dt;
  }
  qsort(times, (size_t)n, sizeof(double), cmp_double);
  t.runs = n;
  t.min_s = times[0];
  t.max_s = times[n - 1];
  t.median_s = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  free(times);
  return t;
}
