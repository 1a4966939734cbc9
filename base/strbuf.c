#include "strbuf.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kg_strbuf_init(kg_strbuf *b) { b->s = NULL; b->len = b->cap = 0; }
void kg_strbuf_free(kg_strbuf *b) { free(b->s); kg_strbuf_init(b); }

static void reserve(kg_strbuf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *s = realloc(b->s, cap);
  if (!s) {
    fprintf(stderr, "kgen: out of memory (string of %zu bytes)\n", cap);
    abort();
  }
  b->s = s;
  b->cap = cap;
}

void kg_strbuf_putn(kg_strbuf *b, const char *s, size_t n) {
  reserve(b, n);
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = 0;
}
void kg_strbuf_puts(kg_strbuf *b, const char *s) { kg_strbuf_putn(b, s, strlen(s)); }
void kg_strbuf_putc(kg_strbuf *b, char c) { kg_strbuf_putn(b, &c, 1); }

void kg_strbuf_printf(kg_strbuf *b, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n > 0) {
    reserve(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
    b->len += (size_t)n;
  }
  va_end(ap2);
}

void kg_strbuf_indent(kg_strbuf *b, int level) {
  for (int i = 0; i < level; i++) kg_strbuf_putn(b, "  ", 2);
}

char *kg_strbuf_take(kg_strbuf *b) {
  if (!b->s) reserve(b, 0), b->s[0] = 0;
  char *s = b->s;
  kg_strbuf_init(b);
  return s;
}
