/* The expression printer shared by the C-family printers (codegen/c.c, codegen/cuda.c); internal to codegen/.
 *
 * One printer serves both targets so that precedence and parenthesisation, literal rounding and the lowering of
 * integer division cannot drift apart between them. What differs between the dialects is data (kg_cexpr_dialect)
 * plus two hooks: one through which a printer may print some loads itself (CUDA prints a lane of a vector loaded
 * earlier), and one through which failures go back to the printer's own error mechanism. The few other pieces both
 * printers need (comments, the identifier check) live here too. */
#ifndef KG_CEXPR_H
#define KG_CEXPR_H
#include "../base/strbuf.h"
#include "../lower/ir.h"

typedef struct kg_cexpr_dialect {
  const char *nan, *inf, *neg_inf; /* f32 literals that are not finite */
  const char *int64_open, *int64_close; /* around an integer literal beyond int32 */
  const char *true_lit, *false_lit;
  const char *floordiv, *floormod; /* helpers for integer division and modulo rounding towards -infinity */
  const char *min_int;             /* helper for the integer minimum of tightened extents */
  const char *rsqrt;               /* the reciprocal square root */
  const char *exp, *log, *erf, *tanh; /* f32 exp, log, erf, tanh (the other calls are spelled alike in both) */
  int thread_index;                /* KG_IRE_THREAD prints as its tag (threadIdx.x); else it is an error */
  const char *half_type;           /* the storage of an f16 or bf16 element (16 bits, unsigned) */
} kg_cexpr_dialect;

typedef struct kg_cexpr_printer {
  kg_strbuf *b;
  const kg_cexpr_dialect *d;
  void *ctx; /* passed to the hooks */
  /* Optional: prints load e itself and returns 1, or returns 0 for the plain buf[index]. */
  int (*load)(void *ctx, kg_strbuf *b, const kg_irexpr *e);
  /* Reports what cannot be printed ("unexpected call of exp"); printing goes on after it. */
  void (*fail)(void *ctx, const char *msg);
} kg_cexpr_printer;

void kg_cexpr_put_expr(const kg_cexpr_printer *p, const kg_irexpr *e);
void kg_cexpr_put_int(const kg_cexpr_dialect *d, kg_strbuf *b, int64_t v);
/* v as the f32 literal it rounds to. */
void kg_cexpr_put_float(const kg_cexpr_dialect *d, kg_strbuf *b, double v);
/* text as a one-line comment at indent ind: newlines become spaces, and text cannot close the comment early. */
void kg_cexpr_put_comment(kg_strbuf *b, int ind, const char *text);
/* "buf[index] = value;\n" (no indent), value rounded to buf's type: kg_st_f16(v) / kg_st_bf16(v), which each
 * printer's prelude defines with kg_ld_f16 / kg_ld_bf16 (the loads put_expr prints for narrow buffers) and the
 * conversions kg_cvt_f32/f16/bf16. */
void kg_cexpr_put_store(const kg_cexpr_printer *p, const kg_buffer *buf, const kg_irexpr *index,
                        const kg_irexpr *value);
/* The C type of an element of type t in the dialect. */
const char *kg_cexpr_elem_type(const kg_cexpr_dialect *d, kg_dtype t);
/* Is s a C identifier (the name a printer is asked to give the function or kernels it prints)? */
int kg_cexpr_valid_ident(const char *s);
#endif
