/* The CUDA emulator's host side: writes the generated CUDA source and the emulation header (runtime/cuda_emu.h,
 * embedded as kg_cuda_emu_header by the Makefile) into a private temporary folder, compiles them with the host C++
 * compiler into a shared object (fork/execvp, no shell), loads it, and launches its kernels in order.
 *
 * libkgen only looks symbols up and calls them: the launcher that switches stacks between the fibers of a block
 * (kg_emu_launch) is compiled into the module from the header, without sanitizers, so an ASan build of libkgen
 * never sees a stack switch it did not make. Requires a C++17 compiler ($CXX, default g++) and dlopen.
 * Call kg_emu_module_free after kg_emu_build whatever it returned: it unloads and removes the folder. */
#include "emu.h"
#include "../base/clock.h"
#include "probe.h"
#include "compiler.h"
#include "../codegen/kernel_flags.h"
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*kg_emu_launch_fn)(void (*entry)(float **), float **args, const int64_t grid[3], const int64_t block[3],
                                int64_t dyn_bytes, char *err, size_t errlen);

static const char *const emu_files[] = {"kernel.cu", "cuda_emu.h", "kernel.so"};

static void emu_logf(kg_emu_module *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emu_logf(kg_emu_module *m, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  free(m->log);
  m->log = strdup(buf);
}

static void emu_remove_dir(kg_emu_module *m) {
  kg_compiler_remove_dir(&m->dir, emu_files, sizeof emu_files / sizeof *emu_files);
}

/* dlsym of name followed by suffix ("mm_k0" "__emu"). */
static void *emu_sym(void *handle, const char *name, const char *suffix) {
  char sym[512];
  if (snprintf(sym, sizeof sym, "%s%s", name, suffix) >= (int)sizeof sym) return NULL;
  return dlsym(handle, sym);
}

static int emu_compile(kg_emu_module *m) {
  const char *cxx_env = getenv("CXX");
  const char *extra_env = getenv("KGEN_EMU_CXXFLAGS");
  char *cxx = strdup(cxx_env && *cxx_env ? cxx_env : "g++");
  char *extra = strdup(extra_env ? extra_env : "");
  if (!cxx || !extra) {
    free(cxx);
    free(extra);
    emu_logf(m, "kgen: out of memory");
    return -1;
  }
  char *argv[96];
  int n = kg_compiler_split_words(cxx, argv, 16);
  if (n == 0) argv[n++] = "g++";
  /* The shared emulator flags (codegen/kernel_flags.h), split in a copy since splitting writes into it. */
  char emu_flags[] = KG_EMU_CXXFLAGS;
  n += kg_compiler_split_words(emu_flags, argv + n, 32);
  static const char *const flags[] = {"-fPIC", "-shared", "-include", "cuda_emu.h", "-o", "kernel.so"};
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) argv[n++] = (char *)flags[i];
  /* $KGEN_EMU_CXXFLAGS after the defaults so it can override them (e.g. -O0 -g to debug a kernel). */
  n += kg_compiler_split_words(extra, argv + n, (int)(sizeof argv / sizeof *argv) - n - 4);
  argv[n++] = "-x";
  argv[n++] = "c++";
  argv[n++] = "kernel.cu";
  argv[n] = NULL;
  double t0 = kg_now_s();
  char *out = NULL;
  int st = kg_compiler_run_command(argv, m->dir, &out);
  m->compile_s = kg_now_s() - t0;
  free(m->log);
  m->log = out;
  if (st == KG_COMPILER_NO_EXEC || (st < 0 && st != KG_COMPILER_TIMEOUT)) {
    emu_logf(m, "kgen: cannot run the C++ compiler '%s' (set CXX to a C++ compiler): %s", argv[0], strerror(errno));
    m->env_fault = 1;
  } else if (st == KG_COMPILER_SIGNALED) {
    if (!m->log) emu_logf(m, "kgen: the C++ compiler '%s' was killed by a signal", argv[0]);
    m->env_fault = 1;
  } else if (st == KG_COMPILER_TIMEOUT) {
    /* this code's fault (a huge kernel), not the toolchain's: a trivial kernel still builds */
    kg_compiler_log_timeout(&m->log, "the C++ compiler", argv[0]);
  } else if (st != 0 && !m->log) {
    emu_logf(m, "kgen: the C++ compiler '%s' exited with status %d (and printed nothing)", argv[0], st);
  }
  free(cxx);
  free(extra);
  return st == 0 ? 0 : -1;
}

int kg_emu_build(const kg_cuda_program *p, kg_emu_module *m) {
  memset(m, 0, sizeof *m);
  m->dir = kg_compiler_make_dir("kgen-emu-", &m->log);
  if (!m->dir) {
    m->env_fault = 1;
    return -1;
  }
  if (kg_compiler_write_file(m->dir, "kernel.cu", p->source ? p->source : "") != 0 ||
      kg_compiler_write_file(m->dir, "cuda_emu.h", kg_cuda_emu_header) != 0) {
    emu_logf(m, "kgen: cannot write the emulator's sources in %s: %s", m->dir, strerror(errno));
    m->env_fault = 1;
    emu_remove_dir(m);
    return -1;
  }
  if (emu_compile(m) != 0) {
    emu_remove_dir(m);
    return -1;
  }
  char *so = kg_compiler_join_path(m->dir, "kernel.so");
  m->handle = so ? dlopen(so, RTLD_NOW | RTLD_LOCAL) : NULL;
  free(so);
  if (!m->handle) {
    const char *e = dlerror();
    emu_logf(m, "kgen: cannot load the emulated kernels: %s", e ? e : "out of memory");
    emu_remove_dir(m);
    return -1;
  }
  /* Every kernel's entry must be there now, so a printer that forgot one fails at build, not at launch. */
  const char *missing = emu_sym(m->handle, "kg_emu_launch", "") ? NULL : "kg_emu_launch (the emulation header)";
  char what[300];
  for (int k = 0; k < p->nkernels && !missing; k++)
    if (!emu_sym(m->handle, p->kernels[k].name, "__emu")) {
      snprintf(what, sizeof what, "%s__emu (the KG_EMULATE entry of kernel %s)", p->kernels[k].name,
               p->kernels[k].name);
      missing = what;
    }
  if (missing) {
    emu_logf(m, "kgen: the compiled source defines no %s", missing);
    dlclose(m->handle);
    m->handle = NULL;
    emu_remove_dir(m);
    return -1;
  }
  return 0;
}

void kg_emu_module_free(kg_emu_module *m) {
  if (m->handle) dlclose(m->handle);
  m->handle = NULL;
  emu_remove_dir(m);
  free(m->log);
  m->log = NULL;
}

int kg_emu_run_program(const kg_emu_module *m, const kg_cuda_program *p, float **args, char *err, size_t errlen) {
  return kg_emu_run_program_sizes(m, p, args, NULL, err, errlen);
}

int kg_emu_run_program_sizes(const kg_emu_module *m, const kg_cuda_program *p, float **args, const int64_t *sizes,
                             char *err, size_t errlen) {
  if (errlen) err[0] = 0;
  if (!m->handle) {
    snprintf(err, errlen, "emulator: the module is not built");
    return -1;
  }
  kg_emu_launch_fn launch;
  void (*entry)(float **);
  void *sym = emu_sym(m->handle, "kg_emu_launch", "");
  if (!sym) {
    snprintf(err, errlen, "emulator: the module has no kg_emu_launch");
    return -1;
  }
  /* object pointer to function pointer through memcpy: a cast is undefined in ISO C */
  memcpy(&launch, &sym, sizeof sym);
  /* With dynamic sizes: the grids at these sizes, and the entries' arguments with a pointer to the sizes after
   * the buffers (see kg_codegen_cuda). */
  int64_t(*grid)[3] = NULL;
  float **a = args;
  if (p->nsizes > 0) {
    grid = malloc(sizeof *grid * (size_t)(p->nkernels + 1));
    int nb = p->nparams + p->ntemps;
    a = malloc(sizeof *a * (size_t)(nb + 1));
    if (!grid || !a) {
      free(grid);
      free(a);
      snprintf(err, errlen, "emulator: out of memory");
      return -1;
    }
    memcpy(a, args, sizeof *a * (size_t)nb);
    a[nb] = (float *)(uintptr_t)sizes;
    char why[512];
    if (kg_cuda_program_grid(p, sizes, grid, NULL, why, sizeof why) != 0) {
      snprintf(err, errlen, "emulator: %s", why);
      free(grid);
      free(a);
      return -1;
    }
  }
  int rc = 0;
  for (int k = 0; k < p->nkernels && rc == 0; k++) {
    const kg_cuda_kernel *kn = &p->kernels[k];
    const int64_t *g = grid ? grid[k] : kn->grid;
    sym = emu_sym(m->handle, kn->name, "__emu");
    if (!sym) {
      snprintf(err, errlen, "emulator: kernel %s: the module has no entry %s__emu", kn->name, kn->name);
      rc = -1;
      break;
    }
    /* a grid that follows the sizes may be empty at these: nothing to do */
    if (grid && (g[0] == 0 || g[1] == 0 || g[2] == 0)) continue;
    memcpy(&entry, &sym, sizeof sym);
    char why[512];
    if (launch(entry, a, g, kn->block, kn->dynamic_shared, why, sizeof why) != 0) {
      snprintf(err, errlen, "emulator: kernel %s (grid %lldx%lldx%lld, block %lldx%lldx%lld): %s", kn->name,
               (long long)g[0], (long long)g[1], (long long)g[2], (long long)kn->block[0], (long long)kn->block[1],
               (long long)kn->block[2], why);
      rc = -1;
    }
  }
  free(grid);
  if (a != args) free(a);
  return rc;
}

static int probe_build(const char *ctx, char *log, size_t loglen) {
  (void)ctx;
  /* no kernel to launch: the header's launcher is what every build needs */
  kg_cuda_program p;
  memset(&p, 0, sizeof p);
  char src[] = "extern \"C\" __global__ void kgen_probe(float *a) { a[threadIdx.x] = sqrtf(2.0f); }\n";
  p.source = src;
  kg_emu_module m;
  int rc = kg_emu_build(&p, &m);
  if (rc) kg_probe_log_tail(m.log, log, loglen);
  kg_emu_module_free(&m);
  return rc;
}

int kg_emu_toolchain_check(char *why, size_t whylen) {
  static kg_toolchain_probe probe = KG_TOOLCHAIN_PROBE_INIT;
  const char *cxx = getenv("CXX"), *flags = getenv("KGEN_EMU_CXXFLAGS"), *tmp = getenv("TMPDIR");
  char key[sizeof probe.key];
  snprintf(key, sizeof key, "%s\n%s\n%s", cxx ? cxx : "", flags ? flags : "", tmp ? tmp : "");
  return kg_toolchain_probe_check(&probe, key, probe_build, NULL,
                                  "the emulator's C++ toolchain cannot build a trivial kernel either", why, whylen);
}
