/* The search space: sketches derived from a program's structure by rules, and knobs that annotate them.
 *
 * A sketch is a schedule skeleton (in the spirit of Ansor): which stages are inlined, which are tiled on how many
 * levels, which loops are bound to blocks, threads and vthreads, which inputs are staged in shared memory, where
 * accumulators live, which reductions go cross-thread. What a sketch leaves open are its knobs: tile sizes (not
 * only divisors), unroll depths, vector widths, compute locations and small structural choices. A point (a
 * sketch and one value per knob) is realized into a schedule by applying ordinary primitive steps to the
 * program's default schedule, so a candidate is fully described by the resulting trace.
 *
 * Rules (search/sketch_cpu.c, search/sketch_gpu.c) add sketches to a space; sampling, mutation and crossover
 * (search/evolve.c) work on knob values only, generically. A point whose realization fails (an illegal step, or a
 * GPU schedule over the device's limits: threads, shared memory, registers, launch rules) is dropped before any
 * measurement.
 *
 * An unfused space (kg_space_opts.unfused) is the baseline of a fusion experiment: every stage of the program
 * keeps its own loop nest (on CUDA its own kernels) at root, tuned on its own. Its rules never inline a program
 * stage nor compute one at another stage's loop; the stages a primitive creates for one stage (cache_read,
 * cache_write, rfactor: that operator's own data movement) may still be computed inside it. kg_space_realize
 * rejects any realized schedule that fuses a program stage all the same, so the guarantee does not rest on the
 * rules alone. */
#ifndef KG_SPACE_H
#define KG_SPACE_H
#include <stddef.h>
#include <stdint.h>
#include "../schedule/sched.h"
#include "../codegen/gpu_arch.h"
#include "../codegen/cpu_arch.h"

#define KG_SPACE_MAX_KNOBS 64
#define KG_KNOB_MAX_VALUES 48
#define KG_SPACE_MAX_SKETCHES 32

/* What a knob means, which tells mutation how to move it. */
typedef enum {
  KG_KNOB_TILE,     /* a split factor (values ascending); mutation prefers neighbouring values */
  KG_KNOB_UNROLL,   /* an unroll depth (1: none) */
  KG_KNOB_VECTOR,   /* a vector width (1: none) */
  KG_KNOB_LOCATION, /* a compute location: an index into the sketch's candidate attach points */
  KG_KNOB_CHOICE    /* any other discrete choice */
} kg_knob_kind;
extern const char *const kg_knob_kind_names[]; /* "tile", "unroll", "vector", "location", "choice" */

typedef struct kg_knob {
  kg_knob_kind kind;
  const char *name;                    /* unique within its sketch, e.g. "C.i.l1" */
  int nvalues;                         /* >= 1 */
  int64_t values[KG_KNOB_MAX_VALUES];  /* the values a point may hold */
} kg_knob;

struct kg_space;
struct kg_point;
typedef struct kg_sketch kg_sketch;
/* Applies the sketch's steps with pt's knob values to s (a fresh default schedule). 0, or -1 with err. */
typedef int (*kg_sketch_realize_fn)(const kg_sketch *sk, const struct kg_point *pt, kg_schedule *s, char *err,
                                     size_t errlen);

struct kg_sketch {
  const char *name; /* unique within its space, e.g. "cpu/tile-cache_write"; logged with each record */
  int nknobs;
  kg_knob knobs[KG_SPACE_MAX_KNOBS];
  kg_sketch_realize_fn realize;
  void *data;       /* the rule's own description (in the space's arena) */
  const struct kg_space *space;
  int fallback; /* a fallback beside better sketches (cpu/simple beside a heavy stage's tiles): one point, and rules
                 * that add knobs to every sketch (the stream knobs) leave it alone */
};

typedef struct kg_space {
  kg_arena arena;
  const kg_program *prog;
  kg_target_kind target;
  kg_gpu_limits limits; /* CUDA: the device's (or --arch's) limits that realized schedules must respect */
  int unfused;          /* every program stage stays at root (see above); rules read it */
  kg_cpu_arch cpu;      /* C: the vector unit the kernels are compiled for (register tiles are sized by it) */
  int nsketches;
  kg_sketch sketches[KG_SPACE_MAX_SKETCHES];
} kg_space;

typedef struct kg_point {
  int sketch;                         /* index into the space's sketches */
  int nknobs;
  int64_t knobs[KG_SPACE_MAX_KNOBS];  /* one value per knob of the sketch, each among the knob's values */
} kg_point;

/* How a space is built (all zero: the default, fusing space). */
typedef struct kg_space_opts {
  int unfused;             /* no program stage inlined or computed at another stage's loop */
  const kg_cpu_arch *cpu;  /* C: the instruction-set level (runtime: kg_cpu_arch_host); NULL: kg_cpu_arch_default */
} kg_space_opts;

/* The space of program p for target (limits: CUDA only, NULL for C). Always has at least one sketch, and in an
 * unfused space at least one that keeps every stage at root (cpu/simple, gpu/simple), as the default schedule
 * does. kg_space_new(p, t, l) is kg_space_new_opts(p, t, l, NULL). */
kg_space *kg_space_new(const kg_program *p, kg_target_kind target, const kg_gpu_limits *limits);
kg_space *kg_space_new_opts(const kg_program *p, kg_target_kind target, const kg_gpu_limits *limits,
                            const kg_space_opts *o);
void kg_space_free(kg_space *sp);
int kg_space_find_sketch(const kg_space *sp, const char *name); /* -1 when absent */

/* For rules: a new sketch in sp (NULL when full), and a knob of it (returns its index; values copied, at most
 * KG_KNOB_MAX_VALUES, sorted ascending and de-duplicated for TILE/UNROLL/VECTOR). */
kg_sketch *kg_space_add_sketch(kg_space *sp, const char *name, kg_sketch_realize_fn realize, void *data);
int kg_sketch_add_knob(kg_sketch *sk, kg_knob_kind kind, const char *name, const int64_t *values, int nvalues);
/* kg_sketch_add_knob for the knob "STAGE.WHAT", the name kg_point_knob looks up. */
int kg_sketch_add_stage_knob(kg_sketch *sk, kg_knob_kind kind, const char *stage, const char *what,
                             const int64_t *values, int nvalues);
/* For realize functions: pt's value of sk's knob "STAGE.WHAT", or def when sk has no such knob. */
int64_t kg_point_knob(const kg_sketch *sk, const kg_point *pt, const char *stage, const char *what, int64_t def);
/* Tile factors worth trying for a loop of the given extent: 1..8, powers of two, the divisors and a few other
 * values up to min(extent, cap). Returns how many were written to out (at most KG_KNOB_MAX_VALUES). */
int kg_space_tile_values(int64_t extent, int64_t cap, int64_t *out);
/* Powers of two from lo below min(extent, cap), then min(extent, cap) itself (at most KG_KNOB_MAX_VALUES). */
int kg_space_pow2_values(int64_t extent, int64_t lo, int64_t cap, int64_t *out);
/* Register-tile columns along an axis of the given extent, for vectors of lanes (even) lanes: whole vectors, up to
 * four; the extent itself when it is at most four vectors and not whole vectors (a short axis in one tile); half a
 * vector when that divides the extent and a whole one does not (no remainder loop). At most 6 values. */
int kg_space_vector_cols(int64_t extent, int64_t lanes, int64_t *out);

/* How many points sp holds: over its sketches, the sum of the products of their knobs' value counts, saturating at
 * UINT64_MAX. Distinct points may realize the same schedule (a knob that another knob's value makes moot), so this
 * bounds the number of distinct schedules from above. */
uint64_t kg_space_size(const kg_space *sp);
/* A uniformly random value for every knob of sketch (rng: a splitmix64 state). */
void kg_space_sample(const kg_space *sp, int sketch, uint64_t *rng, kg_point *out);
/* Whether every value of pt belongs to its knob. */
int kg_space_point_valid(const kg_space *sp, const kg_point *pt);
/* The candidate's schedule: a fresh default schedule with the sketch realized at pt. NULL with err when
 * realization fails (illegal, over the target's limits, or, in an unfused space, fusing a program stage). */
kg_schedule *kg_space_realize(const kg_space *sp, const kg_point *pt, char *err, size_t errlen);
/* 0 when s fuses no program stage: every stage of origin KG_ORIGIN_PROGRAM is at root. -1 otherwise, with err
 * (may be NULL) naming the first such stage, e.g. "unfused search: stage 'h' is inlined into its readers".
 * Created stages are not looked at: compute_at attaches a stage only to its one consumer (reading it directly or
 * through inlined stages, all created ones here), and what reads a cache or rfactor stage is the stage it was
 * made for or another of that stage's own caches. */
int kg_space_check_unfused(const kg_schedule *s, char *err, size_t errlen);

/* Rules: add the sketches their rules derive for sp->prog (each returns how many it added). */
int kg_sketches_cpu(kg_space *sp);
int kg_sketches_cpu_attn(kg_space *sp); /* sketch_cpu_attn.c, called by kg_sketches_cpu */
int kg_sketches_gpu(kg_space *sp);
#endif
