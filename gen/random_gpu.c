/* Random GPU schedules: what kg_schedule_random draws for KG_TARGET_CUDA. Unlike the C target's draws (one random
 * primitive at a time), a GPU schedule must also be launchable, so each stage gets a whole structure drawn at once,
 * in the spirit of Ansor's sketches, with random tile sizes (divisors or not), thread counts, vector widths and
 * unrolling. Most draws are tidy (grng.tidy: sizes that divide, whole warps, staged 128-bit fetches, as a GPU
 * engineer would pick for a static shape), the rest any size, so that guards and odd shapes stay covered:
 *   - elementwise stages that are not outputs: inlined into their readers, computed per thread inside their
 *     consumer's thread loops, or given their own kernel;
 *   - a root stage's spatial loops: fused or tiled per axis into block / (virtual thread) / thread / per-thread
 *     parts, the block parts fused and bound to blockIdx.x (or .y and .x), the thread parts bound to threadIdx.x
 *     (and .y);
 *   - reductions with reuse: the serial reduction split (k.o, k.i), a register accumulator (cache_write "local"
 *     computed at the innermost thread loop), inputs staged in shared memory at k.o with a cooperative fetch
 *     bound to exactly the consumer's thread extents (so no thread loop around a barrier is guarded);
 *   - reductions without reuse: a cross-thread reduction (the reduction split and its inner part bound to
 *     threadIdx.x), the same after rfactor, or rfactor into two kernels;
 *   - sums of products of two f16 or bf16 reads shaped as a GEMM (tensor_cores): the tensor cores' structure,
 *     warps of instruction tiles, `tensorize`.
 * Stages are visited from the outputs back to the inputs, so that a producer knows how its consumer was mapped.
 *
 * Every draw is built on a scratch copy of the schedule and kept only when every step applied and the lowered
 * program passes the launch rules of the GPU semantics (threads per block, grid extents, shared and register
 * footprints, no barrier or cross-thread reduction under a guarded thread loop, no bound loop in a per-thread
 * stage); otherwise it is drawn again, and after a few failures the naive mapping (kg_schedule_gpu_default) is
 * used. Deterministic in the seed.
 *
 * Requires: stages still untouched (e.g. a fresh schedule); stages already transformed are left as they are. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include "gpu_rules.h"
#include "../base/rng.h"
#include "../base/xalloc.h"

/* Footprint limits the drawn schedules keep: 48 KB of static shared memory per block, and per-thread register
 * arrays small enough to stay in registers. */
#define GPU_MAX_THREADS 1024
static const kg_gpu_budget random_budget = {
    .threads = GPU_MAX_THREADS,
    .block = {GPU_MAX_THREADS, GPU_MAX_THREADS, 64},
    .grid = {INT32_MAX, 65535, 65535},
    .shared_floats = 12288,
    .local_array = 256,
    .local_total = 512,
};
#define GPU_ATTEMPTS 8

typedef struct grng {
  uint64_t state;
  /* a tidy draw (most of them): the choices a GPU engineer would make for a static shape (tile sizes that divide
   * the extents, powers of two, blocks of whole warps and at least 128 threads, register tiles with staged,
   * 128-bit fetches); the others draw any sizes, so that guards and odd shapes stay covered */
  int tidy;
} grng;

static int below(grng *r, int n) { return n <= 1 ? 0 : (int)(kg_rng_next(&r->state) % (uint64_t)n); }
static int chance(grng *r, int percent) { return below(r, 100) < percent; }

static int64_t pow2_ceil(int64_t x) {
  int64_t p = 1;
  while (p < x && p < ((int64_t)1 << 30)) p *= 2;
  return p;
}

/* A thread count for a loop of extent ext, at most cap: mostly a power of two of a useful size, sometimes any
 * value (odd counts exercise the guards). A tidy draw takes a power of two of at least lo (when the loop is that
 * long) that divides a power-of-two extent. */
static int64_t draw_threads_min(grng *r, int64_t ext, int64_t cap, int64_t lo) {
  int64_t lim = pow2_ceil(ext);
  if (lim > cap) lim = cap;
  if (lim < 1) lim = 1;
  if (r->tidy) {
    int64_t hi = lim > ext ? lim / 2 : lim, p[16];
    if (hi < 1) hi = 1;
    int n = 0;
    for (int64_t v = 1; v <= hi && n < 16; v *= 2)
      if (v >= (lo < hi ? lo : hi)) p[n++] = v;
    return p[below(r, n)];
  }
  if (chance(r, 65)) {
    int64_t lo = lim >= 16 ? lim / 8 : 1, p[16];
    int n = 0;
    for (int64_t v = 1; v <= lim && n < 16; v *= 2)
      if (v >= lo) p[n++] = v;
    return p[below(r, n)];
  }
  return 1 + below(r, (int)lim);
}

static int64_t draw_threads(grng *r, int64_t ext, int64_t cap) { return draw_threads_min(r, ext, cap, 32); }

/* Per-thread work along one axis: small, divisors or not (tidy: a power of two that divides ext). */
static int64_t draw_inner(grng *r, int64_t ext) {
  if (r->tidy) {
    static const int64_t t[] = {1, 2, 4, 4, 8};
    int64_t f = t[below(r, 5)];
    while (f > 1 && ext % f != 0) f /= 2;
    return f;
  }
  static const int64_t v[] = {1, 1, 2, 2, 3, 4, 4, 8};
  int64_t f = v[below(r, 8)];
  return f > ext && ext >= 1 ? (ext < 2 ? 1 : 2) : f;
}

/* A reduction tile: a power of two or any value up to min(extent, 32) (tidy: a power of two from 4 that divides
 * the extent). */
static int64_t draw_rtile(grng *r, int64_t ext) {
  int64_t hi = ext < 32 ? ext : 32;
  if (hi < 2) return 1;
  if (r->tidy) {
    int64_t p[6];
    int n = 0;
    for (int64_t v = 4; v <= hi && n < 6; v *= 2)
      if (ext % v == 0) p[n++] = v;
    if (n) return p[below(r, n)];
  }
  if (chance(r, 50)) {
    int64_t p[6];
    int n = 0;
    for (int64_t v = 2; v <= hi && n < 6; v *= 2) p[n++] = v;
    return p[below(r, n)];
  }
  return 2 + below(r, (int)(hi - 1));
}

/* How a root stage was mapped, for the stages computed inside it. */
typedef struct mapping {
  const kg_sstage *st;
  int64_t tx, ty;            /* extents bound to threadIdx.x / .y (1 when unbound) */
  int fused;                 /* several spatial axes fused into one before tiling: a per-thread region inside
                              * would span whole rows (the bounds of a fused index are loose), so nothing is
                              * computed inside */
  kg_iter *attach[8];        /* loops where a producer may be computed per thread: the innermost spatial thread
                              * loop and the serial spatial loops after it, before any reduction loop */
  int nattach;
} mapping;

typedef struct gctx {
  kg_builder b; /* on the scratch schedule */
  grng *r;
  mapping maps[64];
  int nmaps;
} gctx;

/* ---- the structures ---- */

/* The reduction loops of st (its leaves that are reductions) split and ordered: the outer parts, then the inner
 * parts and unsplit ones; spatial leaves after the reductions stay innermost when spatial_inner (else they go
 * before the reductions). With must_split the first reduction is always split. Returns the loop where shared
 * stages go (the innermost outer part), or NULL when nothing was split. */
static kg_iter *tile_reductions(gctx *g, kg_sstage *st, int first_free, int must_split, int spatial_inner) {
  kg_iter *outer[KG_STEP_MAX_NAMES], *inner[KG_STEP_MAX_NAMES], *spat[KG_STEP_MAX_NAMES];
  int no = 0, ni = 0, ns = 0;
  kg_iter *red[KG_STEP_MAX_NAMES];
  int nred = 0;
  for (int l = first_free; l < st->nleaves && nred < KG_STEP_MAX_NAMES && ns < KG_STEP_MAX_NAMES; l++) {
    if (st->leaves[l]->is_reduce) red[nred++] = st->leaves[l];
    else spat[ns++] = st->leaves[l];
  }
  for (int k = 0; k < nred && !g->b.failed; k++) {
    kg_iter *it = red[k];
    int64_t f = draw_rtile(g->r, it->extent);
    if (f >= 2 && f < it->extent && ((must_split && k == 0) || chance(g->r, 45))) {
      kg_iter *in, *o = kg_builder_split(&g->b, st, it, f, &in);
      outer[no++] = o;
      inner[ni++] = in;
    } else {
      inner[ni++] = it;
    }
  }
  if (g->b.failed) return NULL;
  kg_iter *order[3 * KG_STEP_MAX_NAMES];
  int n = 0;
  if (!spatial_inner)
    for (int k = 0; k < ns; k++) order[n++] = spat[k];
  for (int k = 0; k < no; k++) order[n++] = outer[k];
  for (int k = 0; k < ni; k++) order[n++] = inner[k];
  if (spatial_inner)
    for (int k = 0; k < ns; k++) order[n++] = spat[k];
  if (n > KG_STEP_MAX_NAMES) {
    g->b.failed = 1;
    return NULL;
  }
  /* the loops from first_free on take their slots in this order */
  if (n >= 2) kg_builder_reorder(&g->b, st, order, n);
  for (int k = 0; k < ni && !g->b.failed; k++)
    if (inner[k]->extent <= 16 && chance(g->r, 30)) kg_builder_annotate(&g->b, KG_STEP_UNROLL, st, inner[k], KG_THREAD_NONE);
  return no ? outer[no - 1] : NULL;
}

/* The vector width of a cooperative fetch: none mostly, else 2 or 4 (tidy: 4 mostly, else 2). */
static int64_t fetch_vector(grng *r) {
  if (r->tidy) return chance(r, 75) ? 4 : 2;
  return chance(r, 35) ? (chance(r, 50) ? 2 : 4) : 1;
}

/* Shared rows padded sometimes: 4 floats on a tidy draw (aligned for float4), 1 to 5 otherwise. */
static void draw_pad(gctx *g, const kg_sstage *sh) {
  if (g->b.failed || sh->out->ndim < 2 || !chance(g->r, 35)) return;
  int64_t pad = g->r->tidy ? 4 : 1 + below(g->r, 5);
  kg_builder_step(&g->b, KG_STEP_PAD, sh->name, NULL, 0, pad, 0, 1);
}

/* The shared stages just computed at loop ko of st pipelined sometimes: a ring of 2 to 4 tiles. */
static void draw_pipeline(gctx *g, const kg_sstage *st, const kg_iter *ko, int staged) {
  if (g->b.failed || !staged || !chance(g->r, g->r->tidy ? 50 : 35)) return;
  const char *loop = ko->name;
  kg_builder_step(&g->b, KG_STEP_PIPELINE, st->name, &loop, 1, 2 + below(g->r, chance(g->r, 80) ? 2 : 3), 0, 1);
}

/* A per-thread stage st (computed at a thread loop of a stage mapped with tx x ty threads): its reductions tiled,
 * some inputs staged in shared memory at the reduction's outer loop, its innermost loop sometimes unrolled. */
static void per_thread_stage(gctx *g, kg_sstage *st, int64_t tx, int64_t ty) {
  int want_shared = st->nrax > 0 && chance(g->r, g->r->tidy ? 95 : 75);
  kg_iter *ko = st->nrax > 0 ? tile_reductions(g, st, 0, want_shared, chance(g->r, 80)) : NULL;
  if (g->b.failed) return;
  /* its region's extents are known only when lowered, so no vectorizing here */
  kg_iter *last = st->nleaves ? st->leaves[st->nleaves - 1] : NULL;
  if (last && last->kind == KG_LOOP_SERIAL && !last->is_reduce && chance(g->r, 30))
    kg_builder_annotate(&g->b, KG_STEP_UNROLL, st, last, KG_THREAD_NONE);
  if (!ko || g->b.failed) return;
  kg_tensor *t[16];
  int reuse[16], n = 0, staged = 0;
  kg_gpu_collect_reads(st, st->body, t, reuse, &n, 16);
  for (int k = 0; k < n && !g->b.failed; k++) {
    const kg_sstage *prod = kg_sched_stage_of_tensor(g->b.s, t[k]);
    if (prod && prod->attach != KG_ATTACH_ROOT) continue;
    if (!chance(g->r, reuse[k] ? (g->r->tidy ? 95 : 80) : 35)) continue;
    kg_sstage *sh = kg_builder_cache(&g->b, KG_STEP_CACHE_READ, t[k]->name, "shared", st);
    if (!sh) return;
    kg_builder_compute_at(&g->b, sh, st, ko);
    kg_gpu_cooperative_fetch(&g->b, sh, tx, ty, fetch_vector(g->r));
    draw_pad(g, sh);
    staged++;
  }
  draw_pipeline(g, st, ko, staged);
}

/* Maps root stage st's spatial loops onto blocks and threads. with_red: st's reductions are tiled serially in
 * each thread (else st must have none left to place). Records the mapping for the stages computed inside. */
static mapping *map_root(gctx *g, kg_sstage *st, int with_red, int want_tiled) {
  if (g->nmaps >= 64) {
    g->b.failed = 1;
    return NULL;
  }
  mapping *m = &g->maps[g->nmaps++];
  memset(m, 0, sizeof *m);
  m->st = st;
  m->tx = m->ty = 1;
  int nax = st->nax;
  if (nax == 0) {
    if (with_red && st->nrax) tile_reductions(g, st, 0, 0, 1);
    return m;
  }
  int64_t cap = GPU_MAX_THREADS;
  kg_iter *blocks[KG_STEP_MAX_NAMES], *threads[2] = {NULL, NULL}, *inner[KG_STEP_MAX_NAMES], *vth = NULL;
  int nb = 0, nt = 0, ni = 0;
  int64_t text[2] = {1, 1};
  /* per-axis tiling needs one reorder over at most 16 loops: 3 per axis, a virtual-thread loop, the reductions */
  int tiled = nax >= 2 && 3 * nax + 1 + st->nrax <= KG_STEP_MAX_NAMES &&
              (want_tiled || chance(g->r, g->r->tidy ? 85 : 55));
  if (!tiled) {
    m->fused = nax >= 2;
    kg_iter *f = st->leaves[0];
    for (int d = 1; d < nax && !g->b.failed; d++) f = kg_builder_fuse(&g->b, st, st->leaves[0], st->leaves[1]);
    if (g->b.failed) return NULL;
    int64_t in_f = draw_inner(g->r, f->extent);
    int64_t t = draw_threads(g->r, (f->extent + in_f - 1) / in_f, cap);
    kg_iter *ti = NULL, *ii = NULL;
    kg_iter *b = t * in_f > 1 ? kg_builder_split(&g->b, st, f, t * in_f, &ti) : f;
    if (ti && in_f > 1) ti = kg_builder_split(&g->b, st, ti, in_f, &ii);
    blocks[nb++] = b;
    if (ti) {
      threads[nt] = ti;
      text[nt++] = t;
    }
    if (ii) inner[ni++] = ii;
  } else {
    /* thread axes: the last one, and sometimes the one before it */
    int tax[2] = {nax - 1, chance(g->r, 60) ? nax - 2 : -1};
    kg_iter *roots[KG_MAX_DIMS];
    for (int d = 0; d < nax; d++) roots[d] = st->roots[d];
    kg_iter *tpart[KG_MAX_DIMS] = {0};
    int64_t tcount[KG_MAX_DIMS];
    for (int d = 0; d < nax && !g->b.failed; d++) {
      kg_iter *it = roots[d];
      int is_t = d == tax[0] || d == tax[1];
      int64_t in_f = draw_inner(g->r, it->extent);
      tcount[d] = 1;
      if (is_t) {
        /* threadIdx.y (the axis before the last) is drawn first, at most 16; x gets what is left of 1024 (tidy:
         * enough for 128 threads in all) */
        int64_t lo = d == tax[0] ? 128 / (GPU_MAX_THREADS / cap) : 1;
        int64_t t =
            draw_threads_min(g->r, (it->extent + in_f - 1) / in_f, d == tax[0] ? cap : 16, lo < 32 ? 32 : lo);
        if (d != tax[0]) cap = GPU_MAX_THREADS / t;
        tcount[d] = t;
        kg_iter *ti = NULL, *ii = NULL;
        /* sometimes a virtual-thread level outside the threads of the last axis (an unrolled serial loop) */
        int64_t v = d == tax[0] && it->extent > 2 * t * in_f && chance(g->r, 15) ? (chance(g->r, 50) ? 2 : 4) : 1;
        kg_iter *b = v * t * in_f > 1 ? kg_builder_split(&g->b, st, it, v * t * in_f, &ti) : it;
        if (ti && v > 1) vth = kg_builder_split(&g->b, st, ti, t * in_f, &ti);
        if (ti && in_f > 1) ti = kg_builder_split(&g->b, st, ti, in_f, &ii);
        blocks[nb++] = b;
        tpart[d] = ti;
        if (ii) inner[ni++] = ii;
      } else if (in_f > 1 && it->extent > in_f) {
        kg_iter *ii, *b = kg_builder_split(&g->b, st, it, in_f, &ii);
        blocks[nb++] = b;
        inner[ni++] = ii;
      } else {
        blocks[nb++] = it;
      }
    }
    /* threadIdx.y for the outer thread axis, threadIdx.x for the last */
    if (tax[1] >= 0 && tpart[tax[1]]) {
      threads[nt] = tpart[tax[1]];
      text[nt++] = tcount[tax[1]];
    }
    if (tpart[tax[0]]) {
      threads[nt] = tpart[tax[0]];
      text[nt++] = tcount[tax[0]];
    }
  }
  if (g->b.failed) return NULL;
  /* order: blocks, the virtual threads, threads, (reductions), inner parts (spatial_inner) */
  kg_iter *order[KG_STEP_MAX_NAMES + 4];
  int n = 0;
  for (int k = 0; k < nb; k++) order[n++] = blocks[k];
  if (vth) order[n++] = vth;
  for (int k = 0; k < nt; k++) order[n++] = threads[k];
  for (int k = 0; k < ni; k++) order[n++] = inner[k];
  if (n > KG_STEP_MAX_NAMES) {
    g->b.failed = 1;
    return NULL;
  }
  kg_builder_reorder(&g->b, st, order, n);
  /* fuse the block parts (now the first nb leaves) into one loop, or two for blockIdx.y / .x */
  int two = nb >= 2 && chance(g->r, 35);
  kg_iter *bx = NULL, *by = NULL;
  if (two) {
    by = st->leaves[0];
    for (int k = 1; k < nb - 1 && !g->b.failed; k++) by = kg_builder_fuse(&g->b, st, st->leaves[0], st->leaves[1]);
    bx = st->leaves[1];
    if (!g->b.failed && by->extent > 65535) two = 0, bx = kg_builder_fuse(&g->b, st, by, bx), by = NULL;
  } else {
    bx = st->leaves[0];
    for (int k = 1; k < nb && !g->b.failed; k++) bx = kg_builder_fuse(&g->b, st, st->leaves[0], st->leaves[1]);
  }
  if (g->b.failed) return NULL;
  if (bx->extent > INT32_MAX) {
    g->b.failed = 1;
    return NULL;
  }
  kg_builder_annotate(&g->b, KG_STEP_BIND, st, bx, KG_THREAD_BLOCK_X);
  if (by) kg_builder_annotate(&g->b, KG_STEP_BIND, st, by, KG_THREAD_BLOCK_Y);
  if (vth) kg_builder_annotate(&g->b, KG_STEP_BIND, st, vth, KG_THREAD_VTHREAD);
  /* threads: (y, x), or fused into x */
  if (nt == 2 && chance(g->r, 25)) {
    kg_iter *f = kg_builder_fuse(&g->b, st, threads[0], threads[1]);
    threads[0] = f;
    text[0] *= text[1];
    nt = 1;
  }
  if (nt == 2) {
    kg_builder_annotate(&g->b, KG_STEP_BIND, st, threads[0], KG_THREAD_THREAD_Y);
    kg_builder_annotate(&g->b, KG_STEP_BIND, st, threads[1], KG_THREAD_THREAD_X);
    m->ty = text[0];
    m->tx = text[1];
  } else if (nt == 1) {
    kg_builder_annotate(&g->b, KG_STEP_BIND, st, threads[0], KG_THREAD_THREAD_X);
    m->tx = text[0];
  }
  if (g->b.failed) return NULL;
  int first_free = kg_sstage_leaf_index(st, nt ? threads[nt - 1] : vth ? vth : bx) + 1;
  if (nt) m->attach[m->nattach++] = threads[nt - 1];
  if (with_red && st->nrax) {
    int spatial_inner = chance(g->r, 70);
    tile_reductions(g, st, first_free, 0, spatial_inner);
    if (!spatial_inner)
      for (int k = 0; k < ni && m->nattach < 8; k++) m->attach[m->nattach++] = inner[k];
  } else {
    for (int k = 0; k < ni && m->nattach < 8; k++) m->attach[m->nattach++] = inner[k];
  }
  if (g->b.failed) return NULL;
  /* the innermost per-thread loop: unrolled or vectorized (width 2 or 4) sometimes */
  kg_iter *last = st->leaves[st->nleaves - 1];
  if (ni && last == inner[ni - 1] && last->kind == KG_LOOP_SERIAL) {
    int x = below(g->r, 10);
    if (x < 4 && (last->extent == 2 || last->extent == 4)) kg_builder_annotate(&g->b, KG_STEP_VECTORIZE, st, last, KG_THREAD_NONE);
    else if (x < 7) kg_builder_annotate(&g->b, KG_STEP_UNROLL, st, last, KG_THREAD_NONE);
  }
  return m;
}

/* A reduction with reuse: optionally a register accumulator (cache_write local) computed at the innermost
 * thread loop, with its inputs staged in shared memory. */
static void tiled_reduction(gctx *g, kg_sstage *st) {
  if (chance(g->r, g->r->tidy ? 90 : 65)) {
    kg_sstage *loc = kg_builder_cache(&g->b, KG_STEP_CACHE_WRITE, st->name, "local", NULL);
    if (!loc) return;
    mapping *m = map_root(g, st, 0, 1);
    if (!m || !m->nattach || m->fused) {
      g->b.failed = 1;
      return;
    }
    kg_iter *at = m->attach[chance(g->r, 80) ? 0 : below(g->r, m->nattach)];
    if (at->kind == KG_LOOP_VECTORIZED) at = m->attach[0];
    kg_builder_compute_at(&g->b, loc, st, at);
    per_thread_stage(g, loc, m->tx, m->ty);
    return;
  }
  mapping *m = map_root(g, st, 1, 0);
  if (!m || g->b.failed || st->nrax == 0) return;
  /* shared staging at the outermost reduction loop's outer part, when it was split */
  int R = -1;
  for (int l = 0; l < st->nleaves && R < 0; l++)
    if (st->leaves[l]->is_reduce) R = l;
  if (R < 0 || st->leaves[R]->origin != KG_ITER_SPLIT_OUTER || !chance(g->r, 70)) return;
  kg_iter *ko = st->leaves[R];
  kg_tensor *t[16];
  int reuse[16], n = 0, staged = 0;
  kg_gpu_collect_reads(st, st->body, t, reuse, &n, 16);
  for (int k = 0; k < n && !g->b.failed; k++) {
    if (!chance(g->r, reuse[k] ? 75 : 30)) continue;
    const kg_sstage *prod = kg_sched_stage_of_tensor(g->b.s, t[k]);
    if (prod && prod->attach != KG_ATTACH_ROOT) continue;
    kg_sstage *sh = kg_builder_cache(&g->b, KG_STEP_CACHE_READ, t[k]->name, "shared", st);
    if (!sh) return;
    kg_builder_compute_at(&g->b, sh, st, ko);
    kg_gpu_cooperative_fetch(&g->b, sh, m->tx, m->ty, fetch_vector(g->r));
    draw_pad(g, sh);
    staged++;
  }
  draw_pipeline(g, st, ko, staged);
}

/* A cross-thread reduction: the spatial loops fused onto blocks (rows sometimes spread over threadIdx.y), the
 * reduction loops fused and split, the inner part bound to threadIdx.x. */
static void cross_thread(gctx *g, kg_sstage *st) {
  kg_iter *sp = NULL;
  if (st->nax > 0) {
    sp = st->leaves[0];
    for (int d = 1; d < st->nax && !g->b.failed; d++) sp = kg_builder_fuse(&g->b, st, st->leaves[0], st->leaves[1]);
  }
  int first_red = st->nax > 0 ? 1 : 0;
  kg_iter *red = st->leaves[first_red];
  while (st->nleaves > first_red + 1 && !g->b.failed) red = kg_builder_fuse(&g->b, st, st->leaves[first_red], st->leaves[first_red + 1]);
  if (g->b.failed) return;
  int64_t t = draw_threads(g->r, red->extent, 512);
  if (t < 2) t = 2;
  int64_t rows = sp && sp->extent > 1 && chance(g->r, 25) ? (chance(g->r, 50) ? 2 : 4) : 1;
  if (sp) {
    if (rows > 1) {
      kg_iter *ri, *ro = kg_builder_split(&g->b, st, sp, rows, &ri);
      kg_builder_annotate(&g->b, KG_STEP_BIND, st, ro, KG_THREAD_BLOCK_X);
      kg_builder_annotate(&g->b, KG_STEP_BIND, st, ri, KG_THREAD_THREAD_Y);
    } else {
      kg_builder_annotate(&g->b, KG_STEP_BIND, st, sp, KG_THREAD_BLOCK_X);
    }
  }
  kg_iter *ri, *ro = kg_builder_split(&g->b, st, red, t, &ri);
  kg_builder_annotate(&g->b, KG_STEP_BIND, st, ri, KG_THREAD_THREAD_X);
  if (g->b.failed) return;
  if (chance(g->r, 25)) {
    kg_iter *o[2] = {ri, ro};
    kg_builder_reorder(&g->b, st, o, 2);
  }
  if (ro->extent <= 16 && chance(g->r, 25)) kg_builder_annotate(&g->b, KG_STEP_UNROLL, st, ro, KG_THREAD_NONE);
}

/* rfactor, then either a cross-thread reduction over the partials (computed per thread at the bound loop) or
 * two kernels (the partials, then their reduction). */
static void rfactor_reduction(gctx *g, kg_sstage *st, int two_kernels) {
  int k = below(g->r, st->nrax);
  for (int j = 0; j < st->nrax; j++)
    if (st->roots[st->nax + j]->extent > st->roots[st->nax + k]->extent && chance(g->r, 70)) k = j;
  kg_iter *it = st->roots[st->nax + k];
  if (it->extent < 2) {
    g->b.failed = 1;
    return;
  }
  int64_t f = draw_threads(g->r, it->extent, it->extent < 256 ? it->extent : 256);
  if (f < 2) f = 2;
  if (kg_builder_step(&g->b, KG_STEP_RFACTOR, st->name, &it->name, 1, f, 0, 1)) return;
  kg_sstage *rf = NULL;
  for (int i = 0; i < g->b.s->nstages; i++)
    if (g->b.s->stages[i]->origin == KG_ORIGIN_RFACTOR && (!rf || g->b.s->stages[i]->out->id > rf->out->id))
      rf = g->b.s->stages[i];
  if (!rf) {
    g->b.failed = 1;
    return;
  }
  if (two_kernels) {
    map_root(g, st, 1, 0);
    map_root(g, rf, 1, 0);
    return;
  }
  kg_iter *sp = NULL;
  if (st->nax > 0) {
    sp = st->leaves[0];
    for (int d = 1; d < st->nax && !g->b.failed; d++) sp = kg_builder_fuse(&g->b, st, st->leaves[0], st->leaves[1]);
    kg_builder_annotate(&g->b, KG_STEP_BIND, st, sp, KG_THREAD_BLOCK_X);
  }
  kg_iter *ki = st->leaves[st->nleaves - 1];
  kg_builder_annotate(&g->b, KG_STEP_BIND, st, ki, KG_THREAD_THREAD_X);
  kg_builder_compute_at(&g->b, rf, st, ki);
  if (g->b.failed) return;
  kg_iter *last = rf->leaves[rf->nleaves - 1];
  if (last->kind == KG_LOOP_SERIAL && chance(g->r, 25)) kg_builder_annotate(&g->b, KG_STEP_UNROLL, rf, last, KG_THREAD_NONE);
}

/* Tensor cores (tensorize) where the stage has their shape (kg_gpu_mma_shape): wy warps of mt x nt instruction
 * tiles, drawn 40% of the time; 0 when nothing was drawn. The draw happens only for such stages, so that the draws of
 * every other stage stay what they were before this existed. */
static int tensor_cores(gctx *g, kg_sstage *st) {
  kg_gpu_mma_axes ax;
  if (!kg_gpu_mma_shape(g->b.s->prog, st, &ax) || !chance(g->r, 40)) return 0;
  int64_t M = ax.m, N = ax.n, wy = 1, nt = 1;
  for (int c = below(g->r, 3); c > 0 && M % (32 * wy) == 0; c--) wy *= 2;
  for (int c = below(g->r, 5); c > 0 && N % (16 * nt) == 0; c--) nt *= 2;
  kg_gpu_mma_opts o = {.wy = wy, .nt = nt, .mt = 1};
  o.unroll = nt > 1 && chance(g->r, 50);
  o.staged = chance(g->r, 50);
  /* staged: 1, 2 or 4 instruction steps a k step, rows padded by 0, 2, 4 or 8 elements, 1, 2 or 4 tiles along
   * the rows a warp (a register tile of instructions) */
  if (o.staged) {
    o.ks = (int64_t)1 << below(g->r, 3);
    o.pad = (int64_t[]){0, 2, 4, 8}[below(g->r, 4)];
    o.mt = (int64_t)1 << below(g->r, 3);
    o.pipe = chance(g->r, 40) ? 2 + below(g->r, 2) : 1;
  }
  kg_gpu_mma_build(&g->b, st, &ax, &o);
  return 1;
}

static const mapping *mapping_of(const gctx *g, const kg_sstage *st) {
  for (int i = 0; i < g->nmaps; i++)
    if (g->maps[i].st == st) return &g->maps[i];
  return NULL;
}

/* One program stage: inline it, compute it per thread inside its consumer, or give it a kernel. */
static void schedule_stage(gctx *g, kg_sstage *st) {
  if (st->attach != KG_ATTACH_ROOT || !kg_sched_untransformed(st) || kg_sched_attached_at(g->b.s, st, NULL)) return;
  if (!st->is_output && st->red == KG_RED_NONE && chance(g->r, 55)) {
    /* inlining is refused when nothing reads the stage or an attachment would break: then try the others */
    kg_step in;
    memset(&in, 0, sizeof in);
    in.kind = KG_STEP_COMPUTE_INLINE;
    in.stage = st->name;
    char err[256];
    if (kg_schedule_apply(g->b.s, &in, err, sizeof err) == 0) return;
  }
  if (!st->is_output && chance(g->r, st->red == KG_RED_NONE ? 35 : 30)) {
    const kg_sstage *cons = NULL;
    if (kg_sched_consumers(g->b.s, st, NULL, &cons, 1) == 1) {
      const mapping *m = mapping_of(g, cons);
      if (m && m->nattach && !m->fused && cons->attach == KG_ATTACH_ROOT) {
        /* not inside a vectorized loop, which could then not print as vector accesses */
        kg_iter *at = m->attach[chance(g->r, 70) ? 0 : below(g->r, m->nattach)];
        if (at->kind == KG_LOOP_VECTORIZED) at = m->attach[0];
        kg_builder_compute_at(&g->b, st, cons, at);
        per_thread_stage(g, st, m->tx, m->ty);
        return;
      }
    }
  }
  if (st->red == KG_RED_NONE || st->nrax == 0) {
    map_root(g, st, 0, 0);
    return;
  }
  /* tensor cores, where the stage has their shape (f16/bf16 GEMM-like stages) */
  if (tensor_cores(g, st)) return;
  int x = below(g->r, 100);
  if (kg_gpu_has_reuse(st)) {
    if (x < (g->r->tidy ? 90 : 70)) tiled_reduction(g, st);
    else if (x < 85) cross_thread(g, st);
    else if (x < 92) rfactor_reduction(g, st, 0);
    else map_root(g, st, 1, 0);
  } else {
    if (x < 35) cross_thread(g, st);
    else if (x < 50) rfactor_reduction(g, st, 0);
    else if (x < 60) rfactor_reduction(g, st, 1);
    else if (x < 80) tiled_reduction(g, st);
    else map_root(g, st, 1, 0);
  }
}

/* A scratch copy of s: a new schedule with s's trace replayed. */
static kg_schedule *scratch_copy(const kg_schedule *s) {
  kg_schedule *c = kg_schedule_new(s->prog);
  char err[512];
  if (kg_schedule_apply_trace(c, &s->trace, err, sizeof err) != 0) {
    kg_schedule_free(c);
    return NULL;
  }
  return c;
}

void kg_sched_random_gpu(kg_schedule *s, uint64_t seed, int nsteps) {
  if (nsteps <= 0) return;
  grng r = {seed ^ 0x6b67656e5f677075ull, 0};
  /* the program's stages as they are now, visited from the last (the outputs) back */
  int n0 = s->nstages;
  const char **names = kg_xrealloc(NULL, sizeof(char *) * (size_t)(n0 > 0 ? n0 : 1));
  for (int i = 0; i < n0; i++) names[i] = s->stages[i]->name;
  for (int attempt = 0; attempt < GPU_ATTEMPTS; attempt++) {
    r.tidy = chance(&r, 60);
    kg_schedule *sc = scratch_copy(s);
    if (!sc) break;
    gctx g;
    memset(&g, 0, sizeof g);
    kg_builder_init(&g.b, sc);
    g.r = &r;
    for (int i = n0 - 1; i >= 0 && !g.b.failed; i--) {
      kg_sstage *st = kg_schedule_find_stage(sc, names[i]);
      if (st) schedule_stage(&g, st);
    }
    char why[512];
    int ok = !g.b.failed && kg_gpu_launchable(sc, &random_budget, why, sizeof why) == 0;
    if (ok) {
      /* the scratch copy started from s's state, so every step applies to s as well */
      char err[512];
      for (int i = s->trace.nsteps; i < sc->trace.nsteps; i++) {
        int rc = kg_schedule_apply(s, &sc->trace.steps[i], err, sizeof err);
        assert(rc == 0);
        (void)rc;
      }
      kg_schedule_free(sc);
      free(names);
      return;
    }
    kg_schedule_free(sc);
  }
  free(names);
  kg_schedule_gpu_default(s, 256);
}
