/* Single writers for the CUDA target.
 *
 * Every thread of a kernel runs every statement outside the loops bound to its indices, so a store to shared or
 * global memory whose index no enclosing loop bound to a launched tag uses would be made by every thread along
 * that tag: the same element written many times over (a race, and the traffic of every thread). The store is made
 * by the thread whose index is 0 along each such tag instead:
 *   buf[idx] = v   becomes   if (blockIdx.x == 0 && threadIdx.y == 0) buf[idx] = v
 * A tag counts as launched when some loop of the kernel is bound to it with an extent above 1 (an extent that
 * follows dynamic sizes counts: the guard is then true whenever the grid has one block along it). Shared memory is
 * per block, so block tags never guard a shared store; local buffers belong to their thread.
 *
 * Requires: lowered IR for KG_TARGET_CUDA (one root item per kernel, variable ids below f->n_vars). Guarantees:
 * each such store wrapped in an IF without else whose condition is a conjunction of KG_IRE_THREAD == 0 over the
 * tags in blockIdx.x ... threadIdx.z order (the CUDA printer prints it on the store's line, and inside a vectorized
 * loop around the vector store). Dependence on a loop variable is seen through the LETs in scope, to a depth of
 * 64 (deeper counts as dependent, leaving the store unguarded as the printer used to). */
#include <string.h>
#include "ir.h"

#define WRITER_MAX_BOUND 64

typedef struct wctx {
  kg_arena *a;
  int nvars;
  kg_irexpr **lets; /* by var id: the LETs met so far (ids are unique, so stale entries are never consulted) */
  int launched[KG_THREAD_COUNT];
  const kg_irstmt *bound[WRITER_MAX_BOUND]; /* enclosing loops bound to a block or thread tag */
  int nbound;
} wctx;

static void scan_launch(wctx *W, const kg_irstmt *s) {
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) scan_launch(W, s->seq.items[i]);
      break;
    case KG_IRS_FOR: {
      int64_t ext;
      kg_thread_tag t = s->loop.tag;
      if ((kg_thread_tag_is_thread(t) || kg_thread_tag_is_block(t)) &&
          (!kg_ir_is_const(s->loop.extent, &ext) || ext > 1))
        W->launched[t] = 1;
      scan_launch(W, s->loop.body);
      break;
    }
    case KG_IRS_IF:
      scan_launch(W, s->cond.then);
      if (s->cond.otherwise) scan_launch(W, s->cond.otherwise);
      break;
    case KG_IRS_ALLOC: scan_launch(W, s->alloc.body); break;
    default: break;
  }
}

static int uses_var(const wctx *W, const kg_irexpr *e, const kg_irvar *v, int depth) {
  if (depth > 64) return 1; /* conservative */
  if (e->kind == KG_IRE_VAR) {
    if (e->var == v) return 1;
    if (e->var->id < W->nvars && W->lets[e->var->id]) return uses_var(W, W->lets[e->var->id], v, depth + 1);
    return 0;
  }
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++)
    if (uses_var(W, *kids[i], v, depth + 1)) return 1;
  return 0;
}

/* The single-writer condition of store s, or NULL when every thread along every launched tag writes its own
 * element. */
static kg_irexpr *writer_cond(wctx *W, const kg_irstmt *s) {
  const kg_buffer *buf = s->store.buf;
  if (buf->scope == KG_SCOPE_LOCAL) return NULL;
  kg_irexpr *cond = NULL;
  for (int t = KG_THREAD_BLOCK_X; t <= KG_THREAD_THREAD_Z; t++) {
    if (!W->launched[t]) continue;
    if (kg_thread_tag_is_block((kg_thread_tag)t) && buf->scope == KG_SCOPE_SHARED) continue;
    int distinguished = 0;
    for (int i = 0; i < W->nbound && !distinguished; i++)
      if (W->bound[i]->loop.tag == (kg_thread_tag)t && uses_var(W, s->store.index, W->bound[i]->loop.var, 0))
        distinguished = 1;
    if (distinguished) continue;
    kg_irexpr *c = kg_ir_binary(W->a, KG_OP_EQ, kg_ir_thread(W->a, (kg_thread_tag)t), kg_ir_int(W->a, 0));
    cond = cond ? kg_ir_binary(W->a, KG_OP_AND, cond, c) : c;
  }
  return cond;
}

static void writer_stmt(wctx *W, kg_irstmt **slot) {
  kg_irstmt *s = *slot;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) writer_stmt(W, &s->seq.items[i]);
      break;
    case KG_IRS_FOR: {
      kg_thread_tag t = s->loop.tag;
      int push = (kg_thread_tag_is_thread(t) || kg_thread_tag_is_block(t)) && W->nbound < WRITER_MAX_BOUND;
      if (push) W->bound[W->nbound++] = s;
      writer_stmt(W, &s->loop.body);
      if (push) W->nbound--;
      break;
    }
    case KG_IRS_IF:
      writer_stmt(W, &s->cond.then);
      if (s->cond.otherwise) writer_stmt(W, &s->cond.otherwise);
      break;
    case KG_IRS_ALLOC: writer_stmt(W, &s->alloc.body); break;
    case KG_IRS_LET:
      if (s->let.var->id < W->nvars) W->lets[s->let.var->id] = s->let.value;
      break;
    case KG_IRS_STORE: {
      kg_irexpr *c = writer_cond(W, s);
      if (c) *slot = kg_ir_if(W->a, c, s, NULL);
      break;
    }
    default: break;
  }
}

void kg_lower_writer(kg_arena *a, kg_lowered *f) {
  wctx W;
  memset(&W, 0, sizeof W);
  W.a = a;
  W.nvars = f->n_vars;
  W.lets = KG_NEW_ARRAY(a, kg_irexpr *, W.nvars > 0 ? W.nvars : 1);
  for (int k = 0; k < f->body->seq.n; k++) {
    memset(W.launched, 0, sizeof W.launched);
    scan_launch(&W, f->body->seq.items[k]);
    W.nbound = 0;
    writer_stmt(&W, &f->body->seq.items[k]);
  }
}
