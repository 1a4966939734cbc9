/* Register accumulation for the C target.
 *
 * gcc keeps an accumulator in registers only when it is a small array indexed by constants once the inner loops
 * are unrolled; an accumulation into a larger buffer (a tile-sized local region, or an output) around which a
 * reduction loop runs is loaded and stored on every iteration, whatever the aliasing. So a loop L whose body is a
 * nest of constant loops around one store buf[idx] = f(buf[idx], ...), with idx independent of L and injective
 * in the nest's variables (an affine function of them with distinct values), becomes
 *   alloc kg_accN: f32[size] local (register accumulator of buf around L)
 *     nest: kg_accN[slot] = buf[idx]
 *     L { nest: kg_accN[slot] = f(kg_accN[slot], ...) }
 *     nest: buf[idx] = kg_accN[slot]
 * where slot numbers the nest's iterations. Each element sees the same operations in the same order, so results
 * are bit-identical. L's body may also start with a chain of up to RACC_MAX_RED serial loops (more reduction
 * loops: c, r, s of a convolution around its register tile) that idx does not use; they stay inside L, and the
 * accumulator lives across all of them rather than being reloaded around the innermost one (in the load and
 * store nests they are left out, their bodies kept as SEQs for the LETs' scopes).
 *
 * A nest loop whose extent is min(F, E - rest) (the last tile of a split that does not divide its loop, or of any
 * split of a loop that follows a dynamic size, where which tile is last depends on the size at run time) is ragged
 * only in the last tile. Such a nest is versioned: IF every ragged extent reaches its bound (all tiles but the
 * last), the register accumulation with the constant extents F; ELSE the plain loop. So a tile size that does not
 * divide the loop, or a size known only at run time, does not cost the register tiling.
 *
 * Requires: lowered IR for KG_TARGET_C after tightening (variable ids below f->n_vars, buffer ids below
 * f->n_buffers). Guarantees: IR that the verifier accepts, computing the same values in the same order; the
 * accumulator is a LOCAL buffer of at most RACC_MAX_SIZE elements with reg_acc set, named kg_accN (N counting in
 * the order a printer meets them: IR names never start with kg_). Loops the pass rewrote are not visited again;
 * the plain loop of a versioned nest is, as any loop the pass leaves alone. */
#include <stdlib.h>
#include <string.h>
#include "../base/xalloc.h"
#include "bounds.h"
#include "ir.h"

/* The deepest nest of constant loops an accumulation covers, its most elements, its most reduction loops. */
#define RACC_MAX_DEPTH 8
#define RACC_MAX_SIZE 512
#define RACC_MAX_RED 3

typedef struct rctx {
  kg_arena *a;
  kg_lowered *f;
  int nvars;
  int nacc; /* accumulators made so far (their names) */
} rctx;

typedef struct racc {
  const kg_irstmt *loop, *store;
  const kg_irstmt *nest[RACC_MAX_DEPTH]; /* the nest's loops, outermost first */
  int depth;
  int64_t ext[RACC_MAX_DEPTH];  /* constant extents (a ragged loop's bound) */
  int ragged[RACC_MAX_DEPTH];   /* the extent is not constant: ext is its constant upper bound */
  int nragged;
  int64_t size;
  const kg_irstmt *red[RACC_MAX_RED]; /* the serial loops between L and the nest, outermost first */
  int nred, want_red;
  unsigned char *dep;   /* variables that depend on L's variable (LETs of the nest that use it) */
  unsigned char *inner; /* variables declared inside L (LETs, loops), not yet in scope before it */
} racc;

/* Loads of buf in e whose index is not idx (idx NULL: every load of buf). */
static int other_loads(const kg_irexpr *e, const kg_buffer *buf, const kg_irexpr *idx) {
  if (e->kind == KG_IRE_LOAD && e->load.buf == buf && !(idx && kg_bounds_expr_equal(e->load.index, idx))) return 1;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++)
    if (other_loads(*kids[i], buf, idx)) return 1;
  return 0;
}

/* The LETs of the nest that use its variables, substituted in the store's index, and the variables that depend on
 * the nest's (its loop variables and those LETs). */
typedef struct racc_lin {
  kg_irexpr **lets;
  unsigned char *nestdep;
} racc_lin;

/* coef[k]: the coefficient of nest loop k's variable in e (kg_bounds_affine); 0 when some other term of e moves
 * with the nest (e is not affine in its variables). Terms free of them are ignored. */
static int lin_form(const rctx *R, const racc *ra, const racc_lin *L, kg_irexpr *e, int64_t *coef) {
  for (int k = 0; k < RACC_MAX_DEPTH; k++) coef[k] = 0;
  kg_affine l = kg_bounds_affine(R->a, e, L->lets, R->nvars);
  if (!l.ok) return 0;
  for (int i = 0; i < l.n; i++) {
    int k = 0;
    while (k < ra->depth && !(l.t[i].atom->kind == KG_IRE_VAR && l.t[i].atom->var == ra->nest[k]->loop.var)) k++;
    if (k < ra->depth) coef[k] += l.t[i].coef;
    else if (kg_ir_uses_marked(l.t[i].atom, L->nestdep, R->nvars)) return 0;
  }
  return 1;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Is the store's index injective over the nest's iterations? */
static int racc_injective(const racc *ra, const int64_t *coef) {
  int64_t vals[RACC_MAX_SIZE];
  for (int64_t n = 0; n < ra->size; n++) {
    int64_t r = n, v = 0;
    for (int k = ra->depth - 1; k >= 0; k--) {
      v += coef[k] * (r % ra->ext[k]);
      r /= ra->ext[k];
    }
    vals[n] = v;
  }
  qsort(vals, (size_t)ra->size, sizeof vals[0], cmp_i64);
  for (int64_t n = 1; n < ra->size; n++)
    if (vals[n] == vals[n - 1]) return 0;
  return 1;
}

/* The items of a loop body: a SEQ's items, or the statement itself. */
static int body_items(const kg_irstmt *s, kg_irstmt *const **items) {
  if (s->kind == KG_IRS_SEQ) {
    *items = s->seq.items;
    return s->seq.n;
  }
  *items = NULL;
  return 1;
}

/* May a nest loop with extent e be ragged (see above)? It must have a constant bound (*u) and be computable before
 * L: a tile that follows a dynamic size, or the last tile of a split that does not divide its loop (the bound
 * tighten.c makes of a guard). */
static int racc_ragged_ok(const rctx *R, const racc *ra, const kg_irexpr *e, int64_t *u) {
  return kg_ir_const_upper(e, u) && !kg_ir_uses_marked(e, ra->inner, R->nvars) &&
         !kg_ir_uses_marked(e, ra->dep, R->nvars);
}

/* Walks the nest under L: LETs and comments, then one constant (or ragged) loop or the store. Marks dependences as
 * it goes. 0 when the body is not such a nest. */
static int racc_walk(const rctx *R, racc *ra, racc_lin *L, const kg_irstmt *s) {
  kg_irstmt *const *items;
  int n = body_items(s, &items);
  for (int i = 0; i < n; i++) {
    const kg_irstmt *x = items ? items[i] : s;
    int last = i == n - 1;
    switch (x->kind) {
      case KG_IRS_COMMENT: break;
      case KG_IRS_LET: {
        int id = x->let.var->id;
        if (id >= R->nvars || kg_ir_has_load(x->let.value)) return 0;
        ra->inner[id] = 1;
        if (kg_ir_uses_marked(x->let.value, ra->dep, R->nvars)) ra->dep[id] = 1;
        if (kg_ir_uses_marked(x->let.value, L->nestdep, R->nvars)) {
          L->nestdep[id] = 1;
          L->lets[id] = x->let.value;
        }
        break;
      }
      case KG_IRS_FOR: {
        int64_t ext;
        if (ra->depth == 0 && ra->nred < ra->want_red) {
          if (!last || x->loop.kind != KG_LOOP_SERIAL || x->loop.tag != KG_THREAD_NONE || x->loop.var->id >= R->nvars)
            return 0;
          ra->red[ra->nred++] = x;
          ra->dep[x->loop.var->id] = ra->inner[x->loop.var->id] = 1;
          return racc_walk(R, ra, L, x->loop.body);
        }
        int ragged = !kg_ir_is_const(x->loop.extent, &ext);
        if (ragged && !racc_ragged_ok(R, ra, x->loop.extent, &ext)) return 0;
        if (!last || ra->depth >= RACC_MAX_DEPTH || ext < 1 || x->loop.tag != KG_THREAD_NONE ||
            !(x->loop.kind == KG_LOOP_SERIAL || x->loop.kind == KG_LOOP_UNROLLED || x->loop.kind == KG_LOOP_VECTORIZED))
          return 0;
        if (ra->size * ext > RACC_MAX_SIZE) return 0;
        ra->size *= ext;
        ra->ext[ra->depth] = ext;
        ra->ragged[ra->depth] = ragged;
        ra->nragged += ragged;
        ra->nest[ra->depth++] = x;
        if (x->loop.var->id >= R->nvars) return 0;
        L->nestdep[x->loop.var->id] = ra->inner[x->loop.var->id] = 1;
        return racc_walk(R, ra, L, x->loop.body);
      }
      case KG_IRS_STORE:
        if (!last) return 0;
        ra->store = x;
        return 1;
      default: return 0;
    }
  }
  return 0;
}

/* Fills ra when loop qualifies with want_red reduction loops before the nest; ra->dep is then the caller's. */
static int racc_find(const rctx *R, const kg_irstmt *loop, int want_red, racc *ra) {
  memset(ra, 0, sizeof *ra);
  ra->want_red = want_red;
  if (!(loop->loop.kind == KG_LOOP_SERIAL || loop->loop.kind == KG_LOOP_UNROLLED) || loop->loop.tag != KG_THREAD_NONE ||
      loop->loop.var->id >= R->nvars || !kg_ir_contains_loop(loop->loop.body))
    return 0;
  int64_t ext;
  if (kg_ir_is_const(loop->loop.extent, &ext) && ext < 2) return 0;
  ra->loop = loop;
  ra->size = 1;
  size_t nv = (size_t)R->nvars;
  unsigned char *marks = kg_xrealloc(NULL, 3 * nv);
  memset(marks, 0, 3 * nv);
  kg_irexpr **lets = kg_xrealloc(NULL, sizeof *lets * nv);
  memset(lets, 0, sizeof *lets * nv);
  racc_lin L = {lets, marks + nv};
  ra->dep = marks;
  ra->inner = marks + 2 * nv;
  ra->dep[loop->loop.var->id] = 1;
  int ok = racc_walk(R, ra, &L, loop->loop.body) && ra->depth > 0 && ra->nred == want_red;
  const kg_irstmt *st = ra->store;
  int64_t coef[RACC_MAX_DEPTH];
  ok = ok && !st->store.buf->is_input && st->store.buf->scope != KG_SCOPE_SHARED &&
       !kg_ir_uses_marked(st->store.index, ra->dep, R->nvars) && !other_loads(st->store.index, st->store.buf, NULL) &&
       !other_loads(st->store.value, st->store.buf, st->store.index) && lin_form(R, ra, &L, st->store.index, coef) &&
       racc_injective(ra, coef);
  free(lets);
  if (!ok) {
    free(marks);
    ra->dep = ra->inner = NULL;
  }
  return ok;
}

/* ---- the rewrite ---- */

enum { RACC_LOAD, RACC_MAIN, RACC_STORE };

typedef struct rbuild {
  rctx *R;
  const racc *ra;
  kg_buffer *acc;
  kg_irexpr *slot;
  int full; /* ragged nest loops get their constant bounds */
} rbuild;

static int racc_is_red(const racc *ra, const kg_irstmt *loop) {
  for (int i = 0; i < ra->nred; i++)
    if (ra->red[i] == loop) return 1;
  return 0;
}

static int64_t full_extent(const rbuild *B, const kg_irstmt *loop) {
  for (int k = 0; k < B->ra->depth; k++)
    if (B->ra->nest[k] == loop && B->ra->ragged[k]) return B->ra->ext[k];
  return -1;
}

/* e with every load of the store's element (the others were ruled out) reading the accumulator's slot. */
static kg_irexpr *to_slot(rbuild *B, kg_irexpr *e) {
  const kg_irstmt *st = B->ra->store;
  if (e->kind == KG_IRE_LOAD && e->load.buf == st->store.buf && kg_bounds_expr_equal(e->load.index, st->store.index))
    return kg_ir_load(B->R->a, B->acc, B->slot);
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children(e, kids);
  if (!n) return e;
  kg_irexpr *c = KG_NEW(B->R->a, kg_irexpr);
  *c = *e;
  n = kg_ir_children(c, kids);
  for (int i = 0; i < n; i++) *kids[i] = to_slot(B, *kids[i]);
  return c;
}

/* Pushes onto out the items of body s in one of the three forms: the accumulator loaded, updated, stored back. */
static void build_nest(rbuild *B, kg_irstmt *out, const kg_irstmt *s, int mode) {
  kg_arena *a = B->R->a;
  const racc *ra = B->ra;
  kg_irstmt *const *items;
  int n = body_items(s, &items);
  for (int i = 0; i < n; i++) {
    kg_irstmt *x = items ? items[i] : (kg_irstmt *)s;
    switch (x->kind) {
      case KG_IRS_LET:
        if (mode == RACC_MAIN || !ra->dep[x->let.var->id]) kg_ir_seq_push(a, out, x);
        break;
      case KG_IRS_FOR: {
        kg_irstmt *body = kg_ir_seq(a);
        build_nest(B, body, x->loop.body, mode);
        if (mode != RACC_MAIN && racc_is_red(ra, x)) {
          /* a reduction loop between L and the nest: only its body, a scope of its own for the LETs */
          kg_ir_seq_push(a, out, body);
          break;
        }
        int64_t fe = B->full ? full_extent(B, x) : -1;
        kg_ir_seq_push(a, out, kg_ir_for(a, x->loop.var, fe >= 0 ? kg_ir_int(a, fe) : x->loop.extent, x->loop.kind,
                                         x->loop.tag, x->loop.loop_name, x->loop.stage_name, body));
        break;
      }
      case KG_IRS_STORE: {
        kg_irstmt *y;
        if (mode == RACC_STORE) y = kg_ir_store(a, x->store.buf, x->store.index, kg_ir_load(a, B->acc, B->slot));
        else if (mode == RACC_LOAD) y = kg_ir_store(a, B->acc, B->slot, kg_ir_load(a, x->store.buf, x->store.index));
        else y = kg_ir_store(a, B->acc, B->slot, to_slot(B, x->store.value));
        y->pos = x->pos;
        kg_ir_seq_push(a, out, y);
        break;
      }
      default: break; /* comments */
    }
  }
}

/* The accumulation of ra: ALLOC of the accumulator around the load nest, L and the store nest. */
static kg_irstmt *build_racc(rctx *R, const racc *ra, int full) {
  kg_arena *a = R->a;
  const kg_irstmt *L = ra->loop, *st = ra->store;
  kg_buffer *acc = KG_NEW(a, kg_buffer);
  acc->name = kg_arena_printf(a, "kg_acc%d", R->nacc++);
  acc->id = R->f->n_buffers++;
  acc->scope = KG_SCOPE_LOCAL;
  acc->tensor = st->store.buf->tensor;
  acc->size = ra->size;
  acc->param_index = -1;
  acc->reg_acc = 1;
  acc->reg_acc_of = st->store.buf;
  acc->reg_acc_loop = L->loop.loop_name;
  /* slot: the nest's iteration number, innermost variable first */
  kg_irexpr *slot = NULL;
  int64_t stride = 1;
  for (int k = ra->depth - 1; k >= 0; k--) {
    kg_irexpr *t = kg_ir_binary(a, KG_OP_MUL, kg_ir_var(a, ra->nest[k]->loop.var), kg_ir_int(a, stride));
    slot = slot ? kg_ir_binary(a, KG_OP_ADD, slot, t) : t;
    stride *= ra->ext[k];
  }
  rbuild B = {R, ra, acc, slot, full};
  kg_irstmt *body = kg_ir_seq(a), *main_body = kg_ir_seq(a);
  build_nest(&B, body, L->loop.body, RACC_LOAD);
  build_nest(&B, main_body, L->loop.body, RACC_MAIN);
  kg_ir_seq_push(a, body, kg_ir_for(a, L->loop.var, L->loop.extent, L->loop.kind, L->loop.tag, L->loop.loop_name,
                                    L->loop.stage_name, main_body));
  build_nest(&B, body, L->loop.body, RACC_STORE);
  return kg_ir_alloc(a, acc, body);
}

static void regacc_stmt(rctx *R, kg_irstmt **slot);

static void regacc_loop(rctx *R, kg_irstmt **slot) {
  kg_irstmt *s = *slot;
  racc ra;
  int found = 0;
  for (int red = 0; red <= RACC_MAX_RED && !found; red++) found = racc_find(R, s, red, &ra);
  if (!found) {
    regacc_stmt(R, &s->loop.body);
    return;
  }
  kg_arena *a = R->a;
  if (!ra.nragged) {
    *slot = build_racc(R, &ra, 0);
    free(ra.dep);
    return;
  }
  /* versioned: the full tiles accumulate in registers, the last (ragged) one runs the plain loop */
  kg_irexpr *cond = NULL;
  for (int k = 0; k < ra.depth; k++) {
    if (!ra.ragged[k]) continue;
    kg_irexpr *c = kg_ir_binary(a, KG_OP_GE, ra.nest[k]->loop.extent, kg_ir_int(a, ra.ext[k]));
    cond = cond ? kg_ir_binary(a, KG_OP_AND, cond, c) : c;
  }
  kg_irstmt *full = kg_ir_seq(a);
  kg_ir_seq_push(a, full, kg_ir_comment(a, "full tiles: constant extents"));
  kg_ir_seq_push(a, full, build_racc(R, &ra, 1));
  free(ra.dep);
  regacc_stmt(R, &s->loop.body);
  *slot = kg_ir_if(a, cond, full, s);
}

static void regacc_stmt(rctx *R, kg_irstmt **slot) {
  kg_irstmt *s = *slot;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) regacc_stmt(R, &s->seq.items[i]);
      break;
    case KG_IRS_FOR: regacc_loop(R, slot); break;
    case KG_IRS_IF:
      regacc_stmt(R, &s->cond.then);
      if (s->cond.otherwise) regacc_stmt(R, &s->cond.otherwise);
      break;
    case KG_IRS_ALLOC: regacc_stmt(R, &s->alloc.body); break;
    default: break;
  }
}

void kg_lower_regacc(kg_arena *a, kg_lowered *f) {
  rctx R = {a, f, f->n_vars, 0};
  if (R.nvars <= 0) return;
  regacc_stmt(&R, &f->body);
}
