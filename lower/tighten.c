/* Loop-bound tightening for the C target: the guard `v + rest < E` that lowering puts around the store of a
 * non-dividing split becomes the extent min(F, E - rest) of v's loop, so the innermost loops run without a
 * compare per element and can vectorize.
 *
 * A loop L is changed only when its body is a perfect chain: FOR / LET / SEQ whose only non-LET item (the last)
 * is the next level, down to one IF without else around a STORE. Every iteration that the tighter extent skips
 * would then have done nothing (the conjunct is false there and it governs everything inside L), so the change
 * is exact. A conjunct moves to the loop of v when, after the LETs inside that loop are substituted, it reads
 * v + rest < E (coefficient 1 on v) with rest and E over variables bound outside the loop. Everything else (lower
 * bounds of attached regions, non-linear conjuncts, conjuncts over variables of inner loops) stays in the IF.
 * A tighter extent may be negative: the loop then runs no iteration. LETs that only the moved conjuncts used are
 * removed, so the printed code has no unused variables.
 *
 * The minimum is a KG_IRE_SELECT with INT branches built as select(a < b, a, b) with the same a and b nodes, which
 * the C printer shows as kg_min64(a, b).
 *
 * Requires: lowered IR for KG_TARGET_C (variable ids below nvars, each LET before its uses in its SEQ) and the
 * variable ranges lowering recorded (ranges of loop variables over their untightened extents stay sound). CUDA
 * keeps its guards: thread-bound loops cannot change extent per block. */
#include <string.h>
#include "bounds.h"
#include "ir.h"


typedef struct tlet {
  kg_irstmt *let;
  int depth; /* number of chain loops around it */
} tlet;

typedef struct chain {
  kg_irstmt **loops;
  int nloops, caploops;
  tlet *lets;
  int nlets, caplets;
  kg_irstmt **guard_slot; /* where the IF hangs (a loop body or a SEQ item) */
} chain;

typedef struct tctx {
  kg_arena *a;
  const kg_var_ranges *ranges;
  int nvars;
  kg_irexpr **lets;     /* by var id: values of the LETs inside the loop being tried, else NULL */
  unsigned char *inner; /* by var id: bound inside the loop being tried */
  unsigned char *used;  /* by var id: scratch for the LET clean-up */
} tctx;

/* 1 when slot starts a perfect chain (filling c); c->loops gets the FORs outermost first. */
static int collect_chain(tctx *T, chain *c, kg_irstmt **slot) {
  kg_irstmt *s = *slot;
  switch (s->kind) {
    case KG_IRS_FOR:
      KG_PUSH(T->a, c->loops, c->nloops, c->caploops, s);
      return collect_chain(T, c, &s->loop.body);
    case KG_IRS_SEQ:
      if (s->seq.n == 0) return 0;
      for (int i = 0; i + 1 < s->seq.n; i++) {
        if (s->seq.items[i]->kind != KG_IRS_LET) return 0;
        KG_PUSH(T->a, c->lets, c->nlets, c->caplets, ((tlet){s->seq.items[i], c->nloops}));
      }
      return collect_chain(T, c, &s->seq.items[s->seq.n - 1]);
    case KG_IRS_IF:
      if (s->cond.otherwise || s->cond.then->kind != KG_IRS_STORE) return 0;
      c->guard_slot = slot;
      return 1;
    default: return 0;
  }
}

static int all_added(const kg_irexpr *e) {
  if (e->kind == KG_IRE_BINARY && e->bin.op == KG_OP_ADD) return all_added(e->bin.a) && all_added(e->bin.b);
  return !(e->kind == KG_IRE_BINARY && e->bin.op == KG_OP_SUB) && !(e->kind == KG_IRE_UNARY);
}

/* The normal form of E - rest reads "-(x * 8) - y + 33"; when rest is a plain sum, "33 - (x * 8 + y)". */
static kg_irexpr *readable(kg_arena *a, kg_irexpr *bound) {
  kg_irexpr *rest = kg_bounds_simplify(a, kg_ir_unary(a, KG_OP_NEG, bound), NULL, 0);
  int64_t c;
  if (rest->kind == KG_IRE_BINARY && rest->bin.op == KG_OP_SUB && kg_ir_is_const(rest->bin.b, &c) && c > 0 &&
      all_added(rest->bin.a))
    return kg_ir_binary(a, KG_OP_SUB, rest->bin.b, rest->bin.a);
  return bound;
}

/* The bound E - rest when conjunct c reads v + rest < E for the variable v of loop j of the chain, else NULL. */
static kg_irexpr *bound_for(tctx *T, const chain *c, int j, const kg_irexpr *conj) {
  kg_arena *a = T->a;
  if (conj->kind != KG_IRE_BINARY || conj->bin.op != KG_OP_LT || conj->bin.a->ty != KG_TY_INT ||
      conj->bin.b->ty != KG_TY_INT)
    return NULL;
  memset(T->lets, 0, sizeof *T->lets * (size_t)T->nvars);
  memset(T->inner, 0, (size_t)T->nvars);
  for (int k = j; k < c->nloops; k++)
    if (c->loops[k]->loop.var->id < T->nvars) T->inner[c->loops[k]->loop.var->id] = 1;
  for (int k = 0; k < c->nlets; k++) {
    const kg_irstmt *l = c->lets[k].let;
    if (c->lets[k].depth <= j || l->let.var->id >= T->nvars) continue;
    T->inner[l->let.var->id] = 1;
    T->lets[l->let.var->id] = l->let.value;
  }
  kg_irvar *v = c->loops[j]->loop.var;
  /* d = lhs - rhs over outer variables and the loop variables inside; bound = v - d, which is free of v exactly
   * when v's coefficient in d is 1 (simplify merges the terms; v inside a div/mod atom stays) */
  kg_irexpr *d = kg_bounds_simplify(a, kg_ir_binary(a, KG_OP_SUB, conj->bin.a, conj->bin.b), T->lets, T->nvars);
  kg_irexpr *bound = kg_bounds_simplify(a, kg_ir_binary(a, KG_OP_SUB, kg_ir_var(a, v), d), NULL, 0);
  if (kg_ir_uses_marked(bound, T->inner, T->nvars)) return NULL;
  return readable(a, bound);
}

/* min(old, bound), folded when the variable ranges decide it. */
static kg_irexpr *min_extent(tctx *T, kg_irexpr *old, kg_irexpr *bound) {
  int64_t up, lo, hi;
  if (kg_ir_const_upper(old, &up) && kg_bounds_range(bound, T->ranges, &lo, &hi)) {
    if (lo >= up) return old; /* the conjunct always held below the old extent */
    if (kg_ir_is_const(old, NULL) && hi <= up) return bound;
  }
  return kg_ir_min_int(T->a, old, bound);
}

static void flatten_and(kg_arena *a, kg_irexpr *e, kg_irexpr ***xs, int *n, int *cap) {
  if (e->kind == KG_IRE_BINARY && e->bin.op == KG_OP_AND) {
    flatten_and(a, e->bin.a, xs, n, cap);
    flatten_and(a, e->bin.b, xs, n, cap);
    return;
  }
  KG_PUSH(a, *xs, *n, *cap, e);
}

static void mark_stmt_exprs(const kg_irstmt *s, unsigned char *used, int n) {
  if (s->kind == KG_IRS_IF) {
    kg_ir_mark_vars(s->cond.cond, used, n);
    s = s->cond.then;
  }
  if (s->kind == KG_IRS_STORE) {
    kg_ir_mark_vars(s->store.index, used, n);
    kg_ir_mark_vars(s->store.value, used, n);
  }
}

/* Drops the chain's LETs that nothing reads any more (to a fixed point: a LET may read another). */
static void drop_dead_lets(tctx *T, chain *c) {
  if (!c->nlets) return;
  unsigned char *dead = KG_NEW_ARRAY(T->a, unsigned char, c->nlets);
  for (int changed = 1; changed;) {
    changed = 0;
    memset(T->used, 0, (size_t)T->nvars);
    for (int k = 0; k < c->nloops; k++) kg_ir_mark_vars(c->loops[k]->loop.extent, T->used, T->nvars);
    mark_stmt_exprs(*c->guard_slot, T->used, T->nvars);
    for (int k = 0; k < c->nlets; k++)
      if (!dead[k]) kg_ir_mark_vars(c->lets[k].let->let.value, T->used, T->nvars);
    for (int k = 0; k < c->nlets; k++) {
      int id = c->lets[k].let->let.var->id;
      if (!dead[k] && id < T->nvars && !T->used[id]) dead[k] = 1, changed = 1;
    }
  }
  /* the chain's SEQs: walk it again and compact their items */
  kg_irstmt *s = c->loops[0];
  while (s) {
    if (s->kind == KG_IRS_FOR) {
      s = s->loop.body;
    } else if (s->kind == KG_IRS_SEQ) {
      int m = 0;
      for (int i = 0; i < s->seq.n; i++) {
        kg_irstmt *it = s->seq.items[i];
        int drop = 0;
        for (int k = 0; k < c->nlets && it->kind == KG_IRS_LET; k++)
          if (c->lets[k].let == it) drop = dead[k];
        if (!drop) s->seq.items[m++] = it;
      }
      s->seq.n = m;
      s = m ? s->seq.items[m - 1] : NULL;
    } else {
      s = NULL;
    }
  }
}

static void tighten_chain(tctx *T, chain *c) {
  kg_arena *a = T->a;
  kg_irstmt *guard = *c->guard_slot;
  kg_irexpr **conj = NULL;
  int n = 0, cap = 0;
  flatten_and(a, guard->cond.cond, &conj, &n, &cap);
  int kept = 0, moved = 0;
  for (int i = 0; i < n; i++) {
    kg_irexpr *bound = NULL;
    int j;
    /* only the innermost loop whose variable the conjunct reads can qualify; trying outward finds it */
    for (j = c->nloops - 1; j >= 0; j--)
      if ((bound = bound_for(T, c, j, conj[i]))) break;
    if (!bound) {
      conj[kept++] = conj[i];
      continue;
    }
    kg_irstmt *L = c->loops[j];
    L->loop.extent = min_extent(T, L->loop.extent, bound);
    moved++;
  }
  if (!moved) return;
  if (kept == 0) {
    *c->guard_slot = guard->cond.then;
  } else {
    kg_irexpr *g = conj[0];
    for (int i = 1; i < kept; i++) g = kg_ir_binary(a, KG_OP_AND, g, conj[i]);
    guard->cond.cond = g;
  }
  drop_dead_lets(T, c);
}

static void tighten_stmt(tctx *T, kg_irstmt *s) {
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) tighten_stmt(T, s->seq.items[i]);
      break;
    case KG_IRS_FOR: {
      chain c;
      memset(&c, 0, sizeof c);
      kg_irstmt *top = s;
      if (collect_chain(T, &c, &top)) tighten_chain(T, &c);
      else tighten_stmt(T, s->loop.body);
      break;
    }
    case KG_IRS_IF:
      tighten_stmt(T, s->cond.then);
      if (s->cond.otherwise) tighten_stmt(T, s->cond.otherwise);
      break;
    case KG_IRS_ALLOC: tighten_stmt(T, s->alloc.body); break;
    default: break;
  }
}

void kg_lower_tighten(kg_arena *a, kg_irstmt *body, const kg_var_ranges *ranges, int nvars) {
  tctx T;
  T.a = a;
  T.ranges = ranges;
  T.nvars = nvars > 0 ? nvars : 1;
  T.lets = KG_NEW_ARRAY(a, kg_irexpr *, T.nvars);
  T.inner = KG_NEW_ARRAY(a, unsigned char, T.nvars);
  T.used = KG_NEW_ARRAY(a, unsigned char, T.nvars);
  tighten_stmt(&T, body);
}
