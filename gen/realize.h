/* A realization of a sketch point by the CPU sketch rules (sketch_cpu*.c): the point's knob values applied through
 * the generators' builder, a failed step failing the realization. */
#ifndef KG_GEN_REALIZE_H
#define KG_GEN_REALIZE_H
#include "build.h"
#include "space.h"

typedef struct kg_rz {
  kg_builder b;
  const kg_sketch *sk;
  const kg_point *pt;
} kg_rz;

/* The point's value of knob STAGE.WHAT (def when the sketch has no such knob). */
static inline int64_t kg_rz_knob(const kg_rz *z, const char *stage, const char *what, int64_t def) {
  return kg_point_knob(z->sk, z->pt, stage, what, def);
}

/* The f32 lanes of a vector register of the space's instruction-set level (codegen/cpu_arch.h). */
static inline int64_t kg_rz_lanes(const kg_rz *z) { return z->sk->space->cpu.lanes; }
/* Whether a register tile of rows x cols accumulators (cols along the vector lanes) spills: more accumulator
 * vectors than the level's registers leave beside the operands (kg_cpu_arch_max_acc). */
static inline int kg_rz_tile_spills(const kg_rz *z, int64_t rows, int64_t cols) {
  int64_t L = kg_rz_lanes(z);
  return rows * ((cols + L - 1) / L) > kg_cpu_arch_max_acc(&z->sk->space->cpu);
}

/* A light reduction's innermost reduction loop split by the stage's rf knob into that many partial results
 * (stage x.rf, whose last spatial axis, the lanes, becomes its innermost loop, vectorized): the serial
 * accumulation chain becomes a vector one (a float reduction does not vectorize as it is written). x then combines
 * the lanes. Returns x.rf (NULL: knob 1 or not applicable); the caller attaches it at x's loop, or at the loop x
 * is computed at, once x is placed. Requires x's loops untransformed. (sketch_cpu.c) */
kg_sstage *kg_rz_rfactor_lanes(kg_rz *z, kg_sstage *x);
/* The rf knob's values for light reduction x (1, and the lane counts its innermost reduction is long enough for)
 * into v (room for 8); returns how many. */
int kg_rz_rfactor_values(const kg_sstage *x, int64_t *v);

#endif
