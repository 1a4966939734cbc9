/* Building GPU structures out of primitive steps, and the launch rules (see gpu_rules.h). */
#include "gpu_rules.h"
#include <stdio.h>
#include <string.h>
#include "../lower/ir.h"

/* ---- steps; a failed step fails the whole build ---- */

int kg_gpu_step(kg_gpu_build *g, kg_step_kind kind, const char *stage, const char **names, int nnames, int64_t i0,
                int64_t i1, int nints) {
  if (g->failed) return -1;
  kg_step st;
  memset(&st, 0, sizeof st);
  st.kind = kind;
  st.stage = stage;
  for (int i = 0; i < nnames && i < KG_STEP_MAX_NAMES; i++) st.names[i] = names[i];
  st.nnames = nnames;
  st.ints[0] = i0;
  st.ints[1] = i1;
  st.nints = nints;
  if (kg_schedule_apply(g->s, &st, g->err, sizeof g->err) != 0) g->failed = 1;
  return g->failed ? -1 : 0;
}

kg_iter *kg_gpu_split(kg_gpu_build *g, kg_sstage *st, kg_iter *it, int64_t f, kg_iter **inner) {
  *inner = NULL;
  if (!it || kg_gpu_step(g, KG_STEP_SPLIT, st->name, &it->name, 1, f, 0, 1)) return NULL;
  *inner = it->split_inner;
  return it->split_outer;
}

kg_iter *kg_gpu_fuse(kg_gpu_build *g, kg_sstage *st, kg_iter *a, kg_iter *b) {
  if (!a || !b) {
    g->failed = 1;
    return NULL;
  }
  const char *n[2] = {a->name, b->name};
  if (kg_gpu_step(g, KG_STEP_FUSE, st->name, n, 2, 0, 0, 0)) return NULL;
  return a->fused_into;
}

void kg_gpu_annotate(kg_gpu_build *g, kg_step_kind kind, kg_sstage *st, kg_iter *it, kg_thread_tag tag) {
  if (!it) {
    g->failed = 1;
    return;
  }
  const char *n[2] = {it->name, kg_thread_tag_names[tag]};
  kg_gpu_step(g, kind, st->name, n, kind == KG_STEP_BIND ? 2 : 1, 0, 0, 0);
}

void kg_gpu_reorder(kg_gpu_build *g, kg_sstage *st, kg_iter **order, int n) {
  if (n < 2) return;
  if (n > KG_STEP_MAX_NAMES) {
    g->failed = 1;
    return;
  }
  const char *names[KG_STEP_MAX_NAMES];
  int same = 1;
  for (int i = 0; i < n; i++) {
    if (!order[i]) {
      g->failed = 1;
      return;
    }
    names[i] = order[i]->name;
    if (i) same &= kg_sstage_leaf_index(st, order[i - 1]) < kg_sstage_leaf_index(st, order[i]);
  }
  if (!same) kg_gpu_step(g, KG_STEP_REORDER, st->name, names, n, 0, 0, 0);
}

void kg_gpu_compute_at(kg_gpu_build *g, kg_sstage *p, const kg_sstage *c, kg_iter *it) {
  if (!it) {
    g->failed = 1;
    return;
  }
  const char *n[2] = {c->name, it->name};
  kg_gpu_step(g, KG_STEP_COMPUTE_AT, p->name, n, 2, 0, 0, 0);
}

kg_sstage *kg_gpu_cache(kg_gpu_build *g, kg_step_kind kind, const char *what, const char *scope, const kg_sstage *reader) {
  const char *n[2] = {scope, reader ? reader->name : NULL};
  if (kg_gpu_step(g, kind, what, n, kind == KG_STEP_CACHE_READ ? 2 : 1, 0, 0, 0)) return NULL;
  /* the created stage is the newest one with that origin */
  kg_stage_origin o = kind == KG_STEP_CACHE_READ ? KG_ORIGIN_CACHE_READ : KG_ORIGIN_CACHE_WRITE;
  kg_sstage *best = NULL;
  for (int i = 0; i < g->s->nstages; i++) {
    kg_sstage *x = g->s->stages[i];
    if (x->origin == o && (!best || x->out->id > best->out->id)) best = x;
  }
  return best;
}

kg_iter *kg_gpu_fuse_run(kg_gpu_build *g, kg_sstage *st, int from, int n) {
  if (g->failed || from < 0 || from + n > st->nleaves || n < 1) {
    g->failed = 1;
    return NULL;
  }
  kg_iter *f = st->leaves[from];
  for (int k = 1; k < n && !g->failed; k++) f = kg_gpu_fuse(g, st, st->leaves[from], st->leaves[from + 1]);
  return g->failed ? NULL : f;
}

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

void kg_gpu_cooperative_fetch(kg_gpu_build *g, kg_sstage *sh, int64_t tx, int64_t ty, int64_t vec) {
  kg_iter *in;
  if (sh->nleaves == 0) return; /* a scalar: one thread stores it */
  if (vec > 1) {
    kg_gpu_split(g, sh, sh->leaves[sh->nleaves - 1], vec, &in);
    kg_gpu_annotate(g, KG_STEP_VECTORIZE, sh, in, KG_THREAD_NONE);
  }
  if (g->failed) return;
  /* the loops outside the vector part */
  int n = sh->nleaves - (sh->leaves[sh->nleaves - 1]->kind == KG_LOOP_VECTORIZED);
  kg_iter *f = sh->leaves[0];
  for (int k = 1; k < n && !g->failed; k++) f = kg_gpu_fuse(g, sh, sh->leaves[0], sh->leaves[1]);
  if (g->failed) return;
  if (tx > 1) {
    kg_iter *o = kg_gpu_split(g, sh, f, tx, &in);
    kg_gpu_annotate(g, KG_STEP_BIND, sh, in, KG_THREAD_THREAD_X);
    f = o;
  }
  if (ty > 1) {
    kg_iter *o = kg_gpu_split(g, sh, f, ty, &in);
    kg_gpu_annotate(g, KG_STEP_BIND, sh, in, KG_THREAD_THREAD_Y);
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
      check_nest(v, st->cond.then, 1);
      check_nest(v, st->cond.otherwise, 1);
      break;
    case KG_IRS_ALLOC:
      if (st->alloc.buf->scope == KG_SCOPE_SHARED) v->shared += st->alloc.buf->size;
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
  kg_arena a;
  kg_arena_init(&a);
  char err[512];
  kg_lowered *f = kg_lower(sc, KG_TARGET_CUDA, &a, err, sizeof err);
  if (!f) snprintf(why, whylen, "%s", err);
  int ok = f != NULL;
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
  kg_arena_free(&a);
  return ok ? 0 : -1;
}
