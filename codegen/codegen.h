/* Printers from the loop-nest IR to source code. */
#ifndef KG_CODEGEN_H
#define KG_CODEGEN_H
#include "../schedule/ir.h"

/* C11 with OpenMP pragmas: a self-contained translation unit defining
 *   void <fn_name>(const float *restrict in0, ..., float *restrict out0, ...)
 * (inputs, then outputs, in the def's order). Global temporaries are malloc'ed inside the function; large local
 * regions are heap-allocated, small ones live on the stack. Returns 0 and fills *out (caller frees), or -1 with
 * the reason in err (e.g. a loop bound to a GPU index). */
int kg_codegen_c(const kg_lowered *f, const char *fn_name, char **out, char *err, size_t errlen);
#endif
