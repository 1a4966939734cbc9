#include "arena.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kg_arena_block {
  kg_arena_block *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

void kg_arena_init(kg_arena *a) { a->head = NULL; a->used_bytes = 0; }

void kg_arena_free(kg_arena *a) {
  kg_arena_block *b = a->head;
  while (b) {
    kg_arena_block *n = b->next;
    free(b);
    b = n;
  }
  a->head = NULL;
  a->used_bytes = 0;
}

void *kg_arena_alloc(kg_arena *a, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (size == 0) size = 16;
  kg_arena_block *b = a->head;
  if (!b || b->size - b->used < size) {
    size_t cap = size > 64 * 1024 ? size : 64 * 1024;
    b = malloc(sizeof(kg_arena_block) + cap);
    if (!b) {
      /* Out of memory is not an input error: there is no sensible way to go on. */
      fprintf(stderr, "kgen: out of memory (arena block of %zu bytes)\n", cap);
      abort();
    }
    b->size = cap;
    b->used = 0;
    b->next = a->head;
    a->head = b;
  }
  void *p = b->data + b->used;
  b->used += size;
  a->used_bytes += size;
  memset(p, 0, size);
  return p;
}

char *kg_arena_strndup(kg_arena *a, const char *s, size_t n) {
  char *d = kg_arena_alloc(a, n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

char *kg_arena_strdup(kg_arena *a, const char *s) { return kg_arena_strndup(a, s, strlen(s)); }

char *kg_arena_printf(kg_arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *d = kg_arena_alloc(a, (size_t)(n < 0 ? 0 : n) + 1);
  if (n > 0) vsnprintf(d, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return d;
}

void *kg_arena_grow(kg_arena *a, void *old, size_t n, size_t cap, size_t elem) {
  void *p = kg_arena_alloc(a, cap * elem);
  if (old && n) memcpy(p, old, n * elem);
  return p;
}
