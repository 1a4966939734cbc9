/* The CUDA printer: a lowered function as one CUDA C translation unit with one kernel per root stage.
 *
 * Per kernel, a first pass (analyze) finds the launch shape (per tag, the largest extent bound to it), the
 * shared arrays (the shared-scope regions plus the scratch of cross-thread reductions) and checks the limits;
 * the second pass prints. What the printer decides itself:
 * - a loop bound to a tag whose extent is below the launched extent is guarded (`if (threadIdx.x < E)`); a
 *   barrier or a cross-thread reduction under such a guard is rejected, since not every thread would reach it;
 * - a store to shared or global memory that no enclosing thread index distinguishes (its index does not use the
 *   variable of any enclosing loop bound to that tag) is made by the thread whose index is 0 along that tag;
 * - a vectorized loop of extent 2 or 4 whose body is one store becomes float2/float4 accesses when every access
 *   that moves with the loop variable is base + v with base a multiple of the width (every buffer is 16-byte
 *   aligned: parameters and temporaries come from cuMemAlloc, arrays are declared __align__(16), dynamic shared
 *   offsets are multiples of 16 bytes); otherwise it is an unrolled scalar loop;
 * - a cross-thread reduction combines with xor shuffles when the threads it spans are a power of two within a
 *   warp, with shuffles then shared memory across warps when they are whole warps, else through shared memory.
 *
 * The source includes no header: NVRTC compiles it as is, and the host compiler with runtime/cuda_emu.h
 * force-included (KG_EMULATE) compiles it for the emulator, which calls the `<kernel>__emu` entries.
 *
 * Requires: a kg_lowered for KG_TARGET_CUDA (constant loop extents, allocations only of shared or local scope). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../schedule/bounds.h"
#include "cexpr.h"
#include "codegen.h"

#define KG_CUDA_STATIC_SHARED_MAX (48 * 1024)
#define KG_CUDA_LOCAL_MAX (64 * 1024) /* bytes of register arrays per thread */
#define KG_CUDA_MAX_DEPTH 256

/* How a cross-thread reduction combines. */
typedef enum { RED_NONE, RED_WARP, RED_WARPS, RED_SHARED } red_kind;

typedef struct redinfo {
  const kg_irstmt *s;
  red_kind kind;
  int64_t elems; /* shared scratch, floats */
  int64_t offset;
  int id;
} redinfo;

typedef struct shinfo {
  const kg_buffer *buf;
  int64_t offset; /* bytes, in the dynamic layout */
} shinfo;

typedef struct cgen {
  kg_strbuf b;
  char *err;
  size_t errlen;
  int failed;
  int over_limit; /* the failure is a launch or size limit, not an illegal schedule (kg_codegen_cuda returns -2) */
  const kg_lowered *f;
  const char *kname;
  int wide; /* index type long long */
  /* per kernel */
  int64_t launch[KG_THREAD_COUNT];
  shinfo *sh;
  int nsh, capsh;
  redinfo *red;
  int nred, capred;
  int dynamic;
  /* while printing */
  struct {
    kg_thread_tag tag;
    const kg_irvar *var;
    const char *stage, *loop;
    int guarded;
    int64_t ext;
  } bound[KG_CUDA_MAX_DEPTH];
  int nbound;
  int nif;                 /* enclosing IFs */
  kg_irexpr **lets;        /* by var id: the value of each LET printed so far */
  int nvars;
  /* vector printing: loads replaced by a component of a loaded vector */
  const kg_irexpr **vload;
  int nvload;
  int lane;
  int nvec;                /* counter for unique vector names */
  kg_arena tmp;
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

static const char *nm(const char *s) { return s ? s : "?"; }

/* ---- dependence on a variable (through the LETs printed so far) ---- */

static int uses_var(const cgen *g, const kg_irexpr *e, const kg_irvar *v, int depth) {
  if (depth > 64) return 1; /* conservative */
  switch (e->kind) {
    case KG_IRE_VAR:
      if (e->var == v) return 1;
      if (e->var->id < g->nvars && g->lets[e->var->id]) return uses_var(g, g->lets[e->var->id], v, depth + 1);
      return 0;
    case KG_IRE_LOAD: return uses_var(g, e->load.index, v, depth + 1);
    case KG_IRE_BINARY: return uses_var(g, e->bin.a, v, depth + 1) || uses_var(g, e->bin.b, v, depth + 1);
    case KG_IRE_UNARY:
    case KG_IRE_CAST: return uses_var(g, e->bin.a, v, depth + 1);
    case KG_IRE_CALL:
      for (int i = 0; i < e->call.n; i++)
        if (uses_var(g, e->call.args[i], v, depth + 1)) return 1;
      return 0;
    case KG_IRE_SELECT:
      return uses_var(g, e->sel.c, v, depth + 1) || uses_var(g, e->sel.a, v, depth + 1) ||
             uses_var(g, e->sel.b, v, depth + 1);
    default: return 0;
  }
}

/* ---- expressions ---- */

static void fail_expr(void *ctx, const char *msg) { cfail(ctx, "codegen cuda: %s", msg); }

/* NVRTC without headers has neither INFINITY nor NAN (bit patterns instead) nor INT64_C; the helpers named here
 * are defined by the prelude below. */
static const kg_cexpr_dialect cuda_dialect = {
    .nan = "__int_as_float(0x7fffffff)",
    .inf = "__int_as_float(0x7f800000)",
    .neg_inf = "(-__int_as_float(0x7f800000))",
    .int64_open = "(",
    .int64_close = "LL)",
    .true_lit = "true",
    .false_lit = "false",
    .floordiv = "kg_floordiv",
    .floormod = "kg_floormod",
    .min_int = "kg_min_idx",
    .rsqrt = "rsqrtf",
    .exp = "expf",
    .log = "logf",
};

static const char *const lane_names = "xyzw";

/* Inside a vectorized loop (put_vector_loop), a load it fetched as a vector is that vector's current lane. */
static int put_vector_lane(void *ctx, kg_strbuf *b, const kg_irexpr *e) {
  const cgen *g = ctx;
  for (int i = 0; i < g->nvload; i++)
    if (g->vload[i] == e) {
      kg_strbuf_printf(b, "kg_vl%d_%d.%c", g->nvec, i, lane_names[g->lane]);
      return 1;
    }
  return 0;
}

static void put_expr(cgen *g, const kg_irexpr *e) {
  kg_cexpr_printer p = {.b = &g->b, .d = &cuda_dialect, .ctx = g, .load = put_vector_lane, .fail = fail_expr};
  kg_cexpr_put_expr(&p, e);
}

/* ---- analysis: launch shape, shared memory, limits ---- */

static void note_int(cgen *g, int64_t v) {
  if (v > (INT64_C(1) << 30) || v < -(INT64_C(1) << 30)) g->wide = 1;
}

static void scan_ints(cgen *g, const kg_irexpr *e) {
  switch (e->kind) {
    case KG_IRE_INT:
      if (e->ty == KG_TY_INT) note_int(g, e->i);
      break;
    case KG_IRE_LOAD: scan_ints(g, e->load.index); break;
    case KG_IRE_BINARY:
      scan_ints(g, e->bin.a);
      scan_ints(g, e->bin.b);
      break;
    case KG_IRE_UNARY:
    case KG_IRE_CAST: scan_ints(g, e->bin.a); break;
    case KG_IRE_CALL:
      for (int i = 0; i < e->call.n; i++) scan_ints(g, e->call.args[i]);
      break;
    case KG_IRE_SELECT:
      scan_ints(g, e->sel.c);
      scan_ints(g, e->sel.a);
      scan_ints(g, e->sel.b);
      break;
    default: break;
  }
}

/* Decides the index type over the whole function: int when every size, extent and constant stays within 2^30
 * (so that sums of in-range terms cannot overflow int32), else long long. */
static void scan_wide(cgen *g, const kg_irstmt *s) {
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) scan_wide(g, s->seq.items[i]);
      break;
    case KG_IRS_FOR:
      scan_ints(g, s->loop.extent);
      scan_wide(g, s->loop.body);
      break;
    case KG_IRS_IF:
      scan_ints(g, s->cond.cond);
      scan_wide(g, s->cond.then);
      if (s->cond.otherwise) scan_wide(g, s->cond.otherwise);
      break;
    case KG_IRS_STORE:
      scan_ints(g, s->store.index);
      scan_ints(g, s->store.value);
      break;
    case KG_IRS_LET: scan_ints(g, s->let.value); break;
    case KG_IRS_ALLOC:
      note_int(g, s->alloc.buf->size);
      scan_wide(g, s->alloc.body);
      break;
    default: break;
  }
}

static void analyze(cgen *g, const kg_irstmt *s) {
  if (g->failed) return;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) analyze(g, s->seq.items[i]);
      break;
    case KG_IRS_FOR: {
      int64_t ext;
      if (!kg_ir_is_const(s->loop.extent, &ext)) {
        cfail(g, "codegen cuda: stage %s: loop %s: the extent is not a constant", nm(s->loop.stage_name),
              nm(s->loop.loop_name));
        return;
      }
      kg_thread_tag t = s->loop.tag;
      /* parallel means CPU threads: on the GPU it would silently be a serial loop in every thread */
      if (s->loop.kind == KG_LOOP_PARALLEL) {
        cfail(g, "codegen cuda: stage %s: loop %s is parallel, which is for the C target; bind it to blockIdx or "
              "threadIdx instead", nm(s->loop.stage_name), nm(s->loop.loop_name));
        return;
      }
      if (s->loop.kind == KG_LOOP_BOUND && t == KG_THREAD_NONE) {
        cfail(g, "codegen cuda: stage %s: loop %s is bound without a tag", nm(s->loop.stage_name),
              nm(s->loop.loop_name));
        return;
      }
      if (kg_thread_tag_is_thread(t) || kg_thread_tag_is_block(t)) {
        if (ext > g->launch[t]) g->launch[t] = ext;
        for (int i = 0; i < g->nbound; i++)
          if (g->bound[i].tag == t && g->bound[i].stage && s->loop.stage_name &&
              !strcmp(g->bound[i].stage, s->loop.stage_name)) {
            cfail(g, "codegen cuda: stage %s: loops %s and %s are both bound to %s", s->loop.stage_name,
                  nm(g->bound[i].loop), nm(s->loop.loop_name), kg_thread_tag_names[t]);
            return;
          }
      }
      if (g->nbound >= KG_CUDA_MAX_DEPTH) {
        cfail(g, "codegen cuda: stage %s: loops nested too deeply", nm(s->loop.stage_name));
        return;
      }
      g->bound[g->nbound].tag = t;
      g->bound[g->nbound].stage = s->loop.stage_name;
      g->bound[g->nbound].loop = s->loop.loop_name;
      g->nbound++;
      analyze(g, s->loop.body);
      g->nbound--;
      break;
    }
    case KG_IRS_IF:
      analyze(g, s->cond.then);
      if (s->cond.otherwise) analyze(g, s->cond.otherwise);
      break;
    case KG_IRS_ALLOC: {
      const kg_buffer *buf = s->alloc.buf;
      int64_t bytes;
      if (buf->size < 1 || __builtin_mul_overflow(buf->size, (int64_t)sizeof(float), &bytes)) bytes = INT64_MAX;
      if (buf->scope == KG_SCOPE_SHARED) {
        KG_PUSH(&g->tmp, g->sh, g->nsh, g->capsh, ((shinfo){buf, 0}));
      } else if (buf->scope == KG_SCOPE_LOCAL) {
        if (bytes > KG_CUDA_LOCAL_MAX) {
          if (!g->failed) g->over_limit = 1;
          cfail(g, "codegen cuda: buffer %s: a per-thread region of %lld floats (more than %d KB per thread)",
                buf->name, (long long)buf->size, KG_CUDA_LOCAL_MAX / 1024);
          return;
        }
      } else {
        cfail(g, "codegen cuda: buffer %s: a global allocation inside a kernel", buf->name);
        return;
      }
      analyze(g, s->alloc.body);
      break;
    }
    case KG_IRS_ALLREDUCE:
      {
        int id = g->nred;
        KG_PUSH(&g->tmp, g->red, g->nred, g->capred, ((redinfo){s, RED_NONE, 0, 0, id}));
      }
      break;
    default: break;
  }
}

static int64_t block_threads(const cgen *g) {
  return g->launch[KG_THREAD_THREAD_X] * g->launch[KG_THREAD_THREAD_Y] * g->launch[KG_THREAD_THREAD_Z];
}

static int pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

static void plan_reductions(cgen *g) {
  int64_t bx = g->launch[KG_THREAD_THREAD_X], nt = block_threads(g);
  for (int i = 0; i < g->nred; i++) {
    redinfo *r = &g->red[i];
    kg_thread_tag t = r->s->allreduce.tag;
    int64_t e = g->launch[t];
    if (e <= 1) r->kind = RED_NONE, r->elems = 0;
    else if (t == KG_THREAD_THREAD_X && pow2(bx) && bx <= 32) r->kind = RED_WARP, r->elems = 0;
    else if (t == KG_THREAD_THREAD_X && bx % 32 == 0) r->kind = RED_WARPS, r->elems = nt / 32;
    else r->kind = RED_SHARED, r->elems = nt;
  }
}

/* ---- statements ---- */

static void put_stmt(cgen *g, const kg_irstmt *s, int ind);

static void put_items(cgen *g, const kg_irstmt *s, int ind) {
  if (s->kind == KG_IRS_SEQ)
    for (int i = 0; i < s->seq.n; i++) put_stmt(g, s->seq.items[i], ind);
  else
    put_stmt(g, s, ind);
}

/* The single-writer condition of a store (see the file comment), or 0 when every thread along every launched
 * tag writes its own element. Writes "(threadIdx.x == 0 && ...)" into b. */
static int writer_guard(cgen *g, const kg_irstmt *s, kg_strbuf *out) {
  const kg_buffer *buf = s->store.buf;
  if (buf->scope == KG_SCOPE_LOCAL) return 0;
  int n = 0;
  for (int t = KG_THREAD_BLOCK_X; t <= KG_THREAD_THREAD_Z; t++) {
    if (g->launch[t] <= 1) continue;
    /* shared memory is per block */
    if (kg_thread_tag_is_block((kg_thread_tag)t) && buf->scope == KG_SCOPE_SHARED) continue;
    int distinguished = 0;
    for (int i = 0; i < g->nbound && !distinguished; i++)
      if (g->bound[i].tag == (kg_thread_tag)t && uses_var(g, s->store.index, g->bound[i].var, 0)) distinguished = 1;
    if (distinguished) continue;
    kg_strbuf_printf(out, "%s%s == 0", n ? " && " : "", kg_thread_tag_names[t]);
    n++;
  }
  return n;
}

/* ---- vectorized loops ---- */

/* Walks a normalised sum: adds to *cv the coefficient of v; every other term must be a multiple of w. */
static int lin_walk(cgen *g, const kg_irexpr *e, const kg_irvar *v, int64_t mult, int64_t w, int64_t *cv) {
  int64_t c;
  switch (e->kind) {
    case KG_IRE_INT: return e->i * mult % w == 0;
    case KG_IRE_BINARY:
      if (e->bin.op == KG_OP_ADD) return lin_walk(g, e->bin.a, v, mult, w, cv) && lin_walk(g, e->bin.b, v, mult, w, cv);
      if (e->bin.op == KG_OP_SUB)
        return lin_walk(g, e->bin.a, v, mult, w, cv) && lin_walk(g, e->bin.b, v, -mult, w, cv);
      if (e->bin.op == KG_OP_MUL) {
        if (kg_ir_is_const(e->bin.b, &c) && llabs(c) < (1 << 30) && llabs(mult) < (1 << 30))
          return lin_walk(g, e->bin.a, v, mult * c, w, cv);
        if (kg_ir_is_const(e->bin.a, &c) && llabs(c) < (1 << 30) && llabs(mult) < (1 << 30))
          return lin_walk(g, e->bin.b, v, mult * c, w, cv);
      }
      break;
    case KG_IRE_UNARY:
      if (e->bin.op == KG_OP_NEG) return lin_walk(g, e->bin.a, v, -mult, w, cv);
      break;
    case KG_IRE_VAR:
      if (e->var == v) {
        *cv += mult;
        return 1;
      }
      break;
    default: break;
  }
  /* an atom: it must not move with v, and its multiple must keep the alignment */
  if (uses_var(g, e, v, 0)) return 0;
  return mult % w == 0;
}

/* Is index = base + v with base a multiple of w? */
static int vector_index(cgen *g, const kg_irexpr *index, const kg_irvar *v, int64_t w) {
  kg_irexpr *e = kg_bounds_simplify(&g->tmp, (kg_irexpr *)index, g->lets, g->nvars);
  int64_t cv = 0;
  return lin_walk(g, e, v, 1, w, &cv) && cv == 1;
}

/* Collects the loads of value that move with v (each must be a vector access); 0 when some other part of
 * value moves with v. */
static int vector_value(cgen *g, const kg_irexpr *e, const kg_irvar *v, int64_t w, const kg_irexpr **loads, int *n,
                        int max) {
  switch (e->kind) {
    case KG_IRE_LOAD:
      if (!uses_var(g, e->load.index, v, 0)) return 1;
      if (!vector_index(g, e->load.index, v, w) || *n >= max) return 0;
      loads[(*n)++] = e;
      return 1;
    case KG_IRE_BINARY:
      return vector_value(g, e->bin.a, v, w, loads, n, max) && vector_value(g, e->bin.b, v, w, loads, n, max);
    case KG_IRE_UNARY:
    case KG_IRE_CAST: return vector_value(g, e->bin.a, v, w, loads, n, max);
    case KG_IRE_CALL:
      for (int i = 0; i < e->call.n; i++)
        if (!vector_value(g, e->call.args[i], v, w, loads, n, max)) return 0;
      return 1;
    case KG_IRE_SELECT:
      return vector_value(g, e->sel.c, v, w, loads, n, max) && vector_value(g, e->sel.a, v, w, loads, n, max) &&
             vector_value(g, e->sel.b, v, w, loads, n, max);
    case KG_IRE_VAR: return !uses_var(g, e, v, 0);
    default: return 1;
  }
}

static void put_let(cgen *g, const kg_irstmt *s, int ind) {
  kg_strbuf_indent(&g->b, ind);
  kg_strbuf_printf(&g->b, "const kg_idx %s = ", s->let.var->name ? s->let.var->name : "kg_unnamed");
  put_expr(g, s->let.value);
  kg_strbuf_puts(&g->b, ";\n");
  if (s->let.var->id < g->nvars) g->lets[s->let.var->id] = s->let.value;
}

/* A vectorized loop as float2/float4 accesses; 0 (nothing printed) when the loop does not qualify. */
static int put_vector_loop(cgen *g, const kg_irstmt *s, int ind) {
  kg_strbuf *b = &g->b;
  int64_t w;
  if (!kg_ir_is_const(s->loop.extent, &w) || (w != 2 && w != 4)) return 0;
  const kg_irvar *v = s->loop.var;
  const kg_irstmt *body = s->loop.body, *store = NULL;
  const kg_irstmt *const *items = &body;
  int nitems = 1;
  if (body->kind == KG_IRS_SEQ) items = (const kg_irstmt *const *)body->seq.items, nitems = body->seq.n;
  for (int i = 0; i < nitems; i++) {
    const kg_irstmt *it = items[i];
    if (it->kind == KG_IRS_LET && !store) continue;
    if (it->kind == KG_IRS_COMMENT) continue;
    if (it->kind == KG_IRS_STORE && !store) {
      store = it;
      continue;
    }
    return 0;
  }
  if (!store) return 0;
  /* the LETs' values, so that dependence and alignment see through them (set again when printed) */
  for (int i = 0; i < nitems; i++)
    if (items[i]->kind == KG_IRS_LET && items[i]->let.var->id < g->nvars)
      g->lets[items[i]->let.var->id] = items[i]->let.value;
  const kg_irexpr *loads[16];
  int nl = 0;
  if (!vector_index(g, store->store.index, v, w) || !vector_value(g, store->store.value, v, w, loads, &nl, 16))
    return 0;
  const char *vt = w == 4 ? "float4" : "float2";
  int id = ++g->nvec;
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "{ /* %s.%s: vectorized as %s */\n", nm(s->loop.stage_name), nm(s->loop.loop_name), vt);
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_printf(b, "const kg_idx %s = 0;\n", v->name);
  for (int i = 0; i < nitems; i++)
    if (items[i]->kind == KG_IRS_LET) put_let(g, items[i], ind + 1);
  kg_strbuf guard;
  kg_strbuf_init(&guard);
  int ng = writer_guard(g, store, &guard);
  int in = ind + 1;
  if (ng) {
    kg_strbuf_indent(b, in);
    kg_strbuf_printf(b, "if (%s) {\n", guard.s);
    in++;
  }
  kg_strbuf_free(&guard);
  for (int i = 0; i < nl; i++) {
    kg_strbuf_indent(b, in);
    kg_strbuf_printf(b, "const %s kg_vl%d_%d = *(const %s *)(%s + (", vt, id, i, vt, loads[i]->load.buf->name);
    put_expr(g, loads[i]->load.index);
    kg_strbuf_puts(b, "));\n");
  }
  kg_strbuf_indent(b, in);
  kg_strbuf_printf(b, "%s kg_vs%d;\n", vt, id);
  int saved_vec = g->nvec;
  g->vload = loads;
  g->nvload = nl;
  g->nvec = id;
  for (int l = 0; l < w; l++) {
    g->lane = l;
    kg_strbuf_indent(b, in);
    kg_strbuf_printf(b, "kg_vs%d.%c = ", id, lane_names[l]);
    put_expr(g, store->store.value);
    kg_strbuf_puts(b, ";\n");
  }
  g->vload = NULL;
  g->nvload = 0;
  g->nvec = saved_vec;
  kg_strbuf_indent(b, in);
  kg_strbuf_printf(b, "*(%s *)(%s + (", vt, store->store.buf->name);
  put_expr(g, store->store.index);
  kg_strbuf_printf(b, ")) = kg_vs%d;\n", id);
  if (ng) {
    kg_strbuf_indent(b, ind + 1);
    kg_strbuf_puts(b, "}\n");
  }
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "}\n");
  return 1;
}

/* ---- cross-thread reductions ---- */

static void put_combine(cgen *g, kg_reducer red, const char *acc, const char *x) {
  switch (red) {
    case KG_RED_SUM: kg_strbuf_printf(&g->b, "%s = %s + %s;\n", acc, acc, x); break;
    case KG_RED_PROD: kg_strbuf_printf(&g->b, "%s = %s * %s;\n", acc, acc, x); break;
    case KG_RED_MAX: kg_strbuf_printf(&g->b, "%s = kg_maxf(%s, %s);\n", acc, acc, x); break;
    case KG_RED_MIN: kg_strbuf_printf(&g->b, "%s = kg_minf(%s, %s);\n", acc, acc, x); break;
    default: cfail(g, "codegen cuda: a cross-thread reduction without a reducer"); break;
  }
}

/* Fails when some thread of the block might not reach s (under a guarded thread loop or an if). */
static int check_uniform(cgen *g, const char *what) {
  for (int i = g->nbound - 1; i >= 0; i--)
    if (g->bound[i].guarded && kg_thread_tag_is_thread(g->bound[i].tag)) {
      cfail(g,
            "codegen cuda: kernel %s: %s under the guarded loop %s.%s (%s extent %lld < %lld launched): not "
            "every thread would reach it",
            g->kname, what, nm(g->bound[i].stage), nm(g->bound[i].loop), kg_thread_tag_names[g->bound[i].tag],
            (long long)g->bound[i].ext, (long long)g->launch[g->bound[i].tag]);
      return -1;
    }
  if (g->nif) {
    cfail(g, "codegen cuda: kernel %s: %s under a condition: not every thread would reach it", g->kname, what);
    return -1;
  }
  return 0;
}

static void put_allreduce(cgen *g, const kg_irstmt *s, int ind) {
  kg_strbuf *b = &g->b;
  char what[256];
  snprintf(what, sizeof what, "the cross-thread reduction of stage %s over loop %s", nm(s->allreduce.stage_name),
           nm(s->allreduce.loop_name));
  if (check_uniform(g, what)) return;
  const redinfo *r = NULL;
  for (int i = 0; i < g->nred; i++)
    if (g->red[i].s == s) r = &g->red[i];
  if (!r) {
    cfail(g, "codegen cuda: internal: an unplanned cross-thread reduction");
    return;
  }
  kg_thread_tag t = s->allreduce.tag;
  int64_t bx = g->launch[KG_THREAD_THREAD_X], by = g->launch[KG_THREAD_THREAD_Y];
  int64_t nt = block_threads(g), e = g->launch[t];
  char acc[160];
  snprintf(acc, sizeof acc, "%s[0]", s->allreduce.buf->name);
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "{ /* cross-thread %s over %s (%lld threads) */\n", kg_reducer_names[s->allreduce.red],
                   kg_thread_tag_names[t], (long long)e);
  int in = ind + 1;
  const char *lin = "(int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))";
  switch (r->kind) {
    case RED_NONE: break;
    case RED_WARP:
    case RED_WARPS: {
      int64_t span = r->kind == RED_WARP ? bx : 32;
      kg_strbuf_indent(b, in);
      if (nt % 32 == 0) {
        kg_strbuf_puts(b, "const unsigned kg_mask = 0xffffffffu;\n");
      } else {
        /* the last warp is partial: only its existing lanes take part */
        kg_strbuf_printf(b, "const int kg_left = %lld - (%s / 32) * 32;\n", (long long)nt, lin);
        kg_strbuf_indent(b, in);
        kg_strbuf_puts(b, "const unsigned kg_mask = kg_left >= 32 ? 0xffffffffu : ((1u << kg_left) - 1u);\n");
      }
      for (int64_t off = span / 2; off >= 1; off /= 2) {
        kg_strbuf_indent(b, in);
        char x[256];
        snprintf(x, sizeof x, "__shfl_xor_sync(kg_mask, %s, %lld, 32)", acc, (long long)off);
        put_combine(g, s->allreduce.red, acc, x);
      }
      if (r->kind == RED_WARP) break;
      /* whole warps along x: lane 0 of each publishes its warp's value, then everyone combines them */
      int64_t nw = bx / 32;
      kg_strbuf_indent(b, in);
      kg_strbuf_printf(b, "const int kg_row = (int)(threadIdx.y + blockDim.y * threadIdx.z) * %lld;\n", (long long)nw);
      kg_strbuf_indent(b, in);
      kg_strbuf_printf(b, "if (threadIdx.x %% 32 == 0) kg_red%d[kg_row + (int)threadIdx.x / 32] = %s;\n", r->id, acc);
      kg_strbuf_indent(b, in);
      kg_strbuf_puts(b, "__syncthreads();\n");
      kg_strbuf_indent(b, in);
      kg_strbuf_printf(b, "%s = kg_red%d[kg_row];\n", acc, r->id);
      kg_strbuf_indent(b, in);
      kg_strbuf_printf(b, "for (int kg_i = 1; kg_i < %lld; ++kg_i) ", (long long)nw);
      char x[256];
      snprintf(x, sizeof x, "kg_red%d[kg_row + kg_i]", r->id);
      put_combine(g, s->allreduce.red, acc, x);
      kg_strbuf_indent(b, in);
      kg_strbuf_puts(b, "__syncthreads();\n");
      break;
    }
    case RED_SHARED: {
      /* any shape: every thread publishes its partial, then combines those of its group in one order */
      kg_strbuf_indent(b, in);
      kg_strbuf_printf(b, "kg_red%d[%s] = %s;\n", r->id, lin, acc);
      kg_strbuf_indent(b, in);
      kg_strbuf_puts(b, "__syncthreads();\n");
      kg_strbuf_indent(b, in);
      kg_strbuf_puts(b, "float kg_acc = ");
      kg_cexpr_put_float(&cuda_dialect, b, kg_reducer_identity(s->allreduce.red));
      kg_strbuf_puts(b, ";\n");
      kg_strbuf_indent(b, in);
      kg_strbuf_printf(b, "for (int kg_i = 0; kg_i < %lld; ++kg_i) ", (long long)e);
      char x[256];
      if (t == KG_THREAD_THREAD_X)
        snprintf(x, sizeof x, "kg_red%d[kg_i + %lld * (int)(threadIdx.y + %lld * threadIdx.z)]", r->id,
                 (long long)bx, (long long)by);
      else if (t == KG_THREAD_THREAD_Y)
        snprintf(x, sizeof x, "kg_red%d[(int)threadIdx.x + %lld * (kg_i + %lld * (int)threadIdx.z)]", r->id,
                 (long long)bx, (long long)by);
      else
        snprintf(x, sizeof x, "kg_red%d[(int)threadIdx.x + %lld * ((int)threadIdx.y + %lld * kg_i)]", r->id,
                 (long long)bx, (long long)by);
      put_combine(g, s->allreduce.red, "kg_acc", x);
      kg_strbuf_indent(b, in);
      kg_strbuf_printf(b, "%s = kg_acc;\n", acc);
      kg_strbuf_indent(b, in);
      kg_strbuf_puts(b, "__syncthreads();\n");
      break;
    }
  }
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "}\n");
}

static void put_stmt(cgen *g, const kg_irstmt *s, int ind) {
  kg_strbuf *b = &g->b;
  if (g->failed) return;
  switch (s->kind) {
    case KG_IRS_SEQ: {
      int decl = 0;
      for (int i = 0; i < s->seq.n; i++) decl |= s->seq.items[i]->kind == KG_IRS_LET;
      if (!decl) {
        put_items(g, s, ind);
        break;
      }
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "{\n");
      put_items(g, s, ind + 1);
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "}\n");
      break;
    }
    case KG_IRS_FOR: {
      int64_t ext = 0;
      kg_ir_is_const(s->loop.extent, &ext);
      kg_thread_tag t = s->loop.tag;
      const char *v = s->loop.var->name;
      g->bound[g->nbound].tag = t;
      g->bound[g->nbound].var = s->loop.var;
      g->bound[g->nbound].stage = s->loop.stage_name;
      g->bound[g->nbound].loop = s->loop.loop_name;
      g->bound[g->nbound].guarded = 0;
      g->bound[g->nbound].ext = ext;
      if (kg_thread_tag_is_thread(t) || kg_thread_tag_is_block(t)) {
        int guarded = ext < g->launch[t];
        g->bound[g->nbound].guarded = guarded;
        const char *hw = kg_thread_tag_names[t]; /* "threadIdx.x", ...: the tag's name is the hardware index */
        kg_strbuf_indent(b, ind);
        if (guarded) kg_strbuf_printf(b, "if ((int)%s < %lld) { /* %s.%s */\n", hw, (long long)ext,
                                      nm(s->loop.stage_name), nm(s->loop.loop_name));
        else kg_strbuf_printf(b, "{ /* %s.%s */\n", nm(s->loop.stage_name), nm(s->loop.loop_name));
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_printf(b, "const kg_idx %s = %s;\n", v, hw);
        g->nbound++;
        put_items(g, s->loop.body, ind + 1);
        g->nbound--;
        kg_strbuf_indent(b, ind);
        kg_strbuf_puts(b, "}\n");
        break;
      }
      if (s->loop.kind == KG_LOOP_VECTORIZED && put_vector_loop(g, s, ind)) break;
      if (s->loop.kind == KG_LOOP_VECTORIZED || s->loop.kind == KG_LOOP_UNROLLED || t == KG_THREAD_VTHREAD) {
        kg_strbuf_indent(b, ind);
        kg_strbuf_puts(b, "#pragma unroll\n");
      }
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "for (kg_idx %s = 0; %s < ", v, v);
      kg_cexpr_put_int(&cuda_dialect, b, ext);
      kg_strbuf_printf(b, "; ++%s) { /* %s.%s%s%s */\n", v, nm(s->loop.stage_name), nm(s->loop.loop_name),
                       s->loop.kind != KG_LOOP_SERIAL ? " " : "",
                       s->loop.kind == KG_LOOP_SERIAL ? ""
                       : t == KG_THREAD_VTHREAD      ? "vthread"
                                                     : kg_loop_kind_names[s->loop.kind]);
      g->nbound++;
      put_items(g, s->loop.body, ind + 1);
      g->nbound--;
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "}\n");
      break;
    }
    case KG_IRS_IF:
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "if (");
      put_expr(g, s->cond.cond);
      kg_strbuf_puts(b, ") {\n");
      g->nif++;
      put_items(g, s->cond.then, ind + 1);
      kg_strbuf_indent(b, ind);
      if (s->cond.otherwise) {
        kg_strbuf_puts(b, "} else {\n");
        put_items(g, s->cond.otherwise, ind + 1);
        kg_strbuf_indent(b, ind);
      }
      g->nif--;
      kg_strbuf_puts(b, "}\n");
      break;
    case KG_IRS_STORE: {
      kg_strbuf guard;
      kg_strbuf_init(&guard);
      int ng = writer_guard(g, s, &guard);
      kg_strbuf_indent(b, ind);
      if (ng) kg_strbuf_printf(b, "if (%s) ", guard.s);
      kg_strbuf_free(&guard);
      kg_strbuf_printf(b, "%s[", s->store.buf->name);
      put_expr(g, s->store.index);
      kg_strbuf_puts(b, "] = ");
      put_expr(g, s->store.value);
      kg_strbuf_puts(b, ";\n");
      break;
    }
    case KG_IRS_LET: put_let(g, s, ind); break;
    case KG_IRS_ALLOC: {
      const kg_buffer *buf = s->alloc.buf;
      kg_strbuf_indent(b, ind);
      if (buf->scope == KG_SCOPE_SHARED) {
        kg_strbuf_printf(b, "{ /* %s: %lld floats, shared (declared above) */\n", buf->name, (long long)buf->size);
      } else {
        kg_strbuf_printf(b, "{ /* %s: %lld floats, per thread */\n", buf->name, (long long)buf->size);
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_printf(b, "__align__(16) float %s[%lld];\n", buf->name, (long long)(buf->size > 0 ? buf->size : 1));
      }
      put_items(g, s->alloc.body, ind + 1);
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "}\n");
      break;
    }
    case KG_IRS_BARRIER:
      if (check_uniform(g, "a barrier (__syncthreads around a shared stage)")) return;
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "__syncthreads();\n");
      break;
    case KG_IRS_ALLREDUCE: put_allreduce(g, s, ind); break;
    case KG_IRS_COMMENT:
      kg_cexpr_put_comment(b, ind, s->text);
      break;
  }
}

/* ---- the translation unit ---- */

/* Follows the kg_idx typedef, inside a guard with it: several programs of the same index width can then be
 * pasted into one translation unit (an emulated header build puts each in a namespace of its own, which also
 * covers programs of different widths). */
static const char prelude[] =
    "#ifndef KG_EMULATE\n"
    "#define KG_DYNAMIC_SHARED(name) extern __shared__ __align__(16) float name[]\n"
    "#endif\n"
    "\n"
    "__device__ __forceinline__ kg_idx kg_floordiv(kg_idx a, kg_idx b) {\n"
    "  kg_idx q = a / b;\n"
    "  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n"
    "}\n"
    "__device__ __forceinline__ kg_idx kg_floormod(kg_idx a, kg_idx b) {\n"
    "  kg_idx r = a % b;\n"
    "  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
    "}\n"
    "__device__ __forceinline__ kg_idx kg_min_idx(kg_idx a, kg_idx b) { return a < b ? a : b; }\n"
    "__device__ __forceinline__ float kg_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
    "__device__ __forceinline__ float kg_maxf(float a, float b) { return a > b ? a : b; }\n"
    "__device__ __forceinline__ float kg_minf(float a, float b) { return a < b ? a : b; }\n"
    "#endif\n"
    "\n";

static void put_params(cgen *g) {
  const kg_lowered *f = g->f;
  int n = 0;
  for (int i = 0; i < f->nparams; i++, n++)
    kg_strbuf_printf(&g->b, "%s%sfloat* __restrict__ %s", n ? ", " : "", f->params[i]->is_input ? "const " : "",
                     f->params[i]->name);
  for (int i = 0; i < f->ntemps; i++, n++)
    kg_strbuf_printf(&g->b, "%sfloat* __restrict__ %s", n ? ", " : "", f->temps[i]->name);
}

/* Launch limits of every CUDA device kgen targets (sm_70 on). */
static int check_launch(cgen *g) {
  static const int64_t max_ext[KG_THREAD_COUNT] = {0, INT32_MAX, 65535, 65535, 1024, 1024, 64, 0};
  for (int t = KG_THREAD_BLOCK_X; t <= KG_THREAD_THREAD_Z; t++)
    if (g->launch[t] > max_ext[t]) {
      if (!g->failed) g->over_limit = 1;
      cfail(g, "codegen cuda: kernel %s: %s extent %lld exceeds the limit %lld", g->kname, kg_thread_tag_names[t],
            (long long)g->launch[t], (long long)max_ext[t]);
      return -1;
    }
  if (block_threads(g) > 1024) {
    if (!g->failed) g->over_limit = 1;
    cfail(g, "codegen cuda: kernel %s: %lld threads per block exceed the limit 1024", g->kname,
          (long long)block_threads(g));
    return -1;
  }
  return 0;
}

static int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

static int put_kernel(cgen *g, const kg_irstmt *item, int k, const char *prefix, kg_cuda_kernel *kern) {
  kg_strbuf *b = &g->b;
  char *name = kg_arena_printf(&g->tmp, "%s_k%d", prefix, k);
  g->kname = name;
  for (int t = 0; t < KG_THREAD_COUNT; t++) g->launch[t] = 1;
  g->nsh = g->nred = g->nbound = g->nif = 0;
  analyze(g, item);
  if (g->failed || check_launch(g)) return -1;
  plan_reductions(g);
  int64_t total = 0;
  for (int i = 0; i < g->nsh; i++) {
    g->sh[i].offset = total;
    total += align16(g->sh[i].buf->size * (int64_t)sizeof(float));
  }
  for (int i = 0; i < g->nred; i++) {
    g->red[i].offset = total;
    total += align16(g->red[i].elems * (int64_t)sizeof(float));
  }
  g->dynamic = total > KG_CUDA_STATIC_SHARED_MAX;
  int64_t threads = block_threads(g);

  kg_strbuf_printf(b, "extern \"C\" __global__ void __launch_bounds__(%lld) %s(", (long long)threads, name);
  put_params(g);
  kg_strbuf_puts(b, ") {\n");
  kg_strbuf_printf(b, "  /* grid (%lld, %lld, %lld), block (%lld, %lld, %lld), %lld bytes of %s shared memory */\n",
                   (long long)g->launch[KG_THREAD_BLOCK_X], (long long)g->launch[KG_THREAD_BLOCK_Y],
                   (long long)g->launch[KG_THREAD_BLOCK_Z], (long long)g->launch[KG_THREAD_THREAD_X],
                   (long long)g->launch[KG_THREAD_THREAD_Y], (long long)g->launch[KG_THREAD_THREAD_Z],
                   (long long)total, g->dynamic ? "dynamic" : "static");
  for (int i = 0; i < g->f->nparams; i++) kg_strbuf_printf(b, "  (void)%s;\n", g->f->params[i]->name);
  for (int i = 0; i < g->f->ntemps; i++) kg_strbuf_printf(b, "  (void)%s;\n", g->f->temps[i]->name);
  if (g->dynamic) kg_strbuf_puts(b, "  KG_DYNAMIC_SHARED(kg_dyn_smem);\n");
  for (int i = 0; i < g->nsh; i++) {
    const kg_buffer *buf = g->sh[i].buf;
    if (g->dynamic)
      kg_strbuf_printf(b, "  float *const %s = kg_dyn_smem + %lld;\n", buf->name, (long long)(g->sh[i].offset / 4));
    else
      kg_strbuf_printf(b, "  __shared__ __align__(16) float %s[%lld];\n", buf->name, (long long)buf->size);
  }
  for (int i = 0; i < g->nred; i++) {
    if (!g->red[i].elems) continue;
    if (g->dynamic)
      kg_strbuf_printf(b, "  float *const kg_red%d = kg_dyn_smem + %lld;\n", g->red[i].id,
                       (long long)(g->red[i].offset / 4));
    else
      kg_strbuf_printf(b, "  __shared__ __align__(16) float kg_red%d[%lld];\n", g->red[i].id,
                       (long long)g->red[i].elems);
  }
  g->nbound = 0;
  put_items(g, item, 1);
  kg_strbuf_puts(b, "}\n\n");
  if (g->failed) return -1;
  kern->name = strdup(name);
  if (!kern->name) abort();
  for (int d = 0; d < 3; d++) {
    kern->grid[d] = g->launch[KG_THREAD_BLOCK_X + d];
    kern->block[d] = g->launch[KG_THREAD_THREAD_X + d];
  }
  kern->static_shared = g->dynamic ? 0 : total;
  kern->dynamic_shared = g->dynamic ? total : 0;
  return 0;
}

void kg_cuda_program_free(kg_cuda_program *p) {
  if (!p) return;
  free(p->source);
  for (int i = 0; i < p->nkernels; i++) free((char *)p->kernels[i].name);
  free(p->kernels);
  free(p->temp_elems);
  memset(p, 0, sizeof *p);
}

int kg_codegen_cuda(const kg_lowered *f, const char *prefix, kg_cuda_program *out, char *err, size_t errlen) {
  cgen g;
  memset(&g, 0, sizeof g);
  memset(out, 0, sizeof *out);
  g.err = err;
  g.errlen = errlen;
  g.f = f;
  if (err && errlen) err[0] = 0;
  if (!kg_cexpr_valid_ident(prefix) || strlen(prefix) > 200) {
    cfail(&g, "codegen cuda: '%s' is not a C identifier", prefix ? prefix : "(null)");
    return -1;
  }
  if (f->target != KG_TARGET_CUDA) {
    cfail(&g, "codegen cuda: the function was lowered for another target");
    return -1;
  }
  kg_arena_init(&g.tmp);
  kg_strbuf_init(&g.b);
  g.nvars = f->n_vars;
  g.lets = KG_NEW_ARRAY(&g.tmp, kg_irexpr *, g.nvars + 1);
  for (int i = 0; i < f->nparams; i++) note_int(&g, f->params[i]->size);
  for (int i = 0; i < f->ntemps; i++) note_int(&g, f->temps[i]->size);
  scan_wide(&g, f->body);

  int nk = f->body->kind == KG_IRS_SEQ ? f->body->seq.n : 1;
  out->kernels = calloc((size_t)nk + 1, sizeof *out->kernels);
  out->temp_elems = calloc((size_t)f->ntemps + 1, sizeof *out->temp_elems);
  if (!out->kernels || !out->temp_elems) abort();
  kg_strbuf *b = &g.b;
  kg_strbuf_printf(b, "/* generated by kgen: %s (CUDA) */\n", f->name ? f->name : "?");
  kg_strbuf_printf(b, "#ifndef KG_CUDA_PRELUDE\n#define KG_CUDA_PRELUDE\ntypedef %s kg_idx;\n",
                   g.wide ? "long long" : "int");
  kg_strbuf_puts(b, prelude);
  for (int k = 0; k < nk && !g.failed; k++) {
    const kg_irstmt *item = f->body->kind == KG_IRS_SEQ ? f->body->seq.items[k] : f->body;
    if (put_kernel(&g, item, k, prefix, &out->kernels[k]) == 0) out->nkernels++;
  }
  if (!g.failed) {
    kg_strbuf_puts(b, "#ifdef KG_EMULATE\n");
    for (int k = 0; k < out->nkernels; k++) {
      const char *kn = out->kernels[k].name;
      kg_strbuf_printf(b, "extern \"C\" void %s__emu(float **a) { %s(", kn, kn);
      for (int i = 0; i < f->nparams + f->ntemps; i++) kg_strbuf_printf(b, "%sa[%d]", i ? ", " : "", i);
      kg_strbuf_puts(b, "); }\n");
    }
    kg_strbuf_puts(b, "#endif\n");
  }
  kg_arena_free(&g.tmp);
  if (g.failed) {
    kg_strbuf_free(b);
    kg_cuda_program_free(out);
    return g.over_limit ? -2 : -1;
  }
  out->source = kg_strbuf_take(b);
  out->nparams = f->nparams;
  out->ntemps = f->ntemps;
  for (int i = 0; i < f->ntemps; i++) out->temp_elems[i] = f->temps[i]->size;
  return 0;
}
