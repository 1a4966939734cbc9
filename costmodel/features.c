/* Feature extraction: lower the schedule in a local arena, walk the IR once keeping the enclosing loops on a
 * stack, and record one entry per store statement (its arithmetic, the buffers it touches, its loop context);
 * per root nest ("kernel") the launch shape, shared/local footprints and barriers. A tensor instruction (a
 * tensor-core step, a block of bf16 dot products) is recorded as a store is, its arithmetic as the FMAs it does,
 * since it is most of such a kernel's work. Then the stores with the most work are encoded, followed by the
 * program-wide block.
 *
 * The footprint model is deliberately simple (Ansor-like): an access touches, over the enclosing loops, the
 * product of the extents of the loops whose variables its index uses (LET variables expanded), capped by the
 * buffer's size; its stride along a loop is the coefficient of that loop's variable in the index.
 *
 * Thread safety: everything lives in the caller's stack frame or the local arena; kg_lower and the IR helpers keep
 * no mutable static state. */
#include "features.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../codegen/front.h"
#include "../lower/ir.h"

/* Per-buffer fields (b = the buffer's rank among the store's buffers, by bytes touched). L: log-scaled count,
 * C: a small code kept as is. */
#define BUF_FIELDS(X, b)                                                                                    \
  X(B##b##_ACCESS, "buf" #b ".access", C) /* 0 absent, 1 read, 2 write, 3 read+write */                    \
  X(B##b##_SCOPE, "buf" #b ".scope", C)   /* 0 absent, 1 global, 2 shared, 3 local */                      \
  X(B##b##_BYTES, "buf" #b ".bytes", L)                                                                     \
  X(B##b##_UNIQUE, "buf" #b ".unique_bytes", L)                                                             \
  X(B##b##_LINES, "buf" #b ".cache_lines", L)                                                               \
  X(B##b##_REUSE, "buf" #b ".reuse", L)   /* accesses per unique element */                                 \
  X(B##b##_STRIDE, "buf" #b ".stride", L) /* |coefficient| of the innermost loop's variable */              \
  X(B##b##_REUSE_LEVEL, "buf" #b ".reuse_level", C) /* innermost loop not in the index, from inside (1..) */

#define STORE_FIELDS(X)                                                                                     \
  X(ITERS, "iters", L)                                                                                      \
  X(FLOAT_ADD, "float_add", L)                                                                              \
  X(FLOAT_MUL, "float_mul", L)                                                                              \
  X(FLOAT_DIV, "float_div", L)                                                                              \
  X(FLOAT_FMA, "float_fma", L)                                                                              \
  X(FLOAT_CMP, "float_cmp", L)                                                                              \
  X(FLOAT_MATH, "float_math", L)                                                                            \
  X(INT_ADD, "int_add", L)                                                                                  \
  X(INT_MUL, "int_mul", L)                                                                                  \
  X(INT_DIVMOD, "int_divmod", L)                                                                            \
  X(OPS_PER_ITER, "float_ops_per_iter", L)                                                                  \
  X(LOADS_PER_ITER, "loads_per_iter", L)                                                                    \
  X(IS_UPDATE, "is_update", C)                                                                              \
  X(INST_KIND, "inst_kind", C)   /* 0 scalar store, 1 tensor-core step (mma), 2 bf16 dot products */        \
  X(TENSOR_FMA, "tensor_fma", L) /* FMAs done by the tensor instruction (also in float_fma) */              \
  BUF_FIELDS(X, 0) BUF_FIELDS(X, 1) BUF_FIELDS(X, 2) BUF_FIELDS(X, 3)                                       \
  X(DEPTH, "loop_depth", L)                                                                                 \
  X(SERIAL_PROD, "serial_prod", L)                                                                          \
  X(PARALLEL_PROD, "parallel_prod", L)                                                                      \
  X(VEC_WIDTH, "vector_width", L)                                                                           \
  X(UNROLL_PROD, "unroll_prod", L)                                                                          \
  X(INNER_EXTENT, "inner_extent", L)                                                                        \
  X(INNER_KIND, "inner_kind", C) /* 0 no loop, else kg_loop_kind + 1 */                                     \
  X(BLOCK_X, "blockIdx.x", L)                                                                               \
  X(BLOCK_Y, "blockIdx.y", L)                                                                               \
  X(BLOCK_Z, "blockIdx.z", L)                                                                               \
  X(THREAD_X, "threadIdx.x", L)                                                                             \
  X(THREAD_Y, "threadIdx.y", L)                                                                             \
  X(THREAD_Z, "threadIdx.z", L)                                                                             \
  X(VTHREAD, "vthread", L)                                                                                  \
  X(KERNEL_THREADS, "kernel_threads_per_block", L)                                                          \
  X(KERNEL_BLOCKS, "kernel_blocks", L)                                                                      \
  X(GUARDED, "guarded", C)                                                                                  \
  X(KERNEL_BARRIERS, "kernel_barriers", L)                                                                  \
  X(INTENSITY, "arith_intensity", L) /* float ops per byte accessed */

#define GLOBAL_FIELDS(X)                                                                                    \
  X(G_KERNELS, "kernels", L)                                                                                \
  X(G_STORES, "stores", L)                                                                                  \
  X(G_FLOPS, "total_float_ops", L)                                                                          \
  X(G_TENSOR_FMA, "total_tensor_fma", L)                                                                    \
  X(G_BYTES, "total_bytes", L)                                                                              \
  X(G_GLOBAL_UNIQUE, "global_unique_bytes", L)                                                              \
  X(G_PARALLEL, "parallel_extent", L) /* C: largest product of parallel loops around a store */            \
  X(G_BLOCKS, "blocks", L)            /* CUDA: largest launch of a kernel */                                \
  X(G_THREADS, "threads_per_block", L)                                                                      \
  X(G_SHARED, "shared_bytes_per_block", L)                                                                  \
  X(G_LOCAL, "local_bytes", L)                                                                              \
  X(G_INLINED, "stages_inlined", L)                                                                         \
  X(G_ATTACHED, "stages_attached", L)                                                                       \
  X(G_TEMP_BYTES, "global_temp_bytes", L)                                                                   \
  X(G_BARRIERS, "barriers", L)                                                                              \
  X(G_ALLREDUCES, "allreduces", L)                                                                          \
  X(G_INTENSITY, "arith_intensity", L)

enum {
#define X(n, s, k) F_##n,
  STORE_FIELDS(X)
#undef X
  F_COUNT
};
enum {
#define X(n, s, k) F_##n,
  GLOBAL_FIELDS(X)
#undef X
  G_COUNT
};
_Static_assert(F_COUNT == KG_FEAT_PER_STORE, "per-store fields must fill KG_FEAT_PER_STORE");
_Static_assert(G_COUNT == KG_FEAT_GLOBAL, "global fields must fill KG_FEAT_GLOBAL");
enum { NBUF = 4, BUF_STRIDE = F_B1_ACCESS - F_B0_ACCESS };

#define KIND_L 1
#define KIND_C 0
static const unsigned char store_log[F_COUNT] = {
#define X(n, s, k) KIND_##k,
    STORE_FIELDS(X)
#undef X
};
static const unsigned char global_log[G_COUNT] = {
#define X(n, s, k) KIND_##k,
    GLOBAL_FIELDS(X)
#undef X
};

static const char *const names[KG_NFEATURES] = {
#define X0(n, s, k) "store0." s,
#define X1(n, s, k) "store1." s,
#define X2(n, s, k) "store2." s,
#define X3(n, s, k) "store3." s,
#define XG(n, s, k) "global." s,
    STORE_FIELDS(X0) STORE_FIELDS(X1) STORE_FIELDS(X2) STORE_FIELDS(X3) GLOBAL_FIELDS(XG)
#undef X0
#undef X1
#undef X2
#undef X3
#undef XG
};
_Static_assert(KG_FEAT_STORES == 4, "names[] spells out four stores");

const char *kg_feature_name(int i) { return i >= 0 && i < KG_NFEATURES ? names[i] : "?"; }

/* ---- the walk ---- */

enum { CACHE_LINE_BYTES = 64, MAX_MASK_BIT = 63, COEF_BUDGET = 4096 };

/* bytes of an element of b in memory: its dtype's (lowering's own scratch is f32) */
static double elem_bytes(const kg_buffer *b) {
  return (unsigned)b->dtype < KG_DT_COUNT ? kg_dtype_size[b->dtype] : 4;
}

typedef struct loopent {
  int var;
  double extent;
  kg_loop_kind kind;
  kg_thread_tag tag;
} loopent;

typedef struct kernel {
  double tag_ext[KG_THREAD_COUNT]; /* largest extent bound to each tag */
  double shared_bytes, local_bytes, barriers, parallel;
} kernel;

/* one access of a store (the stored location or a load), merged per buffer */
typedef struct access {
  const kg_buffer *buf;
  double reads, writes; /* elements per iteration */
  double unique;        /* elements touched over the enclosing loops */
  double lines;
  double stride;        /* |coefficient| of the innermost loop's variable */
  int reuse_level;
} access;

typedef struct srec {
  double raw[F_COUNT]; /* before scaling; buffer fields filled in order */
  double work;
  int kernel;
  int order;
} srec;

typedef struct walker {
  kg_arena *a;
  const kg_lowered *f;
  loopent *loops;
  int nloops, caploops;
  int *loopdepth;      /* by var id: depth of its loop while inside it, -1 otherwise */
  uint64_t *letmask;   /* by var id: the loop depths a LET's value uses */
  kg_irexpr **letval;  /* by var id */
  int nvars;
  int guards;
  kernel *kernels;
  int nkernels, cur;
  srec *stores;
  int nstores, capstores;
  double allreduces, barriers;
} walker;

static int var_ok(const walker *w, const kg_irvar *v) { return v && v->id >= 0 && v->id < w->nvars; }

static uint64_t depth_bit(int d) { return 1ull << (d < MAX_MASK_BIT ? d : MAX_MASK_BIT); }

/* The loop depths (bits) an INT expression depends on, LETs expanded through their recorded masks. */
static uint64_t expr_mask(const walker *w, const kg_irexpr *e) {
  switch (e->kind) {
    case KG_IRE_VAR:
      if (!var_ok(w, e->var)) return 0;
      if (w->loopdepth[e->var->id] >= 0) return depth_bit(w->loopdepth[e->var->id]);
      return w->letmask[e->var->id];
    default: {
      uint64_t m = 0;
      kg_irexpr **kids[KG_IR_MAX_CHILDREN];
      int nk = kg_ir_children((kg_irexpr *)e, kids);
      for (int i = 0; i < nk; i++) m |= expr_mask(w, *kids[i]);
      return m;
    }
  }
}

/* d(index)/d(var): the coefficient of loop variable var in e, LETs expanded; floor division scales it down,
 * a product of two variable terms counts as its first factor's. *budget bounds the expansion. */
static double coef(const walker *w, const kg_irexpr *e, int var, int *budget) {
  if (--*budget < 0) return 0;
  switch (e->kind) {
    case KG_IRE_VAR:
      if (!var_ok(w, e->var)) return 0;
      if (e->var->id == var) return 1;
      if (w->loopdepth[e->var->id] < 0 && w->letval[e->var->id]) return coef(w, w->letval[e->var->id], var, budget);
      return 0;
    case KG_IRE_BINARY: {
      double ca = coef(w, e->bin.a, var, budget), cb = coef(w, e->bin.b, var, budget);
      int64_t k;
      switch (e->bin.op) {
        case KG_OP_ADD: return ca + cb;
        case KG_OP_SUB: return ca - cb;
        case KG_OP_MUL:
          if (kg_ir_is_const(e->bin.b, &k)) return ca * (double)k;
          if (kg_ir_is_const(e->bin.a, &k)) return cb * (double)k;
          return ca != 0 ? ca : cb;
        case KG_OP_DIV: return kg_ir_is_const(e->bin.b, &k) && k != 0 ? ca / (double)k : ca;
        case KG_OP_MOD: /* a multiple of the modulus vanishes */
          return kg_ir_is_const(e->bin.b, &k) && k != 0 && fmod(ca, (double)k) == 0 ? 0 : ca;
        default: return 0;
      }
    }
    case KG_IRE_SELECT: return coef(w, e->sel.a, var, budget);
    default: return 0;
  }
}

/* ---- arithmetic counts ---- */

typedef struct counts {
  double add, mul, div, fma, cmp, math, iadd, imul, idiv, loads;
} counts;

static int is_f32_mul(const kg_irexpr *e) {
  return e->kind == KG_IRE_BINARY && e->ty == KG_TY_F32 && e->bin.op == KG_OP_MUL;
}

static void count_ops(const kg_irexpr *e, counts *c) {
  switch (e->kind) {
    case KG_IRE_LOAD:
      c->loads++;
      count_ops(e->load.index, c);
      return;
    case KG_IRE_BINARY: {
      int f = e->bin.a->ty == KG_TY_F32 || e->bin.b->ty == KG_TY_F32;
      switch (e->bin.op) {
        case KG_OP_ADD:
        case KG_OP_SUB:
          if (!f) c->iadd++;
          else {
            c->add++;
            c->fma += is_f32_mul(e->bin.a) || is_f32_mul(e->bin.b);
          }
          break;
        case KG_OP_MUL: *(f ? &c->mul : &c->imul) += 1; break;
        case KG_OP_DIV:
        case KG_OP_MOD: *(f ? &c->div : &c->idiv) += 1; break;
        case KG_OP_AND:
        case KG_OP_OR: break;
        default: *(f ? &c->cmp : &c->iadd) += 1; break; /* comparisons */
      }
      count_ops(e->bin.a, c);
      count_ops(e->bin.b, c);
      return;
    }
    case KG_IRE_UNARY:
      if (e->bin.op == KG_OP_NEG) *(e->ty == KG_TY_F32 ? &c->add : &c->iadd) += 1;
      count_ops(e->bin.a, c);
      return;
    case KG_IRE_CAST: count_ops(e->bin.a, c); return;
    case KG_IRE_CALL:
      if (e->call.fn == KG_FN_MAX || e->call.fn == KG_FN_MIN || e->call.fn == KG_FN_ABS) c->cmp++;
      else c->math++;
      for (int i = 0; i < e->call.n && i < 3; i++) count_ops(e->call.args[i], c);
      return;
    case KG_IRE_SELECT:
      *(e->ty == KG_TY_F32 ? &c->cmp : &c->iadd) += 1;
      count_ops(e->sel.c, c);
      count_ops(e->sel.a, c);
      count_ops(e->sel.b, c);
      return;
    default: return;
  }
}

/* ---- accesses ---- */

typedef struct span {
  double stride, extent;
} span;

static int cmp_span(const void *pa, const void *pb) {
  const span *a = pa, *b = pb;
  return (a->stride > b->stride) - (a->stride < b->stride);
}

/* Cache lines an access touches (line_elems elements a line): the loops with the smallest strides, merged while
 * each continues the run of the ones before it, give contiguous runs; other loops pick runs. A smallest stride
 * above one spreads the elements over lines. */
static double cache_lines(span *sp, int n, double unique, double line_elems) {
  if (n == 0) return 1;
  qsort(sp, (size_t)n, sizeof *sp, cmp_span);
  if (sp[0].stride > 1) {
    double per_line = sp[0].stride < line_elems ? line_elems / sp[0].stride : 1;
    return ceil(unique / per_line);
  }
  double run = 1;
  for (int i = 0; i < n && sp[i].stride <= run; i++) run += sp[i].stride * (sp[i].extent - 1);
  if (run > unique) run = unique;
  return ceil(unique / run) * ceil(run / line_elems);
}

/* The elements one execution of a tensor instruction touches of an operand from its index on: up to two runs of
 * extent elements at a stride (0: unknown, left out of the cache lines). disjoint: none of them is an element the
 * instruction's earlier accesses of the buffer touch (the ISA's four accumulators of an mma lane partition the
 * tile), so the footprints add up instead of overlapping as a scalar store's accesses of one buffer do. */
typedef struct block {
  int n, disjoint;
  span run[2];
} block;

/* Adds an access of buf at index (read or write) to acc[0..*n), merging accesses of one buffer. blk: the elements
 * each execution touches from index on (NULL: the one element; a NULL index: no loop moves the block). */
static void add_access(const walker *w, access *acc, int *n, const kg_buffer *buf, const kg_irexpr *index,
                       int write, const block *blk) {
  int i = 0;
  while (i < *n && acc[i].buf != buf) i++;
  if (i == *n) {
    memset(&acc[i], 0, sizeof acc[i]);
    acc[i].buf = buf;
    (*n)++;
  }
  access *x = &acc[i];
  int first = x->reads + x->writes == 0;
  double elems = 1;
  for (int r = 0; blk && r < blk->n; r++) elems *= blk->run[r].extent;
  if (write) x->writes += elems;
  else x->reads += elems;

  uint64_t m = index ? expr_mask(w, index) : 0;
  double unique = elems;
  int nused = 0;
  span *sp = KG_NEW_ARRAY(w->a, span, w->nloops + 3);
  for (int d = 0; d < w->nloops; d++) {
    if (!(m & depth_bit(d))) continue;
    const loopent *l = &w->loops[d];
    unique *= l->extent;
    int budget = COEF_BUDGET;
    double c = fabs(coef(w, index, l->var, &budget));
    if (c > 0) sp[nused++] = (span){c, l->extent};
  }
  for (int r = 0; blk && r < blk->n; r++)
    if (blk->run[r].stride > 0 && blk->run[r].extent > 1) sp[nused++] = blk->run[r];
  double size = buf->size > 0 ? (double)buf->size : 1;
  if (unique > size) unique = size;
  double lines = cache_lines(sp, nused, unique, CACHE_LINE_BYTES / elem_bytes(buf));
  if (blk && blk->disjoint) {
    x->unique = fmin(x->unique + unique, size);
    x->lines += lines;
  } else if (unique > x->unique) {
    x->unique = unique;
    x->lines = lines;
  }
  /* the stored location describes a read-modify-write buffer; otherwise the first access does */
  if (first || write) {
    int budget = COEF_BUDGET;
    x->stride = w->nloops && index ? fabs(coef(w, index, w->loops[w->nloops - 1].var, &budget)) : 0;
    x->reuse_level = 0;
    for (int d = w->nloops - 1; d >= 0; d--)
      if (!(m & depth_bit(d))) {
        x->reuse_level = w->nloops - d;
        break;
      }
  }
}

static void collect_loads(const walker *w, const kg_irexpr *e, access *acc, int *n) {
  if (e->kind == KG_IRE_LOAD) { /* not into the index: address arithmetic */
    if (e->load.buf) add_access(w, acc, n, e->load.buf, e->load.index, 0, NULL);
    return;
  }
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int nk = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < nk; i++) collect_loads(w, *kids[i], acc, n);
}

static int reads_buffer(const kg_irexpr *e, const kg_buffer *b) {
  if (e->kind == KG_IRE_LOAD) return e->load.buf == b; /* not into the index, as collect_loads */
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int nk = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < nk; i++)
    if (reads_buffer(*kids[i], b)) return 1;
  return 0;
}

static double access_bytes(const access *x, double iters) {
  return (x->reads + x->writes) * iters * elem_bytes(x->buf);
}

/* qsort: most bytes first, then by buffer id (deterministic) */
static int cmp_access(const void *pa, const void *pb) {
  const access *a = pa, *b = pb;
  /* same iterations within one store */
  double ba = (a->reads + a->writes) * elem_bytes(a->buf), bb = (b->reads + b->writes) * elem_bytes(b->buf);
  if (ba != bb) return ba > bb ? -1 : 1;
  if (a->unique != b->unique) return a->unique > b->unique ? -1 : 1;
  return (a->buf->id > b->buf->id) - (a->buf->id < b->buf->id);
}

static int count_loads(const kg_irexpr *e) {
  counts c = {0};
  count_ops(e, &c);
  return (int)c.loads;
}

/* The loops around a statement: the iterations (every thread's), the products of the loops of each kind (0 when
 * there is none, so "no vector loop" differs from width 1) and the extent bound to each tag. A loop bound to a
 * block or thread index that an enclosing loop binds too (a shared stage's cooperative copy inside its consumer's
 * thread loops) runs on the same threads: the innermost binding counts, once. */
typedef struct context {
  double iters, kind_prod[KG_LOOP_BOUND + 1], tag_ext[KG_THREAD_COUNT];
} context;

static context loop_context(const walker *w) {
  context cx;
  memset(&cx, 0, sizeof cx);
  cx.iters = 1;
  for (int d = 0; d < w->nloops; d++) {
    const loopent *l = &w->loops[d];
    int hw = l->tag != KG_THREAD_NONE && l->tag != KG_THREAD_VTHREAD && l->tag < KG_THREAD_COUNT;
    if (!hw) cx.iters *= l->extent;
    if (l->kind <= KG_LOOP_BOUND)
      cx.kind_prod[l->kind] = (cx.kind_prod[l->kind] ? cx.kind_prod[l->kind] : 1) * l->extent;
    if (l->tag == KG_THREAD_VTHREAD) cx.tag_ext[l->tag] = (cx.tag_ext[l->tag] ? cx.tag_ext[l->tag] : 1) * l->extent;
    else if (hw) cx.tag_ext[l->tag] = l->extent;
  }
  for (int t = KG_THREAD_NONE + 1; t < KG_THREAD_COUNT; t++)
    if (t != KG_THREAD_VTHREAD && cx.tag_ext[t] > 0) cx.iters *= cx.tag_ext[t];
  return cx;
}

/* The arithmetic fields from the counts of one execution, over iters executions. */
static void put_counts(double *f, const counts *c, double iters) {
  f[F_ITERS] = iters;
  f[F_FLOAT_ADD] = (c->add * iters);
  f[F_FLOAT_MUL] = (c->mul * iters);
  f[F_FLOAT_DIV] = (c->div * iters);
  f[F_FLOAT_FMA] = (c->fma * iters);
  f[F_FLOAT_CMP] = (c->cmp * iters);
  f[F_FLOAT_MATH] = (c->math * iters);
  f[F_INT_ADD] = (c->iadd * iters);
  f[F_INT_MUL] = (c->imul * iters);
  f[F_INT_DIVMOD] = (c->idiv * iters);
  f[F_OPS_PER_ITER] = c->add + c->mul + c->div + c->cmp + c->math;
  f[F_LOADS_PER_ITER] = c->loads;
}

/* Completes r, whose arithmetic fields are set, with its accesses (ranked by bytes) and loop context, and records
 * it. */
static void record(walker *w, srec *r, const context *cx, access *acc, int nacc) {
  double *f = r->raw, iters = cx->iters, fops = f[F_OPS_PER_ITER];
  qsort(acc, (size_t)nacc, sizeof *acc, cmp_access);
  double bytes = 0;
  for (int i = 0; i < nacc; i++) bytes += access_bytes(&acc[i], iters);
  for (int i = 0; i < nacc && i < NBUF; i++) {
    const access *x = &acc[i];
    double *b = f + F_B0_ACCESS + i * BUF_STRIDE;
    b[F_B0_ACCESS - F_B0_ACCESS] = ((x->reads ? 1 : 0) + (x->writes ? 2 : 0));
    b[F_B0_SCOPE - F_B0_ACCESS] = x->buf->scope + 1;
    b[F_B0_BYTES - F_B0_ACCESS] = access_bytes(x, iters);
    b[F_B0_UNIQUE - F_B0_ACCESS] = (x->unique * elem_bytes(x->buf));
    b[F_B0_LINES - F_B0_ACCESS] = x->lines;
    b[F_B0_REUSE - F_B0_ACCESS] = ((x->reads + x->writes) * iters / x->unique);
    b[F_B0_STRIDE - F_B0_ACCESS] = x->stride;
    b[F_B0_REUSE_LEVEL - F_B0_ACCESS] = x->reuse_level;
  }
  f[F_DEPTH] = w->nloops;
  f[F_SERIAL_PROD] = cx->kind_prod[KG_LOOP_SERIAL];
  f[F_PARALLEL_PROD] = cx->kind_prod[KG_LOOP_PARALLEL];
  f[F_VEC_WIDTH] = cx->kind_prod[KG_LOOP_VECTORIZED];
  f[F_UNROLL_PROD] = cx->kind_prod[KG_LOOP_UNROLLED];
  if (w->nloops) {
    f[F_INNER_EXTENT] = w->loops[w->nloops - 1].extent;
    f[F_INNER_KIND] = w->loops[w->nloops - 1].kind + 1;
  }
  static const int tag_field[KG_THREAD_COUNT] = {
      [KG_THREAD_BLOCK_X] = F_BLOCK_X,   [KG_THREAD_BLOCK_Y] = F_BLOCK_Y,   [KG_THREAD_BLOCK_Z] = F_BLOCK_Z,
      [KG_THREAD_THREAD_X] = F_THREAD_X, [KG_THREAD_THREAD_Y] = F_THREAD_Y, [KG_THREAD_THREAD_Z] = F_THREAD_Z,
      [KG_THREAD_VTHREAD] = F_VTHREAD};
  for (int t = KG_THREAD_NONE + 1; t < KG_THREAD_COUNT; t++) f[tag_field[t]] = cx->tag_ext[t];
  f[F_GUARDED] = w->guards > 0;
  f[F_INTENSITY] = (bytes > 0 ? fops * iters / bytes : 0);
  r->work = iters * (fops + 1) + bytes;
  r->kernel = w->cur;
  r->order = w->nstores;
  KG_PUSH(w->a, w->stores, w->nstores, w->capstores, *r);
  kernel *k = &w->kernels[w->cur];
  if (cx->kind_prod[KG_LOOP_PARALLEL] > k->parallel) k->parallel = cx->kind_prod[KG_LOOP_PARALLEL];
}

static void visit_store(walker *w, const kg_irstmt *st) {
  srec r;
  memset(&r, 0, sizeof r);
  context cx = loop_context(w);
  counts c = {0};
  count_ops(st->store.value, &c);
  count_ops(st->store.index, &c);
  put_counts(r.raw, &c, cx.iters);
  r.raw[F_IS_UPDATE] = st->store.buf && reads_buffer(st->store.value, st->store.buf);
  int nacc = 0;
  access *acc = KG_NEW_ARRAY(w->a, access, count_loads(st->store.value) + 1);
  if (st->store.buf) add_access(w, acc, &nacc, st->store.buf, st->store.index, 1, NULL);
  collect_loads(w, st->store.value, acc, &nacc);
  record(w, &r, &cx, acc, nacc);
}

/* ldmatrix: the fragment's registers copied from shared memory, recorded as the copy of a row's block (8 elements a
 * matrix) it is: one store into the fragment, one read of the source's block at the lane's row. */
static void visit_ldmatrix(walker *w, const kg_irstmt *st) {
  srec r;
  memset(&r, 0, sizeof r);
  context cx = loop_context(w);
  counts c = {0};
  count_ops(st->ldm.src_index, &c);
  c.loads += 1;
  put_counts(r.raw, &c, cx.iters);
  access acc[2];
  int nacc = 0;
  block rows = {1, 0, {{1, 8.0 * st->ldm.count}}};
  add_access(w, acc, &nacc, st->ldm.dst, NULL, 1, NULL);
  add_access(w, acc, &nacc, st->ldm.src, st->ldm.src_index, 0, &rows);
  record(w, &r, &cx, acc, nacc);
}

/* A transposed tile store: an n x n copy, recorded as one store of its destination block (n columns of n
 * contiguous elements, dst_stride apart) and one read of its source block. */
static void visit_tstore(walker *w, const kg_irstmt *st) {
  srec r;
  memset(&r, 0, sizeof r);
  context cx = loop_context(w);
  counts c = {0};
  count_ops(st->tstore.dst_index, &c);
  const double n = st->tstore.n;
  c.loads += n * n;
  put_counts(r.raw, &c, cx.iters);
  access acc[2];
  int nacc = 0;
  block out = {2, 0, {{1, n}, {(double)st->tstore.dst_stride, n}}};
  block in = {2, 0, {{1, n}, {(double)st->tstore.src_ld, n}}};
  add_access(w, acc, &nacc, st->tstore.dst, st->tstore.dst_index, 1, &out);
  add_access(w, acc, &nacc, st->tstore.src, st->tstore.src_index, 0, &in);
  record(w, &r, &cx, acc, nacc);
}

/* a stride of a bf16 dot-product block: a constant or the dynamic sizes' expression at the measured sizes; 0 when
 * neither */
static double block_stride(const walker *w, const kg_irexpr *e) {
  int64_t v;
  if (!e || (!kg_ir_is_const(e, &v) && kg_ir_eval_sizes(w->f, e, &v))) return 0;
  return fabs((double)v);
}

/* A tensor instruction, recorded as an update of its accumulators: fma FMAs an execution (each an add and a
 * multiply, as a scalar update's a + b * c counts), its operands' blocks read, its accumulators read and
 * written. */
static void visit_tensor(walker *w, const kg_irstmt *st) {
  srec r;
  memset(&r, 0, sizeof r);
  context cx = loop_context(w);
  access acc[3];
  int nacc = 0;
  double fma;
  if (st->kind == KG_IRS_MMA) {
    /* a warp's m16n8kK step (kg_mma_kstep: 8 for TF32, else 16) that each of its 32 lanes reaches: per lane, a
     * 32nd of the step. The fragments are read whole, wherever the loops are. */
    double k = kg_mma_kstep(st->mma.dtype);
    fma = 16 * 8 * k / 32;
    const double per = st->mma.dtype == KG_DT_F32 ? 1 : 2; /* one step's fragments, wherever they start */
    block fa = {1, 0, {{1, 4 * per}}}, fb = {1, 0, {{1, 2 * per}}};
    add_access(w, acc, &nacc, st->mma.a, NULL, 0, &fa);
    add_access(w, acc, &nacc, st->mma.b, NULL, 0, &fb);
    for (int i = 0; i < 4; i++)
      add_access(w, acc, &nacc, st->mma.c, st->mma.c_index[i], 0, &(block){.disjoint = i > 0});
    for (int i = 0; i < 4; i++) add_access(w, acc, &nacc, st->mma.c, st->mma.c_index[i], 1, NULL);
  } else {
    double rows = (double)st->bfdot.rows, cols = (double)st->bfdot.cols, k = (double)st->bfdot.k;
    fma = rows * cols * k;
    block a = {2, 0, {{block_stride(w, st->bfdot.a_k), k}, {block_stride(w, st->bfdot.a_row), rows}}};
    double pairs = st->bfdot.b_pairs ? 2 : 1; /* stored in pairs: a row of 2 cols per pair of k */
    block b = {2, 0, {{1, pairs * cols}, {block_stride(w, st->bfdot.b_k), k / pairs}}};
    block c = {2, 0, {{1, cols}, {block_stride(w, st->bfdot.c_row), rows}}};
    add_access(w, acc, &nacc, st->bfdot.a, st->bfdot.a_index, 0, &a);
    add_access(w, acc, &nacc, st->bfdot.b, st->bfdot.b_index, 0, &b);
    add_access(w, acc, &nacc, st->bfdot.c, st->bfdot.c_index, 0, &c);
    add_access(w, acc, &nacc, st->bfdot.c, st->bfdot.c_index, 1, &c);
  }
  counts c = {.add = fma, .mul = fma, .fma = fma};
  for (int i = 0; i < nacc; i++) c.loads += acc[i].reads;
  put_counts(r.raw, &c, cx.iters);
  r.raw[F_IS_UPDATE] = 1;
  r.raw[F_INST_KIND] = st->kind == KG_IRS_MMA ? 1 : 2;
  r.raw[F_TENSOR_FMA] = fma * cx.iters;
  record(w, &r, &cx, acc, nacc);
}

static void walk(walker *w, const kg_irstmt *s) {
  if (!s) return;
  kernel *k = &w->kernels[w->cur];
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) walk(w, s->seq.items[i]);
      return;
    case KG_IRS_FOR: {
      int64_t e = 1;
      /* a dynamic kernel's extent is taken at the size it is measured at, so one model learns across sizes */
      if (!kg_ir_const_upper(s->loop.extent, &e) && kg_ir_eval_sizes(w->f, s->loop.extent, &e)) e = 1;
      if (e < 1) e = 1;
      loopent l = {var_ok(w, s->loop.var) ? s->loop.var->id : -1, (double)e, s->loop.kind, s->loop.tag};
      if (l.tag > KG_THREAD_NONE && l.tag < KG_THREAD_COUNT && l.extent > k->tag_ext[l.tag])
        k->tag_ext[l.tag] = l.extent;
      KG_PUSH(w->a, w->loops, w->nloops, w->caploops, l);
      if (l.var >= 0) w->loopdepth[l.var] = w->nloops - 1;
      walk(w, s->loop.body);
      if (l.var >= 0) w->loopdepth[l.var] = -1;
      w->nloops--;
      return;
    }
    case KG_IRS_IF:
      w->guards++;
      walk(w, s->cond.then);
      walk(w, s->cond.otherwise);
      w->guards--;
      return;
    case KG_IRS_STORE: visit_store(w, s); return;
    case KG_IRS_LET:
      if (var_ok(w, s->let.var) && s->let.value) {
        w->letmask[s->let.var->id] = expr_mask(w, s->let.value);
        w->letval[s->let.var->id] = s->let.value;
      }
      return;
    case KG_IRS_ALLOC:
      if (s->alloc.buf) {
        double bytes = (double)s->alloc.buf->size * elem_bytes(s->alloc.buf);
        if (s->alloc.buf->scope == KG_SCOPE_SHARED) k->shared_bytes += bytes;
        else if (s->alloc.buf->scope == KG_SCOPE_LOCAL) k->local_bytes += bytes;
      }
      walk(w, s->alloc.body);
      return;
    case KG_IRS_BARRIER:
      k->barriers++;
      w->barriers++;
      return;
    case KG_IRS_ALLREDUCE:
      k->barriers++; /* it synchronises the block as a barrier does */
      w->allreduces++;
      return;
    case KG_IRS_COMMENT:
    case KG_IRS_PREFETCH:
    case KG_IRS_ASYNC_COMMIT:
    case KG_IRS_ASYNC_WAIT: return;
    case KG_IRS_MMA:
    case KG_IRS_BFDOT: visit_tensor(w, s); return;
    case KG_IRS_LDMATRIX: visit_ldmatrix(w, s); return;
    case KG_IRS_TSTORE: visit_tstore(w, s); return;
  }
}

/* the launch's blocks (block) or threads per block of kernel k; 0 when it binds none */
static double kernel_prod(const kernel *k, int block) {
  double p = 0;
  for (int t = KG_THREAD_NONE + 1; t < KG_THREAD_COUNT; t++)
    if (k->tag_ext[t] > 0 &&
        (block ? kg_thread_tag_is_block((kg_thread_tag)t) : kg_thread_tag_is_thread((kg_thread_tag)t)))
      p = (p ? p : 1) * k->tag_ext[t];
  return p;
}

/* qsort: most work first, then program order */
static int cmp_store(const void *pa, const void *pb) {
  const srec *a = pa, *b = pb;
  if (a->work != b->work) return a->work > b->work ? -1 : 1;
  return (a->order > b->order) - (a->order < b->order);
}

static float scale(double x, int is_log) {
  if (isnan(x) || x < 0) x = 0;
  if (x > 1e30) x = 1e30; /* keeps float and log finite */
  return (float)(is_log ? log2(1 + x) : x);
}

int kg_features_extract(const kg_schedule *s, kg_target_kind target, float *out) {
  memset(out, 0, sizeof(float) * KG_NFEATURES);
  kg_front fr;
  kg_front_opts fo = {.target = target, .stop = KG_BUILD_LOWER, .sched = s};
  if (kg_front_build(s->prog, &fo, &fr) != 0) {
    kg_front_free(&fr);
    return -1;
  }
  kg_arena *a = &fr.arena;
  const kg_lowered *f = fr.ir;
  walker w;
  memset(&w, 0, sizeof w);
  w.a = a;
  w.f = f;
  w.nvars = f->n_vars;
  w.loopdepth = KG_NEW_ARRAY(a, int, w.nvars + 1);
  for (int i = 0; i < w.nvars; i++) w.loopdepth[i] = -1;
  w.letmask = KG_NEW_ARRAY(a, uint64_t, w.nvars + 1);
  w.letval = KG_NEW_ARRAY(a, kg_irexpr *, w.nvars + 1);
  int nk = f->body && f->body->kind == KG_IRS_SEQ ? f->body->seq.n : 1;
  w.nkernels = nk;
  w.kernels = KG_NEW_ARRAY(a, kernel, nk + 1);
  if (f->body && f->body->kind == KG_IRS_SEQ)
    for (w.cur = 0; w.cur < nk; w.cur++) walk(&w, f->body->seq.items[w.cur]);
  else
    walk(&w, f->body);

  float *g = out + KG_FEAT_STORES * KG_FEAT_PER_STORE;
  double graw[G_COUNT] = {0};
  graw[F_G_KERNELS] = nk;
  graw[F_G_STORES] = w.nstores;
  for (int i = 0; i < w.nstores; i++) {
    srec *r = &w.stores[i];
    const kernel *k = &w.kernels[r->kernel];
    r->raw[F_KERNEL_THREADS] = kernel_prod(k, 0);
    r->raw[F_KERNEL_BLOCKS] = kernel_prod(k, 1);
    r->raw[F_KERNEL_BARRIERS] = k->barriers;
    double bytes = 0;
    for (int b = 0; b < NBUF; b++) bytes += r->raw[F_B0_BYTES + b * BUF_STRIDE];
    graw[F_G_FLOPS] += r->raw[F_OPS_PER_ITER] * r->raw[F_ITERS];
    graw[F_G_TENSOR_FMA] += r->raw[F_TENSOR_FMA];
    graw[F_G_BYTES] += bytes;
    for (int b = 0; b < NBUF; b++)
      if (r->raw[F_B0_SCOPE + b * BUF_STRIDE] == KG_SCOPE_GLOBAL + 1)
        graw[F_G_GLOBAL_UNIQUE] += r->raw[F_B0_UNIQUE + b * BUF_STRIDE];
  }
  for (int i = 0; i < nk; i++) {
    const kernel *k = &w.kernels[i];
    double blocks = kernel_prod(k, 1), threads = kernel_prod(k, 0);
    if (target == KG_TARGET_C && k->parallel > graw[F_G_PARALLEL]) graw[F_G_PARALLEL] = k->parallel;
    if (target == KG_TARGET_CUDA && blocks > graw[F_G_BLOCKS]) graw[F_G_BLOCKS] = blocks;
    if (target == KG_TARGET_CUDA && threads > graw[F_G_THREADS]) graw[F_G_THREADS] = threads;
    if (k->shared_bytes > graw[F_G_SHARED]) graw[F_G_SHARED] = k->shared_bytes;
    if (k->local_bytes > graw[F_G_LOCAL]) graw[F_G_LOCAL] = k->local_bytes;
  }
  for (int i = 0; i < s->nstages; i++) {
    graw[F_G_INLINED] += s->stages[i]->attach == KG_ATTACH_INLINE;
    graw[F_G_ATTACHED] += s->stages[i]->attach == KG_ATTACH_AT;
  }
  for (int i = 0; i < f->ntemps; i++) graw[F_G_TEMP_BYTES] += (double)f->temps[i]->size * elem_bytes(f->temps[i]);
  graw[F_G_BARRIERS] = w.barriers;
  graw[F_G_ALLREDUCES] = w.allreduces;
  graw[F_G_INTENSITY] = graw[F_G_BYTES] > 0 ? graw[F_G_FLOPS] / graw[F_G_BYTES] : 0;
  for (int i = 0; i < G_COUNT; i++) g[i] = scale(graw[i], global_log[i]);

  qsort(w.stores, (size_t)w.nstores, sizeof *w.stores, cmp_store);
  for (int i = 0; i < w.nstores && i < KG_FEAT_STORES; i++)
    for (int j = 0; j < F_COUNT; j++) out[i * KG_FEAT_PER_STORE + j] = scale(w.stores[i].raw[j], store_log[j]);
  kg_front_free(&fr);
  return 0;
}
