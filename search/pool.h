/* Measuring elsewhere: a pool of workers that build and measure candidates and answer as each finishes. With
 * kg_tune_opts.pool the tuner keeps every worker busy (search/tune.c): it submits candidates while the pool has
 * room, takes results one at a time as they arrive (logging each at once), and runs the next round of the search
 * when its queue of picks runs dry, so no worker waits for the slowest candidate of a round.
 *
 * Workers that measure on the same target (kind, arch, device, versions) form a group; a pool of workers on
 * different GPU models has several groups, and the tuner runs one search per program and group, each logged with
 * its group's target.
 *
 * Two pools exist: kg_pool_local (below: threads of this process, each with its own measurers; what an MPI rank
 * measures with, and what tests drive the tuner with) and the MPI pool of dist/ (cli/, `mpirun kgen tune`). */
#ifndef KG_POOL_H
#define KG_POOL_H
#include <stdint.h>
#include "../codegen/gpu_arch.h"
#include "../runtime/measure.h"

/* A group's target for one program: what its records say and what its search space respects. */
typedef struct kg_pool_target {
  kg_runner runner;
  char arch[64];
  char device[512]; /* kg_measurer_device's "NAME (details)" */
  int has_limits;   /* CUDA: limits holds the group's limits */
  kg_gpu_limits limits;
} kg_pool_target;

#define KG_POOL_MAX_GROUPS 16

typedef struct kg_pool_result {
  int64_t tag;            /* the submit's */
  kg_measure_result res;  /* free with kg_measure_result_free */
  char host[256];         /* who measured it */
  int rank;
  double build_s, run_s;  /* the worker's building and running time for the batch it was in, shared out */
} kg_pool_result;

typedef struct kg_pool kg_pool;
struct kg_pool {
  /* Makes program p (which outlives the pool) measurable under o on every worker. Returns its handle (>= 0) with
   * the target of each group in targets[0..ngroups) (ngroups: kg_pool.ngroups), or -1 with err (no worker could
   * make a measurer for it: the reason of the first). A group none of whose workers can measure p gets
   * runner -1 and is not used for it. */
  int (*open)(kg_pool *pl, const kg_program *p, const kg_measure_opts *o, kg_pool_target *targets, char *err,
              size_t errlen);
  /* Candidates group g takes now without any waiting behind others. */
  int (*room)(kg_pool *pl, int group);
  /* Sends trace (a kg_candidate's: applied to program handle as the measurer applies it) to a worker of group g.
   * 0, or -1 with err. */
  int (*submit)(kg_pool *pl, int handle, int group, const kg_trace *trace, int64_t tag, char *err, size_t errlen);
  /* The next result: 1 (filled out), 0 nothing in flight, -1 with err (every worker of a group with candidates in
   * flight is lost, or the run was stopped: err says which). Blocks until one arrives. */
  int (*wait)(kg_pool *pl, kg_pool_result *out, char *err, size_t errlen);
  void (*free)(kg_pool *pl);
  int ngroups;
  int nworkers;
};

/* A pool of nworkers threads of this process (each measures one batch at a time with its own measurers, so results
 * interleave). batch: candidates a worker takes at once (its builds run in parallel; 0: 1). device_suffix: a test
 * hook, NULL normally; else worker i reports device_suffix[i] appended to its device name, which puts workers in
 * different groups as different GPU models would. */
kg_pool *kg_pool_local_new(int nworkers, int batch, const char *const *device_suffix);
/* For a pool made of a local one and others (dist/): a result without waiting; 1, 0 when none is ready. */
int kg_pool_local_poll(kg_pool *pl, kg_pool_result *out);
/* Candidates submitted whose results were not taken yet (finished ones included). */
int kg_pool_local_pending(kg_pool *pl);
/* The target measurer m measures on, as a pool's open reports it. */
void kg_pool_target_of(kg_measurer *m, kg_pool_target *t);
/* What every worker does with a batch: measures the candidates whose trace texts (kg_trace_to_text's) are
 * texts[0..n) with m as one kg_measure_batch, out[i] for texts[i], and gives each candidate's share of the
 * batch's building and running time. -1, with nothing measured, when a text does not parse. */
int kg_pool_measure_texts(kg_measurer *m, char *const *texts, int n, kg_measure_result *out, double *build_s,
                          double *run_s);
/* Fills host with this machine's name ("localhost" when it has none). */
void kg_pool_hostname(char *host, size_t len);
#endif
