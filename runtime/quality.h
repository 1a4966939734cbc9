/* A static quality report of each kernel of a compiled CUDA program, read off its launch shape, ptxas's resource
 * report and its PTX: what a GPU performance engineer checks first, without a GPU. Occupancy follows the CUDA
 * occupancy calculator (registers allocated per warp, shared memory per block plus the per-block reservation);
 * the access widths and the FMA share are counted in the kernel's PTX (a static count: a loop's body counts once,
 * so the share is that of the code, dominated by the unrolled main loop in a tiled kernel). */
#ifndef KG_QUALITY_H
#define KG_QUALITY_H
#include "nvrtc.h"
#include "../lower/ir.h"

typedef struct kg_kernel_quality {
  char name[64];
  int threads;             /* per block */
  int registers;           /* per thread */
  int64_t spill_bytes;     /* stores + loads */
  int64_t shared_bytes;    /* static + dynamic, per block */
  int blocks_per_sm;       /* resident at once; 0 when the block cannot launch there */
  const char *limited_by;  /* "threads", "blocks", "registers" or "shared memory" */
  double occupancy;        /* resident warps over the multiprocessor's maximum, 0..1 */
  int load_bits, store_bits; /* widest global load / store (32, 64 or 128; 0: none) */
  int shared_staged;       /* the kernel writes shared memory (st.shared or cp.async) and synchronizes: a staged
                              operand or a reduction */
  int fma, instructions;   /* fma.rn.f32 and all instructions in the kernel's PTX */
  int loop_fma, loop_instructions; /* the same in its main loop: of the loops (a label and a later branch back to
                                      it), the one with the most FMAs (the shortest on a tie); 0: no loop has any */
  /* kg_cuda_quality_ir: the worst shared-memory bank conflict, in passes per warp access (1: conflict-free;
   * 0: no shared access analysed), and which access it is; the most stages of a pipelined loop's shared ring
   * (`pipeline`; 1: none) */
  int banks_analysed, banks;
  char bank_where[96];
  int pipeline_stages;
} kg_kernel_quality;

/* One report per kernel of p (q[0..p->nkernels)), built for arch from c. 0, or -1 with why (an unknown arch, a
 * kernel missing from the PTX). */
int kg_cuda_quality(const kg_cuda_program *p, const kg_cubin *c, const char *arch, kg_kernel_quality *q, char *why,
                    size_t whylen);
/* The part of the report a launch shape gives without a compiler (threads, shared memory, and the occupancy they
 * and `registers` per thread allow), for a build that has no resource report: the emulator's without NVRTC. */
int kg_cuda_quality_launch(const kg_cuda_program *p, const char *arch, int registers, kg_kernel_quality *q, char *why,
                           size_t whylen);
/* Adds what each kernel's lowered IR tells: the shared-memory bank-conflict estimate (lower/work.c) and the
 * pipeline stages of its shared-memory ring. */
void kg_cuda_quality_ir(const kg_lowered *f, kg_kernel_quality *q, int nkernels);
/* Whether a kernel is well-formed for a GPU, as a performance review judges it at a glance: a block of at least
 * 128 threads in whole warps, shared-memory staging, no spills, 128-bit global loads. */
int kg_cuda_quality_well_formed(const kg_kernel_quality *q);
/* The report as one line per kernel, e.g. "kernel kgen_k0 (sm_90): 256 threads, 64 registers, no spills, 8192 B
 * shared; 4 blocks/SM (limited by registers), occupancy 50%; global loads 128-bit, stores 128-bit; shared staging;
 * FMA 41% of 612 PTX instructions (main loop: 83% of 290)" into buf (", pipelined in 3 stages" after the
 * staging when it is; the main loop's share when a loop holds FMAs). */
void kg_cuda_quality_line(const kg_kernel_quality *q, const char *arch, char *buf, size_t len);
#endif
