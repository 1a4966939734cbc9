/* The CUDA printer and the CUDA side of lowering on hand-made schedules: the printed source and launch table are
 * asserted (bound loops, shared and register arrays, barriers, shuffles, float4, dynamic shared memory, the
 * single-writer guard), every printed source is compiled for sm_90 (NVRTC, else nvcc; skipped with a message when
 * neither is there), and the kernels run on the CUDA emulator against the reference evaluator. Illegal schedules
 * must fail with their message: a barrier or a cross-thread reduction under a guarded thread loop, thread-bound
 * loops in a per-thread stage, launches past the limits, an oversized per-thread region. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../base/strbuf.h"
#include "../codegen/codegen.h"
#include "../runtime/emu.h"
#include "../runtime/nvrtc.h"
#include "../runtime/verify.h"
#include "../lower/ir.h"
#include "testlib.h"
#include "testutil.h"

static const char *const ROWSUM =
    "def rowsum(X: f32[N, D]) -> (S: f32[N]) {\n"
    "  S[i] = sum[j](X[i, j] * 0.5)\n"
    "}\n";
static const char *const EWISE =
    "def ewise(A: f32[N, M], B: f32[N, M]) -> (C: f32[N, M]) {\n"
    "  C[i, j] = A[i, j] + B[i, j] * 2.0 + tanh(A[i, 0])\n"
    "}\n";
static const char *const SHIFT =
    "def shift(A: f32[N, M1]) -> (C: f32[N, M]) {\n"
    "  C[i, j] = A[i, j + 1] * 3.0\n"
    "}\n";
static const char *const COPY =
    "def copy(A: f32[N, M]) -> (C: f32[N, M]) {\n"
    "  C[i, j] = A[i, j]\n"
    "}\n";

typedef struct result {
  int rc;         /* 0 printed; -1 lowering or printing failed (msg) */
  int cg_rc;      /* kg_codegen_cuda's return: 0, -1 (illegal), -2 (beyond a hardware limit) */
  char msg[2048];
  char *ir;       /* heap */
  kg_cuda_program cp;
} result;

/* A load failure fails the test, not only the case. */
static kg_program *load(const char *src, const char *sizes) {
  kg_program *p = kg_test_load_sizes(src, sizes);
  CHECKF(p != NULL, "the program does not load at %s", sizes);
  return p;
}

/* Applies trace, lowers for CUDA and prints; the IR dump is kept. */
static result gen(const kg_program *p, const char *trace) {
  result r;
  memset(&r, 0, sizeof r);
  r.rc = -1;
  kg_trace t;
  kg_trace_init(&t);
  char err[1024];
  if (kg_trace_parse(&t, "trace", trace, strlen(trace), err, sizeof err)) {
    snprintf(r.msg, sizeof r.msg, "parse: %s", err);
    kg_trace_free(&t);
    return r;
  }
  kg_schedule *s = kg_schedule_new(p);
  if (kg_schedule_apply_trace(s, &t, err, sizeof err)) {
    snprintf(r.msg, sizeof r.msg, "apply: %s", err);
  } else {
    kg_arena la;
    kg_arena_init(&la);
    kg_lowered *f = kg_lower(s, KG_TARGET_CUDA, &la, err, sizeof err);
    if (f && kg_ir_verify(f, err, sizeof err) != 0) f = NULL; /* as a lowering failure, with its message */
    if (!f) {
      snprintf(r.msg, sizeof r.msg, "%s", err);
    } else {
      kg_strbuf b;
      kg_strbuf_init(&b);
      kg_ir_print(&b, f);
      r.ir = kg_strbuf_take(&b);
      r.cg_rc = kg_codegen_cuda(f, "kgen", &r.cp, err, sizeof err);
      if (r.cg_rc == 0) r.rc = 0;
      else snprintf(r.msg, sizeof r.msg, "%s", err);
    }
    kg_arena_free(&la);
  }
  kg_schedule_free(s);
  kg_trace_free(&t);
  return r;
}

static void result_free(result *r) {
  free(r->ir);
  kg_cuda_program_free(&r->cp);
}

static int have_nvrtc, have_nvcc;

/* Compiles for sm_90: NVRTC when it loads, else the nvcc command line; 1 when compiled (or skipped). */
static int compile_sm90(const kg_cuda_program *cp, const char *what) {
  if (have_nvrtc) {
    kg_cubin cb;
    memset(&cb, 0, sizeof cb);
    int rc = kg_nvrtc_compile(cp, "sm_90", &cb);
    CHECKF(rc == 0, "%s: NVRTC sm_90 failed:\n%s\n%s", what, cb.log ? cb.log : "(no log)", cp->source);
    if (rc == 0) CHECKF(cb.nres == cp->nkernels, "%s: %d resource reports for %d kernels", what, cb.nres, cp->nkernels);
    kg_cubin_free(&cb);
    return rc == 0;
  }
  if (!have_nvcc) return 1;
  char path[] = "/tmp/kg_cuda_codegen_XXXXXX.cu";
  int fd = mkstemps(path, 3);
  if (fd < 0) return 1;
  FILE *f = fdopen(fd, "w");
  fputs(cp->source, f);
  fclose(f);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "/usr/local/cuda/bin/nvcc -arch=sm_90 -cubin -o /dev/null %s 2>&1", path);
  int rc = system(cmd);
  unlink(path);
  CHECKF(rc == 0, "%s: nvcc sm_90 failed on:\n%s", what, cp->source);
  return rc == 0;
}

/* Builds cp for the emulator and runs it on p's test data: -1 when it does not build (the log in err), -2 when it
 * does not run (the reason in err), else 0 with the verification against the reference in *v. */
static int emu_verify(const kg_program *p, const kg_cuda_program *cp, kg_verify_result *v, char *err, size_t errlen) {
  kg_emu_module m;
  memset(&m, 0, sizeof m);
  if (kg_emu_build(cp, &m) != 0) {
    snprintf(err, errlen, "%s", m.log ? m.log : "(no log)");
    kg_emu_module_free(&m);
    return -1;
  }
  kg_data d;
  kg_data_init(&d, p, 5);
  kg_data_reference(&d, p, 5);
  kg_data_poison(&d, p);
  int np = p->ninputs + p->noutputs, nargs = np + cp->ntemps;
  float **args = calloc((size_t)nargs + 1, sizeof *args);
  for (int k = 0; k < p->ninputs; k++) args[k] = d.inputs[k];
  for (int k = 0; k < p->noutputs; k++) args[p->ninputs + k] = d.outputs[k];
  for (int k = 0; k < cp->ntemps; k++) {
    size_t n = (size_t)(cp->temp_elems[k] > 0 ? cp->temp_elems[k] : 1);
    args[np + k] = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) args[np + k][i] = __builtin_nanf("");
  }
  int rc = kg_emu_run_program(&m, cp, args, err, errlen) == 0 ? 0 : -2;
  if (rc == 0) *v = kg_verify(p, &d, 1e-4);
  for (int k = 0; k < cp->ntemps; k++) free(args[np + k]);
  free(args);
  kg_data_free(&d);
  kg_emu_module_free(&m);
  return rc;
}

/* Runs the program on the emulator and verifies it against the reference. */
static void emulate(const kg_program *p, const kg_cuda_program *cp, const char *what) {
  char err[4096];
  kg_verify_result v;
  int rc = emu_verify(p, cp, &v, err, sizeof err);
  CHECKF(rc != -1, "%s: emulator build:\n%s\n%s", what, err, cp->source);
  CHECKF(rc != -2, "%s: emulator run: %s", what, err);
  if (rc == 0) {
    CHECKF(v.ok, "%s: %s (max_rel_err %g)\n%s", what, v.msg, v.max_rel_err, cp->source);
    if (v.ok) printf("%-40s verified on the emulator (max_rel_err %.2g)\n", what, v.max_rel_err);
  }
}

/* Prints, compiles and emulates; returns the result for further checks (caller frees). */
static result full(const char *src, const char *sizes, const char *trace, const char *what, kg_program **pp) {
  kg_program *p = load(src, sizes);
  result r;
  memset(&r, 0, sizeof r);
  r.rc = -1;
  if (!p) return r;
  r = gen(p, trace);
  CHECKF(r.rc == 0, "%s: %s", what, r.msg);
  if (r.rc == 0) {
    compile_sm90(&r.cp, what);
    emulate(p, &r.cp, what);
  }
  *pp = p;
  return r;
}

/* limit: the error is a hardware limit (kg_codegen_cuda returns -2), not an illegal schedule (-1 or a lowering
 * error) */
static void expect_error_kind(const char *src, const char *sizes, const char *trace, const char *needle,
                              const char *what, int limit) {
  kg_program *p = load(src, sizes);
  if (p) {
    result r = gen(p, trace);
    CHECKF(r.rc == -1, "%s: expected an error, got a program", what);
    CHECKF(limit ? r.cg_rc == -2 : r.cg_rc != -2, "%s: codegen returned %d", what, r.cg_rc);
    CHECKF(strstr(r.msg, needle) != NULL, "%s: message '%s' lacks '%s'", what, r.msg, needle);
    result_free(&r);
    kg_program_free(p);
  }
}

static void expect_error(const char *src, const char *sizes, const char *trace, const char *needle, const char *what) {
  expect_error_kind(src, sizes, trace, needle, what, 0);
}
static void expect_limit(const char *src, const char *sizes, const char *trace, const char *needle, const char *what) {
  expect_error_kind(src, sizes, trace, needle, what, 1);
}

#define CHECK_HAS(r, needle) CHECKF(strstr((r).cp.source, (needle)) != NULL, "no '%s' in:\n%s", (needle), (r).cp.source)
#define CHECK_LACKS(r, needle) CHECKF(strstr((r).cp.source, (needle)) == NULL, "'%s' in:\n%s", (needle), (r).cp.source)

static const char *const MM_TILED =
    "cache_write C local\n"
    "tile C i j 32 32\n"
    "split C i.i 4\n"
    "split C j.i 4\n"
    "reorder C i.o j.o i.i.o j.i.o i.i.i j.i.i\n"
    "bind C i.o blockIdx.y\n"
    "bind C j.o blockIdx.x\n"
    "bind C i.i.o threadIdx.y\n"
    "bind C j.i.o threadIdx.x\n"
    "compute_at C.local C j.i.o\n"
    "split C.local k 8\n"
    "reorder C.local k.o k.i i j\n"
    "cache_read A shared C.local\n"
    "cache_read B shared C.local\n"
    "compute_at A.shared C.local k.o\n"
    "compute_at B.shared C.local k.o\n"
    "split A.shared ax0 8\n"
    "bind A.shared ax0.i threadIdx.y\n"
    "bind A.shared ax1 threadIdx.x\n";

/* Runs on the emulator; 1 when the result verifies, 0 when it does not, -1 when it does not build or run. */
static int emulate_ok(const kg_program *p, const kg_cuda_program *cp) {
  char err[4096];
  kg_verify_result v;
  return emu_verify(p, cp, &v, err, sizeof err) == 0 ? v.ok : -1;
}

static int count_of(const char *s, const char *needle) {
  int n = 0;
  for (const char *c = s; (c = strstr(c, needle)) != NULL; c += strlen(needle)) n++;
  return n;
}

/* pipeline: the shared stages of C.local's k.o fill a ring of D tiles ahead of the step that reads them. Checked
 * for 2 to 4 stages at sizes whose k loop has more steps than the ring, fewer (a prologue step past the loop's
 * end), and a ragged last tile: the ring's sizes, cp.async for the copies (16 bytes for B's float4 fetch, 4 for
 * A's scalar one), one barrier per step, PTX with cp.async on sm_80 and without it on sm_75, and the answers on
 * the emulator, whose copies land only at the wait that covers them: a wait that lets one group too many stay in
 * flight reads a stale tile and must fail. A loop whose fetches moved away is refused when lowered. */
static void test_pipeline(void) {
  char base[2048];
  snprintf(base, sizeof base,
           "%ssplit B.shared ax1 4\nreorder B.shared ax0 ax1.o ax1.i\nbind B.shared ax0 threadIdx.y\n"
           "bind B.shared ax1.o threadIdx.x\nvectorize B.shared ax1.i\n",
           MM_TILED);
  static const char *const sizes[] = {"M=64 N=64 K=32", "M=64 N=64 K=8", "M=50 N=36 K=20"};
  for (int D = 2; D <= 4; D++)
    for (int z = 0; z < 3; z++) {
      kg_program *p = NULL;
      char trace[2300], what[96], needle[96];
      snprintf(trace, sizeof trace, "%spipeline C.local k.o %d\n", base, D);
      snprintf(what, sizeof what, "matmul pipelined in %d stages, %s", D, sizes[z]);
      result r = full(KG_TEST_MATMUL, sizes[z], trace, what, &p);
      if (r.rc == 0) {
        snprintf(needle, sizeof needle, "__shared__ __align__(16) float A_shared[%d];", 256 * D);
        CHECK_HAS(r, needle);
        if (z != 2) CHECK_HAS(r, "kg_cp_async16(B_shared + ("); /* N = 36: B's rows are not float4-aligned */
        CHECK_HAS(r, "kg_cp_async4(A_shared + (");
        snprintf(needle, sizeof needle, "kg_cp_async_wait(%d);", D - 2);
        CHECK_HAS(r, needle);
        CHECK_HAS(r, "kg_cp_async_wait(0);");
        /* the prologue's barrier and the step's, where the loop had four */
        CHECKF(count_of(r.cp.source, "__syncthreads();") == 2, "%s: %d barriers", what,
               count_of(r.cp.source, "__syncthreads();"));
        CHECKF(count_of(r.cp.source, "kg_cp_async_commit();") == D, "%s: %d commits", what,
               count_of(r.cp.source, "kg_cp_async_commit();"));
        snprintf(needle, sizeof needle, "for k_o in [0, %d) pipelined(%d)", z == 1 ? 1 : z == 0 ? 4 : 3, D);
        CHECK_STR_CONTAINS(r.ir, needle);
        /* a wait one group short reads a tile before it lands (the answer goes wrong), unless nothing is left to
         * wait for: with one step, the wait after the loop lands it */
        snprintf(needle, sizeof needle, "kg_cp_async_wait(%d);", D - 2);
        char *late = strstr(r.cp.source, needle);
        if (late && z != 1) {
          late[strlen("kg_cp_async_wait(")] = (char)('0' + D - 1);
          CHECKF(emulate_ok(p, &r.cp) == 0, "%s: a wait that lets step k's tile stay in flight went unnoticed", what);
          late[strlen("kg_cp_async_wait(")] = (char)('0' + D - 2);
        }
        if (have_nvrtc && z == 0) {
          static const char *const archs[] = {"sm_80", "sm_86", "sm_75"};
          for (int a = 0; a < 3; a++) {
            kg_cubin cb;
            memset(&cb, 0, sizeof cb);
            int rc = kg_nvrtc_compile(&r.cp, archs[a], &cb);
            CHECKF(rc == 0, "%s: NVRTC %s: %s", what, archs[a], cb.log ? cb.log : "");
            if (rc == 0 && cb.ptx) {
              int pre = a == 2;
              CHECKF((strstr(cb.ptx, "cp.async.cg.shared.global") != NULL) == !pre &&
                         (strstr(cb.ptx, "cp.async.wait_group") != NULL) == !pre,
                     "%s: %s PTX %s cp.async", what, archs[a], pre ? "has" : "lacks");
            }
            kg_cubin_free(&cb);
          }
        }
      }
      result_free(&r);
      if (p) kg_program_free(p);
    }
  /* the fetches moved to the inner loop after pipelining: nothing left to pipeline at k.o */
  char moved[2400];
  snprintf(moved, sizeof moved, "%spipeline C.local k.o 2\ncompute_at A.shared C.local k.i\ncompute_at B.shared C.local k.i\n",
           base);
  expect_error(KG_TEST_MATMUL, "M=64 N=64 K=32", moved, "pipeline: stage C.local: loop k.o: no shared-memory stage",
               "pipelined loop without fetches");
}

static void test_matmul(void) {
  kg_program *p = NULL;
  /* B.shared fetched with float4: 8 rows (threadIdx.y) x 8 threads (threadIdx.x) x 4 */
  char trace[2048];
  snprintf(trace, sizeof trace,
           "%ssplit B.shared ax1 4\nreorder B.shared ax0 ax1.o ax1.i\nbind B.shared ax0 threadIdx.y\n"
           "bind B.shared ax1.o threadIdx.x\nvectorize B.shared ax1.i\n",
           MM_TILED);
  result r = full(KG_TEST_MATMUL, "M=64 N=64 K=32", trace, "matmul tiled, shared A/B, C.local", &p);
  if (r.rc == 0) {
    CHECK(r.cp.nkernels == 1 && r.cp.ntemps == 0 && r.cp.nparams == 3);
    const kg_cuda_kernel *k = &r.cp.kernels[0];
    CHECKF(k->grid[0] == 2 && k->grid[1] == 2 && k->grid[2] == 1 && k->block[0] == 8 && k->block[1] == 8 &&
               k->block[2] == 1,
           "grid %lld %lld %lld block %lld %lld %lld", (long long)k->grid[0], (long long)k->grid[1],
           (long long)k->grid[2], (long long)k->block[0], (long long)k->block[1], (long long)k->block[2]);
    CHECKF(k->static_shared == 2048 && k->dynamic_shared == 0, "shared %lld/%lld", (long long)k->static_shared,
           (long long)k->dynamic_shared);
    CHECK(strcmp(k->name, "kgen_k0") == 0);
    CHECK_HAS(r, "extern \"C\" __global__ void __launch_bounds__(64) kgen_k0(const float* __restrict__ A, "
                 "const float* __restrict__ B, float* __restrict__ C)");
    CHECK_HAS(r, "__shared__ __align__(16) float A_shared[256];");
    CHECK_HAS(r, "__shared__ __align__(16) float B_shared[256];");
    CHECK_HAS(r, "__align__(16) float C_local[16];");
    CHECK_HAS(r, "const kg_idx i_i_o = threadIdx.y;");
    CHECK_HAS(r, "const kg_idx j_o = blockIdx.x;");
    CHECK_HAS(r, "__syncthreads();");
    CHECK_HAS(r, "*(const float4 *)(B + (");
    CHECK_HAS(r, "*(float4 *)(B_shared + (");
    CHECK_HAS(r, "typedef int kg_idx;");
    CHECK_HAS(r, "extern \"C\" void kgen_k0__emu(float **a) { kgen_k0(a[0], a[1], a[2]); }");
    CHECK_LACKS(r, "#include");
    CHECK_LACKS(r, "== 0)"); /* every store is distinguished by the thread indices */
    /* the shared regions cover the block's threads: no thread index in their size or origin */
    CHECK_STR_CONTAINS(r.ir, "alloc A_shared: f32[256] shared");
    CHECK_STR_CONTAINS(r.ir, "let ax0 = (((i_o * 32) + (ax0_o * 8)) + ax0_i)");
  }
  result_free(&r);
  if (p) kg_program_free(p);

  /* the same with both tiles' rows padded (pad): 4 floats keep B's float4 stores aligned, 1 float makes A's
   * stores scalar; the shared arrays grow by the pads, the results stay */
  p = NULL;
  char padded[2200];
  snprintf(padded, sizeof padded, "%spad B.shared 4\npad A.shared 1\n", trace);
  r = full(KG_TEST_MATMUL, "M=64 N=64 K=32", padded, "matmul tiled, padded shared rows", &p);
  if (r.rc == 0) {
    /* A.shared: 32 rows of 8 (+1), B.shared: 8 rows of 32 (+4) */
    CHECK_HAS(r, "__shared__ __align__(16) float A_shared[288];");
    CHECK_HAS(r, "__shared__ __align__(16) float B_shared[288];");
    CHECK_HAS(r, "*(float4 *)(B_shared + (");
    CHECKF(r.cp.kernels[0].static_shared == 4 * 576, "shared %lld", (long long)r.cp.kernels[0].static_shared);
  }
  result_free(&r);
  if (p) kg_program_free(p);

  /* launch_bounds on the kernel's stage: __launch_bounds__'s second argument, and NVRTC keeps the registers within
   * what 8 blocks of 64 threads leave each thread on sm_90 (65536 / 512 = 128) */
  p = NULL;
  char bounded[2200];
  snprintf(bounded, sizeof bounded, "%slaunch_bounds C 8\n", trace);
  r = full(KG_TEST_MATMUL, "M=64 N=64 K=32", bounded, "matmul tiled, launch_bounds 8", &p);
  if (r.rc == 0) {
    CHECK_HAS(r, "__global__ void __launch_bounds__(64, 8) kgen_k0(");
    char why[256];
    kg_cubin cb;
    if (kg_nvrtc_available(why, sizeof why) == 0) {
      CHECKF(kg_nvrtc_compile(&r.cp, "sm_90", &cb) == 0, "NVRTC: %s", cb.log ? cb.log : "");
      CHECKF(cb.nres == 1 && cb.res[0].registers <= 128, "%d registers", cb.nres ? cb.res[0].registers : -1);
      kg_cubin_free(&cb);
    }
  }
  result_free(&r);
  if (p) kg_program_free(p);

  /* odd sizes: guards in every stage, float4 where alignment holds only by luck is not used */
  p = NULL;
  r = full(KG_TEST_MATMUL, "M=50 N=36 K=20", MM_TILED, "matmul tiled, odd sizes", &p);
  if (r.rc == 0) CHECK_HAS(r, "if (");
  result_free(&r);
  if (p) kg_program_free(p);

  /* A.shared with no bound loop of its own inside the thread loops: one thread fills it */
  p = NULL;
  r = full(KG_TEST_MATMUL, "M=32 N=32 K=24",
           "tile C i j 16 16\nreorder C i.o j.o i.i j.i k\nbind C i.o blockIdx.y\nbind C j.o blockIdx.x\n"
           "bind C i.i threadIdx.y\nbind C j.i threadIdx.x\nsplit C k 8\ncache_read A shared C\n"
           "compute_at A.shared C k.o\n",
           "matmul, serial shared fetch (single writer)", &p);
  if (r.rc == 0) {
    CHECK_HAS(r, "if (threadIdx.x == 0 && threadIdx.y == 0) A_shared[");
    CHECK_STR_CONTAINS(r.ir, "alloc A_shared: f32[128] shared");
  }
  result_free(&r);
  if (p) kg_program_free(p);
}

static void test_softmax(void) {
  kg_program *p = NULL;
  /* m: 64 threads (shuffles, then shared memory across 2 warps); Y.r0: 16 threads (shuffles in a warp); Y: 2-D */
  result r = full(KG_TEST_SOFTMAX, "N=7 D=33",
                  "compute_inline e\nbind m i blockIdx.x\nsplit m j 64\nbind m j.i threadIdx.x\n"
                  "bind Y.r0 i blockIdx.x\nsplit Y.r0 j2 16\nreorder Y.r0 j2.i j2.o\nbind Y.r0 j2.i threadIdx.x\n"
                  "split Y i 2\nbind Y i.o blockIdx.x\nbind Y i.i threadIdx.y\nsplit Y j 32\nbind Y j.i threadIdx.x\n",
                  "softmax, cross-thread reductions", &p);
  if (r.rc == 0) {
    CHECK(r.cp.nkernels == 3 && r.cp.ntemps == 2);
    CHECK(r.cp.temp_elems[0] == 7 && r.cp.temp_elems[1] == 7);
    CHECK(r.cp.kernels[0].block[0] == 64 && r.cp.kernels[0].grid[0] == 7 && r.cp.kernels[0].static_shared == 16);
    CHECK(r.cp.kernels[1].block[0] == 16 && r.cp.kernels[1].static_shared == 0);
    CHECK(r.cp.kernels[2].block[0] == 32 && r.cp.kernels[2].block[1] == 2 && r.cp.kernels[2].grid[0] == 4);
    CHECK_HAS(r, "m_red[0] = kg_maxf(m_red[0], __shfl_xor_sync(kg_mask, m_red[0], 16, 32));");
    CHECK_HAS(r, "Y_r0_red[0] = Y_r0_red[0] + __shfl_xor_sync(kg_mask, Y_r0_red[0], 8, 32);");
    CHECK_HAS(r, "if (threadIdx.x == 0) m[i] = m_red[0];");
    CHECK_HAS(r, "m_red[0] = (-__int_as_float(0x7f800000));");
    CHECK_HAS(r, "kg_red0[2];");
    /* the strategy is lowering's (lower/launch.c), in the IR the printer follows */
    CHECK_STR_CONTAINS(r.ir, "allreduce max m_red[0] across threadIdx.x (64, warp shuffles then shared memory)  # m.j.i");
    CHECK_STR_CONTAINS(r.ir, "allreduce sum Y_r0_red[0] across threadIdx.x (16, warp shuffles)");
  }
  result_free(&r);
  if (p) kg_program_free(p);

  /* 48 threads (not warp-friendly) and a reduction across threadIdx.y: shared memory */
  p = NULL;
  r = full(ROWSUM, "N=5 D=100",
           "split S i 4\nbind S i.o blockIdx.x\nbind S i.i threadIdx.x\nsplit S j 3\nreorder S i.o i.i j.i j.o\n"
           "bind S j.i threadIdx.y\n",
           "row sums across threadIdx.y (3)", &p);
  if (r.rc == 0) {
    CHECK_STR_CONTAINS(r.ir, "across threadIdx.y (3, shared memory)");
    CHECK_HAS(r, "for (int kg_i = 0; kg_i < 3; ++kg_i)");
    CHECK_HAS(r, "if (threadIdx.y == 0) S[");
    CHECK(r.cp.kernels[0].block[0] == 4 && r.cp.kernels[0].block[1] == 3);
  }
  result_free(&r);
  if (p) kg_program_free(p);
  p = NULL;
  r = full(ROWSUM, "N=5 D=100", "bind S i blockIdx.x\nsplit S j 48\nreorder S i j.i j.o\nbind S j.i threadIdx.x\n",
           "row sums over 48 threads", &p);
  if (r.rc == 0) CHECK_HAS(r, "kg_red0[48];");
  result_free(&r);
  if (p) kg_program_free(p);

  /* rfactor: the partials in registers per thread, combined across threadIdx.x */
  p = NULL;
  r = full(ROWSUM, "N=6 D=70",
           "rfactor S j 8\nbind S i blockIdx.x\nbind S j.i threadIdx.x\ncompute_at S.rf S j.i\n",
           "row sums, rfactor + cross-thread", &p);
  if (r.rc == 0) {
    CHECK(r.cp.nkernels == 1);
    CHECK_HAS(r, "__shfl_xor_sync(kg_mask, S_red[0], 4, 32)");
  }
  result_free(&r);
  if (p) kg_program_free(p);

  /* a partial last warp: 7 x 5 threads */
  p = NULL;
  r = full(ROWSUM, "N=5 D=40",
           "split S j 8\nreorder S i j.i j.o\nbind S j.i threadIdx.x\nbind S i threadIdx.y\n",
           "row sums, partial warp", &p);
  if (r.rc == 0) CHECK_HAS(r, "const int kg_left = 40 - ");
  result_free(&r);
  if (p) kg_program_free(p);
}

/* One reciprocal per row (lower/recip.c on CUDA): the one-pass softmax divides its row by the sum through a
 * product by 1/sum computed once per thread and row, with the plain division kept for a sum whose reciprocal
 * overflows; a loop holding a barrier is never versioned (a branch around a barrier), only the loops inside it. */
static const char *const SCALED =
    "def scaled(X: f32[N, D], B: f32[N, D]) -> (Y: f32[N, D]) {\n"
    "  Y[i, j] = X[i, j] * B[i, j] / sum[j2](X[i, j2])\n"
    "}\n";

static void test_recip(void) {
  static const char one_pass[] =
      "cache_read X shared m e\ncompute_inline e\nsplit Y j 4\nvectorize Y j.i\nsplit Y j.o 32\n"
      "bind Y j.o.i threadIdx.x\nbind Y i blockIdx.x\ncache_write Y.r0 shared\ncompute_inline Y.r0\n"
      "compute_at Y.r0.shared Y i\nsplit Y.r0.shared j2 32\nbind Y.r0.shared j2.i threadIdx.x\n"
      "cache_write m shared\ncompute_inline m\ncompute_at m.shared Y i\nsplit m.shared j 32\n"
      "bind m.shared j.i threadIdx.x\ncompute_at X.shared Y i\nsplit X.shared ax1 4\nvectorize X.shared ax1.i\n"
      "fuse X.shared ax0 ax1.o\nsplit X.shared ax0*ax1.o 32\nbind X.shared ax0*ax1.o.i threadIdx.x\n";
  const char *sizes[] = {"N=7 D=33", "N=3 D=1000"};
  for (int k = 0; k < 2; k++) {
    kg_program *p = NULL;
    result r = full(KG_TEST_SOFTMAX, sizes[k], one_pass, "softmax one pass, reciprocal", &p);
    if (r.rc == 0) {
      CHECK(r.cp.nkernels == 1);
      CHECK_HAS(r, "kg_rcp0[0] = 1.0f / Y_r0_shared[0];");
      CHECK_HAS(r, "* kg_rcp0[0]");
      CHECK_HAS(r, "/ Y_r0_shared[0]"); /* the fallback */
    }
    result_free(&r);
    if (p) kg_program_free(p);
  }
  /* B staged in shared memory per column tile: the column loop holds barriers, so the reciprocal goes inside it */
  kg_program *p = NULL;
  result r = full(SCALED, "N=5 D=70",
                  "bind Y i blockIdx.x\nsplit Y j 32\nbind Y j.i threadIdx.x\ncache_write Y.r0 shared\n"
                  "compute_inline Y.r0\ncompute_at Y.r0.shared Y i\nsplit Y.r0.shared j2 32\n"
                  "bind Y.r0.shared j2.i threadIdx.x\ncache_read B shared Y\ncompute_at B.shared Y j.o\n"
                  "bind B.shared ax1 threadIdx.x\n",
                  "scaled rows, a barrier in the column loop", &p);
  if (r.rc == 0) {
    const char *loop = strstr(r.ir, "for j_o in"), *rcp = strstr(r.ir, "alloc kg_rcp0");
    CHECKF(loop && rcp && rcp > loop, "the reciprocal is not inside the column loop:\n%s", r.ir);
    CHECK_HAS(r, "* kg_rcp0[0]");
  }
  result_free(&r);
  if (p) kg_program_free(p);
}

static void test_vectorize(void) {
  kg_program *p = NULL;
  result r = full(EWISE, "N=6 M=64",
                  "split C j 4\nsplit C j.o 8\nbind C i blockIdx.x\nbind C j.o.i threadIdx.x\nvectorize C j.i\n",
                  "elementwise, float4", &p);
  if (r.rc == 0) {
    CHECK_HAS(r, "const float4 kg_vl1_0 = *(const float4 *)(A + (");
    CHECK_HAS(r, "kg_vs1.w = ");
    CHECK_HAS(r, "tanhf(A[");
  }
  result_free(&r);
  if (p) kg_program_free(p);

  p = NULL;
  r = full(EWISE, "N=6 M=64", "split C j 2\nbind C i threadIdx.y\nbind C j.o threadIdx.x\nvectorize C j.i\n",
           "elementwise, float2", &p);
  if (r.rc == 0) CHECK_HAS(r, "*(float2 *)(C + (");
  result_free(&r);
  if (p) kg_program_free(p);

  /* 8 lanes: two float4 pieces, lanes 0..3 and 4..7 */
  p = NULL;
  r = full(EWISE, "N=6 M=64", "split C j 8\nbind C i blockIdx.x\nbind C j.o threadIdx.x\nvectorize C j.i\n",
           "elementwise, 8 lanes as 2 float4", &p);
  if (r.rc == 0) {
    CHECK_HAS(r, "vectorized as 2 float4, this one lanes 4..7 */");
    CHECK_HAS(r, "const kg_idx j_i = 4;");
    CHECK_HAS(r, "const float4 kg_vl2_0 = *(const float4 *)(A + (");
    CHECK_HAS(r, "*(float4 *)(C + (");
    CHECK_LACKS(r, "#pragma unroll\n");
  }
  result_free(&r);
  if (p) kg_program_free(p);

  /* misaligned read (j + 1): a scalar unrolled loop */
  p = NULL;
  r = full(SHIFT, "N=4 M=16 M1=17", "split C j 4\nbind C i blockIdx.x\nbind C j.o threadIdx.x\nvectorize C j.i\n",
           "misaligned vectorize, scalar", &p);
  if (r.rc == 0) {
    CHECK_LACKS(r, "float4");
    CHECK_HAS(r, "#pragma unroll\n");
  }
  result_free(&r);
  if (p) kg_program_free(p);

  /* unroll and vthread */
  p = NULL;
  r = full(COPY, "N=8 M=12", "split C i 2\nbind C i.o vthread\nbind C j threadIdx.x\nunroll C i.i\n",
           "vthread and unroll", &p);
  if (r.rc == 0) CHECK_HAS(r, "vthread */");
  result_free(&r);
  if (p) kg_program_free(p);
}

static void test_dynamic_shared(void) {
  kg_program *p = NULL;
  /* A.shared: 32 rows x 512 = 64 KB */
  result r = full(KG_TEST_MATMUL, "M=64 N=4 K=512",
                  "split C i 32\nbind C i.o blockIdx.x\nbind C i.i threadIdx.x\ncache_read A shared C\n"
                  "compute_at A.shared C i.o\nsplit A.shared ax1 32\nbind A.shared ax1.i threadIdx.x\n",
                  "dynamic shared memory (64 KB)", &p);
  if (r.rc == 0) {
    CHECKF(r.cp.kernels[0].dynamic_shared == 65536 && r.cp.kernels[0].static_shared == 0, "dyn %lld static %lld",
           (long long)r.cp.kernels[0].dynamic_shared, (long long)r.cp.kernels[0].static_shared);
    CHECK_HAS(r, "#define KG_DYNAMIC_SHARED(name) extern __shared__ __align__(16) float name[]");
    CHECK_HAS(r, "KG_DYNAMIC_SHARED(kg_dyn_smem);");
    CHECK_HAS(r, "float *const A_shared = kg_dyn_smem + 0;");
    CHECK_LACKS(r, "__shared__ __align__(16) float A_shared");
  }
  result_free(&r);
  if (p) kg_program_free(p);
}

static void test_errors(void) {
  /* the consumer's threadIdx.x loop (8) is smaller than the fetch's (32): its barrier is under a guard */
  expect_error(KG_TEST_MATMUL, "M=32 N=32 K=32",
               "split C i 8\nbind C i.i threadIdx.x\nbind C i.o blockIdx.x\ncache_read A shared C\n"
               "compute_at A.shared C i.i\nbind A.shared ax1 threadIdx.x\n",
               "a barrier (__syncthreads around a shared stage) under the guarded loop C.i.i", "barrier under guard");
  /* S's threadIdx.y loop (2) is smaller than X.shared's (4): the reduction is under a guard */
  expect_error(ROWSUM, "N=8 D=32",
               "split S i 2\nbind S i.o blockIdx.x\nbind S i.i threadIdx.y\nsplit S j 8\nreorder S i.o i.i j.i j.o\n"
               "bind S j.i threadIdx.x\ncache_read X shared S\ncompute_at X.shared S i.o\n"
               "split X.shared ax1 4\nreorder X.shared ax1.i ax0 ax1.o\nbind X.shared ax1.i threadIdx.y\n",
               "the cross-thread reduction of stage S over loop j.i under the guarded loop S.i.i", "allreduce under guard");
  expect_error(KG_TEST_MATMUL, "M=32 N=32 K=8",
               "cache_write C local\nsplit C i 8\nbind C i.o blockIdx.x\ncompute_at C.local C i.o\n"
               "bind C.local i threadIdx.x\n",
               "loop i is bound to threadIdx.x, but the stage is computed per thread", "bound loop in a local stage");
  expect_limit(COPY, "N=4 M=2048", "bind C j threadIdx.x\n", "threadIdx.x extent 2048 exceeds the limit 1024",
               "too many threads");
  expect_limit(COPY, "N=4 M=512", "bind C j threadIdx.x\nbind C i threadIdx.y\n",
               "2048 threads per block exceed the limit 1024", "too many threads in all");
  expect_limit(COPY, "N=70000 M=2", "bind C i blockIdx.y\n", "blockIdx.y extent 70000 exceeds the limit 65535",
               "grid y too large");
  expect_error(ROWSUM, "N=4 D=64", "split S j 8\nbind S j.i threadIdx.x\nbind S j.o threadIdx.y\n",
               "are both bound to thread indices", "two thread-bound reduction loops");
  expect_error(KG_TEST_MATMUL, "M=8 N=8 K=8", "reorder C i k j\nbind C k threadIdx.x\n",
               "spatial loop j is inside the first reduction loop k", "cross-thread reduction with a spatial loop inside");
  expect_limit(KG_TEST_MATMUL, "M=128 N=256 K=4",
               "cache_write C local\nsplit C i 128\nbind C i.o blockIdx.x\ncompute_at C.local C i.o\n",
               "a per-thread region of 32768 floats", "oversized register array");
  expect_error(ROWSUM, "N=4 D=64", "bind S j blockIdx.x\n", "reduction loop", "reduction bound to a block index");
  expect_error(COPY, "N=4 M=8", "parallel C i\n", "loop i is parallel, which is for the C target", "parallel on CUDA");
}

static void test_wide_index(void) {
  kg_program *p = load(COPY, "N=65536 M=32768");
  if (p) {
    result r = gen(p, "split C j 256\nbind C i blockIdx.x\nbind C j.o blockIdx.y\nbind C j.i threadIdx.x\n");
    CHECKF(r.rc == 0, "%s", r.msg);
    if (r.rc == 0) {
      CHECK_HAS(r, "typedef long long kg_idx;");
      compile_sm90(&r.cp, "2^31 elements, long long indices");
    }
    result_free(&r);
    kg_program_free(p);
  }
}

int main(void) {
  char why[512];
  have_nvrtc = kg_nvrtc_available(why, sizeof why) == 0;
  have_nvcc = access("/usr/local/cuda/bin/nvcc", X_OK) == 0;
  if (!have_nvrtc && !have_nvcc) printf("skipping the sm_90 compiles: no NVRTC (%s) and no nvcc\n", why);
  else printf("sm_90 compiles with %s\n", have_nvrtc ? "NVRTC" : "nvcc (NVRTC unavailable)");
  test_matmul();
  test_pipeline();
  test_softmax();
  test_recip();
  test_vectorize();
  test_dynamic_shared();
  test_errors();
  test_wide_index();
  TEST_END();
}
