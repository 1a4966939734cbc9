/* Stages: one per defined tensor, and one per reduction nested inside an expression.
 *
 * A statement T[i...] = e becomes the stage T; when e is itself a reduction, the stage is that reduction
 * (red, rax = its variables, body = its body). Every other reduction R inside e is extracted, innermost first,
 * into a tensor "T.rN" indexed by the enclosing variables R uses (the statement's indices, then enclosing
 * reduction variables, in that order); its stage ranges over FRESH variables (new ids, lo 0) and the parent
 * reads T.rN[v - lo, ...] where R stood.
 *
 * A reduction into an f16 or bf16 tensor T accumulates in f32: it is extracted like a nested one (into the f32
 * tensor "T.r0"), and the stage T rounds its value once, on the store.
 *
 * Requires: a checked program (kg_check_def returned 0). Never mutates the checked statements (the reference
 * evaluator interprets them): stage bodies are deep copies. The one write into the checked AST is
 * reduce.stage_tensor, which records where each reduction went. */
#include <assert.h>
#include <stdio.h>
#include <string.h>
#include "te.h"

/* How an original variable is expressed in the stage being built: orig = target + offset. */
typedef struct subst {
  kg_ivar *target;
  int64_t offset;
} subst;

typedef struct builder {
  kg_program *p;
  kg_arena *a;
  int stages_cap, tensors_cap;
  const kg_stmt *stmt;
  int nextracted; /* per statement: the N of T.rN */
  int n_orig;     /* ivars of the checked program: ids 0..n_orig-1; substitutions are indexed by them */
} builder;

static kg_expr *new_node(builder *bd, kg_expr_kind k, kg_pos pos, kg_type ty) {
  kg_expr *e = KG_NEW(bd->a, kg_expr);
  e->kind = k;
  e->pos = pos;
  e->ty = ty;
  return e;
}

/* target + offset as an integer expression. */
static kg_expr *var_plus(builder *bd, kg_ivar *v, int64_t off, kg_pos pos) {
  kg_expr *x = new_node(bd, KG_EXPR_IVAR, pos, KG_TY_INT);
  x->var.iv = v;
  x->var.name = v->name;
  x->var.size = -1;
  if (off == 0) return x;
  kg_expr *n = new_node(bd, KG_EXPR_NUM, pos, KG_TY_INT);
  n->num.is_int = 1;
  n->num.i = off < 0 ? -off : off;
  n->num.f = (double)n->num.i;
  kg_expr *e = new_node(bd, KG_EXPR_BINARY, pos, KG_TY_INT);
  e->op.op = off < 0 ? KG_OP_SUB : KG_OP_ADD;
  e->op.a = x;
  e->op.b = n;
  return e;
}

static kg_stage *add_stage(builder *bd, kg_tensor *out, kg_ivar **ax, int nax, kg_reducer red, kg_ivar **rax, int nrax,
                           kg_expr *body) {
  kg_stage *st = KG_NEW(bd->a, kg_stage);
  st->name = out->name;
  st->out = out;
  st->ax = ax;
  st->nax = nax;
  st->red = red;
  st->rax = rax;
  st->nrax = nrax;
  st->body = body;
  st->id = bd->p->nstages;
  out->stage = st;
  KG_PUSH(bd->a, bd->p->stages, bd->p->nstages, bd->stages_cap, st);
  return st;
}

/* scope: the original variables enclosing e (statement indices, then reduction variables, outer first). */
static kg_expr *copy(builder *bd, const kg_expr *e, subst *sub, kg_ivar **scope, int nscope);

static kg_expr *extract(builder *bd, const kg_expr *r, subst *sub, kg_ivar **scope, int nscope) {
  kg_program *p = bd->p;
  /* Free variables: the enclosing variables that the reduction uses, in scope order. */
  kg_ivar **fv = KG_NEW_ARRAY(bd->a, kg_ivar *, nscope + 1);
  int nfv = 0;
  for (int i = 0; i < nscope; i++)
    if (kg_expr_uses_ivar(r->reduce.body, scope[i])) fv[nfv++] = scope[i];
  assert(nfv <= KG_MAX_DIMS); /* the checker rejects reductions depending on more enclosing variables */

  kg_ivar **ax = KG_NEW_ARRAY(bd->a, kg_ivar *, nfv + 1);
  for (int d = 0; d < nfv; d++) {
    kg_ivar *f = KG_NEW(bd->a, kg_ivar);
    *f = *fv[d];
    f->id = p->n_ivars++;
    f->is_reduce = 0;
    f->lo = 0;
    f->lo_expr = f->hi_expr = NULL;
    ax[d] = f;
  }
  /* Inside the new stage: each free variable is its fresh variable plus the original lo; the reduction's own
   * variables (and deeper ones) stay themselves. */
  subst *inner = KG_NEW_ARRAY(bd->a, subst, bd->n_orig + 1); /* zeroed: identity */
  for (int d = 0; d < nfv; d++) {
    inner[fv[d]->id].target = ax[d];
    inner[fv[d]->id].offset = fv[d]->lo;
  }
  kg_ivar **sc = KG_NEW_ARRAY(bd->a, kg_ivar *, nscope + r->reduce.nrv + 1);
  memcpy(sc, scope, sizeof(kg_ivar *) * (size_t)nscope);
  for (int i = 0; i < r->reduce.nrv; i++) sc[nscope + i] = r->reduce.rv[i];
  kg_expr *body = copy(bd, r->reduce.body, inner, sc, nscope + r->reduce.nrv);
  /* Made after the body, so that inner reductions (extracted while copying it) get the lower numbers, as
   * their stages come first. */
  kg_tensor *t = KG_NEW(bd->a, kg_tensor);
  t->name = kg_arena_printf(bd->a, "%s.r%d", bd->stmt->lhs->name, bd->nextracted++);
  t->pos = r->pos;
  t->kind = KG_TENSOR_TEMP;
  t->ndim = nfv;
  for (int d = 0; d < nfv; d++) t->shape[d] = fv[d]->extent;
  t->id = p->ntensors;
  KG_PUSH(bd->a, p->tensors, p->ntensors, bd->tensors_cap, t);
  add_stage(bd, t, ax, nfv, r->reduce.red, r->reduce.rv, r->reduce.nrv, body);
  ((kg_expr *)r)->reduce.stage_tensor = t;

  /* Where the reduction stood: T.rN[v - lo, ...] with v as the parent stage sees it. */
  kg_expr *rd = new_node(bd, KG_EXPR_READ, r->pos, KG_TY_F32);
  rd->read.name = t->name;
  rd->read.tensor = t;
  rd->read.n = nfv;
  rd->read.idx = KG_NEW_ARRAY(bd->a, kg_expr *, nfv + 1);
  for (int d = 0; d < nfv; d++) {
    subst s = sub[fv[d]->id];
    kg_ivar *target = s.target ? s.target : fv[d];
    rd->read.idx[d] = var_plus(bd, target, s.offset - fv[d]->lo, r->pos);
  }
  return rd;
}

static kg_expr *copy(builder *bd, const kg_expr *e, subst *sub, kg_ivar **scope, int nscope) {
  if (e->kind == KG_EXPR_REDUCE) return extract(bd, e, sub, scope, nscope);
  kg_expr *c = KG_NEW(bd->a, kg_expr);
  *c = *e;
  switch (e->kind) {
  case KG_EXPR_IVAR: {
    assert(e->var.iv->id < bd->n_orig);
    subst s = sub[e->var.iv->id];
    if (s.target) return var_plus(bd, s.target, s.offset, e->pos);
    return c;
  }
  case KG_EXPR_READ:
    c->read.idx = KG_NEW_ARRAY(bd->a, kg_expr *, e->read.n + 1);
    for (int i = 0; i < e->read.n; i++) c->read.idx[i] = copy(bd, e->read.idx[i], sub, scope, nscope);
    return c;
  case KG_EXPR_UNARY: c->op.a = copy(bd, e->op.a, sub, scope, nscope); return c;
  case KG_EXPR_BINARY:
    c->op.a = copy(bd, e->op.a, sub, scope, nscope);
    c->op.b = copy(bd, e->op.b, sub, scope, nscope);
    return c;
  case KG_EXPR_CALL:
    c->call.args = KG_NEW_ARRAY(bd->a, kg_expr *, e->call.n + 1);
    for (int i = 0; i < e->call.n; i++) c->call.args[i] = copy(bd, e->call.args[i], sub, scope, nscope);
    return c;
  default: return c;
  }
}

void kg_program_build_stages(kg_program *p) {
  builder bd;
  memset(&bd, 0, sizeof bd);
  bd.p = p;
  bd.a = &p->arena;
  bd.n_orig = p->n_ivars;
  bd.tensors_cap = p->ntensors; /* treat the checker's array as full: the first push copies it */
  p->stages = NULL;
  p->nstages = 0;
  const kg_def *def = p->def;
  for (int s = 0; s < def->nstmts; s++) {
    const kg_stmt *st = def->stmts[s];
    bd.stmt = st;
    bd.nextracted = 0;
    subst *id = KG_NEW_ARRAY(bd.a, subst, bd.n_orig + 1); /* zeroed: identity */
    kg_ivar **scope = KG_NEW_ARRAY(bd.a, kg_ivar *, st->nidx + 1);
    for (int i = 0; i < st->nidx; i++) scope[i] = st->idx[i];
    const kg_expr *rhs = st->rhs;
    if (rhs->kind == KG_EXPR_REDUCE && st->lhs->dtype == KG_DT_F32) {
      kg_ivar **sc = KG_NEW_ARRAY(bd.a, kg_ivar *, st->nidx + rhs->reduce.nrv + 1);
      memcpy(sc, scope, sizeof(kg_ivar *) * (size_t)st->nidx);
      for (int i = 0; i < rhs->reduce.nrv; i++) sc[st->nidx + i] = rhs->reduce.rv[i];
      kg_expr *body = copy(&bd, rhs->reduce.body, id, sc, st->nidx + rhs->reduce.nrv);
      add_stage(&bd, st->lhs, st->idx, st->nidx, rhs->reduce.red, rhs->reduce.rv, rhs->reduce.nrv, body);
      ((kg_expr *)rhs)->reduce.stage_tensor = st->lhs;
    } else {
      kg_expr *body = copy(&bd, rhs, id, scope, st->nidx);
      add_stage(&bd, st->lhs, st->idx, st->nidx, KG_RED_NONE, NULL, 0, body);
    }
  }
}
