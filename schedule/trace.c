/* Traces: the list of steps that turns a default schedule into a schedule, and their text form.
 *
 *   trace = { line }     line = [ step ] [ "#" comment ] "\n"
 *   step  = KIND STAGE { NAME } { INT }       (tokens separated by blanks; the counts depend on KIND)
 *
 * The printed form is canonical (single spaces, one step per line), so text -> parse -> print is the identity
 * on canonical text and steps -> print -> parse gives the same steps. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "sched.h"

const char *const kg_step_names[KG_STEP_COUNT] = {
#define X(n, s, lo, hi, ni) s,
    KG_STEPS(X)
#undef X
};

const kg_step_form kg_step_forms[KG_STEP_COUNT] = {
#define X(n, s, lo, hi, ni) {lo, hi, ni},
    KG_STEPS(X)
#undef X
};

void kg_trace_init(kg_trace *t) {
  kg_arena_init(&t->arena);
  t->steps = NULL;
  t->nsteps = t->cap = 0;
}

void kg_trace_free(kg_trace *t) {
  kg_arena_free(&t->arena);
  t->steps = NULL;
  t->nsteps = t->cap = 0;
}

void kg_trace_push(kg_trace *t, const kg_step *step) {
  kg_step c = *step;
  c.stage = step->stage ? kg_arena_strdup(&t->arena, step->stage) : NULL;
  for (int i = 0; i < step->nnames && i < KG_STEP_MAX_NAMES; i++)
    c.names[i] = step->names[i] ? kg_arena_strdup(&t->arena, step->names[i]) : NULL;
  KG_PUSH(&t->arena, t->steps, t->nsteps, t->cap, c);
}

void kg_step_to_text(kg_strbuf *b, const kg_step *step) {
  kg_strbuf_puts(b, (unsigned)step->kind < KG_STEP_COUNT ? kg_step_names[step->kind] : "?");
  kg_strbuf_putc(b, ' ');
  kg_strbuf_puts(b, step->stage ? step->stage : "?");
  for (int i = 0; i < step->nnames && i < KG_STEP_MAX_NAMES; i++) {
    kg_strbuf_putc(b, ' ');
    kg_strbuf_puts(b, step->names[i] ? step->names[i] : "?");
  }
  for (int i = 0; i < step->nints && i < 2; i++) kg_strbuf_printf(b, " %lld", (long long)step->ints[i]);
}

char *kg_trace_to_text(const kg_trace *t) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_strbuf_puts(&b, ""); /* an empty trace is "", not NULL */
  for (int i = 0; i < t->nsteps; i++) {
    kg_step_to_text(&b, &t->steps[i]);
    kg_strbuf_putc(&b, '\n');
  }
  return kg_strbuf_take(&b);
}


static const char *const step_usage[KG_STEP_COUNT] = {
    [KG_STEP_SPLIT] = "STAGE LOOP FACTOR",
    [KG_STEP_TILE] = "STAGE LOOP1 LOOP2 FACTOR1 FACTOR2",
    [KG_STEP_REORDER] = "STAGE LOOP LOOP...",
    [KG_STEP_FUSE] = "STAGE LOOP1 LOOP2",
    [KG_STEP_UNROLL] = "STAGE LOOP",
    [KG_STEP_VECTORIZE] = "STAGE LOOP",
    [KG_STEP_PARALLEL] = "STAGE LOOP",
    [KG_STEP_BIND] = "STAGE LOOP TAG",
    [KG_STEP_COMPUTE_AT] = "STAGE CONSUMER LOOP",
    [KG_STEP_COMPUTE_INLINE] = "STAGE",
    [KG_STEP_COMPUTE_ROOT] = "STAGE",
    [KG_STEP_CACHE_READ] = "TENSOR SCOPE READER...",
    [KG_STEP_CACHE_WRITE] = "STAGE SCOPE",
    [KG_STEP_RFACTOR] = "STAGE LOOP FACTOR",
    [KG_STEP_REORDER_STORAGE] = "STAGE AXIS...",
    [KG_STEP_STREAM] = "STAGE",
    [KG_STEP_PAD] = "STAGE FLOATS",
    [KG_STEP_LAUNCH_BOUNDS] = "STAGE BLOCKS",
    [KG_STEP_PIPELINE] = "STAGE LOOP DEPTH",
    [KG_STEP_TENSORIZE] = "STAGE ROWS COLS K",
    [KG_STEP_WIDEN] = "STAGE",
    [KG_STEP_BFDOT] = "STAGE ROWS COLS K",
    [KG_STEP_SPLIT_STORAGE] = "STAGE AXIS FACTOR",
};

/* Tokens of one line (at most this many are looked at: more is an argument-count error anyway). */
#define MAX_TOKENS (KG_STEP_MAX_NAMES + 4)

typedef struct token {
  const char *s;
  size_t n;
} token;

static int line_error(char *err, size_t errlen, const char *name, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int line_error(char *err, size_t errlen, const char *name, int line, const char *fmt, ...) {
  if (err && errlen) {
    int k = snprintf(err, errlen, "%s:%d: error: ", name, line);
    if (k >= 0 && (size_t)k < errlen) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
      va_end(ap);
    }
  }
  return -1;
}

static int token_is(const token *t, const char *s) { return strlen(s) == t->n && memcmp(t->s, s, t->n) == 0; }

/* A factor: decimal digits only, positive, fitting an int64. */
static int parse_factor(const token *t, int64_t *out) {
  if (t->n == 0 || t->n > 19) return -1;
  int64_t v = 0;
  for (size_t i = 0; i < t->n; i++) {
    if (t->s[i] < '0' || t->s[i] > '9') return -1;
    int d = t->s[i] - '0';
    if (v > (INT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  if (v < 1) return -1;
  *out = v;
  return 0;
}

/* Shows a token in a message, cut when long. */
#define TOK_FMT "%.*s%s"
#define TOK_ARG(t) (int)((t).n > 40 ? 40 : (t).n), (t).s, ((t).n > 40 ? "..." : "")

static int parse_line(kg_trace *t, const char *name, int lineno, const char *p, const char *end, char *err,
                      size_t errlen) {
  token tok[MAX_TOKENS];
  int ntok = 0, more = 0;
  while (p < end) {
    unsigned char c = (unsigned char)*p;
    if (c == ' ' || c == '\t' || c == '\r') {
      p++;
      continue;
    }
    if (c == '#') break;
    const char *q = p;
    while (q < end && *q != ' ' && *q != '\t' && *q != '\r' && *q != '#') {
      unsigned char d = (unsigned char)*q;
      if (d < 0x20 || d == 0x7f)
        return line_error(err, errlen, name, lineno, "unexpected control character (byte 0x%02x)", d);
      q++;
    }
    if (ntok < MAX_TOKENS)
      tok[ntok++] = (token){p, (size_t)(q - p)};
    else
      more = 1;
    p = q;
  }
  if (ntok == 0) return 0;
  int kind = -1;
  for (int k = 0; k < KG_STEP_COUNT; k++)
    if (token_is(&tok[0], kg_step_names[k])) kind = k;
  if (kind < 0) return line_error(err, errlen, name, lineno, "unknown step '" TOK_FMT "'", TOK_ARG(tok[0]));
  const char *usage = step_usage[kind];
  int nargs = ntok - 2, nints = kg_step_forms[kind].nints, nnames = nargs - nints;
  if (ntok < 2 || more || nnames < kg_step_forms[kind].min_names || nnames > kg_step_forms[kind].max_names)
    return line_error(err, errlen, name, lineno, "%s takes %s", kg_step_names[kind], usage);
  kg_step step;
  memset(&step, 0, sizeof step);
  step.kind = (kg_step_kind)kind;
  step.line = lineno;
  step.nnames = nnames;
  step.nints = nints;
  for (int i = 0; i < nints; i++) {
    const token *ti = &tok[2 + nnames + i];
    if (parse_factor(ti, &step.ints[i]))
      return line_error(err, errlen, name, lineno, "%s: factor '" TOK_FMT "' is not a positive integer",
                        kg_step_names[kind], TOK_ARG(*ti));
  }
  if (kind == KG_STEP_BIND) {
    int ok = 0;
    for (int k = 1; k < KG_THREAD_COUNT; k++) ok |= token_is(&tok[3], kg_thread_tag_names[k]);
    if (!ok)
      return line_error(err, errlen, name, lineno, "bind: unknown thread tag '" TOK_FMT "'", TOK_ARG(tok[3]));
  }
  if (kind == KG_STEP_CACHE_READ || kind == KG_STEP_CACHE_WRITE) {
    const token *ts = &tok[2];
    if (!token_is(ts, "shared") && !token_is(ts, "local") && !token_is(ts, "global"))
      return line_error(err, errlen, name, lineno, "%s: unknown scope '" TOK_FMT "'", kg_step_names[kind],
                        TOK_ARG(*ts));
  }
  if (t->nsteps >= KG_TRACE_MAX_STEPS)
    return line_error(err, errlen, name, lineno, "too many steps: a trace holds at most %d", KG_TRACE_MAX_STEPS);
  for (int i = 1; i < 2 + nnames; i++)
    if (tok[i].n > KG_MAX_LOOP_NAME)
      return line_error(err, errlen, name, lineno, "%s: name '" TOK_FMT "' too long (max %d characters)",
                        kg_step_names[kind], TOK_ARG(tok[i]), KG_MAX_LOOP_NAME);
  /* strings go into the trace's arena directly (kg_trace_push would copy them again) */
  step.stage = kg_arena_strndup(&t->arena, tok[1].s, tok[1].n);
  for (int i = 0; i < nnames; i++) step.names[i] = kg_arena_strndup(&t->arena, tok[2 + i].s, tok[2 + i].n);
  KG_PUSH(&t->arena, t->steps, t->nsteps, t->cap, step);
  return 0;
}

int kg_trace_parse(kg_trace *t, const char *name, const char *text, size_t len, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!name) name = "<trace>";
  int start = t->nsteps;
  const char *p = text, *end = text + len;
  for (int line = 1; p < end; line++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *le = nl ? nl : end;
    if (parse_line(t, name, line, p, le, err, errlen)) {
      t->nsteps = start; /* all or nothing */
      return -1;
    }
    p = nl ? nl + 1 : end;
  }
  return 0;
}
