/* Dynamic sizes: which dimensions and ranges of a checked program a size variable decides.
 *
 * Lowering keeps a dynamic size symbolic, so it must know exactly where the size enters. Rather than teach the
 * checker symbolic shape inference, the program is checked again with each dynamic size moved to two other values:
 * a dimension (or a variable's extent) that follows the size exactly is that size; one that does not move is
 * static; anything else (H-2, 2*M, a size that moves a range's start) is an expression of the size, which one
 * kernel cannot serve with whole-dimension guards, and is reported to the user. Shapes are piecewise-affine in the
 * sizes, so two probes besides the bound value separate "equals the size" from any other dependence on it. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "te.h"

#define KG_DYN_MAX_NUMEL ((int64_t)INT32_MAX)

int kg_program_ndynamic(const kg_program *p) {
  int n = 0;
  for (int i = 0; i < p->nsizes; i++) n += p->sizes[i].dynamic != 0;
  return n;
}

/* Where an error about --dynamic points: the signature, where the sizes are declared (the def's line), not the
 * file's first line, which may be a comment. */
static kg_pos sig_pos(const kg_program *p) {
  if (p->def && p->def->pos.line > 0) return p->def->pos;
  kg_pos pos = {&p->src, 1, 1, 0};
  return pos;
}

static kg_program *reload(const kg_program *p, int k, int64_t v, kg_diag *d, kg_arena *da) {
  kg_binding *b = calloc((size_t)p->nsizes + 1, sizeof *b);
  if (!b) return NULL;
  for (int i = 0; i < p->nsizes; i++) {
    b[i].name = p->sizes[i].name;
    b[i].value = i == k ? v : p->sizes[i].value;
  }
  kg_program *q = kg_program_load(p->src.name, p->src.text, p->src.len, p->def->name, b, p->nsizes, d, da);
  free(b);
  /* the same program: retyped as p was (--dtype) */
  if (q && p->io_retyped && kg_program_set_io_dtype(q, p->io_dtype, d, da) != 0) {
    kg_program_free(q);
    q = NULL;
  }
  if (q) q->tf32 = p->tf32;
  return q;
}

/* How x (at the bound value) moves with size k probed at v1, v2: 0 static, 1 equals the size, -1 other. */
static int classify(int64_t x0, int64_t x1, int64_t x2, int64_t v0, int64_t v1, int64_t v2) {
  if (x0 == x1 && x0 == x2) return 0;
  if (x0 == v0 && x1 == v1 && x2 == v2) return 1;
  return -1;
}

/* Elements of t with every dynamic size at hi[] (saturating at INT64_MAX). */
static int64_t numel_at(const kg_tensor *t, const kg_program *p, const int64_t *hi) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) {
    int64_t e = t->dyn[d] ? hi[t->dyn[d] - 1] : t->shape[d];
    if (__builtin_mul_overflow(n, e, &n)) return INT64_MAX;
  }
  (void)p;
  return n;
}

static int fits(const kg_program *p, const int64_t *hi) {
  for (int i = 0; i < p->ntensors; i++)
    if (numel_at(p->tensors[i], p, hi) > KG_DYN_MAX_NUMEL) return 0;
  return 1;
}

/* Back to no dynamic size: every call states the whole set. */
static void clear_marks(kg_program *p) {
  for (int i = 0; i < p->nsizes; i++) p->sizes[i].dynamic = 0, p->sizes[i].lo = p->sizes[i].hi = 0;
  for (int t = 0; t < p->ntensors; t++)
    for (int d = 0; d < KG_MAX_DIMS; d++) p->tensors[t]->dyn[d] = 0;
  for (int s = 0; s < p->nstages; s++) {
    for (int d = 0; d < p->stages[s]->nax; d++) p->stages[s]->ax[d]->dyn = 0;
    for (int r = 0; r < p->stages[s]->nrax; r++) p->stages[s]->rax[r]->dyn = 0;
  }
}

int kg_program_set_dynamic(kg_program *p, const kg_dynamic_size *dyn, int ndyn, kg_diag *diag,
                           kg_arena *diag_arena) {
  kg_diag local;
  memset(&local, 0, sizeof local);
  /* idx: each dynamic size's index in p->sizes; hi: every size's largest value (a static one: its value) */
  int *idx = calloc((size_t)ndyn + 1, sizeof *idx);
  int64_t *hi = calloc((size_t)p->nsizes + 1, sizeof *hi);
  int rc = -1;
  if (!idx || !hi) {
    kg_diag_error(diag, diag_arena, sig_pos(p), "--dynamic: out of memory");
    goto out;
  }
  for (int j = 0; j < ndyn; j++) {
    idx[j] = -1;
    for (int i = 0; i < p->nsizes; i++)
      if (!strcmp(p->sizes[i].name, dyn[j].name)) idx[j] = i;
    if (idx[j] < 0) {
      kg_diag_error(diag, diag_arena, sig_pos(p), "--dynamic %s: '%s' is not a size variable of %s", dyn[j].name,
                    dyn[j].name, p->def->name);
      goto out;
    }
    for (int i = 0; i < j; i++)
      if (idx[i] == idx[j]) {
        kg_diag_error(diag, diag_arena, p->sizes[idx[j]].pos, "--dynamic %s is given twice", dyn[j].name);
        goto out;
      }
    if (dyn[j].lo || dyn[j].hi) {
      if (dyn[j].lo < 1 || dyn[j].hi < dyn[j].lo) {
        kg_diag_error(diag, diag_arena, p->sizes[idx[j]].pos, "--dynamic %s=%lld..%lld: the range must be 1 <= LO <= HI",
                      dyn[j].name, (long long)dyn[j].lo, (long long)dyn[j].hi);
        goto out;
      }
    }
  }
  clear_marks(p);

  /* Per dynamic size: the program checked at two other values, compared dimension by dimension and reduction
   * range by reduction range (stages and their variables come out in the same order each time). */
  for (int j = 0; j < ndyn; j++) {
    int k = idx[j];
    int64_t v0 = p->sizes[k].value, v1 = v0 + 1, v2 = v0 + 3;
    kg_program *q1 = reload(p, k, v1, &local, diag_arena), *q2 = q1 ? reload(p, k, v2, &local, diag_arena) : NULL;
    if (!q1 || !q2) {
      kg_program_free(q1);
      kg_diag_error(diag, diag_arena, p->sizes[k].pos,
                    "--dynamic %s: the program does not check at %s=%lld (%s), so %s cannot vary freely",
                    dyn[j].name, dyn[j].name, (long long)(q1 ? v2 : v1), local.msg ? local.msg : "error",
                    dyn[j].name);
      goto out;
    }
    const char *bad = NULL;
    int bad_d = 0;
    if (q1->ntensors != p->ntensors || q2->ntensors != p->ntensors || q1->n_ivars != p->n_ivars ||
        q2->n_ivars != p->n_ivars)
      bad = "the program's structure";
    for (int t = 0; !bad && t < p->ntensors; t++) {
      kg_tensor *a = p->tensors[t], *b = q1->tensors[t], *c = q2->tensors[t];
      for (int d = 0; d < a->ndim && !bad; d++) {
        int cl = classify(a->shape[d], b->shape[d], c->shape[d], v0, v1, v2);
        if (cl < 0 || (cl == 1 && a->dyn[d])) bad = a->name, bad_d = d;
        else if (cl == 1) a->dyn[d] = k + 1;
      }
    }
    /* Variables: collect by id from the stages (every variable a stage ranges over) of each program. */
    for (int s = 0; !bad && s < p->nstages; s++) {
      kg_stage *a = p->stages[s], *b = q1->stages[s], *c = q2->stages[s];
      for (int r = 0; r < a->nrax && !bad; r++) {
        kg_ivar *x = a->rax[r], *y = b->rax[r], *z = c->rax[r];
        int cl = classify(x->extent, y->extent, z->extent, v0, v1, v2);
        if (cl < 0 || x->lo != y->lo || x->lo != z->lo || (cl == 1 && x->lo != 0)) {
          bad = kg_arena_printf(diag_arena, "the range of reduction variable '%s' in %s", x->name, a->name);
          bad_d = -1;
        } else if (cl == 1) {
          x->dyn = k + 1;
        }
      }
    }
    kg_program_free(q1);
    kg_program_free(q2);
    if (bad) {
      if (bad_d >= 0 && strcmp(bad, "the program's structure"))
        kg_diag_error(diag, diag_arena, p->sizes[k].pos,
                      "--dynamic %s: dimension %d of tensor '%s' depends on %s but is not %s itself; a dynamic size "
                      "must be a whole dimension",
                      dyn[j].name, bad_d + 1, bad, dyn[j].name, dyn[j].name);
      else
        kg_diag_error(diag, diag_arena, p->sizes[k].pos,
                      "--dynamic %s: %s depends on %s in another way than being %s itself; a dynamic size must be a "
                      "whole dimension or a whole reduction range",
                      dyn[j].name, bad, dyn[j].name, dyn[j].name);
      goto out;
    }
  }
  /* Spatial axes range over their stage's output dimensions; mark them too, for whoever reads ivars. */
  for (int s = 0; s < p->nstages; s++)
    for (int d = 0; d < p->stages[s]->nax; d++) p->stages[s]->ax[d]->dyn = p->stages[s]->out->dyn[d];

  /* Ranges: explicit ones must hold the bound value and fit; default ones grow to the largest that fits. */
  for (int i = 0; i < p->nsizes; i++) hi[i] = p->sizes[i].value;
  for (int j = 0; j < ndyn; j++) hi[idx[j]] = dyn[j].hi ? dyn[j].hi : p->sizes[idx[j]].value;
  if (!fits(p, hi)) {
    kg_diag_error(diag, diag_arena, sig_pos(p),
                  "--dynamic: with every dynamic size at its largest value a tensor has more than 2^31-1 elements");
    goto out;
  }
  /* Default ranges grow together, each doubling in turn while everything fits, so that no size takes all the
   * room from another; a lone one then bisects up to the exact limit. */
  int ndefault = 0;
  for (int j = 0; j < ndyn; j++) ndefault += !dyn[j].hi;
  for (int grown = 1; grown;) {
    grown = 0;
    for (int j = 0; j < ndyn; j++) {
      int k = idx[j];
      if (dyn[j].hi || hi[k] >= KG_DYN_MAX_NUMEL) continue;
      int64_t was = hi[k];
      hi[k] = was * 2 > KG_DYN_MAX_NUMEL ? KG_DYN_MAX_NUMEL : was * 2;
      if (fits(p, hi)) grown = 1;
      else hi[k] = was;
    }
  }
  for (int j = 0; j < ndyn && ndefault == 1; j++) {
    if (dyn[j].hi) continue;
    int k = idx[j];
    int64_t lo = hi[k], bad_hi = lo * 2 > KG_DYN_MAX_NUMEL ? KG_DYN_MAX_NUMEL + 1 : lo * 2;
    while (bad_hi - lo > 1) {
      int64_t mid = lo + (bad_hi - lo) / 2;
      hi[k] = mid;
      if (fits(p, hi)) lo = mid;
      else bad_hi = mid;
    }
    hi[k] = lo;
  }
  for (int j = 0; j < ndyn; j++) {
    kg_size_var *sv = &p->sizes[idx[j]];
    int64_t lo = dyn[j].lo ? dyn[j].lo : 1;
    if (sv->value < lo || sv->value > hi[idx[j]]) {
      kg_diag_error(diag, diag_arena, sv->pos, "--dynamic %s=%lld..%lld: the bound value %s=%lld is outside the range",
                    sv->name, (long long)lo, (long long)hi[idx[j]], sv->name, (long long)sv->value);
      goto out;
    }
    sv->dynamic = 1;
    sv->lo = lo;
    sv->hi = hi[idx[j]];
  }
  rc = 0;
out:
  if (rc) clear_marks(p); /* a failed call leaves the program as it was */
  free(idx);
  free(hi);
  return rc;
}

kg_program *kg_program_rebind(const kg_program *p, int k, int64_t value, kg_diag *diag, kg_arena *diag_arena) {
  kg_program *q = reload(p, k, value, diag, diag_arena);
  if (!q) return NULL;
  kg_dynamic_size dyn[64];
  int n = 0;
  for (int i = 0; i < p->nsizes && n < 64; i++)
    if (p->sizes[i].dynamic) dyn[n++] = (kg_dynamic_size){p->sizes[i].name, p->sizes[i].lo, p->sizes[i].hi};
  if (n && kg_program_set_dynamic(q, dyn, n, diag, diag_arena) != 0) {
    kg_program_free(q);
    return NULL;
  }
  return q;
}
