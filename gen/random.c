/* Random legal schedules: draw a primitive and its arguments from the current state, apply it, skip it when it
 * is illegal. Deterministic in the seed (splitmix64; nothing else is random).
 *
 * For the C target the draws also keep the schedule runnable on the CPU: no bind, "local" scope only, a
 * parallel loop only as the outermost loop of a stage computed at root (at most one per stage), a vectorized
 * loop only innermost (extent <= 64, nothing computed at it), reorder and compute_at never move or enter an
 * annotated loop, unroll only short loops; `stream` on an output without reduction (C only). */
#include <string.h>
#include "../schedule/sched_impl.h"
#include "random.h"
#include "gpu_rules.h"
#include "../base/rng.h"

typedef struct rng {
  uint64_t state;
} rng;

/* uniform in [0, n) for n >= 1 */
static int rng_below(rng *r, int n) { return n <= 1 ? 0 : (int)(kg_rng_next(&r->state) % (uint64_t)n); }

/* Divisors and non-divisors alike: half the time a power of two, else any value in [lo, min(extent, 64)].
 * Loops draw lo = 2: a factor of 1 is legal but only adds a loop of extent 1. */
static int64_t draw_factor(rng *r, int64_t extent, int64_t lo) {
  int64_t hi = extent < 64 ? extent : 64;
  if (hi < lo) hi = lo;
  if (rng_below(r, 2)) {
    int64_t pw[8];
    int n = 0;
    for (int64_t p = 1; p <= hi && n < 8; p *= 2)
      if (p >= lo) pw[n++] = p;
    if (n) return pw[rng_below(r, n)];
  }
  return lo + rng_below(r, (int)(hi - lo + 1));
}

typedef struct draw_ctx {
  kg_schedule *s;
  rng *r;
  kg_target_kind target;
  int done; /* successful steps so far */
} draw_ctx;

static kg_sstage *pick_stage(draw_ctx *c, int (*ok)(const kg_sstage *)) {
  kg_sstage *cand[256];
  int n = 0;
  for (int i = 0; i < c->s->nstages && n < 256; i++)
    if (c->s->stages[i]->attach != KG_ATTACH_INLINE && (!ok || ok(c->s->stages[i]))) cand[n++] = c->s->stages[i];
  return n ? cand[rng_below(c->r, n)] : NULL;
}

static int has_leaves2(const kg_sstage *st) { return st->nleaves >= 2; }
static int has_leaves1(const kg_sstage *st) { return st->nleaves >= 1; }

static int is_reduction_untransformed(const kg_sstage *st) { return st->nrax > 0 && kg_sched_untransformed(st); }

/* what `widen` takes: a cache_read copy of an f16/bf16 tensor */
static int is_narrow_copy(const kg_sstage *st) { return st->origin == KG_ORIGIN_CACHE_READ && st->out->dtype != KG_DT_F32; }

/* A serial leaf of st (spatial only when want_spatial), or NULL. */
static kg_iter *pick_serial_leaf(draw_ctx *c, kg_sstage *st, int want_spatial) {
  kg_iter *cand[64];
  int n = 0;
  for (int l = 0; l < st->nleaves && n < 64; l++) {
    kg_iter *it = st->leaves[l];
    if (it->kind == KG_LOOP_SERIAL && (!want_spatial || !it->is_reduce)) cand[n++] = it;
  }
  return n ? cand[rng_below(c->r, n)] : NULL;
}

static int count_kind(const kg_sstage *st, kg_loop_kind k) {
  int n = 0;
  for (int l = 0; l < st->nleaves; l++) n += st->leaves[l]->kind == k;
  return n;
}

static int created_stages(const kg_schedule *s) {
  int n = 0;
  for (int i = 0; i < s->nstages; i++) n += s->stages[i]->origin != KG_ORIGIN_PROGRAM;
  return n;
}

static const char *pick_scope(draw_ctx *c) {
  return c->target == KG_TARGET_C || rng_below(c->r, 2) ? "local" : "shared";
}

/* Collects the tensors read directly by e (distinct, at most max). */
static void collect_reads(const kg_expr *e, kg_tensor **out, int *n, int max) {
  if (!e) return;
  if (e->kind == KG_EXPR_READ) {
    int seen = 0;
    for (int i = 0; i < *n; i++) seen |= out[i] == e->read.tensor;
    if (!seen && *n < max && e->read.tensor) out[(*n)++] = e->read.tensor;
  }
  int nk = kg_expr_nchildren(e);
  for (int i = 0; i < nk; i++) collect_reads(*kg_expr_child((kg_expr *)e, i), out, n, max);
}

/* Fills step with a random draw of the given kind; 0 when no candidate exists. */
static int draw_step(draw_ctx *c, kg_step_kind kind, kg_step *step) {
  kg_schedule *s = c->s;
  rng *r = c->r;
  int cpu = c->target == KG_TARGET_C;
  memset(step, 0, sizeof *step);
  step->kind = kind;
  kg_sstage *st;
  kg_iter *it;
  switch (kind) {
  case KG_STEP_SPLIT:
    if (!(st = pick_stage(c, has_leaves1)) || !(it = pick_serial_leaf(c, st, 0)) || it->extent < 2) return 0;
    step->names[0] = it->name;
    step->nnames = 1;
    step->ints[0] = draw_factor(r, it->extent, 2);
    step->nints = 1;
    break;
  case KG_STEP_TILE: {
    if (!(st = pick_stage(c, has_leaves2))) return 0;
    kg_iter *a = pick_serial_leaf(c, st, 0), *b = pick_serial_leaf(c, st, 0);
    if (!a || !b || a == b || a->extent < 2 || b->extent < 2) return 0;
    if (kg_sstage_leaf_index(st, a) > kg_sstage_leaf_index(st, b)) {
      kg_iter *t = a;
      a = b;
      b = t;
    }
    step->names[0] = a->name;
    step->names[1] = b->name;
    step->nnames = 2;
    step->ints[0] = draw_factor(r, a->extent, 2);
    step->ints[1] = draw_factor(r, b->extent, 2);
    step->nints = 2;
    break;
  }
  case KG_STEP_REORDER: {
    if (!(st = pick_stage(c, has_leaves2))) return 0;
    kg_iter *cand[KG_STEP_MAX_NAMES];
    int n = 0;
    for (int l = 0; l < st->nleaves && n < KG_STEP_MAX_NAMES; l++)
      if (!cpu || st->leaves[l]->kind == KG_LOOP_SERIAL) cand[n++] = st->leaves[l];
    if (n < 2) return 0;
    /* shuffle, then take the first k */
    for (int i = n - 1; i > 0; i--) {
      int j = rng_below(r, i + 1);
      kg_iter *t = cand[i];
      cand[i] = cand[j];
      cand[j] = t;
    }
    int k = 2 + rng_below(r, (n < 4 ? n : 4) - 1);
    for (int i = 0; i < k; i++) step->names[i] = cand[i]->name;
    step->nnames = k;
    break;
  }
  case KG_STEP_FUSE: {
    if (!(st = pick_stage(c, has_leaves2))) return 0;
    int l = rng_below(r, st->nleaves - 1);
    step->names[0] = st->leaves[l]->name;
    step->names[1] = st->leaves[l + 1]->name;
    step->nnames = 2;
    break;
  }
  case KG_STEP_UNROLL:
    if (!(st = pick_stage(c, has_leaves1)) || !(it = pick_serial_leaf(c, st, 0))) return 0;
    if (it->extent > 16) return 0;
    step->names[0] = it->name;
    step->nnames = 1;
    break;
  case KG_STEP_VECTORIZE:
    if (!(st = pick_stage(c, has_leaves1))) return 0;
    it = cpu ? st->leaves[st->nleaves - 1] : pick_serial_leaf(c, st, 1);
    if (!it || it->is_reduce || it->kind != KG_LOOP_SERIAL || it->extent > 64) return 0;
    if (cpu && kg_sched_attached_at(s, st, it)) return 0;
    step->names[0] = it->name;
    step->nnames = 1;
    break;
  case KG_STEP_PARALLEL:
    if (!(st = pick_stage(c, has_leaves1))) return 0;
    if (cpu) {
      if (st->attach != KG_ATTACH_ROOT || count_kind(st, KG_LOOP_PARALLEL) > 0) return 0;
      it = st->leaves[0];
    } else {
      if (count_kind(st, KG_LOOP_PARALLEL) > 1) return 0;
      it = pick_serial_leaf(c, st, 1);
    }
    if (!it) return 0;
    step->names[0] = it->name;
    step->nnames = 1;
    break;
  case KG_STEP_BIND:
    if (cpu || !(st = pick_stage(c, has_leaves1)) || !(it = pick_serial_leaf(c, st, 1))) return 0;
    step->names[0] = it->name;
    step->names[1] = kg_thread_tag_names[1 + rng_below(r, KG_THREAD_COUNT - 1)];
    step->nnames = 2;
    break;
  case KG_STEP_COMPUTE_AT: {
    if (!(st = pick_stage(c, NULL)) || st->is_output) return 0;
    const kg_sstage *cons = NULL;
    if (kg_sched_consumers(s, st, NULL, &cons, 1) != 1 || cons->nleaves == 0) return 0;
    it = cons->leaves[rng_below(r, cons->nleaves)];
    if (cpu && it->kind == KG_LOOP_VECTORIZED) return 0;
    step->names[0] = cons->name;
    step->names[1] = it->name;
    step->nnames = 2;
    break;
  }
  case KG_STEP_COMPUTE_INLINE:
    if (!(st = pick_stage(c, NULL)) || st->is_output || st->red != KG_RED_NONE) return 0;
    break;
  case KG_STEP_COMPUTE_ROOT: {
    kg_sstage *cand[64];
    int n = 0;
    for (int i = 0; i < s->nstages && n < 64; i++)
      if (s->stages[i]->attach != KG_ATTACH_ROOT) cand[n++] = s->stages[i];
    if (!n) return 0;
    st = cand[rng_below(r, n)];
    break;
  }
  case KG_STEP_CACHE_READ: {
    if (created_stages(s) >= 3 || !(st = pick_stage(c, NULL))) return 0;
    kg_tensor *reads[16];
    int n = 0;
    collect_reads(st->body, reads, &n, 16);
    if (!n) return 0;
    kg_tensor *t = reads[rng_below(r, n)];
    step->stage = t->name;
    step->names[0] = pick_scope(c);
    step->names[1] = st->name;
    step->nnames = 2;
    return 1;
  }
  case KG_STEP_CACHE_WRITE:
    if (created_stages(s) >= 3 || !(st = pick_stage(c, kg_sched_untransformed))) return 0;
    step->names[0] = pick_scope(c);
    step->nnames = 1;
    break;
  case KG_STEP_RFACTOR: {
    if (created_stages(s) >= 3 || !(st = pick_stage(c, is_reduction_untransformed))) return 0;
    it = st->roots[st->nax + rng_below(r, st->nrax)];
    if (it->extent < 2) return 0;
    step->names[0] = it->name;
    step->nnames = 1;
    step->ints[0] = draw_factor(r, it->extent, 2);
    step->nints = 1;
    break;
  }
  case KG_STEP_STREAM: {
    /* the primitive's own conditions, so that the draw is rarely wasted: a root output without reduction */
    if (!cpu) return 0;
    kg_sstage *cand[64];
    int n = 0;
    for (int i = 0; i < s->nstages && n < 64; i++)
      if (s->stages[i]->is_output && !s->stages[i]->nrax && !s->stages[i]->stream) cand[n++] = s->stages[i];
    if (!n) return 0;
    st = cand[rng_below(r, n)];
    break;
  }
  case KG_STEP_WIDEN:
    if (!(st = pick_stage(c, is_narrow_copy))) return 0;
    break;
  default:
    return 0;
  }
  step->stage = st->name;
  return 1;
}

/* Does some stage read an f16 or bf16 tensor? */
static int reads_narrow(const kg_schedule *s) {
  for (int i = 0; i < s->nstages; i++) {
    kg_tensor *reads[16];
    int n = 0;
    collect_reads(s->stages[i]->body, reads, &n, 16);
    for (int k = 0; k < n; k++)
      if (reads[k]->dtype != KG_DT_F32) return 1;
  }
  return 0;
}

void kg_schedule_random(kg_schedule *s, uint64_t seed, kg_target_kind target, int nsteps) {
  if (target == KG_TARGET_CUDA) {
    kg_sched_random_gpu(s, seed, nsteps);
    return;
  }
  rng r = {seed ^ 0x6b67656e5f726e67ull};
  draw_ctx c = {s, &r, target, 0};
  /* relative weights; the storage primitives get a boost while the schedule is young (they need untransformed
   * stages) */
  int weight[KG_STEP_COUNT] = {
      [KG_STEP_SPLIT] = 12,        [KG_STEP_TILE] = 8,           [KG_STEP_REORDER] = 7,
      [KG_STEP_FUSE] = 6,          [KG_STEP_UNROLL] = 5,         [KG_STEP_VECTORIZE] = 6,
      [KG_STEP_PARALLEL] = 5,      [KG_STEP_BIND] = target == KG_TARGET_CUDA ? 6 : 0,
      [KG_STEP_COMPUTE_AT] = 10,   [KG_STEP_COMPUTE_INLINE] = 7, [KG_STEP_COMPUTE_ROOT] = 2,
      [KG_STEP_CACHE_READ] = 3,    [KG_STEP_CACHE_WRITE] = 2,    [KG_STEP_RFACTOR] = 2,
      [KG_STEP_STREAM] = target == KG_TARGET_CUDA ? 0 : 2,
      /* only where a copy of an f16/bf16 tensor can exist: the draws of an f32 program stay what they were */
      [KG_STEP_WIDEN] = reads_narrow(s) ? 3 : 0,
  };
  int max_attempts = 20 * (nsteps > 0 ? nsteps : 0) + 20;
  char err[512];
  for (int attempt = 0; attempt < max_attempts && c.done < nsteps; attempt++) {
    int w[KG_STEP_COUNT], total = 0;
    for (int k = 0; k < KG_STEP_COUNT; k++) {
      w[k] = weight[k];
      if (c.done < 3 && (k == KG_STEP_CACHE_READ || k == KG_STEP_CACHE_WRITE || k == KG_STEP_RFACTOR)) w[k] *= 4;
      total += w[k];
    }
    int x = rng_below(&r, total), kind = 0;
    while (x >= w[kind]) x -= w[kind++];
    kg_step step;
    if (!draw_step(&c, (kg_step_kind)kind, &step)) continue;
    if (kg_schedule_apply(s, &step, err, sizeof err) == 0) c.done++;
  }
}
