/* pipeline.c: software pipelining of the shared-memory stages computed at a loop (the schedule's `pipeline`).
 *
 * Lowering prints the stages computed at a loop v as the body of v: each shared stage's fetch between two barriers,
 * then the step's computation, which reads them:
 *
 *   for v in [0, E): { barrier; fetch_1(v); barrier; ... barrier; fetch_m(v); barrier; compute(v) }
 *
 * so every step waits for its own loads twice over. With `pipeline ... D`, each fetched buffer becomes a ring of D
 * copies (slot v mod D), filled D - 1 steps ahead of the step that reads it:
 *
 *   barrier                                   (the ring may still be read by a previous pass over this loop)
 *   for s in [0, D-1): { if (s < E) fetch_*(s) into slot s; commit }
 *   for v in [0, E):
 *     wait (at most D - 2 groups in flight)   (this thread's copies for step v have landed)
 *     barrier                                 (everyone's have; everyone is done with step v - 1's slot)
 *     if (v + D - 1 < E) fetch_*(v + D - 1) into slot (v + D - 1) mod D
 *     commit
 *     compute(v) reading slot v mod D
 *   wait (none in flight)
 *
 * One barrier per step instead of two per stage, and the copies of the next D - 1 steps are in flight while this
 * step computes. The fetches' stores are marked asynchronous (STORE.async), which the CUDA printer turns into
 * cp.async on sm_80 and later; elsewhere they are ordinary stores, for which the same order is just as correct (a
 * store lands at once, and the barrier publishes it). The slot written at step v, (v + D - 1) mod D, is the one step
 * v - 1 read, and the barrier before it is the one every thread passes after finishing step v - 1.
 *
 * Requires (else the pass fails, naming the primitive, stage and loop): the loop is serial, not bound; its body is
 * the allocations of the stages computed at it around a SEQ that starts with at least one shared fetch as lowering
 * prints it (an optional comment, barrier, a nest storing only into one shared buffer allocated there, barrier);
 * a fetch reads only global buffers (parameters and temporaries) and holds no barrier. Everything after the fetches
 * is the computation; the local stages computed at the loop stay inside it. Runs on CUDA, before the writer,
 * reciprocal and launch passes (which see the rewritten loop as any other code). */
#include <stdio.h>
#include <string.h>
#include "../base/strset.h"
#include "bounds.h"
#include "ir.h"

typedef struct pctx {
  kg_arena *a;
  kg_lowered *f;
  char *err;
  size_t errlen;
  int failed;
  kg_strset names;  /* every variable name in the function, so that copies get fresh ones */
  kg_irexpr **sub;  /* by var id: what a use of the variable becomes, or NULL */
  int cap;
  /* the ring buffers of the loop being rewritten, and the offsets of the current rewrite */
  kg_buffer **ring;
  int64_t *stride;
  int nring;
  kg_irexpr *load_slot;  /* added (times the stride) to the index of a load from a ring buffer, or NULL */
  kg_irexpr *store_slot; /* the same for stores into one (which then become asynchronous) */
  int fresh;             /* give each variable the copy defines a fresh one */
} pctx;

static void pfail(pctx *P, const kg_irstmt *loop, const char *fmt, const char *arg) {
  if (P->failed) return;
  P->failed = 1;
  if (!P->err || !P->errlen) return;
  int n = snprintf(P->err, P->errlen, "pipeline: stage %s: loop %s: ", loop->loop.stage_name ? loop->loop.stage_name : "?",
                   loop->loop.loop_name ? loop->loop.loop_name : "?");
  if (n >= 0 && (size_t)n < P->errlen) snprintf(P->err + n, P->errlen - (size_t)n, fmt, arg);
}

static void grow(pctx *P, int id) {
  if (id < P->cap) return;
  int cap = P->cap ? P->cap : 64;
  while (cap <= id) cap *= 2;
  kg_irexpr **s = KG_NEW_ARRAY(P->a, kg_irexpr *, cap);
  if (P->cap) memcpy(s, P->sub, sizeof(kg_irexpr *) * (size_t)P->cap);
  P->sub = s;
  P->cap = cap;
}

static void note_names(pctx *P, const kg_irstmt *s) {
  if (!s) return;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) note_names(P, s->seq.items[i]);
      break;
    case KG_IRS_FOR:
      kg_strset_add(&P->names, s->loop.var->name);
      note_names(P, s->loop.body);
      break;
    case KG_IRS_IF:
      note_names(P, s->cond.then);
      note_names(P, s->cond.otherwise);
      break;
    case KG_IRS_LET: kg_strset_add(&P->names, s->let.var->name); break;
    case KG_IRS_ALLOC:
      kg_strset_add(&P->names, s->alloc.buf->name);
      note_names(P, s->alloc.body);
      break;
    default: break;
  }
}

/* A fresh variable standing for v in a copy: "<name>_p<N>", unused in the function. */
static kg_irvar *fresh_var(pctx *P, const kg_irvar *v) {
  char name[KG_MAX_LOOP_NAME + 32];
  for (int k = 1;; k++) {
    snprintf(name, sizeof name, "%s_p%d", v->name, k);
    if (kg_strset_add(&P->names, name)) break;
  }
  kg_irvar *n = KG_NEW(P->a, kg_irvar);
  n->name = kg_arena_strdup(P->a, name);
  n->id = P->f->n_vars++;
  grow(P, n->id);
  grow(P, v->id);
  P->sub[v->id] = kg_ir_var(P->a, n);
  return n;
}

static int ring_index(const pctx *P, const kg_buffer *b) {
  for (int i = 0; i < P->nring; i++)
    if (P->ring[i] == b) return i;
  return -1;
}

static kg_irexpr *slot_offset(pctx *P, kg_irexpr *index, kg_irexpr *slot, int r) {
  return kg_ir_binary(P->a, KG_OP_ADD, index, kg_ir_binary(P->a, KG_OP_MUL, slot, kg_ir_int(P->a, P->stride[r])));
}

static kg_irexpr *rw_expr(pctx *P, kg_irexpr *e) {
  kg_arena *a = P->a;
  kg_irexpr *r = e;
  switch (e->kind) {
    case KG_IRE_VAR:
      if (e->var->id < P->cap && P->sub[e->var->id]) r = P->sub[e->var->id];
      return r;
    case KG_IRE_LOAD: {
      kg_irexpr *ix = rw_expr(P, e->load.index);
      int ri = ring_index(P, e->load.buf);
      if (ri >= 0 && P->load_slot) ix = slot_offset(P, ix, P->load_slot, ri);
      r = ix == e->load.index ? e : kg_ir_load(a, e->load.buf, ix);
      break;
    }
    case KG_IRE_BINARY: {
      kg_irexpr *x = rw_expr(P, e->bin.a), *y = rw_expr(P, e->bin.b);
      r = x == e->bin.a && y == e->bin.b ? e : kg_ir_binary(a, e->bin.op, x, y);
      break;
    }
    case KG_IRE_UNARY: {
      kg_irexpr *x = rw_expr(P, e->bin.a);
      r = x == e->bin.a ? e : kg_ir_unary(a, e->bin.op, x);
      break;
    }
    case KG_IRE_CAST: {
      kg_irexpr *x = rw_expr(P, e->bin.a);
      r = x == e->bin.a ? e : kg_ir_cast_f32(a, x);
      break;
    }
    case KG_IRE_CALL: {
      kg_irexpr *args[3];
      int same = 1;
      for (int i = 0; i < e->call.n; i++) same &= (args[i] = rw_expr(P, e->call.args[i])) == e->call.args[i];
      r = same ? e : kg_ir_call(a, e->call.fn, args, e->call.n);
      break;
    }
    case KG_IRE_SELECT: {
      kg_irexpr *c = rw_expr(P, e->sel.c), *x = rw_expr(P, e->sel.a), *y = rw_expr(P, e->sel.b);
      r = c == e->sel.c && x == e->sel.a && y == e->sel.b ? e : kg_ir_select(a, c, x, y);
      break;
    }
    default: return e;
  }
  if (r != e) r->pos = e->pos;
  return r;
}

/* A rewritten copy of s (statements always copied, expressions where they change). */
static kg_irstmt *rw_stmt(pctx *P, const kg_irstmt *s) {
  kg_arena *a = P->a;
  if (!s) return NULL;
  kg_irstmt *c = NULL;
  switch (s->kind) {
    case KG_IRS_SEQ:
      c = kg_ir_seq(a);
      for (int i = 0; i < s->seq.n; i++) kg_ir_seq_push(a, c, rw_stmt(P, s->seq.items[i]));
      break;
    case KG_IRS_FOR: {
      kg_irexpr *ext = rw_expr(P, s->loop.extent);
      kg_irvar *v = P->fresh ? fresh_var(P, s->loop.var) : s->loop.var;
      c = kg_ir_for(a, v, ext, s->loop.kind, s->loop.tag, s->loop.loop_name, s->loop.stage_name, NULL);
      c->loop.pipeline = s->loop.pipeline;
      c->loop.body = rw_stmt(P, s->loop.body);
      break;
    }
    case KG_IRS_IF:
      c = kg_ir_if(a, rw_expr(P, s->cond.cond), rw_stmt(P, s->cond.then), rw_stmt(P, s->cond.otherwise));
      break;
    case KG_IRS_STORE: {
      kg_irexpr *ix = rw_expr(P, s->store.index), *val = rw_expr(P, s->store.value);
      int ri = ring_index(P, s->store.buf);
      if (ri >= 0 && P->store_slot) ix = slot_offset(P, ix, P->store_slot, ri);
      c = kg_ir_store(a, s->store.buf, ix, val);
      c->store.stream = s->store.stream;
      /* a plain copy of a global element may land late (cp.async); a computed value is stored at once */
      c->store.async = ri >= 0 && P->store_slot && val->kind == KG_IRE_LOAD && val->load.buf->scope == KG_SCOPE_GLOBAL;
      break;
    }
    case KG_IRS_LET: {
      kg_irexpr *val = rw_expr(P, s->let.value);
      c = kg_ir_let(a, P->fresh ? fresh_var(P, s->let.var) : s->let.var, val);
      break;
    }
    case KG_IRS_ALLOC: c = kg_ir_alloc(a, s->alloc.buf, rw_stmt(P, s->alloc.body)); break;
    case KG_IRS_MMA: { /* its indices name loop variables, which a copy may have renamed */
      kg_irexpr *ci[4];
      for (int i = 0; i < 4; i++) ci[i] = rw_expr(P, s->mma.c_index[i]);
      c = kg_ir_mma(a, s->mma.a, rw_expr(P, s->mma.a_off), s->mma.b, rw_expr(P, s->mma.b_off), s->mma.c, ci,
                    s->mma.dtype, s->mma.stage_name);
      break;
    }
    case KG_IRS_LDMATRIX: { /* a load of its source, which may be a ring's (its stride keeps 16-byte rows aligned) */
      kg_irexpr *ix = rw_expr(P, s->ldm.src_index);
      int ri = ring_index(P, s->ldm.src);
      if (ri >= 0 && P->load_slot) ix = slot_offset(P, ix, P->load_slot, ri);
      c = kg_ir_ldmatrix(a, s->ldm.dst, rw_expr(P, s->ldm.dst_off), s->ldm.src, ix, s->ldm.count, s->ldm.trans,
                         s->ldm.stage_name);
      break;
    }
    default: /* barriers, reductions, comments, async marks: no expressions to rewrite */
      c = KG_NEW(a, kg_irstmt);
      *c = *s;
      break;
  }
  c->pos = s->pos;
  return c;
}

/* A fetch's scan: *bad when it loads anything but a global buffer. */
static void fetch_scan_expr(const kg_irexpr *e, int *bad) {
  if (e->kind == KG_IRE_LOAD && e->load.buf->scope != KG_SCOPE_GLOBAL) *bad = 1;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++) fetch_scan_expr(*kids[i], bad);
}

/* The buffer fetch s stores into in *dst; *bad when it stores into two, reads something other than global buffers,
 * allocates or synchronizes. */
static void fetch_scan(const kg_irstmt *s, kg_buffer **dst, int *bad) {
  if (!s) return;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) fetch_scan(s->seq.items[i], dst, bad);
      break;
    case KG_IRS_FOR:
      fetch_scan_expr(s->loop.extent, bad);
      fetch_scan(s->loop.body, dst, bad);
      break;
    case KG_IRS_IF:
      fetch_scan_expr(s->cond.cond, bad);
      fetch_scan(s->cond.then, dst, bad);
      fetch_scan(s->cond.otherwise, dst, bad);
      break;
    case KG_IRS_STORE:
      fetch_scan_expr(s->store.index, bad);
      fetch_scan_expr(s->store.value, bad);
      if (*dst && *dst != s->store.buf) *bad = 1;
      *dst = s->store.buf;
      break;
    case KG_IRS_LET: fetch_scan_expr(s->let.value, bad); break;
    case KG_IRS_COMMENT: break;
    default: *bad = 1; break; /* allocations, barriers, reductions */
  }
}

static kg_irstmt *rewrite_loop(pctx *P, kg_irstmt *loop);

/* Rewrites every pipelined loop inside s; returns s or its replacement. */
static kg_irstmt *walk(pctx *P, kg_irstmt *s) {
  if (!s || P->failed) return s;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) s->seq.items[i] = walk(P, s->seq.items[i]);
      return s;
    case KG_IRS_FOR:
      s->loop.body = walk(P, s->loop.body);
      return s->loop.pipeline >= 2 ? rewrite_loop(P, s) : s;
    case KG_IRS_IF:
      s->cond.then = walk(P, s->cond.then);
      s->cond.otherwise = walk(P, s->cond.otherwise);
      return s;
    case KG_IRS_ALLOC: s->alloc.body = walk(P, s->alloc.body); return s;
    default: return s;
  }
}

#define MAX_ALLOCS 64

static kg_irstmt *rewrite_loop(pctx *P, kg_irstmt *loop) {
  kg_arena *a = P->a;
  const int D = loop->loop.pipeline;
  if (loop->loop.kind != KG_LOOP_SERIAL || loop->loop.tag != KG_THREAD_NONE) {
    pfail(P, loop, "%s", "the loop is not serial");
    return loop;
  }
  /* the allocations of the stages computed at the loop, outermost first, then their SEQ */
  kg_irstmt *allocs[MAX_ALLOCS];
  int nalloc = 0;
  kg_irstmt *seq = loop->loop.body;
  while (seq->kind == KG_IRS_ALLOC && nalloc < MAX_ALLOCS) {
    allocs[nalloc++] = seq;
    seq = seq->alloc.body;
  }
  if (seq->kind != KG_IRS_SEQ) {
    pfail(P, loop, "%s", "no shared-memory stage is computed at it");
    return loop;
  }
  /* the leading fetches: [comment] barrier nest barrier, each into a shared buffer allocated here */
  kg_irstmt *fetch[MAX_ALLOCS];
  kg_buffer *ring[MAX_ALLOCS];
  int nfetch = 0, at = 0;
  for (;;) {
    int i = at;
    if (i < seq->seq.n && seq->seq.items[i]->kind == KG_IRS_COMMENT) i++;
    if (i + 2 >= seq->seq.n || seq->seq.items[i]->kind != KG_IRS_BARRIER ||
        seq->seq.items[i + 2]->kind != KG_IRS_BARRIER || nfetch == MAX_ALLOCS)
      break;
    kg_buffer *dst = NULL;
    int bad = 0;
    fetch_scan(seq->seq.items[i + 1], &dst, &bad);
    int mine = 0;
    for (int k = 0; k < nalloc; k++) mine |= allocs[k]->alloc.buf == dst;
    if (!dst || !mine || dst->scope != KG_SCOPE_SHARED) break;
    if (bad) {
      pfail(P, loop, "the fetch of %s reads more than global memory, or synchronizes: it cannot run ahead",
            dst->name);
      return loop;
    }
    for (int k = 0; k < nfetch; k++)
      if (ring[k] == dst) bad = 1;
    if (bad) break;
    fetch[nfetch] = seq->seq.items[i + 1];
    ring[nfetch++] = dst;
    at = i + 3;
  }
  if (!nfetch) {
    pfail(P, loop, "%s", "no shared-memory stage is computed at it (fetched at the start of its body)");
    return loop;
  }
  int64_t stride[MAX_ALLOCS];
  for (int k = 0; k < nfetch; k++) {
    /* slots 32 floats apart: each copy starts on bank 0 and stays 16-byte aligned, so the layout analysis and the
     * vector accesses of one slot hold for all */
    stride[k] = (ring[k]->size + 31) / 32 * 32;
    ring[k]->size = stride[k] * D;
  }
  P->ring = ring;
  P->stride = stride;
  P->nring = nfetch;
  kg_irvar *v = loop->loop.var;
  kg_irexpr *E = loop->loop.extent;
  int64_t ext;
  int is_const = kg_ir_is_const(E, &ext);
  grow(P, v->id);

  /* the compute part: everything after the fetches, loads of the ring from slot v mod D */
  P->fresh = 0;
  P->store_slot = NULL;
  P->load_slot = kg_ir_binary(a, KG_OP_MOD, kg_ir_var(a, v), kg_ir_int(a, D));
  kg_irstmt *compute = kg_ir_seq(a);
  for (int i = at; i < seq->seq.n; i++) kg_ir_seq_push(a, compute, rw_stmt(P, seq->seq.items[i]));
  P->load_slot = NULL;

  /* prologue: steps 0 .. D-2 */
  kg_irstmt *out = kg_ir_seq(a);
  kg_ir_seq_push(a, out, kg_ir_comment(a, kg_arena_printf(a, "pipeline: %d stages, %d step%s ahead", D, D - 1,
                                                          D - 1 > 1 ? "s" : "")));
  kg_ir_seq_push(a, out, kg_ir_barrier(a));
  P->fresh = 1;
  /* D - 1 groups whatever the extent (empty ones past it), which the waits in the loop count on */
  for (int s = 0; s < D - 1; s++) {
    if (!is_const || s < ext) {
      P->sub[v->id] = kg_ir_int(a, s);
      P->store_slot = kg_ir_int(a, s);
      kg_irstmt *copies = kg_ir_seq(a);
      for (int k = 0; k < nfetch; k++) kg_ir_seq_push(a, copies, rw_stmt(P, fetch[k]));
      kg_ir_seq_push(a, out,
                     is_const ? copies : kg_ir_if(a, kg_ir_binary(a, KG_OP_LT, kg_ir_int(a, s), E), copies, NULL));
    }
    kg_ir_seq_push(a, out, kg_ir_async_commit(a));
  }
  /* the steady state: copies for step v + D - 1 */
  kg_irexpr *ahead = kg_ir_binary(a, KG_OP_ADD, kg_ir_var(a, v), kg_ir_int(a, D - 1));
  P->sub[v->id] = ahead;
  P->store_slot = kg_ir_binary(a, KG_OP_MOD, ahead, kg_ir_int(a, D));
  kg_irstmt *copies = kg_ir_seq(a);
  for (int k = 0; k < nfetch; k++) kg_ir_seq_push(a, copies, rw_stmt(P, fetch[k]));
  P->sub[v->id] = NULL;
  P->store_slot = NULL;
  P->fresh = 0;
  P->nring = 0;

  kg_irstmt *body = kg_ir_seq(a);
  kg_ir_seq_push(a, body, kg_ir_async_wait(a, D - 2));
  kg_ir_seq_push(a, body, kg_ir_barrier(a));
  kg_ir_seq_push(a, body, kg_ir_if(a, kg_ir_binary(a, KG_OP_LT, ahead, E), copies, NULL));
  kg_ir_seq_push(a, body, kg_ir_async_commit(a));
  kg_ir_seq_push(a, body, compute);
  /* the other allocations at the loop (local stages) stay per step, around the body */
  kg_irstmt *inner = body;
  for (int k = nalloc - 1; k >= 0; k--) {
    int is_ring = 0;
    for (int j = 0; j < nfetch; j++) is_ring |= allocs[k]->alloc.buf == ring[j];
    if (!is_ring) inner = kg_ir_alloc(a, allocs[k]->alloc.buf, inner);
  }
  loop->loop.body = inner;
  kg_ir_seq_push(a, out, loop);
  kg_ir_seq_push(a, out, kg_ir_async_wait(a, 0));
  /* the rings live around the prologue and the loop */
  kg_irstmt *res = out;
  for (int k = nalloc - 1; k >= 0; k--)
    for (int j = 0; j < nfetch; j++)
      if (allocs[k]->alloc.buf == ring[j]) res = kg_ir_alloc(a, ring[j], res);
  res->pos = loop->pos;
  return res;
}

int kg_lower_pipeline(kg_arena *a, kg_lowered *f, char *err, size_t errlen) {
  pctx P;
  memset(&P, 0, sizeof P);
  P.a = a;
  P.f = f;
  P.err = err;
  P.errlen = errlen;
  kg_strset_init(&P.names);
  for (int i = 0; i < f->nsize_vars; i++) kg_strset_add(&P.names, f->size_vars[i]->name);
  for (int i = 0; i < f->nparams; i++) kg_strset_add(&P.names, f->params[i]->name);
  for (int i = 0; i < f->ntemps; i++) kg_strset_add(&P.names, f->temps[i]->name);
  note_names(&P, f->body);
  grow(&P, f->n_vars);
  f->body = walk(&P, f->body);
  kg_strset_free(&P.names);
  return P.failed ? -1 : 0;
}
