/* NVRTC: CUDA C to cubin (and PTX) without a GPU, with the ptxas resource report, and the check of a build
 * against a device's limits. libnvrtc is loaded with dlopen on first use (kgen links no CUDA library), from
 * $KGEN_NVRTC when set (only that path: a bad one is an error naming it, never a silent fallback), else libnvrtc.so / libnvrtc.so.13 / .12 / .11 on the loader path, then $CUDA_HOME/lib64 and
 * /usr/local/cuda/lib64. */
#ifndef KG_NVRTC_H
#define KG_NVRTC_H
#include <stddef.h>
#include <stdint.h>
#include "../codegen/codegen.h"
#include "../codegen/gpu_arch.h"

/* What ptxas reported for one kernel ("ptxas info : Used 40 registers, 4096 bytes smem, ..."). */
typedef struct kg_kernel_resources {
  char name[64];          /* the kernel's name */
  int registers;          /* per thread */
  int64_t spill_stores;   /* bytes */
  int64_t spill_loads;    /* bytes */
  int64_t static_shared;  /* bytes of static shared memory */
  int64_t local_bytes;    /* stack frame (local memory) per thread */
} kg_kernel_resources;

typedef struct kg_cubin {
  char arch[16];              /* "sm_90" */
  void *cubin;                /* heap */
  size_t cubin_size;
  char *ptx;                  /* heap, NUL-terminated */
  char *log;                  /* heap: the NVRTC log (warnings, errors, ptxas report); may be NULL */
  kg_kernel_resources *res;   /* heap, one per kernel of the program, in its order (nres) */
  int nres;
  double compile_s;
  int env_fault;              /* after a failed compile: NVRTC's fault or the setting's (missing, unusable, an
                               * internal error), not the source's; see also kg_nvrtc_toolchain_check */
} kg_cubin;

/* 0 when NVRTC can be loaded; else -1 and the reason (one line) in why. */
int kg_nvrtc_available(char *why, size_t whylen);
/* 0 when $KGEN_NVRTC is unset or names a loadable NVRTC; else -1 with the reason, which names the path. */
int kg_nvrtc_setting_check(char *why, size_t whylen);
/* Whether NVRTC compiles a trivial known-good kernel for arch: 0, or -1 with the reason in why. Tells a broken
 * toolchain (e.g. an arch this NVRTC does not know) from source that NVRTC rejects. Cached per arch. */
int kg_nvrtc_toolchain_check(const char *arch, char *why, size_t whylen);
/* The option that turns off NVRTC's compile cache for a given NVRTC version ("--no-cache" from 12.9 on), or NULL
 * where there is none: a cached compile skips ptxas and so its resource report. */
const char *kg_nvrtc_cache_option(int major, int minor);
/* NVRTC's version as "13.0", or "" when unavailable. */
const char *kg_nvrtc_version(void);
/* Compiles p->source for arch ("sm_86", "sm_90": -arch=sm_XX, -O3 defaults, --ptxas-options=-v) to cubin and PTX
 * and parses the resource report of each of p's kernels. Returns 0, or -1 with out->log holding NVRTC's log (or
 * the reason, e.g. NVRTC missing). Thread-safe: several compiles may run at once (OpenMP). */
int kg_nvrtc_compile(const kg_cuda_program *p, const char *arch, kg_cubin *out);
void kg_cubin_free(kg_cubin *c);
/* Compiles n programs for one arch on up to nthreads OpenMP threads (0: all cores); rc[i] as kg_nvrtc_compile. */
void kg_nvrtc_compile_batch(const kg_cuda_program *const *p, int n, const char *arch, kg_cubin *out, int *rc,
                            int nthreads);
/* Checks each kernel's launch (threads per block, block and grid extents, shared memory static + dynamic,
 * registers x threads, registers per thread) against l. 0 when it fits; else -1 with the reason, e.g.
 * "kernel kgen_k0: 1536 threads per block > 1024". res may be NULL (then only launch-shape limits are checked). */
int kg_gpu_check_limits(const kg_cuda_program *p, const kg_cubin *res, const kg_gpu_limits *l, char *why,
                        size_t whylen);
#endif
