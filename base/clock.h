/* Monotonic wall-clock seconds, for compile and run timings, and how reports print a duration. */
#ifndef KG_CLOCK_H
#define KG_CLOCK_H
#include <stdio.h>
#include <time.h>

static inline double kg_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "-" for none, else 3 significant digits in us, ms or s ("21.4 ns" kernels print as "0.0214 us"). */
static inline void kg_format_seconds(char *buf, size_t len, double s) {
  if (s <= 0) snprintf(buf, len, "-");
  else if (s < 1e-3) snprintf(buf, len, "%.3g us", s * 1e6);
  else if (s < 1) snprintf(buf, len, "%.3f ms", s * 1e3);
  else snprintf(buf, len, "%.3f s", s);
}
#endif
