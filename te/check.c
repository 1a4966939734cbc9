/* Checker: turns one parsed def into a checked program.
 *
 * Pass order (kg_check_def):
 *   1. declare: inputs and outputs become tensors; the sizes named in their shapes and in the statements'
 *      explicit shapes are registered.
 *   2. resolve, statement by statement: left-hand index variables, names in the right-hand side (index
 *      variable, size variable or tensor read), types, definition order of tensors (each output exactly once).
 *   3. bind: every size variable gets its -D value; every -D must name one.
 *   4. shapes of inputs and outputs.
 *   5. per statement: explicit or inferred shape, reduction ranges, bounds proved by interval arithmetic.
 * The first user error is reported through kg_diag_error and unwinds (longjmp) to kg_check_def.
 *
 * Decisions the language leaves open, taken here:
 *   - one namespace per def: a name is a tensor, a size variable or index variables, never two of these;
 *   - a bare name that is neither an index variable in scope nor a size variable of some shape becomes a size
 *     variable when -D binds it (a size used only as a value), else it is an unknown name;
 *   - size values are 0..2^31-1 (0 allows e.g. a padding of 0; a dimension must still be >= 1);
 *   - integer / and % (sizes, indices) round toward minus infinity, as the reference evaluator does;
 *   - an output's statement may repeat its shape (": f32[...]"), which must then match the signature;
 *   - indices are affine (no product of two index-dependent terms) and divide only by index-free terms;
 *   - a select branch whose narrowed ranges are empty can never run, and its reads are not checked.
 *
 * Requires: p->def set, p->arena holding the AST (the checker rewrites NAME nodes in place into IVAR/SIZE and
 * sets types; everything else it allocates comes from p->arena too). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "../base/intmath.h"
#include "../base/strbuf.h"
#include "te.h"

#define KG_MAX_DIM_EXTENT ((int64_t)2147483647)
#define KG_MAX_NUMEL ((int64_t)1 << 40)

/* ---- a small string map (names are looked up per read: keep large fuzzed programs linear) ---- */
typedef struct nmap_slot {
  const char *key;
  void *val;
} nmap_slot;
typedef struct nmap {
  nmap_slot *slots;
  size_t cap, n;
} nmap;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static void *nmap_get(const nmap *m, const char *key) {
  if (!m->cap) return NULL;
  for (size_t i = hash_str(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    if (!m->slots[i].key) return NULL;
    if (strcmp(m->slots[i].key, key) == 0) return m->slots[i].val;
  }
}

static void nmap_put(kg_arena *a, nmap *m, const char *key, void *val) {
  if (2 * (m->n + 1) > m->cap) {
    nmap old = *m;
    m->cap = old.cap ? 2 * old.cap : 64;
    m->slots = KG_NEW_ARRAY(a, nmap_slot, m->cap);
    m->n = 0;
    for (size_t i = 0; i < old.cap; i++)
      if (old.slots[i].key) nmap_put(a, m, old.slots[i].key, old.slots[i].val);
  }
  size_t i = hash_str(key) & (m->cap - 1);
  while (m->slots[i].key && strcmp(m->slots[i].key, key) != 0) i = (i + 1) & (m->cap - 1);
  if (!m->slots[i].key) m->n++;
  m->slots[i].key = key;
  m->slots[i].val = val;
}

typedef struct ival {
  int64_t lo, hi;
} ival;

typedef struct undo {
  int id;
  ival old;
} undo;

typedef struct checker {
  kg_program *p;
  kg_def *def;
  kg_arena *a;
  kg_diag *diag;
  kg_arena *da;
  jmp_buf jb;
  const kg_binding *bind;
  int nbind;
  nmap tensors, sizes; /* name -> kg_tensor*, name -> (size index + 1) */
  int tensors_cap, sizes_cap;
  kg_ivar **scope; /* left-hand indices of the current statement, then the enclosing reduction variables */
  int nscope, scope_cap;
  kg_ivar **ivars; /* every index variable of the def, by id */
  int ivars_cap;
  kg_tensor **parsed_lhs; /* per statement: the tensor the parser made (holds an output's explicit shape) */
  int cur_stmt;
  kg_expr *top_reduce; /* the current statement's rhs when it is a reduction */
  ival *rng;           /* per ivar id, while proving bounds */
  undo *undo;
  int nundo, undo_cap;
  int unnarrowed; /* > 0 inside a nested reduction whose enclosing selects' narrowing was undone */
} checker;

static _Noreturn void fail(checker *c, kg_pos pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void fail(checker *c, kg_pos pos, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  kg_diag_error(c->diag, c->da, pos, "%s", msg);
  longjmp(c->jb, 1);
}

static kg_pos no_pos(void) {
  kg_pos p;
  memset(&p, 0, sizeof p);
  return p;
}

/* An expression as text for a message (arena-allocated, cut to a readable length). */
static const char *expr_text(checker *c, const kg_expr *e) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_expr_print(&b, c->p, e);
  char *s = kg_arena_strndup(c->a, b.s ? b.s : "", b.len > 200 ? 200 : b.len);
  kg_strbuf_free(&b);
  return s;
}

/* ---- saturating interval arithmetic: an overflow saturates, and the saturated bound then fails the proof ---- */
static int64_t sat_add(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_add_overflow(x, y, &r)) return y > 0 ? INT64_MAX : INT64_MIN;
  return r;
}
static int64_t sat_sub(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_sub_overflow(x, y, &r)) return y < 0 ? INT64_MAX : INT64_MIN;
  return r;
}
static int64_t sat_mul(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_mul_overflow(x, y, &r)) return ((x < 0) != (y < 0)) ? INT64_MIN : INT64_MAX;
  return r;
}
static int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
/* Integer / and % of indices and sizes round toward minus infinity (floor), as the reference evaluator does:
 * (i - 1) % N wraps around. Requires y != 0 and not (x == INT64_MIN && y == -1). */
static int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }

/* ---- sizes ---- */

static int size_index(checker *c, const char *name) {
  void *v = nmap_get(&c->sizes, name);
  return v ? (int)((intptr_t)v - 1) : -1;
}

static int size_register(checker *c, const char *name, kg_pos pos) {
  int i = size_index(c, name);
  if (i >= 0) return i;
  kg_size_var sv;
  memset(&sv, 0, sizeof sv);
  sv.name = name;
  sv.pos = pos;
  KG_PUSH(c->a, c->p->sizes, c->p->nsizes, c->sizes_cap, sv);
  nmap_put(c->a, &c->sizes, name, (void *)(intptr_t)c->p->nsizes);
  return c->p->nsizes - 1;
}

static kg_ivar *scope_find(checker *c, const char *name) {
  for (int i = c->nscope - 1; i >= 0; i--)
    if (strcmp(c->scope[i]->name, name) == 0) return c->scope[i];
  return NULL;
}

/* A size expression (shape dimension or range bound): NAMEs are size variables. */
static void resolve_size(checker *c, kg_expr *e) {
  e->ty = KG_TY_INT;
  switch (e->kind) {
  case KG_EXPR_NUM: return;
  case KG_EXPR_NAME:
    if (scope_find(c, e->var.name))
      fail(c, e->pos, "'%s' is an index variable; a range bound must be a size expression (constants and size variables)", e->var.name);
    e->var.size = size_register(c, e->var.name, e->pos);
    e->kind = KG_EXPR_SIZE;
    return;
  case KG_EXPR_SIZE: return;
  case KG_EXPR_BINARY:
    resolve_size(c, e->op.a);
    resolve_size(c, e->op.b);
    return;
  default: fail(c, e->pos, "not a size expression");
  }
}

/* Value of a size expression after binding (/ and % round toward minus infinity, as in indices). */
static int64_t eval_size(checker *c, const kg_expr *e) {
  switch (e->kind) {
  case KG_EXPR_NUM: return e->num.i;
  case KG_EXPR_SIZE: return c->p->sizes[e->var.size].value;
  case KG_EXPR_BINARY: {
    int64_t x = eval_size(c, e->op.a), y = eval_size(c, e->op.b), r = 0;
    int ovf = 0;
    switch (e->op.op) {
    case KG_OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
    case KG_OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
    case KG_OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
    case KG_OP_DIV:
    case KG_OP_MOD:
      if (y == 0) fail(c, e->pos, "division by zero in the size expression %s", expr_text(c, e));
      if (x == INT64_MIN && y == -1) ovf = 1;
      else r = e->op.op == KG_OP_DIV ? kg_int_floordiv(x, y) : kg_int_floormod(x, y);
      break;
    default: fail(c, e->pos, "not a size expression");
    }
    if (ovf) fail(c, e->pos, "the size expression %s overflows", expr_text(c, e));
    return r;
  }
  default: fail(c, e->pos, "not a size expression");
  }
}

/* Checks a tensor's bound shape: each dimension in [1, 2^31-1], at most 2^40 elements. */
static void check_shape(checker *c, kg_tensor *t, kg_pos pos) {
  int64_t numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    kg_pos dp = t->shape_expr[d] ? t->shape_expr[d]->pos : pos;
    if (t->shape[d] < 1)
      fail(c, dp, "dimension %d of '%s' is %lld: dimensions must be at least 1", d, t->name, (long long)t->shape[d]);
    if (t->shape[d] > KG_MAX_DIM_EXTENT)
      fail(c, dp, "dimension %d of '%s' is %lld, more than 2^31-1", d, t->name, (long long)t->shape[d]);
    numel *= t->shape[d]; /* cannot overflow: numel <= 2^40 and shape < 2^31 */
    if (numel > KG_MAX_NUMEL) fail(c, pos, "'%s' has more than 2^40 elements", t->name);
  }
}

/* ---- pass 1: declarations ---- */

static void add_tensor(checker *c, kg_tensor *t) {
  t->id = c->p->ntensors;
  KG_PUSH(c->a, c->p->tensors, c->p->ntensors, c->tensors_cap, t);
  nmap_put(c->a, &c->tensors, t->name, t);
}

static kg_tensor *declare_param(checker *c, kg_param *prm, kg_tensor_kind kind) {
  kg_tensor *old = nmap_get(&c->tensors, prm->name);
  if (old) fail(c, prm->pos, "parameter '%s' is declared twice (first at line %d)", prm->name, old->pos.line);
  kg_tensor *t = KG_NEW(c->a, kg_tensor);
  t->name = prm->name;
  t->pos = prm->pos;
  t->kind = kind;
  t->dtype = prm->dtype;
  t->ndim = prm->ndim;
  for (int d = 0; d < prm->ndim; d++) {
    resolve_size(c, prm->dims[d]);
    t->shape_expr[d] = prm->dims[d];
  }
  add_tensor(c, t);
  return t;
}

/* ---- pass 2: names and types ---- */

static int has_ivar(const kg_expr *e) {
  switch (e->kind) {
  case KG_EXPR_IVAR: return 1;
  case KG_EXPR_UNARY: return has_ivar(e->op.a);
  case KG_EXPR_BINARY: return has_ivar(e->op.a) || has_ivar(e->op.b);
  case KG_EXPR_READ:
    for (int i = 0; i < e->read.n; i++)
      if (has_ivar(e->read.idx[i])) return 1;
    return 0;
  case KG_EXPR_CALL:
    for (int i = 0; i < e->call.n; i++)
      if (has_ivar(e->call.args[i])) return 1;
    return 0;
  case KG_EXPR_REDUCE: return has_ivar(e->reduce.body);
  default: return 0;
  }
}

static void want_value(checker *c, const kg_expr *e) {
  if (e->ty == KG_TY_BOOL) fail(c, e->pos, "a comparison is not a value; use select(c, 1.0, 0.0)");
}

static void want_bool(checker *c, const kg_expr *e, const char *what) {
  if (e->ty != KG_TY_BOOL) fail(c, e->pos, "%s needs a condition (a comparison), not a value", what);
}

static void new_ivar_id(checker *c, kg_ivar *iv) {
  iv->id = c->p->n_ivars;
  KG_PUSH(c->a, c->ivars, c->p->n_ivars, c->ivars_cap, iv);
}

static void scope_push(checker *c, kg_ivar *iv) { KG_PUSH(c->a, c->scope, c->nscope, c->scope_cap, iv); }

/* The statement (this one or a later one) that defines a tensor named name, or -1. */
static int later_definition(checker *c, const char *name) {
  for (int s = c->cur_stmt; s < c->def->nstmts; s++)
    if (strcmp(c->parsed_lhs[s]->name, name) == 0) return s;
  return -1;
}

static void resolve(checker *c, kg_expr *e, int in_index);

static void resolve_read(checker *c, kg_expr *e) {
  kg_tensor *t = nmap_get(&c->tensors, e->read.name);
  if (!t || (t->kind == KG_TENSOR_OUTPUT && !t->stmt)) {
    int s = later_definition(c, e->read.name);
    if (s == c->cur_stmt) fail(c, e->pos, "'%s' is read in its own definition", e->read.name);
    if (s >= 0)
      fail(c, e->pos, "tensor '%s' is read before it is defined (at line %d)", e->read.name, c->def->stmts[s]->pos.line);
    if (t) fail(c, e->pos, "output '%s' is read but never defined", e->read.name);
    if (scope_find(c, e->read.name) || size_index(c, e->read.name) >= 0)
      fail(c, e->pos, "'%s' is not a tensor and cannot be read with [...]", e->read.name);
    fail(c, e->pos, "unknown tensor '%s'", e->read.name);
  }
  if (e->read.n != t->ndim)
    fail(c, e->pos, "'%s' has %d dimension%s but is read with %d ind%s", t->name, t->ndim, t->ndim == 1 ? "" : "s",
         e->read.n, e->read.n == 1 ? "ex" : "ices");
  e->read.tensor = t;
  for (int i = 0; i < e->read.n; i++) {
    kg_expr *x = e->read.idx[i];
    resolve(c, x, 1);
    if (x->ty != KG_TY_INT)
      fail(c, x->pos, "index %d of '%s' is not an integer expression (indices combine index variables, size variables and integer constants)",
           i, t->name);
  }
  e->ty = KG_TY_F32;
}

static void resolve_reduce(checker *c, kg_expr *e) {
  int base = c->nscope;
  for (int r = 0; r < e->reduce.nrv; r++) {
    kg_ivar *iv = e->reduce.rv[r];
    kg_ivar *old = scope_find(c, iv->name);
    if (old)
      fail(c, iv->pos, "reduction variable '%s' shadows the %s '%s' (line %d, column %d)", iv->name,
           old->is_reduce ? "reduction variable" : "index variable", old->name, old->pos.line, old->pos.col);
    if (iv->lo_expr) {
      resolve_size(c, iv->lo_expr);
      resolve_size(c, iv->hi_expr);
    }
    iv->is_reduce = 1;
    new_ivar_id(c, iv);
    scope_push(c, iv);
  }
  resolve(c, e->reduce.body, 0);
  want_value(c, e->reduce.body);
  if (e != c->top_reduce) {
    /* Extracted into a tensor indexed by the enclosing variables it uses (stages.c): at most KG_MAX_DIMS. */
    int nfree = 0;
    for (int i = 0; i < base; i++) nfree += kg_expr_uses_ivar(e->reduce.body, c->scope[i]);
    if (nfree > KG_MAX_DIMS)
      fail(c, e->pos, "this reduction depends on %d enclosing index variables; at most %d are supported", nfree, KG_MAX_DIMS);
  }
  c->nscope = base;
  e->ty = KG_TY_F32;
}

/* Resolves names and sets types, bottom-up. in_index: inside a read's index list, where / and % of integers
 * stay integer and expressions must be affine. */
static void resolve(checker *c, kg_expr *e, int in_index) {
  switch (e->kind) {
  case KG_EXPR_NUM: e->ty = e->num.is_int ? KG_TY_INT : KG_TY_F32; return;
  case KG_EXPR_NAME: {
    const char *name = e->var.name;
    kg_ivar *iv = scope_find(c, name);
    if (iv) {
      e->kind = KG_EXPR_IVAR;
      e->var.iv = iv;
      e->ty = KG_TY_INT;
      return;
    }
    if (nmap_get(&c->tensors, name)) fail(c, e->pos, "'%s' is a tensor: read it with indices, %s[...]", name, name);
    int si = size_index(c, name);
    if (si < 0) {
      for (int b = 0; b < c->nbind; b++)
        if (c->bind[b].name && strcmp(c->bind[b].name, name) == 0) si = size_register(c, name, e->pos);
    }
    if (si < 0 && later_definition(c, name) >= 0)
      fail(c, e->pos, "'%s' is a tensor: read it with indices, %s[...]", name, name);
    if (si < 0)
      fail(c, e->pos, "unknown name '%s' (not an index variable here; a size variable used only as a value must be bound with -D %s=VALUE)",
           name, name);
    e->kind = KG_EXPR_SIZE;
    e->var.size = si;
    e->ty = KG_TY_INT;
    return;
  }
  case KG_EXPR_IVAR:
  case KG_EXPR_SIZE: e->ty = KG_TY_INT; return;
  case KG_EXPR_READ: resolve_read(c, e); return;
  case KG_EXPR_UNARY:
    resolve(c, e->op.a, in_index);
    if (e->op.op == KG_OP_NOT) {
      want_bool(c, e->op.a, "'!'");
      e->ty = KG_TY_BOOL;
    } else {
      want_value(c, e->op.a);
      e->ty = e->op.a->ty;
    }
    return;
  case KG_EXPR_BINARY: {
    kg_expr *a = e->op.a, *b = e->op.b;
    resolve(c, a, in_index);
    resolve(c, b, in_index);
    switch (e->op.op) {
    case KG_OP_AND:
    case KG_OP_OR:
      want_bool(c, a, e->op.op == KG_OP_AND ? "'&&'" : "'||'");
      want_bool(c, b, e->op.op == KG_OP_AND ? "'&&'" : "'||'");
      e->ty = KG_TY_BOOL;
      return;
    case KG_OP_LT: case KG_OP_LE: case KG_OP_GT: case KG_OP_GE: case KG_OP_EQ: case KG_OP_NE:
      want_value(c, a);
      want_value(c, b);
      e->ty = KG_TY_BOOL;
      return;
    default: break;
    }
    want_value(c, a);
    want_value(c, b);
    int both_int = a->ty == KG_TY_INT && b->ty == KG_TY_INT;
    if (e->op.op == KG_OP_DIV || e->op.op == KG_OP_MOD) both_int = both_int && in_index;
    e->ty = both_int ? KG_TY_INT : KG_TY_F32;
    if (in_index && both_int) {
      if (e->op.op == KG_OP_MUL && has_ivar(a) && has_ivar(b))
        fail(c, e->pos, "index expression %s is not affine: it multiplies two index variables", expr_text(c, e));
      if ((e->op.op == KG_OP_DIV || e->op.op == KG_OP_MOD) && has_ivar(b))
        fail(c, e->pos, "an index can only be divided by a constant or a size variable, not by %s", expr_text(c, b));
    }
    return;
  }
  case KG_EXPR_CALL:
    for (int i = 0; i < e->call.n; i++) resolve(c, e->call.args[i], 0);
    for (int i = 0; i < e->call.n; i++) {
      if (e->call.fn == KG_FN_SELECT && i == 0) want_bool(c, e->call.args[0], "the first argument of select");
      else want_value(c, e->call.args[i]);
    }
    e->ty = KG_TY_F32;
    return;
  case KG_EXPR_REDUCE: resolve_reduce(c, e); return;
  }
}

static void resolve_stmt(checker *c, int si) {
  kg_stmt *s = c->def->stmts[si];
  kg_tensor *pt = c->parsed_lhs[si];
  c->cur_stmt = si;
  c->nscope = 0;
  for (int i = 0; i < s->nidx; i++) {
    kg_ivar *iv = s->idx[i];
    for (int j = 0; j < i; j++)
      if (strcmp(s->idx[j]->name, iv->name) == 0)
        fail(c, iv->pos, "index '%s' appears twice on the left of '='", iv->name);
    iv->is_reduce = 0;
    new_ivar_id(c, iv);
    scope_push(c, iv);
  }
  if (pt->ndim && s->has_shape)
    for (int d = 0; d < pt->ndim; d++) resolve_size(c, pt->shape_expr[d]);
  c->top_reduce = s->rhs->kind == KG_EXPR_REDUCE ? s->rhs : NULL;
  resolve(c, s->rhs, 0);
  want_value(c, s->rhs);

  /* Defined only now, so that reading the tensor in its own right-hand side is an error. */
  kg_tensor *t = nmap_get(&c->tensors, pt->name);
  if (t) {
    if (t->kind == KG_TENSOR_INPUT) fail(c, pt->pos, "cannot assign to the input '%s'", t->name);
    if (t->stmt)
      fail(c, pt->pos, "tensor '%s' is defined twice (first at line %d)", t->name, t->stmt->pos.line);
    if (t->ndim != s->nidx)
      fail(c, pt->pos, "'%s' has %d dimension%s but is defined with %d ind%s", t->name, t->ndim,
           t->ndim == 1 ? "" : "s", s->nidx, s->nidx == 1 ? "ex" : "ices");
    if (s->has_shape && pt->dtype != t->dtype)
      fail(c, pt->pos, "'%s' is declared %s here but %s in the signature", t->name, kg_dtype_names[pt->dtype],
           kg_dtype_names[t->dtype]);
    s->lhs = t; /* the output tensor; its explicit shape (if any) stays in parsed_lhs */
  } else {
    t = pt;
    t->kind = KG_TENSOR_TEMP;
    add_tensor(c, t);
  }
  t->stmt = s;
}

/* ---- pass 3: bindings ---- */

static void bind_sizes(checker *c) {
  kg_program *p = c->p;
  for (int i = 0; i < p->nsizes; i++) {
    kg_size_var *sv = &p->sizes[i];
    for (int b = 0; b < c->nbind; b++) {
      if (!c->bind[b].name || strcmp(c->bind[b].name, sv->name) != 0) continue;
      if (sv->bound) fail(c, no_pos(), "-D %s is given twice", sv->name);
      sv->value = c->bind[b].value;
      sv->bound = 1;
    }
    if (!sv->bound) fail(c, sv->pos, "size variable '%s' is not bound (pass -D %s=VALUE)", sv->name, sv->name);
    /* One message for every value out of range, at the signature: a size that is a whole dimension of a
     * parameter is at least 1 (so 0 and -1 read alike, not as a bad dimension and a bad binding); one used only
     * inside size expressions (a padding P in H + 2 * P) may be 0. */
    kg_pos at = sv->pos;
    int64_t lo = 0;
    for (int t = p->ninputs + p->noutputs - 1; t >= 0; t--)
      for (int d = p->tensors[t]->ndim - 1; d >= 0; d--) {
        const kg_expr *e = p->tensors[t]->shape_expr[d];
        if (e && e->kind == KG_EXPR_SIZE && e->var.size == i) lo = 1, at = e->pos;
      }
    if (sv->value < lo || sv->value > KG_MAX_DIM_EXTENT)
      fail(c, at, "-D %s=%lld: size %s must be %s %lld (got %lld)", sv->name, (long long)sv->value, sv->name,
           sv->value < lo ? "at least" : "at most", (long long)(sv->value < lo ? lo : KG_MAX_DIM_EXTENT),
           (long long)sv->value);
  }
  for (int b = 0; b < c->nbind; b++)
    if (!c->bind[b].name || size_index(c, c->bind[b].name) < 0)
      fail(c, no_pos(), "-D %s: the def '%s' has no size variable '%s'", c->bind[b].name ? c->bind[b].name : "(null)",
           c->def->name, c->bind[b].name ? c->bind[b].name : "(null)");
}

/* Names live in one namespace per def: a name is a tensor, a size variable or index variables, never two. */
static void check_name_clashes(checker *c) {
  kg_program *p = c->p;
  for (int i = 0; i < p->nsizes; i++) {
    kg_tensor *t = nmap_get(&c->tensors, p->sizes[i].name);
    if (t) fail(c, p->sizes[i].pos, "'%s' names both a tensor (line %d) and a size variable", t->name, t->pos.line);
  }
  for (int i = 0; i < p->n_ivars; i++) {
    kg_ivar *iv = c->ivars[i];
    if (size_index(c, iv->name) >= 0)
      fail(c, iv->pos, "'%s' is a size variable and cannot be an index variable", iv->name);
    if (nmap_get(&c->tensors, iv->name)) fail(c, iv->pos, "'%s' is a tensor and cannot be an index variable", iv->name);
  }
}

/* ---- pass 5: ranges, shapes and bounds ---- */

/* Extent of the dimension in which iv appears as a bare index, over every read of e (TC's range rule):
 * the minimum for left-hand indices; reduction variables require agreement. Returns -1 when unused bare. */
typedef struct bare_use {
  int64_t extent;
  const kg_expr *read;
  int dim;
} bare_use;

static void find_bare(checker *c, const kg_expr *e, const kg_ivar *iv, bare_use *u, int must_agree) {
  switch (e->kind) {
  case KG_EXPR_READ:
    for (int d = 0; d < e->read.n; d++) {
      const kg_expr *x = e->read.idx[d];
      if (x->kind != KG_EXPR_IVAR || x->var.iv != iv) continue;
      int64_t ext = e->read.tensor->shape[d];
      if (u->read && must_agree && ext != u->extent)
        fail(c, e->pos, "reduction variable '%s' ranges over %lld in %s (dimension %d) but over %lld in %s (dimension %d)",
             iv->name, (long long)u->extent, expr_text(c, u->read), u->dim, (long long)ext, expr_text(c, e), d);
      if (!u->read || ext < u->extent) {
        u->extent = ext;
        u->read = e;
        u->dim = d;
      }
    }
    return; /* not into the indices: a bare use is an index itself */
  default:
    for (int i = 0; i < kg_expr_nchildren(e); i++) find_bare(c, *kg_expr_child((kg_expr *)e, i), iv, u, must_agree);
    return;
  }
}

static void reduce_ranges(checker *c, kg_expr *e) {
  switch (e->kind) {
  case KG_EXPR_UNARY: reduce_ranges(c, e->op.a); return;
  case KG_EXPR_BINARY:
    reduce_ranges(c, e->op.a);
    reduce_ranges(c, e->op.b);
    return;
  case KG_EXPR_CALL:
    for (int i = 0; i < e->call.n; i++) reduce_ranges(c, e->call.args[i]);
    return;
  case KG_EXPR_READ: return; /* indices hold no reductions (they are integer expressions) */
  case KG_EXPR_REDUCE:
    for (int r = 0; r < e->reduce.nrv; r++) {
      kg_ivar *iv = e->reduce.rv[r];
      if (iv->lo_expr) {
        int64_t lo = eval_size(c, iv->lo_expr), hi = eval_size(c, iv->hi_expr);
        if (lo >= hi)
          fail(c, iv->pos, "the range of '%s' is empty: %lld..%lld (the range lo..hi is half-open and needs lo < hi)",
               iv->name, (long long)lo, (long long)hi);
        if (hi - lo > KG_MAX_DIM_EXTENT || lo < -KG_MAX_DIM_EXTENT || hi > KG_MAX_DIM_EXTENT)
          fail(c, iv->pos, "the range of '%s' (%lld..%lld) is too large", iv->name, (long long)lo, (long long)hi);
        iv->lo = lo;
        iv->extent = hi - lo;
      } else {
        bare_use u = {0, NULL, 0};
        find_bare(c, e->reduce.body, iv, &u, 1);
        if (!u.read)
          fail(c, iv->pos, "cannot infer the range of reduction variable '%s': use it as a whole index of a read, or write %s in lo..hi",
               iv->name, iv->name);
        iv->lo = 0;
        iv->extent = u.extent;
      }
      ival rr = {iv->lo, iv->lo + iv->extent - 1};
      c->rng[iv->id] = rr;
    }
    reduce_ranges(c, e->reduce.body);
    return;
  default: return;
  }
}

static ival ival_of(checker *c, const kg_expr *e);

static ival ival_bin(checker *c, const kg_expr *e, ival x, ival y) {
  ival r;
  switch (e->op.op) {
  case KG_OP_ADD: r.lo = sat_add(x.lo, y.lo); r.hi = sat_add(x.hi, y.hi); return r;
  case KG_OP_SUB: r.lo = sat_sub(x.lo, y.hi); r.hi = sat_sub(x.hi, y.lo); return r;
  case KG_OP_MUL: {
    int64_t p1 = sat_mul(x.lo, y.lo), p2 = sat_mul(x.lo, y.hi), p3 = sat_mul(x.hi, y.lo), p4 = sat_mul(x.hi, y.hi);
    r.lo = min64(min64(p1, p2), min64(p3, p4));
    r.hi = max64(max64(p1, p2), max64(p3, p4));
    return r;
  }
  case KG_OP_DIV:
  case KG_OP_MOD:
    if (y.lo <= 0)
      fail(c, e->op.b->pos, "index divisor %s may be zero or negative (it ranges over [%lld, %lld])", expr_text(c, e->op.b),
           (long long)y.lo, (long long)y.hi);
    if (e->op.op == KG_OP_DIV && (x.lo == INT64_MIN || x.hi == INT64_MAX)) {
      r.lo = INT64_MIN; /* a saturated dividend stays unbounded: dividing must not make it look finite */
      r.hi = INT64_MAX;
    } else if (e->op.op == KG_OP_DIV) {
      /* Floor division by a positive divisor is monotone in each argument: the corners bound it. */
      int64_t q1 = kg_int_floordiv(x.lo, y.lo), q2 = kg_int_floordiv(x.lo, y.hi), q3 = kg_int_floordiv(x.hi, y.lo), q4 = kg_int_floordiv(x.hi, y.hi);
      r.lo = min64(min64(q1, q2), min64(q3, q4));
      r.hi = max64(max64(q1, q2), max64(q3, q4));
    } else if (y.lo == y.hi && kg_int_floordiv(x.lo, y.lo) == kg_int_floordiv(x.hi, y.lo)) {
      r.lo = kg_int_floormod(x.lo, y.lo); /* no wrap-around inside [x.lo, x.hi] */
      r.hi = kg_int_floormod(x.hi, y.lo);
    } else {
      r.lo = 0; /* floor modulo by a positive divisor lies in [0, divisor) */
      r.hi = y.hi - 1;
      if (x.lo >= 0) r.hi = min64(r.hi, x.hi);
    }
    return r;
  default: fail(c, e->pos, "not an integer expression");
  }
}

/* ---- linear forms: an INT expression as k + sum(coef * var) + sum(coef * atom) ----
 * Size variables are constants once bound; an atom is a / or % subterm over index variables, whose interval is
 * computed recursively (its operands are linear forms too). Collecting like terms before taking intervals makes
 * i - i exactly 0 rather than [-(N-1), N-1]. Atoms are compared by identity (never cancelled): that only loses
 * precision. Resolution guarantees affinity (no product of two index-dependent terms); should one still appear,
 * it becomes an atom bounded by interval multiplication, which is sound. */
typedef struct lterm {
  int id;            /* ivar id, or -1 for an atom */
  const kg_expr *at; /* the atom's node */
  ival atr;          /* the atom's interval */
  int64_t coef;
} lterm;
typedef struct lin {
  int64_t k;
  lterm *t;
  int n, cap;
  int ovf; /* a coefficient or the constant overflowed: the form bounds nothing */
} lin;

static void lin_add_term(checker *c, lin *l, int id, const kg_expr *at, ival atr, int64_t coef) {
  for (int i = 0; i < l->n; i++)
    if (l->t[i].id == id && l->t[i].at == at) {
      if (__builtin_add_overflow(l->t[i].coef, coef, &l->t[i].coef)) l->ovf = 1;
      return;
    }
  lterm t = {id, at, atr, coef};
  KG_PUSH(c->a, l->t, l->n, l->cap, t);
}

static ival lin_ival(const checker *c, const lin *l);

/* Adds s * e to l. */
static void lin_acc(checker *c, lin *l, const kg_expr *e, int64_t s) {
  ival none = {0, 0};
  int64_t v;
  switch (e->kind) {
  case KG_EXPR_NUM:
  case KG_EXPR_SIZE:
    v = e->kind == KG_EXPR_NUM ? e->num.i : c->p->sizes[e->var.size].value;
    if (__builtin_mul_overflow(v, s, &v) || __builtin_add_overflow(l->k, v, &l->k)) l->ovf = 1;
    return;
  case KG_EXPR_IVAR: lin_add_term(c, l, e->var.iv->id, NULL, none, s); return;
  case KG_EXPR_UNARY:
    if (s == INT64_MIN) l->ovf = 1;
    else lin_acc(c, l, e->op.a, -s);
    return;
  case KG_EXPR_BINARY: break;
  default: fail(c, e->pos, "not an integer expression");
  }
  kg_op op = e->op.op;
  if (op == KG_OP_ADD || op == KG_OP_SUB) {
    lin_acc(c, l, e->op.a, s);
    if (op == KG_OP_SUB && s == INT64_MIN) l->ovf = 1;
    else lin_acc(c, l, e->op.b, op == KG_OP_SUB ? -s : s);
    return;
  }
  lin x = {0, NULL, 0, 0, 0}, y = {0, NULL, 0, 0, 0};
  lin_acc(c, &x, e->op.a, 1);
  lin_acc(c, &y, e->op.b, 1);
  int xc = !x.ovf, yc = !y.ovf; /* constant: no term with a nonzero coefficient */
  for (int i = 0; i < x.n; i++) xc = xc && x.t[i].coef == 0;
  for (int i = 0; i < y.n; i++) yc = yc && y.t[i].coef == 0;
  if (op == KG_OP_MUL && (xc || yc)) {
    const lin *var = xc ? &y : &x;
    int64_t f = xc ? x.k : y.k, fs;
    if (__builtin_mul_overflow(f, s, &fs) || var->ovf) {
      l->ovf = 1;
      return;
    }
    if (__builtin_mul_overflow(var->k, fs, &v) || __builtin_add_overflow(l->k, v, &l->k)) l->ovf = 1;
    for (int i = 0; i < var->n; i++) {
      if (__builtin_mul_overflow(var->t[i].coef, fs, &v)) l->ovf = 1;
      else lin_add_term(c, l, var->t[i].id, var->t[i].at, var->t[i].atr, v);
    }
    return;
  }
  ival r = ival_bin(c, e, lin_ival(c, &x), lin_ival(c, &y)); /* reports a divisor that may be <= 0 */
  if (r.lo == r.hi && r.lo != INT64_MIN && r.hi != INT64_MAX) {
    if (__builtin_mul_overflow(r.lo, s, &v) || __builtin_add_overflow(l->k, v, &l->k)) l->ovf = 1;
    return;
  }
  lin_add_term(c, l, -1, e, r, s);
}

/* x + y where an operand at an extreme (a saturated bound) keeps the sum there: adding to a saturated bound
 * must not bring it back to a finite-looking value. */
static int64_t sticky_add(int64_t x, int64_t y) {
  if (x == INT64_MIN || y == INT64_MIN) return INT64_MIN;
  if (x == INT64_MAX || y == INT64_MAX) return INT64_MAX;
  return sat_add(x, y);
}

/* Interval of l without the term skip (-1: none); saturated ({INT64_MIN, INT64_MAX}) when l overflowed. */
static ival lin_ival_skip(const checker *c, const lin *l, int skip) {
  ival r = {l->k, l->k};
  if (l->ovf) {
    r.lo = INT64_MIN, r.hi = INT64_MAX;
    return r;
  }
  for (int i = 0; i < l->n; i++) {
    if (i == skip || l->t[i].coef == 0) continue;
    ival x = l->t[i].id >= 0 ? c->rng[l->t[i].id] : l->t[i].atr;
    int64_t a = l->t[i].coef;
    int64_t p = sat_mul(a, x.lo), q = sat_mul(a, x.hi);
    if (x.lo == INT64_MIN || x.hi == INT64_MAX) p = INT64_MIN, q = INT64_MAX; /* a saturated atom bounds nothing */
    r.lo = sticky_add(r.lo, min64(p, q));
    r.hi = sticky_add(r.hi, max64(p, q));
  }
  return r;
}
static ival lin_ival(const checker *c, const lin *l) { return lin_ival_skip(c, l, -1); }

static lin lin_of(checker *c, const kg_expr *e) {
  lin l = {0, NULL, 0, 0, 0};
  lin_acc(c, &l, e, 1);
  return l;
}

/* Range of an integer (INT-typed) expression under the current variable ranges. */
static ival ival_of(checker *c, const kg_expr *e) {
  lin l = lin_of(c, e);
  return lin_ival(c, &l);
}

static void set_range(checker *c, int id, ival r) {
  undo u = {id, c->rng[id]};
  KG_PUSH(c->a, c->undo, c->nundo, c->undo_cap, u);
  c->rng[id] = r;
}

static int64_t ceil_div(int64_t x, int64_t y) { return -kg_int_floordiv(-x, y); } /* requires x > INT64_MIN */

static kg_op negate_cmp(kg_op op) {
  switch (op) {
  case KG_OP_LT: return KG_OP_GE;
  case KG_OP_GE: return KG_OP_LT;
  case KG_OP_LE: return KG_OP_GT;
  case KG_OP_GT: return KG_OP_LE;
  case KG_OP_EQ: return KG_OP_NE;
  case KG_OP_NE: return KG_OP_EQ;
  default: return op;
  }
}

/* Knowing "l OP 0" holds, narrows every index variable of l: for a term a * v, with the rest of l in R,
 * a * v OP -r for some r in R. Each bound is taken only when the side of R it uses is not saturated. */
static void narrow_lin(checker *c, const lin *l, kg_op op) {
  if (l->ovf) return;
  for (int i = 0; i < l->n; i++) {
    const lterm *t = &l->t[i];
    int64_t a = t->coef;
    if (t->id < 0 || a == 0 || a == INT64_MIN) continue;
    ival R = lin_ival_skip(c, l, i), r = c->rng[t->id];
    int lo_ok = R.lo > INT64_MIN + 1 && R.lo < INT64_MAX, hi_ok = R.hi < INT64_MAX && R.hi > INT64_MIN + 1;
    /* a * v <= U and a * v >= L, when known */
    int has_u = 0, has_l = 0;
    int64_t U = 0, L = 0;
    if ((op == KG_OP_LT || op == KG_OP_LE || op == KG_OP_EQ) && lo_ok) has_u = 1, U = -R.lo - (op == KG_OP_LT);
    if ((op == KG_OP_GT || op == KG_OP_GE || op == KG_OP_EQ) && hi_ok) has_l = 1, L = -R.hi + (op == KG_OP_GT);
    if (has_u) {
      if (a > 0) r.hi = min64(r.hi, kg_int_floordiv(U, a));
      else r.lo = max64(r.lo, ceil_div(U, a));
    }
    if (has_l) {
      if (a > 0) r.lo = max64(r.lo, ceil_div(L, a));
      else r.hi = min64(r.hi, kg_int_floordiv(L, a));
    }
    if (op == KG_OP_NE && R.lo == R.hi && lo_ok && kg_int_floormod(-R.lo, a) == 0) {
      int64_t x = -R.lo / a; /* the one value v cannot take: trims an end of v's range */
      if (x == r.lo) r.lo = sat_add(r.lo, 1);
      else if (x == r.hi) r.hi = sat_sub(r.hi, 1);
    }
    if (r.lo != c->rng[t->id].lo || r.hi != c->rng[t->id].hi) set_range(c, t->id, r);
  }
}

/* Narrows variable ranges by cond (neg: by !cond), assumed true. Conjunctions narrow conjunct by conjunct;
 * '!' is pushed through comparisons and De Morgan's laws; a disjunction narrows nothing (that is sound). */
static void narrow(checker *c, const kg_expr *cond, int neg) {
  if (cond->kind == KG_EXPR_UNARY && cond->op.op == KG_OP_NOT) {
    narrow(c, cond->op.a, !neg);
    return;
  }
  if (cond->kind != KG_EXPR_BINARY) return;
  kg_op op = cond->op.op;
  if ((op == KG_OP_AND && !neg) || (op == KG_OP_OR && neg)) {
    narrow(c, cond->op.a, neg);
    narrow(c, cond->op.b, neg);
    return;
  }
  if (op != KG_OP_LT && op != KG_OP_LE && op != KG_OP_GT && op != KG_OP_GE && op != KG_OP_EQ && op != KG_OP_NE) return;
  const kg_expr *a = cond->op.a, *b = cond->op.b;
  if (a->ty != KG_TY_INT || b->ty != KG_TY_INT) return;
  if (neg) op = negate_cmp(op);
  lin l = lin_of(c, a); /* a - b OP 0 */
  lin_acc(c, &l, b, -1);
  narrow_lin(c, &l, op);
}

/* Runs prove_bounds on a select branch under cond (neg: !cond). A branch whose narrowed ranges are empty can
 * never run: its reads are not checked. */
static void prove_bounds(checker *c, const kg_expr *e);
static void prove_branch(checker *c, const kg_expr *cond, int neg, const kg_expr *branch) {
  int mark = c->nundo, dead = 0;
  narrow(c, cond, neg);
  for (int i = mark; i < c->nundo; i++) {
    ival r = c->rng[c->undo[i].id];
    if (r.lo > r.hi) dead = 1;
  }
  if (!dead) prove_bounds(c, branch);
  while (c->nundo > mark) {
    c->nundo--;
    c->rng[c->undo[c->nundo].id] = c->undo[c->nundo].old;
  }
}

static void prove_bounds(checker *c, const kg_expr *e) {
  switch (e->kind) {
  case KG_EXPR_READ: {
    const kg_tensor *t = e->read.tensor;
    for (int d = 0; d < e->read.n; d++) {
      ival r = ival_of(c, e->read.idx[d]);
      if (r.lo < 0 || r.hi >= t->shape[d])
        fail(c, e->pos, "read %s may be out of bounds: index %d ranges over [%lld, %lld] but %s has %lld elements in dimension %d%s",
             expr_text(c, e), d, (long long)r.lo, (long long)r.hi, t->name, (long long)t->shape[d], d,
             c->unnarrowed ? " (a reduction inside select is computed for every index value: the condition does "
                             "not narrow its ranges; move the select inside the reduction)" : "");
    }
    return;
  }
  case KG_EXPR_UNARY: prove_bounds(c, e->op.a); return;
  case KG_EXPR_BINARY:
    prove_bounds(c, e->op.a);
    prove_bounds(c, e->op.b);
    return;
  case KG_EXPR_CALL:
    if (e->call.fn == KG_FN_SELECT) {
      /* Only the taken branch is evaluated (the reference evaluator and lowering's "c ? a : b" alike). */
      prove_bounds(c, e->call.args[0]);
      prove_branch(c, e->call.args[0], 0, e->call.args[1]);
      prove_branch(c, e->call.args[0], 1, e->call.args[2]);
      return;
    }
    for (int i = 0; i < e->call.n; i++) prove_bounds(c, e->call.args[i]);
    return;
  case KG_EXPR_REDUCE: {
    if (e == c->top_reduce || c->nundo == 0) {
      prove_bounds(c, e->reduce.body);
      return;
    }
    /* A nested reduction becomes a stage computed for every value of its variables (stages.c), not only
     * where the enclosing selects' conditions hold: its reads are proved over the full ranges. */
    int mark = c->nundo;
    for (int i = 0; i < mark; i++) {
      kg_ivar *iv = c->ivars[c->undo[i].id];
      ival full = {iv->lo, iv->lo + iv->extent - 1};
      set_range(c, iv->id, full);
    }
    c->unnarrowed++;
    prove_bounds(c, e->reduce.body);
    c->unnarrowed--;
    while (c->nundo > mark) {
      c->nundo--;
      c->rng[c->undo[c->nundo].id] = c->undo[c->nundo].old;
    }
    return;
  }
  default: return;
  }
}

static void shape_stmt(checker *c, int si) {
  kg_stmt *s = c->def->stmts[si];
  kg_tensor *t = s->lhs, *pt = c->parsed_lhs[si];
  c->cur_stmt = si;
  if (t->kind == KG_TENSOR_OUTPUT && s->has_shape) {
    for (int d = 0; d < t->ndim; d++) {
      int64_t v = eval_size(c, pt->shape_expr[d]);
      if (v != t->shape[d])
        fail(c, pt->shape_expr[d]->pos, "dimension %d of '%s' is %lld here but %lld in the signature", d, t->name,
             (long long)v, (long long)t->shape[d]);
    }
  }
  reduce_ranges(c, s->rhs);
  if (t->kind == KG_TENSOR_TEMP) {
    if (s->has_shape) {
      for (int d = 0; d < t->ndim; d++) t->shape[d] = eval_size(c, t->shape_expr[d]);
    } else {
      for (int d = 0; d < t->ndim; d++) {
        bare_use u = {0, NULL, 0};
        find_bare(c, s->rhs, s->idx[d], &u, 0);
        if (!u.read) {
          kg_strbuf b;
          kg_strbuf_init(&b);
          for (int k = 0; k < s->nidx; k++) kg_strbuf_printf(&b, "%s%.40s", k ? ", " : "", s->idx[k]->name);
          kg_strbuf_puts(&b, "] : f32[");
          for (int k = 0; k < s->nidx; k++) kg_strbuf_printf(&b, "%sN%d", k ? ", " : "", k);
          const char *ex = kg_arena_strdup(c->a, b.s);
          kg_strbuf_free(&b);
          fail(c, s->idx[d]->pos, "cannot infer the range of index '%s' of '%s': give %s an explicit shape, e.g. %s[%s]",
               s->idx[d]->name, t->name, t->name, t->name, ex);
        }
        t->shape[d] = u.extent;
      }
    }
    check_shape(c, t, t->pos);
  }
  for (int d = 0; d < s->nidx; d++) {
    s->idx[d]->lo = 0;
    s->idx[d]->extent = t->shape[d];
  }
  /* Ranges of this statement's variables; other statements' entries are never read here. */
  for (int d = 0; d < s->nidx; d++) {
    ival r = {0, t->shape[d] - 1};
    c->rng[s->idx[d]->id] = r;
  }
  prove_bounds(c, s->rhs);
}

int kg_check_def(kg_program *p, const kg_binding *bindings, int nbindings, kg_diag *diag, kg_arena *diag_arena) {
  checker *c = KG_NEW(&p->arena, checker);
  c->p = p;
  c->def = p->def;
  c->a = &p->arena;
  c->diag = diag;
  c->da = diag_arena;
  c->bind = bindings;
  c->nbind = nbindings;
  if (setjmp(c->jb)) return -1;
  kg_def *def = c->def;

  /* 1. declare */
  if (def->noutputs == 0) fail(c, def->pos, "def '%s' has no outputs", def->name);
  p->ninputs = def->ninputs;
  p->noutputs = def->noutputs;
  p->inputs = KG_NEW_ARRAY(c->a, kg_tensor *, def->ninputs + 1);
  p->outputs = KG_NEW_ARRAY(c->a, kg_tensor *, def->noutputs + 1);
  for (int i = 0; i < def->ninputs; i++) p->inputs[i] = declare_param(c, &def->inputs[i], KG_TENSOR_INPUT);
  for (int i = 0; i < def->noutputs; i++) p->outputs[i] = declare_param(c, &def->outputs[i], KG_TENSOR_OUTPUT);
  c->parsed_lhs = KG_NEW_ARRAY(c->a, kg_tensor *, def->nstmts + 1);
  for (int s = 0; s < def->nstmts; s++) c->parsed_lhs[s] = def->stmts[s]->lhs;

  /* 2. resolve */
  for (int s = 0; s < def->nstmts; s++) resolve_stmt(c, s);
  for (int i = 0; i < p->noutputs; i++)
    if (!p->outputs[i]->stmt) fail(c, p->outputs[i]->pos, "output '%s' is never defined", p->outputs[i]->name);
  check_name_clashes(c);

  /* 3. bind, 4. parameter shapes */
  bind_sizes(c);
  for (int i = 0; i < def->ninputs + def->noutputs; i++) {
    kg_tensor *t = p->tensors[i];
    for (int d = 0; d < t->ndim; d++) t->shape[d] = eval_size(c, t->shape_expr[d]);
    check_shape(c, t, t->pos);
  }

  /* 5. statements in order: every tensor read is shaped before its reader */
  c->rng = KG_NEW_ARRAY(c->a, ival, p->n_ivars + 1);
  for (int s = 0; s < def->nstmts; s++) shape_stmt(c, s);
  return 0;
}
