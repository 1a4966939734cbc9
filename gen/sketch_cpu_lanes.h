/* CPU sketch rules for heavy stages whose vector lanes run over a spatial axis other than the innermost one (a
 * convolution's output channels): which axes can carry the lanes, and the layouts that make them contiguous.
 * Used by sketch_cpu.c's register tiles. */
#ifndef KG_SKETCH_CPU_LANES_H
#define KG_SKETCH_CPU_LANES_H
#include "build.h"

/* Spatial axes of heavy stage h, other than its innermost, that can carry the vector lanes: some read indexes
 * one of its dimensions with exactly that axis and no other of its dimensions with it (the operand to pack, a
 * convolution's weights), and some read does not use it (the value broadcast across the lanes). Writes them
 * to out (at most max); returns how many. */
int kg_cpu_lane_axes(const kg_sstage *h, int64_t *out, int max);

/* Prepares h for lanes over its spatial axis lane: the accumulation in "h.local" (cache_write) stored with that
 * axis innermost, and each tensor read with the lane axis as one of its dimensions (other than the last)
 * packed at root into a copy with that dimension innermost (cache_read + reorder_storage), its outer loop
 * parallel and its lanes vectorized. perm[d] receives the original axis that is dimension d of the local
 * accumulator. Returns the accumulating stage (NULL: b failed). Requires h at root, untransformed, an output
 * of its own tiles (no epilogue carrying them). */
kg_sstage *kg_cpu_lanes_prepare(kg_builder *b, kg_sstage *h, int lane, int *perm);

#endif
