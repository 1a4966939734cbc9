/* The CPU sketch rule for elementwise programs: cpu/elem.
 *
 * A program is elementwise here when every stage that is not an output has no reduction (it is inlined into its
 * readers), and every output either has none or reduces over small windows only (every reduction axis at most
 * ELEM_MAX_WINDOW wide: pooling, depthwise convolution), with at least one spatial axis: bias+GELU+residual,
 * transpose, max pooling. Such kernels are bound by memory traffic, and what decides their speed is how they walk
 * memory: the other sketches give them one parallel loop and one vector width, a few dozen schedules.
 *
 * cpu/elem tiles each root stage's last two spatial axes (the row axis nax-2 and the column axis nax-1, innermost
 * in memory for the stage's output) in 2-D cache tiles, with:
 *   ti      rows per tile (1: the row axis is not tiled, it stays an outer loop; its extent: the whole axis);
 *   tj      columns per tile (its extent: whole rows);
 *   inner   which axis is innermost inside the tile: the column (stores contiguous) or, where some read is
 *           contiguous along the row axis but not the column axis (a transpose), the row (loads contiguous), the
 *           column loop then just outside the vector loop, so that lowering stores the results a tile at a time,
 *           transposed in registers (lower/transpose.c);
 *   vec     the vector width: the innermost tile loop split by vec and its inner part vectorized (1: the whole
 *           innermost tile loop vectorized);
 *   unroll  whether the loop just outside the vector loop is unrolled (the column loop, when the row is inner);
 *   fuse    how many of the outer loops (other axes, row tiles, column tiles) are fused into the parallel loop;
 *   chunk   iterations of that loop per parallel task (its outer part parallel);
 *   stream  (an output without reduction that no stage reads) non-temporal stores (the `stream` primitive),
 *           effective when the column axis is innermost: the output is not read again, so it need not displace
 *           the inputs from cache.
 *   window  (an output with window reductions) whether the window loops run just outside the vector loop (the
 *           accumulation in vector registers) or outside the whole tile (each window offset sweeps the tile: the
 *           tile's accumulators stay in cache while the input rows it reads are reused across offsets).
 * Non-output stages are inlined; in an unfused space, or where inlining is illegal, they are tiled at root the
 * same way, with their own knobs (an unfused space has them).
 *
 * The sketches of the other CPU rules, made before this one, get a stream knob for each streamable output of
 * the program (softmax's and the norms' outputs, a matmul's fused epilogue): their realization is wrapped so that
 * the knob's `stream` step follows it (realize_streamed).
 *
 * Requires: realize receives a fresh default schedule of the space's program. */
#include <stdio.h>
#include <string.h>
#include "realize.h"
#include "sketch_cpu_elem.h"

#define ELEM_MAX_WINDOW 16
#define ELEM_MAX_STAGES 64

/* Does stage st qualify (see the file comment)? */
static int elem_stage(const kg_sstage *st) {
  if (st->nrax == 0) return 1;
  if (!st->is_output || st->nax < 2) return 0;
  for (int r = 0; r < st->nrax; r++)
    if (st->roots[st->nax + r]->extent > ELEM_MAX_WINDOW) return 0;
  return 1;
}

static int expr_reads(const kg_expr *e, const kg_tensor *t) {
  if (!e) return 0;
  if (e->kind == KG_EXPR_READ && e->read.tensor == t) return 1;
  int n = kg_expr_nchildren(e);
  for (int i = 0; i < n; i++)
    if (expr_reads(*kg_expr_child((kg_expr *)e, i), t)) return 1;
  return 0;
}

/* Some read of e whose last index uses row but not col: contiguous along the row axis (a transpose's input). */
static int read_along(const kg_expr *e, const kg_ivar *row, const kg_ivar *col) {
  if (!e) return 0;
  if (e->kind == KG_EXPR_READ) {
    const kg_expr *last = e->read.n ? e->read.idx[e->read.n - 1] : NULL;
    return last && kg_expr_uses_ivar(last, row) && !kg_expr_uses_ivar(last, col);
  }
  int n = kg_expr_nchildren(e);
  for (int i = 0; i < n; i++)
    if (read_along(*kg_expr_child((kg_expr *)e, i), row, col)) return 1;
  return 0;
}

/* Streaming applies: an output without reduction that no stage reads. */
static int streamable(const kg_schedule *s, const kg_sstage *st) {
  if (!st->is_output || st->nrax) return 0;
  for (int i = 0; i < s->nstages; i++)
    if (expr_reads(s->stages[i]->body, st->out)) return 0;
  return 1;
}

/* Stage st (at root, loops untransformed) tiled as the file comment says. */
static void tile_stage(kg_rz *z, kg_sstage *st) {
  kg_builder *b = &z->b;
  if (st->nax < 1) return;
  int c = st->nax - 1, r = st->nax >= 2 ? st->nax - 2 : -1;
  int64_t ti = r >= 0 ? kg_rz_knob(z, st->name, "ti", 1) : 1, tj = kg_rz_knob(z, st->name, "tj", st->roots[c]->extent);
  int row_inner = (int)kg_rz_knob(z, st->name, "inner", 0);
  int64_t vec = kg_rz_knob(z, st->name, "vec", 1);
  kg_iter *outer[KG_STEP_MAX_NAMES], *ord[KG_STEP_MAX_NAMES];
  int nouter = 0, n = 0;
  kg_iter *ro = NULL, *ri = NULL, *co = NULL, *ci = st->roots[c];
  for (int a = 0; a < st->nax; a++)
    if (a != r && a != c && nouter < KG_STEP_MAX_NAMES) outer[nouter++] = st->roots[a];
  if (r >= 0) {
    if (ti <= 1) ro = st->roots[r];
    else if (ti >= st->roots[r]->extent) ri = st->roots[r];
    else ro = kg_builder_split(b, st, st->roots[r], ti, &ri);
  }
  if (tj < st->roots[c]->extent) co = kg_builder_split(b, st, st->roots[c], tj, &ci);
  if (b->failed) return;
  if (ro && nouter < KG_STEP_MAX_NAMES) outer[nouter++] = ro;
  if (co && nouter < KG_STEP_MAX_NAMES) outer[nouter++] = co;
  /* the tile: mid outside, in innermost (split by the vector width) */
  kg_iter *mid = ri, *in = ci;
  if (row_inner && ri) {
    mid = ci;
    in = ri;
  }
  kg_iter *vo = NULL, *vi = in;
  if (vec > 1 && vec < in->extent) vo = kg_builder_split(b, st, in, vec, &vi);
  if (b->failed) return;
  int window_out = (int)kg_rz_knob(z, st->name, "window", 0);
  for (int k = 0; k < nouter; k++) ord[n++] = outer[k];
  for (int k = 0; window_out && k < st->nrax && n < KG_STEP_MAX_NAMES; k++) ord[n++] = st->roots[st->nax + k];
  /* loads contiguous (the row innermost): the column loop, along which the stores are contiguous, goes just
   * outside the vector loop, so that lowering stores the tile transposed (lower/transpose.c) */
  if (row_inner && vo && n < KG_STEP_MAX_NAMES) ord[n++] = vo;
  if (mid && n < KG_STEP_MAX_NAMES) ord[n++] = mid;
  if (!row_inner && vo && n < KG_STEP_MAX_NAMES) ord[n++] = vo;
  for (int k = 0; !window_out && k < st->nrax && n < KG_STEP_MAX_NAMES; k++) ord[n++] = st->roots[st->nax + k];
  if (n < KG_STEP_MAX_NAMES) ord[n++] = vi;
  if (n != st->nleaves) {
    kg_builder_fail(b, "stage %s: unexpected loops", st->name);
    return;
  }
  kg_builder_reorder(b, st, ord, n);
  kg_builder_annotate(b, KG_STEP_VECTORIZE, st, vi, KG_THREAD_NONE);
  kg_iter *un = vo && !row_inner ? vo : mid;
  if (un && kg_rz_knob(z, st->name, "unroll", 0)) kg_builder_annotate(b, KG_STEP_UNROLL, st, un, KG_THREAD_NONE);
  if (nouter > 0) {
    int nf = (int)kg_rz_knob(z, st->name, "fuse", 1);
    if (nf > nouter) nf = nouter;
    kg_iter *p = kg_builder_fuse_run(b, st, 0, nf);
    int64_t chunk = kg_rz_knob(z, st->name, "chunk", 1);
    if (p && chunk > 1 && p->extent > chunk) {
      kg_iter *pin;
      p = kg_builder_split(b, st, p, chunk, &pin);
    }
    if (p) kg_builder_annotate(b, KG_STEP_PARALLEL, st, p, KG_THREAD_NONE);
  }
  if (!b->failed && kg_rz_knob(z, st->name, "stream", 0) && in == ci && streamable(b->s, st))
    kg_builder_step(b, KG_STEP_STREAM, st->name, NULL, 0, 0, 0, 0);
}

static int realize_elem(const kg_sketch *sk, const kg_point *pt, kg_schedule *s, char *err, size_t errlen) {
  kg_rz z = {.sk = sk, .pt = pt};
  kg_builder_init(&z.b, s);
  int unfused = sk->space->unfused, nst = s->nstages < ELEM_MAX_STAGES ? s->nstages : ELEM_MAX_STAGES;
  kg_sstage *st[ELEM_MAX_STAGES];
  for (int i = 0; i < nst; i++) st[i] = s->stages[i];
  /* outputs back to inputs, so that a stage is inlined before its producers are looked at */
  for (int i = nst - 1; i >= 0 && !z.b.failed; i--) {
    if (!st[i]->is_output && !unfused &&
        !kg_builder_try(&z.b, KG_STEP_COMPUTE_INLINE, st[i]->name, NULL, 0, 0, 0, 0))
      continue;
    if (st[i]->attach == KG_ATTACH_ROOT) tile_stage(&z, st[i]);
  }
  if (!z.b.failed) return 0;
  snprintf(err, errlen, "%s: %s", sk->name, z.b.err[0] ? z.b.err : "a step of the sketch does not apply");
  return -1;
}

static void add_stage_knobs(kg_sketch *sk, const kg_schedule *s, const kg_sstage *st) {
  int c = st->nax - 1, r = st->nax >= 2 ? st->nax - 2 : -1;
  int64_t v[KG_KNOB_MAX_VALUES], cext = st->roots[c]->extent;
  int n;
  if (r >= 0) {
    n = kg_space_pow2_values(st->roots[r]->extent, 1, 256, v);
    kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, st->name, "ti", v, n);
  }
  n = kg_space_pow2_values(cext, 8, 4096, v);
  kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, st->name, "tj", v, n);
  if (r >= 0 && st->roots[r]->extent > 1 && read_along(st->body, st->ax[r], st->ax[c]))
    kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, st->name, "inner", (const int64_t[]){0, 1}, 2);
  /* vector widths below the widest tile's innermost loop (the row tile's when it can be innermost) */
  int64_t widest = cext;
  if (r >= 0 && st->roots[r]->extent > widest) widest = st->roots[r]->extent;
  static const int64_t vecs[] = {1, 4, 8, 16, 32, 64};
  n = 0;
  for (size_t k = 0; k < sizeof vecs / sizeof vecs[0]; k++)
    if (vecs[k] == 1 || vecs[k] < widest) v[n++] = vecs[k];
  kg_sketch_add_stage_knob(sk, KG_KNOB_VECTOR, st->name, "vec", v, n);
  kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, st->name, "unroll", (const int64_t[]){0, 1}, 2);
  kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, st->name, "fuse", (const int64_t[]){1, 2, 3}, st->nax >= 2 ? 3 : 1);
  kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, st->name, "chunk", (const int64_t[]){1, 4, 16}, 3);
  if (st->nrax) kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, st->name, "window", (const int64_t[]){0, 1}, 2);
  if (streamable(s, st)) kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, st->name, "stream", (const int64_t[]){0, 1}, 2);
}

/* The other CPU sketches (rows, inner-axis reductions, tiled heavy stages with their epilogue, simple) realized,
 * then the point's stream knobs applied: their outputs without reduction (softmax's, the norms', a fused
 * epilogue's) may be streamed too. The rule's own realize runs on a copy of the sketch holding its own function
 * and data, so the rules need not know of the wrapping. */
typedef struct stream_wrap {
  kg_sketch_realize_fn realize;
  void *data;
  int nstreams;
  const char *streams[ELEM_MAX_STAGES]; /* the streamable outputs */
} stream_wrap;

static int realize_streamed(const kg_sketch *sk, const kg_point *pt, kg_schedule *s, char *err, size_t errlen) {
  const stream_wrap *w = sk->data;
  kg_sketch inner = *sk;
  inner.realize = w->realize;
  inner.data = w->data;
  if (w->realize && w->realize(&inner, pt, s, err, errlen)) return -1;
  kg_rz z = {.sk = sk, .pt = pt};
  kg_builder_init(&z.b, s);
  for (int i = 0; i < w->nstreams; i++) {
    kg_sstage *st = kg_schedule_find_stage(s, w->streams[i]);
    /* a rule may have left the stage where streaming does not apply: the point is then the one without it */
    if (st && kg_rz_knob(&z, st->name, "stream", 0))
      kg_builder_try(&z.b, KG_STEP_STREAM, st->name, NULL, 0, 0, 0, 0);
  }
  return 0;
}

/* Adds a stream knob for every streamable output of sp's program to the sketches the other rules made
 * (sketches [0, upto)). */
static void add_stream_knobs(kg_space *sp, const kg_schedule *s, int upto) {
  stream_wrap proto = {0};
  for (int i = 0; i < s->nstages && proto.nstreams < ELEM_MAX_STAGES; i++)
    if (s->stages[i]->nax >= 1 && streamable(s, s->stages[i])) proto.streams[proto.nstreams++] = s->stages[i]->name;
  if (!proto.nstreams) return;
  for (int k = 0; k < upto; k++) {
    kg_sketch *sk = &sp->sketches[k];
    if (sk->fallback || sk->nknobs + proto.nstreams > KG_SPACE_MAX_KNOBS) continue;
    stream_wrap *w = kg_arena_alloc(&sp->arena, sizeof *w);
    *w = proto;
    for (int i = 0; i < w->nstreams; i++) w->streams[i] = kg_arena_strdup(&sp->arena, proto.streams[i]);
    w->realize = sk->realize;
    w->data = sk->data;
    sk->realize = realize_streamed;
    sk->data = w;
    for (int i = 0; i < w->nstreams; i++)
      kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, w->streams[i], "stream", (const int64_t[]){0, 1}, 2);
  }
}

int kg_sketches_cpu_elem(kg_space *sp) {
  kg_schedule *s = kg_schedule_new(sp->prog);
  add_stream_knobs(sp, s, sp->nsketches);
  int ok = s->nstages > 0, spatial = 0;
  for (int i = 0; i < s->nstages && ok; i++) {
    ok = elem_stage(s->stages[i]) && s->stages[i]->nax <= KG_STEP_MAX_NAMES - 4;
    spatial |= s->stages[i]->nax > 0;
  }
  kg_sketch *sk = ok && spatial && s->nstages <= ELEM_MAX_STAGES
                      ? kg_space_add_sketch(sp, "cpu/elem", realize_elem, NULL)
                      : NULL;
  for (int i = 0; sk && i < s->nstages; i++) {
    const kg_sstage *st = s->stages[i];
    /* knobs for the stages that stay at root: outputs, and every stage of an unfused space */
    if (st->nax >= 1 && (st->is_output || sp->unfused)) add_stage_knobs(sk, s, st);
  }
  kg_schedule_free(s);
  return sk != NULL;
}
