/* CPU sketch rules (Ansor-like), for the C target with OpenMP.
 *
 * Stages are classified from the program's structure:
 *   - heavy: a reduction with data reuse (some read does not use every spatial axis: matmul, conv, batch_matmul,
 *     attention's products); these get multi-level tiling of a "row" spatial axis and the innermost spatial axis
 *     (outer tile fused and parallel, register tile unrolled x vectorized), and either
 *       cpu/tile-cw: the accumulation in a register-tile sized buffer (cache_write local, or for a non-output
 *                    stage its computation at its consumer's register tile), every reduction inside it, or
 *       cpu/tile-rk: the accumulation straight into the stage's tensor, the first reduction axis split so that its
 *                    outer part runs outside the register tile (cache blocking), optionally with the operand that
 *                    the vector lanes read packed (cache_read local) at that level. codegen/c.c keeps such an
 *                    accumulation in registers around the inner reduction loop. Its order knob may put the
 *                    reduction block outside the column tiles instead (BLAS's loop order: row block, k block,
 *                    column panel), the vector operand then packed per column panel and the broadcast operand
 *                    optionally packed per k block (packa), or BLIS's (order 2: k block, row block, column panel),
 *                    the vector operand packed once per k block into panels of the register tile's width for
 *                    every row block and thread, and the broadcast operand optionally per row block;
 *     in cpu/tile-cw the lane knob may put the vector lanes on another spatial axis than the innermost, one that
 *     an operand indexes while another is broadcast across it (a convolution's output channels): the operand
 *     packed at root with that axis innermost, the accumulator stored so (sketch_cpu_lanes.c), and the row axis
 *     then any other (the output width); and its cb knob may make the local accumulator hold the parallel loop's
 *     whole block, the first reduction axis blocked outside the register tiles (blocked_accumulation);
 *   - light reductions (no reuse: softmax rows, norms, reduce_rows): parallel rows; when not an output, computed
 *     at the row loop of its only consumer so that a row is reused from cache (cpu/rows); an rf knob rfactors
 *     the innermost reduction into vector lanes of partial results (a serial float sum does not vectorize);
 *   - elementwise: inlined into their readers when not outputs (or, by a CHOICE knob, kept at root; in cpu/tile-cw
 *     one that a heavy stage reads first, a convolution's padding, is always at root); at root: outer spatial loops
 *     fused for parallelism, the innermost split by a VECTOR knob and vectorized.
 *   - inner-axis reductions (a light reduction whose innermost reduction axis walks a read's innermost dimension:
 *     row sums, softmax's max and sum, norms) also get cpu/inner: the reduction rfactored into acc independent
 *     chains of vector lanes (the latency of each add hidden), combined by the stage itself; not an output: computed
 *     at the parallel row loop of a stage that reads it, directly or through stages computed there (softmax's max
 *     and sum both at the output's rows: one pass over each row), an elementwise producer inlined or computed
 *     there too as a row buffer (root knob 2), never at root; at root, rows per parallel task, parallel or not,
 *     or each row's reduction split into parallel parts for few long rows;
 * cpu/simple (parallel + vectorize, producers inlined where legal) exists for every program and always realizes;
 * beside the tiled sketches of a heavy stage it is one point (add_sketch).
 * Register tiles (ri rows x rj columns: whole vectors, or a short axis whole) are rejected when their accumulators
 * would not fit in the vector registers; cache tiles are counted in register tiles (ti, tj: powers of two), so a
 * cache tile never ends in a partial register tile except at the loop's end.
 * Stages are visited from the outputs back to the inputs, so a producer sees how its consumer was tiled.
 * Unfused spaces (sp->unfused): the same sketches, with every program stage kept at root: elementwise stages are
 * never inlined (no root knob), light reductions are not computed at their consumer's rows (cpu/rows keeps its
 * rfactored vector lanes, computed inside the reduction's own loop), and a heavy stage has no epilogue to carry
 * its tiles: cpu/tile-cw accumulates in its own cache_write local at its own register tile, the epilogue is an
 * elementwise stage at root. cpu/simple is the default schedule made parallel and vectorized, so it realizes.
 *
 * Requires: realize receives a fresh default schedule of the space's program. */
#include <stdio.h>
#include <string.h>
#include "realize.h"
#include "sketch_cpu_lanes.h"
#include "sketch_cpu_elem.h"
#include "space.h"

#define MAX_STAGES 64

typedef enum { CLS_ELEM, CLS_LIGHT, CLS_HEAVY } stage_class;

/* The first read in e (depth first) that pred accepts; NULL when none. Every question the rules ask of a body is
 * about its reads. */
typedef int (*read_pred)(const kg_expr *read, const void *a, const void *b);

static const kg_expr *find_read(const kg_expr *e, read_pred pred, const void *a, const void *b) {
  if (!e) return NULL;
  if (e->kind == KG_EXPR_READ) return pred(e, a, b) ? e : NULL; /* reads in indices do not count */
  const kg_expr *r = NULL;
  int n = kg_expr_nchildren(e);
  for (int i = 0; i < n && !r; i++) r = find_read(*kg_expr_child((kg_expr *)e, i), pred, a, b);
  return r;
}

static int read_uses(const kg_expr *read, const kg_ivar *v) {
  for (int i = 0; i < read->read.n; i++)
    if (kg_expr_uses_ivar(read->read.idx[i], v)) return 1;
  return 0;
}

/* a read that does not use spatial axis a: it is reused across a */
static int pred_without(const kg_expr *read, const void *a, const void *b) {
  (void)b;
  return !read_uses(read, a);
}

/* a read along the innermost axis b that the row axis a does not index */
static int pred_vector(const kg_expr *read, const void *a, const void *b) {
  return read_uses(read, b) && !read_uses(read, a);
}

static int pred_tensor(const kg_expr *read, const void *a, const void *b) {
  (void)b;
  return read->read.tensor == a;
}

static int read_without(const kg_expr *e, const kg_ivar *v) { return find_read(e, pred_without, v, NULL) != NULL; }

static int reads_tensor(const kg_expr *e, const kg_tensor *t) { return find_read(e, pred_tensor, t, NULL) != NULL; }

static stage_class classify(const kg_sstage *st) {
  if (st->nrax == 0) return CLS_ELEM;
  /* one spatial axis (matvec) leaves no register tile to reuse a value across */
  if (st->nax >= 2)
    for (int a = 0; a < st->nax; a++)
      if (st->roots[a]->extent > 1 && read_without(st->body, st->ax[a])) return CLS_HEAVY;
  return CLS_LIGHT;
}

/* The tensor the vector lanes of a heavy stage read along its innermost axis and that the row axis does not
 * index: the operand worth packing (B of a matmul). NULL when none. */
static const kg_tensor *vector_operand(const kg_expr *e, const kg_ivar *row, const kg_ivar *last) {
  const kg_expr *r = find_read(e, pred_vector, row, last);
  return r ? r->read.tensor : NULL;
}

/* The tensor a heavy stage broadcasts across its vector lanes: read along the row axis, not along the innermost
 * (A of a matmul, whose block cpu/tile-rk's goto order keeps in L2). NULL when none. */
static const kg_tensor *row_operand(const kg_expr *e, const kg_ivar *row, const kg_ivar *last) {
  const kg_expr *r = find_read(e, pred_vector, last, row);
  return r ? r->read.tensor : NULL;
}

typedef enum { SK_SIMPLE, SK_TILE_CW, SK_TILE_RK, SK_ROWS, SK_INNER } sketch_kind;

/* a read whose last index (the innermost dimension in memory) uses the reduction axis a */
static int pred_inner(const kg_expr *read, const void *a, const void *b) {
  (void)b;
  return read->read.n > 0 && kg_expr_uses_ivar(read->read.idx[read->read.n - 1], a);
}

/* A light reduction whose innermost reduction axis walks the innermost dimension of a tensor it reads (row sums,
 * softmax's max and sum, norms): its partial results can be vector lanes over contiguous memory. */
static int inner_reduction(const kg_sstage *st) {
  return classify(st) == CLS_LIGHT && find_read(st->body, pred_inner, st->rax[st->nrax - 1], NULL) != NULL;
}

/* Fuses leading spatial leaves of st until the fused loop has at least 64 iterations (or the next leaf is not
 * spatial), then makes it parallel. Requires st at root. */
static kg_iter *parallel_outer(kg_rz *z, kg_sstage *st, int maxfuse) {
  if (st->nleaves == 0) return NULL;
  kg_iter *p = st->leaves[0];
  for (int k = 1; k < maxfuse && p->extent < 64 && st->nleaves > 1 && !st->leaves[1]->is_reduce &&
                         st->leaves[1]->kind == KG_LOOP_SERIAL && !z->b.failed;
       k++)
    p = kg_builder_fuse(&z->b, st, p, st->leaves[1]);
  if (p && !p->is_reduce) kg_builder_annotate(&z->b, KG_STEP_PARALLEL, st, p, KG_THREAD_NONE);
  return p;
}

/* A root stage in the generic way: parallel outer loops, the innermost spatial axis split by the stage's vector
 * knob and vectorized when it is the innermost loop. */
static void generic_root(kg_rz *z, kg_sstage *st) {
  int64_t vec = kg_rz_knob(z, st->name, "vec", 1);
  kg_iter *last = st->nleaves ? st->leaves[st->nleaves - 1] : NULL;
  if (last && !last->is_reduce && vec > 1 && last->extent > 1 && (st->nleaves > 1 || last->extent > vec)) {
    kg_iter *in;
    kg_builder_split(&z->b, st, last, vec, &in);
    kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, st, in, KG_THREAD_NONE);
  }
  if (st->nleaves && !(st->nleaves == 1 && st->leaves[0]->kind == KG_LOOP_VECTORIZED)) parallel_outer(z, st, 3);
}

/* An elementwise stage computed at its reader's row: its innermost loop split by its vector knob and vectorized
 * (the row buffer it fills is read back from cache). */
static void row_vectorize(kg_rz *z, kg_sstage *x) {
  int64_t vec = kg_rz_knob(z, x->name, "vec", 1);
  kg_iter *last = x->nleaves ? x->leaves[x->nleaves - 1] : NULL, *in = last;
  if (!last || last->is_reduce || vec < 2) return;
  if (last->extent > vec) kg_builder_split(&z->b, x, last, vec, &in);
  kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, x, in, KG_THREAD_NONE);
}

/* realize.h */
kg_sstage *kg_rz_rfactor_lanes(kg_rz *z, kg_sstage *x) {
  int64_t f = kg_rz_knob(z, x->name, "rf", 1);
  if (f < 2 || x->nrax == 0 || x->roots[x->nax + x->nrax - 1]->extent < f) return NULL;
  /* an rfactor that does not apply leaves the stage its serial accumulation */
  if (kg_builder_try(&z->b, KG_STEP_RFACTOR, x->name, &x->roots[x->nax + x->nrax - 1]->name, 1, f, 0, 1)) return NULL;
  char nm[256];
  snprintf(nm, sizeof nm, "%s.rf", x->name);
  kg_sstage *rf = kg_schedule_find_stage(z->b.s, nm);
  if (!rf || rf->nax < 1) return NULL;
  kg_iter *ord[KG_STEP_MAX_NAMES];
  int n = 0;
  for (int a = 0; a < rf->nax - 1 && n < KG_STEP_MAX_NAMES; a++) ord[n++] = rf->roots[a];
  for (int r = 0; r < rf->nrax && n < KG_STEP_MAX_NAMES; r++) ord[n++] = rf->roots[rf->nax + r];
  if (n < KG_STEP_MAX_NAMES) ord[n++] = rf->roots[rf->nax - 1];
  if (n == rf->nleaves) kg_builder_reorder(&z->b, rf, ord, n);
  kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, rf, rf->roots[rf->nax - 1], KG_THREAD_NONE);
  return z->b.failed ? NULL : rf;
}

static kg_sstage *first_reader(const kg_schedule *s, const kg_sstage *st);

#define MAX_LEVELS 8

/* The combine of x's partial results as a tree instead of one serial chain over all of them (whose adds, each
 * waiting for the last, cost as much as reading a short row): the acc chains added lane by lane into one
 * vector, then its lanes halved until two remain, each level a stage x.rf.K of vectorized adds over the last
 * one's results; x adds the last two. lv holds x.rf; the levels are appended, each read by the next.
 * Requires x's loops untransformed and nothing computed at them. */
static void combine_tree(kg_rz *z, kg_sstage *x, int64_t lanes, kg_sstage **lv, int *nlv) {
  kg_schedule *s = z->b.s;
  while (*nlv < MAX_LEVELS && !z->b.failed) {
    kg_iter *k = x->roots[x->nax + x->nrax - 1];
    int64_t w = k->extent, next = w > lanes ? lanes : w / 2;
    if (next < 2 || w % next || kg_builder_try(&z->b, KG_STEP_RFACTOR, x->name, &k->name, 1, next, 0, 1)) return;
    kg_sstage *t = NULL;
    for (int i = 0; i < s->nstages && !t; i++)
      if (s->stages[i]->origin == KG_ORIGIN_RFACTOR && reads_tensor(x->body, s->stages[i]->out)) t = s->stages[i];
    if (!t || t->nax < 2 || t->nrax != 1 || t->nleaves != t->nax + 1) {
      kg_builder_fail(&z->b, "stage %s: unexpected combine stage", x->name);
      return;
    }
    /* the lanes innermost */
    kg_iter *ord[KG_STEP_MAX_NAMES];
    int n = 0;
    for (int a = 0; a < t->nax - 1 && n < KG_STEP_MAX_NAMES - 2; a++) ord[n++] = t->roots[a];
    ord[n++] = t->roots[t->nax];
    ord[n++] = t->roots[t->nax - 1];
    kg_builder_reorder(&z->b, t, ord, n);
    kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, t, t->roots[t->nax - 1], KG_THREAD_NONE);
    lv[(*nlv)++] = t;
  }
}

/* The partial results' stages lv[0..n) (each read by the next, the last by x) computed at x's loop l, each inside
 * the next's row. */
static void place_levels(kg_rz *z, kg_sstage **lv, int n, kg_sstage *x, kg_iter *l) {
  if (n > 0) kg_builder_compute_at(&z->b, lv[n - 1], x, l);
  for (int k = n - 2; k >= 0 && !z->b.failed; k--) kg_builder_compute_at(&z->b, lv[k], lv[k + 1], lv[k + 1]->leaves[0]);
}

/* x computed at the parallel row loop of a stage at root that reads it: its first reader, else the first later
 * one where every other reader is computed inside that loop too (softmax's maximum at the output's rows, where
 * the row sum that also reads it is computed), so that each row is read from memory once. 1 when placed. */
static int at_reader_row(kg_rz *z, kg_sstage *x) {
  const kg_schedule *s = z->b.s;
  kg_sstage *first = first_reader(s, x);
  for (int i = -1; i < s->nstages; i++) {
    kg_sstage *c = i < 0 ? first : s->stages[i];
    if (!c || (i >= 0 && (c == first || c->id <= x->id)) || c->attach != KG_ATTACH_ROOT || c->nleaves == 0 ||
        c->leaves[0]->kind != KG_LOOP_PARALLEL)
      continue;
    if (!kg_builder_try(&z->b, KG_STEP_COMPUTE_AT, x->name, (const char *[]){c->name, c->leaves[0]->name}, 2, 0, 0,
                        0))
      return 1;
  }
  return 0;
}

/* cpu/inner: x's innermost reduction rfactored into lanes x acc partial results (stage x.rf, computed at x's
 * innermost row loop), their loop split into acc chains (unrolled by the unroll knob) of lanes-wide vectors: acc
 * independent vector accumulations hide the latency of each add, and x's serial loop over them is the
 * horizontal combine, or, by the combine knob, a tree of vectorized adds (combine_tree). When x stays at root (an
 * output, or an unfused space) the rows knob gives each parallel task that many consecutive rows and the par knob
 * says whether the rows run in parallel at all (small problems lose to the fork); its parts knob, above 1, splits
 * each row's reduction among that many parallel tasks instead (for few long rows): x.rf at root, its rows and
 * parts fused into one parallel loop, x combining the parts. Part p holds columns p*lanes*acc.. (lanes*acc of them)
 * of every chunk of parts*lanes*acc columns: whole cache lines when lanes*acc is a multiple of 16 floats.
 * Requires x's loops untransformed. */
static void inner_reduce(kg_rz *z, kg_sstage *x) {
  int64_t lanes = kg_rz_knob(z, x->name, "lanes", 1), acc = kg_rz_knob(z, x->name, "acc", 1), parts = kg_rz_knob(z, x->name, "parts", 1);
  int64_t rext = x->roots[x->nax + x->nrax - 1]->extent, f = lanes * acc * parts;
  kg_sstage *rf = NULL;
  kg_iter *part = NULL;
  if (f >= 2 && rext >= f &&
      kg_builder_try(&z->b, KG_STEP_RFACTOR, x->name, &x->roots[x->nax + x->nrax - 1]->name, 1, f, 0, 1) == 0) {
    char nm[256];
    snprintf(nm, sizeof nm, "%s.rf", x->name);
    rf = kg_schedule_find_stage(z->b.s, nm);
  }
  if (rf && rf->nax >= 1) {
    kg_iter *lane = rf->roots[rf->nax - 1], *chain = NULL;
    if (parts > 1) part = kg_builder_split(&z->b, rf, lane, lanes * acc, &lane);
    if (acc > 1 && lanes > 1) chain = kg_builder_split(&z->b, rf, lane, lanes, &lane);
    kg_iter *ord[KG_STEP_MAX_NAMES];
    int n = 0;
    for (int a = 0; a < rf->nax - 1 && n < KG_STEP_MAX_NAMES; a++) ord[n++] = rf->roots[a];
    if (part && n < KG_STEP_MAX_NAMES) ord[n++] = part;
    for (int r = 0; r < rf->nrax && n < KG_STEP_MAX_NAMES; r++) ord[n++] = rf->roots[rf->nax + r];
    if (chain && n < KG_STEP_MAX_NAMES) ord[n++] = chain;
    if (n < KG_STEP_MAX_NAMES) ord[n++] = lane;
    if (z->b.failed) return;
    if (n != rf->nleaves) {
      kg_builder_fail(&z->b, "stage %s: unexpected loops", rf->name);
      return;
    }
    kg_builder_reorder(&z->b, rf, ord, n);
    if (chain && kg_rz_knob(z, x->name, "unroll", 0)) kg_builder_annotate(&z->b, KG_STEP_UNROLL, rf, chain, KG_THREAD_NONE);
    kg_builder_annotate(&z->b, lanes > 1 ? KG_STEP_VECTORIZE : KG_STEP_UNROLL, rf, lane, KG_THREAD_NONE);
    if (part) {
      kg_iter *p = kg_builder_fuse_run(&z->b, rf, 0, rf->nax);
      kg_builder_annotate(&z->b, KG_STEP_PARALLEL, rf, p, KG_THREAD_NONE);
    }
  } else {
    rf = NULL;
  }
  if (z->b.failed) return;
  kg_sstage *lv[MAX_LEVELS];
  int nlv = 0;
  if (rf) lv[nlv++] = rf;
  if (rf && !part && x->nax >= 1 && lanes >= 4 && kg_rz_knob(z, x->name, "combine", 0)) combine_tree(z, x, lanes, lv, &nlv);
  if (z->b.failed) return;
  if (!x->is_output && !z->sk->space->unfused && at_reader_row(z, x)) {
    place_levels(z, lv, nlv, x, x->leaves[0]);
    return;
  }
  if (x->nax == 0) return; /* a reduction to one value: no rows to spread */
  /* at root: the spatial loops fused into one row loop, split into tasks of rows rows */
  kg_iter *row = x->leaves[0];
  for (int a = 1; a < x->nax && !z->b.failed; a++) row = kg_builder_fuse(&z->b, x, row, x->leaves[1]);
  if (!row || z->b.failed) return;
  kg_iter *in = row;
  int64_t rows = kg_rz_knob(z, x->name, "rows", 1);
  if (rows > 1 && row->extent > rows) row = kg_builder_split(&z->b, x, row, rows, &in);
  if (kg_rz_knob(z, x->name, "par", 1)) kg_builder_annotate(&z->b, KG_STEP_PARALLEL, x, row, KG_THREAD_NONE);
  if (rf && !part) place_levels(z, lv, nlv, x, in);
}

/* The first stage after st that reads it directly and is not inlined (stages are in execution order). */
static kg_sstage *first_reader(const kg_schedule *s, const kg_sstage *st) {
  for (int i = st->id + 1; i < s->nstages; i++)
    if (s->stages[i]->attach != KG_ATTACH_INLINE && reads_tensor(s->stages[i]->body, st->out)) return s->stages[i];
  return NULL;
}

/* For a heavy stage that is not an output: its elementwise consumer of the same shape, which carries its tiles
 * (the accumulation then runs at the consumer's register tile, the epilogue fused). NULL when there is none, or
 * in an unfused space (sp_unfused), where the stage is tiled on its own. */
static kg_sstage *epilogue_of(const kg_schedule *s, const kg_sstage *h, int sp_unfused) {
  if (h->is_output || sp_unfused) return NULL;
  kg_sstage *c = first_reader(s, h);
  if (!c || c->nrax || c->nax != h->nax) return NULL;
  for (int i = c->id + 1; i < s->nstages; i++)
    if (reads_tensor(s->stages[i]->body, h->out)) return NULL;
  for (int a = 0; a < h->nax; a++)
    if (c->roots[a]->extent != h->roots[a]->extent) return NULL;
  return c;
}

/* Operand t of heavy stage h copied (cache_read local) at o's loop l, its innermost axis vectorized: a packed
 * block that the register tiles read contiguously, without the set conflicts of rows a power-of-two apart. An
 * f16/bf16 operand's block is stored as f32 (`widen`) when wide: converted once per block rather than at every use
 * in the register tile, which then runs the f32 tile's inner loop (a narrow block would only save memory, which the
 * tile sizes already bound); bf16 dot products read it narrow. */
static void pack_operand(kg_rz *z, kg_sstage *h, kg_sstage *o, const kg_tensor *t, kg_iter *l, int wide) {
  if (!t || z->b.failed) return;
  kg_builder_pack(&z->b, t->name, h, &(kg_pack){.inner = -1, .at = o, .loop = l, .widen = wide});
}

/* cpu/tile-rk's BLIS order: the vector operand t (B of a matmul) copied once per reduction block (at loop l, the
 * k block) for every row block and thread, into panels of rj columns, [N/rj][kb][rj] (with bf16 pair dot
 * products, dot, narrow and in pairs of k: [N/rj][kb/2][rj][2]), so that each register tile
 * reads its panel contiguously; the copy parallel over its panels when par, an f16/bf16 operand widened as in
 * pack_operand. Without a lane dimension indexed by exactly the lane axis, or one that rj does not divide, the
 * copy keeps t's layout. */
static void pack_panels(kg_rz *z, kg_sstage *h, kg_sstage *o, const kg_expr *r, const kg_ivar *lane, int64_t rj,
                        kg_iter *l, int par, int dot) {
  if (!r || z->b.failed) return;
  int d = r->read.n - 1;
  const kg_expr *e = r->read.idx[d];
  int64_t ext = r->read.tensor->shape[d];
  int along = e->kind == KG_EXPR_IVAR && e->var.iv == lane && r->read.n + 2 <= KG_STEP_MAX_NAMES;
  int panels = along && rj > 1 && ext % rj == 0 && ext > rj;
  /* dot: the panels narrow and in pairs of k, [N/rj][K/2][rj][2], which the pair dot products load directly;
   * the dimension indexed by exactly the reduction axis, of even extent (else the copy would not split) */
  int pairs = -1;
  for (int q = 0; dot && along && q < r->read.n; q++) {
    const kg_expr *x = r->read.idx[q];
    if (q != d && x->kind == KG_EXPR_IVAR && h->nrax == 1 && x->var.iv == h->rax[0] &&
        r->read.tensor->shape[q] % 2 == 0)
      pairs = q;
  }
  if (dot && pairs < 0) {
    kg_builder_fail(&z->b, "stage %s: %s cannot be packed in pairs of k for the pair dot products", h->name,
                    r->read.tensor->name);
    return;
  }
  kg_builder_pack(&z->b, r->read.tensor->name, h,
                  &(kg_pack){.inner = panels || pairs >= 0 ? d : -1, .panel = panels ? rj : 0, .at = o, .loop = l,
                             .widen = !dot, .parallel = par, .pairs = pairs + 1});
}

/* cpu/tile-rk's goto order with its epilogue c fused (epi knob): c carries the parallel row blocks of ti rows
 * (its other outer axes fused with them), its innermost axis vectorized, and h is computed at that
 * loop, so each block of h's result is complete, and still in cache, when c reads it. Returns 0 when a step
 * failed. */
static int carry_row_blocks(kg_rz *z, kg_sstage *c, kg_sstage *h, int row, int last, int64_t ti) {
  kg_iter *ord[KG_STEP_MAX_NAMES], *ci, *roots[16];
  int n = 0, nax = c->nax;
  for (int i = 0; i < nax; i++) roots[i] = c->roots[i];
  kg_iter *co = kg_builder_split(&z->b, c, roots[row], ti, &ci);
  if (z->b.failed) return 0;
  for (int i = 0; i < nax; i++)
    if (i != row && i != last) ord[n++] = roots[i];
  int nouter = n;
  ord[n++] = co;
  ord[n++] = ci;
  ord[n++] = roots[last];
  kg_builder_reorder(&z->b, c, ord, n);
  kg_iter *p = ord[0];
  for (int k = 1; k <= nouter && !z->b.failed; k++) p = kg_builder_fuse(&z->b, c, p, ord[k]);
  kg_builder_annotate(&z->b, KG_STEP_PARALLEL, c, p, KG_THREAD_NONE);
  kg_iter *in = roots[last];
  if (in->extent > kg_rz_lanes(z)) kg_builder_split(&z->b, c, in, kg_rz_lanes(z), &in);
  kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, c, in, KG_THREAD_NONE);
  kg_builder_compute_at(&z->b, h, c, p);
  return !z->b.failed;
}

/* cpu/tile-cw's blocked accumulation (cb knob): the local accumulator a of h computed at o's parallel loop par,
 * so that it holds that loop's whole block of the output (a convolution's output row: 56 x 64 floats, in L1),
 * and its loops ordered other spatial axes, the first reduction axis's block of cb, the row and lane register
 * tiles, the rest of the reduction, then the register tile (rows unrolled, lanes vectorized): the register tile
 * accumulates over a block of the reduction and adds into a, as oneDNN's direct convolution loops, so that the
 * operand block the reduction block reads (the weights of cb input channels) stays in L1 across every tile of the
 * row. pos: the position of h's axes among a's (see tile_heavy). */
static void blocked_accumulation(kg_rz *z, const kg_sstage *h, kg_sstage *a, kg_sstage *o, kg_iter *par,
                                 const int *pos, int row, int last, int64_t ri, int64_t rj, int64_t cb) {
  kg_builder_compute_at(&z->b, a, o, par);
  if (z->b.failed) return;
  kg_iter *ord[KG_STEP_MAX_NAMES], *ro = NULL, *rin = NULL, *lo, *lin, *lio = NULL, *co, *ci;
  kg_iter *lane = a->roots[pos[last]], *rowr = row >= 0 ? a->roots[pos[row]] : NULL;
  kg_iter *red0 = a->roots[a->nax];
  int64_t L = kg_rz_lanes(z);
  if (rowr) ro = kg_builder_split(&z->b, a, rowr, ri, &rin);
  lo = kg_builder_split(&z->b, a, lane, rj, &lin);
  if (!z->b.failed && rj > L && rj % L == 0) lio = kg_builder_split(&z->b, a, lin, L, &lin);
  co = kg_builder_split(&z->b, a, red0, cb, &ci);
  if (z->b.failed) return;
  if (a->nleaves > KG_STEP_MAX_NAMES) {
    kg_builder_fail(&z->b, "stage %s: too many loops", a->name);
    return;
  }
  int n = 0;
  for (int i = 0; i < a->nax; i++)
    if (i != row && i != last) ord[n++] = a->roots[pos[i]];
  ord[n++] = co;
  if (ro) ord[n++] = ro;
  ord[n++] = lo;
  ord[n++] = ci;
  for (int r = 1; r < a->nrax; r++) ord[n++] = a->roots[a->nax + r];
  if (rin) ord[n++] = rin;
  if (lio) ord[n++] = lio;
  ord[n++] = lin;
  if (n != a->nleaves) {
    kg_builder_fail(&z->b, "stage %s: unexpected loops", a->name);
    return;
  }
  kg_builder_reorder(&z->b, a, ord, n);
  if (rin && kg_rz_knob(z, h->name, "unroll", 1) > 1) kg_builder_annotate(&z->b, KG_STEP_UNROLL, a, rin, KG_THREAD_NONE);
  if (lio) kg_builder_annotate(&z->b, KG_STEP_UNROLL, a, lio, KG_THREAD_NONE);
  kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, a, lin, KG_THREAD_NONE);
}

/* Heavy stage h tiled for registers and cache. */
static void tile_heavy(kg_rz *z, kg_sstage *h, sketch_kind kind) {
  kg_schedule *s = z->b.s;
  /* last: the axis of the vector lanes, the innermost unless the lane knob picks another (cpu/tile-cw only) */
  int nax = h->nax, last = kind == SK_TILE_CW ? (int)kg_rz_knob(z, h->name, "lane", nax - 1) : nax - 1;
  int row = nax >= 2 ? (int)kg_rz_knob(z, h->name, "row", nax - 2) : -1;
  /* the cache tiles are whole multiples of the register tile (a remainder inside a cache tile would put a guard
   * in the unrolled register tile); both capped at their loop's extent */
  int64_t ri = kg_rz_knob(z, h->name, "ri", 1), rj = kg_rz_knob(z, h->name, "rj", 1);
  int64_t rext = row >= 0 ? h->roots[row]->extent : 1, lext = h->roots[last]->extent;
  if (ri > rext) ri = rext;
  if (rj > lext) rj = lext;
  if (row >= 0 && kg_rz_tile_spills(z, ri, rj)) {
    kg_builder_fail(&z->b, "stage %s: a %lldx%lld register tile spills", h->name, (long long)ri, (long long)rj);
    return;
  }
  if (row == last || last < 0 || last >= nax) {
    kg_builder_fail(&z->b, "stage %s: the row axis is the lane axis", h->name);
    return;
  }
  int64_t ti = ri * kg_rz_knob(z, h->name, "ti", 1), tj = rj * kg_rz_knob(z, h->name, "tj", 1);
  if (ti > rext) ti = rext;
  if (tj > lext) tj = lext;
  /* o: the stage whose loops carry the tiles; a: where the accumulation runs; pos[i]: the position of h's axis i
   * among a's axes (a lane axis other than the innermost is stored innermost) */
  kg_sstage *o = h, *a = h;
  int pos[16], perm[16];
  for (int i = 0; i < 16; i++) pos[i] = i;
  if (nax > 16) {
    kg_builder_fail(&z->b, "stage %s: too many axes", h->name);
    return;
  }
  if (kind == SK_TILE_CW && last != nax - 1) {
    if (epilogue_of(s, h, z->sk->space->unfused)) {
      kg_builder_fail(&z->b, "stage %s: lanes over axis %d need the accumulation in its own local", h->name, last);
      return;
    }
    a = kg_cpu_lanes_prepare(&z->b, h, last, perm);
    if (!a) return;
    for (int i = 0; i < nax; i++) pos[perm[i]] = i;
  } else if (kind == SK_TILE_CW) {
    kg_sstage *c = epilogue_of(s, h, z->sk->space->unfused);
    if (c) {
      o = c;
    } else {
      a = kg_builder_cache(&z->b, KG_STEP_CACHE_WRITE, h->name, "local", NULL);
    }
    if (!a) {
      z->b.failed = 1;
      return;
    }
  }
  /* goto: the reduction block outside the column tiles (row.o, k.o, last.o), as BLAS libraries loop: the row
   * operand's block of ti rows by kb (packed at k.o) stays in L2 while every column tile's panel of the vector
   * operand (packed at last.o) streams through L1; epi: the row blocks carried by the epilogue instead */
  /* blis (order 2): the reduction block outermost, as BLIS and OpenBLAS loop: the vector operand packed once per k
   * block into panels (pack_panels) that every row block and thread shares, the row operand's block packed per
   * row block (packa 1), the row blocks parallel (inside the batch axes, which are parallel when there are any) */
  int64_t order = kind == SK_TILE_RK && row >= 0 ? kg_rz_knob(z, h->name, "order", 0) : 0;
  int go = order == 1, blis = order == 2;
  kg_sstage *ep = go && kg_rz_knob(z, h->name, "epi", 0) == 1 ? epilogue_of(s, h, z->sk->space->unfused) : NULL;
  if (ep && !carry_row_blocks(z, ep, h, row, last, ti)) return;
  /* o's spatial loops: others, row.o, last.o | row.i.o, last.i.o | row.i.i, last.i.i */
  kg_iter *ord[KG_STEP_MAX_NAMES];
  int n = 0;
  kg_iter *ro = NULL, *rio = NULL, *rii = NULL, *lo, *lio, *lii, *t;
  kg_iter *roots[16];
  for (int i = 0; i < o->nax && i < 16; i++) roots[i] = o->roots[i];
  if (row >= 0 && !ep) ro = kg_builder_split(&z->b, o, roots[row], ti, &t);
  if (row >= 0) rio = kg_builder_split(&z->b, o, ep ? roots[row] : t, ri, &rii);
  lo = kg_builder_split(&z->b, o, roots[last], tj, &t);
  lio = kg_builder_split(&z->b, o, t, rj, &lii);
  if (z->b.failed) return;
  for (int i = 0; i < o->nax; i++)
    if (i != row && i != last) ord[n++] = roots[i];
  int nouter = n;
  kg_iter *ko = NULL, *ki = NULL;
  if (kind == SK_TILE_RK) {
    /* the first reduction axis split; its outer part between the cache tile and the register tile */
    int64_t kb = kg_rz_knob(z, h->name, "kb", 1);
    ko = kg_builder_split(&z->b, o, o->roots[o->nax], kb, &ki);
    if (z->b.failed) return;
  }
  if (blis) ord[n++] = ko;
  if (ro) ord[n++] = ro;
  if (go) ord[n++] = ko;
  ord[n++] = lo;
  if (kind == SK_TILE_RK && !go && !blis) ord[n++] = ko;
  if (rio) ord[n++] = rio;
  ord[n++] = lio;
  /* dot (two bf16 operands): the register tile's rows, columns and k pairs as bf16 pair dot products (`bfdot`),
   * k innermost; where the tile has their shape (whole 16-lane column vectors, at most 16 rows and 28
   * accumulators, k in pairs), else the knob is moot */
  int dot = kind == SK_TILE_RK && rii && o->nrax == 1 && kg_rz_knob(z, h->name, "dot", 0) && ri <= KG_BFDOT_MAX_ROWS &&
            rj % 16 == 0 && rj <= KG_BFDOT_MAX_COLS && ri * (rj / 16) <= KG_BFDOT_MAX_ACC && ki && ki->extent % 2 == 0;
  if (kind == SK_TILE_RK && !dot) {
    ord[n++] = ki;
    for (int r = 1; r < o->nrax; r++) ord[n++] = o->roots[o->nax + r];
  }
  if (rii) ord[n++] = rii;
  ord[n++] = lii;
  if (dot) ord[n++] = ki;
  if (n != o->nleaves || n > KG_STEP_MAX_NAMES) {
    kg_builder_fail(&z->b, "stage %s: unexpected loops", o->name);
    return;
  }
  kg_builder_reorder(&z->b, o, ord, n);
  /* parallel: the leading loops fused (others, row.o, last.o); with the epilogue carrying the row blocks, its
   * loop is the parallel one */
  kg_iter *par = NULL;
  if (blis) {
    par = nouter ? ord[0] : ro;
    for (int k = 1; k < nouter && !z->b.failed; k++) par = kg_builder_fuse(&z->b, o, par, ord[k]);
    kg_builder_annotate(&z->b, KG_STEP_PARALLEL, o, par, KG_THREAD_NONE);
  } else if (!ep) {
    par = ord[0];
    int nfuse = (int)kg_rz_knob(z, h->name, "fuse", 2);
    for (int k = 1; k < nouter + 2 && k <= nfuse && ord[k] != ko && !z->b.failed; k++)
      par = kg_builder_fuse(&z->b, o, par, ord[k]);
    kg_builder_annotate(&z->b, KG_STEP_PARALLEL, o, par, KG_THREAD_NONE);
  }
  if (kind == SK_TILE_RK) {
    /* packa 2 (a narrow row operand): its rows of one register tile, converted once for all its columns */
    int64_t pa = kg_rz_knob(z, h->name, "packa", 0);
    if (blis)
      pack_panels(z, h, o, find_read(h->body, pred_vector, h->ax[row], h->ax[last]), h->ax[last], rj, ko, !nouter,
                  dot);
    else if (kg_rz_knob(z, h->name, "pack", 0) && row >= 0)
      pack_operand(z, h, o, vector_operand(h->body, h->ax[row], h->ax[last]), go ? lo : ko, !dot);
    if (pa && row >= 0)
      pack_operand(z, h, o, row_operand(h->body, h->ax[row], h->ax[last]), pa == 2 ? lio : blis ? ro : ko, !dot);
    if (dot) {
      const char *names[3] = {rii->name, lii->name, ki->name};
      kg_builder_step(&z->b, KG_STEP_BFDOT, o->name, names, 3, 0, 0, 0);
      return;
    }
    if (rii && kg_rz_knob(z, h->name, "unroll", 1) > 1) kg_builder_annotate(&z->b, KG_STEP_UNROLL, o, rii, KG_THREAD_NONE);
    kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, o, lii, KG_THREAD_NONE);
    return;
  }
  /* the accumulation at the register tile: other spatial axes, reductions, row (unrolled), last (vectorized).
   * With lanes over an axis other than the innermost, the copy out stores across them (not vectorized), and
   * a lane tile of several vectors is one unrolled loop of single vectors: gcc keeps the accumulators of a
   * wider vectorized loop in memory when reduction loops surround it. */
  if (last == nax - 1) kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, o, lii, KG_THREAD_NONE);
  int64_t cb = a != o && par && a->nrax ? kg_rz_knob(z, h->name, "cb", 0) : 0;
  if (cb > 0) {
    blocked_accumulation(z, h, a, o, par, pos, row, last, ri, rj, cb);
    return;
  }
  kg_builder_compute_at(&z->b, a, o, lio);
  if (z->b.failed) return;
  n = 0;
  for (int i = 0; i < a->nax; i++)
    if (i != row && i != last) ord[n++] = a->roots[pos[i]];
  for (int r = 0; r < a->nrax; r++) ord[n++] = a->roots[a->nax + r];
  if (row >= 0) ord[n++] = a->roots[pos[row]];
  kg_iter *lane = a->roots[pos[last]], *lane_o = NULL;
  int64_t lw = rj < lext ? rj : lext;
  if (last != nax - 1 && lw > kg_rz_lanes(z) && lw % kg_rz_lanes(z) == 0)
    lane_o = kg_builder_split(&z->b, a, lane, kg_rz_lanes(z), &lane);
  if (lane_o) ord[n++] = lane_o;
  ord[n++] = lane;
  if (z->b.failed) return;
  kg_builder_reorder(&z->b, a, ord, n);
  if (row >= 0 && kg_rz_knob(z, h->name, "unroll", 1) > 1)
    kg_builder_annotate(&z->b, KG_STEP_UNROLL, a, a->roots[pos[row]], KG_THREAD_NONE);
  if (lane_o) kg_builder_annotate(&z->b, KG_STEP_UNROLL, a, lane_o, KG_THREAD_NONE);
  kg_builder_annotate(&z->b, KG_STEP_VECTORIZE, a, lane, KG_THREAD_NONE);
}

static int realize(const kg_sketch *sk, const kg_point *pt, kg_schedule *s, char *err, size_t errlen) {
  kg_rz z = {.sk = sk, .pt = pt};
  kg_builder_init(&z.b, s);
  sketch_kind kind = (sketch_kind)(intptr_t)sk->data;
  int unfused = sk->space->unfused;
  int nst = s->nstages < MAX_STAGES ? s->nstages : MAX_STAGES;
  kg_sstage *st[MAX_STAGES];
  unsigned char skip[MAX_STAGES] = {0}; /* epilogues that their heavy producer tiles */
  for (int i = 0; i < nst; i++) {
    st[i] = s->stages[i];
    kg_sstage *c = classify(st[i]) == CLS_HEAVY ? epilogue_of(s, st[i], unfused) : NULL;
    /* cpu/tile-rk: only an epilogue that carries the goto order's row blocks */
    if (c && kind == SK_TILE_RK &&
        !(kg_rz_knob(&z, st[i]->name, "order", 0) == 1 && kg_rz_knob(&z, st[i]->name, "epi", 0) == 1))
      c = NULL;
    if (c && c->id < MAX_STAGES) skip[c->id] = 1;
  }
  /* outputs back to inputs */
  for (int i = nst - 1; i >= 0 && !z.b.failed; i--) {
    kg_sstage *x = st[i];
    if (x->attach != KG_ATTACH_ROOT || !kg_schedule_find_stage(s, x->name)) continue;
    stage_class c = classify(x);
    if ((kind == SK_TILE_CW || kind == SK_TILE_RK) && skip[x->id]) continue;
    if (c == CLS_ELEM && !x->is_output) {
      if (kind == SK_INNER && !unfused && kg_rz_knob(&z, x->name, "root", 0) == 2 && at_reader_row(&z, x)) {
        row_vectorize(&z, x);
        continue;
      }
      if (!unfused && kg_rz_knob(&z, x->name, "root", 0) != 1 &&
          !kg_builder_try(&z.b, KG_STEP_COMPUTE_INLINE, x->name, NULL, 0, 0, 0, 0))
        continue;
      generic_root(&z, x);
      continue;
    }
    if (c == CLS_HEAVY && (kind == SK_TILE_CW || kind == SK_TILE_RK)) {
      /* a consumer already tiled for it (cw of a non-output stage) has attached it */
      tile_heavy(&z, x, kind);
      continue;
    }
    if (kind == SK_INNER && inner_reduction(x)) {
      inner_reduce(&z, x);
      continue;
    }
    kg_sstage *rf = c == CLS_LIGHT && kind != SK_SIMPLE ? kg_rz_rfactor_lanes(&z, x) : NULL;
    if (c == CLS_LIGHT && !x->is_output && kind != SK_SIMPLE && !unfused) {
      kg_sstage *cons = first_reader(s, x);
      if (cons && cons->attach == KG_ATTACH_ROOT && cons->nleaves > 0 && cons->leaves[0]->kind == KG_LOOP_PARALLEL &&
          !kg_builder_try(&z.b, KG_STEP_COMPUTE_AT, x->name, (const char *[]){cons->name, cons->leaves[0]->name}, 2, 0, 0,
                        0)) {
        if (rf) kg_builder_compute_at(&z.b, rf, x, x->leaves[0]);
        continue;
      }
    }
    generic_root(&z, x);
    if (rf && x->nleaves) kg_builder_compute_at(&z.b, rf, x, x->leaves[0]);
  }
  if (!z.b.failed) return 0;
  snprintf(err, errlen, "%s: %s", sk->name, z.b.err[0] ? z.b.err : "a step of the sketch does not apply");
  return -1;
}

/* Knob values. Register rows: what an unrolled row tile can be; register columns: whole vectors. The cache tiles
 * are counted in register tiles, in powers of two. */
static const int64_t vec_values[] = {1, 4, 8, 16, 32, 64};
static const int64_t reg_row_values[] = {1, 2, 3, 4, 6, 8, 12, 16};
static const int64_t tile_mult_values[] = {1, 2, 4, 8, 16, 32, 64};
static const int64_t rfactor_values[] = {1, 16, 32};

int kg_rz_rfactor_values(const kg_sstage *x, int64_t *v) {
  int n = 0;
  for (size_t k = 0; k < sizeof rfactor_values / sizeof rfactor_values[0]; k++)
    if (rfactor_values[k] == 1 || (x->nrax > 0 && rfactor_values[k] <= x->roots[x->nax + x->nrax - 1]->extent))
      v[n++] = rfactor_values[k];
  return n;
}
/* cpu/inner: vector lanes of the partial results (1: scalar chains; 32: two AVX-512 vectors per chain), the
 * independent accumulation chains, rows per parallel task, parallel parts of one row's reduction */
static const int64_t lane_values[] = {1, 4, 8, 16, 32};
static const int64_t acc_values[] = {1, 2, 3, 4, 6, 8};
static const int64_t rows_values[] = {1, 2, 4, 8, 16, 32, 64};
static const int64_t parts_values[] = {1, 2, 4, 8, 16};

/* Cache-tile multipliers (register tiles per cache tile) that keep the tile within extent for a register tile
 * of at least minreg. */
static int mult_values(int64_t extent, int64_t minreg, int64_t *out) {
  int n = 0;
  for (size_t i = 0; i < sizeof tile_mult_values / sizeof tile_mult_values[0]; i++)
    if (tile_mult_values[i] == 1 || tile_mult_values[i] * minreg <= extent) out[n++] = tile_mult_values[i];
  return n;
}

/* one: a single value, the machine's vector width (or 1 where the axis is too short for it) */
static void add_vec_knob(kg_sketch *sk, const kg_sstage *st, int one) {
  const kg_iter *last = st->roots[st->nax ? st->nax - 1 : 0];
  int64_t v[8];
  int n = 0;
  for (size_t i = 0; i < sizeof vec_values / sizeof vec_values[0]; i++)
    if (vec_values[i] == 1 || vec_values[i] <= 2 * last->extent) v[n++] = vec_values[i];
  if (one) {
    int64_t L = sk->space->cpu.lanes, w = 1;
    for (int i = 0; i < n; i++)
      if (v[i] <= L) w = v[i];
    v[0] = w, n = 1;
  }
  if (st->nax && st->nrax == 0) kg_sketch_add_stage_knob(sk, KG_KNOB_VECTOR, st->name, "vec", v, n);
}

static void add_heavy_knobs(kg_sketch *sk, const kg_schedule *s, const kg_sstage *h, sketch_kind kind) {
  int nax = h->nax, last = nax - 1;
  int64_t v[KG_KNOB_MAX_VALUES], lanes[KG_KNOB_MAX_VALUES];
  /* the lane axis: the innermost, or (cpu/tile-cw, accumulating in its own local) an axis whose operand a
   * packed copy makes contiguous (a convolution's output channels); the row axis is then any other */
  int nlanes = 0;
  if (kind == SK_TILE_CW && nax >= 2 && !epilogue_of(s, h, sk->space->unfused))
    nlanes = kg_cpu_lane_axes(h, lanes, KG_KNOB_MAX_VALUES - 1);
  if (nlanes) {
    lanes[nlanes++] = last;
    kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, h->name, "lane", lanes, nlanes);
  }
  if (nax >= 2) {
    int n = 0;
    for (int a = 0; a < (nlanes ? nax : nax - 1); a++)
      if (h->roots[a]->extent > 1) v[n++] = a;
    if (!n) v[n++] = nax - 2;
    kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, h->name, "row", v, n);
    int64_t rowmax = 1;
    for (int a = 0; a < nax - 1; a++) rowmax = h->roots[a]->extent > rowmax ? h->roots[a]->extent : rowmax;
    n = mult_values(rowmax, 1, v);
    kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, h->name, "ti", v, n);
    n = 0;
    for (size_t i = 0; i < sizeof reg_row_values / sizeof reg_row_values[0]; i++)
      if (reg_row_values[i] <= rowmax) v[n++] = reg_row_values[i];
    kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, h->name, "ri", v, n);
    kg_sketch_add_stage_knob(sk, KG_KNOB_UNROLL, h->name, "unroll", (const int64_t[]){1, 64}, 2);
  }
  int64_t le = h->roots[last]->extent;
  int64_t L = sk->space->cpu.lanes;
  int n = kg_space_vector_cols(le, L, v);
  /* register columns for every lane axis: the union of their values, in increasing order */
  for (int l = 0; l + 1 < nlanes; l++) {
    int64_t w[KG_KNOB_MAX_VALUES];
    int m = kg_space_vector_cols(h->roots[lanes[l]]->extent, L, w);
    for (int i = 0; i < m; i++) {
      int k = 0;
      while (k < n && v[k] < w[i]) k++;
      if ((k < n && v[k] == w[i]) || n == KG_KNOB_MAX_VALUES) continue;
      memmove(&v[k + 1], &v[k], sizeof v[0] * (size_t)(n - k));
      v[k] = w[i];
      n++;
    }
  }
  kg_sketch_add_stage_knob(sk, KG_KNOB_VECTOR, h->name, "rj", v, n);
  n = mult_values(le, v[0], v);
  kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, h->name, "tj", v, n);
  kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, h->name, "fuse", (const int64_t[]){1, 2, 3}, 3);
  /* cpu/tile-cw accumulating in its own local: the accumulation blocked over the first reduction axis (0: not) */
  if (kind == SK_TILE_CW && h->nrax && !epilogue_of(s, h, sk->space->unfused)) {
    int64_t red = h->roots[nax]->extent;
    n = 0;
    v[n++] = 0;
    for (int64_t b = 8; b <= 32; b *= 2)
      if (b < red) v[n++] = b;
    kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, h->name, "cb", v, n);
  }
  if (kind == SK_TILE_RK) {
    n = kg_space_pow2_values(h->roots[nax]->extent, 8, 1024, v);
    kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, h->name, "kb", v, n);
    kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, h->name, "pack", (const int64_t[]){0, 1}, 2);
    /* an f16/bf16 row operand may also be packed per register tile (packa 2); two bf16 operands may be multiplied
     * with bf16 pair dot products (dot) */
    const kg_tensor *ra = nax >= 2 ? row_operand(h->body, h->ax[nax - 2], h->ax[last]) : NULL;
    const kg_tensor *va = nax >= 2 ? vector_operand(h->body, h->ax[nax - 2], h->ax[last]) : NULL;
    int narrow_a = ra && ra->dtype != KG_DT_F32;
    if (ra && va && ra->dtype == KG_DT_BF16 && va->dtype == KG_DT_BF16 && h->nrax == 1)
      kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, h->name, "dot", (const int64_t[]){0, 1}, 2);
    if (nax >= 2) {
      kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, h->name, "order", (const int64_t[]){0, 1, 2}, 3);
      kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, h->name, "packa", (const int64_t[]){0, 1, 2}, narrow_a ? 3 : 2);
      if (epilogue_of(s, h, sk->space->unfused))
        kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, h->name, "epi", (const int64_t[]){0, 1}, 2);
    }
  }
}

/* The cpu/inner knobs of an inner-axis reduction: lanes and acc within its innermost reduction's extent; rows and
 * par only where it stays at root (an output, or an unfused space), a non-output being computed at its
 * consumer's rows. */
static void add_inner_knobs(kg_sketch *sk, const kg_sstage *x) {
  int64_t rext = x->roots[x->nax + x->nrax - 1]->extent, v[KG_KNOB_MAX_VALUES];
  int n = 0;
  for (size_t k = 0; k < sizeof lane_values / sizeof lane_values[0]; k++)
    if (lane_values[k] <= rext) v[n++] = lane_values[k];
  kg_sketch_add_stage_knob(sk, KG_KNOB_VECTOR, x->name, "lanes", v, n);
  n = 0;
  for (size_t k = 0; k < sizeof acc_values / sizeof acc_values[0]; k++)
    if (acc_values[k] <= rext) v[n++] = acc_values[k];
  kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, x->name, "acc", v, n);
  kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, x->name, "unroll", (const int64_t[]){0, 1}, 2);
  kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, x->name, "combine", (const int64_t[]){0, 1}, 2);
  if (x->nax == 0 || !(x->is_output || sk->space->unfused)) return;
  int64_t rows = 1;
  for (int a = 0; a < x->nax; a++) rows *= x->roots[a]->extent;
  n = 0;
  for (size_t k = 0; k < sizeof rows_values / sizeof rows_values[0]; k++)
    if (rows_values[k] == 1 || rows_values[k] < rows) v[n++] = rows_values[k];
  kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, x->name, "rows", v, n);
  kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, x->name, "par", (const int64_t[]){0, 1}, 2);
  n = 0;
  for (size_t k = 0; k < sizeof parts_values / sizeof parts_values[0]; k++)
    if (parts_values[k] == 1 || parts_values[k] * 4 <= rext) v[n++] = parts_values[k];
  kg_sketch_add_stage_knob(sk, KG_KNOB_TILE, x->name, "parts", v, n);
}

/* heavy: the program has a heavy stage (the tiled sketches exist). cpu/simple's heavy stage then runs naive, a
 * hundred times slower than the tiled sketches' whatever its elementwise stages' vector widths or stores, so it is
 * a fallback of one point (those widths the machine's lanes, no stream knob), one trial: with its knobs an MLP
 * layer's 48-trial tunings gave it 7-12 trials of about 10 s each. */
static void add_sketch(kg_space *sp, const kg_schedule *s, const char *name, sketch_kind kind, int heavy) {
  kg_sketch *sk = kg_space_add_sketch(sp, name, realize, (void *)(intptr_t)kind);
  if (!sk) return;
  sk->fallback = kind == SK_SIMPLE && heavy;
  for (int i = 0; i < s->nstages; i++) {
    const kg_sstage *x = s->stages[i];
    stage_class c = classify(x);
    /* cpu/inner: inlined or computed at its reader's row (2), never a pass of its own. In cpu/tile-cw, read by
     * the heavy stage (a convolution's padding): at root only, since inlined it is recomputed, guarded, inside the
     * register tile's reduction at every reuse (conv2d picks ran 1.8x and 21x slower so, side by side); in
     * cpu/tile-rk the operand's packed copy takes it in once per block, and inlined ran 1.1x faster there
     * (bench/results/pad-root-avx2-2026-12-07.md) */
    if (c == CLS_ELEM && !x->is_output && kind != SK_SIMPLE && !sp->unfused) {
      const kg_sstage *r = first_reader(s, x);
      if (kind == SK_TILE_CW && r && classify(r) == CLS_HEAVY)
        kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, x->name, "root", (const int64_t[]){1}, 1);
      else
        kg_sketch_add_stage_knob(sk, KG_KNOB_CHOICE, x->name, "root",
                                 kind == SK_INNER ? (const int64_t[]){0, 2} : (const int64_t[]){0, 1}, 2);
    }
    if (c == CLS_HEAVY && (kind == SK_TILE_CW || kind == SK_TILE_RK)) add_heavy_knobs(sk, s, x, kind);
    else add_vec_knob(sk, x, sk->fallback);
    if (kind == SK_INNER && inner_reduction(x)) {
      add_inner_knobs(sk, x);
      continue;
    }
    if (c == CLS_LIGHT && kind != SK_SIMPLE) {
      int64_t v[8];
      int n = kg_rz_rfactor_values(x, v);
      kg_sketch_add_stage_knob(sk, KG_KNOB_VECTOR, x->name, "rf", v, n);
    }
  }
}

int kg_sketches_cpu(kg_space *sp) {
  kg_schedule *s = kg_schedule_new(sp->prog);
  int before = sp->nsketches, heavy = 0, light = 0, inner = 0;
  for (int i = 0; i < s->nstages; i++) {
    stage_class c = classify(s->stages[i]);
    heavy |= c == CLS_HEAVY;
    light |= c == CLS_LIGHT && !s->stages[i]->is_output;
    inner |= inner_reduction(s->stages[i]);
  }
  add_sketch(sp, s, "cpu/simple", SK_SIMPLE, heavy);
  if (heavy) {
    add_sketch(sp, s, "cpu/tile-cw", SK_TILE_CW, heavy);
    add_sketch(sp, s, "cpu/tile-rk", SK_TILE_RK, heavy);
  }
  if (light) add_sketch(sp, s, "cpu/rows", SK_ROWS, heavy);
  if (inner) add_sketch(sp, s, "cpu/inner", SK_INNER, heavy);
  kg_sketches_cpu_elem(sp);
  kg_sketches_cpu_attn(sp);
  kg_schedule_free(s);
  return sp->nsketches - before;
}
