/* The analytical estimate of a CUDA program's time on an arch, for ranking candidates where no GPU measures them
 * (tuning with --emulate): the emulator verifies, this ranks. It is a model, not a measurement, and says so
 * wherever it is shown or logged (docs/tuning.md, "The analytical estimate").
 *
 * Per kernel, from its counted work (lower/work.h) and its static quality report (occupancy from the resource
 * report; runtime/quality.h), on the figures of one representative device of the arch (kg_gpu_device_for_arch):
 *   - throughput times: instruction issue and f32 pipes, special-function units, shared-memory wavefronts, L2
 *     sectors (global accesses as served per warp) and compulsory DRAM bytes, each at the device's rate over the
 *     multiprocessors the grid occupies;
 *   - latency hiding: the compute times are divided by min(1, warps per scheduler x independent accumulation
 *     chains / 4) (an FMA's latency is 4 cycles), the memory times by min(1, bytes in flight per SM / (the SM's
 *     share of DRAM bandwidth x the memory latency)), the bytes in flight being resident warps x their lanes in
 *     use x the widest load x loads issued back to back;
 *   - waves: a grid that does not fill its last wave of resident blocks pays for the whole wave;
 *   - barrier-separated steps (a staged tile loop): each step exposes the memory latency that the other resident
 *     blocks' work of one step does not cover; a pipelined loop of D stages (one barrier per step) issued its
 *     loads D - 1 steps earlier, so D - 1 steps of every resident block's work cover them as well; each barrier
 *     costs a few cycles;
 *   - spills slow the kernel in proportion to the bytes spilled; and each kernel launch costs a fixed overhead.
 * The kernel's time is the largest throughput time, divided by the wave efficiency (and never under one block's
 * life, a memory trip and its barriers, per wave), plus the exposed latencies and the launch; the program's is the
 * sum over its kernels. */
#ifndef KG_ESTIMATE_H
#define KG_ESTIMATE_H
#include "quality.h"
#include "../lower/work.h"

/* What the estimate assumes of an arch: one representative device's figures. */
typedef struct kg_gpu_device {
  const char *name;     /* "NVIDIA H200" */
  int sms;
  double clock_hz;      /* sustained boost clock */
  double fp32_per_clk;  /* warp instructions of f32 arithmetic per SM per cycle (FP32 lanes / 32) */
  double dram_bps;      /* sustained DRAM bandwidth (a large copy's rate), bytes/s */
  double l2_bytes_per_clk; /* per SM, L2 to L1 */
  double mem_latency;   /* cycles from a global load to its use (DRAM; an L2 hit is about half) */
  double mma_per_clk;   /* tensor-core m16n8k16 steps (f16/bf16, f32 accumulation) per SM per cycle; 0: none (the
                           step then runs in software) */
} kg_gpu_device;
/* 0, or -1 for an arch without figures. */
int kg_gpu_device_for_arch(const char *arch, kg_gpu_device *d);

#define KG_ESTIMATE_LAUNCH_S 2e-6 /* one kernel launch, back to back on a stream */

typedef struct kg_kernel_estimate {
  double s;                     /* the kernel's estimated time */
  double t_issue, t_sfu, t_shared, t_l1, t_l2, t_dram; /* throughput times, after latency hiding, before waves */
  double t_latency;             /* exposed latency of barrier-separated steps, and the barriers */
  double eff_compute, eff_memory, waves_eff;     /* 0..1 */
  const char *bound;            /* the largest throughput time: "issue", "sfu", "shared", "l2", "dram", or
                                 * "latency" when the exposed latency exceeds it */
  kg_kernel_work work;
} kg_kernel_estimate;

/* The estimate of lowered CUDA program f on arch, its kernels' quality reports q[0..f's kernels) giving threads,
 * registers, spills, shared memory and occupancy. Returns the total seconds (per-kernel detail in k[] when not
 * NULL), or -1 with why (an arch without figures, a kernel whose work cannot be counted, a block that cannot be
 * resident). */
double kg_cuda_estimate(const kg_lowered *f, const kg_kernel_quality *q, int nkernels, const char *arch,
                        kg_kernel_estimate *k, char *why, size_t whylen);
/* The estimate of a built CUDA program cp (lowered as ir): fills q[0..cp->nkernels) with the quality report of cb
 * (NULL when the build has no resource report, e.g. the emulator's without NVRTC or a search's prior: the launch
 * shape's, at the registers kg_cuda_registers_guess gives each kernel), then estimates as kg_cuda_estimate does.
 * Seconds, or -1 with why. */
double kg_cuda_estimate_build(const kg_cuda_program *cp, const kg_cubin *cb, const kg_lowered *ir, const char *arch,
                              kg_kernel_quality *q, kg_kernel_estimate *k, char *why, size_t whylen);
/* The registers a thread of kernel k (item k of ir->body) takes, guessed without a compiler: 40 plus 1.25 per
 * float of the per-thread arrays live at once (a register tile of 32 floats: 80, as ptxas gives 85 to 95 for
 * kgen's 8 x 4 SGEMM tiles), at most 255; what is past 255 spills, 4 bytes a register, into *spill_bytes. */
int kg_cuda_registers_guess(const kg_lowered *ir, int k, int64_t *spill_bytes);
/* The kernel with the largest estimated time among k[0..n) (0 when n <= 1). */
int kg_cuda_estimate_busiest(const kg_kernel_estimate *k, int n);
/* "estimate on sm_90 (NVIDIA H200 figures, a model): 3.1 ms; kgen_k0 3.1 ms bound by issue (compute 100%, memory
 * 85%, waves 97%)" into buf. */
void kg_cuda_estimate_line(const kg_kernel_estimate *k, int nkernels, double total_s, const char *arch, char *buf,
                           size_t len);
#endif
