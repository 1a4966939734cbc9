/* The C/OpenMP printer: a lowered function as one self-contained C11 translation unit.
 *
 * Output: helpers (floor division/modulo, sigmoid, rsqrt, max/min, the int64 minimum of tightened loop extents),
 * the function
 *   void NAME(const float *restrict in..., float *restrict out...)
 * and a wrapper `void NAME_args(float **args)` that unpacks an argument array (what kg_cpu_call calls).
 *
 * Allocation failures inside generated code never abort: when a global temporary cannot be allocated the
 * function frees what it got and returns early; when a large local region cannot be allocated its loop body is
 * skipped. Either way outputs stay unwritten (poisoned by the verifier), so the failure is seen as a wrong answer
 * instead of a crash.
 *
 * Requires: a kg_lowered for KG_TARGET_C (no bound loops, no shared allocations: rejected with an error). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "../base/strbuf.h"
#include "cexpr.h"
#include "codegen.h"

/* Local regions up to this many bytes live on the stack. */
#define KG_C_STACK_BYTES (16 * 1024)

typedef struct cgen {
  kg_strbuf b;
  char *err;
  size_t errlen;
  int failed;
} cgen;

static void cfail(cgen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cfail(cgen *g, const char *fmt, ...) {
  if (g->failed) return;
  g->failed = 1;
  if (!g->err || !g->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->err, g->errlen, fmt, ap);
  va_end(ap);
}

static void fail_expr(void *ctx, const char *msg) { cfail(ctx, "codegen c: %s", msg); }

/* The helpers named here are defined by the prelude below. */
static const kg_cexpr_dialect c_dialect = {
    .nan = "NAN",
    .inf = "INFINITY",
    .neg_inf = "(-INFINITY)",
    .int64_open = "INT64_C(",
    .int64_close = ")",
    .true_lit = "1",
    .false_lit = "0",
    .floordiv = "kg_floordiv",
    .floormod = "kg_floormod",
    .min_int = "kg_min64",
    .rsqrt = "kg_rsqrt",
};

static void put_expr(cgen *g, const kg_irexpr *e) {
  kg_cexpr_printer p = {.b = &g->b, .d = &c_dialect, .ctx = g, .fail = fail_expr};
  kg_cexpr_put_expr(&p, e);
}

static int contains_loop(const kg_irstmt *s) {
  switch (s->kind) {
    case KG_IRS_FOR: return 1;
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++)
        if (contains_loop(s->seq.items[i])) return 1;
      return 0;
    case KG_IRS_IF: return contains_loop(s->cond.then) || (s->cond.otherwise && contains_loop(s->cond.otherwise));
    case KG_IRS_ALLOC: return contains_loop(s->alloc.body);
    default: return 0;
  }
}

static void put_stmt(cgen *g, const kg_irstmt *s, int ind);

/* The statements of s without braces of their own (the caller opened a block). */
static void put_block_items(cgen *g, const kg_irstmt *s, int ind) {
  if (s->kind == KG_IRS_SEQ)
    for (int i = 0; i < s->seq.n; i++) put_stmt(g, s->seq.items[i], ind);
  else
    put_stmt(g, s, ind);
}

static void put_stmt(cgen *g, const kg_irstmt *s, int ind) {
  kg_strbuf *b = &g->b;
  if (g->failed) return;
  switch (s->kind) {
    case KG_IRS_SEQ: {
      /* a block of its own only when it declares something (LETs are scoped to their SEQ) */
      int decl = 0;
      for (int i = 0; i < s->seq.n; i++) decl |= s->seq.items[i]->kind == KG_IRS_LET;
      if (!decl) {
        put_block_items(g, s, ind);
        break;
      }
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "{\n");
      put_block_items(g, s, ind + 1);
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "}\n");
      break;
    }
    case KG_IRS_FOR: {
      int64_t ext = 0;
      if (s->loop.kind == KG_LOOP_BOUND || s->loop.tag != KG_THREAD_NONE) {
        cfail(g, "codegen c: stage %s: loop %s is bound to %s, which the C target cannot run",
              s->loop.stage_name ? s->loop.stage_name : "?", s->loop.loop_name ? s->loop.loop_name : "?",
              kg_thread_tag_names[s->loop.tag]);
        return;
      }
      const char *v = s->loop.var->name;
      int is_const = kg_ir_is_const(s->loop.extent, &ext), has_upper = kg_ir_const_upper(s->loop.extent, &ext);
      if (!is_const) {
        /* a tightened extent, computed once before the loop (OpenMP's canonical form needs an invariant bound);
         * kg_n_<var> cannot clash: IR names never start with kg_ and loop variables are unique */
        kg_strbuf_indent(b, ind);
        kg_strbuf_printf(b, "const int64_t kg_n_%s = ", v);
        put_expr(g, s->loop.extent);
        kg_strbuf_puts(b, ";\n");
      }
      switch (s->loop.kind) {
        case KG_LOOP_PARALLEL:
          kg_strbuf_indent(b, ind);
          kg_strbuf_puts(b, "#pragma omp parallel for\n");
          break;
        case KG_LOOP_VECTORIZED:
          kg_strbuf_indent(b, ind);
          if (contains_loop(s->loop.body)) kg_strbuf_puts(b, "/* vectorize: not applied, the body has loops */\n");
          else kg_strbuf_puts(b, "#pragma omp simd\n");
          break;
        case KG_LOOP_UNROLLED:
          kg_strbuf_indent(b, ind);
          kg_strbuf_printf(b, "#pragma GCC unroll %lld\n",
                           (long long)(has_upper ? (ext < 64 ? (ext < 1 ? 1 : ext) : 64) : 8));
          break;
        default: break;
      }
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "for (int64_t %s = 0; %s < ", v, v);
      if (is_const) put_expr(g, s->loop.extent);
      else kg_strbuf_printf(b, "kg_n_%s", v);
      kg_strbuf_printf(b, "; %s++) { /* %s.%s */\n", v, s->loop.stage_name ? s->loop.stage_name : "?",
                       s->loop.loop_name ? s->loop.loop_name : "?");
      put_block_items(g, s->loop.body, ind + 1);
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "}\n");
      break;
    }
    case KG_IRS_IF:
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "if (");
      put_expr(g, s->cond.cond);
      kg_strbuf_puts(b, ") {\n");
      put_block_items(g, s->cond.then, ind + 1);
      kg_strbuf_indent(b, ind);
      if (s->cond.otherwise) {
        kg_strbuf_puts(b, "} else {\n");
        put_block_items(g, s->cond.otherwise, ind + 1);
        kg_strbuf_indent(b, ind);
      }
      kg_strbuf_puts(b, "}\n");
      break;
    case KG_IRS_STORE:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "%s[", s->store.buf->name);
      put_expr(g, s->store.index);
      kg_strbuf_puts(b, "] = ");
      put_expr(g, s->store.value);
      kg_strbuf_puts(b, ";\n");
      break;
    case KG_IRS_LET:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "const int64_t %s = ", s->let.var->name ? s->let.var->name : "kg_unnamed");
      put_expr(g, s->let.value);
      kg_strbuf_puts(b, ";\n");
      break;
    case KG_IRS_ALLOC: {
      const kg_buffer *buf = s->alloc.buf;
      if (buf->scope == KG_SCOPE_SHARED) {
        cfail(g, "codegen c: buffer %s: shared storage is not available on the C target", buf->name);
        return;
      }
      long long n = (long long)(buf->size > 0 ? buf->size : 1);
      kg_strbuf_indent(b, ind);
      if ((uint64_t)n * sizeof(float) <= KG_C_STACK_BYTES) {
        kg_strbuf_printf(b, "{ /* %s: %lld floats, %s */\n", buf->name, n, kg_scope_names[buf->scope]);
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_printf(b, "float %s[%lld];\n", buf->name, n);
        put_block_items(g, s->alloc.body, ind + 1);
      } else {
        /* too large for the stack; on allocation failure the body is skipped (see the file comment) */
        kg_strbuf_printf(b, "{ /* %s: %lld floats, %s, heap */\n", buf->name, n, kg_scope_names[buf->scope]);
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_printf(b, "float *restrict %s = (float *)malloc(sizeof(float) * (size_t)%lld);\n", buf->name, n);
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_printf(b, "if (%s) {\n", buf->name);
        put_block_items(g, s->alloc.body, ind + 2);
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_puts(b, "}\n");
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_printf(b, "free(%s);\n", buf->name);
      }
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "}\n");
      break;
    }
    case KG_IRS_BARRIER:
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "/* barrier (no-op on the CPU) */\n");
      break;
    case KG_IRS_ALLREDUCE:
      cfail(g, "codegen c: stage %s: loop %s: a cross-thread reduction cannot run on the C target",
            s->allreduce.stage_name ? s->allreduce.stage_name : "?",
            s->allreduce.loop_name ? s->allreduce.loop_name : "?");
      return;
    case KG_IRS_COMMENT:
      kg_cexpr_put_comment(b, ind, s->text);
      break;
  }
}

static const char prelude[] =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "#include <stdlib.h>\n"
    "\n"
    "/* Region buffers are written under guards that the compiler cannot relate to the guards of their reads. */\n"
    "#if defined(__GNUC__) && !defined(__clang__)\n"
    "#pragma GCC diagnostic ignored \"-Wmaybe-uninitialized\"\n"
    "#pragma GCC diagnostic ignored \"-Wuninitialized\"\n"
    "#endif\n"
    "\n"
    "static inline int64_t kg_floordiv(int64_t a, int64_t b) {\n"
    "  int64_t q = a / b;\n"
    "  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n"
    "}\n"
    "static inline int64_t kg_floormod(int64_t a, int64_t b) {\n"
    "  int64_t r = a % b;\n"
    "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
    "}\n"
    "static inline float kg_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
    "static inline float kg_rsqrt(float x) { return 1.0f / sqrtf(x); }\n"
    "static inline float kg_maxf(float a, float b) { return a > b ? a : b; }\n"
    "static inline float kg_minf(float a, float b) { return a < b ? a : b; }\n"
    "static inline int64_t kg_min64(int64_t a, int64_t b) { return a < b ? a : b; }\n"
    "\n";

int kg_codegen_c(const kg_lowered *f, const char *fn_name, char **out, char *err, size_t errlen) {
  cgen g;
  memset(&g, 0, sizeof g);
  g.err = err;
  g.errlen = errlen;
  kg_strbuf_init(&g.b);
  *out = NULL;
  if (err && errlen) err[0] = 0;
  if (!kg_cexpr_valid_ident(fn_name)) {
    cfail(&g, "codegen c: '%s' is not a C identifier", fn_name ? fn_name : "(null)");
    return -1;
  }
  kg_strbuf *b = &g.b;
  kg_strbuf_printf(b, "/* generated by kgen: %s */\n", f->name ? f->name : "?");
  kg_strbuf_puts(b, prelude);
  kg_strbuf_printf(b, "void %s(", fn_name);
  for (int i = 0; i < f->nparams; i++)
    kg_strbuf_printf(b, "%s%sfloat *restrict %s", i ? ", " : "", f->params[i]->is_input ? "const " : "",
                     f->params[i]->name);
  if (f->nparams == 0) kg_strbuf_puts(b, "void");
  kg_strbuf_puts(b, ");\n");
  kg_strbuf_printf(b, "void %s_args(float **args);\n\n", fn_name);

  kg_strbuf_printf(b, "void %s(", fn_name);
  for (int i = 0; i < f->nparams; i++)
    kg_strbuf_printf(b, "%s%sfloat *restrict %s", i ? ", " : "", f->params[i]->is_input ? "const " : "",
                     f->params[i]->name);
  if (f->nparams == 0) kg_strbuf_puts(b, "void");
  kg_strbuf_puts(b, ") {\n");
  for (int i = 0; i < f->nparams; i++) kg_strbuf_printf(b, "  (void)%s;\n", f->params[i]->name);
  for (int i = 0; i < f->ntemps; i++)
    kg_strbuf_printf(b, "  float *restrict %s = (float *)malloc(sizeof(float) * (size_t)%lld);\n", f->temps[i]->name,
                     (long long)(f->temps[i]->size > 0 ? f->temps[i]->size : 1));
  if (f->ntemps) {
    /* allocation failure: give up before computing anything (see the file comment) */
    kg_strbuf_puts(b, "  if (");
    for (int i = 0; i < f->ntemps; i++) kg_strbuf_printf(b, "%s!%s", i ? " || " : "", f->temps[i]->name);
    kg_strbuf_puts(b, ") {\n");
    for (int i = 0; i < f->ntemps; i++) kg_strbuf_printf(b, "    free(%s);\n", f->temps[i]->name);
    kg_strbuf_puts(b, "    return;\n  }\n");
  }
  put_block_items(&g, f->body, 1);
  for (int i = 0; i < f->ntemps; i++) kg_strbuf_printf(b, "  free(%s);\n", f->temps[i]->name);
  kg_strbuf_puts(b, "}\n\n");

  kg_strbuf_printf(b, "void %s_args(float **args) {\n  (void)args;\n  %s(", fn_name, fn_name);
  for (int i = 0; i < f->nparams; i++) kg_strbuf_printf(b, "%sargs[%d]", i ? ", " : "", i);
  kg_strbuf_puts(b, ");\n}\n");
  if (g.failed) {
    kg_strbuf_free(b);
    return -1;
  }
  *out = kg_strbuf_take(b);
  return 0;
}
