#include "diag.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "strbuf.h"

void kg_diag_error(kg_diag *d, kg_arena *a, kg_pos pos, const char *fmt, ...) {
  if (d->failed) return;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  d->failed = 1;
  d->pos = pos;
  d->text = kg_arena_strdup(a, text);
  kg_strbuf b;
  kg_strbuf_init(&b);
  if (!pos.src) {
    kg_strbuf_printf(&b, "error: %s\n", text);
  } else {
    kg_strbuf_printf(&b, "%s:%d:%d: error: %s\n", pos.src->name, pos.line, pos.col, text);
    const char *t = pos.src->text;
    size_t off = pos.offset > pos.src->len ? pos.src->len : pos.offset;
    size_t ls = off, le = off;
    while (ls > 0 && t[ls - 1] != '\n') ls--;
    while (le < pos.src->len && t[le] != '\n') le++;
    /* Show at most 100 columns around the caret so that a 1 MB line stays readable. */
    size_t from = ls, to = le;
    if (off - ls > 60) from = off - 60;
    if (to - from > 100) to = from + 100;
    if (to < off) to = off;
    /* "..." marks where the line was cut, so a cut line does not look like different source */
    int cut_left = from > ls, cut_right = to < le;
    kg_strbuf_puts(&b, cut_left ? "  ..." : "  ");
    for (size_t i = from; i < to; i++) {
      unsigned char c = (unsigned char)t[i];
      kg_strbuf_putc(&b, (c == '\t') ? ' ' : (c < 32 || c >= 127) ? '?' : (char)c);
    }
    kg_strbuf_puts(&b, cut_right ? "...\n  " : "\n  ");
    if (cut_left) kg_strbuf_puts(&b, "   ");
    for (size_t i = from; i < off; i++) kg_strbuf_putc(&b, ' ');
    kg_strbuf_puts(&b, "^\n");
  }
  d->msg = kg_arena_strdup(a, b.s);
  kg_strbuf_free(&b);
}
