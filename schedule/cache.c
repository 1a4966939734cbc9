/* Storage primitives that create stages: cache_read, cache_write and rfactor. Bodies they rewrite are copied
 * into the schedule's arena; expressions owned by the program are never mutated. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/xalloc.h"
#include "sched_impl.h"

#define FAIL(...) return kg_sched_fail(err, errlen, __VA_ARGS__)

/* ---- expression building and rewriting ---- */

static kg_expr *new_expr(kg_schedule *s, kg_expr_kind kind, kg_type ty) {
  kg_expr *e = KG_NEW(&s->arena, kg_expr);
  e->kind = kind;
  e->ty = ty;
  return e;
}

static kg_expr *expr_int(kg_schedule *s, int64_t v) {
  kg_expr *e = new_expr(s, KG_EXPR_NUM, KG_TY_INT);
  e->num.i = v;
  e->num.f = (double)v;
  e->num.is_int = 1;
  return e;
}

static kg_expr *expr_f32(kg_schedule *s, double v) {
  kg_expr *e = new_expr(s, KG_EXPR_NUM, KG_TY_F32);
  e->num.f = v;
  return e;
}

static kg_expr *expr_ivar(kg_schedule *s, kg_ivar *iv) {
  kg_expr *e = new_expr(s, KG_EXPR_IVAR, KG_TY_INT);
  e->var.name = iv->name;
  e->var.iv = iv;
  return e;
}

static kg_expr *expr_binary(kg_schedule *s, kg_op op, kg_type ty, kg_expr *a, kg_expr *b) {
  kg_expr *e = new_expr(s, KG_EXPR_BINARY, ty);
  e->op.op = op;
  e->op.a = a;
  e->op.b = b;
  return e;
}

/* t[iv0, iv1, ...] */
static kg_expr *expr_read(kg_schedule *s, kg_tensor *t, kg_ivar **ivs, int n) {
  kg_expr *e = new_expr(s, KG_EXPR_READ, KG_TY_F32);
  e->read.name = t->name;
  e->read.tensor = t;
  e->read.n = n;
  e->read.idx = KG_NEW_ARRAY(&s->arena, kg_expr *, n > 0 ? n : 1);
  for (int i = 0; i < n; i++) e->read.idx[i] = expr_ivar(s, ivs[i]);
  return e;
}

/* What a rewrite replaces: reads of one tensor by reads of another, and ivars (by id) by expressions. */
typedef struct rewrite {
  kg_schedule *s;
  const kg_tensor *from;
  kg_tensor *to;
  const kg_ivar **ivs; /* ivs[k] is replaced by subst[k] */
  kg_expr **subst;
  int nsubst;
} rewrite;

/* A deep copy of e with the replacements applied (nodes keep their positions and types). */
static kg_expr *rewrite_expr(const rewrite *rw, const kg_expr *e) {
  if (!e) return NULL;
  if (e->kind == KG_EXPR_IVAR)
    for (int k = 0; k < rw->nsubst; k++)
      if (e->var.iv == rw->ivs[k]) {
        /* a fresh copy per use, so that bodies stay trees */
        rewrite plain = {rw->s, NULL, NULL, NULL, NULL, 0};
        return rewrite_expr(&plain, rw->subst[k]);
      }
  kg_expr *c = KG_NEW(&rw->s->arena, kg_expr);
  *c = *e;
  switch (e->kind) {
  case KG_EXPR_READ:
    if (rw->from && e->read.tensor == rw->from) {
      c->read.tensor = rw->to;
      c->read.name = rw->to->name;
    }
    c->read.idx = KG_NEW_ARRAY(&rw->s->arena, kg_expr *, e->read.n > 0 ? e->read.n : 1);
    for (int i = 0; i < e->read.n; i++) c->read.idx[i] = rewrite_expr(rw, e->read.idx[i]);
    break;
  case KG_EXPR_UNARY:
  case KG_EXPR_BINARY:
    c->op.a = rewrite_expr(rw, e->op.a);
    c->op.b = rewrite_expr(rw, e->op.b);
    break;
  case KG_EXPR_CALL:
    c->call.args = KG_NEW_ARRAY(&rw->s->arena, kg_expr *, e->call.n > 0 ? e->call.n : 1);
    for (int i = 0; i < e->call.n; i++) c->call.args[i] = rewrite_expr(rw, e->call.args[i]);
    break;
  case KG_EXPR_REDUCE: /* stages contain none */
    c->reduce.body = rewrite_expr(rw, e->reduce.body);
    break;
  default:
    break;
  }
  return c;
}

/* ---- new objects ---- */

static kg_ivar *new_ivar(kg_schedule *s, const char *name, int is_reduce, int64_t lo, int64_t extent) {
  kg_ivar *iv = KG_NEW(&s->arena, kg_ivar);
  iv->name = kg_arena_strdup(&s->arena, name);
  iv->id = s->n_ivars++;
  iv->is_reduce = is_reduce;
  iv->lo = lo;
  iv->extent = extent;
  return iv;
}

static kg_ivar *copy_ivar(kg_schedule *s, const kg_ivar *from) {
  kg_ivar *iv = new_ivar(s, from->name, from->is_reduce, from->lo, from->extent);
  iv->dyn = from->dyn;
  return iv;
}

static int name_taken(const kg_schedule *s, const char *name) {
  if (kg_schedule_find_stage(s, name) || kg_sched_find_tensor(s, name)) return 1;
  for (int i = 0; i < s->prog->ntensors; i++)
    if (strcmp(s->prog->tensors[i]->name, name) == 0) return 1;
  return 0;
}

/* Marks in taken[] the k of a name "stem.k" (2 <= k < n): one pass over the names instead of one per candidate,
 * which made a trace of many cache steps on one stage cubic in its length. */
static void mark_suffix(const char *name, const char *stem, size_t stemlen, unsigned char *taken, int n) {
  if (strncmp(name, stem, stemlen) != 0 || name[stemlen] != '.') return;
  char *end;
  const char *d = name + stemlen + 1;
  if (*d < '1' || *d > '9') return;
  long k = strtol(d, &end, 10);
  if (*end == 0 && k >= 2 && k < n) taken[k] = 1;
}

/* "base.suffix", or "base.suffix.2", ".3" ... (the smallest k free) when taken. */
static const char *fresh_name(kg_schedule *s, const char *base, const char *suffix) {
  const char *name = kg_arena_printf(&s->arena, "%s.%s", base, suffix);
  if (!name_taken(s, name)) return name;
  /* at most this many names exist, so some k below it is free */
  int n = 2 * s->nstages + s->prog->ninputs + s->prog->ntensors + 3;
  unsigned char *taken = kg_xrealloc(NULL, (size_t)n); /* a few bytes per stage, like the arena's */
  memset(taken, 0, (size_t)n);
  size_t stemlen = strlen(name);
  for (int i = 0; i < s->nstages; i++) {
    mark_suffix(s->stages[i]->name, name, stemlen, taken, n);
    mark_suffix(s->stages[i]->out->name, name, stemlen, taken, n);
  }
  for (int i = 0; i < s->prog->ninputs; i++) mark_suffix(s->prog->inputs[i]->name, name, stemlen, taken, n);
  for (int i = 0; i < s->prog->ntensors; i++) mark_suffix(s->prog->tensors[i]->name, name, stemlen, taken, n);
  int k = 2;
  while (taken[k]) k++;
  free(taken);
  return kg_arena_printf(&s->arena, "%s.%d", name, k);
}

/* Tensors a primitive creates keep the checker's limit on a tensor's size, so that lowering's buffer sizes and
 * flat indices cannot overflow: 0 when shape has at most 2^40 elements. */
#define KG_SCHED_MAX_NUMEL ((int64_t)1 << 40)
static int numel_fits(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0 || __builtin_mul_overflow(n, shape[d], &n) || n > KG_SCHED_MAX_NUMEL) return 0;
  return 1;
}

/* A temporary tensor of the given shape (checked with numel_fits); its stage field stays NULL. */
static kg_tensor *new_tensor(kg_schedule *s, const char *name, int ndim, const int64_t *shape, const int *dyn) {
  kg_tensor *t = KG_NEW(&s->arena, kg_tensor);
  t->name = name;
  t->id = s->n_tensors++;
  t->kind = KG_TENSOR_TEMP;
  t->ndim = ndim;
  for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
  for (int d = 0; d < ndim; d++) t->dyn[d] = dyn ? dyn[d] : 0;
  return t;
}

static kg_sstage *new_stage(kg_schedule *s, kg_stage_origin origin, kg_tensor *out, kg_scope scope) {
  kg_sstage *st = KG_NEW(&s->arena, kg_sstage);
  st->name = out->name;
  st->origin = origin;
  st->out = out;
  st->scope = scope;
  st->attach = KG_ATTACH_ROOT;
  return st;
}

static kg_ivar **fresh_spatial_axes(kg_schedule *s, const kg_tensor *t, kg_ivar *const *names_from) {
  kg_ivar **ax = KG_NEW_ARRAY(&s->arena, kg_ivar *, t->ndim > 0 ? t->ndim : 1);
  char nm[32];
  for (int d = 0; d < t->ndim; d++) {
    snprintf(nm, sizeof nm, "ax%d", d);
    ax[d] = new_ivar(s, names_from ? names_from[d]->name : nm, 0, 0, t->shape[d]);
    ax[d]->dyn = t->dyn[d];
  }
  return ax;
}

static int parse_scope(const char *name, kg_scope *out) {
  for (int i = 0; i < 3; i++)
    if (strcmp(name, kg_scope_names[i]) == 0) {
      *out = (kg_scope)i;
      return 0;
    }
  return -1;
}

/* ---- cache_read T SCOPE R... ----
 * Requires: T a program input or a stage's output, not computed at a loop nor inlined (its consumers change);
 * SCOPE shared or local; each R a distinct, non-inlined stage reading T directly. Creates "T.SCOPE" copying T,
 * computed at root (place it with compute_at), right before the first reader; the readers read the copy. */
int kg_sched_cache_read(kg_schedule *s, const kg_step *step, char *err, size_t errlen) {
  kg_tensor *t = kg_sched_find_tensor(s, step->stage);
  const char *rname = step->nnames > 1 ? step->names[1] : "?";
  if (!t) FAIL("cache_read: stage %s: no tensor named %s (reader %s)", rname, step->stage, rname);
  kg_scope scope;
  if (parse_scope(step->names[0], &scope) || scope == KG_SCOPE_GLOBAL)
    FAIL("cache_read: stage %s: tensor %s: scope must be shared or local, not '%s'", rname, t->name,
         step->names[0]);
  const kg_sstage *prod = kg_sched_stage_of_tensor(s, t);
  if (prod && prod->attach == KG_ATTACH_AT)
    FAIL("cache_read: stage %s: tensor %s is computed at %s.%s; compute_root it first", prod->name, t->name,
         prod->attach_stage->name, prod->attach_iter->name);
  if (prod && prod->attach == KG_ATTACH_INLINE)
    FAIL("cache_read: stage %s: tensor %s is inlined", prod->name, t->name);
  kg_sstage *readers[KG_STEP_MAX_NAMES];
  int nr = step->nnames - 1, first = s->nstages;
  for (int k = 0; k < nr; k++) {
    kg_sstage *r = kg_schedule_find_stage(s, step->names[k + 1]);
    if (!r) FAIL("cache_read: stage %s: no such stage (tensor %s)", step->names[k + 1], t->name);
    if (!kg_sched_expr_reads(r->body, t)) FAIL("cache_read: stage %s: does not read tensor %s", r->name, t->name);
    if (r->attach == KG_ATTACH_INLINE) FAIL("cache_read: stage %s: is inlined (tensor %s)", r->name, t->name);
    for (int j = 0; j < k; j++)
      if (readers[j] == r) FAIL("cache_read: stage %s: named twice (tensor %s)", r->name, t->name);
    readers[k] = r;
    if (r->id < first) first = r->id;
  }
  if (nr < 1) FAIL("cache_read: stage %s: no reader given", t->name);
  if (!numel_fits(t->ndim, t->shape))
    FAIL("cache_read: stage %s: tensor %s: the copy would have more than 2^40 elements", readers[0]->name, t->name);
  if (strlen(t->name) + 12 > KG_MAX_LOOP_NAME)
    FAIL("cache_read: tensor %.40s...: the cache stage's name would be too long (max %d characters)", t->name,
         KG_MAX_LOOP_NAME);

  kg_tensor *ct = new_tensor(s, fresh_name(s, t->name, kg_scope_names[scope]), t->ndim, t->shape, t->dyn);
  ct->dtype = t->dtype; /* a copy: narrow data stays narrow (half the shared memory, and what tensor cores read) */
  kg_sstage *cs = new_stage(s, KG_ORIGIN_CACHE_READ, ct, scope);
  cs->ax = fresh_spatial_axes(s, t, NULL);
  cs->nax = t->ndim;
  cs->red = KG_RED_NONE;
  cs->body = expr_read(s, t, cs->ax, t->ndim);
  kg_sched_reset_roots(s, cs);
  rewrite rw = {s, t, ct, NULL, NULL, 0};
  for (int k = 0; k < nr; k++) readers[k]->body = rewrite_expr(&rw, readers[k]->body);
  kg_sched_insert_stage(s, cs, first);
  return 0;
}

/* ---- cache_write S SCOPE ----
 * Requires: SCOPE shared or local; S untransformed (leaves are its roots, serial), not inlined, nothing computed
 * at its loops. Creates "S.SCOPE" doing S's computation into a new tensor; S becomes a copy of it. */
int kg_sched_cache_write(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  kg_scope scope;
  if (parse_scope(step->names[0], &scope) || scope == KG_SCOPE_GLOBAL)
    FAIL("cache_write: stage %s: scope must be shared or local, not '%s'", st->name, step->names[0]);
  if (st->attach == KG_ATTACH_INLINE) FAIL("cache_write: stage %s: is inlined", st->name);
  if (!kg_sched_untransformed(st))
    FAIL("cache_write: stage %s: its loops were already transformed (loop %s); cache_write first", st->name,
         st->nleaves ? st->leaves[0]->name : "?");
  const kg_sstage *x = kg_sched_attached_at(s, st, NULL);
  if (x)
    FAIL("cache_write: stage %s: stage %s is computed at its loop %s", st->name, x->name, x->attach_iter->name);
  if ((x = kg_sched_reads_attached(s, st)))
    FAIL("cache_write: stage %s: it reads stage %s, computed at %s.%s, which the cache stage would not see", st->name,
         x->name, x->attach_stage->name, x->attach_iter->name);
  if (!numel_fits(st->out->ndim, st->out->shape))
    FAIL("cache_write: stage %s: the cache would have more than 2^40 elements", st->name);
  if (strlen(st->name) + 12 > KG_MAX_LOOP_NAME)
    FAIL("cache_write: stage %.40s...: the cache stage's name would be too long (max %d characters)", st->name,
         KG_MAX_LOOP_NAME);

  /* f32 whatever S's type: the cache holds S's values before S (now a copy) rounds them on its store */
  kg_tensor *ct = new_tensor(s, fresh_name(s, st->name, kg_scope_names[scope]), st->out->ndim, st->out->shape, st->out->dyn);
  kg_sstage *cs = new_stage(s, KG_ORIGIN_CACHE_WRITE, ct, scope);
  cs->ax = st->ax;
  cs->nax = st->nax;
  cs->rax = st->rax;
  cs->nrax = st->nrax;
  cs->red = st->red;
  cs->body = st->body;
  kg_sched_reset_roots(s, cs);

  st->ax = fresh_spatial_axes(s, st->out, st->ax);
  st->rax = NULL;
  st->nrax = 0;
  st->red = KG_RED_NONE;
  st->body = expr_read(s, ct, st->ax, st->nax);
  kg_sched_reset_roots(s, st);
  kg_sched_insert_stage(s, cs, st->id);
  return 0;
}

/* ---- rfactor S L F ----
 * Requires: S a reduction whose loops are untransformed (leaves = roots, serial) and with nothing computed at
 * them; L one of its reduction axes; F >= 2. With L = k over [lo, lo+E): "S.rf"[ax..., k.i] reduces S's body
 * over the other reduction axes and k.o in [0, ceil(E/F)) at k = lo + k.o*F + k.i (guarded when F does not
 * divide E); S then reduces S.rf over its last dimension k.i. */
int kg_sched_rfactor(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  const char *lname = step->names[0];
  int64_t f = step->ints[0];
  if (st->red == KG_RED_NONE || st->nrax == 0) FAIL("rfactor: stage %s: is not a reduction (loop %s)", st->name, lname);
  if (st->attach == KG_ATTACH_INLINE) FAIL("rfactor: stage %s: is inlined (loop %s)", st->name, lname);
  kg_iter *it = kg_sstage_find_iter(st, lname);
  if (!it) FAIL("rfactor: stage %s: no loop named %s", st->name, lname);
  if (!it->is_reduce) FAIL("rfactor: stage %s: loop %s is not a reduction axis", st->name, lname);
  if (it->origin != KG_ITER_ROOT)
    FAIL("rfactor: stage %s: loop %s was made by a %s; rfactor takes an original reduction axis of the stage, "
         "before it is split or fused",
         st->name, lname, it->origin == KG_ITER_FUSED ? "fuse" : "split");
  if (!kg_sched_untransformed(st))
    FAIL("rfactor: stage %s: its loops were already transformed (loop %s); rfactor first", st->name, lname);
  if (f < 2) FAIL("rfactor: stage %s: loop %s: factor %lld must be at least 2", st->name, lname, (long long)f);
  if (f > it->extent)
    FAIL("rfactor: stage %s: loop %s: factor %lld exceeds the extent %lld", st->name, lname, (long long)f,
         (long long)it->extent);
  if (st->out->ndim + 1 > KG_MAX_DIMS)
    FAIL("rfactor: stage %s: loop %s: the partial tensor would have too many dimensions", st->name, lname);
  const kg_sstage *x = kg_sched_attached_at(s, st, NULL);
  if (x) FAIL("rfactor: stage %s: stage %s is computed at its loop %s", st->name, x->name, x->attach_iter->name);
  if ((x = kg_sched_reads_attached(s, st)))
    FAIL("rfactor: stage %s: loop %s: it reads stage %s, computed at %s.%s, which the partial stage would not see",
         st->name, lname, x->name, x->attach_stage->name, x->attach_iter->name);
  int kr = it->root_axis - st->nax;
  const kg_ivar *k = st->rax[kr];
  /* the partial tensor's last dimension and the outer loop's extent would follow the size */
  if (k->dyn)
    FAIL("rfactor: stage %s: loop %s ranges over the dynamic size %s", st->name, lname,
         s->prog->sizes[k->dyn - 1].name);
  int64_t extent = k->extent;
  if (strlen(k->name) + 2 > KG_MAX_LOOP_NAME || strlen(st->name) + 6 > KG_MAX_LOOP_NAME)
    FAIL("rfactor: stage %.40s...: loop %.40s...: the new names would be too long (max %d characters)", st->name,
         lname, KG_MAX_LOOP_NAME);
  char *iname = kg_arena_printf(&s->arena, "%s.i", k->name), *oname = kg_arena_printf(&s->arena, "%s.o", k->name);
  for (int a = 0; a < st->nax + st->nrax; a++) {
    const char *n = kg_sstage_axis(st, a)->name;
    if (strcmp(n, iname) == 0 || strcmp(n, oname) == 0)
      FAIL("rfactor: stage %s: loop %s: an axis named %s already exists", st->name, lname, n);
  }

  int64_t shape[KG_MAX_DIMS];
  int dyn[KG_MAX_DIMS];
  for (int d = 0; d < st->out->ndim; d++) shape[d] = st->out->shape[d], dyn[d] = st->out->dyn[d];
  shape[st->out->ndim] = f;
  dyn[st->out->ndim] = 0;
  if (!numel_fits(st->out->ndim + 1, shape))
    FAIL("rfactor: stage %s: loop %s: factor %lld: the partial tensor would have more than 2^40 elements",
         st->name, lname, (long long)f);
  kg_tensor *rt = new_tensor(s, fresh_name(s, st->name, "rf"), st->out->ndim + 1, shape, dyn);
  kg_sstage *rs = new_stage(s, KG_ORIGIN_RFACTOR, rt, KG_SCOPE_GLOBAL);
  rs->nax = st->nax + 1;
  rs->ax = KG_NEW_ARRAY(&s->arena, kg_ivar *, rs->nax);
  rs->nrax = st->nrax;
  rs->rax = KG_NEW_ARRAY(&s->arena, kg_ivar *, rs->nrax);
  rs->red = st->red;
  int nsub = st->nax + st->nrax;
  rewrite rw = {s, NULL, NULL, KG_NEW_ARRAY(&s->arena, const kg_ivar *, nsub),
                KG_NEW_ARRAY(&s->arena, kg_expr *, nsub), nsub};
  for (int a = 0; a < st->nax; a++) {
    rs->ax[a] = copy_ivar(s, st->ax[a]);
    rw.ivs[a] = st->ax[a];
    rw.subst[a] = expr_ivar(s, rs->ax[a]);
  }
  kg_ivar *ki = new_ivar(s, iname, 0, 0, f);
  rs->ax[st->nax] = ki;
  kg_ivar *ko = NULL;
  for (int r = 0; r < st->nrax; r++) {
    rs->rax[r] = r == kr ? (ko = new_ivar(s, oname, 1, 0, extent / f + (extent % f != 0))) : copy_ivar(s, st->rax[r]);
    rw.ivs[st->nax + r] = st->rax[r];
    rw.subst[st->nax + r] = expr_ivar(s, rs->rax[r]);
  }
  /* k -> lo + k.o * F + k.i */
  kg_expr *pos = expr_binary(s, KG_OP_ADD, KG_TY_INT,
                             expr_binary(s, KG_OP_MUL, KG_TY_INT, expr_ivar(s, ko), expr_int(s, f)), expr_ivar(s, ki));
  rw.subst[st->nax + kr] = k->lo ? expr_binary(s, KG_OP_ADD, KG_TY_INT, expr_int(s, k->lo), pos) : pos;
  kg_expr *body = rewrite_expr(&rw, st->body);
  if (extent % f != 0) {
    rewrite plain = {s, NULL, NULL, NULL, NULL, 0};
    kg_expr *cond = expr_binary(s, KG_OP_LT, KG_TY_BOOL, rewrite_expr(&plain, pos), expr_int(s, extent));
    kg_expr *sel = new_expr(s, KG_EXPR_CALL, KG_TY_F32);
    sel->call.fn = KG_FN_SELECT;
    sel->call.n = 3;
    sel->call.args = KG_NEW_ARRAY(&s->arena, kg_expr *, 3);
    sel->call.args[0] = cond;
    sel->call.args[1] = body;
    sel->call.args[2] = expr_f32(s, kg_reducer_identity(st->red));
    body = sel;
  }
  rs->body = body;
  kg_sched_reset_roots(s, rs);

  /* S now reduces the partial results over k.i */
  kg_ivar **ax_and_ki = KG_NEW_ARRAY(&s->arena, kg_ivar *, st->nax + 1);
  for (int a = 0; a < st->nax; a++) ax_and_ki[a] = st->ax[a];
  ax_and_ki[st->nax] = new_ivar(s, iname, 1, 0, f);
  st->rax = &ax_and_ki[st->nax];
  st->nrax = 1;
  st->body = expr_read(s, rt, ax_and_ki, st->nax + 1);
  kg_sched_reset_roots(s, st);
  kg_sched_insert_stage(s, rs, st->id);
  return 0;
}

/* How a storage primitive changes the reads of tensor t: reads of t read nt instead, their indices permuted
 * (perm[d]: the old dimension that becomes d) or dimension a split by f (t[.., e, ..] -> t[.., e / f, .., e % f]). */
typedef struct layout_map {
  const kg_tensor *t;
  kg_tensor *nt;
  const int *perm; /* reorder_storage; NULL: a split */
  int a;
  int64_t f;
} layout_map;

static kg_expr *layout_reads(kg_schedule *s, const kg_expr *e, const layout_map *m) {
  if (!e) return NULL;
  kg_expr *c = KG_NEW(&s->arena, kg_expr);
  *c = *e;
  switch (e->kind) {
  case KG_EXPR_READ: {
    int n = e->read.n, mine = m && e->read.tensor == m->t;
    c->read.idx = KG_NEW_ARRAY(&s->arena, kg_expr *, n + 1);
    for (int i = 0; i < n; i++) c->read.idx[i] = layout_reads(s, e->read.idx[mine && m->perm ? m->perm[i] : i], m);
    if (mine && !m->perm) {
      /* a fresh copy of the index for its second use: bodies stay trees */
      kg_expr *x = c->read.idx[m->a], *y = layout_reads(s, x, NULL);
      c->read.idx[m->a] = expr_binary(s, KG_OP_DIV, KG_TY_INT, x, expr_int(s, m->f));
      c->read.idx[n] = expr_binary(s, KG_OP_MOD, KG_TY_INT, y, expr_int(s, m->f));
      c->read.n = n + 1;
    }
    if (mine) c->read.tensor = m->nt;
    break;
  }
  case KG_EXPR_UNARY:
  case KG_EXPR_BINARY:
    c->op.a = layout_reads(s, e->op.a, m);
    c->op.b = layout_reads(s, e->op.b, m);
    break;
  case KG_EXPR_CALL:
    c->call.args = KG_NEW_ARRAY(&s->arena, kg_expr *, e->call.n > 0 ? e->call.n : 1);
    for (int i = 0; i < e->call.n; i++) c->call.args[i] = layout_reads(s, e->call.args[i], m);
    break;
  case KG_EXPR_REDUCE:
    c->reduce.body = layout_reads(s, e->reduce.body, m);
    break;
  default:
    break;
  }
  return c;
}

/* What reorder_storage and split_storage require of STAGE: a tensor the schedule owns (not a program output), not
 * inlined, at root, untransformed, nothing computed at its loops. */
static int storage_owned(const kg_schedule *s, const kg_sstage *st, const char *prim, const char *loop, char *err,
                         size_t errlen) {
  if (st->is_output)
    FAIL("%s: stage %s: loop %s: it writes a program output, whose layout is the caller's", prim, st->name, loop);
  if (st->attach == KG_ATTACH_INLINE)
    FAIL("%s: stage %s: loop %s: it is inlined and has no storage", prim, st->name, loop);
  if (st->attach != KG_ATTACH_ROOT)
    FAIL("%s: stage %s: loop %s: the stage must be at root (%s before compute_at)", prim, st->name, loop,
         strcmp(prim, "reorder_storage") == 0 ? "reorder its storage" : "split its storage");
  if (!kg_sched_untransformed(st))
    FAIL("%s: stage %s: loop %s: its loops were already transformed; %s first", prim, st->name, loop, prim);
  const kg_sstage *x = kg_sched_attached_at(s, st, NULL);
  if (x)
    FAIL("%s: stage %s: loop %s: stage %s is computed at its loop %s", prim, st->name, loop, x->name,
         x->attach_iter->name);
  return 0;
}

/* ---- reorder_storage S AXIS... ----
 * Requires: S not a program output (the caller owns its layout; inputs are no stage), at root, untransformed,
 * nothing computed at its loops; AXIS... every spatial axis of S once. S's tensor -- a copy cache_read or
 * cache_write made, or a program temporary, which the schedule then replaces by its own copy of the tensor so
 * that the program and other schedules keep the declared layout -- takes its dimensions in the order given (the
 * last is contiguous in memory); S's spatial axes follow them, so its default loop nest walks the new layout in
 * order, and every read of the tensor is rewritten to match. A cache_read of an operand whose vector lanes would
 * read it with a stride (a convolution's weights F,C,R,S read along F) so becomes a packed copy that the lanes
 * read contiguously; a cache_write's local accumulator likewise keeps the lanes' axis innermost; attention's score
 * block stored keys-major makes the softmax's reductions over the keys vertical vector operations. */
int kg_sched_reorder_storage(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  const char *first = step->nnames ? step->names[0] : "?";
  if (storage_owned(s, st, "reorder_storage", first, err, errlen)) return -1;
  if (step->nnames != st->nax)
    FAIL("reorder_storage: stage %s: loop %s: %d axes given, the stage has %d spatial axes", st->name, first,
         step->nnames, st->nax);
  /* perm[d]: the old dimension that becomes dimension d */
  int perm[KG_MAX_DIMS], seen[KG_MAX_DIMS] = {0};
  for (int d = 0; d < step->nnames; d++) {
    int a = -1;
    for (int k = 0; k < st->nax; k++)
      if (strcmp(st->ax[k]->name, step->names[d]) == 0) a = k;
    if (a < 0) FAIL("reorder_storage: stage %s: loop %s: not a spatial axis of the stage", st->name, step->names[d]);
    if (seen[a]) FAIL("reorder_storage: stage %s: loop %s: named twice", st->name, step->names[d]);
    seen[a] = 1;
    perm[d] = a;
  }
  /* a program temporary's tensor belongs to the program: the schedule permutes its own copy */
  kg_tensor *t = st->out, *nt = t;
  if (st->origin == KG_ORIGIN_PROGRAM) {
    nt = KG_NEW(&s->arena, kg_tensor);
    *nt = *t;
  }
  kg_ivar **ax = KG_NEW_ARRAY(&s->arena, kg_ivar *, st->nax > 0 ? st->nax : 1);
  int64_t shape[KG_MAX_DIMS];
  int dyn[KG_MAX_DIMS];
  kg_expr *sexpr[KG_MAX_DIMS];
  for (int d = 0; d < st->nax; d++) {
    shape[d] = t->shape[perm[d]], dyn[d] = t->dyn[perm[d]], sexpr[d] = t->shape_expr[perm[d]];
    ax[d] = st->ax[perm[d]];
  }
  for (int d = 0; d < st->nax; d++) nt->shape[d] = shape[d], nt->dyn[d] = dyn[d], nt->shape_expr[d] = sexpr[d];
  st->ax = ax;
  st->out = nt;
  layout_map m = {t, nt, perm, 0, 0};
  for (int i = 0; i < s->nstages; i++)
    if (kg_sched_expr_reads(s->stages[i]->body, t)) s->stages[i]->body = layout_reads(s, s->stages[i]->body, &m);
  kg_sched_reset_roots(s, st);
  return 0;
}

/* ---- split_storage S AXIS FACTOR ----
 * Requires what reorder_storage does (S not a program output, not inlined, at root, untransformed, nothing
 * computed at its loops), and AXIS a spatial axis of S whose static extent FACTOR (at least 2) divides, with a
 * dimension to spare (KG_MAX_DIMS). S's tensor stores AXIS as two dimensions: AXIS.o (extent / FACTOR) where
 * AXIS was, and AXIS.i (FACTOR) as the new innermost one; S's axes follow, and every read t[.., e, ..] becomes
 * t[.., e / FACTOR, .., e % FACTOR]. With reorder_storage after it, that is any blocked layout: a GEMM's B
 * packed once per reduction block into panels of 32 columns ([N/32][K][32]: each panel is contiguous, so the
 * register tile walks it in order), or a convolution's input as NCHW16c. Lowering cancels the division where the
 * reader's index is a multiple of FACTOR plus a term that stays in [0, FACTOR) (a loop split by FACTOR), so the
 * packed copy is read with plain strides. A non-dividing FACTOR would make the copy compute elements beyond the
 * tensor; it is refused rather than padded. */
int kg_sched_split_storage(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen) {
  const char *lname = step->nnames ? step->names[0] : "?";
  int64_t f = step->nints ? step->ints[0] : 0;
  if (storage_owned(s, st, "split_storage", lname, err, errlen)) return -1;
  int a = -1;
  for (int k = 0; k < st->nax; k++)
    if (strcmp(st->ax[k]->name, lname) == 0) a = k;
  if (a < 0) FAIL("split_storage: stage %s: loop %s: not a spatial axis of the stage", st->name, lname);
  kg_tensor *t = st->out;
  if (t->dyn[a])
    FAIL("split_storage: stage %s: loop %s: its extent follows a dynamic size; a blocked layout needs a static one",
         st->name, lname);
  int64_t e = t->shape[a];
  if (f < 2) FAIL("split_storage: stage %s: loop %s: factor %lld must be at least 2", st->name, lname, (long long)f);
  if (e % f != 0)
    FAIL("split_storage: stage %s: loop %s: factor %lld does not divide the extent %lld", st->name, lname,
         (long long)f, (long long)e);
  if (t->ndim + 1 > KG_MAX_DIMS)
    FAIL("split_storage: stage %s: loop %s: the tensor would have more than %d dimensions", st->name, lname,
         KG_MAX_DIMS);
  char oname[KG_MAX_LOOP_NAME + 8], iname[KG_MAX_LOOP_NAME + 8];
  snprintf(oname, sizeof oname, "%s.o", lname);
  snprintf(iname, sizeof iname, "%s.i", lname);
  if (strlen(oname) > KG_MAX_LOOP_NAME)
    FAIL("split_storage: stage %s: loop %s: the new axis names would exceed %d characters", st->name, lname,
         KG_MAX_LOOP_NAME);
  for (int k = 0; k < st->nax + st->nrax; k++) {
    const char *nm = kg_sstage_axis(st, k)->name;
    if (strcmp(nm, oname) == 0 || strcmp(nm, iname) == 0)
      FAIL("split_storage: stage %s: loop %s: the stage already has an axis named %s", st->name, lname, nm);
  }
  /* a program temporary's tensor belongs to the program: the schedule blocks its own copy */
  kg_tensor *nt = t;
  if (st->origin == KG_ORIGIN_PROGRAM) {
    nt = KG_NEW(&s->arena, kg_tensor);
    *nt = *t;
  }
  int n = t->ndim;
  kg_ivar *ao = new_ivar(s, oname, 0, 0, e / f), *ai = new_ivar(s, iname, 0, 0, f);
  /* the stage computes element ax = ax.o * F + ax.i of what it computed before */
  const kg_ivar *old = st->ax[a];
  kg_expr *pos = expr_binary(s, KG_OP_ADD, KG_TY_INT,
                             expr_binary(s, KG_OP_MUL, KG_TY_INT, expr_ivar(s, ao), expr_int(s, f)), expr_ivar(s, ai));
  rewrite rw = {s, NULL, NULL, &old, &pos, 1};
  st->body = rewrite_expr(&rw, st->body);
  kg_ivar **ax = KG_NEW_ARRAY(&s->arena, kg_ivar *, n + 1);
  for (int k = 0; k < n; k++) ax[k] = st->ax[k];
  ax[a] = ao;
  ax[n] = ai;
  nt->ndim = n + 1;
  nt->shape[a] = e / f;
  nt->shape[n] = f;
  nt->dyn[n] = 0;
  nt->shape_expr[a] = nt->shape_expr[n] = NULL;
  st->ax = ax;
  st->nax = n + 1;
  st->out = nt;
  layout_map m = {t, nt, NULL, a, f};
  for (int i = 0; i < s->nstages; i++)
    if (kg_sched_expr_reads(s->stages[i]->body, t)) s->stages[i]->body = layout_reads(s, s->stages[i]->body, &m);
  kg_sched_reset_roots(s, st);
  return 0;
}
