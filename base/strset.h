/* A set of strings (open addressing, FNV-1a), owning copies of its members. For de-duplicating candidates by
 * trace text. */
#ifndef KG_STRSET_H
#define KG_STRSET_H
#include <stddef.h>
#include <stdint.h>

typedef struct kg_strset {
  char **slots;
  size_t cap, n;
} kg_strset;

void kg_strset_init(kg_strset *s);
void kg_strset_free(kg_strset *s);
/* 1 when s holds str. */
int kg_strset_has(const kg_strset *s, const char *str);
/* Adds a copy of str; returns 1 when it was new, 0 when already there. */
int kg_strset_add(kg_strset *s, const char *str);
uint64_t kg_str_hash(const char *str);
#endif
