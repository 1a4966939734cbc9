/* Tokens of the tensor-expression language (lex.c). The lexer is streamed (one token at a time) so that a huge
 * input never becomes a huge token array; token texts point into the source, which outlives them. */
#ifndef KG_LEX_H
#define KG_LEX_H
#include <stddef.h>
#include <stdint.h>
#include "../base/arena.h"
#include "../base/diag.h"

/* The longest name (of a def, tensor, size or index variable) the language accepts: names reach generated C
 * identifiers and schedule loop names (which grow with every split, see KG_MAX_LOOP_NAME), so they are bounded
 * where the user writes them. */
#define KG_MAX_NAME 64

typedef enum {
  KG_TK_EOF,
  KG_TK_IDENT, /* [A-Za-z_][A-Za-z0-9_]* */
  KG_TK_NUM,   /* 12, 1.5, 2e-3, 1.5E+4 */
  KG_TK_PUNCT, /* ( ) [ ] { } , : ; = -> .. + - * / % < <= > >= == != && || ! */
} kg_token_kind;

typedef struct kg_token {
  kg_token_kind kind;
  kg_pos pos;
  const char *s; /* the token's text (not NUL-terminated) */
  size_t len;
  /* NUM only */
  int is_int;
  int64_t i;
  double f; /* the value, also for integers */
} kg_token;

typedef struct kg_lexer {
  const kg_source *src;
  size_t off;
  int line, col;
  kg_diag *diag;
  kg_arena *arena; /* for diagnostics */
} kg_lexer;

void kg_lex_init(kg_lexer *lx, const kg_source *src, kg_diag *diag, kg_arena *arena);
/* Reads the next token into *t. Returns 0, or -1 after reporting a lexical error in lx->diag. At the end of
 * the input it keeps returning KG_TK_EOF. */
int kg_lex_next(kg_lexer *lx, kg_token *t);
/* 1 when t is the punctuator or identifier spelled s. */
int kg_tok_is(const kg_token *t, const char *s);
#endif
