/* A minimal test harness: CHECK records a failure with file:line and goes on; each test binary ends with
 * TEST_END(), printing "N passed, N failed" and exiting non-zero on any failure. */
#ifndef KG_TESTUTIL_H
#define KG_TESTUTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int kg_test_passed, kg_test_failed;

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (cond) {                                                                       \
      kg_test_passed++;                                                               \
    } else {                                                                          \
      kg_test_failed++;                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);        \
    }                                                                                 \
  } while (0)

#define CHECKF(cond, ...)                                                             \
  do {                                                                                \
    if (cond) {                                                                       \
      kg_test_passed++;                                                               \
    } else {                                                                          \
      kg_test_failed++;                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);        \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fputc('\n', stderr);                                                            \
    }                                                                                 \
  } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                               \
  do {                                                                                \
    const char *kg_hay_ = (hay);                                                      \
    CHECKF(kg_hay_ && strstr(kg_hay_, (needle)), "'%s' not found in '%s'", (needle),  \
           kg_hay_ ? kg_hay_ : "(null)");                                             \
  } while (0)

#define TEST_END()                                                                    \
  do {                                                                                \
    printf("%s: %d passed, %d failed\n", __FILE__, kg_test_passed, kg_test_failed);  \
    return kg_test_failed ? 1 : 0;                                                    \
  } while (0)

/* Reads a whole file (for workloads in te/lib); returns malloc'ed text or NULL. */
static inline char *kg_test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  size_t got = fread(s, 1, (size_t)n, f);
  s[got] = 0;
  fclose(f);
  if (len) *len = got;
  return s;
}
#endif
