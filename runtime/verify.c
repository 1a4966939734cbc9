/* Test data and verification: seeded random inputs, poisoned outputs, the reference result, and the comparison
 * that decides `verify: ok` or `verify: FAILED`.
 *
 * Inputs are never zero (|x| >= 1/64) so that a kernel dropping a term or a factor changes the result; outputs
 * are poisoned with a NaN payload no arithmetic produces, so an element the kernel never wrote is told apart
 * from one it computed wrongly. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "verify.h"
#include "../base/xalloc.h"
#include "../base/rng.h"
#include "../base/mem.h"

/* A quiet-looking but non-canonical NaN: arithmetic yields 0x7fc00000 / 0xffc00000 or propagates an input's
 * payload, never this pattern from non-poisoned data. */
#define VERIFY_POISON_BITS 0x7fa5a5a5u

/* Uniform in [0, 1) with 24 bits, exactly representable as f32. */
static double rng_unit(uint64_t *s) { return (double)(kg_rng_next(s) >> 40) * (1.0 / 16777216.0); }

static void data_draw_signed(kg_data *d, const kg_program *p, uint64_t seed) {
  uint64_t s = seed;
  for (int i = 0; i < d->ninputs; i++) {
    int64_t n = kg_tensor_numel(p->inputs[i]);
    for (int64_t k = 0; k < n; k++) {
      double mag = 1.0 / 64 + rng_unit(&s) * (1.0 - 1.0 / 64);
      d->inputs[i][k] = (float)((kg_rng_next(&s) & 1) ? -mag : mag);
    }
  }
}

static void data_draw_positive(kg_data *d, const kg_program *p, uint64_t seed) {
  uint64_t s = seed ^ 0x5bd1e9955bd1e995ull; /* a different stream from the signed draw */
  for (int i = 0; i < d->ninputs; i++) {
    int64_t n = kg_tensor_numel(p->inputs[i]);
    for (int64_t k = 0; k < n; k++) d->inputs[i][k] = (float)(0.5 + rng_unit(&s));
  }
}

double kg_data_bytes(const kg_program *p) {
  double bytes = 0;
  for (int i = 0; i < p->ntensors; i++) {
    const kg_tensor *t = p->tensors[i];
    double n = (double)kg_tensor_numel(t);
    bytes += t->kind == KG_TENSOR_INPUT ? 4 * n : 12 * n; /* outputs: f32 + double ref; temps: double + f32 */
  }
  return bytes;
}

double kg_data_need(const kg_program *p) {
  double io = 0;
  for (int i = 0; i < p->ntensors; i++)
    if (p->tensors[i]->kind != KG_TENSOR_TEMP) io += 4.0 * (double)kg_tensor_numel(p->tensors[i]);
  return kg_data_bytes(p) + io;
}

int kg_data_check_memory(const kg_program *p, char *err, size_t errlen) {
  char what[300];
  snprintf(what, sizeof what, "%s at these sizes (inputs, outputs, the reference, temporaries and the kernel's buffers)",
           p->def->name);
  return kg_mem_check(what, kg_data_need(p), err, errlen);
}

void kg_data_oom_message(const kg_program *p, int reference, char *err, size_t errlen) {
  if (reference)
    snprintf(err, errlen, "not enough memory: the reference of %s at these sizes could not be computed", p->def->name);
  else
    snprintf(err, errlen, "not enough memory: allocating the data of %s at these sizes failed", p->def->name);
}

/* malloc of n elements of size sz, NULL when it does not fit (size_t overflow included) */
static void *data_alloc(int64_t n, size_t sz) {
  size_t bytes;
  if (n < 0 || __builtin_mul_overflow((size_t)n, sz, &bytes)) return NULL;
  return malloc(bytes ? bytes : 1);
}

int kg_data_init(kg_data *d, const kg_program *p, uint64_t seed) {
  memset(d, 0, sizeof *d);
  d->ninputs = p->ninputs;
  d->noutputs = p->noutputs;
  d->inputs = calloc((size_t)(p->ninputs ? p->ninputs : 1), sizeof(float *));
  d->outputs = calloc((size_t)(p->noutputs ? p->noutputs : 1), sizeof(float *));
  d->ref = calloc((size_t)(p->noutputs ? p->noutputs : 1), sizeof(double *));
  int ok = d->inputs && d->outputs && d->ref;
  for (int i = 0; ok && i < p->ninputs; i++)
    ok = (d->inputs[i] = data_alloc(kg_tensor_numel(p->inputs[i]), sizeof(float))) != NULL;
  for (int i = 0; ok && i < p->noutputs; i++)
    ok = (d->outputs[i] = data_alloc(kg_tensor_numel(p->outputs[i]), sizeof(float))) != NULL &&
         (d->ref[i] = data_alloc(kg_tensor_numel(p->outputs[i]), sizeof(double))) != NULL;
  if (!ok) {
    if (!d->inputs || !d->outputs || !d->ref) {
      free(d->inputs);
      free(d->outputs);
      free(d->ref);
      memset(d, 0, sizeof *d);
    } else {
      kg_data_free(d);
    }
    return -1;
  }
  data_draw_signed(d, p, seed);
  kg_data_poison(d, p);
  return 0;
}

void kg_data_free(kg_data *d) {
  for (int i = 0; i < d->ninputs; i++) free(d->inputs[i]);
  for (int i = 0; i < d->noutputs; i++) {
    free(d->outputs[i]);
    if (d->ref) free(d->ref[i]);
  }
  free(d->inputs);
  free(d->outputs);
  free(d->ref);
  memset(d, 0, sizeof *d);
}

static int ref_all_finite(const kg_data *d, const kg_program *p) {
  for (int i = 0; i < d->noutputs; i++) {
    int64_t n = kg_tensor_numel(p->outputs[i]);
    for (int64_t k = 0; k < n; k++)
      if (!isfinite(d->ref[i][k])) return 0;
  }
  return 1;
}

static void ref_alloc(kg_data *d, const kg_program *p) {
  if (d->ref) return;
  d->ref = kg_xrealloc(NULL, sizeof(double *) * (size_t)(d->noutputs ? d->noutputs : 1));
  for (int i = 0; i < d->noutputs; i++)
    d->ref[i] = kg_xrealloc(NULL, sizeof(double) * (size_t)kg_tensor_numel(p->outputs[i]));
}

static int is_poison(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits == VERIFY_POISON_BITS;
}

/* A NaN input with the poison's bits (a user's .npy may hold any pattern) would reach an output through a copy
 * or a max and be taken for an element the kernel never wrote: it becomes the canonical NaN, which means the
 * same. Runs before the reference, so the kernels see the inputs the reference saw. */
static void inputs_unpoison(kg_data *d, const kg_program *p) {
  for (int i = 0; i < d->ninputs; i++) {
    int64_t n = kg_tensor_numel(p->inputs[i]);
    for (int64_t k = 0; k < n; k++)
      if (is_poison(d->inputs[i][k])) d->inputs[i][k] = NAN;
  }
}

/* kg_eval_reference fails only on an out-of-bounds read, which it turns into NaN: reported like NaN here */
int kg_data_reference_as_is(kg_data *d, const kg_program *p) {
  ref_alloc(d, p);
  inputs_unpoison(d, p);
  int rc = kg_eval_reference(p, (const float *const *)d->inputs, d->ref);
  if (rc == -2) return -2;
  return rc == 0 && ref_all_finite(d, p) ? 0 : -1;
}

int kg_data_reference(kg_data *d, const kg_program *p, uint64_t seed) {
  int rc = kg_data_reference_as_is(d, p);
  if (rc == 0 || rc == -2) return rc;
  data_draw_positive(d, p, seed);
  return kg_data_reference_as_is(d, p);
}

void kg_data_poison(kg_data *d, const kg_program *p) {
  uint32_t bits = VERIFY_POISON_BITS;
  float poison;
  memcpy(&poison, &bits, sizeof poison);
  for (int i = 0; i < d->noutputs; i++) {
    int64_t n = kg_tensor_numel(p->outputs[i]);
    for (int64_t k = 0; k < n; k++) d->outputs[i][k] = poison;
  }
}

/* "C[3,17]" (or "s" for a scalar) from a flat offset. */
static void format_index(char *buf, size_t len, const kg_tensor *t, int64_t off) {
  int64_t idx[KG_MAX_DIMS];
  for (int d = t->ndim - 1; d >= 0; d--) {
    idx[d] = t->shape[d] > 0 ? off % t->shape[d] : 0;
    off = t->shape[d] > 0 ? off / t->shape[d] : 0;
  }
  int w = snprintf(buf, len, "%s[", t->name);
  for (int d = 0; d < t->ndim && w > 0 && (size_t)w < len; d++)
    w += snprintf(buf + w, len - (size_t)w, d ? ",%lld" : "%lld", (long long)idx[d]);
  if (w > 0 && (size_t)w < len) snprintf(buf + w, len - (size_t)w, "]");
}

static const char *class_name(double x) {
  if (isnan(x)) return "NaN";
  return x > 0 ? "+inf" : "-inf";
}

/* Why element (got, ref) fails, or NULL when it passes; *err gets its relative error (finite refs). */
static const char *element_check(float got, double ref, double scale, double rtol, double *err) {
  *err = 0;
  if (is_poison(got)) return "unwritten (still poisoned)";
  if (!isfinite(ref)) {
    if (isnan(ref) ? isnan(got) : (isinf(got) && (got > 0) == (ref > 0))) return NULL;
    return "wrong class";
  }
  if (!isfinite(got)) return "non-finite";
  double den = fabs(ref) > scale ? fabs(ref) : scale;
  *err = fabs((double)got - ref) / den;
  return *err <= rtol ? NULL : "error";
}

/* The longest reduction of the program (product of one stage's reduction extents). f32 accumulation error grows
 * like its square root, so the tolerance does too past 256 terms: a correct kernel summing 4096 terms in f32
 * differs from the double reference by more than one summing 64. */
static double longest_reduction(const kg_program *p) {
  double longest = 1;
  for (int s = 0; s < p->nstages; s++) {
    double len = 1;
    for (int r = 0; r < p->stages[s]->nrax; r++) len *= (double)p->stages[s]->rax[r]->extent;
    if (len > longest) longest = len;
  }
  return longest;
}

double kg_verify_tolerance(const kg_program *p, double rtol) {
  if (!(rtol > 0)) rtol = 1e-4;
  double len = longest_reduction(p);
  return len > 256 ? rtol * sqrt(len / 256) : rtol;
}

kg_verify_result kg_verify(const kg_program *p, const kg_data *d, double rtol) {
  kg_verify_result r = {.ok = 1, .max_rel_err = 0};
  rtol = kg_verify_tolerance(p, rtol);
  r.tolerance = rtol;
  if (!d->ref) {
    r.ok = 0;
    snprintf(r.msg, sizeof r.msg, "no reference computed");
    return r;
  }
  for (int i = 0; i < d->noutputs; i++) {
    const kg_tensor *t = p->outputs[i];
    int64_t n = kg_tensor_numel(t);
    const float *got = d->outputs[i];
    const double *ref = d->ref[i];
    double maxabs = 0;
    for (int64_t k = 0; k < n; k++)
      if (isfinite(ref[k]) && fabs(ref[k]) > maxabs) maxabs = fabs(ref[k]);
    double scale = maxabs > 0 ? 1e-2 * maxabs : 1e-30;
    for (int64_t k = 0; k < n; k++) {
      double err;
      const char *why = element_check(got[k], ref[k], scale, rtol, &err);
      if (err > r.max_rel_err) r.max_rel_err = err;
      if (!why) continue;
      if (strcmp(why, "error") != 0) r.max_rel_err = INFINITY;
      if (!r.ok) continue; /* report the first failure only */
      r.ok = 0;
      char where[160];
      format_index(where, sizeof where, t, k);
      if (!strcmp(why, "error"))
        snprintf(r.msg, sizeof r.msg, "%s: got %.9g expected %.9g (rel err %.3g, tolerance %.3g)", where,
                 (double)got[k], ref[k], err, rtol);
      else if (!strcmp(why, "wrong class"))
        snprintf(r.msg, sizeof r.msg, "%s: got %.9g expected %s", where, (double)got[k], class_name(ref[k]));
      else if (!strcmp(why, "non-finite"))
        snprintf(r.msg, sizeof r.msg, "%s: got %s expected %.9g", where, class_name((double)got[k]), ref[k]);
      else
        snprintf(r.msg, sizeof r.msg, "%s: %s", where, why);
    }
  }
  return r;
}
