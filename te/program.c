/* Loading a program: copy the text, parse every def, pick one, check it, build its stages. */
#include <stdlib.h>
#include <string.h>
#include "te.h"

/* Copies a diagnostic made in the program's arena into the caller's, since the program is freed on failure.
 * The position keeps line, column and offset; its src pointer would dangle and is cleared. */
static void diag_move(kg_diag *dst, const kg_diag *src, kg_arena *a) {
  if (dst->failed) return;
  dst->failed = 1;
  dst->msg = kg_arena_strdup(a, src->msg ? src->msg : "error");
  dst->text = kg_arena_strdup(a, src->text ? src->text : "error");
  dst->pos = src->pos;
  dst->pos.src = NULL;
}

kg_program *kg_program_load(const char *file_name, const char *text, size_t len, const char *def_name,
                            const kg_binding *bindings, int nbindings, kg_diag *diag, kg_arena *diag_arena) {
  kg_program *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  kg_arena_init(&p->arena);
  char *copy = kg_arena_alloc(&p->arena, len + 1);
  if (len) memcpy(copy, text, len);
  p->src.name = kg_arena_strdup(&p->arena, file_name ? file_name : "<input>");
  p->src.text = copy;
  p->src.len = len;

  kg_diag local;
  memset(&local, 0, sizeof local);
  p->module = kg_parse_module(&p->arena, &p->src, &local);
  if (!p->module) goto fail;
  if (p->module->ndefs == 0) {
    kg_pos pos = {&p->src, 1, 1, 0};
    kg_diag_error(&local, &p->arena, pos, "no def in file");
    goto fail;
  }
  if (!def_name) {
    p->def = p->module->defs[0];
  } else {
    for (int i = 0; i < p->module->ndefs && !p->def; i++)
      if (strcmp(p->module->defs[i]->name, def_name) == 0) p->def = p->module->defs[i];
    if (!p->def) {
      kg_pos pos = {&p->src, 1, 1, 0};
      kg_diag_error(&local, &p->arena, pos, "no def named '%s' (the first is '%s')", def_name, p->module->defs[0]->name);
      goto fail;
    }
  }
  if (kg_check_def(p, bindings, nbindings, &local, &p->arena) != 0) goto fail;
  kg_program_build_stages(p);
  if (p->nstages > KG_MAX_STAGES) {
    const kg_stage *st = p->stages[KG_MAX_STAGES]; /* the first one too many: its statement, or the reduction */
    kg_diag_error(&local, &p->arena, st->out->stmt ? st->out->stmt->pos : st->body->pos,
                  "too many stages: a def makes at most %d (its statements and the reductions nested in them)",
                  KG_MAX_STAGES);
    goto fail;
  }
  return p;
fail:
  diag_move(diag, &local, diag_arena);
  kg_program_free(p);
  return NULL;
}

/* Is every value e takes exactly representable in t? (Reads of t tensors, constants of t, a conversion to t, and
 * what selects, negates or picks among such values: data movement, no arithmetic.) */
static int exact_in(const kg_expr *e, kg_dtype t) {
  switch (e->kind) {
    case KG_EXPR_READ: return e->read.tensor && e->read.tensor->dtype == t;
    case KG_EXPR_NUM: {
      double v = e->num.is_int ? (double)e->num.i : e->num.f;
      return kg_dtype_round(t, v) == v;
    }
    case KG_EXPR_UNARY: return e->op.op == KG_OP_NEG && exact_in(e->op.a, t);
    case KG_EXPR_CALL:
      switch (e->call.fn) {
        case KG_FN_F16: return t == KG_DT_F16;
        case KG_FN_BF16: return t == KG_DT_BF16;
        case KG_FN_ABS:
        case KG_FN_F32: return exact_in(e->call.args[0], t);
        case KG_FN_MAX:
        case KG_FN_MIN: return exact_in(e->call.args[0], t) && exact_in(e->call.args[1], t);
        case KG_FN_SELECT: return exact_in(e->call.args[1], t) && exact_in(e->call.args[2], t);
        default: return 0;
      }
    default: return 0;
  }
}

int kg_program_set_io_dtype(kg_program *p, kg_dtype t, kg_diag *diag, kg_arena *diag_arena) {
  for (int i = 0; i < p->ninputs + p->noutputs; i++) (i < p->ninputs ? p->inputs[i] : p->outputs[i - p->ninputs])->dtype = t;
  /* An intermediate that only moves the retyped data (a convolution's padded input) holds values of t: stored as t
   * it computes the same, whatever type it was declared with, in half the memory, and stays an operand the tensor
   * cores take. Repeated until nothing changes, so that a chain of such copies is retyped whatever its order. */
  for (int changed = t != KG_DT_F32; changed;) {
    changed = 0;
    for (int i = 0; i < p->ntensors; i++) {
      kg_tensor *x = p->tensors[i];
      if (x->kind == KG_TENSOR_TEMP && x->stmt && x->dtype != t && exact_in(x->stmt->rhs, t)) {
        x->dtype = t;
        changed = 1;
      }
    }
  }
  /* the extracted reductions' tensors go: the stages are made again from the checked statements */
  kg_tensor **ts = KG_NEW_ARRAY(&p->arena, kg_tensor *, p->ntensors + 1);
  int n = 0;
  for (int i = 0; i < p->ntensors; i++)
    if (!(p->tensors[i]->kind == KG_TENSOR_TEMP && !p->tensors[i]->stmt)) ts[n++] = p->tensors[i];
  p->tensors = ts;
  p->ntensors = n;
  kg_program_build_stages(p);
  p->io_retyped = 1;
  p->io_dtype = t;
  if (p->nstages > KG_MAX_STAGES) {
    const kg_stage *st = p->stages[KG_MAX_STAGES];
    kg_diag_error(diag, diag_arena, st->out->stmt ? st->out->stmt->pos : st->body->pos,
                  "too many stages in %s: a def makes at most %d (its statements, the reductions nested in them, "
                  "and one per reduction into an f16/bf16 tensor)", kg_dtype_names[t], KG_MAX_STAGES);
    return -1;
  }
  return 0;
}

void kg_program_free(kg_program *p) {
  if (!p) return;
  kg_arena_free(&p->arena);
  free(p);
}

int64_t kg_tensor_numel(const kg_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

kg_tensor *kg_program_find_tensor(const kg_program *p, const char *name) {
  for (int i = 0; i < p->ntensors; i++)
    if (strcmp(p->tensors[i]->name, name) == 0) return p->tensors[i];
  return NULL;
}

int kg_expr_nchildren(const kg_expr *e) {
  switch (e->kind) {
  case KG_EXPR_UNARY: return e->op.a ? 1 : 0;
  case KG_EXPR_BINARY: return 2;
  case KG_EXPR_READ: return e->read.n;
  case KG_EXPR_CALL: return e->call.n;
  case KG_EXPR_REDUCE: return e->reduce.body ? 1 : 0;
  default: return 0;
  }
}

kg_expr **kg_expr_child(kg_expr *e, int i) {
  switch (e->kind) {
  case KG_EXPR_UNARY: return &e->op.a;
  case KG_EXPR_BINARY: return i == 0 ? &e->op.a : &e->op.b;
  case KG_EXPR_READ: return &e->read.idx[i];
  case KG_EXPR_CALL: return &e->call.args[i];
  case KG_EXPR_REDUCE: return &e->reduce.body;
  default: return NULL;
  }
}

int kg_expr_uses_ivar(const kg_expr *e, const kg_ivar *iv) {
  if (e->kind == KG_EXPR_IVAR) return e->var.iv == iv;
  int n = kg_expr_nchildren(e);
  for (int i = 0; i < n; i++)
    if (kg_expr_uses_ivar(*kg_expr_child((kg_expr *)e, i), iv)) return 1;
  return 0;
}
