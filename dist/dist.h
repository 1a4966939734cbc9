/* Distributed tuning over MPI: `mpirun -np N kgen tune ...` (or srun). Rank 0 runs the search, the cost model and
 * the log, exactly as a local tune does (search/tune.c with a pool, search/pool.h); every rank, rank 0 too unless
 * told otherwise, builds and measures the candidates rank 0 sends it, in its own measurement worker process as a
 * local tune does, and answers with each result. Rank 0 keeps a queue per rank (twice the candidates the rank
 * builds at once), so a rank never waits for the search or for another rank.
 *
 * What travels: the program (its source text, def, size bindings and dynamic ranges, rebuilt on each rank and
 * checked against rank 0's workload hash), the measurement options, trace texts, results. Every rank runs the same
 * kgen build (checked at the start).
 *
 * Ranks group by target (the device their measurer reports): ranks of different GPU models each get their own
 * search, and the log keeps each record's target and worker (tlog.h).
 *
 * Faults: a candidate that crashes or hangs is the measurement worker's business, as in a local tune. A rank that
 * stops answering (no word for --worker-timeout seconds while it holds candidates) is dropped and its candidates go
 * to the other ranks of its group; the run goes on with those. A rank whose process dies: OpenMPI's mpirun (and most
 * launchers) then end the whole job, rank 0 with SIGTERM, which it takes as a stop: every result received is
 * already in the log (fsynced one by one), and running the same command again resumes. docs/distributed.md says
 * more.
 *
 * This module is built into the kgen binary only (libkgen has no MPI dependency), with MPI when the Makefile finds
 * it (KG_HAVE_MPI); without it, `kgen tune` under a launcher of several processes refuses instead of running N
 * independent tuners. */
#ifndef KG_DIST_H
#define KG_DIST_H
#include <stddef.h>
#include <stdio.h>
#include "../search/pool.h"

typedef struct kg_dist kg_dist;

/* The number of processes a launcher (mpirun, mpiexec, srun) started this one among, from its environment: 1 when
 * none did. */
int kg_dist_launched(void);
/* Whether this kgen was built with MPI. */
int kg_dist_available(void);
/* Starts MPI when launched among several processes: 1 with *d (distributed), 0 (a local run: launched alone), -1
 * with err (launched among several but built without MPI, or MPI failed to start). */
int kg_dist_start(kg_dist **d, char *err, size_t errlen);
int kg_dist_rank(const kg_dist *d);
int kg_dist_size(const kg_dist *d);
/* Rank > 0: measures what rank 0 sends until it says stop. The process's exit code. */
int kg_dist_serve(kg_dist *d);

typedef struct kg_dist_opts {
  int rank0_idle;          /* rank 0 only searches (it measures nothing) */
  double worker_timeout_s; /* 0: from the measurement timeout (see docs/distributed.md) */
} kg_dist_opts;
/* Rank 0: the pool of every rank's measurers (opens them for measurement options mo). NULL with err (no rank
 * answered, a rank runs another kgen build). Owned by d. */
kg_pool *kg_dist_pool(kg_dist *d, const kg_measure_opts *mo, const kg_dist_opts *o, char *err, size_t errlen);
/* A line for the summary: ranks used, lost, and how many each measured. */
void kg_dist_summary(kg_dist *d, FILE *f);
/* Ends MPI: rank 0 tells every rank to stop. Returns the exit code to use (rc, or where ranks were lost and
 * cannot be finalized with, after MPI_Abort, which does not return). */
int kg_dist_end(kg_dist *d, int rc);
#endif
