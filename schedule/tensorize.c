/* Tensor instructions: `tensorize S ROWS COLS K` computes S's three innermost loops with the tensor cores
 * (mma.sync.aligned.m16n8k16 with f16 or bf16 operands, m16n8k8 with f32 ones as TF32 where the program allows it;
 * f32 accumulation), `bfdot S ROWS COLS K` with a CPU's bf16 pair
 * dot products. What each requires is in sched.h (kg_mma_plan, kg_bfdot_plan); a plan is checked twice, by the step
 * and again by lowering (lower/lower.c), since later steps may move loops around it. The step marks the loops so
 * that no later split, fuse or annotation can change them. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "sched_impl.h"

#define FAIL(...) return kg_sched_fail(err, errlen, __VA_ARGS__)

/* The stage's axes (bit r: root r) loop it is made of, through splits and fuses. */
static uint64_t root_mask(const kg_iter *it) {
  if (!it) return 0;
  switch (it->origin) {
    case KG_ITER_ROOT: return it->root_axis < 64 ? 1ull << it->root_axis : 0;
    case KG_ITER_FUSED: return root_mask(it->fuse_outer) | root_mask(it->fuse_inner);
    default: return root_mask(it->split_parent);
  }
}

/* Does e use any of the axes in mask? */
static int uses_any(const kg_sstage *st, const kg_expr *e, uint64_t mask) {
  for (int r = 0; r < st->nax + st->nrax && r < 64; r++)
    if ((mask >> r & 1) && kg_expr_uses_ivar(e, kg_sstage_axis(st, r))) return 1;
  return 0;
}

/* What both steps require of S's body: a sum of A[...] * B[...]. */
static int product_of_reads(const kg_sstage *st, const char *prim, char *err, size_t errlen) {
  const kg_expr *e = st->body;
  if (st->red != KG_RED_SUM) FAIL("%s: stage %s: not a sum (the instruction adds products)", prim, st->name);
  if (e->kind != KG_EXPR_BINARY || e->op.op != KG_OP_MUL || e->op.a->kind != KG_EXPR_READ ||
      e->op.b->kind != KG_EXPR_READ)
    FAIL("%s: stage %s: its body must be the product of two tensor reads (A[...] * B[...])", prim, st->name);
  return 0;
}

/* Loops I, J, K (rows, columns, reduction) are S's three innermost, distinct, of a kind usable(it) accepts (else
 * the message says what they must be: kinds), and K does not start the reduction. */
static int innermost_three(const kg_sstage *st, kg_iter *const loops[3], int (*usable)(const kg_iter *),
                           const char *kinds, const char *prim, char *err, size_t errlen) {
  static const char *const role[3] = {"rows", "columns", "reduction"};
  const char *n = st->name;
  for (int q = 0; q < 3; q++) {
    int at = kg_sstage_leaf_index(st, loops[q]);
    if (at < 0) FAIL("%s: stage %s: loop %s is no longer a leaf", prim, n, loops[q]->name);
    if (at < st->nleaves - 3)
      FAIL("%s: stage %s: loop %s (%s) is not among the three innermost loops", prim, n, loops[q]->name, role[q]);
    if (!usable(loops[q]))
      FAIL("%s: stage %s: loop %s is %s%s; the instruction's loops must be %s", prim, n, loops[q]->name,
           loops[q]->pipeline ? "pipelined" : kg_loop_kind_names[loops[q]->kind],
           loops[q]->tag != KG_THREAD_NONE ? " (bound)" : "", kinds);
  }
  if (loops[0] == loops[1] || loops[1] == loops[2] || loops[0] == loops[2])
    FAIL("%s: stage %s: a loop is named twice", prim, n);
  for (int l = 0; l < st->nleaves; l++)
    if (st->leaves[l]->is_reduce) {
      if (st->leaves[l] == loops[2])
        FAIL("%s: stage %s: loop %s is the reduction's first loop; split the reduction so that a loop outside the "
             "instruction's loops starts it (the accumulators are set before the instruction runs)", prim, n,
             loops[2]->name);
      break;
    }
  return 0;
}

/* The operands: *x over the rows (not the columns I... J), *y over the columns (not the rows). */
static int split_operands(const kg_sstage *st, const kg_iter *I, const kg_iter *J, const kg_expr **x,
                          const kg_expr **y, const char *prim, char *err, size_t errlen) {
  /* rows and columns may each be made of several axes (an implicit GEMM's rows: a convolution's batch and output
   * pixels fused), the reduction of several reduction axes; the three sets are disjoint, since a loop is made of
   * spatial or of reduction axes, never both, and a fuse or split consumes its loops */
  uint64_t mi = root_mask(I), mj = root_mask(J);
  *x = st->body->op.a;
  *y = st->body->op.b;
  if (uses_any(st, *x, mj) || uses_any(st, *y, mi)) {
    const kg_expr *t = *x;
    *x = *y;
    *y = t;
  }
  if (!mi || !mj || (mi & mj)) FAIL("%s: stage %s: the rows and the columns share an axis", prim, st->name);
  if (uses_any(st, *x, mj) || uses_any(st, *y, mi))
    FAIL("%s: stage %s: one operand must not depend on the columns (loop %s) and the other not on the rows (loop %s)",
         prim, st->name, J->name, I->name);
  return 0;
}

/* The step: the three loops named recorded in slots (NULL again when plan refuses them) and frozen; plan checks
 * the step's requirements, and once they hold may freeze loops of its own (tensorize's lane loop). */
static int tensor_step(const kg_schedule *s, kg_sstage *st, const kg_step *step, kg_iter **slots, const char *prim,
                       int (*plan)(const kg_schedule *, const kg_sstage *, char *, size_t), char *err,
                       size_t errlen) {
  if (st->mma[0] || st->bfdot[0])
    FAIL("%s: stage %s: already computed by %s", prim, st->name, st->mma[0] ? "tensorize" : "bfdot");
  kg_iter *it[3];
  for (int q = 0; q < 3; q++) {
    it[q] = kg_sstage_find_iter(st, step->names[q]);
    if (!it[q]) FAIL("%s: stage %s: no loop named %s", prim, st->name, step->names[q]);
  }
  for (int q = 0; q < 3; q++) slots[q] = it[q];
  if (plan(s, st, err, errlen) != 0) {
    for (int q = 0; q < 3; q++) slots[q] = NULL; /* a failed step changes nothing */
    return -1;
  }
  for (int q = 0; q < 3; q++) it[q]->tensorized = 1;
  return 0;
}

/* ---- tensorize ---- */

static int mma_usable(const kg_iter *it) {
  return (it->kind == KG_LOOP_SERIAL || it->kind == KG_LOOP_UNROLLED) && it->tag == KG_THREAD_NONE && !it->pipeline;
}

int kg_mma_kstep(kg_dtype t) { return t == KG_DT_F32 ? 8 : 16; }

int kg_sched_mma_plan(const kg_schedule *s, const kg_sstage *st, kg_mma_plan *p, char *err, size_t errlen) {
  memset(p, 0, sizeof *p);
  const char *n = st->name;
  if (!st->mma[0]) FAIL("tensorize: stage %s: not tensorized", n);
  kg_iter *I = st->mma[0], *J = st->mma[1], *K = st->mma[2];
  if (product_of_reads(st, "tensorize", err, errlen)) return -1;
  const kg_expr *e = st->body;
  kg_dtype ta = e->op.a->read.tensor->dtype, tb = e->op.b->read.tensor->dtype;
  if (ta != tb || (ta == KG_DT_F32 && !s->prog->tf32))
    FAIL("tensorize: stage %s: the operands %s and %s are %s and %s; the tensor cores take two f16 or two bf16 "
         "operands, or two f32 ones as TF32 when the program allows it (--tf32)", n, e->op.a->read.tensor->name,
         e->op.b->read.tensor->name, kg_dtype_names[ta], kg_dtype_names[tb]);
  kg_iter *const loops[3] = {I, J, K};
  if (innermost_three(st, loops, mma_usable, "serial or unrolled", "tensorize", err, errlen)) return -1;
  const int ks = kg_mma_kstep(ta);
  if (!K->is_reduce || K->extent != ks)
    FAIL("tensorize: stage %s: loop %s must be a reduction loop of %d (it is %s of %lld)", n, K->name, ks,
         K->is_reduce ? "a reduction loop" : "spatial", (long long)K->extent);
  /* rows: I is the outer 2 of a split by 8 of a 16-long stretch */
  if (I->is_reduce || I->origin != KG_ITER_SPLIT_OUTER || I->split_parent->split_inner->factor != 8 ||
      I->split_parent->extent != 16 || I->extent != 2)
    FAIL("tensorize: stage %s: loop %s must be the outer part (2) of a split by 8 of a 16-long spatial loop", n,
         I->name);
  /* columns: J is the inner 2 of a split by 2 of an 8-long stretch */
  if (J->is_reduce || J->origin != KG_ITER_SPLIT_INNER || J->factor != 2 || J->split_parent->extent != 8)
    FAIL("tensorize: stage %s: loop %s must be the inner part of a split by 2 of an 8-long spatial loop", n, J->name);
  kg_iter *G = I->split_parent->split_inner, *T = J->split_parent->split_outer;
  kg_iter *F = G->fused_into;
  if (!F || F != T->fused_into || F->fuse_outer != G || F->fuse_inner != T || kg_sstage_leaf_index(st, F) < 0 ||
      F->kind != KG_LOOP_BOUND || F->tag != KG_THREAD_THREAD_X || F->extent != 32)
    FAIL("tensorize: stage %s: loops %s (8) and %s (4) must be fused, %s outer, into one loop of 32 bound to "
         "threadIdx.x (the lane: 4 * row group + thread in group)", n, G->name, T->name, G->name);
  const kg_expr *x, *y;
  if (split_operands(st, I, J, &x, &y, "tensorize", err, errlen)) return -1;
  p->rows = I;
  p->cols = J;
  p->k = K;
  p->lane = F;
  p->group = G;
  p->tig = T;
  p->a = x;
  p->b = y;
  p->dtype = ta;
  p->kstep = ks;
  return 0;
}

static int mma_check(const kg_schedule *s, const kg_sstage *st, char *err, size_t errlen) {
  kg_mma_plan p;
  if (kg_sched_mma_plan(s, st, &p, err, errlen) != 0) return -1;
  p.lane->tensorized = 1; /* the lane loop is frozen too */
  return 0;
}

int kg_sched_tensorize(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  return tensor_step(s, st, step, st->mma, "tensorize", mma_check, err, errlen);
}

/* ---- bfdot ---- */

static int bfdot_usable(const kg_iter *it) {
  return it->kind != KG_LOOP_PARALLEL && it->tag == KG_THREAD_NONE && !it->pipeline;
}

int kg_sched_bfdot_plan(const kg_sstage *st, kg_bfdot_plan *p, char *err, size_t errlen) {
  memset(p, 0, sizeof *p);
  const char *n = st->name;
  if (!st->bfdot[0]) FAIL("bfdot: stage %s: has no bfdot step", n);
  kg_iter *I = st->bfdot[0], *J = st->bfdot[1], *K = st->bfdot[2];
  if (product_of_reads(st, "bfdot", err, errlen)) return -1;
  const kg_expr *e = st->body;
  if (e->op.a->read.tensor->dtype != KG_DT_BF16 || e->op.b->read.tensor->dtype != KG_DT_BF16)
    FAIL("bfdot: stage %s: the operands %s and %s are %s and %s; bf16 dot products take two bf16 operands", n,
         e->op.a->read.tensor->name, e->op.b->read.tensor->name, kg_dtype_names[e->op.a->read.tensor->dtype],
         kg_dtype_names[e->op.b->read.tensor->dtype]);
  kg_iter *const loops[3] = {I, J, K};
  if (innermost_three(st, loops, bfdot_usable, "in one thread (not parallel or bound)", "bfdot", err, errlen))
    return -1;
  if (!K->is_reduce || K->extent % 2 != 0)
    FAIL("bfdot: stage %s: loop %s must be a reduction loop of an even extent (it is %s of %lld)", n, K->name,
         K->is_reduce ? "a reduction loop" : "spatial", (long long)K->extent);
  if (J->is_reduce || J->extent % 16 != 0 || J->extent > KG_BFDOT_MAX_COLS)
    FAIL("bfdot: stage %s: loop %s (columns) must be spatial, a multiple of 16 up to %d (it is %lld)", n, J->name,
         KG_BFDOT_MAX_COLS, (long long)J->extent);
  if (I->is_reduce || I->extent > KG_BFDOT_MAX_ROWS)
    FAIL("bfdot: stage %s: loop %s (rows) must be spatial, up to %d (it is %lld)", n, I->name, KG_BFDOT_MAX_ROWS,
         (long long)I->extent);
  if (I->extent * (J->extent / 16) > KG_BFDOT_MAX_ACC)
    FAIL("bfdot: stage %s: %lld x %lld is %lld accumulator vectors, over %d", n, (long long)I->extent,
         (long long)J->extent, (long long)(I->extent * (J->extent / 16)), KG_BFDOT_MAX_ACC);
  const kg_expr *x, *y;
  if (split_operands(st, I, J, &x, &y, "bfdot", err, errlen)) return -1;
  p->rows = I;
  p->cols = J;
  p->k = K;
  p->a = x;
  p->b = y;
  return 0;
}

static int bfdot_check(const kg_schedule *s, const kg_sstage *st, char *err, size_t errlen) {
  (void)s;
  kg_bfdot_plan p;
  return kg_sched_bfdot_plan(st, &p, err, errlen);
}

int kg_sched_bfdot(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  return tensor_step(s, st, step, st->bfdot, "bfdot", bfdot_check, err, errlen);
}
