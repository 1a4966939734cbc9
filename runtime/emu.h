/* The CUDA emulator: runs the CUDA C that kg_codegen_cuda prints on the CPU, so that machines without a GPU (CI)
 * verify the CUDA printer. The source is compiled by the host C++ compiler ($CXX, default g++) with the emulation
 * header (runtime/cuda_emu.h, embedded in libkgen and written next to the source) force-included. The header
 * defines blockIdx/threadIdx/blockDim/gridDim, __shared__ memory per block, __syncthreads as a real barrier among
 * the block's threads run as fibers (ucontexts; a fiber runs until it blocks, so a missing barrier shows up as a
 * wrong answer), warp shuffles exchanged at a warp barrier, float2/float4 and the device math functions. The
 * fiber scheduler lives in the compiled module itself, so libkgen never switches stacks (sanitizer-friendly).
 * Blocks run one after the other. A barrier that not every live thread of the block reaches, or a shuffle that
 * not every lane reaches, stops the launch with an error naming the source line. */
#ifndef KG_EMU_H
#define KG_EMU_H
#include <stddef.h>
#include "../codegen/codegen.h"

typedef struct kg_emu_module {
  void *handle;     /* dlopen handle */
  char *dir;        /* temporary build folder, removed by kg_emu_module_free */
  char *log;        /* compiler output; may be NULL */
  double compile_s;
  int env_fault;    /* after a failed build: the environment's fault, not the source's (no build folder, the C++
                     * compiler missing or killed by a signal); see also kg_emu_toolchain_check */
} kg_emu_module;

/* Compiles p->source for the emulator. Returns 0, or -1 with m->log holding the compiler's output. */
int kg_emu_build(const kg_cuda_program *p, kg_emu_module *m);
void kg_emu_module_free(kg_emu_module *m);
/* Whether the emulator's toolchain ($CXX, $KGEN_EMU_CXXFLAGS, $TMPDIR as now) builds and loads the emulation
 * header with a trivial kernel: 0, or -1 with the reason in why. Cached per setting; thread-safe. */
int kg_emu_toolchain_check(char *why, size_t whylen);
/* Runs every kernel of p in order, grid block by block: args are the parameters then the temporaries (host
 * memory; the caller allocates temporaries of p->temp_elems). Returns 0, or -1 with the reason in err (barrier
 * divergence, a block too large, a fiber stack that cannot be allocated). */
int kg_emu_run_program(const kg_emu_module *m, const kg_cuda_program *p, float **args, char *err, size_t errlen);
/* The same at the dynamic sizes' values sizes (p->nsizes of them; NULL when p has none): checked against their
 * ranges, the grids computed from them (kg_cuda_program_grid; a kernel with an empty grid is skipped), and passed
 * to the kernels. The temporaries in args need kg_cuda_program_grid's temp_elems at these sizes. A program with
 * dynamic sizes needs this one. */
int kg_emu_run_program_sizes(const kg_emu_module *m, const kg_cuda_program *p, float **args, const int64_t *sizes,
                             char *err, size_t errlen);
/* The emulation header's text (for tests and for `kgen lower --dump emu-header`). */
extern const char kg_cuda_emu_header[];
#endif
