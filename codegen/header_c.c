/* The C target's part of an exported header (codegen/header.h): the implementation section, which holds the
 * kernels kg_codegen_c_function printed, the C printer's prelude and epilogue around them, and the dispatcher.
 *
 *   #ifdef KG_IMPLEMENTATION
 *   prelude          includes and helpers, each once per translation unit; options and diagnostics pushed
 *   extern "C" {     (C++) the kernels keep the C names the declarations gave them
 *   kernels          one per size binding, each with its own workspace statics
 *   epilogue         options and diagnostics popped
 *   dispatch         kg_<name>_dispatch and kg_<name>
 *   }
 *   #endif
 *
 * The prelude goes before extern "C": in C++ the standard headers it includes must not get C linkage (libstdc++'s
 * math.h declares templates). Its helpers are static, so their linkage does not matter.
 *
 * Requires: a spec for the C target whose every binding has c_function, printed with the name
 * kg_header_fn_name(s, i). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/xalloc.h"
#include "../base/strbuf.h"
#include "header.h"

/* Binding i has its function, under the name the declarations give it. */
static int check_binding(const kg_header_spec *s, int i, char *err, size_t errlen) {
  const char *src = s->bindings[i].c_function;
  char *fn = kg_header_fn_name(s, i);
  kg_strbuf def;
  kg_strbuf_init(&def);
  kg_strbuf_printf(&def, "int %s(", fn);
  const char *why = NULL;
  if (!src || !*src) why = "no C function (kg_codegen_c_function) for this size binding";
  else if (!strstr(src, def.s)) why = "the C function of this size binding defines another name";
  if (why) snprintf(err, errlen, "export: %s: %s", fn, why);
  kg_strbuf_free(&def);
  free(fn);
  return why ? -1 : 0;
}

int kg_header_put_c(kg_strbuf *b, const kg_header_spec *s, char *err, size_t errlen) {
  for (int i = 0; i < s->nbindings; i++)
    if (check_binding(s, i, err, errlen) != 0) return -1;
  kg_strbuf_puts(b, "#ifdef KG_IMPLEMENTATION\n");
  kg_strbuf_puts(b, kg_codegen_c_prelude());
  {
    const char **srcs = kg_xrealloc(NULL, sizeof *srcs * (size_t)(s->nbindings + 1));
    for (int i = 0; i < s->nbindings; i++) srcs[i] = s->bindings[i].c_function;
    kg_codegen_c_put_vmath(b, srcs, s->nbindings);
    free(srcs);
  }
  kg_strbuf_puts(b, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n");
  for (int i = 0; i < s->nbindings; i++) {
    const char *src = s->bindings[i].c_function;
    kg_strbuf_puts(b, src);
    if (src[strlen(src) - 1] != '\n') kg_strbuf_putc(b, '\n');
    kg_strbuf_putc(b, '\n');
  }
  kg_strbuf_puts(b, kg_codegen_c_epilogue());
  kg_strbuf_putc(b, '\n');
  kg_header_put_dispatch(b, s, NULL);
  kg_strbuf_puts(b, "#ifdef __cplusplus\n}\n#endif\n#endif /* KG_IMPLEMENTATION */\n");
  return 0;
}
