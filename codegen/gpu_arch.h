/* What a CUDA arch is and what a launch on it may use: the search space, the random GPU schedules and the
 * compile-time checks all need the limits, none of them the compiler or the driver, so they live beside the CUDA
 * printer rather than in the runtime. */
#ifndef KG_GPU_ARCH_H
#define KG_GPU_ARCH_H
#include <stdint.h>

/* "sm_NN" or "sm_NNN" with an optional 'a' or 'f' suffix (sm_90a): 0 with the number and the suffix (0 when none),
 * else -1. */
int kg_gpu_arch_parse(const char *arch, int *num, char *suffix);

/* Limits a launch must respect. kg_gpu_limits_for_arch gives the documented values of an arch (sm_70 ... sm_90:
 * 1024 threads per block, 48 KB static shared, the opt-in maximum of dynamic shared (99 KB on sm_86, 227 KB on
 * sm_90), 64K registers per block and 255 per thread); the CUDA runtime fills them from the device instead. */
typedef struct kg_gpu_limits {
  int max_threads_per_block;
  int64_t max_block[3];
  int64_t max_grid[3];
  int64_t max_shared_static;   /* 48 KB */
  int64_t max_shared_optin;    /* per block with the opt-in */
  int max_regs_per_block;
  int max_regs_per_thread;
} kg_gpu_limits;
int kg_gpu_limits_for_arch(const char *arch, kg_gpu_limits *l); /* -1 for an arch it does not know */

/* What one multiprocessor holds at once (the CUDA occupancy calculator's figures per compute capability): the
 * resident threads and blocks, its register file (allocated per warp in units of reg_unit registers) and its
 * shared memory, of which each resident block also takes shared_reserved bytes (sm_80 on). */
typedef struct kg_gpu_sm {
  int max_threads, max_blocks, regs, reg_unit;
  int64_t shared, shared_reserved;
} kg_gpu_sm;
int kg_gpu_sm_for_arch(const char *arch, kg_gpu_sm *s); /* -1 for an arch it does not know */
#endif
