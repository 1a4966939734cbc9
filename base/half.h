/* The 16-bit float formats kgen stores (IEEE binary16 "f16" and bfloat16 "bf16"): rounding and bit conversions.
 *
 * Shared by the reference evaluator (which rounds doubles straight to the format: one rounding, never through f32),
 * the runtime (which packs f32 test data into the formats and unpacks results) and .npy files. Generated code has
 * its own copies (codegen/ preludes), so that a kernel never depends on libkgen.
 *
 * Rounding is to nearest, ties to even; overflow goes to infinity; NaN stays NaN (quiet, sign kept). */
#ifndef KG_HALF_H
#define KG_HALF_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* x rounded to a binary format of p significant bits whose normal numbers start at 2^emin (below that: the
 * subnormal spacing 2^(emin-p+1)), values of magnitude >= ovf overflowing to infinity. */
static inline double kg_round_format(double x, int p, int emin, double ovf) {
  if (isnan(x) || isinf(x) || x == 0) return x;
  double a = fabs(x);
  if (a >= ovf) return copysign(INFINITY, x);
  int e;
  (void)frexp(a, &e); /* a in [2^(e-1), 2^e) */
  int ex = e - 1 < emin ? emin : e - 1;
  double r = ldexp(rint(ldexp(a, (p - 1) - ex)), ex - (p - 1)); /* scaling by powers of two is exact */
  return copysign(r, x);
}
/* 65520 = halfway between f16's largest finite value 65504 and 2^16: ties go to even, which is the infinity. */
static inline double kg_round_f16(double x) { return kg_round_format(x, 11, -14, 65520.0); }
static inline double kg_round_bf16(double x) { return kg_round_format(x, 8, -126, 0x1.ffp127); }

static inline uint32_t kg_half_fbits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline float kg_half_bitsf(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* bf16 is the upper half of an f32: widening is a shift; narrowing rounds the lower 16 bits away. */
static inline float kg_bf16_to_f32(uint16_t h) { return kg_half_bitsf((uint32_t)h << 16); }
static inline uint16_t kg_bf16_from_f32(float f) {
  uint32_t u = kg_half_fbits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN: quiet, payload's top kept */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float kg_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 31) return kg_half_bitsf(sign | 0x7f800000u | (m << 13)); /* inf, NaN with its payload */
  if (e == 0) return (float)ldexp((double)m, -24) * (sign ? -1.0f : 1.0f); /* zero and subnormals */
  return kg_half_bitsf(sign | ((e + 112u) << 23) | (m << 13));
}
/* Exact for every value kg_round_f16 returns (and for every f32, which it rounds first). */
static inline uint16_t kg_f16_from_double(double x) {
  uint16_t sign = signbit(x) ? 0x8000u : 0;
  if (isnan(x)) {
    uint32_t u = kg_half_fbits((float)x);
    return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
  }
  double r = fabs(kg_round_f16(x));
  if (isinf(r)) return (uint16_t)(sign | 0x7c00u);
  if (r < 0x1p-14) return (uint16_t)(sign | (uint16_t)ldexp(r, 24)); /* subnormal (or zero): units of 2^-24 */
  int e;
  (void)frexp(r, &e); /* r in [2^(e-1), 2^e) */
  uint32_t m = (uint32_t)ldexp(r, 11 - e) - 1024u;
  return (uint16_t)(sign | (uint32_t)(e - 1 + 15) << 10 | m);
}
static inline uint16_t kg_f16_from_f32(float f) { return kg_f16_from_double((double)f); }
#endif
