/* What every exported header has, whatever its target: the opening comment, the include guard, the error codes,
 * the declarations and the size dispatcher (codegen/header.h). The target-specific parts are in header_c.c and
 * header_cuda.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "cexpr.h"
#include "header.h"
#include "kernel_flags.h"

char *kg_header_fn_name(const kg_header_spec *s, int b) {
  kg_strbuf n;
  kg_strbuf_init(&n);
  kg_strbuf_printf(&n, "%s%s", s->prefix ? s->prefix : "kg_", s->name);
  const kg_header_binding *bd = &s->bindings[b];
  for (int i = 0; i < s->nsizes; i++)
    if (s->size_dynamic && s->size_dynamic[i] && bd->range_lo)
      kg_strbuf_printf(&n, "_%s%lldto%lld", s->size_names[i], (long long)bd->range_lo[i], (long long)bd->range_hi[i]);
    else
      kg_strbuf_printf(&n, "_%s%lld", s->size_names[i], (long long)bd->size_values[i]);
  return kg_strbuf_take(&n);
}

static int any_dynamic(const kg_header_spec *s) {
  for (int i = 0; s->size_dynamic && i < s->nsizes; i++)
    if (s->size_dynamic[i]) return 1;
  return 0;
}

void kg_header_put_dyn_params(kg_strbuf *b, const kg_header_spec *s, int with_types) {
  for (int i = 0; s->size_dynamic && i < s->nsizes; i++)
    if (s->size_dynamic[i]) kg_strbuf_printf(b, "%s%s, ", with_types ? "int64_t " : "", s->size_names[i]);
}

/* Comment text cannot close the comment early. */
static void put_comment_text(kg_strbuf *b, const char *text) {
  for (const char *p = text ? text : ""; *p; p++) {
    kg_strbuf_putc(b, *p);
    if (p[0] == '*' && p[1] == '/') kg_strbuf_putc(b, ' ');
    if (p[0] == '/' && p[1] == '*') kg_strbuf_putc(b, ' ');
  }
}

static void put_origin(kg_strbuf *b, const kg_header_origin *o, const char *indent) {
  if (o->note && *o->note) {
    kg_strbuf_printf(b, " *%swarning: ", indent);
    put_comment_text(b, o->note);
    kg_strbuf_puts(b, "\n");
  }
  kg_strbuf_printf(b, " *%sfrom: ", indent);
  put_comment_text(b, o->record && *o->record ? o->record : "the default schedule");
  kg_strbuf_puts(b, "\n");
  if (o->time_s > 0) {
    kg_strbuf_printf(b, " *%s%s: %.4g ms", indent,
                     o->estimated ? "estimated (a model, never measured on a GPU)" : "measured", o->time_s * 1e3);
    if (o->gflops > 0) kg_strbuf_printf(b, ", %.1f GFLOP/s", o->gflops);
    if (o->gbps > 0) kg_strbuf_printf(b, ", %.1f GB/s", o->gbps);
    kg_strbuf_puts(b, "\n");
  }
  if (o->device && *o->device) {
    kg_strbuf_printf(b, " *%sdevice: ", indent);
    put_comment_text(b, o->device);
    if (o->arch && *o->arch) {
      kg_strbuf_puts(b, " (");
      put_comment_text(b, o->arch);
      kg_strbuf_puts(b, ")");
    }
    kg_strbuf_puts(b, "\n");
  }
  if (o->sketch && *o->sketch) {
    kg_strbuf_printf(b, " *%ssketch: ", indent);
    put_comment_text(b, o->sketch);
    kg_strbuf_puts(b, "\n");
  }
  if (!o->trace_text || !*o->trace_text) {
    kg_strbuf_printf(b, " *%strace: (none: the default schedule)\n", indent);
    return;
  }
  kg_strbuf_printf(b, " *%strace:\n", indent);
  const char *line = o->trace_text;
  while (*line) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    char *one = strndup(line, len);
    kg_strbuf_printf(b, " *%s  ", indent);
    put_comment_text(b, one);
    kg_strbuf_puts(b, "\n");
    free(one);
    line += len + (nl ? 1 : 0);
  }
}

void kg_header_put_params(kg_strbuf *b, const kg_header_spec *s, int with_types) {
  for (int i = 0; i < s->nparams; i++) {
    const char *et = s->param_dtype && s->param_dtype[i] != KG_DT_F32 ? "uint16_t" : "float";
    if (with_types)
      kg_strbuf_printf(b, "%s%s%s *%s", i ? ", " : "", s->param_is_input[i] ? "const " : "", et, s->param_names[i]);
    else
      kg_strbuf_printf(b, "%s%s", i ? ", " : "", s->param_names[i]);
  }
}

static void put_sizes_params(kg_strbuf *b, const kg_header_spec *s, int with_types) {
  for (int i = 0; i < s->nsizes; i++) kg_strbuf_printf(b, "%s%s, ", with_types ? "int64_t " : "", s->size_names[i]);
}

static void put_upper(kg_strbuf *b, const char *s) {
  for (; *s; s++) kg_strbuf_putc(b, (*s >= 'a' && *s <= 'z') ? (char)(*s - 'a' + 'A') : *s);
}

/* The include guard: KG_EXPORT_<PREFIX><NAME>_<TARGET>_H. */
static void put_guard(kg_strbuf *b, const kg_header_spec *s) {
  kg_strbuf_puts(b, "KG_EXPORT_");
  put_upper(b, s->prefix ? s->prefix : "kg_");
  put_upper(b, s->name);
  kg_strbuf_puts(b, s->target == KG_TARGET_CUDA ? "_CUDA_H" : "_C_H");
}

void kg_header_put_top(kg_strbuf *b, const kg_header_spec *s, const char *lead) {
  const int cuda = s->target == KG_TARGET_CUDA;
  const char *pre = s->prefix ? s->prefix : "kg_";
  kg_strbuf_printf(b, "/* %s%s: %s, exported by kgen %s for the %s target", pre, s->name, s->name,
                   s->kgen_version ? s->kgen_version : "?", cuda ? "CUDA" : "C (OpenMP)");
  if (s->log_path) {
    kg_strbuf_puts(b, " from the tuning log ");
    put_comment_text(b, s->log_path);
  }
  kg_strbuf_puts(b, ".\n * Generated: do not edit; export again from the log instead.\n *\n * ");
  put_comment_text(b, s->signature);
  kg_strbuf_puts(b, "\n *\n");
  if (any_dynamic(s))
    kg_strbuf_printf(b, " * %d kernel%s, each compiled once for a range of the sizes it takes at run time:\n", s->nbindings,
                     s->nbindings == 1 ? "" : "s");
  else
    kg_strbuf_printf(b, " * %d kernel%s (one per size binding):\n", s->nbindings, s->nbindings == 1 ? "" : "s");
  for (int i = 0; i < s->nbindings; i++) {
    const kg_header_binding *bd = &s->bindings[i];
    char *fn = kg_header_fn_name(s, i);
    kg_strbuf_printf(b, " *\n *   %s:", fn);
    for (int k = 0; k < s->nsizes; k++)
      if (s->size_dynamic && s->size_dynamic[k] && bd->range_lo)
        kg_strbuf_printf(b, " %s=%lld..%lld (at run time; tuned at %lld)", s->size_names[k], (long long)bd->range_lo[k],
                         (long long)bd->range_hi[k], (long long)bd->size_values[k]);
      else
        kg_strbuf_printf(b, " %s=%lld", s->size_names[k], (long long)bd->size_values[k]);
    kg_strbuf_puts(b, "\n");
    free(fn);
    if (!cuda) {
      put_origin(b, &bd->origin, "     ");
      continue;
    }
    for (int v = 0; v < bd->nvariants; v++) {
      const kg_header_variant *va = &bd->variants[v];
      kg_strbuf_puts(b, " *     for");
      for (int c = 0; c < va->ncubins; c++) kg_strbuf_printf(b, "%s %s", c ? "," : "", va->cubins[c].arch);
      kg_strbuf_printf(b, " (cubin%s; PTX for %s and later archs), %d kernel%s:\n", va->ncubins == 1 ? "" : "s",
                       va->ptx_arch ? va->ptx_arch : "?", va->prog->nkernels, va->prog->nkernels == 1 ? "" : "s");
      for (int k = 0; k < va->prog->nkernels; k++) {
        const kg_cuda_kernel *kn = &va->prog->kernels[k];
        kg_strbuf_printf(b, " *       %s grid (%lld, %lld, %lld) block (%lld, %lld, %lld)", kn->name,
                         (long long)kn->grid[0], (long long)kn->grid[1], (long long)kn->grid[2],
                         (long long)kn->block[0], (long long)kn->block[1], (long long)kn->block[2]);
        if (kn->static_shared || kn->dynamic_shared)
          kg_strbuf_printf(b, " shared %lld B", (long long)(kn->static_shared + kn->dynamic_shared));
        kg_strbuf_puts(b, "\n");
      }
      put_origin(b, &va->origin, "       ");
    }
  }
  kg_strbuf_puts(b, " *\n * Use: include this header anywhere; in exactly one C or C++ file of the program, define KG_IMPLEMENTATION\n"
                    " * before including it (and any other kgen header) to compile the definitions there.\n");
  if (cuda)
    kg_strbuf_puts(b, " * The kernels launch through the CUDA driver API, which the header loads at run time with dlopen\n"
                      " * (libcuda.so.1; define KG_CUDA_LIBRARY as another path): link with -ldl on glibc older than 2.34,\n"
                      " * nothing else. Pointers are device pointers (cudaMalloc, cuMemAlloc); launches go on the stream given\n"
                      " * (0: the legacy default stream) and are asynchronous. A context must be current, as after any CUDA\n"
                      " * runtime call; if none is, the first call makes device 0's primary context current. The cubin for\n"
                      " * the device's arch is loaded at the first call (or by the _load function); on another arch the driver\n"
                      " * JIT-compiles the PTX. Temporaries live in stream-ordered memory (cuMemAllocAsync) for each call.\n"
                      " * Compiled with KG_EMULATE by g++ with kgen's runtime/cuda_emu.h force-included, the kernels run on\n"
                      " * kgen's CUDA emulator instead (pointers are then host pointers; tests only).\n");
  else
    kg_strbuf_puts(b, " * Compile with -fopenmp for the parallel loops (without it they run on one thread) and link -lm; kgen\n"
                      " * measured the kernels compiled with " KG_KERNEL_CFLAGS "\n"
                      " * on the device named above (-fno-math-errno lets sqrt vectorize; the kernels never read errno).\n");
  kg_strbuf_puts(b, " * Arrays are dense, row-major (C order) f32:");
  for (int i = 0; i < s->nparams; i++)
    kg_strbuf_printf(b, "%s %s%s", i ? "," : "", s->param_names[i], s->param_dims[i]);
  kg_strbuf_puts(b, " (inputs, then outputs).\n"
                    " * Each function returns 0 (KG_OK) or an error code that kg_strerror() names; a NULL array pointer is\n"
                    " * KG_ERR_ARG, answered before anything is touched.\n */\n");

  kg_strbuf_puts(b, "#ifndef ");
  put_guard(b, s);
  kg_strbuf_puts(b, "\n#define ");
  put_guard(b, s);
  kg_strbuf_puts(b, "\n#include <stddef.h>\n#include <stdint.h>\n\n");
  kg_strbuf_puts(b,
                 "/* Shared by every kgen header. */\n"
                 "#ifndef KG_EXPORT_COMMON\n"
                 "#define KG_EXPORT_COMMON\n"
                 "#define KG_OK 0\n"
                 "#define KG_ERR_NO_KERNEL (-1)     /* no kernel was tuned for these sizes */\n"
                 "#define KG_ERR_OUT_OF_MEMORY (-2) /* a temporary could not be allocated */\n"
                 "#define KG_ERR_NO_DRIVER (-3)     /* the CUDA driver (libcuda) cannot be loaded or has no device */\n"
                 "#define KG_ERR_NO_IMAGE (-4)      /* no cubin for the device's arch and no PTX it can compile */\n"
                 "#define KG_ERR_SIZE (-5)          /* a size outside the range the kernel was compiled for */\n"
                 "#define KG_ERR_ARG (-6)           /* a NULL pointer argument */\n"
                 "static inline const char *kg_strerror(int code) {\n"
                 "  switch (code) {\n"
                 "    case KG_OK: return \"ok\";\n"
                 "    case KG_ERR_NO_KERNEL: return \"no kernel was tuned for these sizes\";\n"
                 "    case KG_ERR_OUT_OF_MEMORY: return \"out of memory\";\n"
                 "    case KG_ERR_NO_DRIVER: return \"the CUDA driver cannot be loaded or has no device\";\n"
                 "    case KG_ERR_NO_IMAGE: return \"no cubin for this GPU's arch and no PTX it can compile\";\n"
                 "    case KG_ERR_SIZE: return \"a size outside the range the kernel serves\";\n"
                 "    case KG_ERR_ARG: return \"a NULL pointer argument\";\n"
                 "    default: return code > 0 ? \"CUDA driver error (a CUresult)\" : \"unknown error\";\n"
                 "  }\n"
                 "}\n");
  if (cuda)
    kg_strbuf_puts(b, "/* The driver API's stream handle, as cuda.h declares it (a repeated typedef is legal C11 and C++). */\n"
                      "typedef struct CUstream_st *CUstream;\n");
  kg_strbuf_puts(b, "#endif\n\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n");
  for (int i = 0; i < s->nbindings; i++) {
    char *fn = kg_header_fn_name(s, i);
    kg_strbuf_printf(b, "int %s(%s%s", fn, lead ? lead : "", lead ? ", " : "");
    kg_header_put_dyn_params(b, s, 1);
    kg_header_put_params(b, s, 1);
    kg_strbuf_puts(b, ");\n");
    free(fn);
  }
  kg_strbuf_printf(b, "/* The kernel tuned for the sizes given (KG_ERR_NO_KERNEL when there is none). */\n");
  kg_strbuf_printf(b, "int %s%s_dispatch(%s%s", pre, s->name, lead ? lead : "", lead ? ", " : "");
  put_sizes_params(b, s, 1);
  kg_header_put_params(b, s, 1);
  kg_strbuf_puts(b, ");\n");
  if (s->nbindings == 1)
    kg_strbuf_puts(b, "/* The one kernel of this header. */\n");
  else
    kg_strbuf_puts(b, "/* Several size bindings: the dispatcher. */\n");
  kg_strbuf_printf(b, "int %s%s(%s%s", pre, s->name, lead ? lead : "", lead ? ", " : "");
  if (s->nbindings != 1 || any_dynamic(s)) put_sizes_params(b, s, 1);
  kg_header_put_params(b, s, 1);
  kg_strbuf_puts(b, ");\n");
  if (any_dynamic(s))
    kg_strbuf_printf(b, "/* The values kernel i serves (0 <= i < %d), per size parameter: fills lo[0..%d) and hi[0..%d) and\n"
                        " * returns 0; -1 when there is no kernel i, KG_ERR_ARG when lo or hi is NULL. (_sizes gives the\n"
                        " * values each was tuned at.) */\n"
                        "int %s%s_ranges(int i, int64_t *lo, int64_t *hi);\n",
                     s->nbindings, s->nsizes, s->nsizes, pre, s->name);
  kg_strbuf_printf(b, "/* The size binding of kernel i (0 <= i < %d), in the size parameters' order: fills sizes[0..%d) and\n"
                     " * returns 0; -1 when there is no kernel i%s. */\n"
                     "int %s%s_sizes(int i, int64_t *sizes);\n",
                   s->nbindings, s->nsizes, s->nsizes ? ", KG_ERR_ARG when sizes is NULL" : "", pre, s->name);
  if (cuda) {
    kg_strbuf_printf(b, "/* Loads every kernel of the header for the current context's device (the first call of a kernel\n"
                        " * does it too); 0 or an error code. Unload frees the modules. */\n"
                        "int %s%s_load(void);\nvoid %s%s_unload(void);\n",
                     pre, s->name, pre, s->name);
  }
  kg_strbuf_puts(b, "#ifdef __cplusplus\n}\n#endif\n\n");
}

void kg_header_put_dispatch(kg_strbuf *b, const kg_header_spec *s, const char *lead) {
  const char *pre = s->prefix ? s->prefix : "kg_";
  /* the stream's name in the lead's declaration ("CUstream stream" -> "stream") */
  const char *lead_arg = lead ? strrchr(lead, ' ') + 1 : NULL;
  kg_strbuf_printf(b, "int %s%s_dispatch(%s%s", pre, s->name, lead ? lead : "", lead ? ", " : "");
  put_sizes_params(b, s, 1);
  kg_header_put_params(b, s, 1);
  kg_strbuf_puts(b, ") {\n");
  for (int i = 0; i < s->nbindings; i++) {
    char *fn = kg_header_fn_name(s, i);
    const kg_header_binding *bd = &s->bindings[i];
    kg_strbuf_puts(b, "  if (");
    for (int k = 0; k < s->nsizes; k++)
      if (s->size_dynamic && s->size_dynamic[k] && bd->range_lo)
        kg_strbuf_printf(b, "%s%s >= %lld && %s <= %lld", k ? " && " : "", s->size_names[k],
                         (long long)bd->range_lo[k], s->size_names[k], (long long)bd->range_hi[k]);
      else
        kg_strbuf_printf(b, "%s%s == %lld", k ? " && " : "", s->size_names[k], (long long)bd->size_values[k]);
    if (s->nsizes == 0) kg_strbuf_puts(b, "1");
    kg_strbuf_printf(b, ") return %s(%s%s", fn, lead_arg ? lead_arg : "", lead_arg ? ", " : "");
    kg_header_put_dyn_params(b, s, 0);
    kg_header_put_params(b, s, 0);
    kg_strbuf_puts(b, ");\n");
    free(fn);
  }
  for (int k = 0; k < s->nsizes; k++) kg_strbuf_printf(b, "  (void)%s;\n", s->size_names[k]);
  for (int k = 0; k < s->nparams; k++) kg_strbuf_printf(b, "  (void)%s;\n", s->param_names[k]);
  if (lead_arg) kg_strbuf_printf(b, "  (void)%s;\n", lead_arg);
  kg_strbuf_puts(b, "  return KG_ERR_NO_KERNEL;\n}\n\n");

  kg_strbuf_printf(b, "int %s%s_sizes(int i, int64_t *sizes) {\n", pre, s->name);
  if (s->nsizes) {
    kg_strbuf_printf(b, "  static const int64_t table[%d][%d] = {", s->nbindings, s->nsizes);
    for (int i = 0; i < s->nbindings; i++) {
      kg_strbuf_printf(b, "%s{", i ? ", " : "");
      for (int k = 0; k < s->nsizes; k++)
        kg_strbuf_printf(b, "%s%lld", k ? ", " : "", (long long)s->bindings[i].size_values[k]);
      kg_strbuf_puts(b, "}");
    }
    kg_strbuf_puts(b, "};\n");
  }
  if (s->nsizes) kg_strbuf_puts(b, "  if (!sizes) return KG_ERR_ARG;\n");
  kg_strbuf_printf(b, "  if (i < 0 || i >= %d) return -1;\n", s->nbindings);
  if (s->nsizes)
    kg_strbuf_printf(b, "  for (int k = 0; k < %d; k++) sizes[k] = table[i][k];\n", s->nsizes);
  else
    kg_strbuf_puts(b, "  (void)sizes;\n");
  kg_strbuf_puts(b, "  return 0;\n}\n\n");

  if (any_dynamic(s)) {
    kg_strbuf_printf(b, "int %s%s_ranges(int i, int64_t *lo, int64_t *hi) {\n", pre, s->name);
    kg_strbuf_printf(b, "  static const int64_t table[%d][2][%d] = {", s->nbindings, s->nsizes);
    for (int i = 0; i < s->nbindings; i++) {
      const kg_header_binding *bd = &s->bindings[i];
      kg_strbuf_printf(b, "%s{{", i ? ", " : "");
      for (int k = 0; k < s->nsizes; k++)
        kg_strbuf_printf(b, "%s%lld", k ? ", " : "", (long long)(bd->range_lo ? bd->range_lo[k] : bd->size_values[k]));
      kg_strbuf_puts(b, "}, {");
      for (int k = 0; k < s->nsizes; k++)
        kg_strbuf_printf(b, "%s%lld", k ? ", " : "", (long long)(bd->range_hi ? bd->range_hi[k] : bd->size_values[k]));
      kg_strbuf_puts(b, "}}");
    }
    kg_strbuf_puts(b, "};\n");
    kg_strbuf_puts(b, "  if (!lo || !hi) return KG_ERR_ARG;\n");
    kg_strbuf_printf(b, "  if (i < 0 || i >= %d) return -1;\n", s->nbindings);
    kg_strbuf_printf(b, "  for (int k = 0; k < %d; k++) lo[k] = table[i][0][k], hi[k] = table[i][1][k];\n", s->nsizes);
    kg_strbuf_puts(b, "  return 0;\n}\n\n");
  }

  int takes_sizes = s->nbindings != 1 || any_dynamic(s);
  kg_strbuf_printf(b, "int %s%s(%s%s", pre, s->name, lead ? lead : "", lead ? ", " : "");
  if (takes_sizes) put_sizes_params(b, s, 1);
  kg_header_put_params(b, s, 1);
  kg_strbuf_puts(b, ") {\n  return ");
  if (!takes_sizes) {
    char *fn = kg_header_fn_name(s, 0);
    kg_strbuf_printf(b, "%s(", fn);
    free(fn);
  } else {
    kg_strbuf_printf(b, "%s%s_dispatch(", pre, s->name);
  }
  if (lead_arg) kg_strbuf_printf(b, "%s, ", lead_arg);
  if (takes_sizes) put_sizes_params(b, s, 0);
  kg_header_put_params(b, s, 0);
  kg_strbuf_puts(b, ");\n}\n\n");
}

void kg_header_put_bottom(kg_strbuf *b, const kg_header_spec *s) {
  kg_strbuf_puts(b, "#endif /* ");
  put_guard(b, s);
  kg_strbuf_puts(b, " */\n");
}

int kg_header_print(const kg_header_spec *s, char **out, char *err, size_t errlen) {
  *out = NULL;
  if (errlen) err[0] = 0;
  if (!s->name || !kg_cexpr_valid_ident(s->name) || (s->prefix && *s->prefix && !kg_cexpr_valid_ident(s->prefix))) {
    snprintf(err, errlen, "export: '%s%s' is not a C identifier", s->prefix ? s->prefix : "", s->name ? s->name : "");
    return -1;
  }
  if (s->nbindings < 1) {
    snprintf(err, errlen, "export: %s: no kernel to export", s->name);
    return -1;
  }
  for (int i = 0; i < s->nbindings; i++)
    for (int j = 0; j < i; j++) {
      int same = 1;
      for (int k = 0; k < s->nsizes; k++) same &= s->bindings[i].size_values[k] == s->bindings[j].size_values[k];
      /* dynamic kernels: overlapping ranges would make the dispatch order decide */
      if (s->bindings[i].range_lo && s->bindings[j].range_lo) {
        same = 1;
        for (int k = 0; k < s->nsizes; k++)
          same &= s->bindings[i].range_lo[k] <= s->bindings[j].range_hi[k] &&
                  s->bindings[j].range_lo[k] <= s->bindings[i].range_hi[k];
      }
      if (same) {
        char *fn = kg_header_fn_name(s, i);
        snprintf(err, errlen, "export: %s: two kernels for the same sizes", fn);
        free(fn);
        return -1;
      }
    }
  for (int i = 0; i < s->nbindings; i++)
    for (int k = 0; k < s->nsizes; k++)
      if (s->bindings[i].size_values[k] < 0) {
        snprintf(err, errlen, "export: %s: negative size %s", s->name, s->size_names[k]);
        return -1;
      }
  /* size and pointer parameters share one parameter list (and "stream" on CUDA) */
  for (int i = 0; i < s->nsizes + s->nparams; i++) {
    const char *a = i < s->nsizes ? s->size_names[i] : s->param_names[i - s->nsizes];
    int clash = !kg_cexpr_valid_ident(a) || (s->target == KG_TARGET_CUDA && !strcmp(a, "stream"));
    for (int j = 0; j < i && !clash; j++) clash = !strcmp(a, j < s->nsizes ? s->size_names[j] : s->param_names[j - s->nsizes]);
    if (clash) {
      snprintf(err, errlen, "export: %s: parameter name '%s' is not a C identifier or is used twice", s->name, a);
      return -1;
    }
  }
  kg_strbuf b;
  kg_strbuf_init(&b);
  const char *lead = s->target == KG_TARGET_CUDA ? "CUstream stream" : NULL;
  kg_header_put_top(&b, s, lead);
  int rc = s->target == KG_TARGET_CUDA ? kg_header_put_cuda(&b, s, err, errlen) : kg_header_put_c(&b, s, err, errlen);
  if (rc != 0) {
    kg_strbuf_free(&b);
    return -1;
  }
  kg_header_put_bottom(&b, s);
  *out = kg_strbuf_take(&b);
  return 0;
}
