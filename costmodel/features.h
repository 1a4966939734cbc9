/* Features of a candidate for the cost model: a fixed-length vector extracted from the lowered loop-nest IR, in
 * the spirit of Ansor's per-store features. Each store statement of the lowered program gets a block of
 * features (arithmetic counts by kind times the iterations around it; per buffer it touches: bytes, unique bytes,
 * cache lines, reuse, stride of the innermost loop; the loop extents around it by kind (serial, parallel,
 * vectorized, unrolled, block- and thread-bound, vthread); thread and block extents; shared memory; vector
 * widths; arithmetic intensity). A tensor instruction (a tensor-core mma step, CUDA; a block of bf16 dot
 * products, C) gets such a block too, as an update of its accumulators: its kind and the FMAs it does (also in
 * the float counts and the program's total). The vector holds the KG_FEAT_STORES stores with the most work, in
 * order of decreasing work, then program-wide features (kernel count, total work, launch shape, shared and local
 * footprints, tensor-instruction FMAs). Numbers are log-scaled (log2(1 + x)) so that trees split them at useful places.
 *
 * Extraction only reads the schedule and its lowered IR (in its own arena), so candidates can be featurised in
 * parallel. */
#ifndef KG_FEATURES_H
#define KG_FEATURES_H
#include "../schedule/sched.h"

#define KG_FEAT_STORES 4
#define KG_FEAT_PER_STORE 66
#define KG_FEAT_GLOBAL 17
#define KG_NFEATURES (KG_FEAT_STORES * KG_FEAT_PER_STORE + KG_FEAT_GLOBAL)

/* Fills out[KG_NFEATURES] for schedule s lowered for target. 0, or -1 when s does not lower (out is then
 * zeros). */
int kg_features_extract(const kg_schedule *s, kg_target_kind target, float *out);
/* The name of feature i ("store0.flops_add", "global.kernels", ...), for dumps and tests. */
const char *kg_feature_name(int i);
#endif
