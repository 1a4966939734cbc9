/* `kgen replay`: the best logged schedule of a workload, rebuilt, verified and timed once (replay/replay.h). */
#include <stdio.h>
#include <string.h>
#include "replay.h"

int kg_replay(const kg_program *p, const kg_tlog *log, const kg_measure_opts *o, kg_replay_result *r, char *err,
              size_t errlen) {
  memset(r, 0, sizeof *r);
  kg_measurer *m = kg_measurer_new(p, o, err, errlen);
  if (!m) return -1;
  kg_tlog_workload wl;
  kg_tlog_workload_of(p, &wl);
  char versions[512];
  kg_device_split(kg_measurer_device(m), r->device, sizeof r->device, versions, sizeof versions);
  snprintf(r->arch, sizeof r->arch, "%s", kg_measurer_arch(m));
  kg_tlog_want want = {.wl = &wl,
                       .kind = o->target == KG_TARGET_CUDA ? "cuda" : "c",
                       .arch = r->arch,
                       .device = r->device,
                       .prog = p};
  kg_tlog_pick_best(log, &want, &r->pick);
  kg_candidate c = {0};
  if (r->pick.kind == KG_TLOG_PICK_NONE) {
    snprintf(r->warning, sizeof r->warning, "%s: replaying the default schedule", r->pick.differs);
  } else {
    r->rec = &log->recs[r->pick.index];
    c.trace = &r->rec->trace;
    if (r->pick.kind == KG_TLOG_PICK_NEAREST)
      snprintf(r->warning, sizeof r->warning, "no record for this target: the nearest differs in %s",
               r->pick.differs);
  }
  kg_measure_batch(m, &c, 1, &r->meas);
  kg_measurer_free(m);
  return 0;
}

void kg_replay_result_free(kg_replay_result *r) { kg_measure_result_free(&r->meas); }
