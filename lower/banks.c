/* Shared-memory bank conflicts of a CUDA kernel, estimated from its lowered IR (bounds.h).
 *
 * Shared memory has 32 banks of 4-byte words; a warp's access is served in one pass when its threads' words fall
 * in distinct banks or are the same word (a broadcast), and in N passes when N distinct words share a bank.
 * 64-bit and 128-bit accesses are served per half and quarter warp. For each load and store of a shared buffer,
 * the index's affine form (lets substituted) gives its coefficient on the loop variables bound to threadIdx.x and
 * threadIdx.y and on the innermost vectorized loop; every other term is the same for the whole warp. The words of
 * the first warp (lanes 0..31: x = lane % tx, y = lane / tx) then give the degree, per phase. An index that uses a
 * thread index inside a term that is not affine (a division or modulo of it) is left out, as are the cross-thread
 * reductions' own scratch buffers (their pattern is fixed and conflict-free).
 *
 * Requires: lowered IR for KG_TARGET_CUDA (kernel k is item k of f->body). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bounds.h"

typedef struct bctx {
  kg_arena *a;
  const kg_lowered *f;
  kg_irexpr **lets;         /* by variable id */
  const kg_irvar *tx, *ty;  /* the loop variables bound to threadIdx.x / .y on the current path */
  int64_t ntx, nty;
  const kg_irvar *vec;      /* the innermost vectorized loop on the path */
  int64_t nvec;
  int worst;
  char where[96];
} bctx;

static int uses_var(const kg_irexpr *e, const kg_irvar *v) {
  if (!v) return 0;
  if (e->kind == KG_IRE_VAR) return e->var == v;
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++)
    if (uses_var(*kids[i], v)) return 1;
  return 0;
}

static int64_t pos_mod(int64_t x, int64_t m) { return ((x % m) + m) % m; }

static void access(bctx *B, const kg_buffer *buf, kg_irexpr *index, const char *what) {
  if (buf->scope != KG_SCOPE_SHARED || !strncmp(buf->name, "kg_red", 6)) return;
  kg_affine af = kg_bounds_affine(B->a, index, B->lets, B->f->n_vars);
  if (!af.ok) return;
  int64_t cx = 0, cy = 0, cv = 0;
  for (int i = 0; i < af.n; i++) {
    const kg_irexpr *at = af.t[i].atom;
    int is_var = at->kind == KG_IRE_VAR;
    if (is_var && B->tx && at->var == B->tx) cx = af.t[i].coef;
    else if (is_var && B->ty && at->var == B->ty) cy = af.t[i].coef;
    else if (is_var && B->vec && at->var == B->vec) cv = af.t[i].coef;
    else if (uses_var(at, B->tx) || uses_var(at, B->ty)) return; /* not affine in a thread index */
  }
  int64_t w = cv == 1 && (B->nvec == 2 || B->nvec == 4) ? B->nvec : 1;
  int64_t tx = B->tx ? B->ntx : 1, ty = B->ty ? B->nty : 1, lanes = tx * ty < 32 ? tx * ty : 32;
  int64_t phase = 32 / w, worst = 1;
  for (int64_t p0 = 0; p0 < lanes; p0 += phase) {
    int64_t words[32 * 4];
    int nw = 0;
    for (int64_t l = p0; l < p0 + phase && l < lanes; l++)
      for (int64_t j = 0; j < w; j++) {
        int64_t addr = cx * (l % tx) + cy * (l / tx) + j, seen = 0;
        for (int k = 0; k < nw; k++) seen |= words[k] == addr;
        if (!seen) words[nw++] = addr;
      }
    for (int b = 0; b < 32; b++) {
      int64_t n = 0;
      for (int k = 0; k < nw; k++) n += pos_mod(words[k], 32) == b;
      if (n > worst) worst = n;
    }
  }
  if (worst > B->worst) {
    B->worst = (int)worst;
    snprintf(B->where, sizeof B->where, "%s %s", buf->name, what);
  }
}

static void expr(bctx *B, kg_irexpr *e) {
  if (!e) return;
  if (e->kind == KG_IRE_LOAD) access(B, e->load.buf, e->load.index, "load");
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children(e, kids);
  for (int i = 0; i < n; i++) expr(B, *kids[i]);
}

static void stmt(bctx *B, kg_irstmt *s) {
  if (!s) return;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) stmt(B, s->seq.items[i]);
      break;
    case KG_IRS_LET:
      if (s->let.var->id < B->f->n_vars) B->lets[s->let.var->id] = s->let.value;
      expr(B, s->let.value);
      break;
    case KG_IRS_FOR: {
      bctx saved = *B;
      int64_t ext = 0;
      int known = kg_ir_is_const(s->loop.extent, &ext);
      if (s->loop.kind == KG_LOOP_BOUND && s->loop.tag == KG_THREAD_THREAD_X) B->tx = s->loop.var, B->ntx = known ? ext : 32;
      if (s->loop.kind == KG_LOOP_BOUND && s->loop.tag == KG_THREAD_THREAD_Y) B->ty = s->loop.var, B->nty = known ? ext : 1;
      if (s->loop.kind == KG_LOOP_VECTORIZED) B->vec = s->loop.var, B->nvec = known ? ext : 1;
      stmt(B, s->loop.body);
      saved.worst = B->worst;
      memcpy(saved.where, B->where, sizeof saved.where);
      *B = saved;
      break;
    }
    case KG_IRS_IF:
      expr(B, s->cond.cond);
      stmt(B, s->cond.then);
      stmt(B, s->cond.otherwise);
      break;
    case KG_IRS_STORE:
      access(B, s->store.buf, s->store.index, "store");
      expr(B, s->store.value);
      expr(B, s->store.index);
      break;
    case KG_IRS_ALLOC: stmt(B, s->alloc.body); break;
    default: break;
  }
}

int kg_lower_bank_conflicts(kg_arena *a, const kg_lowered *f, int kernel, char *where, size_t wlen) {
  if (!f || !f->body || f->body->kind != KG_IRS_SEQ || kernel < 0 || kernel >= f->body->seq.n) return 0;
  bctx B;
  memset(&B, 0, sizeof B);
  B.a = a;
  B.f = f;
  B.lets = calloc((size_t)(f->n_vars > 0 ? f->n_vars : 1), sizeof *B.lets);
  if (!B.lets) return 0;
  stmt(&B, f->body->seq.items[kernel]);
  free(B.lets);
  if (where && wlen) snprintf(where, wlen, "%s", B.worst ? B.where : "");
  return B.worst;
}
