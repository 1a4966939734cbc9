/* Heap allocation that treats running out of memory as fatal: for the few heap buffers outside arenas (test data,
 * argument arrays, timings), where there is no sensible way to go on. Arenas and strbufs do the same. */
#ifndef KG_XALLOC_H
#define KG_XALLOC_H
#include <stdio.h>
#include <stdlib.h>

static inline void *kg_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    fprintf(stderr, "kgen: out of memory (%zu bytes)\n", n);
    abort();
  }
  return q;
}
#endif
