/* Printing expressions in the language's syntax (minimal parentheses) and the canonical text of a checked
 * program. Works on the parsed AST as well as on checked trees and stage bodies. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "../base/strbuf.h"
#include "te.h"

/* Binding strength: || 1, && 2, == != 3, < <= > >= 4, + - 5, * / % 6, unary 7, primaries 8. */
static int prec_of(const kg_expr *e) {
  switch (e->kind) {
  case KG_EXPR_BINARY:
    switch (e->op.op) {
    case KG_OP_OR: return 1;
    case KG_OP_AND: return 2;
    case KG_OP_EQ: case KG_OP_NE: return 3;
    case KG_OP_LT: case KG_OP_LE: case KG_OP_GT: case KG_OP_GE: return 4;
    case KG_OP_ADD: case KG_OP_SUB: return 5;
    default: return 6;
    }
  case KG_EXPR_UNARY: return 7;
  case KG_EXPR_NUM: return (e->num.is_int ? e->num.i < 0 : e->num.f < 0) ? 7 : 8;
  default: return 8;
  }
}

static void print_num(kg_strbuf *b, const kg_expr *e) {
  if (e->num.is_int) {
    kg_strbuf_printf(b, "%" PRId64, e->num.i);
    return;
  }
  /* %.9g round-trips an f32 value; a float literal keeps a '.' or exponent so that it reads back as a float. */
  char tmp[64];
  snprintf(tmp, sizeof tmp, "%.17g", e->num.f);
  double back;
  if (sscanf(tmp, "%lf", &back) == 1) {
    char shorter[64];
    snprintf(shorter, sizeof shorter, "%.9g", e->num.f);
    double b2;
    if (sscanf(shorter, "%lf", &b2) == 1 && b2 == e->num.f) memcpy(tmp, shorter, sizeof tmp);
  }
  kg_strbuf_puts(b, tmp);
  if (!strpbrk(tmp, ".eEni")) kg_strbuf_puts(b, ".0");
}

static void print_rvar(kg_strbuf *b, const kg_program *p, const kg_ivar *iv) {
  kg_strbuf_puts(b, iv->name);
  if (iv->extent > 0) {
    kg_strbuf_printf(b, " in %" PRId64 "..%" PRId64, iv->lo, iv->lo + iv->extent);
  } else if (iv->lo_expr) {
    kg_strbuf_puts(b, " in ");
    kg_expr_print(b, p, iv->lo_expr);
    kg_strbuf_puts(b, "..");
    kg_expr_print(b, p, iv->hi_expr);
  }
}

static void print_prec(kg_strbuf *b, const kg_program *p, const kg_expr *e, int need) {
  int prec = prec_of(e);
  if (prec < need) kg_strbuf_putc(b, '(');
  switch (e->kind) {
  case KG_EXPR_NUM: print_num(b, e); break;
  case KG_EXPR_NAME: kg_strbuf_puts(b, e->var.name); break;
  case KG_EXPR_IVAR: kg_strbuf_puts(b, e->var.iv ? e->var.iv->name : e->var.name); break;
  case KG_EXPR_SIZE:
    kg_strbuf_puts(b, p && e->var.size >= 0 && e->var.size < p->nsizes ? p->sizes[e->var.size].name : e->var.name);
    break;
  case KG_EXPR_READ:
    kg_strbuf_puts(b, e->read.tensor ? e->read.tensor->name : e->read.name);
    kg_strbuf_putc(b, '[');
    for (int i = 0; i < e->read.n; i++) {
      if (i) kg_strbuf_puts(b, ", ");
      print_prec(b, p, e->read.idx[i], 1);
    }
    kg_strbuf_putc(b, ']');
    break;
  case KG_EXPR_UNARY:
    kg_strbuf_puts(b, e->op.op == KG_OP_NOT ? "!" : "-");
    print_prec(b, p, e->op.a, 7);
    break;
  case KG_EXPR_BINARY:
    print_prec(b, p, e->op.a, prec);
    kg_strbuf_printf(b, " %s ", kg_op_names[e->op.op]);
    print_prec(b, p, e->op.b, prec + 1);
    break;
  case KG_EXPR_CALL:
    kg_strbuf_puts(b, kg_func_names[e->call.fn]);
    kg_strbuf_putc(b, '(');
    for (int i = 0; i < e->call.n; i++) {
      if (i) kg_strbuf_puts(b, ", ");
      print_prec(b, p, e->call.args[i], 1);
    }
    kg_strbuf_putc(b, ')');
    break;
  case KG_EXPR_REDUCE:
    kg_strbuf_puts(b, kg_reducer_names[e->reduce.red]);
    kg_strbuf_putc(b, '[');
    for (int i = 0; i < e->reduce.nrv; i++) {
      if (i) kg_strbuf_puts(b, ", ");
      print_rvar(b, p, e->reduce.rv[i]);
    }
    kg_strbuf_puts(b, "](");
    print_prec(b, p, e->reduce.body, 1);
    kg_strbuf_putc(b, ')');
    break;
  }
  if (prec < need) kg_strbuf_putc(b, ')');
}

void kg_expr_print(kg_strbuf *b, const kg_program *p, const kg_expr *e) { print_prec(b, p, e, 1); }

static void print_shape(kg_strbuf *b, const kg_tensor *t) {
  kg_strbuf_printf(b, " : %s[", kg_dtype_names[t->dtype]);
  for (int d = 0; d < t->ndim; d++) kg_strbuf_printf(b, "%s%" PRId64, d ? ", " : "", t->shape[d]);
  kg_strbuf_putc(b, ']');
}

/* def NAME(SIZE=V, ...)
 * input A : f32[64, 128]
 * output C[i, j] : f32[64, 32] = sum[k in 0..128](A[i, k] * B[k, j])      one line per stage, in order */
char *kg_program_canonical(const kg_program *p) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_strbuf_printf(&b, "def %s(", p->def ? p->def->name : "?");
  for (int i = 0; i < p->nsizes; i++)
    kg_strbuf_printf(&b, "%s%s=%" PRId64, i ? ", " : "", p->sizes[i].name, p->sizes[i].value);
  kg_strbuf_puts(&b, ")\n");
  for (int i = 0; i < p->ninputs; i++) {
    kg_strbuf_printf(&b, "input %s", p->inputs[i]->name);
    print_shape(&b, p->inputs[i]);
    kg_strbuf_putc(&b, '\n');
  }
  for (int s = 0; s < p->nstages; s++) {
    const kg_stage *st = p->stages[s];
    kg_strbuf_printf(&b, "%s %s[", st->out->kind == KG_TENSOR_OUTPUT ? "output" : "temp", st->out->name);
    for (int i = 0; i < st->nax; i++) kg_strbuf_printf(&b, "%s%s", i ? ", " : "", st->ax[i]->name);
    kg_strbuf_putc(&b, ']');
    print_shape(&b, st->out);
    kg_strbuf_puts(&b, " = ");
    if (st->red != KG_RED_NONE) {
      kg_strbuf_printf(&b, "%s[", kg_reducer_names[st->red]);
      for (int r = 0; r < st->nrax; r++) {
        if (r) kg_strbuf_puts(&b, ", ");
        print_rvar(&b, p, st->rax[r]);
      }
      kg_strbuf_puts(&b, "](");
      kg_expr_print(&b, p, st->body);
      kg_strbuf_putc(&b, ')');
    } else {
      kg_expr_print(&b, p, st->body);
    }
    kg_strbuf_putc(&b, '\n');
  }
  return kg_strbuf_take(&b);
}
