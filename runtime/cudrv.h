/* The CUDA driver API, loaded with dlopen at run time (libcuda.so.1; kgen links no CUDA library): device query,
 * memory, module load, launch, events. The library is $KGEN_CUDA_LIB when set (only that path), else libcuda.so.1,
 * else libcuda.so. One device (ordinal 0, or $KGEN_CUDA_DEVICE; under a launcher of several processes per machine,
 * such as mpirun or srun, its local rank modulo the devices it sees), its primary context made
 * current on the calling thread. Every call returns 0, or -1 with "cuXxx: CUDA_ERROR_NAME (description)" in err.
 * A process that forks must not have opened CUDA before the fork (the measurement worker opens it itself). */
#ifndef KG_CUDRV_H
#define KG_CUDRV_H
#include <stddef.h>
#include <stdint.h>
#include "nvrtc.h"

typedef uint64_t kg_devptr;

typedef struct kg_cudrv_device {
  char name[256];
  int major, minor;
  char arch[16];              /* "sm_90" */
  int sm_count;
  int clock_khz, mem_clock_khz, mem_bus_bits;
  int64_t total_mem;          /* bytes */
  int64_t l2_bytes;
  int driver_version;         /* e.g. 13000 */
  kg_gpu_limits limits;       /* from the device's attributes */
} kg_cudrv_device;

/* Loads the driver, initialises it and opens device 0. -1 with a one-line reason when there is no driver (e.g.
 * "no CUDA driver: libcuda.so.1: cannot open shared object file"), no device, or a stub library. */
int kg_cudrv_open(kg_cudrv_device *dev, char *err, size_t errlen);
/* Cheap probe for --target auto: 1 when kg_cudrv_open would succeed (run in a child process, so the caller may
 * still fork afterwards), 0 otherwise with the reason in why. */
int kg_cudrv_probe(char *why, size_t whylen);
/* 0 when $KGEN_CUDA_LIB is unset or names a library with the driver's entry points (loaded, not initialised: the
 * caller may still fork); else -1 with the reason, which names the path. A set but unusable KGEN_CUDA_LIB is the
 * user's error, to be said as such rather than taken for "no GPU". */
int kg_cudrv_setting_check(char *why, size_t whylen);

int kg_cudrv_alloc(kg_devptr *p, size_t bytes, char *err, size_t errlen);
void kg_cudrv_free(kg_devptr p);
int kg_cudrv_htod(kg_devptr dst, const void *src, size_t bytes, char *err, size_t errlen);
int kg_cudrv_dtoh(void *dst, kg_devptr src, size_t bytes, char *err, size_t errlen);
int kg_cudrv_dtod(kg_devptr dst, kg_devptr src, size_t bytes, char *err, size_t errlen);
int kg_cudrv_memset32(kg_devptr dst, uint32_t value, size_t count, char *err, size_t errlen);
int kg_cudrv_sync(char *err, size_t errlen);

/* A loaded module: a kg_cuda_program's kernels from its cubin (or PTX, which the driver JITs). */
typedef struct kg_cudrv_module {
  void *module;               /* CUmodule */
  void **funcs;               /* CUfunction per kernel */
  int nfuncs;
} kg_cudrv_module;
int kg_cudrv_module_load(kg_cudrv_module *m, const kg_cuda_program *p, const void *image, char *err, size_t errlen);
void kg_cudrv_module_unload(kg_cudrv_module *m);

/* Launches every kernel of p in order on the default stream: args are the device pointers of the parameters
 * then of the temporaries (p->nparams + p->ntemps). The dynamic shared memory opt-in of kernels that need it
 * is set once by kg_cudrv_module_load. Does not synchronise. A program with dynamic sizes (p->nsizes > 0) needs
 * kg_cudrv_launch_program_sizes. */
int kg_cudrv_launch_program(const kg_cudrv_module *m, const kg_cuda_program *p, kg_devptr *args, char *err,
                           size_t errlen);
/* The same at the dynamic sizes' values sizes (p->nsizes of them, in p->size_names order; NULL when p has none):
 * each is checked against its range and the grids are computed from them (kg_cuda_program_grid) before anything
 * is launched; they are the kernels' leading arguments. The temporaries in args must hold
 * kg_cuda_program_grid's temp_elems at these sizes. A kernel whose grid is empty at these sizes is skipped. */
int kg_cudrv_launch_program_sizes(const kg_cudrv_module *m, const kg_cuda_program *p, kg_devptr *args,
                                 const int64_t *sizes, char *err, size_t errlen);

/* Times one call of fn(ctx) with events around it on the default stream (seconds). */
typedef struct kg_cudrv_event_timer {
  void *start, *stop;
} kg_cudrv_event_timer;
int kg_cudrv_timer_init(kg_cudrv_event_timer *t, char *err, size_t errlen);
int kg_cudrv_timer_start(kg_cudrv_event_timer *t, char *err, size_t errlen);
int kg_cudrv_timer_stop(kg_cudrv_event_timer *t, double *seconds, char *err, size_t errlen); /* synchronises */
void kg_cudrv_timer_free(kg_cudrv_event_timer *t);

/* Overwrites an L2-sized scratch buffer so the next launch starts with a cold cache. */
int kg_cudrv_flush_l2(const kg_cudrv_device *dev, char *err, size_t errlen);
#endif
