/* One reciprocal per loop nest, for the C and CUDA targets.
 *
 * A vectorized loop that divides by a value it does not change (softmax's e[j] / s, a norm's x[j] / sqrt(v + eps))
 * pays a vector division per element: on x86 a vdivps of a 512-bit vector takes as long as 8 to 16 multiplies,
 * enough to make such a row kernel compute-bound. So the outermost loop L that runs a vectorized innermost loop
 * (through loops, sequences and allocations, under no condition) whose stores divide by an F32 divisor d that L
 * does not change (d uses no variable declared in L and loads no buffer that L stores or allocates) becomes
 *   alloc kg_rcpN: f32[1] local
 *     if (extent(L) > 0)                            (left out when the extent is a positive constant)
 *       kg_rcpN[0] = 1.0f / d
 *       if (d == 0 || (-FLT_MAX <= kg_rcpN[0] && kg_rcpN[0] <= FLT_MAX))  L with x / d read as x * kg_rcpN[0]
 *       else                                                              L
 * so softmax divides once per row. Only divisions that no condition inside L guards are rewritten: d is evaluated
 * before L, which must be as safe as evaluating it in L's first iteration (its loads index with L's enclosing
 * variables only, and the loops inside L, split tiles, run at least once). x * (1/d) differs from x / d by at most
 * about one ulp (the reciprocal's rounding, then the product's), which every verification tolerance covers; at
 * d = 0, +-inf and NaN it gives the same infinities and NaNs. A subnormal d whose reciprocal overflows
 * (|d| < 2^-128) would turn finite quotients into infinities: the run-time test keeps the plain division then.
 *
 * On the CUDA target a loop bound to a thread index is the lanes a vectorized loop is on the CPU (an IEEE division is a
 * dozen instructions there too), so an innermost thread-bound loop counts as one, and a float4 store as well; a
 * nest holding a barrier or a cross-thread reduction is never versioned (its two versions would be a branch
 * around a barrier, which only a block-uniform condition makes safe), only the loops inside it are candidates; and
 * stores into registers are not considered (a thread's partial of a cross-thread reduction: its thread loop must
 * stay out of any branch).
 *
 * Requires: lowered IR for KG_TARGET_C after kg_lower_regacc, or for KG_TARGET_CUDA after kg_lower_writer and
 * before kg_lower_launch (variable ids below f->n_vars, buffer ids below
 * f->n_buffers). Guarantees: IR that the verifier accepts; the reciprocal is a LOCAL buffer of one element named
 * kg_rcpN (IR names never start with kg_); one divisor per nest (the first met; divisions by an equal expression
 * share it), the loops inside a rewritten nest not visited again. */
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include "../base/xalloc.h"
#include "bounds.h"
#include "ir.h"

typedef struct qctx {
  int gpu; /* KG_TARGET_CUDA: thread-bound loops are lanes, barriers end the search */
  kg_arena *a;
  kg_lowered *f;
  int nrcp;
  unsigned char *inner;      /* variables declared inside the loop under study */
  const kg_buffer **written; /* buffers it stores or allocates */
  int nwritten, capwritten;
} qctx;

static void note_written(qctx *Q, const kg_buffer *b) {
  if (Q->nwritten == Q->capwritten) {
    Q->capwritten = Q->capwritten ? 2 * Q->capwritten : 8;
    Q->written = kg_xrealloc(Q->written, sizeof *Q->written * (size_t)Q->capwritten);
  }
  Q->written[Q->nwritten++] = b;
}

/* The variables s declares and the buffers it writes, into Q. */
static void scan_body(qctx *Q, const kg_irstmt *s) {
  if (!s) return;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) scan_body(Q, s->seq.items[i]);
      break;
    case KG_IRS_FOR:
      if (s->loop.var->id < Q->f->n_vars) Q->inner[s->loop.var->id] = 1;
      scan_body(Q, s->loop.body);
      break;
    case KG_IRS_IF:
      scan_body(Q, s->cond.then);
      scan_body(Q, s->cond.otherwise);
      break;
    case KG_IRS_STORE: note_written(Q, s->store.buf); break;
    case KG_IRS_LET:
      if (s->let.var->id < Q->f->n_vars) Q->inner[s->let.var->id] = 1;
      break;
    case KG_IRS_ALLOC:
      note_written(Q, s->alloc.buf);
      scan_body(Q, s->alloc.body);
      break;
    case KG_IRS_ALLREDUCE: note_written(Q, s->allreduce.buf); break;
    default: break;
  }
}

/* Is e invariant in the loop under study: no variable declared in it, no load of a buffer it writes? */
static int invariant(const qctx *Q, const kg_irexpr *e) {
  if (kg_ir_uses_marked(e, Q->inner, Q->f->n_vars)) return 0;
  if (e->kind == KG_IRE_THREAD) return 0;
  if (e->kind == KG_IRE_LOAD)
    for (int i = 0; i < Q->nwritten; i++)
      if (Q->written[i] == e->load.buf) return 0;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++)
    if (!invariant(Q, *kids[i])) return 0;
  return 1;
}

/* On CUDA, a guard of L's own iteration space: a condition without loads over variables declared in L (and thread
 * indices), such as the bounds guard of a non-dividing split, which CUDA keeps. Descending into its branch is
 * safe: the divisor uses no variable of L, so evaluating it before L is as safe as L's enclosing code. */
static int inner_guard(const qctx *Q, const kg_irexpr *e) {
  if (!Q->gpu || e->kind == KG_IRE_LOAD) return 0;
  if (e->kind == KG_IRE_VAR) return e->var->id < Q->f->n_vars && Q->inner[e->var->id];
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++)
    if (!inner_guard(Q, *kids[i])) return 0;
  return 1;
}

/* The first F32 division in e whose divisor is invariant (its divisor), NULL when none. */
static const kg_irexpr *find_div(const qctx *Q, const kg_irexpr *e) {
  if (e->kind == KG_IRE_SELECT) return NULL; /* only the branch taken is evaluated */
  if (e->kind == KG_IRE_BINARY && e->bin.op == KG_OP_DIV && e->ty == KG_TY_F32 && invariant(Q, e->bin.b))
    return e->bin.b;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++) {
    const kg_irexpr *d = find_div(Q, *kids[i]);
    if (d) return d;
  }
  return NULL;
}

/* The divisor to hoist: in a store of a vectorized innermost loop that runs whenever s runs (reached through
 * SEQs, loops and allocations, no condition). */
static const kg_irexpr *body_div(const qctx *Q, const kg_irstmt *s, int vec) {
  switch (s->kind) {
    /* on CUDA a store into registers is a thread's partial of a reduction (its thread loop belongs to a
     * cross-thread reduction, which must not end up under a branch), never an output row */
    case KG_IRS_STORE:
      return vec && !(Q->gpu && s->store.buf->scope == KG_SCOPE_LOCAL) ? find_div(Q, s->store.value) : NULL;
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) {
        const kg_irexpr *d = body_div(Q, s->seq.items[i], vec);
        if (d) return d;
      }
      return NULL;
    case KG_IRS_FOR: {
      int lanes = s->loop.kind == KG_LOOP_VECTORIZED ||
                  (Q->gpu && s->loop.kind == KG_LOOP_BOUND && kg_thread_tag_is_thread(s->loop.tag));
      return body_div(Q, s->loop.body, (lanes || vec) && !kg_ir_contains_loop(s->loop.body));
    }
    case KG_IRS_ALLOC: return body_div(Q, s->alloc.body, vec);
    case KG_IRS_IF: return !s->cond.otherwise && inner_guard(Q, s->cond.cond) ? body_div(Q, s->cond.then, vec) : NULL;
    default: return NULL;
  }
}

/* A copy of e with every division by an expression equal to d a product by r[0]. */
static kg_irexpr *rewrite_expr(qctx *Q, const kg_irexpr *e, const kg_irexpr *d, kg_buffer *r) {
  if (e->kind == KG_IRE_SELECT) return (kg_irexpr *)e;
  kg_irexpr *c = KG_NEW(Q->a, kg_irexpr);
  *c = *e;
  if (e->kind == KG_IRE_BINARY && e->bin.op == KG_OP_DIV && e->ty == KG_TY_F32 && kg_bounds_expr_equal(e->bin.b, d)) {
    c->bin.op = KG_OP_MUL;
    c->bin.a = rewrite_expr(Q, e->bin.a, d, r);
    c->bin.b = kg_ir_load(Q->a, r, kg_ir_int(Q->a, 0));
    return c;
  }
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children(c, kids);
  for (int i = 0; i < n; i++) *kids[i] = rewrite_expr(Q, *kids[i], d, r);
  return c;
}

/* A copy of s with the stores that run whenever s runs rewritten (statements under a condition shared). */
static kg_irstmt *rewrite_body(qctx *Q, kg_irstmt *s, const kg_irexpr *d, kg_buffer *r) {
  kg_irstmt *c = NULL;
  switch (s->kind) {
    case KG_IRS_STORE:
      c = kg_ir_store(Q->a, s->store.buf, s->store.index, rewrite_expr(Q, s->store.value, d, r));
      c->store.stream = s->store.stream;
      break;
    case KG_IRS_SEQ:
      c = kg_ir_seq(Q->a);
      for (int i = 0; i < s->seq.n; i++) kg_ir_seq_push(Q->a, c, rewrite_body(Q, s->seq.items[i], d, r));
      break;
    case KG_IRS_FOR:
      c = kg_ir_for(Q->a, s->loop.var, s->loop.extent, s->loop.kind, s->loop.tag, s->loop.loop_name,
                    s->loop.stage_name, rewrite_body(Q, s->loop.body, d, r));
      break;
    case KG_IRS_ALLOC: c = kg_ir_alloc(Q->a, s->alloc.buf, rewrite_body(Q, s->alloc.body, d, r)); break;
    case KG_IRS_IF:
      if (s->cond.otherwise || !inner_guard(Q, s->cond.cond)) return s;
      c = kg_ir_if(Q->a, s->cond.cond, rewrite_body(Q, s->cond.then, d, r), NULL);
      break;
    default: return s;
  }
  c->pos = s->pos;
  return c;
}

static kg_irstmt *recip_loop(qctx *Q, kg_irstmt *L) {
  if (Q->gpu && kg_ir_contains_sync(L)) return NULL;
  memset(Q->inner, 0, (size_t)Q->f->n_vars);
  Q->nwritten = 0;
  scan_body(Q, L);
  const kg_irexpr *d = body_div(Q, L, 0);
  if (!d) return NULL;
  kg_arena *a = Q->a;
  kg_buffer *r = KG_NEW(a, kg_buffer);
  r->name = kg_arena_printf(a, "kg_rcp%d", Q->nrcp++);
  r->id = Q->f->n_buffers++;
  r->scope = KG_SCOPE_LOCAL;
  r->size = 1;
  r->param_index = -1;
  kg_irstmt *fast = rewrite_body(Q, L, d, r);
  kg_irexpr *rv = kg_ir_load(a, r, kg_ir_int(a, 0));
  kg_irexpr *finite = kg_ir_binary(a, KG_OP_AND, kg_ir_binary(a, KG_OP_LE, kg_ir_float(a, -FLT_MAX), rv),
                                   kg_ir_binary(a, KG_OP_LE, rv, kg_ir_float(a, FLT_MAX)));
  kg_irexpr *ok = kg_ir_binary(a, KG_OP_OR, kg_ir_binary(a, KG_OP_EQ, (kg_irexpr *)d, kg_ir_float(a, 0)), finite);
  kg_irstmt *body = kg_ir_seq(a);
  kg_ir_seq_push(a, body, kg_ir_store(a, r, kg_ir_int(a, 0), kg_ir_binary(a, KG_OP_DIV, kg_ir_float(a, 1), (kg_irexpr *)d)));
  kg_ir_seq_push(a, body, kg_ir_if(a, ok, fast, L));
  int64_t ext;
  kg_irstmt *run = kg_ir_is_const(L->loop.extent, &ext) && ext > 0
                       ? body
                       : kg_ir_if(a, kg_ir_binary(a, KG_OP_GT, L->loop.extent, kg_ir_int(a, 0)), body, NULL);
  return kg_ir_alloc(a, r, run);
}

static void recip_stmt(qctx *Q, kg_irstmt **slot) {
  kg_irstmt *s = *slot;
  if (!s) return;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) recip_stmt(Q, &s->seq.items[i]);
      break;
    case KG_IRS_FOR: {
      /* outermost first: the reciprocal is hoisted out of every loop that does not change the divisor */
      kg_irstmt *v = recip_loop(Q, s);
      if (v) *slot = v;
      else recip_stmt(Q, &s->loop.body);
      break;
    }
    case KG_IRS_IF:
      recip_stmt(Q, &s->cond.then);
      recip_stmt(Q, &s->cond.otherwise);
      break;
    case KG_IRS_ALLOC: recip_stmt(Q, &s->alloc.body); break;
    default: break;
  }
}

void kg_lower_recip(kg_arena *a, kg_lowered *f, kg_target_kind target) {
  qctx Q = {.a = a, .f = f, .gpu = target == KG_TARGET_CUDA};
  Q.inner = kg_xrealloc(NULL, (size_t)(f->n_vars > 0 ? f->n_vars : 1));
  recip_stmt(&Q, &f->body);
  free(Q.inner);
  free(Q.written);
}
