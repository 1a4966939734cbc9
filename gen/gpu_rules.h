/* Building whole GPU structures out of primitive steps, and the launch rules they must pass: shared by the random
 * GPU schedules (random_gpu.c, random sizes) and the search space's GPU sketches (search/sketch_gpu.c, sizes from
 * knobs). Internal to the library, not part of the API. */
#ifndef KG_GPU_RULES_H
#define KG_GPU_RULES_H
#include "../schedule/sched_impl.h"

/* A structure being built on a schedule: the first step that fails marks the whole build failed (every helper
 * is then a no-op returning NULL), with its message kept in err. */
typedef struct kg_gpu_build {
  kg_schedule *s;
  int failed;
  char err[384];
} kg_gpu_build;

/* Applies one step (0), or marks b failed (-1). */
int kg_gpu_step(kg_gpu_build *b, kg_step_kind kind, const char *stage, const char **names, int nnames, int64_t i0,
                int64_t i1, int nints);
/* split: the outer loop (*inner the inner one), NULL on failure. */
kg_iter *kg_gpu_split(kg_gpu_build *b, kg_sstage *st, kg_iter *it, int64_t f, kg_iter **inner);
/* fuse of two adjacent loops (x outer): the fused loop, NULL on failure. */
kg_iter *kg_gpu_fuse(kg_gpu_build *b, kg_sstage *st, kg_iter *x, kg_iter *y);
/* Fuses st's leaves from..from+n-1 (adjacent) into one: the fused loop (the loop itself when n == 1). */
kg_iter *kg_gpu_fuse_run(kg_gpu_build *b, kg_sstage *st, int from, int n);
/* unroll / vectorize / bind (tag for bind only). */
void kg_gpu_annotate(kg_gpu_build *b, kg_step_kind kind, kg_sstage *st, kg_iter *it, kg_thread_tag tag);
/* Reorders st's loops into this relative order (no step when they already are in it). */
void kg_gpu_reorder(kg_gpu_build *b, kg_sstage *st, kg_iter **order, int n);
void kg_gpu_compute_at(kg_gpu_build *b, kg_sstage *p, const kg_sstage *c, kg_iter *it);
/* cache_read WHAT SCOPE READER / cache_write WHAT SCOPE: the created stage, NULL on failure. */
kg_sstage *kg_gpu_cache(kg_gpu_build *b, kg_step_kind kind, const char *what, const char *scope,
                        const kg_sstage *reader);

/* The distinct tensors st's body reads (at most max), with whether some read leaves out a spatial axis of st (the
 * data is reused across that axis, so staging it in shared memory pays). */
void kg_gpu_collect_reads(const kg_sstage *st, const kg_expr *e, kg_tensor **t, int *reuse, int *n, int max);
int kg_gpu_has_reuse(const kg_sstage *st);

/* A cooperative fetch: shared stage sh with its loops fused and split over exactly tx x ty threads (threadIdx.x,
 * .y). With vec > 1 a vec-wide vectorized part is split off the innermost axis before fusing, so its accesses
 * stay contiguous (and aligned when the row length allows) in the printed index. */
void kg_gpu_cooperative_fetch(kg_gpu_build *b, kg_sstage *sh, int64_t tx, int64_t ty, int64_t vec);

/* What a launch may use. Register arrays are counted in floats: each one at most local_array, all of a kernel's
 * together at most local_total; with regs_per_block > 0 also (local_total_used + reg_overhead) x threads at most
 * regs_per_block (an estimate of the register file a block takes). */
typedef struct kg_gpu_budget {
  int64_t threads;
  int64_t block[3], grid[3];
  int64_t shared_floats;
  int64_t local_array, local_total;
  int64_t regs_per_block, reg_overhead;
} kg_gpu_budget;
/* 0 when every kernel of sc's lowered program obeys the launch rules of the GPU semantics within budget: thread,
 * block and grid extents, shared and register footprints, no barrier or cross-thread reduction under a guarded
 * thread loop, no bound loop in a per-thread stage. Else -1 with the reason in why. */
int kg_gpu_launchable(const kg_schedule *sc, const kg_gpu_budget *budget, char *why, size_t whylen);
/* kg_schedule_random for KG_TARGET_CUDA (random_gpu.c): whole launchable structures per stage, drawn from seed;
 * nsteps <= 0 draws nothing, otherwise the structures decide how many steps there are. */
void kg_sched_random_gpu(kg_schedule *s, uint64_t seed, int nsteps);
#endif
