/* Tuning: evolutionary search over a program's search space, guided by the cost model, measuring the most
 * promising candidates with the measurement harness and appending every measurement to the tuning log.
 *
 * One round (search/evolve.c), per task: a population of points (default 2048 on the GPU, 512 on the CPU) seeded
 * from the best measured points and random samples, evolved for a few generations (mutation of tile sizes, unroll
 * depths, vector widths and compute locations; crossover between points of one sketch), selected by the model's
 * predicted score; the top candidates not measured before (by trace), plus eps-greedy random picks, are measured.
 * The model is retrained after each round on every measured record of the target.
 *
 * Several tasks share the trial budget and one model (search/tune.c): a round-robin warm-up, then the task whose
 * latency is expected to drop most per trial gets the next round (Ansor's gradient-based task scheduler).
 *
 * Resume: records of the same workload and target already in the log are loaded first; their traces are never
 * measured again by the search (the confirmation below may), they train the model, and the best of them seed the
 * population. A record whose time is implausible (tlog.h) or whose trace no longer applies to the program is never
 * the best (counted in the report).
 * Sharing a log: before each default schedule and before each round the tuner reads what other tuners appended
 * since (kg_tlog_read_more) and treats it like resumed records; a schedule whose record was in the log when a
 * round began is not measured in that round or later (one measured by another tuner during the round may be).
 * Records go out one by one as they are measured and the log is fsynced at the end of each round, so killing a
 * tuner loses at most the round in flight. The model is saved beside the log (LOG.model) after each round and
 * reloaded when tuning resumes.
 *
 * No fusion (kg_tune_opts.no_fuse): the spaces are unfused (gen/space.h): every program stage its own loop nest
 * or kernel, at root, tuned on its own. The default schedule is such a schedule on both targets. A schedule that
 * fuses a program stage (a record of a fusing run in the same log, or a given trace) never becomes a task's best;
 * it still counts as seen and trains the model, whose features describe the schedule whatever the run. */
#ifndef KG_TUNE_H
#define KG_TUNE_H
#include <stdint.h>
#include <stdio.h>
#include "../runtime/measure.h"
#include "../costmodel/model.h"

typedef struct kg_tune_task {
  const kg_program *prog; /* the caller's, outlives the tuning */
  const char *label;      /* for progress and the summary, e.g. "matmul M=1024 N=1024 K=1024" */
  /* A program with dynamic sizes: the bucket of values this task's schedule is for, per dynamic size in program
   * order (recorded in the log); NULL: the whole range. */
  const int64_t *bucket_lo, *bucket_hi;
} kg_tune_task;

typedef struct kg_tune_opts {
  kg_measure_opts measure; /* target, emulate, arch, timeouts, ... */
  int trials;              /* new measurements this run, over all tasks (0: 64) */
  const char *log_path;    /* NULL: no log, no resume */
  uint64_t seed;           /* same seed, same candidates (given the same log and measurements) */
  kg_model_kind model;
  int population;          /* 0: 2048 on CUDA, 512 on C */
  int generations;         /* 0: 4 */
  int per_round;           /* measurements per round and task (0: trials / (4 tasks), within 8..64) */
  double eps;              /* share of random picks among the measured (<0: 0; 0: 0.05) */
  double mutation_prob;    /* 0: 0.85 */
  double sketch_share;     /* share of each round's model picks spread over the sketches (search/evolve.h);
                            * 0: 0.5, < 0: none */
  int skip_default;        /* do not measure the default schedule (tests) */
  int no_fuse;             /* unfused search spaces: no program stage inlined or computed inside another (above) */
  const kg_trace *const *given; /* schedules measured on every task before the search (each once; not again when
                                 * the log holds it), e.g. what other sizes were tuned to: they count as trials */
  int ngiven;
  FILE *progress;          /* NULL: quiet. One line per round: trials, best time and GFLOP/s (GB/s), the model's
                            * ranking accuracy on the round, build vs measure time, elapsed, remaining */
  int progress_inplace;    /* rewrite the line in place (a terminal) instead of one line per round */
  /* NULL: measure in this process, round by round. Else the pool's workers measure (search/pool.h): candidates go
   * out while they have room and each result is logged (and fsynced) as it arrives; the model is retrained after
   * every per_round results; a round of the search runs when a task's picks are all out. Each task is tuned once per
   * group of workers (workers on one target), each with its records' target; every record names its worker. */
  struct kg_pool *pool;
  /* The confirmation, after the search: each task's confirm fastest traces (0: 3; < 0: none) are measured
   * confirm_runs more times (0: 2), all of them in each round, and a trace measured once that then ranks first
   * (its one time was lucky) joins them; the best is the trace with the lowest median of its results, a trace
   * measured once ranked by its time times the factor by which the re-measured ones came back (at least 1), as
   * kg_tlog_pick_best ranks the log (tlog.h kg_tlog_trace_times). On a noisy machine the fastest of many single
   * measurements is biased low (the winner's curse): the search's best time overstates its schedule, and a
   * schedule that was lucky once beats one that is faster. These measurements are logged and do not count as
   * trials. Not on the CUDA emulator, whose records rank by their deterministic estimate. */
  int confirm, confirm_runs;
  /* measure.early_cut (runtime/measure.h) is on by default in a tuning: 0 means 4, < 0 off. The tuner tells each
   * task's measurer the task's best time (the log's included); a pool's workers cut by the best they timed
   * themselves. */
} kg_tune_opts;

typedef struct kg_tune_task_result {
  int input;               /* the caller's task this is (several per task with a pool of several groups) */
  char device[256];        /* the target's device name */
  int trials;              /* measured this run */
  int loaded;              /* records of this task found in the log */
  int failed;              /* measured this run with a status other than ok */
  int cut;                 /* measured this run and timed by one run (the early cut) */
  double default_s;        /* the default schedule's median (0 when not measured) */
  double best_s;           /* the best trace's time, this run or the log: the median of its results (0: none) */
  int confirmed;           /* measurements of the confirmation (kg_tune_opts.confirm) */
  double search_best_s;    /* with a confirmation: the fastest single result before it (0: none) */
  double best_gflops, best_gbps;
  kg_trace best_trace;     /* the best record's trace */
  const char *best_sketch; /* its sketch (NULL when it came from a log record without one) */
  uint64_t space_points;   /* the size of its search space (kg_space_size): points over all its sketches */
  int space_sketches;      /* the sketches of that space */
  int exhausted;           /* the search found no schedule left to measure (every distinct one it can reach
                            * was measured) before the budget ran out */
} kg_tune_task_result;

typedef struct kg_tune_report {
  int ntasks;              /* the caller's tasks, or with a pool of several groups one per task and group */
  kg_tune_task_result *tasks;
  int trials, rounds;
  double elapsed_s, build_s, measure_s, search_s;
  double last_accuracy;    /* the model's pairwise ranking accuracy on the last round's measurements (-1: none) */
  int log_skipped_parts;   /* corrupt parts skipped while loading the log */
  size_t log_skipped_bytes;
  int log_skipped_newer;   /* records of a newer format version among them (not used) */
  int log_passed_over;     /* successful records of the log never taken as best: an implausible time, or a
                            * trace that no longer applies to the program */
  char log_passed_note[640]; /* the first of them and why */
  int log_appended;        /* records other tuners appended to the log during this run, picked up between rounds */
  int log_shared;          /* another tuner appended to the log during this run */
  int from_estimates;      /* on a GPU: schedules measured first because the log's emulator records of the same
                            * workload and arch ranked them highest by their analytical estimates */
} kg_tune_report;

/* Tunes the tasks (all on o->measure.target). 0, or -1 with err (no device, the log cannot be opened or
 * written, ...). The report is filled in either case as far as tuning got; free it with kg_tune_report_free. */
int kg_tune(const kg_tune_task *tasks, int ntasks, const kg_tune_opts *o, kg_tune_report *rep, char *err,
            size_t errlen);
void kg_tune_report_free(kg_tune_report *rep);
#endif
