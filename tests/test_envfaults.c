/* The environment's faults are not the candidates': the measurement harness tells a broken
 * environment (no build folder, no compiler, a compiler that fails on everything, a bad driver setting) from a
 * candidate the compiler rejects; a worker killed from outside is retried once; build folders are named after
 * their owner, removed on SIGTERM, and those of dead owners are cleaned at start. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../runtime/compiler.h"
#include "../runtime/cpu.h"
#include "../runtime/cudrv.h"
#include "../runtime/measure.h"
#include "../runtime/pch.h"
#include "testlib.h"

#define M_ 16
#define N_ 12
#define K_ 8

static kg_program *load_matmul(void) {
  kg_binding b[] = {{"M", M_}, {"N", N_}, {"K", K_}};
  return kg_test_load_lib("matmul", b, 3);
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static int exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* A correct matmul (generated calling convention) that first runs `prologue`: declarations are given by hand, as
 * candidates are compiled with -std=c11 and no POSIX headers. */
static char *matmul_with(const char *prologue) {
  char *s = malloc(4096);
  snprintf(s, 4096,
           "int kill(int, int); int getpid(void); int unlink(const char *); int access(const char *, int);\n"
           "int usleep(unsigned); typedef struct FILE FILE; FILE *fopen(const char *, const char *);\n"
           "int fprintf(FILE *, const char *, ...); int fclose(FILE *); int rename(const char *, const char *);\n"
           "void kgen_entry_args(float **a) {\n"
           "%s\n"
           "  for (int i = 0; i < %d; i++)\n"
           "    for (int j = 0; j < %d; j++) {\n"
           "      float acc = 0;\n"
           "      for (int k = 0; k < %d; k++) acc += a[0][i * %d + k] * a[1][k * %d + j];\n"
           "      a[2][i * %d + j] = acc;\n"
           "    }\n"
           "}\n",
           prologue, M_, N_, K_, K_, N_, N_);
  return s;
}

static kg_measurer *new_measurer(const kg_program *p) {
  kg_measure_opts o = {0};
  o.target = KG_TARGET_C;
  o.timeout_s = 20;
  o.min_repeat_s = 0.005;
  o.seed = 3;
  o.build_threads = 2;
  char err[512];
  kg_measurer *m = kg_measurer_new(p, &o, err, sizeof err);
  CHECKF(m != NULL, "%s", err);
  return m;
}

/* Every candidate of a batch under a broken environment: the environment's fault, with the reason. */
static void check_env_batch(kg_measurer *m, const char *what, const char *needle) {
  kg_trace tiled;
  kg_trace_init(&tiled);
  char err[256];
  const char *text = "split C i 4\nparallel C i.o\n";
  CHECK(kg_trace_parse(&tiled, "tiled", text, strlen(text), err, sizeof err) == 0);
  kg_candidate c[2] = {{NULL, NULL}, {&tiled, NULL}};
  kg_measure_result r[2];
  kg_measure_batch(m, c, 2, r);
  for (int i = 0; i < 2; i++) {
    CHECKF(r[i].env_fault, "%s: candidate %d: %s: %s", what, i, kg_status_names[r[i].status], r[i].msg);
    CHECKF(r[i].status != KG_STATUS_OK, "%s: candidate %d ran", what, i);
    CHECK_STR_CONTAINS(r[i].msg, needle);
    kg_measure_result_free(&r[i]);
  }
  kg_trace_free(&tiled);
}

static void check_ok_batch(kg_measurer *m, const char *what) {
  kg_candidate c = {NULL, NULL};
  kg_measure_result r;
  kg_measure_batch(m, &c, 1, &r);
  CHECKF(r.status == KG_STATUS_OK && !r.env_fault, "%s: %s: %s", what, kg_status_names[r.status], r.msg);
  kg_measure_result_free(&r);
}

static void test_build_faults(const kg_program *p, const char *tmp) {
  kg_measurer *m = new_measurer(p);
  if (!m) return;
  char bad_tmp[512];
  snprintf(bad_tmp, sizeof bad_tmp, "%s/no/such/folder", tmp);
  setenv("TMPDIR", bad_tmp, 1);
  check_env_batch(m, "TMPDIR unusable", "TMPDIR");
  setenv("TMPDIR", tmp, 1);
  setenv("CC", "/nonexistent/cc", 1);
  check_env_batch(m, "no compiler", "cannot run the C compiler '/nonexistent/cc'");
  setenv("CC", "/bin/false", 1);
  check_env_batch(m, "CC=/bin/false", "the C compiler '/bin/false' exited with status 1");
  char why[1024] = "";
  CHECK(kg_cpu_toolchain_check(why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "cannot build a trivial kernel");
  /* a compiler killed by a signal (the OOM killer, a user) */
  char killed[600];
  snprintf(killed, sizeof killed, "%s/killedcc", tmp);
  FILE *f = fopen(killed, "w");
  if (f) {
    fputs("#!/bin/sh\nkill -KILL $$\n", f);
    fclose(f);
  }
  chmod(killed, 0755);
  setenv("CC", killed, 1);
  check_env_batch(m, "compiler killed", "was killed by a signal");
  unlink(killed);
  unsetenv("CC");
  setenv("KGEN_CFLAGS", "-march=no-such-cpu", 1);
  check_env_batch(m, "bad KGEN_CFLAGS", "trivial kernel");
  unsetenv("KGEN_CFLAGS");
  CHECK(kg_cpu_toolchain_check(why, sizeof why) == 0);

  /* a healthy toolchain: code the compiler rejects is the candidate's fault */
  kg_candidate bad = {NULL, "void kgen_entry_args(float **a) { this is not C; }\n"};
  kg_measure_result r;
  kg_measure_batch(m, &bad, 1, &r);
  CHECKF(r.status == KG_STATUS_COMPILE_ERROR && !r.env_fault, "%s: %s", kg_status_names[r.status], r.msg);
  kg_measure_result_free(&r);
  check_ok_batch(m, "environment fixed");
  kg_measurer_free(m);
}

typedef struct killer {
  const char *pidfile;
  int killed;
} killer;

/* Waits for the candidate to say its pid, then ends the worker from outside with SIGTERM. */
static void *kill_from_outside(void *arg) {
  killer *k = arg;
  for (int i = 0; i < 2000 && !k->killed; i++) {
    FILE *f = fopen(k->pidfile, "r");
    long pid = 0;
    if (f && fscanf(f, "%ld", &pid) == 1 && pid > 0) {
      kill((pid_t)pid, SIGTERM);
      k->killed = 1;
    }
    if (f) fclose(f);
    usleep(5000);
  }
  return NULL;
}

static void test_outside_kill(const kg_program *p, const char *tmp) {
  kg_measurer *m = new_measurer(p);
  if (!m) return;
  char marker[512], pidfile[512], tmpfile[600], prologue[4096];
  snprintf(marker, sizeof marker, "%s/marker", tmp);
  snprintf(pidfile, sizeof pidfile, "%s/worker.pid", tmp);
  snprintf(tmpfile, sizeof tmpfile, "%s.tmp", pidfile);

  /* killed from outside (SIGTERM by another thread) on its first run only: retried, then measured */
  snprintf(prologue, sizeof prologue,
           "  if (!access(\"%s\", 0)) {\n"
           "    unlink(\"%s\");\n"
           "    FILE *f = fopen(\"%s\", \"w\"); fprintf(f, \"%%d\\n\", getpid()); fclose(f);\n"
           "    rename(\"%s\", \"%s\");\n"
           "    for (int i = 0; i < 2000; i++) usleep(5000);\n"
           "  }\n",
           marker, marker, tmpfile, tmpfile, pidfile);
  char *src = matmul_with(prologue);
  FILE *f = fopen(marker, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  killer k = {pidfile, 0};
  pthread_t th;
  pthread_create(&th, NULL, kill_from_outside, &k);
  int starts = kg_measurer_worker_starts(m);
  kg_candidate c = {NULL, src};
  kg_measure_result r;
  kg_measure_batch(m, &c, 1, &r);
  pthread_join(th, NULL);
  CHECK(k.killed);
  CHECKF(r.status == KG_STATUS_OK && !r.env_fault, "killed once from outside: %s: %s", kg_status_names[r.status],
         r.msg);
  CHECKF(kg_measurer_worker_starts(m) == starts + 1, "%d worker starts, want %d",
         kg_measurer_worker_starts(m), starts + 1);
  kg_measure_result_free(&r);
  free(src);
  unlink(pidfile);

  /* killed on every run: only the second death is recorded, as the candidate's */
  src = matmul_with("  kill(getpid(), 9);\n");
  c.source = src;
  starts = kg_measurer_worker_starts(m);
  kg_measure_batch(m, &c, 1, &r);
  CHECKF(r.status == KG_STATUS_RUNTIME_ERROR && !r.env_fault, "%s: %s", kg_status_names[r.status], r.msg);
  CHECK_STR_CONTAINS(r.msg, "SIGKILL");
  CHECK_STR_CONTAINS(r.msg, "twice");
  CHECKF(kg_measurer_worker_starts(m) == starts + 1, "%d worker starts, want %d (one retry)",
         kg_measurer_worker_starts(m), starts + 1);
  kg_measure_result_free(&r);
  free(src);

  /* a candidate's own fault (SIGSEGV) is not retried */
  src = matmul_with("  kill(getpid(), 11);\n");
  c.source = src;
  starts = kg_measurer_worker_starts(m);
  kg_measure_batch(m, &c, 1, &r);
  CHECKF(r.status == KG_STATUS_RUNTIME_ERROR && !r.env_fault, "%s: %s", kg_status_names[r.status], r.msg);
  CHECK_STR_CONTAINS(r.msg, "SIGSEGV");
  CHECK(strstr(r.msg, "twice") == NULL);
  /* the worker the SIGKILLs left dead is started once for it, and not again for a retry */
  CHECKF(kg_measurer_worker_starts(m) == starts + 1, "%d worker starts, want %d (no retry)",
         kg_measurer_worker_starts(m), starts + 1);
  kg_measure_result_free(&r);
  free(src);
  check_ok_batch(m, "after the kills");
  kg_measurer_free(m);
}

static void test_cuda_setting(void) {
  char why[1024] = "";
  const char *saved = getenv("KGEN_CUDA_LIB");
  char *keep = saved ? strdup(saved) : NULL;
  setenv("KGEN_CUDA_LIB", "/etc/passwd", 1);
  CHECK(kg_cudrv_setting_check(why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "KGEN_CUDA_LIB=/etc/passwd");
  setenv("KGEN_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
  CHECK(kg_cudrv_setting_check(why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "/nonexistent/libcuda.so.1");
  unsetenv("KGEN_CUDA_LIB");
  CHECK(kg_cudrv_setting_check(why, sizeof why) == 0);
  if (keep) setenv("KGEN_CUDA_LIB", keep, 1);
  free(keep);
}

/* NVRTC: a compilation error is the source's; an option NVRTC rejects (an arch it does not know) is not */
static void test_nvrtc(void) {
  char why[1024];
  if (kg_nvrtc_available(why, sizeof why) != 0) {
    printf("test_envfaults: NVRTC checks skipped: %s\n", why);
    return;
  }
  char good[] = "extern \"C\" __global__ void kgen_k0(float *a) { a[threadIdx.x] = 1.0f; }\n";
  char bad[] = "extern \"C\" __global__ void kgen_k0(float *a) { this is not CUDA; }\n";
  char kname[] = "kgen_k0";
  kg_cuda_kernel k;
  memset(&k, 0, sizeof k);
  k.name = kname;
  kg_cuda_program p;
  memset(&p, 0, sizeof p);
  p.kernels = &k;
  p.nkernels = 1;
  p.nparams = 1;
  kg_cubin c;
  p.source = bad;
  CHECK(kg_nvrtc_compile(&p, "sm_86", &c) != 0);
  CHECKF(!c.env_fault, "%s", c.log ? c.log : "");
  kg_cubin_free(&c);
  p.source = good;
  CHECK(kg_nvrtc_compile(&p, "sm_10", &c) != 0);
  CHECKF(c.env_fault, "%s", c.log ? c.log : "");
  kg_cubin_free(&c);
  CHECK(kg_nvrtc_toolchain_check("sm_86", why, sizeof why) == 0);
  CHECK(kg_nvrtc_toolchain_check("sm_10", why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "trivial kernel for sm_10");
}

static void make_stale(const char *tmp, const char *name) {
  char path[600], file[700];
  snprintf(path, sizeof path, "%s/%s", tmp, name);
  CHECK(mkdir(path, 0700) == 0);
  snprintf(file, sizeof file, "%s/kernel.c", path);
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
}

static void test_folders(const char *tmp) {
  /* named after the owner */
  char *log = NULL;
  char *dir = kg_compiler_make_dir("kgen-", &log);
  CHECK(dir != NULL);
  char want[64];
  snprintf(want, sizeof want, "/kgen-%ld-", (long)getpid());
  if (dir) CHECK_STR_CONTAINS(dir, want);
  kg_compiler_remove_dir(&dir, NULL, 0);
  free(log);

  /* stale folders: a dead owner's go, a live owner's stay */
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  char dead_name[64], dead_emu[64], live_name[64], other[64];
  snprintf(dead_name, sizeof dead_name, "kgen-%ld-abcdef", (long)dead);
  snprintf(dead_emu, sizeof dead_emu, "kgen-emu-%ld-ghijkl", (long)dead);
  snprintf(live_name, sizeof live_name, "kgen-%ld-mnopqr", (long)getppid());
  snprintf(other, sizeof other, "kgen-notapid-stuvwx");
  make_stale(tmp, dead_name);
  make_stale(tmp, dead_emu);
  make_stale(tmp, live_name);
  make_stale(tmp, other);
  CHECK(kg_compiler_clean_stale() == 2);
  char path[600];
  snprintf(path, sizeof path, "%s/%s", tmp, dead_name);
  CHECK(!exists(path));
  snprintf(path, sizeof path, "%s/%s", tmp, dead_emu);
  CHECK(!exists(path));
  snprintf(path, sizeof path, "%s/%s", tmp, live_name);
  CHECK(exists(path));
  snprintf(path, sizeof path, "%s/%s", tmp, other);
  CHECK(exists(path));
  const char *keep[] = {live_name, other};
  for (int i = 0; i < 2; i++) {
    char f[700];
    snprintf(path, sizeof path, "%s/%s", tmp, keep[i]);
    snprintf(f, sizeof f, "%s/kernel.c", path);
    unlink(f);
    rmdir(path);
  }

  /* SIGTERM while a build folder is alive: the folder goes, and the process still dies of SIGTERM */
  int fd[2];
  CHECK(pipe(fd) == 0);
  pid_t child = fork();
  if (child == 0) {
    close(fd[0]);
    kg_compiler_cleanup_on_signals();
    char *l = NULL;
    char *d = kg_compiler_make_dir("kgen-", &l);
    if (!d || kg_compiler_write_file(d, "kernel.c", "int x;\n") != 0) _exit(2);
    if (write(fd[1], "x", 1) != 1) _exit(2);
    for (;;) pause();
  }
  close(fd[1]);
  char x;
  CHECK(read(fd[0], &x, 1) == 1);
  close(fd[0]);
  CHECK(count_entries(tmp) == 1);
  kill(child, SIGTERM);
  int st = 0;
  waitpid(child, &st, 0);
  CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "status %#x", st);
  /* the precompiled header's folder lives as long as the process (runtime/pch.h): released first */
  kg_pch_release();
  CHECKF(count_entries(tmp) == 0, "%d entries left in %s", count_entries(tmp), tmp);
}

int main(void) {
  char tmp[] = "/tmp/kg_test_envfaults_XXXXXX";
  if (!mkdtemp(tmp)) {
    perror("mkdtemp");
    return 1;
  }
  setenv("TMPDIR", tmp, 1);
  unsetenv("CC");
  unsetenv("KGEN_CFLAGS");
  test_folders(tmp);
  test_cuda_setting();
  test_nvrtc();
  kg_program *p = load_matmul();
  CHECK(p != NULL);
  if (p) {
    test_build_faults(p, tmp);
    test_outside_kill(p, tmp);
    kg_program_free(p);
  }
  /* the precompiled header's folder lives as long as the process (runtime/pch.h): released first */
  kg_pch_release();
  CHECKF(count_entries(tmp) == 0, "%d entries left in %s", count_entries(tmp), tmp);
  rmdir(tmp);
  TEST_END();
}
