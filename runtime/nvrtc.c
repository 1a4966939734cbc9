/* NVRTC driver: compiles a kg_cuda_program to cubin + PTX with libnvrtc loaded by dlopen, parses the ptxas
 * resource report out of the compile log, and checks a build against a device's limits.
 *
 * Requires only libdl and OpenMP at build time: the NVRTC entry points are declared here with their documented
 * C prototypes (nvrtcResult is an int enum, nvrtcProgram an opaque pointer), so kgen builds without CUDA
 * headers. NVRTC allows concurrent compiles of distinct programs; the only shared state here is the library
 * handle, loaded once under pthread_once. */
#include "nvrtc.h"
#include "../base/clock.h"
#include "probe.h"
#include <ctype.h>
#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvrtc_result; /* NVRTC_SUCCESS == 0 */
typedef struct nvrtc_program_ *nvrtc_program;

static struct {
  void *lib;
  char why[512];
  char version[16];
  int major, minor; /* of the loaded NVRTC */
  const char *(*get_error_string)(nvrtc_result);
  nvrtc_result (*version_fn)(int *, int *);
  nvrtc_result (*create)(nvrtc_program *, const char *, const char *, int, const char *const *,
                         const char *const *);
  nvrtc_result (*destroy)(nvrtc_program *);
  nvrtc_result (*compile)(nvrtc_program, int, const char *const *);
  nvrtc_result (*log_size)(nvrtc_program, size_t *);
  nvrtc_result (*log)(nvrtc_program, char *);
  nvrtc_result (*cubin_size)(nvrtc_program, size_t *);
  nvrtc_result (*cubin)(nvrtc_program, char *);
  nvrtc_result (*ptx_size)(nvrtc_program, size_t *);
  nvrtc_result (*ptx)(nvrtc_program, char *);
} nv;

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void copy_str(char *dst, size_t n, const char *src) {
  size_t l = strlen(src);
  if (l >= n) l = n - 1;
  memcpy(dst, src, l);
  dst[l] = 0;
}

static void *try_open(const char *path, char *first_err, size_t n) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h && !first_err[0]) {
    const char *e = dlerror();
    copy_str(first_err, n, e ? e : path);
  }
  return h;
}

static void nv_load(void) {
  static const char *const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
                                      "libnvrtc.so.11"};
  char first[400] = "";
  void *h = NULL;
  const char *env = getenv("KGEN_NVRTC");
  if (env && env[0]) {
    /* the user named a library: that one or an error, never another NVRTC in its place */
    h = try_open(env, first, sizeof first);
    if (!h) {
      snprintf(nv.why, sizeof nv.why, "KGEN_NVRTC=%.200s cannot be loaded: %.280s", env, first);
      return;
    }
  }
  for (size_t i = 0; !h && i < sizeof names / sizeof names[0]; i++) h = try_open(names[i], first, sizeof first);
  /* The toolkit's lib64 is usually not on the loader path. */
  const char *dirs[2] = {getenv("CUDA_HOME"), "/usr/local/cuda"};
  for (int d = 0; !h && d < 2; d++) {
    if (!dirs[d] || !dirs[d][0]) continue;
    for (size_t i = 0; !h && i < sizeof names / sizeof names[0]; i++) {
      char path[1024];
      snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], names[i]);
      h = try_open(path, first, sizeof first);
    }
  }
  if (!h) {
    snprintf(nv.why, sizeof nv.why, "NVRTC not found: %s", first);
    return;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"nvrtcGetErrorString", (void **)&nv.get_error_string},
      {"nvrtcVersion", (void **)&nv.version_fn},
      {"nvrtcCreateProgram", (void **)&nv.create},
      {"nvrtcDestroyProgram", (void **)&nv.destroy},
      {"nvrtcCompileProgram", (void **)&nv.compile},
      {"nvrtcGetProgramLogSize", (void **)&nv.log_size},
      {"nvrtcGetProgramLog", (void **)&nv.log},
      {"nvrtcGetCUBINSize", (void **)&nv.cubin_size},
      {"nvrtcGetCUBIN", (void **)&nv.cubin},
      {"nvrtcGetPTXSize", (void **)&nv.ptx_size},
      {"nvrtcGetPTX", (void **)&nv.ptx},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *f = dlsym(h, syms[i].name);
    if (!f) {
      /* nvrtcGetCUBIN appeared in CUDA 11.1: an older NVRTC cannot give us a cubin. */
      if (env && env[0])
        snprintf(nv.why, sizeof nv.why, "KGEN_NVRTC=%.300s is not a usable NVRTC: it lacks %s", env, syms[i].name);
      else
        snprintf(nv.why, sizeof nv.why, "NVRTC too old: no %s", syms[i].name);
      dlclose(h);
      return;
    }
    memcpy(syms[i].slot, &f, sizeof f); /* object pointer -> function pointer without a pedantic cast */
  }
  int major = 0, minor = 0;
  if (nv.version_fn(&major, &minor) != 0) {
    snprintf(nv.why, sizeof nv.why, "NVRTC%s%.300s: nvrtcVersion failed", env && env[0] ? " KGEN_NVRTC=" : "",
             env && env[0] ? env : "");
    dlclose(h);
    return;
  }
  snprintf(nv.version, sizeof nv.version, "%d.%d", major, minor);
  nv.major = major;
  nv.minor = minor;
  nv.lib = h;
}

static int nv_ready(void) {
  pthread_once(&nv_once, nv_load);
  return nv.lib != NULL;
}

int kg_nvrtc_available(char *why, size_t whylen) {
  if (nv_ready()) return 0;
  if (why && whylen) snprintf(why, whylen, "%s", nv.why);
  return -1;
}

int kg_nvrtc_setting_check(char *why, size_t whylen) {
  const char *env = getenv("KGEN_NVRTC");
  if (!env || !env[0]) return 0;
  return kg_nvrtc_available(why, whylen);
}

const char *kg_nvrtc_version(void) { return nv_ready() ? nv.version : ""; }

void kg_cubin_free(kg_cubin *c) {
  if (!c) return;
  free(c->cubin);
  free(c->ptx);
  free(c->log);
  free(c->res);
  memset(c, 0, sizeof *c);
}

static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = malloc((size_t)n + 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* "sm_86", "sm_90a": the arch goes into a compiler option, so only this shape is accepted. */
static char *get_log(nvrtc_program prog) {
  size_t n = 0;
  if (nv.log_size(prog, &n) != 0 || n == 0) return NULL;
  char *s = malloc(n + 1);
  if (!s) return NULL;
  if (nv.log(prog, s) != 0) {
    free(s);
    return NULL;
  }
  s[n] = 0;
  return s;
}

/* NVRTC 12.9 and later keep a cache of compiled programs (shared with the driver's compute cache, so it only
 * works where a driver is installed): a program compiled before, by this process or another, comes back from it
 * without ptxas running, and then without the -v report whose registers, spills and shared memory kgen checks
 * against the device's limits. Seen on the first GPU run (2026-12-04, H200, NVRTC 13.0): every second compile of
 * the same source failed. The report is what the compile is for, so the cache is turned off where it exists. */
const char *kg_nvrtc_cache_option(int major, int minor) {
  return major > 12 || (major == 12 && minor >= 9) ? "--no-cache" : NULL;
}

/* One NVRTC compile of src with the given -arch option. On success returns 0 with the log, and the cubin
 * and/or PTX where the caller asked for them and NVRTC produced them. */
static int compile_once(const char *src, const char *name, const char *arch_opt, int want_cubin, char **log,
                        void **cubin, size_t *cubin_size, char **ptx, char **why) {
  nvrtc_program prog = NULL;
  nvrtc_result r = nv.create(&prog, src, name, 0, NULL, NULL);
  if (r != 0) {
    *why = str_printf("nvrtcCreateProgram: %s", nv.get_error_string(r));
    return -2;
  }
  /* ptxas's -v report is only produced when ptxas runs, i.e. for a real sm_XX target. */
  const char *opts[4];
  int nopt = 0;
  opts[nopt++] = arch_opt;
  if (want_cubin) {
    opts[nopt++] = "--ptxas-options=-v";
    const char *nc = kg_nvrtc_cache_option(nv.major, nv.minor);
    if (nc) opts[nopt++] = nc;
  }
  r = nv.compile(prog, nopt, opts);
  *log = get_log(prog);
  if (r != 0) {
    *why = str_printf("nvrtcCompileProgram: %s", nv.get_error_string(r));
    nv.destroy(&prog);
    /* only NVRTC_ERROR_COMPILATION (6) is the source's; the rest (out of memory, an invalid option such as an
     * arch this NVRTC does not know, an internal error) is NVRTC's or the setting's */
    return r == 6 ? -1 : -2;
  }
  if (want_cubin) {
    size_t n = 0;
    if (nv.cubin_size(prog, &n) == 0 && n > 0) {
      *cubin = malloc(n);
      if (*cubin && nv.cubin(prog, *cubin) == 0) {
        *cubin_size = n;
      } else {
        free(*cubin);
        *cubin = NULL;
      }
    }
  }
  size_t n = 0;
  /* The PTX size counts the terminating NUL; 1 means there is none. */
  if (nv.ptx_size(prog, &n) == 0 && n > 1) {
    *ptx = malloc(n + 1);
    if (*ptx && nv.ptx(prog, *ptx) == 0) {
      (*ptx)[n] = 0;
    } else {
      free(*ptx);
      *ptx = NULL;
    }
  }
  nv.destroy(&prog);
  return 0;
}

static int find_kernel(const kg_cuda_program *p, const char *name, size_t len) {
  for (int i = 0; i < p->nkernels; i++)
    if (strlen(p->kernels[i].name) == len && strncmp(p->kernels[i].name, name, len) == 0) return i;
  return -1;
}

/* The name between the quotes after marker on line, or NULL. */
static const char *quoted_after(const char *line, const char *end, const char *marker, size_t *len) {
  const char *m = strstr(line, marker);
  if (!m || m >= end) return NULL;
  const char *q = m + strlen(marker);
  if (q >= end || *q != '\'') return NULL;
  q++;
  const char *e = q;
  while (e < end && *e != '\'') e++;
  if (e >= end) return NULL;
  *len = (size_t)(e - q);
  return q;
}

/* The integer just before " suffix" on the line (e.g. "40 registers"), or -1. */
static int64_t number_before(const char *line, const char *end, const char *suffix) {
  size_t sl = strlen(suffix);
  for (const char *s = line; s + sl <= end; s++) {
    if (strncmp(s, suffix, sl) != 0 || s == line || s[-1] != ' ') continue;
    const char *d = s - 1;
    while (d > line && isdigit((unsigned char)d[-1])) d--;
    if (d == s - 1) continue;
    return strtoll(d, NULL, 10);
  }
  return -1;
}

/* ptxas -v prints, per function:
 *   ptxas info    : Compiling entry function 'kgen_k0' for 'sm_90'
 *   ptxas info    : Function properties for kgen_k0
 *   ptxas         .     1200 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 40 registers, used 1 barriers, 1200 bytes cumulative stack size, 4096 bytes smem
 * The stack line belongs to the latest "Function properties for" (device functions get one too), the "Used"
 * line to the latest entry function. Entry functions come in no particular order, so they are matched by name. */
static int parse_report(const kg_cuda_program *p, const char *log, kg_kernel_resources *res, char **why) {
  int *seen = calloc((size_t)p->nkernels + 1, sizeof *seen);
  if (!seen) return -1;
  for (int i = 0; i < p->nkernels; i++) {
    memset(&res[i], 0, sizeof res[i]);
    snprintf(res[i].name, sizeof res[i].name, "%s", p->kernels[i].name);
  }
  int entry = -1, props = -1;
  for (const char *line = log; line && *line;) {
    const char *end = strchr(line, '\n');
    if (!end) end = line + strlen(line);
    size_t len;
    const char *nm;
    if ((nm = quoted_after(line, end, "Compiling entry function ", &len))) {
      entry = find_kernel(p, nm, len);
      if (entry >= 0) seen[entry] = 1;
    } else if ((nm = strstr(line, "Function properties for ")) && nm < end) {
      nm += strlen("Function properties for ");
      len = (size_t)(end - nm);
      while (len && isspace((unsigned char)nm[len - 1])) len--;
      props = find_kernel(p, nm, len);
    } else if (strstr(line, "bytes stack frame") && strstr(line, "bytes stack frame") < end) {
      if (props >= 0) {
        res[props].local_bytes = number_before(line, end, "bytes stack frame");
        res[props].spill_stores = number_before(line, end, "bytes spill stores");
        res[props].spill_loads = number_before(line, end, "bytes spill loads");
        if (res[props].spill_stores < 0) res[props].spill_stores = 0;
        if (res[props].spill_loads < 0) res[props].spill_loads = 0;
      }
      props = -1;
    } else if (strstr(line, "Used ") && strstr(line, "Used ") < end) {
      if (entry >= 0) {
        int64_t r = number_before(line, end, "registers");
        res[entry].registers = r > 0 ? (int)r : 0;
        int64_t sm = number_before(line, end, "bytes smem");
        res[entry].static_shared = sm > 0 ? sm : 0;
      }
      entry = -1;
    }
    line = *end ? end + 1 : end;
  }
  for (int i = 0; i < p->nkernels; i++) {
    if (!seen[i]) {
      *why = str_printf("kernel %s is not in the ptxas report (is it an extern \"C\" __global__ function?)",
                        p->kernels[i].name);
      free(seen);
      return -1;
    }
    if (res[i].local_bytes < 0) res[i].local_bytes = 0;
  }
  free(seen);
  return 0;
}

/* The log given back on failure: the reason, then NVRTC's own log. */
static char *failure_log(const char *why, const char *log) {
  return str_printf("%s%s%s", why ? why : "NVRTC failed", log && log[0] ? "\n" : "", log ? log : "");
}

int kg_nvrtc_compile(const kg_cuda_program *p, const char *arch, kg_cubin *out) {
  memset(out, 0, sizeof *out);
  double t0 = kg_now_s();
  snprintf(out->arch, sizeof out->arch, "%s", arch ? arch : "");
  if (!nv_ready()) {
    out->log = str_printf("%s", nv.why);
    out->env_fault = 1;
    return -1;
  }
  int num;
  char suffix;
  if (kg_gpu_arch_parse(arch, &num, &suffix) != 0) {
    out->log = str_printf("nvrtc: bad arch '%s' (expected sm_XX, e.g. sm_86)", arch ? arch : "(null)");
    return -1;
  }
  if (!p || !p->source || p->nkernels < 1) {
    out->log = str_printf("nvrtc: empty program");
    return -1;
  }
  /* The program name appears in diagnostics ("kgen.cu(12): error: ..."). */
  char name[96];
  snprintf(name, sizeof name, "%s.cu", p->kernels[0].name ? p->kernels[0].name : "kgen");
  char sfx[2] = {suffix, 0}, opt[32];
  snprintf(opt, sizeof opt, "-arch=sm_%d%s", num, sfx);
  char *log = NULL, *why = NULL, *ptx = NULL;
  void *cubin = NULL;
  size_t cubin_size = 0;
  int crc = compile_once(p->source, name, opt, 1, &log, &cubin, &cubin_size, &ptx, &why);
  if (crc != 0) {
    out->env_fault = crc == -2;
    out->log = failure_log(why, log);
    free(why);
    free(log);
    return -1;
  }
  if (!cubin) {
    out->env_fault = 1;
    out->log = failure_log("nvrtc: the compile produced no cubin", log);
    free(log);
    free(ptx);
    return -1;
  }
  if (!ptx) {
    /* Some NVRTC versions keep no PTX after a cubin compile: ask for it with a virtual arch. */
    char vopt[32], *vlog = NULL;
    void *none = NULL;
    size_t none_size = 0;
    snprintf(vopt, sizeof vopt, "-arch=compute_%d%s", num, sfx);
    int rc = compile_once(p->source, name, vopt, 0, &vlog, &none, &none_size, &ptx, &why);
    free(vlog);
    free(none);
    if (rc != 0 || !ptx) {
      out->env_fault = 1;
      out->log = failure_log(why ? why : "nvrtc: no PTX produced", log);
      free(why);
      free(log);
      free(cubin);
      free(ptx);
      return -1;
    }
  }
  kg_kernel_resources *res = calloc((size_t)p->nkernels, sizeof *res);
  if (!res || parse_report(p, log ? log : "", res, &why) != 0) {
    /* The cubin is there, so the source compiled: a report without the kernel is NVRTC's doing (a cache that
     * skipped ptxas, a report format this parser does not know), never the candidate's. */
    out->env_fault = 1;
    out->log = failure_log(why ? why : "nvrtc: out of memory", log);
    free(why);
    free(log);
    free(cubin);
    free(ptx);
    free(res);
    return -1;
  }
  out->cubin = cubin;
  out->cubin_size = cubin_size;
  out->ptx = ptx;
  out->log = log;
  out->res = res;
  out->nres = p->nkernels;
  out->compile_s = kg_now_s() - t0;
  return 0;
}

static int probe_build(const char *arch, char *log, size_t loglen) {
  char src[] = "extern \"C\" __global__ void kgen_probe(float *a) { a[threadIdx.x] = sqrtf(2.0f); }\n";
  char kname[] = "kgen_probe";
  kg_cuda_kernel k;
  memset(&k, 0, sizeof k);
  k.name = kname;
  kg_cuda_program p;
  memset(&p, 0, sizeof p);
  p.source = src;
  p.kernels = &k;
  p.nkernels = 1;
  p.nparams = 1;
  kg_cubin c;
  int rc = kg_nvrtc_compile(&p, arch, &c);
  if (rc) kg_probe_log_tail(c.log, log, loglen);
  kg_cubin_free(&c);
  return rc;
}

int kg_nvrtc_toolchain_check(const char *arch, char *why, size_t whylen) {
  static kg_toolchain_probe probe = KG_TOOLCHAIN_PROBE_INIT;
  char what[128];
  snprintf(what, sizeof what, "NVRTC cannot compile a trivial kernel for %s either", arch ? arch : "(no arch)");
  return kg_toolchain_probe_check(&probe, arch ? arch : "", probe_build, arch, what, why, whylen);
}

void kg_nvrtc_compile_batch(const kg_cuda_program *const *p, int n, const char *arch, kg_cubin *out, int *rc,
                            int nthreads) {
  if (n <= 0) return;
  /* Load the library before the threads start so that every thread sees the same outcome cheaply. */
  nv_ready();
  int nt = nthreads > 0 ? nthreads : omp_get_num_procs();
  if (nt > n) nt = n;
  if (nt < 1) nt = 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int i = 0; i < n; i++) rc[i] = kg_nvrtc_compile(p[i], arch, &out[i]);
}

int kg_gpu_check_limits(const kg_cuda_program *p, const kg_cubin *res, const kg_gpu_limits *l, char *why,
                        size_t whylen) {
  static const char axis[3] = {'x', 'y', 'z'};
  for (int k = 0; k < p->nkernels; k++) {
    const kg_cuda_kernel *kn = &p->kernels[k];
    const char *name = kn->name ? kn->name : "?";
    int64_t threads = 1;
    for (int d = 0; d < 3; d++) {
      if (kn->block[d] < 1 || kn->grid[d] < 1) {
        snprintf(why, whylen, "kernel %s: empty launch (grid %lld x %lld x %lld, block %lld x %lld x %lld)", name,
                 (long long)kn->grid[0], (long long)kn->grid[1], (long long)kn->grid[2], (long long)kn->block[0],
                 (long long)kn->block[1], (long long)kn->block[2]);
        return -1;
      }
      if (kn->block[d] > l->max_block[d]) {
        snprintf(why, whylen, "kernel %s: block %c extent %lld > %lld", name, axis[d], (long long)kn->block[d],
                 (long long)l->max_block[d]);
        return -1;
      }
      if (kn->grid[d] > l->max_grid[d]) {
        snprintf(why, whylen, "kernel %s: grid %c extent %lld > %lld", name, axis[d], (long long)kn->grid[d],
                 (long long)l->max_grid[d]);
        return -1;
      }
      threads *= kn->block[d];
    }
    if (threads > l->max_threads_per_block) {
      snprintf(why, whylen, "kernel %s: %lld threads per block > %d", name, (long long)threads,
               l->max_threads_per_block);
      return -1;
    }
    const kg_kernel_resources *r = NULL;
    if (res && res->res) {
      if (k < res->nres && strcmp(res->res[k].name, name) == 0) r = &res->res[k];
      for (int j = 0; !r && j < res->nres; j++)
        if (strcmp(res->res[j].name, name) == 0) r = &res->res[j];
    }
    int64_t st = kn->static_shared;
    if (r && r->static_shared > st) st = r->static_shared;
    if (st > l->max_shared_static) {
      snprintf(why, whylen, "kernel %s: %lld bytes of static shared memory > %lld (use dynamic shared memory)",
               name, (long long)st, (long long)l->max_shared_static);
      return -1;
    }
    if (kn->dynamic_shared < 0 || st + kn->dynamic_shared > l->max_shared_optin) {
      snprintf(why, whylen, "kernel %s: %lld bytes of shared memory (%lld static + %lld dynamic) > %lld per block",
               name, (long long)(st + kn->dynamic_shared), (long long)st, (long long)kn->dynamic_shared,
               (long long)l->max_shared_optin);
      return -1;
    }
    if (!r) continue;
    if (r->registers > l->max_regs_per_thread) {
      snprintf(why, whylen, "kernel %s: %d registers per thread > %d", name, r->registers, l->max_regs_per_thread);
      return -1;
    }
    /* Registers are allocated per warp in units of 256 (8 per thread), so a block needs
     * warps x 32 x round_up(regs, 8) of the register file. */
    int64_t warps = (threads + 31) / 32;
    int64_t need = warps * 32 * (((int64_t)r->registers + 7) / 8 * 8);
    if (need > l->max_regs_per_block) {
      snprintf(why, whylen,
               "kernel %s: %d registers x %lld threads needs %lld registers per block > %d (allocated per warp)",
               name, r->registers, (long long)threads, (long long)need, l->max_regs_per_block);
      return -1;
    }
  }
  return 0;
}
