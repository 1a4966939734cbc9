/* Helpers for tests that walk the workload library (te/lib) and the test programs (tests/programs). */
#ifndef KG_TESTLIB_H
#define KG_TESTLIB_H
#include <stdlib.h>
#include <string.h>
#include "../te/te.h"

#define KG_TEST_MAX_BIND 16

/* Reads the "# sizes: A=1 B=2" line of a workload file into b (names stored in names[]), each value multiplied
 * by scale, plus one when scale > 1 so that scaled sizes do not become multiples of the originals. Returns the
 * number of bindings, or -1 without such a line. */
static inline int kg_test_parse_sizes(const char *text, kg_binding *b, char names[][32], int scale) {
  const char *s = strstr(text, "# sizes:");
  if (!s) return -1;
  s += strlen("# sizes:");
  int n = 0;
  while (*s && *s != '\n' && n < KG_TEST_MAX_BIND) {
    while (*s == ' ') s++;
    if (!*s || *s == '\n') break;
    int len = 0;
    while (s[len] && s[len] != '=' && s[len] != ' ' && s[len] != '\n' && len < 31) len++;
    if (s[len] != '=') return -1;
    memcpy(names[n], s, (size_t)len);
    names[n][len] = 0;
    char *end;
    long long v = strtoll(s + len + 1, &end, 10);
    b[n].name = names[n];
    b[n].value = v * scale + (scale > 1);
    n++;
    s = end;
  }
  return n;
}
#endif
