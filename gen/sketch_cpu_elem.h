/* The CPU sketch rule for elementwise programs (sketch_cpu_elem.c), which kg_sketches_cpu calls. Internal to the
 * library, not part of the API. */
#ifndef KG_SKETCH_CPU_ELEM_H
#define KG_SKETCH_CPU_ELEM_H
#include "space.h"

/* Adds the cpu/elem sketch to sp when sp->prog is elementwise (see the file comment of sketch_cpu_elem.c): every
 * stage without a reduction, or an output whose reductions are small windows; and a stream knob, for each output
 * that streaming stores suit, to the sketches sp already holds (called after the other CPU rules). Returns how
 * many sketches it added (0 or 1). */
int kg_sketches_cpu_elem(kg_space *sp);
#endif
