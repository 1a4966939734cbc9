/* Tuning for a range of sizes (in the spirit of DietCode): a small set of schedules that together serve every
 * value of one dynamic size.
 *
 * The range is cut into buckets (log-spaced, or around the values --shapes lists); each bucket's representative
 * value gets a task whose program keeps the size dynamic, so every candidate is the size-generic kernel measured
 * at that value. All tasks share one trial budget and one cost model (search/tune.c), whose features are taken
 * at the measured size, so the model learns across sizes. Then the best few schedules of every bucket are
 * measured on every other bucket's value, and each bucket keeps the schedule measured best there: the buckets
 * end up sharing a handful of schedules. Every measurement is a log record naming the value it was measured at
 * and the bucket it serves (tlog.h, "dynamic"). */
#ifndef KG_DYNAMIC_TUNE_H
#define KG_DYNAMIC_TUNE_H
#include "tune.h"

#define KG_DYN_MAX_BUCKETS 16

typedef struct kg_dyn_tune_opts {
  kg_tune_opts tune;      /* the search's options; tune.trials is the budget of the search phase */
  int nbuckets;           /* for a range (0: 4) */
  const int64_t *shapes;  /* the values to serve (NULL: the size's range) */
  int nshapes;
  int top;                /* schedules per bucket measured on every other bucket (0: 2) */
} kg_dyn_tune_opts;

typedef struct kg_dyn_bucket {
  int64_t lo, hi, value;  /* the values it serves, and the one it was measured at */
  double best_s;          /* its best schedule's median at value (0: none succeeded) */
  double own_s;           /* the best of the schedules found by its own search (before the exchange) */
  int from;               /* the bucket whose search found that schedule */
  char *trace;            /* its text (heap) */
} kg_dyn_bucket;

typedef struct kg_dyn_report {
  int nbuckets;
  kg_dyn_bucket buckets[KG_DYN_MAX_BUCKETS];
  int distinct;           /* distinct schedules among the buckets' best */
  int trials;             /* measurements, search and exchange */
  double elapsed_s;
} kg_dyn_report;

/* p: the program, with exactly one dynamic size (kg_program_set_dynamic) whose range the buckets cover. Needs
 * o->tune.log_path (the exchange reads the search's records back). 0, or -1 with err; the report is filled as far
 * as tuning got (free it with kg_dyn_report_free). */
int kg_tune_dynamic(const kg_program *p, const kg_dyn_tune_opts *o, kg_dyn_report *rep, char *err, size_t errlen);
void kg_dyn_report_free(kg_dyn_report *rep);

/* The buckets for [lo, hi] (n log-spaced ones), or around shapes (one per distinct value, boundaries at the
 * geometric means of neighbours): fills lo/hi/value of out[], returns how many (at most KG_DYN_MAX_BUCKETS). */
int kg_dyn_buckets(int64_t lo, int64_t hi, int n, const int64_t *shapes, int nshapes, kg_dyn_bucket *out);
#endif
