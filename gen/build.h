/* Building schedule structures out of primitive steps: the one builder of every generator that realizes a whole
 * structure (the CPU and GPU sketches, sketch_cpu.c and sketch_gpu.c, from knob values; the random GPU schedules,
 * random_gpu.c, from random sizes). Internal to the library, not part of the API.
 *
 * A build fails as a whole: the first step that fails marks it failed and keeps that step's message in err; every
 * helper is then a no-op (returning NULL or -1), so a structure is written as a straight sequence of steps and
 * checked once at its end. A helper handed a NULL loop (what an earlier failed helper returned) fails the build
 * too. Only kg_builder_try applies a step whose failure the caller expects and handles (the build goes on).
 *
 * Reorder rule (kg_builder_reorder): the loops named take the slots they occupy now, in ascending order, as the
 * reorder primitive does; so a subset of a stage's leaves may be named, and the step is recorded exactly when it
 * changes the nest (when the loops are not already in that relative order). A loop that is not a leaf of the
 * stage is handed to the primitive, which refuses it with its own message. */
#ifndef KG_GEN_BUILD_H
#define KG_GEN_BUILD_H
#include "../schedule/sched_impl.h"

typedef struct kg_builder {
  kg_schedule *s;
  int failed;
  char err[512]; /* the first failure's message ("" when a helper failed on a NULL loop) */
} kg_builder;

/* A build on s, not failed. */
void kg_builder_init(kg_builder *b, kg_schedule *s);
/* Marks b failed with this message (kept only when it is the first failure). */
void kg_builder_fail(kg_builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Applies one step (0), or marks b failed (-1). */
int kg_builder_step(kg_builder *b, kg_step_kind kind, const char *stage, const char *const *names, int nnames,
                  int64_t i0, int64_t i1, int nints);
/* Applies one step whose failure the caller handles: 0 when applied, -1 when it failed (s unchanged, b not
 * failed) or b had already failed. */
int kg_builder_try(kg_builder *b, kg_step_kind kind, const char *stage, const char *const *names, int nnames,
                 int64_t i0, int64_t i1, int nints);
/* split: the outer loop (*inner the inner one), NULL on failure. */
kg_iter *kg_builder_split(kg_builder *b, kg_sstage *st, kg_iter *it, int64_t f, kg_iter **inner);
/* fuse of two adjacent loops (x outer): the fused loop, NULL on failure. */
kg_iter *kg_builder_fuse(kg_builder *b, kg_sstage *st, kg_iter *x, kg_iter *y);
/* Fuses st's leaves from..from+n-1 (adjacent) into one: the fused loop (the loop itself when n == 1). */
kg_iter *kg_builder_fuse_run(kg_builder *b, kg_sstage *st, int from, int n);
/* unroll / vectorize / parallel / bind (tag for bind only). */
void kg_builder_annotate(kg_builder *b, kg_step_kind kind, kg_sstage *st, kg_iter *it, kg_thread_tag tag);
/* Reorders st's loops into this relative order (the rule above; no step when they already are in it). More
 * than KG_STEP_MAX_NAMES loops fail the build. */
void kg_builder_reorder(kg_builder *b, kg_sstage *st, kg_iter **order, int n);
/* compute_at: stage p at loop it of stage c. */
void kg_builder_compute_at(kg_builder *b, kg_sstage *p, const kg_sstage *c, kg_iter *it);
/* cache_read WHAT SCOPE READER / cache_write WHAT SCOPE: the created stage, NULL on failure. */
kg_sstage *kg_builder_cache(kg_builder *b, kg_step_kind kind, const char *what, const char *scope,
                          const kg_sstage *reader);

/* reorder_storage of st with its dimension d innermost; with panel > 1, d first cut into panels of that many
 * (split_storage), the panels outermost: [d/panel][other dimensions][panel]. pairs >= 0 (another dimension,
 * of even extent): that one stored in pairs, each pair innermost: [.. pairs/2 ..][d][2], the layout bf16 pair
 * dot products (`bfdot`) load 16 at once. Requires st at root, untransformed (the storage steps want it
 * so). 0, or -1 with b failed. */
int kg_builder_storage_inner(kg_builder *b, kg_sstage *st, int d, int64_t panel, int pairs);

/* How kg_builder_pack lays out and places a packed copy. */
typedef struct kg_pack {
  int inner;              /* the copy's dimension stored innermost (reorder_storage); -1 or the last: as it is */
  int64_t panel;          /* > 1: that dimension cut into panels of this many (split_storage): the panels outermost,
                           * [dim/panel][other dimensions][panel]; it must divide the dimension's extent */
  const kg_sstage *at;    /* compute_at this stage's loop `loop`; NULL: the copy stays at root */
  kg_iter *loop;
  int widen;              /* an f16/bf16 copy stored as f32 (widen): converted once, not at every use */
  int parallel;           /* its outermost loop parallel (when it has more than one) */
  int pairs;              /* > 0: dimension pairs - 1 stored in pairs, after `inner` (kg_builder_storage_inner) */
} kg_pack;
/* Packs tensor `what` for reader (cache_read local), laid out as `how` says (the layout first: the storage steps
 * want the copy at root, untransformed), placed, its innermost loop vectorized. Returns the copy, NULL on failure.
 * What the CPU sketches' packed operands share: the register tiles' blocks, BLIS's panels, the convolution's
 * weights with the output channels innermost, attention's key and value tiles. */
kg_sstage *kg_builder_pack(kg_builder *b, const char *what, const kg_sstage *reader, const kg_pack *how);
#endif
