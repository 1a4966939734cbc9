/* Lowering: a schedule to the loop-nest IR.
 *
 * Pass order (kg_lower): name the parameters and global temporaries; check the schedule against the target; then
 * one nest per root stage, in execution order. A nest (lower_stage) is built from its stage's leaves, outermost
 * first; at each loop the stages computed there are emitted first (region inferred by bounds.c, buffer allocated
 * around the loop's body), and the innermost body holds the root-axis LETs, the guard and the store. Reductions
 * get their init before the outermost reduction loop, inside copies of the spatial loops that follow it. On the C
 * target, tighten.c then turns the guards of perfect nests into tighter loop extents, and regacc.c turns reductions
 * into tiles into register accumulations (small local arrays), initfold.c folds their inits into them, recip.c
 * divides by reciprocals and unrollidx.c orders the indices under unrolled loops, so that the IR is the code the C
 * printer prints.
 * Unless NDEBUG, verify.c then checks the invariants the printers rely on.
 *
 * On the CUDA target: the loop variables of the enclosing threadIdx-bound loops are relaxed in the region of a
 * shared-scope stage (it is computed for every thread of the block, so its size and origin do not depend on the
 * thread index); a reduction loop bound to threadIdx is a cross-thread reduction (build_cross_thread: a per-thread
 * partial, KG_IRS_ALLREDUCE, one store); check_cuda_stage rejects bindings that have no meaning (a per-thread
 * stage binding threads, an attached stage binding blocks, a reduction across blocks). Guards are kept.
 *
 * Requires: a schedule produced by kg_schedule_new/kg_schedule_apply (iter trees consistent, attach points are
 * leaves of non-inlined consumers, every attached stage consumed only by its attach stage and by stages computed
 * inside it at the attach loop or deeper, which read the same region buffer: check_target refuses anything
 * else). */
#include <assert.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bounds.h"
#include "ir.h"


typedef struct region {
  kg_buffer *buf;
  int ndim;
  kg_irexpr *min[KG_MAX_DIMS];
  int64_t ext[KG_MAX_DIMS];
  int64_t store[KG_MAX_DIMS]; /* the storage extents: ext, the innermost lengthened by the stage's pad */
} region;

typedef struct lctx {
  const kg_schedule *s;
  const kg_program *p;
  kg_target_kind target;
  kg_arena *a;
  char *err;
  size_t errlen;
  int failed;
  kg_lowered *f;
  const char **names;
  int nnames, capnames;
  kg_buffer **tbuf;      /* by tensor id: parameters and global temporaries */
  kg_sstage **tstage;    /* by tensor id: the stage writing it (NULL for inputs) */
  region **bind;         /* by tensor id: the region buffer of an attached stage, while in scope */
  kg_irexpr **env;       /* by ivar id: the value of each index variable while lowering a body */
  kg_var_ranges ranges;  /* by irvar id */
  kg_var_ranges relax;   /* by irvar id: the enclosing threadIdx-bound loops (CUDA), relaxed in shared regions */
  kg_irexpr **lets;      /* by irvar id: values of LET variables (for index normalisation) */
  int caplets;
  int in_parallel;       /* inside a PARALLEL loop (init copies of parallel loops become serial) */
  kg_irvar **size_var;   /* by size index: the parameter of a dynamic size, NULL for a static one */
  int nbuffers, nvars;
} lctx;

typedef struct nest {
  kg_sstage *st;
  int nroot;
  kg_irexpr **dom_min; /* per root axis (spatial, then reduction): absolute min */
  int64_t *dom_ext;    /* (a dynamic extent: its value at the size's hi) */
  kg_irexpr **dom_sext;/* per root axis: the extent as an expression when it follows a dynamic size, else NULL */
  int64_t *ext;        /* by iter id (at the sizes' hi where symbolic) */
  kg_irexpr **sext;    /* by iter id: the symbolic extent, NULL when constant */
  kg_irvar **leafvar;  /* by leaf index */
  int R;               /* index of the outermost reduction leaf, -1 without */
  region *out_region;  /* attached stage: its region buffer */
  kg_buffer *out_buf;
  int X;               /* index of the reduction leaf bound to a thread index (a cross-thread reduction), -1 without */
  kg_buffer *red_buf;  /* cross-thread reduction: the per-thread partial (LOCAL, one element) */
  /* tensorize, when between the reduction's loop R and the three tensorized loops there are only reduction loops
   * and unrolled spatial ones (the warp's instruction tiles): the tensor-core steps accumulate into mma_acc (LOCAL,
   * 4 floats a tile: registers, since the unrolled tile loops make its indices constants) across R's iterations,
   * set to zero before R and stored into the stage's buffer after; mma_plan: the step's plan (its rows and columns
   * loops place the accumulators); mma_seen: a step was built */
  kg_buffer *mma_acc;
  kg_mma_plan mma_plan;
  int mma_seen;
  int plain;           /* build the bfdot step's loops as plain loops (the partial tiles' version); 2: its rows
                        * loop plain around dot products of one row */
} nest;

static void fail(lctx *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(lctx *L, const char *fmt, ...) {
  if (L->failed) return;
  L->failed = 1;
  if (!L->err || !L->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(L->err, L->errlen, fmt, ap);
  va_end(ap);
}

/* ---- names ---- */

/* Identifiers generated code must not take: C and C++ keywords (the CUDA source is C++), what the printed
 * preludes and the CUDA headers NVRTC builds in declare, and the math functions the printers call. Macros of the
 * host headers that generated C and the CUDA emulator include come from kg_reserved_macros (generated at build
 * time from the headers themselves). */
static const char *const reserved[] = {
    /* C */
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
    "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "main",
    "int64_t", "int32_t", "uint64_t", "uint32_t", "size_t", "NULL", "INFINITY", "NAN", "malloc", "calloc", "free",
    "abort", "args", "asm", "fortran", "bool", "true", "false", "min", "max", "signbit", "isnan", "isinf",
    /* C++ */
    "alignas", "alignof", "and", "and_eq", "bitand", "bitor", "catch", "char8_t", "char16_t", "char32_t", "class",
    "compl", "concept", "consteval", "constexpr", "constinit", "const_cast", "co_await", "co_return", "co_yield",
    "decltype", "delete", "dynamic_cast", "explicit", "export", "final", "friend", "import", "module", "mutable",
    "namespace", "new", "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "override", "private",
    "protected", "public", "reinterpret_cast", "requires", "static_assert", "static_cast", "template", "this",
    "thread_local", "throw", "try", "typeid", "typename", "using", "virtual", "wchar_t", "xor", "xor_eq", "std",
    /* CUDA */
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "dim3", "float1", "float2", "float3", "float4",
    "int1", "int2", "int3", "int4", "uint1", "uint2", "uint3", "uint4", "make_float2", "make_float4", "atomicAdd",
    /* math the printers call */
    "expf", "logf", "sqrtf", "rsqrtf", "tanhf", "erff", "fabsf", "powf", "fmodf", "floorf", "fmaxf", "fminf",
    "exp", "log", "sqrt", "tanh", "erf", "fabs", "pow", "fmod", "floor"};

/* bsearch over the build-time list (sorted in C order) */
static int cmp_name(const void *k, const void *e) { return strcmp((const char *)k, *(const char *const *)e); }

static int name_taken(const lctx *L, const char *n) {
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (!strcmp(reserved[i], n)) return 1;
  if (!strncmp(n, "kg_", 3) || !strncmp(n, "KG_", 3) || n[0] == '_') return 1;
  if (kg_nreserved_macros > 0 &&
      bsearch(n, kg_reserved_macros, (size_t)kg_nreserved_macros, sizeof *kg_reserved_macros, cmp_name))
    return 1;
  for (int i = 0; i < L->nnames; i++)
    if (!strcmp(L->names[i], n)) return 1;
  return 0;
}

/* A C identifier from a schedule name: '.', '*' and anything else -> '_'; long user names are cut (uniqueness
 * comes from the suffix). */
static char *sanitize(lctx *L, const char *base) {
  size_t n = strlen(base);
  if (n > 64) n = 64;
  char *s = kg_arena_alloc(L->a, n + 3);
  size_t k = 0;
  if (n == 0 || isdigit((unsigned char)base[0]) || base[0] == '_') s[k++] = 'v';
  for (size_t i = 0; i < n; i++) s[k++] = isalnum((unsigned char)base[i]) ? base[i] : '_';
  s[k] = 0;
  return s;
}

/* A unique identifier in the function: base; when taken, "<prefix>_<base>"; then numbered suffixes. A user name in
 * kgen's own "kg_" namespace becomes "v" + name first, since no suffix would take it out of that namespace. */
static const char *unique_name(lctx *L, const char *base, const char *prefix) {
  const char *s = sanitize(L, base), *cand = s;
  if (!strncmp(s, "kg_", 3)) s = cand = kg_arena_printf(L->a, "v%s", s);
  if (name_taken(L, cand) && prefix) {
    const char *p = sanitize(L, prefix);
    cand = kg_arena_printf(L->a, "%s%s_%s", strncmp(p, "kg_", 3) ? "" : "v", p, s);
  }
  if (name_taken(L, cand)) {
    const char *b = cand;
    for (int i = 1; name_taken(L, cand); i++) cand = kg_arena_printf(L->a, "%s_%d", b, i);
  }
  KG_PUSH(L->a, L->names, L->nnames, L->capnames, cand);
  return cand;
}

static void grow_var_tables(lctx *L, int id) {
  if (id < L->ranges.cap) return;
  int cap = L->ranges.cap ? L->ranges.cap : 64;
  while (cap <= id) cap *= 2;
  L->ranges.lo = kg_arena_grow(L->a, L->ranges.lo, (size_t)L->ranges.cap, (size_t)cap, sizeof(int64_t));
  L->ranges.hi = kg_arena_grow(L->a, L->ranges.hi, (size_t)L->ranges.cap, (size_t)cap, sizeof(int64_t));
  L->ranges.known = kg_arena_grow(L->a, L->ranges.known, (size_t)L->ranges.cap, (size_t)cap, 1);
  L->lets = kg_arena_grow(L->a, L->lets, (size_t)L->ranges.cap, (size_t)cap, sizeof(kg_irexpr *));
  L->relax.lo = kg_arena_grow(L->a, L->relax.lo, (size_t)L->relax.cap, (size_t)cap, sizeof(int64_t));
  L->relax.hi = kg_arena_grow(L->a, L->relax.hi, (size_t)L->relax.cap, (size_t)cap, sizeof(int64_t));
  L->relax.known = kg_arena_grow(L->a, L->relax.known, (size_t)L->relax.cap, (size_t)cap, 1);
  L->ranges.cap = cap;
  L->relax.cap = cap;
}

/* name NULL: named later (LETs are named only when used). */
static kg_irvar *new_var(lctx *L, const char *name, const char *prefix) {
  kg_irvar *v = KG_NEW(L->a, kg_irvar);
  v->id = L->nvars++;
  v->name = name ? unique_name(L, name, prefix) : NULL;
  grow_var_tables(L, v->id);
  return v;
}

static void set_range(lctx *L, kg_irvar *v, int64_t lo, int64_t hi) {
  L->ranges.lo[v->id] = lo;
  L->ranges.hi[v->id] = hi;
  L->ranges.known[v->id] = 1;
}

static kg_buffer *new_buffer(lctx *L, kg_tensor *t, kg_scope scope, int64_t size, const char *prefix) {
  kg_buffer *b = KG_NEW(L->a, kg_buffer);
  b->name = unique_name(L, t->name, prefix);
  b->id = L->nbuffers++;
  b->scope = scope;
  b->tensor = t;
  b->dtype = t->dtype;
  b->size = size;
  b->param_index = -1;
  return b;
}

/* ---- iter arithmetic: extents down, values up ---- */

static int64_t iter_ext(lctx *L, nest *n, const kg_iter *it, unsigned char *done) {
  if (done[it->id]) return n->ext[it->id];
  int64_t e = 1;
  switch (it->origin) {
    case KG_ITER_ROOT: e = n->dom_ext[it->root_axis]; break;
    case KG_ITER_SPLIT_OUTER: {
      int64_t pe = iter_ext(L, n, it->split_parent, done), f = it->factor > 0 ? it->factor : 1;
      e = pe / f + (pe % f != 0);
      break;
    }
    case KG_ITER_SPLIT_INNER: e = it->factor > 0 ? it->factor : 1; break;
    case KG_ITER_FUSED:
      if (__builtin_mul_overflow(iter_ext(L, n, it->fuse_outer, done), iter_ext(L, n, it->fuse_inner, done), &e)) {
        fail(L, "lower: stage %s: loop %s: extent overflows", n->st->name, it->name);
        e = 1;
      }
      break;
  }
  if (e < 1) e = 1;
  done[it->id] = 1;
  n->ext[it->id] = e;
  /* the same arithmetic over the run-time sizes, for the iters whose extent follows one */
  kg_irexpr *se = NULL;
  kg_arena *a = L->a;
  switch (it->origin) {
    case KG_ITER_ROOT: se = n->dom_sext ? n->dom_sext[it->root_axis] : NULL; break;
    case KG_ITER_SPLIT_OUTER: {
      kg_irexpr *pe = n->sext[it->split_parent->id];
      int64_t f = it->factor > 0 ? it->factor : 1;
      if (pe) se = f == 1 ? pe : kg_ir_binary(a, KG_OP_DIV, kg_ir_binary(a, KG_OP_ADD, pe, kg_ir_int(a, f - 1)),
                                             kg_ir_int(a, f));
      break;
    }
    case KG_ITER_SPLIT_INNER: break;
    case KG_ITER_FUSED: {
      kg_irexpr *o = n->sext[it->fuse_outer->id], *i = n->sext[it->fuse_inner->id];
      if (o || i)
        se = kg_ir_binary(a, KG_OP_MUL, o ? o : kg_ir_int(a, n->ext[it->fuse_outer->id]),
                          i ? i : kg_ir_int(a, n->ext[it->fuse_inner->id]));
      break;
    }
  }
  n->sext[it->id] = se;
  return e;
}

/* A loop's extent as the IR states it: the symbolic one, or the constant. */
static kg_irexpr *ext_expr(lctx *L, const nest *n, const kg_iter *it) {
  return n->sext[it->id] ? n->sext[it->id] : kg_ir_int(L->a, n->ext[it->id]);
}

static int is_leaf(const kg_iter *it) { return !it->split_outer && !it->fused_into; }

/* Relative value of every iter given the leaves' values (leafval by iter id; NULL where unknown, e.g. the
 * reduction loops while building the init). */
static kg_irexpr *iter_val(lctx *L, nest *n, const kg_iter *it, kg_irexpr **leafval, kg_irexpr **val,
                           unsigned char *done) {
  if (done[it->id]) return val[it->id];
  kg_irexpr *v = NULL;
  if (is_leaf(it)) {
    v = leafval[it->id];
  } else if (it->split_outer) {
    kg_irexpr *o = iter_val(L, n, it->split_outer, leafval, val, done);
    kg_irexpr *i = iter_val(L, n, it->split_inner, leafval, val, done);
    if (o && i)
      v = kg_ir_binary(L->a, KG_OP_ADD, kg_ir_binary(L->a, KG_OP_MUL, o, kg_ir_int(L->a, it->split_inner->factor)),
                       i);
  } else {
    const kg_iter *f = it->fused_into;
    kg_irexpr *fv = iter_val(L, n, f, leafval, val, done);
    if (fv)
      v = kg_ir_binary(L->a, it == f->fuse_outer ? KG_OP_DIV : KG_OP_MOD, fv, ext_expr(L, n, f->fuse_inner));
  }
  done[it->id] = 1;
  val[it->id] = v;
  return v;
}

static kg_irexpr **iter_values(lctx *L, nest *n, kg_irexpr **leafval) {
  kg_sstage *st = n->st;
  kg_irexpr **val = KG_NEW_ARRAY(L->a, kg_irexpr *, st->nall + 1);
  unsigned char *done = KG_NEW_ARRAY(L->a, unsigned char, st->nall + 1);
  for (int r = 0; r < n->nroot; r++) iter_val(L, n, st->roots[r], leafval, val, done);
  return val;
}

/* Dimension d of t: the size's parameter when it follows a dynamic size, else its constant. */
static kg_irexpr *dim_expr(lctx *L, const kg_tensor *t, int d) {
  if (t->dyn[d] && L->size_var[t->dyn[d] - 1]) return kg_ir_var(L->a, L->size_var[t->dyn[d] - 1]);
  return kg_ir_int(L->a, t->shape[d]);
}

static kg_irexpr *guard_and(lctx *L, kg_irexpr *acc, kg_irexpr *c) {
  if (kg_bounds_provably_true(c, &L->ranges)) return acc;
  return acc ? kg_ir_binary(L->a, KG_OP_AND, acc, c) : c;
}

/* The guard of a store: non-dividing splits keep the parent below its extent; an attached stage's region
 * points stay inside its tensor. Conjuncts that cannot involve unknown values (NULL) are skipped; provably
 * true ones are dropped. */
static kg_irexpr *build_guard(lctx *L, nest *n, kg_irexpr **val) {
  kg_sstage *st = n->st;
  kg_arena *a = L->a;
  kg_irexpr *g = NULL;
  for (int i = 0; i < st->nall; i++) {
    kg_iter *it = st->all[i];
    if (!it->split_outer || !val[it->id]) continue;
    int64_t f = it->split_inner->factor;
    if (!n->sext[it->id] && f > 0 && n->ext[it->id] % f == 0) continue;
    g = guard_and(L, g, kg_ir_binary(a, KG_OP_LT, kg_bounds_simplify(a, val[it->id], NULL, 0), ext_expr(L, n, it)));
  }
  if (n->out_region) {
    for (int d = 0; d < st->nax; d++) {
      kg_irexpr *rel = val[st->roots[d]->id];
      if (!rel) continue;
      int64_t m, shape = st->out->shape[d];
      int dyn = st->out->dyn[d];
      if (!dyn && kg_ir_is_const(n->dom_min[d], &m) && m >= 0 && m + n->dom_ext[d] <= shape) continue;
      kg_irexpr *abs = kg_bounds_simplify(a, kg_ir_binary(a, KG_OP_ADD, n->dom_min[d], rel), NULL, 0);
      g = guard_and(L, g, kg_ir_binary(a, KG_OP_GE, abs, kg_ir_int(a, 0)));
      g = guard_and(L, g, kg_ir_binary(a, KG_OP_LT, abs, dim_expr(L, st->out, d)));
    }
  }
  return g;
}

/* ---- expressions ---- */

static kg_irexpr *lower_expr(lctx *L, const kg_expr *e);

/* t (NULL for a region buffer): its dimensions that follow dynamic sizes make symbolic strides. */
static kg_irexpr *flat_index(lctx *L, kg_irexpr **idx, int ndim, const int64_t *dims, kg_irexpr *const *mins,
                             const kg_tensor *t) {
  kg_arena *a = L->a;
  kg_irexpr *r = kg_ir_int(a, 0);
  int64_t stride = 1;
  kg_irexpr *sstride = NULL; /* the stride as an expression once a symbolic dimension has been passed */
  for (int d = ndim - 1; d >= 0; d--) {
    /* a blocked layout's (split_storage) divisions cancel where the reader's loops are split by the block */
    kg_irexpr *x = kg_bounds_divmod(a, idx[d], L->lets, L->ranges.cap, &L->ranges);
    if (mins) x = kg_ir_binary(a, KG_OP_SUB, x, mins[d]);
    r = kg_ir_binary(a, KG_OP_ADD, kg_ir_binary(a, KG_OP_MUL, x, sstride ? sstride : kg_ir_int(a, stride)), r);
    if (t && t->dyn[d] && L->size_var[t->dyn[d] - 1])
      sstride = kg_ir_binary(a, KG_OP_MUL, sstride ? sstride : kg_ir_int(a, stride), dim_expr(L, t, d));
    else if (sstride)
      sstride = kg_ir_binary(a, KG_OP_MUL, sstride, kg_ir_int(a, dims[d]));
    else if (__builtin_mul_overflow(stride, dims[d], &stride))
      stride = 1; /* shapes were checked to fit */
  }
  /* region buffers: expand the LETs so that "index - region min" cancels to the inner loop variables */
  return kg_bounds_simplify(a, r, mins ? L->lets : NULL, mins ? L->ranges.cap : 0);
}

static kg_irexpr *buffer_index(lctx *L, kg_tensor *t, kg_irexpr **idx, kg_buffer **buf) {
  region *rg = L->bind[t->id];
  kg_sstage *st = L->tstage[t->id];
  if (rg) {
    *buf = rg->buf;
    return flat_index(L, idx, rg->ndim, rg->store, rg->min, NULL);
  }
  if (st && st->attach == KG_ATTACH_AT) {
    fail(L, "lower: tensor %s is used outside the loop %s of stage %s where it is computed", t->name,
         st->attach_iter ? st->attach_iter->name : "?", st->attach_stage ? st->attach_stage->name : "?");
    *buf = NULL;
    return kg_ir_int(L->a, 0);
  }
  *buf = L->tbuf[t->id];
  if (!*buf) {
    fail(L, "lower: tensor %s has no buffer", t->name);
    return kg_ir_int(L->a, 0);
  }
  return flat_index(L, idx, t->ndim, t->shape, NULL, t);
}

static kg_irexpr *lower_read(lctx *L, const kg_expr *e) {
  kg_arena *a = L->a;
  kg_tensor *t = e->read.tensor;
  if (!t || t->id < 0 || t->id >= L->s->n_tensors || e->read.n != t->ndim) {
    fail(L, "lower: malformed read of %s", e->read.name ? e->read.name : "?");
    return kg_ir_float(a, 0);
  }
  kg_irexpr *idx[KG_MAX_DIMS];
  for (int d = 0; d < e->read.n; d++) idx[d] = lower_expr(L, e->read.idx[d]);
  kg_sstage *st = L->tstage[t->id];
  if (st && st->attach == KG_ATTACH_INLINE) {
    /* substitute the producer's body with its axes bound to the read's indices */
    kg_irexpr *saved[KG_MAX_DIMS];
    for (int d = 0; d < st->nax; d++) {
      saved[d] = L->env[st->ax[d]->id];
      L->env[st->ax[d]->id] = idx[d];
    }
    kg_irexpr *v = kg_ir_cast_f32(a, lower_expr(L, st->body));
    for (int d = 0; d < st->nax; d++) L->env[st->ax[d]->id] = saved[d];
    return v;
  }
  kg_buffer *b;
  kg_irexpr *ix = buffer_index(L, t, idx, &b);
  if (!b) return kg_ir_float(a, 0);
  kg_irexpr *r = kg_ir_load(a, b, ix);
  r->pos = e->pos;
  return r;
}

static int is_value_op(kg_op op) {
  return op == KG_OP_ADD || op == KG_OP_SUB || op == KG_OP_MUL || op == KG_OP_DIV || op == KG_OP_MOD;
}

static kg_irexpr *lower_expr(lctx *L, const kg_expr *e) {
  kg_arena *a = L->a;
  kg_irexpr *r = NULL;
  if (L->failed) return kg_ir_float(a, 0);
  switch (e->kind) {
    case KG_EXPR_NUM:
      if (e->ty == KG_TY_INT) r = kg_ir_int(a, e->num.is_int ? e->num.i : (int64_t)e->num.f);
      else r = kg_ir_float(a, e->num.is_int ? (double)e->num.i : e->num.f);
      break;
    case KG_EXPR_SIZE:
      if (e->var.size < 0 || e->var.size >= L->p->nsizes) {
        fail(L, "lower: unknown size variable");
        return kg_ir_int(a, 0);
      }
      r = L->size_var[e->var.size] ? kg_ir_var(a, L->size_var[e->var.size])
                                   : kg_ir_int(a, L->p->sizes[e->var.size].value);
      break;
    case KG_EXPR_IVAR:
      if (!e->var.iv || e->var.iv->id < 0 || e->var.iv->id >= L->s->n_ivars || !L->env[e->var.iv->id]) {
        fail(L, "lower: index variable %s has no value here", e->var.iv ? e->var.iv->name : "?");
        return kg_ir_int(a, 0);
      }
      r = L->env[e->var.iv->id];
      break;
    case KG_EXPR_READ: r = lower_read(L, e); break;
    case KG_EXPR_UNARY: {
      kg_irexpr *x = lower_expr(L, e->op.a);
      if (e->op.op == KG_OP_NEG && e->ty == KG_TY_F32) x = kg_ir_cast_f32(a, x);
      r = kg_ir_unary(a, e->op.op, x);
      break;
    }
    case KG_EXPR_BINARY: {
      kg_irexpr *x = lower_expr(L, e->op.a), *y = lower_expr(L, e->op.b);
      int as_f32 = (is_value_op(e->op.op) && e->ty == KG_TY_F32) || x->ty == KG_TY_F32 || y->ty == KG_TY_F32;
      if (as_f32 && e->op.op != KG_OP_AND && e->op.op != KG_OP_OR) {
        x = kg_ir_cast_f32(a, x);
        y = kg_ir_cast_f32(a, y);
      }
      r = kg_ir_binary(a, e->op.op, x, y);
      break;
    }
    case KG_EXPR_CALL: {
      kg_irexpr *args[3];
      int n = e->call.n < 3 ? e->call.n : 3;
      for (int i = 0; i < n; i++) args[i] = lower_expr(L, e->call.args[i]);
      if (e->call.fn == KG_FN_SELECT && n == 3) {
        kg_irexpr *x = args[1], *y = args[2];
        if (e->ty == KG_TY_F32 || x->ty == KG_TY_F32 || y->ty == KG_TY_F32) {
          x = kg_ir_cast_f32(a, x);
          y = kg_ir_cast_f32(a, y);
        }
        r = kg_ir_select(a, args[0], x, y);
      } else if (e->call.fn != KG_FN_SELECT && n == kg_func_arity[e->call.fn]) {
        r = kg_ir_call(a, e->call.fn, args, n);
      } else {
        fail(L, "lower: malformed call of %s", kg_func_names[e->call.fn]);
        return kg_ir_float(a, 0);
      }
      break;
    }
    default:
      fail(L, "lower: unexpected %s in a stage body", e->kind == KG_EXPR_REDUCE ? "reduction" : "name");
      return kg_ir_float(a, 0);
  }
  if (e->ty == KG_TY_F32) r = kg_ir_cast_f32(a, r);
  if (r->pos.src == NULL) r->pos = e->pos;
  return r;
}

/* ---- statements ---- */

static kg_irexpr *combine(lctx *L, kg_reducer red, kg_irexpr *acc, kg_irexpr *v) {
  kg_irexpr *args[2] = {acc, v};
  switch (red) {
    case KG_RED_SUM: return kg_ir_binary(L->a, KG_OP_ADD, acc, v);
    case KG_RED_PROD: return kg_ir_binary(L->a, KG_OP_MUL, acc, v);
    case KG_RED_MAX: return kg_ir_call(L->a, KG_FN_MAX, args, 2);
    case KG_RED_MIN: return kg_ir_call(L->a, KG_FN_MIN, args, 2);
    default: assert(0); return v;
  }
}

/* e with every subexpression equal to a LET's value replaced by the LET (guards read "i < 33", not the sum). */
static kg_irexpr *use_lets(lctx *L, kg_irexpr *e, kg_irvar **letvar, int n) {
  if (e->ty == KG_TY_INT && e->kind != KG_IRE_VAR && e->kind != KG_IRE_INT)
    for (int r = 0; r < n; r++)
      if (letvar[r] && kg_bounds_expr_equal(e, L->lets[letvar[r]->id])) return kg_ir_var(L->a, letvar[r]);
  if (e->kind == KG_IRE_BINARY) {
    kg_irexpr *x = use_lets(L, e->bin.a, letvar, n), *y = use_lets(L, e->bin.b, letvar, n);
    if (x != e->bin.a || y != e->bin.b) return kg_ir_binary(L->a, e->bin.op, x, y);
  }
  return e;
}

/* What build_store stores: the update (or plain value), the reduction's init, a cross-thread reduction's
 * accumulation into its per-thread partial, or that reduction's result (the partial after the allreduce). */
typedef enum { STORE_UPDATE, STORE_INIT, STORE_PARTIAL, STORE_RESULT } store_mode;

/* The flat index of n's output element at the axes' values in L->env: into its region buffer when attached, else
 * into its tensor. */
static kg_irexpr *out_flat_index(lctx *L, nest *n) {
  kg_sstage *st = n->st;
  kg_irexpr *idx[KG_MAX_DIMS];
  for (int d = 0; d < st->nax && d < KG_MAX_DIMS; d++) idx[d] = L->env[st->ax[d]->id];
  return n->out_region ? flat_index(L, idx, st->nax, n->out_region->store, n->out_region->min, NULL)
                       : flat_index(L, idx, st->nax, st->out->shape, NULL, st->out);
}

/* LETs for the root axes, the guard and the store. leafval gives each leaf's value (reduction leaves NULL for
 * the init and the result). */
static kg_irstmt *build_store(lctx *L, nest *n, kg_irexpr **leafval, store_mode mode) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  kg_irexpr **val = iter_values(L, n, leafval);
  kg_irvar **letvar = KG_NEW_ARRAY(a, kg_irvar *, n->nroot + 1);
  int nroot = n->nroot;
  for (int r = 0; r < nroot; r++) {
    kg_ivar *iv = kg_sstage_axis(st, r);
    letvar[r] = NULL;
    kg_irexpr *rel = val[st->roots[r]->id];
    if (!rel) {
      L->env[iv->id] = NULL;
      continue;
    }
    kg_irexpr *abs = kg_bounds_simplify(a, kg_ir_binary(a, KG_OP_ADD, n->dom_min[r], rel), NULL, 0);
    if (abs->kind == KG_IRE_VAR || abs->kind == KG_IRE_INT) {
      L->env[iv->id] = abs;
    } else {
      letvar[r] = new_var(L, NULL, NULL);
      L->lets[letvar[r]->id] = abs;
      int64_t lo, hi;
      if (kg_bounds_range(abs, &L->ranges, &lo, &hi)) set_range(L, letvar[r], lo, hi);
      L->env[iv->id] = kg_ir_var(a, letvar[r]);
    }
  }
  kg_buffer *buf = n->out_buf;
  kg_irexpr *ix = out_flat_index(L, n);
  kg_irexpr *value;
  if (mode == STORE_INIT) {
    value = kg_ir_float(a, kg_reducer_identity(st->red));
  } else if (mode == STORE_RESULT) {
    value = kg_ir_load(a, n->red_buf, kg_ir_int(a, 0));
  } else {
    value = kg_ir_cast_f32(a, lower_expr(L, st->body));
    if (mode == STORE_PARTIAL) {
      buf = n->red_buf;
      ix = kg_ir_int(a, 0);
    }
    if (st->red != KG_RED_NONE) value = combine(L, st->red, kg_ir_load(a, buf, ix), value);
  }
  kg_irstmt *store = kg_ir_store(a, buf, ix, value);
  store->store.stream = st->stream && buf->scope == KG_SCOPE_GLOBAL;
  store->pos = st->out->pos; /* the statement that defines the tensor, for messages about generated code */
  kg_irexpr *g = build_guard(L, n, val);
  if (g) g = use_lets(L, g, letvar, nroot);
  kg_irstmt *body = g ? kg_ir_if(a, g, store, NULL) : store;
  for (int r = 0; r < nroot; r++) L->env[(kg_sstage_axis(st, r))->id] = NULL;

  /* only the LETs the store uses, so the printed code has no unused variables */
  unsigned char *used = KG_NEW_ARRAY(a, unsigned char, L->ranges.cap);
  kg_ir_mark_vars(ix, used, L->ranges.cap);
  kg_ir_mark_vars(value, used, L->ranges.cap);
  if (g) kg_ir_mark_vars(g, used, L->ranges.cap);
  kg_irstmt *seq = kg_ir_seq(a);
  for (int r = 0; r < nroot; r++) {
    if (!letvar[r] || !used[letvar[r]->id]) continue;
    kg_ivar *iv = kg_sstage_axis(st, r);
    letvar[r]->name = unique_name(L, iv->name, st->name);
    kg_ir_seq_push(a, seq, kg_ir_let(a, letvar[r], L->lets[letvar[r]->id]));
  }
  if (seq->seq.n == 0) return body;
  kg_ir_seq_push(a, seq, body);
  return seq;
}

static kg_irstmt *lower_stage(lctx *L, kg_sstage *st, kg_irexpr **dom_min, int64_t *dom_ext, kg_irexpr **dom_sext,
                              region *rg);

/* The reduction's init, placed before the outermost reduction loop R: copies of the spatial loops after R. */
static kg_irstmt *build_init(lctx *L, nest *n) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  kg_irexpr **leafval = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  for (int k = 0; k < n->R; k++) leafval[st->leaves[k]->id] = kg_ir_var(a, n->leafvar[k]);
  kg_irvar **copy = KG_NEW_ARRAY(a, kg_irvar *, st->nleaves + 1);
  kg_loop_kind *kind = KG_NEW_ARRAY(a, kg_loop_kind, st->nleaves + 1);
  int par = L->in_parallel;
  for (int k = n->R + 1; k < st->nleaves; k++) {
    kg_iter *it = st->leaves[k];
    if (it->is_reduce) continue;
    copy[k] = new_var(L, kg_arena_printf(a, "%s.init", it->name), st->name);
    set_range(L, copy[k], 0, n->ext[it->id] - 1);
    leafval[it->id] = kg_ir_var(a, copy[k]);
    kind[k] = it->kind;
    if (kind[k] == KG_LOOP_PARALLEL) {
      if (par) kind[k] = KG_LOOP_SERIAL;
      par = 1;
    }
  }
  kg_irstmt *body = build_store(L, n, leafval, STORE_INIT);
  for (int k = st->nleaves - 1; k > n->R; k--) {
    kg_iter *it = st->leaves[k];
    if (it->is_reduce) continue;
    body = kg_ir_for(a, copy[k], ext_expr(L, n, it), kind[k], it->tag,
                     kg_arena_printf(a, "%s.init", it->name), st->name, body);
  }
  return body;
}

static kg_irstmt *build_from(lctx *L, nest *n, int k);

/* A cross-thread reduction (CUDA), from its first reduction loop R on, where no spatial loop follows R:
 *   alloc red (local, 1): red[0] = identity; loops R... accumulating into red[0]; allreduce red across the
 *   thread index of loop X; the store of red[0] (the printer lets one thread make it). */
static kg_irstmt *build_cross_thread(lctx *L, nest *n) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  kg_iter *x = st->leaves[n->X];
  kg_buffer *rb = KG_NEW(a, kg_buffer);
  rb->name = unique_name(L, kg_arena_printf(a, "%s_red", st->name), NULL);
  rb->id = L->nbuffers++;
  rb->scope = KG_SCOPE_LOCAL;
  rb->tensor = st->out;
  rb->size = 1;
  rb->param_index = -1;
  n->red_buf = rb;
  kg_irstmt *seq = kg_ir_seq(a);
  kg_ir_seq_push(a, seq, kg_ir_store(a, rb, kg_ir_int(a, 0), kg_ir_float(a, kg_reducer_identity(st->red))));
  int R = n->R;
  n->X = -1; /* build_from builds loop R normally now */
  kg_ir_seq_push(a, seq, build_from(L, n, R));
  n->X = kg_sstage_leaf_index(st, x);
  kg_ir_seq_push(a, seq, kg_ir_allreduce(a, rb, st->red, x->tag, n->ext[x->id], st->name, x->name));
  kg_irexpr **leafval = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  for (int j = 0; j < R; j++) leafval[st->leaves[j]->id] = kg_ir_var(a, n->leafvar[j]);
  kg_ir_seq_push(a, seq, build_store(L, n, leafval, STORE_RESULT));
  n->red_buf = NULL;
  return kg_ir_alloc(a, rb, seq);
}

/* The body of leaf k's loop: the stages computed at it (each in its region buffer), then the inner loops. */
/* The domain of st's root axes: the spatial ones over rg (NULL: the whole tensor), the reduction ones over their
 * full range. */
/* The dynamic ones (dsext[r] non-NULL) extend to their size's hi in dext and are the size's parameter in dsext; a
 * region's dimensions are constant. */
static void root_domain(lctx *L, const kg_sstage *st, const region *rg, kg_irexpr ***dmin, int64_t **dext,
                        kg_irexpr ***dsext) {
  kg_arena *a = L->a;
  *dmin = KG_NEW_ARRAY(a, kg_irexpr *, st->nax + st->nrax + 1);
  *dext = KG_NEW_ARRAY(a, int64_t, st->nax + st->nrax + 1);
  *dsext = KG_NEW_ARRAY(a, kg_irexpr *, st->nax + st->nrax + 1);
  for (int d = 0; d < st->nax; d++) {
    (*dmin)[d] = rg ? rg->min[d] : kg_ir_int(a, 0);
    (*dext)[d] = rg ? rg->ext[d] : st->out->shape[d];
    int k = st->out->dyn[d] - 1;
    if (!rg && k >= 0 && L->size_var[k]) {
      (*dext)[d] = L->p->sizes[k].hi;
      (*dsext)[d] = kg_ir_var(a, L->size_var[k]);
    }
  }
  for (int r = 0; r < st->nrax; r++) {
    (*dmin)[st->nax + r] = kg_ir_int(a, st->rax[r]->lo);
    (*dext)[st->nax + r] = st->rax[r]->extent;
    int k = st->rax[r]->dyn - 1;
    if (k >= 0 && L->size_var[k]) {
      (*dext)[st->nax + r] = L->p->sizes[k].hi;
      (*dsext)[st->nax + r] = kg_ir_var(a, L->size_var[k]);
    }
  }
}

static kg_irstmt *build_body(lctx *L, nest *n, int k) {
  kg_arena *a = L->a;
  const kg_schedule *s = L->s;
  kg_sstage *st = n->st;
  kg_iter *it = st->leaves[k];
  /* the stages computed at this loop, collected in one pass (at most every stage) */
  kg_sstage **at = KG_NEW_ARRAY(a, kg_sstage *, s->nstages + 1);
  int nat = 0;
  for (int i = 0; i < s->nstages; i++)
    if (s->stages[i]->attach == KG_ATTACH_AT && s->stages[i]->attach_stage == st && s->stages[i]->attach_iter == it)
      at[nat++] = s->stages[i];
  if (!nat) return build_from(L, n, k + 1);

  region **rg = KG_NEW_ARRAY(a, region *, nat);
  region **saved = KG_NEW_ARRAY(a, region *, nat);
  for (int j = 0; j < nat; j++) {
    kg_sstage *P = at[j];
    region *r = KG_NEW(a, region);
    r->ndim = P->out->ndim;
    int symbolic = 0;
    kg_region_query q = {a, s, st, k, n->ext, n->leafvar, n->dom_min, P, L->tstage,
                         L->target == KG_TARGET_CUDA && P->scope == KG_SCOPE_SHARED ? &L->relax : NULL, &symbolic,
                         n->sext};
    kg_bounds_infer_region(&q, r->min, r->ext);
    if (symbolic)
      fail(L, "lower: stage %s: computed at %s.%s, its region spans a whole dimension that follows a dynamic size; "
           "compute it at a loop inside that size's loops", P->name, st->name, it->name);
    int64_t size = 1;
    for (int d = 0; d < r->ndim; d++) r->store[d] = r->ext[d] + (d == r->ndim - 1 ? P->pad : 0);
    for (int d = 0; d < r->ndim; d++)
      if (__builtin_mul_overflow(size, r->store[d], &size)) {
        fail(L, "lower: stage %s: region size overflows", P->name);
        size = 1;
      }
    r->buf = new_buffer(L, P->out, P->scope == KG_SCOPE_SHARED ? KG_SCOPE_SHARED : KG_SCOPE_LOCAL, size, NULL);
    rg[j] = r;
    saved[j] = L->bind[P->out->id];
    L->bind[P->out->id] = r;
  }
  kg_irstmt *seq = kg_ir_seq(a);
  for (int j = 0; j < nat; j++) {
    kg_sstage *P = at[j];
    kg_irexpr **dmin, **dsext;
    int64_t *dext;
    root_domain(L, P, rg[j], &dmin, &dext, &dsext);
    int barriers = L->target == KG_TARGET_CUDA && rg[j]->buf->scope == KG_SCOPE_SHARED;
    kg_ir_seq_push(a, seq, kg_ir_comment(a, kg_arena_printf(a, "stage %s (computed at %s.%s)", P->name, st->name,
                                                              it->name)));
    if (barriers) kg_ir_seq_push(a, seq, kg_ir_barrier(a));
    kg_ir_seq_push(a, seq, lower_stage(L, P, dmin, dext, dsext, rg[j]));
    if (barriers) kg_ir_seq_push(a, seq, kg_ir_barrier(a));
  }
  kg_ir_seq_push(a, seq, build_from(L, n, k + 1));
  for (int j = nat - 1; j >= 0; j--) L->bind[at[j]->out->id] = saved[j];
  kg_irstmt *body = seq;
  for (int j = nat - 1; j >= 0; j--) body = kg_ir_alloc(a, rg[j]->buf, body);
  return body;
}

static kg_irstmt *build_mma(lctx *L, nest *n, int k);
static int mma_tiles_from(lctx *L, const nest *n, int k);
static kg_irstmt *build_bfdot(lctx *L, nest *n, int k, int one_row);


/* The instruction tiles whose accumulators can stay in registers across the reduction from its first loop R (a
 * tensorized stage on CUDA): the product of the extents of the spatial loops between R and the three tensorized
 * ones, when each is unrolled with a constant extent and no thread index (its accumulators' indices are then
 * constants in the unrolled code), the rest reduction loops; 0 when that does not hold or the tiles are too
 * many. */
static int64_t mma_register_tiles(lctx *L, const nest *n) {
  const kg_sstage *st = n->st;
  if (!st->mma[0] || L->target != KG_TARGET_CUDA || n->red_buf || n->R < 0 || n->R > st->nleaves - 4) return 0;
  int64_t tiles = 1;
  for (int j = n->R + 1; j < st->nleaves - 3; j++) {
    const kg_iter *it = st->leaves[j];
    if (it->is_reduce) continue;
    if (it->kind != KG_LOOP_UNROLLED || it->tag != KG_THREAD_NONE || n->sext[it->id]) return 0;
    tiles *= n->ext[it->id];
    if (tiles > KG_MMA_MAX_TILES) return 0;
  }
  return tiles;
}

/* Index of the instruction tile of the unrolled spatial loops between R and the tensorized loops (mixed radix over
 * their extents) at the leaves' values lv. */
static kg_irexpr *mma_tile_index(lctx *L, const nest *n, kg_irexpr **lv) {
  kg_arena *a = L->a;
  const kg_sstage *st = n->st;
  kg_irexpr *t = kg_ir_int(a, 0);
  for (int j = n->R + 1; j < st->nleaves - 3; j++) {
    const kg_iter *it = st->leaves[j];
    if (it->is_reduce) continue;
    t = kg_ir_binary(a, KG_OP_ADD, kg_ir_binary(a, KG_OP_MUL, t, kg_ir_int(a, n->ext[it->id])), lv[it->id]);
  }
  return t;
}

static kg_irexpr *out_index_at(lctx *L, nest *n, kg_irexpr **lv, kg_irexpr **guard);

/* The register accumulators set to zero (to_regs: before the reduction), or stored into the stage's buffer (after
 * it): loops over the tiles (copies of the unrolled spatial loops between R and the tensorized ones), each the four
 * elements the PTX layout gives this lane. */
static kg_irstmt *mma_acc_copy(lctx *L, nest *n, int to_regs) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  const kg_mma_plan *p = &n->mma_plan;
  kg_irexpr **lv = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  kg_irvar **copy = KG_NEW_ARRAY(a, kg_irvar *, st->nleaves + 1);
  for (int j = 0; j < st->nleaves; j++) {
    kg_iter *it = st->leaves[j];
    if (j <= n->R) {
      lv[it->id] = kg_ir_var(a, n->leafvar[j]);
    } else if (j < st->nleaves - 3 && !it->is_reduce) {
      copy[j] = new_var(L, kg_arena_printf(a, "%s.acc", it->name), st->name);
      set_range(L, copy[j], 0, n->ext[it->id] - 1);
      lv[it->id] = kg_ir_var(a, copy[j]);
    } else {
      lv[it->id] = kg_ir_int(a, 0); /* the accumulators do not depend on the reduction */
    }
  }
  kg_irexpr *base = kg_ir_binary(a, KG_OP_MUL, mma_tile_index(L, n, lv), kg_ir_int(a, 4));
  kg_irstmt *body = kg_ir_seq(a);
  for (int e = 0; e < 4; e++) {
    kg_irexpr *ai = kg_ir_binary(a, KG_OP_ADD, base, kg_ir_int(a, e));
    if (to_regs) {
      kg_ir_seq_push(a, body, kg_ir_store(a, n->mma_acc, ai, kg_ir_float(a, 0)));
      continue;
    }
    lv[p->rows->id] = kg_ir_int(a, e >> 1);
    lv[p->cols->id] = kg_ir_int(a, e & 1);
    kg_irexpr *guard; /* none: build_mma refused a tile that needs one */
    kg_irexpr *ix = out_index_at(L, n, lv, &guard);
    kg_ir_seq_push(a, body, kg_ir_store(a, n->out_buf, ix, kg_ir_load(a, n->mma_acc, ai)));
  }
  for (int j = st->nleaves - 4; j > n->R; j--)
    if (copy[j])
      body = kg_ir_for(a, copy[j], kg_ir_int(a, n->ext[st->leaves[j]->id]), KG_LOOP_UNROLLED, KG_THREAD_NONE,
                       kg_arena_printf(a, "%s.acc", st->leaves[j]->name), st->name, body);
  return body;
}

static kg_irstmt *build_from(lctx *L, nest *n, int k) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  if (L->failed) return kg_ir_seq(a);
  if (k == st->nleaves) {
    kg_irexpr **leafval = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
    for (int j = 0; j < st->nleaves; j++) leafval[st->leaves[j]->id] = kg_ir_var(a, n->leafvar[j]);
    return build_store(L, n, leafval, n->red_buf ? STORE_PARTIAL : STORE_UPDATE);
  }
  if (k == n->R && n->X >= 0) return build_cross_thread(L, n);
  if (st->mma[0] && (k == st->nleaves - 3 || mma_tiles_from(L, n, k) == k)) return build_mma(L, n, k);
  if (st->bfdot[0] && k == st->nleaves - 3 && !n->plain) return build_bfdot(L, n, k, 0);
  if (st->bfdot[0] && k == st->nleaves - 2 && n->plain == 2) return build_bfdot(L, n, k, 1);
  kg_iter *it = st->leaves[k];
  /* tensorize inside the reduction's loops: the accumulators of the warp's tiles in registers across them, set to
   * zero there (the stage's buffer is then written once, after the reduction, and never initialized) */
  int64_t tiles = k == n->R ? mma_register_tiles(L, n) : 0;
  kg_irstmt *init = k == n->R && !n->red_buf && !tiles ? build_init(L, n) : NULL;
  int saved = L->in_parallel;
  if (it->kind == KG_LOOP_PARALLEL) L->in_parallel = 1;
  kg_irvar *v = n->leafvar[k];
  int thread = L->target == KG_TARGET_CUDA && kg_thread_tag_is_thread(it->tag);
  if (thread) {
    L->relax.known[v->id] = 1;
    L->relax.lo[v->id] = 0;
    L->relax.hi[v->id] = n->ext[it->id] - 1;
  }
  kg_buffer *acc = NULL;
  if (tiles > 0) {
    char err[512];
    if (kg_sched_mma_plan(L->s, st, &n->mma_plan, err, sizeof err) != 0) {
      fail(L, "lower: %s", err);
      return kg_ir_seq(a);
    }
    acc = KG_NEW(a, kg_buffer);
    acc->name = unique_name(L, "kg_mma_c", NULL);
    acc->id = L->nbuffers++;
    acc->scope = KG_SCOPE_LOCAL;
    acc->tensor = st->out;
    acc->dtype = KG_DT_F32;
    acc->size = 4 * tiles;
    acc->param_index = -1;
    n->mma_acc = acc;
    n->mma_seen = 0;
  }
  kg_irstmt *body = build_body(L, n, k);
  if (thread) L->relax.known[v->id] = 0;
  L->in_parallel = saved;
  kg_irstmt *loop = kg_ir_for(a, n->leafvar[k], ext_expr(L, n, it), it->kind, it->tag, it->name, st->name, body);
  loop->loop.pipeline = it->pipeline;
  if (acc) {
    if (!n->mma_seen) {
      n->mma_acc = NULL;
      fail(L, "lower: tensorize: stage %s: no tensor-core step inside its reduction loop %s", st->name, it->name);
      return kg_ir_seq(a);
    }
    kg_irstmt *in = kg_ir_seq(a);
    kg_ir_seq_push(a, in, mma_acc_copy(L, n, 1));
    kg_ir_seq_push(a, in, loop);
    kg_ir_seq_push(a, in, mma_acc_copy(L, n, 0));
    n->mma_acc = NULL;
    loop = kg_ir_alloc(a, acc, in);
  }
  if (!init) return loop;
  kg_irstmt *seq = kg_ir_seq(a);
  kg_ir_seq_push(a, seq, init);
  kg_ir_seq_push(a, seq, loop);
  return seq;
}

/* ---- tensorize: one mma.sync per warp in place of the three innermost loops ---- */

/* Sets L->env for the stage's axes from the leaves' values (as build_store does, without LETs). */
static kg_irexpr **env_at(lctx *L, nest *n, kg_irexpr **leafval) {
  kg_sstage *st = n->st;
  kg_irexpr **val = iter_values(L, n, leafval);
  for (int r = 0; r < n->nroot; r++) {
    kg_irexpr *rel = val[st->roots[r]->id];
    L->env[kg_sstage_axis(st, r)->id] =
        rel ? kg_bounds_simplify(L->a, kg_ir_binary(L->a, KG_OP_ADD, n->dom_min[r], rel), NULL, 0) : NULL;
  }
  return val;
}

static void env_clear(lctx *L, nest *n) {
  for (int r = 0; r < n->nroot; r++) L->env[kg_sstage_axis(n->st, r)->id] = NULL;
}

/* The flat index of n's output element at the leaves' values lv (*guard: the condition the point needs, or NULL). */
static kg_irexpr *out_index_at(lctx *L, nest *n, kg_irexpr **lv, kg_irexpr **guard) {
  kg_irexpr **val = env_at(L, n, lv);
  kg_irexpr *ix = out_flat_index(L, n);
  *guard = build_guard(L, n, val);
  env_clear(L, n);
  return ix;
}

/* The element of read e (a load of an f16/bf16 buffer) at the leaves' values lv; prim names the step for the
 * message. */
static kg_irexpr *mma_operand(lctx *L, nest *n, kg_irexpr **lv, const kg_expr *e, kg_dtype t, const char *prim) {
  env_at(L, n, lv);
  kg_irexpr *x = lower_expr(L, e);
  env_clear(L, n);
  if (x->kind != KG_IRE_LOAD || x->load.buf->dtype != t)
    fail(L, "lower: %s: stage %s: operand %s is not read from a %s buffer (an inlined producer?)", prim, n->st->name,
         e->read.name ? e->read.name : "?", kg_dtype_names[t]);
  return x;
}

/* Is a stage computed at one of loops[0..3) of st? Fails L naming prim when so. */
static int attached_at_any(lctx *L, const kg_sstage *st, kg_iter *const *loops, const char *prim) {
  for (int i = 0; i < L->s->nstages; i++) {
    const kg_sstage *x = L->s->stages[i];
    if (x->attach == KG_ATTACH_AT && x->attach_stage == st &&
        (x->attach_iter == loops[0] || x->attach_iter == loops[1] || x->attach_iter == loops[2])) {
      fail(L, "lower: %s: stage %s: stage %s is computed at the loop %s", prim, st->name, x->name, x->attach_iter->name);
      return 1;
    }
  }
  return 0;
}

/* The elements of operand q's fragment (0: A, 1: B) that this lane loads, at the leaves' values base (the
 * tensorized loops' own values replaced): x[0..na) of A, x[0..nb) of B, in the PTX ISA's layout (groupID g = lane / 4, thread in group
 * tig = lane % 4; m16n8k16: A rows g and g + 8, columns 2 tig + {0, 1} and + 8, B rows 2 tig + {0, 1} and + 8,
 * column g; m16n8k8 (TF32): A rows g and g + 8, columns tig and tig + 4, B rows tig and tig + 4, column g), which are
 * exactly the loops' own points with the loop values substituted: the rows loop is g's high bit (row = 8 rows + g),
 * the columns loop the low bit of the column (column = 2 tig + cols). B's column g is another lane's: its column
 * loops take g's value in place of this lane's. */
static void mma_fragment_loads(lctx *L, nest *n, const kg_mma_plan *p, kg_irexpr **base, int q, kg_irexpr **x) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  kg_irexpr **lv = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  kg_irexpr *lane = base[p->lane->id];
  kg_irexpr *tig = kg_ir_binary(a, KG_OP_MOD, lane, kg_ir_int(a, 4));
  kg_irexpr *grp = kg_ir_binary(a, KG_OP_DIV, lane, kg_ir_int(a, 4));
  /* the reduction index of A's element e (B's: kb) in this lane: m16n8k16's pairs 2 tig + {0, 1} (+ 8), m16n8k8's
   * single elements tig (+ 4) */
  const int tf32 = p->kstep == 8, na = tf32 ? 4 : 8, nb = tf32 ? 2 : 4;
#define KAT(c) kg_ir_binary(a, KG_OP_ADD, tf32 ? tig : kg_ir_binary(a, KG_OP_MUL, tig, kg_ir_int(a, 2)), kg_ir_int(a, (c)))
  for (int e = 0; e < na && q == 0; e++) {
    memcpy(lv, base, sizeof(kg_irexpr *) * (size_t)(st->nall + 1));
    lv[p->rows->id] = kg_ir_int(a, tf32 ? e & 1 : (e >> 1) & 1);
    lv[p->cols->id] = kg_ir_int(a, 0);
    lv[p->k->id] = tf32 ? KAT(4 * (e >> 1)) : KAT((e & 1) + 8 * (e >> 2));
    x[e] = mma_operand(L, n, lv, p->a, p->dtype, "tensorize");
  }
  for (int e = 0; e < nb && q == 1; e++) {
    memcpy(lv, base, sizeof(kg_irexpr *) * (size_t)(st->nall + 1));
    lv[p->rows->id] = kg_ir_int(a, 0);
    lv[p->lane->id] = kg_ir_binary(a, KG_OP_DIV, lane, kg_ir_int(a, 8)); /* thread in group = g / 2 */
    lv[p->cols->id] = kg_ir_binary(a, KG_OP_MOD, grp, kg_ir_int(a, 2));
    lv[p->k->id] = tf32 ? KAT(4 * e) : KAT((e & 1) + 8 * (e >> 1));
    x[e] = mma_operand(L, n, lv, p->b, p->dtype, "tensorize");
  }
#undef KAT
}

/* The element of operand q (0: A, 1: B) at the leaves' values lv and, within the step's tile, outer index
 * 8 hi + lo (A: the row, lo < 8 its groupID; B: the column, hi 0) and reduction index k: the tensorized loops' values
 * that give it (A: rows = hi, lane = 4 lo; B: lane = lo / 2, cols = lo % 2, B's columns being the lanes' groups). */
static kg_irexpr *mma_element(lctx *L, nest *n, const kg_mma_plan *p, kg_irexpr **lv, int q, kg_irexpr *hi,
                              kg_irexpr *lo, kg_irexpr *k) {
  kg_arena *a = L->a;
  kg_irexpr *zero = kg_ir_int(a, 0);
  lv[p->rows->id] = q ? zero : hi;
  lv[p->lane->id] = q ? kg_ir_binary(a, KG_OP_DIV, lo, kg_ir_int(a, 2)) : kg_ir_binary(a, KG_OP_MUL, lo, kg_ir_int(a, 4));
  lv[p->cols->id] = q ? kg_ir_binary(a, KG_OP_MOD, lo, kg_ir_int(a, 2)) : zero;
  lv[p->k->id] = k;
  return mma_operand(L, n, lv, q ? p->b : p->a, p->dtype, "tensorize");
}

/* Is the difference y - x the constant d (after simplification)? */
static int differs_by(lctx *L, kg_irexpr *x, kg_irexpr *y, int64_t d) {
  int64_t v;
  return kg_ir_is_const(kg_bounds_simplify(L->a, kg_ir_binary(L->a, KG_OP_SUB, y, x), NULL, 0), &v) && v == d;
}

/* ldmatrix for operand q of the step at the leaves' values base (fragment-tile copies in place): the index of the
 * row this lane names (*src its buffer, *trans whether transposed), or NULL when the fragment cannot be loaded so.
 * A row of ldmatrix is 16 bytes of shared memory (per_row elements: 8 of 16 bits, or 4 f32 read as 16-bit pairs),
 * contiguous (differences 1.. along it, checked element by element) and 16-byte aligned (every coefficient of its
 * affine index and its constant multiples of per_row: the arrays start 16-byte aligned, pipeline rings hold slots of
 * a multiple of 32 elements). Lane (g, t) receives of matrix i the elements at its row g, 16-bit columns 2t and
 * 2t + 1 (transposed: rows 2t, 2t + 1, column g), which is the fragment of the PTX layout in either of two
 * orientations:
 * - contiguous along k (A as stored, B k-major; 16 and 32 bits): not transposed, the matrices' rows the outer index
 *   (A: 4 matrices, row l % 8 + 8 ((l / 8) % 2), k from per_row (l / 16); B: 2, column l % 8, k from
 *   per_row ((l / 8) % 2));
 * - contiguous along the outer index (A k-major, B as stored; 16 bits only, the transpose being of 16-bit elements):
 *   transposed, the matrices' rows k (A: k = l % 8 + 8 (l / 16), rows from 8 ((l / 8) % 2); B: k = l % 16). */
static kg_irexpr *mma_ldmatrix_row(lctx *L, nest *n, const kg_mma_plan *p, kg_irexpr **base, int q, kg_buffer **src,
                                   int *trans) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  const int tf32 = p->kstep == 8, per_row = tf32 ? 4 : 8;
  if (tf32 ? p->dtype != KG_DT_F32 : p->dtype != KG_DT_F16 && p->dtype != KG_DT_BF16) return NULL;
  kg_irexpr **lv = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  memcpy(lv, base, sizeof(kg_irexpr *) * (size_t)(st->nall + 1));
  kg_irexpr *l = base[p->lane->id];
#define I(v) kg_ir_int(a, (v))
#define B2(op, x, y) kg_ir_binary(a, op, (x), (y))
  for (int o = 0; o < 2 - tf32; o++) {
    /* A's matrices alternate between its two 8-row halves in both orientations */
    kg_irexpr *hi = q ? I(0) : B2(KG_OP_MOD, B2(KG_OP_DIV, l, I(8)), I(2)), *lo, *k;
    if (o == 0) {
      lo = B2(KG_OP_MOD, l, I(8));
      k = B2(KG_OP_MUL, q ? B2(KG_OP_MOD, B2(KG_OP_DIV, l, I(8)), I(2)) : B2(KG_OP_DIV, l, I(16)), I(per_row));
    } else {
      lo = I(0);
      k = q ? B2(KG_OP_MOD, l, I(16)) : B2(KG_OP_ADD, B2(KG_OP_MOD, l, I(8)), B2(KG_OP_MUL, B2(KG_OP_DIV, l, I(16)), I(8)));
    }
    kg_irexpr *row = mma_element(L, n, p, lv, q, hi, lo, k);
    for (int d = 1; d < per_row && row; d++) {
      kg_irexpr *x = o == 0 ? mma_element(L, n, p, lv, q, hi, lo, B2(KG_OP_ADD, k, I(d)))
                            : mma_element(L, n, p, lv, q, hi, I(d), k);
      if (row->kind != KG_IRE_LOAD || x->kind != KG_IRE_LOAD || x->load.buf != row->load.buf ||
          !differs_by(L, row->load.index, x->load.index, d))
        row = NULL;
    }
    if (!row || row->kind != KG_IRE_LOAD || row->load.buf->scope != KG_SCOPE_SHARED) continue;
    kg_affine f = kg_bounds_affine(a, row->load.index, NULL, 0);
    int aligned = f.ok && f.c % per_row == 0;
    for (int i = 0; i < f.n && aligned; i++) aligned = f.t[i].coef % per_row == 0;
    if (!aligned) continue;
    *src = row->load.buf;
    *trans = o;
    return row->load.index;
  }
#undef I
#undef B2
  return NULL;
}

/* The step's accumulators at the leaves' values base (cix[0..4)), after the checks that the tile is whole (no guard:
 * the far end of the k stretch included, for a reduction the step does not divide) and accumulates in f32. */
static void mma_accumulators(lctx *L, nest *n, const kg_mma_plan *p, kg_irexpr **base, kg_irexpr **cix) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  kg_irexpr **lv = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  for (int e = 0; e < 5; e++) {
    memcpy(lv, base, sizeof(kg_irexpr *) * (size_t)(st->nall + 1));
    lv[p->rows->id] = kg_ir_int(a, e < 4 ? e >> 1 : 0);
    lv[p->cols->id] = kg_ir_int(a, e < 4 ? e & 1 : 0);
    lv[p->k->id] = kg_ir_int(a, e < 4 ? 0 : p->kstep - 1);
    kg_irexpr *guard;
    kg_irexpr *ix = out_index_at(L, n, lv, &guard);
    if (e < 4) cix[e] = ix;
    if (guard)
      fail(L, "lower: tensorize: stage %s: its tile needs a guard (a split that does not divide, or a region past "
           "its tensor's edge); the tensor cores compute whole 16 x 8 x %d tiles", st->name, p->kstep);
  }
  if (n->out_buf->dtype != KG_DT_F32)
    fail(L, "lower: tensorize: stage %s: its accumulators are %s; they must be f32", st->name,
         kg_dtype_names[n->out_buf->dtype]);
}

/* The first of the warp's instruction-tile loops that build_mma takes over from leaf k on: with register
 * accumulators (n->mma_acc), the run of unrolled spatial loops (no thread, constant extents) that ends right outside
 * the three tensorized ones, when no stage is computed at any of them; nleaves - 3 when there is none. Leaves k..
 * are then built by build_mma, which loads each fragment once for the tiles that share it. */
static int mma_tiles_from(lctx *L, const nest *n, int k) {
  const kg_sstage *st = n->st;
  const int t = st->nleaves - 3;
  if (!n->mma_acc || k <= n->R || k >= t) return t;
  for (int j = k; j < t; j++) {
    const kg_iter *it = st->leaves[j];
    if (it->is_reduce || it->kind != KG_LOOP_UNROLLED || it->tag != KG_THREAD_NONE || n->sext[it->id]) return t;
  }
  for (int i = 0; i < L->s->nstages; i++) {
    const kg_sstage *x = L->s->stages[i];
    if (x->attach == KG_ATTACH_AT && x->attach_stage == st)
      for (int j = k; j < t; j++)
        if (x->attach_iter == st->leaves[j]) return t;
  }
  return k;
}

/* Unrolled copies of the tile loops in mask (leaves from..nleaves-3 of n, innermost last) around body. */
static kg_irstmt *mma_tile_loops(lctx *L, nest *n, int from, const unsigned char *mask, kg_irvar **vars,
                                 const char *suffix, kg_irstmt *body) {
  kg_sstage *st = n->st;
  for (int j = st->nleaves - 4; j >= from; j--)
    if (mask[j])
      body = kg_ir_for(L->a, vars[j], kg_ir_int(L->a, n->ext[st->leaves[j]->id]), KG_LOOP_UNROLLED, KG_THREAD_NONE,
                       kg_arena_printf(L->a, "%s%s", st->leaves[j]->name, suffix), st->name, body);
  return body;
}

/* Mixed-radix index over the tile loops in mask at their variables' values. */
static kg_irexpr *mma_tile_linear(lctx *L, nest *n, int from, const unsigned char *mask, kg_irvar **vars) {
  kg_irexpr *t = kg_ir_int(L->a, 0);
  for (int j = from; j < n->st->nleaves - 3; j++)
    if (mask[j])
      t = kg_ir_binary(L->a, KG_OP_ADD, kg_ir_binary(L->a, KG_OP_MUL, t, kg_ir_int(L->a, n->ext[n->st->leaves[j]->id])),
                       kg_ir_var(L->a, vars[j]));
  return t;
}

/* Replaces leaves k.. of n by the fragments' copies and KG_IRS_MMA steps: the three tensorized loops, and when k is
 * before them (mma_tiles_from) the warp's instruction-tile loops too. Then each fragment is loaded once for all the
 * tiles that read it: an A fragment depends on the tile loops A's index uses (the rows' tiles), B's on the columns'
 * ones, so a warp's tile of mt x nt steps loads mt A and nt B fragments instead of mt nt of each (the loads, not the
 * tensor cores, bound a step's issue rate); every fragment of the tile is loaded before the first step, which also
 * gives the loads of the next steps time to land. */
static kg_irstmt *build_mma(lctx *L, nest *n, int k) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  char err[512];
  kg_mma_plan p;
  if (L->target != KG_TARGET_CUDA) {
    fail(L, "lower: tensorize: stage %s: tensor cores are CUDA's (the C target has none)", st->name);
    return kg_ir_seq(a);
  }
  if (kg_sched_mma_plan(L->s, st, &p, err, sizeof err) != 0) {
    fail(L, "lower: %s", err);
    return kg_ir_seq(a);
  }
  if (n->ext[p.rows->id] != 2 || n->ext[p.cols->id] != 2 || n->ext[p.k->id] != p.kstep || n->ext[p.lane->id] != 32 ||
      n->sext[p.rows->id] || n->sext[p.cols->id] || n->sext[p.k->id] || n->sext[p.lane->id]) {
    fail(L, "lower: tensorize: stage %s: its loops span %lld x %lld x %lld over %lld lanes here, not 2 x 2 x %d over "
         "32", st->name, (long long)n->ext[p.rows->id], (long long)n->ext[p.cols->id], (long long)n->ext[p.k->id],
         (long long)n->ext[p.lane->id], p.kstep);
    return kg_ir_seq(a);
  }
  if (n->X >= 0 || n->red_buf || n->R < 0 || n->R >= st->nleaves - 3) {
    fail(L, "lower: tensorize: stage %s: the reduction must start outside the tensorized loops, in one thread",
         st->name);
    return kg_ir_seq(a);
  }
  kg_iter *const mloops[3] = {p.rows, p.cols, p.k};
  if (attached_at_any(L, st, mloops, "tensorize")) return kg_ir_seq(a);
  const int tf32 = p.kstep == 8, na = tf32 ? 4 : 8, nb = tf32 ? 2 : 4, t = st->nleaves - 3;
  /* the tile loops: their own variables for the steps, copies for each operand's loads */
  kg_irvar **cv[2];
  unsigned char *uses[2];
  int64_t count[2] = {1, 1};
  kg_irexpr *xs[2][8], *row[2] = {NULL, NULL};
  kg_buffer *src[2] = {NULL, NULL};
  int trans[2] = {0, 0};
  kg_irexpr **base = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  for (int j = 0; j < st->nleaves; j++) base[st->leaves[j]->id] = kg_ir_var(a, n->leafvar[j]);
  /* which tile loops each operand's index uses: its elements loaded with fresh copies of them (none when k is the
   * tensorized loops' first), then looked at */
  kg_irexpr **lv = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  memcpy(lv, base, sizeof(kg_irexpr *) * (size_t)(st->nall + 1));
  for (int q = 0; q < 2; q++) {
    cv[q] = KG_NEW_ARRAY(a, kg_irvar *, st->nleaves + 1);
    uses[q] = KG_NEW_ARRAY(a, unsigned char, st->nleaves + 1);
    for (int j = k; j < t; j++) {
      cv[q][j] = new_var(L, kg_arena_printf(a, "%s.%c", st->leaves[j]->name, q ? 'b' : 'a'), st->name);
      set_range(L, cv[q][j], 0, n->ext[st->leaves[j]->id] - 1);
      lv[st->leaves[j]->id] = kg_ir_var(a, cv[q][j]);
    }
    mma_fragment_loads(L, n, &p, lv, q, xs[q]);
    row[q] = mma_ldmatrix_row(L, n, &p, lv, q, &src[q], &trans[q]);
    unsigned char *mark = KG_NEW_ARRAY(a, unsigned char, L->nvars + 1);
    for (int j = k; j < t; j++) {
      mark[cv[q][j]->id] = 1;
      for (int e = 0; e < (q ? nb : na) && !uses[q][j]; e++) uses[q][j] = kg_ir_uses_marked(xs[q][e], mark, L->nvars);
      mark[cv[q][j]->id] = 0;
      if (uses[q][j]) count[q] *= n->ext[st->leaves[j]->id];
    }
  }
  kg_buffer *frag[2];
  for (int q = 0; q < 2; q++) {
    frag[q] = KG_NEW(a, kg_buffer);
    frag[q]->name = unique_name(L, q ? "kg_mma_b" : "kg_mma_a", NULL);
    frag[q]->id = L->nbuffers++;
    frag[q]->scope = KG_SCOPE_LOCAL;
    frag[q]->tensor = (q ? p.b : p.a)->read.tensor;
    frag[q]->dtype = p.dtype;
    frag[q]->size = (q ? nb : na) * count[q];
    frag[q]->param_index = -1;
  }
  kg_irstmt *seq = kg_ir_seq(a);
  kg_ir_seq_push(a, seq, kg_ir_comment(a, kg_arena_printf(a, "stage %s: loops %s, %s, %s as one mma.m16n8k%d (%s)%s",
                                                          st->name, p.rows->name, p.cols->name, p.k->name, p.kstep,
                                                          tf32 ? "tf32" : kg_dtype_names[p.dtype],
                                                          k < t ? " a tile, each fragment loaded once" : "")));
  kg_irexpr *off[2] = {kg_ir_int(a, 0), kg_ir_int(a, 0)};
  for (int q = 0; q < 2; q++) {
    kg_irstmt *loads = kg_ir_seq(a);
    kg_irexpr *at = k < t ? kg_ir_binary(a, KG_OP_MUL, mma_tile_linear(L, n, k, uses[q], cv[q]), kg_ir_int(a, q ? nb : na))
                          : kg_ir_int(a, 0);
    if (row[q])
      kg_ir_seq_push(a, loads, kg_ir_ldmatrix(a, frag[q], at, src[q], row[q], q ? 2 : 4, trans[q], st->name));
    else
      for (int e = 0; e < (q ? nb : na); e++)
        kg_ir_seq_push(a, loads, kg_ir_store(a, frag[q], kg_ir_binary(a, KG_OP_ADD, at, kg_ir_int(a, e)), xs[q][e]));
    kg_ir_seq_push(a, seq, mma_tile_loops(L, n, k, uses[q], cv[q], q ? ".b" : ".a", loads));
    if (k < t)
      off[q] = kg_ir_binary(a, KG_OP_MUL, mma_tile_linear(L, n, k, uses[q], n->leafvar), kg_ir_int(a, q ? nb : na));
  }
  kg_irexpr *cix[4];
  mma_accumulators(L, n, &p, base, cix);
  kg_irstmt *step;
  if (n->mma_acc) {
    kg_irexpr *ai[4];
    kg_irexpr *t4 = kg_ir_binary(a, KG_OP_MUL, mma_tile_index(L, n, base), kg_ir_int(a, 4));
    for (int e = 0; e < 4; e++) ai[e] = kg_ir_binary(a, KG_OP_ADD, t4, kg_ir_int(a, e));
    n->mma_seen = 1;
    step = kg_ir_mma(a, frag[0], off[0], frag[1], off[1], n->mma_acc, ai, p.dtype, st->name);
  } else {
    step = kg_ir_mma(a, frag[0], off[0], frag[1], off[1], n->out_buf, cix, p.dtype, st->name);
  }
  /* the steps, in the tile loops' own order and names */
  for (int j = t - 1; j >= k; j--) {
    kg_iter *it = st->leaves[j];
    step = kg_ir_for(a, n->leafvar[j], kg_ir_int(a, n->ext[it->id]), KG_LOOP_UNROLLED, KG_THREAD_NONE, it->name,
                     st->name, step);
  }
  kg_ir_seq_push(a, seq, step);
  return kg_ir_alloc(a, frag[0], kg_ir_alloc(a, frag[1], seq));
}

/* ---- bfdot: bf16 pair dot products in place of the three innermost loops (C target) ---- */


/* Does e use a variable other than the dynamic sizes'? */
static int uses_loop_vars(lctx *L, const kg_irexpr *e) {
  unsigned char *mark = KG_NEW_ARRAY(L->a, unsigned char, L->nvars + 1);
  memset(mark, 1, (size_t)L->nvars + 1);
  for (int i = 0; i < L->s->prog->nsizes; i++)
    if (L->size_var[i]) mark[L->size_var[i]->id] = 0;
  return kg_ir_uses_marked(e, mark, L->nvars);
}

/* Is it made of a root axis by splits only? Then every index is affine in its value, with a coefficient that the
 * other loops do not change. */
static int split_only(const kg_iter *it) {
  while (it && it->origin != KG_ITER_ROOT) {
    if (it->origin == KG_ITER_FUSED) return 0;
    it = it->split_parent;
  }
  return it != NULL;
}

/* The stride of an index along one of the tile's loops: to - from, the index one step along it and at its origin,
 * simplified; invariant when it uses no variable but the dynamic sizes'. The simplifier does not expand products,
 * so a dynamic stride ((r + 1) K - r K) may keep the other loops' variables: where the loop is affine (split_only)
 * the same difference with every loop of the nest at 0 (zfrom, zto) is the stride. Else *ok is cleared (an index
 * not affine in the loop: a fused loop's division). */
static kg_irexpr *stride_of(lctx *L, kg_irexpr *from, kg_irexpr *to, kg_irexpr *zfrom, kg_irexpr *zto, int affine,
                            int *ok) {
  kg_irexpr *d = kg_bounds_simplify(L->a, kg_ir_binary(L->a, KG_OP_SUB, to, from), NULL, 0);
  if (!uses_loop_vars(L, d)) return d;
  if (affine) {
    d = kg_bounds_simplify(L->a, kg_ir_binary(L->a, KG_OP_SUB, zto, zfrom), NULL, 0);
    if (!uses_loop_vars(L, d)) return d;
  }
  *ok = 0;
  return d;
}

/* Is e the constant c? */
static int is_const_value(const kg_irexpr *e, int64_t c) {
  int64_t v;
  return kg_ir_is_const(e, &v) && v == c;
}

/* e - b0 with the floor divisions and modulos that provably fold (kg_bounds_divmod) folded, simplified; NULL when
 * it still depends on a loop variable. */
static kg_irexpr *fixed_offset(lctx *L, kg_irexpr *e, kg_irexpr *b0) {
  kg_var_ranges none;
  memset(&none, 0, sizeof none);
  kg_irexpr *d = kg_bounds_divmod(L->a, kg_ir_binary(L->a, KG_OP_SUB, e, b0), NULL, 0, &none);
  d = kg_bounds_simplify(L->a, d, NULL, 0);
  return uses_loop_vars(L, d) ? NULL : d;
}

/* The column operand stored in pairs of k (a packed copy laid out [k/2][column][2], split_storage by 2 of its k
 * dimension, that half innermost): its element (k, c) of the tile at b0 + (k / 2) P + 2 c + k % 2. Each vector of
 * 16 pairs is then one load, where the contiguous layout interleaves two rows per vector at every pair of k (a
 * permute per vector; 2.76 against 3.53 G dot products a second on one Zen 5 core, a 6 x 64 tile from L1). Not
 * affine in k, so the zero-loop shortcut of stride_of does not apply: every offset is taken with the nest's own
 * variables, and holds only where the floor divisions fold for every value of them (an even origin of the pairs).
 * Checked at the first and last column of every vector for both halves of the first and the last pair. Returns P,
 * or NULL when the operand is not so laid out. */
static kg_irexpr *pair_stride(lctx *L, nest *n, kg_irexpr *const *base, const kg_bfdot_plan *p, int64_t C, int64_t K,
                              kg_irexpr *b0) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  kg_irexpr **lv = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  kg_irexpr *P = NULL;
  /* (column, k) points: the next pair first (its offset is P), then the others against (k / 2) P + 2 c + k % 2 */
  const int64_t ks[4] = {2, 0, 1, K - 1};
  for (int q = 0; q < 4; q++)
    for (int64_t v = 0; v < (q ? C / 16 : 1); v++)
      for (int e = 0; e < (q ? 2 : 1); e++) {
        int64_t c = 16 * v + 15 * e;
        memcpy(lv, base, sizeof(kg_irexpr *) * (size_t)(st->nall + 1));
        lv[p->rows->id] = kg_ir_int(a, 0);
        lv[p->cols->id] = kg_ir_int(a, c);
        lv[p->k->id] = kg_ir_int(a, ks[q]);
        kg_irexpr *x = mma_operand(L, n, lv, p->b, KG_DT_BF16, "bfdot");
        if (L->failed) return NULL;
        kg_irexpr *d = fixed_offset(L, x->load.index, b0);
        if (!d) return NULL;
        if (q == 0) {
          P = d;
          continue;
        }
        kg_irexpr *want = kg_ir_binary(a, KG_OP_ADD, kg_ir_binary(a, KG_OP_MUL, kg_ir_int(a, ks[q] / 2), P),
                                       kg_ir_int(a, 2 * c + ks[q] % 2));
        if (!is_const_value(kg_bounds_simplify(a, kg_ir_binary(a, KG_OP_SUB, d, want), NULL, 0), 0)) return NULL;
      }
  return P;
}

/* Replaces leaves k.. (the rows, columns and reduction loops of a `bfdot` step) by one KG_IRS_BFDOT: the elements
 * at row 0, column 0, k 0 and the constant strides, read off the loops' own index expressions at neighbouring
 * points (lowering's indices are affine in the loop values). A tile that may be partial (a split that does not
 * divide, a region past its tensor's edge) is versioned: where its first and last points are inside (the indices
 * are monotone in the loop values, so then all are), the dot products; elsewhere, when the rows loop is the
 * outermost of the three, that loop around dot products of one row (one_row: leaves k.. are the columns and k,
 * the row its loop's variable; a row past the edge does nothing), themselves versioned against the plain loops;
 * else the plain loops. A tile of 6 rows over M = 1024 then ends in 4 rows of vector dot products rather than in
 * scalar code (the plain loops keep k innermost, a float reduction the compiler does not vectorize). */
static kg_irstmt *build_bfdot(lctx *L, nest *n, int k, int one_row) {
  kg_arena *a = L->a;
  kg_sstage *st = n->st;
  char err[512];
  kg_bfdot_plan p;
  if (L->target != KG_TARGET_C) {
    fail(L, "lower: bfdot: stage %s: bf16 dot products are the C target's (a CPU's)", st->name);
    return kg_ir_seq(a);
  }
  if (kg_sched_bfdot_plan(st, &p, err, sizeof err) != 0) {
    fail(L, "lower: %s", err);
    return kg_ir_seq(a);
  }
  int64_t R = one_row ? 1 : n->ext[p.rows->id], C = n->ext[p.cols->id], K = n->ext[p.k->id];
  if ((!one_row && n->sext[p.rows->id]) || n->sext[p.cols->id] || n->sext[p.k->id] || C % 16 || K % 2 || R < 1) {
    fail(L, "lower: bfdot: stage %s: its loops span %lld x %lld x %lld here (a dynamic or clipped extent); the dot "
         "products need whole 16-column vectors and pairs of k", st->name, (long long)R, (long long)C, (long long)K);
    return kg_ir_seq(a);
  }
  if (n->X >= 0 || n->red_buf || n->R < 0 || n->R >= k) {
    fail(L, "lower: bfdot: stage %s: the reduction must start outside the dot products' loops", st->name);
    return kg_ir_seq(a);
  }
  kg_iter *const loops[3] = {p.rows, p.cols, p.k};
  if (attached_at_any(L, st, loops, "bfdot")) return kg_ir_seq(a);
  if (n->out_buf->dtype != KG_DT_F32) {
    fail(L, "lower: bfdot: stage %s: its accumulators are %s; they must be f32", st->name,
         kg_dtype_names[n->out_buf->dtype]);
    return kg_ir_seq(a);
  }
  kg_irexpr **base = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  for (int j = 0; j < st->nleaves; j++) base[st->leaves[j]->id] = kg_ir_var(a, n->leafvar[j]);
  kg_irexpr **lv = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  /* points (row, column, k): the origin, a step along each, and the far corner (for the guard) */
  static const int64_t pts[5][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {-1, -1, -1}};
  kg_irexpr *ci[5], *ai[5], *bi[5], *gd[5];
  kg_buffer *ab = NULL, *bb = NULL;
  for (int q = 0; q < 5 && !L->failed; q++) {
    memcpy(lv, base, sizeof(kg_irexpr *) * (size_t)(st->nall + 1));
    lv[p.rows->id] = one_row ? base[p.rows->id] : kg_ir_int(a, pts[q][0] < 0 ? R - 1 : pts[q][0]);
    lv[p.cols->id] = kg_ir_int(a, pts[q][1] < 0 ? C - 1 : pts[q][1]);
    lv[p.k->id] = kg_ir_int(a, pts[q][2] < 0 ? K - 1 : pts[q][2]);
    ci[q] = out_index_at(L, n, lv, &gd[q]);
    kg_irexpr *x = mma_operand(L, n, lv, p.a, KG_DT_BF16, "bfdot"), *y = mma_operand(L, n, lv, p.b, KG_DT_BF16, "bfdot");
    if (L->failed) return kg_ir_seq(a);
    ab = x->load.buf;
    bb = y->load.buf;
    ai[q] = x->load.index;
    bi[q] = y->load.index;
  }
  kg_irexpr *guard = gd[0] && gd[4] ? kg_ir_binary(a, KG_OP_AND, gd[0], gd[4]) : gd[0] ? gd[0] : gd[4];
  /* the origin and the unit steps again with every loop of the nest at 0 (stride_of) */
  kg_irexpr *zc[4], *za[4], *zb[4], *zg;
  for (int q = 0; q < 4 && !L->failed; q++) {
    for (int j = 0; j < st->nleaves; j++) lv[st->leaves[j]->id] = kg_ir_int(a, 0);
    lv[p.rows->id] = kg_ir_int(a, pts[q][0]);
    lv[p.cols->id] = kg_ir_int(a, pts[q][1]);
    lv[p.k->id] = kg_ir_int(a, pts[q][2]);
    zc[q] = out_index_at(L, n, lv, &zg);
    za[q] = mma_operand(L, n, lv, p.a, KG_DT_BF16, "bfdot")->load.index;
    zb[q] = mma_operand(L, n, lv, p.b, KG_DT_BF16, "bfdot")->load.index;
  }
  if (L->failed) return kg_ir_seq(a);
  int ok = 1, ar = split_only(p.rows), ac = split_only(p.cols), ak = split_only(p.k);
  kg_irstmt f;
  memset(&f, 0, sizeof f);
  f.bfdot.c_row = stride_of(L, ci[0], ci[1], zc[0], zc[1], ar, &ok);
  f.bfdot.a_row = stride_of(L, ai[0], ai[1], za[0], za[1], ar, &ok);
  f.bfdot.a_k = stride_of(L, ai[0], ai[3], za[0], za[3], ak, &ok);
  /* the column operand's strides apart: stored in pairs, it is not affine in k (pair_stride takes over) */
  int okb = 1, okk = 1;
  f.bfdot.b_k = stride_of(L, bi[0], bi[3], zb[0], zb[3], ak, &okk);
  int contiguous = is_const_value(stride_of(L, ci[0], ci[2], zc[0], zc[2], ac, &ok), 1);
  int bcont = is_const_value(stride_of(L, bi[0], bi[2], zb[0], zb[2], ac, &okb), 1) && okb;
  kg_irexpr *pairs = contiguous && !(bcont && okk) ? pair_stride(L, n, base, &p, C, K, bi[0]) : NULL;
  if (L->failed) return kg_ir_seq(a);
  if (pairs) {
    f.bfdot.b_k = pairs;
    f.bfdot.b_pairs = 1;
    bcont = okk = 1;
  }
  ok = ok && okk;
  contiguous = contiguous && bcont;
  if (!ok || !contiguous) {
    fail(L, "lower: bfdot: stage %s: %s", st->name,
         !ok ? "an index moves by a varying amount along the rows, columns or k (not affine in the tile's loops)"
             : "the accumulators and the column operand must be contiguous along the columns (or the column "
               "operand stored in pairs of k: a copy split_storage'd by 2 along k, that half innermost)");
    return kg_ir_seq(a);
  }
  f.bfdot.a = ab;
  f.bfdot.b = bb;
  f.bfdot.c = n->out_buf;
  f.bfdot.a_index = ai[0];
  f.bfdot.b_index = bi[0];
  f.bfdot.c_index = ci[0];
  f.bfdot.rows = R;
  f.bfdot.cols = C;
  f.bfdot.k = K;
  f.bfdot.stage_name = st->name;
  kg_irstmt *seq = kg_ir_seq(a);
  kg_ir_seq_push(a, seq, kg_ir_comment(a, kg_arena_printf(a, "stage %s: loops %s, %s, %s as bf16 pair dot products%s",
                                                          st->name, p.rows->name, p.cols->name, p.k->name,
                                                          one_row ? " (one row)" : "")));
  kg_ir_seq_push(a, seq, kg_ir_bfdot(a, &f));
  if (!guard) return seq;
  /* the partial tiles: row by row where the rows loop is the outermost (then back here, one_row), else plain */
  int saved = n->plain;
  n->plain = !one_row && st->leaves[k] == p.rows ? 2 : 1;
  kg_irstmt *plain = build_from(L, n, k);
  n->plain = saved;
  /* one row: nothing at all where its first point is outside (a row past the edge; the indices are monotone), so
   * that the rows loop, unclipped around this test, costs no plain loops over nothing */
  if (one_row && gd[0]) plain = kg_ir_if(a, gd[0], plain, NULL);
  return kg_ir_if(a, guard, seq, plain);
}

/* One stage's nest over the domain [dom_min, dom_min + dom_ext) of each root axis; rg: its region buffer when
 * attached (NULL: its global buffer). */
static kg_irstmt *lower_stage(lctx *L, kg_sstage *st, kg_irexpr **dom_min, int64_t *dom_ext, kg_irexpr **dom_sext,
                              region *rg) {
  kg_arena *a = L->a;
  nest n;
  memset(&n, 0, sizeof n);
  n.st = st;
  n.nroot = st->nax + st->nrax;
  n.dom_min = dom_min;
  n.dom_ext = dom_ext;
  n.dom_sext = dom_sext;
  n.ext = KG_NEW_ARRAY(a, int64_t, st->nall + 1);
  n.sext = KG_NEW_ARRAY(a, kg_irexpr *, st->nall + 1);
  n.out_region = rg;
  n.out_buf = rg ? rg->buf : L->tbuf[st->out->id];
  if (!n.out_buf) {
    fail(L, "lower: stage %s has no buffer", st->name);
    return kg_ir_seq(a);
  }
  unsigned char *done = KG_NEW_ARRAY(a, unsigned char, st->nall + 1);
  for (int i = 0; i < st->nall; i++) iter_ext(L, &n, st->all[i], done);
  n.leafvar = KG_NEW_ARRAY(a, kg_irvar *, st->nleaves + 1);
  n.R = -1;
  n.X = -1;
  for (int k = 0; k < st->nleaves; k++) {
    kg_iter *it = st->leaves[k];
    n.leafvar[k] = new_var(L, it->name, st->name);
    set_range(L, n.leafvar[k], 0, n.ext[it->id] - 1);
    if (it->is_reduce && n.R < 0) n.R = k;
    if (it->is_reduce && (it->kind == KG_LOOP_PARALLEL || it->kind == KG_LOOP_VECTORIZED))
      fail(L, "lower: stage %s: loop %s is a reduction loop and cannot be %s", st->name, it->name,
           kg_loop_kind_names[it->kind]);
  }
  if (st->red != KG_RED_NONE && n.R < 0 && st->nrax > 0)
    fail(L, "lower: stage %s: no reduction loop", st->name);
  if (L->target == KG_TARGET_CUDA)
    for (int k = 0; k < st->nleaves; k++)
      if (st->leaves[k]->is_reduce && kg_thread_tag_is_thread(st->leaves[k]->tag)) n.X = k;
  return build_from(L, &n, 0);
}

/* ---- the function ---- */

/* The CUDA rules for one stage's bound loops (see codegen/codegen.h): a per-thread (attached, non-shared) stage
 * binds nothing; only root stages bind block indices; one loop per tag; a reduction loop bound to a thread index
 * is a cross-thread reduction, which needs every spatial loop outside the first reduction loop and takes one
 * thread-bound reduction loop. */
static int check_cuda_stage(lctx *L, const kg_sstage *st) {
  int first_red = -1;
  for (int k = 0; k < st->nleaves; k++) {
    const kg_iter *it = st->leaves[k];
    if (it->is_reduce && first_red < 0) first_red = k;
    if (it->tag == KG_THREAD_NONE || it->tag == KG_THREAD_VTHREAD) continue;
    if (st->attach == KG_ATTACH_AT && st->scope != KG_SCOPE_SHARED) {
      fail(L,
           "lower: stage %s: loop %s is bound to %s, but the stage is computed per thread (%s scope, at %s.%s); "
           "only shared-scope stages bind thread indices",
           st->name, it->name, kg_thread_tag_names[it->tag], kg_scope_names[st->scope], st->attach_stage->name,
           st->attach_iter->name);
      return -1;
    }
    if (kg_thread_tag_is_block(it->tag) && st->attach != KG_ATTACH_ROOT) {
      fail(L, "lower: stage %s: loop %s is bound to %s, but only a kernel's root stage binds block indices",
           st->name, it->name, kg_thread_tag_names[it->tag]);
      return -1;
    }
    if (kg_thread_tag_is_block(it->tag) && it->is_reduce) {
      fail(L, "lower: stage %s: reduction loop %s is bound to %s; a reduction cannot be split across blocks",
           st->name, it->name, kg_thread_tag_names[it->tag]);
      return -1;
    }
    for (int j = 0; j < k; j++)
      if (st->leaves[j]->tag == it->tag) {
        fail(L, "lower: stage %s: loops %s and %s are both bound to %s", st->name, st->leaves[j]->name, it->name,
             kg_thread_tag_names[it->tag]);
        return -1;
      }
  }
  int nx = 0;
  const kg_iter *x = NULL;
  for (int k = 0; k < st->nleaves; k++) {
    const kg_iter *it = st->leaves[k];
    if (it->is_reduce && kg_thread_tag_is_thread(it->tag)) {
      if (nx++) {
        fail(L, "lower: stage %s: reduction loops %s and %s are both bound to thread indices; a cross-thread "
             "reduction takes exactly one", st->name, x->name, it->name);
        return -1;
      }
      x = it;
    }
  }
  if (!x) return 0;
  for (int k = first_red + 1; k < st->nleaves; k++)
    if (!st->leaves[k]->is_reduce) {
      fail(L, "lower: stage %s: cross-thread reduction over loop %s: spatial loop %s is inside the first reduction "
           "loop %s; reorder it outside", st->name, x->name, st->leaves[k]->name, st->leaves[first_red]->name);
      return -1;
    }
  for (int k = first_red; k < st->nleaves; k++)
    if (st->leaves[k]->kind == KG_LOOP_VECTORIZED || st->leaves[k]->kind == KG_LOOP_PARALLEL) {
      fail(L, "lower: stage %s: loop %s is a reduction loop and cannot be %s", st->name, st->leaves[k]->name,
           kg_loop_kind_names[st->leaves[k]->kind]);
      return -1;
    }
  return 0;
}

/* Elements of a global tensor: at the sizes' hi, and (dyn non-NULL) as an expression when it follows them. */
static int64_t tensor_elems(lctx *L, const kg_tensor *t, kg_irexpr **dyn) {
  int64_t n = 1;
  kg_irexpr *e = NULL;
  for (int d = 0; d < t->ndim; d++) {
    int k = t->dyn[d] - 1;
    int64_t x = k >= 0 && L->size_var[k] ? L->p->sizes[k].hi : t->shape[d];
    if (__builtin_mul_overflow(n, x, &n)) {
      fail(L, "lower: tensor %s: too many elements", t->name);
      n = 1;
    }
    if (k >= 0 && L->size_var[k]) e = kg_ir_int(L->a, 1);
  }
  if (e && dyn) {
    for (int d = 0; d < t->ndim; d++) e = kg_ir_binary(L->a, KG_OP_MUL, e, dim_expr(L, t, d));
    *dyn = e;
  }
  return n;
}

static int check_target(lctx *L) {
  const kg_schedule *s = L->s;
  const kg_sstage *broken = kg_schedule_find_broken_attachment(s);
  if (broken) {
    fail(L, "lower: stage %s: computed at %s.%s, but a stage that reads it is computed outside that loop",
         broken->name, broken->attach_stage ? broken->attach_stage->name : "?",
         broken->attach_iter ? broken->attach_iter->name : "?");
    return -1;
  }
  for (int i = 0; i < s->nstages; i++) {
    kg_sstage *st = s->stages[i];
    if (st->attach == KG_ATTACH_INLINE) continue;
    if (st->attach == KG_ATTACH_AT) {
      if (!st->attach_stage || st->attach_stage->attach == KG_ATTACH_INLINE || !st->attach_iter ||
          kg_sstage_leaf_index(st->attach_stage, st->attach_iter) < 0) {
        fail(L, "lower: stage %s: its attach point is not a loop of a computed stage", st->name);
        return -1;
      }
    }
    if (L->target == KG_TARGET_CUDA) {
      /* refused rather than ignored: a trace that asks for it was made for the CPU */
      if (st->stream) {
        fail(L, "lower: stage %s: stream (non-temporal stores) is available on the C target only", st->name);
        return -1;
      }
      if (check_cuda_stage(L, st)) return -1;
      continue;
    }
    if (st->scope == KG_SCOPE_SHARED) {
      fail(L, "lower: stage %s: shared storage is not available on the C target", st->name);
      return -1;
    }
    for (int k = 0; k < st->nleaves; k++) {
      kg_iter *it = st->leaves[k];
      if (it->kind == KG_LOOP_BOUND || it->tag != KG_THREAD_NONE) {
        fail(L, "lower: stage %s: loop %s is bound to %s, which the C target cannot run", st->name, it->name,
             kg_thread_tag_names[it->tag]);
        return -1;
      }
    }
  }
  return 0;
}

kg_lowered *kg_lower(const kg_schedule *s, kg_target_kind target, kg_arena *a, char *err, size_t errlen) {
  lctx Lc, *L = &Lc;
  memset(L, 0, sizeof *L);
  L->s = s;
  L->p = s->prog;
  L->target = target;
  L->a = a;
  L->err = err;
  L->errlen = errlen;
  if (err && errlen) err[0] = 0;
  int nt = s->n_tensors > 0 ? s->n_tensors : 1;
  L->tbuf = KG_NEW_ARRAY(a, kg_buffer *, nt);
  L->tstage = KG_NEW_ARRAY(a, kg_sstage *, nt);
  L->bind = KG_NEW_ARRAY(a, region *, nt);
  L->env = KG_NEW_ARRAY(a, kg_irexpr *, s->n_ivars > 0 ? s->n_ivars : 1);
  for (int i = 0; i < s->nstages; i++) {
    kg_sstage *st = s->stages[i];
    if (st->out->id < 0 || st->out->id >= s->n_tensors) {
      fail(L, "lower: stage %s: bad tensor id", st->name);
      return NULL;
    }
    L->tstage[st->out->id] = st;
  }
  if (check_target(L)) return NULL;

  kg_lowered *f = KG_NEW(a, kg_lowered);
  L->f = f;
  f->name = L->p->def ? L->p->def->name : "kernel";
  f->target = target;
  const kg_program *p = L->p;
  /* Dynamic sizes first, so that they keep their own names (the parameters a user passes). */
  L->size_var = KG_NEW_ARRAY(a, kg_irvar *, p->nsizes + 1);
  int ndyn = 0;
  for (int k = 0; k < p->nsizes; k++) ndyn += p->sizes[k].dynamic != 0;
  f->size_vars = KG_NEW_ARRAY(a, kg_irvar *, ndyn + 1);
  f->size_ids = KG_NEW_ARRAY(a, int, ndyn + 1);
  f->size_lo = KG_NEW_ARRAY(a, int64_t, ndyn + 1);
  f->size_hi = KG_NEW_ARRAY(a, int64_t, ndyn + 1);
  f->size_value = KG_NEW_ARRAY(a, int64_t, ndyn + 1);
  for (int k = 0; k < p->nsizes; k++) {
    if (!p->sizes[k].dynamic) continue;
    kg_irvar *v = new_var(L, p->sizes[k].name, "size");
    set_range(L, v, p->sizes[k].lo, p->sizes[k].hi);
    L->size_var[k] = v;
    f->size_vars[f->nsize_vars] = v;
    f->size_ids[f->nsize_vars] = k;
    f->size_lo[f->nsize_vars] = p->sizes[k].lo;
    f->size_value[f->nsize_vars] = p->sizes[k].value;
    f->size_hi[f->nsize_vars++] = p->sizes[k].hi;
  }
  f->nparams = p->ninputs + p->noutputs;
  f->params = KG_NEW_ARRAY(a, kg_buffer *, f->nparams + 1);
  for (int i = 0; i < f->nparams; i++) {
    kg_tensor *t = i < p->ninputs ? p->inputs[i] : p->outputs[i - p->ninputs];
    kg_buffer *b = new_buffer(L, t, KG_SCOPE_GLOBAL, tensor_elems(L, t, NULL), NULL);
    b->param_index = i;
    b->is_input = i < p->ninputs;
    f->params[i] = b;
    if (t->id >= 0 && t->id < s->n_tensors) L->tbuf[t->id] = b;
  }
  f->temps = KG_NEW_ARRAY(a, kg_buffer *, s->nstages + 1);
  for (int i = 0; i < s->nstages; i++) {
    kg_sstage *st = s->stages[i];
    if (st->attach != KG_ATTACH_ROOT || L->tbuf[st->out->id]) continue;
    kg_buffer *b = new_buffer(L, st->out, KG_SCOPE_GLOBAL, 1, NULL);
    b->size = tensor_elems(L, st->out, &b->dyn_size);
    f->temps[f->ntemps++] = b;
    L->tbuf[st->out->id] = b;
  }
  f->body = kg_ir_seq(a);
  int *min_blocks = KG_NEW_ARRAY(a, int, s->nstages + 1), nroot = 0; /* per body item: its launch_bounds */
  for (int i = 0; i < s->nstages && !L->failed; i++) {
    kg_sstage *st = s->stages[i];
    if (st->attach != KG_ATTACH_ROOT) continue;
    min_blocks[nroot++] = st->min_blocks;
    kg_irexpr **dmin, **dsext;
    int64_t *dext;
    root_domain(L, st, NULL, &dmin, &dext, &dsext);
    /* one item per root stage (the CUDA printer makes a kernel of each), its comment inside */
    kg_irstmt *item = kg_ir_seq(a);
    kg_ir_seq_push(a, item, kg_ir_comment(a, kg_arena_printf(a, "stage %s", st->name)));
    kg_ir_seq_push(a, item, lower_stage(L, st, dmin, dext, dsext, NULL));
    kg_ir_seq_push(a, f->body, item);
  }
  /* CUDA keeps the guards: a thread-bound loop cannot change its extent per block */
  if (!L->failed && target == KG_TARGET_C) kg_lower_tighten(a, f->body, &L->ranges, L->nvars);
  f->n_buffers = L->nbuffers;
  f->n_vars = L->nvars;
  if (L->failed) return NULL;
  /* after tightening, whose ragged extents it versions; the IR is then what the C printer prints */
  if (target == KG_TARGET_C) kg_lower_regacc(a, f);
  if (target == KG_TARGET_C) kg_lower_initfold(a, f);
  if (target == KG_TARGET_C) kg_lower_recip(a, f, target);
  if (target == KG_TARGET_C) kg_lower_unroll_index(a, f);
  if (target == KG_TARGET_C) kg_lower_transpose(a, f);
  if (target == KG_TARGET_C) kg_lower_prefetch(a, f);
  /* before the writer: the copies it makes are stores like any other */
  if (target == KG_TARGET_CUDA && kg_lower_pipeline(a, f, L->err, L->errlen) != 0) return NULL;
  if (target == KG_TARGET_CUDA) kg_lower_writer(a, f);
  if (target == KG_TARGET_CUDA) kg_lower_recip(a, f, target);
  /* last: the guards it adds wrap whole loops, which the passes before would have to see through */
  if (target == KG_TARGET_CUDA && kg_lower_launch(a, f, L->err, L->errlen) != 0) return NULL;
  for (int k = 0; target == KG_TARGET_CUDA && k < f->nlaunch && k < nroot; k++) f->launch[k].min_blocks = min_blocks[k];
#ifndef NDEBUG
  /* One linear walk, small next to lowering itself: every build without NDEBUG (the default, and every test)
   * checks what the passes made, so a broken invariant is a lowering error here instead of wrong code later. */
  char verr[512];
  if (kg_ir_verify(f, verr, sizeof verr) != 0) {
    fail(L, "lower: internal error: %s", verr);
    return NULL;
  }
#endif
  return f;
}
