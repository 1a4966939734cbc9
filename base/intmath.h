/* Integer division and modulo rounding toward minus infinity, the semantics of the language's / and % on
 * indices and sizes: (i - 1) % N wraps around to N - 1. One definition for the evaluator, the checker, the IR's
 * constant folding, bounds analysis and the CUDA grid programs (generated code prints its own helpers).
 *
 * Requires b != 0 and not (a == INT64_MIN && b == -1); callers that may meet those check first. */
#ifndef KG_INTMATH_H
#define KG_INTMATH_H
#include <stdint.h>

static inline int64_t kg_int_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static inline int64_t kg_int_floormod(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
#endif
