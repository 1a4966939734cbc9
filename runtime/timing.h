/* The timing loop every measurement uses (the in-process C path of runtime/pipeline.c and the measurement worker
 * on all runners), so that warm-up, stop rule and statistics are the same everywhere:
 *   one untimed warm-up run (caches, page faults, the OpenMP pool, a module's first launch), then timed repeats
 *   until at least KG_TIME_MIN_RUNS runs and min_total_s seconds of timed work, at most max_runs runs;
 *   median, min, max and spread by kg_stats_of (base/stats.h).
 * A run is timed by the loop with the monotonic clock (CPU, emulator), or times itself through run_timed (GPU:
 * CUDA events around the launch, and whatever must precede each repeat, such as an L2 flush, outside them). */
#ifndef KG_TIMING_H
#define KG_TIMING_H
#include "../base/stats.h"

#define KG_TIME_MIN_RUNS 3
/* Repeats are capped so that a kernel of a few nanoseconds still answers in bounded time and message size. */
#define KG_TIME_MAX_RUNS 100000

typedef struct kg_timer_ops {
  int (*run)(void *ctx);                    /* one run: 0, or nonzero to stop; also the warm-up */
  int (*run_timed)(void *ctx, double *s);   /* NULL: repeats are `run` under the monotonic clock; else one run
                                             * that puts its own time in *s */
  void *ctx;
} kg_timer_ops;

typedef struct kg_repeats {
  double *times;  /* heap, n entries in run order (kg_repeats_free) */
  int n;
  double total_s; /* sum of times */
  kg_stats st;    /* of times; zeros when n is 0 */
} kg_repeats;

/* One timed run (no warm-up): its time in *dt; returns what the run returned. */
int kg_time_run(const kg_timer_ops *ops, double *dt);
/* Warm-up, then repeats as above (max_runs <= 0: KG_TIME_MAX_RUNS). Returns 0, or the first nonzero value a run
 * returned, the warm-up's included (out then holds the runs timed before it, without statistics). */
int kg_time_repeats(const kg_timer_ops *ops, double min_total_s, int max_runs, kg_repeats *out);
void kg_repeats_free(kg_repeats *r);
#endif
