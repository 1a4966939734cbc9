/* Lowering's internals, shared by lower.c, bounds.c and tighten.c; not part of the API. bounds.c holds the
 * arithmetic on index expressions:
 *
 * - Linear forms (sum of coef * atom + constant): index expressions are normalised through them so that a region
 *   buffer's "absolute index - region min" cancels to the loop variables inside the attach loop.
 * - Integer ranges of IR expressions over known loop-variable ranges: proves guards true so they can be dropped.
 * - Region inference for a stage computed at a loop of its consumer. */
#ifndef KG_BOUNDS_H
#define KG_BOUNDS_H
#include "ir.h"

/* Known [lo, hi] of IR variables, indexed by kg_irvar.id (grown by the caller). */
typedef struct kg_var_ranges {
  int64_t *lo, *hi;
  unsigned char *known;
  int cap;
} kg_var_ranges;

/* The affine form of an INT expression: the sum of coef * atom over its terms plus c, where an atom is a variable
 * or a subexpression that is not affine (a floor division or modulo, with normalised operands; a select; a load),
 * equal atoms merged and zero terms dropped. The one affine analysis of lowering and the printers: the normal form
 * of kg_bounds_simplify, tightening's bounds, the register accumulator's slots (regacc.c), the CUDA printer's
 * vector accesses. */
typedef struct kg_affine_term {
  kg_irexpr *atom;
  int64_t coef;
} kg_affine_term;
typedef struct kg_affine {
  int ok; /* 0: not an INT expression, or a coefficient overflowed */
  int64_t c;
  kg_affine_term *t;
  int n;
} kg_affine;
/* When lets is non-NULL, variables with lets[id] != NULL (id < nlets) are replaced by their values first. */
kg_affine kg_bounds_affine(kg_arena *a, kg_irexpr *e, kg_irexpr *const *lets, int nlets);
/* The INT expression of an affine form (l->ok), its terms summed in their order in l->t, the constant last. */
kg_irexpr *kg_bounds_affine_ir(kg_arena *a, const kg_affine *l);
/* Rebuilds an INT expression as a normalised sum (terms merged, constants folded). When lets is non-NULL,
 * variables with lets[id] != NULL (id < nlets) are replaced by their values first. */
kg_irexpr *kg_bounds_simplify(kg_arena *a, kg_irexpr *e, kg_irexpr *const *lets, int nlets);
/* e with every floordiv(x, c) and floormod(x, c) (c a positive constant) whose x is c * q + r, r provably in
 * [0, c) over the ranges, replaced by q and r (lets expanded as for kg_bounds_simplify); e itself otherwise. */
kg_irexpr *kg_bounds_divmod(kg_arena *a, kg_irexpr *e, kg_irexpr *const *lets, int nlets, const kg_var_ranges *r);
/* [lo, hi] of an INT expression given the variable ranges; 0 when unknown. */
int kg_bounds_range(const kg_irexpr *e, const kg_var_ranges *r, int64_t *lo, int64_t *hi);
/* 1 when the BOOL condition is provably true for every value of its variables. */
int kg_bounds_provably_true(const kg_irexpr *c, const kg_var_ranges *r);
/* Structural equality of IR expressions. */
int kg_bounds_expr_equal(const kg_irexpr *x, const kg_irexpr *y);

/* Region inference for producer P computed at leaf attach_leaf of consumer C (see lower.c for the rules).
 * Relaxed variables (q->relax) may occur in dom_min (enclosing loops of an outer consumer) and among C's loops at
 * or outside the attach loop; the region then covers their whole range.
 * ext: C's iter extents by iter id; leafvar: C's loop variables by leaf index; dom_min: absolute min of each of
 * C's root axes (spatial then reduction). Fills min[d] (INT IR over C's loop variables at or outside the attach
 * loop) and ext_out[d] for every dimension of P's tensor. Always succeeds: what it cannot bound becomes the
 * whole dimension. */
typedef struct kg_region_query {
  kg_arena *a;
  const kg_schedule *s;
  const kg_sstage *consumer;
  int attach_leaf;
  const int64_t *ext;
  kg_irvar *const *leafvar;
  kg_irexpr *const *dom_min;
  const kg_sstage *producer;
  kg_sstage *const *stage_of_tensor; /* by tensor id; NULL for inputs */
  /* Loop variables to relax (NULL: none): those with known[id] set range over [lo, hi] instead of standing for
   * their current value. Lowering passes the enclosing threadIdx-bound loops for a shared-scope producer, so that
   * its region covers every thread of the block and does not depend on the thread index. */
  const kg_var_ranges *relax;
  /* Set (when non-NULL) if a dimension of P that follows a dynamic size needs the whole dimension: the region's
   * size would then depend on the run-time size, and lowering rejects the schedule. */
  int *symbolic;
  /* C's symbolic extents by iter id (lowering's, NULL where constant; the array itself may be NULL): a fused loop
   * whose inner part follows a dynamic size splits its value by that expression, not by ext's bound. */
  kg_irexpr *const *sext;
} kg_region_query;
void kg_bounds_infer_region(const kg_region_query *q, kg_irexpr **min, int64_t *ext_out);
/* tighten.c: on the C target, the guards of non-dividing splits in perfect nests become tighter loop extents. */
void kg_lower_tighten(kg_arena *a, kg_irstmt *body, const kg_var_ranges *ranges, int nvars);
/* regacc.c: on the C target, reductions into tiles accumulate in small local arrays that compilers keep in
 * registers (after tightening, whose ragged extents it versions). */
void kg_lower_regacc(kg_arena *a, kg_lowered *f);
/* initfold.c: on the C target, a reduction's init nest folds into its register accumulator's first load (after
 * regacc). */
void kg_lower_initfold(kg_arena *a, kg_lowered *f);
/* recip.c: a vectorized (on CUDA also thread-bound) loop dividing by a value it does not change multiplies by its
 * reciprocal, computed once before the loop (C: after regacc; CUDA: after the writer pass, before launch). */
void kg_lower_recip(kg_arena *a, kg_lowered *f, kg_target_kind target);
/* unrollidx.c: on the C target, indices that vary with an unrolled loop end with that loop's terms, so that the
 * compiler's unrolled copies share one base address (after regacc). */
void kg_lower_unroll_index(kg_arena *a, kg_lowered *f);
/* lower/prefetch.c: C target, after kg_lower_regacc: a register tile fetches the output lines of the tile its
 * loop visits next (see there). */
void kg_lower_prefetch(kg_arena *a, kg_lowered *f);
/* lower/transpose.c: C target: a vectorized store scattered along its vector, contiguous along the loop around,
 * becomes tiles stored transposed (see there). */
void kg_lower_transpose(kg_arena *a, kg_lowered *f);
/* pipeline.c: on the CUDA target, each loop the schedule pipelines fills a ring of its shared stages ahead of the
 * step that reads them; -1 with a message in err when the loop's body is not what the pass requires. */
int kg_lower_pipeline(kg_arena *a, kg_lowered *f, char *err, size_t errlen);
/* writer.c: on the CUDA target, a store that no enclosing thread index distinguishes is made by one thread. */
void kg_lower_writer(kg_arena *a, kg_lowered *f);
/* launch.c: on the CUDA target, each kernel's launch shape (f->launch), and the guards of bound loops narrower than
 * it; -1 with a message in err when a barrier or cross-thread reduction falls under a guarded thread loop. */
int kg_lower_launch(kg_arena *a, kg_lowered *f, char *err, size_t errlen);
#endif
