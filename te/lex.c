/* Lexer of the tensor-expression language. Requires: src->text holds src->len bytes (NUL bytes included,
 * they are an error); positions count bytes, 1-based, so that the caret lines up with the printed line. */
#include "lex.h"
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void kg_lex_init(kg_lexer *lx, const kg_source *src, kg_diag *diag, kg_arena *arena) {
  lx->src = src;
  lx->off = 0;
  lx->line = 1;
  lx->col = 1;
  lx->diag = diag;
  lx->arena = arena;
}

int kg_tok_is(const kg_token *t, const char *s) {
  size_t n = strlen(s);
  return t->kind != KG_TK_EOF && t->kind != KG_TK_NUM && t->len == n && memcmp(t->s, s, n) == 0;
}

static int peek_at(const kg_lexer *lx, size_t k) {
  size_t o = lx->off + k;
  return o < lx->src->len ? (unsigned char)lx->src->text[o] : -1;
}

static void bump(kg_lexer *lx) {
  if (lx->src->text[lx->off] == '\n') {
    lx->line++;
    lx->col = 1;
  } else {
    lx->col++;
  }
  lx->off++;
}

static kg_pos here(const kg_lexer *lx) {
  kg_pos p = {lx->src, lx->line, lx->col, lx->off};
  return p;
}

static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* NUMBER = DIGITS [ "." DIGITS ] [ ("e"|"E") ["+"|"-"] DIGITS ]. "0..N" lexes as 0, "..", N: a '.' is part
 * of a number only when a digit follows it. A letter glued to a number ("2x", "1e") is an error rather than two
 * tokens, which would only produce a more confusing message later. */
static int lex_number(kg_lexer *lx, kg_token *t) {
  size_t start = lx->off;
  int is_int = 1;
  while (is_digit(peek_at(lx, 0))) bump(lx);
  if (peek_at(lx, 0) == '.' && is_digit(peek_at(lx, 1))) {
    is_int = 0;
    bump(lx);
    while (is_digit(peek_at(lx, 0))) bump(lx);
  }
  if (peek_at(lx, 0) == 'e' || peek_at(lx, 0) == 'E') {
    int k = 1;
    if (peek_at(lx, 1) == '+' || peek_at(lx, 1) == '-') k = 2;
    if (is_digit(peek_at(lx, (size_t)k))) {
      is_int = 0;
      for (int j = 0; j < k; j++) bump(lx);
      while (is_digit(peek_at(lx, 0))) bump(lx);
    }
  }
  t->s = lx->src->text + start;
  t->len = lx->off - start;
  if (is_alpha(peek_at(lx, 0)) || (peek_at(lx, 0) == '.' && peek_at(lx, 1) != '.')) {
    size_t e = lx->off;
    while (e < lx->src->len && (is_alpha((unsigned char)lx->src->text[e]) || is_digit((unsigned char)lx->src->text[e]) || lx->src->text[e] == '.')) e++;
    int n = (int)(e - start > 40 ? 40 : e - start);
    kg_diag_error(lx->diag, lx->arena, t->pos, "malformed number '%.*s'", n, t->s);
    return -1;
  }
  t->is_int = is_int;
  if (is_int) {
    int64_t v = 0;
    for (size_t k = 0; k < t->len; k++) {
      int d = t->s[k] - '0';
      if (v > (INT64_MAX - d) / 10) {
        kg_diag_error(lx->diag, lx->arena, t->pos, "integer literal too large");
        return -1;
      }
      v = v * 10 + d;
    }
    t->i = v;
    t->f = (double)v;
  } else {
    /* strtod needs a terminated string; the literal is bounded, but may be long (a 1 MB run of digits). */
    char buf[128];
    char *tmp = t->len < sizeof buf ? buf : malloc(t->len + 1);
    if (!tmp) {
      kg_diag_error(lx->diag, lx->arena, t->pos, "out of memory reading a number");
      return -1;
    }
    memcpy(tmp, t->s, t->len);
    tmp[t->len] = 0;
    errno = 0;
    double f = strtod(tmp, NULL);
    if (tmp != buf) free(tmp);
    /* Values are f32: a literal that would round to infinity is refused here, where the caret can point at it.
     * The limit is FLT_MAX plus half an ulp (0x1.ffffffp127), not FLT_MAX itself, so that FLT_MAX printed with
     * 9 digits (3.40282347e+38, a little above it) still reads back as FLT_MAX. */
    if (!isfinite(f) || fabs(f) >= 0x1.ffffffp127) { /* tiny literals just round toward 0 */
      int n = t->len > 40 ? 40 : (int)t->len;
      kg_diag_error(lx->diag, lx->arena, t->pos, "number %.*s%s is out of the f32 range (values are f32; the largest is about 3.4028235e38)",
                    n, t->s, t->len > 40 ? "..." : "");
      return -1;
    }
    t->f = f;
    t->i = 0;
  }
  return 0;
}

/* Longest match first. */
static const char *const puncts[] = {"->", "..", "<=", ">=", "==", "!=", "&&", "||", "(", ")", "[", "]", "{",
                                     "}", ",", ":", ";", "=", "+", "-", "*", "/", "%", "<", ">", "!"};

int kg_lex_next(kg_lexer *lx, kg_token *t) {
  memset(t, 0, sizeof *t);
  for (;;) {
    int c = peek_at(lx, 0);
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      bump(lx);
    } else if (c == '#') {
      /* Comments may hold any byte (UTF-8 prose, even NUL): only the newline ends them. */
      while (peek_at(lx, 0) != -1 && peek_at(lx, 0) != '\n') bump(lx);
    } else {
      break;
    }
  }
  t->pos = here(lx);
  int c = peek_at(lx, 0);
  if (c == -1) {
    t->kind = KG_TK_EOF;
    t->s = lx->src->text + lx->off;
    t->len = 0;
    return 0;
  }
  if (is_alpha(c)) {
    size_t start = lx->off;
    while (is_alpha(peek_at(lx, 0)) || is_digit(peek_at(lx, 0))) bump(lx);
    t->kind = KG_TK_IDENT;
    t->s = lx->src->text + start;
    t->len = lx->off - start;
    if (t->len > KG_MAX_NAME) {
      kg_diag_error(lx->diag, lx->arena, t->pos, "name '%.20s...' too long (max %d characters)", t->s, KG_MAX_NAME);
      return -1;
    }
    return 0;
  }
  if (is_digit(c)) {
    t->kind = KG_TK_NUM;
    return lex_number(lx, t);
  }
  for (size_t k = 0; k < sizeof puncts / sizeof puncts[0]; k++) {
    size_t n = strlen(puncts[k]);
    if (lx->off + n <= lx->src->len && memcmp(lx->src->text + lx->off, puncts[k], n) == 0) {
      t->kind = KG_TK_PUNCT;
      t->s = lx->src->text + lx->off;
      t->len = n;
      for (size_t j = 0; j < n; j++) bump(lx);
      return 0;
    }
  }
  if (c == 0)
    kg_diag_error(lx->diag, lx->arena, t->pos, "NUL byte in the source (only ASCII text is allowed)");
  else if (c >= 127 || c < 32)
    kg_diag_error(lx->diag, lx->arena, t->pos, "unexpected byte 0x%02x (only ASCII text is allowed outside comments)", c);
  else if (c == '.')
    kg_diag_error(lx->diag, lx->arena, t->pos, "unexpected '.' (write decimals as 0.5, ranges as lo..hi)");
  else
    kg_diag_error(lx->diag, lx->arena, t->pos, "unexpected character '%c'", c);
  return -1;
}
