/* The static quality report (runtime/quality.h): the occupancy calculator against hand-computed cases on sm_86 and
 * sm_90 (each limit in turn), the PTX scan on a hand-written entry (widths, FMA count, guarded instructions,
 * directives and labels not counted, a second entry not mixed in), the errors, and the report of the hand-written
 * examples at their benchmark sizes compiled with NVRTC (skipped without NVRTC). */
#include <stdint.h>
#include "kgen.h"
#include "runtime/quality.h"
#include "lower/work.h"
#include "testlib.h"

static const char ptx[] =
    ".version 8.0\n.target sm_90\n"
    ".visible .entry kgen_k0(\n\t.param .u64 a\n)\n{\n"
    "\t.reg .f32 %f<8>;\n\t.shared .align 16 .b8 X_shared[4096];\n"
    "\tld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];\n"
    "\tst.shared.v4.f32 [%r1], {%f1, %f2, %f3, %f4};\n"
    "\tbar.sync 0;\n"
    "$L__BB0_1:\n"
    "\tfma.rn.f32 %f5, %f1, %f2, %f5;\n"
    "\t@%p1 fma.rn.f32 %f6, %f1, %f3, %f6;\n"
    "\t// a comment; not an instruction\n"
    "\t@%p2 bra $L__BB0_1;\n"
    "\tst.global.v2.f32 [%rd2], {%f5, %f6};\n"
    "\tret;\n"
    "}\n"
    ".visible .entry kgen_k1(\n\t.param .u64 a\n)\n{\n"
    "\tld.global.f32 %f1, [%rd1];\n\tst.global.f32 [%rd2], %f1;\n\tret;\n}\n";

static kg_kernel_quality one(const char *arch, int64_t threads, int regs, int64_t smem, int64_t dyn, int k) {
  kg_cuda_kernel kk[2] = {{"kgen_k0", {1, 1, 1}, {threads, 1, 1}, smem, dyn}, {"kgen_k1", {1, 1, 1}, {32, 1, 1}, 0, 0}};
  kg_cuda_program p = {.kernels = kk, .nkernels = 2};
  kg_kernel_resources res[2] = {{"kgen_k0", regs, 0, 0, smem, 0}, {"kgen_k1", 8, 4, 4, 0, 0}};
  kg_cubin c = {.ptx = (char *)ptx, .res = res, .nres = 2};
  kg_kernel_quality q[2];
  char why[256];
  CHECKF(kg_cuda_quality(&p, &c, arch, q, why, sizeof why) == 0, "%s", why);
  return q[k];
}

static void test_occupancy(void) {
  /* 64 registers x 256 threads: 2048 registers a warp, 32 warps' worth: 4 blocks of 8 warps, half of 64 */
  kg_kernel_quality q = one("sm_90", 256, 64, 8192, 0, 0);
  CHECK(q.blocks_per_sm == 4 && !strcmp(q.limited_by, "registers") && q.occupancy == 0.5);
  /* 255 registers round up to 8192 a warp: 8 warps, 2 blocks of 4 */
  q = one("sm_90", 128, 255, 0, 0, 0);
  CHECK(q.blocks_per_sm == 2 && !strcmp(q.limited_by, "registers"));
  /* 1024 threads on sm_86 (1536 a multiprocessor): 1 block, 32 of 48 warps */
  q = one("sm_86", 1024, 32, 0, 0, 0);
  CHECK(q.blocks_per_sm == 1 && !strcmp(q.limited_by, "threads"));
  CHECK(q.occupancy > 0.66 && q.occupancy < 0.67);
  /* 48 KB static + 1 KB reserved of 228 KB: 4 blocks */
  q = one("sm_90", 64, 32, 48 * 1024, 0, 0);
  CHECK(q.blocks_per_sm == 4 && !strcmp(q.limited_by, "shared memory"));
  /* dynamic shared memory counts: 100 KB + 1 KB of 228 KB, 2 blocks */
  q = one("sm_90", 64, 32, 0, 100 * 1024, 0);
  CHECK(q.blocks_per_sm == 2 && q.shared_bytes == 100 * 1024 && !strcmp(q.limited_by, "shared memory"));
  /* tiny blocks: the block count is the limit (32 on sm_90, 16 on sm_86) */
  q = one("sm_90", 32, 16, 0, 0, 0);
  CHECK(q.blocks_per_sm == 32 && !strcmp(q.limited_by, "blocks") && q.occupancy == 0.5);
  q = one("sm_86", 32, 16, 0, 0, 0);
  CHECK(q.blocks_per_sm == 16 && q.occupancy < 0.34);
  /* shared memory a block cannot have on sm_86 (100 KB a multiprocessor): it does not launch */
  q = one("sm_86", 64, 32, 0, 120 * 1024, 0);
  CHECK(q.blocks_per_sm == 0 && q.occupancy == 0);
}

static void test_ptx(void) {
  kg_kernel_quality q = one("sm_90", 256, 64, 4096, 0, 0);
  CHECK(q.load_bits == 128 && q.store_bits == 64 && q.shared_staged);
  CHECKF(q.fma == 2 && q.instructions == 8, "%d fma of %d", q.fma, q.instructions);
  kg_kernel_quality r = one("sm_90", 256, 64, 4096, 0, 1);
  CHECK(r.load_bits == 32 && r.store_bits == 32 && !r.shared_staged && r.fma == 0 && r.instructions == 3);
  CHECK(r.spill_bytes == 8 && r.threads == 32);
  char line[1024];
  kg_cuda_quality_line(&q, "sm_90", line, sizeof line);
  CHECK_STR_CONTAINS(line, "kernel kgen_k0 (sm_90): 256 threads, 64 registers, no spills, 4096 B shared; 4 blocks/SM "
                           "(limited by registers), occupancy 50%; global loads 128-bit, stores 64-bit; shared "
                           "staging; FMA 25% of 8 PTX instructions");
  kg_cuda_quality_line(&r, "sm_90", line, sizeof line);
  CHECK_STR_CONTAINS(line, "8 B spilled");
  /* errors: an arch without figures, a kernel not in the PTX */
  kg_cuda_kernel kk = {"kgen_k9", {1, 1, 1}, {32, 1, 1}, 0, 0};
  kg_cuda_program p = {.kernels = &kk, .nkernels = 1};
  kg_kernel_resources res = {"kgen_k9", 8, 0, 0, 0, 0};
  kg_cubin c = {.ptx = (char *)ptx, .res = &res, .nres = 1};
  kg_kernel_quality x;
  char why[256];
  CHECK(kg_cuda_quality(&p, &c, "sm_90", &x, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "kernel kgen_k9 is not in the PTX");
  CHECK(kg_cuda_quality(&p, &c, "sm_61", &x, why, sizeof why) == -1);
  CHECK_STR_CONTAINS(why, "no multiprocessor figures for arch 'sm_61'");
}

/* Bank conflicts (lower/work.c) of a transpose through a 32 x 32 shared tile: the fetch stores rows (consecutive
 * threads, consecutive words: conflict-free); the output reads a column (consecutive threads 32 words apart: one
 * bank, 32-way). Padding the tile's rows by one word (pad) fixes it. */
static int banks_of(const char *trace_text, char *where, size_t wlen) {
  static const char src[] = "def t(A: f32[N, M]) -> (B: f32[M, N]) {\n  B[i, j] = A[j, i]\n}\n";
  kg_program *p = kg_test_load_sizes(src, "N=64 M=64");
  CHECK(p != NULL);
  if (!p) return -1;
  kg_schedule *s = kg_schedule_new(p);
  kg_trace t;
  kg_trace_init(&t);
  char err[512];
  int deg = -1;
  if (kg_trace_parse(&t, "trace", trace_text, strlen(trace_text), err, sizeof err) == 0 &&
      kg_schedule_apply_trace(s, &t, err, sizeof err) == 0) {
    kg_arena a;
    kg_arena_init(&a);
    kg_lowered *f = kg_lower(s, KG_TARGET_CUDA, &a, err, sizeof err);
    CHECKF(f != NULL, "%s", err);
    if (f) deg = kg_lower_bank_conflicts(f, 0, where, wlen);
    kg_arena_free(&a);
  } else {
    CHECKF(0, "trace: %s", err);
  }
  kg_trace_free(&t);
  kg_schedule_free(s);
  kg_program_free(p);
  return deg;
}

static void test_banks(void) {
  static const char tile[] = "tile B i j 32 32\nbind B i.o blockIdx.y\nbind B j.o blockIdx.x\nbind B i.i threadIdx.y\n"
                             "bind B j.i threadIdx.x\ncache_read A shared B\ncompute_at A.shared B j.o\n";
  char where[128], tr[512];
  /* the fetch's rows on threadIdx.x: the column read is 32-way */
  snprintf(tr, sizeof tr, "%sbind A.shared ax0 threadIdx.y\nbind A.shared ax1 threadIdx.x\n", tile);
  int d = banks_of(tr, where, sizeof where);
  CHECKF(d == 32 && !strcmp(where, "A_shared load"), "%d-way (%s)", d, where);
  /* the same with the tile's rows padded by a float (pad): conflict-free */
  snprintf(tr, sizeof tr, "%sbind A.shared ax0 threadIdx.y\nbind A.shared ax1 threadIdx.x\npad A.shared 1\n", tile);
  d = banks_of(tr, where, sizeof where);
  CHECKF(d == 1, "padded: %d-way (%s)", d, where);
  /* no shared access: 0 */
  d = banks_of("tile B i j 32 32\nbind B i.o blockIdx.y\nbind B j.o blockIdx.x\nbind B j.i threadIdx.x\n", where,
               sizeof where);
  CHECKF(d == 0, "%d", d);
  /* the output's i on threadIdx.x instead: the tile read along a row, conflict-free both ways */
  d = banks_of("tile B i j 32 32\nbind B i.o blockIdx.y\nbind B j.o blockIdx.x\nbind B j.i threadIdx.y\n"
               "bind B i.i threadIdx.x\ncache_read A shared B\ncompute_at A.shared B i.o\n"
               "bind A.shared ax0 threadIdx.y\nbind A.shared ax1 threadIdx.x\n",
               where, sizeof where);
  CHECKF(d == 1, "%d-way (%s)", d, where);
}

int main(void) {
  test_occupancy();
  test_ptx();
  test_banks();
  TEST_END();
}
