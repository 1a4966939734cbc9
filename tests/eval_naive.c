/* A second, deliberately naive reference evaluator, kept for tests only: the tree-walking interpreter that
 * te/eval.c started as, before it compiled statements, memoized nested reductions and blocked rows. It is
 * slow and obviously right, and tests/test_eval_naive.c holds te/eval.c to its results bit for bit, so
 * the oracle's optimisations can never drift from the language's meaning.
 *
 * (Its original description follows.)
 * The reference evaluator: the oracle every generated kernel is compared with.
 *
 * It interprets the checked AST (p->def->stmts) element by element and on purpose shares nothing with stages,
 * scheduling, lowering or printing, so a bug there cannot hide by being repeated here. Values are doubles
 * throughout (inputs are widened from f32, intermediates stay double), integer-typed nodes use int64 with floor
 * division and floor modulo, and every reduction is evaluated where it appears (a nested reduction is recomputed
 * for each element that uses it: slow but obviously right).
 *
 * Requires: a program accepted by kg_check_def (names resolved, types set, ivar ranges and shapes bound, every
 * read proved in bounds). Returns 0, or -1 if a read nevertheless fell out of bounds (that read yields NaN). */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../te/te.h"
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct eval_buf {
  const float *in; /* inputs */
  double *val;     /* outputs and intermediates */
  int64_t stride[KG_MAX_DIMS];
} eval_buf;

typedef struct eval_ctx {
  const kg_program *p;
  eval_buf *buf; /* by tensor id */
  int nbuf;
  int64_t *iv; /* current value of every ivar, by id */
  int oob;     /* a read fell outside its tensor (see read_offset) */
} eval_ctx;

static double eval_f(eval_ctx *c, const kg_expr *e);
static int64_t eval_i(eval_ctx *c, const kg_expr *e);
static int eval_b(eval_ctx *c, const kg_expr *e);

/* Integer arithmetic wraps instead of overflowing (no undefined behaviour on any checked program); division
 * and modulo round toward minus infinity, as the language defines them for index expressions. */
static int64_t int_wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t int_wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t int_wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

static int64_t int_floor_div(int64_t a, int64_t b) {
  if (b == 0 || (b == -1 && a == INT64_MIN)) return 0; /* the checker rules these out for indices */
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}

static int64_t int_floor_mod(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

/* Flat offset of a read, or -1 when an index is out of range. The checker proves every read in bounds, so -1
 * means the checker and this evaluator disagree about the language (a bug, not a user error); rather than read
 * wild memory or abort, the read yields NaN and kg_eval_reference reports -1. */
static int64_t read_offset(eval_ctx *c, const kg_expr *e, const kg_tensor *t, const eval_buf *b) {
  int64_t off = 0;
  for (int d = 0; d < e->read.n; d++) {
    const kg_expr *ix = e->read.idx[d];
    int64_t x = ix->kind == KG_EXPR_IVAR ? c->iv[ix->var.iv->id] : eval_i(c, ix); /* the common case, inline */
    if (x < 0 || x >= t->shape[d]) {
      c->oob = 1;
      return -1;
    }
    off += x * b->stride[d];
  }
  return off;
}

static double eval_read(eval_ctx *c, const kg_expr *e) {
  const kg_tensor *t = e->read.tensor;
  assert(t && t->id >= 0 && t->id < c->nbuf && e->read.n == t->ndim);
  const eval_buf *b = &c->buf[t->id];
  int64_t off = read_offset(c, e, t, b);
  if (off < 0) return NAN;
  if (b->in) return (double)b->in[off];
  assert(b->val && "read of a tensor with no buffer (not an input, output or defined intermediate)");
  return b->val[off];
}

/* max and min: NaN if either operand is, -0 below +0 (docs/language.md) */
static double naive_max(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}

static double naive_min(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}

static double reduce_combine(kg_reducer r, double acc, double v) {
  switch (r) {
  case KG_RED_SUM: return acc + v;
  case KG_RED_PROD: return acc * v;
  case KG_RED_MAX: return naive_max(acc, v);
  case KG_RED_MIN: return naive_min(acc, v);
  default: assert(0 && "bad reducer"); return acc;
  }
}

static double eval_reduce(eval_ctx *c, const kg_expr *e) {
  kg_reducer r = e->reduce.red;
  double acc = kg_reducer_identity(r);
  int n = e->reduce.nrv;
  kg_ivar *const *rv = e->reduce.rv;
  for (int k = 0; k < n; k++) {
    if (rv[k]->extent <= 0) return acc;
    c->iv[rv[k]->id] = rv[k]->lo;
  }
  for (;;) {
    acc = reduce_combine(r, acc, eval_f(c, e->reduce.body));
    /* odometer over the reduction variables, last one fastest */
    int k = n - 1;
    for (; k >= 0; k--) {
      kg_ivar *v = rv[k];
      if (++c->iv[v->id] < v->lo + v->extent) break;
      c->iv[v->id] = v->lo;
    }
    if (k < 0) break;
  }
  return acc;
}

static double eval_call(eval_ctx *c, const kg_expr *e) {
  kg_expr *const *a = e->call.args;
  if (e->call.fn == KG_FN_SELECT) return eval_b(c, a[0]) ? eval_f(c, a[1]) : eval_f(c, a[2]);
  double x = eval_f(c, a[0]);
  switch (e->call.fn) {
  case KG_FN_EXP: return exp(x);
  case KG_FN_LOG: return log(x);
  case KG_FN_SQRT: return sqrt(x);
  case KG_FN_RSQRT: return 1.0 / sqrt(x);
  case KG_FN_TANH: return tanh(x);
  case KG_FN_ERF: return erf(x);
  case KG_FN_ABS: return fabs(x);
  case KG_FN_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case KG_FN_POW: return pow(x, eval_f(c, a[1]));
  case KG_FN_MAX: return naive_max(x, eval_f(c, a[1]));
  case KG_FN_MIN: return naive_min(x, eval_f(c, a[1]));
  default: assert(0 && "bad function"); return NAN;
  }
}

/* A node evaluated in double whatever its type says. */
static double eval_value(eval_ctx *c, const kg_expr *e) {
  switch (e->kind) {
  case KG_EXPR_NUM: return e->num.is_int ? (double)e->num.i : e->num.f;
  case KG_EXPR_IVAR: return (double)c->iv[e->var.iv->id];
  case KG_EXPR_SIZE: return (double)c->p->sizes[e->var.size].value;
  case KG_EXPR_READ: return eval_read(c, e);
  case KG_EXPR_UNARY:
    if (e->op.op == KG_OP_NOT) return eval_b(c, e->op.a) ? 0.0 : 1.0;
    return -eval_f(c, e->op.a);
  case KG_EXPR_BINARY: {
    double a = eval_f(c, e->op.a), b = eval_f(c, e->op.b);
    switch (e->op.op) {
    case KG_OP_ADD: return a + b;
    case KG_OP_SUB: return a - b;
    case KG_OP_MUL: return a * b;
    case KG_OP_DIV: return a / b;
    case KG_OP_MOD: return fmod(a, b);
    default: assert(0 && "comparison typed as f32"); return NAN;
    }
  }
  case KG_EXPR_CALL: return eval_call(c, e);
  case KG_EXPR_REDUCE: return eval_reduce(c, e);
  case KG_EXPR_NAME: break;
  }
  assert(0 && "unresolved name in a checked program");
  return NAN;
}

/* A value: F32 nodes in double; an INT node used as a value is computed in int64 and converted; a BOOL one
 * is 1 or 0. */
static double eval_f(eval_ctx *c, const kg_expr *e) {
  if (e->ty == KG_TY_INT) return (double)eval_i(c, e);
  if (e->ty == KG_TY_BOOL) return eval_b(c, e) ? 1.0 : 0.0;
  return eval_value(c, e);
}

/* An INT node: index arithmetic in int64. */
static int64_t eval_i(eval_ctx *c, const kg_expr *e) {
  switch (e->kind) {
  case KG_EXPR_NUM: return e->num.is_int ? e->num.i : (int64_t)e->num.f;
  case KG_EXPR_IVAR: return c->iv[e->var.iv->id];
  case KG_EXPR_SIZE: return c->p->sizes[e->var.size].value;
  case KG_EXPR_UNARY:
    if (e->op.op == KG_OP_NOT) return !eval_b(c, e->op.a);
    return int_wrap_sub(0, eval_i(c, e->op.a));
  case KG_EXPR_BINARY: {
    int64_t a = eval_i(c, e->op.a), b = eval_i(c, e->op.b);
    switch (e->op.op) {
    case KG_OP_ADD: return int_wrap_add(a, b);
    case KG_OP_SUB: return int_wrap_sub(a, b);
    case KG_OP_MUL: return int_wrap_mul(a, b);
    case KG_OP_DIV: return int_floor_div(a, b);
    case KG_OP_MOD: return int_floor_mod(a, b);
    default: assert(0 && "comparison typed as int"); return 0;
    }
  }
  case KG_EXPR_CALL:
    if (e->call.fn == KG_FN_SELECT)
      return eval_b(c, e->call.args[0]) ? eval_i(c, e->call.args[1]) : eval_i(c, e->call.args[2]);
    if (e->call.fn == KG_FN_MAX || e->call.fn == KG_FN_MIN) {
      int64_t a = eval_i(c, e->call.args[0]), b = eval_i(c, e->call.args[1]);
      return (e->call.fn == KG_FN_MAX) == (a > b) ? a : b;
    }
    if (e->call.fn == KG_FN_ABS) {
      int64_t a = eval_i(c, e->call.args[0]);
      return a < 0 ? int_wrap_sub(0, a) : a;
    }
    break;
  default: break;
  }
  /* Anything else typed INT (a checker choice we did not anticipate): compute in double, round down. */
  double v = eval_value(c, e);
  return isfinite(v) && fabs(v) < 9.2e18 ? (int64_t)floor(v) : 0;
}

static int is_int_typed(const kg_expr *e) { return e->ty == KG_TY_INT; }

/* A condition. Comparisons of two INT operands compare exactly in int64, others in double. */
static int eval_b(eval_ctx *c, const kg_expr *e) {
  if (e->kind == KG_EXPR_UNARY && e->op.op == KG_OP_NOT) return !eval_b(c, e->op.a);
  if (e->kind == KG_EXPR_BINARY) {
    kg_op op = e->op.op;
    if (op == KG_OP_AND) return eval_b(c, e->op.a) && eval_b(c, e->op.b);
    if (op == KG_OP_OR) return eval_b(c, e->op.a) || eval_b(c, e->op.b);
    if (op >= KG_OP_LT && op <= KG_OP_NE) {
      if (is_int_typed(e->op.a) && is_int_typed(e->op.b)) {
        int64_t a = eval_i(c, e->op.a), b = eval_i(c, e->op.b);
        switch (op) {
        case KG_OP_LT: return a < b;
        case KG_OP_LE: return a <= b;
        case KG_OP_GT: return a > b;
        case KG_OP_GE: return a >= b;
        case KG_OP_EQ: return a == b;
        default: return a != b;
        }
      }
      double a = eval_f(c, e->op.a), b = eval_f(c, e->op.b);
      switch (op) {
      case KG_OP_LT: return a < b;
      case KG_OP_LE: return a <= b;
      case KG_OP_GT: return a > b;
      case KG_OP_GE: return a >= b;
      case KG_OP_EQ: return a == b;
      default: return a != b;
      }
    }
  }
  if (e->kind == KG_EXPR_CALL && e->call.fn == KG_FN_SELECT)
    return eval_b(c, e->call.args[0]) ? eval_b(c, e->call.args[1]) : eval_b(c, e->call.args[2]);
  /* a number used as a condition: nonzero is true */
  if (e->ty == KG_TY_INT) return eval_i(c, e) != 0;
  return eval_value(c, e) != 0.0;
}

/* Row-major strides of a tensor. */
static void buf_set_strides(eval_buf *b, const kg_tensor *t) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    b->stride[d] = s;
    s *= t->shape[d];
  }
}

/* Elements [begin, end) of stmt->lhs in row-major order, last index fastest. */
static void eval_stmt_range(eval_ctx *c, const kg_stmt *s, int64_t begin, int64_t end) {
  const kg_tensor *t = s->lhs;
  double *out = c->buf[t->id].val;
  int n = s->nidx;
  int64_t rest = begin;
  for (int d = n - 1; d >= 0; d--) {
    c->iv[s->idx[d]->id] = rest % t->shape[d];
    rest /= t->shape[d];
  }
  for (int64_t off = begin; off < end; off++) {
    out[off] = eval_f(c, s->rhs);
    for (int d = n - 1; d >= 0; d--) {
      int id = s->idx[d]->id;
      if (++c->iv[id] < t->shape[d]) break;
      c->iv[id] = 0;
    }
  }
}

#ifdef _OPENMP
/* A rough count of body evaluations per element: reductions multiply their extents (nested ones compound). */
static double expr_cost(const kg_expr *e) {
  double k = 1;
  switch (e->kind) {
  case KG_EXPR_READ:
    for (int i = 0; i < e->read.n; i++) k += expr_cost(e->read.idx[i]);
    return k;
  case KG_EXPR_UNARY: return 1 + expr_cost(e->op.a);
  case KG_EXPR_BINARY: return 1 + expr_cost(e->op.a) + expr_cost(e->op.b);
  case KG_EXPR_CALL:
    for (int i = 0; i < e->call.n; i++) k += expr_cost(e->call.args[i]);
    return k;
  case KG_EXPR_REDUCE: {
    double n = 1;
    for (int r = 0; r < e->reduce.nrv; r++) n *= (double)(e->reduce.rv[r]->extent > 0 ? e->reduce.rv[r]->extent : 0);
    return 1 + n * expr_cost(e->reduce.body);
  }
  default: return 1;
  }
}
#endif

/* Defines stmt->lhs over its whole shape. Elements are independent (a statement reads only earlier tensors),
 * so large statements are split across OpenMP threads, each with its own ivar values; every element is still
 * computed by exactly the same sequence of operations, so the result does not depend on the thread count. */
static void eval_stmt(eval_ctx *c, const kg_stmt *s) {
  const kg_tensor *t = s->lhs;
  assert(s->nidx == t->ndim && c->buf[t->id].val);
  int64_t total = kg_tensor_numel(t);
  if (total <= 0) return;
#ifdef _OPENMP
  if ((double)total * expr_cost(s->rhs) > 2e5 && total > 1 && omp_get_max_threads() > 1) {
    const int64_t block = 64;
    int64_t nblocks = (total + block - 1) / block;
#pragma omp parallel
    {
      eval_ctx local = *c;
      local.iv = malloc(sizeof(int64_t) * (size_t)(c->p->n_ivars > 0 ? c->p->n_ivars : 1));
      assert(local.iv);
      memcpy(local.iv, c->iv, sizeof(int64_t) * (size_t)c->p->n_ivars);
#pragma omp for schedule(dynamic, 4)
      for (int64_t bl = 0; bl < nblocks; bl++) {
        int64_t end = (bl + 1) * block < total ? (bl + 1) * block : total;
        eval_stmt_range(&local, s, bl * block, end);
      }
      free(local.iv);
      if (local.oob) {
#pragma omp atomic write
        c->oob = 1;
      }
    }
    return;
  }
#endif
  eval_stmt_range(c, s, 0, total);
}

int kg_eval_naive(const kg_program *p, const float *const *inputs, double *const *outputs) {
  int nbuf = 0;
  for (int i = 0; i < p->ntensors; i++)
    if (p->tensors[i]->id + 1 > nbuf) nbuf = p->tensors[i]->id + 1;
  /* all scratch (buffer table, ivar values, intermediates) in one arena, freed at once */
  kg_arena a;
  kg_arena_init(&a);
  eval_ctx c = {.p = p, .nbuf = nbuf};
  c.buf = KG_NEW_ARRAY(&a, eval_buf, nbuf + 1);
  c.iv = KG_NEW_ARRAY(&a, int64_t, p->n_ivars + 1);
  for (int i = 0; i < p->ntensors; i++) buf_set_strides(&c.buf[p->tensors[i]->id], p->tensors[i]);
  for (int i = 0; i < p->ninputs; i++) c.buf[p->inputs[i]->id].in = inputs[i];
  for (int i = 0; i < p->noutputs; i++) c.buf[p->outputs[i]->id].val = outputs[i];
  for (int k = 0; k < p->def->nstmts; k++) {
    const kg_tensor *t = p->def->stmts[k]->lhs;
    eval_buf *b = &c.buf[t->id];
    if (!b->val) b->val = KG_NEW_ARRAY(&a, double, kg_tensor_numel(t)); /* an intermediate */
  }
  for (int k = 0; k < p->def->nstmts; k++) eval_stmt(&c, p->def->stmts[k]);
  kg_arena_free(&a);
  return c.oob ? -1 : 0;
}
