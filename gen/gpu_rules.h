/* The GPU-only parts of building structures (a cooperative fetch into shared memory, which reads reuse data) on
 * the generators' builder (build.h), and the launch rules a GPU schedule must pass: shared by the random GPU
 * schedules (random_gpu.c, random sizes) and the search space's GPU sketches (sketch_gpu.c, sizes from knobs).
 * Internal to the library, not part of the API. */
#ifndef KG_GPU_RULES_H
#define KG_GPU_RULES_H
#include "build.h"

/* The distinct tensors st's body reads (at most max), with whether some read leaves out a spatial axis of st (the
 * data is reused across that axis, so staging it in shared memory pays). */
void kg_gpu_collect_reads(const kg_sstage *st, const kg_expr *e, kg_tensor **t, int *reuse, int *n, int max);
int kg_gpu_has_reuse(const kg_sstage *st);

/* A cooperative fetch: shared stage sh with its loops fused and split over exactly tx x ty threads (threadIdx.x,
 * .y). With vec > 1 a vec-wide vectorized part is split off the innermost axis before fusing, so its accesses
 * stay contiguous (and aligned when the row length allows) in the printed index. */
void kg_gpu_cooperative_fetch(kg_builder *b, kg_sstage *sh, int64_t tx, int64_t ty, int64_t vec);

/* Tensor cores (`tensorize`, schedule/sched.h kg_mma_plan): whether st sums products of two f16 (or two bf16) reads
 * shaped as a GEMM, and its axes. The rows are the spatial axes only the first read uses, the columns those only
 * the second uses, the batch the others (both or neither use them); each set is fused into one loop (a
 * convolution's rows: its batch and output pixels, an implicit GEMM). Its reads are two f16 or two bf16 tensors,
 * or two f32 ones where p allows TF32. The instruction sums over one reduction axis whose extent is a multiple of
 * its step (kstep: 16, TF32 8; the longest such); any other reduction axes are loops around it. The
 * tiles must divide (the instruction computes whole ones): the rows' product a multiple of 16, the columns' of 8;
 * the batch's product must fit a grid's z extent. */
#define KG_GPU_MMA_MAX_AXES 8
typedef struct kg_gpu_mma_axes {
  int rows[KG_GPU_MMA_MAX_AXES], nrows; /* axis indices, outermost first */
  int cols[KG_GPU_MMA_MAX_AXES], ncols;
  int batch[KG_GPU_MMA_MAX_AXES], nbatch;
  int k;                                /* the reduction axis (an index among all axes: nax + r) */
  int64_t m, n;                         /* the rows' and the columns' extents */
  int kstep;                            /* the instruction's reduction (kg_mma_kstep) */
} kg_gpu_mma_axes;
int kg_gpu_mma_shape(const kg_program *p, const kg_sstage *st, kg_gpu_mma_axes *ax);
/* The structure on such a stage: blocks of wy warps (threadIdx.y) over 16 mt wy rows and 8 nt columns (blockIdx.y,
 * .x; the batch on .z), each warp mt x nt instruction tiles (mt halved until the block's rows divide the rows;
 * the tiles' loops unrolled when unroll), the lanes of threadIdx.x, k in steps of ax->kstep, then the `tensorize`
 * step. staged: the k loop outside the tiles (then unrolled, so that their accumulators stay in registers across
 * it), both operands' tiles of each k step in shared memory (a cooperative fetch by the block), a k step ks
 * instruction steps long (fewer barriers an instruction; ks is halved until it divides the reduction), each shared
 * row followed by pad unused elements (0: none; which pad makes the fragments' reads conflict-free depends on the
 * row's length); else the k loop inside the tiles' loops, right outside one tile (its accumulators then stay in
 * registers when k is the only reduction). Other reduction axes run outside the warps' tiles. */
typedef struct kg_gpu_mma_opts {
  int64_t wy, mt, nt; /* warps a block, tiles a warp along the rows and along the columns */
  int unroll, staged;
  int64_t ks, pad;    /* staged only */
  int64_t pipe;       /* staged only: a ring of pipe shared tiles filled by cp.async (`pipeline`); 0 or 1: none */
} kg_gpu_mma_opts;
void kg_gpu_mma_build(kg_builder *b, kg_sstage *st, const kg_gpu_mma_axes *ax, const kg_gpu_mma_opts *o);

/* What a launch may use. Register arrays are counted in floats: each one at most local_array, all of a kernel's
 * together at most local_total; with regs_per_block > 0 also (local_total_used + reg_overhead) x threads at most
 * regs_per_block (an estimate of the register file a block takes). */
typedef struct kg_gpu_budget {
  int64_t threads;
  int64_t block[3], grid[3];
  int64_t shared_floats;
  int64_t local_array, local_total;
  int64_t regs_per_block, reg_overhead;
} kg_gpu_budget;
/* 0 when every kernel of sc's lowered program obeys the launch rules of the GPU semantics within budget: thread,
 * block and grid extents, shared and register footprints, no barrier or cross-thread reduction under a guarded
 * thread loop, no bound loop in a per-thread stage. Else -1 with the reason in why. */
int kg_gpu_launchable(const kg_schedule *sc, const kg_gpu_budget *budget, char *why, size_t whylen);
/* kg_schedule_random for KG_TARGET_CUDA (random_gpu.c): whole launchable structures per stage, drawn from seed;
 * nsteps <= 0 draws nothing, otherwise the structures decide how many steps there are. */
void kg_sched_random_gpu(kg_schedule *s, uint64_t seed, int nsteps);
#endif
