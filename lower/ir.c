/* Loop-nest IR: constructors (with the constant folding lowering relies on) and the pseudo-code dump.
 *
 * Folding happens in the constructors so that index arithmetic built from split/fuse relations comes out
 * simplified (x + 0, x * 1, c1 op c2, (x + c1) + c2). Booleans that fold are KG_IRE_INT nodes of type BOOL. */
#include "ir.h"
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../base/intmath.h"
#include "../base/strbuf.h"

static kg_irexpr *new_expr(kg_arena *a, kg_irexpr_kind k, kg_type ty) {
  kg_irexpr *e = KG_NEW(a, kg_irexpr);
  e->kind = k;
  e->ty = ty;
  return e;
}

kg_irexpr *kg_ir_int(kg_arena *a, int64_t v) {
  kg_irexpr *e = new_expr(a, KG_IRE_INT, KG_TY_INT);
  e->i = v;
  return e;
}

static kg_irexpr *ir_bool(kg_arena *a, int v) {
  kg_irexpr *e = new_expr(a, KG_IRE_INT, KG_TY_BOOL);
  e->i = v != 0;
  return e;
}

kg_irexpr *kg_ir_float(kg_arena *a, double v) {
  kg_irexpr *e = new_expr(a, KG_IRE_FLOAT, KG_TY_F32);
  e->f = v;
  return e;
}

kg_irexpr *kg_ir_var(kg_arena *a, kg_irvar *v) {
  kg_irexpr *e = new_expr(a, KG_IRE_VAR, KG_TY_INT);
  e->var = v;
  return e;
}

kg_irexpr *kg_ir_thread(kg_arena *a, kg_thread_tag tag) {
  kg_irexpr *e = new_expr(a, KG_IRE_THREAD, KG_TY_INT);
  e->tag = tag;
  return e;
}

kg_irexpr *kg_ir_load(kg_arena *a, kg_buffer *b, kg_irexpr *index) {
  kg_irexpr *e = new_expr(a, KG_IRE_LOAD, KG_TY_F32);
  e->load.buf = b;
  e->load.index = index;
  return e;
}

int kg_ir_children(kg_irexpr *e, kg_irexpr **kids[KG_IR_MAX_CHILDREN]) {
  switch (e->kind) {
    case KG_IRE_LOAD: kids[0] = &e->load.index; return 1;
    case KG_IRE_BINARY:
      kids[0] = &e->bin.a;
      kids[1] = &e->bin.b;
      return 2;
    case KG_IRE_UNARY:
    case KG_IRE_CAST: kids[0] = &e->bin.a; return 1;
    case KG_IRE_CALL:
      for (int i = 0; i < e->call.n && i < KG_IR_MAX_CHILDREN; i++) kids[i] = &e->call.args[i];
      return e->call.n < KG_IR_MAX_CHILDREN ? e->call.n : KG_IR_MAX_CHILDREN;
    case KG_IRE_SELECT:
      kids[0] = &e->sel.c;
      kids[1] = &e->sel.a;
      kids[2] = &e->sel.b;
      return 3;
    default: return 0;
  }
}

void kg_ir_mark_vars(const kg_irexpr *e, unsigned char *mark, int n) {
  if (e->kind == KG_IRE_VAR) {
    if (e->var->id < n) mark[e->var->id] = 1;
    return;
  }
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int nk = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < nk; i++) kg_ir_mark_vars(*kids[i], mark, n);
}

int kg_ir_uses_marked(const kg_irexpr *e, const unsigned char *mark, int n) {
  if (e->kind == KG_IRE_VAR) return e->var->id < n && mark[e->var->id];
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int nk = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < nk; i++)
    if (kg_ir_uses_marked(*kids[i], mark, n)) return 1;
  return 0;
}

int kg_ir_is_const(const kg_irexpr *e, int64_t *v) {
  if (!e || e->kind != KG_IRE_INT) return 0;
  if (v) *v = e->i;
  return 1;
}

kg_irexpr *kg_ir_min_int(kg_arena *a, kg_irexpr *x, kg_irexpr *y) {
  return kg_ir_select(a, kg_ir_binary(a, KG_OP_LT, x, y), x, y);
}

int kg_ir_is_min_int(const kg_irexpr *e) {
  return e->kind == KG_IRE_SELECT && e->ty == KG_TY_INT && e->sel.c->kind == KG_IRE_BINARY &&
         e->sel.c->bin.op == KG_OP_LT && e->sel.c->bin.a == e->sel.a && e->sel.c->bin.b == e->sel.b;
}

int kg_ir_const_upper(const kg_irexpr *e, int64_t *u) {
  if (kg_ir_is_const(e, u)) return 1;
  if (!kg_ir_is_min_int(e)) return 0;
  int64_t x, y;
  int kx = kg_ir_const_upper(e->sel.a, &x), ky = kg_ir_const_upper(e->sel.b, &y);
  if (kx && ky) *u = x < y ? x : y;
  else if (kx) *u = x;
  else if (ky) *u = y;
  return kx || ky;
}


/* Folds c1 op c2 for INT constants; 0 when it cannot (overflow, division by zero). */
static int fold_int(kg_op op, int64_t x, int64_t y, int64_t *r) {
  switch (op) {
    case KG_OP_ADD: return !__builtin_add_overflow(x, y, r);
    case KG_OP_SUB: return !__builtin_sub_overflow(x, y, r);
    case KG_OP_MUL: return !__builtin_mul_overflow(x, y, r);
    case KG_OP_DIV:
      if (y == 0 || (x == INT64_MIN && y == -1)) return 0;
      *r = kg_int_floordiv(x, y);
      return 1;
    case KG_OP_MOD:
      if (y == 0 || (x == INT64_MIN && y == -1)) return 0;
      *r = kg_int_floormod(x, y);
      return 1;
    case KG_OP_LT: *r = x < y; return 1;
    case KG_OP_LE: *r = x <= y; return 1;
    case KG_OP_GT: *r = x > y; return 1;
    case KG_OP_GE: *r = x >= y; return 1;
    case KG_OP_EQ: *r = x == y; return 1;
    case KG_OP_NE: *r = x != y; return 1;
    default: return 0;
  }
}

static int is_compare(kg_op op) {
  return op == KG_OP_LT || op == KG_OP_LE || op == KG_OP_GT || op == KG_OP_GE || op == KG_OP_EQ || op == KG_OP_NE;
}

kg_irexpr *kg_ir_cast_f32(kg_arena *a, kg_irexpr *x) {
  if (x->ty == KG_TY_F32) return x;
  if (x->kind == KG_IRE_INT) return kg_ir_float(a, (double)x->i);
  kg_irexpr *e = new_expr(a, KG_IRE_CAST, KG_TY_F32);
  e->bin.a = x;
  return e;
}

kg_irexpr *kg_ir_binary(kg_arena *a, kg_op op, kg_irexpr *x, kg_irexpr *y) {
  assert(x && y);
  if (op == KG_OP_AND || op == KG_OP_OR) {
    int64_t c;
    if (kg_ir_is_const(x, &c)) return (op == KG_OP_AND) == (c != 0) ? y : ir_bool(a, c);
    if (kg_ir_is_const(y, &c) && (op == KG_OP_AND) == (c != 0)) return x;
    kg_irexpr *e = new_expr(a, KG_IRE_BINARY, KG_TY_BOOL);
    e->bin.op = op;
    e->bin.a = x;
    e->bin.b = y;
    return e;
  }
  int fl = x->ty == KG_TY_F32 || y->ty == KG_TY_F32;
  if (fl) {
    /* Values are f32: an INT operand next to an F32 one is converted rather than mixed. */
    x = kg_ir_cast_f32(a, x);
    y = kg_ir_cast_f32(a, y);
  } else {
    int64_t cx = 0, cy = 0, r = 0;
    int kx = kg_ir_is_const(x, &cx), ky = kg_ir_is_const(y, &cy);
    if (kx && ky && fold_int(op, cx, cy, &r)) return is_compare(op) ? ir_bool(a, r) : kg_ir_int(a, r);
    switch (op) {
      case KG_OP_ADD:
        if (kx && cx == 0) return y;
        if (ky && cy == 0) return x;
        /* (x' + c1) + c2 -> x' + (c1 + c2) keeps constants in one place */
        if (ky && x->kind == KG_IRE_BINARY && x->bin.op == KG_OP_ADD && kg_ir_is_const(x->bin.b, &cx) &&
            !__builtin_add_overflow(cx, cy, &r))
          return kg_ir_binary(a, KG_OP_ADD, x->bin.a, kg_ir_int(a, r));
        break;
      case KG_OP_SUB:
        if (ky && cy == 0) return x;
        if (ky && cy != INT64_MIN) return kg_ir_binary(a, KG_OP_ADD, x, kg_ir_int(a, -cy));
        break;
      case KG_OP_MUL:
        if ((kx && cx == 0) || (ky && cy == 0)) return kg_ir_int(a, 0);
        if (kx && cx == 1) return y;
        if (ky && cy == 1) return x;
        break;
      case KG_OP_DIV:
        if (ky && cy == 1) return x;
        break;
      case KG_OP_MOD:
        if (ky && (cy == 1 || cy == -1)) return kg_ir_int(a, 0);
        break;
      default: break;
    }
  }
  kg_irexpr *e = new_expr(a, KG_IRE_BINARY, is_compare(op) ? KG_TY_BOOL : fl ? KG_TY_F32 : KG_TY_INT);
  e->bin.op = op;
  e->bin.a = x;
  e->bin.b = y;
  return e;
}

kg_irexpr *kg_ir_unary(kg_arena *a, kg_op op, kg_irexpr *x) {
  int64_t c;
  if (op == KG_OP_NOT) {
    if (kg_ir_is_const(x, &c)) return ir_bool(a, !c);
  } else {
    assert(op == KG_OP_NEG);
    if (x->ty == KG_TY_INT && kg_ir_is_const(x, &c) && c != INT64_MIN) return kg_ir_int(a, -c);
    if (x->kind == KG_IRE_FLOAT) return kg_ir_float(a, -x->f);
    if (x->kind == KG_IRE_UNARY && x->bin.op == KG_OP_NEG) return x->bin.a;
  }
  kg_irexpr *e = new_expr(a, KG_IRE_UNARY, op == KG_OP_NOT ? KG_TY_BOOL : x->ty);
  e->bin.op = op;
  e->bin.a = x;
  return e;
}

kg_irexpr *kg_ir_call(kg_arena *a, kg_func fn, kg_irexpr **args, int n) {
  assert(fn != KG_FN_SELECT && n >= 1 && n <= 3);
  kg_irexpr *e = new_expr(a, KG_IRE_CALL, KG_TY_F32);
  e->call.fn = fn;
  e->call.n = n;
  for (int i = 0; i < n; i++) e->call.args[i] = kg_ir_cast_f32(a, args[i]);
  return e;
}

kg_irexpr *kg_ir_select(kg_arena *a, kg_irexpr *c, kg_irexpr *x, kg_irexpr *y) {
  int64_t v;
  if (x->ty != y->ty) {
    x = kg_ir_cast_f32(a, x);
    y = kg_ir_cast_f32(a, y);
  }
  if (kg_ir_is_const(c, &v)) return v ? x : y;
  kg_irexpr *e = new_expr(a, KG_IRE_SELECT, x->ty);
  e->sel.c = c;
  e->sel.a = x;
  e->sel.b = y;
  return e;
}

static kg_irstmt *new_stmt(kg_arena *a, kg_irstmt_kind k) {
  kg_irstmt *s = KG_NEW(a, kg_irstmt);
  s->kind = k;
  return s;
}

kg_irstmt *kg_ir_seq(kg_arena *a) { return new_stmt(a, KG_IRS_SEQ); }

void kg_ir_seq_push(kg_arena *a, kg_irstmt *seq, kg_irstmt *item) {
  assert(seq->kind == KG_IRS_SEQ);
  if (!item) return;
  KG_PUSH(a, seq->seq.items, seq->seq.n, seq->seq.cap, item);
}

kg_irstmt *kg_ir_for(kg_arena *a, kg_irvar *v, kg_irexpr *extent, kg_loop_kind kind, kg_thread_tag tag,
                     const char *loop_name, const char *stage_name, kg_irstmt *body) {
  kg_irstmt *s = new_stmt(a, KG_IRS_FOR);
  s->loop.var = v;
  s->loop.extent = extent;
  s->loop.kind = kind;
  s->loop.tag = tag;
  s->loop.loop_name = loop_name;
  s->loop.stage_name = stage_name;
  s->loop.body = body;
  return s;
}

kg_irstmt *kg_ir_if(kg_arena *a, kg_irexpr *cond, kg_irstmt *then, kg_irstmt *otherwise) {
  kg_irstmt *s = new_stmt(a, KG_IRS_IF);
  s->cond.cond = cond;
  s->cond.then = then;
  s->cond.otherwise = otherwise;
  return s;
}

kg_irstmt *kg_ir_store(kg_arena *a, kg_buffer *b, kg_irexpr *index, kg_irexpr *value) {
  kg_irstmt *s = new_stmt(a, KG_IRS_STORE);
  s->store.buf = b;
  s->store.index = index;
  s->store.value = value;
  return s;
}

kg_irstmt *kg_ir_let(kg_arena *a, kg_irvar *v, kg_irexpr *value) {
  kg_irstmt *s = new_stmt(a, KG_IRS_LET);
  s->let.var = v;
  s->let.value = value;
  return s;
}

kg_irstmt *kg_ir_alloc(kg_arena *a, kg_buffer *b, kg_irstmt *body) {
  kg_irstmt *s = new_stmt(a, KG_IRS_ALLOC);
  s->alloc.buf = b;
  s->alloc.body = body;
  return s;
}

kg_irstmt *kg_ir_barrier(kg_arena *a) { return new_stmt(a, KG_IRS_BARRIER); }

const char *const kg_allreduce_how_names[] = {"unplanned", "one thread", "warp shuffles",
                                              "warp shuffles then shared memory", "shared memory"};

kg_irstmt *kg_ir_allreduce(kg_arena *a, kg_buffer *b, kg_reducer red, kg_thread_tag tag, int64_t extent,
                           const char *stage_name, const char *loop_name) {
  kg_irstmt *s = new_stmt(a, KG_IRS_ALLREDUCE);
  s->allreduce.buf = b;
  s->allreduce.red = red;
  s->allreduce.tag = tag;
  s->allreduce.extent = extent;
  s->allreduce.stage_name = stage_name;
  s->allreduce.loop_name = loop_name;
  return s;
}

kg_irstmt *kg_ir_async_commit(kg_arena *a) { return new_stmt(a, KG_IRS_ASYNC_COMMIT); }

kg_irstmt *kg_ir_async_wait(kg_arena *a, int pending) {
  kg_irstmt *s = new_stmt(a, KG_IRS_ASYNC_WAIT);
  s->async_wait.pending = pending;
  return s;
}

kg_irstmt *kg_ir_mma(kg_arena *a, kg_buffer *fa, kg_irexpr *a_off, kg_buffer *fb, kg_irexpr *b_off, kg_buffer *c,
                     kg_irexpr *const c_index[4], kg_dtype t, const char *stage_name) {
  kg_irstmt *s = new_stmt(a, KG_IRS_MMA);
  s->mma.a = fa;
  s->mma.b = fb;
  s->mma.a_off = a_off;
  s->mma.b_off = b_off;
  s->mma.c = c;
  for (int i = 0; i < 4; i++) s->mma.c_index[i] = c_index[i];
  s->mma.dtype = t;
  s->mma.stage_name = stage_name;
  return s;
}

kg_irstmt *kg_ir_ldmatrix(kg_arena *a, kg_buffer *dst, kg_irexpr *dst_off, kg_buffer *src, kg_irexpr *src_index,
                          int count, int trans, const char *stage_name) {
  kg_irstmt *s = new_stmt(a, KG_IRS_LDMATRIX);
  s->ldm.dst = dst;
  s->ldm.dst_off = dst_off;
  s->ldm.src = src;
  s->ldm.src_index = src_index;
  s->ldm.count = count;
  s->ldm.trans = trans;
  s->ldm.stage_name = stage_name;
  return s;
}

kg_irstmt *kg_ir_bfdot(kg_arena *a, const kg_irstmt *fields) {
  kg_irstmt *s = new_stmt(a, KG_IRS_BFDOT);
  s->bfdot = fields->bfdot;
  return s;
}

kg_irstmt *kg_ir_tstore(kg_arena *a, kg_buffer *src, kg_irexpr *src_index, int64_t src_ld, kg_buffer *dst,
                        kg_irexpr *dst_index, int64_t dst_stride, int n, const char *stage_name) {
  kg_irstmt *s = new_stmt(a, KG_IRS_TSTORE);
  s->tstore.src = src;
  s->tstore.src_index = src_index;
  s->tstore.src_ld = src_ld;
  s->tstore.dst = dst;
  s->tstore.dst_index = dst_index;
  s->tstore.dst_stride = dst_stride;
  s->tstore.n = n;
  s->tstore.stage_name = stage_name;
  return s;
}

kg_irstmt *kg_ir_prefetch(kg_arena *a, kg_buffer *buf, kg_irexpr *index) {
  kg_irstmt *s = new_stmt(a, KG_IRS_PREFETCH);
  s->prefetch.buf = buf;
  s->prefetch.index = index;
  return s;
}

kg_irstmt *kg_ir_comment(kg_arena *a, const char *text) {
  kg_irstmt *s = new_stmt(a, KG_IRS_COMMENT);
  s->text = kg_arena_strdup(a, text);
  return s;
}

/* ---- pseudo-code dump ---- */

static void print_expr(kg_strbuf *b, const kg_irexpr *e);

static void print_float(kg_strbuf *b, double v) {
  if (isnan(v)) kg_strbuf_puts(b, "nan");
  else if (isinf(v)) kg_strbuf_puts(b, v < 0 ? "-inf" : "inf");
  else {
    char t[64];
    snprintf(t, sizeof t, "%.9g", (double)(float)v);
    kg_strbuf_printf(b, "%s%sf", t, strpbrk(t, ".en") ? "" : ".0");
  }
}

static void print_expr(kg_strbuf *b, const kg_irexpr *e) {
  switch (e->kind) {
    case KG_IRE_INT:
      if (e->ty == KG_TY_BOOL) kg_strbuf_puts(b, e->i ? "true" : "false");
      else kg_strbuf_printf(b, "%lld", (long long)e->i);
      break;
    case KG_IRE_FLOAT: print_float(b, e->f); break;
    case KG_IRE_VAR: kg_strbuf_puts(b, e->var->name); break;
    case KG_IRE_LOAD:
      kg_strbuf_printf(b, "%s[", e->load.buf->name);
      print_expr(b, e->load.index);
      kg_strbuf_putc(b, ']');
      break;
    case KG_IRE_BINARY:
      if (e->ty == KG_TY_INT && (e->bin.op == KG_OP_DIV || e->bin.op == KG_OP_MOD)) {
        kg_strbuf_puts(b, e->bin.op == KG_OP_DIV ? "floordiv(" : "floormod(");
        print_expr(b, e->bin.a);
        kg_strbuf_puts(b, ", ");
        print_expr(b, e->bin.b);
        kg_strbuf_putc(b, ')');
        break;
      }
      kg_strbuf_putc(b, '(');
      print_expr(b, e->bin.a);
      kg_strbuf_printf(b, " %s ", kg_op_names[e->bin.op]);
      print_expr(b, e->bin.b);
      kg_strbuf_putc(b, ')');
      break;
    case KG_IRE_UNARY:
      kg_strbuf_printf(b, "%s(", kg_op_names[e->bin.op]);
      print_expr(b, e->bin.a);
      kg_strbuf_putc(b, ')');
      break;
    case KG_IRE_CALL:
      kg_strbuf_printf(b, "%s(", kg_func_names[e->call.fn]);
      for (int i = 0; i < e->call.n; i++) {
        if (i) kg_strbuf_puts(b, ", ");
        print_expr(b, e->call.args[i]);
      }
      kg_strbuf_putc(b, ')');
      break;
    case KG_IRE_SELECT:
      if (kg_ir_is_min_int(e)) {
        kg_strbuf_puts(b, "min(");
        print_expr(b, e->sel.a);
        kg_strbuf_puts(b, ", ");
        print_expr(b, e->sel.b);
        kg_strbuf_putc(b, ')');
        break;
      }
      kg_strbuf_puts(b, "select(");
      print_expr(b, e->sel.c);
      kg_strbuf_puts(b, ", ");
      print_expr(b, e->sel.a);
      kg_strbuf_puts(b, ", ");
      print_expr(b, e->sel.b);
      kg_strbuf_putc(b, ')');
      break;
    case KG_IRE_CAST:
      kg_strbuf_puts(b, "f32(");
      print_expr(b, e->bin.a);
      kg_strbuf_putc(b, ')');
      break;
    case KG_IRE_THREAD: kg_strbuf_puts(b, kg_thread_tag_names[e->tag]); break;
  }
}

static void print_stmt(kg_strbuf *b, const kg_irstmt *s, int ind) {
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) print_stmt(b, s->seq.items[i], ind);
      break;
    case KG_IRS_FOR:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "for %s in [0, ", s->loop.var->name);
      print_expr(b, s->loop.extent);
      kg_strbuf_printf(b, ")");
      if (s->loop.kind != KG_LOOP_SERIAL) kg_strbuf_printf(b, " %s", kg_loop_kind_names[s->loop.kind]);
      if (s->loop.tag != KG_THREAD_NONE) kg_strbuf_printf(b, " %s", kg_thread_tag_names[s->loop.tag]);
      if (s->loop.pipeline) kg_strbuf_printf(b, " pipelined(%d)", s->loop.pipeline);
      kg_strbuf_printf(b, "  # %s.%s\n", s->loop.stage_name ? s->loop.stage_name : "?",
                       s->loop.loop_name ? s->loop.loop_name : "?");
      print_stmt(b, s->loop.body, ind + 1);
      break;
    case KG_IRS_IF:
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "if ");
      print_expr(b, s->cond.cond);
      kg_strbuf_puts(b, ":\n");
      print_stmt(b, s->cond.then, ind + 1);
      if (s->cond.otherwise) {
        kg_strbuf_indent(b, ind);
        kg_strbuf_puts(b, "else:\n");
        print_stmt(b, s->cond.otherwise, ind + 1);
      }
      break;
    case KG_IRS_STORE:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "%s%s%s[", s->store.stream ? "stream " : "", s->store.async ? "async " : "",
                       s->store.buf->name);
      print_expr(b, s->store.index);
      kg_strbuf_puts(b, "] = ");
      print_expr(b, s->store.value);
      kg_strbuf_putc(b, '\n');
      break;
    case KG_IRS_LET:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "let %s = ", s->let.var->name);
      print_expr(b, s->let.value);
      kg_strbuf_putc(b, '\n');
      break;
    case KG_IRS_ALLOC:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "alloc %s: %s[%lld] %s", s->alloc.buf->name, kg_dtype_names[s->alloc.buf->dtype],
                       (long long)s->alloc.buf->size, kg_scope_names[s->alloc.buf->scope]);
      if (s->alloc.buf->reg_acc)
        kg_strbuf_printf(b, " register (accumulates %s around loop %s)",
                         s->alloc.buf->reg_acc_of ? s->alloc.buf->reg_acc_of->name : "?",
                         s->alloc.buf->reg_acc_loop ? s->alloc.buf->reg_acc_loop : "?");
      kg_strbuf_putc(b, '\n');
      print_stmt(b, s->alloc.body, ind + 1);
      break;
    case KG_IRS_BARRIER:
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "barrier\n");
      break;
    case KG_IRS_ALLREDUCE:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "allreduce %s %s[0] across %s (%lld%s%s)  # %s.%s\n", kg_reducer_names[s->allreduce.red],
                       s->allreduce.buf->name, kg_thread_tag_names[s->allreduce.tag], (long long)s->allreduce.extent,
                       s->allreduce.how != KG_ALLREDUCE_UNPLANNED ? ", " : "",
                       s->allreduce.how != KG_ALLREDUCE_UNPLANNED ? kg_allreduce_how_names[s->allreduce.how] : "",
                       s->allreduce.stage_name ? s->allreduce.stage_name : "?",
                       s->allreduce.loop_name ? s->allreduce.loop_name : "?");
      break;
    case KG_IRS_COMMENT:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "# %s\n", s->text);
      break;
    case KG_IRS_PREFETCH:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "prefetch %s[", s->prefetch.buf->name);
      print_expr(b, s->prefetch.index);
      kg_strbuf_puts(b, "]\n");
      break;
    case KG_IRS_ASYNC_COMMIT:
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "async commit\n");
      break;
    case KG_IRS_ASYNC_WAIT:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "async wait (at most %d groups in flight)\n", s->async_wait.pending);
      break;
    case KG_IRS_MMA:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "mma m16n8k%d %s: %s[", kg_mma_kstep(s->mma.dtype),
                       s->mma.dtype == KG_DT_F32 ? "tf32" : kg_dtype_names[s->mma.dtype], s->mma.c->name);
      for (int i = 0; i < 4; i++) {
        if (i) kg_strbuf_puts(b, "], [");
        print_expr(b, s->mma.c_index[i]);
      }
      kg_strbuf_printf(b, "] += %s[", s->mma.a->name);
      print_expr(b, s->mma.a_off);
      kg_strbuf_printf(b, ":] x %s[", s->mma.b->name);
      print_expr(b, s->mma.b_off);
      kg_strbuf_printf(b, ":]  # %s\n", s->mma.stage_name ? s->mma.stage_name : "?");
      break;
    case KG_IRS_LDMATRIX:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "%s[", s->ldm.dst->name);
      print_expr(b, s->ldm.dst_off);
      kg_strbuf_printf(b, ":] = ldmatrix x%d%s %s[", s->ldm.count, s->ldm.trans ? " trans" : "", s->ldm.src->name);
      print_expr(b, s->ldm.src_index);
      kg_strbuf_printf(b, "]  # %s\n", s->ldm.stage_name ? s->ldm.stage_name : "?");
      break;
    case KG_IRS_BFDOT:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "bfdot %lld x %lld x %lld: %s[", (long long)s->bfdot.rows, (long long)s->bfdot.cols,
                       (long long)s->bfdot.k, s->bfdot.c->name);
      print_expr(b, s->bfdot.c_index);
      kg_strbuf_puts(b, " + r ");
      print_expr(b, s->bfdot.c_row);
      kg_strbuf_printf(b, " + c] += %s[", s->bfdot.a->name);
      print_expr(b, s->bfdot.a_index);
      kg_strbuf_puts(b, " + r ");
      print_expr(b, s->bfdot.a_row);
      kg_strbuf_puts(b, " + k ");
      print_expr(b, s->bfdot.a_k);
      kg_strbuf_printf(b, "] x %s[", s->bfdot.b->name);
      print_expr(b, s->bfdot.b_index);
      kg_strbuf_puts(b, s->bfdot.b_pairs ? " + k/2 " : " + k ");
      print_expr(b, s->bfdot.b_k);
      kg_strbuf_printf(b, s->bfdot.b_pairs ? " + 2 c + k%%2]  # %s\n" : " + c]  # %s\n",
                       s->bfdot.stage_name ? s->bfdot.stage_name : "?");
      break;
    case KG_IRS_TSTORE:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "tstore %d x %d: %s[", s->tstore.n, s->tstore.n, s->tstore.dst->name);
      print_expr(b, s->tstore.dst_index);
      kg_strbuf_printf(b, " + r + c * %lld] = %s[", (long long)s->tstore.dst_stride, s->tstore.src->name);
      print_expr(b, s->tstore.src_index);
      kg_strbuf_printf(b, " + r * %lld + c]  # %s\n", (long long)s->tstore.src_ld,
                       s->tstore.stage_name ? s->tstore.stage_name : "?");
      break;
  }
}

int kg_ir_eval_sizes(const kg_lowered *f, const kg_irexpr *e, int64_t *v) {
  int64_t x, y;
  switch (e->kind) {
    case KG_IRE_INT: *v = e->i; return 0;
    case KG_IRE_VAR:
      for (int i = 0; i < f->nsize_vars; i++)
        if (f->size_vars[i] == e->var) return *v = f->size_value[i], 0;
      return -1;
    case KG_IRE_SELECT: /* an INT minimum */
      if (e->ty != KG_TY_INT || e->sel.c->kind != KG_IRE_BINARY || e->sel.c->bin.op != KG_OP_LT) return -1;
      if (kg_ir_eval_sizes(f, e->sel.a, &x) || kg_ir_eval_sizes(f, e->sel.b, &y)) return -1;
      *v = x < y ? x : y;
      return 0;
    case KG_IRE_BINARY:
      if (e->ty != KG_TY_INT || kg_ir_eval_sizes(f, e->bin.a, &x) || kg_ir_eval_sizes(f, e->bin.b, &y)) return -1;
      switch (e->bin.op) {
        case KG_OP_ADD: *v = x + y; return 0;
        case KG_OP_SUB: *v = x - y; return 0;
        case KG_OP_MUL: *v = x * y; return 0;
        case KG_OP_DIV:
          if (y == 0) return -1;
          if (x == INT64_MIN && y == -1) return -1;
          *v = kg_int_floordiv(x, y);
          return 0;
        case KG_OP_MOD:
          if (y == 0) return -1;
          if (x == INT64_MIN && y == -1) return -1;
          *v = kg_int_floormod(x, y);
          return 0;
        default: return -1;
      }
    default: return -1;
  }
}

/* A kernel's launch shape as a comment line: a grid extent that follows the sizes is the largest of its terms. */
static void print_launch(kg_strbuf *b, int k, const kg_launch *l) {
  kg_strbuf_printf(b, "  # kernel %d: ", k);
  if (!l->ok) {
    kg_strbuf_puts(b, "launch shape unknown\n");
    return;
  }
  for (int t = KG_THREAD_BLOCK_X; t <= KG_THREAD_THREAD_Z; t++) {
    if (t == KG_THREAD_BLOCK_X || t == KG_THREAD_THREAD_X) kg_strbuf_puts(b, t == KG_THREAD_BLOCK_X ? "grid (" : "block (");
    else kg_strbuf_puts(b, ", ");
    int terms = l->ndyn[t] + (l->ndyn[t] == 0 || l->ext_c[t] > 1);
    if (terms > 1) kg_strbuf_puts(b, "max(");
    for (int i = 0; i < l->ndyn[t]; i++) {
      if (i) kg_strbuf_puts(b, ", ");
      print_expr(b, l->dyn[t][i]);
    }
    if (l->ndyn[t] == 0 || l->ext_c[t] > 1) kg_strbuf_printf(b, "%s%lld", l->ndyn[t] ? ", " : "", (long long)l->ext_c[t]);
    if (terms > 1) kg_strbuf_putc(b, ')');
    if (t == KG_THREAD_BLOCK_Z) kg_strbuf_puts(b, ") ");
  }
  kg_strbuf_puts(b, ")\n");
}

void kg_ir_print(kg_strbuf *b, const kg_lowered *f) {
  kg_strbuf_printf(b, "func %s(", f->name);
  for (int i = 0; i < f->nsize_vars; i++)
    kg_strbuf_printf(b, "size %s in [%lld, %lld], ", f->size_vars[i]->name, (long long)f->size_lo[i],
                     (long long)f->size_hi[i]);
  for (int i = 0; i < f->nparams; i++) {
    const kg_buffer *p = f->params[i];
    kg_strbuf_printf(b, "%s%s %s: %s[%s%lld]", i ? ", " : "", p->is_input ? "in" : "out", p->name,
                     kg_dtype_names[p->dtype], f->nsize_vars ? "<= " : "", (long long)p->size);
  }
  kg_strbuf_puts(b, ")\n");
  for (int i = 0; i < f->ntemps; i++) {
    kg_strbuf_printf(b, "  temp %s: %s[", f->temps[i]->name, kg_dtype_names[f->temps[i]->dtype]);
    if (f->temps[i]->dyn_size) print_expr(b, f->temps[i]->dyn_size);
    else kg_strbuf_printf(b, "%lld", (long long)f->temps[i]->size);
    kg_strbuf_printf(b, "] %s\n", kg_scope_names[f->temps[i]->scope]);
  }
  if (!f->launch || f->body->kind != KG_IRS_SEQ || f->nlaunch != f->body->seq.n) {
    print_stmt(b, f->body, 1);
    return;
  }
  for (int k = 0; k < f->body->seq.n; k++) {
    print_launch(b, k, &f->launch[k]);
    print_stmt(b, f->body->seq.items[k], 1);
  }
}

int kg_ir_is_launch_guard(const kg_irstmt *s) {
  if (s->kind != KG_IRS_IF || s->cond.otherwise || s->cond.then->kind != KG_IRS_FOR) return 0;
  const kg_irstmt *l = s->cond.then;
  const kg_irexpr *c = s->cond.cond;
  int64_t x, y;
  return c->kind == KG_IRE_BINARY && c->bin.op == KG_OP_LT && c->bin.a->kind == KG_IRE_THREAD &&
         c->bin.a->tag == l->loop.tag &&
         (c->bin.b == l->loop.extent ||
          (kg_ir_is_const(c->bin.b, &x) && kg_ir_is_const(l->loop.extent, &y) && x == y));
}

int kg_ir_contains_ctx(const kg_irstmt *s, int (*is)(const kg_irstmt *, const void *), const void *ctx) {
  if (!s) return 0;
  if (is(s, ctx)) return 1;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++)
        if (kg_ir_contains_ctx(s->seq.items[i], is, ctx)) return 1;
      return 0;
    case KG_IRS_FOR: return kg_ir_contains_ctx(s->loop.body, is, ctx);
    case KG_IRS_IF: return kg_ir_contains_ctx(s->cond.then, is, ctx) || kg_ir_contains_ctx(s->cond.otherwise, is, ctx);
    case KG_IRS_ALLOC: return kg_ir_contains_ctx(s->alloc.body, is, ctx);
    default: return 0;
  }
}

static int call_is(const kg_irstmt *s, const void *is) {
  int (*const *f)(const kg_irstmt *) = is;
  return (*f)(s);
}

int kg_ir_contains(const kg_irstmt *s, int (*is)(const kg_irstmt *)) { return kg_ir_contains_ctx(s, call_is, &is); }

int kg_ir_has_load(const kg_irexpr *e) {
  if (e->kind == KG_IRE_LOAD) return 1;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++)
    if (kg_ir_has_load(*kids[i])) return 1;
  return 0;
}

int kg_ir_reads(const kg_irexpr *e, const kg_buffer *b) {
  if (!e) return 0;
  if (e->kind == KG_IRE_LOAD && e->load.buf == b) return 1;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++)
    if (kg_ir_reads(*kids[i], b)) return 1;
  return 0;
}

static int is_sync(const kg_irstmt *s) { return s->kind == KG_IRS_BARRIER || s->kind == KG_IRS_ALLREDUCE; }
static int is_loop(const kg_irstmt *s) { return s->kind == KG_IRS_FOR; }

int kg_ir_contains_sync(const kg_irstmt *s) { return kg_ir_contains(s, is_sync); }

int kg_ir_contains_loop(const kg_irstmt *s) { return kg_ir_contains(s, is_loop); }
