/* Launch shapes and launch guards for the CUDA target.
 *
 * Each item of the body is one kernel. Its launch shape (kg_launch) gives every block and thread tag the largest
 * extent of the loops bound to it; a blockIdx loop whose extent follows the dynamic sizes makes the grid extent
 * the largest of such expressions and the constant extents, taken at the sizes' hi for the limits.
 *
 * Every launched thread runs every loop bound to its tags, so a loop whose extent is below its tag's launched
 * extent must be skipped by the threads past its extent. That guard is an IF in the IR:
 *   for v in [0, E) threadIdx.x   becomes   if (threadIdx.x < E): for v in [0, E) threadIdx.x
 * (kg_ir_is_launch_guard), which the CUDA printer prints as `if ((int)threadIdx.x < E) {` around the loop's body.
 * A dynamic extent is guarded unless it is its tag's only one and no constant extent bound to the tag exceeds it
 * anywhere in the sizes' range (extents grow with the sizes, so the value at the lo decides).
 *
 * Each cross-thread reduction gets its strategy from the launch shape (kg_allreduce_how: warp shuffles, shuffles
 * then shared memory, or shared memory, with the scratch it needs), which the printer follows.
 *
 * A barrier or a cross-thread reduction under a guarded threadIdx loop would not be reached by every thread of the
 * block: lowering refuses it. A guarded blockIdx loop skips whole blocks, which is uniform within a block.
 *
 * Requires: lowered IR for KG_TARGET_CUDA, after the single-writer pass. Guarantees: f->launch[k] for each item k
 * of f->body. Where the shape is unknown (kg_launch.ok == 0) or beyond the launch limits, the kernel cannot be
 * printed: it gets no guards and no refusal here (the printer names the problem). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "bounds.h"
#include "ir.h"

#define LAUNCH_MAX_DEPTH 256

const int64_t kg_launch_max_ext[KG_THREAD_COUNT] = {[KG_THREAD_BLOCK_X] = INT32_MAX, [KG_THREAD_BLOCK_Y] = 65535,
                                                    [KG_THREAD_BLOCK_Z] = 65535,     [KG_THREAD_THREAD_X] = 1024,
                                                    [KG_THREAD_THREAD_Y] = 1024,     [KG_THREAD_THREAD_Z] = 64};

static int launched_tag(kg_thread_tag t) { return kg_thread_tag_is_thread(t) || kg_thread_tag_is_block(t); }

typedef struct lctx {
  kg_arena *a;
  const kg_lowered *at_hi, *at_lo; /* f with the dynamic sizes at their hi / lo */
  kg_launch *l;
  int k;
  const kg_irstmt *guarded[LAUNCH_MAX_DEPTH]; /* enclosing guarded threadIdx loops */
  int nguarded;
  char *err;
  size_t errlen;
  int failed;
} lctx;

static void lfail(lctx *C, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lfail(lctx *C, const char *fmt, ...) {
  if (C->failed) return;
  C->failed = 1;
  if (!C->err || !C->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(C->err, C->errlen, fmt, ap);
  va_end(ap);
}

static void scan_shape(lctx *C, const kg_irstmt *s) {
  kg_launch *l = C->l;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) scan_shape(C, s->seq.items[i]);
      break;
    case KG_IRS_FOR: {
      kg_thread_tag t = s->loop.tag;
      int64_t ext;
      if (launched_tag(t)) {
        if (kg_ir_is_const(s->loop.extent, &ext)) {
          if (ext > l->ext_c[t]) l->ext_c[t] = ext;
          if (ext > l->ext[t]) l->ext[t] = ext;
        } else if (kg_thread_tag_is_thread(t) || kg_ir_eval_sizes(C->at_hi, s->loop.extent, &ext) != 0 || ext < 0) {
          l->ok = 0;
        } else {
          int seen = 0;
          for (int i = 0; i < l->ndyn[t] && !seen; i++) seen = kg_bounds_expr_equal(l->dyn[t][i], s->loop.extent);
          if (!seen && l->ndyn[t] == KG_LAUNCH_MAX_DYN) l->ok = 0;
          else if (!seen) l->dyn[t][l->ndyn[t]++] = s->loop.extent;
          if (ext > l->ext[t]) l->ext[t] = ext;
        }
      }
      scan_shape(C, s->loop.body);
      break;
    }
    case KG_IRS_IF:
      scan_shape(C, s->cond.then);
      if (s->cond.otherwise) scan_shape(C, s->cond.otherwise);
      break;
    case KG_IRS_ALLOC: scan_shape(C, s->alloc.body); break;
    default: break;
  }
}

int kg_launch_within_limits(const kg_launch *l) {
  for (int t = KG_THREAD_BLOCK_X; t <= KG_THREAD_THREAD_Z; t++)
    if (l->ext[t] > kg_launch_max_ext[t]) return 0;
  return l->ext[KG_THREAD_THREAD_X] * l->ext[KG_THREAD_THREAD_Y] * l->ext[KG_THREAD_THREAD_Z] <=
         KG_LAUNCH_MAX_THREADS;
}

static const char *nm(const char *s) { return s ? s : "?"; }

/* A point every thread of the block must reach (barrier, cross-thread reduction), described by what. */
static void check_uniform(lctx *C, const char *what) {
  if (!C->nguarded) return;
  const kg_irstmt *g = C->guarded[C->nguarded - 1];
  int64_t ext = 0;
  kg_ir_is_const(g->loop.extent, &ext);
  lfail(C, "lower: kernel %d: %s under the guarded loop %s.%s (%s extent %lld < %lld launched): not every thread "
        "would reach it", C->k, what, nm(g->loop.stage_name), nm(g->loop.loop_name), kg_thread_tag_names[g->loop.tag],
        (long long)ext, (long long)C->l->ext[g->loop.tag]);
}

static int pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

/* The reduction's strategy, from the launch (see kg_allreduce_how). */
static void plan_allreduce(const kg_launch *l, kg_irstmt *s) {
  kg_thread_tag t = s->allreduce.tag;
  int64_t bx = l->ext[KG_THREAD_THREAD_X];
  int64_t nt = bx * l->ext[KG_THREAD_THREAD_Y] * l->ext[KG_THREAD_THREAD_Z];
  s->allreduce.scratch = 0;
  if (l->ext[t] <= 1) s->allreduce.how = KG_ALLREDUCE_NONE;
  else if (t == KG_THREAD_THREAD_X && pow2(bx) && bx <= 32) s->allreduce.how = KG_ALLREDUCE_WARP;
  else if (t == KG_THREAD_THREAD_X && bx % 32 == 0) s->allreduce.how = KG_ALLREDUCE_WARPS, s->allreduce.scratch = nt / 32;
  else s->allreduce.how = KG_ALLREDUCE_SHARED, s->allreduce.scratch = nt;
}

static void guard_stmt(lctx *C, kg_irstmt **slot) {
  kg_irstmt *s = *slot;
  if (C->failed) return;
  const kg_launch *l = C->l;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) guard_stmt(C, &s->seq.items[i]);
      break;
    case KG_IRS_FOR: {
      kg_thread_tag t = s->loop.tag;
      int guarded = 0;
      if (launched_tag(t)) {
        int64_t ext;
        if (kg_ir_is_const(s->loop.extent, &ext)) guarded = ext < l->ext[t];
        else guarded = !(l->ndyn[t] == 1 && l->ext_c[t] <= l->dyn_lo[t]);
      }
      int push = guarded && kg_thread_tag_is_thread(t);
      if (push && C->nguarded == LAUNCH_MAX_DEPTH) {
        lfail(C, "lower: kernel %d: stage %s: guarded thread loops nested too deeply", C->k, nm(s->loop.stage_name));
        return;
      }
      if (push) C->guarded[C->nguarded++] = s;
      guard_stmt(C, &s->loop.body);
      if (push) C->nguarded--;
      /* the condition shares the loop's extent node: kg_ir_is_launch_guard recognizes the pair by it */
      if (guarded)
        *slot = kg_ir_if(C->a, kg_ir_binary(C->a, KG_OP_LT, kg_ir_thread(C->a, t), s->loop.extent), s, NULL);
      break;
    }
    case KG_IRS_IF:
      guard_stmt(C, &s->cond.then);
      if (s->cond.otherwise) guard_stmt(C, &s->cond.otherwise);
      break;
    case KG_IRS_ALLOC: guard_stmt(C, &s->alloc.body); break;
    case KG_IRS_BARRIER: check_uniform(C, "a barrier (__syncthreads around a shared stage)"); break;
    case KG_IRS_ALLREDUCE: {
      plan_allreduce(l, s);
      char what[256];
      snprintf(what, sizeof what, "the cross-thread reduction of stage %s over loop %s",
               nm(s->allreduce.stage_name), nm(s->allreduce.loop_name));
      check_uniform(C, what);
      break;
    }
    default: break;
  }
}

int kg_lower_launch(kg_arena *a, kg_lowered *f, char *err, size_t errlen) {
  int nk = f->body->kind == KG_IRS_SEQ ? f->body->seq.n : 1;
  f->launch = KG_NEW_ARRAY(a, kg_launch, nk > 0 ? nk : 1);
  f->nlaunch = nk;
  kg_lowered at_hi = *f, at_lo = *f;
  at_hi.size_value = f->size_hi;
  at_lo.size_value = f->size_lo;
  lctx C = {.a = a, .at_hi = &at_hi, .at_lo = &at_lo, .err = err, .errlen = errlen};
  for (int k = 0; k < nk && !C.failed; k++) {
    kg_irstmt **slot = f->body->kind == KG_IRS_SEQ ? &f->body->seq.items[k] : &f->body;
    kg_launch *l = &f->launch[k];
    memset(l, 0, sizeof *l);
    l->ok = 1;
    for (int t = 0; t < KG_THREAD_COUNT; t++) l->ext[t] = l->ext_c[t] = 1, l->dyn_lo[t] = -1;
    C.l = l;
    C.k = k;
    scan_shape(&C, *slot);
    for (int t = 0; t < KG_THREAD_COUNT; t++)
      if (l->ndyn[t] == 1 && kg_ir_eval_sizes(&at_lo, l->dyn[t][0], &l->dyn_lo[t]) != 0) l->dyn_lo[t] = -1;
    if (!l->ok || !kg_launch_within_limits(l)) continue;
    C.nguarded = 0;
    guard_stmt(&C, slot);
  }
  return C.failed ? -1 : 0;
}
