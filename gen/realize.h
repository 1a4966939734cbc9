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

#endif
