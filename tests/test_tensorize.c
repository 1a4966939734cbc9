/* tensorize: a sum of products of f16 or bf16 reads computed by mma.sync.m16n8k16, of f32 reads by m16n8k8 as TF32
 * where the program allows it. Hand-written tensorized GEMMs (one warp a block, and two warps with four instruction
 * tiles each) on f16, bf16 and TF32 operands at several sizes:
 * lowered, printed, verified on the CUDA emulator (whose step is the software one, so every fragment address is
 * checked against the reference), compiled with NVRTC for sm_80, sm_86 and sm_90 with the instruction in the PTX
 * and the limits kept, and for sm_75 without it; the estimate counts the steps; and every precondition refused with
 * its message, at the step or at lowering; and random CUDA schedules of matmul and batch matmul in f16 and bf16 draw
 * it and verify. */
#include <stdint.h>
#include "kgen.h"
#include "gen/gpu_rules.h"
#include "gen/space.h"
#include "lower/work.h"
#include "runtime/emu.h"
#include "runtime/nvrtc.h"
#include "testlib.h"
#include "testutil.h"

static const char *const GEMM = "def matmul(A: %s[M, K], B: %s[K, N]) -> (C: f32[M, N]) {\n"
                                "  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n";
static const char GEMM_F32[] = "def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {\n"
                               "  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n";

/* One warp a block, one 16 x 8 tile a warp. */
static const char *const ONE_WARP = "split C i 16\nsplit C i.i 8\nsplit C j 8\nsplit C j.i 2\nsplit C k 16\n"
                                    "reorder C i.o j.o i.i.i j.i.o k.o i.i.o j.i.i k.i\n"
                                    "fuse C i.i.i j.i.o\n"
                                    "bind C i.o blockIdx.y\nbind C j.o blockIdx.x\nbind C i.i.i*j.i.o threadIdx.x\n"
                                    "tensorize C i.i.o j.i.i k.i\n";
/* Two warps (threadIdx.y) of 16 x 32 each: four tiles along the columns per warp. */
static const char *const TWO_WARPS = "split C i 32\nsplit C i.i 16\nsplit C i.i.i 8\n"
                                     "split C j 32\nsplit C j.i 8\nsplit C j.i.i 2\nsplit C k 16\n"
                                     "reorder C i.o j.o i.i.o i.i.i.i j.i.i.o j.i.o k.o i.i.i.o j.i.i.i k.i\n"
                                     "fuse C i.i.i.i j.i.i.o\n"
                                     "bind C i.o blockIdx.y\nbind C j.o blockIdx.x\nbind C i.i.o threadIdx.y\n"
                                     "bind C i.i.i.i*j.i.i.o threadIdx.x\nunroll C j.i.o\n"
                                     "tensorize C i.i.i.o j.i.i.i k.i\n";

/* Two warps of four tiles with the k loop outside the tiles' (unrolled) loop, as staged schedules have it: the 16
 * accumulators of a thread's four tiles stay in registers across k; with the tiles' loop serial they cannot. */
static const char *const KOUT = "split C i 32\nsplit C i.i 16\nsplit C i.i.i 8\n"
                                "split C j 32\nsplit C j.i 8\nsplit C j.i.i 2\nsplit C k 16\n"
                                "reorder C i.o j.o i.i.o i.i.i.i j.i.i.o k.o j.i.o i.i.i.o j.i.i.i k.i\n"
                                "fuse C i.i.i.i j.i.i.o\n"
                                "bind C i.o blockIdx.y\nbind C j.o blockIdx.x\nbind C i.i.o threadIdx.y\n"
                                "bind C i.i.i.i*j.i.i.o threadIdx.x\n%s"
                                "tensorize C i.i.i.o j.i.i.i k.i\n";

/* One warp of four tiles along the rows, in two unrolled loops (i.i.o, i.i.i.o) inside the k loop: A's fragments
 * depend on both, B's on neither. */
static const char *const ROWS4 = "split C i 64\nsplit C i.i 32\nsplit C i.i.i 16\nsplit C i.i.i.i 8\n"
                                 "split C j 8\nsplit C j.i 2\nsplit C k 16\n"
                                 "reorder C i.o j.o i.i.i.i.i j.i.o k.o i.i.o i.i.i.o i.i.i.i.o j.i.i k.i\n"
                                 "fuse C i.i.i.i.i j.i.o\n"
                                 "bind C i.o blockIdx.y\nbind C j.o blockIdx.x\nbind C i.i.i.i.i*j.i.o threadIdx.x\n"
                                 "unroll C i.i.o\nunroll C i.i.i.o\n"
                                 "tensorize C i.i.i.i.o j.i.i k.i\n";

/* Staged with the shared tiles' storage transposed (reorder_storage: A.shared k-major, B.shared n-major; %s the k
 * step, 16 or 8, and which tiles are transposed): 2 warps of 2 x 4 tiles, rows padded by 8. */
static const char *const TRANSPOSED = "split C i 64\nsplit C i.i 32\nsplit C i.i.i 16\nsplit C i.i.i.i 8\n"
                                      "split C j 32\nsplit C j.i 8\nsplit C j.i.i 2\nsplit C k 32\nsplit C k.i %d\n"
                                      "reorder C i.o j.o i.i.o i.i.i.i.i j.i.i.o k.o k.i.o i.i.i.o j.i.o i.i.i.i.o j.i.i.i "
                                      "k.i.i\nfuse C i.i.i.i.i j.i.i.o\n"
                                      "bind C i.o blockIdx.y\nbind C j.o blockIdx.x\nbind C i.i.o threadIdx.y\n"
                                      "bind C i.i.i.i.i*j.i.i.o threadIdx.x\nunroll C i.i.i.o\nunroll C j.i.o\n"
                                      "tensorize C i.i.i.i.o j.i.i.i k.i.i\n"
                                      "cache_read A shared C\n%scompute_at A.shared C k.o\n"
                                      "cache_read B shared C\n%scompute_at B.shared C k.o\n"
                                      "pad A.shared 8\npad B.shared 8\n";

/* The same with the reduction in TF32's steps of 8 ("split C k 16" made "split C k 8"). */
static const char *k8(const char *sched, char *buf, size_t len) {
  snprintf(buf, len, "%s", sched);
  char *at = strstr(buf, "split C k 16");
  if (at) at[10] = '8', memmove(at + 11, at + 12, strlen(at + 12) + 1);
  return buf;
}

/* t: "f16", "bf16", "f32", or "tf32" (f32 with TF32 allowed). */
static kg_program *load_gemm(const char *t, const char *sizes) {
  char text[256];
  int tf32 = !strcmp(t, "tf32");
  if (tf32) t = "f32";
  snprintf(text, sizeof text, GEMM, t, t);
  kg_program *p = kg_test_load_sizes(text, sizes);
  if (p) p->tf32 = tf32;
  return p;
}

/* s lowered (in la, which the caller initialized and frees), printed into prog (the caller frees it) and built for
 * the emulator into em (freed by the caller when this returns 1); 0 with the reason in err. */
static int emu_build(const kg_schedule *s, kg_arena *la, kg_cuda_program *prog, kg_emu_module *em, char *err,
                     size_t errlen) {
  memset(prog, 0, sizeof *prog);
  kg_lowered *lw = kg_lower(s, KG_TARGET_CUDA, la, err, errlen);
  if (!lw || kg_codegen_cuda(lw, "kgen", prog, err, errlen) != 0) return 0;
  if (kg_emu_build(prog, em) == 0) return 1;
  snprintf(err, errlen, "emulator build: %s", em->log ? em->log : "?");
  return 0;
}

/* regs: what the source must say of the accumulators (NULL: one tile's four in registers, "" nothing). */
static void check_one_regs(const char *t, const char *sizes, const char *sched, const char *what, const char *regs) {
  char text[256];
  const int tf32 = !strcmp(t, "tf32");
  snprintf(text, sizeof text, GEMM, tf32 ? "f32" : t, tf32 ? "f32" : t);
  kg_test_workload w;
  if (kg_test_workload_from_text(&w, text, sizes, 9, what) != 0) return;
  w.p->tf32 = tf32;
  kg_schedule *s = kg_schedule_new(w.p);
  char err[2048];
  int ok = kg_test_apply_text(s, sched, err, sizeof err) == 0;
  CHECKF(ok, "%s: %s", what, err);
  kg_arena la;
  kg_arena_init(&la);
  kg_lowered *lw = ok ? kg_lower(s, KG_TARGET_CUDA, &la, err, sizeof err) : NULL;
  CHECKF(!ok || lw, "%s: lower: %s", what, err);
  kg_cuda_program prog;
  memset(&prog, 0, sizeof prog);
  int printed = lw && kg_codegen_cuda(lw, "kgen", &prog, err, sizeof err) == 0;
  CHECKF(!lw || printed, "%s: print: %s", what, err);
  if (printed) {
    CHECKF(strstr(prog.source, tf32 ? "kg_mma_m16n8k8_tf32(kg_rc, kg_ra, kg_rb);" : "kg_mma_m16n8k16(kg_rc, kg_ra, kg_rb, ")
               != NULL, "%s: no mma step:\n%s", what, prog.source);
    /* k.o right outside the tensorized loops (or outside unrolled tile loops): the accumulators in registers
     * across it, set to zero there and stored once, so the output is never read */
    /* regs: strings the source must have, '|' between them */
    const char *want = regs ? regs : "kg_rc[0] = vkg_mma_c[0];";
    for (const char *w0 = want; *w0;) {
      const char *bar = strchr(w0, '|');
      size_t len = bar ? (size_t)(bar - w0) : strlen(w0);
      char one[160];
      snprintf(one, sizeof one, "%.*s", (int)len, w0);
      CHECKF(strstr(prog.source, one) != NULL, "%s: want '%s' in:\n%s", what, one, prog.source);
      w0 += len + (bar != NULL);
    }
    if (!regs || regs[0]) CHECKF(strstr(prog.source, "= C[") == NULL, "%s: C read:\n%s", what, prog.source);
    else CHECKF(strstr(prog.source, "vkg_mma_c") == NULL, "%s: registers indexed by a serial loop:\n%s", what, prog.source);
    kg_kernel_work wk;
    CHECK(kg_lower_kernel_work(lw, 0, &wk) == 0);
    int64_t m = w.p->outputs[0]->shape[0], n = w.p->outputs[0]->shape[1], k = w.p->inputs[0]->shape[1];
    const int ks = tf32 ? 8 : 16;
    CHECKF(wk.mma_insts == (double)(m / 16) * (double)(n / 8) * (double)(k / ks), "%s: %g steps counted", what,
           wk.mma_insts);
    CHECKF(wk.flops == 2.0 * (double)m * (double)n * (double)k, "%s: %g flops counted", what, wk.flops);
    kg_emu_module em;
    int rc = kg_emu_build(&prog, &em);
    CHECKF(rc == 0, "%s: emulator build: %s", what, em.log ? em.log : "?");
    if (rc == 0) {
      CHECKF(kg_test_emu_verify(&em, &prog, &w, err, sizeof err), "%s: %s", what, err);
      kg_emu_module_free(&em);
    }
    static const char *const arches[] = {"sm_80", "sm_86", "sm_90", "sm_75"};
    for (int a = 0; a < 4; a++) {
      kg_cubin cb;
      memset(&cb, 0, sizeof cb);
      rc = kg_nvrtc_compile(&prog, arches[a], &cb);
      CHECKF(rc == 0, "%s: NVRTC %s: %s", what, arches[a], cb.log ? cb.log : "?");
      if (rc == 0) {
        char want[96];
        snprintf(want, sizeof want, "mma.sync.aligned.m16n8k%d.row.col.f32.%s.%s.f32", ks, t, t);
        int has = cb.ptx && strstr(cb.ptx, want) != NULL;
        CHECKF(has == (a < 3), "%s: %s: %s in the PTX: %d", what, arches[a], want, has);
        /* the operands rounded by the hardware's own conversion */
        if (tf32) CHECKF((cb.ptx && strstr(cb.ptx, "cvt.rna.tf32.f32") != NULL) == (a < 3), "%s: %s: cvt", what, arches[a]);
        kg_gpu_limits lim;
        char lw2[256];
        CHECK(kg_gpu_limits_for_arch(arches[a], &lim) == 0);
        CHECKF(kg_gpu_check_limits(&prog, &cb, &lim, lw2, sizeof lw2) == 0, "%s: %s: %s", what, arches[a], lw2);
      }
      kg_cubin_free(&cb);
    }
    kg_cuda_program_free(&prog);
  }
  kg_arena_free(&la);
  kg_schedule_free(s);
  kg_test_workload_free(&w);
}

static void check_one(const char *t, const char *sizes, const char *sched, const char *what) {
  check_one_regs(t, sizes, sched, what, NULL);
}

/* Fragments by ldmatrix from transposed shared tiles: A stored k-major is loaded transposed (.x4.trans), B stored
 * with k contiguous is not (.x2), in 16 bits; TF32's B stored so is loaded by ldmatrix too (32-bit elements, not
 * transposed), where B stored as it is (n contiguous) would need a 32-bit transpose. Verified on the emulator,
 * compiled by NVRTC. */
static void test_transposed(void) {
  static const char *const ts = "reorder_storage A.shared ax1 ax0\n", *const tb = "reorder_storage B.shared ax1 ax0\n";
  char sched[2048];
  snprintf(sched, sizeof sched, TRANSPOSED, 16, ts, tb);
  check_one_regs("bf16", "M=128 N=64 K=64", sched, "bf16, both tiles transposed",
                 "kg_rc[0] = vkg_mma_c[(i_i_i_o * 4 + j_i_o) * 4];|&A_shared[|], 4, 1);|&B_shared[|], 2, 0);");
  snprintf(sched, sizeof sched, TRANSPOSED, 8, "", tb);
  check_one_regs("tf32", "M=128 N=64 K=64", sched, "TF32, B transposed",
                 "(const unsigned short *)&A_shared[|], 4, 0);|(const unsigned short *)&B_shared[|], 2, 0);");
  snprintf(sched, sizeof sched, TRANSPOSED, 8, "", "");
  check_one_regs("tf32", "M=128 N=64 K=64", sched, "TF32, as stored", "(const unsigned short *)&A_shared[|] = B_shared[");
}

static void test_legal(void) {
  static const char *const types[] = {"bf16", "f16", "tf32"};
  for (int t = 0; t < 3; t++) {
    char what[128], s1[1024], s2[1024];
    const char *one = t == 2 ? k8(ONE_WARP, s1, sizeof s1) : ONE_WARP;
    const char *two = t == 2 ? k8(TWO_WARPS, s2, sizeof s2) : TWO_WARPS;
    snprintf(what, sizeof what, "%s one warp 32x16x32", types[t]);
    check_one(types[t], "M=32 N=16 K=32", one, what);
    snprintf(what, sizeof what, "%s one warp 64x48x128", types[t]);
    check_one(types[t], "M=64 N=48 K=128", one, what);
    snprintf(what, sizeof what, "%s two warps 64x64x64", types[t]);
    check_one(types[t], "M=64 N=64 K=64", two, what);
    snprintf(what, sizeof what, "%s two warps 32x32x24", types[t]);
    if (t == 2) check_one(types[t], "M=32 N=32 K=24", two, what); /* K = 3 steps of 8 */
    char kout[1024], s3[1024];
    snprintf(kout, sizeof kout, KOUT, "unroll C j.i.o\n");
    snprintf(what, sizeof what, "%s two warps, k outside four unrolled tiles", types[t]);
    /* one A fragment for the four tiles of a row, each B fragment once: 1 x 4 fragments, not 4 x 4 */
    char regs[256];
    snprintf(regs, sizeof regs, "kg_rc[0] = vkg_mma_c[j_i_o * 4];| vkg_mma_a[%d];| vkg_mma_b[%d];", t == 2 ? 4 : 8,
             4 * (t == 2 ? 2 : 4));
    check_one_regs(types[t], "M=64 N=64 K=64", t == 2 ? k8(kout, s3, sizeof s3) : kout, what, regs);
    /* four tiles along the rows in two unrolled loops: the A fragments indexed by both, one B fragment */
    snprintf(regs, sizeof regs, "vkg_mma_c[(i_i_o * 2 + i_i_i_o) * 4]| vkg_mma_a[%d];| vkg_mma_b[%d];",
             4 * (t == 2 ? 4 : 8), t == 2 ? 2 : 4);
    snprintf(what, sizeof what, "%s one warp, 2 x 2 unrolled tiles along the rows", types[t]);
    check_one_regs(types[t], "M=128 N=16 K=32", t == 2 ? k8(ROWS4, s3, sizeof s3) : ROWS4, what, regs);
    snprintf(kout, sizeof kout, KOUT, "");
    snprintf(what, sizeof what, "%s two warps, k outside four serial tiles", types[t]);
    check_one_regs(types[t], "M=64 N=64 K=64", t == 2 ? k8(kout, s3, sizeof s3) : kout, what, "");
  }
}

/* The emulator rounds TF32 operands as the hardware does (cvt.rna.tf32.f32): A = 1 + 2^-12 (below half a TF32 ulp
 * of 1: rounds to 1), B = 1 + 3 * 2^-12 (above: rounds to 1 + 2^-10), so each product is exactly 1 + 2^-10 and C is
 * exactly K (1 + 2^-10), where f32 operands would give K (1 + 2^-12)(1 + 3 * 2^-12); and -1.5 * 2^-11 past 1 (a
 * tie) rounds away from zero. */
static void test_tf32_rounding(void) {
  char sched[1024];
  kg_program *p = load_gemm("tf32", "M=16 N=8 K=16");
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  char err[1024];
  CHECKF(kg_test_apply_text(s, k8(ONE_WARP, sched, sizeof sched), err, sizeof err) == 0, "%s", err);
  kg_arena la;
  kg_arena_init(&la);
  kg_cuda_program prog;
  kg_emu_module em;
  int ok = emu_build(s, &la, &prog, &em, err, sizeof err);
  CHECKF(ok, "%s", err);
  if (ok) {
    for (int c = 0; c < 2; c++) {
      float A[16 * 16], B[16 * 8], C[16 * 8];
      /* case 1: ties, -(1 + 2^-11) rounds to -(1 + 2^-10), 1 + 2^-11 to 1 + 2^-10: each product (1 + 2^-10)^2 */
      float a = c ? -(1.0f + 0x1p-11f) : 1.0f + 0x1p-12f, bv = c ? 1.0f + 0x1p-11f : 1.0f + 3 * 0x1p-12f;
      for (int i = 0; i < 16 * 16; i++) A[i] = a;
      for (int i = 0; i < 16 * 8; i++) B[i] = bv;
      float *args[3] = {A, B, C};
      char why[512];
      CHECK(prog.ntemps == 0);
      int rc = kg_emu_run_program(&em, &prog, args, why, sizeof why);
      CHECKF(rc == 0, "%s", why);
      double prod = c ? -(1 + 0x1p-10) * (1 + 0x1p-10) : 1 + 0x1p-10;
      for (int i = 0; rc == 0 && i < 16 * 8; i++)
        if (C[i] != (float)(16 * prod)) {
          CHECKF(0, "case %d: C[%d] = %.9g, want %.9g", c, i, (double)C[i], 16 * prod);
          break;
        }
    }
    kg_emu_module_free(&em);
  }
  kg_cuda_program_free(&prog);
  kg_arena_free(&la);
  kg_schedule_free(s);
  /* verification allows the operands' rounding (a TF32 ulp each way), where the f32 program does not */
  double with = kg_verify_tolerance(p, 1e-4);
  p->tf32 = 0;
  double without = kg_verify_tolerance(p, 1e-4);
  CHECKF(without == 1e-4 && with == 1e-4 + 2 * 0x1p-10, "tolerance %g with TF32, %g without", with, without);
  kg_program_free(p);
}

static void expect_step_error(const char *t, const char *sizes, const char *sched, const char *needle) {
  kg_program *p = load_gemm(t, sizes);
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  char err[1024] = "";
  int rc = kg_test_apply_text(s, sched, err, sizeof err);
  CHECKF(rc != 0 && strstr(err, needle), "want '%s', got %s", needle, rc ? err : "success");
  kg_schedule_free(s);
  kg_program_free(p);
}

static void expect_lower_error(const char *t, const char *sizes, const char *sched, const char *needle) {
  const kg_target_kind target = KG_TARGET_CUDA;
  kg_program *p = load_gemm(t, sizes);
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  char err[1024] = "";
  int rc = kg_test_apply_text(s, sched, err, sizeof err);
  CHECKF(rc == 0, "%s", err);
  kg_arena la;
  kg_arena_init(&la);
  kg_lowered *lw = rc == 0 ? kg_lower(s, target, &la, err, sizeof err) : NULL;
  kg_cuda_program prog;
  memset(&prog, 0, sizeof prog);
  if (lw) {
    rc = kg_codegen_cuda(lw, "kgen", &prog, err, sizeof err);
    kg_cuda_program_free(&prog);
    CHECKF(rc != 0 && strstr(err, needle), "want '%s', got %s", needle, rc ? err : "success");
  } else {
    CHECKF(strstr(err, needle) != NULL, "want '%s', got %s", needle, err);
  }
  kg_arena_free(&la);
  kg_schedule_free(s);
  kg_program_free(p);
}

static void test_illegal(void) {
  const char *sz = "M=32 N=16 K=32";
  char sched[2048];
  /* f32 operands: only as TF32, when allowed, in steps of 8 */
  expect_step_error("f32", sz, ONE_WARP, "the tensor cores take two f16 or two bf16 operands, or two f32 ones as "
                    "TF32 when the program allows it (--tf32)");
  expect_step_error("tf32", sz, ONE_WARP, "loop k.i must be a reduction loop of 8 (it is a reduction loop of 16)");
  expect_lower_error("tf32", "M=32 N=16 K=20", k8(ONE_WARP, sched, sizeof sched), "its tile needs a guard");
  /* not the innermost loops; a reduction stretch of 8 */
  snprintf(sched, sizeof sched, "%s", ONE_WARP);
  char *last = strstr(sched, "tensorize");
  strcpy(last, "reorder C i.o j.o i.i.i*j.i.o k.o i.i.o k.i j.i.i\ntensorize C i.i.o j.i.i k.o\n");
  expect_step_error("bf16", sz, sched, "loop k.o (reduction) is not among the three innermost loops");
  expect_step_error("bf16", sz,
                    "split C i 16\nsplit C i.i 8\nsplit C j 8\nsplit C j.i 2\nsplit C k 8\n"
                    "reorder C i.o j.o i.i.i j.i.o k.o i.i.o j.i.i k.i\nfuse C i.i.i j.i.o\n"
                    "bind C i.i.i*j.i.o threadIdx.x\ntensorize C i.i.o j.i.i k.i\n",
                    "loop k.i must be a reduction loop of 16 (it is a reduction loop of 8)");
  /* operands of two types */
  {
    kg_program *p = kg_test_load_sizes("def mm(A: f16[M, K], B: bf16[K, N]) -> (C: f32[M, N]) {\n"
                                       "  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n", sz);
    kg_schedule *s = p ? kg_schedule_new(p) : NULL;
    char err[512] = "";
    CHECK(s && kg_test_apply_text(s, ONE_WARP, err, sizeof err) != 0 && strstr(err, "are f16 and bf16"));
    kg_schedule_free(s);
    kg_program_free(p);
  }
  /* rows split by 4 */
  expect_step_error("bf16", sz,
                    "split C i 16\nsplit C i.i 4\nsplit C j 8\nsplit C j.i 2\nsplit C k 16\n"
                    "reorder C i.o j.o i.i.i j.i.o k.o i.i.o j.i.i k.i\nfuse C i.i.i j.i.o\n"
                    "bind C i.i.i*j.i.o threadIdx.x\ntensorize C i.i.o j.i.i k.i\n",
                    "must be the outer part (2) of a split by 8 of a 16-long spatial loop");
  /* the lane not bound */
  expect_step_error("bf16", sz,
                    "split C i 16\nsplit C i.i 8\nsplit C j 8\nsplit C j.i 2\nsplit C k 16\n"
                    "reorder C i.o j.o i.i.i j.i.o k.o i.i.o j.i.i k.i\nfuse C i.i.i j.i.o\n"
                    "tensorize C i.i.o j.i.i k.i\n",
                    "must be fused, i.i.i outer, into one loop of 32 bound to threadIdx.x");
  /* the lane's parts the other way round */
  expect_step_error("bf16", sz,
                    "split C i 16\nsplit C i.i 8\nsplit C j 8\nsplit C j.i 2\nsplit C k 16\n"
                    "reorder C i.o j.o j.i.o i.i.i k.o i.i.o j.i.i k.i\nfuse C j.i.o i.i.i\n"
                    "bind C j.i.o*i.i.i threadIdx.x\ntensorize C i.i.o j.i.i k.i\n",
                    "must be fused, i.i.i outer");
  /* k unsplit: the reduction's first loop */
  expect_step_error("bf16", "M=32 N=16 K=16",
                    "split C i 16\nsplit C i.i 8\nsplit C j 8\nsplit C j.i 2\n"
                    "reorder C i.o j.o i.i.i j.i.o i.i.o j.i.i k\nfuse C i.i.i j.i.o\n"
                    "bind C i.i.i*j.i.o threadIdx.x\ntensorize C i.i.o j.i.i k\n",
                    "loop k is the reduction's first loop");
  /* a tensorized loop cannot be split or unrolled afterwards, and the step is taken once */
  snprintf(sched, sizeof sched, "%ssplit C k.i 4\n", ONE_WARP);
  expect_step_error("bf16", sz, sched, "loop k.i is tensorized");
  snprintf(sched, sizeof sched, "%sunroll C i.i.o\n", ONE_WARP);
  expect_step_error("bf16", sz, sched, "loop i.i.o is tensorized");
  snprintf(sched, sizeof sched, "%stensorize C i.i.o j.i.i k.i\n", ONE_WARP);
  expect_step_error("bf16", sz, sched, "already computed by tensorize");
  /* a loop moved inside the tensorized ones afterwards: refused at lowering */
  snprintf(sched, sizeof sched, "%sreorder C i.i.o k.o\n", ONE_WARP);
  expect_lower_error("bf16", sz, sched, "is not among the three innermost loops");
  /* a tile that does not divide: rows, or the reduction (which would read past A's rows and B's end) */
  expect_lower_error("bf16", "M=24 N=16 K=32", ONE_WARP, "its tile needs a guard");
  expect_lower_error("bf16", "M=32 N=16 K=40", ONE_WARP, "its tile needs a guard");
}

/* Attention whose weights e are declared bf16: its second product then has two bf16 operands too (rounding the
 * weights is the program's choice, as flash attention's kernels make it). */
static const char ATTN_BF16_WEIGHTS[] =
    "def attention(Q: bf16[B, S, D], K: bf16[B, T, D], V: bf16[B, T, E]) -> (O: bf16[B, S, E]) {\n"
    "  s[b, i, j] = sum[d](Q[b, i, d] * K[b, j, d]) * rsqrt(D)\n  m[b, i] = max[j](s[b, i, j])\n"
    "  e[b, i, j] : bf16[B, S, T] = exp(s[b, i, j] - m[b, i])\n"
    "  O[b, i, c] = sum[j](e[b, i, j] * V[b, j, c]) / sum[j2](e[b, i, j2])\n}\n";

/* w: library workload name (or, name NULL, the program text) at sizes, every input and output made type t, with
 * data from seed and its reference. 0, or -1 after a failed CHECK. */
static int load_typed(kg_test_workload *w, const char *name, const char *text, const char *sizes, kg_dtype t,
                      uint64_t seed) {
  kg_binding b[8];
  char names[8][32];
  int nb = kg_test_parse_bindings(sizes, b, names, 1);
  memset(w, 0, sizeof *w);
  w->p = name ? kg_test_load_lib(name, b, nb) : kg_test_load(text, b, nb);
  kg_arena da;
  kg_arena_init(&da);
  kg_diag d = {0};
  int ok = w->p && kg_program_set_io_dtype(w->p, t, &d, &da) == 0;
  CHECKF(ok, "%s at %s: %s", name ? name : "program", sizes, d.msg ? d.msg : "does not load");
  kg_arena_free(&da);
  ok = ok && kg_data_init(&w->d, w->p, seed) == 0 && kg_data_reference(&w->d, w->p, seed) == 0;
  CHECK(ok || !w->p);
  if (!ok) kg_test_workload_free(w);
  return ok ? 0 : -1;
}

/* Random CUDA schedules of the library's GEMM-like workloads made f16 and bf16 (a convolution: an implicit GEMM
 * over its batch and output pixels; attention: its first product, and with bf16 weights its second), at sizes the
 * instruction tiles divide: some draw the tensor cores on each workload; every draw verifies on the emulator. */
static void test_random(void) {
  static const struct {
    const char *name, *sizes;
  } w[] = {{"matmul", "M=64 N=32 K=48"}, {"batch_matmul", "L=2 M=32 N=16 K=32"}, {"conv2d", "N=2 C=16 H=8 W=8 F=8"},
           {"attention", "B=2 S=32 T=16 D=16 E=8"}, {NULL, "B=2 S=32 T=16 D=16 E=8"}};
  int tensorized = 0, staged = 0, total = 0, second = 0, tf32 = 0;
  for (size_t i = 0; i < sizeof w / sizeof *w; i++) {
    int here = 0;
    /* t: f16, bf16, then (KG_DT_COUNT) f32 with TF32 allowed */
    for (int t = KG_DT_F16; t <= KG_DT_COUNT; t++) {
      if (!w[i].name && t != KG_DT_BF16) continue;
      const int is_tf32 = t == KG_DT_COUNT;
      kg_test_workload wl;
      if (load_typed(&wl, w[i].name, ATTN_BF16_WEIGHTS, w[i].sizes, is_tf32 ? KG_DT_F32 : (kg_dtype)t, 4) != 0) continue;
      wl.p->tf32 = is_tf32;
      for (int k = 0; k < 8; k++) {
        kg_test_cuda_draw x;
        memset(&x, 0, sizeof x);
        kg_schedule *s = kg_test_cuda_draw_make(&x, wl.p, is_tf32 ? 90 + (int)i : 50 + (int)i * 2 + t, k);
        int mma = 0, shared = 0;
        for (int q = 0; q < s->nstages; q++) {
          mma += s->stages[q]->mma[0] != NULL;
          shared += s->stages[q]->scope == KG_SCOPE_SHARED;
        }
        tensorized += mma > 0;
        here += mma > 0;
        tf32 += is_tf32 && mma > 0;
        staged += mma > 0 && shared > 0;
        if (!w[i].name) {
          kg_sstage *o = kg_schedule_find_stage(s, "O.r0");
          second += o && o->mma[0] != NULL;
        }
        kg_schedule_free(s);
        char again[256];
        snprintf(again, sizeof again, "kgen run %s -D %s %s --emulate --random-schedule %llu",
                 w[i].name ? w[i].name : "(attention with bf16 weights)", w[i].sizes,
                 is_tf32 ? "--tf32" : t == KG_DT_F16 ? "--dtype f16" : "--dtype bf16", (unsigned long long)x.seed);
        if (kg_test_cuda_draw_check(&x, w[i].name ? w[i].name : "attention", again)) {
          kg_emu_module em;
          char err[1024];
          int rc = kg_emu_build(&x.prog, &em);
          CHECKF(rc == 0, "%s: %s", again, em.log ? em.log : "?");
          if (rc == 0) {
            CHECKF(kg_test_emu_verify(&em, &x.prog, &wl, err, sizeof err), "%s: %s\ntrace:\n%s", again, err, x.trace);
            kg_emu_module_free(&em);
          }
          total++;
        }
        kg_test_cuda_draw_free(&x);
      }
      kg_test_workload_free(&wl);
    }
    CHECKF(here > 0, "no random CUDA schedule of %s is tensorized", w[i].name ? w[i].name : "attention (bf16 e)");
  }
  printf("random CUDA schedules: %d verified, %d of them tensorized (%d TF32), %d of those with shared staging, %d with "
         "attention's second product tensorized\n", total, tensorized, tf32, staged, second);
  CHECKF(tf32 > 0, "no random CUDA schedule of an f32 workload allowing TF32 is tensorized");
  CHECKF(tensorized > 0 && staged > 0 && staged < tensorized, "tensorized %d, staged %d", tensorized, staged);
  CHECKF(second > 0, "attention's second product is never tensorized");
}

/* The implicit GEMM of a convolution by hand: the batch and the output pixels fused into the rows, the filters the
 * columns, 16 input channels a step, the kernel's window loops around; the padded input is bf16 under --dtype (a
 * copy of X: kg_program_set_io_dtype retypes it), so it is an operand, and inlining it is refused afterwards. */
static void test_conv(void) {
  /* Y is a bf16 output: its reduction is the f32 stage Y.r0 */
  static const char text[] =
      "reorder Y.r0 n y x f c r s\nfuse Y.r0 n y\nfuse Y.r0 n*y x\nsplit Y.r0 n*y*x 16\nsplit Y.r0 n*y*x.i 8\n"
      "split Y.r0 f 8\nsplit Y.r0 f.i 2\nsplit Y.r0 c 16\n"
      "reorder Y.r0 n*y*x.o f.o r s c.o n*y*x.i.i f.i.o n*y*x.i.o f.i.i c.i\nfuse Y.r0 n*y*x.i.i f.i.o\n"
      "bind Y.r0 n*y*x.o blockIdx.y\nbind Y.r0 f.o blockIdx.x\nbind Y.r0 n*y*x.i.i*f.i.o threadIdx.x\n"
      "tensorize Y.r0 n*y*x.i.o f.i.i c.i\n";
  kg_test_workload wl;
  if (load_typed(&wl, "conv2d", NULL, "N=1 C=32 H=16 W=14 F=16", KG_DT_BF16, 6) != 0) return;
  const kg_tensor *P = kg_program_find_tensor(wl.p, "P");
  CHECKF(P && P->dtype == KG_DT_BF16, "the padded input is not bf16");
  /* rows: 1 x 8 x 7 = 56 output pixels, not a multiple of 16: refused at lowering; 8 x 8 with W=16 */
  kg_schedule *s = kg_schedule_new(wl.p);
  char err[1024];
  CHECKF(kg_test_apply_text(s, text, err, sizeof err) == 0, "%s", err);
  CHECKF(kg_test_apply_text(s, "compute_inline P\n", err, sizeof err) != 0 && strstr(err, "its reader Y.r0 is tensorized"),
         "inlining the operand: %s", err);
  kg_arena la;
  kg_arena_init(&la);
  kg_lowered *lw = kg_lower(s, KG_TARGET_CUDA, &la, err, sizeof err);
  kg_cuda_program prog;
  memset(&prog, 0, sizeof prog);
  int printed = lw && kg_codegen_cuda(lw, "kgen", &prog, err, sizeof err) == 0;
  CHECKF(!printed && strstr(err, "needs a guard"), "56 rows in tiles of 16: %s", printed ? "printed" : err);
  if (printed) kg_cuda_program_free(&prog);
  kg_arena_free(&la);
  kg_schedule_free(s);
  kg_test_workload_free(&wl);
  if (load_typed(&wl, "conv2d", NULL, "N=1 C=32 H=16 W=16 F=16", KG_DT_BF16, 6) != 0) return;
  s = kg_schedule_new(wl.p);
  CHECKF(kg_test_apply_text(s, text, err, sizeof err) == 0, "%s", err);
  kg_arena_init(&la);
  lw = kg_lower(s, KG_TARGET_CUDA, &la, err, sizeof err);
  printed = lw && kg_codegen_cuda(lw, "kgen", &prog, err, sizeof err) == 0;
  CHECKF(printed, "%s", err);
  if (printed) {
    CHECK(strstr(prog.source, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") != NULL);
    kg_emu_module em;
    CHECK(kg_emu_build(&prog, &em) == 0);
    CHECKF(kg_test_emu_verify(&em, &prog, &wl, err, sizeof err), "%s", err);
    kg_emu_module_free(&em);
    for (int a = 0; a < 3; a++) {
      static const char *const arch[3] = {"sm_80", "sm_86", "sm_90"};
      kg_cubin cb;
      memset(&cb, 0, sizeof cb);
      CHECKF(kg_nvrtc_compile(&prog, arch[a], &cb) == 0 && cb.ptx && strstr(cb.ptx, "mma.sync"), "%s: %s", arch[a],
             cb.log ? cb.log : "no mma in the PTX");
      kg_cubin_free(&cb);
    }
    kg_cuda_program_free(&prog);
  }
  kg_arena_free(&la);
  kg_schedule_free(s);
  kg_test_workload_free(&wl);
}

/* The points of sp's gpu/mma sketch (which must exist) realize, tensorized, and verify on the emulator. */
static void check_mma_sketch(kg_test_workload *w, const kg_gpu_limits *lim, const char *what) {
  kg_space *sp = kg_space_new(w->p, KG_TARGET_CUDA, lim);
  int k = sp ? kg_space_find_sketch(sp, "gpu/mma") : -1;
  CHECKF(k >= 0, "no gpu/mma sketch for %s", what);
  uint64_t rng = 11;
  int verified = 0, sampled = 0, refused = 0;
  /* 4 points that realize: a point may be refused by the launch rules alone (its staged tiles past the arch's
   * shared memory: the space does not know a region's size), never for another reason */
  for (int t = 0; k >= 0 && sampled < 4 && t < 16; t++) {
    kg_point pt;
    kg_space_sample(sp, k, &rng, &pt);
    char err[1024];
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    char knobs[256] = "";
    for (int i = 0, at = 0; i < pt.nknobs && at < (int)sizeof knobs - 24; i++)
      at += snprintf(knobs + at, sizeof knobs - (size_t)at, " %lld", (long long)pt.knobs[i]);
    if (!s && strstr(err, "too much shared memory")) {
      refused++;
      continue;
    }
    CHECKF(s != NULL, "%s: gpu/mma point (knobs%s): %s", what, knobs, err);
    if (!s) continue;
    sampled++;
    int mma = 0;
    for (int q = 0; q < s->nstages; q++) mma += s->stages[q]->mma[0] != NULL;
    CHECKF(mma > 0, "%s: a gpu/mma point without tensor cores", what);
    kg_arena la;
    kg_arena_init(&la);
    kg_cuda_program prog;
    kg_emu_module em;
    if (emu_build(s, &la, &prog, &em, err, sizeof err)) {
      int ok = kg_test_emu_verify(&em, &prog, w, err, sizeof err);
      CHECKF(ok, "%s: gpu/mma point: %s", what, err);
      verified += ok;
      kg_emu_module_free(&em);
    } else {
      CHECKF(0, "%s: gpu/mma point: %s", what, err);
    }
    kg_cuda_program_free(&prog);
    kg_arena_free(&la);
    kg_schedule_free(s);
  }
  CHECKF(verified == 4 && refused < 8, "%s: %d of 4 gpu/mma points verified (%d refused for shared memory)", what,
         verified, refused);
  kg_space_free(sp);
}

/* The gpu/mma sketch: in the space of an f16/bf16 GEMM and not of an f32 one, unless it allows TF32; in a bf16
 * convolution's (its padded input retyped with it) and a TF32 one's; their points realize, tensorized, and verify on
 * the emulator. */
static void test_sketch(void) {
  kg_gpu_limits lim;
  CHECK(kg_gpu_limits_for_arch("sm_86", &lim) == 0);
  kg_program *f = load_gemm("f32", "M=64 N=32 K=32");
  kg_space *sp = f ? kg_space_new(f, KG_TARGET_CUDA, &lim) : NULL;
  CHECK(sp && kg_space_find_sketch(sp, "gpu/mma") < 0);
  kg_space_free(sp);
  kg_program_free(f);
  kg_test_workload w;
  if (load_typed(&w, NULL, GEMM_F32, "M=64 N=32 K=32", KG_DT_BF16, 2) == 0) {
    check_mma_sketch(&w, &lim, "bf16 GEMM");
    kg_test_workload_free(&w);
  }
  if (load_typed(&w, "conv2d", NULL, "N=1 C=32 H=16 W=16 F=16", KG_DT_BF16, 2) == 0) {
    check_mma_sketch(&w, &lim, "bf16 conv2d");
    /* 16 filters: tiles of 8 or 16 columns a warp divide them, 32 would not (nor are they offered) */
    kg_space *sp = kg_space_new(w.p, KG_TARGET_CUDA, &lim);
    int k = sp ? kg_space_find_sketch(sp, "gpu/mma") : -1;
    int found = 0;
    for (int i = 0; k >= 0 && i < sp->sketches[k].nknobs; i++) {
      const kg_knob *kb = &sp->sketches[k].knobs[i];
      if (strcmp(kb->name, "Y.r0.mma_tiles")) continue;
      found = 1;
      CHECKF(kb->nvalues == 2 && kb->values[0] == 1 && kb->values[1] == 2, "conv2d F=16: %d tile counts offered",
             kb->nvalues);
    }
    CHECK(found);
    kg_space_free(sp);
  }
  kg_test_workload_free(&w);
  if (load_typed(&w, NULL, GEMM_F32, "M=64 N=32 K=24", KG_DT_F32, 2) == 0) {
    w.p->tf32 = 1;
    check_mma_sketch(&w, &lim, "TF32 GEMM");
    kg_test_workload_free(&w);
  }
  if (load_typed(&w, "conv2d", NULL, "N=1 C=8 H=16 W=16 F=16", KG_DT_F32, 2) == 0) {
    w.p->tf32 = 1;
    check_mma_sketch(&w, &lim, "TF32 conv2d");
  }
  kg_test_workload_free(&w);
}

/* The staged structure (kg_gpu_mma_build) with k steps of ks instructions, padded shared rows and mt tiles a warp
 * along the rows: the k loop split in two (ks halved until it divides the reduction), mt halved until the block's
 * rows divide the rows, the shared stages padded, the accumulators of all the warp's tiles in registers, and the
 * kernel verified on the emulator; bf16 and TF32. */
static void test_build_staged(void) {
  static const struct {
    const char *t, *sizes;
    int64_t ks, pad, want_ks, mt, want_mt;
  } c[] = {{"bf16", "M=64 N=32 K=64", 4, 4, 4, 2, 2}, {"bf16", "M=32 N=16 K=48", 4, 2, 1, 4, 1},
           {"bf16", "M=32 N=16 K=96", 4, 8, 2, 1, 1}, {"f16", "M=64 N=32 K=64", 2, 8, 2, 2, 2},
           {"bf16", "M=64 N=64 K=32", 1, 0, 1, 2, 2}, {"tf32", "M=64 N=32 K=32", 4, 8, 4, 2, 2},
           {"tf32", "M=32 N=32 K=24", 2, 4, 1, 1, 1}};
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    const int tf32 = !strcmp(c[i].t, "tf32");
    char text[256], what[128];
    snprintf(text, sizeof text, GEMM, tf32 ? "f32" : c[i].t, tf32 ? "f32" : c[i].t);
    snprintf(what, sizeof what, "%s %s staged ks %lld pad %lld mt %lld", c[i].t, c[i].sizes, (long long)c[i].ks,
             (long long)c[i].pad, (long long)c[i].mt);
    kg_test_workload w;
    if (kg_test_workload_from_text(&w, text, c[i].sizes, 5, what) != 0) continue;
    w.p->tf32 = tf32;
    kg_schedule *s = kg_schedule_new(w.p);
    kg_sstage *st = kg_schedule_find_stage(s, "C");
    kg_gpu_mma_axes ax;
    CHECKF(st && kg_gpu_mma_shape(w.p, st, &ax) && ax.kstep == (tf32 ? 8 : 16), "%s: no tensor-core shape", what);
    kg_builder b;
    kg_builder_init(&b, s);
    kg_gpu_mma_opts o = {.wy = 2, .mt = c[i].mt, .nt = 2, .unroll = 0, .staged = 1, .ks = c[i].ks, .pad = c[i].pad};
    if (st) kg_gpu_mma_build(&b, st, &ax, &o);
    CHECKF(!b.failed, "%s: %s", what, b.err);
    kg_schedule_gpu_default(s, 256);
    char want[64], err[1024];
    snprintf(want, sizeof want, "split C k %lld\n", (long long)(ax.kstep * c[i].want_ks));
    char *trace = kg_trace_to_text(&s->trace);
    CHECKF(strstr(trace, want) != NULL, "%s: want '%s' in\n%s", what, want, trace);
    /* the block's rows: 2 warps of want_mt tiles of 16 */
    snprintf(want, sizeof want, "split C i %lld\n", (long long)(32 * c[i].want_mt));
    CHECKF(strstr(trace, want) != NULL, "%s: want '%s' in\n%s", what, want, trace);
    const kg_sstage *sa = kg_schedule_find_stage(s, "A.shared");
    CHECKF(sa && sa->pad == c[i].pad, "%s: A.shared padded by %lld", what, sa ? (long long)sa->pad : -1LL);
    kg_arena la;
    kg_arena_init(&la);
    kg_cuda_program prog;
    kg_emu_module em;
    int ok = !b.failed && emu_build(s, &la, &prog, &em, err, sizeof err);
    CHECKF(ok, "%s: %s\n%s", what, err, trace);
    if (ok) {
      /* 4 accumulators a tile, mt x 2 tiles a warp */
      snprintf(want, sizeof want, "vkg_mma_c[%lld]", (long long)(8 * c[i].want_mt));
      CHECKF(strstr(prog.source, want) != NULL, "%s: accumulators not in registers (%s)", what, want);
      /* 16-bit rows of a multiple of 8 elements (the tiles' 32 or 64 columns, padded by 0 or 8) are 16-byte
       * aligned: the fragments come by ldmatrix, A's four matrices at once, B's two transposed; padded by 2 or 4
       * they are not, and come element by element. TF32: A's f32 rows are aligned padded by 4 or 8, B's fragments
       * (a transpose of 32-bit elements) always come element by element */
      const int ldm = !tf32 && c[i].pad % 8 == 0, ldm_a = tf32 ? c[i].pad % 4 == 0 : ldm;
      CHECKF((strstr(prog.source, tf32 ? "kg_ldmatrix(kg_rl, (const unsigned short *)&A_shared["
                                       : "kg_ldmatrix(kg_rl, &A_shared[") != NULL) == ldm_a,
             "%s: A by ldmatrix: want %d", what, ldm_a);
      CHECKF((strstr(prog.source, "&B_shared[") != NULL) == ldm, "%s: B by ldmatrix: want %d", what, ldm);
      CHECKF(kg_test_emu_verify(&em, &prog, &w, err, sizeof err), "%s: %s\n%s", what, err, trace);
      kg_emu_module_free(&em);
      /* the work model's bank conflicts of ldmatrix, a phase of 8 rows of 16 bytes: rows padded by 8 16-bit
       * elements fall on 8 different groups of 4 banks; unpadded 32-byte rows on 4, two rows each */
      if (ldm) {
        kg_arena la2;
        kg_arena_init(&la2);
        kg_lowered *lw = kg_lower(s, KG_TARGET_CUDA, &la2, err, sizeof err);
        kg_kernel_work wk;
        CHECK(lw && kg_lower_kernel_work(lw, 0, &wk) == 0);
        if (lw && c[i].pad == 8) CHECKF(wk.bank_degree == 1, "%s: %d-way conflicts (%s)", what, wk.bank_degree, wk.bank_where);
        if (lw && c[i].pad == 0)
          CHECKF(wk.bank_degree == 2 && strstr(wk.bank_where, "_shared ldmatrix"), "%s: %d-way conflicts (%s), want 2 at an "
                 "ldmatrix", what, wk.bank_degree, wk.bank_where);
        kg_arena_free(&la2);
      }
      /* the instructions themselves in the PTX (sm_80), and compiled where only ldmatrix is hardware (sm_75) */
      for (int a = 0; a < 2 && ldm_a; a++) {
        kg_cubin cb;
        memset(&cb, 0, sizeof cb);
        int rc = kg_nvrtc_compile(&prog, a ? "sm_75" : "sm_80", &cb);
        CHECKF(rc == 0, "%s: NVRTC: %s", what, cb.log ? cb.log : "?");
        if (rc == 0) {
          CHECKF(cb.ptx && strstr(cb.ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16") != NULL, "%s: no x4 ldmatrix", what);
          CHECKF((cb.ptx && strstr(cb.ptx, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16") != NULL) == ldm,
                 "%s: x2.trans: want %d", what, ldm);
        }
        kg_cubin_free(&cb);
      }
    }
    free(trace);
    kg_cuda_program_free(&prog);
    kg_arena_free(&la);
    kg_schedule_free(s);
    kg_test_workload_free(&w);
  }
}

/* A warp tile as large as registers allow: 2 warps of 4 x 16 tiles asked, the rows' tiles halved to 2 (2 x 16 =
 * KG_MMA_MAX_TILES), a block of 64 x 128; the 128 accumulators of a thread in registers, the fragments by ldmatrix
 * (rows padded by 8), no spills for sm_80, sm_86 and sm_90, verified on the emulator. And the sketch offers such
 * tiles: 1 to 16 a warp along 128 columns. */
static void test_big_warp_tile(void) {
  char text[256], err[1024];
  const char *what = "bf16 64x128x32, 2 warps of 4 x 16 tiles asked";
  snprintf(text, sizeof text, GEMM, "bf16", "bf16");
  kg_test_workload w;
  if (kg_test_workload_from_text(&w, text, "M=64 N=128 K=32", 5, what) != 0) return;
  kg_schedule *s = kg_schedule_new(w.p);
  kg_sstage *st = kg_schedule_find_stage(s, "C");
  kg_gpu_mma_axes ax;
  CHECK(st && kg_gpu_mma_shape(w.p, st, &ax));
  kg_builder b;
  kg_builder_init(&b, s);
  kg_gpu_mma_opts o = {.wy = 2, .mt = 4, .nt = 16, .unroll = 1, .staged = 1, .ks = 2, .pad = 8};
  if (st) kg_gpu_mma_build(&b, st, &ax, &o);
  CHECKF(!b.failed, "%s: %s", what, b.err);
  kg_schedule_gpu_default(s, 256);
  char *trace = kg_trace_to_text(&s->trace);
  CHECKF(strstr(trace, "split C i 64\n") && strstr(trace, "split C j 128\n"), "%s: not a 64 x 128 block:\n%s", what,
         trace);
  kg_arena la;
  kg_arena_init(&la);
  kg_cuda_program prog;
  kg_emu_module em;
  int ok = !b.failed && emu_build(s, &la, &prog, &em, err, sizeof err);
  CHECKF(ok, "%s: %s\n%s", what, err, trace);
  if (ok) {
    CHECKF(strstr(prog.source, "float vkg_mma_c[128];") != NULL, "%s: 128 accumulators not in registers", what);
    CHECKF(strstr(prog.source, "kg_ldmatrix(kg_rl, &A_shared[") && strstr(prog.source, "kg_ldmatrix(kg_rl, &B_shared["),
           "%s: fragments not by ldmatrix", what);
    CHECKF(kg_test_emu_verify(&em, &prog, &w, err, sizeof err), "%s: %s", what, err);
    kg_emu_module_free(&em);
    static const char *const arches[] = {"sm_80", "sm_86", "sm_90"};
    for (int a = 0; a < 3; a++) {
      kg_cubin cb;
      memset(&cb, 0, sizeof cb);
      int rc = kg_nvrtc_compile(&prog, arches[a], &cb);
      CHECKF(rc == 0, "%s: NVRTC %s: %s", what, arches[a], cb.log ? cb.log : "?");
      kg_gpu_limits lim;
      char why[256];
      CHECK(kg_gpu_limits_for_arch(arches[a], &lim) == 0);
      if (rc == 0) CHECKF(kg_gpu_check_limits(&prog, &cb, &lim, why, sizeof why) == 0, "%s: %s: %s", what, arches[a], why);
      for (int k = 0; rc == 0 && k < cb.nres; k++)
        CHECKF(cb.res[k].spill_stores == 0, "%s: %s: kernel %d spills", what, arches[a], k);
      kg_cubin_free(&cb);
    }
  }
  kg_cuda_program_free(&prog);
  kg_arena_free(&la);
  free(trace);
  kg_schedule_free(s);
  kg_gpu_limits lim;
  CHECK(kg_gpu_limits_for_arch("sm_90", &lim) == 0);
  kg_space *sp = kg_space_new(w.p, KG_TARGET_CUDA, &lim);
  int k = sp ? kg_space_find_sketch(sp, "gpu/mma") : -1;
  int found = 0;
  for (int i = 0; k >= 0 && i < sp->sketches[k].nknobs; i++) {
    const kg_knob *kb = &sp->sketches[k].knobs[i];
    if (strcmp(kb->name, "C.mma_tiles")) continue;
    found = kb->nvalues == 5 && kb->values[4] == 16;
  }
  CHECKF(found, "%s: the sketch does not offer 16 tiles a warp", what);
  kg_space_free(sp);
  kg_test_workload_free(&w);
}

/* The sketch's pipelined points: a ring of shared tiles too large for the arch's shared memory (the sketches keep
 * to the static 48 KB) is shortened until it fits. bf16 256 x 128 x 256, 4 warps of 2 x nt tiles, k steps of 64, rows
 * padded by 8, 3 tiles in the ring asked: at nt = 16 (35 KB of tiles) none fits beside another and the kernel is not
 * pipelined; at nt = 4 (23 KB) a ring of 2 fits. Both verified on the emulator. */
static void test_sketch_pipeline(void) {
  char text[256];
  snprintf(text, sizeof text, GEMM, "bf16", "bf16");
  kg_test_workload w;
  if (kg_test_workload_from_text(&w, text, "M=256 N=128 K=256", 5, "pipelined gpu/mma") != 0) return;
  kg_gpu_limits lim;
  CHECK(kg_gpu_limits_for_arch("sm_86", &lim) == 0);
  kg_space *sp = kg_space_new(w.p, KG_TARGET_CUDA, &lim);
  int k = sp ? kg_space_find_sketch(sp, "gpu/mma") : -1;
  CHECK(k >= 0);
  static const struct {
    int64_t nt;
    const char *want, *absent;
  } c[] = {{16, NULL, "pipeline C "}, {4, "pipeline C k.o 2\n", NULL}};
  for (size_t i = 0; k >= 0 && i < sizeof c / sizeof *c; i++) {
    const kg_sketch *sk = &sp->sketches[k];
    kg_point pt = {.sketch = k, .nknobs = sk->nknobs};
    static const char *const names[] = {"mma_warps", "mma_tiles", "mma_unroll", "mma_staged", "mma_ksteps",
                                        "mma_pad", "mma_rows", "mma_pipeline"};
    const int64_t want[] = {4, c[i].nt, 1, 1, 4, 8, 2, 3};
    int set = 0;
    for (int q = 0; q < sk->nknobs; q++) {
      pt.knobs[q] = sk->knobs[q].values[0];
      for (int n = 0; n < 8; n++) {
        char full[64];
        snprintf(full, sizeof full, "C.%s", names[n]);
        if (strcmp(sk->knobs[q].name, full)) continue;
        for (int v = 0; v < sk->knobs[q].nvalues; v++)
          if (sk->knobs[q].values[v] == want[n]) pt.knobs[q] = want[n], set++;
      }
    }
    CHECKF(set == 8, "nt %lld: %d of 8 knobs set", (long long)c[i].nt, set);
    char err[1024];
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    CHECKF(s != NULL, "nt %lld: %s", (long long)c[i].nt, err);
    if (!s) continue;
    char *trace = kg_trace_to_text(&s->trace);
    if (c[i].want) CHECKF(strstr(trace, c[i].want) != NULL, "nt %lld: want '%s' in\n%s", (long long)c[i].nt, c[i].want, trace);
    if (c[i].absent) CHECKF(strstr(trace, c[i].absent) == NULL, "nt %lld: pipelined:\n%s", (long long)c[i].nt, trace);
    kg_arena la;
    kg_arena_init(&la);
    kg_cuda_program prog;
    kg_emu_module em;
    int ok = emu_build(s, &la, &prog, &em, err, sizeof err);
    CHECKF(ok, "nt %lld: %s", (long long)c[i].nt, err);
    if (ok) {
      CHECKF(kg_test_emu_verify(&em, &prog, &w, err, sizeof err), "nt %lld: %s", (long long)c[i].nt, err);
      kg_emu_module_free(&em);
    }
    kg_cuda_program_free(&prog);
    kg_arena_free(&la);
    free(trace);
    kg_schedule_free(s);
  }
  kg_space_free(sp);
  kg_test_workload_free(&w);
}

int main(void) {
  char why[512];
  CHECKF(kg_nvrtc_available(why, sizeof why) == 0, "NVRTC is needed: %s", why);
  test_legal();
  test_tf32_rounding();
  test_illegal();
  test_transposed();
  test_random();
  test_conv();
  test_build_staged();
  test_big_warp_tile();
  test_sketch_pipeline();
  test_sketch();
  TEST_END();
}
