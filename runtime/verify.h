/* Test data for one program: random inputs, poisoned outputs, the reference result, and the comparison that
 * decides `verify: ok` or `verify: FAILED`. */
#ifndef KG_VERIFY_H
#define KG_VERIFY_H
#include <stddef.h>
#include <stdint.h>
#include "../te/te.h"

/* The buffers hold each tensor as kernels take it: f32 tensors as floats, f16 and bf16 ones as 16-bit elements
 * (the float pointer then addresses uint16_t storage: read and write those with kg_data_get / kg_data_set). */
typedef struct kg_data {
  int ninputs, noutputs;
  float **inputs;  /* malloc'ed, kg_data_words of p->inputs[i] each */
  float **outputs; /* malloc'ed, for the kernel under test */
  double **ref;    /* malloc'ed reference outputs (NULL until kg_data_reference) */
} kg_data;

/* Element k of a buffer holding type t, as an f32 value (exact). */
float kg_data_get(kg_dtype t, const void *buf, int64_t k);
/* Stores v into element k, rounded to t (to nearest even). */
void kg_data_set(kg_dtype t, void *buf, int64_t k, double v);
/* 4-byte words a buffer of t takes (its bytes rounded up): what the runtime allocates, maps and copies. */
int64_t kg_data_words(const kg_tensor *t);

/* Bytes a verified run of p holds at once: f32 inputs and outputs, the double reference, the evaluator's double
 * intermediates and the kernel's f32 temporaries. */
double kg_data_bytes(const kg_program *p);
/* kg_data_bytes plus the f32 inputs and outputs a kernel runs on (the measurement harness's shared buffers): the
 * one figure run, tune and replay check before allocating. */
double kg_data_need(const kg_program *p);
/* 0 when kg_data_need(p) fits in this process's memory budget (base/mem.h: free memory, ulimit -v, cgroups);
 * else -1 with the one "not enough memory" message in err. */
int kg_data_check_memory(const kg_program *p, char *err, size_t errlen);
/* The one message for what the check above let through but malloc then refused: the data (kg_data_init failed;
 * reference 0) or the reference evaluator's intermediates (kg_data_reference* returned -2; reference 1). */
void kg_data_oom_message(const kg_program *p, int reference, char *err, size_t errlen);
/* Allocates buffers (the reference's too) and draws inputs from seed: uniform in [-1, 1] with |x| >= 1/64
 * (never zero). 0, or -1 when an allocation fails (nothing is left allocated; d is zeroed). */
int kg_data_init(kg_data *d, const kg_program *p, uint64_t seed);
void kg_data_free(kg_data *d);
/* Runs the reference evaluator. If the reference is not finite everywhere with signed inputs (log, sqrt of
 * negatives), inputs are redrawn positive in [0.5, 1.5] and the reference is computed again. Returns 0, or -1
 * when the reference still has non-finite values (the comparison then requires the same class: NaN / +-inf), or -2
 * when the evaluator's intermediates could not be allocated (an error: not enough memory). */
int kg_data_reference(kg_data *d, const kg_program *p, uint64_t seed);
/* The reference on the inputs as they are (the user's, from --load): never redraws them. Returns 0, -1 when
 * the reference is not finite everywhere, or -2 as kg_data_reference. */
int kg_data_reference_as_is(kg_data *d, const kg_program *p);
/* Fills every output with the poison bit pattern (a NaN no computation produces), so an unwritten element
 * fails verification. */
void kg_data_poison(kg_data *d, const kg_program *p);

typedef struct kg_verify_result {
  int ok;
  double max_rel_err; /* max over elements of |got - ref| / max(|ref|, 1e-2 * max|ref of that tensor|) */
  double tolerance;   /* the bound max_rel_err was held to (see kg_verify_tolerance) */
  char msg[512];      /* on failure: tensor, first bad index (as i,j,...), got, expected, and why
                         (unwritten, NaN, error) */
} kg_verify_result;

/* Compares d->outputs with d->ref against kg_verify_tolerance(p, rtol). */
kg_verify_result kg_verify(const kg_program *p, const kg_data *d, double rtol);
/* rtol (1e-4 when <= 0) widened by sqrt(L / 256) when the program's longest reduction L is longer than 256
 * terms, since f32 accumulation error grows with the square root of the length; plus, for f16/bf16 data, one ulp
 * of the narrowest output type and two of the narrowest intermediate type (2^-10 for f16, 2^-7 for bf16). */
double kg_verify_tolerance(const kg_program *p, double rtol);

/* NumPy .npy files (version 1.0, C order). data is in t's storage (as kg_data's buffers): f32 is written as '<f4',
 * f16 as '<f2', bf16 as '<f4' holding its exact values (NumPy has no bf16). */
int kg_npy_save(const char *path, const void *data, kg_dtype t, int ndim, const int64_t *shape, char *err,
                size_t errlen);
/* Loads a '<f4' or '<f2' file whose shape must equal (ndim, shape) into t's storage, each value rounded to t
 * (to nearest even); returns malloc'ed data (kg_tensor_numel elements of t) or NULL with the reason in err. */
void *kg_npy_load(const char *path, kg_dtype t, int ndim, const int64_t *shape, char *err, size_t errlen);
#endif
