/* Heap allocation that treats running out of memory as fatal: for the few small heap buffers outside arenas
 * (argument arrays, timings), where there is no sensible way to go on. Arenas and strbufs do the same. Never for
 * user-sized data (tensors, the reference and its intermediates, files read): those are checked against the
 * memory budget (base/mem.h) and allocated with a plain malloc whose failure is an error, exit 1. */
#ifndef KG_XALLOC_H
#define KG_XALLOC_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void *kg_xrealloc(void *p, size_t n) {
  void *q = realloc(p, n ? n : 1);
  if (!q) {
    fprintf(stderr, "kgen: out of memory (%zu bytes)\n", n);
    abort();
  }
  return q;
}

static inline char *kg_xstrdup(const char *s) {
  size_t n = strlen(s) + 1;
  return memcpy(kg_xrealloc(NULL, n), s, n);
}
#endif
