/* The schedule builder of the generators (see build.h). */
#include "build.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void kg_builder_init(kg_builder *b, kg_schedule *s) {
  memset(b, 0, sizeof *b);
  b->s = s;
}

void kg_builder_fail(kg_builder *b, const char *fmt, ...) {
  if (b->failed) return;
  b->failed = 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(b->err, sizeof b->err, fmt, ap);
  va_end(ap);
}

static void fill_step(kg_step *st, kg_step_kind kind, const char *stage, const char *const *names, int nnames,
                      int64_t i0, int64_t i1, int nints) {
  memset(st, 0, sizeof *st);
  st->kind = kind;
  st->stage = stage;
  for (int i = 0; i < nnames && i < KG_STEP_MAX_NAMES; i++) st->names[i] = names[i];
  st->nnames = nnames;
  st->ints[0] = i0;
  st->ints[1] = i1;
  st->nints = nints;
}

int kg_builder_step(kg_builder *b, kg_step_kind kind, const char *stage, const char *const *names, int nnames,
                  int64_t i0, int64_t i1, int nints) {
  if (b->failed) return -1;
  kg_step st;
  fill_step(&st, kind, stage, names, nnames, i0, i1, nints);
  if (kg_schedule_apply(b->s, &st, b->err, sizeof b->err) != 0) b->failed = 1;
  return b->failed ? -1 : 0;
}

int kg_builder_try(kg_builder *b, kg_step_kind kind, const char *stage, const char *const *names, int nnames,
                 int64_t i0, int64_t i1, int nints) {
  if (b->failed) return -1;
  kg_step st;
  char err[512];
  fill_step(&st, kind, stage, names, nnames, i0, i1, nints);
  return kg_schedule_apply(b->s, &st, err, sizeof err) == 0 ? 0 : -1;
}

kg_iter *kg_builder_split(kg_builder *b, kg_sstage *st, kg_iter *it, int64_t f, kg_iter **inner) {
  *inner = NULL;
  if (!it) {
    b->failed = 1;
    return NULL;
  }
  if (kg_builder_step(b, KG_STEP_SPLIT, st->name, &it->name, 1, f, 0, 1)) return NULL;
  *inner = it->split_inner;
  return it->split_outer;
}

kg_iter *kg_builder_fuse(kg_builder *b, kg_sstage *st, kg_iter *x, kg_iter *y) {
  if (!x || !y) {
    b->failed = 1;
    return NULL;
  }
  const char *n[2] = {x->name, y->name};
  if (kg_builder_step(b, KG_STEP_FUSE, st->name, n, 2, 0, 0, 0)) return NULL;
  return x->fused_into;
}

kg_iter *kg_builder_fuse_run(kg_builder *b, kg_sstage *st, int from, int n) {
  if (b->failed || from < 0 || from + n > st->nleaves || n < 1) {
    b->failed = 1;
    return NULL;
  }
  kg_iter *f = st->leaves[from];
  for (int k = 1; k < n && !b->failed; k++) f = kg_builder_fuse(b, st, st->leaves[from], st->leaves[from + 1]);
  return b->failed ? NULL : f;
}

void kg_builder_annotate(kg_builder *b, kg_step_kind kind, kg_sstage *st, kg_iter *it, kg_thread_tag tag) {
  if (!it) {
    b->failed = 1;
    return;
  }
  const char *n[2] = {it->name, kg_thread_tag_names[tag]};
  kg_builder_step(b, kind, st->name, n, kind == KG_STEP_BIND ? 2 : 1, 0, 0, 0);
}

void kg_builder_reorder(kg_builder *b, kg_sstage *st, kg_iter **order, int n) {
  if (b->failed || n < 2) return;
  if (n > KG_STEP_MAX_NAMES) {
    kg_builder_fail(b, "reorder: stage %s: %d loops (at most %d)", st->name, n, KG_STEP_MAX_NAMES);
    return;
  }
  const char *names[KG_STEP_MAX_NAMES];
  int in_order = 1;
  for (int i = 0; i < n; i++) {
    if (!order[i]) {
      b->failed = 1;
      return;
    }
    names[i] = order[i]->name;
    int at = kg_sstage_leaf_index(st, order[i]);
    if (at < 0 || (i && kg_sstage_leaf_index(st, order[i - 1]) >= at)) in_order = 0;
  }
  if (!in_order) kg_builder_step(b, KG_STEP_REORDER, st->name, names, n, 0, 0, 0);
}

void kg_builder_compute_at(kg_builder *b, kg_sstage *p, const kg_sstage *c, kg_iter *it) {
  if (!it) {
    b->failed = 1;
    return;
  }
  const char *n[2] = {c->name, it->name};
  kg_builder_step(b, KG_STEP_COMPUTE_AT, p->name, n, 2, 0, 0, 0);
}

kg_sstage *kg_builder_cache(kg_builder *b, kg_step_kind kind, const char *what, const char *scope,
                          const kg_sstage *reader) {
  const char *n[2] = {scope, reader ? reader->name : NULL};
  if (kg_builder_step(b, kind, what, n, kind == KG_STEP_CACHE_READ ? 2 : 1, 0, 0, 0)) return NULL;
  /* the created stage is the newest one with that origin */
  kg_stage_origin o = kind == KG_STEP_CACHE_READ ? KG_ORIGIN_CACHE_READ : KG_ORIGIN_CACHE_WRITE;
  kg_sstage *best = NULL;
  for (int i = 0; i < b->s->nstages; i++) {
    kg_sstage *x = b->s->stages[i];
    if (x->origin == o && (!best || x->out->id > best->out->id)) best = x;
  }
  return best;
}

int kg_builder_storage_inner(kg_builder *b, kg_sstage *st, int d, int64_t panel, int pairs) {
  if (b->failed) return -1;
  if (d < 0 || d >= st->nax || pairs == d || pairs >= st->nax) {
    kg_builder_fail(b, "stage %s: no dimension %d to store innermost (pairs of %d)", st->name, d, pairs);
    return -1;
  }
  const char *names[KG_STEP_MAX_NAMES];
  char ax[256], axo[260], axi[260], pk[256], pki[260];
  int n = 0;
  snprintf(ax, sizeof ax, "%s", st->ax[d]->name);
  /* the name, before a split renumbers the dimensions */
  if (pairs >= 0) snprintf(pk, sizeof pk, "%s", st->ax[pairs]->name);
  if (panel > 1) {
    const char *nm[1] = {ax};
    if (kg_builder_step(b, KG_STEP_SPLIT_STORAGE, st->name, nm, 1, panel, 0, 1)) return -1;
    snprintf(axo, sizeof axo, "%s.o", ax);
    snprintf(axi, sizeof axi, "%s.i", ax);
    names[n++] = axo;
  } else {
    snprintf(axi, sizeof axi, "%s", ax);
  }
  if (pairs >= 0) {
    const char *nm[1] = {pk};
    if (kg_builder_step(b, KG_STEP_SPLIT_STORAGE, st->name, nm, 1, 2, 0, 1)) return -1;
    snprintf(pki, sizeof pki, "%s.i", pk);
  }
  if (st->nax > KG_STEP_MAX_NAMES) {
    kg_builder_fail(b, "stage %s: too many dimensions to reorder", st->name);
    return -1;
  }
  for (int a = 0; a < st->nax; a++)
    if (strcmp(st->ax[a]->name, axi) && (panel <= 1 || strcmp(st->ax[a]->name, axo)) &&
        (pairs < 0 || strcmp(st->ax[a]->name, pki)))
      names[n++] = st->ax[a]->name;
  names[n++] = axi;
  if (pairs >= 0) names[n++] = pki;
  return kg_builder_step(b, KG_STEP_REORDER_STORAGE, st->name, names, n, 0, 0, 0);
}

kg_sstage *kg_builder_pack(kg_builder *b, const char *what, const kg_sstage *reader, const kg_pack *how) {
  kg_sstage *pk = kg_builder_cache(b, KG_STEP_CACHE_READ, what, "local", reader);
  if (!pk) return NULL;
  int d = how->inner, pairs = how->pairs > 0 ? how->pairs - 1 : -1;
  if (pairs >= 0 && d < 0) d = pk->nax - 1;
  if (d >= 0 && (how->panel > 1 || d != pk->nax - 1 || pairs >= 0) &&
      kg_builder_storage_inner(b, pk, d, how->panel, pairs) != 0)
    return NULL;
  if (how->at) kg_builder_compute_at(b, pk, how->at, how->loop);
  if (how->widen && pk->out->dtype != KG_DT_F32 && !b->failed)
    kg_builder_step(b, KG_STEP_WIDEN, pk->name, NULL, 0, 0, 0, 0);
  if (b->failed) return NULL;
  if (how->parallel && pk->nleaves > 1) kg_builder_annotate(b, KG_STEP_PARALLEL, pk, pk->leaves[0], KG_THREAD_NONE);
  /* a copy in pairs: its innermost loop walks a pair (2); unrolled, the compiler interleaves the two rows */
  kg_builder_annotate(b, pairs >= 0 ? KG_STEP_UNROLL : KG_STEP_VECTORIZE, pk, pk->leaves[pk->nleaves - 1],
                      KG_THREAD_NONE);
  return b->failed ? NULL : pk;
}
