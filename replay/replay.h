/* Replaying tuning logs: rebuilding logged kernels without searching (`kgen replay`), and exporting them as
 * self-contained headers (`kgen export`, replay/export.h).
 *
 * kg_replay picks the best successful record of a workload for the target at hand (tlog/select.c: the same arch
 * and device; else the nearest record of the workload with a warning naming what differs; else the default
 * schedule with a warning; a record with an implausible time or a trace that no longer applies to the program
 * is passed over for the next best, named in pick.skipped), re-applies its trace, builds, verifies and times
 * that one kernel through the measurement harness: one measurement, no search. */
#ifndef KG_REPLAY_H
#define KG_REPLAY_H
#include <stddef.h>
#include "../runtime/measure.h"
#include "../tlog/tlog.h"

typedef struct kg_replay_result {
  kg_tlog_pick pick;               /* which record (pick.index into the log), or NONE */
  const kg_tlog_record *rec;       /* the record replayed (in the log), NULL for the default schedule */
  char warning[1024];              /* "" when the record matches the target exactly */
  char arch[80], device[256];      /* the target replayed on */
  kg_measure_result meas;          /* status, verification, time */
} kg_replay_result;

/* Replays log's best record of program p on the target of o (o->no_timing: verify only). 0 with *r filled (its
 * meas.status says whether the kernel built and verified), or -1 with err when nothing could run (no device, the
 * measurer could not start). Free r with kg_replay_result_free. */
int kg_replay(const kg_program *p, const kg_tlog *log, const kg_measure_opts *o, kg_replay_result *r, char *err,
              size_t errlen);
void kg_replay_result_free(kg_replay_result *r);
#endif
