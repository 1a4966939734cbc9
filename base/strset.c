#include "strset.h"
#include <stdlib.h>
#include <string.h>
#include "xalloc.h"

uint64_t kg_str_hash(const char *str) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char *p = (const unsigned char *)str; *p; p++) h = (h ^ *p) * 1099511628211ull;
  return h;
}

void kg_strset_init(kg_strset *s) { memset(s, 0, sizeof *s); }

void kg_strset_free(kg_strset *s) {
  for (size_t i = 0; i < s->cap; i++) free(s->slots[i]);
  free(s->slots);
  memset(s, 0, sizeof *s);
}

/* The slot holding str, or the empty slot where it would go. Requires cap > n (a power of two). */
static size_t find(const kg_strset *s, const char *str) {
  size_t i = (size_t)kg_str_hash(str) & (s->cap - 1);
  while (s->slots[i] && strcmp(s->slots[i], str) != 0) i = (i + 1) & (s->cap - 1);
  return i;
}

int kg_strset_has(const kg_strset *s, const char *str) { return s->cap && s->slots[find(s, str)] != NULL; }

int kg_strset_add(kg_strset *s, const char *str) {
  if ((s->n + 1) * 2 > s->cap) {
    kg_strset old = *s;
    s->cap = old.cap ? old.cap * 2 : 64;
    s->slots = kg_xrealloc(NULL, s->cap * sizeof *s->slots);
    memset(s->slots, 0, s->cap * sizeof *s->slots);
    for (size_t i = 0; i < old.cap; i++)
      if (old.slots[i]) s->slots[find(s, old.slots[i])] = old.slots[i];
    free(old.slots);
  }
  size_t i = find(s, str);
  if (s->slots[i]) return 0;
  size_t len = strlen(str) + 1;
  s->slots[i] = kg_xrealloc(NULL, len);
  memcpy(s->slots[i], str, len);
  s->n++;
  return 1;
}
