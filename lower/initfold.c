/* A reduction's init folded into its register accumulator, for the C target.
 *
 * Lowering initializes a reduction's output before the outermost reduction loop R, in a nest of its own:
 *   init nest: buf[idx0] = c
 *   R { ... alloc kg_acc { nest: kg_acc[slot] = buf[idx]   L { ... }   nest: buf[idx] = kg_acc[slot] } ... }
 * That is one pass writing the whole output and, in R's first iteration, one reading it back: for a 1024^3 GEMM
 * 4 MB stored and loaded again for nothing, a few percent of its time. Where every element the accumulator
 * loads in R's first visit of it is still c, the load becomes select(first, c, buf[idx]) and the init nest goes:
 *   R { ... alloc kg_acc { nest: kg_acc[slot] = first ? c : buf[idx]   L { ... }   nest: ... } ... }
 * with first = (every loop inside R, R included, whose variable the index does not use, is at 0); without such
 * loops the load is c itself.
 *
 * Requires (checked; anything else is left as it is): lowered IR for KG_TARGET_C after kg_lower_regacc. In a SEQ,
 * an init nest (constant loops, load-free LETs, one store of a constant into buf) followed, comments aside, by R:
 * a serial loop with a positive constant extent, or the accumulator's ALLOC (when it is around the outermost
 * reduction loop), inside which
 * - buf is accessed only by one accumulator's load nest (its value exactly the load) and by accumulators' store
 *   nests (their value exactly the accumulator's load), in no other expression or statement;
 * - the path from R to that load holds no IF and only loops of positive constant extents, the loops the index
 *   does not use being serial or unrolled;
 * - the index is affine in the loops around the load (through load-free LETs), plus terms invariant in R, and
 *   injective in the loops it uses (each coefficient exceeds the span of the smaller ones);
 * - the init nest writes exactly the elements that load visits when first holds: the same invariant terms and
 *   constant, the same coefficients over the same extents.
 * Then at an iteration where first holds, no earlier iteration inside R stored the element (it would differ from
 * it in a loop the index uses, and injectivity gives another element), so it holds c; and every element of the
 * init's is loaded so, then stored. Results are bit-identical.
 *
 * Guarantees: IR that the verifier accepts; the init nest replaced by a comment. */
#include <stdlib.h>
#include <string.h>
#include "../base/xalloc.h"
#include "bounds.h"
#include "ir.h"

#define FOLD_MAX_LOOPS 24

typedef struct fctx {
  kg_arena *a;
  int nvars;
  kg_irexpr **lets;     /* by variable id: load-free LET values seen so far (substituted in affine forms) */
  unsigned char *inner; /* by variable id: declared inside the init nest or R (set while a candidate is checked) */
} fctx;

typedef struct loopinfo {
  const kg_irvar *var;
  int64_t ext; /* constant extent */
  kg_loop_kind kind;
} loopinfo;

/* What the walk of R found. */
typedef struct rscan {
  const kg_buffer *buf;
  int bad;                  /* an access that is not an accumulator's load or store, or a load that does not qualify */
  kg_irstmt *load;          /* the accumulator's load of buf */
  int nload;
  loopinfo at[FOLD_MAX_LOOPS]; /* the loops around the load, R first */
  int nat;
  loopinfo stack[FOLD_MAX_LOOPS];
  int depth;
  int under_if;
} rscan;

static void note_let(fctx *F, const kg_irstmt *s) {
  int id = s->let.var->id;
  if (id >= F->nvars) return;
  F->inner[id] = 1;
  F->lets[id] = s->let.value->ty == KG_TY_INT && !kg_ir_has_load(s->let.value) ? s->let.value : NULL;
}

static void scan_r(fctx *F, rscan *S, kg_irstmt *s) {
  if (!s || S->bad) return;
  const kg_buffer *b = S->buf;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) scan_r(F, S, s->seq.items[i]);
      break;
    case KG_IRS_FOR: {
      int64_t ext;
      if (kg_ir_reads(s->loop.extent, b)) S->bad = 1;
      if (S->depth == FOLD_MAX_LOOPS || s->loop.var->id >= F->nvars) {
        S->bad = 1;
        break;
      }
      F->inner[s->loop.var->id] = 1;
      S->stack[S->depth++] = (loopinfo){s->loop.var, kg_ir_is_const(s->loop.extent, &ext) ? ext : -1, s->loop.kind};
      scan_r(F, S, s->loop.body);
      S->depth--;
      break;
    }
    case KG_IRS_IF:
      if (kg_ir_reads(s->cond.cond, b)) S->bad = 1;
      S->under_if++;
      scan_r(F, S, s->cond.then);
      scan_r(F, S, s->cond.otherwise);
      S->under_if--;
      break;
    case KG_IRS_ALLOC: scan_r(F, S, s->alloc.body); break;
    case KG_IRS_LET:
      if (kg_ir_reads(s->let.value, b)) S->bad = 1;
      note_let(F, s);
      break;
    case KG_IRS_STORE: {
      const kg_buffer *sb = s->store.buf;
      const kg_irexpr *v = s->store.value;
      if (kg_ir_reads(s->store.index, b)) S->bad = 1;
      if (sb->reg_acc && sb->reg_acc_of == b && v->kind == KG_IRE_LOAD && v->load.buf == b &&
          !kg_ir_reads(v->load.index, b)) {
        /* the accumulator's load */
        S->nload++;
        S->load = s;
        S->nat = S->depth;
        memcpy(S->at, S->stack, sizeof S->at[0] * (size_t)S->depth);
        if (S->under_if) S->bad = 1;
      } else if (sb == b) {
        /* an accumulator's store back: nothing else may store into buf */
        if (!(v->kind == KG_IRE_LOAD && v->load.buf->reg_acc && v->load.buf->reg_acc_of == b)) S->bad = 1;
      } else if (kg_ir_reads(v, b)) {
        S->bad = 1;
      }
      break;
    }
    case KG_IRS_COMMENT: break;
    /* bf16 dot products may read or accumulate into buf; the GPU's statements do not occur on the C target */
    default: S->bad = 1; break;
  }
}

/* The init nest: constant loops, load-free LETs, comments, ending in one store of a constant. Fills its loops. */
static const kg_irstmt *init_store(fctx *F, const kg_irstmt *s, loopinfo *loops, int *nloops) {
  const kg_irstmt *const *items = s->kind == KG_IRS_SEQ ? (const kg_irstmt *const *)s->seq.items : &s;
  int n = s->kind == KG_IRS_SEQ ? s->seq.n : 1;
  for (int i = 0; i < n; i++) {
    const kg_irstmt *x = items[i];
    int last = i == n - 1;
    switch (x->kind) {
      case KG_IRS_COMMENT: break;
      case KG_IRS_LET:
        if (x->let.var->id >= F->nvars || kg_ir_has_load(x->let.value)) return NULL;
        note_let(F, x);
        break;
      case KG_IRS_FOR: {
        int64_t ext;
        if (!last || *nloops == FOLD_MAX_LOOPS || x->loop.var->id >= F->nvars ||
            !kg_ir_is_const(x->loop.extent, &ext) || x->loop.tag != KG_THREAD_NONE)
          return NULL;
        F->inner[x->loop.var->id] = 1;
        loops[(*nloops)++] = (loopinfo){x->loop.var, ext, x->loop.kind};
        return init_store(F, x->loop.body, loops, nloops);
      }
      case KG_IRS_STORE:
        if (!last || x->store.value->kind != KG_IRE_FLOAT || x->store.buf->reg_acc || x->store.buf->is_input ||
            x->store.buf->scope == KG_SCOPE_SHARED)
          return NULL;
        return x;
      default: return NULL;
    }
  }
  return NULL;
}

/* An affine index split into terms over the given loops (coef by loop, 0 when unused) and the rest, which must be
 * invariant (no variable marked inner). 0 when it is not of that form. */
typedef struct split_index {
  kg_affine l;
  int64_t coef[FOLD_MAX_LOOPS];
  unsigned char is_loop_term[64]; /* by term: it is a loop's variable (terms beyond 64: refused) */
} split_index;

static int split_by_loops(fctx *F, kg_irexpr *idx, const loopinfo *loops, int n, split_index *out) {
  memset(out, 0, sizeof *out);
  out->l = kg_bounds_affine(F->a, idx, F->lets, F->nvars);
  if (!out->l.ok || out->l.n > 64) return 0;
  for (int t = 0; t < out->l.n; t++) {
    const kg_irexpr *atom = out->l.t[t].atom;
    int k = 0;
    while (k < n && !(atom->kind == KG_IRE_VAR && atom->var == loops[k].var)) k++;
    if (k < n) {
      out->coef[k] += out->l.t[t].coef;
      out->is_loop_term[t] = 1;
    } else if (kg_ir_uses_marked(atom, F->inner, F->nvars)) {
      return 0;
    }
  }
  return 1;
}

/* Each |coefficient| above the span of the smaller ones: distinct loop values give distinct sums. */
static int injective(const int64_t *coef, const loopinfo *loops, int n) {
  int64_t c[FOLD_MAX_LOOPS], e[FOLD_MAX_LOOPS];
  int m = 0;
  for (int k = 0; k < n; k++)
    if (coef[k] != 0 && loops[k].ext > 1) {
      c[m] = coef[k] < 0 ? -coef[k] : coef[k];
      e[m++] = loops[k].ext;
    }
  for (int i = 1; i < m; i++)
    for (int j = i; j > 0 && c[j - 1] > c[j]; j--) {
      int64_t t = c[j];
      c[j] = c[j - 1];
      c[j - 1] = t;
      t = e[j];
      e[j] = e[j - 1];
      e[j - 1] = t;
    }
  int64_t span = 0;
  for (int i = 0; i < m; i++) {
    if (c[i] <= span) return 0;
    int64_t s;
    if (__builtin_mul_overflow(c[i], e[i] - 1, &s) || __builtin_add_overflow(span, s, &span)) return 0;
  }
  return 1;
}

/* Do the two indices visit the same elements: equal invariant terms and constant, and the same multiset of
 * (coefficient, extent) over their loops (loops of one iteration aside)? */
static int same_elements(const split_index *x, const loopinfo *xl, int xn, const split_index *y, const loopinfo *yl,
                         int yn) {
  if (x->l.c != y->l.c) return 0;
  int nx = 0, ny = 0;
  for (int t = 0; t < x->l.n; t++) {
    if (x->is_loop_term[t]) continue;
    nx++;
    int found = 0;
    for (int u = 0; u < y->l.n && !found; u++)
      found = !y->is_loop_term[u] && y->l.t[u].coef == x->l.t[t].coef &&
              kg_bounds_expr_equal(y->l.t[u].atom, x->l.t[t].atom);
    if (!found) return 0;
  }
  for (int u = 0; u < y->l.n; u++) ny += !y->is_loop_term[u];
  if (nx != ny) return 0;
  unsigned char used[FOLD_MAX_LOOPS] = {0};
  int mx = 0, my = 0;
  for (int k = 0; k < yn; k++) my += y->coef[k] != 0 && yl[k].ext > 1;
  for (int k = 0; k < xn; k++) {
    if (x->coef[k] == 0 || xl[k].ext <= 1) continue;
    mx++;
    int j = 0;
    while (j < yn && (used[j] || y->coef[j] != x->coef[k] || yl[j].ext != xl[k].ext)) j++;
    if (j == yn) return 0;
    used[j] = 1;
  }
  return mx == my;
}

/* Folds the init nest at items[p] into R at items[q] when everything above holds. */
static int fold_pair(fctx *F, kg_irstmt *seq, int p, int q) {
  kg_irstmt *init = seq->seq.items[p], *R = seq->seq.items[q];
  int64_t rext;
  if (R->kind == KG_IRS_FOR && (R->loop.kind != KG_LOOP_SERIAL || R->loop.tag != KG_THREAD_NONE ||
                                !kg_ir_is_const(R->loop.extent, &rext) || rext < 1 || R->loop.var->id >= F->nvars))
    return 0;
  if (R->kind != KG_IRS_FOR && R->kind != KG_IRS_ALLOC) return 0;
  memset(F->inner, 0, (size_t)F->nvars);
  loopinfo il[FOLD_MAX_LOOPS];
  int nil = 0;
  const kg_irstmt *ist = init_store(F, init, il, &nil);
  if (!ist) return 0;
  rscan S;
  memset(&S, 0, sizeof S);
  S.buf = ist->store.buf;
  /* R itself is scanned as a loop around the load (an ALLOC: the accumulator around the whole reduction) */
  scan_r(F, &S, R);
  if (S.bad || S.nload != 1) return 0;
  for (int k = 0; k < S.nat; k++)
    if (S.at[k].ext < 1) return 0;
  split_index li, ii;
  if (!split_by_loops(F, S.load->store.value->load.index, S.at, S.nat, &li) || !injective(li.coef, S.at, S.nat) ||
      !split_by_loops(F, ist->store.index, il, nil, &ii) || !same_elements(&li, S.at, S.nat, &ii, il, nil))
    return 0;
  /* first: the loops the index does not use at 0 (R among them, when it is a loop: the reduction) */
  kg_arena *a = F->a;
  kg_irexpr *first = NULL;
  for (int k = 0; k < S.nat; k++) {
    if (li.coef[k] != 0 || S.at[k].ext == 1) continue;
    if (S.at[k].kind != KG_LOOP_SERIAL && S.at[k].kind != KG_LOOP_UNROLLED) return 0;
    kg_irexpr *z = kg_ir_binary(a, KG_OP_EQ, kg_ir_var(a, (kg_irvar *)S.at[k].var), kg_ir_int(a, 0));
    first = first ? kg_ir_binary(a, KG_OP_AND, first, z) : z;
  }
  kg_irstmt *ld = S.load;
  kg_irexpr *c0 = kg_ir_float(a, ist->store.value->f);
  /* no such loop: the load runs once per element, all of them first */
  ld->store.value = first ? kg_ir_select(a, first, c0, ld->store.value) : c0;
  kg_irstmt *c = kg_ir_comment(a, kg_arena_printf(a, "init of %s: the register accumulator's first load", S.buf->name));
  c->pos = init->pos;
  seq->seq.items[p] = c;
  return 1;
}

static void fold_stmt(fctx *F, kg_irstmt *s) {
  if (!s) return;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) {
        kg_irstmt *x = s->seq.items[i];
        if (x->kind == KG_IRS_LET) note_let(F, x);
        if (x->kind == KG_IRS_FOR) {
          int j = i + 1;
          while (j < s->seq.n && s->seq.items[j]->kind == KG_IRS_COMMENT) j++;
          if (j < s->seq.n && fold_pair(F, s, i, j)) continue;
        }
        fold_stmt(F, x);
      }
      break;
    case KG_IRS_FOR: fold_stmt(F, s->loop.body); break;
    case KG_IRS_IF:
      fold_stmt(F, s->cond.then);
      fold_stmt(F, s->cond.otherwise);
      break;
    case KG_IRS_ALLOC: fold_stmt(F, s->alloc.body); break;
    default: break;
  }
}

void kg_lower_initfold(kg_arena *a, kg_lowered *f) {
  if (f->n_vars <= 0) return;
  size_t n = (size_t)f->n_vars;
  fctx F = {.a = a, .nvars = f->n_vars};
  F.lets = kg_xrealloc(NULL, sizeof *F.lets * n);
  F.inner = kg_xrealloc(NULL, n);
  memset(F.lets, 0, sizeof *F.lets * n);
  fold_stmt(&F, f->body);
  free(F.lets);
  free(F.inner);
}
