/* Index order under unrolled loops, for the C target.
 *
 * Once gcc unrolls a loop, each copy of an access indexed by the unrolled variable u is its own address
 * expression. When u's term sits in the middle of the index (A[(t + u) * 1024 + k], as lowering writes it through
 * the LET of the root axis i = t + u), every copy's loop-invariant part differs (t * 1024 + u * 1024 with u a
 * different constant each time), and gcc keeps one register per copy instead of one base register with a
 * constant displacement: the 8-row register tile of a GEMM then holds 8 row offsets, half of which it spills and
 * reloads from the stack on every step of k (4 loads per 16 FMAs). Written with u's term last
 * (t * 1024 + k + u * 1024), the copies share the base and differ by a displacement only.
 *
 * So every load and store index inside an unrolled loop that depends on an unrolled variable is rewritten as its
 * affine form (kg_bounds_affine, through the LETs in scope that compute indices without loads), its terms ordered
 * by the loop they vary with, outermost first, the terms that vary with an unrolled loop after all others, the
 * constant last. The index's value is the same, so the results are bit-identical. Unrolled loops are those the
 * schedule unrolls and the constant loops of a register accumulator's tile, which gcc unrolls completely.
 *
 * The order is not always enough. When the copies sit around a vectorized loop, gcc's vectorizer gives each copy's
 * access a pointer of its own, computed from the whole index, and keeps all of them live through the loop around
 * (a stride-2 convolution's 7 broadcast input pixels around 16 output channels in lanes: 7 pointers, spilled, the
 * kernel 1.3x slower than with one). So the part of such an index that no unrolled or inner loop changes (the terms
 * whose variables are declared outside the outermost unrolled loop, at least two of them or one that is not a
 * plain variable) is computed once, in a LET `kg_oN` just before that loop, and the index becomes kg_oN plus the
 * rest: every copy then shares one base. Terms that load or divide by a non-constant stay where they are (the
 * conditions inside the loop may be what keeps them valid). The loop's body is copied first, so that statements
 * it shared with another version of its nest (which may not be unrolled, and lacks the LET) keep their own
 * indices; a body that holds statements other than loops, sequences, stores, LETs, IFs, comments and allocations
 * is left as it was.
 *
 * Requires: lowered IR for KG_TARGET_C (variable ids below f->n_vars), after kg_lower_regacc (whose accumulator
 * slots are indexed by the unrolled variables too). Guarantees: IR that the verifier accepts; only index
 * expressions of loads and stores change, and LETs of INT values are added before unrolled loops. Statements
 * shared between versions of a nest are rewritten once per visit, to the same value. */
#include <stdlib.h>
#include <string.h>
#include "../base/xalloc.h"
#include "bounds.h"
#include "ir.h"

typedef struct uctx {
  kg_arena *a;
  int nvars;
  kg_irexpr **lets;        /* by variable id: the value of a LET without loads (substituted), else NULL */
  int *depth;              /* by variable id: the loop depth where it is declared (loops: their own depth) */
  unsigned char *unrolled; /* by variable id: it varies with an unrolled loop's variable */
  int nunrolled;           /* unrolled loops around the statement being visited */
  unsigned char *scratch;  /* by variable id: all clear between uses */
  kg_lowered *f;           /* for new variables' ids */
  int hoist_depth;         /* terms of variables declared at this depth or above are hoisted (-1: none) */
  kg_irstmt *hoisted;      /* the LETs for the outermost unrolled loop being visited (a SEQ), or NULL */
  int nhoisted;            /* LETs made in the function: their names' numbers */
} uctx;

/* The deepest declaration depth of the variables e uses (0 for none: sizes and constants). */
static int max_depth(const uctx *U, const kg_irexpr *e) {
  if (e->kind == KG_IRE_VAR) return e->var->id < U->nvars ? U->depth[e->var->id] : 0;
  int d = 0;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++) {
    int k = max_depth(U, *kids[i]);
    if (k > d) d = k;
  }
  return d;
}

/* The order of a term: after every term that does not vary with an unrolled loop, then by depth. */
static int term_key(const uctx *U, const kg_irexpr *atom) {
  int unrolled = kg_ir_uses_marked(atom, U->unrolled, U->nvars);
  return unrolled * 1000000 + max_depth(U, atom);
}

/* Can a term's atom be computed before the unrolled loop, where the conditions inside it no longer guard it? Not
 * when it loads (an index read from a tensor) or divides by what is not a constant (a dynamic size, 0 where no
 * iteration runs). */
static int safe_early(const kg_irexpr *e) {
  if (e->kind == KG_IRE_LOAD) return 0;
  if (e->kind == KG_IRE_BINARY && (e->bin.op == KG_OP_DIV || e->bin.op == KG_OP_MOD) && e->bin.b->kind != KG_IRE_INT)
    return 0;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++)
    if (!safe_early(*kids[i])) return 0;
  return 1;
}

/* The part of an index that is invariant in the outermost unrolled loop, the n terms of l that early marks, as a
 * LET before that loop (uctx.hoisted); the index becomes its variable plus the other terms, in their order. */
static kg_irexpr *hoist_terms(uctx *U, kg_affine *l, const unsigned char *early, int n) {
  kg_affine_term *t = kg_xrealloc(NULL, sizeof *t * (size_t)l->n);
  int h = 0, r = n;
  for (int i = 0; i < l->n; i++) t[early[i] ? h++ : r++] = l->t[i];
  kg_irvar *v = KG_NEW(U->a, kg_irvar);
  v->name = kg_arena_printf(U->a, "kg_o%d", U->nhoisted++);
  v->id = U->f->n_vars++;
  kg_affine head = {.ok = 1, .c = 0, .t = t, .n = n};
  kg_ir_seq_push(U->a, U->hoisted, kg_ir_let(U->a, v, kg_bounds_affine_ir(U->a, &head)));
  kg_affine rest = {.ok = 1, .c = l->c, .t = t + n, .n = l->n - n};
  kg_irexpr *index = kg_ir_binary(U->a, KG_OP_ADD, kg_ir_var(U->a, v), kg_bounds_affine_ir(U->a, &rest));
  free(t);
  return index;
}

/* index rewritten when it varies with an unrolled loop's variable; else index itself. An index into buf (not a
 * register accumulator) may have its invariant part hoisted. */
static kg_irexpr *reorder_index(uctx *U, kg_irexpr *index, const kg_buffer *buf) {
  if (index->ty != KG_TY_INT || !kg_ir_uses_marked(index, U->unrolled, U->nvars)) return index;
  kg_affine l = kg_bounds_affine(U->a, index, U->lets, U->nvars);
  if (!l.ok || l.n == 0) return index;
  int *key = kg_xrealloc(NULL, sizeof *key * (size_t)l.n);
  for (int i = 0; i < l.n; i++) key[i] = term_key(U, l.t[i].atom);
  /* a stable insertion sort: terms of equal key keep the affine form's order (their order in the index) */
  for (int i = 1; i < l.n; i++)
    for (int j = i; j > 0 && key[j - 1] > key[j]; j--) {
      kg_affine_term t = l.t[j];
      l.t[j] = l.t[j - 1];
      l.t[j - 1] = t;
      int k = key[j];
      key[j] = key[j - 1];
      key[j - 1] = k;
    }
  /* the terms invariant in the outermost unrolled loop that are safe to compute before it; a register
   * accumulator's slots stay constants */
  int n = 0, plain = 1;
  unsigned char *early = kg_xrealloc(NULL, (size_t)l.n);
  for (int i = 0; i < l.n; i++) {
    early[i] = U->hoisted && buf && !buf->reg_acc && key[i] <= U->hoist_depth && safe_early(l.t[i].atom);
    if (early[i]) {
      n++;
      plain = l.t[i].atom->kind == KG_IRE_VAR && l.t[i].coef == 1;
    }
  }
  free(key);
  /* one plain variable gains nothing (and is what a second visit of a hoisted index finds) */
  kg_irexpr *out = n >= 2 || (n == 1 && !plain) ? hoist_terms(U, &l, early, n) : kg_bounds_affine_ir(U->a, &l);
  free(early);
  return out;
}

/* The loads in e, their indices rewritten (in place: the new index has the same value wherever e is). */
static void visit_expr(uctx *U, kg_irexpr *e) {
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children(e, kids);
  for (int i = 0; i < n; i++) visit_expr(U, *kids[i]);
  if (e->kind == KG_IRE_LOAD) e->load.index = reorder_index(U, e->load.index, e->load.buf);
}

/* Is s a store into a register accumulator, or of one's element back, whose slot (a sum over the nest's loop
 * variables themselves, no LETs) uses the variables marked in the uctx? */
static int acc_slot_store(const kg_irstmt *s, const void *ctx) {
  const uctx *U = ctx;
  if (s->kind != KG_IRS_STORE) return 0;
  const kg_irexpr *v = s->store.value;
  if (v->kind == KG_IRE_LOAD && v->load.buf->reg_acc) return kg_ir_uses_marked(v->load.index, U->scratch, U->nvars);
  return s->store.buf->reg_acc && kg_ir_uses_marked(s->store.index, U->scratch, U->nvars);
}

/* Loops the compiler unrolls: those the schedule unrolls, and the constant loops of a register accumulator's
 * tile (regacc.c: the loops its slot numbers), which it must unroll completely to keep the accumulators in
 * registers. */
static int unrolled_loop(uctx *U, const kg_irstmt *s) {
  int64_t ext;
  int id = s->loop.var->id;
  if (s->loop.kind == KG_LOOP_UNROLLED) return 1;
  if (s->loop.kind != KG_LOOP_SERIAL || !kg_ir_is_const(s->loop.extent, &ext) || ext > 64 || id >= U->nvars) return 0;
  U->scratch[id] = 1;
  int r = kg_ir_contains_ctx(s->loop.body, acc_slot_store, U);
  U->scratch[id] = 0;
  return r;
}

/* A copy of e, every node its own. */
static kg_irexpr *copy_expr(kg_arena *a, const kg_irexpr *e) {
  kg_irexpr *c = KG_NEW(a, kg_irexpr);
  *c = *e;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children(c, kids);
  for (int i = 0; i < n; i++) *kids[i] = copy_expr(a, *kids[i]);
  return c;
}

/* Can copy_stmt copy s? */
static int copyable(const kg_irstmt *s) {
  if (!s) return 1;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++)
        if (!copyable(s->seq.items[i])) return 0;
      return 1;
    case KG_IRS_FOR: return copyable(s->loop.body);
    case KG_IRS_IF: return copyable(s->cond.then) && copyable(s->cond.otherwise);
    case KG_IRS_ALLOC: return copyable(s->alloc.body);
    case KG_IRS_STORE:
    case KG_IRS_LET:
    case KG_IRS_COMMENT: return 1;
    default: return 0;
  }
}

/* A copy of s (copyable), its statements and expressions its own; variables and buffers are shared. */
static kg_irstmt *copy_stmt(kg_arena *a, const kg_irstmt *s) {
  if (!s) return NULL;
  if (s->kind == KG_IRS_SEQ) {
    kg_irstmt *c = kg_ir_seq(a);
    c->pos = s->pos;
    for (int i = 0; i < s->seq.n; i++) kg_ir_seq_push(a, c, copy_stmt(a, s->seq.items[i]));
    return c;
  }
  kg_irstmt *c = KG_NEW(a, kg_irstmt);
  *c = *s;
  switch (s->kind) {
    case KG_IRS_FOR:
      c->loop.extent = copy_expr(a, s->loop.extent);
      c->loop.body = copy_stmt(a, s->loop.body);
      break;
    case KG_IRS_IF:
      c->cond.cond = copy_expr(a, s->cond.cond);
      c->cond.then = copy_stmt(a, s->cond.then);
      c->cond.otherwise = copy_stmt(a, s->cond.otherwise);
      break;
    case KG_IRS_ALLOC: c->alloc.body = copy_stmt(a, s->alloc.body); break;
    case KG_IRS_STORE:
      c->store.index = copy_expr(a, s->store.index);
      c->store.value = copy_expr(a, s->store.value);
      break;
    case KG_IRS_LET: c->let.value = copy_expr(a, s->let.value); break;
    default: break;
  }
  return c;
}

static void visit_stmt(uctx *U, kg_irstmt *s, int depth) {
  if (!s) return;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) visit_stmt(U, s->seq.items[i], depth);
      break;
    case KG_IRS_FOR: {
      int id = s->loop.var->id, unrolled = unrolled_loop(U, s);
      if (id < U->nvars) {
        U->depth[id] = depth + 1;
        U->unrolled[id] = (unsigned char)unrolled;
      }
      /* the outermost unrolled loop: its invariant index parts hoisted before it, into a copy of its body */
      int outer = unrolled && !U->hoisted && copyable(s->loop.body);
      if (outer) {
        s->loop.body = copy_stmt(U->a, s->loop.body);
        U->hoisted = kg_ir_seq(U->a);
        U->hoist_depth = depth;
      }
      U->nunrolled += unrolled;
      visit_stmt(U, s->loop.body, depth + 1);
      U->nunrolled -= unrolled;
      if (outer) {
        kg_irstmt *lets = U->hoisted;
        U->hoisted = NULL;
        U->hoist_depth = -1;
        if (lets->seq.n) {
          /* s becomes { LETs; the loop } in place, for every statement that holds it */
          kg_irstmt *loop = KG_NEW(U->a, kg_irstmt);
          *loop = *s;
          kg_ir_seq_push(U->a, lets, loop);
          lets->pos = s->pos;
          *s = *lets;
        }
      }
      break;
    }
    case KG_IRS_LET: {
      int id = s->let.var->id;
      if (id >= U->nvars) break;
      U->depth[id] = depth;
      U->unrolled[id] = (unsigned char)kg_ir_uses_marked(s->let.value, U->unrolled, U->nvars);
      U->lets[id] = s->let.value->ty == KG_TY_INT && !kg_ir_has_load(s->let.value) ? s->let.value : NULL;
      if (U->nunrolled) visit_expr(U, s->let.value);
      break;
    }
    case KG_IRS_STORE:
      if (!U->nunrolled) break;
      s->store.index = reorder_index(U, s->store.index, s->store.buf);
      visit_expr(U, s->store.value);
      break;
    case KG_IRS_IF:
      if (U->nunrolled) visit_expr(U, s->cond.cond);
      visit_stmt(U, s->cond.then, depth);
      visit_stmt(U, s->cond.otherwise, depth);
      break;
    case KG_IRS_ALLOC: visit_stmt(U, s->alloc.body, depth); break;
    default: break;
  }
}

void kg_lower_unroll_index(kg_arena *a, kg_lowered *f) {
  size_t n = (size_t)(f->n_vars > 0 ? f->n_vars : 1);
  uctx U = {.a = a, .nvars = f->n_vars, .f = f, .hoist_depth = -1};
  U.lets = kg_xrealloc(NULL, sizeof *U.lets * n);
  U.depth = kg_xrealloc(NULL, sizeof *U.depth * n);
  U.unrolled = kg_xrealloc(NULL, n);
  U.scratch = kg_xrealloc(NULL, n);
  memset(U.scratch, 0, n);
  memset(U.lets, 0, sizeof *U.lets * n);
  memset(U.depth, 0, sizeof *U.depth * n);
  memset(U.unrolled, 0, n);
  visit_stmt(&U, f->body, 0);
  free(U.lets);
  free(U.depth);
  free(U.unrolled);
  free(U.scratch);
}
