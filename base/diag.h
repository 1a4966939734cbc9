/* Source positions and user-input diagnostics: "FILE:LINE:COL: error: MESSAGE", then the source line with a
 * caret under the fault. Every AST and IR node keeps a kg_pos so later stages can point back at the source. */
#ifndef KG_DIAG_H
#define KG_DIAG_H
#include <stddef.h>
#include "arena.h"

typedef struct kg_source {
  const char *name; /* file name as given by the user */
  const char *text; /* whole file; may contain NUL bytes, hence len */
  size_t len;
} kg_source;

typedef struct kg_pos {
  const kg_source *src; /* NULL for nodes that the compiler made up */
  int line, col;        /* 1-based */
  size_t offset;        /* byte offset into src->text */
} kg_pos;

/* The first error found; kgen stops at the first user-input error. msg is the whole formatted diagnostic
 * (position line, source line, caret), ready to print. */
typedef struct kg_diag {
  int failed;
  char *msg;  /* arena-allocated; NULL when !failed */
  kg_pos pos;
  char *text; /* the bare message without position, for tests */
} kg_diag;

/* Formats the diagnostic into d (allocating in a). Only the first error is kept. Non-printable bytes of the
 * source line are shown as '?', and very long lines are cut around the caret. */
void kg_diag_error(kg_diag *d, kg_arena *a, kg_pos pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#endif
