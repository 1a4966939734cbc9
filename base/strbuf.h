/* A growable, always NUL-terminated string on the heap: generated code, dumps, messages. */
#ifndef KG_STRBUF_H
#define KG_STRBUF_H
#include <stddef.h>

typedef struct kg_strbuf {
  char *s;
  size_t len, cap;
} kg_strbuf;

void kg_strbuf_init(kg_strbuf *b);
void kg_strbuf_free(kg_strbuf *b);
void kg_strbuf_putn(kg_strbuf *b, const char *s, size_t n);
void kg_strbuf_puts(kg_strbuf *b, const char *s);
void kg_strbuf_putc(kg_strbuf *b, char c);
void kg_strbuf_printf(kg_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kg_strbuf_indent(kg_strbuf *b, int level); /* two spaces per level */
/* Hands the string to the caller (free() it) and resets the buffer. */
char *kg_strbuf_take(kg_strbuf *b);
#endif
