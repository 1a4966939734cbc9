/* The naive GPU mapping: what a CUDA run uses when no schedule is given. Each root stage's spatial loops are
 * fused into one, split by the thread count, and bound to blockIdx.x / threadIdx.x: one thread per output element,
 * reductions serial in the thread. It is the baseline tuned schedules are compared with, and it keeps a plain
 * `kgen run --target cuda` from launching a single thread.
 *
 * Requires: a schedule whose stages are untouched (the default schedule); stages already transformed are left as
 * they are. Recorded as ordinary steps, so the result has a trace like any other schedule. */
#include <string.h>
#include "sched_impl.h"

static int apply(kg_schedule *s, kg_step_kind kind, const char *stage, const char *n0, const char *n1, int64_t f) {
  kg_step step;
  memset(&step, 0, sizeof step);
  step.kind = kind;
  step.stage = stage;
  step.names[0] = n0;
  step.names[1] = n1;
  step.nnames = n1 ? 2 : 1;
  if (kind == KG_STEP_SPLIT) {
    step.ints[0] = f;
    step.nints = 1;
  }
  char err[512];
  return kg_schedule_apply(s, &step, err, sizeof err);
}

void kg_schedule_gpu_default(kg_schedule *s, int threads) {
  if (threads < 1) threads = 256;
  int n = s->nstages;
  for (int i = 0; i < n; i++) {
    kg_sstage *st = s->stages[i];
    if (st->attach != KG_ATTACH_ROOT || st->nax == 0 || !kg_sched_untransformed(st)) continue;
    const char *fused = st->leaves[0]->name;
    int ok = 1;
    for (int d = 1; d < st->nax && ok; d++) {
      if (apply(s, KG_STEP_FUSE, st->name, fused, st->leaves[1]->name, 0)) ok = 0;
      else fused = st->leaves[0]->name;
    }
    if (!ok) continue;
    int64_t ext = st->leaves[0]->extent;
    int64_t t = ext < threads ? ext : threads;
    if (t > 1) {
      if (apply(s, KG_STEP_SPLIT, st->name, fused, NULL, t)) continue;
      const char *outer = st->leaves[0]->name, *inner = st->leaves[1]->name;
      apply(s, KG_STEP_BIND, st->name, outer, "blockIdx.x", 0);
      apply(s, KG_STEP_BIND, st->name, inner, "threadIdx.x", 0);
    } else {
      apply(s, KG_STEP_BIND, st->name, fused, "blockIdx.x", 0);
    }
  }
}
