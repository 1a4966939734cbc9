/* The search space's generic part: sketches and knobs, sampling, realization. The rules that derive sketches
 * live in sketch_cpu.c and sketch_gpu.c. */
#include "space.h"
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/rng.h"
#include "../base/xalloc.h"

const char *const kg_knob_kind_names[] = {"tile", "unroll", "vector", "location", "choice"};

kg_space *kg_space_new(const kg_program *p, kg_target_kind target, const kg_gpu_limits *limits) {
  return kg_space_new_opts(p, target, limits, NULL);
}

kg_space *kg_space_new_opts(const kg_program *p, kg_target_kind target, const kg_gpu_limits *limits,
                            const kg_space_opts *o) {
  kg_space *sp = kg_xrealloc(NULL, sizeof *sp);
  memset(sp, 0, sizeof *sp);
  kg_arena_init(&sp->arena);
  sp->prog = p;
  sp->target = target;
  sp->unfused = o && o->unfused; /* before the rules run: they read both */
  sp->cpu = o && o->cpu ? *o->cpu : *kg_cpu_arch_default();
  if (limits) sp->limits = *limits;
  else if (target == KG_TARGET_CUDA) kg_gpu_limits_for_arch("sm_86", &sp->limits);
  if (target == KG_TARGET_CUDA) kg_sketches_gpu(sp);
  else kg_sketches_cpu(sp);
  /* Rules derive at least one sketch for every program; the default schedule is there in case they do not. */
  assert(sp->nsketches > 0);
  return sp;
}

void kg_space_free(kg_space *sp) {
  if (!sp) return;
  kg_arena_free(&sp->arena);
  free(sp);
}

int kg_space_find_sketch(const kg_space *sp, const char *name) {
  for (int i = 0; name && i < sp->nsketches; i++)
    if (strcmp(sp->sketches[i].name, name) == 0) return i;
  return -1;
}

kg_sketch *kg_space_add_sketch(kg_space *sp, const char *name, kg_sketch_realize_fn realize, void *data) {
  if (sp->nsketches >= KG_SPACE_MAX_SKETCHES || kg_space_find_sketch(sp, name) >= 0) return NULL;
  kg_sketch *sk = &sp->sketches[sp->nsketches++];
  memset(sk, 0, sizeof *sk);
  sk->name = kg_arena_strdup(&sp->arena, name);
  sk->realize = realize;
  sk->data = data;
  sk->space = sp;
  return sk;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* "STAGE.WHAT": one buffer size for the rules that add such knobs and the realize functions that read them, so that
 * a long stage name is cut the same way in both */
#define STAGE_KNOB_NAME (2 * KG_MAX_LOOP_NAME)

int64_t kg_point_knob(const kg_sketch *sk, const kg_point *pt, const char *stage, const char *what, int64_t def) {
  char name[STAGE_KNOB_NAME];
  snprintf(name, sizeof name, "%s.%s", stage, what);
  for (int i = 0; i < sk->nknobs && i < pt->nknobs; i++)
    if (!strcmp(sk->knobs[i].name, name)) return pt->knobs[i];
  return def;
}

int kg_sketch_add_knob(kg_sketch *sk, kg_knob_kind kind, const char *name, const int64_t *values, int nvalues) {
  assert(sk->nknobs < KG_SPACE_MAX_KNOBS && nvalues >= 1);
  kg_knob *k = &sk->knobs[sk->nknobs];
  memset(k, 0, sizeof *k);
  k->kind = kind;
  k->name = kg_arena_strdup((kg_arena *)&sk->space->arena, name);
  int n = nvalues < KG_KNOB_MAX_VALUES ? nvalues : KG_KNOB_MAX_VALUES;
  memcpy(k->values, values, sizeof(int64_t) * (size_t)n);
  if (kind == KG_KNOB_TILE || kind == KG_KNOB_UNROLL || kind == KG_KNOB_VECTOR) {
    qsort(k->values, (size_t)n, sizeof(int64_t), cmp_i64);
    int m = 0;
    for (int i = 0; i < n; i++)
      if (m == 0 || k->values[m - 1] != k->values[i]) k->values[m++] = k->values[i];
    n = m;
  }
  k->nvalues = n;
  return sk->nknobs++;
}

int kg_sketch_add_stage_knob(kg_sketch *sk, kg_knob_kind kind, const char *stage, const char *what,
                             const int64_t *values, int nvalues) {
  char name[STAGE_KNOB_NAME];
  snprintf(name, sizeof name, "%s.%s", stage, what);
  return kg_sketch_add_knob(sk, kind, name, values, nvalues);
}

int kg_space_pow2_values(int64_t extent, int64_t lo, int64_t cap, int64_t *out) {
  int64_t hi = extent < cap ? extent : cap;
  int n = 0;
  for (int64_t v = lo; v < hi && n < KG_KNOB_MAX_VALUES - 1; v *= 2) out[n++] = v;
  out[n++] = hi;
  return n;
}

int kg_space_vector_cols(int64_t extent, int64_t lanes, int64_t *out) {
  int n = 0;
  if (extent % (lanes / 2) == 0 && extent % lanes) out[n++] = lanes / 2;
  for (int64_t v = lanes; v <= 4 * lanes && v <= extent; v += lanes) out[n++] = v;
  if (extent <= 4 * lanes && extent % lanes && extent != lanes / 2) out[n++] = extent;
  return n;
}

static int has(const int64_t *v, int n, int64_t x) {
  for (int i = 0; i < n; i++)
    if (v[i] == x) return 1;
  return 0;
}

int kg_space_tile_values(int64_t extent, int64_t cap, int64_t *out) {
  int64_t hi = extent < cap ? extent : cap;
  if (hi < 1) hi = 1;
  int n = 0;
  /* small factors, then powers of two, then divisors, then multiples of 8 and 3 (vector- and cache-friendly
   * non-divisors), until the array is full */
  for (int64_t v = 1; v <= 8 && v <= hi; v++) out[n++] = v;
  for (int64_t v = 16; v <= hi && n < KG_KNOB_MAX_VALUES; v *= 2) out[n++] = v;
  for (int64_t v = 9; v <= hi && n < KG_KNOB_MAX_VALUES; v++)
    if (extent % v == 0 && !has(out, n, v)) out[n++] = v;
  for (int64_t v = 24; v <= hi && n < KG_KNOB_MAX_VALUES; v += 8)
    if (!has(out, n, v)) out[n++] = v;
  for (int64_t v = 12; v <= hi && n < KG_KNOB_MAX_VALUES; v *= 2)
    if (!has(out, n, v)) out[n++] = v;
  if (!has(out, n, hi) && n < KG_KNOB_MAX_VALUES) out[n++] = hi;
  qsort(out, (size_t)n, sizeof(int64_t), cmp_i64);
  return n;
}

uint64_t kg_space_size(const kg_space *sp) {
  uint64_t total = 0;
  for (int i = 0; i < sp->nsketches; i++) {
    uint64_t n = 1;
    for (int k = 0; k < sp->sketches[i].nknobs; k++) {
      uint64_t v = (uint64_t)sp->sketches[i].knobs[k].nvalues;
      n = n > UINT64_MAX / v ? UINT64_MAX : n * v;
    }
    total = total > UINT64_MAX - n ? UINT64_MAX : total + n;
  }
  return total;
}

void kg_space_sample(const kg_space *sp, int sketch, uint64_t *rng, kg_point *out) {
  assert(sketch >= 0 && sketch < sp->nsketches);
  const kg_sketch *sk = &sp->sketches[sketch];
  memset(out, 0, sizeof *out);
  out->sketch = sketch;
  out->nknobs = sk->nknobs;
  for (int i = 0; i < sk->nknobs; i++)
    out->knobs[i] = sk->knobs[i].values[kg_rng_next(rng) % (uint64_t)sk->knobs[i].nvalues];
}

int kg_space_point_valid(const kg_space *sp, const kg_point *pt) {
  if (pt->sketch < 0 || pt->sketch >= sp->nsketches) return 0;
  const kg_sketch *sk = &sp->sketches[pt->sketch];
  if (pt->nknobs != sk->nknobs) return 0;
  for (int i = 0; i < sk->nknobs; i++)
    if (!has(sk->knobs[i].values, sk->knobs[i].nvalues, pt->knobs[i])) return 0;
  return 1;
}

kg_schedule *kg_space_realize(const kg_space *sp, const kg_point *pt, char *err, size_t errlen) {
  if (!kg_space_point_valid(sp, pt)) {
    snprintf(err, errlen, "point does not belong to the space");
    return NULL;
  }
  const kg_sketch *sk = &sp->sketches[pt->sketch];
  kg_schedule *s = kg_schedule_new(sp->prog);
  if ((sk->realize && sk->realize(sk, pt, s, err, errlen) != 0) ||
      (sp->unfused && kg_space_check_unfused(s, err, errlen) != 0)) {
    kg_schedule_free(s);
    return NULL;
  }
  return s;
}

int kg_space_check_unfused(const kg_schedule *s, char *err, size_t errlen) {
  for (int i = 0; i < s->nstages; i++) {
    const kg_sstage *st = s->stages[i];
    if (st->origin != KG_ORIGIN_PROGRAM || st->attach == KG_ATTACH_ROOT) continue;
    if (err && errlen && st->attach == KG_ATTACH_INLINE)
      snprintf(err, errlen, "unfused search: stage '%s' is inlined into its readers", st->name);
    else if (err && errlen)
      snprintf(err, errlen, "unfused search: stage '%s' is computed at stage '%s' loop '%s'", st->name,
               st->attach_stage ? st->attach_stage->name : "?", st->attach_iter ? st->attach_iter->name : "?");
    return -1;
  }
  return 0;
}
