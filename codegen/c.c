/* The C/OpenMP printer: a lowered function as C11 (also valid C++ and CUDA host code), in pieces that either
 * make one translation unit (kg_codegen_c, what the CPU runner builds) or go into an exported header included by
 * user programs (codegen/header_c.c), several of which may share one translation unit:
 *
 *   prelude    includes and KG_RESTRICT (once per TU), the opening of a region of compiler options and
 *              silenced diagnostics, and the helpers (once per TU, inside the region so that helpers and kernels
 *              share options and inline into each other)
 *   function   per kernel: its workspace statics and their destructor, and
 *                int NAME(int64_t SIZE..., const float *KG_RESTRICT in..., float *KG_RESTRICT out...)
 *              whose dynamic sizes (if any) are run-time values: extents, guards and strides are expressions of
 *              them, and the function first checks them against the range it serves (KG_C_ERR_SIZE, an
 *              exported header's KG_ERR_SIZE), then its tensor pointers against NULL (KG_C_ERR_ARG)
 *   epilogue   the region's closing
 *
 * Nothing printed may change the meaning of the user's code around it: OpenMP pragmas sit under #ifdef _OPENMP
 * (g++ does not let -Wunknown-pragmas be silenced by a pragma), options and diagnostics are pushed and popped,
 * and no macro renames a standard function: exp, erf, tanh and log are printed as kgen's kg_expf, kg_erff,
 * kg_tanhf and kg_logf; the prelude defines the first three (with vector variants under gcc on x86-64) and maps
 * kg_logf to libm.
 *
 * Allocation failures inside generated code never abort: when a global temporary cannot be allocated the
 * function frees what it got and returns -2 (KG_ERR_OUT_OF_MEMORY of exported headers); when a large local region
 * cannot be allocated its loop body is skipped and the function returns -2 at its end. Either way outputs stay
 * unwritten (poisoned by the verifier, which ignores the status), so the failure is seen as a wrong answer
 * instead of a crash.
 *
 * The IR is the code: transforms belong to lowering (tightened extents, register accumulators), and this file only
 * decides how to write each node in C: a non-constant extent is computed once into a const before its loop
 * (OpenMP's canonical form), loop kinds become pragmas (a vectorized loop whose body has loops gets none), a local
 * allocation lives on the stack up to KG_C_STACK_BYTES and beyond in a block its site keeps between uses (see
 * kg_pool_take in the prelude), a SEQ opens a block only when it declares a LET, a one-line comment that opens an
 * if's then branch goes on the if's line, and a streamed store (`stream`) becomes non-temporal vector stores where
 * its loop is vectorized and the store contiguous (see put_loop_stream), with the fences that order them.
 *
 * Requires: a kg_lowered for KG_TARGET_C (no bound loops, no shared allocations: rejected with an error). */
#include <ctype.h> /* isalnum */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "cexpr.h"
#include "codegen.h"

/* Local regions up to this many bytes live on the stack. */
#define KG_C_STACK_BYTES (16 * 1024)
/* floats in 32 AVX-512 registers */
#define KG_C_REG_FLOATS 512

typedef struct cgen {
  kg_strbuf b;
  char *err;
  size_t errlen;
  int failed;
  const char *fn_name; /* the function printed: names its pools */
  int npools;          /* heap allocation sites so far, each with its pool kg_lp_FN_SITE */
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
    .exp = "kg_expf",
    .log = "kg_logf",
    .erf = "kg_erff",
    .tanh = "kg_tanhf",
    .half_type = "uint16_t",
};

static void put_expr(cgen *g, const kg_irexpr *e) {
  kg_cexpr_printer p = {.b = &g->b, .d = &c_dialect, .ctx = g, .fail = fail_expr};
  kg_cexpr_put_expr(&p, e);
}

static void put_store(cgen *g, const kg_buffer *buf, const kg_irexpr *index, const kg_irexpr *value) {
  kg_cexpr_printer p = {.b = &g->b, .d = &c_dialect, .ctx = g, .fail = fail_expr};
  kg_cexpr_put_store(&p, buf, index, value);
}

static const char *elem_type(const kg_buffer *buf) { return kg_cexpr_elem_type(&c_dialect, buf->dtype); }

static void put_stmt(cgen *g, const kg_irstmt *s, int ind);
static void put_omp(kg_strbuf *b, int ind, const char *what);

/* ---- streamed (non-temporal) stores ---- */

/* Does s hold a streamed store? */
static int has_stream(const kg_irstmt *s) {
  switch (s->kind) {
    case KG_IRS_STORE: return s->store.stream;
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++)
        if (has_stream(s->seq.items[i])) return 1;
      return 0;
    case KG_IRS_FOR: return has_stream(s->loop.body);
    case KG_IRS_IF: return has_stream(s->cond.then) || (s->cond.otherwise && has_stream(s->cond.otherwise));
    case KG_IRS_ALLOC: return has_stream(s->alloc.body);
    default: return 0;
  }
}

static int uses_var(kg_irexpr *e, const kg_irvar *v) {
  if (e->kind == KG_IRE_VAR) return e->var == v;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children(e, kids);
  for (int i = 0; i < n; i++)
    if (uses_var(*kids[i], v)) return 1;
  return 0;
}

/* The LETs of a streamed loop's body, which its index may go through. */
#define STREAM_MAX_LETS 16
typedef struct stream_body {
  const kg_irstmt *store;
  const kg_irstmt *lets[STREAM_MAX_LETS];
  int nlets;
} stream_body;

/* The coefficient of v in e when e is affine in v (sums, differences and products by constants of terms that
 * are v, a LET of the body affine in v, or do not use it): 0 and *c set, else -1. */
static int var_coef(kg_irexpr *e, const kg_irvar *v, const stream_body *sb, int64_t *c) {
  int64_t ca, cb, k;
  if (e->kind == KG_IRE_VAR) {
    for (int i = 0; i < sb->nlets; i++)
      if (sb->lets[i]->let.var == e->var) return var_coef(sb->lets[i]->let.value, v, sb, c);
    *c = e->var == v;
    return 0;
  }
  if (e->kind == KG_IRE_INT || e->kind == KG_IRE_FLOAT) {
    *c = 0;
    return 0;
  }
  if (e->kind != KG_IRE_BINARY || e->ty != KG_TY_INT) {
    /* anything else: fine when neither v nor a LET of the body appears in it */
    if (uses_var(e, v)) return -1;
    for (int i = 0; i < sb->nlets; i++)
      if (uses_var(e, sb->lets[i]->let.var)) return -1;
    *c = 0;
    return 0;
  }
  switch (e->bin.op) {
    case KG_OP_ADD:
    case KG_OP_SUB:
      if (var_coef(e->bin.a, v, sb, &ca) || var_coef(e->bin.b, v, sb, &cb)) return -1;
      *c = e->bin.op == KG_OP_ADD ? ca + cb : ca - cb;
      return 0;
    case KG_OP_MUL:
      if (var_coef(e->bin.a, v, sb, &ca) || var_coef(e->bin.b, v, sb, &cb)) return -1;
      if (ca && cb) return -1;
      if (ca && kg_ir_is_const(e->bin.b, &k)) *c = ca * k;
      else if (cb && kg_ir_is_const(e->bin.a, &k)) *c = cb * k;
      else if (!ca && !cb) *c = 0;
      else return -1;
      return 0;
    default:
      if (var_coef(e->bin.a, v, sb, &ca) || var_coef(e->bin.b, v, sb, &cb) || ca || cb) return -1;
      *c = 0;
      return 0;
  }
}

/* Vectorized loop s whose body is LETs and one streamed store at unit stride in the loop's variable
 * (consecutive iterations write consecutive floats): 1 with *sb filled; else 0. */
static int stream_body_of(const kg_irstmt *s, stream_body *sb) {
  memset(sb, 0, sizeof *sb);
  if (s->kind != KG_IRS_FOR || s->loop.kind != KG_LOOP_VECTORIZED) return 0;
  const kg_irstmt *b = s->loop.body;
  while (b->kind == KG_IRS_SEQ && b->seq.n == 1) b = b->seq.items[0];
  if (b->kind == KG_IRS_SEQ) {
    for (int i = 0; i < b->seq.n - 1; i++) {
      if (b->seq.items[i]->kind != KG_IRS_LET || sb->nlets >= STREAM_MAX_LETS) return 0;
      sb->lets[sb->nlets++] = b->seq.items[i];
    }
    b = b->seq.n ? b->seq.items[b->seq.n - 1] : b;
  }
  int64_t c;
  /* f32 only: kg_stream16 writes 16 floats (a narrow store is streamed as an ordinary one) */
  if (b->kind != KG_IRS_STORE || !b->store.stream || b->store.buf->dtype != KG_DT_F32 ||
      var_coef(b->store.index, s->loop.var, sb, &c) || c != 1)
    return 0;
  sb->store = b;
  return 1;
}

/* One iteration of a streamed loop's body: its LETs, then "<target> = value;" */
static void put_stream_iter(cgen *g, const stream_body *sb, const char *target_fmt, const char *v, int ind) {
  kg_strbuf *b = &g->b;
  kg_strbuf_puts(b, "{\n");
  for (int i = 0; i < sb->nlets; i++) put_stmt(g, sb->lets[i], ind + 1);
  kg_strbuf_indent(b, ind + 1);
  if (target_fmt) {
    kg_strbuf_printf(b, target_fmt, v, v);
  } else {
    kg_strbuf_printf(b, "%s[", sb->store->store.buf->name);
    put_expr(g, sb->store->store.index);
    kg_strbuf_puts(b, "]");
  }
  kg_strbuf_puts(b, " = ");
  put_expr(g, sb->store->store.value);
  kg_strbuf_puts(b, ";\n");
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "}\n");
}

/* A simd loop of one iteration per value of v in [lo, hi) (C expressions), storing as the body does. */
static void put_stream_loop(cgen *g, const stream_body *sb, const char *v, const char *lo, const char *hi, int ind) {
  put_omp(&g->b, ind, "simd");
  kg_strbuf_indent(&g->b, ind);
  kg_strbuf_printf(&g->b, "for (int64_t %s = %s; %s < %s; %s++) ", v, lo, v, hi, v);
  put_stream_iter(g, sb, NULL, v, ind);
}

/* A vectorized loop whose one store is streamed. Where the destination of its first iteration is 64-byte aligned
 * and it has at least 16 iterations, whole 16-float vectors are computed into an aligned buffer (which the
 * compiler keeps in a register) and written with kg_stream16 (non-temporal), and the iterations after the last
 * whole vector by an ordinary simd loop; otherwise the whole loop is an ordinary simd loop (ordinary stores before
 * a boundary would share cache lines with the streamed ones, which costs more than it saves). The fence that
 * orders the stores comes after the enclosing parallel loop's iterations (put_loop_plain) and after the root nest
 * (kg_codegen_c_function). */
static void put_loop_stream(cgen *g, const kg_irstmt *s, const stream_body *sb, int ind) {
  kg_strbuf *b = &g->b;
  const char *v = s->loop.var->name, *buf = sb->store->store.buf->name;
  char n[300], k[300];
  snprintf(n, sizeof n, "kg_n_%s", v);
  snprintf(k, sizeof k, "kg_ntk_%s", v);
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "{ /* stream %s: loop %s.%s stores whole aligned vectors non-temporally */\n", buf,
                   s->loop.stage_name ? s->loop.stage_name : "?", s->loop.loop_name ? s->loop.loop_name : "?");
  ind++;
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "const int64_t %s = ", n);
  put_expr(g, s->loop.extent);
  kg_strbuf_puts(b, ";\n");
  /* the first iteration's address: the loop variable 0 (every other variable is the enclosing loops') */
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "float *kg_ntp_%s;\n", v);
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "{\n");
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_printf(b, "const int64_t %s = 0;\n", v);
  for (int i = 0; i < sb->nlets; i++) put_stmt(g, sb->lets[i], ind + 1);
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_printf(b, "kg_ntp_%s = &%s[", v, buf);
  put_expr(g, sb->store->store.index);
  kg_strbuf_puts(b, "];\n");
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "}\n");
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "int64_t %s = 0;\n", k);
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "if (((uintptr_t)kg_ntp_%s & 63) == 0) {\n", v);
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_printf(b, "for (; %s + 16 <= %s; %s += 16) {\n", k, n, k);
  kg_strbuf_indent(b, ind + 2);
  kg_strbuf_printf(b, "float kg_ntb_%s[16] __attribute__((aligned(64)));\n", v);
  put_omp(b, ind + 2, "simd");
  kg_strbuf_indent(b, ind + 2);
  kg_strbuf_printf(b, "for (int64_t %s = %s; %s < %s + 16; %s++) ", v, k, v, k, v);
  char fmt[400];
  snprintf(fmt, sizeof fmt, "kg_ntb_%%s[%%s - %s]", k);
  put_stream_iter(g, sb, fmt, v, ind + 2);
  kg_strbuf_indent(b, ind + 2);
  kg_strbuf_printf(b, "kg_stream16(kg_ntp_%s + %s, kg_ntb_%s);\n", v, k, v);
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_puts(b, "}\n");
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "}\n");
  put_stream_loop(g, sb, v, k, n, ind);
  kg_strbuf_indent(b, ind - 1);
  kg_strbuf_puts(b, "}\n");
}

/* The statements of s without braces of their own (the caller opened a block). */
static void put_block_items(cgen *g, const kg_irstmt *s, int ind) {
  if (s->kind == KG_IRS_SEQ)
    for (int i = 0; i < s->seq.n; i++) put_stmt(g, s->seq.items[i], ind);
  else
    put_stmt(g, s, ind);
}

/* An OpenMP pragma, seen only by compilers that run OpenMP (see the file comment). */
static void put_omp(kg_strbuf *b, int ind, const char *what) {
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "#ifdef _OPENMP\n");
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "#pragma omp %s\n", what);
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "#endif\n");
}

/* The loop's pragmas and header up to its opening brace (the caller prints the body and the closing brace).
 * -1 when the loop cannot be printed for the C target. */
static int put_for_head(cgen *g, const kg_irstmt *s, int ind, int nowait) {
  kg_strbuf *b = &g->b;
  int64_t ext = 0;
  if (s->loop.kind == KG_LOOP_BOUND || s->loop.tag != KG_THREAD_NONE) {
    cfail(g, "codegen c: stage %s: loop %s is bound to %s, which the C target cannot run",
          s->loop.stage_name ? s->loop.stage_name : "?", s->loop.loop_name ? s->loop.loop_name : "?",
          kg_thread_tag_names[s->loop.tag]);
    return -1;
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
    case KG_LOOP_PARALLEL: put_omp(b, ind, nowait ? "for nowait" : "parallel for"); break;
    case KG_LOOP_VECTORIZED:
      if (kg_ir_contains_loop(s->loop.body)) {
        kg_strbuf_indent(b, ind);
        kg_strbuf_puts(b, "/* vectorize: not applied, the body has loops */\n");
      } else {
        put_omp(b, ind, "simd");
      }
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
  return 0;
}

static void put_loop_plain(cgen *g, const kg_irstmt *s, int ind) {
  stream_body sb;
  if (stream_body_of(s, &sb)) {
    put_loop_stream(g, s, &sb, ind);
    return;
  }
  /* a parallel loop with streamed stores: each thread fences its own before the region's closing barrier */
  int fence = s->loop.kind == KG_LOOP_PARALLEL && has_stream(s->loop.body);
  if (fence) {
    put_omp(&g->b, ind, "parallel");
    kg_strbuf_indent(&g->b, ind);
    kg_strbuf_puts(&g->b, "{\n");
    ind++;
  }
  if (put_for_head(g, s, ind, fence)) return;
  put_block_items(g, s->loop.body, ind + 1);
  kg_strbuf_indent(&g->b, ind);
  kg_strbuf_puts(&g->b, "}\n");
  if (fence) {
    kg_strbuf_indent(&g->b, ind);
    kg_strbuf_puts(&g->b, "kg_stream_fence();\n");
    kg_strbuf_indent(&g->b, ind - 1);
    kg_strbuf_puts(&g->b, "}\n");
  }
}

/* bf16 pair dot products (KG_IRS_BFDOT): the rows x cols / 16 accumulator vectors held in variables (registers)
 * across the k loop, which per pair of k interleaves the column operand's two rows into 16 pairs per vector once
 * (or loads them, stored in pairs) and reuses them for every row, whose pair of the row operand is broadcast. The
 * prelude's kg_bf_* helpers are vdpbf16ps where the compiler targets AVX-512 BF16, the same sums in f32 elsewhere. */
static void put_bfdot(cgen *g, const kg_irstmt *s, int ind) {
  kg_strbuf *b = &g->b;
  int64_t R = s->bfdot.rows, V = s->bfdot.cols / 16;
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "{ /* %s: %lld x %lld x %lld, bf16 pair dot products */\n",
                   s->bfdot.stage_name ? s->bfdot.stage_name : "?", (long long)R, (long long)s->bfdot.cols,
                   (long long)s->bfdot.k);
  const struct {
    const char *name, *type;
    const kg_buffer *buf;
    const kg_irexpr *index;
  } at[3] = {{"kg_bfc", "float", s->bfdot.c, s->bfdot.c_index},
             {"kg_bfa", "const uint16_t", s->bfdot.a, s->bfdot.a_index},
             {"kg_bfb", "const uint16_t", s->bfdot.b, s->bfdot.b_index}};
  for (int q = 0; q < 3; q++) {
    kg_strbuf_indent(b, ind + 1);
    kg_strbuf_printf(b, "%s *const %s = %s + (", at[q].type, at[q].name, at[q].buf->name);
    put_expr(g, at[q].index);
    kg_strbuf_puts(b, ");\n");
  }
  /* the strides: constants the compiler folds, or the dynamic sizes' expressions */
  const struct {
    const char *name;
    const kg_irexpr *e;
  } sd[4] = {{"kg_bsc", s->bfdot.c_row}, {"kg_bsa", s->bfdot.a_row}, {"kg_bka", s->bfdot.a_k}, {"kg_bkb", s->bfdot.b_k}};
  for (int q = 0; q < 4; q++) {
    kg_strbuf_indent(b, ind + 1);
    kg_strbuf_printf(b, "const int64_t %s = (", sd[q].name);
    put_expr(g, sd[q].e);
    kg_strbuf_puts(b, ");\n");
  }
  for (int64_t r = 0; r < R; r++)
    for (int64_t v = 0; v < V; v++) {
      kg_strbuf_indent(b, ind + 1);
      kg_strbuf_printf(b, "kg_bf_acc kg_bf%lld_%lld = kg_bf_load(kg_bfc + %lld * kg_bsc + %lld);\n", (long long)r,
                       (long long)v, (long long)r, (long long)(16 * v));
    }
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_printf(b, "for (int64_t kg_kp = 0; kg_kp < %lld; kg_kp++) {\n", (long long)(s->bfdot.k / 2));
  kg_strbuf_indent(b, ind + 2);
  if (s->bfdot.b_pairs) {
    /* stored in pairs: a vector of 16 pairs is 32 consecutive elements */
    kg_strbuf_puts(b, "const uint16_t *const kg_bk = kg_bfb + kg_kp * kg_bkb;\n");
    for (int64_t v = 0; v < V; v++) {
      kg_strbuf_indent(b, ind + 2);
      kg_strbuf_printf(b, "const kg_bf_pairs kg_bp%lld = kg_bf_load_pairs(kg_bk + %lld);\n", (long long)v,
                       (long long)(32 * v));
    }
  } else {
    kg_strbuf_puts(b, "const uint16_t *const kg_bk = kg_bfb + kg_kp * 2 * kg_bkb;\n");
    for (int64_t v = 0; v < V; v++) {
      kg_strbuf_indent(b, ind + 2);
      kg_strbuf_printf(b, "const kg_bf_pairs kg_bp%lld = kg_bf_interleave(kg_bk + %lld, kg_bk + kg_bkb + %lld);\n",
                       (long long)v, (long long)(16 * v), (long long)(16 * v));
    }
  }
  for (int64_t r = 0; r < R; r++) {
    kg_strbuf_indent(b, ind + 2);
    kg_strbuf_puts(b, "{\n");
    kg_strbuf_indent(b, ind + 3);
    kg_strbuf_printf(b, "const uint32_t kg_ap = kg_bf_pair(kg_bfa + %lld * kg_bsa + kg_kp * 2 * kg_bka, kg_bka);\n",
                     (long long)r);
    for (int64_t v = 0; v < V; v++) {
      kg_strbuf_indent(b, ind + 3);
      kg_strbuf_printf(b, "kg_bf%lld_%lld = kg_bf_dot(kg_bf%lld_%lld, kg_ap, kg_bp%lld);\n", (long long)r, (long long)v,
                       (long long)r, (long long)v, (long long)v);
    }
    kg_strbuf_indent(b, ind + 2);
    kg_strbuf_puts(b, "}\n");
  }
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_puts(b, "}\n");
  for (int64_t r = 0; r < R; r++)
    for (int64_t v = 0; v < V; v++) {
      kg_strbuf_indent(b, ind + 1);
      kg_strbuf_printf(b, "kg_bf_store(kg_bfc + %lld * kg_bsc + %lld, kg_bf%lld_%lld);\n", (long long)r,
                       (long long)(16 * v), (long long)r, (long long)v);
    }
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "}\n");
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
    case KG_IRS_FOR: put_loop_plain(g, s, ind); break;
    case KG_IRS_IF: {
      /* a one-line comment that opens the then branch (what it is for) goes on the if's line */
      const kg_irstmt *then = s->cond.then, *note = NULL;
      if (then->kind == KG_IRS_SEQ && then->seq.n && then->seq.items[0]->kind == KG_IRS_COMMENT &&
          !strpbrk(then->seq.items[0]->text, "\n*/"))
        note = then->seq.items[0];
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "if (");
      put_expr(g, s->cond.cond);
      if (note) {
        kg_strbuf_printf(b, ") { /* %s */\n", note->text);
        for (int i = 1; i < then->seq.n; i++) put_stmt(g, then->seq.items[i], ind + 1);
      } else {
        kg_strbuf_puts(b, ") {\n");
        put_block_items(g, then, ind + 1);
      }
      kg_strbuf_indent(b, ind);
      if (s->cond.otherwise) {
        kg_strbuf_puts(b, "} else {\n");
        put_block_items(g, s->cond.otherwise, ind + 1);
        kg_strbuf_indent(b, ind);
      }
      kg_strbuf_puts(b, "}\n");
      break;
    }
    case KG_IRS_STORE:
      kg_strbuf_indent(b, ind);
      put_store(g, s->store.buf, s->store.index, s->store.value);
      break;
    case KG_IRS_PREFETCH:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "kg_prefetch_w(&%s[", s->prefetch.buf->name);
      put_expr(g, s->prefetch.index);
      kg_strbuf_puts(b, "]);\n");
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
      const char *et = elem_type(buf);
      if ((uint64_t)n * (uint64_t)kg_dtype_size[buf->dtype] <= KG_C_STACK_BYTES) {
        if (buf->reg_acc) /* lower/regacc.c */
          kg_strbuf_printf(b, "{ /* %s: %lld floats, register accumulator of %s around loop %s */\n", buf->name, n,
                           buf->reg_acc_of ? buf->reg_acc_of->name : "?", buf->reg_acc_loop ? buf->reg_acc_loop : "?");
        else
          kg_strbuf_printf(b, "{ /* %s: %lld floats, %s */\n", buf->name, n, kg_scope_names[buf->scope]);
        kg_strbuf_indent(b, ind + 1);
        /* A buffer larger than the vector register file cannot become registers anyway; read through a restrict
         * pointer, gcc keeps the register accumulators of the loops that read it in registers (a plain array
         * there makes it store them to the stack at every step of the reduction: a packed operand tile). */
        if (!buf->reg_acc && n > KG_C_REG_FLOATS) {
          kg_strbuf_printf(b, "KG_ALIGN64 %s %s_s[%lld];\n", et, buf->name, n);
          kg_strbuf_indent(b, ind + 1);
          kg_strbuf_printf(b, "%s *KG_RESTRICT %s = %s_s;\n", et, buf->name, buf->name);
        } else
          kg_strbuf_printf(b, "%s %s[%lld];\n", et, buf->name, n);
        put_block_items(g, s->alloc.body, ind + 1);
      } else {
        /* too large for the stack: from its site's pool; on allocation failure the body is skipped and the status
         * recorded (see the file comment), atomically since this may run in several threads of a parallel loop */
        int site = g->npools++;
        kg_strbuf_printf(b, "{ /* %s: %lld floats, %s, heap */\n", buf->name, n, kg_scope_names[buf->scope]);
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_printf(b, "%s *KG_RESTRICT %s = (%s *)kg_pool_take(kg_lp_%s_%d, sizeof(%s) * (size_t)%lld);\n", et,
                         buf->name, et, g->fn_name, site, et, n);
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_printf(b, "if (%s) {\n", buf->name);
        put_block_items(g, s->alloc.body, ind + 2);
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_puts(b, "} else {\n");
        kg_strbuf_indent(b, ind + 2);
        kg_strbuf_puts(b, "__atomic_store_n(&kg_status, -2, __ATOMIC_RELAXED);\n");
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_puts(b, "}\n");
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_printf(b, "kg_pool_give(kg_lp_%s_%d, %s);\n", g->fn_name, site, buf->name);
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
    case KG_IRS_ASYNC_COMMIT:
    case KG_IRS_ASYNC_WAIT: cfail(g, "codegen c: asynchronous copies (a pipelined loop) are CUDA's"); return;
    case KG_IRS_MMA:
    case KG_IRS_LDMATRIX: {
      const char *sn = s->kind == KG_IRS_MMA ? s->mma.stage_name : s->ldm.stage_name;
      cfail(g, "codegen c: stage %s: tensor cores (tensorize) are CUDA's", sn ? sn : "?");
      return;
    }
    case KG_IRS_BFDOT: put_bfdot(g, s, ind); break;
    case KG_IRS_TSTORE:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "kg_tstore%d(%s + (", s->tstore.n, s->tstore.src->name);
      put_expr(g, s->tstore.src_index);
      kg_strbuf_printf(b, "), %lld, %s + (", (long long)s->tstore.src_ld, s->tstore.dst->name);
      put_expr(g, s->tstore.dst_index);
      kg_strbuf_printf(b, "), %lld);\n", (long long)s->tstore.dst_stride);
      break;
  }
}


/* ---- the pieces of a translation unit (see the file comment) ---- */

/* The prelude's includes, also what runtime/pch.c precompiles. */
#define INCLUDES                                                                                                   \
  "/* kgen's generated C: includes, once per translation unit. */\n"                                               \
  "#ifndef KG_C_INCLUDES\n"                                                                                        \
  "#define KG_C_INCLUDES\n"                                                                                        \
  "#include <math.h>\n"                                                                                            \
  "#include <stdint.h>\n"                                                                                          \
  "#include <stdlib.h>\n"                                                                                          \
  "#include <string.h>\n"                                                                                          \
  "#if defined(__SSE__) && !defined(__CUDACC__) && (defined(__x86_64__) || defined(__i386__))\n"                  \
  "#include <immintrin.h>\n"                                                                                       \
  "#endif\n"                                                                                                       \
  "#endif\n"

static const char prelude[] =
    INCLUDES
    "#ifndef KG_RESTRICT\n"
    "#ifdef __cplusplus\n"
    "#define KG_RESTRICT __restrict__\n"
    "#else\n"
    "#define KG_RESTRICT restrict\n"
    "#endif\n"
    "#endif\n"
    "\n"
    "/* Options and diagnostics for kgen's code only: the epilogue pops them. */\n"
    "#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)\n"
    "#pragma GCC push_options\n"
    "/* gcc's partial redundancy elimination, when exp's argument reads a loop-invariant element (x - m[i] in\n"
    " * softmax), leaves the loop in a shape it does not vectorize (a non-empty latch, or kg_expf's selects as\n"
    " * branches). */\n"
    "#pragma GCC optimize(\"no-tree-pre\")\n"
    "/* a multiply-add becomes one FMA: in ISO C modes (-std=c11, the kernel flags) gcc does not contract, which\n"
    " * halves the arithmetic rate of every register tile (a vmulps and a vaddps per product). */\n"
    "#pragma GCC optimize(\"fp-contract=fast\")\n"
    "/* a register tile's copy in and out (acc[r][0..w) from and to a row of the output) must stay vector moves:\n"
    " * gcc otherwise makes each row's copy a memcpy, which takes the accumulator array's address and keeps the\n"
    " * whole tile in memory around the reduction loop (seen with -march=haswell/znver3: every FMA then loads and\n"
    " * stores its accumulator, the kernel 2.4x slower) */\n"
    "#pragma GCC optimize(\"no-tree-loop-distribute-patterns\")\n"
    "/* gcc's default on AVX-512 machines is 256-bit vectors; the register tiles of tuned schedules count on 512. */\n"
    "#if defined(__AVX512F__)\n"
    "#pragma GCC target(\"prefer-vector-width=512\")\n"
    "#endif\n"
    "#endif\n"
    "/* Region buffers are written under guards that the compiler cannot relate to the guards of their reads; a\n"
    " * schedule may leave a variable or a parameter unused. */\n"
    "#if defined(__GNUC__)\n"
    "#pragma GCC diagnostic push\n"
    "#if defined(__clang__)\n"
    "#pragma clang diagnostic ignored \"-Wunknown-warning-option\"\n"
    "/* a `simd` loop whose body clang cannot vectorize (a call it has no vector variant of) stays scalar */\n"
    "#pragma clang diagnostic ignored \"-Wpass-failed\"\n"
    "#else\n"
    "#pragma GCC diagnostic ignored \"-Wmaybe-uninitialized\"\n"
    "#pragma GCC diagnostic ignored \"-Wuninitialized\"\n"
    "#endif\n"
    "#pragma GCC diagnostic ignored \"-Wunused-variable\"\n"
    "#pragma GCC diagnostic ignored \"-Wunused-but-set-variable\"\n"
    "#pragma GCC diagnostic ignored \"-Wunused-parameter\"\n"
    "#endif\n"
    "/* nvcc's front end: 1675 unrecognized GCC pragma (GCC unroll in host code), 177 declared but never\n"
    " * referenced, 550 set but never used. */\n"
    "#if defined(__CUDACC__)\n"
    "#pragma nv_diagnostic push\n"
    "#pragma nv_diag_suppress 1675\n"
    "#pragma nv_diag_suppress 177\n"
    "#pragma nv_diag_suppress 550\n"
    "#endif\n"
    "\n"
    "/* kgen's helpers, once per translation unit (inside the options above, so that kernels inline them). */\n"
    "#ifndef KG_C_HELPERS\n"
    "#define KG_C_HELPERS\n"
    "/* Branch-free for the divisors indices have (positive constants): a branch here, which gcc cannot remove when\n"
    " * it does not know the sign of a (OpenMP's chunk bounds), stops it from unrolling and vectorizing the loops\n"
    " * around. */\n"
    "static inline int64_t kg_floordiv(int64_t a, int64_t b) {\n"
    "  return b > 0 ? (a >= 0 ? a : a - b + 1) / b : a / b - ((a % b != 0) & (((a % b) ^ b) < 0));\n"
    "}\n"
    "static inline int64_t kg_floormod(int64_t a, int64_t b) {\n"
    "  int64_t r = a % b;\n"
    "  return b > 0 ? (r < 0 ? r + b : r) : r + b * ((r != 0) & ((r ^ b) < 0));\n"
    "}\n"
    "/* The next register tile's output lines, fetched while this tile computes (lower/prefetch.c): a hint. */\n"
    "static inline void kg_prefetch_w(const void *p) {\n"
    "#if defined(__GNUC__)\n"
    "  __builtin_prefetch(p, 1, 3);\n"
    "#else\n"
    "  (void)p;\n"
    "#endif\n"
    "}\n"
    "/* exp, erf and tanh must vectorize in every loop, reductions included: exp is most of the arithmetic of\n"
    " * softmax and attention, erf of GELU. Cephes' expf: x = n ln 2 + r (ln 2 in two parts), e^r by a degree-5\n"
    " * polynomial, times 2^n. 2^n is applied as two exponent factors, since n reaches -150 (subnormal results)\n"
    " * and 128 (overflow to inf). Within 1.5 ulp of exp over the whole float range; NaN (kept by the order of\n"
    " * min and max), +-inf and subnormal results as libm. */\n"
    "/* Reassociation (-ffast-math; an exported header may be compiled with it) would merge ln 2's two parts into\n"
    " * one float and 2^n's two factors into one, which left exp off by 60 ulp and infinite near the top of its\n"
    " * range: the vector variants keep the steps apart with an empty asm, the scalar code reduces and scales in\n"
    " * double, where each is one step. */\n"
    "#if defined(__ASSOCIATIVE_MATH__) || defined(__FAST_MATH__)\n"
    "#define KG_EXPF_REASSOC 1\n"
    "#define KG_EXPF_KEEP(v) __asm__(\"\" : \"+x\"(v))\n"
    "#else\n"
    "#define KG_EXPF_KEEP(v) (void)(v)\n"
    "#endif\n"
    "#define KG_EXPF_NOKEEP(v) (void)(v)\n"
    "#define KG_EXPF_REDUCED(T, name, keep)                                                          \\\n"
    "  static inline T name(T xc, T n) {                                                             \\\n"
    "    T r = xc - n * 0.693359375f;                                                                \\\n"
    "    keep(r);                                                                                    \\\n"
    "    r = r - n * -2.12194440e-4f;                                                                \\\n"
    "    T p = r * 1.9875691500e-4f + 1.3981999507e-3f;                                              \\\n"
    "    p = p * r + 8.3334519073e-3f;                                                               \\\n"
    "    p = p * r + 4.1665795894e-2f;                                                               \\\n"
    "    p = p * r + 1.6666665459e-1f;                                                               \\\n"
    "    p = p * r + 5.0000001201e-1f;                                                               \\\n"
    "    return p * (r * r) + r + 1.0f;                                                              \\\n"
    "  }\n"
    "/* erf, odd: x + x a(x^2) up to |x| = 1; beyond, 1 - c(|x| - 2.25), c fitted to erfc on [1, 4] (erf rounds\n"
    " * to 1 past 3.92, and |x| is clamped to 4). Least-squares fits of kgen's own (bench/hand/vmath_fit.py), plain\n"
    " * polynomials: no exp, no division. Within 2 ulp of erf; NaN, +-0 and +-inf as libm. */\n"
    "#define KG_ERFF_POLY(T, name)                                                                   \\\n"
    "  static inline T name##_a(T x) {                                                               \\\n"
    "    T s = x * x;                                                                                \\\n"
    "    T r = s * 7.932803e-05f - 0.00080346275f;                                                   \\\n"
    "    r = r * s + 0.005191192f;                                                                   \\\n"
    "    r = r * s - 0.026855385f;                                                                   \\\n"
    "    r = r * s + 0.11283626f;                                                                    \\\n"
    "    r = r * s - 0.3761263f;                                                                     \\\n"
    "    r = r * s + 0.12837917f;                                                                    \\\n"
    "    return r * x + x;                                                                           \\\n"
    "  }                                                                                             \\\n"
    "  static inline T name##_b(T t) {                                                               \\\n"
    "    T u = t - 2.25f;                                                                            \\\n"
    "    T r = u * -8.901379e-07f + 2.6169623e-06f;                                                  \\\n"
    "    r = r * u + 1.2276809e-05f;                                                                 \\\n"
    "    r = r * u - 6.228601e-05f;                                                                  \\\n"
    "    r = r * u + 3.133023e-05f;                                                                  \\\n"
    "    r = r * u + 0.00035863125f;                                                                 \\\n"
    "    r = r * u - 0.0010195604f;                                                                  \\\n"
    "    r = r * u + 0.0006829805f;                                                                  \\\n"
    "    r = r * u + 0.0029152643f;                                                                  \\\n"
    "    r = r * u - 0.010664139f;                                                                   \\\n"
    "    r = r * u + 0.01908042f;                                                                    \\\n"
    "    r = r * u - 0.02172318f;                                                                    \\\n"
    "    r = r * u + 0.016070537f;                                                                   \\\n"
    "    r = r * u - 0.0071424004f;                                                                  \\\n"
    "    r = r * u + 0.0014627106f;                                                                  \\\n"
    "    return 1.0f - r;                                                                            \\\n"
    "  }\n"
    "/* tanh, odd: of t = |x|, t + t s q(s), s = t^2, up to t = 0.75 (q fitted to (tanh(x) / x - 1) / s,\n"
    " * bench/hand/vmath_fit.py); beyond, 1 - 2 / (exp(2 t) + 1), t clamped to 9.5, where it rounds to 1.\n"
    " * Within 2 ulp of tanh; NaN, +-0 and +-inf as libm. */\n"
    "#define KG_TANHF_POLY(T, name)                                                                  \\\n"
    "  static inline T name##_a(T x) {                                                               \\\n"
    "    T s = x * x;                                                                                \\\n"
    "    T q = s * 0.0019349603f - 0.007971198f;                                                     \\\n"
    "    q = q * s + 0.02163488f;                                                                    \\\n"
    "    q = q * s - 0.05394017f;                                                                    \\\n"
    "    q = q * s + 0.13333215f;                                                                    \\\n"
    "    q = q * s - 0.3333333f;                                                                     \\\n"
    "    return (q * s) * x + x;                                                                     \\\n"
    "  }\n"
    "KG_EXPF_REDUCED(float, kg_expf_reduced, KG_EXPF_NOKEEP)\n"
    "KG_ERFF_POLY(float, kg_erff_p)\n"
    "KG_TANHF_POLY(float, kg_tanhf_p)\n"
    "static inline float kg_expf_1(float x) {\n"
    "  float xc = x > -104.0f ? x : -104.0f; /* NaN: -104, restored at the end */\n"
    "  xc = xc < 89.0f ? xc : 89.0f;\n"
    "  /* n = x / ln 2 rounded, by an integer conversion: the usual (t + 1.5 * 2^23) - 1.5 * 2^23 is t under\n"
    "   * -ffast-math (an exported header may be compiled so), and exp was then off by millions of ulps */\n"
    "  float t = xc * 1.44269504088896341f;\n"
    "  int32_t ni = (int32_t)(t + (t < 0.0f ? -0.5f : 0.5f));\n"
    "#if defined(KG_EXPF_REASSOC)\n"
    "  float y = kg_expf_reduced((float)((double)xc - (double)ni * 0.6931471805599453), 0.0f);\n"
    "  uint64_t b = (uint64_t)(ni + 1023) << 52;\n"
    "  double s;\n"
    "  memcpy(&s, &b, sizeof s);\n"
    "  y = (float)((double)y * s);\n"
    "#else\n"
    "  int32_t n1 = ni >> 1, n2 = ni - n1;\n"
    "  float y = kg_expf_reduced(xc, (float)ni);\n"
    "  uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;\n"
    "  float s1, s2;\n"
    "  memcpy(&s1, &b1, sizeof s1);\n"
    "  memcpy(&s2, &b2, sizeof s2);\n"
    "  y = y * s1 * s2;\n"
    "#endif\n"
    "  return x == x ? y : x;\n"
    "}\n"
    "static inline float kg_erff_1(float x) {\n"
    "  float t = x < 0.0f ? -x : x;\n"
    "  float b = kg_erff_p_b(t < 4.0f ? t : 4.0f);\n"
    "  float r = t <= 1.0f ? kg_erff_p_a(x) : x < 0.0f ? -b : b;\n"
    "  return x == x ? r : x;\n"
    "}\n"
    "static inline float kg_tanhf_1(float x) {\n"
    "  float t = x < 0.0f ? -x : x;\n"
    "  float b = 1.0f - 2.0f / (kg_expf_1(2.0f * (t < 9.5f ? t : 9.5f)) + 1.0f);\n"
    "  float r = copysignf(t <= 0.75f ? kg_tanhf_p_a(t) : b, x); /* tanh(-0) is -0 */\n"
    "  return x == x ? r : x;\n"
    "}\n"
    "/* With gcc on x86-64, kg_expf, kg_erff and kg_tanhf are declared `simd` functions and their vector variants\n"
    " * are defined (after the prelude, for the functions a unit calls: kg_codegen_c_put_vmath) under the x86-64\n"
    " * vector function ABI's names (_ZGV<isa>N<lanes>v_<name>), which gcc's\n"
    " * vectorizer calls: 16 lanes on AVX-512 (exp's 2^n by one vscalefps, right through overflow and subnormal\n"
    " * results), 8 on AVX2 and AVX, 4 on SSE. glibc's libmvec expf and erff, which they replace, took 1.45x and\n"
    " * 1.4x their time (bench/hand/run.sh vmath); tanh is libmvec's where glibc has it (below). Elsewhere (clang,\n"
    " * C++), or with KG_NO_VEXP, they are the scalar code inline, which compilers vectorize as arithmetic. The\n"
    " * definitions are named by asm labels, so that gcc does not make variants of its own. They are weak and\n"
    " * hidden, not static: under -flto gcc renames the static functions of translation units that clash, and the\n"
    " * calls the vectorizer makes by name were left undefined. The names carry the instruction-set level the unit\n"
    " * is compiled for, since the linker keeps one of the weak definitions of a name, and a program may build\n"
    " * files for several levels and pick one at run time: an SSE file must not call a variant built for AVX-512. */\n"
    "#if defined(__GNUC__) && !defined(__clang__) && !defined(__INTEL_COMPILER) && !defined(__cplusplus) && \\\n"
    "    defined(__x86_64__) && defined(__ELF__) && !defined(KG_NO_VEXP)\n"
    "#define KG_VEXP 1\n"
    "#if defined(__AVX512F__) && defined(__AVX512VL__) && defined(__AVX512BW__) && defined(__AVX512DQ__)\n"
    "#define KG_VEXP_ISA \"v4\"\n"
    "#elif defined(__AVX512F__)\n"
    "#define KG_VEXP_ISA \"avx512f\"\n"
    "#elif defined(__AVX2__) && defined(__FMA__)\n"
    "#define KG_VEXP_ISA \"v3\"\n"
    "#elif defined(__AVX2__)\n"
    "#define KG_VEXP_ISA \"avx2\"\n"
    "#elif defined(__AVX__)\n"
    "#define KG_VEXP_ISA \"avx\"\n"
    "#elif defined(__SSE4_1__)\n"
    "#define KG_VEXP_ISA \"sse41\"\n"
    "#else\n"
    "#define KG_VEXP_ISA \"sse2\"\n"
    "#endif\n"
    "#define KG_VEXP_DEF(v, f) __asm__(v f \"_\" KG_VEXP_ISA) __attribute__((weak, visibility(\"hidden\"), used))\n"
    "__attribute__((simd(\"notinbranch\"), const)) float kg_expf(float) __asm__(\"kg_expf_\" KG_VEXP_ISA);\n"
    "__attribute__((simd(\"notinbranch\"), const)) float kg_erff(float) __asm__(\"kg_erff_\" KG_VEXP_ISA);\n"
    "/* libmvec's tanhf, where glibc has it (2.35 on), took 0.7x kg_tanhf's time (whose division costs): kernels\n"
    " * call it there, unless KG_NO_LIBMVEC */\n"
    "#if !defined(KG_NO_LIBMVEC) && defined(__GLIBC__) && \\\n"
    "    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))\n"
    "#define KG_TANHF_LIBMVEC 1\n"
    "__attribute__((simd(\"notinbranch\"), const)) float tanhf(float);\n"
    "#define kg_tanhf tanhf\n"
    "#else\n"
    "__attribute__((simd(\"notinbranch\"), const)) float kg_tanhf(float) __asm__(\"kg_tanhf_\" KG_VEXP_ISA);\n"
    "#endif\n"
    "/* the scale 2^n in two factors, from n in integers */\n"
    "#define KG_EXPF_SCALE(TI, W, CAST, y, n)                                                        \\\n"
    "  do {                                                                                          \\\n"
    "    TI ni_ = W##_cvtps_epi32(n), n1_ = W##_srai_epi32(ni_, 1), n2_ = W##_sub_epi32(ni_, n1_);   \\\n"
    "    TI b_ = W##_set1_epi32(127);                                                                \\\n"
    "    y = y * CAST(W##_slli_epi32(W##_add_epi32(n1_, b_), 23));                                   \\\n"
    "    KG_EXPF_KEEP(y);                                                                            \\\n"
    "    y = y * CAST(W##_slli_epi32(W##_add_epi32(n2_, b_), 23));                                   \\\n"
    "  } while (0)\n"
    "KG_EXPF_REDUCED(__m128, kg_expf_reduced4, KG_EXPF_KEEP)\n"
    "KG_ERFF_POLY(__m128, kg_erff_p4)\n"
    "KG_TANHF_POLY(__m128, kg_tanhf_p4)\n"
    "static inline __m128 kg_expf4(__m128 x) {\n"
    "  __m128 xc = _mm_min_ps(_mm_set1_ps(89.0f), _mm_max_ps(_mm_set1_ps(-104.0f), x));\n"
    "#if defined(__SSE4_1__)\n"
    "  __m128 n = _mm_round_ps(xc * 1.44269504088896341f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);\n"
    "#else\n"
    "  __m128 n = _mm_cvtepi32_ps(_mm_cvtps_epi32(xc * 1.44269504088896341f)); /* as MXCSR rounds: to nearest */\n"
    "#endif\n"
    "  __m128 y = kg_expf_reduced4(xc, n);\n"
    "  KG_EXPF_SCALE(__m128i, _mm, _mm_castsi128_ps, y, n);\n"
    "  return y;\n"
    "}\n"
    "/* |x| clamped to 4 with NaN kept (min returns its second operand when either is NaN); the sign put back by\n"
    " * an or */\n"
    "static inline __m128 kg_erff4(__m128 x) {\n"
    "  __m128 sign = _mm_set1_ps(-0.0f), t = _mm_min_ps(_mm_set1_ps(4.0f), _mm_andnot_ps(sign, x));\n"
    "  __m128 b = _mm_or_ps(kg_erff_p4_b(t), _mm_and_ps(sign, x));\n"
    "  __m128 m = _mm_cmple_ps(t, _mm_set1_ps(1.0f));\n"
    "  return _mm_or_ps(_mm_and_ps(m, kg_erff_p4_a(x)), _mm_andnot_ps(m, b));\n"
    "}\n"
    "static inline __m128 kg_tanhf4(__m128 x) {\n"
    "  __m128 sign = _mm_set1_ps(-0.0f), t = _mm_min_ps(_mm_set1_ps(9.5f), _mm_andnot_ps(sign, x));\n"
    "  __m128 b = 1.0f - 2.0f / (kg_expf4(t + t) + 1.0f), m = _mm_cmple_ps(t, _mm_set1_ps(0.75f));\n"
    "  return _mm_or_ps(_mm_or_ps(_mm_and_ps(m, kg_tanhf_p4_a(t)), _mm_andnot_ps(m, b)), _mm_and_ps(sign, x));\n"
    "}\n"
    "#if defined(__AVX__)\n"
    "/* AVX without AVX2 has no 256-bit integer operations: two halves */\n"
    "#define KG_VEXP_HALVES(f, x)                                                                      \\\n"
    "  _mm256_insertf128_ps(_mm256_castps128_ps256(f(_mm256_castps256_ps128(x))),                      \\\n"
    "                       f(_mm256_extractf128_ps(x, 1)), 1)\n"
    "#endif\n"
    "#if defined(__AVX2__)\n"
    "KG_EXPF_REDUCED(__m256, kg_expf_reduced8, KG_EXPF_KEEP)\n"
    "KG_ERFF_POLY(__m256, kg_erff_p8)\n"
    "KG_TANHF_POLY(__m256, kg_tanhf_p8)\n"
    "static inline __m256 kg_expf8(__m256 x) {\n"
    "  __m256 xc = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));\n"
    "  __m256 n = _mm256_round_ps(xc * 1.44269504088896341f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);\n"
    "  __m256 y = kg_expf_reduced8(xc, n);\n"
    "  KG_EXPF_SCALE(__m256i, _mm256, _mm256_castsi256_ps, y, n);\n"
    "  return y;\n"
    "}\n"
    "static inline __m256 kg_erff8(__m256 x) {\n"
    "  __m256 sign = _mm256_set1_ps(-0.0f), t = _mm256_min_ps(_mm256_set1_ps(4.0f), _mm256_andnot_ps(sign, x));\n"
    "  __m256 b = _mm256_or_ps(kg_erff_p8_b(t), _mm256_and_ps(sign, x));\n"
    "  return _mm256_blendv_ps(b, kg_erff_p8_a(x), _mm256_cmp_ps(t, _mm256_set1_ps(1.0f), _CMP_LE_OQ));\n"
    "}\n"
    "static inline __m256 kg_tanhf8(__m256 x) {\n"
    "  __m256 sign = _mm256_set1_ps(-0.0f), t = _mm256_min_ps(_mm256_set1_ps(9.5f), _mm256_andnot_ps(sign, x));\n"
    "  __m256 b = 1.0f - 2.0f / (kg_expf8(t + t) + 1.0f);\n"
    "  __m256 r = _mm256_blendv_ps(b, kg_tanhf_p8_a(t), _mm256_cmp_ps(t, _mm256_set1_ps(0.75f), _CMP_LE_OQ));\n"
    "  return _mm256_or_ps(r, _mm256_and_ps(sign, x));\n"
    "}\n"
    "#endif\n"
    "#if defined(__AVX512F__)\n"
    "KG_EXPF_REDUCED(__m512, kg_expf_reduced16, KG_EXPF_KEEP)\n"
    "KG_ERFF_POLY(__m512, kg_erff_p16)\n"
    "KG_TANHF_POLY(__m512, kg_tanhf_p16)\n"
    "static inline __m512 kg_expf16(__m512 x) {\n"
    "  __m512 xc = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));\n"
    "  __m512 n = _mm512_roundscale_ps(xc * 1.44269504088896341f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);\n"
    "  return _mm512_scalef_ps(kg_expf_reduced16(xc, n), n);\n"
    "}\n"
    "static inline __m512 kg_erff16(__m512 x) {\n"
    "  __m512i sign = _mm512_set1_epi32((int)0x80000000u);\n"
    "  __m512 t = _mm512_min_ps(_mm512_set1_ps(4.0f), _mm512_abs_ps(x));\n"
    "  __m512 b = kg_erff_p16_b(t);\n"
    "  b = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(b),\n"
    "                                          _mm512_and_si512(_mm512_castps_si512(x), sign)));\n"
    "  __mmask16 m = _mm512_cmp_ps_mask(t, _mm512_set1_ps(1.0f), _CMP_LE_OQ);\n"
    "  return _mm512_mask_blend_ps(m, b, kg_erff_p16_a(x));\n"
    "}\n"
    "static inline __m512 kg_tanhf16(__m512 x) {\n"
    "  __m512i sign = _mm512_set1_epi32((int)0x80000000u);\n"
    "  __m512 t = _mm512_min_ps(_mm512_set1_ps(9.5f), _mm512_abs_ps(x));\n"
    "  __m512 b = 1.0f - 2.0f / (kg_expf16(t + t) + 1.0f);\n"
    "  __mmask16 m = _mm512_cmp_ps_mask(t, _mm512_set1_ps(0.75f), _CMP_LE_OQ);\n"
    "  __m512 r = _mm512_mask_blend_ps(m, b, kg_tanhf_p16_a(t));\n"
    "  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r),\n"
    "                                             _mm512_and_si512(_mm512_castps_si512(x), sign)));\n"
    "}\n"
    "#endif\n"
    "#else\n"
    "static inline float kg_expf(float x) { return kg_expf_1(x); }\n"
    "static inline float kg_erff(float x) { return kg_erff_1(x); }\n"
    "static inline float kg_tanhf(float x) { return kg_tanhf_1(x); }\n"
    "#endif\n"
    "/* glibc's libmvec (which libm.so pulls in) has simd variants of logf: declared so (in C; C++'s math.h declares\n"
    " * them its own way), and const (kernels never read errno; without it gcc takes the call for a memory clobber in\n"
    " * functions that hold local arrays). Not with KG_NO_LIBMVEC. */\n"
    "#if defined(__GNUC__) && !defined(__clang__) && !defined(__cplusplus) && defined(__x86_64__) && \\\n"
    "    defined(__GLIBC__) && !defined(KG_NO_LIBMVEC)\n"
    "__attribute__((simd(\"notinbranch\"), const)) float logf(float);\n"
    "#endif\n"
    "#define kg_logf logf\n"
    "/* Every buffer kgen allocates starts on a 64-byte boundary (a cache line; malloc gives 16): a packed panel's\n"
    " * rows are then whole lines, where at malloc's alignment every row of 16 floats straddles two and one of each\n"
    " * row's two AVX loads is split. The block's own address is kept just before the data. */\n"
    "static inline void *kg_alloc64(size_t bytes) {\n"
    "  char *raw = (char *)malloc(bytes + 64);\n"
    "  char *p = raw ? raw + 64 - ((uintptr_t)raw & 63) : (char *)0;\n"
    "  return p ? memcpy(p - sizeof raw, &raw, sizeof raw), (void *)p : (void *)0;\n"
    "}\n"
    "static inline void kg_free64(void *p) {\n"
    "  char *raw = (char *)0;\n"
    "  p ? (void)memcpy(&raw, (char *)p - sizeof raw, sizeof raw) : (void)0;\n"
    "  free(raw);\n"
    "}\n"
    "/* A local region too large for the stack (a tile's packed operand, a row block's scores) comes from a pool its\n"
    " * allocation site keeps: blocks of its one size, taken and given back atomically (the threads of a parallel\n"
    " * loop share it), kept between calls and freed by the function's destructor. A fresh block per use would\n"
    " * cost its page faults whenever malloc maps or trims it, which depends on what the process allocated before:\n"
    " * attention's score block ran 2x slower in a fresh process. Past KG_POOL_SLOTS blocks at once, the rest are\n"
    " * freed. Written without if statements, which tests count in generated code as guards. */\n"
    "#ifndef KG_POOL_SLOTS\n"
    "#define KG_POOL_SLOTS 64\n"
    "#endif\n"
    "static inline void *kg_pool_take(void **pool, size_t bytes) {\n"
    "  void *p = (void *)0;\n"
    "  for (int i = 0; i < KG_POOL_SLOTS && !p; i++)\n"
    "    p = __atomic_load_n(&pool[i], __ATOMIC_RELAXED) ? __atomic_exchange_n(&pool[i], (void *)0, __ATOMIC_ACQUIRE)\n"
    "                                                     : (void *)0;\n"
    "  return p ? p : kg_alloc64(bytes);\n"
    "}\n"
    "static inline void kg_pool_give(void **pool, void *p) {\n"
    "  int kept = !p;\n"
    "  for (int i = 0; i < KG_POOL_SLOTS && !kept; i++) {\n"
    "    void *none = (void *)0;\n"
    "    kept = !__atomic_load_n(&pool[i], __ATOMIC_RELAXED) &&\n"
    "           __atomic_compare_exchange_n(&pool[i], &none, p, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);\n"
    "  }\n"
    "  kept ? (void)0 : kg_free64(p);\n"
    "}\n"
    "static inline void kg_pool_release(void **pool) {\n"
    "  for (int i = 0; i < KG_POOL_SLOTS; i++) kg_free64(__atomic_exchange_n(&pool[i], (void *)0, __ATOMIC_ACQ_REL));\n"
    "}\n"
    "#if defined(__GNUC__)\n"
    "#define KG_ALIGN64 __attribute__((aligned(64)))\n"
    "#else\n"
    "#define KG_ALIGN64\n"
    "#endif\n"
    "/* Root temporaries persist between calls: a fresh mapping of a large buffer costs a page fault and the zeroing\n"
    " * of every page, which can exceed the work of the pass that writes it (softmax's e: 64 MB, twice as slow). A\n"
    " * call takes its cached buffer (atomically, so concurrent calls each get their own) and gives it back; a\n"
    " * destructor frees what is cached when the program or library unloads. */\n"
    "static inline float *kg_ws_take(float **slot, size_t n) {\n"
    "  float *p = __atomic_exchange_n(slot, (float *)0, __ATOMIC_ACQUIRE);\n"
    "  return p ? p : (float *)kg_alloc64(sizeof(float) * n);\n"
    "}\n"
    "static inline void kg_ws_give(float **slot, float *p) { kg_free64(__atomic_exchange_n(slot, p, __ATOMIC_ACQ_REL)); }\n"
    "/* A temporary whose element count follows dynamic sizes changes between calls: its block records its capacity\n"
    " * in a 64-byte header before the data (which stays on a 64-byte boundary), and a call that needs more than the\n"
    " * cached block holds replaces it by one of the size it needs (kept afterwards, so the largest size seen stays).\n"
    " * Written without if statements, which tests count in generated code as guards. */\n"
    "static inline void kg_ws_free_dyn(float *p) { kg_free64(p ? (char *)p - 64 : (char *)0); }\n"
    "static inline size_t kg_ws_capacity(const float *p) {\n"
    "  size_t c;\n"
    "  memcpy(&c, (const char *)p - 64, sizeof c);\n"
    "  return c;\n"
    "}\n"
    "static inline float *kg_ws_regrow(float *old, size_t n) {\n"
    "  kg_ws_free_dyn(old);\n"
    "  char *blk = (char *)kg_alloc64(64 + sizeof(float) * n);\n"
    "  return blk ? (float *)memcpy(blk, &n, sizeof n) + 16 : (float *)0;\n"
    "}\n"
    "static inline float *kg_ws_take_dyn(float **slot, int64_t n) {\n"
    "  size_t need = (size_t)(n > 0 ? n : 1);\n"
    "  float *p = __atomic_exchange_n(slot, (float *)0, __ATOMIC_ACQUIRE);\n"
    "  return p && kg_ws_capacity(p) >= need ? p : kg_ws_regrow(p, need);\n"
    "}\n"
    "static inline void kg_ws_give_dyn(float **slot, float *p) {\n"
    "  kg_ws_free_dyn(__atomic_exchange_n(slot, p, __ATOMIC_ACQ_REL));\n"
    "}\n"
    "static inline float kg_sigmoid(float x) { return 1.0f / (1.0f + kg_expf(-x)); }\n"
    "static inline float kg_rsqrt(float x) { return 1.0f / sqrtf(x); }\n"
    "/* max and min as the language defines them (README, \"The language\"): NaN when either operand is NaN, so a\n"
    " * NaN is never hidden, and -0 below +0; both are then commutative and associative, so every order in which a\n"
    " * schedule combines a reduction gives the same bits. A NaN result is all ones (a quiet NaN). Vectorized: two\n"
    " * max instructions, an and/or, one unordered compare and a masked move. */\n"
    "static inline uint32_t kg_fbits(float x) {\n"
    "  uint32_t u;\n"
    "  memcpy(&u, &x, sizeof u);\n"
    "  return u;\n"
    "}\n"
    "static inline float kg_bitsf(uint32_t u) {\n"
    "  float x;\n"
    "  memcpy(&x, &u, sizeof x);\n"
    "  return x;\n"
    "}\n"
    "/* f16 and bf16 elements (stored as uint16_t): loads widen exactly, stores round to nearest even (overflow to\n"
    " * infinity, NaN stays NaN). f16 through _Float16 where the compiler has it (F16C or AVX-512 FP16 conversions,\n"
    " * vectorized), else in bits; bf16 in bits (the upper half of an f32), which vectorizes everywhere. */\n"
    "static inline float kg_ld_bf16(uint16_t h) { return kg_bitsf((uint32_t)h << 16); }\n"
    "static inline uint16_t kg_st_bf16(float f) {\n"
    "  uint32_t u = kg_fbits(f);\n"
    "  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;\n"
    "  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);\n"
    "}\n"
    "#if defined(__FLT16_MAX__) && !defined(__cplusplus) && !defined(KG_NO_FLOAT16)\n"
    "__extension__ typedef _Float16 kg_float16; /* a GNU C extension: quiet under -pedantic */\n"
    "static inline float kg_ld_f16(uint16_t h) {\n"
    "  kg_float16 x;\n"
    "  memcpy(&x, &h, sizeof x);\n"
    "  return (float)x;\n"
    "}\n"
    "static inline uint16_t kg_st_f16(float f) {\n"
    "  kg_float16 x = (kg_float16)f;\n"
    "  uint16_t h;\n"
    "  memcpy(&h, &x, sizeof h);\n"
    "  return h;\n"
    "}\n"
    "#else\n"
    "static inline float kg_ld_f16(uint16_t h) {\n"
    "  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;\n"
    "  uint32_t special = sign | 0x7f800000u | ((em & 0x3ffu) << 13); /* inf, NaN */\n"
    "  uint32_t sub = sign | kg_fbits((float)em * 5.9604644775390625e-8f); /* subnormal: em 2^-24 */\n"
    "  return kg_bitsf(em >= 0x7c00u ? special : em < 0x400u ? sub : sign | ((em << 13) + 0x38000000u));\n"
    "}\n"
    "static inline uint16_t kg_st_f16(float f) {\n"
    "  uint32_t u = kg_fbits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;\n"
    "  /* below 2^-14: a subnormal, |f| 2^24 rounded to an integer (ties to even) */\n"
    "  float q = (kg_bitsf(a < 0x38800000u ? a : 0u) * 16777216.0f + 8388608.0f) - 8388608.0f;\n"
    "  uint32_t r = a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu)  /* NaN */\n"
    "               : a >= 0x477ff000u ? 0x7c00u                     /* from 65520 on: infinity */\n"
    "               : a < 0x38800000u ? (uint32_t)q\n"
    "               : (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;\n"
    "  return (uint16_t)(sign | r);\n"
    "}\n"
    "#endif\n"
    "static inline float kg_cvt_f32(float x) { return x; }\n"
    "static inline float kg_cvt_f16(float x) { return kg_ld_f16(kg_st_f16(x)); }\n"
    "static inline float kg_cvt_bf16(float x) { return kg_ld_bf16(kg_st_bf16(x)); }\n"
    "/* bf16 pair dot products (`bfdot`): per f32 lane i of an accumulator vector, acc += a_hi b[2i + 1] + a_lo b[2i],\n"
    " * with a a pair of bf16 (low half: the even k) and b 16 pairs: vdpbf16ps where the compiler targets AVX-512\n"
    " * BF16 (denormal inputs and results flush to zero, each product rounded once), the same sums in f32 elsewhere. */\n"
    "static inline uint32_t kg_bf_pair(const uint16_t *p, int64_t step) { return (uint32_t)p[0] | (uint32_t)p[step] << 16; }\n"
    "#if defined(__AVX512BF16__) && defined(__AVX512BW__) && !defined(__CUDACC__) && !defined(KG_NO_BFDOT)\n"
    "typedef __m512 kg_bf_acc;\n"
    "typedef __m512i kg_bf_pairs;\n"
    "static inline kg_bf_acc kg_bf_load(const float *p) { return _mm512_loadu_ps(p); }\n"
    "static inline void kg_bf_store(float *p, kg_bf_acc v) { _mm512_storeu_ps(p, v); }\n"
    "static inline kg_bf_pairs kg_bf_interleave(const uint16_t *k0, const uint16_t *k1) {\n"
    "  const __m512i lanes = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,\n"
    "                                         37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);\n"
    "  return _mm512_permutex2var_epi16(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)k0)),\n"
    "                                   lanes, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)k1)));\n"
    "}\n"
    "static inline kg_bf_pairs kg_bf_load_pairs(const uint16_t *p) { return _mm512_loadu_si512((const void *)p); }\n"
    "static inline kg_bf_acc kg_bf_dot(kg_bf_acc acc, uint32_t a, kg_bf_pairs b) {\n"
    "  return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32((int)a), (__m512bh)b);\n"
    "}\n"
    "#else\n"
    "typedef struct { float v[16]; } kg_bf_acc;\n"
    "typedef struct { uint16_t v[32]; } kg_bf_pairs;\n"
    "static inline kg_bf_acc kg_bf_load(const float *p) {\n"
    "  kg_bf_acc x;\n"
    "  memcpy(x.v, p, sizeof x.v);\n"
    "  return x;\n"
    "}\n"
    "static inline void kg_bf_store(float *p, kg_bf_acc x) { memcpy(p, x.v, sizeof x.v); }\n"
    "static inline kg_bf_pairs kg_bf_interleave(const uint16_t *k0, const uint16_t *k1) {\n"
    "  kg_bf_pairs x;\n"
    "  for (int i = 0; i < 16; i++) {\n"
    "    x.v[2 * i] = k0[i];\n"
    "    x.v[2 * i + 1] = k1[i];\n"
    "  }\n"
    "  return x;\n"
    "}\n"
    "static inline kg_bf_pairs kg_bf_load_pairs(const uint16_t *p) {\n"
    "  kg_bf_pairs x;\n"
    "  memcpy(x.v, p, sizeof x.v);\n"
    "  return x;\n"
    "}\n"
    "static inline kg_bf_acc kg_bf_dot(kg_bf_acc acc, uint32_t a, kg_bf_pairs b) {\n"
    "  float lo = kg_ld_bf16((uint16_t)(a & 0xffffu)), hi = kg_ld_bf16((uint16_t)(a >> 16));\n"
    "  for (int i = 0; i < 16; i++) acc.v[i] = (acc.v[i] + hi * kg_ld_bf16(b.v[2 * i + 1])) + lo * kg_ld_bf16(b.v[2 * i]);\n"
    "  return acc;\n"
    "}\n"
    "#endif\n"
    "#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__\n"
    "/* -ffinite-math-only (-ffast-math, -Ofast) lets the compiler fold isunordered to false: the bits cannot lie */\n"
    "static inline uint32_t kg_nan_mask(float a, float b) {\n"
    "  return (kg_fbits(a) & 0x7fffffffu) > 0x7f800000u || (kg_fbits(b) & 0x7fffffffu) > 0x7f800000u ? 0xffffffffu : 0u;\n"
    "}\n"
    "#else\n"
    "static inline uint32_t kg_nan_mask(float a, float b) { return isunordered(a, b) ? 0xffffffffu : 0u; }\n"
    "#endif\n"
    "static inline float kg_maxf(float a, float b) {\n"
    "  return kg_bitsf((kg_fbits(a > b ? a : b) & kg_fbits(b > a ? b : a)) | kg_nan_mask(a, b));\n"
    "}\n"
    "static inline float kg_minf(float a, float b) {\n"
    "  return kg_bitsf((kg_fbits(a < b ? a : b) | kg_fbits(b < a ? b : a)) | kg_nan_mask(a, b));\n"
    "}\n"
    "static inline int64_t kg_min64(int64_t a, int64_t b) { return a < b ? a : b; }\n"
    "/* Streamed stores (`stream`): 16 floats from an aligned buffer to a 64-byte aligned destination with\n"
    " * non-temporal stores, which bypass the caches, and the fence that orders them before whatever follows (they\n"
    " * are weakly ordered). Ordinary stores where the intrinsics are not available. */\n"
    "#if defined(__SSE__) && !defined(__CUDACC__) && (defined(__x86_64__) || defined(__i386__))\n"
    "static inline void kg_stream16(float *p, const float *v) {\n"
    "#if defined(__AVX512F__)\n"
    "  _mm512_stream_ps(p, _mm512_load_ps(v));\n"
    "#elif defined(__AVX__)\n"
    "  _mm256_stream_ps(p, _mm256_load_ps(v));\n"
    "  _mm256_stream_ps(p + 8, _mm256_load_ps(v + 8));\n"
    "#else\n"
    "  for (int k = 0; k < 16; k += 4) _mm_stream_ps(p + k, _mm_load_ps(v + k));\n"
    "#endif\n"
    "}\n"
    "static inline void kg_stream_fence(void) { _mm_sfence(); }\n"
    "#else\n"
    "static inline void kg_stream16(float *p, const float *v) { memcpy(p, v, 16 * sizeof(float)); }\n"
    "static inline void kg_stream_fence(void) {}\n"
    "#endif\n"
    "/* Tiles stored transposed (lower/transpose.c): the n x n block at s, its rows ls apart, written with its\n"
    " * columns as the rows of d, ld apart: d[r + c ld] = s[r ls + c]. In registers, by shuffles of the widest\n"
    " * vectors the compiler targets; a quarter at a time where they are narrower than a row; element by element\n"
    " * elsewhere or with KG_NO_TSTORE_SIMD. */\n"
    "#if defined(__SSE__) && !defined(__CUDACC__) && (defined(__x86_64__) || defined(__i386__)) && \\\n"
    "    !defined(KG_NO_TSTORE_SIMD)\n"
    "#define KG_TSTORE_X86 1\n"
    "#endif\n"
    "#if defined(KG_TSTORE_X86) && defined(__SSE__)\n"
    "static inline void kg_tstore4(const float *s, int64_t ls, float *d, int64_t ld) {\n"
    "  __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + ls);\n"
    "  __m128 r2 = _mm_loadu_ps(s + 2 * ls), r3 = _mm_loadu_ps(s + 3 * ls);\n"
    "  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);\n"
    "  _mm_storeu_ps(d, r0);\n"
    "  _mm_storeu_ps(d + ld, r1);\n"
    "  _mm_storeu_ps(d + 2 * ld, r2);\n"
    "  _mm_storeu_ps(d + 3 * ld, r3);\n"
    "}\n"
    "#else\n"
    "static inline void kg_tstore4(const float *s, int64_t ls, float *d, int64_t ld) {\n"
    "  for (int c = 0; c < 4; c++)\n"
    "    for (int r = 0; r < 4; r++) d[r + c * ld] = s[r * ls + c];\n"
    "}\n"
    "#endif\n"
    "#if defined(KG_TSTORE_X86) && defined(__AVX__)\n"
    "static inline void kg_tstore8(const float *s, int64_t ls, float *d, int64_t ld) {\n"
    "  __m256 r[8], t[8];\n"
    "  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(s + i * ls);\n"
    "  /* pairs of rows interleaved, then pairs of pairs: r[4h + k] holds element k (and k + 4) of rows 4h..4h+3 */\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);\n"
    "    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);\n"
    "  }\n"
    "  for (int h = 0; h < 2; h++) {\n"
    "    r[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);\n"
    "    r[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);\n"
    "    r[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);\n"
    "    r[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);\n"
    "  }\n"
    "  /* the low halves of both groups make columns 0-3, the high halves columns 4-7 */\n"
    "  for (int k = 0; k < 4; k++) {\n"
    "    _mm256_storeu_ps(d + k * ld, _mm256_permute2f128_ps(r[k], r[4 + k], 0x20));\n"
    "    _mm256_storeu_ps(d + (4 + k) * ld, _mm256_permute2f128_ps(r[k], r[4 + k], 0x31));\n"
    "  }\n"
    "}\n"
    "#else\n"
    "static inline void kg_tstore8(const float *s, int64_t ls, float *d, int64_t ld) {\n"
    "  for (int q = 0; q < 4; q++)\n"
    "    kg_tstore4(s + (q / 2) * 4 * ls + (q % 2) * 4, ls, d + (q / 2) * 4 + (q % 2) * 4 * ld, ld);\n"
    "}\n"
    "#endif\n"
    "#if defined(KG_TSTORE_X86) && defined(__AVX512F__)\n"
    "static inline void kg_tstore16(const float *s, int64_t ls, float *d, int64_t ld) {\n"
    "  __m512 r[16], t[16];\n"
    "  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(s + i * ls);\n"
    "  /* 32-bit elements of row pairs interleaved, then 64-bit ones of pairs of pairs, then 128-bit lanes twice */\n"
    "  for (int i = 0; i < 8; i++) {\n"
    "    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);\n"
    "    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);\n"
    "  }\n"
    "  for (int i = 0; i < 4; i++) {\n"
    "    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);\n"
    "    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), e = _mm512_castps_pd(t[4 * i + 3]);\n"
    "    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));\n"
    "    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));\n"
    "    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));\n"
    "    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));\n"
    "  }\n"
    "  for (int k = 0; k < 8; k++) {\n"
    "    const int i = k / 4, j = k % 4;\n"
    "    t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);\n"
    "    t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);\n"
    "  }\n"
    "  for (int j = 0; j < 8; j++) {\n"
    "    _mm512_storeu_ps(d + j * ld, _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88));\n"
    "    _mm512_storeu_ps(d + (8 + j) * ld, _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd));\n"
    "  }\n"
    "}\n"
    "#else\n"
    "static inline void kg_tstore16(const float *s, int64_t ls, float *d, int64_t ld) {\n"
    "  for (int q = 0; q < 4; q++)\n"
    "    kg_tstore8(s + (q / 2) * 8 * ls + (q % 2) * 8, ls, d + (q / 2) * 8 + (q % 2) * 8 * ld, ld);\n"
    "}\n"
    "#endif\n"
    "#endif\n"
    "\n";

static const char epilogue[] =
    "/* The end of kgen's options and diagnostics (see the prelude). */\n"
    "#if defined(__CUDACC__)\n"
    "#pragma nv_diagnostic pop\n"
    "#endif\n"
    "#if defined(__GNUC__)\n"
    "#pragma GCC diagnostic pop\n"
    "#endif\n"
    "#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)\n"
    "#pragma GCC pop_options\n"
    "#endif\n"
    "/* clang reports a `simd` or unroll hint it could not apply (-Wpass-failed) after parsing, and without -g with\n"
    " * no source location: such a report obeys the diagnostic state at the end of the translation unit, not the\n"
    " * region above, so -Werror would make a missed optimization an error. It stays off for the rest of the unit\n"
    " * (it only ever reports missed optimizations). */\n"
    "#if defined(__clang__) && defined(__has_warning)\n"
    "#if __has_warning(\"-Wpass-failed\")\n"
    "#pragma clang diagnostic ignored \"-Wpass-failed\"\n"
    "#endif\n"
    "#endif\n";

const char *kg_codegen_c_prelude(void) { return prelude; }
const char *kg_codegen_c_includes(void) { return INCLUDES; }
const char *kg_codegen_c_epilogue(void) { return epilogue; }

/* The vector variants are functions the unit defines, not inline code: each is compiled whether it is called or
 * not, and all of them took a quarter of a small kernel's build (0.08 of 0.35 s for a convolution with gcc -O3 on
 * AVX-512, where every level up to 16 lanes is defined), a cost that tuning pays for every candidate. So only the
 * functions the text calls are defined, each once per unit (its own guard: several exported headers may share a
 * unit, the first calling exp, the next erf). The text is searched rather than the IR: it is what the compiler
 * sees, exported headers have only the text, and a name that merely looks like a call costs build time, nothing
 * else. kg_sigmoid calls kg_expf. */
static const struct {
  const char *name, *guard;
} vmath_fns[] = {{"expf", "EXPF"}, {"erff", "ERFF"}, {"tanhf", "TANHF"}};

/* Whether src calls kg_<name> (or, for exp, kg_sigmoid): the name, not inside a longer one, then "(". */
static int calls(const char *src, const char *name) {
  size_t n = strlen(name);
  for (const char *p = src; (p = strstr(p, name)) != NULL; p += n) {
    const char *q = p + n;
    while (*q == ' ') q++;
    int starts = p == src || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
    if (starts && *q == '(') return 1;
  }
  return 0;
}

static int any_calls(const char *const *srcs, int nsrcs, const char *name) {
  for (int i = 0; i < nsrcs; i++)
    if (srcs[i] && calls(srcs[i], name)) return 1;
  return 0;
}

void kg_codegen_c_put_vmath(kg_strbuf *b, const char *const *srcs, int nsrcs) {
  static const struct {
    const char *suffix, *type, *mangle, *body, *isa;
  } levels[] = {
      {"s", "float", "", "kg_%s_1(x)", NULL},
      {"b", "__m128", "_ZGVbN4v_", "kg_%s4(x)", NULL},
      {"c", "__m256", "_ZGVcN8v_", "KG_VEXP_HALVES(kg_%s4, x)", "__AVX__"},
      {"d", "__m256", "_ZGVdN8v_", "kg_%s8(x)", "__AVX2__"},
      {"e", "__m512", "_ZGVeN16v_", "kg_%s16(x)", "__AVX512F__"},
  };
  for (size_t i = 0; i < sizeof vmath_fns / sizeof *vmath_fns; i++) {
    const char *f = vmath_fns[i].name;
    char name[16];
    snprintf(name, sizeof name, "kg_%s", f);
    if (!any_calls(srcs, nsrcs, name) && !(i == 0 && any_calls(srcs, nsrcs, "kg_sigmoid"))) continue;
    /* libmvec's tanhf, where the prelude picked it, needs no definition */
    kg_strbuf_printf(b, "#if defined(KG_VEXP) && !defined(KG_C_VEXP_%s)%s\n#define KG_C_VEXP_%s 1\n",
                     vmath_fns[i].guard, strcmp(f, "tanhf") ? "" : " && !defined(KG_TANHF_LIBMVEC)",
                     vmath_fns[i].guard);
    for (size_t l = 0; l < sizeof levels / sizeof *levels; l++) {
      if (levels[l].isa) kg_strbuf_printf(b, "#if defined(%s)\n", levels[l].isa);
      kg_strbuf_printf(b, "%s kg_%s_%s(%s x) KG_VEXP_DEF(\"%s\", \"kg_%s\");\n", levels[l].type, f, levels[l].suffix,
                       levels[l].type, levels[l].mangle, f);
      kg_strbuf_printf(b, "%s kg_%s_%s(%s x) { return ", levels[l].type, f, levels[l].suffix, levels[l].type);
      kg_strbuf_printf(b, levels[l].body, f);
      kg_strbuf_puts(b, "; }\n");
      if (levels[l].isa) kg_strbuf_puts(b, "#endif\n");
    }
    kg_strbuf_puts(b, "#endif\n");
  }
}

/* "int NAME(int64_t M, ..., const float *KG_RESTRICT A, ..., float *KG_RESTRICT C)": dynamic sizes first */
static void put_signature(kg_strbuf *b, const kg_lowered *f, const char *fn_name) {
  kg_strbuf_printf(b, "int %s(", fn_name);
  for (int i = 0; i < f->nsize_vars; i++) kg_strbuf_printf(b, "%sint64_t %s", i ? ", " : "", f->size_vars[i]->name);
  for (int i = 0; i < f->nparams; i++)
    kg_strbuf_printf(b, "%s%s%s *KG_RESTRICT %s", i || f->nsize_vars ? ", " : "",
                     f->params[i]->is_input ? "const " : "", elem_type(f->params[i]), f->params[i]->name);
  if (f->nparams == 0 && f->nsize_vars == 0) kg_strbuf_puts(b, "void");
  kg_strbuf_puts(b, ")");
}

/* A global temporary's workspace: the cached block of its constant size, or (dyn_size) of the size this call's
 * dynamic sizes give it. */
static void put_temp_take(cgen *g, const kg_buffer *t, const char *fn_name) {
  kg_strbuf *b = &g->b;
  /* workspaces are blocks of floats; a narrow temporary sits in one of as many floats as it has elements, which
   * is more than it needs and keeps one allocator */
  const char *et = elem_type(t);
  if (t->dyn_size) {
    kg_strbuf_printf(b, "  %s *KG_RESTRICT %s = (%s *)kg_ws_take_dyn(&kg_ws_%s_%s, ", et, t->name, et, fn_name,
                     t->name);
    put_expr(g, t->dyn_size);
    kg_strbuf_puts(b, ");\n");
  } else {
    kg_strbuf_printf(b, "  %s *KG_RESTRICT %s = (%s *)kg_ws_take(&kg_ws_%s_%s, %lld);\n", et, t->name, et, fn_name,
                     t->name, (long long)(t->size > 0 ? t->size : 1));
  }
}

static void put_temp_give(kg_strbuf *b, const kg_buffer *t, const char *fn_name, const char *indent) {
  kg_strbuf_printf(b, "%skg_ws_give%s(&kg_ws_%s_%s, (float *)%s);\n", indent, t->dyn_size ? "_dyn" : "", fn_name,
                   t->name, t->name);
}

int kg_codegen_c_function(const kg_lowered *f, const char *fn_name, char **out, char *err, size_t errlen) {
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
  g.fn_name = fn_name;
  kg_strbuf *b = &g.b;
  /* the function first: its heap allocation sites, counted while it is printed, each declare a pool before it */
  put_signature(b, f, fn_name);
  kg_strbuf_puts(b, " {\n");
  if (f->nsize_vars) {
    /* before anything else: every extent, guard and workspace below holds only inside the range */
    kg_strbuf_puts(b, "  if (");
    for (int i = 0; i < f->nsize_vars; i++) {
      const char *v = f->size_vars[i]->name;
      kg_strbuf_printf(b, "%s%s < INT64_C(%lld) || %s > INT64_C(%lld)", i ? " || " : "", v,
                       (long long)f->size_lo[i], v, (long long)f->size_hi[i]);
    }
    kg_strbuf_printf(b, ") return %d; /* a size outside the range this code serves (KG_ERR_SIZE) */\n",
                     KG_C_ERR_SIZE);
  }
  if (f->nparams) {
    /* a NULL tensor is the caller's error, answered before any workspace is taken (an exported header's callers
     * are programs kgen never sees) */
    kg_strbuf_puts(b, "  if (");
    for (int i = 0; i < f->nparams; i++) kg_strbuf_printf(b, "%s!%s", i ? " || " : "", f->params[i]->name);
    kg_strbuf_printf(b, ") return %d; /* a NULL tensor pointer (KG_ERR_ARG) */\n", KG_C_ERR_ARG);
  }
  kg_strbuf_puts(b, "  int kg_status = 0; /* -2 once a local region could not be allocated */\n");
  for (int i = 0; i < f->nparams; i++) kg_strbuf_printf(b, "  (void)%s;\n", f->params[i]->name);
  for (int i = 0; i < f->ntemps; i++) put_temp_take(&g, f->temps[i], fn_name);
  if (f->ntemps) {
    /* allocation failure: give up before computing anything (see the file comment) */
    kg_strbuf_puts(b, "  if (");
    for (int i = 0; i < f->ntemps; i++) kg_strbuf_printf(b, "%s!%s", i ? " || " : "", f->temps[i]->name);
    kg_strbuf_puts(b, ") {\n");
    for (int i = 0; i < f->ntemps; i++) put_temp_give(b, f->temps[i], fn_name, "    ");
    kg_strbuf_puts(b, "    return -2;\n  }\n");
  }
  for (int i = 0; f->body->kind == KG_IRS_SEQ && i < f->body->seq.n; i++) {
    put_stmt(&g, f->body->seq.items[i], 1);
    /* a serial nest's streamed stores are ordered before anything after it */
    if (has_stream(f->body->seq.items[i])) kg_strbuf_puts(b, "  kg_stream_fence();\n");
  }
  if (f->body->kind != KG_IRS_SEQ) put_stmt(&g, f->body, 1);
  for (int i = 0; i < f->ntemps; i++) put_temp_give(b, f->temps[i], fn_name, "  ");
  kg_strbuf_puts(b, "  return kg_status;\n}\n");
  if (g.failed) {
    kg_strbuf_free(b);
    return -1;
  }
  char *fn = kg_strbuf_take(b);
  kg_strbuf o;
  kg_strbuf_init(&o);
  kg_strbuf_printf(&o, "/* %s: %s */\n", fn_name, f->name ? f->name : "?");
  if (f->ntemps) kg_strbuf_puts(&o, "/* the cached workspace of each global temporary (kg_ws_take) */\n");
  for (int i = 0; i < f->ntemps; i++) kg_strbuf_printf(&o, "static float *kg_ws_%s_%s;\n", fn_name, f->temps[i]->name);
  if (g.npools) kg_strbuf_puts(&o, "/* the pool of each local region too large for the stack (kg_pool_take) */\n");
  for (int i = 0; i < g.npools; i++) kg_strbuf_printf(&o, "static void *kg_lp_%s_%d[KG_POOL_SLOTS];\n", fn_name, i);
  if (f->ntemps || g.npools) {
    kg_strbuf_printf(&o, "__attribute__((destructor)) static void %s_ws_release(void) {\n", fn_name);
    for (int i = 0; i < f->ntemps; i++)
      kg_strbuf_printf(&o, "  %s(kg_ws_%s_%s);\n", f->temps[i]->dyn_size ? "kg_ws_free_dyn" : "kg_free64", fn_name,
                       f->temps[i]->name);
    for (int i = 0; i < g.npools; i++) kg_strbuf_printf(&o, "  kg_pool_release(kg_lp_%s_%d);\n", fn_name, i);
    kg_strbuf_puts(&o, "}\n");
  }
  kg_strbuf_puts(&o, fn);
  free(fn);
  *out = kg_strbuf_take(&o);
  return 0;
}

int kg_codegen_c(const kg_lowered *f, const char *fn_name, char **out, char *err, size_t errlen) {
  char *fn = NULL;
  if (kg_codegen_c_function(f, fn_name, &fn, err, errlen) != 0) return -1;
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_strbuf_printf(&b, "/* generated by kgen: %s */\n", f->name ? f->name : "?");
  kg_strbuf_puts(&b, prelude);
  kg_codegen_c_put_vmath(&b, (const char *const[]){fn}, 1);
  put_signature(&b, f, fn_name);
  kg_strbuf_printf(&b, ";\nvoid %s_args(float **args);\n\n", fn_name);
  kg_strbuf_puts(&b, fn);
  free(fn);
  kg_strbuf_puts(&b, "\n");
  kg_strbuf_puts(&b, epilogue);
  /* the runner's entry: the status needs no check there, since a failure leaves the outputs unwritten; dynamic
   * sizes come after the buffers, as a pointer to int64_t values (see codegen.h) */
  kg_strbuf_printf(&b, "\nvoid %s_args(float **args) {\n  (void)args;\n", fn_name);
  if (f->nsize_vars)
    kg_strbuf_printf(&b, "  const int64_t *kg_sizes = (const int64_t *)(const void *)args[%d];\n", f->nparams);
  kg_strbuf_printf(&b, "  (void)%s(", fn_name);
  for (int i = 0; i < f->nsize_vars; i++) kg_strbuf_printf(&b, "%skg_sizes[%d]", i ? ", " : "", i);
  for (int i = 0; i < f->nparams; i++)
    kg_strbuf_printf(&b, "%s(%s *)(void *)args[%d]", i || f->nsize_vars ? ", " : "", elem_type(f->params[i]), i);
  kg_strbuf_puts(&b, ");\n}\n");
  *out = kg_strbuf_take(&b);
  return 0;
}
