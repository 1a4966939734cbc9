/* Index arithmetic for lowering: linear forms, integer ranges, and region inference for attached stages.
 *
 * Region inference requires: the consumer's loops are built (extents by iter id, loop variables by leaf) and its
 * root domains are known. It is sound rather than tight: whatever it cannot bound becomes the whole dimension,
 * and interval arithmetic over-approximates when a variable occurs twice in an index. */
#include "bounds.h"
#include <assert.h>
#include <string.h>
#include "../base/intmath.h"

/* ---- linear forms ---- */

/* kg_affine under its short local names */
typedef kg_affine_term lterm;
typedef kg_affine lin;

static lin lin_const(int64_t c) { return (lin){1, c, NULL, 0}; }

static lin lin_atom(kg_arena *a, kg_irexpr *e) {
  lin l = lin_const(0);
  l.t = KG_NEW(a, lterm);
  l.t[0] = (lterm){e, 1};
  l.n = 1;
  return l;
}

static int lin_is_const(const lin *l) { return l->ok && l->n == 0; }

int kg_bounds_expr_equal(const kg_irexpr *x, const kg_irexpr *y) {
  if (x == y) return 1;
  if (!x || !y || x->kind != y->kind || x->ty != y->ty) return 0;
  switch (x->kind) {
    case KG_IRE_INT: return x->i == y->i;
    case KG_IRE_FLOAT: return memcmp(&x->f, &y->f, sizeof x->f) == 0;
    case KG_IRE_VAR: return x->var == y->var;
    case KG_IRE_THREAD: return x->tag == y->tag;
    case KG_IRE_LOAD:
      return x->load.buf == y->load.buf && kg_bounds_expr_equal(x->load.index, y->load.index);
    case KG_IRE_BINARY:
      return x->bin.op == y->bin.op && kg_bounds_expr_equal(x->bin.a, y->bin.a) &&
             kg_bounds_expr_equal(x->bin.b, y->bin.b);
    case KG_IRE_UNARY:
    case KG_IRE_CAST: return x->bin.op == y->bin.op && kg_bounds_expr_equal(x->bin.a, y->bin.a);
    case KG_IRE_CALL:
      if (x->call.fn != y->call.fn || x->call.n != y->call.n) return 0;
      for (int i = 0; i < x->call.n; i++)
        if (!kg_bounds_expr_equal(x->call.args[i], y->call.args[i])) return 0;
      return 1;
    case KG_IRE_SELECT:
      return kg_bounds_expr_equal(x->sel.c, y->sel.c) && kg_bounds_expr_equal(x->sel.a, y->sel.a) &&
             kg_bounds_expr_equal(x->sel.b, y->sel.b);
  }
  return 0;
}

/* sx * x + sy * y */
static lin lin_combine(kg_arena *a, const lin *x, int64_t sx, const lin *y, int64_t sy) {
  lin r = lin_const(0);
  if (!x->ok || !y->ok) return (lin){0, 0, NULL, 0};
  int64_t c1, c2;
  if (__builtin_mul_overflow(x->c, sx, &c1) || __builtin_mul_overflow(y->c, sy, &c2) ||
      __builtin_add_overflow(c1, c2, &r.c))
    return (lin){0, 0, NULL, 0};
  r.t = KG_NEW_ARRAY(a, lterm, x->n + y->n + 1);
  for (int side = 0; side < 2; side++) {
    const lin *src = side ? y : x;
    int64_t s = side ? sy : sx;
    for (int i = 0; i < src->n; i++) {
      int64_t c;
      if (__builtin_mul_overflow(src->t[i].coef, s, &c)) return (lin){0, 0, NULL, 0};
      int j = 0;
      while (j < r.n && !kg_bounds_expr_equal(r.t[j].atom, src->t[i].atom)) j++;
      if (j == r.n) r.t[r.n++] = (lterm){src->t[i].atom, c};
      else if (__builtin_add_overflow(r.t[j].coef, c, &r.t[j].coef)) return (lin){0, 0, NULL, 0};
    }
  }
  int k = 0;
  for (int j = 0; j < r.n; j++)
    if (r.t[j].coef != 0) r.t[k++] = r.t[j];
  r.n = k;
  return r;
}

static lin lin_add_const(kg_arena *a, const lin *x, int64_t c) {
  lin y = lin_const(c);
  return lin_combine(a, x, 1, &y, 1);
}

/* 1 when every coefficient and the constant of l are multiples of c: l / c is then exact for every value */
static int lin_divisible(const lin *l, int64_t c) {
  if (!l->ok || l->c % c != 0) return 0;
  for (int i = 0; i < l->n; i++)
    if (l->t[i].coef % c != 0) return 0;
  return 1;
}

static lin lin_divide(kg_arena *a, const lin *l, int64_t c) {
  lin r = lin_const(l->c / c);
  r.t = KG_NEW_ARRAY(a, lterm, l->n + 1);
  for (int i = 0; i < l->n; i++) r.t[r.n++] = (lterm){l->t[i].atom, l->t[i].coef / c};
  return r;
}

static lin lin_from_ir(kg_arena *a, kg_irexpr *e, kg_irexpr *const *lets, int nlets) {
  switch (e->kind) {
    case KG_IRE_INT: return lin_const(e->i);
    case KG_IRE_VAR:
      if (lets && e->var->id < nlets && lets[e->var->id]) return lin_from_ir(a, lets[e->var->id], lets, nlets);
      return lin_atom(a, e);
    case KG_IRE_UNARY:
      if (e->bin.op == KG_OP_NEG) {
        lin x = lin_from_ir(a, e->bin.a, lets, nlets), z = lin_const(0);
        return lin_combine(a, &x, -1, &z, 0);
      }
      break;
    case KG_IRE_BINARY: {
      if (e->ty != KG_TY_INT) break;
      kg_op op = e->bin.op;
      if (op == KG_OP_ADD || op == KG_OP_SUB || op == KG_OP_MUL) {
        lin x = lin_from_ir(a, e->bin.a, lets, nlets), y = lin_from_ir(a, e->bin.b, lets, nlets);
        if (!x.ok || !y.ok) break;
        if (op == KG_OP_ADD) return lin_combine(a, &x, 1, &y, 1);
        if (op == KG_OP_SUB) return lin_combine(a, &x, 1, &y, -1);
        lin z = lin_const(0);
        if (lin_is_const(&y)) return lin_combine(a, &x, y.c, &z, 0);
        if (lin_is_const(&x)) return lin_combine(a, &y, x.c, &z, 0);
        break;
      }
      if (op == KG_OP_DIV || op == KG_OP_MOD) {
        /* an atom, with its operands normalised */
        kg_irexpr *x = kg_bounds_simplify(a, e->bin.a, lets, nlets);
        kg_irexpr *y = kg_bounds_simplify(a, e->bin.b, lets, nlets);
        kg_irexpr *d = kg_ir_binary(a, op, x, y);
        int64_t c;
        if (kg_ir_is_const(d, &c)) return lin_const(c);
        return lin_atom(a, d);
      }
      break;
    }
    default: break;
  }
  return lin_atom(a, e);
}

static kg_irexpr *lin_build(kg_arena *a, const lin *l, int in_order) {
  assert(l->ok);
  kg_irexpr *r = NULL;
  /* positive terms first so that the result reads "x * 4 + y - z + 3", unless the order is the caller's */
  for (int pass = 0; pass < (in_order ? 1 : 2); pass++)
    for (int i = 0; i < l->n; i++) {
      int64_t c = l->t[i].coef;
      if (!in_order && (c > 0) != (pass == 0)) continue;
      /* |c| fits: an INT64_MIN coefficient multiplies as it is */
      int neg = c < 0 && c != INT64_MIN;
      int64_t m = neg ? -c : c;
      kg_irexpr *term = m == 1 ? l->t[i].atom : kg_ir_binary(a, KG_OP_MUL, l->t[i].atom, kg_ir_int(a, m));
      if (!r) r = neg ? kg_ir_unary(a, KG_OP_NEG, term) : term;
      else r = kg_ir_binary(a, neg ? KG_OP_SUB : KG_OP_ADD, r, term);
    }
  if (!r) return kg_ir_int(a, l->c);
  if (l->c > 0) return kg_ir_binary(a, KG_OP_ADD, r, kg_ir_int(a, l->c));
  if (l->c < 0 && l->c != INT64_MIN) {
    kg_irexpr *e = KG_NEW(a, kg_irexpr);
    /* built by hand: kg_ir_binary would turn x - c back into x + (-c) */
    e->kind = KG_IRE_BINARY;
    e->ty = KG_TY_INT;
    e->bin.op = KG_OP_SUB;
    e->bin.a = r;
    e->bin.b = kg_ir_int(a, -l->c);
    return e;
  }
  if (l->c != 0) return kg_ir_binary(a, KG_OP_ADD, r, kg_ir_int(a, l->c));
  return r;
}

static kg_irexpr *lin_to_ir(kg_arena *a, const lin *l) { return lin_build(a, l, 0); }

kg_affine kg_bounds_affine(kg_arena *a, kg_irexpr *e, kg_irexpr *const *lets, int nlets) {
  if (e->ty != KG_TY_INT) return (lin){0, 0, NULL, 0};
  return lin_from_ir(a, e, lets, nlets);
}

kg_irexpr *kg_bounds_simplify(kg_arena *a, kg_irexpr *e, kg_irexpr *const *lets, int nlets) {
  if (e->ty != KG_TY_INT) return e;
  lin l = lin_from_ir(a, e, lets, nlets);
  return l.ok ? lin_to_ir(a, &l) : e;
}

kg_irexpr *kg_bounds_affine_ir(kg_arena *a, const kg_affine *l) { return lin_build(a, l, 1); }

/* ---- integer ranges ---- */


int kg_bounds_range(const kg_irexpr *e, const kg_var_ranges *r, int64_t *lo, int64_t *hi) {
  int64_t al, ah, bl, bh;
  switch (e->kind) {
    case KG_IRE_INT: *lo = *hi = e->i; return 1;
    case KG_IRE_VAR:
      if (e->var->id >= r->cap || !r->known[e->var->id]) return 0;
      *lo = r->lo[e->var->id];
      *hi = r->hi[e->var->id];
      return 1;
    case KG_IRE_UNARY:
      if (e->bin.op != KG_OP_NEG || !kg_bounds_range(e->bin.a, r, &al, &ah)) return 0;
      if (al == INT64_MIN) return 0;
      *lo = -ah;
      *hi = -al;
      return 1;
    case KG_IRE_BINARY:
      if (e->ty != KG_TY_INT) return 0;
      if (!kg_bounds_range(e->bin.a, r, &al, &ah) || !kg_bounds_range(e->bin.b, r, &bl, &bh)) return 0;
      switch (e->bin.op) {
        case KG_OP_ADD:
          return !__builtin_add_overflow(al, bl, lo) && !__builtin_add_overflow(ah, bh, hi);
        case KG_OP_SUB:
          return !__builtin_sub_overflow(al, bh, lo) && !__builtin_sub_overflow(ah, bl, hi);
        case KG_OP_MUL: {
          int64_t p[4];
          if (__builtin_mul_overflow(al, bl, &p[0]) || __builtin_mul_overflow(al, bh, &p[1]) ||
              __builtin_mul_overflow(ah, bl, &p[2]) || __builtin_mul_overflow(ah, bh, &p[3]))
            return 0;
          *lo = *hi = p[0];
          for (int i = 1; i < 4; i++) {
            if (p[i] < *lo) *lo = p[i];
            if (p[i] > *hi) *hi = p[i];
          }
          return 1;
        }
        case KG_OP_DIV:
          if (bl != bh || bl <= 0) return 0;
          *lo = kg_int_floordiv(al, bl);
          *hi = kg_int_floordiv(ah, bl);
          return 1;
        case KG_OP_MOD:
          if (bl != bh || bl <= 0) return 0;
          if (kg_int_floordiv(al, bl) == kg_int_floordiv(ah, bl)) {
            *lo = al - kg_int_floordiv(al, bl) * bl;
            *hi = ah - kg_int_floordiv(ah, bl) * bl;
          } else {
            *lo = 0;
            *hi = bl - 1;
          }
          return 1;
        default: return 0;
      }
    default: return 0;
  }
}

int kg_bounds_provably_true(const kg_irexpr *c, const kg_var_ranges *r) {
  int64_t v;
  if (kg_ir_is_const(c, &v)) return v != 0;
  if (c->kind != KG_IRE_BINARY) return 0;
  if (c->bin.op == KG_OP_AND) return kg_bounds_provably_true(c->bin.a, r) && kg_bounds_provably_true(c->bin.b, r);
  if (c->bin.a->ty != KG_TY_INT || c->bin.b->ty != KG_TY_INT) return 0;
  int64_t al, ah, bl, bh;
  if (!kg_bounds_range(c->bin.a, r, &al, &ah) || !kg_bounds_range(c->bin.b, r, &bl, &bh)) return 0;
  switch (c->bin.op) {
    case KG_OP_LT: return ah < bl;
    case KG_OP_LE: return ah <= bl;
    case KG_OP_GT: return al > bh;
    case KG_OP_GE: return al >= bh;
    default: return 0;
  }
}

/* ---- floor division and modulo by a constant ----
 * floordiv(x, c) and floormod(x, c) where x = c * q + r with r in [0, c) over the variables' ranges are q and r.
 * A read of a stage stored in blocks (split_storage) has this form wherever the reader's loop is split by the
 * block: (j.o * 32 + j.i) / 32 is j.o, its modulo j.i, so the block is read with plain strides (and vectorizes)
 * instead of a division per element. Anything else is left as it is. */
static kg_irexpr *divmod(kg_arena *a, kg_irexpr *e, kg_irexpr *const *lets, int nlets, const kg_var_ranges *r,
                         int *changed) {
  if (e->ty != KG_TY_INT) return e;
  if (e->kind == KG_IRE_UNARY) {
    kg_irexpr *x = divmod(a, e->bin.a, lets, nlets, r, changed);
    return x == e->bin.a ? e : kg_ir_unary(a, e->bin.op, x);
  }
  if (e->kind != KG_IRE_BINARY) return e;
  kg_irexpr *x = divmod(a, e->bin.a, lets, nlets, r, changed), *y = divmod(a, e->bin.b, lets, nlets, r, changed);
  int64_t c;
  if ((e->bin.op == KG_OP_DIV || e->bin.op == KG_OP_MOD) && kg_ir_is_const(y, &c) && c > 0) {
    lin l = lin_from_ir(a, x, lets, nlets);
    if (l.ok) {
      lin q = lin_const(kg_int_floordiv(l.c, c)), rest = lin_const(l.c - kg_int_floordiv(l.c, c) * c);
      q.t = KG_NEW_ARRAY(a, lterm, l.n + 1);
      rest.t = KG_NEW_ARRAY(a, lterm, l.n + 1);
      for (int i = 0; i < l.n; i++)
        if (l.t[i].coef % c == 0) q.t[q.n++] = (lterm){l.t[i].atom, l.t[i].coef / c};
        else rest.t[rest.n++] = l.t[i];
      int64_t lo, hi;
      if (kg_bounds_range(lin_to_ir(a, &rest), r, &lo, &hi) && lo >= 0 && hi < c) {
        *changed = 1;
        return lin_to_ir(a, e->bin.op == KG_OP_DIV ? &q : &rest);
      }
    }
  }
  return x == e->bin.a && y == e->bin.b ? e : kg_ir_binary(a, e->bin.op, x, y);
}

kg_irexpr *kg_bounds_divmod(kg_arena *a, kg_irexpr *e, kg_irexpr *const *lets, int nlets, const kg_var_ranges *r) {
  int changed = 0;
  kg_irexpr *s = divmod(a, e, lets, nlets, r, &changed);
  return changed ? s : e;
}

/* ---- region inference ---- */

/* An interval [min, min + ext) with a symbolic min; ok = 0 when unknown. */
typedef struct ival {
  int ok;
  lin min;
  int64_t ext;
} ival;

static ival ival_bad(void) { return (ival){0, {0, 0, NULL, 0}, 0}; }
static ival ival_const(int64_t lo, int64_t ext) { return (ival){1, lin_const(lo), ext}; }

typedef struct rctx {
  const kg_region_query *q;
  ival *env;      /* by ivar id */
  int nenv;
  int ndim;
  int seen[KG_MAX_DIMS], full[KG_MAX_DIMS];
  lin min[KG_MAX_DIMS];
  int64_t ext[KG_MAX_DIMS];
} rctx;

/* ext of a + b: ext_a + ext_b - 1 */
static int ext_sum(int64_t x, int64_t y, int64_t *r) {
  return !__builtin_add_overflow(x, y, r) && !__builtin_sub_overflow(*r, 1, r);
}

static ival ival_scale(kg_arena *a, ival x, int64_t c) {
  ival r = {1, lin_const(0), 0};
  lin z = lin_const(0);
  int64_t m = c < 0 ? -c : c, span;
  if (c == INT64_MIN || __builtin_mul_overflow(m, x.ext - 1, &span)) return ival_bad();
  if (c >= 0) {
    r.min = lin_combine(a, &x.min, c, &z, 0);
  } else {
    lin top = lin_add_const(a, &x.min, x.ext - 1);
    r.min = lin_combine(a, &top, c, &z, 0);
  }
  r.ext = span + 1;
  r.ok = r.min.ok;
  return r;
}

static int size_const(const rctx *R, const kg_expr *e, int64_t *v) {
  if (e->kind == KG_EXPR_NUM && e->num.is_int) return *v = e->num.i, 1;
  if (e->kind == KG_EXPR_SIZE && !R->q->s->prog->sizes[e->var.size].dynamic)
    return *v = R->q->s->prog->sizes[e->var.size].value, 1;
  return 0;
}

static ival ival_of(rctx *R, const kg_expr *e) {
  kg_arena *a = R->q->a;
  switch (e->kind) {
    case KG_EXPR_NUM:
      if (!e->num.is_int) return ival_bad();
      return ival_const(e->num.i, 1);
    case KG_EXPR_SIZE:
      /* a dynamic size has no value here: an index over it makes the region the whole dimension */
      if (R->q->s->prog->sizes[e->var.size].dynamic) return ival_bad();
      return ival_const(R->q->s->prog->sizes[e->var.size].value, 1);
    case KG_EXPR_IVAR:
      if (e->var.iv->id < 0 || e->var.iv->id >= R->nenv) return ival_bad();
      return R->env[e->var.iv->id];
    case KG_EXPR_UNARY:
      if (e->op.op != KG_OP_NEG) return ival_bad();
      {
        ival x = ival_of(R, e->op.a);
        return x.ok ? ival_scale(a, x, -1) : x;
      }
    case KG_EXPR_BINARY: {
      int64_t c;
      ival x = ival_of(R, e->op.a);
      if (!x.ok) return x;
      switch (e->op.op) {
        case KG_OP_ADD:
        case KG_OP_SUB: {
          ival y = ival_of(R, e->op.b);
          if (!y.ok) return y;
          ival r = {1, lin_const(0), 0};
          if (!ext_sum(x.ext, y.ext, &r.ext)) return ival_bad();
          if (e->op.op == KG_OP_ADD) {
            r.min = lin_combine(a, &x.min, 1, &y.min, 1);
          } else {
            lin ytop = lin_add_const(a, &y.min, y.ext - 1);
            r.min = lin_combine(a, &x.min, 1, &ytop, -1);
          }
          r.ok = r.min.ok;
          return r;
        }
        case KG_OP_MUL: {
          ival y = ival_of(R, e->op.b);
          if (!y.ok) return y;
          if (y.ext == 1 && lin_is_const(&y.min)) return ival_scale(a, x, y.min.c);
          if (x.ext == 1 && lin_is_const(&x.min)) return ival_scale(a, y, x.min.c);
          return ival_bad();
        }
        case KG_OP_DIV:
          if (!size_const(R, e->op.b, &c) || c <= 0) return ival_bad();
          if (lin_is_const(&x.min)) {
            int64_t lo = kg_int_floordiv(x.min.c, c), hi;
            if (__builtin_add_overflow(x.min.c, x.ext - 1, &hi)) return ival_bad();
            return ival_const(lo, kg_int_floordiv(hi, c) - lo + 1);
          } else if (lin_divisible(&x.min, c)) {
            /* a block's first element: [min / c, (min + ext - 1) / c] exactly (a split_storage read) */
            return (ival){1, lin_divide(a, &x.min, c), (x.ext - 1) / c + 1};
          } else {
            kg_irexpr *m = kg_ir_binary(a, KG_OP_DIV, lin_to_ir(a, &x.min), kg_ir_int(a, c));
            return (ival){1, lin_atom(a, m), (x.ext - 1) / c + 2};
          }
        case KG_OP_MOD:
          if (!size_const(R, e->op.b, &c) || c <= 0) return ival_bad();
          if (lin_divisible(&x.min, c) && x.ext <= c) return ival_const(0, x.ext);
          if (lin_is_const(&x.min)) {
            int64_t lo = x.min.c, hi;
            if (!__builtin_add_overflow(lo, x.ext - 1, &hi) && kg_int_floordiv(lo, c) == kg_int_floordiv(hi, c))
              return ival_const(lo - kg_int_floordiv(lo, c) * c, x.ext);
          }
          return ival_const(0, c);
        default: return ival_bad();
      }
    }
    default: return ival_bad();
  }
}

static void region_add(rctx *R, int d, ival v) {
  kg_arena *a = R->q->a;
  if (R->full[d]) return;
  if (!v.ok || v.ext < 1) {
    R->full[d] = 1;
    return;
  }
  if (!R->seen[d]) {
    R->seen[d] = 1;
    R->min[d] = v.min;
    R->ext[d] = v.ext;
    return;
  }
  lin diff = lin_combine(a, &v.min, 1, &R->min[d], -1);
  if (!lin_is_const(&diff)) {
    R->full[d] = 1;
    return;
  }
  /* both relative to the current min: [0, ext) and [diff, diff + v.ext) */
  int64_t lo = diff.c < 0 ? diff.c : 0, hi0 = R->ext[d], hi1, hi;
  if (__builtin_add_overflow(diff.c, v.ext, &hi1)) {
    R->full[d] = 1;
    return;
  }
  hi = hi0 > hi1 ? hi0 : hi1;
  if (diff.c < 0) R->min[d] = v.min;
  if (__builtin_sub_overflow(hi, lo, &R->ext[d])) R->full[d] = 1;
}

static const kg_sstage *stage_of(const kg_region_query *q, const kg_tensor *t) {
  if (t->id < 0 || t->id >= q->s->n_tensors) return NULL;
  return q->stage_of_tensor[t->id];
}

/* Is stage t computed inside the consumer at the attach loop or deeper (another consumer of the producer that
 * runs within each iteration of the attach loop)? */
static int nested(const kg_region_query *q, const kg_sstage *t) {
  const kg_sstage *C = q->consumer;
  return t != C && t->attach == KG_ATTACH_AT && q->attach_leaf >= 0 && q->attach_leaf < C->nleaves &&
         kg_sstage_nested_in(t, C, C->leaves[q->attach_leaf]);
}

/* Walks e recording every read of the producer; reads of inlined stages are followed with their axes bound to
 * the intervals of the read's indices. */
static void collect_reads(rctx *R, const kg_expr *e) {
  if (!e) return;
  switch (e->kind) {
    case KG_EXPR_READ: {
      const kg_sstage *t = stage_of(R->q, e->read.tensor);
      if (t == R->q->producer) {
        for (int d = 0; d < e->read.n && d < R->ndim; d++) region_add(R, d, ival_of(R, e->read.idx[d]));
      } else if (t && (t->attach == KG_ATTACH_INLINE || nested(R->q, t))) {
        /* an inlined stage, or one computed inside the consumer at the attach loop or deeper, whose reads of the
         * producer happen within the same iteration: its spatial axes range over what this read covers, its
         * reduction axes over their whole domain */
        ival saved[KG_MAX_DIMS + KG_MAX_DIMS], vals[KG_MAX_DIMS + KG_MAX_DIMS];
        int nv = t->nax + t->nrax < 2 * KG_MAX_DIMS ? t->nax + t->nrax : 2 * KG_MAX_DIMS;
        for (int d = 0; d < nv; d++) {
          const kg_ivar *iv = kg_sstage_axis(t, d);
          if (d < t->nax) vals[d] = d < e->read.n ? ival_of(R, e->read.idx[d]) : ival_bad();
          else vals[d] = iv->dyn ? ival_bad() : ival_const(iv->lo, iv->extent);
          if (iv->id >= 0 && iv->id < R->nenv) saved[d] = R->env[iv->id];
        }
        for (int d = 0; d < nv; d++) {
          const kg_ivar *iv = kg_sstage_axis(t, d);
          if (iv->id >= 0 && iv->id < R->nenv) R->env[iv->id] = vals[d];
        }
        collect_reads(R, t->body);
        for (int d = 0; d < nv; d++) {
          const kg_ivar *iv = kg_sstage_axis(t, d);
          if (iv->id >= 0 && iv->id < R->nenv) R->env[iv->id] = saved[d];
        }
      }
      break;
    }
    default: break;
  }
  for (int i = 0; i < kg_expr_nchildren(e); i++) collect_reads(R, *kg_expr_child((kg_expr *)e, i));
}

/* Does e read the producer, directly or through inlined stages? */
static int reads_producer(const kg_region_query *q, const kg_expr *e, int depth) {
  if (!e || depth > 64) return e != NULL;
  if (e->kind == KG_EXPR_READ) {
    const kg_sstage *t = stage_of(q, e->read.tensor);
    if (t == q->producer) return 1;
    if (t && t->attach == KG_ATTACH_INLINE && reads_producer(q, t->body, depth + 1)) return 1;
  }
  for (int i = 0; i < kg_expr_nchildren(e); i++)
    if (reads_producer(q, *kg_expr_child((kg_expr *)e, i), depth + 1)) return 1;
  return 0;
}

static int is_relaxed(const kg_region_query *q, const kg_irvar *v) {
  return q->relax && v && v->id < q->relax->cap && q->relax->known[v->id];
}

/* l with the terms over relaxed variables replaced by their ranges: returns the interval it spans (ext 1 when
 * nothing is relaxed); ok = 0 when a term mixes relaxed and other variables in a way it cannot bound. */
static ival relax_lin(const kg_region_query *q, const lin *l) {
  kg_arena *a = q->a;
  if (!l->ok) return ival_bad();
  if (!q->relax) return (ival){1, *l, 1};
  ival r = {1, lin_const(l->c), 1};
  r.min.t = KG_NEW_ARRAY(a, lterm, l->n + 1);
  for (int i = 0; i < l->n; i++) {
    const lterm *t = &l->t[i];
    if (!kg_ir_uses_marked(t->atom, q->relax->known, q->relax->cap)) {
      r.min.t[r.min.n++] = *t;
      continue;
    }
    int64_t lo, hi, plo, phi, span;
    /* only relaxed variables inside: their ranges bound it; any other variable is unknown to relax */
    if (!kg_bounds_range(t->atom, q->relax, &lo, &hi)) return ival_bad();
    if (__builtin_mul_overflow(lo, t->coef, &plo) || __builtin_mul_overflow(hi, t->coef, &phi)) return ival_bad();
    if (plo > phi) {
      int64_t x = plo;
      plo = phi;
      phi = x;
    }
    if (__builtin_add_overflow(r.min.c, plo, &r.min.c) || __builtin_sub_overflow(phi, plo, &span) ||
        __builtin_add_overflow(r.ext, span, &r.ext))
      return ival_bad();
  }
  return r;
}

/* Range of an iter's relative value over one iteration of the attach loop, passed up from the leaves. */
static ival iter_range(const kg_region_query *q, const kg_iter *it, ival *memo, unsigned char *done) {
  kg_arena *a = q->a;
  const kg_sstage *C = q->consumer;
  if (done[it->id]) return memo[it->id];
  ival r;
  int64_t E = q->ext[it->id];
  if (it->split_outer) {
    ival o = iter_range(q, it->split_outer, memo, done), in = iter_range(q, it->split_inner, memo, done);
    int64_t F = it->split_inner->factor ? it->split_inner->factor : q->ext[it->split_inner->id], span;
    r = ival_bad();
    if (o.ok && in.ok && !__builtin_mul_overflow(o.ext - 1, F, &span) &&
        !__builtin_add_overflow(span, in.ext, &r.ext)) {
      r.min = lin_combine(a, &o.min, F, &in.min, 1);
      r.ok = r.min.ok;
    }
  } else if (it->fused_into) {
    const kg_iter *f = it->fused_into;
    ival fr = iter_range(q, f, memo, done);
    int64_t inner_ext = q->ext[f->fuse_inner->id];
    kg_irexpr *inner_sym = q->sext ? q->sext[f->fuse_inner->id] : NULL;
    if (fr.ok && fr.ext == 1) {
      kg_irexpr *v = lin_to_ir(a, &fr.min);
      kg_irexpr *x = kg_ir_binary(a, it == f->fuse_outer ? KG_OP_DIV : KG_OP_MOD, v,
                                  inner_sym ? inner_sym : kg_ir_int(a, inner_ext));
      int64_t c;
      r = (ival){1, kg_ir_is_const(x, &c) ? lin_const(c) : lin_atom(a, x), 1};
    } else {
      r = ival_const(0, E);
    }
  } else {
    int li = kg_sstage_leaf_index(C, it);
    if (li >= 0 && li <= q->attach_leaf && !is_relaxed(q, q->leafvar[li]))
      r = (ival){1, lin_atom(a, kg_ir_var(a, q->leafvar[li])), 1};
    else
      r = ival_const(0, E);
  }
  if (!r.ok) r = ival_const(0, E);
  /* within the iter's own domain when that is known statically */
  if (lin_is_const(&r.min)) {
    int64_t lo = r.min.c < 0 ? 0 : r.min.c, hi = r.min.c + r.ext;
    if (hi > E) hi = E;
    if (hi > lo) r = ival_const(lo, hi - lo);
  }
  if (r.ext > E && E > 0) r = ival_const(0, E);
  done[it->id] = 1;
  memo[it->id] = r;
  return r;
}

void kg_bounds_infer_region(const kg_region_query *q, kg_irexpr **min, int64_t *ext_out) {
  kg_arena *a = q->a;
  const kg_sstage *C = q->consumer, *P = q->producer;
  const kg_tensor *t = P->out;
  rctx R;
  memset(&R, 0, sizeof R);
  R.q = q;
  R.ndim = t->ndim;
  R.nenv = q->s->n_ivars;
  R.env = KG_NEW_ARRAY(a, ival, R.nenv > 0 ? R.nenv : 1);

  /* Every other consumer (than C) reading P, unless it is computed inside C within the attach loop (its reads are
   * then followed from C's), means the region must be the whole tensor. */
  int others = 0;
  for (int i = 0; i < q->s->nstages; i++) {
    const kg_sstage *st = q->s->stages[i];
    if (st != C && st != P && st->attach != KG_ATTACH_INLINE && !nested(q, st) && reads_producer(q, st->body, 0))
      others = 1;
  }
  if (!others) {
    ival *memo = KG_NEW_ARRAY(a, ival, C->nall > 0 ? C->nall : 1);
    unsigned char *done = KG_NEW_ARRAY(a, unsigned char, C->nall > 0 ? C->nall : 1);
    for (int r = 0; r < C->nax + C->nrax; r++) {
      const kg_ivar *iv = kg_sstage_axis(C, r);
      ival rel = iter_range(q, C->roots[r], memo, done);
      lin dm0 = lin_from_ir(a, q->dom_min[r], NULL, 0);
      ival dm = relax_lin(q, &dm0), abs = ival_bad();
      if (dm.ok && ext_sum(dm.ext, rel.ext, &abs.ext)) {
        abs.min = lin_combine(a, &dm.min, 1, &rel.min, 1);
        abs.ok = abs.min.ok;
      }
      if (iv->id >= 0 && iv->id < R.nenv) R.env[iv->id] = abs;
    }
    collect_reads(&R, C->body);
  }
  for (int d = 0; d < t->ndim; d++) {
    int64_t shape = t->shape[d];
    if (t->dyn[d]) {
      /* A dimension that follows a dynamic size: q->ext holds extents at the size's hi, so the region is what
       * one iteration of the attach loop touches for any value; if that is the whole dimension, the region's size
       * would follow the size, which a region buffer cannot do. Points past the run-time size are guarded by
       * lowering, so nothing is clipped to the bound value here. */
      shape = q->s->prog->sizes[t->dyn[d] - 1].hi;
      if (others || R.full[d] || !R.seen[d] || R.ext[d] >= shape) {
        if (q->symbolic) *q->symbolic = 1;
        min[d] = kg_ir_int(a, 0);
        ext_out[d] = shape;
        continue;
      }
      if (lin_is_const(&R.min[d])) {
        int64_t lo = R.min[d].c < 0 ? 0 : R.min[d].c;
        min[d] = kg_ir_int(a, lo);
        ext_out[d] = R.ext[d] - (lo - R.min[d].c);
        if (ext_out[d] < 1) ext_out[d] = 1;
      } else {
        min[d] = lin_to_ir(a, &R.min[d]);
        ext_out[d] = R.ext[d];
      }
      continue;
    }
    if (others || R.full[d] || !R.seen[d] || R.ext[d] >= shape) {
      min[d] = kg_ir_int(a, 0);
      ext_out[d] = shape;
      continue;
    }
    if (lin_is_const(&R.min[d])) {
      int64_t lo = R.min[d].c, hi;
      if (__builtin_add_overflow(lo, R.ext[d], &hi)) hi = shape;
      if (lo < 0) lo = 0;
      if (hi > shape) hi = shape;
      if (hi <= lo) hi = lo + 1 <= shape ? lo + 1 : shape, lo = hi - 1;
      min[d] = kg_ir_int(a, lo);
      ext_out[d] = hi - lo;
    } else {
      min[d] = lin_to_ir(a, &R.min[d]);
      ext_out[d] = R.ext[d];
    }
  }
}
