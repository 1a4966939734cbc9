/* The CUDA emulator on hand-written kernels in the printer's style (extern "C" __global__ kernels plus their
 * KG_EMULATE entries): a tiled shared-memory matmul with barriers, block reductions with shuffles and shared memory
 * across warps (256, 96 and 8 threads), shuffle variants and masks, float2/float4, dynamic shared memory, 3-D
 * indices, two kernels through a temporary; and the failures the emulator exists to catch: missing barriers and
 * unwritten shared data give wrong answers, divergent barriers and shuffles and misaligned float2/float4 accesses
 * stop the launch naming the line, and a compile error returns the compiler's log. Every kernel lives in one source so the test compiles only a few
 * times (each g++ run costs a few tenths of a second). */
#include <math.h>
#include <stdint.h>
#include "../base/strbuf.h"
#include "../runtime/emu.h"
#include "testutil.h"

#define CHECK_MSG(arr, needle)          \
  do {                                  \
    const char *msg_ = (arr);           \
    CHECK_STR_CONTAINS(msg_, (needle)); \
  } while (0)

static const char *const prologue =
    "#ifndef KG_EMULATE\n"
    "#define KG_DYNAMIC_SHARED(name) extern __shared__ __align__(16) float name[]\n"
    "#endif\n";

/* A 16x16-tiled matmul C[40x48] = A[40x37] B[37x48]; sync1/sync2 say whether the barriers after the loads and
 * after the products are there. */
static void add_matmul(kg_strbuf *b, const char *name, int sync1, int sync2) {
  kg_strbuf_printf(b,
                   "extern \"C\" __global__ void __launch_bounds__(256) %s(const float* __restrict__ A, "
                   "const float* __restrict__ B, float* __restrict__ C) {\n"
                   "  __shared__ __align__(16) float As[16][16];\n"
                   "  __shared__ float Bs[16][17];\n"
                   "  int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;\n"
                   "  float acc = 0.0f;\n"
                   "  for (int k0 = 0; k0 < 37; k0 += 16) {\n"
                   "    As[threadIdx.y][threadIdx.x] = (row < 40 && k0 + (int)threadIdx.x < 37) ? "
                   "A[row * 37 + k0 + threadIdx.x] : 0.0f;\n"
                   "    Bs[threadIdx.y][threadIdx.x] = (k0 + (int)threadIdx.y < 37 && col < 48) ? "
                   "B[(k0 + threadIdx.y) * 48 + col] : 0.0f;\n"
                   "    %s\n"
                   "#pragma unroll\n"
                   "    for (int k = 0; k < 16; k++) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];\n"
                   "    %s\n"
                   "  }\n"
                   "  if (row < 40 && col < 48) C[row * 48 + col] = acc;\n"
                   "}\n"
                   "#ifdef KG_EMULATE\n"
                   "extern \"C\" void %s__emu(float **a) { %s(a[0], a[1], a[2]); }\n"
                   "#endif\n",
                   name, sync1 ? "__syncthreads();" : "", sync2 ? "__syncthreads();" : "", name, name);
}

/* Row sums of X[5x300], one block per row: per-thread partials, shuffles within warps, shared memory across warps.
 * guarded: offsets past the block size are skipped (what a correct kernel for 8 threads must do). */
static void add_rowsum(kg_strbuf *b, const char *name, int guarded) {
  const char *g = guarded ? "if (off < (int)blockDim.x) " : "";
  kg_strbuf_printf(b,
                   "extern \"C\" __global__ void __launch_bounds__(1024) %s(const float* __restrict__ X, "
                   "float* __restrict__ out) {\n"
                   "  __shared__ float warp_sums[32];\n"
                   "  float v = 0.0f;\n"
                   "  for (int i = threadIdx.x; i < 300; i += blockDim.x) v += X[blockIdx.x * 300 + i];\n"
                   "  for (int off = 16; off > 0; off >>= 1) %sv += __shfl_xor_sync(0xffffffff, v, off);\n"
                   "  int lane = threadIdx.x %% 32, warp = threadIdx.x / 32, nwarps = (blockDim.x + 31) / 32;\n"
                   "  if (lane == 0) warp_sums[warp] = v;\n"
                   "  __syncthreads();\n"
                   "  if (warp == 0) {\n"
                   "    v = lane < nwarps ? warp_sums[lane] : 0.0f;\n"
                   "    for (int off = 16; off > 0; off >>= 1) %sv += __shfl_down_sync(0xffffffff, v, off);\n"
                   "    if (lane == 0) out[blockIdx.x] = v;\n"
                   "  }\n"
                   "}\n"
                   "#ifdef KG_EMULATE\n"
                   "extern \"C\" void %s__emu(float **a) { %s(a[0], a[1]); }\n"
                   "#endif\n",
                   name, g, g, name, name);
}

static const char *const misc_kernels =
    /* shuffle variants on 64 threads (two warps) */
    "extern \"C\" __global__ void __launch_bounds__(64) shfl_misc(const float* __restrict__ x, float* __restrict__ "
    "out) {\n"
    "  int t = threadIdx.x;\n"
    "  float v = x[t];\n"
    "  out[t] = __shfl_sync(0xffffffff, v, 3);\n"
    "  out[64 + t] = __shfl_sync(0xffffffff, v, 5, 8);\n"
    "  out[128 + t] = __shfl_up_sync(0xffffffff, v, 2);\n"
    "  out[192 + t] = __shfl_xor_sync(0xffffffff, v, 3, 4);\n"
    "  out[256 + t] = (float)__shfl_down_sync(0xffffffff, t * 10, 1, 16);\n"
    "  out[320 + t] = __activemask() == 0xffffffffu ? 1.0f : 0.0f;\n"
    "  if (t % 32 < 16) out[384 + t] = __shfl_xor_sync(0x0000ffffu, v, 1);\n"
    "  else out[384 + t] = -1.0f;\n"
    "  __syncwarp();\n"
    "  out[448 + t] = __int_as_float(__float_as_int(v)) + rsqrtf(4.0f) + __fdividef(1.0f, 4.0f) + "
    "fmaxf(0.0f, -v) * 0.0f;\n"
    "}\n"
    "#ifdef KG_EMULATE\n"
    "extern \"C\" void shfl_misc__emu(float **a) { shfl_misc(a[0], a[1]); }\n"
    "#endif\n"
    /* float4 and float2 loads and stores */
    "static_assert(sizeof(float4) == 16 && alignof(float4) == 16 && sizeof(float2) == 8 && alignof(float2) == 8, "
    "\"vector types\");\n"
    "extern \"C\" __global__ void __launch_bounds__(32) vec(const float* __restrict__ a, float* __restrict__ out4, "
    "float* __restrict__ out2) {\n"
    "  int i = blockIdx.x * 32 + threadIdx.x;\n"
    "  float4 v = *reinterpret_cast<const float4*>(a + 4 * i);\n"
    "  float2 w = ((const float2*)a)[i];\n"
    "  *reinterpret_cast<float4*>(out4 + 4 * i) = make_float4(v.w, v.z * 2.0f, v.y, v.x + 1.0f);\n"
    "  ((float2*)out2)[i] = make_float2(w.y, w.x);\n"
    "}\n"
    "#ifdef KG_EMULATE\n"
    "extern \"C\" void vec__emu(float **a) { vec(a[0], a[1], a[2]); }\n"
    "#endif\n"
    /* 64 KB of dynamic shared memory per block: each block reverses its 16384 floats */
    "extern \"C\" __global__ void __launch_bounds__(128) dyn_rev(const float* __restrict__ a, float* __restrict__ "
    "out) {\n"
    "  KG_DYNAMIC_SHARED(kg_dyn_smem);\n"
    "  for (int i = threadIdx.x; i < 16384; i += 128) kg_dyn_smem[i] = a[blockIdx.x * 16384 + i];\n"
    "  __syncthreads();\n"
    "  for (int i = threadIdx.x; i < 16384; i += 128) out[blockIdx.x * 16384 + i] = kg_dyn_smem[16383 - i];\n"
    "}\n"
    "#ifdef KG_EMULATE\n"
    "extern \"C\" void dyn_rev__emu(float **a) { dyn_rev(a[0], a[1]); }\n"
    "#endif\n"
    /* reads shared memory (static and dynamic) before writing it: every block must see the poison, even after an
     * earlier block wrote it */
    "extern \"C\" __global__ void __launch_bounds__(32) read_first(float* __restrict__ out) {\n"
    "  KG_DYNAMIC_SHARED(kg_dyn_smem);\n"
    "  __shared__ float s[32];\n"
    "  out[blockIdx.x * 64 + threadIdx.x] = s[threadIdx.x];\n"
    "  out[blockIdx.x * 64 + 32 + threadIdx.x] = kg_dyn_smem[threadIdx.x];\n"
    "  s[threadIdx.x] = 1.0f;\n"
    "  kg_dyn_smem[threadIdx.x] = 2.0f;\n"
    "}\n"
    "#ifdef KG_EMULATE\n"
    "extern \"C\" void read_first__emu(float **a) { read_first(a[0]); }\n"
    "#endif\n"
    /* 3-D grid and block indices */
    "extern \"C\" __global__ void __launch_bounds__(60) idx3(float* __restrict__ out) {\n"
    "  int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);\n"
    "  int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n"
    "  int e = (b * blockDim.x * blockDim.y * blockDim.z + t) * 3;\n"
    "  out[e] = threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z;\n"
    "  out[e + 1] = blockIdx.x + 10 * blockIdx.y + 100 * blockIdx.z;\n"
    "  out[e + 2] = gridDim.x + 10 * gridDim.y + 100 * gridDim.z + 1000 * (blockDim.x + 10 * blockDim.y + "
    "100 * blockDim.z);\n"
    "}\n"
    "#ifdef KG_EMULATE\n"
    "extern \"C\" void idx3__emu(float **a) { idx3(a[0]); }\n"
    "#endif\n"
    /* shared memory declared in a device helper and at file scope */
    "__shared__ float file_scope_shared[32];\n"
    "__device__ __forceinline__ float mirror(float v) {\n"
    "  __shared__ float hs[32];\n"
    "  hs[threadIdx.x] = v;\n"
    "  file_scope_shared[threadIdx.x] = 2.0f * v;\n"
    "  __syncthreads();\n"
    "  return hs[31 - threadIdx.x] + file_scope_shared[(threadIdx.x + 1) % 32];\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(32) helper_shared(float* __restrict__ out) {\n"
    "  out[blockIdx.x * 32 + threadIdx.x] = mirror((float)(threadIdx.x + blockIdx.x));\n"
    "}\n"
    "#ifdef KG_EMULATE\n"
    "extern \"C\" void helper_shared__emu(float **a) { helper_shared(a[0]); }\n"
    "#endif\n"
    /* two kernels through a global temporary: out = (2a + 1) * a */
    "__device__ __forceinline__ float twice_plus_one(float x) { return 2.0f * x + 1.0f; }\n"
    "extern \"C\" __global__ void __launch_bounds__(32) seq_k0(const float* __restrict__ a, float* __restrict__ out, "
    "float* tmp) {\n"
    "  int i = blockIdx.x * 32 + threadIdx.x;\n"
    "  if (i < 100) tmp[i] = twice_plus_one(a[i]);\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(32) seq_k1(const float* __restrict__ a, float* __restrict__ out, "
    "float* tmp) {\n"
    "  int i = blockIdx.x * 32 + threadIdx.x;\n"
    "  if (i < 100) out[i] = tmp[i] * a[i];\n"
    "}\n"
    "#ifdef KG_EMULATE\n"
    "extern \"C\" void seq_k0__emu(float **a) { seq_k0(a[0], a[1], a[2]); }\n"
    "extern \"C\" void seq_k1__emu(float **a) { seq_k1(a[0], a[1], a[2]); }\n"
    "#endif\n"
    /* errors, each on a line its marker comment names */
    "extern \"C\" __global__ void __launch_bounds__(32) bad_if_sync(float* __restrict__ out) {\n"
    "  if (threadIdx.x < 16) {\n"
    "    __syncthreads(); /* MARK_IF_SYNC */\n"
    "  }\n"
    "  out[threadIdx.x] = 1.0f;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(32) bad_two_lines(float* __restrict__ out) {\n"
    "  if (threadIdx.x % 2)\n"
    "    __syncthreads(); /* MARK_ODD */\n"
    "  else\n"
    "    __syncthreads(); /* MARK_EVEN */\n"
    "  out[threadIdx.x] = 1.0f;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(64) bad_shfl(float* __restrict__ out) {\n"
    "  float v = threadIdx.x;\n"
    "  if (threadIdx.x < 20) v = __shfl_xor_sync(0xffffffff, v, 1); /* MARK_SHFL */\n"
    "  out[threadIdx.x] = v;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(32) bad_mask(float* __restrict__ out) {\n"
    "  out[threadIdx.x] = __shfl_xor_sync(0x1, 1.0f, 1); /* MARK_MASK */\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(32) bad_return(float* __restrict__ out) {\n"
    "  if (threadIdx.x >= 8) return;\n"
    "  __syncthreads(); /* MARK_RETURN */\n"
    "  out[threadIdx.x] = 1.0f;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(32) bad_align_load(float* __restrict__ out) {\n"
    "  float4 v = *reinterpret_cast<const float4*>(out + 4 * threadIdx.x + 2); /* MARK_ALIGN */\n"
    "  out[threadIdx.x] = v.x;\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(32) bad_align_store(float* __restrict__ out) {\n"
    "  if (threadIdx.x == 3) ((float2*)(out + 1))[0] = make_float2(1.0f, 2.0f);\n"
    "}\n"
    "#ifdef KG_EMULATE\n"
    "extern \"C\" void bad_align_load__emu(float **a) { bad_align_load(a[0]); }\n"
    "extern \"C\" void bad_align_store__emu(float **a) { bad_align_store(a[0]); }\n"
    "extern \"C\" void bad_if_sync__emu(float **a) { bad_if_sync(a[0]); }\n"
    "extern \"C\" void bad_two_lines__emu(float **a) { bad_two_lines(a[0]); }\n"
    "extern \"C\" void bad_shfl__emu(float **a) { bad_shfl(a[0]); }\n"
    "extern \"C\" void bad_mask__emu(float **a) { bad_mask(a[0]); }\n"
    "extern \"C\" void bad_return__emu(float **a) { bad_return(a[0]); }\n"
    "#endif\n";

static const char *source;  /* the one source every view below shares */
static kg_emu_module module;

/* "line N" of the line holding marker in source. */
static void line_of(const char *marker, char *out, size_t n) {
  const char *at = strstr(source, marker);
  int line = 1;
  for (const char *c = source; at && c < at; c++) line += *c == '\n';
  snprintf(out, n, "line %d", at ? line : -1);
}

static float frand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((*s >> 40) % 2001) / 1000.0f - 1.0f + 1.0f / 1024;
}

static int is_nan_bits(float f) { return f != f; }

/* Runs kernels of the shared module as one program (in order) with the given launch shapes. */
static int run(kg_cuda_kernel *ks, int nk, int nparams, int ntemps, int64_t *temp_elems, float **args, char *err,
               size_t errlen) {
  kg_cuda_program p = {0};
  p.source = (char *)source;
  p.kernels = ks;
  p.nkernels = nk;
  p.nparams = nparams;
  p.ntemps = ntemps;
  p.temp_elems = temp_elems;
  return kg_emu_run_program(&module, &p, args, err, errlen);
}

static kg_cuda_kernel kernel(const char *name, int64_t gx, int64_t gy, int64_t gz, int64_t bx, int64_t by,
                             int64_t bz, int64_t dyn) {
  kg_cuda_kernel k = {name, {gx, gy, gz}, {bx, by, bz}, 0, dyn};
  return k;
}

static void fill_nan(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = NAN;
}

static void test_matmul(void) {
  enum { M = 40, N = 48, K = 37 };
  static float A[M * K], B[K * N], C[M * N], R[M * N];
  uint64_t s = 1;
  for (int i = 0; i < M * K; i++) A[i] = frand(&s);
  for (int i = 0; i < K * N; i++) B[i] = frand(&s);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0;
      for (int k = 0; k < K; k++) acc += (double)A[i * K + k] * B[k * N + j];
      R[i * N + j] = (float)acc;
    }
  float *args[] = {A, B, C};
  char err[1024];
  static const char *const names[] = {"mm", "mm_nosync1", "mm_nosync2"};
  for (int v = 0; v < 3; v++) {
    fill_nan(C, M * N);
    kg_cuda_kernel k = kernel(names[v], 3, 3, 1, 16, 16, 1, 0);
    int rc = run(&k, 1, 3, 0, NULL, args, err, sizeof err);
    CHECKF(rc == 0, "%s: %s", names[v], err);
    int bad = 0;
    for (int i = 0; i < M * N; i++) bad += !(fabsf(C[i] - R[i]) <= 1e-4f * (1 + fabsf(R[i])));
    if (v == 0) CHECKF(bad == 0, "matmul: %d of %d wrong", bad, M * N);
    else CHECKF(bad > 0, "%s: a missing barrier went unnoticed", names[v]); /* the point of fibers + poison */
  }
}

static void test_rowsum(void) {
  enum { ROWS = 5, L = 300 };
  static float X[ROWS * L], out[ROWS];
  double ref[ROWS];
  uint64_t s = 2;
  for (int i = 0; i < ROWS * L; i++) X[i] = frand(&s);
  for (int r = 0; r < ROWS; r++) {
    ref[r] = 0;
    for (int i = 0; i < L; i++) ref[r] += X[r * L + i];
  }
  float *args[] = {X, out};
  char err[1024];
  static const int threads[] = {256, 96, 8, 1024};
  for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
    fill_nan(out, ROWS);
    kg_cuda_kernel k = kernel("rowsum", ROWS, 1, 1, threads[t], 1, 1, 0);
    int rc = run(&k, 1, 2, 0, NULL, args, err, sizeof err);
    CHECKF(rc == 0, "rowsum %d threads: %s", threads[t], err);
    for (int r = 0; r < ROWS; r++)
      CHECKF(fabs(out[r] - ref[r]) <= 1e-4 * (1 + fabs(ref[r])), "rowsum %d threads, row %d: %g vs %g", threads[t], r,
             out[r], ref[r]);
  }
  /* Without the guard, 8 threads shuffle with lanes 8..31, which do not exist: CUDA leaves those values undefined,
   * the emulator makes them NaN. With 256 threads the unguarded kernel is right. */
  fill_nan(out, ROWS);
  kg_cuda_kernel k = kernel("rowsum_unguarded", ROWS, 1, 1, 8, 1, 1, 0);
  CHECKF(run(&k, 1, 2, 0, NULL, args, err, sizeof err) == 0, "%s", err);
  CHECK(is_nan_bits(out[0]));
  k.block[0] = 256;
  CHECKF(run(&k, 1, 2, 0, NULL, args, err, sizeof err) == 0, "%s", err);
  CHECK(fabs(out[3] - ref[3]) <= 1e-4 * (1 + fabs(ref[3])));
}

static void test_shuffles(void) {
  static float x[64], out[512];
  for (int i = 0; i < 64; i++) x[i] = (float)(i * i % 97) - 40.0f;
  fill_nan(out, 512);
  float *args[] = {x, out};
  char err[1024];
  kg_cuda_kernel k = kernel("shfl_misc", 1, 1, 1, 64, 1, 1, 0);
  CHECKF(run(&k, 1, 2, 0, NULL, args, err, sizeof err) == 0, "%s", err);
  int bad = 0;
  for (int t = 0; t < 64; t++) {
    int w = t & ~31, l = t & 31;
    float e[8];
    e[0] = x[w + 3];
    e[1] = x[w + (l & ~7) + 5];
    e[2] = l >= 2 ? x[t - 2] : x[t];
    e[3] = x[w + (l ^ 3)];
    e[4] = (float)(((l & 15) + 1 < 16 ? t + 1 : t) * 10);
    e[5] = 1.0f;
    e[6] = l < 16 ? x[t ^ 1] : -1.0f;
    e[7] = x[t] + 0.5f + 0.25f;
    for (int j = 0; j < 8; j++)
      if (!(out[j * 64 + t] == e[j])) {
        if (bad++ < 5) fprintf(stderr, "shfl_misc: out[%d][%d] = %g, expected %g\n", j, t, out[j * 64 + t], e[j]);
      }
  }
  CHECKF(bad == 0, "%d wrong", bad);
}

static void test_vectors(void) {
  enum { BLOCKS = 3, N4 = BLOCKS * 32 * 4 };
  static float a[N4], o4[N4], o2[N4 / 2];
  uint64_t s = 3;
  for (int i = 0; i < N4; i++) a[i] = frand(&s);
  fill_nan(o4, N4);
  fill_nan(o2, N4 / 2);
  float *args[] = {a, o4, o2};
  char err[1024];
  kg_cuda_kernel k = kernel("vec", BLOCKS, 1, 1, 32, 1, 1, 0);
  CHECKF(run(&k, 1, 3, 0, NULL, args, err, sizeof err) == 0, "%s", err);
  int bad = 0;
  for (int i = 0; i < N4 / 4; i++) {
    bad += o4[4 * i] != a[4 * i + 3] || o4[4 * i + 1] != a[4 * i + 2] * 2 || o4[4 * i + 2] != a[4 * i + 1] ||
           o4[4 * i + 3] != a[4 * i] + 1;
    bad += o2[2 * i] != a[2 * i + 1] || o2[2 * i + 1] != a[2 * i];
  }
  CHECKF(bad == 0, "%d wrong", bad);
}

static void test_dynamic_shared(void) {
  enum { N = 2 * 16384 };
  float *a = malloc(N * sizeof *a), *out = malloc(N * sizeof *out);
  uint64_t s = 4;
  for (int i = 0; i < N; i++) a[i] = frand(&s);
  fill_nan(out, N);
  float *args[] = {a, out};
  char err[1024];
  kg_cuda_kernel k = kernel("dyn_rev", 2, 1, 1, 128, 1, 1, 65536);
  CHECKF(run(&k, 1, 2, 0, NULL, args, err, sizeof err) == 0, "%s", err);
  int bad = 0;
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 16384; i++) bad += out[b * 16384 + i] != a[b * 16384 + 16383 - i];
  CHECKF(bad == 0, "%d wrong", bad);
  free(a);
  free(out);

  /* shared memory holds NaN at the start of every block, static and dynamic alike */
  static float o[3 * 64];
  for (int i = 0; i < 3 * 64; i++) o[i] = 0;
  float *args2[] = {o};
  k = kernel("read_first", 3, 1, 1, 32, 1, 1, 128);
  CHECKF(run(&k, 1, 1, 0, NULL, args2, err, sizeof err) == 0, "%s", err);
  int nans = 0;
  for (int i = 0; i < 3 * 64; i++) nans += is_nan_bits(o[i]);
  CHECKF(nans == 3 * 64, "%d of %d reads of unwritten shared memory were NaN", nans, 3 * 64);
}

static void test_indices(void) {
  enum { NB = 2 * 3 * 2, NT = 5 * 3 * 4 };
  static float out[NB * NT * 3];
  fill_nan(out, NB * NT * 3);
  float *args[] = {out};
  char err[1024];
  kg_cuda_kernel k = kernel("idx3", 2, 3, 2, 5, 3, 4, 0);
  CHECKF(run(&k, 1, 1, 0, NULL, args, err, sizeof err) == 0, "%s", err);
  int bad = 0;
  for (int bz = 0; bz < 2; bz++)
    for (int by = 0; by < 3; by++)
      for (int bx = 0; bx < 2; bx++)
        for (int tz = 0; tz < 4; tz++)
          for (int ty = 0; ty < 3; ty++)
            for (int tx = 0; tx < 5; tx++) {
              int b = bx + 2 * (by + 3 * bz), t = tx + 5 * (ty + 3 * tz), e = (b * NT + t) * 3;
              bad += out[e] != tx + 10 * ty + 100 * tz || out[e + 1] != bx + 10 * by + 100 * bz ||
                     out[e + 2] != 2 + 30 + 200 + 1000 * (5 + 30 + 400);
            }
  CHECKF(bad == 0, "%d wrong", bad);
}

static void test_helper_shared(void) {
  static float out[64];
  fill_nan(out, 64);
  float *args[] = {out};
  char err[1024];
  kg_cuda_kernel k = kernel("helper_shared", 2, 1, 1, 32, 1, 1, 0);
  CHECKF(run(&k, 1, 1, 0, NULL, args, err, sizeof err) == 0, "%s", err);
  int bad = 0;
  for (int b = 0; b < 2; b++)
    for (int t = 0; t < 32; t++) bad += out[b * 32 + t] != (float)(31 - t + b) + 2.0f * (float)((t + 1) % 32 + b);
  CHECKF(bad == 0, "%d wrong", bad);
}

static void test_two_kernels(void) {
  static float a[100], out[100], tmp[128];
  uint64_t s = 5;
  for (int i = 0; i < 100; i++) a[i] = frand(&s);
  fill_nan(out, 100);
  fill_nan(tmp, 128);
  float *args[] = {a, out, tmp};
  char err[1024];
  kg_cuda_kernel ks[2] = {kernel("seq_k0", 4, 1, 1, 32, 1, 1, 0), kernel("seq_k1", 4, 1, 1, 32, 1, 1, 0)};
  int64_t temp_elems[] = {128};
  CHECKF(run(ks, 2, 2, 1, temp_elems, args, err, sizeof err) == 0, "%s", err);
  int bad = 0;
  for (int i = 0; i < 100; i++) bad += out[i] != (2 * a[i] + 1) * a[i];
  CHECKF(bad == 0, "%d wrong", bad);
}

static void expect_error(const char *name, int64_t threads, const char *const needles[], int nneedles) {
  static float out[1024] __attribute__((aligned(16)));
  float *args[] = {out};
  char err[1024];
  kg_cuda_kernel k = kernel(name, 2, 1, 1, threads, 1, 1, 0);
  int rc = run(&k, 1, 1, 0, NULL, args, err, sizeof err);
  CHECKF(rc == -1, "%s ran without an error", name);
  for (int i = 0; i < nneedles; i++) CHECK_MSG(err, needles[i]);
}

static void test_errors(void) {
  char l1[32], l2[32];
  line_of("MARK_IF_SYNC", l1, sizeof l1);
  expect_error("bad_if_sync", 32, (const char *[]){"kernel bad_if_sync", "block (0,0,0)", l1, "exited"}, 4);
  line_of("MARK_ODD", l1, sizeof l1);
  line_of("MARK_EVEN", l2, sizeof l2);
  expect_error("bad_two_lines", 32, (const char *[]){l1, l2}, 2);
  line_of("MARK_SHFL", l1, sizeof l1);
  expect_error("bad_shfl", 64, (const char *[]){l1, "lane 20", "exited"}, 3);
  line_of("MARK_MASK", l1, sizeof l1);
  expect_error("bad_mask", 32, (const char *[]){l1, "not in its mask"}, 2);
  line_of("MARK_RETURN", l1, sizeof l1);
  expect_error("bad_return", 32, (const char *[]){l1, "thread (8,0,0)", "exited"}, 3);
  line_of("MARK_ALIGN", l1, sizeof l1);
  expect_error("bad_align_load", 32, (const char *[]){"float4 load", l1, "thread (0,0,0)", "16-byte aligned"}, 4);
  expect_error("bad_align_store", 32, (const char *[]){"float2 store", "thread (3,0,0)", "8-byte aligned"}, 3);

  /* launch shapes past the hardware's limits */
  static float out[8];
  float *args[] = {out};
  char err[512];
  kg_cuda_kernel k = kernel("idx3", 1, 1, 1, 1025, 1, 1, 0);
  CHECK(run(&k, 1, 1, 0, NULL, args, err, sizeof err) == -1);
  CHECK_MSG(err, "1025");
  k = kernel("idx3", 1, 1, 1, 32, 32, 2, 0);
  CHECK(run(&k, 1, 1, 0, NULL, args, err, sizeof err) == -1);
  CHECK_MSG(err, "2048 threads");
  k = kernel("no_such_kernel", 1, 1, 1, 32, 1, 1, 0);
  CHECK(run(&k, 1, 1, 0, NULL, args, err, sizeof err) == -1);
  CHECK_MSG(err, "no_such_kernel__emu");

  /* after errors, the module still runs kernels correctly */
  static float a[100], o[100], tmp[128];
  for (int i = 0; i < 100; i++) a[i] = (float)i;
  float *args3[] = {a, o, tmp};
  kg_cuda_kernel ks[2] = {kernel("seq_k0", 4, 1, 1, 32, 1, 1, 0), kernel("seq_k1", 4, 1, 1, 32, 1, 1, 0)};
  int64_t te[] = {128};
  CHECKF(run(ks, 2, 2, 1, te, args3, err, sizeof err) == 0, "%s", err);
  CHECK(o[7] == 15.0f * 7.0f);
}

static void test_build_failures(void) {
  kg_cuda_kernel k = kernel("broken", 1, 1, 1, 32, 1, 1, 0);
  kg_cuda_program p = {0};
  p.source = (char *)"extern \"C\" __global__ void broken(float* __restrict__ out) { out[0] = undefined_name; }\n"
                     "#ifdef KG_EMULATE\nextern \"C\" void broken__emu(float **a) { broken(a[0]); }\n#endif\n";
  p.kernels = &k;
  p.nkernels = 1;
  p.nparams = 1;
  kg_emu_module m;
  CHECK(kg_emu_build(&p, &m) == -1);
  CHECK_STR_CONTAINS(m.log, "undefined_name");
  CHECK_STR_CONTAINS(m.log, "kernel.cu:1");
  CHECK(m.dir == NULL); /* the folder is gone already */
  kg_emu_module_free(&m);

  /* compiles, but the KG_EMULATE entry is missing: caught at build */
  p.source = (char *)"extern \"C\" __global__ void broken(float* __restrict__ out) { out[0] = 1.0f; }\n";
  CHECK(kg_emu_build(&p, &m) == -1);
  CHECK_STR_CONTAINS(m.log, "broken__emu");
  kg_emu_module_free(&m);

  /* a compiler that cannot be started */
  const char *old = getenv("CXX");
  char *saved = old ? strdup(old) : NULL;
  setenv("CXX", "/nonexistent/kgen-test-c++", 1);
  CHECK(kg_emu_build(&p, &m) == -1);
  CHECK_STR_CONTAINS(m.log, "/nonexistent/kgen-test-c++");
  kg_emu_module_free(&m);
  if (saved) setenv("CXX", saved, 1);
  else unsetenv("CXX");
  free(saved);
}

/* The embedded header is the file, byte for byte (the Makefile's escaping loses nothing). */
static void test_embedded_header(void) {
  size_t n = 0;
  char *text = kg_test_read_file("runtime/cuda_emu.h", &n);
  CHECK(text != NULL);
  if (text) CHECK(strlen(kg_cuda_emu_header) == n && memcmp(text, kg_cuda_emu_header, n) == 0);
  free(text);
  CHECK(strstr(kg_cuda_emu_header, "KG_DYNAMIC_SHARED") != NULL);
}

int main(void) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_strbuf_puts(&b, prologue);
  add_matmul(&b, "mm", 1, 1);
  add_matmul(&b, "mm_nosync1", 0, 1);
  add_matmul(&b, "mm_nosync2", 1, 0);
  add_rowsum(&b, "rowsum", 1);
  add_rowsum(&b, "rowsum_unguarded", 0);
  kg_strbuf_puts(&b, misc_kernels);
  source = b.s;
  static const char *const names[] = {"mm", "rowsum", "shfl_misc", "vec", "dyn_rev", "read_first", "idx3",
                                      "seq_k0", "seq_k1", "bad_if_sync", "bad_shfl"};
  kg_cuda_kernel ks[sizeof names / sizeof *names];
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) ks[i] = kernel(names[i], 1, 1, 1, 1, 1, 1, 0);
  kg_cuda_program p = {0};
  p.source = b.s;
  p.kernels = ks;
  p.nkernels = (int)(sizeof names / sizeof *names);
  int rc = kg_emu_build(&p, &module);
  CHECKF(rc == 0, "build failed:\n%s", module.log ? module.log : "(no log)");
  if (rc == 0) {
    printf("emulator module compiled in %.2f s\n", module.compile_s);
    test_matmul();
    test_rowsum();
    test_shuffles();
    test_vectors();
    test_dynamic_shared();
    test_indices();
    test_helper_shared();
    test_two_kernels();
    test_errors();
  }
  kg_emu_module_free(&module);
  test_build_failures();
  test_embedded_header();
  kg_strbuf_free(&b);
  TEST_END();
}
