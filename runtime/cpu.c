/* The CPU runner: writes generated C into a private temporary folder, compiles it into a shared object with the
 * system compiler (fork/execvp, no shell), loads it and calls it.
 *
 * The loaded entry point (m->fn) is the `<fn_name>_args(float **args)` wrapper that kg_codegen_c emits next to
 * the function itself, so calls need no per-arity casts. Call kg_cpu_module_free after kg_cpu_build whatever it
 * returned: it closes the library and removes the folder. */
#include "cpu.h"
#include "../base/clock.h"
#include "probe.h"
#include "compiler.h"
#include "pch.h"
#include "../codegen/kernel_flags.h"
#include <assert.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_log(kg_cpu_module *m, const char *fmt, const char *arg) {
  size_t n = strlen(fmt) + (arg ? strlen(arg) : 0) + 64;
  char *s = malloc(n);
  if (!s) return;
  snprintf(s, n, fmt, arg ? arg : "", strerror(errno));
  free(m->log);
  m->log = s;
}

/* The compiler's output, or when it printed nothing, how it ended (errno says nothing about a compiler's exit). */
static void compiler_status_log(kg_cpu_module *m, const char *cc, const char *how, int st) {
  if (m->log && *m->log) return;
  char msg[512];
  if (st == KG_COMPILER_SIGNALED)
    snprintf(msg, sizeof msg, "kgen: the C compiler '%.300s' %s", cc, how);
  else
    snprintf(msg, sizeof msg, "kgen: the C compiler '%.300s' %s %d (and printed nothing)", cc, how, st);
  free(m->log);
  m->log = strdup(msg);
}

static const char *const cpu_files[] = {"kernel.c", "kernel.so"};

static void remove_dir(kg_cpu_module *m) {
  kg_compiler_remove_dir(&m->dir, cpu_files, sizeof cpu_files / sizeof *cpu_files);
}

/* The kernel compiler's command line into argv (NULL-terminated): $CC (default cc) split into words, the shared
 * kernel flags (codegen/kernel_flags.h), tail, then $KGEN_CFLAGS last so that it can override the defaults (e.g.
 * -march=x86-64-v2 for valgrind, which does not know AVX-512). The words live in kflags (KG_KERNEL_CFLAGS's size),
 * *cc and *extra (free both). 0, or -1 when out of memory. */
static int kernel_argv(char **argv, int max, const char *const *tail, int ntail, char *kflags, char **cc,
                       char **extra) {
  const char *cc_env = getenv("CC"), *extra_env = getenv("KGEN_CFLAGS");
  *cc = strdup(cc_env && *cc_env ? cc_env : "cc");
  *extra = strdup(extra_env ? extra_env : "");
  if (!*cc || !*extra) {
    free(*cc);
    free(*extra);
    *cc = *extra = NULL;
    return -1;
  }
  int n = kg_compiler_split_words(*cc, argv, 32);
  if (n == 0) argv[n++] = "cc";
  memcpy(kflags, KG_KERNEL_CFLAGS, sizeof KG_KERNEL_CFLAGS); /* a copy: splitting writes into it */
  n += kg_compiler_split_words(kflags, argv + n, 32);
  for (int i = 0; i < ntail && n < max - 1; i++) argv[n++] = (char *)tail[i];
  n += kg_compiler_split_words(*extra, argv + n, max - n - 1);
  argv[n] = NULL;
  return 0;
}

int kg_cpu_build(const char *src, const char *fn_name, kg_cpu_module *m) {
  memset(m, 0, sizeof *m);
  m->dir = kg_compiler_make_dir("kgen-", &m->log);
  if (!m->dir) {
    m->env_fault = 1;
    return -1;
  }
  char *so = kg_compiler_join_path(m->dir, "kernel.so");
  int rc = -1;
  if (!so || kg_compiler_write_file(m->dir, "kernel.c", src) != 0) {
    set_log(m, "kgen: cannot write kernel.c in %s: %s", m->dir);
    m->env_fault = 1;
    goto done;
  }
  char *cc = NULL, *extra = NULL, kflags[sizeof KG_KERNEL_CFLAGS];
  char *argv[80];
  /* the options a precompiled header must share (runtime/pch.h): the compile's, without its files */
  char *pcc = NULL, *pextra = NULL, pkflags[sizeof KG_KERNEL_CFLAGS], *popts[80];
  const char *pic[] = {"-fPIC"};
  char *pch = NULL;
  int npopts = 0;
  if (kernel_argv(popts, (int)(sizeof popts / sizeof *popts), pic, 1, pkflags, &pcc, &pextra) == 0) {
    while (popts[npopts]) npopts++;
    pch = kg_pch_for(popts, npopts);
  }
  const char *flags[] = {"-include", pch, "-shared", "-fPIC", "-o", "kernel.so", "kernel.c", "-lm"};
  int skip = pch ? 0 : 2; /* no -include without a PCH */
  if (kernel_argv(argv, (int)(sizeof argv / sizeof *argv), flags + skip,
                  (int)(sizeof flags / sizeof *flags) - skip, kflags, &cc, &extra) != 0) {
    free(pcc);
    free(pextra);
    free(pch);
    goto done;
  }
  double t0 = kg_now_s();
  char *log = NULL;
  int st = kg_compiler_run_command(argv, m->dir, &log);
  if (pch && st > 0 && st != KG_COMPILER_SIGNALED) {
    /* a failure with the PCH is retried without it (the same command, its -include pair taken out), which then
     * decides: the PCH is not to blame for a kernel that does not compile either way, and is not used again when
     * the kernel compiles without it */
    int j = 0, n = 0;
    while (argv[n]) n++;
    while (j < n && argv[j] != flags[0]) j++;
    assert(j + 1 < n); /* kernel_argv keeps every flag: 80 words hold the compiler's 32, the kernel flags and them */
    memmove(argv + j, argv + j + 2, sizeof *argv * (size_t)(n - j - 1)); /* with the NULL */
    char *log2 = NULL;
    int st2 = kg_compiler_run_command(argv, m->dir, &log2);
    if (st2 == 0) kg_pch_failed(popts, npopts);
    free(log);
    log = log2;
    st = st2;
  }
  free(pcc);
  free(pextra);
  free(pch);
  m->compile_s = kg_now_s() - t0;
  m->log = log;
  if (st == KG_COMPILER_NO_EXEC || (st < 0 && st != KG_COMPILER_TIMEOUT)) {
    set_log(m, "kgen: cannot run the C compiler '%s' (set CC to a C compiler): %s", argv[0]);
    m->env_fault = 1;
  } else if (st == KG_COMPILER_SIGNALED) {
    compiler_status_log(m, argv[0], "was killed by a signal", st);
    m->env_fault = 1;
  } else if (st == KG_COMPILER_TIMEOUT) {
    /* this code's fault (thousands of stages), not the toolchain's: a trivial kernel still builds */
    kg_compiler_log_timeout(&m->log, "the C compiler", argv[0]);
  } else if (st != 0) {
    compiler_status_log(m, argv[0], "exited with status", st);
  }
  free(cc);
  free(extra);
  if (st != 0) goto done;
  m->handle = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!m->handle) {
    const char *e = dlerror();
    free(m->log);
    m->log = strdup(e ? e : "dlopen failed");
    goto done;
  }
  size_t nn = strlen(fn_name) + 6;
  char *sym = malloc(nn);
  if (!sym) goto done;
  snprintf(sym, nn, "%s_args", fn_name);
  m->fn = dlsym(m->handle, sym);
  free(sym);
  if (!m->fn) {
    free(m->log);
    m->log = strdup("kgen: the compiled code has no argument wrapper for the entry point");
    goto done;
  }
  rc = 0;
done:
  free(so);
  if (rc != 0) {
    if (m->handle) dlclose(m->handle);
    m->handle = NULL;
    m->fn = NULL;
    remove_dir(m);
  }
  return rc;
}

void kg_cpu_module_free(kg_cpu_module *m) {
  if (m->handle) dlclose(m->handle);
  m->handle = NULL;
  m->fn = NULL;
  remove_dir(m);
  free(m->log);
  m->log = NULL;
}

void kg_cpu_call(const kg_cpu_module *m, float **args, int nargs) {
  (void)nargs; /* the wrapper knows its arity; args must hold every parameter */
  if (!m->fn) return;
  void (*fn)(float **);
  *(void **)(&fn) = m->fn;
  fn(args);
}

void kg_cpu_call_sizes(const kg_cpu_module *m, float **args, int nargs, const int64_t *sizes, int nsizes) {
  if (nsizes <= 0) {
    kg_cpu_call(m, args, nargs);
    return;
  }
  float **all = malloc(sizeof(float *) * (size_t)(nargs + 1));
  if (!all) return; /* the outputs stay unwritten, as for any failure inside the call */
  if (nargs > 0) memcpy(all, args, sizeof(float *) * (size_t)nargs);
  all[nargs] = (float *)(uintptr_t)sizes; /* the wrapper casts it back (see kg_codegen_c) */
  kg_cpu_call(m, all, nargs + 1);
  free(all);
}

/* A kernel of the shape kg_codegen_c prints: its includes, an OpenMP loop, libm, the argument wrapper. */
static const char probe_src[] = "#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n"
                                "void kgen_entry(float *restrict a) {\n"
                                "#pragma omp parallel for\n"
                                "  for (int64_t i = 0; i < 64; i++) a[i] = sqrtf((float)i) + expf(-(float)i);\n"
                                "}\n"
                                "void kgen_entry_args(float **args) { kgen_entry(args[0]); }\n";

static int probe_build(const char *ctx, char *log, size_t loglen) {
  (void)ctx;
  kg_cpu_module m;
  int rc = kg_cpu_build(probe_src, "kgen_entry", &m);
  if (rc) kg_probe_log_tail(m.log, log, loglen);
  kg_cpu_module_free(&m);
  return rc;
}

int kg_cpu_toolchain_check(char *why, size_t whylen) {
  static kg_toolchain_probe probe = KG_TOOLCHAIN_PROBE_INIT;
  const char *cc = getenv("CC"), *flags = getenv("KGEN_CFLAGS"), *tmp = getenv("TMPDIR");
  char key[sizeof probe.key];
  snprintf(key, sizeof key, "%s\n%s\n%s", cc ? cc : "", flags ? flags : "", tmp ? tmp : "");
  return kg_toolchain_probe_check(&probe, key, probe_build, NULL, "the C toolchain cannot build a trivial kernel either",
                                  why, whylen);
}

const kg_cpu_arch *kg_cpu_arch_host(void) {
  char *cc = NULL, *extra = NULL, kflags[sizeof KG_KERNEL_CFLAGS], *argv[80], *out = NULL;
  const char *tail[] = {"-dM", "-E", "-x", "c", "/dev/null"};
  const kg_cpu_arch *a = NULL;
  if (kernel_argv(argv, (int)(sizeof argv / sizeof *argv), tail, (int)(sizeof tail / sizeof *tail), kflags, &cc,
                  &extra) == 0 &&
      kg_compiler_run_command(argv, NULL, &out) == 0 && out)
    a = kg_cpu_arch_from_macros(out);
  free(out);
  free(cc);
  free(extra);
  if (a) return a;
  /* no compiler to ask (nothing will build either): the machine's baseline */
#if defined(__x86_64__)
  return kg_cpu_arch_find("x86-64");
#elif defined(__aarch64__)
  return kg_cpu_arch_find("aarch64");
#else
  return kg_cpu_arch_find("generic");
#endif
}
