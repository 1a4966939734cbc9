/* The work one CUDA kernel does, counted from its lowered IR without running it: what the analytical estimate
 * (runtime/estimate.h) turns into time on an arch.
 *
 * Counts are of executions: a statement counts once per iteration of every loop around it, and once per launched
 * thread and block along each GPU index the path to it does not bind (every thread runs it). A guard (an IF)
 * counts as taken, so guarded tails count in full. Memory accesses are counted per warp the way the hardware serves
 * them: lanes 0..31 of a block (x fastest) get their addresses by evaluating the index with every other variable
 * at 0 (one representative iteration); a global access moves the 32-byte sectors those addresses touch, a shared
 * access takes one wavefront per phase (a warp; half and quarter warps for 64- and 128-bit accesses) times its
 * worst bank's distinct words. An innermost vectorized loop of 2 or 4 floats over contiguous elements is one
 * instruction (what the printer emits as float2/float4); any other vectorized loop counts per element. A serial
 * loop of at most 16 iterations without a barrier counts as unrolled, as the CUDA compiler unrolls it.
 *
 * Requires: IR lowered for KG_TARGET_CUDA with its launch shapes (f->launch), kernel k being item k of f->body. */
#ifndef KG_WORK_H
#define KG_WORK_H
#include "ir.h"

typedef struct kg_kernel_work {
  int64_t blocks, threads;  /* launched blocks, threads per block */
  double fp_insts;          /* thread-level f32 instructions: an add or subtract fed by a multiply is one (FMA) */
  double flops;             /* the floating-point operations those perform (an FMA is two) */
  double sfu_insts;         /* thread-level transcendental calls and divides (the special-function units) */
  double other_insts;       /* thread-level index arithmetic, loop control and shuffles, approximated: one per
                             * memory access and one per iteration of a loop that is not unrolled */
  double gld_insts, gst_insts;       /* thread-level global load and store instructions */
  double gld_sectors, gst_sectors;   /* 32-byte sectors they move, over warps */
  double l1_sectors;                 /* the sectors the global loads ask of L1, hits included, over warps */
  double sh_insts, sh_wavefronts;    /* thread-level shared loads and stores; wavefronts over warps */
  double local_insts;                /* loads and stores of LOCAL buffers that are not register accumulators */
  double dram_bytes;        /* compulsory DRAM traffic: each global buffer the kernel reads or writes, whole,
                             * once per direction */
  double barriers;          /* __syncthreads executed per block (an allreduce through shared memory counts two) */
  double mma_insts;         /* warp-level tensor-core steps (mma.m16n8k16: 16 x 8 x 16 FMAs each), over warps */
  int pipeline;             /* the most stages of a pipelined loop's shared ring (lower/pipeline.c); 0: none */
  int ilp;                  /* independent accumulation chains per thread in the kernel's busiest update (its
                             * register tile), or 4 when that store accumulates nothing */
  int mlp;                  /* global loads a thread issues back to back (unrolled copies of a load), 1..8 */
  int load_bytes;           /* the widest global load per thread, bytes (4, 8 or 16) */
  /* The worst shared-memory bank conflict among the kernel's shared accesses, as the wavefronts a warp's access
   * takes over the fewest its distinct words need (1: conflict-free; a broadcast is one word); 0: no shared access
   * with known addresses. Which access it is: "<buffer> load" or "<buffer> store". */
  int bank_degree;
  char bank_where[96];
} kg_kernel_work;

/* Counts kernel k of f into w. 0, or -1 when f has no such kernel or no launch shape for it. */
int kg_lower_kernel_work(const kg_lowered *f, int k, kg_kernel_work *w);
/* The worst shared-memory bank conflict of kernel k (w->bank_degree as counted above), with the access in where;
 * 0 when the kernel has no shared access it can analyse or no launch shape. */
int kg_lower_bank_conflicts(const kg_lowered *f, int k, char *where, size_t wlen);
#endif
