/* Software prefetch of the next register tile's output, for the C target.
 *
 * A register tile (lower/regacc.c) loads its elements of the output before its reduction loop and stores them
 * after it. Those rows lie a row stride apart (4 KB for a 1024-wide f32 output), which no hardware prefetcher
 * follows, so every tile starts with a stall on misses to the outer caches: a GEMM's 8 x 32 tile loads 16 lines
 * (or, where initfold.c made the first load a constant, fetches them for the stores) once per reduction block,
 * and at M=4096, N=K=1024 on two Xeon cores the kernel took 1.140 of PyTorch eager's time without the prefetch
 * below and 1.084 with it (bench/results/cpu-prefetch-2026-12-06-intel.md). So while a tile computes, the lines
 * of the tile the enclosing loop visits next are fetched:
 *   P { ... alloc kg_acc { IF (p + 1 < extent(P) && the next tile lies in buf) { prefetch buf[...] ... }
 *                          load nest   L { ... }   store nest } ... }
 * one prefetch per cache line the next tile touches (a point every line's worth of elements along each
 * contiguous run, and its last element). A prefetch is a hint: values, and their order, do not change.
 *
 * Requires (anything else is left as it is): lowered IR for KG_TARGET_C after kg_lower_regacc. The accumulator's
 * ALLOC (reg_acc; its reg_acc_of a GLOBAL buffer whose tensor has static sizes, or a LOCAL region of at least
 * PF_MIN_REGION elements) holds a store nest -- constant loops, LETs, one store into reg_acc_of -- whose index is
 * affine in the nest's variables and in variables bound outside the ALLOC; P is the innermost serial loop of more
 * than one iteration around the ALLOC (only SEQs, LETs, IFs, ALLOCs and one-iteration loops between) whose
 * variable the index uses, not inside any nonaffine atom; the tile spans two rows or more (a single run is what
 * hardware prefetchers follow), the loop it is around runs at least PF_MIN_REDUCTION times, and it has at most
 * PF_MAX_LINES prefetch points.
 * Guarantees: IR the verifier accepts, every prefetch of an element of the buffer (the guard checks the next
 * tile's first and last elements). */
#include <stdlib.h>
#include <string.h>
#include "../base/xalloc.h"
#include "bounds.h"
#include "ir.h"

#define PF_MAX_NEST 8
#define PF_MAX_LINES 48
#define PF_MAX_LOOPS 64
#define PF_MIN_REDUCTION 8
#define PF_MIN_REGION 8192 /* elements: 32 KB of f32, an L1 cache */

typedef struct pctx {
  kg_arena *a;
  int nvars;
  kg_irexpr **lets;       /* by variable id: LET values seen so far */
  kg_irstmt *loops[PF_MAX_LOOPS]; /* the FORs around the statement being visited, outermost first */
  int nloops;
  int clean_from; /* loops[clean_from..]: only SEQs, LETs, IFs, ALLOCs and one-iteration loops inside them */
} pctx;

/* The store nest of buf in s: its constant loops (outermost first) and the store; 0 when s is not one. LETs on
 * the way are recorded in P->lets. */
static const kg_irstmt *store_nest(pctx *P, const kg_irstmt *s, const kg_buffer *buf, const kg_irstmt **nest,
                                   int *depth) {
  switch (s->kind) {
    case KG_IRS_FOR: {
      int64_t e;
      if (*depth >= PF_MAX_NEST || !kg_ir_is_const(s->loop.extent, &e) || e < 1) return NULL;
      nest[(*depth)++] = s;
      return store_nest(P, s->loop.body, buf, nest, depth);
    }
    case KG_IRS_SEQ: {
      const kg_irstmt *last = NULL;
      for (int i = 0; i < s->seq.n; i++) {
        const kg_irstmt *it = s->seq.items[i];
        if (it->kind == KG_IRS_COMMENT) continue;
        if (it->kind == KG_IRS_LET) {
          if (it->let.var->id < P->nvars) P->lets[it->let.var->id] = it->let.value;
          continue;
        }
        if (last) return NULL;
        last = it;
      }
      return last ? store_nest(P, last, buf, nest, depth) : NULL;
    }
    case KG_IRS_STORE: return s->store.buf == buf ? s : NULL;
    default: return NULL;
  }
}

/* The constant extent of the loop the accumulator is around (L), or INT64_MAX when it is not constant. */
static int64_t red_ext(const kg_irstmt *s, const kg_buffer *acc) {
  const kg_irstmt *b = s->alloc.body;
  for (int i = 0; i < b->seq.n; i++) {
    const kg_irstmt *it = b->seq.items[i];
    int64_t e;
    if (it->kind == KG_IRS_FOR && acc->reg_acc_loop && it->loop.loop_name &&
        strcmp(it->loop.loop_name, acc->reg_acc_loop) == 0)
      return kg_ir_is_const(it->loop.extent, &e) ? e : INT64_MAX;
  }
  return 0;
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

/* The guarded prefetches for the accumulator alloc s, or NULL. */
static kg_irstmt *plan(pctx *P, const kg_irstmt *s) {
  const kg_buffer *acc = s->alloc.buf;
  kg_buffer *buf = (kg_buffer *)acc->reg_acc_of;
  if (!acc->reg_acc || !buf || buf->dyn_size || buf->size < 1) return NULL;
  /* an output or temporary, or a region large enough that its rows are far apart (a block of a GEMM's output
   * computed at a loop of its consumer, as an MLP layer's); not a small local array */
  if (buf->scope != KG_SCOPE_GLOBAL && !(buf->scope == KG_SCOPE_LOCAL && !buf->reg_acc && buf->size >= PF_MIN_REGION))
    return NULL;
  if (buf->tensor)
    for (int d = 0; d < buf->tensor->ndim; d++)
      if (buf->tensor->dyn[d]) return NULL; /* a parameter's size bound is not its size */
  /* a short reduction would pay for the hints more than they save */
  if (s->alloc.body->kind != KG_IRS_SEQ || red_ext(s, acc) < PF_MIN_REDUCTION) return NULL;
  /* the store nest: the last item that is one */
  const kg_irstmt *nest[PF_MAX_NEST], *st = NULL;
  int depth = 0;
  for (int i = s->alloc.body->seq.n - 1; i >= 0 && !st; i--) {
    depth = 0;
    st = store_nest(P, s->alloc.body->seq.items[i], buf, nest, &depth);
  }
  if (!st) return NULL;
  kg_affine l = kg_bounds_affine(P->a, st->store.index, P->lets, P->nvars);
  if (!l.ok) return NULL;
  /* P: the innermost clean serial loop whose variable the index uses */
  const kg_irstmt *loop = NULL;
  int64_t pcoef = 0;
  for (int k = P->nloops - 1; k >= P->clean_from && !loop; k--) {
    const kg_irstmt *f = P->loops[k];
    int64_t e;
    if (kg_ir_is_const(f->loop.extent, &e) && e == 1) continue;
    for (int t = 0; t < l.n; t++)
      if (l.t[t].atom->kind == KG_IRE_VAR && l.t[t].atom->var == f->loop.var) loop = f, pcoef = l.t[t].coef;
  }
  if (!loop || loop->loop.kind != KG_LOOP_SERIAL) return NULL;
  /* the variables that move the tile (P's and the nest's): a nonaffine atom over them has no next-tile form */
  unsigned char *moving = KG_NEW_ARRAY(P->a, unsigned char, P->nvars);
  if (loop->loop.var->id < P->nvars) moving[loop->loop.var->id] = 1;
  for (int d = 0; d < depth; d++)
    if (nest[d]->loop.var->id < P->nvars) moving[nest[d]->loop.var->id] = 1;
  /* the tile's offsets: nest terms enumerated, the rest (the next tile's base) kept symbolic */
  int64_t coef[PF_MAX_NEST] = {0}, ext[PF_MAX_NEST];
  kg_affine base = l;
  base.t = KG_NEW_ARRAY(P->a, kg_affine_term, l.n + 1);
  base.n = 0;
  for (int t = 0; t < l.n; t++) {
    const kg_irexpr *at = l.t[t].atom;
    int k = -1;
    for (int d = 0; d < depth; d++)
      if (at->kind == KG_IRE_VAR && at->var == nest[d]->loop.var) k = d;
    if (k >= 0) {
      coef[k] = l.t[t].coef;
      continue;
    }
    if (at->kind != KG_IRE_VAR && kg_ir_uses_marked(at, moving, P->nvars)) return NULL;
    base.t[base.n++] = l.t[t];
  }
  if (__builtin_add_overflow(base.c, pcoef, &base.c)) return NULL;
  int64_t n = 1;
  for (int d = 0; d < depth; d++) {
    kg_ir_is_const(nest[d]->loop.extent, &ext[d]);
    if (__builtin_mul_overflow(n, ext[d], &n) || n > 4096) return NULL;
  }
  int64_t *off = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)n);
  for (int64_t i = 0; i < n; i++) {
    int64_t r = i, o = 0;
    for (int d = depth - 1; d >= 0; d--) {
      o += coef[d] * (r % ext[d]);
      r /= ext[d];
    }
    off[i] = o;
  }
  qsort(off, (size_t)n, sizeof *off, cmp_i64);
  /* points at most a line apart along each run, and each run's last element: every line touched holds one */
  int64_t line = buf->dtype == KG_DT_F32 ? 16 : 32, pts[PF_MAX_LINES];
  int np = 0, ok = 1, runs = 0;
  for (int64_t i = 0; i < n && ok; i++) {
    int last_of_run = i + 1 == n || off[i + 1] > off[i] + 1;
    runs += last_of_run;
    if (np && off[i] == pts[np - 1]) continue;
    if (np == 0 || off[i] >= pts[np - 1] + line || last_of_run) {
      if (np == PF_MAX_LINES) ok = 0;
      else pts[np++] = off[i];
    }
  }
  int64_t lo = off[0], hi = off[n - 1];
  free(off);
  /* one run (a row) is what hardware prefetchers follow themselves */
  if (!ok || runs < 2) return NULL;
  kg_arena *a = P->a;
  kg_irexpr *b = kg_bounds_affine_ir(a, &base);
  kg_irexpr *pv = kg_ir_var(a, loop->loop.var);
  kg_irexpr *cond = kg_ir_binary(a, KG_OP_LT, kg_ir_binary(a, KG_OP_ADD, pv, kg_ir_int(a, 1)), loop->loop.extent);
  kg_irexpr *first = kg_bounds_simplify(a, kg_ir_binary(a, KG_OP_ADD, b, kg_ir_int(a, lo)), NULL, 0);
  kg_irexpr *lastel = kg_bounds_simplify(a, kg_ir_binary(a, KG_OP_ADD, b, kg_ir_int(a, hi)), NULL, 0);
  cond = kg_ir_binary(a, KG_OP_AND, cond, kg_ir_binary(a, KG_OP_GE, first, kg_ir_int(a, 0)));
  cond = kg_ir_binary(a, KG_OP_AND, cond, kg_ir_binary(a, KG_OP_LT, lastel, kg_ir_int(a, buf->size)));
  kg_irstmt *body = kg_ir_seq(a);
  for (int i = 0; i < np; i++)
    kg_ir_seq_push(a, body, kg_ir_prefetch(a, buf, kg_bounds_simplify(a, kg_ir_binary(a, KG_OP_ADD, b,
                                                                                      kg_ir_int(a, pts[i])),
                                                                     NULL, 0)));
  return kg_ir_if(a, cond, body, NULL);
}

static void visit(pctx *P, kg_irstmt *s) {
  switch (s->kind) {
    case KG_IRS_FOR: {
      if (P->nloops == PF_MAX_LOOPS) return;
      int saved = P->clean_from;
      int64_t e;
      P->loops[P->nloops++] = s;
      /* a loop of one iteration is transparent: the tile's next one is then that of the loop around it */
      if (!kg_ir_is_const(s->loop.extent, &e) || e != 1) P->clean_from = P->nloops - 1;
      visit(P, s->loop.body);
      P->nloops--;
      P->clean_from = saved;
      return;
    }
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) {
        kg_irstmt *it = s->seq.items[i];
        if (it->kind == KG_IRS_LET && it->let.var->id < P->nvars) P->lets[it->let.var->id] = it->let.value;
        visit(P, it);
      }
      return;
    case KG_IRS_IF:
      visit(P, s->cond.then);
      if (s->cond.otherwise) visit(P, s->cond.otherwise);
      return;
    case KG_IRS_ALLOC: {
      if (s->alloc.buf->reg_acc) {
        kg_irstmt *pf = plan(P, s);
        if (pf) { /* plan made it for a SEQ body */
          kg_irstmt *seq = s->alloc.body;
          kg_ir_seq_push(P->a, seq, pf); /* grows the array; then moved to the front */
          memmove(&seq->seq.items[1], &seq->seq.items[0], sizeof(*seq->seq.items) * (size_t)(seq->seq.n - 1));
          seq->seq.items[0] = pf;
        }
        return; /* nothing inside a tile is another tile */
      }
      /* an ALLOC between a loop and a tile keeps the loop clean (the tile's buffers are scoped so) */
      visit(P, s->alloc.body);
      return;
    }
    default: return;
  }
}

void kg_lower_prefetch(kg_arena *a, kg_lowered *f) {
  if (!f || !f->body || f->n_vars <= 0) return;
  pctx P = {a, f->n_vars, NULL, {0}, 0, 0};
  P.lets = KG_NEW_ARRAY(a, kg_irexpr *, f->n_vars);
  visit(&P, f->body);
}
