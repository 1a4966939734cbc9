/* What the bench tools written in C share: loading a program file at -D sizes, with the reason on stderr when it
 * does not load. Header-only (each tool is one translation unit linked with libkgen). */
#ifndef KG_BENCH_LOAD_H
#define KG_BENCH_LOAD_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/file.h"
#include "../te/te.h"

/* Parses "NAME=VALUE" (the argument of -D) into b, the name pointing into arg (whose '=' becomes a NUL). 0, or -1
 * when arg is not of that form. */
static inline int bench_parse_binding(char *arg, kg_binding *b) {
  char *eq = strchr(arg, '=');
  if (!eq || eq == arg || !eq[1]) return -1;
  *eq = 0;
  b->name = arg;
  b->value = strtoll(eq + 1, NULL, 10);
  return 0;
}

/* The first def of the program file at path bound to b[0..nb), or NULL with the reason printed after `tool: `. */
static inline kg_program *bench_load_program(const char *tool, const char *path, const kg_binding *b, int nb) {
  char err[512];
  size_t len;
  char *text = kg_file_read(path, KG_FILE_MAX_TEXT, &len, err, sizeof err);
  if (!text) {
    fprintf(stderr, "%s: %s\n", tool, err);
    return NULL;
  }
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  kg_program *p = kg_program_load(path, text, len, NULL, b, nb, &diag, &da);
  free(text);
  if (!p) fprintf(stderr, "%s\n", diag.msg ? diag.msg : "cannot load the program");
  kg_arena_free(&da);
  return p;
}
#endif
