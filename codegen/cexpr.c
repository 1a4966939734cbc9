/* Prints loop-IR expressions as C-family source for the C and CUDA printers (see cexpr.h).
 *
 * Integer division and modulo, and f32 modulo, become helper calls (the IR's division rounds towards -infinity,
 * C's towards zero); the integer minimum of a tightened extent becomes the dialect's min helper.
 *
 * Requires: expressions built by lowering (lower/ir.h); a dialect with every field set. */
#include "cexpr.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* C precedence, higher binds tighter. */
static int prec_of(const kg_irexpr *e) {
  switch (e->kind) {
    case KG_IRE_BINARY:
      if (e->ty == KG_TY_INT && (e->bin.op == KG_OP_DIV || e->bin.op == KG_OP_MOD)) return 20; /* helper call */
      if (e->ty == KG_TY_F32 && e->bin.op == KG_OP_MOD) return 20;                            /* fmodf */
      switch (e->bin.op) {
        case KG_OP_MUL:
        case KG_OP_DIV:
        case KG_OP_MOD: return 12;
        case KG_OP_ADD:
        case KG_OP_SUB: return 11;
        case KG_OP_LT:
        case KG_OP_LE:
        case KG_OP_GT:
        case KG_OP_GE: return 9;
        case KG_OP_EQ:
        case KG_OP_NE: return 8;
        case KG_OP_AND: return 4;
        case KG_OP_OR: return 3;
        default: return 0;
      }
    case KG_IRE_UNARY:
    case KG_IRE_CAST: return 14;
    case KG_IRE_SELECT: return kg_ir_is_min_int(e) ? 20 : 2;
    case KG_IRE_INT: return e->i < 0 && e->ty == KG_TY_INT ? 14 : 20;
    default: return 20;
  }
}

/* Values past f32's range round to infinity, which needs the dialect's spelling (printing (float)v with %g would
 * give "inf"). */
void kg_cexpr_put_float(const kg_cexpr_dialect *d, kg_strbuf *b, double v) {
  float f = (float)v;
  if (isnan(f)) {
    kg_strbuf_puts(b, d->nan);
    return;
  }
  if (isinf(f)) {
    kg_strbuf_puts(b, f < 0 ? d->neg_inf : d->inf);
    return;
  }
  char tmp[64];
  snprintf(tmp, sizeof tmp, "%.9g", (double)f);
  if (!strpbrk(tmp, ".eEn")) strcat(tmp, ".0");
  if (tmp[0] == '-') kg_strbuf_printf(b, "(%sf)", tmp);
  else kg_strbuf_printf(b, "%sf", tmp);
}

void kg_cexpr_put_int(const kg_cexpr_dialect *d, kg_strbuf *b, int64_t v) {
  if (v > INT32_MAX || v < INT32_MIN) kg_strbuf_printf(b, "%s%lld%s", d->int64_open, (long long)v, d->int64_close);
  else if (v < 0) kg_strbuf_printf(b, "(%lld)", (long long)v);
  else kg_strbuf_printf(b, "%lld", (long long)v);
}

void kg_cexpr_put_comment(kg_strbuf *b, int ind, const char *text) {
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "/* ");
  for (const char *t = text; *t; t++) {
    if (t[0] == '*' && t[1] == '/') {
      kg_strbuf_puts(b, "* /");
      t++;
    } else if (*t == '\n') {
      kg_strbuf_putc(b, ' ');
    } else {
      kg_strbuf_putc(b, *t);
    }
  }
  kg_strbuf_puts(b, " */\n");
}

/* The functions both dialects provide (the helpers kg_* are defined by each printer's prelude); NULL for a call
 * the printers do not know. */
static const char *func_name(const kg_cexpr_dialect *d, kg_func fn) {
  switch (fn) {
    case KG_FN_EXP: return d->exp;
    case KG_FN_LOG: return d->log;
    case KG_FN_SQRT: return "sqrtf";
    case KG_FN_RSQRT: return d->rsqrt;
    case KG_FN_TANH: return d->tanh;
    case KG_FN_ERF: return d->erf;
    case KG_FN_ABS: return "fabsf";
    case KG_FN_SIGMOID: return "kg_sigmoid";
    case KG_FN_POW: return "powf";
    case KG_FN_MAX: return "kg_maxf";
    case KG_FN_MIN: return "kg_minf";
    case KG_FN_F32: return "kg_cvt_f32";
    case KG_FN_F16: return "kg_cvt_f16";
    case KG_FN_BF16: return "kg_cvt_bf16";
    default: return NULL;
  }
}

/* A call helper(a, b). */
static void put_call2(const kg_cexpr_printer *p, const char *fn, const kg_irexpr *a, const kg_irexpr *b) {
  kg_strbuf_printf(p->b, "%s(", fn);
  kg_cexpr_put_expr(p, a);
  kg_strbuf_puts(p->b, ", ");
  kg_cexpr_put_expr(p, b);
  kg_strbuf_putc(p->b, ')');
}

/* child of a binary operator: parenthesised when it binds more loosely, when it is the right operand at the
 * same level (- and / are not associative), and where -Wparentheses asks (a comparison inside a comparison,
 * && inside ||). */
static void put_operand(const kg_cexpr_printer *p, const kg_irexpr *parent, const kg_irexpr *child, int right) {
  int pp = prec_of(parent), cp = prec_of(child);
  int paren = cp < pp || (right && cp == pp) || (cp == 9 || cp == 8 ? pp == 9 || pp == 8 : 0) ||
              (pp == 3 && cp == 4);
  if (paren) kg_strbuf_putc(p->b, '(');
  kg_cexpr_put_expr(p, child);
  if (paren) kg_strbuf_putc(p->b, ')');
}

void kg_cexpr_put_expr(const kg_cexpr_printer *p, const kg_irexpr *e) {
  kg_strbuf *b = p->b;
  const kg_cexpr_dialect *d = p->d;
  switch (e->kind) {
    case KG_IRE_INT:
      if (e->ty == KG_TY_BOOL) kg_strbuf_puts(b, e->i ? d->true_lit : d->false_lit);
      else kg_cexpr_put_int(d, b, e->i);
      break;
    case KG_IRE_FLOAT: kg_cexpr_put_float(d, b, e->f); break;
    case KG_IRE_VAR: kg_strbuf_puts(b, e->var->name ? e->var->name : "kg_unnamed"); break;
    case KG_IRE_THREAD:
      if (d->thread_index) kg_strbuf_puts(b, kg_thread_tag_names[e->tag]);
      else if (p->fail) p->fail(p->ctx, "a thread index outside CUDA");
      break;
    case KG_IRE_LOAD:
      if (p->load && p->load(p->ctx, b, e)) break;
      if (e->load.buf->dtype != KG_DT_F32) kg_strbuf_printf(b, "kg_ld_%s(", kg_dtype_names[e->load.buf->dtype]);
      kg_strbuf_printf(b, "%s[", e->load.buf->name);
      kg_cexpr_put_expr(p, e->load.index);
      kg_strbuf_putc(b, ']');
      if (e->load.buf->dtype != KG_DT_F32) kg_strbuf_putc(b, ')');
      break;
    case KG_IRE_BINARY: {
      kg_op op = e->bin.op;
      if (e->ty == KG_TY_F32 && op == KG_OP_MOD) {
        put_call2(p, "fmodf", e->bin.a, e->bin.b);
        break;
      }
      if (e->ty == KG_TY_INT && (op == KG_OP_DIV || op == KG_OP_MOD)) {
        put_call2(p, op == KG_OP_DIV ? d->floordiv : d->floormod, e->bin.a, e->bin.b);
        break;
      }
      int64_t c;
      put_operand(p, e, e->bin.a, 0);
      if (op == KG_OP_ADD && e->ty == KG_TY_INT && kg_ir_is_const(e->bin.b, &c) && c < 0 && c != INT64_MIN) {
        kg_strbuf_puts(b, " - ");
        kg_cexpr_put_int(d, b, -c);
        break;
      }
      kg_strbuf_printf(b, " %s ", kg_op_names[op]);
      put_operand(p, e, e->bin.b, 1);
      break;
    }
    case KG_IRE_UNARY:
      kg_strbuf_puts(b, kg_op_names[e->bin.op]);
      if (prec_of(e->bin.a) < 20 || e->bin.a->kind == KG_IRE_UNARY) {
        kg_strbuf_putc(b, '(');
        kg_cexpr_put_expr(p, e->bin.a);
        kg_strbuf_putc(b, ')');
      } else {
        kg_cexpr_put_expr(p, e->bin.a);
      }
      break;
    case KG_IRE_CALL: {
      const char *fn = func_name(d, e->call.fn);
      if (!fn) {
        char msg[128];
        snprintf(msg, sizeof msg, "unexpected call of %s", kg_func_names[e->call.fn]);
        p->fail(p->ctx, msg);
        break;
      }
      kg_strbuf_printf(b, "%s(", fn);
      for (int i = 0; i < e->call.n; i++) {
        if (i) kg_strbuf_puts(b, ", ");
        kg_cexpr_put_expr(p, e->call.args[i]);
      }
      kg_strbuf_putc(b, ')');
      break;
    }
    case KG_IRE_SELECT:
      if (kg_ir_is_min_int(e)) {
        put_call2(p, d->min_int, e->sel.a, e->sel.b);
        break;
      }
      kg_strbuf_putc(b, '(');
      kg_cexpr_put_expr(p, e->sel.c);
      kg_strbuf_puts(b, " ? ");
      kg_cexpr_put_expr(p, e->sel.a);
      kg_strbuf_puts(b, " : ");
      kg_cexpr_put_expr(p, e->sel.b);
      kg_strbuf_putc(b, ')');
      break;
    case KG_IRE_CAST:
      kg_strbuf_puts(b, "(float)(");
      kg_cexpr_put_expr(p, e->bin.a);
      kg_strbuf_putc(b, ')');
      break;
  }
}

void kg_cexpr_put_store(const kg_cexpr_printer *p, const kg_buffer *buf, const kg_irexpr *index,
                        const kg_irexpr *value) {
  kg_strbuf *b = p->b;
  kg_strbuf_printf(b, "%s[", buf->name);
  kg_cexpr_put_expr(p, index);
  kg_strbuf_puts(b, "] = ");
  if (buf->dtype == KG_DT_F32) {
    kg_cexpr_put_expr(p, value);
  } else if (value->kind == KG_IRE_LOAD && value->load.buf->dtype == buf->dtype) {
    /* an element copied between buffers of one narrow type: its bits, without the round trip through f32 (no
     * printer's load hook takes narrow loads: vector accesses are f32 only) */
    kg_strbuf_printf(b, "%s[", value->load.buf->name);
    kg_cexpr_put_expr(p, value->load.index);
    kg_strbuf_putc(b, ']');
  } else {
    kg_strbuf_printf(b, "kg_st_%s(", kg_dtype_names[buf->dtype]);
    kg_cexpr_put_expr(p, value);
    kg_strbuf_putc(b, ')');
  }
  kg_strbuf_puts(b, ";\n");
}

const char *kg_cexpr_elem_type(const kg_cexpr_dialect *d, kg_dtype t) {
  return t == KG_DT_F32 ? "float" : d->half_type;
}

int kg_cexpr_valid_ident(const char *s) {
  if (!s || !*s || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return 0;
  for (; *s; s++)
    if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9'))) return 0;
  return 1;
}
