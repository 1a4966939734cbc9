/* Arena allocation: every IR of kgen lives in one arena that is freed at once (one per program, one per
 * schedule/candidate). Nothing allocated from an arena is ever freed on its own. */
#ifndef KG_ARENA_H
#define KG_ARENA_H
#include <stddef.h>
#include <stdarg.h>

typedef struct kg_arena_block kg_arena_block;
typedef struct kg_arena {
  kg_arena_block *head;
  size_t used_bytes; /* total handed out, for reports */
} kg_arena;

void kg_arena_init(kg_arena *a);
void kg_arena_free(kg_arena *a);
/* Zeroed, 16-byte aligned memory; aborts only when the system is out of memory. */
void *kg_arena_alloc(kg_arena *a, size_t size);
char *kg_arena_strdup(kg_arena *a, const char *s);
char *kg_arena_strndup(kg_arena *a, const char *s, size_t n);
char *kg_arena_printf(kg_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Grows an arena array: returns a copy of old (n elements of size elem) with room for cap elements. */
void *kg_arena_grow(kg_arena *a, void *old, size_t n, size_t cap, size_t elem);

#define KG_NEW(a, T) ((T *)kg_arena_alloc((a), sizeof(T)))
#define KG_NEW_ARRAY(a, T, n) ((T *)kg_arena_alloc((a), sizeof(T) * (size_t)(n)))

/* Append to an arena-backed dynamic array: p (T*), n (int), cap (int). */
#define KG_PUSH(a, p, n, cap, v)                                                        \
  do {                                                                                  \
    if ((n) == (cap)) {                                                                 \
      int kg_newcap_ = (cap) ? 2 * (cap) : 8;                                           \
      (p) = kg_arena_grow((a), (p), (size_t)(n), (size_t)kg_newcap_, sizeof(*(p)));     \
      (cap) = kg_newcap_;                                                               \
    }                                                                                   \
    (p)[(n)++] = (v);                                                                   \
  } while (0)
#endif
