/* Transposed tile stores, for the C target.
 *
 * A stage whose output is contiguous along one loop while its input is contiguous along another (a transpose,
 * Y[j, i] = X[i, j]) cannot have both in one vector loop. Vectorized along the input's contiguous axis, each
 * vector of results is scattered to W places a row apart: gcc writes it with W scalar stores (or a scatter),
 * and a 4096 x 4096 transpose on two Zen 5 cores ran at 12.6 GB/s, a third of the copy rate, behind
 * TorchInductor. Hand-written transposes instead load a W x W block as W vectors, transpose it in registers
 * (shuffles), and store W vectors: 28-33 GB/s on the same machine (bench/hand/transpose16.c).
 *
 * So a nest
 *   for a in [0, EA):                   the store is contiguous along a (coefficient 1)
 *     for b in [0, EB) vectorized:      its value is computed a vector along b at a time
 *       LETs; Y[base + a + S b] = value
 * becomes, with n the largest of 16, 8, 4 that divides EA and EB,
 *   for ao in [0, EA / n):              (a's kind: serial, unrolled or parallel)
 *     alloc kg_tt[n EB] (local) {
 *       for ai in [0, n) unrolled: let a = ao n + ai; for b vectorized: LETs; kg_tt[ai EB + b] = value
 *       for c in [0, EB / n) unrolled: tstore n x n: Y[base + ao n + c n S + r + S c'] = kg_tt[c n + r EB + c']
 *     }
 * The values are computed as before, a vector along b at a time, into a block that the compiler keeps in
 * registers or in L1; the tile store (KG_IRS_TSTORE, which the C printer writes with shuffles of the widest
 * vectors the compiler targets) writes each of its n columns as one contiguous run of n elements.
 *
 * Where a or b is ragged (tightening's min(F, E - x) extent at the edges of a split that does not divide), the
 * tiles are made for F and the nest tests for whole tiles: if (EA == F_a && EB == F_b) tiles; else as it was.
 *
 * Requires (anything else is left as it is): lowered IR for KG_TARGET_C (variable ids below f->n_vars, buffer ids
 * below f->n_buffers). The loop a is serial, unrolled or parallel with a constant extent or a ragged one, and its
 * body is the vectorized loop b alone (comments aside), of either kind too, b's extent not depending on a, at
 * most TR_MAX_COLS; b's body is LETs and one store, not streamed, into an f32 buffer that is not a register
 * accumulator, whose value does not read that buffer; the store's index is affine (through the LETs) with
 * coefficient 1 in a and a constant S >= EA in b, and no other term depends on a or b.
 * Guarantees: IR the verifier accepts; every element the nest stored gets the same value. Each (a, b) writes its
 * own element (S >= EA) and no value reads the buffer written, so the order of the stores does not matter. */
#include <string.h>
#include "bounds.h"
#include "ir.h"

#define TR_MAX_COLS 64 /* EB: the block is n x EB floats, at most 4 KB */

typedef struct tctx {
  kg_arena *a;
  kg_lowered *f;
  int nvars;          /* the variables before the pass (the lets table's size) */
  kg_irexpr **lets;   /* by variable id: the LETs of the nest being looked at */
  unsigned char *mark;
  int ntiles;
} tctx;

/* The one statement of s, comments aside (s itself when it is not a SEQ); NULL when there are others. */
static kg_irstmt *sole(kg_irstmt *s) {
  if (s->kind != KG_IRS_SEQ) return s;
  kg_irstmt *one = NULL;
  for (int i = 0; i < s->seq.n; i++) {
    if (s->seq.items[i]->kind == KG_IRS_COMMENT) continue;
    if (one) return NULL;
    one = s->seq.items[i];
  }
  return one;
}

static kg_irvar *new_var(tctx *T, const char *what) {
  kg_irvar *v = KG_NEW(T->a, kg_irvar);
  v->name = kg_arena_printf(T->a, "kg_tr%d_%s", T->ntiles, what);
  v->id = T->f->n_vars++;
  return v;
}

/* Item i of a loop body of nitems(body) items (a body that is not a SEQ is its one item). */
static int nitems(const kg_irstmt *body) { return body->kind == KG_IRS_SEQ ? body->seq.n : 1; }
static const kg_irstmt *item(const kg_irstmt *body, int i) {
  return body->kind == KG_IRS_SEQ ? body->seq.items[i] : body;
}

/* The largest tile size of 16, 8, 4 that divides both extents; 0 when none does. */
static int tile_of(int64_t ea, int64_t eb) {
  for (int n = 16; n >= 4; n /= 2)
    if (ea % n == 0 && eb % n == 0) return n;
  return 0;
}

/* The rewritten nest for loop A, or NULL when A is not one the pass applies to. */
static kg_irstmt *rewrite(tctx *T, const kg_irstmt *A) {
  kg_arena *a = T->a;
  int64_t ea, eb;
  if (A->loop.kind != KG_LOOP_SERIAL && A->loop.kind != KG_LOOP_UNROLLED && A->loop.kind != KG_LOOP_PARALLEL)
    return NULL;
  /* a ragged extent (min(F, E - x), tightening's) is tiled where it is whole */
  const int exact_a = kg_ir_is_const(A->loop.extent, &ea);
  if (!exact_a && !kg_ir_const_upper(A->loop.extent, &ea)) return NULL;
  const kg_irstmt *B = sole(A->loop.body);
  if (!B || B->kind != KG_IRS_FOR || B->loop.kind != KG_LOOP_VECTORIZED) return NULL;
  const int exact_b = kg_ir_is_const(B->loop.extent, &eb);
  if ((!exact_b && !kg_ir_const_upper(B->loop.extent, &eb)) || eb > TR_MAX_COLS) return NULL;
  int n = tile_of(ea, eb);
  if (!n) return NULL;
  /* b's body: LETs, then the store */
  const kg_irstmt *body = B->loop.body, *st = NULL;
  const int nb = nitems(body);
  for (int i = 0; i < nb; i++) {
    const kg_irstmt *it = item(body, i);
    if (it->kind == KG_IRS_COMMENT) continue;
    if (it->kind == KG_IRS_LET && !st) continue;
    if (it->kind != KG_IRS_STORE || st) return NULL;
    st = it;
  }
  if (!st) return NULL;
  kg_buffer *dst = st->store.buf;
  if (st->store.stream || st->store.async || dst->dtype != KG_DT_F32 || dst->is_input || dst->reg_acc ||
      kg_ir_reads(st->store.value, dst))
    return NULL;
  int ok = 1;
  for (int i = 0; i < nb; i++) {
    const kg_irstmt *it = item(body, i);
    if (it->kind != KG_IRS_LET) continue;
    if (it->let.var->id >= T->nvars) ok = 0;
    else T->lets[it->let.var->id] = it->let.value;
  }
  kg_affine l = ok ? kg_bounds_affine(a, st->store.index, T->lets, T->nvars) : (kg_affine){0};
  for (int i = 0; i < nb; i++) {
    const kg_irstmt *it = item(body, i);
    if (it->kind == KG_IRS_LET && it->let.var->id < T->nvars) T->lets[it->let.var->id] = NULL;
  }
  const kg_irvar *va = A->loop.var, *vb = B->loop.var;
  if (!l.ok || va->id >= T->nvars || vb->id >= T->nvars) return NULL;
  /* b's extent is tested outside a */
  T->mark[va->id] = 1;
  ok = !kg_ir_uses_marked(B->loop.extent, T->mark, T->nvars);
  T->mark[va->id] = 0;
  /* the base: every term but a's and b's, none of which may depend on them */
  int64_t ca = 0, cb = 0;
  kg_affine base = l;
  base.t = KG_NEW_ARRAY(a, kg_affine_term, l.n + 2);
  base.n = 0;
  T->mark[va->id] = T->mark[vb->id] = 1;
  for (int t = 0; t < l.n && ok; t++) {
    const kg_irexpr *at = l.t[t].atom;
    if (at->kind == KG_IRE_VAR && at->var == va) ca = l.t[t].coef;
    else if (at->kind == KG_IRE_VAR && at->var == vb) cb = l.t[t].coef;
    else if (kg_ir_uses_marked(at, T->mark, T->nvars)) ok = 0;
    else base.t[base.n++] = l.t[t];
  }
  T->mark[va->id] = T->mark[vb->id] = 0;
  if (!ok || ca != 1 || cb < ea) return NULL;
  /* the tile's names and block */
  kg_irvar *ao = new_var(T, "o"), *ai = new_var(T, "i"), *co = eb > n ? new_var(T, "c") : NULL;
  kg_buffer *blk = KG_NEW(a, kg_buffer);
  blk->name = kg_arena_printf(a, "kg_tt%d", T->ntiles);
  blk->id = T->f->n_buffers++;
  blk->scope = KG_SCOPE_LOCAL;
  blk->tensor = dst->tensor;
  blk->dtype = KG_DT_F32;
  blk->size = (int64_t)n * eb;
  blk->param_index = -1;
  T->ntiles++;
  /* the values, a row of the block (a vector along b) per ai */
  kg_irstmt *vals = kg_ir_seq(a);
  for (int i = 0; i < nb; i++) {
    const kg_irstmt *it = item(body, i);
    if (it->kind == KG_IRS_LET || it->kind == KG_IRS_COMMENT) kg_ir_seq_push(a, vals, (kg_irstmt *)it);
  }
  kg_irexpr *slot = kg_ir_binary(a, KG_OP_ADD, kg_ir_binary(a, KG_OP_MUL, kg_ir_var(a, ai), kg_ir_int(a, eb)),
                                 kg_ir_var(a, (kg_irvar *)vb));
  kg_irstmt *put = kg_ir_store(a, blk, slot, st->store.value);
  put->pos = st->pos;
  kg_ir_seq_push(a, vals, put);
  kg_irstmt *row = kg_ir_seq(a);
  kg_ir_seq_push(a, row, kg_ir_let(a, (kg_irvar *)va,
                                   kg_ir_binary(a, KG_OP_ADD, kg_ir_binary(a, KG_OP_MUL, kg_ir_var(a, ao),
                                                                           kg_ir_int(a, n)),
                                                kg_ir_var(a, ai))));
  kg_irstmt *bl = kg_ir_for(a, (kg_irvar *)vb, kg_ir_int(a, eb), KG_LOOP_VECTORIZED, KG_THREAD_NONE, B->loop.loop_name,
                            B->loop.stage_name, vals);
  bl->pos = B->pos;
  kg_ir_seq_push(a, row, bl);
  kg_irstmt *tile = kg_ir_seq(a);
  kg_ir_seq_push(a, tile, kg_ir_for(a, ai, kg_ir_int(a, n), KG_LOOP_UNROLLED, KG_THREAD_NONE, A->loop.loop_name,
                                    A->loop.stage_name, row));
  /* the stores: column block c of the tile at base + ao n + c n S */
  const int ncol = (int)(eb / n);
  base.t[base.n++] = (kg_affine_term){kg_ir_var(a, ao), n};
  if (ncol > 1) base.t[base.n++] = (kg_affine_term){kg_ir_var(a, co), n * cb};
  kg_irexpr *src_index = ncol > 1 ? kg_ir_binary(a, KG_OP_MUL, kg_ir_var(a, co), kg_ir_int(a, n)) : kg_ir_int(a, 0);
  kg_irstmt *ts = kg_ir_tstore(a, blk, src_index, eb, dst, kg_bounds_affine_ir(a, &base), cb, n,
                               A->loop.stage_name);
  ts->pos = st->pos;
  kg_ir_seq_push(a, tile, ncol > 1 ? kg_ir_for(a, co, kg_ir_int(a, ncol), KG_LOOP_UNROLLED, KG_THREAD_NONE,
                                               B->loop.loop_name, B->loop.stage_name, ts)
                                   : ts);
  kg_irstmt *outer = kg_ir_for(a, ao, kg_ir_int(a, ea / n), A->loop.kind, KG_THREAD_NONE, A->loop.loop_name,
                               A->loop.stage_name, kg_ir_alloc(a, blk, tile));
  outer->pos = A->pos;
  if (exact_a && exact_b) return outer;
  /* the ragged tiles of the edges as they were */
  kg_irexpr *whole = NULL;
  for (int q = 0; q < 2; q++) {
    const kg_irstmt *L = q ? B : A;
    if (q ? exact_b : exact_a) continue;
    kg_irexpr *c = kg_ir_binary(a, KG_OP_EQ, L->loop.extent, kg_ir_int(a, q ? eb : ea));
    whole = whole ? kg_ir_binary(a, KG_OP_AND, whole, c) : c;
  }
  return kg_ir_if(a, whole, outer, (kg_irstmt *)A);
}

static void visit(tctx *T, kg_irstmt **sp) {
  kg_irstmt *s = *sp;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) visit(T, &s->seq.items[i]);
      return;
    case KG_IRS_FOR: {
      kg_irstmt *r = rewrite(T, s);
      if (r) *sp = r;
      else visit(T, &s->loop.body);
      return;
    }
    case KG_IRS_IF:
      visit(T, &s->cond.then);
      if (s->cond.otherwise) visit(T, &s->cond.otherwise);
      return;
    case KG_IRS_ALLOC: visit(T, &s->alloc.body); return;
    default: return;
  }
}

void kg_lower_transpose(kg_arena *a, kg_lowered *f) {
  if (!f || !f->body || f->n_vars <= 0 || f->target != KG_TARGET_C) return;
  tctx T = {a, f, f->n_vars, NULL, NULL, 0};
  T.lets = KG_NEW_ARRAY(a, kg_irexpr *, f->n_vars);
  T.mark = KG_NEW_ARRAY(a, unsigned char, f->n_vars);
  visit(&T, &f->body);
}
