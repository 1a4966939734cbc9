/* The CPU runner: writes generated C into a private temporary folder, compiles it into a shared object with the
 * system compiler (fork/execvp, no shell), loads it and calls it.
 *
 * The loaded entry point (m->fn) is the `<fn_name>_args(float **args)` wrapper that kg_codegen_c emits next to
 * the function itself, so calls need no per-arity casts. Call kg_cpu_module_free after kg_cpu_build whatever it
 * returned: it closes the library and removes the folder. */
#include "cpu.h"
#include "../base/clock.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char *path_in(const char *dir, const char *file) {
  size_t n = strlen(dir) + strlen(file) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, file);
  return p;
}

static void set_log(kg_cpu_module *m, const char *fmt, const char *arg) {
  size_t n = strlen(fmt) + (arg ? strlen(arg) : 0) + 64;
  char *s = malloc(n);
  if (!s) return;
  snprintf(s, n, fmt, arg ? arg : "", strerror(errno));
  free(m->log);
  m->log = s;
}

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  size_t n = strlen(text);
  int ok = fwrite(text, 1, n, f) == n;
  ok = (fclose(f) == 0) && ok;
  return ok ? 0 : -1;
}

/* Runs argv with stdout+stderr captured into *log; returns the exit status, or -1 when it could not run. */
static int run_capture(char *const argv[], const char *cwd, char **log) {
  int fd[2];
  if (pipe(fd) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(fd[0]);
    close(fd[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    close(fd[1]);
    if (cwd && chdir(cwd) != 0) _exit(126);
    execvp(argv[0], argv);
    fprintf(stderr, "kgen: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0, cap = 4096;
  char *buf = malloc(cap);
  for (;;) {
    if (buf && len + 1024 > cap) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) break;
      buf = nb;
      cap *= 2;
    }
    char tmp[1024];
    ssize_t r = read(fd[0], buf ? buf + len : tmp, buf ? cap - len - 1 : sizeof tmp);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (buf) len += (size_t)r;
  }
  close(fd[0]);
  if (buf) buf[len] = 0;
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) {
      free(buf);
      return -1;
    }
  if (buf && len == 0) {
    free(buf);
    buf = NULL;
  }
  *log = buf;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* $CC may hold a command with arguments ("ccache gcc"): split on whitespace, no shell involved. */
static int split_words(char *s, char **out, int max) {
  int n = 0;
  for (char *p = strtok(s, " \t"); p && n < max; p = strtok(NULL, " \t")) out[n++] = p;
  return n;
}

static void remove_dir(kg_cpu_module *m) {
  if (!m->dir) return;
  static const char *const files[] = {"kernel.c", "kernel.so"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    char *p = path_in(m->dir, files[i]);
    if (p) unlink(p);
    free(p);
  }
  rmdir(m->dir);
  free(m->dir);
  m->dir = NULL;
}

int kg_cpu_build(const char *src, const char *fn_name, kg_cpu_module *m) {
  memset(m, 0, sizeof *m);
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  m->dir = path_in(tmp, "kgen-XXXXXX");
  if (!m->dir || !mkdtemp(m->dir)) {
    set_log(m, "kgen: cannot create a build folder under %s: %s", tmp);
    free(m->dir);
    m->dir = NULL;
    return -1;
  }
  char *csrc = path_in(m->dir, "kernel.c"), *so = path_in(m->dir, "kernel.so");
  int rc = -1;
  if (!csrc || !so || write_file(csrc, src) != 0) {
    set_log(m, "kgen: cannot write kernel.c in %s: %s", m->dir);
    goto done;
  }
  const char *cc_env = getenv("CC");
  char *cc = strdup(cc_env && *cc_env ? cc_env : "cc");
  if (!cc) goto done;
  char *argv[80];
  int n = split_words(cc, argv, 32);
  if (n == 0) argv[n++] = "cc";
  const char *flags[] = {"-std=c11", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
                         "-o",       "kernel.so", "kernel.c", "-lm"};
  for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) argv[n++] = (char *)flags[i];
  /* $KGEN_CFLAGS comes last so it can override the defaults, e.g. -march=x86-64-v2 for valgrind, which does not
   * know AVX-512. */
  const char *extra_env = getenv("KGEN_CFLAGS");
  char *extra = strdup(extra_env ? extra_env : "");
  if (!extra) {
    free(cc);
    goto done;
  }
  n += split_words(extra, argv + n, (int)(sizeof argv / sizeof *argv) - n - 1);
  argv[n] = NULL;
  double t0 = kg_now_s();
  char *log = NULL;
  int st = run_capture(argv, m->dir, &log);
  m->compile_s = kg_now_s() - t0;
  free(cc);
  free(extra);
  m->log = log;
  if (st != 0) {
    if (!m->log) set_log(m, "kgen: the compiler failed (%s): %s", st < 0 ? "could not run it" : "exit status");
    goto done;
  }
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
  free(csrc);
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
