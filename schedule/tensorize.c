/* tensorize S ROWS COLS K: S's innermost loops computed by the tensor cores (mma.sync.aligned.m16n8k16, f16 or bf16
 * operands, f32 accumulation). What the step requires is in sched.h (kg_mma_plan); the plan is checked twice, by
 * the step and again by lowering (lower/lower.c), since later steps may move loops around it. The step marks the
 * loops so that no later split, fuse or annotation can change them. */
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

static int usable_kind(const kg_iter *it) {
  return (it->kind == KG_LOOP_SERIAL || it->kind == KG_LOOP_UNROLLED) && it->tag == KG_THREAD_NONE && !it->pipeline;
}

int kg_sched_mma_plan(const kg_sstage *st, kg_mma_plan *p, char *err, size_t errlen) {
  memset(p, 0, sizeof *p);
  const char *n = st->name;
  if (!st->mma[0]) FAIL("tensorize: stage %s: not tensorized", n);
  kg_iter *I = st->mma[0], *J = st->mma[1], *K = st->mma[2];
  if (st->red != KG_RED_SUM) FAIL("tensorize: stage %s: not a sum (the tensor cores add products)", n);
  const kg_expr *e = st->body;
  if (e->kind != KG_EXPR_BINARY || e->op.op != KG_OP_MUL || e->op.a->kind != KG_EXPR_READ ||
      e->op.b->kind != KG_EXPR_READ)
    FAIL("tensorize: stage %s: its body must be the product of two tensor reads (A[...] * B[...])", n);
  kg_dtype ta = e->op.a->read.tensor->dtype, tb = e->op.b->read.tensor->dtype;
  if (ta == KG_DT_F32 || ta != tb)
    FAIL("tensorize: stage %s: the operands %s and %s are %s and %s; the tensor cores take two f16 or two bf16 "
         "operands", n, e->op.a->read.tensor->name, e->op.b->read.tensor->name, kg_dtype_names[ta], kg_dtype_names[tb]);
  /* the three innermost loops */
  const kg_iter *loops[3] = {I, J, K};
  const char *role[3] = {"rows", "columns", "reduction"};
  for (int q = 0; q < 3; q++) {
    int at = kg_sstage_leaf_index(st, loops[q]);
    if (at < 0) FAIL("tensorize: stage %s: loop %s is no longer a leaf", n, loops[q]->name);
    if (at < st->nleaves - 3)
      FAIL("tensorize: stage %s: loop %s (%s) is not among the three innermost loops", n, loops[q]->name, role[q]);
    if (!usable_kind(loops[q]))
      FAIL("tensorize: stage %s: loop %s is %s%s; the tensorized loops must be serial or unrolled", n, loops[q]->name,
           loops[q]->pipeline ? "pipelined" : kg_loop_kind_names[loops[q]->kind],
           loops[q]->tag != KG_THREAD_NONE ? " (bound)" : "");
  }
  if (I == J || J == K || I == K) FAIL("tensorize: stage %s: a loop is named twice", n);
  if (!K->is_reduce || K->extent != 16)
    FAIL("tensorize: stage %s: loop %s must be a reduction loop of 16 (it is %s of %lld)", n, K->name,
         K->is_reduce ? "a reduction loop" : "spatial", (long long)K->extent);
  for (int l = 0; l < st->nleaves; l++)
    if (st->leaves[l]->is_reduce) {
      if (st->leaves[l] == K)
        FAIL("tensorize: stage %s: loop %s is the reduction's first loop; split the reduction so that a loop "
             "outside the tensorized ones starts it (the accumulators are set before the instruction runs)", n,
             K->name);
      break;
    }
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
  /* rows and columns may each be made of several axes (an implicit GEMM's rows: a convolution's batch and output
   * pixels fused), the reduction of several reduction axes; the three sets are disjoint, since a loop is made of
   * spatial or of reduction axes, never both, and a fuse or split consumes its loops */
  uint64_t mi = root_mask(I), mj = root_mask(J);
  const kg_expr *x = e->op.a, *y = e->op.b;
  if (uses_any(st, x, mj) || uses_any(st, y, mi)) {
    const kg_expr *t = x;
    x = y;
    y = t;
  }
  if (!mi || !mj || (mi & mj)) FAIL("tensorize: stage %s: the rows and the columns share an axis", n);
  if (uses_any(st, x, mj) || uses_any(st, y, mi))
    FAIL("tensorize: stage %s: one operand must not depend on the columns (loop %s) and the other not on the rows "
         "(loop %s)", n, J->name, I->name);
  p->rows = I;
  p->cols = J;
  p->k = K;
  p->lane = F;
  p->group = G;
  p->tig = T;
  p->a = x;
  p->b = y;
  p->dtype = ta;
  return 0;
}

int kg_sched_tensorize(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  (void)s;
  if (st->mma[0]) FAIL("tensorize: stage %s: already tensorized", st->name);
  kg_iter *it[3];
  for (int q = 0; q < 3; q++) {
    it[q] = kg_sstage_find_iter(st, step->names[q]);
    if (!it[q]) FAIL("tensorize: stage %s: no loop named %s", st->name, step->names[q]);
  }
  for (int q = 0; q < 3; q++) st->mma[q] = it[q];
  kg_mma_plan p;
  if (kg_sched_mma_plan(st, &p, err, errlen) != 0) {
    for (int q = 0; q < 3; q++) st->mma[q] = NULL; /* a failed step changes nothing */
    return -1;
  }
  p.rows->tensorized = p.cols->tensorized = p.k->tensorized = p.lane->tensorized = 1;
  return 0;
}
