/* The CUDA part of an exported header (codegen/header.h): the images, the launch tables, a minimal driver-API
 * loader and the definitions of the public functions, between what header.c prints above and below.
 *
 * Layout of what this prints:
 *   declarations of the diagnostics (<fn>_variant, kg_cuda_strerror)
 *   #ifdef KG_IMPLEMENTATION
 *     the part every kgen CUDA header shares, guarded once per translation unit (KG_EXPORT_CUDA_IMPL): the
 *     descriptor types, the image choice, the driver loader (real path) or the emulator glue (KG_EMULATE)
 *     per binding and variant: the kernels' sources in a namespace (KG_EMULATE) or the cubins and the PTX, the
 *     kernel names, the launch table, the temporaries, the variant descriptors and the binding's state
 *     per binding: its function; the header's _load, _unload and the dispatcher (header.c)
 *   #endif
 *
 * Everything that differs per kernel is data (descriptors), and the code that loads and launches is written once
 * in the shared part: the real path and the emulated one choose the image by the same function.
 *
 * Dynamic sizes (spec->size_dynamic): a binding's function takes them after the stream, returns KG_ERR_SIZE for
 * one outside the binding's range before anything else, and passes them to the kernels (their leading arguments,
 * in the program's size order). The launch table then holds each grid extent and temporary at the sizes' hi, and
 * a variant's extent function (printed from kg_codegen_cuda's extent programs) gives those that follow the sizes
 * at the call's values; a kernel whose grid is empty at them is not launched.
 *
 * Requires: a spec for KG_TARGET_CUDA whose variants were printed by kg_codegen_cuda with the prefix
 * "<function name>_v<index>" (checked: the kernels' names carry it, so nothing collides across headers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "header.h"
#include "kernel_flags.h"

/* The shared part of the implementation. Written as C that is also C++ (g++, nvcc) and warning-free under
 * -Wall -Wextra in both. Driver entry points are declared here with their documented prototypes (private type
 * names, so that including cuda.h as well does not clash); none of them has a versioned (_v2) symbol. */
static const char shared_impl[] =
    "/* What every kgen CUDA header's implementation shares, once per translation unit. */\n"
    "#ifndef KG_EXPORT_CUDA_IMPL\n"
    "#define KG_EXPORT_CUDA_IMPL\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "#ifndef KG_EMULATE\n"
    "#include <dlfcn.h>\n"
    "#include <pthread.h>\n"
    "#endif\n"
    "#ifdef __cplusplus\n"
    "extern \"C\" {\n"
    "#endif\n"
    "/* cubins are ELF images: 16-byte aligned for the driver */\n"
    "#if defined(__GNUC__) || defined(__clang__)\n"
    "#define KG_CUDA_ALIGN16 __attribute__((aligned(16)))\n"
    "#elif defined(__cplusplus)\n"
    "#define KG_CUDA_ALIGN16 alignas(16)\n"
    "#else\n"
    "#define KG_CUDA_ALIGN16 _Alignas(16)\n"
    "#endif\n"
    "typedef int kg_cu_result; /* CUresult */\n"
    "typedef int kg_cu_device;\n"
    "typedef struct kg_cu_context_st *kg_cu_context;\n"
    "typedef struct kg_cu_module_st *kg_cu_module;\n"
    "typedef struct kg_cu_function_st *kg_cu_function;\n"
    "typedef unsigned long long kg_cu_deviceptr;\n"
    "\n"
    "/* One kernel program (one schedule) of a binding. Every kernel takes the same arguments: the dynamic sizes\n"
    " * (long long), the parameters, then the temporaries. Archs are compute capabilities, major * 10 + minor. */\n"
    "typedef struct kg_cuda_variant {\n"
    "  int nkernels, nparams, ntemps, ncubins;\n"
    "  int ptx_arch;                        /* 0: no PTX */\n"
    "  const char *const *kernel;           /* names */\n"
    "  const unsigned (*launch)[7];         /* per kernel: grid x, y, z, block x, y, z, dynamic shared bytes */\n"
    "  const unsigned long long *temp_elems; /* floats of each temporary */\n"
    "  const int *cubin_arch;\n"
    "  const unsigned char *const *cubin;   /* real path only */\n"
    "  const char *ptx;                     /* real path only */\n"
    "  void (*const *emu)(float **);        /* KG_EMULATE only: the emulator's entry of each kernel */\n"
    "  int nsizes;                          /* dynamic sizes the kernels take first */\n"
    "  /* With dynamic sizes: stores in *v the extent `which` (3 * k + d: grid dimension d of kernel k; 3 * nkernels\n"
    "   * + t: the floats of temporary t) at the sizes and returns 1, or returns 0 when it is the table's. */\n"
    "  int (*extent)(const long long *sizes, int which, long long *v);\n"
    "} kg_cuda_variant;\n"
    "\n"
    "/* A size binding: its variants and, on the real path, what was loaded (module and functions belong to the\n"
    " * context that was current at the load). */\n"
    "typedef struct kg_cuda_binding {\n"
    "  const char *name;\n"
    "  const kg_cuda_variant *variants;\n"
    "  int nvariants;\n"
    "  int emulate_arch; /* KG_EMULATE without KG_EMULATE_SM: the arch of the binding's first cubin */\n"
    "  int loaded;       /* read without the lock: set last, with release order */\n"
    "  int variant;\n"
    "  kg_cu_module module;\n"
    "  kg_cu_function *fn;\n"
    "} kg_cuda_binding;\n"
    "\n"
    "/* The image for a device of compute capability arch: the variant with a cubin of exactly that arch (*cubin\n"
    " * its index), else the variant whose PTX has the highest arch not above it (*cubin -1: the driver JITs it).\n"
    " * -1 when there is neither. */\n"
    "static int kg_cuda_choose(const kg_cuda_binding *b, int arch, int *cubin) {\n"
    "  int best = -1;\n"
    "  for (int v = 0; v < b->nvariants; v++)\n"
    "    for (int c = 0; c < b->variants[v].ncubins; c++)\n"
    "      if (b->variants[v].cubin_arch[c] == arch) {\n"
    "        *cubin = c;\n"
    "        return v;\n"
    "      }\n"
    "  for (int v = 0; v < b->nvariants; v++) {\n"
    "    int p = b->variants[v].ptx_arch;\n"
    "    if (p > 0 && p <= arch && (best < 0 || p > b->variants[best].ptx_arch)) best = v;\n"
    "  }\n"
    "  *cubin = -1;\n"
    "  return best;\n"
    "}\n"
    "\n"
    "/* Integer helpers of the extents that follow dynamic sizes (floor division and modulo, as kgen's IR). */\n"
    "static inline long long kg_cuda_xfloordiv(long long a, long long b) {\n"
    "  long long q = a / b;\n"
    "  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;\n"
    "}\n"
    "static inline long long kg_cuda_xfloormod(long long a, long long b) { return a - kg_cuda_xfloordiv(a, b) * b; }\n"
    "static inline long long kg_cuda_xmin(long long a, long long b) { return a < b ? a : b; }\n"
    "static inline long long kg_cuda_xmax(long long a, long long b) { return a > b ? a : b; }\n"
    "\n"
    "/* The launch of va at the sizes: fills grid[3] of kernel k (0 along a dimension: nothing to launch); -1 when a\n"
    " * grid extent is past the device's limits. */\n"
    "static int kg_cuda_grid(const kg_cuda_variant *va, const long long *sizes, int k, unsigned grid[3]) {\n"
    "  static const long long lim[3] = {2147483647LL, 65535LL, 65535LL};\n"
    "  for (int d = 0; d < 3; d++) {\n"
    "    long long v = va->launch[k][d];\n"
    "    if (va->extent && !va->extent(sizes, 3 * k + d, &v)) v = va->launch[k][d];\n"
    "    if (v < 0 || v > lim[d]) return -1;\n"
    "    grid[d] = (unsigned)v;\n"
    "  }\n"
    "  return 0;\n"
    "}\n"
    "\n"
    "/* The floats of temporary t of va at the sizes (at least 1). */\n"
    "static size_t kg_cuda_temp_floats(const kg_cuda_variant *va, const long long *sizes, int t) {\n"
    "  long long v = (long long)va->temp_elems[t];\n"
    "  if (va->extent && !va->extent(sizes, 3 * va->nkernels + t, &v)) v = (long long)va->temp_elems[t];\n"
    "  return v > 0 ? (size_t)v : 1;\n"
    "}\n"
    "\n"
    "#ifdef KG_EMULATE\n"
    "#define KG_CUDA_LAUNCH_FAILED 719 /* CUDA_ERROR_LAUNCH_FAILED */\n"
    "static int kg_cuda_emulated_variant(const kg_cuda_binding *b) {\n"
    "  int cubin;\n"
    "#ifdef KG_EMULATE_SM\n"
    "  return kg_cuda_choose(b, KG_EMULATE_SM, &cubin);\n"
    "#else\n"
    "  return kg_cuda_choose(b, b->emulate_arch, &cubin);\n"
    "#endif\n"
    "}\n"
    "\n"
    "/* Runs the chosen variant's kernels on kgen's CUDA emulator (host pointers; temporaries start as NaN). params\n"
    " * holds the sizes' then the parameters' addresses; the emulator's entries read the sizes after the buffers. */\n"
    "static int kg_cuda_call(kg_cuda_binding *b, CUstream stream, const long long *sizes, void **params,\n"
    "                        kg_cu_deviceptr *temps) {\n"
    "  (void)stream;\n"
    "  (void)temps;\n"
    "  int v = kg_cuda_emulated_variant(b);\n"
    "  if (v < 0) return KG_ERR_NO_IMAGE;\n"
    "  const kg_cuda_variant *va = &b->variants[v];\n"
    "  float **args = (float **)calloc((size_t)(va->nparams + va->ntemps + 1), sizeof(float *));\n"
    "  if (!args) return KG_ERR_OUT_OF_MEMORY;\n"
    "  int rc = KG_OK;\n"
    "  for (int i = 0; i < va->nparams; i++) memcpy(&args[i], params[va->nsizes + i], sizeof(float *));\n"
    "  for (int t = 0; t < va->ntemps && rc == KG_OK; t++) {\n"
    "    size_t n = kg_cuda_temp_floats(va, sizes, t);\n"
    "    float *p = (float *)malloc(n * sizeof(float));\n"
    "    if (!p) rc = KG_ERR_OUT_OF_MEMORY;\n"
    "    for (size_t e = 0; p && e < n; e++) p[e] = __builtin_nanf(\"\");\n"
    "    args[va->nparams + t] = p;\n"
    "  }\n"
    "  args[va->nparams + va->ntemps] = (float *)(uintptr_t)sizes;\n"
    "  for (int k = 0; k < va->nkernels && rc == KG_OK; k++) {\n"
    "    const unsigned *l = va->launch[k];\n"
    "    unsigned g[3];\n"
    "    if (kg_cuda_grid(va, sizes, k, g) != 0) {\n"
    "      rc = KG_ERR_SIZE;\n"
    "      break;\n"
    "    }\n"
    "    if (!g[0] || !g[1] || !g[2]) continue;\n"
    "    const int64_t grid[3] = {g[0], g[1], g[2]}, block[3] = {l[3], l[4], l[5]};\n"
    "    char err[1024];\n"
    "    if (kg_emu_launch(va->emu[k], args, grid, block, l[6], err, sizeof err) != 0) {\n"
    "      fprintf(stderr, \"%s: kernel %s: %s\\n\", b->name, va->kernel[k], err);\n"
    "      rc = KG_CUDA_LAUNCH_FAILED;\n"
    "    }\n"
    "  }\n"
    "  for (int t = 0; t < va->ntemps; t++) free(args[va->nparams + t]);\n"
    "  free(args);\n"
    "  return rc;\n"
    "}\n"
    "\n"
    "static int kg_cuda_load(kg_cuda_binding *b) { return kg_cuda_emulated_variant(b) < 0 ? KG_ERR_NO_IMAGE : KG_OK; }\n"
    "static void kg_cuda_unload(kg_cuda_binding *b) { (void)b; }\n"
    "static int kg_cuda_variant_of(kg_cuda_binding *b) { return kg_cuda_emulated_variant(b); }\n"
    "const char *kg_cuda_strerror(int code) {\n"
    "  return code == KG_CUDA_LAUNCH_FAILED ? \"the emulator stopped a kernel (see stderr)\" : kg_strerror(code);\n"
    "}\n"
    "#else\n"
    "#ifndef KG_CUDA_LIBRARY\n"
    "#define KG_CUDA_LIBRARY \"libcuda.so.1\"\n"
    "#endif\n"
    "/* The driver, opened on the first call. The lock guards opening, the primary context and (un)loading. */\n"
    "static pthread_mutex_t kg_cu_lock = PTHREAD_MUTEX_INITIALIZER;\n"
    "static struct kg_cu_driver {\n"
    "  int opened;  /* read without the lock: set last, with release order */\n"
    "  int open_rc; /* KG_OK, KG_ERR_NO_DRIVER or the CUresult of cuInit */\n"
    "  kg_cu_context primary; /* device 0's primary context, retained when a call found no context current */\n"
    "  kg_cu_result (*init)(unsigned);\n"
    "  kg_cu_result (*ctx_get_current)(kg_cu_context *);\n"
    "  kg_cu_result (*ctx_set_current)(kg_cu_context);\n"
    "  kg_cu_result (*ctx_get_device)(kg_cu_device *);\n"
    "  kg_cu_result (*device_get)(kg_cu_device *, int);\n"
    "  kg_cu_result (*device_get_attribute)(int *, int, kg_cu_device);\n"
    "  kg_cu_result (*primary_ctx_retain)(kg_cu_context *, kg_cu_device);\n"
    "  kg_cu_result (*module_load_data)(kg_cu_module *, const void *);\n"
    "  kg_cu_result (*module_get_function)(kg_cu_function *, kg_cu_module, const char *);\n"
    "  kg_cu_result (*module_unload)(kg_cu_module);\n"
    "  kg_cu_result (*func_set_attribute)(kg_cu_function, int, int);\n"
    "  kg_cu_result (*launch_kernel)(kg_cu_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,\n"
    "                                unsigned, CUstream, void **, void **);\n"
    "  kg_cu_result (*mem_alloc_async)(kg_cu_deviceptr *, size_t, CUstream);\n"
    "  kg_cu_result (*mem_free_async)(kg_cu_deviceptr, CUstream);\n"
    "  kg_cu_result (*get_error_string)(kg_cu_result, const char **); /* optional */\n"
    "} kg_cu;\n"
    "\n"
    "static int kg_cu_open_locked(void) {\n"
    "  void *lib = dlopen(KG_CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL);\n"
    "  if (!lib) return KG_ERR_NO_DRIVER;\n"
    "  struct { const char *name; void *slot; int optional; } sym[] = {\n"
    "      {\"cuInit\", (void *)&kg_cu.init, 0},\n"
    "      {\"cuCtxGetCurrent\", (void *)&kg_cu.ctx_get_current, 0},\n"
    "      {\"cuCtxSetCurrent\", (void *)&kg_cu.ctx_set_current, 0},\n"
    "      {\"cuCtxGetDevice\", (void *)&kg_cu.ctx_get_device, 0},\n"
    "      {\"cuDeviceGet\", (void *)&kg_cu.device_get, 0},\n"
    "      {\"cuDeviceGetAttribute\", (void *)&kg_cu.device_get_attribute, 0},\n"
    "      {\"cuDevicePrimaryCtxRetain\", (void *)&kg_cu.primary_ctx_retain, 0},\n"
    "      {\"cuModuleLoadData\", (void *)&kg_cu.module_load_data, 0},\n"
    "      {\"cuModuleGetFunction\", (void *)&kg_cu.module_get_function, 0},\n"
    "      {\"cuModuleUnload\", (void *)&kg_cu.module_unload, 0},\n"
    "      {\"cuFuncSetAttribute\", (void *)&kg_cu.func_set_attribute, 0},\n"
    "      {\"cuLaunchKernel\", (void *)&kg_cu.launch_kernel, 0},\n"
    "      {\"cuMemAllocAsync\", (void *)&kg_cu.mem_alloc_async, 0},\n"
    "      {\"cuMemFreeAsync\", (void *)&kg_cu.mem_free_async, 0},\n"
    "      {\"cuGetErrorString\", (void *)&kg_cu.get_error_string, 1},\n"
    "  };\n"
    "  for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++) {\n"
    "    void *f = dlsym(lib, sym[i].name);\n"
    "    if (!f && !sym[i].optional) { /* a driver too old for this header */\n"
    "      dlclose(lib);\n"
    "      return KG_ERR_NO_DRIVER;\n"
    "    }\n"
    "    memcpy(sym[i].slot, &f, sizeof f); /* an object pointer to a function pointer, portably */\n"
    "  }\n"
    "  kg_cu_result r = kg_cu.init(0);\n"
    "  /* CUDA_ERROR_NO_DEVICE, and CUDA_ERROR_STUB_LIBRARY: the toolkit's stub, not a driver */\n"
    "  if (r == 100 || r == 34) return KG_ERR_NO_DRIVER;\n"
    "  return r; /* the library stays open whatever cuInit said: the driver may have started threads */\n"
    "}\n"
    "\n"
    "/* The driver open and a context current on the calling thread: the caller's, else device 0's primary one. */\n"
    "static int kg_cu_ready(void) {\n"
    "  if (!__atomic_load_n(&kg_cu.opened, __ATOMIC_ACQUIRE)) {\n"
    "    pthread_mutex_lock(&kg_cu_lock);\n"
    "    if (!kg_cu.opened) {\n"
    "      kg_cu.open_rc = kg_cu_open_locked();\n"
    "      __atomic_store_n(&kg_cu.opened, 1, __ATOMIC_RELEASE);\n"
    "    }\n"
    "    pthread_mutex_unlock(&kg_cu_lock);\n"
    "  }\n"
    "  if (kg_cu.open_rc != KG_OK) return kg_cu.open_rc;\n"
    "  kg_cu_context ctx = NULL;\n"
    "  kg_cu_result r = kg_cu.ctx_get_current(&ctx);\n"
    "  if (r != 0 || ctx) return r;\n"
    "  pthread_mutex_lock(&kg_cu_lock);\n"
    "  if (!kg_cu.primary) {\n"
    "    kg_cu_device dev = 0;\n"
    "    r = kg_cu.device_get(&dev, 0);\n"
    "    if (r == 0) r = kg_cu.primary_ctx_retain(&kg_cu.primary, dev);\n"
    "  }\n"
    "  ctx = kg_cu.primary;\n"
    "  pthread_mutex_unlock(&kg_cu_lock);\n"
    "  return r != 0 ? r : kg_cu.ctx_set_current(ctx);\n"
    "}\n"
    "\n"
    "/* Loads b's image for the current context's device. Requires kg_cu_ready() and the lock. */\n"
    "static int kg_cuda_load_locked(kg_cuda_binding *b) {\n"
    "  if (b->loaded) return KG_OK;\n"
    "  kg_cu_device dev = 0;\n"
    "  int major = 0, minor = 0, cubin = -1;\n"
    "  kg_cu_result r = kg_cu.ctx_get_device(&dev);\n"
    "  if (r == 0) r = kg_cu.device_get_attribute(&major, 75, dev); /* COMPUTE_CAPABILITY_MAJOR */\n"
    "  if (r == 0) r = kg_cu.device_get_attribute(&minor, 76, dev); /* COMPUTE_CAPABILITY_MINOR */\n"
    "  if (r != 0) return r;\n"
    "  int v = kg_cuda_choose(b, major * 10 + minor, &cubin);\n"
    "  if (v < 0) return KG_ERR_NO_IMAGE;\n"
    "  const kg_cuda_variant *va = &b->variants[v];\n"
    "  kg_cu_module mod = NULL;\n"
    "  r = kg_cu.module_load_data(&mod, cubin >= 0 ? (const void *)va->cubin[cubin] : (const void *)va->ptx);\n"
    "  for (int k = 0; k < va->nkernels && r == 0; k++) {\n"
    "    r = kg_cu.module_get_function(&b->fn[k], mod, va->kernel[k]);\n"
    "    /* dynamic shared memory past 48 KB needs the kernel's opt-in (MAX_DYNAMIC_SHARED_SIZE_BYTES) */\n"
    "    if (r == 0 && va->launch[k][6] > 0) r = kg_cu.func_set_attribute(b->fn[k], 8, (int)va->launch[k][6]);\n"
    "  }\n"
    "  if (r != 0) {\n"
    "    if (mod) kg_cu.module_unload(mod);\n"
    "    return r;\n"
    "  }\n"
    "  b->module = mod;\n"
    "  b->variant = v;\n"
    "  __atomic_store_n(&b->loaded, 1, __ATOMIC_RELEASE);\n"
    "  return KG_OK;\n"
    "}\n"
    "\n"
    "static int kg_cuda_load(kg_cuda_binding *b) {\n"
    "  int rc = kg_cu_ready();\n"
    "  if (rc != KG_OK || __atomic_load_n(&b->loaded, __ATOMIC_ACQUIRE)) return rc;\n"
    "  pthread_mutex_lock(&kg_cu_lock);\n"
    "  rc = kg_cuda_load_locked(b);\n"
    "  pthread_mutex_unlock(&kg_cu_lock);\n"
    "  return rc;\n"
    "}\n"
    "\n"
    "/* Not while another thread launches b's kernels. */\n"
    "static void kg_cuda_unload(kg_cuda_binding *b) {\n"
    "  pthread_mutex_lock(&kg_cu_lock);\n"
    "  if (b->loaded) {\n"
    "    kg_cu.module_unload(b->module);\n"
    "    b->module = NULL;\n"
    "    b->variant = -1;\n"
    "    __atomic_store_n(&b->loaded, 0, __ATOMIC_RELEASE);\n"
    "  }\n"
    "  pthread_mutex_unlock(&kg_cu_lock);\n"
    "}\n"
    "\n"
    "static int kg_cuda_variant_of(kg_cuda_binding *b) { return kg_cuda_load(b) == KG_OK ? b->variant : -1; }\n"
    "\n"
    "/* The loaded variant's kernels in order on stream, the temporaries in stream-ordered memory around them.\n"
    " * params holds the addresses of the nsizes sizes (at sizes) and of the nparams parameters, and room for\n"
    " * ntemps more; temps room for ntemps. */\n"
    "static int kg_cuda_call(kg_cuda_binding *b, CUstream stream, const long long *sizes, void **params,\n"
    "                        kg_cu_deviceptr *temps) {\n"
    "  int rc = kg_cuda_load(b);\n"
    "  if (rc != KG_OK) return rc;\n"
    "  const kg_cuda_variant *va = &b->variants[b->variant];\n"
    "  unsigned g[3];\n"
    "  for (int k = 0; k < va->nkernels; k++) /* every grid first, so that a refused call launches nothing */\n"
    "    if (kg_cuda_grid(va, sizes, k, g) != 0) return KG_ERR_SIZE;\n"
    "  kg_cu_result r = 0;\n"
    "  int nt = 0;\n"
    "  for (; nt < va->ntemps; nt++) {\n"
    "    r = kg_cu.mem_alloc_async(&temps[nt], kg_cuda_temp_floats(va, sizes, nt) * sizeof(float), stream);\n"
    "    if (r != 0) break;\n"
    "    params[va->nsizes + va->nparams + nt] = &temps[nt];\n"
    "  }\n"
    "  if (r == 2) rc = KG_ERR_OUT_OF_MEMORY; /* CUDA_ERROR_OUT_OF_MEMORY */\n"
    "  else rc = r;\n"
    "  for (int k = 0; k < va->nkernels && rc == KG_OK; k++) {\n"
    "    const unsigned *l = va->launch[k];\n"
    "    kg_cuda_grid(va, sizes, k, g);\n"
    "    if (!g[0] || !g[1] || !g[2]) continue; /* nothing to do at these sizes */\n"
    "    rc = kg_cu.launch_kernel(b->fn[k], g[0], g[1], g[2], l[3], l[4], l[5], l[6], stream, params, NULL);\n"
    "  }\n"
    "  for (int t = 0; t < nt; t++) {\n"
    "    r = kg_cu.mem_free_async(temps[t], stream);\n"
    "    if (rc == KG_OK) rc = r;\n"
    "  }\n"
    "  return rc;\n"
    "}\n"
    "\n"
    "const char *kg_cuda_strerror(int code) {\n"
    "  const char *s = NULL;\n"
    "  if (code > 0 && __atomic_load_n(&kg_cu.opened, __ATOMIC_ACQUIRE) && kg_cu.open_rc == KG_OK &&\n"
    "      kg_cu.get_error_string && kg_cu.get_error_string(code, &s) == 0 && s)\n"
    "    return s;\n"
    "  return kg_strerror(code);\n"
    "}\n"
    "#endif /* KG_EMULATE */\n"
    "\n"
    "static int kg_cuda_load_all(kg_cuda_binding *const *b, int n) {\n"
    "  for (int i = 0; i < n; i++) {\n"
    "    int rc = kg_cuda_load(b[i]);\n"
    "    if (rc != KG_OK) return rc;\n"
    "  }\n"
    "  return KG_OK;\n"
    "}\n"
    "\n"
    "static void kg_cuda_unload_all(kg_cuda_binding *const *b, int n) {\n"
    "  for (int i = 0; i < n; i++) kg_cuda_unload(b[i]);\n"
    "}\n"
    "#ifdef __cplusplus\n"
    "}\n"
    "#endif\n"
    "#endif /* KG_EXPORT_CUDA_IMPL */\n\n";

/* "sm_86", "sm_90a", "compute_90" -> 86, 90, 90; -1 when it is none of these. */
static int arch_number(const char *arch) {
  if (!arch) return -1;
  const char *p = !strncmp(arch, "sm_", 3) ? arch + 3 : !strncmp(arch, "compute_", 8) ? arch + 8 : NULL;
  if (!p || *p < '1' || *p > '9') return -1;
  int n = 0;
  for (; *p >= '0' && *p <= '9' && n < 10000; p++) n = n * 10 + (*p - '0');
  return (!*p || (p[0] >= 'a' && p[0] <= 'z' && !p[1])) && n < 10000 ? n : -1;
}

/* Why variant v of binding fn (the function's name) cannot be printed, or NULL when it can. */
static const char *variant_problem(const kg_header_spec *s, const char *fn, int v, const kg_header_variant *va) {
  const kg_cuda_program *p = va->prog;
  if (!p || p->nkernels < 1) return "no kernel";
  if (p->nparams != s->nparams) return "its kernels take another number of parameters than the signature";
  if (va->ncubins < 0 || (va->ncubins == 0 && !va->ptx)) return "neither a cubin nor PTX";
  if (va->ptx && arch_number(va->ptx_arch) < 0) return "the PTX's arch is not sm_NN";
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s_v%d_k", fn, v);
  for (int k = 0; k < p->nkernels; k++) {
    const kg_cuda_kernel *kn = &p->kernels[k];
    if (strncmp(kn->name, prefix, strlen(prefix)) != 0)
      return "a kernel is not named <function>_v<variant>_k<N> (print the program with that prefix)";
    for (int d = 0; d < 3; d++)
      if (kn->grid[d] < 1 || kn->grid[d] > 0xffffffffLL || kn->block[d] < 1 || kn->block[d] > 0xffffffffLL)
        return "a launch shape out of range";
    if (kn->dynamic_shared < 0 || kn->dynamic_shared > 0x7fffffffLL) return "dynamic shared memory out of range";
  }
  for (int c = 0; c < va->ncubins; c++) {
    if (arch_number(va->cubins[c].arch) < 0 || !va->cubins[c].data || va->cubins[c].size == 0)
      return "a cubin without data or with an arch that is not sm_NN";
    for (int d = 0; d < c; d++)
      if (!strcmp(va->cubins[c].arch, va->cubins[d].arch)) return "two cubins for one arch";
  }
  return NULL;
}

/* The values binding i serves of size k (a dynamic one): its range, else its first variant's. */
static void spec_range(const kg_header_spec *s, int i, int k, int64_t *lo, int64_t *hi) {
  const kg_header_binding *bd = &s->bindings[i];
  const kg_cuda_program *p = bd->variants[0].prog;
  *lo = *hi = bd->size_values[k];
  if (bd->range_lo) {
    *lo = bd->range_lo[k];
    *hi = bd->range_hi[k];
    return;
  }
  for (int j = 0; j < p->nsizes; j++)
    if (!strcmp(p->size_names[j], s->size_names[k])) *lo = p->size_lo[j], *hi = p->size_hi[j];
}

/* Why variant va's dynamic sizes do not fit binding i of s (the spec's dynamic sizes, by name, each range inside
 * the program's), or NULL. */
static const char *dynamic_problem(const kg_header_spec *s, int i, const kg_cuda_program *p) {
  int nd = 0;
  for (int k = 0; k < s->nsizes; k++) nd += s->size_dynamic && s->size_dynamic[k];
  if (p->nsizes != nd) return "its kernels take another number of dynamic sizes than the header's functions";
  for (int j = 0; j < p->nsizes; j++) {
    int k = 0;
    while (k < s->nsizes && (!s->size_dynamic[k] || strcmp(s->size_names[k], p->size_names[j]))) k++;
    if (k == s->nsizes) return "its kernels take a dynamic size the header's functions do not";
    if (!strncmp(p->size_names[j], "kg_", 3)) return "a dynamic size named like the header's own names (kg_...)";
    int64_t lo, hi;
    spec_range(s, i, k, &lo, &hi);
    if (lo < p->size_lo[j] || hi > p->size_hi[j]) return "the binding's range of a dynamic size is not inside its kernels'";
  }
  return NULL;
}

/* What the spec must hold for the printed header to be right; 0, or -1 with the reason. */
static int check_spec(const kg_header_spec *s, char *err, size_t errlen) {
  /* the functions' parameters must not hide the header's own names (kg_params, kg_cuda_call, ...) */
  for (int k = 0; k < s->nparams; k++)
    if (!strncmp(s->param_names[k], "kg_", 3)) {
      snprintf(err, errlen, "export: %s: parameter name '%s': names starting with kg_ are the CUDA header's", s->name,
               s->param_names[k]);
      return -1;
    }
  for (int i = 0; i < s->nbindings; i++) {
    const kg_header_binding *bd = &s->bindings[i];
    char *fn = kg_header_fn_name(s, i);
    int rc = 0;
    if (bd->nvariants < 1) {
      snprintf(err, errlen, "export: %s: no kernel program", fn);
      rc = -1;
    }
    for (int v = 0; v < bd->nvariants && rc == 0; v++) {
      const char *why = variant_problem(s, fn, v, &bd->variants[v]);
      if (!why) why = dynamic_problem(s, i, bd->variants[v].prog);
      if (why) {
        snprintf(err, errlen, "export: %s: variant %d: %s", fn, v, why);
        rc = -1;
      }
    }
    free(fn);
    if (rc != 0) return -1;
  }
  return 0;
}

/* Bytes as decimal initializers, 24 a line (cubins run to megabytes: no printf per byte). */
static void put_bytes(kg_strbuf *b, const unsigned char *p, size_t n) {
  char line[24 * 4 + 8];
  for (size_t i = 0; i < n; i += 24) {
    size_t len = 5;
    memcpy(line, "\n    ", 5);
    for (size_t k = i; k < n && k < i + 24; k++) {
      unsigned v = p[k];
      if (v >= 100) line[len++] = (char)('0' + v / 100);
      if (v >= 10) line[len++] = (char)('0' + v / 10 % 10);
      line[len++] = (char)('0' + v % 10);
      line[len++] = ',';
    }
    kg_strbuf_putn(b, line, len);
  }
}

/* The emulator's copy of a variant: its source in a namespace of its own, where its prelude (kg_idx, whose
 * width differs across programs) is defined again. CUDA's `#pragma unroll` becomes a comment: g++ warns about
 * a pragma it does not know (-Wunknown-pragmas, part of -Wall), and before GCC 13 no diagnostic pragma silences
 * that warning in C++. Lines stay lines, so the emulator's messages name the header's own line numbers. */
static void put_variant_source(kg_strbuf *b, const char *fn, int v, const kg_cuda_program *p) {
  kg_strbuf_printf(b, "#undef KG_CUDA_PRELUDE\nnamespace %s_v%d_src {\n", fn, v);
  for (const char *line = p->source; *line;) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    const char *text = line + strspn(line, " \t");
    if (!strncmp(text, "#pragma unroll", 14)) {
      kg_strbuf_putn(b, line, (size_t)(text - line));
      kg_strbuf_puts(b, "// ");
      kg_strbuf_putn(b, text, len - (size_t)(text - line));
    } else {
      kg_strbuf_putn(b, line, len);
    }
    kg_strbuf_putc(b, '\n');
    line += len + (nl ? 1 : 0);
  }
  kg_strbuf_printf(b, "} /* namespace %s_v%d_src */\n", fn, v);
  kg_strbuf_printf(b, "static void (*const %s_v%d_emu[])(float **) = {", fn, v);
  for (int k = 0; k < p->nkernels; k++)
    kg_strbuf_printf(b, "%s%s_v%d_src::%s__emu", k ? ", " : "", fn, v, p->kernels[k].name);
  kg_strbuf_puts(b, "};\n");
}

/* The images of a variant for the driver: each cubin as bytes, the PTX as the bytes of its text. */
static void put_variant_images(kg_strbuf *b, const char *fn, int v, const kg_header_variant *va) {
  for (int c = 0; c < va->ncubins; c++) {
    kg_strbuf_printf(b, "KG_CUDA_ALIGN16 static const unsigned char %s_v%d_cubin_%s[] = {", fn, v, va->cubins[c].arch);
    put_bytes(b, (const unsigned char *)va->cubins[c].data, va->cubins[c].size);
    kg_strbuf_puts(b, "\n};\n");
  }
  kg_strbuf_printf(b, "static const unsigned char *const %s_v%d_cubin[] = {", fn, v);
  for (int c = 0; c < va->ncubins; c++) kg_strbuf_printf(b, "%s%s_v%d_cubin_%s", c ? ", " : "", fn, v, va->cubins[c].arch);
  kg_strbuf_puts(b, va->ncubins ? "};\n" : "NULL};\n");
  if (va->ptx) {
    /* bytes, not a string literal: PTX runs past the 4095 characters that ISO C guarantees for a literal, which
     * -pedantic reports (-Woverlength-strings) however the literal is split, since adjacent ones make one */
    kg_strbuf_printf(b, "/* the PTX text for %s, NUL-terminated */\nstatic const unsigned char %s_v%d_ptx[] = {",
                     va->ptx_arch ? va->ptx_arch : "?", fn, v);
    put_bytes(b, (const unsigned char *)va->ptx, strlen(va->ptx) + 1);
    kg_strbuf_puts(b, "\n};\n");
  }
}

/* A variant with dynamic sizes: the function that computes its grid extents and temporaries that follow them (see
 * kg_cuda_variant.extent), from the programs kg_codegen_cuda made (kg_cuda_extent_print). */
static void put_variant_extent(kg_strbuf *b, const char *fn, int v, const kg_cuda_program *p) {
  kg_strbuf_printf(b, "static int %s_v%d_extent(const long long *kg_s, int kg_which, long long *kg_v) {\n", fn, v);
  for (int i = 0; i < p->nsizes; i++)
    kg_strbuf_printf(b, "  const long long %s = kg_s[%d];\n  (void)%s;\n", p->size_names[i], i, p->size_names[i]);
  kg_strbuf_puts(b, "  switch (kg_which) {\n");
  const char *const *names = (const char *const *)p->size_names;
  for (int k = 0; p->grid_dyn && k < p->nkernels; k++)
    for (int d = 0; d < 3; d++)
      if (p->grid_dyn[k][d].n) {
        kg_strbuf_printf(b, "    case %d: /* kernel %d, grid %c */\n      *kg_v = ", 3 * k + d, k, "xyz"[d]);
        kg_cuda_extent_print(b, &p->grid_dyn[k][d], names);
        kg_strbuf_puts(b, ";\n      return 1;\n");
      }
  for (int t = 0; p->temp_dyn && t < p->ntemps; t++)
    if (p->temp_dyn[t].n) {
      kg_strbuf_printf(b, "    case %d: /* temporary %d */\n      *kg_v = ", 3 * p->nkernels + t, t);
      kg_cuda_extent_print(b, &p->temp_dyn[t], names);
      kg_strbuf_puts(b, ";\n      return 1;\n");
    }
  kg_strbuf_puts(b, "    default:\n      (void)kg_v;\n      return 0;\n  }\n}\n");
}

/* The variant's tables both paths use: kernel names, launch shapes, temporaries, cubin archs. */
static void put_variant_tables(kg_strbuf *b, const char *fn, int v, const kg_header_variant *va) {
  const kg_cuda_program *p = va->prog;
  kg_strbuf_printf(b, "static const char *const %s_v%d_kernel[] = {", fn, v);
  for (int k = 0; k < p->nkernels; k++) kg_strbuf_printf(b, "%s\"%s\"", k ? ", " : "", p->kernels[k].name);
  kg_strbuf_printf(b, "};\n/* grid x, y, z, block x, y, z, dynamic shared bytes */\nstatic const unsigned %s_v%d_launch[][7] = {",
                   fn, v);
  for (int k = 0; k < p->nkernels; k++) {
    const kg_cuda_kernel *kn = &p->kernels[k];
    kg_strbuf_printf(b, "%s{%lldu, %lldu, %lldu, %lldu, %lldu, %lldu, %lldu}", k ? ", " : "", (long long)kn->grid[0],
                     (long long)kn->grid[1], (long long)kn->grid[2], (long long)kn->block[0], (long long)kn->block[1],
                     (long long)kn->block[2], (long long)kn->dynamic_shared);
  }
  kg_strbuf_printf(b, "};\nstatic const unsigned long long %s_v%d_temp_elems[] = {", fn, v);
  for (int t = 0; t < p->ntemps; t++) kg_strbuf_printf(b, "%s%lldull", t ? ", " : "", (long long)p->temp_elems[t]);
  kg_strbuf_puts(b, p->ntemps ? "};\n" : "0ull}; /* none */\n");
  kg_strbuf_printf(b, "static const int %s_v%d_cubin_arch[] = {", fn, v);
  for (int c = 0; c < va->ncubins; c++) kg_strbuf_printf(b, "%s%d", c ? ", " : "", arch_number(va->cubins[c].arch));
  kg_strbuf_puts(b, va->ncubins ? "};\n" : "0}; /* none */\n");
  if (p->nsizes > 0) put_variant_extent(b, fn, v, p);
}

/* The arch KG_EMULATE runs a binding as when KG_EMULATE_SM is not defined: its first cubin's, else its first
 * PTX's. */
static int default_emulate_arch(const kg_header_binding *bd) {
  for (int v = 0; v < bd->nvariants; v++)
    if (bd->variants[v].ncubins > 0) return arch_number(bd->variants[v].cubins[0].arch);
  return arch_number(bd->variants[0].ptx_arch);
}

/* The most kernels (temps 0) or temporaries (temps 1) of a binding's variants, at least 1 (an array's size). */
static int binding_max(const kg_header_binding *bd, int temps) {
  int m = 1;
  for (int v = 0; v < bd->nvariants; v++) {
    const kg_cuda_program *p = bd->variants[v].prog;
    int n = temps ? p->ntemps : p->nkernels;
    if (n > m) m = n;
  }
  return m;
}

/* A binding's data: the variants (sources or images, tables, descriptors) and its state. */
static void put_binding_data(kg_strbuf *b, const kg_header_spec *s, int i) {
  const kg_header_binding *bd = &s->bindings[i];
  char *fn = kg_header_fn_name(s, i);
  kg_strbuf_printf(b, "/* ---- %s ---- */\n#ifdef KG_EMULATE\n", fn);
  for (int v = 0; v < bd->nvariants; v++) put_variant_source(b, fn, v, bd->variants[v].prog);
  kg_strbuf_puts(b, "#else\n");
  for (int v = 0; v < bd->nvariants; v++) put_variant_images(b, fn, v, &bd->variants[v]);
  kg_strbuf_puts(b, "#endif\n");
  for (int v = 0; v < bd->nvariants; v++) put_variant_tables(b, fn, v, &bd->variants[v]);

  kg_strbuf_printf(b, "static const kg_cuda_variant %s_variants[] = {\n", fn);
  for (int v = 0; v < bd->nvariants; v++) {
    const kg_header_variant *va = &bd->variants[v];
    const kg_cuda_program *p = va->prog;
    kg_strbuf_printf(b, "    {%d, %d, %d, %d, %d, %s_v%d_kernel, %s_v%d_launch, %s_v%d_temp_elems, %s_v%d_cubin_arch,\n",
                     p->nkernels, p->nparams, p->ntemps, va->ncubins, va->ptx ? arch_number(va->ptx_arch) : 0, fn, v,
                     fn, v, fn, v, fn, v);
    char tail[600];
    if (p->nsizes > 0) snprintf(tail, sizeof tail, "%d, %s_v%d_extent", p->nsizes, fn, v);
    else snprintf(tail, sizeof tail, "0, NULL");
    kg_strbuf_printf(b, "#ifdef KG_EMULATE\n     NULL, NULL, %s_v%d_emu, %s},\n#else\n", fn, v, tail);
    if (va->ptx)
      kg_strbuf_printf(b, "     %s_v%d_cubin, (const char *)%s_v%d_ptx, NULL, %s},\n#endif\n", fn, v, fn, v, tail);
    else
      kg_strbuf_printf(b, "     %s_v%d_cubin, NULL, NULL, %s},\n#endif\n", fn, v, tail);
  }
  kg_strbuf_puts(b, "};\n");
  kg_strbuf_printf(b, "static kg_cu_function %s_fn[%d];\n", fn, binding_max(bd, 0));
  kg_strbuf_printf(b, "static kg_cuda_binding %s_binding = {\"%s\", %s_variants, %d, %d, 0, -1, NULL, %s_fn};\n\n", fn,
                   fn, fn, bd->nvariants, default_emulate_arch(bd), fn);
  free(fn);
}

/* A binding's public functions: the kernel's and its _variant. With dynamic sizes the kernel's function takes them
 * first (the spec's order), refuses one outside the binding's range with KG_ERR_SIZE before anything else, and
 * passes them to the kernels in their program's order. A NULL tensor pointer is KG_ERR_ARG, before any launch. */
static void put_binding_functions(kg_strbuf *b, const kg_header_spec *s, int i) {
  const kg_header_binding *bd = &s->bindings[i];
  const kg_cuda_program *p0 = bd->variants[0].prog;
  char *fn = kg_header_fn_name(s, i);
  int maxt = binding_max(bd, 1), ns = p0->nsizes;
  kg_strbuf_printf(b, "int %s(CUstream stream, ", fn);
  kg_header_put_dyn_params(b, s, 1);
  kg_header_put_params(b, s, 1);
  kg_strbuf_puts(b, ") {\n");
  for (int k = 0; k < s->nsizes; k++) {
    if (!s->size_dynamic || !s->size_dynamic[k]) continue;
    int64_t lo = 0, hi = 0;
    spec_range(s, i, k, &lo, &hi);
    kg_strbuf_printf(b, "  if (%s < %lldLL || %s > %lldLL) return KG_ERR_SIZE;\n", s->size_names[k], (long long)lo,
                     s->size_names[k], (long long)hi);
  }
  /* device pointers: 0 is never a valid allocation (the stream may be NULL: the legacy default stream) */
  for (int k = 0; k < s->nparams; k++)
    kg_strbuf_printf(b, "%s!%s%s", k ? " || " : "  if (", s->param_names[k], k == s->nparams - 1 ? ") return KG_ERR_ARG;\n" : "");
  if (ns > 0) {
    kg_strbuf_printf(b, "  const long long kg_sizes[%d] = {", ns);
    for (int k = 0; k < ns; k++) kg_strbuf_printf(b, "%s(long long)%s", k ? ", " : "", p0->size_names[k]);
    kg_strbuf_puts(b, "};\n");
  }
  kg_strbuf_printf(b, "  void *kg_params[%d] = {", ns + s->nparams + maxt);
  for (int k = 0; k < ns; k++) kg_strbuf_printf(b, "%s(void *)&kg_sizes[%d]", k ? ", " : "", k);
  for (int k = 0; k < s->nparams; k++) kg_strbuf_printf(b, "%s(void *)&%s", k || ns ? ", " : "", s->param_names[k]);
  kg_strbuf_printf(b, "};\n  kg_cu_deviceptr kg_temps[%d];\n  return kg_cuda_call(&%s_binding, stream, %s, kg_params, kg_temps);\n}\n",
                   maxt, fn, ns > 0 ? "kg_sizes" : "NULL");
  kg_strbuf_printf(b, "int %s_variant(void) { return kg_cuda_variant_of(&%s_binding); }\n\n", fn, fn);
  free(fn);
}

int kg_header_put_cuda(kg_strbuf *b, const kg_header_spec *s, char *err, size_t errlen) {
  if (check_spec(s, err, errlen) != 0) return -1;
  const char *pre = s->prefix ? s->prefix : "kg_";
  kg_strbuf_puts(b, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
                    "/* Diagnostics (tests, troubleshooting): the variant (kernel program) whose image runs on the device,\n"
                    " * N of its kernels' names <function>_vN_k..., loading it if needed; -1 when the device has none (or\n"
                    " * the driver is missing). With KG_EMULATE: the variant chosen for the arch KG_EMULATE_SM (e.g. 90;\n"
                    " * by default the arch of the kernel's first cubin). */\n");
  for (int i = 0; i < s->nbindings; i++) {
    char *fn = kg_header_fn_name(s, i);
    kg_strbuf_printf(b, "int %s_variant(void);\n", fn);
    free(fn);
  }
  kg_strbuf_puts(b, "#ifndef KG_EXPORT_CUDA_STRERROR\n#define KG_EXPORT_CUDA_STRERROR\n"
                    "/* kg_strerror, with the driver's own description of a CUresult when the driver gives one. */\n"
                    "const char *kg_cuda_strerror(int code);\n#endif\n"
                    "#ifdef __cplusplus\n}\n#endif\n\n");

  kg_strbuf_puts(b, "#ifdef KG_IMPLEMENTATION\n"
                    "#if defined(KG_EMULATE) && !defined(KG_CUDA_EMU_H)\n"
                    "#error \"KG_EMULATE runs the kernels on kgen's CUDA emulator: compile as C++ with its header "
                    "force-included (g++ " KG_EMU_CXXFLAGS " -include runtime/cuda_emu.h; installed: share/kgen/cuda_emu.h)\"\n"
                    "#else\n");
  kg_strbuf_puts(b, shared_impl);
  /* the data first: the emulator's sources are C++ (namespaces), outside any extern "C" block */
  for (int i = 0; i < s->nbindings; i++) put_binding_data(b, s, i);
  kg_strbuf_puts(b, "#ifdef __cplusplus\nextern \"C\" {\n#endif\n");
  for (int i = 0; i < s->nbindings; i++) put_binding_functions(b, s, i);
  kg_strbuf_printf(b, "static kg_cuda_binding *const %s%s_bindings[] = {", pre, s->name);
  for (int i = 0; i < s->nbindings; i++) {
    char *fn = kg_header_fn_name(s, i);
    kg_strbuf_printf(b, "%s&%s_binding", i ? ", " : "", fn);
    free(fn);
  }
  kg_strbuf_printf(b, "};\nint %s%s_load(void) { return kg_cuda_load_all(%s%s_bindings, %d); }\n", pre, s->name, pre,
                   s->name, s->nbindings);
  kg_strbuf_printf(b, "void %s%s_unload(void) { kg_cuda_unload_all(%s%s_bindings, %d); }\n\n", pre, s->name, pre,
                   s->name, s->nbindings);
  kg_header_put_dispatch(b, s, "CUstream stream");
  kg_strbuf_puts(b, "#ifdef __cplusplus\n}\n#endif\n#endif /* KG_EMULATE without the emulator */\n"
                    "#endif /* KG_IMPLEMENTATION */\n");
  return 0;
}
