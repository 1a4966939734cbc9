/* CUDA driver runtime tests. Always: a stub or missing driver library gives a clear one-line reason through
 * kg_cudrv_probe (in a child process). With a device (kg_cudrv_probe says so) and NVRTC: device query, memory ops,
 * hand-written kernels (vector add from cubin and from PTX, static and >48 KB dynamic shared memory, a
 * two-kernel program with a global temporary) checked against the host, event timing, the L2 flush, launch and
 * load errors, and an illegal-address kernel in a forked child (a fault poisons the context for good).
 * Without a device it prints "skipped: <reason>" and passes. */
#include "../runtime/cudrv.h"
#include "testutil.h"
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define STUB_LIB "/usr/local/cuda/lib64/stubs/libcuda.so"

static void test_no_driver(void) {
  char why[600];
  const char *env = getenv("KGEN_CUDA_LIB");
  char *saved = env ? strdup(env) : NULL;
  setenv("KGEN_CUDA_LIB", "/nonexistent/libcuda.so.1", 1);
  CHECK(kg_cudrv_probe(why, sizeof why) == 0);
  CHECK_STR_CONTAINS(why, "no CUDA driver: /nonexistent/libcuda.so.1");
  CHECK(strchr(why, '\n') == NULL);
  if (access(STUB_LIB, R_OK) == 0) {
    setenv("KGEN_CUDA_LIB", STUB_LIB, 1);
    CHECK(kg_cudrv_probe(why, sizeof why) == 0);
    CHECK_STR_CONTAINS(why, "stub library (CUDA_ERROR_STUB_LIBRARY)");
    CHECK(strchr(why, '\n') == NULL);
  }
  if (saved)
    setenv("KGEN_CUDA_LIB", saved, 1);
  else
    unsetenv("KGEN_CUDA_LIB");
  free(saved);
  /* Nothing was opened in this process. */
  kg_devptr p = 1;
  char err[256] = "";
  CHECK(kg_cudrv_alloc(&p, 64, err, sizeof err) == -1 && p == 0);
  CHECK_STR_CONTAINS(err, "CUDA is not open");
}

/* Compiles src for arch and loads it (image: the cubin, or the PTX when use_ptx). 0 when all went well. */
static int build(kg_cuda_program *p, const char *arch, int use_ptx, kg_cubin *c, kg_cudrv_module *m) {
  char err[4096] = "";
  memset(m, 0, sizeof *m);
  int rc = kg_nvrtc_compile(p, arch, c);
  CHECKF(rc == 0, "%s: %s", p->kernels[0].name, c->log ? c->log : "");
  if (rc != 0) return -1;
  rc = kg_cudrv_module_load(m, p, use_ptx ? (const void *)c->ptx : c->cubin, err, sizeof err);
  CHECKF(rc == 0, "%s: %s", p->kernels[0].name, err);
  return rc;
}

static float *random_floats(size_t n, uint64_t seed) {
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = (float)((seed >> 40) % 2001) / 1000.0f - 1.0f + 0.0005f; /* never exactly zero */
  }
  return x;
}

static int upload(kg_devptr *d, const float *h, size_t n) {
  char err[256];
  int rc = kg_cudrv_alloc(d, n * sizeof(float), err, sizeof err);
  CHECKF(rc == 0, "%s", err);
  if (rc == 0 && h) {
    rc = kg_cudrv_htod(*d, h, n * sizeof(float), err, sizeof err);
    CHECKF(rc == 0, "%s", err);
  }
  return rc;
}

static int download(float *h, kg_devptr d, size_t n) {
  char err[256];
  int rc = kg_cudrv_sync(err, sizeof err);
  CHECKF(rc == 0, "sync: %s", err);
  if (rc == 0) {
    rc = kg_cudrv_dtoh(h, d, n * sizeof(float), err, sizeof err);
    CHECKF(rc == 0, "%s", err);
  }
  return rc;
}

static const char *vadd_src =
    "extern \"C\" __global__ void __launch_bounds__(256) kgen_k0(const float* __restrict__ a,\n"
    "    const float* __restrict__ b, float* __restrict__ c) {\n"
    "  int i = blockIdx.x * 256 + threadIdx.x;\n"
    "  c[i] = a[i] + b[i];\n"
    "}\n";

static void test_vadd(const kg_cudrv_device *dev, int use_ptx) {
  enum { N = 1 << 20 };
  kg_cuda_kernel k = {"kgen_k0", {N / 256, 1, 1}, {256, 1, 1}, 0, 0};
  kg_cuda_program p = {.source = (char *)vadd_src, .kernels = &k, .nkernels = 1, .nparams = 3};
  kg_cubin c;
  kg_cudrv_module m;
  char err[512], why[256];
  if (build(&p, dev->arch, use_ptx, &c, &m) != 0) {
    kg_cubin_free(&c);
    return;
  }
  CHECKF(kg_gpu_check_limits(&p, &c, &dev->limits, why, sizeof why) == 0, "%s", why);
  float *a = random_floats(N, 1), *b = random_floats(N, 2), *out = malloc(N * sizeof(float));
  kg_devptr d[3] = {0, 0, 0};
  if (upload(&d[0], a, N) == 0 && upload(&d[1], b, N) == 0 && upload(&d[2], NULL, N) == 0) {
    CHECK(kg_cudrv_memset32(d[2], 0x7fc00000u, N, err, sizeof err) == 0); /* NaN: a skipped store shows */
    int rc = kg_cudrv_launch_program(&m, &p, d, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0 && download(out, d[2], N) == 0) {
      int bad = 0;
      for (int i = 0; i < N; i++) bad += out[i] != a[i] + b[i];
      CHECKF(bad == 0, "vector add (%s): %d wrong elements", use_ptx ? "PTX" : "cubin", bad);
    }
    /* Event timing of 10 launches. */
    kg_cudrv_event_timer t;
    rc = kg_cudrv_timer_init(&t, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0) {
      double s = 0;
      CHECK(kg_cudrv_timer_start(&t, err, sizeof err) == 0);
      for (int r = 0; r < 10; r++) CHECK(kg_cudrv_launch_program(&m, &p, d, err, sizeof err) == 0);
      rc = kg_cudrv_timer_stop(&t, &s, err, sizeof err);
      CHECKF(rc == 0, "%s", err);
      CHECKF(s > 0 && s < 5, "10 launches took %g s", s);
      if (!use_ptx && s > 0) printf("test_gpu: vector add of %d floats: %.2f us, %.1f GB/s\n", N, s / 10 * 1e6,
                                    3.0 * N * 4 * 10 / s * 1e-9);
      /* A cold-cache run: flush, then time one launch. */
      CHECKF(kg_cudrv_flush_l2(dev, err, sizeof err) == 0, "%s", err);
      CHECK(kg_cudrv_timer_start(&t, err, sizeof err) == 0);
      CHECK(kg_cudrv_launch_program(&m, &p, d, err, sizeof err) == 0);
      CHECKF(kg_cudrv_timer_stop(&t, &s, err, sizeof err) == 0 && s > 0, "%s", err);
      kg_cudrv_timer_free(&t);
      CHECK(t.start == NULL && t.stop == NULL);
    }
  }
  for (int i = 0; i < 3; i++) kg_cudrv_free(d[i]);
  free(a);
  free(b);
  free(out);
  kg_cudrv_module_unload(&m);
  CHECK(m.module == NULL && m.funcs == NULL);
  kg_cubin_free(&c);
}

/* Static shared memory: each block reverses its 1024 elements through a __shared__ array. */
static const char *reverse_src =
    "extern \"C\" __global__ void __launch_bounds__(256) kgen_k0(const float* __restrict__ a,\n"
    "    float* __restrict__ b) {\n"
    "  __shared__ float s[1024];\n"
    "  for (int i = threadIdx.x; i < 1024; i += 256) s[i] = a[blockIdx.x * 1024 + i];\n"
    "  __syncthreads();\n"
    "  for (int i = threadIdx.x; i < 1024; i += 256) b[blockIdx.x * 1024 + i] = s[1023 - i] * 2.0f;\n"
    "}\n";

/* Dynamic shared memory past 48 KB (needs the opt-in): 16384 floats per block, read back rotated. */
static const char *dyn_src =
    "extern \"C\" __global__ void __launch_bounds__(256) kgen_k0(const float* __restrict__ a,\n"
    "    float* __restrict__ b) {\n"
    "  extern __shared__ float dyn[];\n"
    "  for (int i = threadIdx.x; i < 16384; i += 256) dyn[i] = a[blockIdx.x * 16384 + i];\n"
    "  __syncthreads();\n"
    "  for (int i = threadIdx.x; i < 16384; i += 256) b[blockIdx.x * 16384 + i] = dyn[(i + 5000) & 16383];\n"
    "}\n";

static void run_two_arg(const kg_cudrv_device *dev, const char *src, kg_cuda_kernel *k, int n, int per_block,
                        int rotate, int64_t expect_smem) {
  kg_cuda_program p = {.source = (char *)src, .kernels = k, .nkernels = 1, .nparams = 2};
  kg_cubin c;
  kg_cudrv_module m;
  char err[512], why[256];
  if (build(&p, dev->arch, 0, &c, &m) != 0) {
    kg_cubin_free(&c);
    return;
  }
  CHECKF(c.res[0].static_shared == expect_smem, "smem %lld", (long long)c.res[0].static_shared);
  CHECKF(kg_gpu_check_limits(&p, &c, &dev->limits, why, sizeof why) == 0, "%s", why);
  float *a = random_floats((size_t)n, 3), *out = malloc((size_t)n * sizeof(float));
  kg_devptr d[2] = {0, 0};
  if (upload(&d[0], a, (size_t)n) == 0 && upload(&d[1], NULL, (size_t)n) == 0) {
    int rc = kg_cudrv_launch_program(&m, &p, d, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0 && download(out, d[1], (size_t)n) == 0) {
      int bad = 0;
      for (int i = 0; i < n; i++) {
        int blk = i / per_block, j = i % per_block;
        float want = rotate ? a[blk * per_block + ((j + 5000) & (per_block - 1))]
                            : a[blk * per_block + per_block - 1 - j] * 2.0f;
        bad += out[i] != want;
      }
      CHECKF(bad == 0, "%s: %d wrong elements", rotate ? "dynamic shared" : "static shared", bad);
    }
  }
  kg_cudrv_free(d[0]);
  kg_cudrv_free(d[1]);
  free(a);
  free(out);
  kg_cudrv_module_unload(&m);
  kg_cubin_free(&c);
}

static void test_shared(const kg_cudrv_device *dev) {
  kg_cuda_kernel k = {"kgen_k0", {64, 1, 1}, {256, 1, 1}, 4096, 0};
  run_two_arg(dev, reverse_src, &k, 64 * 1024, 1024, 0, 4096);
  if (dev->limits.max_shared_optin < 65536) {
    printf("test_gpu: dynamic shared test skipped: opt-in maximum %lld < 64 KB\n",
           (long long)dev->limits.max_shared_optin);
    return;
  }
  kg_cuda_kernel kd = {"kgen_k0", {32, 1, 1}, {256, 1, 1}, 0, 65536};
  run_two_arg(dev, dyn_src, &kd, 32 * 16384, 16384, 1, 0);
}

/* Two kernels in order through a global temporary: tmp = 3a, then out = reversed tmp + 1. */
static const char *two_src =
    "extern \"C\" __global__ void __launch_bounds__(128) kgen_k0(const float* __restrict__ a,\n"
    "    float* __restrict__ out, float* tmp) {\n"
    "  int i = blockIdx.x * 128 + threadIdx.x;\n"
    "  tmp[i] = a[i] * 3.0f;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(128) kgen_k1(const float* __restrict__ a,\n"
    "    float* __restrict__ out, float* tmp) {\n"
    "  int i = blockIdx.x * 128 + threadIdx.x;\n"
    "  out[i] = tmp[65535 - i] + 1.0f;\n"
    "}\n";

static void test_two_kernels(const kg_cudrv_device *dev) {
  enum { N = 65536 };
  kg_cuda_kernel k[2] = {{"kgen_k0", {N / 128, 1, 1}, {128, 1, 1}, 0, 0},
                         {"kgen_k1", {N / 128, 1, 1}, {128, 1, 1}, 0, 0}};
  int64_t temp_elems[1] = {N};
  kg_cuda_program p = {.source = (char *)two_src, .kernels = k, .nkernels = 2, .nparams = 2, .ntemps = 1,
                       .temp_elems = temp_elems};
  kg_cubin c;
  kg_cudrv_module m;
  char err[512];
  if (build(&p, dev->arch, 0, &c, &m) != 0) {
    kg_cubin_free(&c);
    return;
  }
  CHECK(m.nfuncs == 2 && m.funcs[0] && m.funcs[1] && m.funcs[0] != m.funcs[1]);
  float *a = random_floats(N, 4), *out = malloc(N * sizeof(float));
  kg_devptr d[3] = {0, 0, 0};
  if (upload(&d[0], a, N) == 0 && upload(&d[1], NULL, N) == 0 && upload(&d[2], NULL, (size_t)temp_elems[0]) == 0) {
    int rc = kg_cudrv_launch_program(&m, &p, d, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    if (rc == 0 && download(out, d[1], N) == 0) {
      int bad = 0;
      for (int i = 0; i < N; i++) bad += out[i] != a[N - 1 - i] * 3.0f + 1.0f;
      CHECKF(bad == 0, "two kernels: %d wrong elements", bad);
    }
  }
  /* Launch-shape errors are caught before the driver sees them, and a bad block size is a non-sticky driver
   * error: the context keeps working after both. */
  if (d[2]) {
    k[1].grid[0] = 0;
    CHECK(kg_cudrv_launch_program(&m, &p, d, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "kernel kgen_k1: launch shape out of range");
    k[1].grid[0] = N / 128;
    k[0].block[0] = 2048;
    CHECK(kg_cudrv_launch_program(&m, &p, d, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "cuLaunchKernel(kgen_k0): CUDA_ERROR_");
    k[0].block[0] = 128;
    CHECKF(kg_cudrv_sync(err, sizeof err) == 0, "%s", err);
  }
  for (int i = 0; i < 3; i++) kg_cudrv_free(d[i]);
  free(a);
  free(out);
  kg_cudrv_module_unload(&m);
  kg_cubin_free(&c);
}

static void test_memory(void) {
  enum { N = 4096 };
  char err[256];
  kg_devptr x = 0, y = 0;
  float *h = malloc(N * sizeof(float));
  if (upload(&x, NULL, N) == 0 && upload(&y, NULL, N) == 0) {
    float v = 1.5f;
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    CHECKF(kg_cudrv_memset32(x, bits, N, err, sizeof err) == 0, "%s", err);
    CHECKF(kg_cudrv_dtod(y, x, N * sizeof(float), err, sizeof err) == 0, "%s", err);
    if (download(h, y, N) == 0) {
      int bad = 0;
      for (int i = 0; i < N; i++) bad += h[i] != 1.5f;
      CHECKF(bad == 0, "memset + dtod: %d wrong", bad);
    }
  }
  kg_cudrv_free(x);
  kg_cudrv_free(y);
  free(h);
  /* An allocation no device has fails with the driver's reason. */
  kg_devptr z = 0;
  CHECK(kg_cudrv_alloc(&z, (size_t)1 << 50, err, sizeof err) == -1 && z == 0);
  CHECK_STR_CONTAINS(err, "cuMemAlloc(1125899906842624 bytes): CUDA_ERROR_");
}

static void test_load_errors(const kg_cudrv_device *dev) {
  char err[4096];
  kg_cuda_kernel k = {"kgen_nope", {1, 1, 1}, {256, 1, 1}, 0, 0};
  kg_cuda_program p = {.source = (char *)vadd_src, .kernels = &k, .nkernels = 1, .nparams = 3};
  kg_cuda_kernel real = {"kgen_k0", {1, 1, 1}, {256, 1, 1}, 0, 0};
  kg_cuda_program preal = p;
  preal.kernels = &real;
  kg_cubin c;
  if (kg_nvrtc_compile(&preal, dev->arch, &c) != 0) {
    CHECKF(0, "%s", c.log ? c.log : "");
    kg_cubin_free(&c);
    return;
  }
  kg_cudrv_module m;
  CHECK(kg_cudrv_module_load(&m, &p, c.cubin, err, sizeof err) == -1);
  CHECK_STR_CONTAINS(err, "cuModuleGetFunction(kgen_nope): CUDA_ERROR_NOT_FOUND");
  CHECK(m.module == NULL && m.funcs == NULL);
  static const char garbage[] = "this is not a cubin, nor PTX";
  CHECK(kg_cudrv_module_load(&m, &preal, garbage, err, sizeof err) == -1);
  CHECK_STR_CONTAINS(err, "cuModuleLoadDataEx: CUDA_ERROR_");
  kg_cubin_free(&c);
  CHECKF(kg_cudrv_sync(err, sizeof err) == 0, "%s", err);
}

/* In a child: open CUDA, write through a pointer 1 TB past an allocation, and report what the driver said.
 * Exit 0 when the fault was reported as an illegal address and stayed reported; the message goes to fd. */
static int illegal_child(int fd) {
  static const char *src =
      "extern \"C\" __global__ void __launch_bounds__(32) kgen_k0(float* __restrict__ a) {\n"
      "  a[(1ull << 38) + threadIdx.x] = 1.0f;\n"
      "}\n";
  char err[1024] = "", msg[2048];
  kg_cudrv_device dev;
  kg_cuda_kernel k = {"kgen_k0", {1, 1, 1}, {32, 1, 1}, 0, 0};
  kg_cuda_program p = {.source = (char *)src, .kernels = &k, .nkernels = 1, .nparams = 1};
  kg_cubin c;
  kg_cudrv_module m;
  kg_devptr d = 0;
  int code = 3;
  if (kg_cudrv_open(&dev, err, sizeof err) != 0) {
    snprintf(msg, sizeof msg, "open: %s", err);
  } else if (kg_nvrtc_compile(&p, dev.arch, &c) != 0) {
    snprintf(msg, sizeof msg, "compile: %.1000s", c.log ? c.log : "");
  } else if (kg_cudrv_module_load(&m, &p, c.cubin, err, sizeof err) != 0) {
    snprintf(msg, sizeof msg, "load: %s", err);
  } else if (kg_cudrv_alloc(&d, 1024, err, sizeof err) != 0) {
    snprintf(msg, sizeof msg, "alloc: %s", err);
  } else if (kg_cudrv_launch_program(&m, &p, &d, err, sizeof err) != 0) {
    /* A fault may surface at the launch call already if an earlier one was pending; none is here. */
    snprintf(msg, sizeof msg, "launch: %s", err);
  } else if (kg_cudrv_sync(err, sizeof err) == 0) {
    snprintf(msg, sizeof msg, "the illegal write was not reported");
    code = 2;
  } else {
    char err2[1024] = "";
    int sticky = kg_cudrv_sync(err2, sizeof err2) != 0;
    snprintf(msg, sizeof msg, "%.900s | then: %.900s", err, sticky ? err2 : "sync succeeded");
    code = strstr(err, "CUDA_ERROR_ILLEGAL_ADDRESS") && sticky ? 0 : 4;
  }
  size_t n = strlen(msg);
  if (write(fd, msg, n) != (ssize_t)n) code = 5;
  return code;
}

static void test_illegal_address(void) {
  int fd[2];
  CHECK(pipe(fd) == 0);
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid < 0) return;
  if (pid == 0) {
    close(fd[0]);
    int code = illegal_child(fd[1]);
    close(fd[1]);
    _exit(code);
  }
  close(fd[1]);
  char buf[2048];
  size_t got = 0;
  for (;;) {
    struct pollfd pf = {.fd = fd[0], .events = POLLIN};
    int pr = poll(&pf, 1, 120000);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) break;
    ssize_t r = read(fd[0], buf + got, sizeof buf - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
    if (got == sizeof buf - 1) break;
  }
  buf[got] = 0;
  close(fd[0]);
  int status = 0;
  /* The pipe closes when the child exits; a child stuck past the poll timeout is killed. */
  if (waitpid(pid, &status, WNOHANG) == 0) {
    sleep(1);
    if (waitpid(pid, &status, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
  }
  CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "illegal-address child: status %d: %s", status, buf);
  printf("test_gpu: illegal address reported as: %s\n", buf);
}

int main(void) {
  test_no_driver();
  char why[600];
  if (!kg_cudrv_probe(why, sizeof why)) {
    printf("test_gpu: skipped: %s\n", why);
    TEST_END();
  }
  printf("test_gpu: probe found %s\n", why);
  if (kg_nvrtc_available(why, sizeof why) != 0) {
    printf("test_gpu: skipped: a device but no NVRTC: %s\n", why);
    TEST_END();
  }
  /* Before this process opens CUDA: the child must be the first to touch the driver. */
  test_illegal_address();

  kg_cudrv_device dev;
  char err[512];
  int rc = kg_cudrv_open(&dev, err, sizeof err);
  CHECKF(rc == 0, "%s", err);
  if (rc != 0) TEST_END();
  printf("test_gpu: %s, %s, %d SMs, %d MHz, memory %d MHz x %d bits, %.1f GiB, L2 %.1f MiB, driver %d, "
         "shared %lld/%lld B per block, %d regs per block\n",
         dev.name, dev.arch, dev.sm_count, dev.clock_khz / 1000, dev.mem_clock_khz / 1000, dev.mem_bus_bits,
         (double)dev.total_mem / (1 << 30), (double)dev.l2_bytes / (1 << 20), dev.driver_version,
         (long long)dev.limits.max_shared_static, (long long)dev.limits.max_shared_optin,
         dev.limits.max_regs_per_block);
  char arch[16];
  snprintf(arch, sizeof arch, "sm_%d%d", dev.major, dev.minor);
  CHECK(strcmp(arch, dev.arch) == 0);
  CHECK(dev.name[0] != 0 && dev.major >= 7 && dev.sm_count > 0 && dev.total_mem > 0 && dev.l2_bytes > 0);
  CHECK(dev.clock_khz > 0 && dev.driver_version >= 11000);
  CHECK(dev.limits.max_threads_per_block >= 1024 && dev.limits.max_block[0] >= 1024 &&
        dev.limits.max_grid[0] >= 65535 && dev.limits.max_shared_static >= 48 * 1024 &&
        dev.limits.max_shared_optin >= dev.limits.max_shared_static && dev.limits.max_regs_per_block >= 65536);
  kg_gpu_limits doc;
  if (kg_gpu_limits_for_arch(dev.arch, &doc) == 0) {
    /* The documented table agrees with the device. */
    CHECKF(doc.max_shared_optin == dev.limits.max_shared_optin, "%s: documented opt-in %lld, device %lld",
           dev.arch, (long long)doc.max_shared_optin, (long long)dev.limits.max_shared_optin);
    CHECK(doc.max_regs_per_block == dev.limits.max_regs_per_block);
  }
  kg_cudrv_device again;
  CHECK(kg_cudrv_open(&again, err, sizeof err) == 0 && strcmp(again.name, dev.name) == 0);

  test_memory();
  test_vadd(&dev, 0);
  test_vadd(&dev, 1);
  test_shared(&dev);
  test_two_kernels(&dev);
  test_load_errors(&dev);
  TEST_END();
}
