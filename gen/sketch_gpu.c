/* The GPU sketch rules (CUDA target), in the spirit of Ansor's: each sketch fixes, per stage of the program, one
 * structure; its knobs are the sizes. The structures:
 *   - inline: elementwise stages that are not outputs are substituted into their readers (conv2d's padding,
 *     softmax's exponentials, layernorm's centered values);
 *   - tile: multi-level tiling of the spatial loops, per axis block / (vthread, last axis) / thread / per-thread
 *     (S-S-S-S), the block parts bound to blockIdx.y and .x, the thread parts to threadIdx.y (all axes but the
 *     last, fused) and .x (the last); a reduction with reuse accumulates in registers (cache_write local computed
 *     at the innermost thread loop), its reductions split k.o / k.i (R-R) with the register tile innermost
 *     (S), and its reused inputs staged in shared memory at a k.o loop with a cooperative, vectorized fetch by
 *     the same threads;
 *   - fused epilogue: a reduction with reuse whose one consumer is elementwise of the same shape is computed per
 *     thread inside the consumer's tiles (mlp_epilogue, bias and activation after a matmul), as above;
 *   - cross-thread reduction, for reductions without reuse (softmax, norms, reduce_rows): a block per output
 *     element, the reduction split over threadIdx.x; when the reduction's one consumer is elementwise over more
 *     axes (a row and its elements), it is computed in shared memory at the consumer's block loop by the same
 *     threads that write the row (softmax_cross_thread.sched);
 *   - one-pass rows (gpu/row-onepass): as above, and a reduction whose consumers are all that row stage or
 *     reductions already computed at its block (softmax's maximum, read by the sum and the output; layernorm's
 *     mean) is computed there too, so the whole program is one kernel; the inputs the group reads at two or more
 *     stages can be copied into shared memory once per row (knob stage_rows), so X leaves memory once
 *     (softmax_one_pass.sched);
 *   - simple: the spatial loops fused, split into (vector,) threads and blocks; the fallback sketch maps every
 *     stage so, without inlining, so that every program has a sketch.
 * Knobs: tile sizes (kg_space_tile_values: divisors or not), thread counts, vthreads, an unroll limit (the
 * innermost loops of a register tile are unrolled while the product of their extents stays within it), vector
 * widths of fetches and stores, and where shared stages go (which k.o loop).
 *
 *   - tensor cores (gpu/mma): sums of products of two f16 or bf16 reads (or f32 ones where the program allows
 *     TF32) shaped as a GEMM get warps of mma.m16n8k16 (TF32: m16n8k8) tiles (`tensorize`; kg_gpu_mma_build), the other stages the naive mapping.
 * The sketches combine these per stage: gpu/simple (the fallback), gpu/tile-fuse, gpu/tile (no fused epilogues),
 * gpu/tile-fuse-noshared, gpu/tile-fuse-2d (elementwise stages tiled per axis), gpu/tile-noinline (elementwise
 * stages keep their kernels, so reductions can stage them in shared memory), gpu/cross-fuse, gpu/row-onepass and
 * gpu/cross (every reduction cross-thread); one that makes the same plan as an earlier one is left out.
 * An unfused space (sp->unfused) takes its sketches from another list, with no inlining and no fused epilogues or
 * cross-thread reductions at a consumer: every program stage is a kernel of its own (the only stages computed
 * inside a kernel are its own register accumulator and shared-memory copies): gpu/simple, gpu/cross, gpu/tile,
 * gpu/tile-noshared and gpu/tile-2d.
 *
 * A sketch is kept only when some point of it realizes (probed with a few random points); a realized schedule
 * must lower and pass the launch rules within the space's device limits (kg_gpu_launchable), else the point is
 * dropped (-1). */
#include <stdio.h>
#include <string.h>
#include "space.h"
#include "../base/rng.h"
#include "gpu_rules.h"

#define MAX_STAGED 8
#define REG_OVERHEAD 32 /* registers a kernel needs besides its register arrays (indices, operands, addresses) */
#define PROBES 32

typedef enum { ACT_SIMPLE, ACT_INLINE, ACT_TILE, ACT_PER_THREAD, ACT_CROSS, ACT_ROW, ACT_CROSS_AT } act_kind;

/* What one program stage becomes in a sketch, with the indices of its knobs (-1: none). */
typedef struct stage_plan {
  const char *name;
  act_kind act;
  int local;  /* TILE: accumulate in a register stage (cache_write local) computed per thread */
  int shared; /* TILE with local, PER_THREAD: stage the reused inputs in shared memory */
  int at;     /* PER_THREAD, CROSS_AT: the consumer's plan */
  int nax;    /* spatial axes; the per-axis knobs below are indexed by axis */
  int k_thread[KG_MAX_DIMS], k_inner[KG_MAX_DIMS], k_vthread, k_vec_out;
  int nrax;
  int k_rtile[KG_MAX_DIMS], k_unroll, k_loc;
  int nstaged;
  const char *staged[MAX_STAGED]; /* the inputs staged in shared memory, in read order */
  int k_fetch[MAX_STAGED];
  int k_pad[MAX_STAGED];          /* its rows padded in shared memory (pad): 0, 1 or 4 floats */
  int k_pipeline;                 /* the staged tiles' ring at their k loop (pipeline): 1 (none), 2 or 3 stages */
  int k_kmajor[MAX_STAGED];       /* a 2-D input read along the reduction stored transposed (k-major): 0 or 1 */
  int k_threads, k_vector; /* SIMPLE, CROSS, ROW (CROSS_AT uses its consumer's k_threads) */
  int k_min_blocks;        /* TILE with local: launch_bounds (0: none, else blocks kept resident per SM) */
  int k_raster;            /* TILE with local: block rows per group of the block order (1: row by row) */
  int lead; /* ROW: how many leading axes go to blocks (its reduction producers' axes) */
  /* ROW under gpu/row-onepass: the inputs its whole group (it and the reductions computed at its block) reads at
   * two or more stages, copied into shared memory once per row when k_stage_rows says so */
  int nrow_staged, k_stage_rows;
  const char *row_staged[MAX_STAGED];
} stage_plan;

typedef struct sketch_plan {
  int n; /* the program's stages, in order */
  stage_plan *st;
} sketch_plan;

/* ---- knobs ---- */

static int64_t pow2_ceil(int64_t x) {
  int64_t p = 1;
  while (p < x && p < ((int64_t)1 << 30)) p *= 2;
  return p;
}

/* Adds a knob; -1 (and *full set) when the sketch has no room left. */
static int knob(kg_sketch *sk, int *full, kg_knob_kind kind, const char *stage, const char *what,
                const int64_t *v, int n) {
  if (sk->nknobs >= KG_SPACE_MAX_KNOBS) {
    *full = 1;
    return -1;
  }
  return kg_sketch_add_stage_knob(sk, kind, stage, what, v, n);
}

/* GPU tile sizes for a loop of this extent, from lo (or the extent when shorter) up to cap: the powers of two and
 * the divisors of the extent, never an odd size that leaves a remainder: static shapes get guard-free tiles, other
 * extents the powers of two (their guards are the last tile's). */
static int gpu_tile_knob(kg_sketch *sk, int *full, const char *stage, const char *what, int64_t extent, int64_t lo,
                         int64_t cap) {
  int64_t v[KG_KNOB_MAX_VALUES], hi = extent < cap ? extent : cap;
  if (lo > hi) lo = hi;
  int n = 0;
  for (int64_t t = 1; t <= hi && n < KG_KNOB_MAX_VALUES; t *= 2)
    if (t >= lo) v[n++] = t;
  for (int64_t t = lo > 3 ? lo : 3; t <= hi && n < KG_KNOB_MAX_VALUES; t++)
    if (extent % t == 0 && (t & (t - 1)) != 0) v[n++] = t;
  if (n == 0) v[n++] = 1;
  return knob(sk, full, KG_KNOB_TILE, stage, what, v, n);
}

/* Thread counts for a loop of this extent: powers of two from a warp (or less for short loops) up to cap. */
static int threads_knob(kg_sketch *sk, int *full, const char *stage, int64_t extent, int64_t cap) {
  int64_t hi = pow2_ceil(extent) < cap ? pow2_ceil(extent) : cap, v[16];
  int n = 0;
  for (int64_t t = hi < 32 ? hi : 32; t <= hi && n < 16; t *= 2) v[n++] = t;
  if (n == 0) v[n++] = 1;
  return knob(sk, full, KG_KNOB_TILE, stage, "threads", v, n);
}

static int vector_knob(kg_sketch *sk, int *full, const char *stage, const char *what) {
  static const int64_t v[] = {1, 2, 4};
  return knob(sk, full, KG_KNOB_VECTOR, stage, what, v, 3);
}

static int64_t val(const kg_point *pt, int k, int64_t dflt) { return k >= 0 ? pt->knobs[k] : dflt; }

static int64_t total_extent(const kg_sstage *st, int from, int n) {
  int64_t e = 1;
  for (int d = from; d < from + n; d++) e *= st->roots[d]->extent;
  return e;
}

/* Whether e uses one of st's reduction variables. */
static int uses_reduction(const kg_expr *e, const kg_sstage *st) {
  if (!e) return 0;
  switch (e->kind) {
    case KG_EXPR_IVAR:
      for (int r = 0; r < st->nrax; r++)
        if (e->var.iv == st->rax[r]) return 1;
      return 0;
    case KG_EXPR_READ:
      for (int i = 0; i < e->read.n; i++)
        if (uses_reduction(e->read.idx[i], st)) return 1;
      return 0;
    case KG_EXPR_UNARY:
    case KG_EXPR_BINARY: return uses_reduction(e->op.a, st) || uses_reduction(e->op.b, st);
    case KG_EXPR_CALL:
      for (int i = 0; i < e->call.n; i++)
        if (uses_reduction(e->call.args[i], st)) return 1;
      return 0;
    default: return 0;
  }
}

/* Whether st reads the 2-D tensor t with a reduction variable in its last (contiguous) index and none in the
 * first: a GEMM's A (M x K). Its tile is read down the reduction by each thread, so stored transposed (k-major)
 * a thread's values of one k step are contiguous. */
static int reads_along_reduction(const kg_expr *e, const kg_tensor *t, const kg_sstage *st) {
  if (!e) return 0;
  switch (e->kind) {
    case KG_EXPR_READ:
      if (e->read.tensor == t && e->read.n == 2 && uses_reduction(e->read.idx[1], st) &&
          !uses_reduction(e->read.idx[0], st))
        return 1;
      for (int i = 0; i < e->read.n; i++)
        if (reads_along_reduction(e->read.idx[i], t, st)) return 1;
      return 0;
    case KG_EXPR_UNARY:
    case KG_EXPR_BINARY: return reads_along_reduction(e->op.a, t, st) || reads_along_reduction(e->op.b, t, st);
    case KG_EXPR_CALL:
      for (int i = 0; i < e->call.n; i++)
        if (reads_along_reduction(e->call.args[i], t, st)) return 1;
      return 0;
    default: return 0;
  }
}

/* The tensors st stages in shared memory (with their fetch knobs): those it reads with reuse. What it reads
 * through an inlined stage is left out: cache_read copies only tensors a stage reads directly. */
static void staged_inputs(kg_sketch *sk, int *full, stage_plan *p, const kg_schedule *sc, const kg_sstage *st) {
  kg_tensor *t[16];
  int reuse[16], n = 0;
  kg_gpu_collect_reads(st, st->body, t, reuse, &n, 16);
  for (int k = 0; k < n && p->nstaged < MAX_STAGED; k++) {
    const kg_sstage *prod = kg_sched_stage_of_tensor(sc, t[k]);
    if (!reuse[k] || (prod && prod->attach == KG_ATTACH_INLINE)) continue;
    char what[96];
    p->staged[p->nstaged] = t[k]->name;
    snprintf(what, sizeof what, "%s.shared.vector", t[k]->name);
    /* a cooperative fetch moves whole rows of a tile: 64- or 128-bit accesses (a tile row too short for them
     * prints as scalar accesses all the same) */
    static const int64_t fetch[] = {2, 4};
    p->k_fetch[p->nstaged] = knob(sk, full, KG_KNOB_VECTOR, p->name, what, fetch, 2);
    /* rows 1 or 4 floats longer, so that a warp reading down a column of the tile spreads over the banks: 4 keeps
     * rows 16-byte aligned for float4 fetches and reads, 1 breaks every power-of-two row period */
    static const int64_t pads[] = {0, 1, 4}, onoff[] = {0, 1};
    snprintf(what, sizeof what, "%s.shared.pad", t[k]->name);
    p->k_pad[p->nstaged] = knob(sk, full, KG_KNOB_CHOICE, p->name, what, pads, 3);
    p->k_kmajor[p->nstaged] = -1;
    if (reads_along_reduction(st->body, t[k], st)) {
      snprintf(what, sizeof what, "%s.shared.kmajor", t[k]->name);
      p->k_kmajor[p->nstaged] = knob(sk, full, KG_KNOB_CHOICE, p->name, what, onoff, 2);
    }
    p->nstaged++;
  }
}

/* The knobs of a register-tiled reduction stage st (a cache_write local copy of it, or the stage itself computed
 * inside its consumer): reduction tiles, unrolling, the shared stages' location and fetch widths. */
static void per_thread_knobs(kg_sketch *sk, int *full, stage_plan *p, const kg_schedule *sc, const kg_sstage *st) {
  char what[96];
  p->nrax = st->nrax;
  for (int r = 0; r < st->nrax; r++) {
    const kg_iter *it = st->roots[st->nax + r];
    snprintf(what, sizeof what, "%s.tile", it->name);
    p->k_rtile[r] = gpu_tile_knob(sk, full, p->name, what, it->extent, 1, 64);
  }
  static const int64_t unroll[] = {1, 16, 64, 512};
  p->k_unroll = knob(sk, full, KG_KNOB_UNROLL, p->name, "unroll", unroll, 4);
  p->k_loc = -1;
  if (p->shared && st->nrax >= 2) {
    int64_t loc[KG_MAX_DIMS];
    for (int r = 0; r < st->nrax; r++) loc[r] = r;
    p->k_loc = knob(sk, full, KG_KNOB_LOCATION, p->name, "shared_at", loc, st->nrax);
  }
  p->nstaged = 0;
  p->k_pipeline = -1;
  if (p->shared) staged_inputs(sk, full, p, sc, st);
  /* the staged tiles of the next one or two k steps in flight (cp.async) while this one computes */
  static const int64_t stages[] = {1, 2, 3};
  if (p->nstaged > 0) p->k_pipeline = knob(sk, full, KG_KNOB_CHOICE, p->name, "pipeline", stages, 3);
}

/* ---- realization ---- */

/* How a tiled or row-mapped stage was mapped, for the stages computed inside it. */
typedef struct mapped {
  kg_iter *attach;            /* TILE: the innermost thread loop (else the innermost bound loop); ROW: the block */
  int64_t tx, ty;             /* the threads bound to threadIdx.x / .y */
  int64_t inner[KG_MAX_DIMS]; /* TILE: each axis's per-thread extent */
} mapped;

typedef struct rctx {
  kg_builder b;
  const kg_point *pt;
  const sketch_plan *plan;
  kg_gpu_budget budget;
  mapped *maps; /* per plan entry */
} rctx;

/* The launch budget of the space's device: its threads, block, grid and static shared memory; registers estimated
 * as the register arrays plus an overhead, within the per-thread and per-block register files. */
static void budget_of(const kg_gpu_limits *l, kg_gpu_budget *b) {
  memset(b, 0, sizeof *b);
  b->threads = l->max_threads_per_block;
  for (int d = 0; d < 3; d++) {
    b->block[d] = l->max_block[d];
    b->grid[d] = l->max_grid[d];
  }
  b->shared_floats = l->max_shared_static / 4;
  b->local_array = b->local_total = l->max_regs_per_thread - REG_OVERHEAD;
  b->regs_per_block = l->max_regs_per_block;
  b->reg_overhead = REG_OVERHEAD;
}

/* Multi-level tiling of root stage st's spatial loops (requires: untouched loops, no reduction left in st). */
static void tile_root(rctx *c, const stage_plan *p, kg_sstage *st, mapped *m) {
  kg_builder *b = &c->b;
  kg_iter *order[KG_STEP_MAX_NAMES + 8], *thr[KG_MAX_DIMS], *inn[KG_MAX_DIMS], *vth = NULL;
  int64_t text[KG_MAX_DIMS];
  int nax = st->nax, n = 0, nt = 0, ni = 0;
  for (int d = 0; d < nax && !b->failed; d++) {
    int64_t v = d == nax - 1 ? val(c->pt, p->k_vthread, 1) : 1, t = val(c->pt, p->k_thread[d], 1),
            in = val(c->pt, p->k_inner[d], 1);
    kg_iter *rest = NULL;
    m->inner[d] = in;
    order[n++] = v * t * in > 1 ? kg_builder_split(b, st, st->roots[d], v * t * in, &rest) : st->roots[d];
    if (rest && v > 1) vth = t * in > 1 ? kg_builder_split(b, st, rest, t * in, &rest) : rest;
    if (rest && v > 1 && t * in == 1) rest = NULL;
    if (rest && t > 1) {
      kg_iter *ii = NULL;
      thr[nt] = in > 1 ? kg_builder_split(b, st, rest, in, &ii) : rest;
      text[nt++] = t;
      rest = ii;
    }
    if (rest) inn[ni++] = rest;
  }
  if (vth) order[n++] = vth;
  for (int k = 0; k < nt; k++) order[n++] = thr[k];
  for (int k = 0; k < ni; k++) order[n++] = inn[k];
  kg_builder_reorder(b, st, order, n);
  if (b->failed) return;
  /* blocks: the outer axes fused onto blockIdx.y (while the grid allows), the last onto blockIdx.x */
  kg_iter *by = nax >= 2 ? kg_builder_fuse_run(b, st, 0, nax - 1) : NULL, *bx = st->leaves[by ? 1 : 0];
  /* grouped block order (rasterization): blocks numbered down a group of G block rows before the next column, so
   * that the blocks running at once share the columns of their right-hand operand in L2 */
  int64_t group = val(c->pt, p->k_raster, 1);
  if (by && !b->failed && group > 1 && by->extent > group) {
    kg_iter *byi = NULL, *byo = kg_builder_split(b, st, by, group, &byi);
    if (byo) {
      kg_iter *ord[3] = {byo, bx, byi};
      kg_builder_reorder(b, st, ord, 3);
      bx = kg_builder_fuse(b, st, kg_builder_fuse(b, st, byo, bx), byi);
      by = NULL;
    }
  }
  if (by && by->extent > c->budget.grid[1]) bx = kg_builder_fuse(b, st, by, bx), by = NULL;
  kg_builder_annotate(b, KG_STEP_BIND, st, bx, KG_THREAD_BLOCK_X);
  if (by) kg_builder_annotate(b, KG_STEP_BIND, st, by, KG_THREAD_BLOCK_Y);
  if (vth) kg_builder_annotate(b, KG_STEP_BIND, st, vth, KG_THREAD_VTHREAD);
  /* threads: the last axis's on threadIdx.x, the others' fused onto threadIdx.y */
  m->tx = m->ty = 1;
  if (nt >= 2) {
    for (int k = 0; k < nt - 1; k++) m->ty *= text[k];
    kg_iter *ty = kg_builder_fuse_run(b, st, b->failed ? 0 : kg_sstage_leaf_index(st, thr[0]), nt - 1);
    kg_builder_annotate(b, KG_STEP_BIND, st, ty, KG_THREAD_THREAD_Y);
  }
  if (nt >= 1) {
    m->tx = text[nt - 1];
    kg_builder_annotate(b, KG_STEP_BIND, st, thr[nt - 1], KG_THREAD_THREAD_X);
  }
  /* blocks of whole warps where the row is a warp long and the stage has work for many (a partial warp idles
   * lanes on every instruction); small stages keep any block */
  if (!b->failed && (m->tx * m->ty) % 32 != 0 && st->roots[nax - 1]->extent >= 32 &&
      total_extent(st, 0, nax) >= 32 * 32)
    kg_builder_fail(b, "tile: %lld threads a block, not whole warps", (long long)(m->tx * m->ty));
  m->attach = nt ? thr[nt - 1] : vth ? vth : bx;
  /* the per-thread loops: unrolled, the innermost vectorized when its knob says so */
  for (int k = 0; k < ni && !b->failed; k++)
    kg_builder_annotate(b, k == ni - 1 && val(c->pt, p->k_vec_out, 0) ? KG_STEP_VECTORIZE : KG_STEP_UNROLL, st, inn[k],
                    KG_THREAD_NONE);
}

/* Register-tiled stage st computed at the innermost thread loop of cons (mapped as m): its reductions split
 * (k.o ..., k.i ..., then the register tile), the innermost loops unrolled within the unroll knob, the reused
 * inputs staged in shared memory at a k.o loop with a cooperative fetch by cons's threads. */
static void per_thread(rctx *c, const stage_plan *p, kg_sstage *st, const kg_sstage *cons, const mapped *m) {
  kg_builder *b = &c->b;
  kg_builder_compute_at(b, st, cons, m->attach);
  kg_iter *order[KG_STEP_MAX_NAMES + 8], *ro[KG_MAX_DIMS];
  int64_t ext[KG_STEP_MAX_NAMES + 8];
  int nr = st->nrax, n = 0;
  for (int r = 0; r < nr && !b->failed; r++) ro[r] = order[n++] = kg_builder_split(b, st, st->roots[st->nax + r],
                                                                              val(c->pt, p->k_rtile[r], 1),
                                                                              &order[nr + r]);
  if (b->failed) return;
  for (int r = 0; r < nr; r++) ext[nr + r] = order[nr + r]->extent;
  n = 2 * nr;
  for (int d = 0; d < st->nax; d++) {
    ext[n] = d < cons->nax ? m->inner[d] : st->roots[d]->extent;
    order[n++] = st->roots[d];
  }
  kg_builder_reorder(b, st, order, n);
  int64_t unroll = val(c->pt, p->k_unroll, 1), prod = 1;
  for (int k = n - 1; k >= nr && !b->failed && prod * ext[k] <= unroll; k--) {
    prod *= ext[k];
    if (ext[k] > 1) kg_builder_annotate(b, KG_STEP_UNROLL, st, order[k], KG_THREAD_NONE);
  }
  int64_t loc = val(c->pt, p->k_loc, nr - 1);
  for (int j = 0; j < p->nstaged && !b->failed; j++) {
    kg_sstage *sh = kg_builder_cache(b, KG_STEP_CACHE_READ, p->staged[j], "shared", st);
    if (!sh) return;
    /* k-major: the copy stores its two axes swapped (before it is attached: reorder_storage wants it at root),
     * and its fetch still walks the tensor's rows, contiguous in global memory, with scalar stores */
    int kmajor = val(c->pt, p->k_kmajor[j], 0) && sh->nax == 2;
    const char *rows_first[2] = {sh->nax == 2 ? sh->ax[0]->name : NULL, sh->nax == 2 ? sh->ax[1]->name : NULL};
    if (kmajor) {
      const char *swapped[2] = {rows_first[1], rows_first[0]};
      kg_builder_step(b, KG_STEP_REORDER_STORAGE, sh->name, swapped, 2, 0, 0, 0);
    }
    kg_builder_compute_at(b, sh, st, ro[loc]);
    if (kmajor && !b->failed) kg_builder_step(b, KG_STEP_REORDER, sh->name, rows_first, 2, 0, 0, 0);
    kg_gpu_cooperative_fetch(b, sh, m->tx, m->ty, kmajor ? 1 : val(c->pt, p->k_fetch[j], 1));
    int64_t pad = val(c->pt, p->k_pad[j], 0);
    if (pad > 0 && sh->out->ndim >= 2) kg_builder_step(b, KG_STEP_PAD, sh->name, NULL, 0, pad, 0, 1);
  }
  int64_t stages = val(c->pt, p->k_pipeline, 1);
  if (p->nstaged > 0 && stages > 1 && !b->failed) {
    const char *loop = ro[loc]->name;
    kg_builder_step(b, KG_STEP_PIPELINE, st->name, &loop, 1, stages, 0, 1);
  }
}

/* Spatial loops fused onto blocks and threads (vectorized innermost when the knob says so). */
static void simple(rctx *c, const stage_plan *p, kg_sstage *st) {
  kg_builder *b = &c->b;
  if (st->nax == 0) return;
  kg_iter *f = kg_builder_fuse_run(b, st, 0, st->nax), *in;
  int64_t v = val(c->pt, p->k_vector, 1), t = val(c->pt, p->k_threads, 1);
  if (v > 1) {
    f = kg_builder_split(b, st, f, v, &in);
    kg_builder_annotate(b, KG_STEP_VECTORIZE, st, in, KG_THREAD_NONE);
  }
  if (t > 1) {
    f = kg_builder_split(b, st, f, t, &in);
    kg_builder_annotate(b, KG_STEP_BIND, st, in, KG_THREAD_THREAD_X);
  }
  kg_builder_annotate(b, KG_STEP_BIND, st, f, KG_THREAD_BLOCK_X);
}

/* A cross-thread reduction of st's (from its loop `from` on, fused) over t threads. */
static void cross_reduce(rctx *c, kg_sstage *st, int from, int64_t t) {
  kg_iter *in, *red = kg_builder_fuse_run(&c->b, st, from, st->nleaves - from);
  kg_builder_split(&c->b, st, red, t, &in);
  kg_builder_annotate(&c->b, KG_STEP_BIND, st, in, KG_THREAD_THREAD_X);
}

/* A reduction in its own kernel: a block per output element (spatial loops fused), cross-thread. */
static void cross_own(rctx *c, const stage_plan *p, kg_sstage *st) {
  if (st->nax > 0)
    kg_builder_annotate(&c->b, KG_STEP_BIND, st, kg_builder_fuse_run(&c->b, st, 0, st->nax), KG_THREAD_BLOCK_X);
  cross_reduce(c, st, st->nax > 0, val(c->pt, p->k_threads, 1));
}

/* A consumer of a reduction computed per block: its leading p->lead axes fused onto blockIdx.x, the others
 * fused, split into (a vector and) threadIdx.x. */
static void row(rctx *c, const stage_plan *p, kg_sstage *st, mapped *m) {
  kg_builder *b = &c->b;
  kg_iter *blk = kg_builder_fuse_run(b, st, 0, p->lead), *f = kg_builder_fuse_run(b, st, 1, st->nax - p->lead), *in;
  int64_t v = val(c->pt, p->k_vector, 1);
  m->tx = val(c->pt, p->k_threads, 1);
  m->ty = 1;
  m->attach = blk;
  if (v > 1) {
    f = kg_builder_split(b, st, f, v, &in);
    kg_builder_annotate(b, KG_STEP_VECTORIZE, st, in, KG_THREAD_NONE);
  }
  kg_builder_split(b, st, f, m->tx, &in);
  kg_builder_annotate(b, KG_STEP_BIND, st, in, KG_THREAD_THREAD_X);
  kg_builder_annotate(b, KG_STEP_BIND, st, blk, KG_THREAD_BLOCK_X);
}

/* Reduction st computed in shared memory at cons's block loop by cons's threads, its global copy inlined away. */
static void cross_at(rctx *c, kg_sstage *st, const kg_sstage *cons, const mapped *m) {
  kg_builder *b = &c->b;
  kg_sstage *sh = kg_builder_cache(b, KG_STEP_CACHE_WRITE, st->name, "shared", NULL);
  if (!sh) return;
  kg_builder_step(b, KG_STEP_COMPUTE_INLINE, st->name, NULL, 0, 0, 0, 0);
  kg_builder_compute_at(b, sh, cons, m->attach);
  if (!b->failed) cross_reduce(c, sh, sh->nax, m->tx);
}

static int realize(const kg_sketch *sk, const kg_point *pt, kg_schedule *s, char *err, size_t errlen) {
  const sketch_plan *pl = sk->data;
  rctx c;
  memset(&c, 0, sizeof c);
  kg_builder_init(&c.b, s);
  c.pt = pt;
  c.plan = pl;
  budget_of(&sk->space->limits, &c.budget);
  mapped maps[pl->n];
  memset(maps, 0, sizeof maps);
  kg_builder *b = &c.b;
  /* rows staged in shared memory: copies made before any inlining, since cache_read redirects the stages that
   * read a tensor directly (softmax's maximum and exponentials; the inlined exponentials then carry the copy into
   * the sum and the output) */
  for (int i = 0; i < pl->n; i++) {
    const stage_plan *p = &pl->st[i];
    for (int j = 0; j < p->nrow_staged && val(pt, p->k_stage_rows, 0) && !b->failed; j++) {
      const char *names[KG_STEP_MAX_NAMES] = {"shared"};
      int nn = 1;
      for (int x = 0; x < s->nstages && nn < KG_STEP_MAX_NAMES; x++) {
        kg_tensor *t[16];
        int reuse[16], n = 0, hit = 0;
        kg_gpu_collect_reads(s->stages[x], s->stages[x]->body, t, reuse, &n, 16);
        for (int k = 0; k < n; k++) hit |= strcmp(t[k]->name, p->row_staged[j]) == 0;
        if (hit) names[nn++] = s->stages[x]->name;
      }
      kg_builder_step(b, KG_STEP_CACHE_READ, p->row_staged[j], names, nn, 0, 0, 0);
    }
  }
  for (int i = 0; i < pl->n; i++)
    if (pl->st[i].act == ACT_INLINE) kg_builder_step(b, KG_STEP_COMPUTE_INLINE, pl->st[i].name, NULL, 0, 0, 0, 0);
  /* from the outputs back, so that a consumer is mapped before the stages computed inside it */
  for (int i = pl->n - 1; i >= 0 && !b->failed; i--) {
    const stage_plan *p = &pl->st[i];
    kg_sstage *st = kg_schedule_find_stage(s, p->name);
    const kg_sstage *cons = p->at >= 0 ? kg_schedule_find_stage(s, pl->st[p->at].name) : NULL;
    switch (p->act) {
      case ACT_INLINE: break;
      case ACT_SIMPLE: simple(&c, p, st); break;
      case ACT_TILE:
        if (p->local) {
          kg_sstage *loc = kg_builder_cache(b, KG_STEP_CACHE_WRITE, p->name, "local", NULL);
          if (!loc) break;
          tile_root(&c, p, st, &maps[i]);
          if (!b->failed) per_thread(&c, p, loc, st, &maps[i]);
          if (!b->failed && val(pt, p->k_min_blocks, 0) > 0)
            kg_builder_step(b, KG_STEP_LAUNCH_BOUNDS, st->name, NULL, 0, val(pt, p->k_min_blocks, 0), 0, 1);
        } else {
          tile_root(&c, p, st, &maps[i]);
        }
        break;
      case ACT_PER_THREAD: per_thread(&c, p, st, cons, &maps[p->at]); break;
      case ACT_CROSS: cross_own(&c, p, st); break;
      case ACT_ROW: row(&c, p, st, &maps[i]); break;
      case ACT_CROSS_AT: cross_at(&c, st, cons, &maps[p->at]); break;
    }
  }
  /* the staged rows: computed at their row's block once every stage reading them is computed there */
  for (int i = 0; i < pl->n && !b->failed; i++) {
    const stage_plan *p = &pl->st[i];
    for (int j = 0; j < p->nrow_staged && val(pt, p->k_stage_rows, 0) && !b->failed; j++) {
      char name[160];
      snprintf(name, sizeof name, "%s.shared", p->row_staged[j]);
      kg_sstage *sh = kg_schedule_find_stage(s, name);
      if (!sh) {
        kg_builder_fail(b, "row-onepass: no stage %s", name);
        break;
      }
      kg_builder_compute_at(b, sh, kg_schedule_find_stage(s, p->name), maps[i].attach);
      kg_gpu_cooperative_fetch(b, sh, maps[i].tx, 1, val(pt, p->k_vector, 1));
    }
  }
  if (b->failed) {
    snprintf(err, errlen, "%s", b->err[0] ? b->err : "a step of the sketch does not apply");
    return -1;
  }
  return kg_gpu_launchable(s, &c.budget, err, errlen);
}

/* ---- derivation ---- */

typedef struct policy {
  const char *name;
  int tile_reuse; /* reductions with reuse: register-tiled (else cross-thread) */
  int fuse;       /* reductions computed inside their elementwise consumer */
  int shared;     /* register-tiled reductions stage their reused inputs in shared memory */
  int tile_ew;    /* elementwise root stages of 2+ axes: tiled per axis (else fused) */
  int no_inline;  /* elementwise stages keep their own kernels (so that a reduction can stage them in shared
                   * memory, which it cannot do with what it reads through an inlined stage) */
  int fallback;   /* no inlining, every stage mapped simply */
  int row_all;    /* a reduction whose consumers are all one row stage and reductions computed at its block is
                   * computed there too (softmax's maximum), and the row's inputs can be staged in shared memory:
                   * one kernel that reads X once */
} policy;

/* The fallback first: the others are dropped when they make the same plan as one before them. */
static const policy policies[] = {
    {"gpu/simple", 0, 0, 0, 0, 1, 1, 0},
    {"gpu/tile-fuse", 1, 1, 1, 0, 0, 0, 0},          {"gpu/tile", 1, 0, 1, 0, 0, 0, 0},
    {"gpu/tile-fuse-noshared", 1, 1, 0, 0, 0, 0, 0}, {"gpu/tile-fuse-2d", 1, 1, 1, 1, 0, 0, 0},
    {"gpu/tile-noinline", 1, 1, 1, 0, 1, 0, 0},      {"gpu/cross-fuse", 0, 1, 0, 0, 0, 0, 0},
    {"gpu/row-onepass", 0, 1, 0, 0, 0, 0, 1},        {"gpu/cross", 0, 0, 0, 0, 0, 0, 0},
};
/* An unfused space's: the structures above with fuse 0 and no_inline 1 (a stage per kernel). gpu/cross comes
 * before gpu/tile, whose plan is the same where no reduction has reuse (softmax, norms): the name says what it is. */
static const policy unfused_policies[] = {
    {"gpu/simple", 0, 0, 0, 0, 1, 1, 0},  {"gpu/cross", 0, 0, 0, 0, 1, 0, 0},  {"gpu/tile", 1, 0, 1, 0, 1, 0, 0},
    {"gpu/tile-noshared", 1, 0, 0, 0, 1, 0, 0}, {"gpu/tile-2d", 1, 0, 1, 1, 1, 0, 0},
};

static int is_reduction(const kg_sstage *st) { return st->red != KG_RED_NONE && st->nrax > 0; }

/* The row stage that every consumer of reduction st belongs to: the ROW stage itself (with st's axes as its
 * lead) or a reduction already computed at its block; -1 when there is none. */
static int row_group(const kg_schedule *sc, const kg_sstage *st, const stage_plan *pl) {
  const kg_sstage *cs[8];
  int nc = kg_sched_consumers(sc, st, NULL, cs, 8), row = -1;
  if (nc < 1 || nc > 8) return -1;
  for (int k = 0; k < nc; k++) {
    int id = cs[k]->id;
    int r = pl[id].act == ACT_ROW ? id : pl[id].act == ACT_CROSS_AT ? pl[id].at : -1;
    if (r < 0 || (row >= 0 && r != row)) return -1;
    row = r;
  }
  return row >= 0 && pl[row].lead == st->nax ? row : -1;
}

/* The structure of each stage of sc (the default schedule, with the stages marked in inl inlined) under
 * policy po. */
static void make_plan(const kg_schedule *sc, const int *inl, const policy *po, stage_plan *pl) {
  int n = sc->nstages, assigned[n];
  for (int i = 0; i < n; i++) {
    memset(&pl[i], 0, sizeof pl[i]);
    pl[i].name = sc->stages[i]->name;
    pl[i].at = -1;
    pl[i].act = inl[i] ? ACT_INLINE : ACT_SIMPLE;
    assigned[i] = pl[i].act == ACT_INLINE || po->fallback;
  }
  for (int i = n - 1; i >= 0; i--) {
    const kg_sstage *st = sc->stages[i], *cs[2] = {NULL, NULL}, *cons;
    if (assigned[i] || !is_reduction(st)) continue;
    int ci = po->fuse && kg_sched_consumers(sc, st, NULL, cs, 2) == 1 && !is_reduction(cs[0]) ? cs[0]->id : -1;
    cons = cs[0];
    if (po->tile_reuse && kg_gpu_has_reuse(st)) {
      if (ci >= 0 && cons->nax == st->nax && (!assigned[ci] || (pl[ci].act == ACT_TILE && !pl[ci].local))) {
        pl[ci].act = ACT_TILE, assigned[ci] = 1;
        pl[i].act = ACT_PER_THREAD, pl[i].at = ci;
      } else {
        pl[i].act = ACT_TILE, pl[i].local = 1;
      }
      pl[i].shared = po->shared;
    } else if (ci >= 0 && st->nax >= 1 && cons->nax > st->nax &&
               (!assigned[ci] || (pl[ci].act == ACT_ROW && pl[ci].lead == st->nax))) {
      pl[ci].act = ACT_ROW, pl[ci].lead = st->nax, assigned[ci] = 1;
      pl[i].act = ACT_CROSS_AT, pl[i].at = ci;
    } else if (po->row_all && st->nax >= 1 && !kg_gpu_has_reuse(st) && (ci = row_group(sc, st, pl)) >= 0) {
      pl[i].act = ACT_CROSS_AT, pl[i].at = ci;
    } else {
      pl[i].act = ACT_CROSS;
    }
    assigned[i] = 1;
  }
  for (int i = 0; i < n; i++)
    if (!assigned[i] && po->tile_ew && !is_reduction(sc->stages[i]) && sc->stages[i]->nax >= 2)
      pl[i].act = ACT_TILE;
}

/* Adds the knobs of plan p for stage st to sk. */
static void plan_knobs(kg_sketch *sk, int *full, stage_plan *p, const kg_schedule *sc, const kg_sstage *st,
                       int64_t max_threads) {
  static const int64_t onoff[] = {0, 1}, vthreads[] = {1, 2, 4};
  p->k_vthread = p->k_vec_out = p->k_unroll = p->k_loc = p->k_threads = p->k_vector = p->k_stage_rows = -1;
  p->k_min_blocks = p->k_raster = -1;
  for (int d = 0; d < KG_MAX_DIMS; d++) p->k_thread[d] = p->k_inner[d] = p->k_rtile[d] = -1;
  p->nax = st->nax;
  char what[96];
  switch (p->act) {
    case ACT_SIMPLE:
      if (st->nax > 0) p->k_threads = threads_knob(sk, full, p->name, total_extent(st, 0, st->nax), max_threads);
      if (st->nax > 0 && !is_reduction(st)) p->k_vector = vector_knob(sk, full, p->name, "vector");
      break;
    case ACT_TILE:
      for (int d = 0; d < st->nax; d++) {
        const kg_iter *it = st->roots[d];
        if (it->extent < 2) continue;
        snprintf(what, sizeof what, "%s.thread", it->name);
        /* on a long row threadIdx.x at least 8 wide (a quarter warp along it: whole 32-byte sectors), and
         * threadIdx.y at most 16: most of the products are whole warps of 32 to 1024 threads */
        int64_t xlo = it->extent >= 64 ? 8 : 1;
        p->k_thread[d] = d == st->nax - 1 ? gpu_tile_knob(sk, full, p->name, what, it->extent, xlo, 256)
                                          : gpu_tile_knob(sk, full, p->name, what, it->extent, 1, 16);
        snprintf(what, sizeof what, "%s.inner", it->name);
        p->k_inner[d] = gpu_tile_knob(sk, full, p->name, what, it->extent, 1, 8);
        if (d == st->nax - 1)
          p->k_vthread = knob(sk, full, KG_KNOB_TILE, p->name, "vthread", vthreads, it->extent >= 4 ? 3 : 2);
      }
      p->k_vec_out = knob(sk, full, KG_KNOB_CHOICE, p->name, "vectorize", onoff, 2);
      if (p->local) {
        /* a register tile can take so many registers that one block fills a multiprocessor: launch_bounds 2
         * trades registers (spilling a few) for a second resident block */
        static const int64_t min_blocks[] = {0, 2};
        p->k_min_blocks = knob(sk, full, KG_KNOB_CHOICE, p->name, "min_blocks", min_blocks, 2);
        /* a large product's blocks in groups of 8 block rows (see tile_root) */
        static const int64_t raster[] = {1, 8};
        if (st->nax >= 2 && total_extent(st, 0, st->nax - 1) >= 1024)
          p->k_raster = knob(sk, full, KG_KNOB_CHOICE, p->name, "raster", raster, 2);
        per_thread_knobs(sk, full, p, sc, st);
      }
      break;
    case ACT_PER_THREAD: per_thread_knobs(sk, full, p, sc, st); break;
    case ACT_CROSS:
      p->k_threads = threads_knob(sk, full, p->name, total_extent(st, st->nax, st->nrax), max_threads);
      break;
    case ACT_ROW:
      p->k_threads = threads_knob(sk, full, p->name, total_extent(st, p->lead, st->nax - p->lead), max_threads);
      p->k_vector = vector_knob(sk, full, p->name, "vector");
      break;
    case ACT_INLINE:
    case ACT_CROSS_AT: break;
  }
}

/* Does stage st read tensor t, directly or through stages inlined into it? */
static int reads_through(const kg_schedule *sc, const kg_sstage *st, const kg_tensor *t, int depth) {
  kg_tensor *r[16];
  int reuse[16], n = 0;
  kg_gpu_collect_reads(st, st->body, r, reuse, &n, 16);
  for (int k = 0; k < n; k++) {
    if (r[k] == t) return 1;
    const kg_sstage *prod = kg_sched_stage_of_tensor(sc, r[k]);
    if (prod && prod->attach == KG_ATTACH_INLINE && depth < 16 && reads_through(sc, prod, t, depth + 1)) return 1;
  }
  return 0;
}

static int in_row_group(const sketch_plan *pl, int row, int id) {
  return id == row || (pl->st[id].act == ACT_CROSS_AT && pl->st[id].at == row);
}

/* gpu/row-onepass: the program inputs that the group of row stage `row` (it and the reductions computed at its
 * block) reads at two or more of its stages, and that nothing outside the group reads, become candidates for a
 * shared-memory copy of the row, made once per block: the row is read from memory once instead of once per pass
 * (softmax: the maximum, the sum and the output). A knob chooses whether to stage them (a long row may not fit;
 * launchability decides). Requires sc with the plan's inlining applied; room: the shared memory of a block, in
 * floats. */
static void row_staging(sketch_plan *pl, int row, const kg_schedule *sc, int64_t room) {
  stage_plan *p = &pl->st[row];
  const kg_sstage *rst = sc->stages[row];
  int64_t row_floats = total_extent(rst, p->lead, rst->nax - p->lead);
  kg_tensor *t[16];
  int reuse[16], n = 0;
  for (int i = 0; i < pl->n; i++)
    if (in_row_group(pl, row, i)) kg_gpu_collect_reads(sc->stages[i], sc->stages[i]->body, t, reuse, &n, 16);
  /* tensors reached through inlined stages too */
  for (int i = 0; i < sc->nstages; i++) {
    const kg_sstage *x = sc->stages[i];
    if (x->attach == KG_ATTACH_INLINE) kg_gpu_collect_reads(x, x->body, t, reuse, &n, 16);
  }
  p->nrow_staged = 0;
  for (int k = 0; k < n && p->nrow_staged < MAX_STAGED; k++) {
    if (kg_sched_stage_of_tensor(sc, t[k])) continue; /* program inputs only */
    int readers = 0, outside = 0;
    for (int i = 0; i < pl->n; i++) {
      if (sc->stages[i]->attach == KG_ATTACH_INLINE || !reads_through(sc, sc->stages[i], t[k], 0)) continue;
      if (in_row_group(pl, row, i))
        readers++;
      else
        outside = 1;
    }
    /* a row of it per block; the reductions' scratch and the other copies need room too */
    if (readers < 2 || outside || (int64_t)(p->nrow_staged + 1) * row_floats > room - 256) continue;
    p->row_staged[p->nrow_staged++] = t[k]->name;
  }
}

static int same_plan(const sketch_plan *a, const sketch_plan *b) {
  for (int i = 0; i < a->n; i++) {
    const stage_plan *x = &a->st[i], *y = &b->st[i];
    if (x->act != y->act || x->local != y->local || x->shared != y->shared || x->at != y->at || x->lead != y->lead ||
        x->nrow_staged != y->nrow_staged)
      return 0;
  }
  return 1;
}

/* Does some point of sketch k realize? Tried on a few random points, the same ones every time. */
static int realizable(const kg_space *sp, int k) {
  uint64_t rng = 0x736b657463686770ull ^ (uint64_t)k;
  char err[512];
  for (int t = 0; t < PROBES; t++) {
    kg_point pt;
    kg_space_sample(sp, k, &rng, &pt);
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    if (s) {
      kg_schedule_free(s);
      return 1;
    }
  }
  return 0;
}

/* The point built into s with its rings of shared tiles cut by `cut` (at least 1: none), then its launch checked. */
static int build_mma_point(const kg_sketch *sk, const kg_point *pt, kg_schedule *s, int64_t cut, int64_t *ring_max,
                           char *err, size_t errlen) {
  kg_builder b;
  kg_builder_init(&b, s);
  int n = s->nstages;
  for (int i = 0; i < n && !b.failed; i++) {
    kg_sstage *st = s->stages[i];
    kg_gpu_mma_axes ax;
    if (st->attach != KG_ATTACH_ROOT || !kg_gpu_mma_shape(s->prog, st, &ax)) continue;
    kg_gpu_mma_opts o = {.wy = kg_point_knob(sk, pt, st->name, "mma_warps", 1),
                         .mt = kg_point_knob(sk, pt, st->name, "mma_rows", 1),
                         .nt = kg_point_knob(sk, pt, st->name, "mma_tiles", 1),
                         .unroll = (int)kg_point_knob(sk, pt, st->name, "mma_unroll", 0),
                         .staged = (int)kg_point_knob(sk, pt, st->name, "mma_staged", 0),
                         .ks = kg_point_knob(sk, pt, st->name, "mma_ksteps", 1),
                         .pad = kg_point_knob(sk, pt, st->name, "mma_pad", 0),
                         .pipe = kg_point_knob(sk, pt, st->name, "mma_pipeline", 1) - cut};
    if (o.staged && o.pipe > *ring_max) *ring_max = o.pipe;
    kg_gpu_mma_build(&b, st, &ax, &o);
  }
  if (b.failed) {
    snprintf(err, errlen, "%s", b.err[0] ? b.err : "a step of the sketch does not apply");
    return -1;
  }
  kg_schedule_gpu_default(s, 256);
  kg_gpu_budget budget;
  budget_of(&sk->space->limits, &budget);
  return kg_gpu_launchable(s, &budget, err, errlen);
}

/* gpu/mma: every stage shaped for the tensor cores (kg_gpu_mma_shape) gets their structure, its knobs the warps
 * per block (1, 2, 4, 8), the instruction tiles per warp along the columns (1 to 16; both only where the block's tile
 * divides the rows and the columns: a warp of 16 tiles has 128 columns), whether their loop is unrolled
 * and whether the
 * operands are staged in shared memory, and staged, the instruction steps of a shared k step (1, 2, 4), the
 * shared rows' padding (0, 2, 4, 8 elements) and the ring of shared tiles (1, 2, 3: pipelined by cp.async); the tiles
 * a warp has along the rows (1, 2, 4); the other stages the naive mapping (kg_schedule_gpu_default). A ring too
 * large for the arch's shared memory is made shorter until the kernel launches (as the builder halves tile counts
 * that do not divide): the point is built afresh, then its trace applied to s. */
static int realize_mma(const kg_sketch *sk, const kg_point *pt, kg_schedule *s, char *err, size_t errlen) {
  for (int64_t cut = 0;; cut++) {
    kg_schedule *t = kg_schedule_new(s->prog);
    int64_t ring = 1;
    int rc = build_mma_point(sk, pt, t, cut, &ring, err, errlen);
    if (rc == 0) rc = kg_schedule_apply_trace(s, &t->trace, err, errlen);
    kg_schedule_free(t);
    if (rc == 0 || ring <= 1) return rc;
  }
}

static void sketch_mma(kg_space *sp, const kg_schedule *sc) {
  int any = 0;
  for (int i = 0; i < sc->nstages && !any; i++) {
    kg_gpu_mma_axes ax;
    any = kg_gpu_mma_shape(sc->prog, sc->stages[i], &ax);
  }
  if (!any) return;
  kg_sketch *sk = kg_space_add_sketch(sp, "gpu/mma", realize_mma, NULL);
  if (!sk) return;
  static const int64_t counts[] = {1, 2, 4, 8, 16}, onoff[] = {0, 1}, pads[] = {0, 2, 4, 8};
  int full = 0;
  for (int i = 0; i < sc->nstages; i++) {
    kg_gpu_mma_axes ax;
    const kg_sstage *st = sc->stages[i];
    if (!kg_gpu_mma_shape(sc->prog, st, &ax)) continue;
    const char *name = kg_arena_strdup(&sp->arena, st->name);
    /* only the warps and tiles whose block tile divides the rows and the columns (the instruction computes whole
     * tiles: any other point would fail to lower) */
    int64_t wv[4], tv[5];
    int nwv = 0, ntv = 0;
    for (int c = 0; c < 5; c++) {
      if (c < 4 && ax.m % (16 * counts[c]) == 0) wv[nwv++] = counts[c];
      if (ax.n % (8 * counts[c]) == 0) tv[ntv++] = counts[c];
    }
    knob(sk, &full, KG_KNOB_CHOICE, name, "mma_warps", wv, nwv);
    knob(sk, &full, KG_KNOB_CHOICE, name, "mma_tiles", tv, ntv);
    knob(sk, &full, KG_KNOB_CHOICE, name, "mma_unroll", onoff, 2);
    knob(sk, &full, KG_KNOB_CHOICE, name, "mma_staged", onoff, 2);
    /* staged only (unstaged points ignore them): instruction steps a shared k step, the shared rows' padding */
    knob(sk, &full, KG_KNOB_CHOICE, name, "mma_ksteps", counts, 3);
    knob(sk, &full, KG_KNOB_CHOICE, name, "mma_pad", pads, 4);
    /* the warp's tiles along the rows too (a register tile of instructions: each A fragment then serves nt
     * instructions and each B fragment mt); halved by the builder until the block's rows divide the rows */
    knob(sk, &full, KG_KNOB_CHOICE, name, "mma_rows", counts, 3);
    /* staged only: the shared tiles in a ring of 1 (none), 2 or 3 filled by cp.async (a ring too large for the
     * arch's shared memory is shortened by realize_mma) */
    static const int64_t rings[] = {1, 2, 3};
    knob(sk, &full, KG_KNOB_CHOICE, name, "mma_pipeline", rings, 3);
  }
  if (full || !realizable(sp, sp->nsketches - 1)) sp->nsketches--;
}

int kg_sketches_gpu(kg_space *sp) {
  /* the default schedule as it is, and with every inlinable stage inlined */
  kg_schedule *sc[2] = {kg_schedule_new(sp->prog), kg_schedule_new(sp->prog)};
  int n = sc[0]->nstages, inl[2][n], added = 0;
  for (int i = 0; i < n; i++) {
    const kg_sstage *st = sc[1]->stages[i];
    inl[0][i] = inl[1][i] = 0;
    if (st->is_output || is_reduction(st)) continue;
    kg_step in = {.kind = KG_STEP_COMPUTE_INLINE, .stage = st->name};
    char err[256];
    inl[1][i] = kg_schedule_apply(sc[1], &in, err, sizeof err) == 0;
  }
  int64_t max_threads = sp->limits.max_threads_per_block > 0 ? sp->limits.max_threads_per_block : 1024;
  int first = sp->nsketches;
  const policy *list = sp->unfused ? unfused_policies : policies;
  size_t npolicies = sp->unfused ? sizeof unfused_policies / sizeof unfused_policies[0]
                                 : sizeof policies / sizeof policies[0];
  for (size_t q = 0; q < npolicies; q++) {
    const policy *po = &list[q];
    const kg_schedule *base = sc[!po->no_inline];
    sketch_plan *pl = kg_arena_alloc(&sp->arena, sizeof *pl);
    pl->n = n;
    pl->st = kg_arena_alloc(&sp->arena, sizeof(stage_plan) * (size_t)(n > 0 ? n : 1));
    make_plan(base, inl[!po->no_inline], po, pl->st);
    if (po->row_all) /* which inputs the rows stage decides whether the plan is new */
      for (int i = 0; i < n; i++)
        if (pl->st[i].act == ACT_ROW) row_staging(pl, i, base, sp->limits.max_shared_static / 4);
    int dup = 0;
    for (int k = first; k < sp->nsketches && !dup; k++) dup = same_plan(sp->sketches[k].data, pl);
    if (dup) continue;
    kg_sketch *sk = kg_space_add_sketch(sp, po->name, realize, pl);
    if (!sk) break;
    int full = 0;
    for (int i = 0; i < n; i++) {
      pl->st[i].name = kg_arena_strdup(&sp->arena, pl->st[i].name);
      plan_knobs(sk, &full, &pl->st[i], base, base->stages[i], max_threads);
      if (pl->st[i].nrow_staged > 0) {
        static const int64_t onoff[] = {0, 1};
        pl->st[i].k_stage_rows = knob(sk, &full, KG_KNOB_CHOICE, pl->st[i].name, "stage_rows", onoff, 2);
        for (int j = 0; j < pl->st[i].nrow_staged; j++)
          pl->st[i].row_staged[j] = kg_arena_strdup(&sp->arena, pl->st[i].row_staged[j]);
      }
    }
    /* the fallback is kept whatever happens, so that every program has a sketch */
    if (!po->fallback && (full || !realizable(sp, sp->nsketches - 1))) {
      sp->nsketches--;
      continue;
    }
    added++;
  }
  if (!sp->unfused) {
    int before = sp->nsketches;
    sketch_mma(sp, sc[0]);
    added += sp->nsketches - before;
  }
  kg_schedule_free(sc[0]);
  kg_schedule_free(sc[1]);
  return added;
}
