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
#include "../base/half.h"

/* A quiet-looking but non-canonical NaN: arithmetic yields 0x7fc00000 / 0xffc00000 or propagates an input's
 * payload, never this pattern from non-poisoned data. The 16-bit types' are signaling NaNs, which no conversion
 * produces (they quiet NaNs) and no arithmetic does. */
#define VERIFY_POISON_BITS 0x7fa5a5a5u
#define VERIFY_POISON_F16 0x7d5au
#define VERIFY_POISON_BF16 0x7fa5u

float kg_data_get(kg_dtype t, const void *buf, int64_t k) {
  switch (t) {
  case KG_DT_F16: return kg_f16_to_f32(((const uint16_t *)buf)[k]);
  case KG_DT_BF16: return kg_bf16_to_f32(((const uint16_t *)buf)[k]);
  default: return ((const float *)buf)[k];
  }
}

void kg_data_set(kg_dtype t, void *buf, int64_t k, double v) {
  switch (t) {
  case KG_DT_F16: ((uint16_t *)buf)[k] = kg_f16_from_double(v); break;
  case KG_DT_BF16: ((uint16_t *)buf)[k] = kg_bf16_from_f32((float)kg_round_bf16(v)); break;
  default: ((float *)buf)[k] = (float)v; break;
  }
}

/* Does element k of buf (of type t) hold the poison? */
static int poisoned_at(kg_dtype t, const void *buf, int64_t k) {
  switch (t) {
  case KG_DT_F16: return ((const uint16_t *)buf)[k] == VERIFY_POISON_F16;
  case KG_DT_BF16: return ((const uint16_t *)buf)[k] == VERIFY_POISON_BF16;
  default: {
    uint32_t bits;
    memcpy(&bits, (const float *)buf + k, sizeof bits);
    return bits == VERIFY_POISON_BITS;
  }
  }
}

int64_t kg_data_words(const kg_tensor *t) {
  return (kg_tensor_numel(t) * kg_dtype_size[t->dtype] + 3) / 4;
}

/* Uniform in [0, 1) with 24 bits, exactly representable as f32. */
static double rng_unit(uint64_t *s) { return (double)(kg_rng_next(s) >> 40) * (1.0 / 16777216.0); }

static void data_draw_signed(kg_data *d, const kg_program *p, uint64_t seed) {
  uint64_t s = seed;
  for (int i = 0; i < d->ninputs; i++) {
    int64_t n = kg_tensor_numel(p->inputs[i]);
    for (int64_t k = 0; k < n; k++) {
      double mag = 1.0 / 64 + rng_unit(&s) * (1.0 - 1.0 / 64);
      kg_data_set(p->inputs[i]->dtype, d->inputs[i], k, (kg_rng_next(&s) & 1) ? -mag : mag);
    }
  }
}

static void data_draw_positive(kg_data *d, const kg_program *p, uint64_t seed) {
  uint64_t s = seed ^ 0x5bd1e9955bd1e995ull; /* a different stream from the signed draw */
  for (int i = 0; i < d->ninputs; i++) {
    int64_t n = kg_tensor_numel(p->inputs[i]);
    for (int64_t k = 0; k < n; k++) kg_data_set(p->inputs[i]->dtype, d->inputs[i], k, 0.5 + rng_unit(&s));
  }
}

double kg_data_bytes(const kg_program *p) {
  double bytes = 0;
  for (int i = 0; i < p->ntensors; i++) {
    const kg_tensor *t = p->tensors[i];
    double n = (double)kg_tensor_numel(t), sz = kg_dtype_size[t->dtype];
    /* inputs: their own and (narrow) the reference's f32 copy; outputs: theirs + the double reference; temps:
     * the reference's double + the kernel's */
    bytes += t->kind == KG_TENSOR_INPUT ? (sz + (sz < 4 ? 4 : 0)) * n : (8 + sz) * n;
  }
  return bytes;
}

double kg_data_need(const kg_program *p) {
  double io = 0;
  for (int i = 0; i < p->ntensors; i++)
    if (p->tensors[i]->kind != KG_TENSOR_TEMP)
      io += (double)kg_dtype_size[p->tensors[i]->dtype] * (double)kg_tensor_numel(p->tensors[i]);
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
    ok = (d->inputs[i] = data_alloc(kg_data_words(p->inputs[i]), sizeof(float))) != NULL;
  for (int i = 0; ok && i < p->noutputs; i++)
    ok = (d->outputs[i] = data_alloc(kg_data_words(p->outputs[i]), sizeof(float))) != NULL &&
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

/* A NaN input with the poison's bits (a user's .npy may hold any pattern) would reach an output through a copy
 * or a max and be taken for an element the kernel never wrote: it becomes the canonical NaN, which means the
 * same. Runs before the reference, so the kernels see the inputs the reference saw. */
static void inputs_unpoison(kg_data *d, const kg_program *p) {
  for (int i = 0; i < d->ninputs; i++) {
    int64_t n = kg_tensor_numel(p->inputs[i]);
    for (int64_t k = 0; k < n; k++)
      if (poisoned_at(p->inputs[i]->dtype, d->inputs[i], k)) kg_data_set(p->inputs[i]->dtype, d->inputs[i], k, NAN);
  }
}

/* kg_eval_reference fails only on an out-of-bounds read, which it turns into NaN: reported like NaN here. It
 * reads f32 values: narrow inputs are widened into copies for it. */
int kg_data_reference_as_is(kg_data *d, const kg_program *p) {
  ref_alloc(d, p);
  inputs_unpoison(d, p);
  const float **in = kg_xrealloc(NULL, sizeof(float *) * (size_t)(p->ninputs + 1));
  int rc = 0;
  for (int i = 0; i < p->ninputs; i++) {
    in[i] = d->inputs[i];
    if (p->inputs[i]->dtype == KG_DT_F32) continue;
    int64_t n = kg_tensor_numel(p->inputs[i]);
    float *w = data_alloc(n, sizeof(float));
    if (!w) {
      rc = -2;
      for (int j = 0; j < i; j++)
        if (in[j] != d->inputs[j]) free((void *)in[j]);
      break;
    }
    for (int64_t k = 0; k < n; k++) w[k] = kg_data_get(p->inputs[i]->dtype, d->inputs[i], k);
    in[i] = w;
  }
  if (rc == 0) {
    rc = kg_eval_reference(p, in, d->ref);
    for (int i = 0; i < p->ninputs; i++)
      if (in[i] != d->inputs[i]) free((void *)in[i]);
  }
  free(in);
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
    kg_dtype t = p->outputs[i]->dtype;
    if (t == KG_DT_F32) {
      for (int64_t k = 0; k < n; k++) d->outputs[i][k] = poison;
    } else {
      uint16_t h = t == KG_DT_F16 ? VERIFY_POISON_F16 : VERIFY_POISON_BF16;
      for (int64_t k = 0; k < n; k++) ((uint16_t *)d->outputs[i])[k] = h;
    }
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
static const char *element_check(int poisoned, float got, double ref, double scale, double rtol, double *err) {
  *err = 0;
  if (poisoned) return "unwritten (still poisoned)";
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

/* One unit in the last place, relative (2^(1-p) for p significant bits): how far two correctly rounded results
 * may land apart when the values they round differ by a little. */
static double dtype_ulp(kg_dtype t) { return t == KG_DT_F16 ? 0x1p-10 : t == KG_DT_BF16 ? 0x1p-7 : 0; }

/* TF32's ulp (11 significant bits), where the program allows it: a tensorized product's operands are each rounded
 * to it, so every product may be off by one such ulp of its value, a narrow intermediate's error by another name. */
#define TF32_ULP 0x1p-10

/* The widest ulp (dtype_ulp) among the program's tensors of this kind: 0 when they are all f32; a program that
 * allows TF32 has operands of its products rounded as if its intermediates were TF32. */
static double narrow_ulp(const kg_program *p, kg_tensor_kind kind) {
  double u = kind == KG_TENSOR_TEMP && p->tf32 ? TF32_ULP : 0;
  for (int i = 0; i < p->ntensors; i++)
    if (p->tensors[i]->kind == kind && dtype_ulp(p->tensors[i]->dtype) > u) u = dtype_ulp(p->tensors[i]->dtype);
  return u;
}

double kg_verify_tolerance(const kg_program *p, double rtol) {
  if (!(rtol > 0)) rtol = 1e-4;
  double len = longest_reduction(p);
  double tol = len > 256 ? rtol * sqrt(len / 256) : rtol;
  /* Narrow types: the kernel rounds an f32 result, the reference the exact one; near a rounding boundary they
   * land one ulp apart: one ulp of the output type, and twice that of the widest narrow intermediate, whose
   * elements may each be an ulp off before the stages that read them (a kernel that rounds where the program
   * does not, or not where it does, is off by far more, except on the elements it happens to agree). */
  return tol + narrow_ulp(p, KG_TENSOR_OUTPUT) + 2 * narrow_ulp(p, KG_TENSOR_TEMP);
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
  /* An error is relative to the element, or to 1% of the output's largest one where the element is smaller (a result
   * that cancels). With a narrow intermediate, to the largest one: an intermediate element rounded one step the
   * other way (the kernel's f32 value near a boundary) moves the result by an ulp of the terms it is combined with,
   * whatever the cancellation leaves (an attention's bf16 weights, averaging values of both signs, give outputs
   * near zero off by an ulp of the values). */
  const double floor_share = narrow_ulp(p, KG_TENSOR_TEMP) > 0 ? 1 : 1e-2;
  for (int i = 0; i < d->noutputs; i++) {
    const kg_tensor *t = p->outputs[i];
    int64_t n = kg_tensor_numel(t);
    const void *got = d->outputs[i];
    kg_dtype ty = t->dtype;
    const double *ref = d->ref[i];
    double maxabs = 0;
    for (int64_t k = 0; k < n; k++)
      if (isfinite(ref[k]) && fabs(ref[k]) > maxabs) maxabs = fabs(ref[k]);
    double scale = maxabs > 0 ? floor_share * maxabs : 1e-30;
    for (int64_t k = 0; k < n; k++) {
      double err;
      float g = kg_data_get(ty, got, k);
      const char *why = element_check(poisoned_at(ty, got, k), g, ref[k], scale, rtol, &err);
      if (err > r.max_rel_err) r.max_rel_err = err;
      if (!why) continue;
      if (strcmp(why, "error") != 0) r.max_rel_err = INFINITY;
      if (!r.ok) continue; /* report the first failure only */
      r.ok = 0;
      char where[160];
      format_index(where, sizeof where, t, k);
      if (!strcmp(why, "error"))
        snprintf(r.msg, sizeof r.msg, "%s: got %.9g expected %.9g (rel err %.3g, tolerance %.3g)", where,
                 (double)g, ref[k], err, rtol);
      else if (!strcmp(why, "wrong class"))
        snprintf(r.msg, sizeof r.msg, "%s: got %.9g expected %s", where, (double)g, class_name(ref[k]));
      else if (!strcmp(why, "non-finite"))
        snprintf(r.msg, sizeof r.msg, "%s: got %s expected %.9g", where, class_name((double)g), ref[k]);
      else
        snprintf(r.msg, sizeof r.msg, "%s: %s", where, why);
    }
  }
  return r;
}
