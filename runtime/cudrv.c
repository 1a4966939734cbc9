/* The CUDA driver API through dlopen: device query, memory, module load, launch, events, L2 flush, and a probe
 * that tries all of it in a child process.
 *
 * Requires libdl only: the driver entry points are declared here with their documented prototypes and the
 * enum values (CUresult, CUdevice_attribute, CUfunction_attribute, CUjit_option) are taken from the CUDA driver
 * API reference, so kgen builds and runs without CUDA headers or a driver. The versioned (_v2) entry points are
 * the ones cuda.h maps the plain names to; the primary context of one device is made current on each calling
 * thread on first use. The library is $KGEN_CUDA_LIB when set, else libcuda.so.1, else libcuda.so. */
#include "cudrv.h"
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int cu_result;
typedef int cu_device;
typedef void *cu_context;
typedef void *cu_module;
typedef void *cu_function;
typedef void *cu_event;
typedef void *cu_stream;

enum {
  CU_SUCCESS = 0,
  CU_ERROR_STUB_LIBRARY = 34,
  CU_ERROR_NO_DEVICE = 100,
};

/* CUdevice_attribute */
enum {
  CU_ATTR_MAX_THREADS_PER_BLOCK = 1,
  CU_ATTR_MAX_BLOCK_DIM_X = 2,
  CU_ATTR_MAX_GRID_DIM_X = 5,
  CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_ATTR_MAX_REGISTERS_PER_BLOCK = 12,
  CU_ATTR_CLOCK_RATE = 13,
  CU_ATTR_MULTIPROCESSOR_COUNT = 16,
  CU_ATTR_MEMORY_CLOCK_RATE = 36,
  CU_ATTR_GLOBAL_MEMORY_BUS_WIDTH = 37,
  CU_ATTR_L2_CACHE_SIZE = 38,
  CU_ATTR_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_ATTR_COMPUTE_CAPABILITY_MINOR = 76,
  CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

enum { CU_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8 };
enum { CU_JIT_ERROR_LOG_BUFFER = 5, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };

static struct {
  void *lib;
  char lib_name[256];
  int opened;
  cu_device dev;
  cu_context ctx;
  kg_cudrv_device info;
  kg_devptr flush_buf;
  size_t flush_bytes;
  uint32_t flush_value;
  pthread_mutex_t lock;

  cu_result (*get_error_name)(cu_result, const char **);
  cu_result (*get_error_string)(cu_result, const char **);
  cu_result (*init)(unsigned);
  cu_result (*driver_get_version)(int *);
  cu_result (*device_get_count)(int *);
  cu_result (*device_get)(cu_device *, int);
  cu_result (*device_get_name)(char *, int, cu_device);
  cu_result (*device_get_attribute)(int *, int, cu_device);
  cu_result (*device_total_mem)(size_t *, cu_device);
  cu_result (*primary_ctx_retain)(cu_context *, cu_device);
  cu_result (*primary_ctx_release)(cu_device);
  cu_result (*ctx_set_current)(cu_context);
  cu_result (*ctx_synchronize)(void);
  cu_result (*mem_alloc)(kg_devptr *, size_t);
  cu_result (*mem_free)(kg_devptr);
  cu_result (*memcpy_htod)(kg_devptr, const void *, size_t);
  cu_result (*memcpy_dtoh)(void *, kg_devptr, size_t);
  cu_result (*memcpy_dtod)(kg_devptr, kg_devptr, size_t);
  cu_result (*memset_d32)(kg_devptr, unsigned, size_t);
  cu_result (*module_load_data_ex)(cu_module *, const void *, unsigned, int *, void **);
  cu_result (*module_unload)(cu_module);
  cu_result (*module_get_function)(cu_function *, cu_module, const char *);
  cu_result (*func_set_attribute)(cu_function, int, int);
  cu_result (*launch_kernel)(cu_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             cu_stream, void **, void **);
  cu_result (*event_create)(cu_event *, unsigned);
  cu_result (*event_record)(cu_event, cu_stream);
  cu_result (*event_synchronize)(cu_event);
  cu_result (*event_elapsed_time)(float *, cu_event, cu_event);
  cu_result (*event_destroy)(cu_event);
} cu = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Whether this thread has made the primary context current. */
static _Thread_local int tl_current;

/* Used when the driver cannot name its own error (the stub library answers every call with error 34). */
static const char *fallback_name(cu_result r) {
  switch (r) {
  case 0: return "CUDA_SUCCESS";
  case 1: return "CUDA_ERROR_INVALID_VALUE";
  case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
  case 3: return "CUDA_ERROR_NOT_INITIALIZED";
  case 4: return "CUDA_ERROR_DEINITIALIZED";
  case 34: return "CUDA_ERROR_STUB_LIBRARY";
  case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
  case 36: return "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER";
  case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
  case 100: return "CUDA_ERROR_NO_DEVICE";
  case 101: return "CUDA_ERROR_INVALID_DEVICE";
  case 200: return "CUDA_ERROR_INVALID_IMAGE";
  case 201: return "CUDA_ERROR_INVALID_CONTEXT";
  case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
  case 218: return "CUDA_ERROR_INVALID_PTX";
  case 222: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
  case 400: return "CUDA_ERROR_INVALID_HANDLE";
  case 500: return "CUDA_ERROR_NOT_FOUND";
  case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
  case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
  case 702: return "CUDA_ERROR_LAUNCH_TIMEOUT";
  case 710: return "CUDA_ERROR_ASSERT";
  case 715: return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
  case 716: return "CUDA_ERROR_MISALIGNED_ADDRESS";
  case 719: return "CUDA_ERROR_LAUNCH_FAILED";
  case 999: return "CUDA_ERROR_UNKNOWN";
  default: return NULL;
  }
}

/* "call: CUDA_ERROR_NAME (description)" into err. Always returns -1 so that callers can `return fail(...)`. */
static int fail(char *err, size_t errlen, const char *call, cu_result r) {
  const char *name = NULL, *desc = NULL;
  if (cu.get_error_name && cu.get_error_name(r, &name) != CU_SUCCESS) name = NULL;
  if (cu.get_error_string && cu.get_error_string(r, &desc) != CU_SUCCESS) desc = NULL;
  if (!name) name = fallback_name(r);
  char num[32];
  if (!name) {
    snprintf(num, sizeof num, "CUDA error %d", r);
    name = num;
  }
  if (err && errlen) {
    if (desc)
      snprintf(err, errlen, "%s: %s (%s)", call, name, desc);
    else
      snprintf(err, errlen, "%s: %s", call, name);
  }
  return -1;
}

static int fail_msg(char *err, size_t errlen, const char *msg) {
  if (err && errlen) snprintf(err, errlen, "%s", msg);
  return -1;
}

#define CU_CALL(expr, name)                                                                                  \
  do {                                                                                                       \
    cu_result r_ = (expr);                                                                                   \
    if (r_ != CU_SUCCESS) return fail(err, errlen, name, r_);                                                \
  } while (0)

/* Every call after kg_cudrv_open goes through here: the primary context is current per thread. */
static int ensure_current(char *err, size_t errlen) {
  if (!cu.opened) return fail_msg(err, errlen, "CUDA is not open (call kg_cudrv_open first)");
  if (!tl_current) {
    CU_CALL(cu.ctx_set_current(cu.ctx), "cuCtxSetCurrent");
    tl_current = 1;
  }
  return 0;
}

static int load_library(char *err, size_t errlen) {
  if (cu.lib) return 0;
  /* $KGEN_CUDA_LIB, when set, is the only library tried (tests point it at the stub or at nothing). */
  const char *env = getenv("KGEN_CUDA_LIB");
  const char *names[3] = {env, "libcuda.so.1", "libcuda.so"};
  int nnames = env && env[0] ? 1 : 3;
  char first[400] = "";
  void *h = NULL;
  for (int i = 0; i < nnames && !h; i++) {
    if (!names[i] || !names[i][0]) continue;
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      snprintf(cu.lib_name, sizeof cu.lib_name, "%s", names[i]);
    } else if (!first[0]) {
      const char *e = dlerror();
      snprintf(first, sizeof first, "%.390s", e ? e : names[i]);
    }
  }
  if (!h) {
    if (err && errlen) snprintf(err, errlen, "no CUDA driver: %s", first);
    return -1;
  }
  struct {
    const char *name, *alt;
    void **slot;
  } syms[] = {
      {"cuGetErrorName", NULL, (void **)&cu.get_error_name},
      {"cuGetErrorString", NULL, (void **)&cu.get_error_string},
      {"cuInit", NULL, (void **)&cu.init},
      {"cuDriverGetVersion", NULL, (void **)&cu.driver_get_version},
      {"cuDeviceGetCount", NULL, (void **)&cu.device_get_count},
      {"cuDeviceGet", NULL, (void **)&cu.device_get},
      {"cuDeviceGetName", NULL, (void **)&cu.device_get_name},
      {"cuDeviceGetAttribute", NULL, (void **)&cu.device_get_attribute},
      {"cuDeviceTotalMem_v2", NULL, (void **)&cu.device_total_mem},
      {"cuDevicePrimaryCtxRetain", NULL, (void **)&cu.primary_ctx_retain},
      {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", (void **)&cu.primary_ctx_release},
      {"cuCtxSetCurrent", NULL, (void **)&cu.ctx_set_current},
      {"cuCtxSynchronize", NULL, (void **)&cu.ctx_synchronize},
      {"cuMemAlloc_v2", NULL, (void **)&cu.mem_alloc},
      {"cuMemFree_v2", NULL, (void **)&cu.mem_free},
      {"cuMemcpyHtoD_v2", NULL, (void **)&cu.memcpy_htod},
      {"cuMemcpyDtoH_v2", NULL, (void **)&cu.memcpy_dtoh},
      {"cuMemcpyDtoD_v2", NULL, (void **)&cu.memcpy_dtod},
      {"cuMemsetD32_v2", NULL, (void **)&cu.memset_d32},
      {"cuModuleLoadDataEx", NULL, (void **)&cu.module_load_data_ex},
      {"cuModuleUnload", NULL, (void **)&cu.module_unload},
      {"cuModuleGetFunction", NULL, (void **)&cu.module_get_function},
      {"cuFuncSetAttribute", NULL, (void **)&cu.func_set_attribute},
      {"cuLaunchKernel", NULL, (void **)&cu.launch_kernel},
      {"cuEventCreate", NULL, (void **)&cu.event_create},
      {"cuEventRecord", NULL, (void **)&cu.event_record},
      {"cuEventSynchronize", NULL, (void **)&cu.event_synchronize},
      /* cuda.h maps cuEventElapsedTime to _v2 from CUDA 12.8 on; older drivers only have the plain one. */
      {"cuEventElapsedTime_v2", "cuEventElapsedTime", (void **)&cu.event_elapsed_time},
      {"cuEventDestroy_v2", "cuEventDestroy", (void **)&cu.event_destroy},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *f = dlsym(h, syms[i].name);
    if (!f && syms[i].alt) f = dlsym(h, syms[i].alt);
    if (!f) {
      if (err && errlen)
        snprintf(err, errlen, "CUDA driver %s lacks %s (driver too old)", cu.lib_name, syms[i].name);
      /* The library stays loaded: some slots already point into it, and cu.lib stays NULL so none is used. */
      cu.get_error_name = NULL;
      cu.get_error_string = NULL;
      return -1;
    }
    memcpy(syms[i].slot, &f, sizeof f);
  }
  cu.lib = h;
  return 0;
}

static int attr(int *v, int a, char *err, size_t errlen) {
  cu_result r = cu.device_get_attribute(v, a, cu.dev);
  if (r != CU_SUCCESS) {
    char call[64];
    snprintf(call, sizeof call, "cuDeviceGetAttribute(%d)", a);
    return fail(err, errlen, call, r);
  }
  return 0;
}

static int open_locked(kg_cudrv_device *dev, char *err, size_t errlen) {
  if (cu.opened) {
    if (ensure_current(err, errlen) != 0) return -1;
    if (dev) *dev = cu.info;
    return 0;
  }
  if (load_library(err, errlen) != 0) return -1;
  cu_result r = cu.init(0);
  if (r == CU_ERROR_STUB_LIBRARY) {
    if (err && errlen)
      snprintf(err, errlen, "no CUDA driver: %s is the toolkit's stub library (CUDA_ERROR_STUB_LIBRARY)",
               cu.lib_name);
    return -1;
  }
  if (r == CU_ERROR_NO_DEVICE) {
    fail(err, errlen, "no CUDA device: cuInit", r);
    return -1;
  }
  if (r != CU_SUCCESS) return fail(err, errlen, "cuInit", r);
  int count = 0;
  CU_CALL(cu.device_get_count(&count), "cuDeviceGetCount");
  int ordinal = 0;
  const char *env = getenv("KGEN_CUDA_DEVICE");
  if (env && env[0]) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end || v < 0 || v > 1024) {
      if (err && errlen) snprintf(err, errlen, "KGEN_CUDA_DEVICE=%.32s is not a device ordinal", env);
      return -1;
    }
    ordinal = (int)v;
  } else if (count > 0) {
    /* one of several processes of a launcher on this machine (a distributed tuning, dist/dist.h): the GPU of its
     * local rank; a launcher that pins each rank to its GPUs (CUDA_VISIBLE_DEVICES) leaves count at what it gave */
    static const char *const local_rank[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof local_rank / sizeof *local_rank; i++) {
      const char *lr = getenv(local_rank[i]);
      if (lr && *lr) {
        ordinal = atoi(lr) % count;
        if (ordinal < 0) ordinal = 0;
        break;
      }
    }
  }
  if (count <= 0 || ordinal >= count) {
    if (err && errlen) snprintf(err, errlen, "no CUDA device %d (the driver sees %d)", ordinal, count);
    return -1;
  }
  CU_CALL(cu.device_get(&cu.dev, ordinal), "cuDeviceGet");

  kg_cudrv_device d;
  memset(&d, 0, sizeof d);
  CU_CALL(cu.device_get_name(d.name, (int)sizeof d.name - 1, cu.dev), "cuDeviceGetName");
  int v;
  if (attr(&d.major, CU_ATTR_COMPUTE_CAPABILITY_MAJOR, err, errlen) ||
      attr(&d.minor, CU_ATTR_COMPUTE_CAPABILITY_MINOR, err, errlen) ||
      attr(&d.sm_count, CU_ATTR_MULTIPROCESSOR_COUNT, err, errlen) ||
      attr(&d.clock_khz, CU_ATTR_CLOCK_RATE, err, errlen) ||
      attr(&d.mem_clock_khz, CU_ATTR_MEMORY_CLOCK_RATE, err, errlen) ||
      attr(&d.mem_bus_bits, CU_ATTR_GLOBAL_MEMORY_BUS_WIDTH, err, errlen))
    return -1;
  if (attr(&v, CU_ATTR_L2_CACHE_SIZE, err, errlen)) return -1;
  d.l2_bytes = v;
  snprintf(d.arch, sizeof d.arch, "sm_%d%d", d.major, d.minor);
  size_t total = 0;
  CU_CALL(cu.device_total_mem(&total, cu.dev), "cuDeviceTotalMem");
  d.total_mem = (int64_t)total;
  CU_CALL(cu.driver_get_version(&d.driver_version), "cuDriverGetVersion");

  kg_gpu_limits *l = &d.limits;
  if (attr(&l->max_threads_per_block, CU_ATTR_MAX_THREADS_PER_BLOCK, err, errlen)) return -1;
  for (int i = 0; i < 3; i++) {
    if (attr(&v, CU_ATTR_MAX_BLOCK_DIM_X + i, err, errlen)) return -1;
    l->max_block[i] = v;
    if (attr(&v, CU_ATTR_MAX_GRID_DIM_X + i, err, errlen)) return -1;
    l->max_grid[i] = v;
  }
  if (attr(&v, CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK, err, errlen)) return -1;
  l->max_shared_static = v;
  if (attr(&v, CU_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, err, errlen)) return -1;
  l->max_shared_optin = v > l->max_shared_static ? v : l->max_shared_static;
  if (attr(&l->max_regs_per_block, CU_ATTR_MAX_REGISTERS_PER_BLOCK, err, errlen)) return -1;
  /* No attribute gives the per-thread register cap; it has been 255 since sm_35. */
  kg_gpu_limits known;
  l->max_regs_per_thread = kg_gpu_limits_for_arch(d.arch, &known) == 0 ? known.max_regs_per_thread : 255;

  CU_CALL(cu.primary_ctx_retain(&cu.ctx, cu.dev), "cuDevicePrimaryCtxRetain");
  r = cu.ctx_set_current(cu.ctx);
  if (r != CU_SUCCESS) {
    cu.primary_ctx_release(cu.dev);
    cu.ctx = NULL;
    return fail(err, errlen, "cuCtxSetCurrent", r);
  }
  tl_current = 1;
  cu.info = d;
  cu.opened = 1;
  if (dev) *dev = d;
  return 0;
}

int kg_cudrv_open(kg_cudrv_device *dev, char *err, size_t errlen) {
  pthread_mutex_lock(&cu.lock);
  int rc = open_locked(dev, err, errlen);
  pthread_mutex_unlock(&cu.lock);
  return rc;
}

int kg_cudrv_setting_check(char *why, size_t whylen) {
  const char *env = getenv("KGEN_CUDA_LIB");
  if (!env || !env[0]) return 0;
  char e[512] = "";
  pthread_mutex_lock(&cu.lock);
  int rc = load_library(e, sizeof e);
  pthread_mutex_unlock(&cu.lock);
  if (rc != 0 && why && whylen) snprintf(why, whylen, "KGEN_CUDA_LIB=%.300s cannot be used: %s", env, e);
  return rc;
}

/* The child opens CUDA and writes its verdict to the pipe: "1" + device, or "0" + reason. Driver start-up can
 * take seconds on a large machine, but a wedged driver must not hang the caller: 60 s is the cap. */
int kg_cudrv_probe(char *why, size_t whylen) {
  int fd[2];
  if (pipe(fd) != 0) {
    if (why && whylen) snprintf(why, whylen, "CUDA probe: pipe: %s", strerror(errno));
    return 0;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    if (why && whylen) snprintf(why, whylen, "CUDA probe: fork: %s", strerror(errno));
    close(fd[0]);
    close(fd[1]);
    return 0;
  }
  if (pid == 0) {
    close(fd[0]);
    kg_cudrv_device d;
    char msg[600];
    msg[0] = '0';
    int ok = kg_cudrv_open(&d, msg + 1, sizeof msg - 1) == 0;
    if (ok) snprintf(msg, sizeof msg, "1%s (%s)", d.name, d.arch);
    size_t n = strlen(msg), off = 0;
    while (off < n) {
      ssize_t w = write(fd[1], msg + off, n - off);
      if (w <= 0) break;
      off += (size_t)w;
    }
    close(fd[1]);
    /* _exit: no atexit handlers or stdio flushes of the parent's buffers in the child. */
    _exit(ok ? 0 : 1);
  }
  close(fd[1]);
  char buf[600];
  size_t got = 0;
  int timed_out = 0;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long left_ms = 60000 - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
    if (left_ms <= 0) {
      timed_out = 1;
      break;
    }
    struct pollfd p = {.fd = fd[0], .events = POLLIN};
    int pr = poll(&p, 1, (int)left_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) {
      timed_out = pr == 0;
      break;
    }
    ssize_t r = read(fd[0], buf + got, sizeof buf - 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
    if (got == sizeof buf - 1) break;
  }
  buf[got] = 0;
  close(fd[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    if (why && whylen) snprintf(why, whylen, "CUDA probe: opening the device took over 60 s");
    return 0;
  }
  if (WIFSIGNALED(status)) {
    if (why && whylen)
      snprintf(why, whylen, "CUDA probe: the child died of signal %d (%s)", WTERMSIG(status),
               strsignal(WTERMSIG(status)));
    return 0;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && buf[0] == '1') {
    if (why && whylen) snprintf(why, whylen, "%s", buf + 1);
    return 1;
  }
  if (why && whylen) snprintf(why, whylen, "%s", got > 1 && buf[0] == '0' ? buf + 1 : "CUDA probe failed");
  return 0;
}

int kg_cudrv_alloc(kg_devptr *p, size_t bytes, char *err, size_t errlen) {
  *p = 0;
  if (ensure_current(err, errlen) != 0) return -1;
  cu_result r = cu.mem_alloc(p, bytes ? bytes : 4);
  if (r != CU_SUCCESS) {
    char call[64];
    snprintf(call, sizeof call, "cuMemAlloc(%zu bytes)", bytes);
    *p = 0;
    return fail(err, errlen, call, r);
  }
  return 0;
}

void kg_cudrv_free(kg_devptr p) {
  if (!p || !cu.opened || ensure_current(NULL, 0) != 0) return;
  cu.mem_free(p);
}

int kg_cudrv_htod(kg_devptr dst, const void *src, size_t bytes, char *err, size_t errlen) {
  if (ensure_current(err, errlen) != 0) return -1;
  CU_CALL(cu.memcpy_htod(dst, src, bytes), "cuMemcpyHtoD");
  return 0;
}

int kg_cudrv_dtoh(void *dst, kg_devptr src, size_t bytes, char *err, size_t errlen) {
  if (ensure_current(err, errlen) != 0) return -1;
  CU_CALL(cu.memcpy_dtoh(dst, src, bytes), "cuMemcpyDtoH");
  return 0;
}

int kg_cudrv_dtod(kg_devptr dst, kg_devptr src, size_t bytes, char *err, size_t errlen) {
  if (ensure_current(err, errlen) != 0) return -1;
  CU_CALL(cu.memcpy_dtod(dst, src, bytes), "cuMemcpyDtoD");
  return 0;
}

int kg_cudrv_memset32(kg_devptr dst, uint32_t value, size_t count, char *err, size_t errlen) {
  if (ensure_current(err, errlen) != 0) return -1;
  CU_CALL(cu.memset_d32(dst, value, count), "cuMemsetD32");
  return 0;
}

int kg_cudrv_sync(char *err, size_t errlen) {
  if (ensure_current(err, errlen) != 0) return -1;
  CU_CALL(cu.ctx_synchronize(), "cuCtxSynchronize");
  return 0;
}

void kg_cudrv_module_unload(kg_cudrv_module *m) {
  if (!m) return;
  if (m->module && cu.opened && ensure_current(NULL, 0) == 0) cu.module_unload(m->module);
  free(m->funcs);
  memset(m, 0, sizeof *m);
}

int kg_cudrv_module_load(kg_cudrv_module *m, const kg_cuda_program *p, const void *image, char *err,
                        size_t errlen) {
  memset(m, 0, sizeof *m);
  if (ensure_current(err, errlen) != 0) return -1;
  if (!image) return fail_msg(err, errlen, "kg_cudrv_module_load: no image");
  /* The JIT's error log says why a PTX image or a cubin for another arch does not load. */
  char jitlog[2048] = "";
  int opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[2] = {jitlog, (void *)(uintptr_t)sizeof jitlog};
  cu_module mod = NULL;
  cu_result r = cu.module_load_data_ex(&mod, image, 2, opts, vals);
  if (r != CU_SUCCESS) {
    fail(err, errlen, "cuModuleLoadDataEx", r);
    jitlog[sizeof jitlog - 1] = 0;
    size_t n = err ? strlen(err) : 0;
    if (jitlog[0] && err && n + 3 < errlen) snprintf(err + n, errlen - n, ": %s", jitlog);
    return -1;
  }
  m->module = mod;
  m->nfuncs = p->nkernels;
  m->funcs = calloc((size_t)(p->nkernels > 0 ? p->nkernels : 1), sizeof *m->funcs);
  if (!m->funcs) {
    kg_cudrv_module_unload(m);
    return fail_msg(err, errlen, "kg_cudrv_module_load: out of memory");
  }
  for (int i = 0; i < p->nkernels; i++) {
    const kg_cuda_kernel *k = &p->kernels[i];
    r = cu.module_get_function(&m->funcs[i], mod, k->name);
    if (r != CU_SUCCESS) {
      char call[128];
      snprintf(call, sizeof call, "cuModuleGetFunction(%.100s)", k->name);
      kg_cudrv_module_unload(m);
      return fail(err, errlen, call, r);
    }
    /* Dynamic shared memory past 48 KB needs the per-function opt-in; it is set once here rather than before
     * every launch so that timed launches carry no extra driver calls. */
    if (k->dynamic_shared > 0) {
      r = cu.func_set_attribute(m->funcs[i], CU_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)k->dynamic_shared);
      if (r != CU_SUCCESS) {
        char call[160];
        snprintf(call, sizeof call, "cuFuncSetAttribute(%.100s, MAX_DYNAMIC_SHARED_SIZE_BYTES=%lld)", k->name,
                 (long long)k->dynamic_shared);
        kg_cudrv_module_unload(m);
        return fail(err, errlen, call, r);
      }
    }
  }
  return 0;
}

int kg_cudrv_launch_program(const kg_cudrv_module *m, const kg_cuda_program *p, kg_devptr *args, char *err,
                           size_t errlen) {
  return kg_cudrv_launch_program_sizes(m, p, args, NULL, err, errlen);
}

#define KG_CUDA_STACK_KERNELS 16

int kg_cudrv_launch_program_sizes(const kg_cudrv_module *m, const kg_cuda_program *p, kg_devptr *args,
                                 const int64_t *sizes, char *err, size_t errlen) {
  if (ensure_current(err, errlen) != 0) return -1;
  if (!m->module || m->nfuncs != p->nkernels)
    return fail_msg(err, errlen, "kg_cudrv_launch_program: the module was not loaded from this program");
  /* the grids at these sizes (a static program's are its own): on the stack for the usual few kernels, so that
   * timed launches carry no allocation */
  int64_t stack_grid[KG_CUDA_STACK_KERNELS][3];
  int64_t(*grid)[3] = stack_grid;
  if (p->nsizes > 0) {
    if (p->nkernels > KG_CUDA_STACK_KERNELS) grid = malloc(sizeof *grid * (size_t)p->nkernels);
    if (!grid) return fail_msg(err, errlen, "kg_cudrv_launch_program: out of memory");
    if (kg_cuda_program_grid(p, sizes, grid, NULL, err, errlen) != 0) {
      if (grid != stack_grid) free(grid);
      return -1;
    }
  }
  int nargs = p->nsizes + p->nparams + p->ntemps;
  void *stack_params[64];
  void **params = nargs <= 64 ? stack_params : malloc(sizeof(void *) * (size_t)nargs);
  if (!params) {
    if (grid != stack_grid) free(grid);
    return fail_msg(err, errlen, "kg_cudrv_launch_program: out of memory");
  }
  /* cuLaunchKernel takes a pointer to each argument's value: the sizes (long long), then the buffers. */
  for (int i = 0; i < p->nsizes; i++) params[i] = (void *)&sizes[i];
  for (int i = 0; i < p->nparams + p->ntemps; i++) params[p->nsizes + i] = &args[i];
  int rc = 0;
  /* Every shape is checked before the first launch, so that a bad program launches nothing. A grid that follows
   * the sizes may be empty at some of them: that kernel has nothing to do and is skipped. */
  for (int i = 0; i < p->nkernels; i++) {
    const kg_cuda_kernel *k = &p->kernels[i];
    const int64_t *g = p->nsizes > 0 ? grid[i] : k->grid;
    int ok = 1;
    for (int d = 0; d < 3; d++)
      ok = ok && (g[d] >= 1 || (g[d] == 0 && p->grid_dyn && p->grid_dyn[i][d].n)) && g[d] <= 0xffffffffLL &&
           k->block[d] >= 1 &&
           k->block[d] <= 0xffffffffLL;
    if (!ok || k->dynamic_shared < 0 || k->dynamic_shared > 0xffffffffLL) {
      if (err && errlen)
        snprintf(err, errlen,
                 "kernel %s: launch shape out of range (grid %lld x %lld x %lld, block %lld x %lld x %lld)", k->name,
                 (long long)g[0], (long long)g[1], (long long)g[2], (long long)k->block[0], (long long)k->block[1],
                 (long long)k->block[2]);
      rc = -1;
      break;
    }
  }
  for (int i = 0; i < p->nkernels && rc == 0; i++) {
    const kg_cuda_kernel *k = &p->kernels[i];
    const int64_t *g = p->nsizes > 0 ? grid[i] : k->grid;
    if (g[0] == 0 || g[1] == 0 || g[2] == 0) continue;
    cu_result r = cu.launch_kernel(m->funcs[i], (unsigned)g[0], (unsigned)g[1], (unsigned)g[2],
                                   (unsigned)k->block[0], (unsigned)k->block[1], (unsigned)k->block[2],
                                   (unsigned)k->dynamic_shared, NULL, params, NULL);
    if (r != CU_SUCCESS) {
      char call[128];
      snprintf(call, sizeof call, "cuLaunchKernel(%.100s)", k->name);
      rc = fail(err, errlen, call, r);
    }
  }
  if (params != stack_params) free(params);
  if (grid != stack_grid) free(grid);
  return rc;
}

int kg_cudrv_timer_init(kg_cudrv_event_timer *t, char *err, size_t errlen) {
  t->start = t->stop = NULL;
  if (ensure_current(err, errlen) != 0) return -1;
  CU_CALL(cu.event_create(&t->start, 0), "cuEventCreate");
  cu_result r = cu.event_create(&t->stop, 0);
  if (r != CU_SUCCESS) {
    cu.event_destroy(t->start);
    t->start = NULL;
    return fail(err, errlen, "cuEventCreate", r);
  }
  return 0;
}

int kg_cudrv_timer_start(kg_cudrv_event_timer *t, char *err, size_t errlen) {
  if (ensure_current(err, errlen) != 0) return -1;
  CU_CALL(cu.event_record(t->start, NULL), "cuEventRecord");
  return 0;
}

int kg_cudrv_timer_stop(kg_cudrv_event_timer *t, double *seconds, char *err, size_t errlen) {
  *seconds = 0;
  if (ensure_current(err, errlen) != 0) return -1;
  CU_CALL(cu.event_record(t->stop, NULL), "cuEventRecord");
  CU_CALL(cu.event_synchronize(t->stop), "cuEventSynchronize");
  float ms = 0;
  CU_CALL(cu.event_elapsed_time(&ms, t->start, t->stop), "cuEventElapsedTime");
  *seconds = ms * 1e-3;
  return 0;
}

void kg_cudrv_timer_free(kg_cudrv_event_timer *t) {
  if (cu.opened && ensure_current(NULL, 0) == 0) {
    if (t->start) cu.event_destroy(t->start);
    if (t->stop) cu.event_destroy(t->stop);
  }
  t->start = t->stop = NULL;
}

int kg_cudrv_flush_l2(const kg_cudrv_device *dev, char *err, size_t errlen) {
  if (ensure_current(err, errlen) != 0) return -1;
  /* Twice the L2 so that no line of the previous run's data can survive (L2 is not strictly LRU). */
  size_t want = (size_t)(dev && dev->l2_bytes > 0 ? dev->l2_bytes : cu.info.l2_bytes) * 2;
  if (want < ((size_t)8 << 20)) want = (size_t)8 << 20;
  pthread_mutex_lock(&cu.lock);
  int rc = 0;
  if (cu.flush_bytes < want) {
    if (cu.flush_buf) cu.mem_free(cu.flush_buf);
    cu.flush_buf = 0;
    cu.flush_bytes = 0;
    cu_result r = cu.mem_alloc(&cu.flush_buf, want);
    if (r != CU_SUCCESS) {
      cu.flush_buf = 0;
      rc = fail(err, errlen, "cuMemAlloc(L2 flush buffer)", r);
    } else {
      cu.flush_bytes = want;
    }
  }
  if (rc == 0) {
    /* A new value each time, so the writes cannot be elided as redundant. */
    cu_result r = cu.memset_d32(cu.flush_buf, ++cu.flush_value, cu.flush_bytes / 4);
    if (r != CU_SUCCESS) rc = fail(err, errlen, "cuMemsetD32(L2 flush)", r);
  }
  pthread_mutex_unlock(&cu.lock);
  return rc;
}
