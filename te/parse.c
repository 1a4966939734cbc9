/* Parser: recursive descent over the language's grammar (docs/language.md), producing the unchecked AST of every def.
 * Names stay unresolved (KG_EXPR_NAME); check.c resolves them. Every node keeps the position of its token
 * (binary and unary nodes: their operator), so diagnostics can put a caret under it.
 *
 * Errors unwind with longjmp to kg_parse_module, the one catch point: everything is arena-allocated, so there
 * is nothing to clean up. Nesting is limited (KG_PARSE_MAX_NEST recursion levels, KG_PARSE_MAX_DEPTH tree
 * levels) so that 100,000 nested parentheses or a 100,000-term sum give an error, never a stack overflow here
 * or in the recursive passes that walk the tree later. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "lex.h"
#include "te.h"

enum { KG_PARSE_MAX_NEST = 1000, KG_PARSE_MAX_DEPTH = 1000 };

typedef struct parser {
  kg_lexer lx;
  kg_token tok, next; /* current token, and one token of lookahead when has_next */
  int has_next;
  kg_arena *a;
  kg_diag *diag;
  jmp_buf jb;
  int nest;  /* recursion depth of expression parsing */
  int depth; /* tree depth of the expression parsed last */
} parser;

static _Noreturn void fail(parser *p, kg_pos pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static _Noreturn void fail(parser *p, kg_pos pos, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  kg_diag_error(p->diag, p->a, pos, "%s", msg);
  longjmp(p->jb, 1);
}

/* A printable description of a token for messages, cut short for huge identifiers. */
static const char *tok_desc(parser *p, const kg_token *t) {
  if (t->kind == KG_TK_EOF) return "end of file";
  int n = t->len > 40 ? 40 : (int)t->len;
  return kg_arena_printf(p->a, "'%.*s%s'", n, t->s, t->len > 40 ? "..." : "");
}

static void lex_into(parser *p, kg_token *t) {
  if (kg_lex_next(&p->lx, t) != 0) longjmp(p->jb, 1);
}

static const kg_token *peek(parser *p) {
  if (!p->has_next) {
    lex_into(p, &p->next);
    p->has_next = 1;
  }
  return &p->next;
}

static void advance(parser *p) {
  if (p->has_next) {
    p->tok = p->next;
    p->has_next = 0;
  } else {
    lex_into(p, &p->tok);
  }
}

static int is(parser *p, const char *s) { return kg_tok_is(&p->tok, s); }

static int accept(parser *p, const char *s) {
  if (!is(p, s)) return 0;
  advance(p);
  return 1;
}

static void expect(parser *p, const char *s, const char *where) {
  if (!accept(p, s)) fail(p, p->tok.pos, "expected '%s' %s, found %s", s, where, tok_desc(p, &p->tok));
}

static int tok_in(const kg_token *t, const char *const *names, int n) {
  for (int i = 0; i < n; i++)
    if (names[i] && kg_tok_is(t, names[i])) return i;
  return -1;
}

static int tok_func(const kg_token *t) {
  return t->kind == KG_TK_IDENT ? tok_in(t, kg_func_names, KG_FN_COUNT) : -1;
}
static int tok_reducer(const kg_token *t) {
  if (t->kind != KG_TK_IDENT) return -1;
  int r = tok_in(t, kg_reducer_names, KG_RED_COUNT);
  return r <= KG_RED_NONE ? -1 : r;
}

/* Function and reducer names, "def" and "in" are reserved: a tensor called "sum" would make "sum[k]" ambiguous. */
static int tok_reserved(const kg_token *t) {
  return t->kind == KG_TK_IDENT && (tok_func(t) >= 0 || tok_reducer(t) >= 0 || kg_tok_is(t, "def") ||
                                    kg_tok_is(t, "in"));
}

/* NAME, declaring something (what: "tensor", "index variable", ...). */
static const char *expect_name(parser *p, const char *what) {
  if (p->tok.kind != KG_TK_IDENT) fail(p, p->tok.pos, "expected the name of a %s, found %s", what, tok_desc(p, &p->tok));
  if (tok_reserved(&p->tok)) fail(p, p->tok.pos, "%s is a reserved word and cannot name a %s", tok_desc(p, &p->tok), what);
  const char *s = kg_arena_strndup(p->a, p->tok.s, p->tok.len);
  advance(p);
  return s;
}

static kg_expr *new_expr(parser *p, kg_expr_kind k, kg_pos pos) {
  kg_expr *e = KG_NEW(p->a, kg_expr);
  e->kind = k;
  e->pos = pos;
  return e;
}

static void enter(parser *p, kg_pos pos) {
  if (++p->nest > KG_PARSE_MAX_NEST) fail(p, pos, "expression nested too deeply (more than %d levels)", KG_PARSE_MAX_NEST);
}

static void set_depth(parser *p, int d, kg_pos pos) {
  if (d > KG_PARSE_MAX_DEPTH) fail(p, pos, "expression nested too deeply (more than %d levels)", KG_PARSE_MAX_DEPTH);
  p->depth = d;
}

static kg_expr *new_binary(parser *p, kg_op op, kg_expr *a, kg_expr *b, kg_pos pos) {
  kg_expr *e = new_expr(p, KG_EXPR_BINARY, pos);
  e->op.op = op;
  e->op.a = a;
  e->op.b = b;
  return e;
}

/* ---- sizes ---- */

static kg_expr *parse_size(parser *p);

/* size_atom = INT | NAME | "(" size ")" */
static kg_expr *parse_size_atom(parser *p) {
  kg_token t = p->tok;
  if (t.kind == KG_TK_NUM) {
    if (!t.is_int) fail(p, t.pos, "a size must be an integer, found %s", tok_desc(p, &t));
    advance(p);
    kg_expr *e = new_expr(p, KG_EXPR_NUM, t.pos);
    e->num.is_int = 1;
    e->num.i = t.i;
    e->num.f = t.f;
    set_depth(p, 1, t.pos);
    return e;
  }
  if (t.kind == KG_TK_IDENT) {
    const char *name = expect_name(p, "size variable");
    kg_expr *e = new_expr(p, KG_EXPR_NAME, t.pos);
    e->var.name = name;
    set_depth(p, 1, t.pos);
    return e;
  }
  if (accept(p, "(")) {
    kg_expr *e = parse_size(p);
    expect(p, ")", "to close the size expression");
    return e;
  }
  fail(p, t.pos, "expected a size (an integer, a size variable or a parenthesised size expression), found %s", tok_desc(p, &t));
}

/* size_term = size_atom { ("*" | "/" | "%") size_atom } */
static kg_expr *parse_size_term(parser *p) {
  kg_expr *e = parse_size_atom(p);
  int d = p->depth;
  for (;;) {
    kg_op op;
    if (is(p, "*")) op = KG_OP_MUL;
    else if (is(p, "/")) op = KG_OP_DIV;
    else if (is(p, "%")) op = KG_OP_MOD;
    else break;
    kg_pos pos = p->tok.pos;
    advance(p);
    kg_expr *b = parse_size_atom(p);
    d = (d > p->depth ? d : p->depth) + 1;
    set_depth(p, d, pos);
    e = new_binary(p, op, e, b, pos);
  }
  p->depth = d;
  return e;
}

/* size = size_term { ("+" | "-") size_term } */
static kg_expr *parse_size(parser *p) {
  enter(p, p->tok.pos);
  kg_expr *e = parse_size_term(p);
  int d = p->depth;
  for (;;) {
    kg_op op;
    if (is(p, "+")) op = KG_OP_ADD;
    else if (is(p, "-")) op = KG_OP_SUB;
    else break;
    kg_pos pos = p->tok.pos;
    advance(p);
    kg_expr *b = parse_size_term(p);
    d = (d > p->depth ? d : p->depth) + 1;
    set_depth(p, d, pos);
    e = new_binary(p, op, e, b, pos);
  }
  p->depth = d;
  p->nest--;
  return e;
}

/* dtype = "f32" | "f16" | "bf16"    (f64 and i32 are recognised and rejected) */
static kg_dtype parse_dtype(parser *p) {
  static const char *const never[] = {"f64", "i32"};
  for (int t = 0; t < KG_DT_COUNT; t++)
    if (p->tok.kind == KG_TK_IDENT && kg_tok_is(&p->tok, kg_dtype_names[t])) {
      advance(p);
      return (kg_dtype)t;
    }
  if (tok_in(&p->tok, never, 2) >= 0 && p->tok.kind == KG_TK_IDENT)
    fail(p, p->tok.pos, "dtype %.*s is not supported (tensors are f32, f16 or bf16)", (int)p->tok.len, p->tok.s);
  fail(p, p->tok.pos, "expected a dtype (f32, f16 or bf16), found %s", tok_desc(p, &p->tok));
}

/* shape = "[" [ size { "," size } ] "]"     fills dims, returns their count */
static int parse_shape(parser *p, kg_expr **dims) {
  expect(p, "[", "to open the shape");
  int n = 0;
  if (!is(p, "]")) {
    do {
      if (n == KG_MAX_DIMS) fail(p, p->tok.pos, "too many dimensions (at most %d)", KG_MAX_DIMS);
      dims[n++] = parse_size(p);
    } while (accept(p, ","));
  }
  expect(p, "]", "to close the shape");
  return n;
}

/* param = NAME ":" dtype shape */
static kg_param parse_param(parser *p) {
  kg_param prm;
  memset(&prm, 0, sizeof prm);
  prm.pos = p->tok.pos;
  prm.name = expect_name(p, "tensor");
  expect(p, ":", "after the parameter name");
  prm.dtype = parse_dtype(p);
  prm.ndim = parse_shape(p, prm.dims);
  return prm;
}

/* ---- expressions ---- */

static kg_expr *parse_expr(parser *p);

/* args = expr { "," expr }    (inside the brackets/parentheses of a read or call) */
static kg_expr **parse_list(parser *p, const char *close, int *n_out, int *depth) {
  kg_expr **v = NULL;
  int n = 0, cap = 0, d = 0;
  if (!is(p, close)) {
    do {
      kg_expr *e = parse_expr(p);
      if (p->depth > d) d = p->depth;
      KG_PUSH(p->a, v, n, cap, e);
    } while (accept(p, ","));
  }
  *n_out = n;
  *depth = d;
  return v;
}

/* rvar = NAME [ "in" size ".." size ] */
static kg_ivar *parse_rvar(parser *p) {
  kg_ivar *iv = KG_NEW(p->a, kg_ivar);
  iv->pos = p->tok.pos;
  iv->name = expect_name(p, "reduction variable");
  iv->is_reduce = 1;
  iv->id = -1;
  if (accept(p, "in")) {
    iv->lo_expr = parse_size(p);
    expect(p, "..", "between the bounds of the range (lo..hi)");
    iv->hi_expr = parse_size(p);
  }
  return iv;
}

/* reduce = REDUCER "[" rvar { "," rvar } "]" "(" expr ")" */
static kg_expr *parse_reduce(parser *p, kg_reducer red) {
  kg_expr *e = new_expr(p, KG_EXPR_REDUCE, p->tok.pos);
  e->reduce.red = red;
  advance(p);
  expect(p, "[", "after the reducer");
  int cap = 0;
  do {
    kg_ivar *iv = parse_rvar(p);
    KG_PUSH(p->a, e->reduce.rv, e->reduce.nrv, cap, iv);
  } while (accept(p, ","));
  expect(p, "]", "to close the reduction variables");
  expect(p, "(", "before the reduction's body");
  e->reduce.body = parse_expr(p);
  expect(p, ")", "to close the reduction's body");
  set_depth(p, p->depth + 1, e->pos);
  return e;
}

/* The language's function (reducers 0) or reducer names, comma-separated, for messages. */
static const char *names_list(parser *p, int reducers) {
  const char *out = "";
  int n = reducers ? KG_RED_COUNT : KG_FN_COUNT;
  for (int i = reducers ? KG_RED_NONE + 1 : 0; i < n; i++)
    out = kg_arena_printf(p->a, "%s%s%s", out, *out ? ", " : "", reducers ? kg_reducer_names[i] : kg_func_names[i]);
  return out;
}

/* primary = NUMBER | "(" expr ")" | FUNC "(" args ")" | REDUCER "[" rvars "]" "(" expr ")"
 *         | NAME "[" [ args ] "]" | NAME
 * max and min are functions before "(" and reducers before "[". */
static kg_expr *parse_primary(parser *p) {
  kg_token t = p->tok;
  if (t.kind == KG_TK_NUM) {
    advance(p);
    kg_expr *e = new_expr(p, KG_EXPR_NUM, t.pos);
    e->num.is_int = t.is_int;
    e->num.i = t.i;
    e->num.f = t.f;
    set_depth(p, 1, t.pos);
    return e;
  }
  if (accept(p, "(")) {
    kg_expr *e = parse_expr(p);
    expect(p, ")", "to close the parenthesis");
    return e;
  }
  if (t.kind == KG_TK_IDENT) {
    const kg_token *nx = peek(p);
    int fn = tok_func(&t), red = tok_reducer(&t);
    if (red >= 0 && kg_tok_is(nx, "[")) return parse_reduce(p, (kg_reducer)red);
    if (fn >= 0 && kg_tok_is(nx, "(")) {
      advance(p);
      advance(p);
      kg_expr *e = new_expr(p, KG_EXPR_CALL, t.pos);
      e->call.fn = (kg_func)fn;
      int d;
      e->call.args = parse_list(p, ")", &e->call.n, &d);
      expect(p, ")", "to close the argument list");
      if (e->call.n != kg_func_arity[fn])
        fail(p, t.pos, "%s takes %d argument%s, got %d", kg_func_names[fn], kg_func_arity[fn],
             kg_func_arity[fn] == 1 ? "" : "s", e->call.n);
      set_depth(p, d + 1, t.pos);
      return e;
    }
    if (red >= 0) fail(p, t.pos, "the reducer %s needs its variables: %s[k](...)", tok_desc(p, &t), kg_reducer_names[red]);
    if (fn >= 0) fail(p, t.pos, "the function %s needs its arguments: %s(...)", tok_desc(p, &t), kg_func_names[fn]);
    if (tok_reserved(&t)) fail(p, t.pos, "unexpected %s", tok_desc(p, &t));
    /* a call of a name the language lacks (max2(x, y)) is named as such, not as a stray '(' further on */
    if (kg_tok_is(nx, "(")) fail(p, t.pos, "unknown function %s (functions: %s)", tok_desc(p, &t), names_list(p, 0));
    const char *name = kg_arena_strndup(p->a, t.s, t.len);
    advance(p);
    if (accept(p, "[")) {
      kg_expr *e = new_expr(p, KG_EXPR_READ, t.pos);
      e->read.name = name;
      int d;
      e->read.idx = parse_list(p, "]", &e->read.n, &d);
      expect(p, "]", "to close the index list");
      /* likewise a reduction by a reducer the language lacks (mean[j](...)) */
      if (is(p, "("))
        fail(p, t.pos, "unknown reducer %s (reducers: %s)", tok_desc(p, &t), names_list(p, 1));
      set_depth(p, d + 1, t.pos);
      return e;
    }
    kg_expr *e = new_expr(p, KG_EXPR_NAME, t.pos);
    e->var.name = name;
    set_depth(p, 1, t.pos);
    return e;
  }
  fail(p, t.pos, "expected an expression, found %s", tok_desc(p, &t));
}

/* unary = ("-" | "!") unary | primary */
static kg_expr *parse_unary(parser *p) {
  kg_pos pos = p->tok.pos;
  kg_op op;
  if (is(p, "-")) op = KG_OP_NEG;
  else if (is(p, "!")) op = KG_OP_NOT;
  else return parse_primary(p);
  enter(p, pos);
  advance(p);
  kg_expr *e = new_expr(p, KG_EXPR_UNARY, pos);
  e->op.op = op;
  e->op.a = parse_unary(p);
  set_depth(p, p->depth + 1, pos);
  p->nest--;
  return e;
}

/* Binary operators by precedence, loosest first; all left-associative. */
static int binop_prec(const kg_token *t, kg_op *op) {
  static const struct {
    const char *s;
    kg_op op;
    int prec;
  } ops[] = {{"||", KG_OP_OR, 1}, {"&&", KG_OP_AND, 2}, {"==", KG_OP_EQ, 3}, {"!=", KG_OP_NE, 3},
             {"<", KG_OP_LT, 4},  {"<=", KG_OP_LE, 4},  {">", KG_OP_GT, 4},  {">=", KG_OP_GE, 4},
             {"+", KG_OP_ADD, 5}, {"-", KG_OP_SUB, 5},  {"*", KG_OP_MUL, 6}, {"/", KG_OP_DIV, 6},
             {"%", KG_OP_MOD, 6}};
  if (t->kind != KG_TK_PUNCT) return 0;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (kg_tok_is(t, ops[i].s)) {
      *op = ops[i].op;
      return ops[i].prec;
    }
  return 0;
}

/* binary = unary { OP binary }     precedence climbing over
 *   || (1)  <  && (2)  <  == != (3)  <  < <= > >= (4)  <  + - (5)  <  * / % (6) */
static kg_expr *parse_binary(parser *p, int min_prec) {
  enter(p, p->tok.pos);
  kg_expr *lhs = parse_unary(p);
  int d = p->depth;
  for (;;) {
    kg_op op;
    int prec = binop_prec(&p->tok, &op);
    if (prec == 0 || prec < min_prec) break;
    kg_pos pos = p->tok.pos;
    advance(p);
    kg_expr *rhs = parse_binary(p, prec + 1);
    d = (d > p->depth ? d : p->depth) + 1;
    set_depth(p, d, pos);
    lhs = new_binary(p, op, lhs, rhs, pos);
  }
  p->depth = d;
  p->nest--;
  return lhs;
}

/* expr = binary */
static kg_expr *parse_expr(parser *p) { return parse_binary(p, 1); }

/* ---- statements and defs ---- */

/* stmt = NAME "[" [ NAME { "," NAME } ] "]" [ ":" dtype shape ] "=" expr [ ";" ] */
static kg_stmt *parse_stmt(parser *p) {
  kg_stmt *s = KG_NEW(p->a, kg_stmt);
  s->pos = p->tok.pos;
  kg_tensor *t = KG_NEW(p->a, kg_tensor);
  t->pos = p->tok.pos;
  t->name = expect_name(p, "tensor");
  t->kind = KG_TENSOR_TEMP;
  t->id = -1;
  expect(p, "[", "after the name of the tensor being defined");
  int cap = 0;
  if (!is(p, "]")) {
    do {
      if (s->nidx == KG_MAX_DIMS) fail(p, p->tok.pos, "too many indices (at most %d)", KG_MAX_DIMS);
      kg_ivar *iv = KG_NEW(p->a, kg_ivar);
      iv->pos = p->tok.pos;
      if (p->tok.kind != KG_TK_IDENT)
        fail(p, p->tok.pos, "expected an index variable (a name) on the left of '=', found %s", tok_desc(p, &p->tok));
      iv->name = expect_name(p, "index variable");
      iv->id = -1;
      KG_PUSH(p->a, s->idx, s->nidx, cap, iv);
    } while (accept(p, ","));
  }
  expect(p, "]", "to close the index list");
  t->ndim = s->nidx;
  if (accept(p, ":")) {
    t->dtype = parse_dtype(p);
    kg_pos spos = p->tok.pos;
    kg_expr *dims[KG_MAX_DIMS];
    int n = parse_shape(p, dims);
    if (n != s->nidx)
      fail(p, spos, "the shape of '%s' has %d dimension%s but '%s' is indexed with %d variable%s", t->name, n,
           n == 1 ? "" : "s", t->name, s->nidx, s->nidx == 1 ? "" : "s");
    for (int i = 0; i < n; i++) t->shape_expr[i] = dims[i];
    s->has_shape = 1;
  }
  expect(p, "=", "after the left-hand side");
  s->rhs = parse_expr(p);
  accept(p, ";");
  s->lhs = t;
  return s;
}

/* def = "def" NAME "(" [ param { "," param } ] ")" "->" "(" param { "," param } ")" "{" { stmt } "}" */
static kg_def *parse_def(parser *p) {
  kg_def *d = KG_NEW(p->a, kg_def);
  d->pos = p->tok.pos;
  expect(p, "def", "to start a definition");
  d->name = expect_name(p, "def");
  expect(p, "(", "to open the parameter list");
  int cap = 0;
  if (!is(p, ")")) {
    do {
      kg_param prm = parse_param(p);
      KG_PUSH(p->a, d->inputs, d->ninputs, cap, prm);
    } while (accept(p, ","));
  }
  expect(p, ")", "to close the parameter list");
  expect(p, "->", "between the inputs and the outputs");
  expect(p, "(", "to open the output list");
  cap = 0;
  do {
    kg_param prm = parse_param(p);
    KG_PUSH(p->a, d->outputs, d->noutputs, cap, prm);
  } while (accept(p, ","));
  expect(p, ")", "to close the output list");
  expect(p, "{", "to open the body");
  cap = 0;
  while (!is(p, "}")) {
    if (p->tok.kind == KG_TK_EOF) fail(p, p->tok.pos, "expected '}' to close the body of '%s', found end of file", d->name);
    if (p->tok.kind != KG_TK_IDENT)
      fail(p, p->tok.pos, "expected a statement (T[i, ...] = ...) or '}', found %s", tok_desc(p, &p->tok));
    kg_stmt *s = parse_stmt(p);
    KG_PUSH(p->a, d->stmts, d->nstmts, cap, s);
  }
  advance(p);
  return d;
}

/* Inserts d into the set unless a def of the same name is there; returns that def, or NULL. */
static kg_def *def_seen_put(kg_def **set, size_t cap, kg_def *d) {
  uint64_t h = 1469598103934665603ull;
  for (const char *s = d->name; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  size_t i = h & (cap - 1);
  for (; set[i]; i = (i + 1) & (cap - 1))
    if (strcmp(set[i]->name, d->name) == 0) return set[i];
  set[i] = d;
  return NULL;
}

/* program = { def } */
kg_module *kg_parse_module(kg_arena *a, const kg_source *src, kg_diag *diag) {
  kg_module *m = KG_NEW(a, kg_module);
  parser *p = KG_NEW(a, parser);
  p->a = a;
  p->diag = diag;
  kg_lex_init(&p->lx, src, diag, a);
  if (setjmp(p->jb)) return NULL;
  advance(p);
  int cap = 0;
  /* Def names seen so far (open addressing, power-of-two capacity): --def picks by name, so a name must be
   * unique, and a file of many defs must stay linear. */
  kg_def **seen = NULL;
  size_t seen_cap = 0;
  while (p->tok.kind != KG_TK_EOF) {
    if (!is(p, "def")) fail(p, p->tok.pos, "expected 'def', found %s", tok_desc(p, &p->tok));
    kg_def *d = parse_def(p);
    if (2 * ((size_t)m->ndefs + 1) > seen_cap) {
      seen_cap = seen_cap ? 2 * seen_cap : 64;
      seen = KG_NEW_ARRAY(a, kg_def *, seen_cap);
      for (int i = 0; i < m->ndefs; i++) def_seen_put(seen, seen_cap, m->defs[i]);
    }
    kg_def *old = def_seen_put(seen, seen_cap, d);
    if (old)
      fail(p, d->pos, "def '%.40s%s' is defined twice (first at %d:%d)", d->name, strlen(d->name) > 40 ? "..." : "",
           old->pos.line, old->pos.col);
    KG_PUSH(a, m->defs, m->ndefs, cap, d);
  }
  return m;
}
