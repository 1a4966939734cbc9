/* The IR verifier: the invariants of lowered IR that the passes after lowering and the printers rely on, checked
 * in one walk. It never aborts: the first violation becomes a message naming the node and its problem.
 *
 * Checked:
 * - the function: body is a SEQ (one item per kernel on CUDA); parameters, temporaries and allocated buffers have
 *   ids below n_buffers and names unique in the function; variables ids below n_vars, one name per variable;
 * - scopes: every variable an expression uses is a dynamic size, the variable of an enclosing loop, or a LET
 *   earlier in an enclosing SEQ; no definition shadows a variable in scope (the printers declare each as a C
 *   local); a loop's extent does not use the loop's own variable;
 * - buffers: every load and store names a parameter, a temporary or a buffer whose ALLOC encloses it; no store to
 *   an input; allocations are not nested within themselves; a constant index lies inside the buffer;
 * - types: indices, extents and LET values are INT, stored values F32, conditions BOOL; constant loop extents are
 *   positive; expression nodes are well formed (call arity, select branch types);
 * - targets: on C no loop is bound to a thread tag, no allocation is shared, no cross-thread reduction; on CUDA
 *   allocations are shared or local (a shared one may sit inside thread loops: the printer declares it per block
 *   and the threads fill it together), a cross-thread reduction reduces a local one-element buffer across a
 *   threadIdx tag; no allocation is of global scope (global temporaries are f->temps); a register accumulator
 *   (regacc.c) is a local allocation on the C target that names the buffer it accumulates; a streamed
 *   (non-temporal) store is a C-target store to an output parameter;
 * - barriers and cross-thread reductions: every thread of the block must reach them, so none sits under an IF
 *   whose condition, or in a loop whose extent, depends on a threadIdx-bound loop variable (directly or through
 *   LETs) or on a threadIdx (KG_IRE_THREAD: the single-writer and launch guards);
 * - launch shapes (CUDA, lower/launch.c): one per kernel; in a kernel whose shape is known and within the launch
 *   limits, a loop bound to a block or thread tag with a constant extent below the tag's launched extent is the
 *   loop of a launch guard (threads past its extent skip it), and every cross-thread reduction has a strategy
 *   (shared scratch exactly for the strategies that combine through shared memory). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strset.h"
#include "ir.h"

typedef struct vctx {
  const kg_lowered *f;
  char *err;
  size_t errlen;
  int failed;
  int nvars, nbufs;
  const kg_irvar **var_of_id;    /* by var id: the variable object seen with it */
  const kg_buffer **buf_of_id;   /* by buffer id */
  unsigned char *in_scope;       /* by var id */
  unsigned char *thread_dep;     /* by var id: depends on a threadIdx-bound loop variable */
  unsigned char *buf_live;       /* by buffer id: a parameter, temporary or enclosing ALLOC */
  int divergent;                 /* enclosing IFs / loops whose condition or extent is thread-dependent */
  const kg_launch *launch;       /* the launch shape of the kernel being checked (CUDA), NULL when none */
  const kg_irstmt *guard_of;     /* the loop the launch guard just entered guards */
  const char *where;             /* the statement being checked, for messages */
} vctx;

static void vfail(vctx *V, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vfail(vctx *V, const char *fmt, ...) {
  if (V->failed) return;
  V->failed = 1;
  if (!V->err || !V->errlen) return;
  int n = snprintf(V->err, V->errlen, "ir verify: %s: ", V->where ? V->where : "function");
  if (n < 0 || (size_t)n >= V->errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(V->err + n, V->errlen - (size_t)n, fmt, ap);
  va_end(ap);
}

/* Records the problem and leaves the statement (check_stmt returns void). */
#define FAIL(...)           \
  do {                      \
    vfail(V, __VA_ARGS__);  \
    return;                 \
  } while (0)

static const char *nm(const char *s) { return s ? s : "?"; }

/* Registers v under its id; 0 when the id is out of range or another variable object holds it or its name. */
static int check_var_id(vctx *V, const kg_irvar *v) {
  if (!v || !v->name) {
    vfail(V, "a variable without a name");
    return 0;
  }
  if (v->id < 0 || v->id >= V->nvars) {
    vfail(V, "variable %s has id %d outside [0, %d)", v->name, v->id, V->nvars);
    return 0;
  }
  if (V->var_of_id[v->id] && V->var_of_id[v->id] != v) {
    vfail(V, "variables %s and %s share id %d", V->var_of_id[v->id]->name, v->name, v->id);
    return 0;
  }
  V->var_of_id[v->id] = v;
  return 1;
}

static int check_buf_id(vctx *V, const kg_buffer *b) {
  if (!b || !b->name) {
    vfail(V, "a buffer without a name");
    return 0;
  }
  if (b->id < 0 || b->id >= V->nbufs) {
    vfail(V, "buffer %s has id %d outside [0, %d)", b->name, b->id, V->nbufs);
    return 0;
  }
  if (V->buf_of_id[b->id] && V->buf_of_id[b->id] != b) {
    vfail(V, "buffers %s and %s share id %d", V->buf_of_id[b->id]->name, b->name, b->id);
    return 0;
  }
  V->buf_of_id[b->id] = b;
  return 1;
}

static int has_thread_index(const kg_irexpr *e) {
  if (e->kind == KG_IRE_THREAD) return kg_thread_tag_is_thread(e->tag);
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++)
    if (has_thread_index(*kids[i])) return 1;
  return 0;
}

static int thread_dependent(vctx *V, const kg_irexpr *e) {
  return kg_ir_uses_marked(e, V->thread_dep, V->nvars) || has_thread_index(e);
}

static void check_expr(vctx *V, const kg_irexpr *e, const char *role);

static void check_index(vctx *V, const kg_buffer *b, const kg_irexpr *index, const char *what) {
  if (!check_buf_id(V, b)) return;
  if (!V->buf_live[b->id]) {
    vfail(V, "%s of buffer %s outside its allocation", what, b->name);
    return;
  }
  check_expr(V, index, "index");
  if (V->failed) return;
  if (index->ty != KG_TY_INT) vfail(V, "%s of buffer %s: index is not INT", what, b->name);
  int64_t c;
  if (kg_ir_is_const(index, &c) && (c < 0 || c >= (b->size > 0 ? b->size : 1)))
    vfail(V, "%s of buffer %s at constant index %lld, outside [0, %lld)", what, b->name, (long long)c,
          (long long)b->size);
}

static void check_expr(vctx *V, const kg_irexpr *e, const char *role) {
  if (V->failed) return;
  if (!e) {
    vfail(V, "missing %s expression", role);
    return;
  }
  switch (e->kind) {
    case KG_IRE_INT:
      if (e->ty != KG_TY_INT && e->ty != KG_TY_BOOL) vfail(V, "integer constant %lld of type F32", (long long)e->i);
      return;
    case KG_IRE_FLOAT:
      if (e->ty != KG_TY_F32) vfail(V, "float constant not of type F32");
      return;
    case KG_IRE_VAR:
      if (!check_var_id(V, e->var)) return;
      if (!V->in_scope[e->var->id]) vfail(V, "variable %s used outside its scope (in %s)", e->var->name, role);
      else if (e->ty != KG_TY_INT) vfail(V, "variable %s not of type INT", e->var->name);
      return;
    case KG_IRE_LOAD:
      check_index(V, e->load.buf, e->load.index, "load");
      if (!V->failed && e->ty != KG_TY_F32) vfail(V, "load of %s not of type F32", e->load.buf->name);
      return;
    case KG_IRE_CALL:
      if (e->call.n < 1 || e->call.n > 3 || e->call.fn == KG_FN_SELECT) {
        vfail(V, "call of %s with %d arguments", kg_func_names[e->call.fn], e->call.n);
        return;
      }
      break;
    case KG_IRE_SELECT:
      if (e->sel.c && e->sel.c->ty != KG_TY_BOOL) vfail(V, "select whose condition is not BOOL");
      else if (e->sel.a && e->sel.b && (e->sel.a->ty != e->ty || e->sel.b->ty != e->ty))
        vfail(V, "select whose branches differ in type from it");
      break;
    case KG_IRE_CAST:
      if (e->bin.a && e->bin.a->ty != KG_TY_INT) vfail(V, "cast of a non-INT operand");
      break;
    case KG_IRE_THREAD:
      if (V->f->target != KG_TARGET_CUDA) vfail(V, "a thread index (%s) outside CUDA", kg_thread_tag_names[e->tag]);
      else if (!kg_thread_tag_is_thread(e->tag) && !kg_thread_tag_is_block(e->tag))
        vfail(V, "thread index of tag %s", (unsigned)e->tag < KG_THREAD_COUNT ? kg_thread_tag_names[e->tag] : "?");
      return;
    case KG_IRE_BINARY:
    case KG_IRE_UNARY: break;
    default: vfail(V, "expression of unknown kind %d", (int)e->kind); return;
  }
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n && !V->failed; i++) {
    if (!*kids[i]) vfail(V, "expression with a missing operand");
    else check_expr(V, *kids[i], role);
  }
}

static void describe(vctx *V, const kg_irstmt *s, char *buf, size_t len) {
  switch (s->kind) {
    case KG_IRS_FOR:
      snprintf(buf, len, "loop %s (stage %s, variable %s)", nm(s->loop.loop_name), nm(s->loop.stage_name),
               s->loop.var ? nm(s->loop.var->name) : "?");
      break;
    case KG_IRS_STORE: snprintf(buf, len, "store to %s", s->store.buf ? nm(s->store.buf->name) : "?"); break;
    case KG_IRS_LET: snprintf(buf, len, "let %s", s->let.var ? nm(s->let.var->name) : "?"); break;
    case KG_IRS_ALLOC: snprintf(buf, len, "alloc %s", s->alloc.buf ? nm(s->alloc.buf->name) : "?"); break;
    case KG_IRS_IF: snprintf(buf, len, "if"); break;
    case KG_IRS_SEQ: snprintf(buf, len, "seq"); break;
    case KG_IRS_BARRIER: snprintf(buf, len, "barrier"); break;
    case KG_IRS_ALLREDUCE:
      snprintf(buf, len, "allreduce of %s (stage %s, loop %s)",
               s->allreduce.buf ? nm(s->allreduce.buf->name) : "?", nm(s->allreduce.stage_name),
               nm(s->allreduce.loop_name));
      break;
    case KG_IRS_COMMENT: snprintf(buf, len, "comment"); break;
    case KG_IRS_PREFETCH:
      snprintf(buf, len, "prefetch of %s", s->prefetch.buf ? nm(s->prefetch.buf->name) : "?");
      break;
    case KG_IRS_ASYNC_COMMIT: snprintf(buf, len, "async commit"); break;
    case KG_IRS_ASYNC_WAIT: snprintf(buf, len, "async wait"); break;
    case KG_IRS_MMA: snprintf(buf, len, "mma of stage %s", nm(s->mma.stage_name)); break;
    case KG_IRS_LDMATRIX: snprintf(buf, len, "ldmatrix of stage %s", nm(s->ldm.stage_name)); break;
    case KG_IRS_BFDOT: snprintf(buf, len, "bfdot of stage %s", nm(s->bfdot.stage_name)); break;
    case KG_IRS_TSTORE: snprintf(buf, len, "tile store of stage %s", nm(s->tstore.stage_name)); break;
    default: snprintf(buf, len, "statement of unknown kind %d", (int)s->kind); break;
  }
  V->where = buf;
}

/* Brings v into scope; 0 (failed) when it is already there. */
static int define_var(vctx *V, const kg_irvar *v) {
  if (!check_var_id(V, v)) return 0;
  if (V->in_scope[v->id]) {
    vfail(V, "variable %s defined again while in scope", v->name);
    return 0;
  }
  V->in_scope[v->id] = 1;
  return 1;
}

static void check_stmt(vctx *V, const kg_irstmt *s);

/* A uniform point (barrier, cross-thread reduction): every thread of the block must reach it. */
static void check_uniform(vctx *V) {
  if (V->f->target != KG_TARGET_CUDA) vfail(V, "only the CUDA target synchronizes threads");
  else if (V->divergent) vfail(V, "under a condition or loop extent that depends on a thread index");
}

/* Checks child, then names s (where) again for the checks that follow. */
static void check_child(vctx *V, const kg_irstmt *child, const char *where) {
  check_stmt(V, child);
  V->where = where;
}

static void check_stmt(vctx *V, const kg_irstmt *s) {
  if (V->failed) return;
  if (!s) {
    vfail(V, "missing statement");
    return;
  }
  char where[256];
  describe(V, s, where, sizeof where);
  const int cuda = V->f->target == KG_TARGET_CUDA;
  switch (s->kind) {
    case KG_IRS_SEQ: {
      /* LETs are visible to the items after them, up to the end of the SEQ */
      int *defined = s->seq.n ? calloc((size_t)s->seq.n, sizeof *defined) : NULL;
      for (int i = 0; i < s->seq.n && !V->failed; i++) {
        const kg_irstmt *x = s->seq.items[i];
        if (s == V->f->body && V->f->launch) V->launch = &V->f->launch[i]; /* item i is kernel i */
        check_child(V, x, where);
        if (!V->failed && x->kind == KG_IRS_LET) defined[i] = 1;
      }
      for (int i = 0; i < s->seq.n; i++)
        if (defined[i]) {
          const kg_irvar *v = s->seq.items[i]->let.var;
          V->in_scope[v->id] = 0;
          V->thread_dep[v->id] = 0;
        }
      free(defined);
      return;
    }
    case KG_IRS_FOR: {
      const kg_irvar *v = s->loop.var;
      if (!check_var_id(V, v)) return;
      if (V->in_scope[v->id]) {
        vfail(V, "loop variable %s defined again while in scope", v->name);
        return;
      }
      check_expr(V, s->loop.extent, "extent");
      if (V->failed) return;
      int64_t ext;
      if (s->loop.extent->ty != KG_TY_INT) FAIL("extent is not INT");
      if (kg_ir_is_const(s->loop.extent, &ext) && ext < 1) FAIL("constant extent %lld", (long long)ext);
      if (s->loop.tag >= KG_THREAD_COUNT || (int)s->loop.tag < 0) FAIL("unknown thread tag");
      if ((s->loop.kind == KG_LOOP_BOUND) != (s->loop.tag != KG_THREAD_NONE))
        FAIL("a bound loop must have a thread tag, and only a bound loop has one");
      if (!cuda && s->loop.tag != KG_THREAD_NONE)
        FAIL("bound to %s on the C target", kg_thread_tag_names[s->loop.tag]);
      int is_thread = kg_thread_tag_is_thread(s->loop.tag);
      int64_t lext;
      const kg_launch *l = V->launch;
      if (l && l->ok && kg_launch_within_limits(l) && (is_thread || kg_thread_tag_is_block(s->loop.tag)) &&
          kg_ir_is_const(s->loop.extent, &lext) && lext < l->ext[s->loop.tag] && V->guard_of != s)
        FAIL("extent %lld below the launched %s extent %lld without a launch guard", (long long)lext,
             kg_thread_tag_names[s->loop.tag], (long long)l->ext[s->loop.tag]);
      int div = thread_dependent(V, s->loop.extent);
      V->in_scope[v->id] = 1;
      V->thread_dep[v->id] = (unsigned char)is_thread;
      V->divergent += div;
      check_child(V, s->loop.body, where);
      V->divergent -= div;
      V->in_scope[v->id] = 0;
      V->thread_dep[v->id] = 0;
      return;
    }
    case KG_IRS_IF: {
      check_expr(V, s->cond.cond, "condition");
      if (V->failed) return;
      if (s->cond.cond->ty != KG_TY_BOOL) FAIL("condition is not BOOL");
      int div = thread_dependent(V, s->cond.cond);
      V->divergent += div;
      if (kg_ir_is_launch_guard(s)) V->guard_of = s->cond.then;
      check_child(V, s->cond.then, where);
      if (s->cond.otherwise) check_child(V, s->cond.otherwise, where);
      V->divergent -= div;
      return;
    }
    case KG_IRS_PREFETCH:
      if (cuda) FAIL("a prefetch on CUDA");
      check_index(V, s->prefetch.buf, s->prefetch.index, "prefetch");
      return;
    case KG_IRS_STORE:
      check_index(V, s->store.buf, s->store.index, "store");
      if (V->failed) return;
      if (s->store.buf->is_input) FAIL("store to the input %s", s->store.buf->name);
      if (s->store.stream && (V->f->target != KG_TARGET_C || s->store.buf->param_index < 0))
        FAIL("streamed store to %s, which is not an output on the C target", s->store.buf->name);
      check_expr(V, s->store.value, "value");
      if (!V->failed && s->store.value->ty != KG_TY_F32) vfail(V, "stored value is not F32");
      if (!V->failed && s->store.async &&
          (!cuda || s->store.buf->scope != KG_SCOPE_SHARED || s->store.value->kind != KG_IRE_LOAD ||
           s->store.value->load.buf->scope != KG_SCOPE_GLOBAL))
        vfail(V, "an asynchronous store must copy a global element into shared memory, on CUDA");
      return;
    case KG_IRS_LET:
      check_expr(V, s->let.value, "value");
      if (V->failed) return;
      if (s->let.value->ty != KG_TY_INT) FAIL("value is not INT");
      if (!define_var(V, s->let.var)) return;
      V->thread_dep[s->let.var->id] = (unsigned char)thread_dependent(V, s->let.value);
      return;
    case KG_IRS_ALLOC: {
      const kg_buffer *b = s->alloc.buf;
      if (!check_buf_id(V, b)) return;
      if (V->buf_live[b->id]) FAIL("buffer %s allocated again inside its own scope", b->name);
      if (b->param_index >= 0) FAIL("allocates the parameter %s", b->name);
      if (b->size < 1 || b->dyn_size) FAIL("size must be a positive constant");
      if (b->scope == KG_SCOPE_GLOBAL) FAIL("global scope (global temporaries are the function's temps)");
      if (b->scope == KG_SCOPE_SHARED && !cuda) FAIL("shared storage on the C target");
      if (b->reg_acc && (b->scope != KG_SCOPE_LOCAL || !b->reg_acc_of || cuda))
        FAIL("a register accumulator must be local, on the C target, and name the buffer it accumulates");
      V->buf_live[b->id] = 1;
      check_child(V, s->alloc.body, where);
      V->buf_live[b->id] = 0;
      return;
    }
    case KG_IRS_BARRIER: check_uniform(V); return;
    case KG_IRS_ALLREDUCE: {
      const kg_buffer *b = s->allreduce.buf;
      if (!check_buf_id(V, b)) return;
      if (!V->buf_live[b->id]) FAIL("buffer %s outside its allocation", b->name);
      if (b->scope != KG_SCOPE_LOCAL || b->size != 1) FAIL("reduces %s, not a local one-element buffer", b->name);
      if (!kg_thread_tag_is_thread(s->allreduce.tag)) FAIL("across %s, not a threadIdx tag",
                                                                  kg_thread_tag_names[s->allreduce.tag]);
      if (s->allreduce.extent < 1) FAIL("extent %lld", (long long)s->allreduce.extent);
      if (V->launch && V->launch->ok && kg_launch_within_limits(V->launch) &&
          s->allreduce.how == KG_ALLREDUCE_UNPLANNED)
        FAIL("no strategy, in a kernel whose launch shape is known");
      if ((s->allreduce.scratch > 0) !=
          (s->allreduce.how == KG_ALLREDUCE_WARPS || s->allreduce.how == KG_ALLREDUCE_SHARED))
        FAIL("%lld floats of scratch for %s", (long long)s->allreduce.scratch,
             kg_allreduce_how_names[s->allreduce.how]);
      check_uniform(V);
      return;
    }
    case KG_IRS_COMMENT:
      if (!s->text) vfail(V, "comment without text");
      return;
    case KG_IRS_ASYNC_COMMIT:
    case KG_IRS_ASYNC_WAIT:
      if (!cuda) FAIL("asynchronous copies on the C target");
      if (s->kind == KG_IRS_ASYNC_WAIT && (s->async_wait.pending < 0 || s->async_wait.pending > 7))
        FAIL("waits for %d groups in flight, want 0 to 7", s->async_wait.pending);
      return;
    case KG_IRS_BFDOT: {
      if (cuda) FAIL("bf16 dot products on CUDA");
      const kg_buffer *bb[3] = {s->bfdot.a, s->bfdot.b, s->bfdot.c};
      const kg_irexpr *bi[3] = {s->bfdot.a_index, s->bfdot.b_index, s->bfdot.c_index};
      static const char *const role[3] = {"row operand", "column operand", "accumulator"};
      for (int q = 0; q < 3 && !V->failed; q++) check_index(V, bb[q], bi[q], role[q]);
      const kg_irexpr *strides[4] = {s->bfdot.a_row, s->bfdot.a_k, s->bfdot.b_k, s->bfdot.c_row};
      for (int q = 0; q < 4 && !V->failed; q++) {
        check_expr(V, strides[q], "stride");
        if (!V->failed && strides[q]->ty != KG_TY_INT) vfail(V, "a stride that is not INT");
      }
      if (V->failed) return;
      if (s->bfdot.a->dtype != KG_DT_BF16 || s->bfdot.b->dtype != KG_DT_BF16) FAIL("operands that are not bf16");
      if (s->bfdot.c->dtype != KG_DT_F32 || s->bfdot.c->is_input) FAIL("accumulators in %s", s->bfdot.c->name);
      if (s->bfdot.rows < 1 || s->bfdot.cols < 16 || s->bfdot.cols % 16 || s->bfdot.k < 2 || s->bfdot.k % 2)
        FAIL("a %lld x %lld x %lld tile (want whole 16-column vectors and pairs of k)", (long long)s->bfdot.rows,
             (long long)s->bfdot.cols, (long long)s->bfdot.k);
      return;
    }
    case KG_IRS_TSTORE: {
      if (cuda) FAIL("a transposed tile store on CUDA");
      const int64_t n = s->tstore.n;
      if (n != 4 && n != 8 && n != 16) FAIL("a %lld x %lld tile (want 4, 8 or 16)", (long long)n, (long long)n);
      const kg_buffer *src = s->tstore.src, *dst = s->tstore.dst;
      check_index(V, src, s->tstore.src_index, "tile source");
      check_index(V, dst, s->tstore.dst_index, "tile destination");
      if (V->failed) return;
      if (src->scope != KG_SCOPE_LOCAL || src->dtype != KG_DT_F32 || src->size < n * n)
        FAIL("tile source %s is not a local f32 block of %lld or more", src->name, (long long)(n * n));
      if (dst->dtype != KG_DT_F32 || dst->is_input) FAIL("tile destination %s is not a writable f32 buffer", dst->name);
      if (s->tstore.src_ld < n || s->tstore.dst_stride < n)
        FAIL("strides %lld and %lld below the tile's %lld (elements would overlap)", (long long)s->tstore.src_ld,
             (long long)s->tstore.dst_stride, (long long)n);
      int64_t c;
      if (kg_ir_is_const(s->tstore.src_index, &c) && c + (n - 1) * (s->tstore.src_ld + 1) >= src->size)
        FAIL("tile source %s read past its %lld elements", src->name, (long long)src->size);
      return;
    }
    case KG_IRS_MMA: {
      if (!cuda) FAIL("a tensor-core step on the C target");
      if (s->mma.dtype >= KG_DT_COUNT) FAIL("operands of an unknown type");
      const kg_buffer *fr[2] = {s->mma.a, s->mma.b};
      /* one register per lane of each 32-bit element: 4 of A and 2 of B for TF32 (f32), twice as many 16-bit ones */
      const int per = s->mma.dtype == KG_DT_F32 ? 1 : 2;
      for (int q = 0; q < 2; q++) {
        if (!check_buf_id(V, fr[q])) return;
        if (!V->buf_live[fr[q]->id]) FAIL("fragment %s outside its allocation", fr[q]->name);
        const int len = (q ? 2 : 4) * per;
        if (fr[q]->scope != KG_SCOPE_LOCAL || fr[q]->size < len || fr[q]->size % len || fr[q]->dtype != s->mma.dtype)
          FAIL("fragment %s is not a local array of %d %s (or of a multiple of them)", fr[q]->name, len,
               kg_dtype_names[s->mma.dtype]);
        const kg_irexpr *off = q ? s->mma.b_off : s->mma.a_off;
        check_index(V, fr[q], off, "fragment");
        if (V->failed) return;
        int64_t c;
        if (kg_ir_is_const(off, &c) && (c % len || c + len > fr[q]->size))
          FAIL("fragment %s from %lld: not a whole fragment of its %lld elements", fr[q]->name, (long long)c,
               (long long)fr[q]->size);
      }
      for (int i = 0; i < 4 && !V->failed; i++) check_index(V, s->mma.c, s->mma.c_index[i], "accumulator");
      if (V->failed) return;
      if (s->mma.c->dtype != KG_DT_F32 || s->mma.c->is_input) FAIL("accumulators in %s", s->mma.c->name);
      /* the warp runs it whole: no guard that tells its threads apart may enclose it */
      if (V->divergent) FAIL("under a condition that depends on the thread");
      return;
    }
    case KG_IRS_LDMATRIX: {
      if (!cuda) FAIL("an ldmatrix on the C target");
      const kg_buffer *src = s->ldm.src, *dst = s->ldm.dst;
      const int n = s->ldm.count;
      if (n != 1 && n != 2 && n != 4) FAIL("%d matrices (1, 2 or 4)", n);
      check_index(V, src, s->ldm.src_index, "ldmatrix row");
      check_index(V, dst, s->ldm.dst_off, "ldmatrix destination");
      if (V->failed) return;
      /* 16-bit elements two a register; f32 ones (TF32's A, not transposed) one */
      const int wide = src->dtype == KG_DT_F32, per = wide ? 1 : 2;
      if (src->scope != KG_SCOPE_SHARED || (src->dtype != KG_DT_F16 && src->dtype != KG_DT_BF16 && !wide) ||
          (wide && s->ldm.trans))
        FAIL("source %s is not a shared array of 16-bit elements (or of 32-bit ones, not transposed)", src->name);
      if (dst->scope != KG_SCOPE_LOCAL || dst->dtype != src->dtype || dst->size < per * n)
        FAIL("destination %s is not a local array of %d %s", dst->name, per * n, kg_dtype_names[src->dtype]);
      int64_t c;
      if (kg_ir_is_const(s->ldm.dst_off, &c) && c + per * n > dst->size)
        FAIL("destination %s from %lld: past its %lld elements", dst->name, (long long)c, (long long)dst->size);
      if (V->divergent) FAIL("under a condition that depends on the thread");
      return;
    }
    default: vfail(V, "unknown statement kind"); return;
  }
}

int kg_ir_verify(const kg_lowered *f, char *err, size_t errlen) {
  vctx V;
  memset(&V, 0, sizeof V);
  V.f = f;
  V.err = err;
  V.errlen = errlen;
  if (err && errlen) err[0] = 0;
  V.nvars = f->n_vars;
  V.nbufs = f->n_buffers;
  size_t nv = (size_t)(V.nvars > 0 ? V.nvars : 1), nb = (size_t)(V.nbufs > 0 ? V.nbufs : 1);
  V.var_of_id = calloc(nv, sizeof *V.var_of_id);
  V.buf_of_id = calloc(nb, sizeof *V.buf_of_id);
  V.in_scope = calloc(nv, 1);
  V.thread_dep = calloc(nv, 1);
  V.buf_live = calloc(nb, 1);
  if (!V.var_of_id || !V.buf_of_id || !V.in_scope || !V.thread_dep || !V.buf_live) {
    vfail(&V, "out of memory");
    goto out;
  }
  if (f->target != KG_TARGET_C && f->target != KG_TARGET_CUDA) {
    vfail(&V, "unknown target %d", (int)f->target);
    goto out;
  }
  for (int i = 0; i < f->nsize_vars && !V.failed; i++)
    if (define_var(&V, f->size_vars[i]) && f->size_lo[i] > f->size_hi[i])
      vfail(&V, "dynamic size %s has the empty range [%lld, %lld]", f->size_vars[i]->name, (long long)f->size_lo[i],
            (long long)f->size_hi[i]);
  for (int i = 0; i < f->nparams && !V.failed; i++) {
    const kg_buffer *b = f->params[i];
    if (!check_buf_id(&V, b)) break;
    if (b->param_index != i) vfail(&V, "parameter %s has index %d, not %d", b->name, b->param_index, i);
    V.buf_live[b->id] = 1;
  }
  for (int i = 0; i < f->ntemps && !V.failed; i++) {
    const kg_buffer *b = f->temps[i];
    if (!check_buf_id(&V, b)) break;
    if (b->scope != KG_SCOPE_GLOBAL || b->param_index >= 0) vfail(&V, "temporary %s is not a global non-parameter", b->name);
    else if (b->dyn_size) check_expr(&V, b->dyn_size, "temporary size");
    V.buf_live[b->id] = 1;
  }
  if (!V.failed && (!f->body || f->body->kind != KG_IRS_SEQ)) vfail(&V, "the body is not a SEQ of kernels");
  if (!V.failed && f->launch && (f->target != KG_TARGET_CUDA || f->nlaunch != f->body->seq.n))
    vfail(&V, "%d launch shapes for %d kernels%s", f->nlaunch, f->body->seq.n,
          f->target != KG_TARGET_CUDA ? " on the C target" : "");
  if (!V.failed) check_stmt(&V, f->body);
  V.where = NULL;
  /* names: unique among variables and among buffers (the printers declare them as C identifiers) */
  kg_strset names;
  kg_strset_init(&names);
  for (int i = 0; i < V.nvars && !V.failed; i++)
    if (V.var_of_id[i] && !kg_strset_add(&names, V.var_of_id[i]->name))
      vfail(&V, "two variables are named %s", V.var_of_id[i]->name);
  kg_strset_free(&names);
  kg_strset_init(&names);
  for (int i = 0; i < V.nbufs && !V.failed; i++)
    if (V.buf_of_id[i] && !kg_strset_add(&names, V.buf_of_id[i]->name))
      vfail(&V, "two buffers are named %s", V.buf_of_id[i]->name);
  kg_strset_free(&names);
out:
  free(V.var_of_id);
  free(V.buf_of_id);
  free(V.in_scope);
  free(V.thread_dep);
  free(V.buf_live);
  return V.failed ? -1 : 0;
}
