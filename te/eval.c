/* The reference evaluator: the oracle every generated kernel is compared with.
 *
 * It interprets the checked AST (p->def->stmts) element by element and on purpose shares nothing with stages,
 * scheduling, lowering or printing, so a bug there cannot hide by being repeated here. Values are doubles
 * throughout (inputs are widened from f32, intermediates stay double), integer-typed nodes use int64 with floor
 * division and floor modulo.
 *
 * Semantics are those of a plain tree walk (eval_f / eval_i / eval_b below name the three ways a node is
 * evaluated: as a value, an index, a condition); every element's value is computed by the same sequence of
 * double operations as that walk, with each reduction combining its terms in odometer order (last variable
 * fastest). To be fast at benchmark sizes without changing a single bit, each statement is first compiled:
 *   - the tree becomes a tree of small closures (resolved buffers, ivar slots, no type dispatch at run time);
 *   - a read whose indices are affine in the enclosing variables and provably in bounds for their whole ranges
 *     becomes one flat offset (base + sum coef * ivar) with no checks;
 *   - a reduction nested in an expression whose value depends on fewer variables than enclose it (softmax's
 *     row sum) is memoized: its values over the tuple of variables it uses are filled into a table before the
 *     statement's elements, each entry computed exactly as the walk would have;
 *   - a top-level reduction whose body is one flat read or a product of two (matmul, convolution) is computed
 *     for up to LANES consecutive elements of a row at once: every lane still accumulates its own terms in its
 *     own order, only the loops are interchanged so memory is walked contiguously.
 *
 * tests/eval_naive.c keeps the plain tree walk this file started as, and tests/test_eval_naive.c holds this file
 * to it bit for bit on every library workload and test program.
 *
 * Requires: a program accepted by kg_check_def (names resolved, types set, ivar ranges and shapes bound, every
 * read proved in bounds). Returns 0, or -1 if a read nevertheless fell out of bounds (that read yields NaN). */
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../base/intmath.h"
#include "te.h"
#ifdef _OPENMP
#include <omp.h>
#endif

/* Bit-identical results rely on a * b + c staying two roundings: never let the compiler fuse them. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define LANES 256                                /* elements of a row computed together by a lane reduction */
#define MEMO_MAX_ENTRIES ((int64_t)1 << 23)      /* larger tables (72 MB) fall back to recomputing */
#define MAX_TERMS 16                             /* ivar terms of a flat read offset */
#define PARALLEL_WORK 2e5                        /* below this many body evaluations, threads cost more */

/* Per-thread evaluation state. */
typedef struct eval_ctx {
  int64_t *iv;     /* current value of every ivar, by id */
  double *lane;    /* LANES values per lane reduction of the statement, for the current row segment */
  double *tmp;     /* 2 * LANES scratch for lane reductions */
  int64_t lane_j0; /* the statement's last index at lane 0 of the current row segment */
  int oob;         /* a read fell outside its tensor (see f_read_checked) */
} eval_ctx;

typedef struct cnode cnode;
typedef double (*run_f)(eval_ctx *c, const cnode *n);
typedef int64_t (*run_i)(eval_ctx *c, const cnode *n);
typedef int (*run_b)(eval_ctx *c, const cnode *n);
#define RUN_F(x) ((x)->run.f(c, (x)))
#define RUN_I(x) ((x)->run.i(c, (x)))
#define RUN_B(x) ((x)->run.b(c, (x)))

/* A tensor read. */
typedef struct cread {
  const float *in;   /* an input, or */
  const double *val; /* an output or intermediate */
  int flat;          /* offset = base + sum coef[t] * iv[slot[t]], in bounds for all values of the variables */
  int64_t base;
  int nterm;
  int slot[MAX_TERMS];
  int64_t coef[MAX_TERMS];
  int ndim; /* not flat: each index evaluated and checked */
  const cnode *idx[KG_MAX_DIMS];
  int64_t shape[KG_MAX_DIMS], stride[KG_MAX_DIMS];
} cread;

typedef struct creduce {
  kg_reducer red;
  int nrv;
  int *slot; /* the reduction variables, outermost first */
  int64_t *lo, *ext;
  const cnode *body;
  double cost; /* of one evaluation */
  /* fast inner loop: the body is the flat read ra, or ra * rb; step_* are their strides in the innermost
   * variable, lane_* in the statement's last index */
  const cread *ra, *rb;
  int64_t step_a, step_b, lane_a, lane_b;
  /* memoized: the value for each tuple of the variables the body uses (free_*), last fastest */
  double *table;
  unsigned char *table_oob; /* computing that entry read out of bounds */
  int64_t table_size;
  int nfree;
  int *free_slot;
  int64_t *free_lo, *free_ext, *free_stride;
  /* lane reduction: values for the current row segment in eval_ctx.lane */
  int lane_id, lane_slot;
} creduce;

typedef enum { CN_OTHER, CN_READ_FLAT, CN_MUL } cn_kind; /* what the reduction fast paths recognise */

struct cnode {
  union {
    run_f f;
    run_i i;
    run_b b;
  } run;
  cn_kind kind;
  const cnode *a, *b, *c; /* operands */
  int op;                 /* kg_op or kg_func */
  int slot;               /* ivar id */
  double num;
  int64_t inum;
  const cread *rd;
  const creduce *red;
  double cost; /* rough count of operations per evaluation, for the threading decision */
};

/* Integer arithmetic wraps instead of overflowing (no undefined behaviour on any checked program); division
 * and modulo round toward minus infinity, as the language defines them for index expressions. */
static int64_t int_wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t int_wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t int_wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

static int64_t int_floor_div(int64_t a, int64_t b) {
  if (b == 0 || (b == -1 && a == INT64_MIN)) return 0; /* the checker rules these out for indices */
  return kg_int_floordiv(a, b);
}

static int64_t int_floor_mod(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  return kg_int_floormod(a, b);
}

/* The language's max and min (docs/language.md): a NaN operand gives NaN, and -0 orders below +0. Both are
 * then commutative and associative, so the printers' combining orders (rfactor, register accumulators, warp
 * shuffles) all give this result; the kernels' kg_maxf and kg_minf implement the same rule. */
static double value_max(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  if (a != b) return a > b ? a : b;
  return signbit(a) ? b : a;
}

static double value_min(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  if (a != b) return a < b ? a : b;
  return signbit(a) ? a : b;
}

static double reduce_combine(kg_reducer r, double acc, double v) {
  switch (r) {
  case KG_RED_SUM: return acc + v;
  case KG_RED_PROD: return acc * v;
  case KG_RED_MAX: return value_max(acc, v);
  case KG_RED_MIN: return value_min(acc, v);
  default: assert(0 && "bad reducer"); return acc;
  }
}

/* ---- values (eval_f / eval_value) ---- */

static double f_const(eval_ctx *c, const cnode *n) { (void)c; return n->num; }
static double f_ivar(eval_ctx *c, const cnode *n) { return (double)c->iv[n->slot]; }
static double f_of_i(eval_ctx *c, const cnode *n) { return (double)RUN_I(n->a); }
static double f_of_b(eval_ctx *c, const cnode *n) { return RUN_B(n->a) ? 1.0 : 0.0; }
static double f_not(eval_ctx *c, const cnode *n) { return RUN_B(n->a) ? 0.0 : 1.0; }
static double f_neg(eval_ctx *c, const cnode *n) { return -RUN_F(n->a); }
static double f_select(eval_ctx *c, const cnode *n) { return RUN_B(n->a) ? RUN_F(n->b) : RUN_F(n->c); }

static double f_add(eval_ctx *c, const cnode *n) {
  double a = RUN_F(n->a), b = RUN_F(n->b);
  return a + b;
}
static double f_sub(eval_ctx *c, const cnode *n) {
  double a = RUN_F(n->a), b = RUN_F(n->b);
  return a - b;
}
static double f_mul(eval_ctx *c, const cnode *n) {
  double a = RUN_F(n->a), b = RUN_F(n->b);
  return a * b;
}
static double f_div(eval_ctx *c, const cnode *n) {
  double a = RUN_F(n->a), b = RUN_F(n->b);
  return a / b;
}
static double f_mod(eval_ctx *c, const cnode *n) {
  double a = RUN_F(n->a), b = RUN_F(n->b);
  return fmod(a, b);
}

static double f_call1(eval_ctx *c, const cnode *n) {
  double x = RUN_F(n->a);
  switch ((kg_func)n->op) {
  case KG_FN_EXP: return exp(x);
  case KG_FN_LOG: return log(x);
  case KG_FN_SQRT: return sqrt(x);
  case KG_FN_RSQRT: return 1.0 / sqrt(x);
  case KG_FN_TANH: return tanh(x);
  case KG_FN_ERF: return erf(x);
  case KG_FN_ABS: return fabs(x);
  case KG_FN_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case KG_FN_F32: return (double)(float)x;
  case KG_FN_F16: return kg_dtype_round(KG_DT_F16, x);
  case KG_FN_BF16: return kg_dtype_round(KG_DT_BF16, x);
  default: assert(0 && "bad function"); return NAN;
  }
}

static double f_call2(eval_ctx *c, const cnode *n) {
  double x = RUN_F(n->a), y = RUN_F(n->b);
  switch ((kg_func)n->op) {
  case KG_FN_POW: return pow(x, y);
  case KG_FN_MAX: return value_max(x, y);
  case KG_FN_MIN: return value_min(x, y);
  default: assert(0 && "bad function"); return NAN;
  }
}

/* Offsets are summed in uint64: the analysis proved the true sum in bounds, so wrapping partial sums (which
 * cannot occur in practice) would still land on it, without signed-overflow undefined behaviour. */
static inline int64_t flat_offset(const eval_ctx *c, const cread *r) {
  uint64_t off = (uint64_t)r->base;
  for (int t = 0; t < r->nterm; t++) off += (uint64_t)r->coef[t] * (uint64_t)c->iv[r->slot[t]];
  return (int64_t)off;
}

static inline double read_at(const cread *r, int64_t off) { return r->in ? (double)r->in[off] : r->val[off]; }

static double f_read_flat_in(eval_ctx *c, const cnode *n) { return (double)n->rd->in[flat_offset(c, n->rd)]; }
static double f_read_flat_val(eval_ctx *c, const cnode *n) { return n->rd->val[flat_offset(c, n->rd)]; }

/* The checker proves every read in bounds, so an index out of range means the checker and this evaluator
 * disagree about the language (a bug, not a user error); rather than read wild memory or abort, the read
 * yields NaN and kg_eval_reference reports -1. */
static double f_read_checked(eval_ctx *c, const cnode *n) {
  const cread *r = n->rd;
  int64_t off = 0;
  for (int d = 0; d < r->ndim; d++) {
    int64_t x = RUN_I(r->idx[d]);
    if (x < 0 || x >= r->shape[d]) {
      c->oob = 1;
      return NAN;
    }
    off += x * r->stride[d];
  }
  return read_at(r, off);
}

/* The innermost reduction variable's whole range, added to acc. */
static double reduce_inner(eval_ctx *c, const creduce *r, double acc) {
  int s = r->slot[r->nrv - 1];
  int64_t lo = r->lo[r->nrv - 1], ext = r->ext[r->nrv - 1];
  if (r->ra) {
    c->iv[s] = lo;
    int64_t oa = flat_offset(c, r->ra);
    if (r->rb) {
      int64_t ob = flat_offset(c, r->rb);
      for (int64_t t = 0; t < ext; t++, oa += r->step_a, ob += r->step_b)
        acc = reduce_combine(r->red, acc, read_at(r->ra, oa) * read_at(r->rb, ob));
    } else {
      for (int64_t t = 0; t < ext; t++, oa += r->step_a) acc = reduce_combine(r->red, acc, read_at(r->ra, oa));
    }
    return acc;
  }
  for (int64_t v = lo; v < lo + ext; v++) {
    c->iv[s] = v;
    acc = reduce_combine(r->red, acc, RUN_F(r->body));
  }
  c->iv[s] = lo;
  return acc;
}

/* Sets every reduction variable to its first value; 0 when some range is empty. */
static int reduce_start(eval_ctx *c, const creduce *r) {
  for (int k = 0; k < r->nrv; k++) {
    if (r->ext[k] <= 0) return 0;
    c->iv[r->slot[k]] = r->lo[k];
  }
  return 1;
}

/* Odometer step over all but the innermost variable; 0 after the last combination. */
static int reduce_next_outer(eval_ctx *c, const creduce *r) {
  for (int k = r->nrv - 2; k >= 0; k--) {
    if (++c->iv[r->slot[k]] < r->lo[k] + r->ext[k]) return 1;
    c->iv[r->slot[k]] = r->lo[k];
  }
  return 0;
}

static double reduce_direct(eval_ctx *c, const creduce *r) {
  double acc = kg_reducer_identity(r->red);
  if (r->nrv == 0) return reduce_combine(r->red, acc, RUN_F(r->body));
  if (!reduce_start(c, r)) return acc;
  do acc = reduce_inner(c, r, acc);
  while (reduce_next_outer(c, r));
  return acc;
}

static double f_reduce(eval_ctx *c, const cnode *n) { return reduce_direct(c, n->red); }

static double f_reduce_memo(eval_ctx *c, const cnode *n) {
  const creduce *r = n->red;
  int64_t e = 0;
  for (int k = 0; k < r->nfree; k++) e += (c->iv[r->free_slot[k]] - r->free_lo[k]) * r->free_stride[k];
  assert(e >= 0 && e < r->table_size);
  if (r->table_oob[e]) c->oob = 1;
  return r->table[e];
}

static double f_reduce_lane(eval_ctx *c, const cnode *n) {
  const creduce *r = n->red;
  int64_t l = c->iv[r->lane_slot] - c->lane_j0;
  assert(l >= 0 && l < LANES);
  return c->lane[r->lane_id * LANES + l];
}

/* nl values of r at offset off + l * step (l < nl), in double. */
static void lane_load(const cread *r, int64_t off, int64_t step, int nl, double *dst) {
  if (r->in && step == 1) /* the common case, as a loop the compiler vectorizes */
    for (int l = 0; l < nl; l++) dst[l] = (double)r->in[off + l];
  else if (r->in)
    for (int l = 0; l < nl; l++) dst[l] = (double)r->in[off + l * step];
  else if (step == 1)
    for (int l = 0; l < nl; l++) dst[l] = r->val[off + l];
  else
    for (int l = 0; l < nl; l++) dst[l] = r->val[off + l * step];
}

/* A lane reduction for lanes lane_j0 .. lane_j0 + nl - 1 of the current row: the loops of nl reduce_direct
 * calls interchanged, so each lane's accumulator sees exactly the same terms in the same order. */
static void reduce_lanes(eval_ctx *c, const creduce *r, int nl) {
  double *acc = c->lane + r->lane_id * LANES, *ta = c->tmp, *tb = c->tmp + LANES;
  double id = kg_reducer_identity(r->red);
  for (int l = 0; l < nl; l++) acc[l] = id;
  if (!reduce_start(c, r)) return;
  int s = r->slot[r->nrv - 1];
  int64_t lo = r->lo[r->nrv - 1], ext = r->ext[r->nrv - 1];
  do {
    c->iv[s] = lo;
    int64_t oa = flat_offset(c, r->ra), ob = r->rb ? flat_offset(c, r->rb) : 0;
    for (int64_t t = 0; t < ext; t++, oa += r->step_a, ob += r->step_b) {
      if (r->red == KG_RED_SUM && r->rb && r->lane_a == 0) { /* a product with one operand shared by all lanes */
        double a = read_at(r->ra, oa);
        if (r->rb->in && r->lane_b == 1) { /* matmul's inner loop: straight from the f32 row */
          const float *b = r->rb->in + ob;
          for (int l = 0; l < nl; l++) acc[l] = acc[l] + a * (double)b[l];
          continue;
        }
        lane_load(r->rb, ob, r->lane_b, nl, tb);
        for (int l = 0; l < nl; l++) acc[l] = acc[l] + a * tb[l];
        continue;
      }
      if (r->red == KG_RED_SUM && r->rb && r->lane_b == 0) {
        double b = read_at(r->rb, ob);
        lane_load(r->ra, oa, r->lane_a, nl, ta);
        for (int l = 0; l < nl; l++) acc[l] = acc[l] + ta[l] * b;
        continue;
      }
      lane_load(r->ra, oa, r->lane_a, nl, ta);
      if (r->rb) {
        lane_load(r->rb, ob, r->lane_b, nl, tb);
        for (int l = 0; l < nl; l++) ta[l] = ta[l] * tb[l];
      }
      if (r->red == KG_RED_SUM)
        for (int l = 0; l < nl; l++) acc[l] = acc[l] + ta[l];
      else
        for (int l = 0; l < nl; l++) acc[l] = reduce_combine(r->red, acc[l], ta[l]);
    }
  } while (reduce_next_outer(c, r));
}

/* ---- indices (eval_i) ---- */

static int64_t i_const(eval_ctx *c, const cnode *n) { (void)c; return n->inum; }
static int64_t i_ivar(eval_ctx *c, const cnode *n) { return c->iv[n->slot]; }
static int64_t i_not(eval_ctx *c, const cnode *n) { return !RUN_B(n->a); }
static int64_t i_neg(eval_ctx *c, const cnode *n) { return int_wrap_sub(0, RUN_I(n->a)); }
static int64_t i_select(eval_ctx *c, const cnode *n) { return RUN_B(n->a) ? RUN_I(n->b) : RUN_I(n->c); }

static int64_t i_binary(eval_ctx *c, const cnode *n) {
  int64_t a = RUN_I(n->a), b = RUN_I(n->b);
  switch ((kg_op)n->op) {
  case KG_OP_ADD: return int_wrap_add(a, b);
  case KG_OP_SUB: return int_wrap_sub(a, b);
  case KG_OP_MUL: return int_wrap_mul(a, b);
  case KG_OP_DIV: return int_floor_div(a, b);
  case KG_OP_MOD: return int_floor_mod(a, b);
  default: assert(0 && "comparison typed as int"); return 0;
  }
}

static int64_t i_maxmin(eval_ctx *c, const cnode *n) {
  int64_t a = RUN_I(n->a), b = RUN_I(n->b);
  return (n->op == KG_FN_MAX) == (a > b) ? a : b;
}

static int64_t i_abs(eval_ctx *c, const cnode *n) {
  int64_t a = RUN_I(n->a);
  return a < 0 ? int_wrap_sub(0, a) : a;
}

/* Anything else typed INT (a checker choice we did not anticipate): computed in double, rounded down. */
static int64_t i_of_v(eval_ctx *c, const cnode *n) {
  double v = RUN_F(n->a);
  return isfinite(v) && fabs(v) < 9.2e18 ? (int64_t)floor(v) : 0;
}

/* ---- conditions (eval_b) ---- */

static int b_not(eval_ctx *c, const cnode *n) { return !RUN_B(n->a); }
static int b_and(eval_ctx *c, const cnode *n) { return RUN_B(n->a) && RUN_B(n->b); }
static int b_or(eval_ctx *c, const cnode *n) { return RUN_B(n->a) || RUN_B(n->b); }
static int b_select(eval_ctx *c, const cnode *n) { return RUN_B(n->a) ? RUN_B(n->b) : RUN_B(n->c); }
static int b_of_i(eval_ctx *c, const cnode *n) { return RUN_I(n->a) != 0; }
static int b_of_v(eval_ctx *c, const cnode *n) { return RUN_F(n->a) != 0.0; }

#define COMPARE(op, a, b)                                                                                   \
  switch (op) {                                                                                             \
  case KG_OP_LT: return a < b;                                                                              \
  case KG_OP_LE: return a <= b;                                                                             \
  case KG_OP_GT: return a > b;                                                                              \
  case KG_OP_GE: return a >= b;                                                                             \
  case KG_OP_EQ: return a == b;                                                                             \
  default: return a != b;                                                                                   \
  }

/* Comparisons of two INT operands compare exactly in int64, others in double. */
static int b_cmp_i(eval_ctx *c, const cnode *n) {
  int64_t a = RUN_I(n->a), b = RUN_I(n->b);
  COMPARE((kg_op)n->op, a, b)
}
static int b_cmp_f(eval_ctx *c, const cnode *n) {
  double a = RUN_F(n->a), b = RUN_F(n->b);
  COMPARE((kg_op)n->op, a, b)
}

/* ---- compilation of one statement ---- */

typedef struct eval_buf {
  const float *in; /* inputs */
  double *val;     /* outputs and intermediates */
  int64_t stride[KG_MAX_DIMS];
} eval_buf;

/* A compiled statement. */
typedef struct stmt_code {
  const kg_stmt *s;
  double *out;
  const cnode *rhs;
  creduce **memo; /* memoized reductions, inner ones first (the order their tables are filled in) */
  int nmemo, memo_cap;
  creduce **lanes;
  int nlane, lane_cap;
} stmt_code;

typedef struct compiler {
  kg_arena *a; /* the statement's arena: nodes and memo tables */
  const kg_program *p;
  const eval_buf *buf;
  /* the variables enclosing the node being compiled: the statement's indices, then enclosing reductions' */
  int *enc_slot;
  int64_t *enc_lo, *enc_ext;
  int nenc;
  int depth;           /* reductions enclosing the node being compiled */
  unsigned char *mark; /* n_ivars scratch */
  stmt_code *sc;
} compiler;

static const cnode *compile_f(compiler *cp, const kg_expr *e);
static const cnode *compile_i(compiler *cp, const kg_expr *e);
static const cnode *compile_b(compiler *cp, const kg_expr *e);

static cnode *cn_new(compiler *cp, const cnode *a, const cnode *b, const cnode *c3) {
  cnode *n = KG_NEW(cp->a, cnode);
  n->a = a;
  n->b = b;
  n->c = c3;
  n->cost = 1 + (a ? a->cost : 0) + (b ? b->cost : 0) + (c3 ? c3->cost : 0);
  return n;
}
static const cnode *cn_f(compiler *cp, run_f f, const cnode *a, const cnode *b, const cnode *c3) {
  cnode *n = cn_new(cp, a, b, c3);
  n->run.f = f;
  return n;
}
static const cnode *cn_i(compiler *cp, run_i f, const cnode *a, const cnode *b, const cnode *c3) {
  cnode *n = cn_new(cp, a, b, c3);
  n->run.i = f;
  return n;
}
static const cnode *cn_b(compiler *cp, run_b f, const cnode *a, const cnode *b, const cnode *c3) {
  cnode *n = cn_new(cp, a, b, c3);
  n->run.b = f;
  return n;
}
static const cnode *cn_fconst(compiler *cp, double v) {
  cnode *n = cn_new(cp, NULL, NULL, NULL);
  n->run.f = f_const;
  n->num = v;
  return n;
}

static int enc_find(const compiler *cp, int id) {
  for (int k = 0; k < cp->nenc; k++)
    if (cp->enc_slot[k] == id) return k;
  return -1;
}

/* An integer index expression as base + sum coef * ivar over enclosing variables, exactly (every step
 * overflow-checked); -1 when it is not of that form. Mirrors compile_i: integer literal, ivar, size, negation,
 * +, -, and * by a constant. */
typedef struct affine {
  int64_t base;
  int n;
  int slot[MAX_TERMS];
  int64_t coef[MAX_TERMS];
} affine;

static int affine_add_term(affine *f, int slot, int64_t coef) {
  for (int t = 0; t < f->n; t++)
    if (f->slot[t] == slot) return __builtin_add_overflow(f->coef[t], coef, &f->coef[t]) ? -1 : 0;
  if (f->n == MAX_TERMS) return -1;
  f->slot[f->n] = slot;
  f->coef[f->n++] = coef;
  return 0;
}

/* f += k * g */
static int affine_axpy(affine *f, int64_t k, const affine *g) {
  int64_t b;
  if (__builtin_mul_overflow(k, g->base, &b) || __builtin_add_overflow(f->base, b, &f->base)) return -1;
  for (int t = 0; t < g->n; t++) {
    int64_t cf;
    if (__builtin_mul_overflow(k, g->coef[t], &cf) || affine_add_term(f, g->slot[t], cf)) return -1;
  }
  return 0;
}

static int affine_of(const compiler *cp, const kg_expr *e, affine *f) {
  memset(f, 0, sizeof *f);
  switch (e->kind) {
  case KG_EXPR_NUM:
    if (!e->num.is_int) return -1;
    f->base = e->num.i;
    return 0;
  case KG_EXPR_SIZE: f->base = cp->p->sizes[e->var.size].value; return 0;
  case KG_EXPR_IVAR:
    if (enc_find(cp, e->var.iv->id) < 0) return -1;
    return affine_add_term(f, e->var.iv->id, 1);
  case KG_EXPR_UNARY: {
    affine g;
    if (e->op.op == KG_OP_NOT || affine_of(cp, e->op.a, &g)) return -1;
    return affine_axpy(f, -1, &g);
  }
  case KG_EXPR_BINARY: {
    affine g, h;
    if (affine_of(cp, e->op.a, &g) || affine_of(cp, e->op.b, &h)) return -1;
    switch (e->op.op) {
    case KG_OP_ADD: return affine_axpy(f, 1, &g) || affine_axpy(f, 1, &h) ? -1 : 0;
    case KG_OP_SUB: return affine_axpy(f, 1, &g) || affine_axpy(f, -1, &h) ? -1 : 0;
    case KG_OP_MUL:
      if (g.n == 0) return affine_axpy(f, g.base, &h);
      if (h.n == 0) return affine_axpy(f, h.base, &g);
      return -1;
    default: return -1;
    }
  }
  default: return -1;
  }
}

/* Smallest and largest value of f over the enclosing variables' ranges; -1 on overflow or an empty range. */
static int affine_bounds(const compiler *cp, const affine *f, int64_t *mn, int64_t *mx) {
  int64_t lo = f->base, hi = f->base;
  for (int t = 0; t < f->n; t++) {
    int k = enc_find(cp, f->slot[t]);
    if (k < 0 || cp->enc_ext[k] <= 0) return -1;
    int64_t a, b;
    if (__builtin_mul_overflow(f->coef[t], cp->enc_lo[k], &a) ||
        __builtin_mul_overflow(f->coef[t], cp->enc_lo[k] + cp->enc_ext[k] - 1, &b))
      return -1;
    if (__builtin_add_overflow(lo, a < b ? a : b, &lo) || __builtin_add_overflow(hi, a < b ? b : a, &hi))
      return -1;
  }
  *mn = lo;
  *mx = hi;
  return 0;
}

/* The flat form of a read whose every index is affine and in bounds over the variables' whole ranges. The
 * wrapping index arithmetic of the tree walk equals the exact value modulo 2^64, and the exact value is in
 * bounds, so both agree. */
static int read_flatten(const compiler *cp, const kg_expr *e, const eval_buf *b, cread *r) {
  affine flat = {0};
  for (int d = 0; d < e->read.n; d++) {
    affine f;
    int64_t mn, mx;
    if (affine_of(cp, e->read.idx[d], &f) || affine_bounds(cp, &f, &mn, &mx)) return -1;
    if (mn < 0 || mx >= e->read.tensor->shape[d]) return -1;
    if (affine_axpy(&flat, b->stride[d], &f)) return -1;
  }
  r->flat = 1;
  r->base = flat.base;
  r->nterm = flat.n;
  memcpy(r->slot, flat.slot, sizeof flat.slot);
  memcpy(r->coef, flat.coef, sizeof flat.coef);
  return 0;
}

static const cnode *compile_read(compiler *cp, const kg_expr *e) {
  const kg_tensor *t = e->read.tensor;
  assert(t && t->id >= 0 && e->read.n == t->ndim && e->read.n <= KG_MAX_DIMS);
  const eval_buf *b = &cp->buf[t->id];
  assert((b->in || b->val) && "read of a tensor with no buffer (not an input, output or defined intermediate)");
  cread *r = KG_NEW(cp->a, cread);
  r->in = b->in;
  r->val = b->in ? NULL : b->val;
  cnode *n = cn_new(cp, NULL, NULL, NULL);
  n->rd = r;
  if (read_flatten(cp, e, b, r) == 0) {
    n->kind = CN_READ_FLAT;
    n->run.f = r->in ? f_read_flat_in : f_read_flat_val;
    n->cost += r->nterm;
    return n;
  }
  r->ndim = e->read.n;
  for (int d = 0; d < r->ndim; d++) {
    r->idx[d] = compile_i(cp, e->read.idx[d]);
    r->shape[d] = t->shape[d];
    r->stride[d] = b->stride[d];
    n->cost += r->idx[d]->cost;
  }
  n->run.f = f_read_checked;
  return n;
}

static void mark_ivars(const kg_expr *e, unsigned char *mark, int bound_only) {
  switch (e->kind) {
  case KG_EXPR_IVAR:
    if (!bound_only) mark[e->var.iv->id] = 1;
    return;
  case KG_EXPR_READ:
    for (int d = 0; d < e->read.n; d++) mark_ivars(e->read.idx[d], mark, bound_only);
    return;
  case KG_EXPR_UNARY: mark_ivars(e->op.a, mark, bound_only); return;
  case KG_EXPR_BINARY:
    mark_ivars(e->op.a, mark, bound_only);
    mark_ivars(e->op.b, mark, bound_only);
    return;
  case KG_EXPR_CALL:
    for (int k = 0; k < e->call.n; k++) mark_ivars(e->call.args[k], mark, bound_only);
    return;
  case KG_EXPR_REDUCE:
    mark_ivars(e->reduce.body, mark, bound_only);
    if (bound_only)
      for (int k = 0; k < e->reduce.nrv; k++) mark[e->reduce.rv[k]->id] = 0;
    return;
  default: return;
  }
}

/* The variables a reduction's value depends on: ivars in its body, less those bound by it or by reductions
 * inside it. Sets the tuple (enclosing variables it uses, outermost first) in r; returns the number of
 * values the tuple takes, or -1 when some variable is not an enclosing one (no memo then). */
static double reduce_free_vars(compiler *cp, const kg_expr *e, creduce *r) {
  int n = cp->p->n_ivars;
  memset(cp->mark, 0, (size_t)n);
  mark_ivars(e, cp->mark, 0);
  mark_ivars(e, cp->mark, 1);
  int used = 0;
  for (int i = 0; i < n; i++) used += cp->mark[i];
  r->free_slot = KG_NEW_ARRAY(cp->a, int, used + 1);
  r->free_lo = KG_NEW_ARRAY(cp->a, int64_t, used + 1);
  r->free_ext = KG_NEW_ARRAY(cp->a, int64_t, used + 1);
  r->free_stride = KG_NEW_ARRAY(cp->a, int64_t, used + 1);
  double size = 1;
  for (int k = 0; k < cp->nenc; k++) {
    if (!cp->mark[cp->enc_slot[k]]) continue;
    cp->mark[cp->enc_slot[k]] = 0;
    r->free_slot[r->nfree] = cp->enc_slot[k];
    r->free_lo[r->nfree] = cp->enc_lo[k];
    r->free_ext[r->nfree] = cp->enc_ext[k];
    size *= (double)(cp->enc_ext[k] > 0 ? cp->enc_ext[k] : 0);
    r->nfree++;
  }
  return r->nfree == used ? size : -1;
}

static int64_t read_coef(const cread *r, int slot) {
  int64_t k = 0;
  for (int t = 0; t < r->nterm; t++)
    if (r->slot[t] == slot) k += r->coef[t];
  return k;
}

static const cnode *compile_reduce(compiler *cp, const kg_expr *e) {
  creduce *r = KG_NEW(cp->a, creduce);
  r->red = e->reduce.red;
  r->nrv = e->reduce.nrv;
  r->slot = KG_NEW_ARRAY(cp->a, int, r->nrv + 1);
  r->lo = KG_NEW_ARRAY(cp->a, int64_t, r->nrv + 1);
  r->ext = KG_NEW_ARRAY(cp->a, int64_t, r->nrv + 1);
  double terms = 1;
  for (int k = 0; k < r->nrv; k++) {
    r->slot[k] = e->reduce.rv[k]->id;
    r->lo[k] = e->reduce.rv[k]->lo;
    r->ext[k] = e->reduce.rv[k]->extent;
    terms *= (double)(r->ext[k] > 0 ? r->ext[k] : 0);
  }
  /* memoize when the tuple of used variables takes fewer values than the enclosing ones: then the walk would
   * compute each value more than once */
  double table = reduce_free_vars(cp, e, r), space = 1;
  for (int k = 0; k < cp->nenc; k++) space *= (double)(cp->enc_ext[k] > 0 ? cp->enc_ext[k] : 0);
  int memo = table >= 1 && table < space && table <= (double)MEMO_MAX_ENTRIES;

  int nenc = cp->nenc;
  for (int k = 0; k < r->nrv; k++) {
    cp->enc_slot[cp->nenc] = r->slot[k];
    cp->enc_lo[cp->nenc] = r->lo[k];
    cp->enc_ext[cp->nenc++] = r->ext[k];
  }
  cp->depth++;
  r->body = compile_f(cp, e->reduce.body);
  cp->depth--;
  cp->nenc = nenc;

  if (r->nrv > 0) {
    const cnode *b = r->body;
    if (b->kind == CN_READ_FLAT) {
      r->ra = b->rd;
    } else if (b->kind == CN_MUL && b->a->kind == CN_READ_FLAT && b->b->kind == CN_READ_FLAT) {
      r->ra = b->a->rd;
      r->rb = b->b->rd;
    }
    int s = r->slot[r->nrv - 1];
    if (r->ra) r->step_a = read_coef(r->ra, s);
    if (r->rb) r->step_b = read_coef(r->rb, s);
  }

  cnode *n = cn_new(cp, NULL, NULL, NULL);
  n->red = r;
  n->cost = r->cost = 1 + terms * r->body->cost;
  const kg_stmt *st = cp->sc->s;
  if (memo) {
    r->table_size = (int64_t)table;
    r->table = KG_NEW_ARRAY(cp->a, double, r->table_size);
    r->table_oob = KG_NEW_ARRAY(cp->a, unsigned char, r->table_size);
    int64_t stride = 1;
    for (int k = r->nfree - 1; k >= 0; k--) {
      r->free_stride[k] = stride;
      stride *= r->free_ext[k];
    }
    KG_PUSH(cp->a, cp->sc->memo, cp->sc->nmemo, cp->sc->memo_cap, r); /* after the ones in its body */
    n->run.f = f_reduce_memo;
    n->cost = 1;
  } else if (cp->depth == 0 && r->ra && st->nidx > 0) {
    r->lane_slot = st->idx[st->nidx - 1]->id;
    r->lane_a = read_coef(r->ra, r->lane_slot);
    r->lane_b = r->rb ? read_coef(r->rb, r->lane_slot) : 0;
    r->lane_id = cp->sc->nlane;
    KG_PUSH(cp->a, cp->sc->lanes, cp->sc->nlane, cp->sc->lane_cap, r);
    n->run.f = f_reduce_lane;
  } else {
    n->run.f = f_reduce;
  }
  return n;
}

static const cnode *compile_call(compiler *cp, const kg_expr *e) {
  kg_expr *const *a = e->call.args;
  if (e->call.fn == KG_FN_SELECT)
    return cn_f(cp, f_select, compile_b(cp, a[0]), compile_f(cp, a[1]), compile_f(cp, a[2]));
  cnode *n;
  switch (e->call.fn) {
  case KG_FN_POW:
  case KG_FN_MAX:
  case KG_FN_MIN: n = (cnode *)cn_f(cp, f_call2, compile_f(cp, a[0]), compile_f(cp, a[1]), NULL); break;
  default: n = (cnode *)cn_f(cp, f_call1, compile_f(cp, a[0]), NULL, NULL); break;
  }
  n->op = e->call.fn;
  return n;
}

/* A node evaluated in double whatever its type says (eval_value). */
static const cnode *compile_v(compiler *cp, const kg_expr *e) {
  switch (e->kind) {
  case KG_EXPR_NUM: return cn_fconst(cp, e->num.is_int ? (double)e->num.i : e->num.f);
  case KG_EXPR_IVAR: {
    cnode *n = (cnode *)cn_f(cp, f_ivar, NULL, NULL, NULL);
    n->slot = e->var.iv->id;
    return n;
  }
  case KG_EXPR_SIZE: return cn_fconst(cp, (double)cp->p->sizes[e->var.size].value);
  case KG_EXPR_READ: return compile_read(cp, e);
  case KG_EXPR_UNARY:
    if (e->op.op == KG_OP_NOT) return cn_f(cp, f_not, compile_b(cp, e->op.a), NULL, NULL);
    return cn_f(cp, f_neg, compile_f(cp, e->op.a), NULL, NULL);
  case KG_EXPR_BINARY: {
    const cnode *a = compile_f(cp, e->op.a), *b = compile_f(cp, e->op.b);
    switch (e->op.op) {
    case KG_OP_ADD: return cn_f(cp, f_add, a, b, NULL);
    case KG_OP_SUB: return cn_f(cp, f_sub, a, b, NULL);
    case KG_OP_MUL: {
      cnode *n = (cnode *)cn_f(cp, f_mul, a, b, NULL);
      n->kind = CN_MUL;
      return n;
    }
    case KG_OP_DIV: return cn_f(cp, f_div, a, b, NULL);
    case KG_OP_MOD: return cn_f(cp, f_mod, a, b, NULL);
    default: assert(0 && "comparison typed as f32"); return cn_fconst(cp, NAN);
    }
  }
  case KG_EXPR_CALL: return compile_call(cp, e);
  case KG_EXPR_REDUCE: return compile_reduce(cp, e);
  case KG_EXPR_NAME: break;
  }
  assert(0 && "unresolved name in a checked program");
  return cn_fconst(cp, NAN);
}

/* A value (eval_f): F32 nodes in double; an INT node used as a value is computed in int64 and converted; a
 * BOOL one is 1 or 0. */
static const cnode *compile_f(compiler *cp, const kg_expr *e) {
  if (e->ty == KG_TY_INT) return cn_f(cp, f_of_i, compile_i(cp, e), NULL, NULL);
  if (e->ty == KG_TY_BOOL) return cn_f(cp, f_of_b, compile_b(cp, e), NULL, NULL);
  return compile_v(cp, e);
}

/* An INT node (eval_i): index arithmetic in int64. */
static const cnode *compile_i(compiler *cp, const kg_expr *e) {
  cnode *n;
  switch (e->kind) {
  case KG_EXPR_NUM:
    n = (cnode *)cn_i(cp, i_const, NULL, NULL, NULL);
    /* (a float literal out of int64 range would be undefined behaviour to convert: 0 instead) */
    n->inum = e->num.is_int ? e->num.i : fabs(e->num.f) < 9.2e18 ? (int64_t)e->num.f : 0;
    return n;
  case KG_EXPR_IVAR:
    n = (cnode *)cn_i(cp, i_ivar, NULL, NULL, NULL);
    n->slot = e->var.iv->id;
    return n;
  case KG_EXPR_SIZE:
    n = (cnode *)cn_i(cp, i_const, NULL, NULL, NULL);
    n->inum = cp->p->sizes[e->var.size].value;
    return n;
  case KG_EXPR_UNARY:
    if (e->op.op == KG_OP_NOT) return cn_i(cp, i_not, compile_b(cp, e->op.a), NULL, NULL);
    return cn_i(cp, i_neg, compile_i(cp, e->op.a), NULL, NULL);
  case KG_EXPR_BINARY:
    n = (cnode *)cn_i(cp, i_binary, compile_i(cp, e->op.a), compile_i(cp, e->op.b), NULL);
    n->op = e->op.op;
    return n;
  case KG_EXPR_CALL:
    if (e->call.fn == KG_FN_SELECT)
      return cn_i(cp, i_select, compile_b(cp, e->call.args[0]), compile_i(cp, e->call.args[1]),
                  compile_i(cp, e->call.args[2]));
    if (e->call.fn == KG_FN_MAX || e->call.fn == KG_FN_MIN) {
      n = (cnode *)cn_i(cp, i_maxmin, compile_i(cp, e->call.args[0]), compile_i(cp, e->call.args[1]), NULL);
      n->op = e->call.fn;
      return n;
    }
    if (e->call.fn == KG_FN_ABS) return cn_i(cp, i_abs, compile_i(cp, e->call.args[0]), NULL, NULL);
    break;
  default: break;
  }
  return cn_i(cp, i_of_v, compile_v(cp, e), NULL, NULL);
}

/* A condition (eval_b). */
static const cnode *compile_b(compiler *cp, const kg_expr *e) {
  if (e->kind == KG_EXPR_UNARY && e->op.op == KG_OP_NOT) return cn_b(cp, b_not, compile_b(cp, e->op.a), NULL, NULL);
  if (e->kind == KG_EXPR_BINARY) {
    kg_op op = e->op.op;
    if (op == KG_OP_AND) return cn_b(cp, b_and, compile_b(cp, e->op.a), compile_b(cp, e->op.b), NULL);
    if (op == KG_OP_OR) return cn_b(cp, b_or, compile_b(cp, e->op.a), compile_b(cp, e->op.b), NULL);
    if (op >= KG_OP_LT && op <= KG_OP_NE) {
      cnode *n;
      if (e->op.a->ty == KG_TY_INT && e->op.b->ty == KG_TY_INT)
        n = (cnode *)cn_b(cp, b_cmp_i, compile_i(cp, e->op.a), compile_i(cp, e->op.b), NULL);
      else
        n = (cnode *)cn_b(cp, b_cmp_f, compile_f(cp, e->op.a), compile_f(cp, e->op.b), NULL);
      n->op = op;
      return n;
    }
  }
  if (e->kind == KG_EXPR_CALL && e->call.fn == KG_FN_SELECT)
    return cn_b(cp, b_select, compile_b(cp, e->call.args[0]), compile_b(cp, e->call.args[1]),
                compile_b(cp, e->call.args[2]));
  /* a number used as a condition: nonzero is true */
  if (e->ty == KG_TY_INT) return cn_b(cp, b_of_i, compile_i(cp, e), NULL, NULL);
  return cn_b(cp, b_of_v, compile_v(cp, e), NULL, NULL);
}

static void compile_stmt(compiler *cp, stmt_code *sc) {
  const kg_stmt *s = sc->s;
  cp->sc = sc;
  cp->nenc = 0;
  cp->depth = 0;
  for (int d = 0; d < s->nidx; d++) {
    cp->enc_slot[cp->nenc] = s->idx[d]->id;
    cp->enc_lo[cp->nenc] = 0;
    cp->enc_ext[cp->nenc++] = s->lhs->shape[d];
  }
  sc->rhs = compile_f(cp, s->rhs);
}

/* ---- running a statement ---- */

static int ctx_init(eval_ctx *c, const kg_program *p, int nlane) {
  c->iv = calloc((size_t)p->n_ivars + 1, sizeof *c->iv);
  c->lane = calloc((size_t)(nlane > 0 ? nlane : 1) * LANES, sizeof *c->lane);
  c->tmp = calloc(2 * LANES, sizeof *c->tmp);
  c->lane_j0 = 0;
  c->oob = 0;
  return c->iv && c->lane && c->tmp ? 0 : -1;
}

static void ctx_free(eval_ctx *c) {
  free(c->iv);
  free(c->lane);
  free(c->tmp);
}

typedef void (*range_fn)(eval_ctx *c, const void *arg, int64_t begin, int64_t end);

/* fn over [0, total), split across OpenMP threads when the work (total * cost) is large, each thread with its
 * own ivar values. Items are independent and each is computed by exactly the same operations whatever the
 * split, so results do not depend on the thread count. */
static void run_items(eval_ctx *c, const kg_program *p, int nlane, int64_t total, double cost, range_fn fn,
                      const void *arg) {
  if (total <= 0) return;
#ifdef _OPENMP
  if ((double)total * cost > PARALLEL_WORK && total > 1 && omp_get_max_threads() > 1) {
    /* blocks of a row segment at most (lanes end at a block's end), and enough of them to balance the load */
    int64_t block = total / (8 * (int64_t)omp_get_max_threads());
    block = block < 1 ? 1 : block > LANES ? LANES : block;
    int64_t nblocks = (total + block - 1) / block;
#pragma omp parallel
    {
      eval_ctx local;
      int ok = ctx_init(&local, p, nlane) == 0;
      assert(ok && "out of memory");
#pragma omp for schedule(dynamic, 1)
      for (int64_t bl = 0; bl < nblocks; bl++) {
        int64_t end = (bl + 1) * block < total ? (bl + 1) * block : total;
        if (ok) fn(&local, arg, bl * block, end);
      }
      if (local.oob || !ok) {
#pragma omp atomic write
        c->oob = 1;
      }
      ctx_free(&local);
    }
    return;
  }
#else
  (void)p;
  (void)nlane;
  (void)cost;
#endif
  fn(c, arg, 0, total);
}

/* Entries [begin, end) of a memo table. An entry whose computation read out of bounds is flagged, so the
 * error is reported only if the entry is used, as the tree walk would. */
static void memo_fill(eval_ctx *c, const void *arg, int64_t begin, int64_t end) {
  const creduce *r = arg;
  int oob = c->oob;
  for (int64_t e = begin; e < end; e++) {
    for (int k = 0; k < r->nfree; k++) c->iv[r->free_slot[k]] = r->free_lo[k] + e / r->free_stride[k] % r->free_ext[k];
    c->oob = 0;
    r->table[e] = reduce_direct(c, r);
    r->table_oob[e] = (unsigned char)c->oob;
  }
  c->oob = oob;
}

/* Elements [begin, end) of stmt->lhs in row-major order, last index fastest; lane reductions are computed
 * per row segment of up to LANES elements before the segment's elements. */
static void stmt_range(eval_ctx *c, const void *arg, int64_t begin, int64_t end) {
  const stmt_code *sc = arg;
  const kg_stmt *s = sc->s;
  const kg_tensor *t = s->lhs;
  int n = s->nidx;
  int64_t rest = begin;
  for (int d = n - 1; d >= 0; d--) {
    c->iv[s->idx[d]->id] = rest % t->shape[d];
    rest /= t->shape[d];
  }
  for (int64_t off = begin; off < end;) {
    int64_t nl = end - off;
    if (sc->nlane > 0) {
      int64_t j = c->iv[s->idx[n - 1]->id], left = t->shape[n - 1] - j;
      if (nl > left) nl = left;
      if (nl > LANES) nl = LANES;
      c->lane_j0 = j;
      for (int k = 0; k < sc->nlane; k++) reduce_lanes(c, sc->lanes[k], (int)nl);
    }
    for (int64_t e = 0; e < nl; e++, off++) {
      double v = RUN_F(sc->rhs);
      sc->out[off] = t->dtype == KG_DT_F32 ? v : kg_dtype_round(t->dtype, v);
      for (int d = n - 1; d >= 0; d--) {
        int id = s->idx[d]->id;
        if (++c->iv[id] < t->shape[d]) break;
        c->iv[id] = 0;
      }
    }
  }
}

/* Defines stmt->lhs over its whole shape: memo tables first (inner reductions before the ones using them),
 * then the elements. A statement reads only earlier tensors, so its elements are independent. */
static int eval_stmt(const kg_program *p, const eval_buf *buf, const kg_stmt *s) {
  assert(s->nidx == s->lhs->ndim && buf[s->lhs->id].val);
  kg_arena a;
  kg_arena_init(&a);
  compiler cp = {.a = &a, .p = p, .buf = buf};
  cp.enc_slot = KG_NEW_ARRAY(&a, int, p->n_ivars + s->nidx + 1);
  cp.enc_lo = KG_NEW_ARRAY(&a, int64_t, p->n_ivars + s->nidx + 1);
  cp.enc_ext = KG_NEW_ARRAY(&a, int64_t, p->n_ivars + s->nidx + 1);
  cp.mark = KG_NEW_ARRAY(&a, unsigned char, p->n_ivars + 1);
  stmt_code sc = {.s = s, .out = buf[s->lhs->id].val};
  compile_stmt(&cp, &sc);
  eval_ctx c;
  int oob = 1;
  if (ctx_init(&c, p, sc.nlane) == 0) {
    for (int k = 0; k < sc.nmemo; k++)
      run_items(&c, p, sc.nlane, sc.memo[k]->table_size, sc.memo[k]->cost, memo_fill, sc.memo[k]);
    run_items(&c, p, sc.nlane, kg_tensor_numel(s->lhs), sc.rhs->cost, stmt_range, &sc);
    oob = c.oob;
  }
  ctx_free(&c);
  kg_arena_free(&a);
  return oob;
}

/* Row-major strides of a tensor. */
static void buf_set_strides(eval_buf *b, const kg_tensor *t) {
  int64_t s = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    b->stride[d] = s;
    s *= t->shape[d];
  }
}

int kg_eval_reference(const kg_program *p, const float *const *inputs, double *const *outputs) {
  int nbuf = 0;
  for (int i = 0; i < p->ntensors; i++)
    if (p->tensors[i]->id + 1 > nbuf) nbuf = p->tensors[i]->id + 1;
  /* the buffer table and intermediates in one arena, freed at once */
  kg_arena a;
  kg_arena_init(&a);
  eval_buf *buf = KG_NEW_ARRAY(&a, eval_buf, nbuf + 1);
  for (int i = 0; i < p->ntensors; i++) buf_set_strides(&buf[p->tensors[i]->id], p->tensors[i]);
  for (int i = 0; i < p->ninputs; i++) buf[p->inputs[i]->id].in = inputs[i];
  for (int i = 0; i < p->noutputs; i++) buf[p->outputs[i]->id].val = outputs[i];
  /* intermediates are user-sized: malloc'ed, so that one that does not fit is -2, not an abort in the arena */
  double **temps = KG_NEW_ARRAY(&a, double *, p->def->nstmts + 1);
  int ntemps = 0, oom = 0;
  for (int k = 0; k < p->def->nstmts && !oom; k++) {
    const kg_tensor *t = p->def->stmts[k]->lhs;
    eval_buf *b = &buf[t->id];
    if (!b->val) {
      size_t n = (size_t)kg_tensor_numel(t);
      b->val = temps[ntemps++] = malloc((n ? n : 1) * sizeof(double));
      oom = b->val == NULL;
    }
  }
  int oob = 0;
  for (int k = 0; k < p->def->nstmts && !oom; k++)
    if (kg_tensor_numel(p->def->stmts[k]->lhs) > 0) oob |= eval_stmt(p, buf, p->def->stmts[k]);
  for (int i = 0; i < ntemps; i++) free(temps[i]);
  kg_arena_free(&a);
  return oom ? -2 : oob ? -1 : 0;
}
