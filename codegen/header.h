/* Exported headers: tuned kernels printed as one self-contained C header that any C, C++ or CUDA program
 * includes, with no kgen at run time (kgen export, replay/export.h).
 *
 * One header holds one workload (a def) for one target, with one kernel per size binding (and, on CUDA, one
 * kernel program per distinct schedule among the archs asked for). Layout, for def matmul with the bindings
 * M=1024 K=1024 N=1024 and M=512 K=512 N=512, prefix "kg_":
 *
 *   opening comment   workload, signature, target; per kernel: sizes, the record it came from (device, arch,
 *                     measured time, sketch), the trace, and any warning (nearest record, default schedule);
 *                     how to use the header
 *   declarations      int kg_matmul_M1024_K1024_N1024([CUstream stream,] const float *A, const float *B, float *C);
 *                     int kg_matmul_M512_K512_N512(...);
 *                     int kg_matmul_dispatch([CUstream stream,] int64_t M, int64_t K, int64_t N, const float *A, ...);
 *                     int kg_matmul(...): the binding's kernel when there is one binding (pointers only), else the
 *                     dispatcher (sizes, then pointers)
 *                     int kg_matmul_sizes(int i, int64_t *sizes): the size binding of kernel i (-1 past the last)
 *                     CUDA also: int kg_matmul_load(void) (optional: the first call loads), void kg_matmul_unload(void),
 *                     int <kernel>_variant(void) (which kernel program the device got, a diagnostic) and
 *                     kg_cuda_strerror(code) (the driver's text for a CUresult)
 *   #ifdef KG_IMPLEMENTATION   the definitions (in exactly one translation unit of a program)
 *
 * Size arguments follow the program's size variables in order of first appearance in the signature; pointer
 * arguments follow the def's signature: inputs in order, then outputs in order, dense, C order, f32 (on CUDA,
 * device pointers). Every function returns 0 (KG_OK) or an error code: KG_ERR_NO_KERNEL (no kernel was tuned
 * for these sizes), KG_ERR_SIZE (a dynamic size outside the kernel's range), KG_ERR_ARG (a NULL tensor or
 * out-pointer, checked before anything is touched; the CUDA stream may be NULL, the default stream),
 * KG_ERR_OUT_OF_MEMORY, KG_ERR_NO_DRIVER (libcuda cannot be loaded), KG_ERR_NO_IMAGE (no cubin
 * for the device and no PTX it can JIT), or a positive CUresult; kg_strerror(code) names it. */
#ifndef KG_HEADER_H
#define KG_HEADER_H
#include <stddef.h>
#include <stdint.h>
#include "codegen.h"

/* Where a kernel's schedule came from (for the header's opening comment). Strings may be NULL or "". */
typedef struct kg_header_origin {
  const char *trace_text; /* the trace, one step per line; "" for the default schedule */
  const char *record;     /* e.g. "record 143 of tuning_logs/matmul.c.kglog", or "no record: the default schedule" */
  const char *device;     /* the device the record was measured on */
  const char *arch;       /* its arch ("sm_90", "x86-64") */
  const char *sketch;
  double time_s;          /* the record's median time (0: none), or its estimate when estimated */
  int estimated;          /* time_s is the analytical estimate of an emulator record, not a measurement */
  double gflops, gbps;    /* at that time */
  const char *note;       /* a warning to keep with the kernel ("nearest record: arch sm_86, wanted sm_90") */
} kg_header_origin;

/* A compiled image: a cubin for one arch. */
typedef struct kg_header_image {
  const char *arch; /* "sm_90" */
  const void *data;
  size_t size;
} kg_header_image;

/* CUDA: one kernel program (one schedule) of a binding, with the cubins of the archs that use it and its PTX. The
 * program was printed by kg_codegen_cuda with the prefix "<function name>_v<index of the variant>", so kernel
 * names differ across variants and headers. */
typedef struct kg_header_variant {
  const kg_cuda_program *prog;
  const kg_header_image *cubins; /* one per arch that runs this variant */
  int ncubins;
  const char *ptx;               /* PTX compiled for ptx_arch (the lowest of the variant's archs) */
  const char *ptx_arch;
  kg_header_origin origin;
} kg_header_variant;

typedef struct kg_header_binding {
  const int64_t *size_values;    /* spec->nsizes values (a dynamic size: the value its schedule was tuned at) */
  /* A header of dynamic kernels (spec->size_dynamic): per size, the values this binding's kernel serves (a static
   * size: its value twice); the dispatcher picks the first binding whose ranges hold the sizes. NULL otherwise. */
  const int64_t *range_lo, *range_hi;
  /* C target: the function's definition as kg_codegen_c_function printed it, named kg_header_fn_name(spec, i) */
  const char *c_function;
  kg_header_origin origin;       /* C target */
  /* CUDA target */
  const kg_header_variant *variants;
  int nvariants;
} kg_header_binding;

typedef struct kg_header_spec {
  const char *name;              /* the def's name */
  const char *prefix;            /* of every public name ("kg_") */
  kg_target_kind target;
  const char *signature;         /* "def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N])" */
  int nparams;                   /* inputs then outputs */
  const char *const *param_names;
  const int *param_is_input;
  const int *param_dtype;        /* per parameter, its kg_dtype (NULL: all f32). An f16 or bf16 tensor is passed as
                                    uint16_t elements holding the values' bits */
  const char *const *param_dims; /* per parameter, its shape for the comment: "[M][K]" */
  int nsizes;
  const char *const *size_names;
  /* Per size, 1 when the kernels take it at run time (their functions then lead with an int64_t parameter for
   * each such size, in size order, after the stream on CUDA, and check it against their range, returning
   * KG_ERR_SIZE outside it); NULL: none. */
  const int *size_dynamic;
  const kg_header_binding *bindings;
  int nbindings;
  const char *log_path;          /* the log the kernels came from (for the comment); may be NULL */
  const char *kgen_version;
} kg_header_spec;

/* The public function of binding b: "<prefix><name>_<S1><v1>_<S2><v2>..." (kg_matmul_M1024_K1024_N1024), a dynamic
 * size written as its range ("M1to63"), heap. */
char *kg_header_fn_name(const kg_header_spec *s, int b);

/* The whole header text (heap) for s->target. 0, or -1 with the reason in err (an empty spec, a name that is not
 * an identifier, two bindings with the same sizes). */
int kg_header_print(const kg_header_spec *s, char **out, char *err, size_t errlen);

/* ---- internal to codegen/header*.c ---- */
struct kg_strbuf;
/* The opening comment, the include guard's opening, the shared error codes and the extern "C" declarations of
 * every public function (lead: "CUstream stream" on CUDA, NULL on C). */
void kg_header_put_top(struct kg_strbuf *b, const kg_header_spec *s, const char *lead);
/* The definitions of the dispatcher and of kg_<name> (inside the implementation section). */
void kg_header_put_dispatch(struct kg_strbuf *b, const kg_header_spec *s, const char *lead);
/* The include guard's closing. */
void kg_header_put_bottom(struct kg_strbuf *b, const kg_header_spec *s);
/* The leading size parameters of a binding's function ("int64_t M, " or "M, "; nothing without dynamic sizes). */
void kg_header_put_dyn_params(struct kg_strbuf *b, const kg_header_spec *s, int with_types);
/* The parameter list "const float *A, const float *B, float *C" (with_types) or "A, B, C". */
void kg_header_put_params(struct kg_strbuf *b, const kg_header_spec *s, int with_types);
/* The target-specific bodies (header_c.c, header_cuda.c): everything between kg_header_put_top and
 * kg_header_put_bottom, the dispatch included. */
int kg_header_put_c(struct kg_strbuf *b, const kg_header_spec *s, char *err, size_t errlen);
int kg_header_put_cuda(struct kg_strbuf *b, const kg_header_spec *s, char *err, size_t errlen);
#endif
