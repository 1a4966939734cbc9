/* Monotonic wall-clock seconds, for compile and run timings. */
#ifndef KG_CLOCK_H
#define KG_CLOCK_H
#include <time.h>

static inline double kg_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif
