/* CPU sketch rule cpu/attn: a heavy stage feeding a light reduction (and, often, another heavy stage), all feeding
 * one output: attention (scores = Q K^T, their softmax, the product with V), batch matmul then softmax.
 *
 * Recognized from the structure only: the program has one output A (at least two spatial axes; its row axis is
 * the one before the last, the axes before it are batch axes); some earlier stage H1 is heavy (a reduction with
 * reuse, see sketch_cpu.c) with exactly one spatial axis after the row axis (its key axis); some light reduction
 * (a reduction without reuse) between H1 and A depends on H1 and reduces over a range as long as H1's key axis;
 * A depends on it; and every stage from H1 to A is no output and has the row axis (same position, same extent).
 *
 * The sketch is what a hand-written kernel does: A's batch axes and row tiles (knob attn.ti rows) fused into one
 * parallel loop, and every stage from H1 to A computed at that loop (compute_at with several consumers: a
 * producer read by stages computed at the same loop computes the union of what they read), so that the score
 * block of a row tile stays in cache and is consumed by the softmax and the second product. Elementwise stages of
 * the block are inlined into their readers or kept (a knob each: exp is worth computing once when two stages read
 * it). Knob attn.col chooses the block's layout:
 *   1: key-major: the block is stored with the rows innermost (reorder_storage), every stage of the block vectorized
 *      over the rows of the tile: the light reductions over the keys become vertical vector operations (no
 *      horizontal combine), H1 reads its row operand packed transposed (cache_read + reorder_storage, per tile) and
 *      accumulates a register tile of rj keys x the tile's rows;
 *   0: row-major: H1 reads its key operand packed transposed per tile and accumulates a register tile of ri rows x
 *      vj keys, vectorized over the keys; a light reduction over the keys is rfactored into vector lanes of
 *      partial results (knob rf, 1: a serial chain), both computed at the tile.
 * A later heavy stage (the product with V, or A itself when it is one) gets a register tile of ri rows x cj of its
 * last axis (whole vectors), its reductions outside. Register tiles whose accumulators would not fit in the vector
 * registers fail to realize.
 *
 * Not in an unfused space (the sketch is fusion). Requires: realize receives a fresh default schedule of the space's
 * program. */
#include <stdio.h>
#include <string.h>
#include "realize.h"
#include "space.h"

typedef struct attn_shape {
  int h1, out; /* stage indices in the default schedule */
  int rowpos;  /* the row axis of every stage of the block */
} attn_shape;

static int uses(const kg_expr *e, const kg_ivar *v) { return kg_expr_uses_ivar((kg_expr *)e, v); }

/* Whether a read of e (depth first, not in indices) uses row and not key (want_row) or key and not row. */
static const kg_expr *operand_read(const kg_expr *e, const kg_ivar *row, const kg_ivar *key, int want_row) {
  if (!e) return NULL;
  if (e->kind == KG_EXPR_READ) {
    int ur = 0, uk = 0;
    for (int d = 0; d < e->read.n; d++) {
      ur |= uses(e->read.idx[d], row);
      uk |= uses(e->read.idx[d], key);
    }
    return (want_row ? ur && !uk : uk && !ur) ? e : NULL;
  }
  const kg_expr *r = NULL;
  int n = kg_expr_nchildren(e);
  for (int i = 0; i < n && !r; i++) r = operand_read(*kg_expr_child((kg_expr *)e, i), row, key, want_row);
  return r;
}

static int reads_tensor(const kg_expr *e, const kg_tensor *t) {
  if (!e) return 0;
  if (e->kind == KG_EXPR_READ && e->read.tensor == t) return 1;
  int n = kg_expr_nchildren(e);
  for (int i = 0; i < n; i++)
    if (reads_tensor(*kg_expr_child((kg_expr *)e, i), t)) return 1;
  return 0;
}

/* A reduction with reuse: some read leaves out a spatial axis of extent above 1 (sketch_cpu.c's heavy class). */
static int is_heavy(const kg_sstage *st) {
  if (st->nrax == 0 || st->nax < 2) return 0;
  for (int a = 0; a < st->nax; a++) {
    if (st->roots[a]->extent <= 1) continue;
    /* a read that does not use axis a */
    const kg_expr *stack[256];
    int n = 0;
    stack[n++] = st->body;
    while (n) {
      const kg_expr *e = stack[--n];
      if (!e) continue;
      if (e->kind == KG_EXPR_READ) {
        int u = 0;
        for (int d = 0; d < e->read.n; d++) u |= uses(e->read.idx[d], st->ax[a]);
        if (!u) return 1;
        continue;
      }
      int k = kg_expr_nchildren(e);
      for (int i = 0; i < k && n < 256; i++) stack[n++] = *kg_expr_child((kg_expr *)e, i);
    }
  }
  return 0;
}

/* Does stage x (index xi) depend on stage index h (through the stages between)? */
static int depends(const kg_schedule *s, int xi, int h, int depth) {
  if (xi == h) return 1;
  if (depth > s->nstages) return 0;
  for (int i = h; i < xi; i++)
    if (reads_tensor(s->stages[xi]->body, s->stages[i]->out) && depends(s, i, h, depth + 1)) return 1;
  return 0;
}

static int find_shape(const kg_schedule *s, attn_shape *sh) {
  int out = -1;
  for (int i = 0; i < s->nstages; i++)
    if (s->stages[i]->is_output) {
      if (out >= 0) return 0;
      out = i;
    }
  if (out < 0 || s->stages[out]->nax < 2) return 0;
  const kg_sstage *A = s->stages[out];
  int rowpos = A->nax - 2;
  int64_t rows = A->roots[rowpos]->extent;
  for (int h = 0; h < out; h++) {
    const kg_sstage *H = s->stages[h];
    if (!is_heavy(H) || H->nax != rowpos + 2 || H->roots[rowpos]->extent != rows) continue;
    int64_t keys = H->roots[H->nax - 1]->extent;
    int ok = depends(s, out, h, 0), light = 0;
    for (int i = h + 1; i <= out && ok; i++) {
      const kg_sstage *x = s->stages[i];
      if (x->nax <= rowpos || x->roots[rowpos]->extent != rows || (i < out && x->is_output)) ok = 0;
      else if (x->nrax > 0 && !is_heavy(x) && x->roots[x->nax + x->nrax - 1]->extent == keys && depends(s, i, h, 0) &&
               depends(s, out, i, 0))
        light = 1;
    }
    if (ok && light) {
      sh->h1 = h;
      sh->out = out;
      sh->rowpos = rowpos;
      return 1;
    }
  }
  return 0;
}

/* x's root loop of axis v (reorder_storage reorders a stage's axes, so positions do not last). */
static kg_iter *root_of(const kg_sstage *x, const kg_ivar *v) {
  for (int r = 0; r < x->nax + x->nrax; r++)
    if (kg_sstage_axis(x, r) == v) return x->roots[r];
  return NULL;
}

/* An operand of h (the read found by want_row, see operand_read) copied per tile (cache_read local, computed at
 * A's loop p), stored with the dimension indexed by `inner` innermost, its copy loops in that order with the
 * innermost vectorized. Nothing when there is no such operand. An f16/bf16 copy stays narrow: widened, the tuned
 * attention's query block ran no faster (docs/schedules.md). */
static void pack_operand(kg_rz *z, kg_sstage *h, const kg_ivar *row, const kg_ivar *key, int want_row, kg_sstage *A,
                         kg_iter *p) {
  const kg_expr *r = operand_read(h->body, row, key, want_row);
  if (!r) return;
  const kg_ivar *inner = want_row ? row : key;
  int dim = -1;
  for (int d = 0; d < r->read.n && dim < 0; d++)
    if (uses(r->read.idx[d], inner)) dim = d;
  if (dim < 0) return;
  kg_builder_pack(&z->b, r->read.tensor->name, h, &(kg_pack){.inner = dim, .at = A, .loop = p});
}

/* A register tile over loops r (rows) and c (a spatial axis, vectorized) of stage x: r split by ri, c by cj, the
 * other loops first in their order, then r.o c.o, the reductions, r.i (unrolled) and c.i. */
static void register_tile(kg_rz *z, kg_sstage *x, kg_iter *r, kg_iter *c, int64_t ri, int64_t cj) {
  if (z->b.failed || !r || !c) return;
  if (ri > r->extent) ri = r->extent;
  if (cj > c->extent) cj = c->extent;
  if (kg_rz_tile_spills(z, ri, cj)) {
    kg_builder_fail(&z->b, "stage %s: a %lldx%lld register tile spills", x->name, (long long)ri, (long long)cj);
    return;
  }
  kg_iter *ri_, *ci_;
  kg_iter *ro = kg_builder_split(&z->b, x, r, ri, &ri_);
  kg_iter *co = kg_builder_split(&z->b, x, c, cj, &ci_);
  if (z->b.failed) return;
  kg_iter *ord[KG_STEP_MAX_NAMES];
  int n = 0;
  for (int l = 0; l < x->nleaves && n < KG_STEP_MAX_NAMES; l++) {
    kg_iter *it = x->leaves[l];
    if (!it->is_reduce && it != ro && it != ri_ && it != co && it != ci_) ord[n++] = it;
  }
  if (n + 4 > KG_STEP_MAX_NAMES) {
    kg_builder_fail(&z->b, "stage %s: too many loops", x->name);
    return;
  }
  ord[n++] = ro;
  ord[n++] = co;
  for (int l = 0; l < x->nleaves && n < KG_STEP_MAX_NAMES; l++)
    if (x->leaves[l]->is_reduce) ord[n++] = x->leaves[l];
  if (n + 2 > KG_STEP_MAX_NAMES) {
    kg_builder_fail(&z->b, "stage %s: too many loops", x->name);
    return;
  }
  ord[n++] = ri_;
  ord[n++] = ci_;
  kg_builder_reorder(&z->b, x, ord, n);
  if (ri > 1) kg_builder_annotate(&z->b, KG_STEP_UNROLL, x, ri_, KG_THREAD_NONE);
  kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, x, ci_, KG_THREAD_NONE);
}

/* x's loops with `first` (spatial, a leaf) moved innermost, and vectorized. */
static void vectorize_innermost(kg_rz *z, kg_sstage *x, kg_iter *first) {
  if (z->b.failed || !first) return;
  kg_iter *ord[KG_STEP_MAX_NAMES];
  int n = 0;
  for (int l = 0; l < x->nleaves && n < KG_STEP_MAX_NAMES - 1; l++)
    if (x->leaves[l] != first) ord[n++] = x->leaves[l];
  ord[n++] = first;
  if (n == x->nleaves) kg_builder_reorder(&z->b, x, ord, n);
  kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, x, first, KG_THREAD_NONE);
}

static int realize(const kg_sketch *sk, const kg_point *pt, kg_schedule *s, char *err, size_t errlen) {
  const attn_shape *sh = sk->data;
  kg_rz z = {.sk = sk, .pt = pt};
  kg_builder_init(&z.b, s);
  if (sh->out >= s->nstages) return snprintf(err, errlen, "%s: not the program's schedule", sk->name), -1;
  /* the block's stages, taken before cache_read adds stages */
  int nblk = sh->out - sh->h1;
  kg_sstage *blk[64];
  if (nblk > 64) return snprintf(err, errlen, "%s: too many stages", sk->name), -1;
  for (int i = 0; i < nblk; i++) blk[i] = s->stages[sh->h1 + i];
  kg_sstage *A = s->stages[sh->out], *H1 = blk[0];
  int rp = sh->rowpos, col = (int)kg_rz_knob(&z, "attn", "col", 1);
  int64_t ti = kg_rz_knob(&z, "attn", "ti", 32);
  /* A: batch axes and row tiles fused into the parallel loop p */
  kg_iter *rin;
  kg_builder_split(&z.b, A, A->roots[rp], ti, &rin);
  kg_iter *p = kg_builder_fuse_run(&z.b, A, 0, rp + 1);
  kg_builder_annotate(&z.b, KG_STEP_PARALLEL, A, p, KG_THREAD_NONE);
  if (z.b.failed) goto done;
  if (is_heavy(A)) {
    register_tile(&z, A, rin, A->roots[A->nax - 1], kg_rz_knob(&z, A->name, "ri", 4), kg_rz_knob(&z, A->name, "cj", kg_rz_lanes(&z)));
  } else if (A->nrax == 0) {
    kg_builder_annotate(&z.b, KG_STEP_VECTORIZE, A, A->leaves[A->nleaves - 1], KG_THREAD_NONE);
  }
  /* the block, consumers first: each inlined (elementwise, by its knob) or computed at p */
  for (int i = nblk - 1; i >= 0 && !z.b.failed; i--) {
    kg_sstage *x = blk[i];
    if (x->attach != KG_ATTACH_ROOT) continue;
    if (x->nrax == 0 && kg_rz_knob(&z, x->name, "inline", 0) &&
        !kg_builder_try(&z.b, KG_STEP_COMPUTE_INLINE, x->name, NULL, 0, 0, 0, 0))
      continue;
    kg_ivar *rowv = x->ax[rp], *keyv = x->nax > rp + 1 ? x->ax[rp + 1] : NULL;
    /* key-major: the block's 2-D stages stored with the rows innermost (before compute_at and any split) */
    if (col && (x == H1 || (x->nax == rp + 2 && x->nrax == 0 && !is_heavy(x))))
      kg_builder_storage_inner(&z.b, x, rp, 0, -1);
    /* row-major: a light reduction over each row's keys (the softmax's maximum and sum) is a serial float chain
     * that does not vectorize; its rf knob makes it vector lanes of partial results, combined per row */
    kg_sstage *xrf = !col && x->nrax > 0 && !is_heavy(x) ? kg_rz_rfactor_lanes(&z, x) : NULL;
    kg_builder_compute_at(&z.b, x, A, p);
    if (xrf) kg_builder_compute_at(&z.b, xrf, A, p);
    if (z.b.failed) break;
    kg_iter *row = root_of(x, rowv);
    if (x == H1) {
      kg_iter *key = root_of(x, keyv);
      if (col) {
        int64_t rj = kg_rz_knob(&z, x->name, "rj", 4);
        if (kg_rz_tile_spills(&z, rj, ti)) {
          kg_builder_fail(&z.b, "stage %s: a %lldx%lld register tile spills", x->name, (long long)rj, (long long)ti);
          break;
        }
        kg_iter *ki, *ko = kg_builder_split(&z.b, x, key, rj, &ki);
        kg_iter *ord[KG_STEP_MAX_NAMES];
        int n = 0;
        for (int l = 0; l < x->nleaves && n < KG_STEP_MAX_NAMES - 3; l++) {
          kg_iter *it = x->leaves[l];
          if (!it->is_reduce && it != row && it != ko && it != ki) ord[n++] = it;
        }
        ord[n++] = ko;
        for (int l = 0; l < x->nleaves && n < KG_STEP_MAX_NAMES - 2; l++)
          if (x->leaves[l]->is_reduce) ord[n++] = x->leaves[l];
        ord[n++] = ki;
        ord[n++] = row;
        if (z.b.failed) break;
        kg_builder_reorder(&z.b, x, ord, n);
        if (rj > 1) kg_builder_annotate(&z.b, KG_STEP_UNROLL, x, ki, KG_THREAD_NONE);
        kg_builder_annotate(&z.b, KG_STEP_VECTORIZE, x, row, KG_THREAD_NONE);
        pack_operand(&z, x, rowv, keyv, 1, A, p);
      } else {
        register_tile(&z, x, row, key, kg_rz_knob(&z, x->name, "ri", 4), kg_rz_knob(&z, x->name, "vj", kg_rz_lanes(&z)));
        pack_operand(&z, x, rowv, keyv, 0, A, p);
      }
    } else if (is_heavy(x)) {
      register_tile(&z, x, row, x->roots[x->nax - 1] != row ? x->roots[x->nax - 1] : NULL, kg_rz_knob(&z, x->name, "ri", 4),
                    kg_rz_knob(&z, x->name, "cj", kg_rz_lanes(&z)));
    } else if (col && x->nax == rp + 1) {
      /* a reduction over the keys of each row: vertical over the rows of the tile */
      vectorize_innermost(&z, x, row);
    } else if (col && x->nax == rp + 2 && x->nrax == 0) {
      vectorize_innermost(&z, x, row);
    } else if (x->nrax == 0) {
      kg_builder_annotate(&z.b, KG_STEP_VECTORIZE, x, x->leaves[x->nleaves - 1], KG_THREAD_NONE);
    }
  }
  /* stages before the block: elementwise ones inlined where legal, the rest at root as they are */
  for (int i = sh->h1 - 1; i >= 0 && !z.b.failed; i--) {
    kg_sstage *x = s->stages[i];
    if (x->nrax == 0 && !x->is_output && x->attach == KG_ATTACH_ROOT)
      kg_builder_try(&z.b, KG_STEP_COMPUTE_INLINE, x->name, NULL, 0, 0, 0, 0);
  }
done:
  if (!z.b.failed) return 0;
  snprintf(err, errlen, "%s: %s", sk->name, z.b.err[0] ? z.b.err : "a step of the sketch does not apply");
  return -1;
}

static const int64_t reg_rows[] = {1, 2, 3, 4, 6, 8};
/* Row tiles. The keys' transposed copy is packed once per tile, so larger tiles amortize it: at B=16, S=T=512,
 * D=E=64 the whole 512 rows ran 1.10x faster than the best 128-row tile, single-threaded, with the register tiles
 * otherwise alike (bench/results/attn-tiles-amd-2026-12-07.md); a tile's score block (its rows times the keys)
 * stays within ATTN_BLOCK_BYTES, which the 512 x 512 one fills. */
static const int64_t tile_rows[] = {16, 32, 48, 64, 96, 128, 256, 512};
#define ATTN_BLOCK_BYTES ((int64_t)1 << 20)

static void add_rows_knob(kg_sketch *sk, const char *stage, int64_t extent) {
  int64_t v[8];
  int n = 0;
  for (size_t k = 0; k < sizeof reg_rows / sizeof reg_rows[0]; k++)
    if (reg_rows[k] == 1 || reg_rows[k] <= extent) v[n++] = reg_rows[k];
  kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, stage, "ri", v, n);
}

int kg_sketches_cpu_attn(kg_space *sp) {
  /* the whole sketch is fusion: an unfused space keeps every stage at root */
  if (sp->unfused) return 0;
  kg_schedule *s = kg_schedule_new(sp->prog);
  attn_shape sh;
  int added = 0;
  if (find_shape(s, &sh)) {
    attn_shape *d = KG_NEW(&sp->arena, attn_shape);
    *d = sh;
    kg_sketch *sk = kg_space_add_sketch(sp, "cpu/attn", realize, d);
    if (sk) {
      added = 1;
      const kg_sstage *A = s->stages[sh.out], *H1 = s->stages[sh.h1];
      int64_t rows = A->roots[sh.rowpos]->extent, v[KG_KNOB_MAX_VALUES];
      int n = 0;
      /* row tiles that divide the rows (a ragged last tile leaves the vectorized row loops of every stage of the
       * block a run-time extent, and their register tiles in memory: twice as slow), or the rows whole; others
       * only when none does */
      int64_t keys = H1->roots[H1->nax - 1]->extent;
      /* the score block of a tile within ATTN_BLOCK_BYTES, the smallest tile always */
#define FITS(t) ((t) == tile_rows[0] || (t) * keys * (int64_t)sizeof(float) <= ATTN_BLOCK_BYTES)
      for (size_t k = 0; k < sizeof tile_rows / sizeof tile_rows[0]; k++)
        if (tile_rows[k] < rows && rows % tile_rows[k] == 0 && FITS(tile_rows[k])) v[n++] = tile_rows[k];
      if (rows <= tile_rows[sizeof tile_rows / sizeof tile_rows[0] - 1] && (FITS(rows) || n == 0)) v[n++] = rows;
      if (n == 0)
        for (size_t k = 0; k < sizeof tile_rows / sizeof tile_rows[0]; k++)
          if (FITS(tile_rows[k])) v[n++] = tile_rows[k];
#undef FITS
      kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, "attn", "ti", v, n);
      kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, "attn", "col", (const int64_t[]){0, 1}, 2);
      n = 0;
      for (int64_t r = 1; r <= 8 && r <= keys; r *= 2) v[n++] = r;
      kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, H1->name, "rj", v, n);
      add_rows_knob(sk, H1->name, rows);
      n = kg_space_vector_cols(keys, sp->cpu.lanes, v);
      kg_sketch_add_stage_knob(sk, KG_KNOB_VECTOR, H1->name, "vj", v, n);
      for (int i = sh.h1 + 1; i <= sh.out; i++) {
        const kg_sstage *x = s->stages[i];
        if (x->nrax == 0 && i < sh.out)
          kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, x->name, "inline", (const int64_t[]){0, 1}, 2);
        if (x->nrax > 0 && !is_heavy(x)) {
          n = kg_rz_rfactor_values(x, v);
          if (n > 1) kg_sketch_add_stage_knob(sk, KG_KNOB_VECTOR, x->name, "rf", v, n);
        }
        if (is_heavy(x) && x->roots[x->nax - 1] != x->roots[sh.rowpos]) {
          add_rows_knob(sk, x->name, rows);
          n = kg_space_vector_cols(x->roots[x->nax - 1]->extent, sp->cpu.lanes, v);
          kg_sketch_add_stage_knob(sk, KG_KNOB_VECTOR, x->name, "cj", v, n);
        }
      }
    }
  }
  kg_schedule_free(s);
  return added;
}
