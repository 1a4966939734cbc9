/* Loop primitives (split, tile, reorder, fuse, unroll, vectorize, parallel, bind) and placement primitives
 * (compute_at, compute_inline, compute_root), plus the dispatcher. Each one checks all of its preconditions
 * before it changes anything, so a failed step leaves the schedule exactly as it was. */
#include <stdio.h>
#include <string.h>
#include "sched_impl.h"

#define FAIL(...) return kg_sched_fail(err, errlen, __VA_ARGS__)

static const char *step_name(const kg_step *st) { return kg_step_names[st->kind]; }

/* Finds the leaf `name` of stage st, or formats the error. */
static kg_iter *find_leaf(const kg_sstage *st, const char *prim, const char *name, char *err, size_t errlen) {
  kg_iter *it = kg_sstage_find_iter(st, name);
  if (!it) {
    kg_sched_fail(err, errlen, "%s: stage %s: no loop named %s", prim, st->name, name);
    return NULL;
  }
  if (kg_sstage_leaf_index(st, it) < 0) {
    kg_sched_fail(err, errlen, "%s: stage %s: loop %s is not a leaf loop (it was %s)", prim, st->name, name,
                  it->fused_into ? "fused" : "split");
    return NULL;
  }
  return it;
}

static void retarget_attachments(kg_schedule *s, const kg_sstage *st, const kg_iter *from, kg_iter *to) {
  for (int i = 0; i < s->nstages; i++) {
    kg_sstage *x = s->stages[i];
    if (x->attach == KG_ATTACH_AT && x->attach_stage == st && x->attach_iter == from) x->attach_iter = to;
  }
}

static int check_split(const kg_sstage *st, const char *prim, const kg_iter *it, int64_t f, char *err,
                       size_t errlen) {
  if (it->kind != KG_LOOP_SERIAL)
    FAIL("%s: stage %s: loop %s is already %s", prim, st->name, it->name, kg_loop_kind_names[it->kind]);
  if (it->pipeline) FAIL("%s: stage %s: loop %s is pipelined", prim, st->name, it->name);
  if (it->tensorized) FAIL("%s: stage %s: loop %s is tensorized", prim, st->name, it->name);
  if (f < 1) FAIL("%s: stage %s: loop %s: factor %lld must be at least 1", prim, st->name, it->name, (long long)f);
  /* loop extents are at most 2^31-1 (the checker's bound on a dimension), so a larger factor is meaningless and
   * would make the split's arithmetic overflow */
  if (f > INT32_MAX)
    FAIL("%s: stage %s: loop %s: factor %lld is larger than %d", prim, st->name, it->name, (long long)f, INT32_MAX);
  if (strlen(it->name) + 2 > KG_MAX_LOOP_NAME)
    FAIL("%s: stage %s: loop %.40s...: the new loops' names would be too long (max %d characters)", prim, st->name,
         it->name, KG_MAX_LOOP_NAME);
  char name[KG_MAX_LOOP_NAME + 1];
  for (int k = 0; k < 2; k++) {
    snprintf(name, sizeof name, "%s.%c", it->name, k ? 'i' : 'o');
    if (kg_sstage_find_iter(st, name))
      FAIL("%s: stage %s: loop %s: a loop named %s already exists", prim, st->name, it->name, name);
  }
  return 0;
}

/* Splits leaf it (already checked); returns the outer loop, *inner the inner one. */
static kg_iter *do_split(kg_schedule *s, kg_sstage *st, kg_iter *it, int64_t f, kg_iter **inner) {
  char *on = kg_arena_printf(&s->arena, "%s.o", it->name), *in = kg_arena_printf(&s->arena, "%s.i", it->name);
  kg_iter *o = kg_sched_new_iter(s, st, on, it->extent / f + (it->extent % f != 0), it->is_reduce, KG_ITER_SPLIT_OUTER);
  kg_iter *i = kg_sched_new_iter(s, st, in, f, it->is_reduce, KG_ITER_SPLIT_INNER);
  o->split_parent = i->split_parent = it;
  o->factor = i->factor = f;
  it->split_outer = o;
  it->split_inner = i;
  int pos = kg_sstage_leaf_index(st, it);
  KG_PUSH(&s->arena, st->leaves, st->nleaves, st->capleaves, NULL);
  memmove(&st->leaves[pos + 2], &st->leaves[pos + 1], sizeof(kg_iter *) * (size_t)(st->nleaves - pos - 2));
  st->leaves[pos] = o;
  st->leaves[pos + 1] = i;
  /* A stage computed inside `it` is still computed once per point of it: now the innermost of the pair. */
  retarget_attachments(s, st, it, i);
  *inner = i;
  return o;
}

static void do_reorder(kg_sstage *st, kg_iter **order, int n) {
  int pos[KG_STEP_MAX_NAMES];
  for (int k = 0; k < n; k++) pos[k] = kg_sstage_leaf_index(st, order[k]);
  /* the loops take the slots they occupy now, in ascending order */
  for (int a = 1; a < n; a++)
    for (int b = a; b > 0 && pos[b - 1] > pos[b]; b--) {
      int t = pos[b];
      pos[b] = pos[b - 1];
      pos[b - 1] = t;
    }
  for (int k = 0; k < n; k++) st->leaves[pos[k]] = order[k];
}

/* split S L F: requires L a serial leaf, F >= 1 and the names L.o / L.i free. */
static int prim_split(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  kg_iter *it = find_leaf(st, "split", step->names[0], err, errlen);
  if (!it || check_split(st, "split", it, step->ints[0], err, errlen)) return -1;
  kg_iter *in;
  do_split(s, st, it, step->ints[0], &in);
  return 0;
}

/* tile S L1 L2 F1 F2: split L1 F1, split L2 F2, reorder L1.o L2.o L1.i L2.i; L1 and L2 distinct serial leaves. */
static int prim_tile(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  kg_iter *a = find_leaf(st, "tile", step->names[0], err, errlen);
  if (!a) return -1;
  kg_iter *b = find_leaf(st, "tile", step->names[1], err, errlen);
  if (!b) return -1;
  if (a == b) FAIL("tile: stage %s: loop %s is named twice", st->name, a->name);
  if (check_split(st, "tile", a, step->ints[0], err, errlen) ||
      check_split(st, "tile", b, step->ints[1], err, errlen))
    return -1;
  kg_iter *ai, *bi;
  kg_iter *ao = do_split(s, st, a, step->ints[0], &ai);
  kg_iter *bo = do_split(s, st, b, step->ints[1], &bi);
  kg_iter *order[4] = {ao, bo, ai, bi};
  do_reorder(st, order, 4);
  return 0;
}

/* reorder S L...: at least two distinct leaves; they take their current slots in the order given. */
static int prim_reorder(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  kg_iter *order[KG_STEP_MAX_NAMES];
  if (step->nnames < 2) FAIL("reorder: stage %s: needs at least two loops", st->name);
  for (int k = 0; k < step->nnames; k++) {
    order[k] = find_leaf(st, "reorder", step->names[k], err, errlen);
    if (!order[k]) return -1;
    for (int j = 0; j < k; j++)
      if (order[j] == order[k]) FAIL("reorder: stage %s: loop %s is named twice", st->name, order[k]->name);
  }
  kg_iter *before[KG_STEP_MAX_NAMES];
  memcpy(before, order, sizeof(kg_iter *) * (size_t)step->nnames);
  for (int a = 1; a < step->nnames; a++) /* the loops in their current order: what undoes the reorder */
    for (int b = a; b > 0 && kg_sstage_leaf_index(st, before[b - 1]) > kg_sstage_leaf_index(st, before[b]); b--) {
      kg_iter *t = before[b];
      before[b] = before[b - 1];
      before[b - 1] = t;
    }
  do_reorder(st, order, step->nnames);
  const kg_sstage *broken = kg_sched_broken_attachment(s, NULL);
  if (broken) {
    do_reorder(st, before, step->nnames);
    FAIL("reorder: stage %s: stage %s is computed at %s.%s and a stage reading it would leave that loop", st->name,
         broken->name, broken->attach_stage->name, broken->attach_iter->name);
  }
  return 0;
}

/* fuse S L1 L2: L1 immediately outside L2, both spatial or both reduction, both serial, nothing computed at L1. */
static int prim_fuse(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  kg_iter *a = find_leaf(st, "fuse", step->names[0], err, errlen);
  if (!a) return -1;
  kg_iter *b = find_leaf(st, "fuse", step->names[1], err, errlen);
  if (!b) return -1;
  int pa = kg_sstage_leaf_index(st, a), pb = kg_sstage_leaf_index(st, b);
  if (pb != pa + 1)
    FAIL("fuse: stage %s: loop %s is not immediately outside loop %s", st->name, a->name, b->name);
  if (a->is_reduce != b->is_reduce)
    FAIL("fuse: stage %s: loop %s is a %s loop but loop %s is not", st->name, a->is_reduce ? a->name : b->name,
         "reduction", a->is_reduce ? b->name : a->name);
  const kg_iter *ann = a->kind != KG_LOOP_SERIAL ? a : b->kind != KG_LOOP_SERIAL ? b : NULL;
  if (ann) FAIL("fuse: stage %s: loop %s is already %s", st->name, ann->name, kg_loop_kind_names[ann->kind]);
  if (a->pipeline || b->pipeline)
    FAIL("fuse: stage %s: loop %s is pipelined", st->name, a->pipeline ? a->name : b->name);
  if (a->tensorized || b->tensorized)
    FAIL("fuse: stage %s: loop %s is tensorized", st->name, a->tensorized ? a->name : b->name);
  const kg_sstage *x = kg_sched_attached_at(s, st, a);
  if (x) FAIL("fuse: stage %s: loop %s: stage %s is computed at it", st->name, a->name, x->name);
  if (a->extent > INT64_MAX / (b->extent ? b->extent : 1))
    FAIL("fuse: stage %s: loop %s: fused extent overflows", st->name, a->name);
  if (strlen(a->name) + 1 + strlen(b->name) > KG_MAX_LOOP_NAME)
    FAIL("fuse: stage %s: loops %.40s... and %.40s...: the fused loop's name would be too long (max %d characters)",
         st->name, a->name, b->name, KG_MAX_LOOP_NAME);
  char *name = kg_arena_printf(&s->arena, "%s*%s", a->name, b->name);
  if (kg_sstage_find_iter(st, name))
    FAIL("fuse: stage %s: loop %s: a loop named %s already exists", st->name, a->name, name);
  kg_iter *f = kg_sched_new_iter(s, st, name, a->extent * b->extent, a->is_reduce, KG_ITER_FUSED);
  f->fuse_outer = a;
  f->fuse_inner = b;
  a->fused_into = b->fused_into = f;
  st->leaves[pa] = f;
  memmove(&st->leaves[pb], &st->leaves[pb + 1], sizeof(kg_iter *) * (size_t)(st->nleaves - pb - 1));
  st->nleaves--;
  retarget_attachments(s, st, b, f);
  return 0;
}

/* unroll / vectorize / parallel / bind S L [TAG]: L a serial leaf; vectorize and parallel need a spatial loop
 * (any extent: a stage's extents at schedule time are its full domain, and compute_at may shrink them to a
 * small region, so the printers decide how wide their vectors are); bind needs a known tag not used by another leaf, and a spatial loop (a
 * reduction is spread over threads by rfactor-ing it first). */
static int prim_annotate(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  (void)s;
  const char *prim = step_name(step);
  kg_iter *it = find_leaf(st, prim, step->names[0], err, errlen);
  if (!it) return -1;
  if (it->kind != KG_LOOP_SERIAL)
    FAIL("%s: stage %s: loop %s is already %s", prim, st->name, it->name, kg_loop_kind_names[it->kind]);
  if (it->pipeline) FAIL("%s: stage %s: loop %s is pipelined", prim, st->name, it->name);
  if (it->tensorized) FAIL("%s: stage %s: loop %s is tensorized", prim, st->name, it->name);
  kg_loop_kind kind = KG_LOOP_UNROLLED;
  kg_thread_tag tag = KG_THREAD_NONE;
  switch (step->kind) {
  case KG_STEP_UNROLL:
    break;
  case KG_STEP_VECTORIZE:
    if (it->is_reduce) FAIL("vectorize: stage %s: loop %s is a reduction loop", st->name, it->name);
    kind = KG_LOOP_VECTORIZED;
    break;
  case KG_STEP_PARALLEL:
    if (it->is_reduce) FAIL("parallel: stage %s: loop %s is a reduction loop", st->name, it->name);
    kind = KG_LOOP_PARALLEL;
    break;
  case KG_STEP_BIND: {
    const char *tn = step->nnames > 1 ? step->names[1] : "";
    for (int t = 1; t < KG_THREAD_COUNT; t++)
      if (strcmp(tn, kg_thread_tag_names[t]) == 0) tag = (kg_thread_tag)t;
    if (tag == KG_THREAD_NONE) FAIL("bind: stage %s: loop %s: unknown thread tag '%s'", st->name, it->name, tn);
    /* a reduction loop bound to a thread index is a cross-thread reduction; blocks and vthreads cannot share one */
    if (it->is_reduce && !kg_thread_tag_is_thread(tag))
      FAIL("bind: stage %s: loop %s is a reduction loop; only threadIdx.x/y/z can split it (a cross-thread "
           "reduction)", st->name, it->name);
    for (int l = 0; l < st->nleaves; l++)
      if (st->leaves[l]->kind == KG_LOOP_BOUND && st->leaves[l]->tag == tag)
        FAIL("bind: stage %s: loop %s: %s is already bound to loop %s", st->name, it->name, tn,
             st->leaves[l]->name);
    kind = KG_LOOP_BOUND;
    break;
  }
  default:
    return kg_sched_fail(err, errlen, "%s: not an annotation", prim);
  }
  it->kind = kind;
  it->tag = tag;
  return 0;
}

/* Is stage x computed, directly or through other attached stages, inside a loop of stage p? */
static int attached_inside(const kg_sstage *x, const kg_sstage *p) {
  for (int guard = 0; x && x->attach == KG_ATTACH_AT && guard < 1 << 16; guard++) {
    if (x->attach_stage == p) return 1;
    x = x->attach_stage;
  }
  return 0;
}

/* compute_at P C L: P not an output and not C; C not inlined and not computed inside P; L a leaf of C; P has
 * consumers (non-inlined stages reading it directly or through inlined stages), each C or computed inside C at
 * L or deeper; and no other attached stage loses its attachment because P stops being inlined. */
static int prim_compute_at(kg_schedule *s, kg_sstage *p, const kg_step *step, char *err, size_t errlen) {
  kg_sstage *c = kg_schedule_find_stage(s, step->names[0]);
  if (!c) FAIL("compute_at: stage %s: no stage named %s", p->name, step->names[0]);
  kg_iter *l = find_leaf(c, "compute_at", step->names[1], err, errlen);
  if (!l) return -1;
  if (p->is_output) FAIL("compute_at: stage %s: is an output (loop %s.%s)", p->name, c->name, l->name);
  if (c == p) FAIL("compute_at: stage %s: cannot be computed at its own loop %s", p->name, l->name);
  if (c->attach == KG_ATTACH_INLINE)
    FAIL("compute_at: stage %s: stage %s is inlined (loop %s)", p->name, c->name, l->name);
  if (attached_inside(c, p))
    FAIL("compute_at: stage %s: stage %s is computed inside %s, loop %s would make a cycle", p->name, c->name,
         p->name, l->name);
  kg_sched_hyp h = {p, 0};
  const kg_sstage *other = kg_sched_attach_conflict(s, p, c, l, &h);
  if (other == c) FAIL("compute_at: stage %s: stage %s does not read it (loop %s)", p->name, c->name, l->name);
  if (other)
    FAIL("compute_at: stage %s: it is also read by stage %s, which is not computed inside %s at loop %s", p->name,
         other->name, c->name, l->name);
  const kg_sstage *broken = kg_sched_broken_attachment(s, &h);
  if (broken)
    FAIL("compute_at: stage %s: stage %s is computed at %s.%s and would gain another consumer (loop %s)", p->name,
         broken->name, broken->attach_stage->name, broken->attach_iter->name, l->name);
  p->attach = KG_ATTACH_AT;
  p->attach_stage = c;
  p->attach_iter = l;
  return 0;
}

/* compute_inline P: not an output, no reduction, read by some stage, nothing computed at its loops, and every
 * attached stage keeps its sole consumer once P's readers read through it. */
static int prim_compute_inline(kg_schedule *s, kg_sstage *p, const kg_step *step, char *err, size_t errlen) {
  (void)step;
  if (p->is_output) FAIL("compute_inline: stage %s: is an output", p->name);
  if (p->red != KG_RED_NONE)
    FAIL("compute_inline: stage %s: is a reduction (loop %s)", p->name,
         p->nrax ? p->rax[0]->name : "?");
  if (p->attach == KG_ATTACH_INLINE) FAIL("compute_inline: stage %s: is already inlined", p->name);
  const kg_sstage *x = kg_sched_attached_at(s, p, NULL);
  if (x)
    FAIL("compute_inline: stage %s: stage %s is computed at its loop %s", p->name, x->name, x->attach_iter->name);
  int read = 0;
  for (int i = 0; i < s->nstages && !read; i++) read = kg_sched_expr_reads(s->stages[i]->body, p->out);
  if (!read) FAIL("compute_inline: stage %s: no stage reads it", p->name);
  for (int i = 0; i < s->nstages; i++)
    if ((s->stages[i]->mma[0] || s->stages[i]->bfdot[0]) && kg_sched_expr_reads(s->stages[i]->body, p->out))
      FAIL("compute_inline: stage %s: its reader %s is tensorized (tensor instructions load their operands from memory)",
           p->name, s->stages[i]->name);
  kg_sched_hyp h = {p, 1};
  const kg_sstage *broken = kg_sched_broken_attachment(s, &h);
  if (broken)
    FAIL("compute_inline: stage %s: stage %s is computed at %s.%s and would gain another consumer", p->name,
         broken->name, broken->attach_stage->name, broken->attach_iter->name);
  p->attach = KG_ATTACH_INLINE;
  p->attach_stage = NULL;
  p->attach_iter = NULL;
  return 0;
}

/* compute_root P: P computed at a loop or inlined; un-inlining must not take a consumer from an attached stage. */
static int prim_compute_root(kg_schedule *s, kg_sstage *p, const kg_step *step, char *err, size_t errlen) {
  (void)step;
  if (p->attach == KG_ATTACH_ROOT) FAIL("compute_root: stage %s: is already computed at root", p->name);
  kg_sched_hyp h = {p, 0};
  const kg_sstage *broken = kg_sched_broken_attachment(s, &h);
  if (broken)
    FAIL("compute_root: stage %s: stage %s is computed at %s.%s and would gain another consumer", p->name,
         broken->name, broken->attach_stage->name, broken->attach_iter->name);
  p->attach = KG_ATTACH_ROOT;
  p->attach_stage = NULL;
  p->attach_iter = NULL;
  return 0;
}

/* stream P: P computed at root, with no reduction (each element stored once), writing a program output that no
 * stage reads (non-temporal stores leave the data in memory, not in cache), not already streamed. */
static int prim_stream(kg_schedule *s, kg_sstage *p, const kg_step *step, char *err, size_t errlen) {
  (void)step;
  if (p->stream) FAIL("stream: stage %s: is already streamed", p->name);
  if (!p->is_output) FAIL("stream: stage %s: is not an output (its values are read again)", p->name);
  if (p->attach != KG_ATTACH_ROOT) FAIL("stream: stage %s: is not computed at root", p->name);
  if (p->nrax) FAIL("stream: stage %s: is a reduction (loop %s): its elements are stored more than once", p->name,
                    p->rax[0]->name);
  for (int i = 0; i < s->nstages; i++)
    if (kg_sched_expr_reads(s->stages[i]->body, p->out))
      FAIL("stream: stage %s: stage %s reads it", p->name, s->stages[i]->name);
  p->stream = 1;
  return 0;
}

/* pad P N: P a shared-scope stage (cache_read or cache_write to shared memory) of two or more dimensions, not yet
 * padded, 1 <= N <= KG_SCHED_MAX_PAD. Its region buffer's rows are then N floats longer than their data: only the
 * storage changes, never what is computed, so any later step stays legal. */
static int prim_pad(kg_sstage *p, const kg_step *step, char *err, size_t errlen) {
  int64_t n = step->ints[0];
  if (p->scope != KG_SCOPE_SHARED)
    FAIL("pad: stage %s: is not in shared memory (scope %s): only shared rows are padded", p->name,
         kg_scope_names[p->scope]);
  if (p->out->ndim < 2) FAIL("pad: stage %s: has one dimension, no rows to pad", p->name);
  if (n < 1 || n > KG_SCHED_MAX_PAD) FAIL("pad: stage %s: %lld floats, want 1 to %d", p->name, (long long)n,
                                          KG_SCHED_MAX_PAD);
  if (p->pad) FAIL("pad: stage %s: is already padded (%lld floats)", p->name, (long long)p->pad);
  p->pad = n;
  return 0;
}

/* widen P: P is a cache_read copy of an f16/bf16 tensor; it stores its elements as f32 instead. Widening is exact,
 * so what is computed does not change: the copy converts each element once, and the readers, which compute in f32
 * anyway, load f32. On a CPU without bf16/f16 arithmetic this takes the conversions out of a register tile's inner
 * loop (a packed operand is converted once per tile and reused by every row or column of it), at twice the copy's
 * memory; on CUDA a widened shared copy takes twice the shared memory and is no asynchronous copy (cp.async moves
 * bytes, it does not convert), and the tensor cores need the narrow operands (tensorize refuses widened ones). */
static int prim_widen(kg_sstage *p, char *err, size_t errlen) {
  if (p->origin != KG_ORIGIN_CACHE_READ)
    FAIL("widen: stage %s: is not a cache_read copy (widening another stage would change the values it stores)", p->name);
  if (p->out->dtype == KG_DT_F32) FAIL("widen: stage %s: is already f32", p->name);
  p->out->dtype = KG_DT_F32;
  return 0;
}

/* launch_bounds P N: P at root (on CUDA a kernel of its own), 1 <= N <= KG_SCHED_MAX_MIN_BLOCKS, not yet bounded. A
 * hint to the CUDA compiler, which then keeps each thread's registers within what N blocks leave it (spilling if
 * need be): what is computed does not change. */
static int prim_launch_bounds(kg_sstage *p, const kg_step *step, char *err, size_t errlen) {
  int64_t n = step->ints[0];
  if (p->attach != KG_ATTACH_ROOT) FAIL("launch_bounds: stage %s: is not computed at root (no kernel of its own)",
                                        p->name);
  if (n < 1 || n > KG_SCHED_MAX_MIN_BLOCKS)
    FAIL("launch_bounds: stage %s: %lld blocks, want 1 to %d", p->name, (long long)n, KG_SCHED_MAX_MIN_BLOCKS);
  if (p->min_blocks) FAIL("launch_bounds: stage %s: is already bounded (%d blocks)", p->name, p->min_blocks);
  p->min_blocks = (int)n;
  return 0;
}

/* pipeline S L D: L a serial leaf of S, not yet pipelined, with a shared-scope stage computed at it (the ring's
 * contents); 2 <= D <= KG_SCHED_MAX_PIPELINE. Only the storage and the order of the copies change, never what is
 * computed; lowering (lower/pipeline.c) checks the loop's body once more, since later steps may move its stages. */
static int prim_pipeline(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  kg_iter *it = find_leaf(st, "pipeline", step->names[0], err, errlen);
  if (!it) return -1;
  int64_t d = step->ints[0];
  if (it->kind != KG_LOOP_SERIAL)
    FAIL("pipeline: stage %s: loop %s is %s: only a serial loop steps through a ring", st->name, it->name,
         kg_loop_kind_names[it->kind]);
  if (it->pipeline) FAIL("pipeline: stage %s: loop %s is already pipelined (%d stages)", st->name, it->name,
                         it->pipeline);
  if (d < 2 || d > KG_SCHED_MAX_PIPELINE)
    FAIL("pipeline: stage %s: loop %s: %lld stages, want 2 to %d", st->name, it->name, (long long)d,
         KG_SCHED_MAX_PIPELINE);
  int shared = 0;
  for (int i = 0; i < s->nstages; i++) {
    const kg_sstage *x = s->stages[i];
    shared |= x->attach == KG_ATTACH_AT && x->attach_stage == st && x->attach_iter == it && x->scope == KG_SCOPE_SHARED;
  }
  if (!shared) FAIL("pipeline: stage %s: loop %s: no shared-memory stage is computed at it", st->name, it->name);
  it->pipeline = (int)d;
  return 0;
}

int kg_schedule_apply(kg_schedule *s, const kg_step *step, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if ((unsigned)step->kind >= KG_STEP_COUNT) FAIL("unknown step kind %d", (int)step->kind);
  if (s->trace.nsteps >= KG_TRACE_MAX_STEPS) FAIL("too many steps: a schedule holds at most %d", KG_TRACE_MAX_STEPS);
  const char *prim = step_name(step);
  /* the argument counts a parsed trace guarantees; a hand-built step may still get them wrong */
  const kg_step_form *form = &kg_step_forms[step->kind];
  if (!step->stage) FAIL("%s: no stage given", prim);
  if (step->nnames < form->min_names || step->nnames > form->max_names || step->nints != form->nints)
    FAIL("%s: stage %s: wrong number of arguments", prim, step->stage);
  for (int i = 0; i < step->nnames; i++)
    if (!step->names[i]) FAIL("%s: stage %s: missing name", prim, step->stage);
  int rc;
  if (step->kind == KG_STEP_CACHE_READ) {
    rc = kg_sched_cache_read(s, step, err, errlen);
  } else {
    kg_sstage *st = kg_schedule_find_stage(s, step->stage);
    if (!st) FAIL("%s: stage %s: no such stage", prim, step->stage);
    switch (step->kind) {
    case KG_STEP_SPLIT: rc = prim_split(s, st, step, err, errlen); break;
    case KG_STEP_TILE: rc = prim_tile(s, st, step, err, errlen); break;
    case KG_STEP_REORDER: rc = prim_reorder(s, st, step, err, errlen); break;
    case KG_STEP_FUSE: rc = prim_fuse(s, st, step, err, errlen); break;
    case KG_STEP_UNROLL:
    case KG_STEP_VECTORIZE:
    case KG_STEP_PARALLEL:
    case KG_STEP_BIND: rc = prim_annotate(s, st, step, err, errlen); break;
    case KG_STEP_COMPUTE_AT: rc = prim_compute_at(s, st, step, err, errlen); break;
    case KG_STEP_COMPUTE_INLINE: rc = prim_compute_inline(s, st, step, err, errlen); break;
    case KG_STEP_COMPUTE_ROOT: rc = prim_compute_root(s, st, step, err, errlen); break;
    case KG_STEP_CACHE_WRITE: rc = kg_sched_cache_write(s, st, step, err, errlen); break;
    case KG_STEP_RFACTOR: rc = kg_sched_rfactor(s, st, step, err, errlen); break;
    case KG_STEP_REORDER_STORAGE: rc = kg_sched_reorder_storage(s, st, step, err, errlen); break;
    case KG_STEP_STREAM: rc = prim_stream(s, st, step, err, errlen); break;
    case KG_STEP_PAD: rc = prim_pad(st, step, err, errlen); break;
    case KG_STEP_LAUNCH_BOUNDS: rc = prim_launch_bounds(st, step, err, errlen); break;
    case KG_STEP_PIPELINE: rc = prim_pipeline(s, st, step, err, errlen); break;
    case KG_STEP_TENSORIZE: rc = kg_sched_tensorize(s, st, step, err, errlen); break;
    case KG_STEP_WIDEN: rc = prim_widen(st, err, errlen); break;
    case KG_STEP_BFDOT: rc = kg_sched_bfdot(s, st, step, err, errlen); break;
    case KG_STEP_SPLIT_STORAGE: rc = kg_sched_split_storage(s, st, step, err, errlen); break;
    default: rc = kg_sched_fail(err, errlen, "%s: unsupported", prim); break;
    }
  }
  if (rc == 0) kg_trace_push(&s->trace, step);
  return rc;
}

int kg_schedule_apply_trace(kg_schedule *s, const kg_trace *t, char *err, size_t errlen) {
  char msg[512];
  for (int i = 0; i < t->nsteps; i++) {
    const kg_step *step = &t->steps[i];
    if (kg_schedule_apply(s, step, msg, sizeof msg) != 0)
      return step->line > 0 ? kg_sched_fail(err, errlen, "line %d: %s", step->line, msg)
                            : kg_sched_fail(err, errlen, "step %d: %s", i + 1, msg);
  }
  return 0;
}
