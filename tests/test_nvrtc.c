/* NVRTC driver tests: hand-written kernels in the CUDA printer's style compiled for sm_86 and sm_90 (cubin, PTX,
 * the parsed ptxas report), compile errors, parallel batch compiles, and the limit checks. Needs no GPU; the
 * compile tests skip with a message when NVRTC cannot be loaded, the limit tests always run. */
#include "../runtime/nvrtc.h"
#include "testutil.h"
#include <stdint.h>

static const char *k_shared_src =
    "extern \"C\" __global__ void __launch_bounds__(256) kgen_k0(const float* __restrict__ a,\n"
    "    float* __restrict__ b) {\n"
    "  __shared__ float s[1024];\n"
    "  for (int i = threadIdx.x; i < 1024; i += 256) s[i] = a[blockIdx.x * 1024 + i];\n"
    "  __syncthreads();\n"
    "  for (int i = threadIdx.x; i < 1024; i += 256) b[blockIdx.x * 1024 + i] = s[1023 - i] * 2.0f;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(128) kgen_k1(const float* __restrict__ a,\n"
    "    float* __restrict__ b) {\n"
    "  float loc[512];\n"
    "  for (int i = 0; i < 512; i++) loc[i] = a[i * 128 + threadIdx.x];\n"
    "  int j = ((int)a[threadIdx.x]) & 511;\n"
    "  b[threadIdx.x] = loc[j] + loc[511 - j];\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(64) kgen_k2(const float* __restrict__ a, float* __restrict__ b) {\n"
    "  float4 v = ((const float4*)a)[blockIdx.x * 64 + threadIdx.x];\n"
    "  float acc = v.x + v.y + v.z + v.w;\n"
    "  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);\n"
    "  __shared__ float red[2];\n"
    "  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;\n"
    "  __syncthreads();\n"
    "  if (threadIdx.x == 0) b[blockIdx.x] = red[0] + red[1];\n"
    "}\n";

static kg_cuda_kernel kernels3[3] = {
    {"kgen_k0", {16, 1, 1}, {256, 1, 1}, 4096, 0},
    {"kgen_k1", {1, 1, 1}, {128, 1, 1}, 0, 0},
    {"kgen_k2", {16, 1, 1}, {64, 1, 1}, 8, 0},
};

static kg_cuda_program make_prog(const char *src, kg_cuda_kernel *k, int n) {
  kg_cuda_program p;
  memset(&p, 0, sizeof p);
  p.source = (char *)src;
  p.kernels = k;
  p.nkernels = n;
  p.nparams = 2;
  return p;
}

static void test_compile(const char *arch) {
  kg_cuda_program p = make_prog(k_shared_src, kernels3, 3);
  kg_cubin c;
  int rc = kg_nvrtc_compile(&p, arch, &c);
  CHECKF(rc == 0, "%s: %s", arch, c.log ? c.log : "(no log)");
  if (rc != 0) {
    kg_cubin_free(&c);
    return;
  }
  CHECK(strcmp(c.arch, arch) == 0);
  CHECK(c.cubin != NULL && c.cubin_size > 64);
  /* A cubin is an ELF image. */
  CHECK(c.cubin && memcmp(c.cubin, "\x7f" "ELF", 4) == 0);
  CHECK(c.ptx != NULL);
  CHECK_STR_CONTAINS(c.ptx, ".entry kgen_k0");
  CHECK_STR_CONTAINS(c.ptx, ".entry kgen_k2");
  CHECK_STR_CONTAINS(c.log, "ptxas");
  CHECK(c.compile_s > 0);
  CHECK(c.nres == 3);
  if (c.nres == 3) {
    /* In the program's order, whatever order ptxas reported them in. */
    CHECK(strcmp(c.res[0].name, "kgen_k0") == 0);
    CHECK(strcmp(c.res[1].name, "kgen_k1") == 0);
    CHECK(strcmp(c.res[2].name, "kgen_k2") == 0);
    for (int i = 0; i < 3; i++) {
      CHECKF(c.res[i].registers > 0 && c.res[i].registers <= 255, "%s %s: %d registers", arch, c.res[i].name,
             c.res[i].registers);
      CHECK(c.res[i].spill_stores >= 0 && c.res[i].spill_loads >= 0);
    }
    CHECKF(c.res[0].static_shared == 4096, "%s: k0 smem %lld", arch, (long long)c.res[0].static_shared);
    CHECKF(c.res[2].static_shared == 8, "%s: k2 smem %lld", arch, (long long)c.res[2].static_shared);
    CHECKF(c.res[1].static_shared == 0, "%s: k1 smem %lld", arch, (long long)c.res[1].static_shared);
    /* A dynamically indexed 2 KB array lives in local memory. */
    CHECKF(c.res[1].local_bytes >= 2048, "%s: k1 stack %lld", arch, (long long)c.res[1].local_bytes);
    CHECK(c.res[0].local_bytes == 0);
    /* __launch_bounds__(256) keeps k0 within 64K / 256 registers. */
    CHECK(c.res[0].registers <= 255);

    kg_gpu_limits l;
    char why[256] = "";
    CHECK(kg_gpu_limits_for_arch(arch, &l) == 0);
    CHECKF(kg_gpu_check_limits(&p, &c, &l, why, sizeof why) == 0, "%s", why);
  }
  kg_cubin_free(&c);
  CHECK(c.cubin == NULL && c.log == NULL && c.res == NULL);
}

static void test_errors(void) {
  const char *bad =
      "extern \"C\" __global__ void kgen_bad(const float* __restrict__ a, float* __restrict__ b) {\n"
      "  int i = threadIdx.x;\n"
      "  b[i] = a[i] +* ;\n"
      "}\n";
  kg_cuda_kernel k = {"kgen_bad", {1, 1, 1}, {32, 1, 1}, 0, 0};
  kg_cuda_program p = make_prog(bad, &k, 1);
  kg_cubin c;
  CHECK(kg_nvrtc_compile(&p, "sm_86", &c) == -1);
  CHECK_STR_CONTAINS(c.log, "kgen_bad.cu(3): error");
  CHECK_STR_CONTAINS(c.log, "NVRTC_ERROR_COMPILATION");
  CHECK(c.cubin == NULL && c.res == NULL);
  kg_cubin_free(&c);

  /* A kernel name the source does not define would fail at module load on the device: caught here. */
  kg_cuda_kernel kk[2] = {{"kgen_k0", {1, 1, 1}, {256, 1, 1}, 4096, 0}, {"kgen_k9", {1, 1, 1}, {1, 1, 1}, 0, 0}};
  p = make_prog(k_shared_src, kk, 2);
  CHECK(kg_nvrtc_compile(&p, "sm_86", &c) == -1);
  CHECK_STR_CONTAINS(c.log, "kernel kgen_k9 is not in the ptxas report");
  kg_cubin_free(&c);

  /* The arch goes into a compiler option: anything but sm_NN[a] is refused before NVRTC sees it. */
  p = make_prog(k_shared_src, kernels3, 3);
  const char *bad_arch[] = {"sm_8", "compute_86", "sm_86 -G", "", "sm_86x"};
  for (size_t i = 0; i < sizeof bad_arch / sizeof bad_arch[0]; i++) {
    CHECK(kg_nvrtc_compile(&p, bad_arch[i], &c) == -1);
    CHECK_STR_CONTAINS(c.log, "bad arch");
    kg_cubin_free(&c);
  }
  /* An arch NVRTC 13 does not support (sm_50 was dropped) fails with NVRTC's reason, not a crash. */
  CHECK(kg_nvrtc_compile(&p, "sm_50", &c) == -1);
  CHECK(c.log != NULL && c.log[0] != 0);
  kg_cubin_free(&c);
}

/* Eight variants with different shared arrays and block sizes; the batch must agree with one-by-one compiles. */
static void test_batch(void) {
  enum { N = 8 };
  char *src[N];
  kg_cuda_kernel k[N];
  kg_cuda_program progs[N];
  const kg_cuda_program *pp[N];
  for (int i = 0; i < N; i++) {
    int threads = 32 << (i % 4), elems = 256 * (i + 1);
    char buf[1024];
    snprintf(buf, sizeof buf,
             "extern \"C\" __global__ void __launch_bounds__(%d) kgen_b%d(const float* __restrict__ a, "
             "float* __restrict__ b) {\n"
             "  __shared__ float s[%d];\n"
             "  for (int j = threadIdx.x; j < %d; j += %d) s[j] = a[blockIdx.x * %d + j] * %d.0f;\n"
             "  __syncthreads();\n"
             "  for (int j = threadIdx.x; j < %d; j += %d) b[blockIdx.x * %d + j] = s[%d - j];\n"
             "}\n",
             threads, i, elems, elems, threads, elems, i + 1, elems, threads, elems, elems - 1);
    src[i] = strdup(buf);
    char *name = malloc(32);
    snprintf(name, 32, "kgen_b%d", i);
    k[i] = (kg_cuda_kernel){name, {4, 1, 1}, {threads, 1, 1}, elems * 4, 0};
    progs[i] = make_prog(src[i], &k[i], 1);
    pp[i] = &progs[i];
  }
  kg_cubin one[N], many[N];
  int rc_one[N], rc_many[N];
  for (int i = 0; i < N; i++) rc_one[i] = kg_nvrtc_compile(pp[i], "sm_90", &one[i]);
  kg_nvrtc_compile_batch(pp, N, "sm_90", many, rc_many, 0);
  for (int i = 0; i < N; i++) {
    CHECKF(rc_one[i] == 0 && rc_many[i] == 0, "variant %d: %s", i, many[i].log ? many[i].log : "");
    if (rc_one[i] != 0 || rc_many[i] != 0) continue;
    CHECK(many[i].nres == 1 && one[i].nres == 1);
    CHECKF(many[i].res[0].static_shared == k[i].static_shared, "variant %d: smem %lld, declared %lld", i,
           (long long)many[i].res[0].static_shared, (long long)k[i].static_shared);
    CHECK(many[i].res[0].registers == one[i].res[0].registers);
    CHECK(many[i].res[0].local_bytes == one[i].res[0].local_bytes);
    CHECK(many[i].cubin_size == one[i].cubin_size);
    CHECK(many[i].cubin_size == one[i].cubin_size && memcmp(many[i].cubin, one[i].cubin, one[i].cubin_size) == 0);
    CHECK(strcmp(many[i].ptx, one[i].ptx) == 0);
    CHECK_STR_CONTAINS(many[i].ptx, k[i].name);
  }
  /* A failing program in the middle of a batch fails alone. */
  free(src[3]);
  src[3] = strdup("extern \"C\" __global__ void kgen_b3(float* b) { b[0] = undeclared; }\n");
  progs[3].source = src[3];
  for (int i = 0; i < N; i++) kg_cubin_free(&many[i]);
  kg_nvrtc_compile_batch(pp, N, "sm_86", many, rc_many, 2);
  for (int i = 0; i < N; i++) {
    if (i == 3) {
      CHECK(rc_many[i] == -1);
      CHECK_STR_CONTAINS(many[i].log, "undeclared");
    } else {
      CHECKF(rc_many[i] == 0 && many[i].nres == 1, "variant %d", i);
    }
  }
  for (int i = 0; i < N; i++) {
    kg_cubin_free(&one[i]);
    kg_cubin_free(&many[i]);
    free(src[i]);
    free((char *)k[i].name);
  }
}

/* kg_gpu_check_limits against hand-made launches and ptxas reports. */
static void test_limits(void) {
  kg_gpu_limits l86, l90, l;
  char why[256];
  CHECK(kg_gpu_limits_for_arch("sm_86", &l86) == 0);
  CHECK(kg_gpu_limits_for_arch("sm_90", &l90) == 0);
  CHECK(kg_gpu_limits_for_arch("sm_90a", &l) == 0 && l.max_shared_optin == l90.max_shared_optin);
  CHECK(kg_gpu_limits_for_arch("sm_42", &l) == -1);
  CHECK(kg_gpu_limits_for_arch("gfx90a", &l) == -1);
  CHECK(l86.max_threads_per_block == 1024 && l90.max_threads_per_block == 1024);
  CHECK(l86.max_shared_static == 48 * 1024);
  CHECK(l86.max_shared_optin == 99 * 1024);
  CHECK(l90.max_shared_optin == 227 * 1024);
  CHECK(l86.max_regs_per_block == 65536 && l86.max_regs_per_thread == 255);
  CHECK(l86.max_block[2] == 64 && l86.max_grid[1] == 65535);

  kg_cuda_kernel k = {"kgen_k0", {8, 1, 1}, {256, 1, 1}, 4096, 0};
  kg_cuda_program p = make_prog("", &k, 1);
  CHECK(kg_gpu_check_limits(&p, NULL, &l86, why, sizeof why) == 0);

  k.block[0] = 64;
  k.block[1] = 32;
  CHECK(kg_gpu_check_limits(&p, NULL, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "kernel kgen_k0: 2048 threads per block > 1024");
  k.block[0] = 2048;
  k.block[1] = 1;
  CHECK(kg_gpu_check_limits(&p, NULL, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "block x extent 2048 > 1024");
  k.block[0] = 1;
  k.block[2] = 128;
  CHECK(kg_gpu_check_limits(&p, NULL, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "block z extent 128 > 64");
  k.block[0] = 256;
  k.block[2] = 1;
  k.grid[1] = 70000;
  CHECK(kg_gpu_check_limits(&p, NULL, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "grid y extent 70000 > 65535");
  k.grid[1] = 0;
  CHECK(kg_gpu_check_limits(&p, NULL, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "empty launch");
  k.grid[1] = 1;

  k.static_shared = 100 * 1024;
  CHECK(kg_gpu_check_limits(&p, NULL, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "102400 bytes of static shared memory > 49152");
  k.static_shared = 0;
  k.dynamic_shared = 100 * 1024;
  CHECK(kg_gpu_check_limits(&p, NULL, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "> 101376 per block");
  CHECK(kg_gpu_check_limits(&p, NULL, &l90, why, sizeof why) == 0);
  k.static_shared = 40 * 1024;
  k.dynamic_shared = 190 * 1024;
  CHECK(kg_gpu_check_limits(&p, NULL, &l90, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "(40960 static + 194560 dynamic)");
  k.static_shared = 4096;
  k.dynamic_shared = 0;

  /* Registers from a (hand-made) ptxas report. */
  kg_kernel_resources r;
  memset(&r, 0, sizeof r);
  snprintf(r.name, sizeof r.name, "kgen_k0");
  r.registers = 64;
  kg_cubin c;
  memset(&c, 0, sizeof c);
  c.res = &r;
  c.nres = 1;
  k.block[0] = 1024;
  CHECK(kg_gpu_check_limits(&p, &c, &l86, why, sizeof why) == 0); /* exactly 64K */
  r.registers = 65;                                                 /* rounds up to 72 per thread */
  CHECK(kg_gpu_check_limits(&p, &c, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "65 registers x 1024 threads needs 73728 registers per block > 65536");
  r.registers = 128;
  k.block[0] = 512;
  CHECK(kg_gpu_check_limits(&p, &c, &l86, why, sizeof why) == 0);
  k.block[0] = 520; /* 17 warps */
  CHECK(kg_gpu_check_limits(&p, &c, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "128 registers x 520 threads");
  r.registers = 300;
  k.block[0] = 32;
  CHECK(kg_gpu_check_limits(&p, &c, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "300 registers per thread > 255");
  /* The report's static shared counts too (the printer may not know what the compiler added). */
  r.registers = 32;
  r.static_shared = 60 * 1024;
  CHECK(kg_gpu_check_limits(&p, &c, &l86, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "61440 bytes of static shared memory");
}

/* NVRTC's compile cache (12.9+) returns a program compiled before without running ptxas, so without the report:
 * kgen turns it off where the NVRTC has one. The cache only works where a CUDA driver is installed, so the
 * repeated compile below proves it only on a GPU machine; the version rule is checked everywhere. */
static void test_cache(void) {
  CHECK(kg_nvrtc_cache_option(11, 8) == NULL);
  CHECK(kg_nvrtc_cache_option(12, 8) == NULL);
  CHECK(kg_nvrtc_cache_option(12, 9) && strcmp(kg_nvrtc_cache_option(12, 9), "--no-cache") == 0);
  CHECK(kg_nvrtc_cache_option(13, 0) && strcmp(kg_nvrtc_cache_option(13, 0), "--no-cache") == 0);
  CHECK(kg_nvrtc_cache_option(14, 0) != NULL);
  if (kg_nvrtc_available(NULL, 0) != 0) return;
  for (int i = 0; i < 3; i++) test_compile("sm_90"); /* the same source again: the report every time */
}

int main(void) {
  test_limits();
  test_cache();
  char why[512];
  if (kg_nvrtc_available(why, sizeof why) != 0) {
    printf("test_nvrtc: compile tests skipped: %s\n", why);
    TEST_END();
  }
  printf("test_nvrtc: NVRTC %s\n", kg_nvrtc_version());
  CHECK(kg_nvrtc_version()[0] != 0);
  test_compile("sm_86");
  test_compile("sm_90");
  test_errors();
  test_batch();
  TEST_END();
}
