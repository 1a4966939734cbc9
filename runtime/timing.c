#include "timing.h"
#include <string.h>
#include "../base/clock.h"
#include "../base/xalloc.h"

int kg_time_run(const kg_timer_ops *ops, double *dt) {
  if (ops->run_timed) return ops->run_timed(ops->ctx, dt);
  double t0 = kg_now_s();
  int rc = ops->run(ops->ctx);
  *dt = kg_now_s() - t0;
  return rc;
}

int kg_time_repeats(const kg_timer_ops *ops, double min_total_s, int max_runs, kg_repeats *out) {
  memset(out, 0, sizeof *out);
  if (max_runs <= 0) max_runs = KG_TIME_MAX_RUNS;
  int rc = ops->run(ops->ctx);
  int cap = 64;
  out->times = kg_xrealloc(NULL, sizeof(double) * (size_t)cap);
  while (rc == 0 && (out->n < KG_TIME_MIN_RUNS || out->total_s < min_total_s) && out->n < max_runs) {
    double dt = 0;
    rc = kg_time_run(ops, &dt);
    if (rc != 0) break;
    if (out->n == cap) {
      cap *= 2;
      out->times = kg_xrealloc(out->times, sizeof(double) * (size_t)cap);
    }
    out->times[out->n++] = dt;
    out->total_s += dt;
  }
  if (rc == 0) out->st = kg_stats_of(out->times, out->n);
  return rc;
}

void kg_repeats_free(kg_repeats *r) {
  free(r->times);
  memset(r, 0, sizeof *r);
}
