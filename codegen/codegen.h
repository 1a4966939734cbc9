/* Printers from the loop-nest IR to source code. */
#ifndef KG_CODEGEN_H
#define KG_CODEGEN_H
#include "../lower/ir.h"

/* C11 with OpenMP pragmas (codegen/c.c), also valid C++ and CUDA host code, in pieces that an exported header
 * (codegen/header_c.c) puts together and that several headers can share one translation unit with:
 *
 * The prelude: includes and the KG_RESTRICT macro (restrict in C, __restrict__ in C++), guarded by
 * KG_C_INCLUDES; then the opening of a region of compiler options and silenced diagnostics; then the helpers the
 * functions call (kg_expf, kg_floordiv, ...), guarded by KG_C_HELPERS. It must precede any function. */
const char *kg_codegen_c_prelude(void);
/* The prelude's first part, its includes (guarded by KG_C_INCLUDES): what a precompiled header may hold. */
const char *kg_codegen_c_includes(void);
/* After the prelude, before the functions of srcs[0..nsrcs): the definitions of the vector variants of kgen's exp,
 * erf and tanh that any of them calls (under gcc on x86-64; nothing elsewhere), each guarded once per translation
 * unit. */
void kg_codegen_c_put_vmath(struct kg_strbuf *b, const char *const *srcs, int nsrcs);
/* The region's closing: once after the functions. */
const char *kg_codegen_c_epilogue(void);
/* What a printed C function returns when a dynamic size lies outside its range (an exported header's
 * KG_ERR_SIZE). */
#define KG_C_ERR_SIZE (-5)
/* What it returns when a tensor pointer is NULL (an exported header's KG_ERR_ARG). */
#define KG_C_ERR_ARG (-6)
/* One function (heap text in *out):
 *   int <fn_name>(int64_t M, ..., const float *KG_RESTRICT in0, ..., float *KG_RESTRICT out0, ...)
 * (f's dynamic sizes first, named and ordered as f->size_vars, when it has any; then inputs, then outputs, in the
 * def's order), plus, when f has global temporaries, their cached workspaces `static float *kg_ws_<fn_name>_<temp>`
 * and the destructor `<fn_name>_ws_release` that frees them. Global temporaries persist between calls (taken and
 * given back atomically, so concurrent calls are safe); one whose size follows dynamic sizes keeps the largest
 * block a call needed and is reallocated when a call needs more. Large local regions are heap-allocated, small
 * ones live on the stack. The printed function first checks every dynamic size against [f->size_lo[i],
 * f->size_hi[i]] and returns KG_C_ERR_SIZE when one is outside, then returns KG_C_ERR_ARG when a tensor pointer
 * is NULL, both before touching any buffer or allocating anything; otherwise it
 * returns 0, or -2 (an exported header's KG_ERR_OUT_OF_MEMORY) when a temporary or a local region could not be
 * allocated (outputs are then partly or wholly unwritten). kg_codegen_c_function returns 0, or -1 with the reason
 * in err (e.g. a loop bound to a GPU index, fn_name not an identifier). */
int kg_codegen_c_function(const kg_lowered *f, const char *fn_name, char **out, char *err, size_t errlen);
/* A self-contained translation unit: the prelude, kg_codegen_c_function's function, the epilogue, and a wrapper
 *   void <fn_name>_args(float **args)
 * that passes args[0..nparams) and ignores the status (what kg_cpu_call calls). When f has dynamic sizes,
 * args[nparams] points to their values, f->nsize_vars int64_t in f->size_vars order (the caller passes
 * `(float *)sizes`; see kg_cpu_call_sizes). 0, or -1 as above. */
int kg_codegen_c(const kg_lowered *f, const char *fn_name, char **out, char *err, size_t errlen);

/* CUDA C: one translation unit holding one kernel per root stage (the items of f->body, in order), each
 *   extern "C" __global__ void __launch_bounds__(T) <prefix>_k<N>(long long kg_size_M, ...,
 *                                                               const float* __restrict__ in0, ...,
 *                                                               float* __restrict__ out0, ..., float* tmp0, ...)
 * Every kernel takes the same arguments: f's dynamic sizes when it has any (64-bit, in f->size_vars order; the
 * kernel reads each into a local of the index type named as the size), the parameters (inputs const, then
 * outputs), then the global temporaries in f->temps order. The source needs no header (NVRTC compiles it as is);
 * compiled by the host compiler with runtime/cuda_emu.h force-included (KG_EMULATE defined) it runs on the CUDA
 * emulator, for which the source also defines, under #ifdef KG_EMULATE, an entry
 * `extern "C" void <kernel>__emu(float **args)` per kernel: args holds the parameters, the temporaries, and (with
 * dynamic sizes) after them a pointer to the sizes' values (nsizes int64_t).
 *
 * Semantics of bound loops (as in TVM): a loop bound to blockIdx/threadIdx.{x,y,z} becomes that index; a kernel
 * launches, per tag, the largest extent bound to it, and a loop with a smaller extent is guarded. Loops bound to
 * the same tag in a consumer and in a shared-scope stage attached inside it are the same hardware index (a
 * cooperative fetch). A store no thread index distinguishes is made by one thread only. vthread loops are
 * unrolled serial loops. A reduction loop bound to a thread index is a cross-thread reduction (warp shuffles,
 * shared memory across warps). With dynamic sizes, serial and blockIdx-bound loops may have extents that follow
 * the sizes (the grid is then computed at launch: kg_cuda_program_grid), threadIdx-bound ones may not. Rejected
 * with an error (an illegal candidate, never a crash): a barrier or a cross-thread reduction under a guarded thread
 * loop, a thread-bound loop in a per-thread (local) region, two loops of one stage bound to one tag, a
 * threadIdx-bound loop (or a cross-thread reduction) whose extent follows a dynamic size, extents past the
 * hardware's grid limits (with every dynamic size at its largest value). */

/* An extent that follows dynamic sizes, as a postfix program over 64-bit integers: CONST pushes v, SIZE pushes
 * the value of dynamic size v (an index into the program's sizes), the others pop b then a and push a op b
 * (FLOORDIV and FLOORMOD round towards -infinity). n == 0: not dynamic (the value is the table's:
 * kg_cuda_kernel.grid, kg_cuda_program.temp_elems). */
typedef enum {
  KG_CUDA_X_CONST,
  KG_CUDA_X_SIZE,
  KG_CUDA_X_ADD,
  KG_CUDA_X_SUB,
  KG_CUDA_X_MUL,
  KG_CUDA_X_FLOORDIV,
  KG_CUDA_X_FLOORMOD,
  KG_CUDA_X_MIN,
  KG_CUDA_X_MAX,
} kg_cuda_xop;

typedef struct kg_cuda_xstep {
  kg_cuda_xop op;
  int64_t v;
} kg_cuda_xstep;

typedef struct kg_cuda_extent {
  kg_cuda_xstep *code; /* heap, n steps */
  int n;
} kg_cuda_extent;

/* x at the sizes' values (sizes[i] for SIZE i); -1 when it cannot be evaluated (overflow, division by zero, a
 * malformed program). */
int64_t kg_cuda_extent_eval(const kg_cuda_extent *x, const int64_t *sizes);
/* x as a C expression of type long long, size i written as size_names[i]. Uses the helpers
 * kg_cuda_xfloordiv, kg_cuda_xfloormod, kg_cuda_xmin and kg_cuda_xmax (long long (long long, long long)), which
 * the code it goes into defines. */
void kg_cuda_extent_print(struct kg_strbuf *b, const kg_cuda_extent *x, const char *const *size_names);

typedef struct kg_cuda_kernel {
  const char *name;        /* "<prefix>_k0", ... */
  int64_t grid[3];         /* blockIdx extents x, y, z (1 when unbound); one that follows dynamic sizes: its value
                              with every size at its hi (the most it launches, what the limits were checked at;
                              kg_cuda_program.grid_dyn says how it follows them) */
  int64_t block[3];        /* threadIdx extents */
  int64_t static_shared;   /* bytes of __shared__ arrays declared statically */
  int64_t dynamic_shared;  /* bytes of dynamic shared memory to pass at launch (used above 48 KB; else 0) */
} kg_cuda_kernel;

typedef struct kg_cuda_program {
  char *source;             /* heap */
  kg_cuda_kernel *kernels;  /* heap, nkernels; names are heap strings */
  int nkernels;
  int nparams;              /* f->nparams */
  int ntemps;
  int64_t *temp_elems;      /* heap, ntemps: f32 elements of each global temporary (the most, with dynamic sizes) */
  kg_cuda_extent *temp_dyn; /* heap, ntemps: n > 0 for a temporary whose element count follows the sizes */
  kg_cuda_extent (*grid_dyn)[3]; /* heap, nkernels: n > 0 for a grid extent of a kernel that follows the sizes;
                                    NULL when the program has no dynamic size */
  /* The dynamic sizes (f->size_vars), the kernels' leading arguments: names and ranges; NULL when none. */
  int nsizes;
  char **size_names;        /* heap strings */
  int64_t *size_lo, *size_hi;
} kg_cuda_program;

/* Prints f (lowered for KG_TARGET_CUDA) as CUDA C with kernel names "<prefix>_kN". Returns 0 and fills *out (free
 * with kg_cuda_program_free); -1 with the reason in err ("codegen cuda: stage S: ...") for a schedule the GPU
 * semantics reject; -2 with the reason for one that is legal but beyond a hardware limit (grid or block extents,
 * threads per block, per-thread register arrays), which the measurement harness reports as resource_limit. */
int kg_codegen_cuda(const kg_lowered *f, const char *prefix, kg_cuda_program *out, char *err, size_t errlen);
void kg_cuda_program_free(kg_cuda_program *p);
/* The launch of p at the dynamic sizes' values sizes (p->nsizes of them; NULL when p has none): checks each
 * against its range, then fills grid[k][0..3) for every kernel k (0 along a dimension: the kernel has nothing to
 * do and is not launched) and, when temp_elems is not NULL, the element count of each temporary. 0, or -1 with
 * the reason in err (a size outside its range, an extent past the grid's limits). */
int kg_cuda_program_grid(const kg_cuda_program *p, const int64_t *sizes, int64_t (*grid)[3], int64_t *temp_elems,
                         char *err, size_t errlen);
#endif
