/* The GPU parts of building structures (cooperative fetch, reads and reuse), and the launch rules (see
 * gpu_rules.h). */
#include "gpu_rules.h"
#include <stdio.h>
#include <string.h>
#include "../codegen/front.h"
#include "../lower/ir.h"

/* ---- reads and reuse ---- */

void kg_gpu_collect_reads(const kg_sstage *st, const kg_expr *e, kg_tensor **t, int *reuse, int *n, int max) {
  if (!e) return;
  if (e->kind == KG_EXPR_READ) {
    int k = 0;
    while (k < *n && t[k] != e->read.tensor) k++;
    if (k == *n && *n < max && e->read.tensor) {
      t[k] = e->read.tensor;
      reuse[k] = 0;
      (*n)++;
    }
    if (k < *n)
      for (int a = 0; a < st->nax; a++) reuse[k] |= !kg_expr_uses_ivar(e, st->ax[a]);
  }
  int nk = kg_expr_nchildren(e);
  for (int i = 0; i < nk; i++) kg_gpu_collect_reads(st, *kg_expr_child((kg_expr *)e, i), t, reuse, n, max);
}

int kg_gpu_has_reuse(const kg_sstage *st) {
  kg_tensor *t[16];
  int reuse[16], n = 0, any = 0;
  kg_gpu_collect_reads(st, st->body, t, reuse, &n, 16);
  for (int i = 0; i < n; i++) any |= reuse[i];
  return any;
}

/* ---- cooperative fetch ---- */

void kg_gpu_cooperative_fetch(kg_builder *g, kg_sstage *sh, int64_t tx, int64_t ty, int64_t vec) {
  kg_iter *in;
  if (sh->nleaves == 0) return; /* a scalar: one thread stores it */
  if (vec > 1) {
    kg_builder_split(g, sh, sh->leaves[sh->nleaves - 1], vec, &in);
    kg_builder_annotate(g, KG_STEP_VECTORIZE, sh, in, KG_THREAD_NONE);
  }
  if (g->failed) return;
  /* the loops outside the vector part */
  int n = sh->nleaves - (sh->leaves[sh->nleaves - 1]->kind == KG_LOOP_VECTORIZED);
  kg_iter *f = sh->leaves[0];
  for (int k = 1; k < n && !g->failed; k++) f = kg_builder_fuse(g, sh, sh->leaves[0], sh->leaves[1]);
  if (g->failed) return;
  if (tx > 1) {
    kg_iter *o = kg_builder_split(g, sh, f, tx, &in);
    kg_builder_annotate(g, KG_STEP_BIND, sh, in, KG_THREAD_THREAD_X);
    f = o;
  }
  if (ty > 1) {
    kg_iter *o = kg_builder_split(g, sh, f, ty, &in);
    kg_builder_annotate(g, KG_STEP_BIND, sh, in, KG_THREAD_THREAD_Y);
    (void)o;
  }
}

/* ---- the launch rules, checked on the lowered program ---- */

typedef struct vcheck {
  const kg_schedule *s;
  const kg_gpu_budget *budget;
  int64_t maxext[KG_THREAD_COUNT];
  int64_t shared, local;
  const char *bad; /* the broken rule, NULL while none */
  const kg_lowered *at_hi; /* the lowered program with its dynamic sizes at their largest values */
} vcheck;

static void max_extents(vcheck *v, const kg_irstmt *st) {
  if (!st || v->bad) return;
  switch (st->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < st->seq.n; i++) max_extents(v, st->seq.items[i]);
      break;
    case KG_IRS_FOR: {
      int64_t e;
      if (st->loop.tag != KG_THREAD_NONE) {
        /* a block loop may follow a dynamic size (the grid is computed at launch; its limit must hold at the
         * sizes' largest values); a thread loop sets blockDim, which is fixed */
        if (kg_ir_is_const(st->loop.extent, &e) ||
            (kg_thread_tag_is_block(st->loop.tag) && kg_ir_eval_sizes(v->at_hi, st->loop.extent, &e) == 0)) {
          if (e > v->maxext[st->loop.tag]) v->maxext[st->loop.tag] = e;
        } else {
          v->bad = "a bound loop of variable extent";
        }
      }
      max_extents(v, st->loop.body);
      break;
    }
    case KG_IRS_IF:
      max_extents(v, st->cond.then);
      max_extents(v, st->cond.otherwise);
      break;
    case KG_IRS_ALLOC: max_extents(v, st->alloc.body); break;
    default: break;
  }
}

/* Is loop (stage, name) a per-thread stage's loop, or a reduction loop? */
static int loop_is(const vcheck *v, const kg_irstmt *st, int want_reduce) {
  const kg_sstage *x = st->loop.stage_name ? kg_schedule_find_stage(v->s, st->loop.stage_name) : NULL;
  if (!x) return 0;
  if (!want_reduce) return x->scope == KG_SCOPE_LOCAL || (x->scope == KG_SCOPE_GLOBAL && x->attach == KG_ATTACH_AT);
  const kg_iter *it = st->loop.loop_name ? kg_sstage_find_iter(x, st->loop.loop_name) : NULL;
  return it && it->is_reduce;
}

static void check_nest(vcheck *v, const kg_irstmt *st, int guarded) {
  if (!st || v->bad) return;
  switch (st->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < st->seq.n; i++) check_nest(v, st->seq.items[i], guarded);
      break;
    case KG_IRS_FOR: {
      int g = guarded;
      if (kg_thread_tag_is_thread(st->loop.tag)) {
        int64_t e = 0;
        kg_ir_is_const(st->loop.extent, &e);
        if (e < v->maxext[st->loop.tag]) g = 1;
        if (loop_is(v, st, 0)) v->bad = "a bound loop in a per-thread stage";
        if (loop_is(v, st, 1) && g) v->bad = "a cross-thread reduction under a guarded thread loop";
      }
      check_nest(v, st->loop.body, g);
      break;
    }
    case KG_IRS_IF:
      /* a launch guard's loop decides itself (a guarded blockIdx loop skips whole blocks) */
      check_nest(v, st->cond.then, kg_ir_is_launch_guard(st) ? guarded : 1);
      check_nest(v, st->cond.otherwise, 1);
      break;
    case KG_IRS_ALLOC:
      /* in floats' room: an f16/bf16 array takes half its element count */
      if (st->alloc.buf->scope == KG_SCOPE_SHARED)
        v->shared += (st->alloc.buf->size * (int64_t)kg_dtype_size[st->alloc.buf->dtype] + 3) / 4;
      if (st->alloc.buf->scope == KG_SCOPE_LOCAL) {
        v->local += st->alloc.buf->size;
        if (st->alloc.buf->size > v->budget->local_array) v->bad = "a register array too large";
      }
      check_nest(v, st->alloc.body, guarded);
      break;
    case KG_IRS_BARRIER:
    case KG_IRS_ALLREDUCE:
      if (guarded) v->bad = "a barrier under a guarded thread loop";
      break;
    default: break;
  }
}

/* The first limit kernel v breaks, or NULL. */
static const char *over_budget(const vcheck *v) {
  const kg_gpu_budget *b = v->budget;
  const int64_t *m = v->maxext;
  int64_t threads = m[KG_THREAD_THREAD_X] * m[KG_THREAD_THREAD_Y] * m[KG_THREAD_THREAD_Z];
  if (v->bad) return v->bad;
  if (threads > b->threads) return "too many threads per block";
  for (int d = 0; d < 3; d++) {
    if (m[KG_THREAD_THREAD_X + d] > b->block[d]) return "a block extent over the limit";
    if (m[KG_THREAD_BLOCK_X + d] > b->grid[d]) return "a grid extent over the limit";
  }
  if (v->shared > b->shared_floats) return "too much shared memory";
  if (v->local > b->local_total) return "too many registers";
  if (b->regs_per_block > 0 && (v->local + b->reg_overhead) * threads > b->regs_per_block)
    return "registers x threads over the register file";
  return NULL;
}

int kg_gpu_launchable(const kg_schedule *sc, const kg_gpu_budget *budget, char *why, size_t whylen) {
  kg_front fr;
  kg_front_opts fo = {.target = KG_TARGET_CUDA, .stop = KG_BUILD_LOWER, .sched = sc};
  int ok = kg_front_build(sc->prog, &fo, &fr) == 0;
  if (!ok) snprintf(why, whylen, "%s", fr.error.msg);
  const kg_lowered *f = fr.ir;
  for (int k = 0; ok && k < f->body->seq.n; k++) {
    vcheck v;
    memset(&v, 0, sizeof v);
    v.s = sc;
    v.budget = budget;
    kg_lowered at_hi = *f;
    at_hi.size_value = f->size_hi;
    v.at_hi = &at_hi;
    for (int t = 0; t < KG_THREAD_COUNT; t++) v.maxext[t] = 1;
    max_extents(&v, f->body->seq.items[k]);
    check_nest(&v, f->body->seq.items[k], 0);
    const char *bad = over_budget(&v);
    if (bad) {
      snprintf(why, whylen, "kernel %d: %s", k, bad);
      ok = 0;
    }
  }
  kg_front_free(&fr);
  return ok ? 0 : -1;
}

int kg_gpu_mma_shape(const kg_program *p, const kg_sstage *st, kg_gpu_mma_axes *ax) {
  const kg_expr *e = st->body;
  memset(ax, 0, sizeof *ax);
  ax->k = -1;
  if (st->red != KG_RED_SUM || st->nrax < 1 || st->nax < 2 || st->nax > KG_GPU_MMA_MAX_AXES ||
      e->kind != KG_EXPR_BINARY || e->op.op != KG_OP_MUL || e->op.a->kind != KG_EXPR_READ ||
      e->op.b->kind != KG_EXPR_READ)
    return 0;
  kg_dtype t = e->op.a->read.tensor->dtype;
  if ((t == KG_DT_F32 && !p->tf32) || t != e->op.b->read.tensor->dtype) return 0;
  ax->kstep = kg_mma_kstep(t);
  int64_t z = 1;
  ax->m = ax->n = 1;
  for (int d = 0; d < st->nax; d++) {
    int ua = kg_expr_uses_ivar(e->op.a, st->ax[d]), ub = kg_expr_uses_ivar(e->op.b, st->ax[d]);
    int64_t x = st->roots[d]->extent;
    if (ua && !ub) {
      ax->rows[ax->nrows++] = d;
      ax->m *= x;
    } else if (ub && !ua) {
      ax->cols[ax->ncols++] = d;
      ax->n *= x;
    } else {
      ax->batch[ax->nbatch++] = d;
      z *= x;
    }
  }
  for (int r = 0; r < st->nrax; r++) {
    int64_t x = st->roots[st->nax + r]->extent;
    if (x % ax->kstep == 0 && (ax->k < 0 || x > st->roots[ax->k]->extent)) ax->k = st->nax + r;
  }
  return ax->nrows > 0 && ax->ncols > 0 && ax->k >= 0 && ax->m % 16 == 0 && ax->n % 8 == 0 && z <= 65535;
}

/* The loops of axes idx[0..n) fused in that order (they are adjacent, outermost first), or the one loop. */
static kg_iter *fuse_axes(kg_builder *b, kg_sstage *st, const int *idx, int n) {
  kg_iter *f = st->roots[idx[0]];
  for (int i = 1; i < n && !b->failed; i++) f = kg_builder_fuse(b, st, f, st->roots[idx[i]]);
  return b->failed ? NULL : f;
}

void kg_gpu_mma_build(kg_builder *b, kg_sstage *st, const kg_gpu_mma_axes *ax, const kg_gpu_mma_opts *o) {
  const int64_t wy = o->wy, nt = o->nt, pad = o->pad;
  const int unroll = o->unroll, staged = o->staged;
  int64_t mt = o->mt < 1 ? 1 : o->mt, ks = o->ks;
  while (mt > 1 && (ax->m % (16 * wy * mt) != 0 || mt * nt > KG_MMA_MAX_TILES)) mt /= 2;
  /* batch, rows, columns, reductions: then each set's loops are adjacent, to be fused */
  kg_iter *order[2 * KG_GPU_MMA_MAX_AXES + 16];
  int n = 0;
  for (int i = 0; i < ax->nbatch; i++) order[n++] = st->roots[ax->batch[i]];
  for (int i = 0; i < ax->nrows; i++) order[n++] = st->roots[ax->rows[i]];
  for (int i = 0; i < ax->ncols; i++) order[n++] = st->roots[ax->cols[i]];
  for (int r = 0; r < st->nrax; r++) order[n++] = st->roots[st->nax + r];
  if (n != st->nleaves) {
    kg_builder_fail(b, "tensor cores: stage %s is not untransformed", st->name);
    return;
  }
  kg_builder_reorder(b, st, order, n);
  kg_iter *bt = ax->nbatch ? fuse_axes(b, st, ax->batch, ax->nbatch) : NULL;
  kg_iter *rows = fuse_axes(b, st, ax->rows, ax->nrows), *cols = fuse_axes(b, st, ax->cols, ax->ncols);
  if (b->failed) return;
  kg_iter *r16, *r8, *c8, *c2, *kin, *tmp, *rm = NULL;
  kg_iter *ro = kg_builder_split(b, st, rows, 16 * wy * mt, &tmp);
  kg_iter *rw = kg_builder_split(b, st, tmp, 16 * mt, &r16);
  if (mt > 1) rm = kg_builder_split(b, st, r16, 16, &r16);
  kg_iter *rh = kg_builder_split(b, st, r16, 8, &r8);
  kg_iter *co = kg_builder_split(b, st, cols, 8 * nt, &tmp);
  kg_iter *cn = kg_builder_split(b, st, tmp, 8, &c8);
  kg_iter *cg = kg_builder_split(b, st, c8, 2, &c2);
  /* staged: a k step of ks instructions (kmid of them, each kin), a whole number of them in the reduction */
  const int64_t kext = st->roots[ax->k]->extent;
  if (!staged || ks < 1) ks = 1;
  while (ks > 1 && kext % (ax->kstep * ks) != 0) ks /= 2;
  kg_iter *kmid = NULL;
  kg_iter *ko = kg_builder_split(b, st, st->roots[ax->k], ax->kstep * ks, &kin);
  if (ks > 1) kmid = kg_builder_split(b, st, kin, ax->kstep, &kin);
  if (b->failed) return;
  n = 0;
  if (bt) order[n++] = bt;
  order[n++] = ro;
  order[n++] = co;
  for (int r = 0; r < st->nrax; r++)
    if (st->nax + r != ax->k) order[n++] = st->roots[st->nax + r];
  /* staged: the k step outside the warp's tiles, which share its shared-memory tiles; else the k loop right
   * outside one tile, whose accumulators lowering then keeps in registers across it */
  kg_iter *staged_order[] = {rw, r8, cg, ko, kmid, rm, cn, rh, c2, kin};
  kg_iter *unstaged_order[] = {rw, r8, cg, rm, cn, ko, rh, c2, kin};
  kg_iter **rest = staged ? staged_order : unstaged_order;
  const size_t nrest = staged ? sizeof staged_order / sizeof *staged_order : sizeof unstaged_order / sizeof *unstaged_order;
  for (size_t q = 0; q < nrest; q++)
    if (rest[q]) order[n++] = rest[q];
  kg_builder_reorder(b, st, order, n);
  kg_iter *lane = kg_builder_fuse(b, st, r8, cg);
  if (bt) kg_builder_annotate(b, KG_STEP_BIND, st, bt, KG_THREAD_BLOCK_Z);
  kg_builder_annotate(b, KG_STEP_BIND, st, ro, KG_THREAD_BLOCK_Y);
  kg_builder_annotate(b, KG_STEP_BIND, st, co, KG_THREAD_BLOCK_X);
  kg_builder_annotate(b, KG_STEP_BIND, st, rw, KG_THREAD_THREAD_Y);
  kg_builder_annotate(b, KG_STEP_BIND, st, lane, KG_THREAD_THREAD_X);
  /* staged, the tiles' loop is always unrolled: lowering then keeps all their accumulators in registers across
   * the k loop (a loop it cannot unroll would leave them in memory, read and written around every step) */
  if ((unroll || staged) && nt > 1) kg_builder_annotate(b, KG_STEP_UNROLL, st, cn, KG_THREAD_NONE);
  if ((unroll || staged) && rm) kg_builder_annotate(b, KG_STEP_UNROLL, st, rm, KG_THREAD_NONE);
  if (b->failed) return;
  const char *names[3] = {rh->name, c2->name, kin->name};
  kg_builder_step(b, KG_STEP_TENSORIZE, st->name, names, 3, 0, 0, 0);
  if (!staged || b->failed) return;
  /* both operands' tiles of the k step in shared memory, fetched by the block's 32 x wy threads */
  const kg_tensor *ops[2] = {st->body->op.a->read.tensor, st->body->op.b->read.tensor};
  for (int q = 0; q < 2 && !b->failed; q++) {
    if (q == 1 && ops[1] == ops[0]) break;
    kg_sstage *sh = kg_builder_cache(b, KG_STEP_CACHE_READ, ops[q]->name, "shared", st);
    if (!sh) return;
    kg_builder_compute_at(b, sh, st, ko);
    kg_gpu_cooperative_fetch(b, sh, 32, wy, 4);
    if (pad > 0 && !b->failed) kg_builder_step(b, KG_STEP_PAD, sh->name, NULL, 0, pad, 0, 1);
  }
  /* the next k steps' tiles fetched while the warps compute on this one */
  if (o->pipe > 1 && !b->failed) {
    const char *loop = ko->name;
    kg_builder_step(b, KG_STEP_PIPELINE, st->name, &loop, 1, o->pipe, 0, 1);
  }
}
