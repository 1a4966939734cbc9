/* The CUDA printer: a lowered function as one CUDA C translation unit with one kernel per root stage.
 *
 * Per kernel, the launch shape is lowering's (f->launch, lower/launch.c); a first pass (analyze) finds the shared
 * arrays (the shared-scope regions plus the scratch of cross-thread reductions) and checks the limits; the second
 * pass prints. Lowering's launch guards (an IF on the thread index around a loop bound to a tag, narrower than the
 * launch) print as `if ((int)threadIdx.x < E) {` in place of the loop's block; cross-thread reductions combine as
 * lowering decided from the launch shape (kg_allreduce_how: xor shuffles, shuffles then shared memory across warps,
 * or shared memory). What the printer still decides itself: a vectorized loop of extent 2, 4, 8, 12 or 16 whose
 * body is one store (or one guard around it that does not move with the loop: a single writer, a fetch's thread
 * bound) becomes float2/float4 accesses (extents past 4 as float4 pieces) when every access that moves with the
 * loop variable is base + v with base a multiple of the width (4 past it) (every buffer is 16-byte aligned: parameters and temporaries come from cuMemAlloc, arrays are declared
 * __align__(16), dynamic shared offsets are multiples of 16 bytes); otherwise it is an unrolled scalar loop. The
 * single writer of a store no thread index distinguishes (lower/writer.c) is an IF in the IR, printed on the
 * store's line.
 *
 * The source includes no header: NVRTC compiles it as is, and the host compiler with runtime/cuda_emu.h
 * force-included (KG_EMULATE) compiles it for the emulator, which calls the `<kernel>__emu` entries.
 *
 * With dynamic sizes (f->nsize_vars > 0) every kernel takes their values first and copies each into a local of
 * the index type named as the size, so that index arithmetic stays 32-bit where it fits. A blockIdx-bound loop
 * whose extent follows the sizes makes a grid extent computed at launch: a postfix program (kg_cuda_extent) that
 * kg_cuda_program_grid evaluates and kg_cuda_extent_print writes out for exported headers; such a loop is guarded
 * unless it alone sets that extent. The limits and the index type are decided with every size at its hi (extents
 * grow with the sizes: lowering makes them of sizes, constants, sums, products and ceiling divisions).
 *
 * Requires: a kg_lowered for KG_TARGET_CUDA (loop extents constant or over the dynamic sizes only, allocations
 * only of shared or local scope), with its launch shapes (f->launch). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/intmath.h"
#include "../base/strbuf.h"
#include "../lower/bounds.h"
#include "cexpr.h"
#include "codegen.h"

#define KG_CUDA_STATIC_SHARED_MAX (48 * 1024)
#define KG_CUDA_LOCAL_MAX (64 * 1024) /* bytes of register arrays per thread */
#define KG_CUDA_MAX_DEPTH 256
#define KG_CUDA_X_STACK 64    /* evaluation stack of an extent program */

typedef struct redinfo {
  const kg_irstmt *s;
  kg_allreduce_how kind; /* lowering's (lower/launch.c) */
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
  const kg_launch *L;               /* the kernel's launch shape (lowering's) */
  int64_t launch[KG_THREAD_COUNT]; /* L->ext */
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

/* ---- extents that follow dynamic sizes ---- */

/* The grid's limits on every CUDA device kgen targets (sm_70 on), x, y, z. */
static const int64_t grid_max[3] = {INT32_MAX, 65535, 65535};

typedef struct xbuild {
  kg_cuda_xstep *code; /* heap */
  int n, cap;
  int depth, maxdepth;
} xbuild;

static void x_push(xbuild *x, kg_cuda_xop op, int64_t v, int pops) {
  if (x->n == x->cap) {
    x->cap = x->cap ? 2 * x->cap : 8;
    x->code = realloc(x->code, sizeof *x->code * (size_t)x->cap);
    if (!x->code) abort();
  }
  x->code[x->n++] = (kg_cuda_xstep){op, v};
  x->depth += 1 - pops;
  if (x->depth > x->maxdepth) x->maxdepth = x->depth;
}

/* The index of v among f's dynamic sizes, or -1. */
static int size_index(const kg_lowered *f, const kg_irvar *v) {
  for (int i = 0; i < f->nsize_vars; i++)
    if (f->size_vars[i] == v) return i;
  return -1;
}

/* Appends e's program; -1 when e uses anything but integer constants, the dynamic sizes, + - * floor division,
 * floor modulo and the integer minimum. */
static int x_emit(const kg_lowered *f, const kg_irexpr *e, xbuild *x) {
  switch (e->kind) {
    case KG_IRE_INT: x_push(x, KG_CUDA_X_CONST, e->i, 0); return 0;
    case KG_IRE_VAR: {
      int k = size_index(f, e->var);
      if (k < 0) return -1;
      x_push(x, KG_CUDA_X_SIZE, k, 0);
      return 0;
    }
    case KG_IRE_BINARY: {
      kg_cuda_xop op;
      switch (e->bin.op) {
        case KG_OP_ADD: op = KG_CUDA_X_ADD; break;
        case KG_OP_SUB: op = KG_CUDA_X_SUB; break;
        case KG_OP_MUL: op = KG_CUDA_X_MUL; break;
        case KG_OP_DIV: op = KG_CUDA_X_FLOORDIV; break;
        case KG_OP_MOD: op = KG_CUDA_X_FLOORMOD; break;
        default: return -1;
      }
      if (e->ty != KG_TY_INT || x_emit(f, e->bin.a, x) || x_emit(f, e->bin.b, x)) return -1;
      x_push(x, op, 0, 2);
      return 0;
    }
    case KG_IRE_SELECT:
      if (!kg_ir_is_min_int(e) || x_emit(f, e->sel.a, x) || x_emit(f, e->sel.b, x)) return -1;
      x_push(x, KG_CUDA_X_MIN, 0, 2);
      return 0;
    default: return -1;
  }
}

/* e (an INT expression over f's dynamic sizes) as a program in *out (heap); -1 when it is not one. */
static int x_build(const kg_lowered *f, const kg_irexpr *e, kg_cuda_extent *out) {
  xbuild x = {0};
  if (x_emit(f, e, &x) != 0 || x.maxdepth > KG_CUDA_X_STACK) {
    free(x.code);
    return -1;
  }
  out->code = x.code;
  out->n = x.n;
  return 0;
}

int64_t kg_cuda_extent_eval(const kg_cuda_extent *x, const int64_t *sizes) {
  int64_t st[KG_CUDA_X_STACK];
  int sp = 0;
  for (int i = 0; i < x->n; i++) {
    const kg_cuda_xstep *s = &x->code[i];
    if (s->op == KG_CUDA_X_CONST || s->op == KG_CUDA_X_SIZE) {
      if (sp == KG_CUDA_X_STACK || (s->op == KG_CUDA_X_SIZE && (!sizes || s->v < 0))) return -1;
      st[sp++] = s->op == KG_CUDA_X_CONST ? s->v : sizes[s->v];
      continue;
    }
    if (sp < 2) return -1;
    int64_t b = st[--sp], a = st[sp - 1], r;
    switch (s->op) {
      case KG_CUDA_X_ADD:
        if (__builtin_add_overflow(a, b, &r)) return -1;
        break;
      case KG_CUDA_X_SUB:
        if (__builtin_sub_overflow(a, b, &r)) return -1;
        break;
      case KG_CUDA_X_MUL:
        if (__builtin_mul_overflow(a, b, &r)) return -1;
        break;
      case KG_CUDA_X_FLOORDIV:
      case KG_CUDA_X_FLOORMOD:
        if (b == 0 || (a == INT64_MIN && b == -1)) return -1;
        r = kg_int_floordiv(a, b);
        if (s->op == KG_CUDA_X_FLOORMOD) r = a - r * b;
        break;
      case KG_CUDA_X_MIN: r = a < b ? a : b; break;
      case KG_CUDA_X_MAX: r = a > b ? a : b; break;
      default: return -1;
    }
    st[sp - 1] = r;
  }
  return sp == 1 ? st[0] : -1;
}

/* The first step of the subexpression that ends at step end; -1 for a malformed program. */
static int x_start(const kg_cuda_extent *x, int end) {
  if (end < 0) return -1;
  if (x->code[end].op == KG_CUDA_X_CONST || x->code[end].op == KG_CUDA_X_SIZE) return end;
  int r = x_start(x, end - 1);
  return r < 0 ? -1 : x_start(x, r - 1);
}

static void x_put(kg_strbuf *b, const kg_cuda_extent *x, int end, const char *const *names) {
  const kg_cuda_xstep *s = &x->code[end];
  if (s->op == KG_CUDA_X_CONST) {
    if (s->v == INT64_MIN) kg_strbuf_puts(b, "(-9223372036854775807LL - 1)");
    else kg_strbuf_printf(b, s->v < 0 ? "(%lldLL)" : "%lldLL", (long long)s->v);
    return;
  }
  if (s->op == KG_CUDA_X_SIZE) {
    kg_strbuf_puts(b, names[s->v]);
    return;
  }
  int r = x_start(x, end - 1);
  static const char *const infix[] = {[KG_CUDA_X_ADD] = " + ", [KG_CUDA_X_SUB] = " - ", [KG_CUDA_X_MUL] = " * "};
  static const char *const helper[] = {[KG_CUDA_X_FLOORDIV] = "kg_cuda_xfloordiv", [KG_CUDA_X_FLOORMOD] = "kg_cuda_xfloormod",
                                       [KG_CUDA_X_MIN] = "kg_cuda_xmin", [KG_CUDA_X_MAX] = "kg_cuda_xmax"};
  int is_infix = s->op == KG_CUDA_X_ADD || s->op == KG_CUDA_X_SUB || s->op == KG_CUDA_X_MUL;
  kg_strbuf_printf(b, "%s(", is_infix ? "" : helper[s->op]);
  x_put(b, x, r - 1, names);
  kg_strbuf_puts(b, is_infix ? infix[s->op] : ", ");
  x_put(b, x, end - 1, names);
  kg_strbuf_putc(b, ')');
}

void kg_cuda_extent_print(kg_strbuf *b, const kg_cuda_extent *x, const char *const *size_names) {
  if (x->n < 1 || x_start(x, x->n - 1) != 0) {
    kg_strbuf_puts(b, "(-1LL) /* a malformed extent */");
    return;
  }
  x_put(b, x, x->n - 1, size_names);
}

int kg_cuda_program_grid(const kg_cuda_program *p, const int64_t *sizes, int64_t (*grid)[3], int64_t *temp_elems,
                         char *err, size_t errlen) {
  if (errlen) err[0] = 0;
  if (p->nsizes > 0 && !sizes) {
    snprintf(err, errlen, "the kernels take %d dynamic size%s and none were given", p->nsizes,
             p->nsizes == 1 ? "" : "s");
    return -1;
  }
  for (int i = 0; i < p->nsizes; i++)
    if (sizes[i] < p->size_lo[i] || sizes[i] > p->size_hi[i]) {
      snprintf(err, errlen, "dynamic size %s = %lld is outside the range %lld..%lld the kernels serve",
               p->size_names[i], (long long)sizes[i], (long long)p->size_lo[i], (long long)p->size_hi[i]);
      return -1;
    }
  for (int k = 0; k < p->nkernels; k++) {
    const kg_cuda_kernel *kn = &p->kernels[k];
    for (int d = 0; d < 3; d++) {
      const kg_cuda_extent *x = p->grid_dyn ? &p->grid_dyn[k][d] : NULL;
      int64_t v = x && x->n ? kg_cuda_extent_eval(x, sizes) : kn->grid[d];
      if (v < 0 || v > grid_max[d]) {
        if (v < 0) snprintf(err, errlen, "kernel %s: the grid's %c extent cannot be evaluated at these sizes",
                            kn->name, "xyz"[d]);
        else snprintf(err, errlen, "kernel %s: the grid's %c extent %lld exceeds the limit %lld", kn->name,
                      "xyz"[d], (long long)v, (long long)grid_max[d]);
        return -1;
      }
      grid[k][d] = v;
    }
  }
  for (int t = 0; temp_elems && t < p->ntemps; t++) {
    int64_t v = p->temp_dyn && p->temp_dyn[t].n ? kg_cuda_extent_eval(&p->temp_dyn[t], sizes) : p->temp_elems[t];
    if (v < 0) {
      snprintf(err, errlen, "temporary %d: its size cannot be evaluated at these sizes", t);
      return -1;
    }
    temp_elems[t] = v;
  }
  return 0;
}

/* The dynamic size e uses (its index; the first one met), or -1 when none. */
static int first_size(const kg_lowered *f, const kg_irexpr *e) {
  if (e->kind == KG_IRE_VAR) return size_index(f, e->var);
  int k = -1;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int nk = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < nk && k < 0; i++) k = first_size(f, *kids[i]);
  return k;
}

/* The value of e (over the dynamic sizes) at sizes; -1 when e is not such an expression or does not evaluate. */
static int64_t eval_at(const kg_lowered *f, const kg_irexpr *e, const int64_t *sizes) {
  kg_cuda_extent x;
  if (x_build(f, e, &x) != 0) return -1;
  int64_t v = kg_cuda_extent_eval(&x, sizes);
  free(x.code);
  return v;
}

/* ---- dependence on a variable (through the LETs printed so far) ---- */

static int uses_var(const cgen *g, const kg_irexpr *e, const kg_irvar *v, int depth) {
  if (depth > 64) return 1; /* conservative */
  if (e->kind == KG_IRE_VAR) {
    if (e->var == v) return 1;
    if (e->var->id < g->nvars && g->lets[e->var->id]) return uses_var(g, g->lets[e->var->id], v, depth + 1);
    return 0;
  }
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int nk = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < nk; i++)
    if (uses_var(g, *kids[i], v, depth + 1)) return 1;
  return 0;
}

/* ---- expressions ---- */

static void fail_expr(void *ctx, const char *msg) { cfail(ctx, "codegen cuda: %s", msg); }

/* NVRTC without headers has neither INFINITY nor NAN (bit patterns instead) nor INT64_C; the helpers named here
 * are defined by the prelude below. */
static const kg_cexpr_dialect cuda_dialect = {
    .thread_index = 1,
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
    .erf = "erff",
    .tanh = "tanhf",
    .log = "logf",
    .half_type = "unsigned short",
};

static const char *const lane_names = "xyzw";

/* Inside a vectorized loop (put_vector_loop), a load it fetched as a vector is that vector's current lane (an f16
 * or bf16 lane widened). */
static int put_vector_lane(void *ctx, kg_strbuf *b, const kg_irexpr *e) {
  const cgen *g = ctx;
  for (int i = 0; i < g->nvload; i++)
    if (g->vload[i] == e) {
      kg_dtype t = e->load.buf->dtype;
      if (t != KG_DT_F32) kg_strbuf_printf(b, "kg_ld_%s(", kg_dtype_names[t]);
      kg_strbuf_printf(b, "kg_vl%d_%d.%c", g->nvec, i, lane_names[g->lane]);
      if (t != KG_DT_F32) kg_strbuf_putc(b, ')');
      return 1;
    }
  return 0;
}

/* The vector type of w lanes (2 or 4) of buf's elements: float2/float4, or ushort2/ushort4 for f16/bf16. */
static const char *vector_type(const kg_buffer *buf, int64_t w) {
  if (buf->dtype == KG_DT_F32) return w == 4 ? "float4" : "float2";
  return w == 4 ? "ushort4" : "ushort2";
}

static void put_expr(cgen *g, const kg_irexpr *e) {
  kg_cexpr_printer p = {.b = &g->b, .d = &cuda_dialect, .ctx = g, .load = put_vector_lane, .fail = fail_expr};
  kg_cexpr_put_expr(&p, e);
}

static void put_store(cgen *g, const kg_buffer *buf, const kg_irexpr *index, const kg_irexpr *value) {
  kg_cexpr_printer p = {.b = &g->b, .d = &cuda_dialect, .ctx = g, .load = put_vector_lane, .fail = fail_expr};
  kg_cexpr_put_store(&p, buf, index, value);
}

static const char *elem_type(const kg_buffer *buf) { return kg_cexpr_elem_type(&cuda_dialect, buf->dtype); }

/* ---- analysis: launch shape, shared memory, limits ---- */

static void note_int(cgen *g, int64_t v) {
  if (v > (INT64_C(1) << 30) || v < -(INT64_C(1) << 30)) g->wide = 1;
}

static void scan_ints(cgen *g, const kg_irexpr *e) {
  if (e->kind == KG_IRE_INT && e->ty == KG_TY_INT) note_int(g, e->i);
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int nk = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < nk; i++) scan_ints(g, *kids[i]);
}

/* Decides the index type over the whole function: int when every size, extent and constant stays within 2^30
 * (so that sums of in-range terms cannot overflow int32), else long long. */
static void scan_wide(cgen *g, const kg_irstmt *s) {
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) scan_wide(g, s->seq.items[i]);
      break;
    case KG_IRS_FOR: {
      int64_t v;
      scan_ints(g, s->loop.extent);
      if (!kg_ir_is_const(s->loop.extent, &v) && g->f->nsize_vars) note_int(g, eval_at(g->f, s->loop.extent, g->f->size_hi));
      scan_wide(g, s->loop.body);
      break;
    }
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
      kg_thread_tag t = s->loop.tag;
      int dyn = !kg_ir_is_const(s->loop.extent, &ext);
      if (dyn) {
        /* a thread count is part of the compiled kernel (launch bounds, register arrays, reductions) */
        int k = first_size(g->f, s->loop.extent);
        if (kg_thread_tag_is_thread(t) && k >= 0) {
          cfail(g, "codegen cuda: stage %s: loop %s bound to %s follows the dynamic size %s", nm(s->loop.stage_name),
                nm(s->loop.loop_name), kg_thread_tag_names[t], g->f->size_vars[k]->name);
          return;
        }
        ext = k >= 0 ? eval_at(g->f, s->loop.extent, g->f->size_hi) : -1;
        if (kg_thread_tag_is_thread(t) || ext < 0) {
          cfail(g, "codegen cuda: stage %s: loop %s: the extent is not a constant%s", nm(s->loop.stage_name),
                nm(s->loop.loop_name), g->f->nsize_vars ? " nor a function of the dynamic sizes" : "");
          return;
        }
      }
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
        /* lowering's launch shape keeps the first KG_LAUNCH_MAX_DYN distinct ones, in this order */
        int seen = 0;
        for (int i = 0; dyn && i < g->L->ndyn[t]; i++) seen |= kg_bounds_expr_equal(g->L->dyn[t][i], s->loop.extent);
        if (dyn && !seen) {
          cfail(g, "codegen cuda: kernel %s: more than %d different dynamic extents bound to %s", g->kname,
                KG_LAUNCH_MAX_DYN, kg_thread_tag_names[t]);
          return;
        }
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
        KG_PUSH(&g->tmp, g->red, g->nred, g->capred, ((redinfo){s, s->allreduce.how, s->allreduce.scratch, 0, id}));
      }
      break;
    default: break;
  }
}

static int64_t block_threads(const cgen *g) {
  return g->launch[KG_THREAD_THREAD_X] * g->launch[KG_THREAD_THREAD_Y] * g->launch[KG_THREAD_THREAD_Z];
}

/* ---- statements ---- */

static void put_stmt(cgen *g, const kg_irstmt *s, int ind);

/* One tensor-core step (KG_IRS_MMA): the fragments packed two elements to a 32-bit register, low element first
 * (PTX: "elements (low to high)"), the accumulators loaded, kg_mma_m16n8k16, stored back. The warp must run it
 * whole: the kernel launches 32 threads along x, so that lane = threadIdx.x and no guard tells a warp's threads
 * apart (lower/verify.c checks the enclosing conditions). */
/* A warp-wide instruction of stage (what it does) needs lane = threadIdx.x: 1 when the kernel launches 32 threads
 * along x, else 0 with g failed. */
static int warp_lanes_ok(cgen *g, const char *stage, const char *what) {
  if (g->launch[KG_THREAD_THREAD_X] == 32) return 1;
  cfail(g, "codegen cuda: kernel %s: stage %s %s: its kernel must launch 32 threads along x (a warp per threadIdx.y "
        "and z), not %lld", g->kname, nm(stage), what, (long long)g->launch[KG_THREAD_THREAD_X]);
  return 0;
}

static void put_mma(cgen *g, const kg_irstmt *s, int ind) {
  kg_strbuf *b = &g->b;
  if (!warp_lanes_ok(g, s->mma.stage_name, "is tensorized")) return;
  const char *fa = s->mma.a->name, *fb = s->mma.b->name;
  const int tf32 = s->mma.dtype == KG_DT_F32;
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "{ /* %s: mma.m16n8k%d (%s operands, f32 accumulators) */\n", nm(s->mma.stage_name),
                   kg_mma_kstep(s->mma.dtype), tf32 ? "tf32" : kg_dtype_names[s->mma.dtype]);
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_puts(b, "unsigned kg_ra[4], kg_rb[2];\n");
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_puts(b, "float kg_rc[4];\n");
  /* a register holds two 16-bit elements, low first, or one f32 rounded to TF32 */
  for (int q = 0; q < 2; q++)
    for (int r = 0; r < (q ? 2 : 4); r++) {
      const char *f = q ? fb : fa;
      kg_strbuf_indent(b, ind + 1);
      const kg_irexpr *off = q ? s->mma.b_off : s->mma.a_off;
      if (tf32) {
        kg_strbuf_printf(b, "kg_r%c[%d] = kg_tf32(%s[", q ? 'b' : 'a', r, f);
        put_expr(g, off);
        kg_strbuf_printf(b, " + %d]);\n", r);
      } else {
        kg_strbuf_printf(b, "kg_r%c[%d] = (unsigned)%s[", q ? 'b' : 'a', r, f);
        put_expr(g, off);
        kg_strbuf_printf(b, " + %d] | ((unsigned)%s[", 2 * r, f);
        put_expr(g, off);
        kg_strbuf_printf(b, " + %d] << 16);\n", 2 * r + 1);
      }
    }
  for (int i = 0; i < 4; i++) {
    kg_strbuf_indent(b, ind + 1);
    kg_strbuf_printf(b, "kg_rc[%d] = %s[", i, s->mma.c->name);
    put_expr(g, s->mma.c_index[i]);
    kg_strbuf_puts(b, "];\n");
  }
  kg_strbuf_indent(b, ind + 1);
  if (tf32)
    kg_strbuf_puts(b, "kg_mma_m16n8k8_tf32(kg_rc, kg_ra, kg_rb);\n");
  else
    kg_strbuf_printf(b, "kg_mma_m16n8k16(kg_rc, kg_ra, kg_rb, %d);\n", s->mma.dtype == KG_DT_BF16);
  for (int i = 0; i < 4; i++) {
    kg_strbuf_indent(b, ind + 1);
    kg_strbuf_printf(b, "%s[", s->mma.c->name);
    put_expr(g, s->mma.c_index[i]);
    kg_strbuf_printf(b, "] = kg_rc[%d];\n", i);
  }
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "}\n");
}

/* ldmatrix (KG_IRS_LDMATRIX): the registers kg_ldmatrix fills, split into the fragment's 16-bit elements, low first
 * (put_mma packs them back: the compiler keeps the registers). Warp-wide as the step is. */
static void put_ldmatrix(cgen *g, const kg_irstmt *s, int ind) {
  kg_strbuf *b = &g->b;
  if (!warp_lanes_ok(g, s->ldm.stage_name, "loads its fragments with ldmatrix")) return;
  kg_strbuf_indent(b, ind);
  kg_strbuf_printf(b, "{ /* %s: ldmatrix x%d%s */\n", nm(s->ldm.stage_name), s->ldm.count, s->ldm.trans ? " trans" : "");
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_puts(b, "unsigned kg_rl[4];\n");
  kg_strbuf_indent(b, ind + 1);
  /* f32 elements (TF32's A) are pairs of 16-bit ones to the instruction, one to a register */
  const int wide = s->ldm.src->dtype == KG_DT_F32;
  kg_strbuf_printf(b, "kg_ldmatrix(kg_rl, %s&%s[", wide ? "(const unsigned short *)" : "", s->ldm.src->name);
  put_expr(g, s->ldm.src_index);
  kg_strbuf_printf(b, "], %d, %d);\n", s->ldm.count, s->ldm.trans);
  for (int i = 0; i < (wide ? 1 : 2) * s->ldm.count; i++) {
    kg_strbuf_indent(b, ind + 1);
    kg_strbuf_printf(b, "%s[", s->ldm.dst->name);
    put_expr(g, s->ldm.dst_off);
    if (wide)
      kg_strbuf_printf(b, " + %d] = __uint_as_float(kg_rl[%d]);\n", i, i);
    else
      kg_strbuf_printf(b, " + %d] = (unsigned short)(kg_rl[%d]%s);\n", i, i / 2, i % 2 ? " >> 16" : "");
  }
  kg_strbuf_indent(b, ind);
  kg_strbuf_puts(b, "}\n");
}

static void put_items(cgen *g, const kg_irstmt *s, int ind) {
  if (s->kind == KG_IRS_SEQ)
    for (int i = 0; i < s->seq.n; i++) put_stmt(g, s->seq.items[i], ind);
  else
    put_stmt(g, s, ind);
}

/* A single-writer guard (lower/writer.c): IF without else around one store, whose condition is a conjunction of
 * thread index == 0. Printed on the store's line, and inside a vectorized loop around its vector store. */
static int thread_zero(const kg_irexpr *e) {
  if (e->kind == KG_IRE_BINARY && e->bin.op == KG_OP_AND) return thread_zero(e->bin.a) && thread_zero(e->bin.b);
  int64_t c;
  return e->kind == KG_IRE_BINARY && e->bin.op == KG_OP_EQ && e->bin.a->kind == KG_IRE_THREAD &&
         kg_ir_is_const(e->bin.b, &c) && c == 0;
}

static int is_writer_if(const kg_irstmt *s) {
  return s->kind == KG_IRS_IF && !s->cond.otherwise && s->cond.then->kind == KG_IRS_STORE && thread_zero(s->cond.cond);
}

/* ---- vectorized loops ---- */

/* Is index = base + v with base a multiple of w? Over the affine form of the index (LETs substituted): v's
 * coefficient must be 1, and every other term, which must not move with v, and the constant multiples of w. */
static int vector_index(cgen *g, const kg_irexpr *index, const kg_irvar *v, int64_t w) {
  kg_affine l = kg_bounds_affine(&g->tmp, (kg_irexpr *)index, g->lets, g->nvars);
  if (!l.ok || l.c % w != 0) return 0;
  int64_t cv = 0;
  for (int i = 0; i < l.n; i++) {
    const kg_irexpr *atom = l.t[i].atom;
    if (atom->kind == KG_IRE_VAR && atom->var == v) cv += l.t[i].coef;
    else if (uses_var(g, atom, v, 0) || l.t[i].coef % w != 0) return 0;
  }
  return cv == 1;
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

/* A vectorized loop as float2/float4 accesses (ushort2/ushort4 for f16/bf16 buffers, each lane converted); 0
 * (nothing printed) when the loop does not qualify. */
static int put_vector_loop(cgen *g, const kg_irstmt *s, int ind) {
  kg_strbuf *b = &g->b;
  int64_t ext, w;
  if (!kg_ir_is_const(s->loop.extent, &ext) || !(ext == 2 || (ext % 4 == 0 && ext <= 16))) return 0;
  /* 8 or 16 lanes: float4 pieces, each aligned as a float4 */
  w = ext < 4 ? ext : 4;
  const kg_irvar *v = s->loop.var;
  const kg_irstmt *body = s->loop.body, *store = NULL, *writer = NULL;
  const kg_irstmt *const *items = &body;
  int nitems = 1;
  if (body->kind == KG_IRS_SEQ) items = (const kg_irstmt *const *)body->seq.items, nitems = body->seq.n;
  /* the LETs' values, so that dependence and alignment see through them (set again when printed) */
  for (int i = 0; i < nitems; i++)
    if (items[i]->kind == KG_IRS_LET && items[i]->let.var->id < g->nvars)
      g->lets[items[i]->let.var->id] = items[i]->let.value;
  for (int i = 0; i < nitems; i++) {
    const kg_irstmt *it = items[i];
    if (it->kind == KG_IRS_LET && !store) continue;
    if (it->kind == KG_IRS_COMMENT) continue;
    if (it->kind == KG_IRS_STORE && !store) {
      store = it;
      continue;
    }
    /* a guard around the store that every lane takes alike (a single writer, or a bound that does not move with
     * v, such as a cooperative fetch's thread guard): checked once, around the vector access */
    if (!store && it->kind == KG_IRS_IF && !it->cond.otherwise && it->cond.then->kind == KG_IRS_STORE &&
        (is_writer_if(it) || !uses_var(g, it->cond.cond, v, 0))) {
      writer = it;
      store = it->cond.then;
      continue;
    }
    return 0;
  }
  if (!store) return 0;
  const kg_irexpr *loads[16];
  int nl = 0;
  if (!vector_index(g, store->store.index, v, w) || !vector_value(g, store->store.value, v, w, loads, &nl, 16))
    return 0;
  const char *vt = vector_type(store->store.buf, w);
  for (int64_t piece = 0; piece < ext / w; piece++) {
    int id = ++g->nvec;
    kg_strbuf_indent(b, ind);
    if (ext == w)
      kg_strbuf_printf(b, "{ /* %s.%s: vectorized as %s */\n", nm(s->loop.stage_name), nm(s->loop.loop_name), vt);
    else
      kg_strbuf_printf(b, "{ /* %s.%s: vectorized as %lld %s, this one lanes %lld..%lld */\n", nm(s->loop.stage_name),
                       nm(s->loop.loop_name), (long long)(ext / w), vt, (long long)(piece * w),
                       (long long)(piece * w + w - 1));
    kg_strbuf_indent(b, ind + 1);
    kg_strbuf_printf(b, "const kg_idx %s = %lld;\n", v->name, (long long)(piece * w));
    for (int i = 0; i < nitems; i++)
      if (items[i]->kind == KG_IRS_LET) put_let(g, items[i], ind + 1);
    int in = ind + 1;
    if (writer) {
      kg_strbuf_indent(b, in);
      kg_strbuf_puts(b, "if (");
      put_expr(g, writer->cond.cond);
      kg_strbuf_puts(b, ") {\n");
      in++;
    }
    if (store->store.async && nl == 1 && store->store.value == loads[0] &&
        loads[0]->load.buf->dtype == store->store.buf->dtype) {
      /* a plain copy into shared memory: one asynchronous copy of the whole vector (cp.async) */
      kg_strbuf_indent(b, in);
      kg_strbuf_printf(b, "kg_cp_async%d(%s + (", (int)(kg_dtype_size[store->store.buf->dtype] * w),
                       store->store.buf->name);
      put_expr(g, store->store.index);
      kg_strbuf_printf(b, "), %s + (", loads[0]->load.buf->name);
      put_expr(g, loads[0]->load.index);
      kg_strbuf_puts(b, "));\n");
      if (writer) {
        kg_strbuf_indent(b, ind + 1);
        kg_strbuf_puts(b, "}\n");
      }
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "}\n");
      continue;
    }
    for (int i = 0; i < nl; i++) {
      kg_strbuf_indent(b, in);
      const char *lt = vector_type(loads[i]->load.buf, w);
      kg_strbuf_printf(b, "const %s kg_vl%d_%d = *(const %s *)(%s + (", lt, id, i, lt, loads[i]->load.buf->name);
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
      kg_dtype st = store->store.buf->dtype;
      if (st != KG_DT_F32) kg_strbuf_printf(b, "kg_st_%s(", kg_dtype_names[st]);
      put_expr(g, store->store.value);
      if (st != KG_DT_F32) kg_strbuf_putc(b, ')');
      kg_strbuf_puts(b, ";\n");
    }
    g->vload = NULL;
    g->nvload = 0;
    g->nvec = saved_vec;
    kg_strbuf_indent(b, in);
    kg_strbuf_printf(b, "*(%s *)(%s + (", vt, store->store.buf->name);
    put_expr(g, store->store.index);
    kg_strbuf_printf(b, ")) = kg_vs%d;\n", id);
    if (writer) {
      kg_strbuf_indent(b, ind + 1);
      kg_strbuf_puts(b, "}\n");
    }
    kg_strbuf_indent(b, ind);
    kg_strbuf_puts(b, "}\n");
  }
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

/* Fails when some thread of the block might not reach s (under a guarded thread loop or an if). Lowering refuses
 * the first (lower/launch.c); an IR not checked by it still fails here. */
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
    case KG_ALLREDUCE_UNPLANNED:
    case KG_ALLREDUCE_NONE: break;
    case KG_ALLREDUCE_WARP:
    case KG_ALLREDUCE_WARPS: {
      int64_t span = r->kind == KG_ALLREDUCE_WARP ? bx : 32;
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
      if (r->kind == KG_ALLREDUCE_WARP) break;
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
    case KG_ALLREDUCE_SHARED: {
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

/* Enters loop s (for check_uniform and the vector loops' dependence); the caller increments nbound. */
static void push_bound(cgen *g, const kg_irstmt *s, int guarded) {
  int64_t ext = 0;
  if (!kg_ir_is_const(s->loop.extent, &ext)) ext = eval_at(g->f, s->loop.extent, g->f->size_hi);
  g->bound[g->nbound].tag = s->loop.tag;
  g->bound[g->nbound].var = s->loop.var;
  g->bound[g->nbound].stage = s->loop.stage_name;
  g->bound[g->nbound].loop = s->loop.loop_name;
  g->bound[g->nbound].guarded = guarded;
  g->bound[g->nbound].ext = ext;
}

/* A loop bound to a block or thread tag: its variable is the hardware index. guard: the launch guard's condition
 * around it (lower/launch.c), or NULL when every launched thread runs it. */
static void put_bound_loop(cgen *g, const kg_irstmt *s, const kg_irexpr *guard, int ind) {
  kg_strbuf *b = &g->b;
  const char *hw = kg_thread_tag_names[s->loop.tag]; /* "threadIdx.x", ...: the tag's name is the hardware index */
  int64_t ext;
  push_bound(g, s, guard != NULL);
  kg_strbuf_indent(b, ind);
  if (guard && !kg_ir_is_const(guard->bin.b, &ext)) {
    kg_strbuf_printf(b, "if ((kg_idx)%s < (", hw);
    put_expr(g, guard->bin.b);
    kg_strbuf_printf(b, ")) { /* %s.%s */\n", nm(s->loop.stage_name), nm(s->loop.loop_name));
  } else if (guard) {
    kg_strbuf_printf(b, "if ((int)%s < %lld) { /* %s.%s */\n", hw, (long long)ext, nm(s->loop.stage_name),
                     nm(s->loop.loop_name));
  } else {
    kg_strbuf_printf(b, "{ /* %s.%s */\n", nm(s->loop.stage_name), nm(s->loop.loop_name));
  }
  kg_strbuf_indent(b, ind + 1);
  kg_strbuf_printf(b, "const kg_idx %s = %s;\n", s->loop.var->name, hw);
  g->nbound++;
  put_items(g, s->loop.body, ind + 1);
  g->nbound--;
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
      int dyn = !kg_ir_is_const(s->loop.extent, &ext);
      kg_thread_tag t = s->loop.tag;
      const char *v = s->loop.var->name;
      if (kg_thread_tag_is_thread(t) || kg_thread_tag_is_block(t)) {
        put_bound_loop(g, s, NULL, ind);
        break;
      }
      push_bound(g, s, 0);
      if (s->loop.kind == KG_LOOP_VECTORIZED && put_vector_loop(g, s, ind)) break;
      if (s->loop.kind == KG_LOOP_VECTORIZED || s->loop.kind == KG_LOOP_UNROLLED || t == KG_THREAD_VTHREAD) {
        kg_strbuf_indent(b, ind);
        kg_strbuf_puts(b, "#pragma unroll\n");
      }
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "for (kg_idx %s = 0; %s < ", v, v);
      if (dyn) put_expr(g, s->loop.extent);
      else kg_cexpr_put_int(&cuda_dialect, b, ext);
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
      if (kg_ir_is_launch_guard(s)) {
        put_bound_loop(g, s->cond.then, s->cond.cond, ind);
        break;
      }
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "if (");
      put_expr(g, s->cond.cond);
      if (is_writer_if(s)) { /* a single writer: on the store's line */
        kg_strbuf_puts(b, ") ");
        put_stmt(g, s->cond.then, 0);
        break;
      }
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
      kg_strbuf_indent(b, ind);
      /* a copy of one global float into shared memory, landing by the next wait; a 2-byte element is below
       * cp.async's smallest copy (4 bytes), and is stored at once, which the IR allows */
      if (s->store.async && s->store.buf->dtype == KG_DT_F32 && s->store.value->load.buf->dtype == KG_DT_F32) {
        kg_strbuf_printf(b, "kg_cp_async4(%s + (", s->store.buf->name);
        put_expr(g, s->store.index);
        kg_strbuf_printf(b, "), %s + (", s->store.value->load.buf->name);
        put_expr(g, s->store.value->load.index);
        kg_strbuf_puts(b, "));\n");
        break;
      }
      put_store(g, s->store.buf, s->store.index, s->store.value);
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
        kg_strbuf_printf(b, "__align__(16) %s %s[%lld];\n", elem_type(buf), buf->name,
                         (long long)(buf->size > 0 ? buf->size : 1));
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
    case KG_IRS_ASYNC_COMMIT:
      kg_strbuf_indent(b, ind);
      kg_strbuf_puts(b, "kg_cp_async_commit();\n");
      break;
    case KG_IRS_ASYNC_WAIT:
      kg_strbuf_indent(b, ind);
      kg_strbuf_printf(b, "kg_cp_async_wait(%d);\n", s->async_wait.pending);
      break;
    case KG_IRS_MMA: put_mma(g, s, ind); break;
    case KG_IRS_LDMATRIX: put_ldmatrix(g, s, ind); break;
    case KG_IRS_BFDOT:
      cfail(g, "codegen cuda: stage %s: bf16 pair dot products (bfdot) are the C target's", nm(s->bfdot.stage_name));
      return;
    case KG_IRS_PREFETCH: return; /* a hint of the C target's (lower/prefetch.c), never made for CUDA */
    case KG_IRS_TSTORE:
      cfail(g, "codegen cuda: stage %s: transposed tile stores are the C target's", nm(s->tstore.stage_name));
      return;
  }
}

/* ---- the translation unit ---- */

/* Follows the kg_idx typedef, inside a guard with it: several programs of the same index width can then be
 * pasted into one translation unit (an emulated header build puts each in a namespace of its own, which also
 * covers programs of different widths). */
/* The asynchronous copies of pipelined loops (lower/pipeline.c), printed only by programs that have them, under a
 * guard of their own (a translation unit may paste programs with and without them). */
static const char async_prelude[] =
    "#ifndef KG_CUDA_ASYNC\n"
    "#define KG_CUDA_ASYNC\n"
    "/* Copies of 4, 8 or 16 bytes from global into shared memory that land by the next kg_cp_async_wait covering\n"
    " * their group (a pipelined loop's ring): cp.async from sm_80 on, plain copies before (which land at once). */\n"
    "#if defined(KG_EMULATE)\n"
    "#define kg_cp_async4(d, s) kg_emu_cp_async((d), (s), 4, __LINE__)\n"
    "#define kg_cp_async8(d, s) kg_emu_cp_async((d), (s), 8, __LINE__)\n"
    "#define kg_cp_async16(d, s) kg_emu_cp_async((d), (s), 16, __LINE__)\n"
    "#define kg_cp_async_commit() kg_emu_cp_async_commit()\n"
    "#define kg_cp_async_wait(n) kg_emu_cp_async_wait(n)\n"
    "#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800\n"
    "__device__ __forceinline__ void kg_cp_async4(void *d, const void *s) {\n"
    "  asm volatile(\"cp.async.ca.shared.global [%0], [%1], 4;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(d)), \"l\"(s) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void kg_cp_async8(void *d, const void *s) {\n"
    "  asm volatile(\"cp.async.ca.shared.global [%0], [%1], 8;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(d)), \"l\"(s) : \"memory\");\n"
    "}\n"
    "__device__ __forceinline__ void kg_cp_async16(void *d, const void *s) {\n"
    "  asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\\n\" ::\"r\"((unsigned)__cvta_generic_to_shared(d)), \"l\"(s) : \"memory\");\n"
    "}\n"
    "#define kg_cp_async_commit() asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\")\n"
    "#define kg_cp_async_wait(n) asm volatile(\"cp.async.wait_group %0;\\n\" ::\"n\"(n) : \"memory\")\n"
    "#else\n"
    "__device__ __forceinline__ void kg_cp_async4(void *d, const void *s) { *(unsigned *)d = *(const unsigned *)s; }\n"
    "__device__ __forceinline__ void kg_cp_async8(void *d, const void *s) { *(float2 *)d = *(const float2 *)s; }\n"
    "__device__ __forceinline__ void kg_cp_async16(void *d, const void *s) { *(float4 *)d = *(const float4 *)s; }\n"
    "#define kg_cp_async_commit() ((void)0)\n"
    "#define kg_cp_async_wait(n) ((void)0)\n"
    "#endif\n"
    "#endif\n"
    "\n";

/* The tensor cores' step (KG_IRS_MMA), printed only by programs that have one, under a guard of its own. */
static const char mma_prelude[] =
    "#ifndef KG_CUDA_MMA\n"
    "#define KG_CUDA_MMA\n"
    "/* Element hi (0 low, 1 high) of a register of two f16 or bf16 values, widened. */\n"
    "__device__ __forceinline__ float kg_mma_widen(unsigned r, int hi, int bf16) {\n"
    "  unsigned short h = (unsigned short)(hi ? r >> 16 : r & 0xffffu);\n"
    "  return bf16 ? kg_ld_bf16(h) : kg_ld_f16(h);\n"
    "}\n"
    "/* mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: c (4 f32) += A (16 x 16) B (16 x 8), each lane holding the\n"
    " * fragments of the PTX ISA's layout (groupID g = lane / 4, thread in group t = lane % 4): a[r] the pairs at rows\n"
    " * g + 8 (r & 1), columns 2t + 8 (r >> 1) + {0, 1}; b[r] the pair at rows 2t + 8 r + {0, 1}, column g; c at rows\n"
    " * g + 8 (i >> 1), columns 2t + (i & 1). The tensor cores from sm_80 on; elsewhere (the emulator, older archs) the\n"
    " * same step in software, the operands exchanged by warp shuffles. */\n"
    "#if defined(KG_EMULATE)\n"
    "/* the emulator exchanges a step's registers (both steps: 4 of A, 2 of B) in one warp operation\n"
    " * (kg_emu_warp_publish): lane l's a[r] is KG_SHFL_A(a, r, l), its b[r] KG_SHFL_B(b, r, l); elsewhere warp\n"
    " * shuffles */\n"
    "#define KG_MMA_EXCHANGE(a, b) \\\n"
    "  const unsigned kg_mine[6] = {(a)[0], (a)[1], (a)[2], (a)[3], (b)[0], (b)[1]}; \\\n"
    "  kg_emu_warp_publish(kg_mine, __LINE__)\n"
    "#define KG_SHFL_A(a, r, l) (kg_emu_warp_peer(l)[r])\n"
    "#define KG_SHFL_B(b, r, l) (kg_emu_warp_peer(l)[4 + (r)])\n"
    "#define KG_MMA_DONE() __syncwarp()\n"
    "#else\n"
    "#define KG_MMA_EXCHANGE(a, b) ((void)0)\n"
    "#define KG_SHFL_A(a, r, l) __shfl_sync(0xffffffffu, (a)[r], (l))\n"
    "#define KG_SHFL_B(b, r, l) __shfl_sync(0xffffffffu, (b)[r], (l))\n"
    "#define KG_MMA_DONE() ((void)0)\n"
    "#endif\n"
    "/* one k of a software step: the lane's 2 x 2 accumulators (rows g, g + 8; columns 2t, 2t + 1) += x y */\n"
    "__device__ __forceinline__ void kg_mma_soft_k(float *c, float x0, float x1, float y0, float y1) {\n"
    "  c[0] += x0 * y0;\n"
    "  c[1] += x0 * y1;\n"
    "  c[2] += x1 * y0;\n"
    "  c[3] += x1 * y1;\n"
    "}\n"
    "__device__ __forceinline__ void kg_mma_soft(float *c, const unsigned *a, const unsigned *b, int bf16) {\n"
    "  const int lane = (int)(threadIdx.x & 31u), g = lane >> 2, t = lane & 3;\n"
    "  KG_MMA_EXCHANGE(a, b);\n"
    "  for (int k = 0; k < 16; k++) {\n"
    "    const int src = (k & 7) >> 1, hi = k & 1, up = k >> 3;\n"
    "    const unsigned r0 = KG_SHFL_A(a, 2 * up, g * 4 + src);\n"
    "    const unsigned r1 = KG_SHFL_A(a, 2 * up + 1, g * 4 + src);\n"
    "    const unsigned q0 = KG_SHFL_B(b, up, 2 * t * 4 + src);\n"
    "    const unsigned q1 = KG_SHFL_B(b, up, (2 * t + 1) * 4 + src);\n"
    "    kg_mma_soft_k(c, kg_mma_widen(r0, hi, bf16), kg_mma_widen(r1, hi, bf16), kg_mma_widen(q0, hi, bf16),\n"
    "                  kg_mma_widen(q1, hi, bf16));\n"
    "  }\n"
    "  KG_MMA_DONE();\n"
    "}\n"
    "__device__ __forceinline__ void kg_mma_m16n8k16(float *c, const unsigned *a, const unsigned *b, int bf16) {\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(KG_EMULATE)\n"
    "  if (bf16)\n"
    "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, \"\n"
    "                 \"{%8, %9}, {%0, %1, %2, %3};\\n\"\n"
    "                 : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
    "  else\n"
    "    asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, \"\n"
    "                 \"{%8, %9}, {%0, %1, %2, %3};\\n\"\n"
    "                 : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "                 : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
    "#else\n"
    "  kg_mma_soft(c, a, b, bf16);\n"
    "#endif\n"
    "}\n"
    "/* ldmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16 (n = 1, 2, 4): lane l gives the address of row l % 8 of\n"
    " * matrix l / 8 (8 elements, 16-byte aligned); r[i] gets of matrix i the elements at row g = lane / 4, columns\n"
    " * 2t, 2t + 1 (t = lane % 4; trans: rows 2t, 2t + 1, column g), low first. From sm_75 on; elsewhere (the emulator,\n"
    " * older archs) the same from the rows' addresses, exchanged across the warp; the emulator faults a row that is\n"
    " * not 16-byte aligned, as the GPU does. */\n"
    "#if defined(KG_EMULATE)\n"
    "#define KG_LDM_EXCHANGE(p) \\\n"
    "  kg_emu_check_align((p), 16, \"an ldmatrix row\", __LINE__); \\\n"
    "  kg_emu_warp_publish(&(p), __LINE__)\n"
    "#define KG_LDM_ROW(l) \\\n"
    "  (kg_emu_warp_peer(l) == kg_emu_poison_regs ? (const unsigned short *)kg_emu_poison_regs \\\n"
    "                                             : *(const unsigned short *const *)kg_emu_warp_peer(l))\n"
    "#else\n"
    "#define KG_LDM_EXCHANGE(p) ((void)0)\n"
    "#define KG_LDM_ROW(l) ((const unsigned short *)__shfl_sync(0xffffffffu, (unsigned long long)row, (l)))\n"
    "#endif\n"
    "__device__ __forceinline__ void kg_ldmatrix(unsigned *r, const unsigned short *row, int n, int trans) {\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750 && !defined(KG_EMULATE)\n"
    "  const unsigned s = (unsigned)__cvta_generic_to_shared(row);\n"
    "  if (n == 4 && !trans)\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n"
    "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(s));\n"
    "  else if (n == 4)\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\\n\"\n"
    "                 : \"=r\"(r[0]), \"=r\"(r[1]), \"=r\"(r[2]), \"=r\"(r[3]) : \"r\"(s));\n"
    "  else if (n == 2 && !trans)\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\\n\" : \"=r\"(r[0]), \"=r\"(r[1]) : \"r\"(s));\n"
    "  else if (n == 2)\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\\n\" : \"=r\"(r[0]), \"=r\"(r[1]) : \"r\"(s));\n"
    "  else if (!trans)\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\\n\" : \"=r\"(r[0]) : \"r\"(s));\n"
    "  else\n"
    "    asm volatile(\"ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\\n\" : \"=r\"(r[0]) : \"r\"(s));\n"
    "#else\n"
    "  const int lane = (int)(threadIdx.x & 31u), g = lane >> 2, t = lane & 3;\n"
    "  KG_LDM_EXCHANGE(row);\n"
    "  for (int i = 0; i < n; i++) {\n"
    "    if (!trans) {\n"
    "      const unsigned short *p = KG_LDM_ROW(8 * i + g);\n"
    "      r[i] = (unsigned)p[2 * t] | ((unsigned)p[2 * t + 1] << 16);\n"
    "    } else {\n"
    "      const unsigned short *p0 = KG_LDM_ROW(8 * i + 2 * t), *p1 = KG_LDM_ROW(8 * i + 2 * t + 1);\n"
    "      r[i] = (unsigned)p0[g] | ((unsigned)p1[g] << 16);\n"
    "    }\n"
    "  }\n"
    "  KG_MMA_DONE();\n"
    "#endif\n"
    "}\n"
    "/* f32 to TF32 as cvt.rna.tf32.f32: to nearest on 10 mantissa bits, ties away from zero, the 13 low bits zero;\n"
    " * infinities and NaNs kept (a NaN stays a NaN whatever its payload). */\n"
    "__device__ __forceinline__ unsigned kg_tf32(float x) {\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(KG_EMULATE)\n"
    "  unsigned r;\n"
    "  asm(\"cvt.rna.tf32.f32 %0, %1;\\n\" : \"=r\"(r) : \"f\"(x));\n"
    "  return r;\n"
    "#else\n"
    "  const unsigned u = __float_as_uint(x);\n"
    "  if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x007fffffu) ? 0x7fffffffu : u;\n"
    "  return (u + 0x1000u) & 0xffffe000u;\n"
    "#endif\n"
    "}\n"
    "/* mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: c (4 f32) += A (16 x 8) B (8 x 8), one element a register\n"
    " * (g = lane / 4, t = lane % 4): a[r] at row g + 8 (r & 1), column t + 4 (r >> 1); b[r] at row t + 4 r, column g;\n"
    " * c as m16n8k16's. Software elsewhere, the products of the TF32 values (exact in f32) added in k order. */\n"
    "__device__ __forceinline__ void kg_mma_m16n8k8_tf32(float *c, const unsigned *a, const unsigned *b) {\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(KG_EMULATE)\n"
    "  asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, \"\n"
    "               \"{%8, %9}, {%0, %1, %2, %3};\\n\"\n"
    "               : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3])\n"
    "               : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
    "#else\n"
    "  const int lane = (int)(threadIdx.x & 31u), g = lane >> 2, t = lane & 3;\n"
    "  KG_MMA_EXCHANGE(a, b);\n"
    "  for (int k = 0; k < 8; k++) {\n"
    "    const int src = k & 3, up = k >> 2;\n"
    "    kg_mma_soft_k(c, __uint_as_float(KG_SHFL_A(a, 2 * up, g * 4 + src)),\n"
    "                  __uint_as_float(KG_SHFL_A(a, 2 * up + 1, g * 4 + src)),\n"
    "                  __uint_as_float(KG_SHFL_B(b, up, 2 * t * 4 + src)),\n"
    "                  __uint_as_float(KG_SHFL_B(b, up, (2 * t + 1) * 4 + src)));\n"
    "  }\n"
    "  KG_MMA_DONE();\n"
    "#endif\n"
    "}\n"
    "#endif\n"
    "\n";

static int is_mma(const kg_irstmt *s) { return s->kind == KG_IRS_MMA || s->kind == KG_IRS_LDMATRIX; }

static int is_async(const kg_irstmt *s) {
  return (s->kind == KG_IRS_STORE && s->store.async) || s->kind == KG_IRS_ASYNC_COMMIT ||
         s->kind == KG_IRS_ASYNC_WAIT;
}

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
    "/* max and min as the C target's (codegen/c.c): NaN when either operand is NaN (all ones), -0 below +0, so\n"
    " * warp shuffles and shared-memory trees combine in any order to the same bits. The NaN test reads the bits,\n"
    " * which no fast-math option can assume away. */\n"
    "__device__ __forceinline__ unsigned kg_nan_mask(float a, float b) {\n"
    "  return ((__float_as_uint(a) & 0x7fffffffu) > 0x7f800000u || (__float_as_uint(b) & 0x7fffffffu) > 0x7f800000u)\n"
    "             ? 0xffffffffu : 0u;\n"
    "}\n"
    "__device__ __forceinline__ float kg_maxf(float a, float b) {\n"
    "  return __uint_as_float((__float_as_uint(a > b ? a : b) & __float_as_uint(b > a ? b : a)) | kg_nan_mask(a, b));\n"
    "}\n"
    "__device__ __forceinline__ float kg_minf(float a, float b) {\n"
    "  return __uint_as_float((__float_as_uint(a < b ? a : b) | __float_as_uint(b < a ? b : a)) | kg_nan_mask(a, b));\n"
    "}\n"
    "/* f16 and bf16 elements (stored as unsigned short): loads widen exactly, stores round to nearest even. The\n"
    " * hardware conversions where they exist (f16 on every arch kgen targets, bf16 from sm_80 on), else the bits. */\n"
    "__device__ __forceinline__ float kg_ld_bf16(unsigned short h) { return __uint_as_float((unsigned)h << 16); }\n"
    "__device__ __forceinline__ unsigned short kg_st_bf16(float f) {\n"
    "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(KG_EMULATE)\n"
    "  unsigned short h;\n"
    "  asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
    "  return h;\n"
    "#else\n"
    "  unsigned u = __float_as_uint(f);\n"
    "  unsigned r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;\n"
    "  return (unsigned short)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);\n"
    "#endif\n"
    "}\n"
    "__device__ __forceinline__ float kg_ld_f16(unsigned short h) {\n"
    "#if defined(__CUDA_ARCH__) && !defined(KG_EMULATE)\n"
    "  float f;\n"
    "  asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n"
    "  return f;\n"
    "#else\n"
    "  unsigned sign = (unsigned)(h & 0x8000u) << 16, em = h & 0x7fffu;\n"
    "  if (em >= 0x7c00u) return __uint_as_float(sign | 0x7f800000u | ((em & 0x3ffu) << 13));\n"
    "  if (em < 0x400u) return __uint_as_float(sign | __float_as_uint((float)em * 5.9604644775390625e-8f));\n"
    "  return __uint_as_float(sign | ((em << 13) + 0x38000000u));\n"
    "#endif\n"
    "}\n"
    "__device__ __forceinline__ unsigned short kg_st_f16(float f) {\n"
    "#if defined(__CUDA_ARCH__) && !defined(KG_EMULATE)\n"
    "  unsigned short h;\n"
    "  asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f));\n"
    "  return h;\n"
    "#else\n"
    "  unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;\n"
    "  if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));\n"
    "  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);\n"
    "  if (a < 0x38800000u) {\n"
    "    volatile float q = __uint_as_float(a) * 16777216.0f + 8388608.0f; /* rounds to an integer, ties to even */\n"
    "    return (unsigned short)(sign | (unsigned)(q - 8388608.0f));\n"
    "  }\n"
    "  return (unsigned short)(sign | (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13);\n"
    "#endif\n"
    "}\n"
    "__device__ __forceinline__ float kg_cvt_f32(float x) { return x; }\n"
    "__device__ __forceinline__ float kg_cvt_f16(float x) { return kg_ld_f16(kg_st_f16(x)); }\n"
    "__device__ __forceinline__ float kg_cvt_bf16(float x) { return kg_ld_bf16(kg_st_bf16(x)); }\n"
    "#endif\n"
    "\n";

static void put_params(cgen *g) {
  const kg_lowered *f = g->f;
  int n = 0;
  for (int i = 0; i < f->nsize_vars; i++, n++)
    kg_strbuf_printf(&g->b, "%slong long kg_size_%s", n ? ", " : "", f->size_vars[i]->name);
  for (int i = 0; i < f->nparams; i++, n++)
    kg_strbuf_printf(&g->b, "%s%s%s* __restrict__ %s", n ? ", " : "", f->params[i]->is_input ? "const " : "",
                     elem_type(f->params[i]), f->params[i]->name);
  for (int i = 0; i < f->ntemps; i++, n++)
    kg_strbuf_printf(&g->b, "%s%s* __restrict__ %s", n ? ", " : "", elem_type(f->temps[i]), f->temps[i]->name);
}

/* The dynamic sizes' names (f->size_vars order), in g's arena. */
static const char *const *size_names(cgen *g) {
  const char **names = KG_NEW_ARRAY(&g->tmp, const char *, g->f->nsize_vars + 1);
  for (int i = 0; i < g->f->nsize_vars; i++) names[i] = g->f->size_vars[i]->name;
  return names;
}

/* Launch limits of every CUDA device kgen targets (sm_70 on); a grid extent that follows dynamic sizes at their
 * hi, its largest. */
static int check_launch(cgen *g) {
  const int64_t *max_ext = kg_launch_max_ext;
  for (int t = KG_THREAD_BLOCK_X; t <= KG_THREAD_THREAD_Z; t++)
    if (g->launch[t] > max_ext[t]) {
      if (!g->failed) g->over_limit = 1;
      cfail(g, "codegen cuda: kernel %s: %s extent %lld exceeds the limit %lld%s", g->kname, kg_thread_tag_names[t],
            (long long)g->launch[t], (long long)max_ext[t],
            g->L->ndyn[t] ? " (with the dynamic sizes at the top of their ranges)" : "");
      return -1;
    }
  if (block_threads(g) > KG_LAUNCH_MAX_THREADS) {
    if (!g->failed) g->over_limit = 1;
    cfail(g, "codegen cuda: kernel %s: %lld threads per block exceed the limit %d", g->kname,
          (long long)block_threads(g), KG_LAUNCH_MAX_THREADS);
    return -1;
  }
  return 0;
}

static int64_t align16(int64_t bytes) { return (bytes + 15) / 16 * 16; }

/* grid_dyn (NULL without dynamic sizes) receives the kernel's dynamic grid extents. */
static int put_kernel(cgen *g, const kg_irstmt *item, int k, const char *prefix, kg_cuda_kernel *kern,
                      kg_cuda_extent *grid_dyn) {
  kg_strbuf *b = &g->b;
  char *name = kg_arena_printf(&g->tmp, "%s_k%d", prefix, k);
  g->kname = name;
  if (!g->f->launch || k >= g->f->nlaunch) {
    cfail(g, "codegen cuda: kernel %s: no launch shape (the function was not lowered by kg_lower)", name);
    return -1;
  }
  g->L = &g->f->launch[k];
  for (int t = 0; t < KG_THREAD_COUNT; t++) g->launch[t] = g->L->ext[t];
  g->nsh = g->nred = g->nbound = g->nif = 0;
  analyze(g, item);
  if (g->failed) return -1;
  if (!g->L->ok) {
    cfail(g, "codegen cuda: kernel %s: internal: the launch shape is unknown", name);
    return -1;
  }
  if (check_launch(g)) return -1;
  for (int i = 0; i < g->nred; i++)
    if (g->red[i].kind == KG_ALLREDUCE_UNPLANNED) {
      cfail(g, "codegen cuda: kernel %s: internal: a cross-thread reduction without a strategy", name);
      return -1;
    }
  int64_t total = 0;
  for (int i = 0; i < g->nsh; i++) {
    g->sh[i].offset = total;
    total += align16(g->sh[i].buf->size * (int64_t)kg_dtype_size[g->sh[i].buf->dtype]);
  }
  for (int i = 0; i < g->nred; i++) {
    g->red[i].offset = total;
    total += align16(g->red[i].elems * (int64_t)sizeof(float));
  }
  g->dynamic = total > KG_CUDA_STATIC_SHARED_MAX;
  int64_t threads = block_threads(g);
  const char *const *names = size_names(g);
  /* the grid extents that follow the sizes: the largest of the tag's extents (the kernel's once it is printed) */
  kg_cuda_extent gd[3] = {{NULL, 0}, {NULL, 0}, {NULL, 0}};
  for (int d = 0; d < 3; d++) {
    kg_thread_tag t = (kg_thread_tag)(KG_THREAD_BLOCK_X + d);
    if (!g->L->ndyn[t]) continue;
    xbuild x = {0};
    for (int i = 0; i < g->L->ndyn[t]; i++) {
      if (x_emit(g->f, g->L->dyn[t][i], &x) != 0) abort(); /* analyze evaluated each */
      if (i) x_push(&x, KG_CUDA_X_MAX, 0, 2);
    }
    if (g->L->ext_c[t] > 1) {
      x_push(&x, KG_CUDA_X_CONST, g->L->ext_c[t], 0);
      x_push(&x, KG_CUDA_X_MAX, 0, 2);
    }
    gd[d] = (kg_cuda_extent){x.code, x.n};
    if (x.maxdepth > KG_CUDA_X_STACK) {
      cfail(g, "codegen cuda: kernel %s: the %s extent is too complex an expression", name, kg_thread_tag_names[t]);
      goto fail;
    }
  }

  /* the root stage's launch_bounds: blocks per multiprocessor, which caps each thread's registers */
  if (g->L->min_blocks > 0)
    kg_strbuf_printf(b, "extern \"C\" __global__ void __launch_bounds__(%lld, %d) %s(", (long long)threads,
                     g->L->min_blocks, name);
  else
    kg_strbuf_printf(b, "extern \"C\" __global__ void __launch_bounds__(%lld) %s(", (long long)threads, name);
  put_params(g);
  kg_strbuf_puts(b, ") {\n");
  kg_strbuf_puts(b, "  /* grid (");
  for (int d = 0; d < 3; d++) {
    if (d) kg_strbuf_puts(b, ", ");
    if (gd[d].n) kg_cuda_extent_print(b, &gd[d], names);
    else kg_strbuf_printf(b, "%lld", (long long)g->launch[KG_THREAD_BLOCK_X + d]);
  }
  kg_strbuf_printf(b, "), block (%lld, %lld, %lld), %lld bytes of %s shared memory */\n",
                   (long long)g->launch[KG_THREAD_THREAD_X], (long long)g->launch[KG_THREAD_THREAD_Y],
                   (long long)g->launch[KG_THREAD_THREAD_Z], (long long)total, g->dynamic ? "dynamic" : "static");
  /* the sizes in the index type (they fit: the type was chosen with every size at its hi) */
  for (int i = 0; i < g->f->nsize_vars; i++)
    kg_strbuf_printf(b, "  const kg_idx %s = (kg_idx)kg_size_%s;\n  (void)%s;\n", names[i], names[i], names[i]);
  for (int i = 0; i < g->f->nparams; i++) kg_strbuf_printf(b, "  (void)%s;\n", g->f->params[i]->name);
  for (int i = 0; i < g->f->ntemps; i++) kg_strbuf_printf(b, "  (void)%s;\n", g->f->temps[i]->name);
  if (g->dynamic) kg_strbuf_puts(b, "  KG_DYNAMIC_SHARED(kg_dyn_smem);\n");
  for (int i = 0; i < g->nsh; i++) {
    const kg_buffer *buf = g->sh[i].buf;
    const char *et = elem_type(buf);
    if (g->dynamic && buf->dtype == KG_DT_F32)
      kg_strbuf_printf(b, "  float *const %s = kg_dyn_smem + %lld;\n", buf->name, (long long)(g->sh[i].offset / 4));
    else if (g->dynamic)
      kg_strbuf_printf(b, "  %s *const %s = (%s *)(kg_dyn_smem + %lld);\n", et, buf->name, et,
                       (long long)(g->sh[i].offset / 4));
    else
      kg_strbuf_printf(b, "  __shared__ __align__(16) %s %s[%lld];\n", et, buf->name, (long long)buf->size);
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
  if (g->failed) goto fail;
  kern->name = strdup(name);
  if (!kern->name) abort();
  for (int d = 0; d < 3; d++) {
    kern->grid[d] = g->launch[KG_THREAD_BLOCK_X + d];
    if (grid_dyn) grid_dyn[d] = gd[d];
    else free(gd[d].code); /* none: no dynamic size */
    kern->block[d] = g->launch[KG_THREAD_THREAD_X + d];
  }
  kern->static_shared = g->dynamic ? 0 : total;
  kern->dynamic_shared = g->dynamic ? total : 0;
  return 0;
fail:
  for (int d = 0; d < 3; d++) free(gd[d].code);
  return -1;
}

void kg_cuda_program_free(kg_cuda_program *p) {
  if (!p) return;
  free(p->source);
  for (int i = 0; i < p->nkernels; i++) {
    free((char *)p->kernels[i].name);
    for (int d = 0; p->grid_dyn && d < 3; d++) free(p->grid_dyn[i][d].code);
  }
  free(p->kernels);
  free(p->grid_dyn);
  free(p->temp_elems);
  for (int i = 0; p->temp_dyn && i < p->ntemps; i++) free(p->temp_dyn[i].code);
  free(p->temp_dyn);
  for (int i = 0; i < p->nsizes; i++) free(p->size_names[i]);
  free(p->size_names);
  free(p->size_lo);
  free(p->size_hi);
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
  for (int i = 0; i < f->nsize_vars; i++) note_int(&g, f->size_hi[i]);
  scan_wide(&g, f->body);

  int nk = f->body->kind == KG_IRS_SEQ ? f->body->seq.n : 1;
  out->kernels = calloc((size_t)nk + 1, sizeof *out->kernels);
  out->temp_elems = calloc((size_t)f->ntemps + 1, sizeof *out->temp_elems);
  if (f->nsize_vars) out->grid_dyn = calloc((size_t)nk + 1, sizeof *out->grid_dyn);
  if (!out->kernels || !out->temp_elems || (f->nsize_vars && !out->grid_dyn)) abort();
  kg_strbuf *b = &g.b;
  kg_strbuf_printf(b, "/* generated by kgen: %s (CUDA) */\n", f->name ? f->name : "?");
  kg_strbuf_printf(b, "#ifndef KG_CUDA_PRELUDE\n#define KG_CUDA_PRELUDE\ntypedef %s kg_idx;\n",
                   g.wide ? "long long" : "int");
  kg_strbuf_puts(b, prelude);
  if (kg_ir_contains(f->body, is_async)) kg_strbuf_puts(b, async_prelude);
  if (kg_ir_contains(f->body, is_mma)) kg_strbuf_puts(b, mma_prelude);
  for (int k = 0; k < nk && !g.failed; k++) {
    const kg_irstmt *item = f->body->kind == KG_IRS_SEQ ? f->body->seq.items[k] : f->body;
    if (put_kernel(&g, item, k, prefix, &out->kernels[k], out->grid_dyn ? out->grid_dyn[k] : NULL) == 0)
      out->nkernels++;
  }
  if (!g.failed) {
    kg_strbuf_puts(b, "#ifdef KG_EMULATE\n");
    for (int k = 0; k < out->nkernels; k++) {
      const char *kn = out->kernels[k].name;
      int nb = f->nparams + f->ntemps;
      kg_strbuf_printf(b, "extern \"C\" void %s__emu(float **a) { ", kn);
      /* the sizes' values follow the buffers */
      if (f->nsize_vars) kg_strbuf_printf(b, "const long long *kg_s = (const long long *)(const void *)a[%d]; ", nb);
      kg_strbuf_printf(b, "%s(", kn);
      for (int i = 0; i < f->nsize_vars; i++) kg_strbuf_printf(b, "%skg_s[%d]", i ? ", " : "", i);
      for (int i = 0; i < nb; i++) {
        const kg_buffer *buf = i < f->nparams ? f->params[i] : f->temps[i - f->nparams];
        if (buf->dtype == KG_DT_F32) kg_strbuf_printf(b, "%sa[%d]", i || f->nsize_vars ? ", " : "", i);
        else kg_strbuf_printf(b, "%s(%s *)(void *)a[%d]", i || f->nsize_vars ? ", " : "", elem_type(buf), i);
      }
      kg_strbuf_puts(b, "); }\n");
    }
    kg_strbuf_puts(b, "#endif\n");
  }
  /* global temporaries whose element count follows the sizes */
  out->temp_dyn = calloc((size_t)f->ntemps + 1, sizeof *out->temp_dyn);
  if (!out->temp_dyn) abort();
  out->ntemps = f->ntemps; /* what kg_cuda_program_free frees of temp_dyn */
  for (int i = 0; i < f->ntemps && !g.failed; i++)
    if (f->temps[i]->dyn_size && x_build(f, f->temps[i]->dyn_size, &out->temp_dyn[i]) != 0)
      cfail(&g, "codegen cuda: temporary %s: its size is not a function of the dynamic sizes", f->temps[i]->name);
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
  if (f->nsize_vars) {
    out->nsizes = f->nsize_vars;
    out->size_names = calloc((size_t)f->nsize_vars, sizeof *out->size_names);
    out->size_lo = calloc((size_t)f->nsize_vars, sizeof *out->size_lo);
    out->size_hi = calloc((size_t)f->nsize_vars, sizeof *out->size_hi);
    if (!out->size_names || !out->size_lo || !out->size_hi) abort();
    for (int i = 0; i < f->nsize_vars; i++) {
      out->size_names[i] = strdup(f->size_vars[i]->name);
      if (!out->size_names[i]) abort();
      out->size_lo[i] = f->size_lo[i];
      out->size_hi[i] = f->size_hi[i];
    }
  }
  return 0;
}
