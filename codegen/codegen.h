/* Printers from the loop-nest IR to source code. */
#ifndef KG_CODEGEN_H
#define KG_CODEGEN_H
#include "../schedule/ir.h"

/* C11 with OpenMP pragmas (codegen/c.c), also valid C++ and CUDA host code, in pieces that an exported header
 * (codegen/header_c.c) puts together and that several headers can share one translation unit with:
 *
 * The prelude: includes and the KG_RESTRICT macro (restrict in C, __restrict__ in C++), guarded by
 * KG_C_INCLUDES; then the opening of a region of compiler options and silenced diagnostics; then the helpers the
 * functions call (kg_expf, kg_floordiv, ...), guarded by KG_C_HELPERS. It must precede any function. */
const char *kg_codegen_c_prelude(void);
/* The region's closing: once after the functions. */
const char *kg_codegen_c_epilogue(void);
/* One function (heap text in *out):
 *   int <fn_name>(const float *KG_RESTRICT in0, ..., float *KG_RESTRICT out0, ...)
 * (inputs, then outputs, in the def's order), plus, when f has global temporaries, their cached workspaces
 * `static float *kg_ws_<fn_name>_<temp>` and the destructor `<fn_name>_ws_release` that frees them. Global
 * temporaries persist between calls (taken and given back atomically, so concurrent calls are safe); large local
 * regions are heap-allocated, small ones live on the stack. The printed function returns 0, or -2 (an exported
 * header's KG_ERR_OUT_OF_MEMORY) when a temporary or a local region could not be allocated (outputs are then
 * partly or wholly unwritten). kg_codegen_c_function returns 0, or -1 with the reason in err (e.g. a loop bound to
 * a GPU index, fn_name not an identifier). */
int kg_codegen_c_function(const kg_lowered *f, const char *fn_name, char **out, char *err, size_t errlen);
/* A self-contained translation unit: the prelude, kg_codegen_c_function's function, the epilogue, and a wrapper
 *   void <fn_name>_args(float **args)
 * that passes args[0..nparams) and ignores the status (what kg_cpu_call calls). 0, or -1 as above. */
int kg_codegen_c(const kg_lowered *f, const char *fn_name, char **out, char *err, size_t errlen);

/* CUDA C: one translation unit holding one kernel per root stage (the items of f->body, in order), each
 *   extern "C" __global__ void __launch_bounds__(T) <prefix>_k<N>(const float* __restrict__ in0, ...,
 *                                                               float* __restrict__ out0, ..., float* tmp0, ...)
 * Every kernel takes the same arguments: the parameters (inputs const, then outputs), then the global temporaries
 * in f->temps order. The source needs no header (NVRTC compiles it as is); compiled by the host compiler with
 * runtime/cuda_emu.h force-included (KG_EMULATE defined) it runs on the CUDA emulator, for which the source also
 * defines, under #ifdef KG_EMULATE, an entry `extern "C" void <kernel>__emu(float **args)` per kernel.
 *
 * Semantics of bound loops (as in TVM): a loop bound to blockIdx/threadIdx.{x,y,z} becomes that index; a kernel
 * launches, per tag, the largest extent bound to it, and a loop with a smaller extent is guarded. Loops bound to
 * the same tag in a consumer and in a shared-scope stage attached inside it are the same hardware index (a
 * cooperative fetch). A store no thread index distinguishes is made by one thread only. vthread loops are
 * unrolled serial loops. A reduction loop bound to a thread index is a cross-thread reduction (warp shuffles,
 * shared memory across warps). Rejected with an error (an illegal candidate, never a crash): a barrier or a
 * cross-thread reduction under a guarded thread loop, a thread-bound loop in a per-thread (local) region, two
 * loops of one stage bound to one tag, extents past the hardware's grid limits. */
typedef struct kg_cuda_kernel {
  const char *name;        /* "<prefix>_k0", ... */
  int64_t grid[3];         /* blockIdx extents x, y, z (1 when unbound) */
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
  int64_t *temp_elems;      /* heap, ntemps: f32 elements of each global temporary */
} kg_cuda_program;

/* Prints f (lowered for KG_TARGET_CUDA) as CUDA C with kernel names "<prefix>_kN". Returns 0 and fills *out (free
 * with kg_cuda_program_free); -1 with the reason in err ("codegen cuda: stage S: ...") for a schedule the GPU
 * semantics reject; -2 with the reason for one that is legal but beyond a hardware limit (grid or block extents,
 * threads per block, per-thread register arrays), which the measurement harness reports as resource_limit. */
int kg_codegen_cuda(const kg_lowered *f, const char *prefix, kg_cuda_program *out, char *err, size_t errlen);
void kg_cuda_program_free(kg_cuda_program *p);
#endif
