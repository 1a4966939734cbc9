/* bfdot: bf16 pair dot products on the C target (schedule/tensorize.c, lower/lower.c build_bfdot, codegen/c.c
 * put_bfdot and the prelude's kg_bf_* helpers). Checks: the helpers with the instruction (where this machine's
 * compiler targets AVX-512 BF16) and without it (KG_NO_BFDOT) against double sums of the same bf16 values; the
 * schedules below verified against the reference, their code holding the dot products; every precondition refused
 * with its message, at the step or at lowering; the cpu/tile-rk sketch's dot points realized, stepped and verified. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kgen.h"
#include "base/half.h"
#include "base/strbuf.h"
#include "codegen/codegen.h"
#include "gen/space.h"
#include "runtime/cpu.h"
#include "testlib.h"
#include "testutil.h"

/* matmul with every tensor bf16: the reduction is the f32 stage C.r0 */
static const char GEMM[] = "def matmul(A: bf16[M, K], B: bf16[K, N]) -> (C: bf16[M, N]) {\n"
                           "  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n";

/* rows 8 (i.i.i), columns 32 (j.i), k pairs over 64 (k.i), B packed per k step or read in place */
static const char TILE[] = "split C.r0 i 16\nsplit C.r0 i.i 8\nsplit C.r0 j 32\nsplit C.r0 k 64\n"
                           "reorder C.r0 i.o j.o k.o i.i.o i.i.i j.i k.i\nfuse C.r0 i.o j.o\nparallel C.r0 i.o*j.o\n";

/* The helpers: 4096 dot products of 16 lanes over 8 pairs, with and without the instruction, against double. */
static void test_helpers(int native) {
  kg_cpu_module m;
  int rc = kg_test_build_with_prelude(native ? "" : "#define KG_NO_BFDOT 1\n",
                     "void dots_args(float **a) {\n"
                     "  const uint16_t *x = (const uint16_t *)(const void *)a[0], *y = (const uint16_t *)(const void *)a[1];\n"
                     "  float *out = a[2];\n"
                     "  for (int t = 0; t < 256; t++) {\n"
                     "    kg_bf_acc acc = kg_bf_load(out + 16 * t);\n"
                     "    for (int k = 0; k < 16; k += 2) {\n"
                     "      const uint16_t *yk = y + t * 256 + k * 16;\n"
                     "      acc = kg_bf_dot(acc, kg_bf_pair(x + t * 16 + k, 1), kg_bf_interleave(yk, yk + 16));\n"
                     "    }\n"
                     "    kg_bf_store(out + 16 * t, acc);\n"
                     "  }\n"
                     "}\n",
                     "dots", &m);
  CHECKF(rc == 0, "the bfdot helpers (%s) do not build: %s", native ? "native" : "portable", m.log ? m.log : "?");
  if (rc) return;
  enum { T = 256 };
  uint16_t *x = malloc(2 * T * 16), *y = malloc(2 * T * 256);
  float *out = malloc(sizeof(float) * T * 16);
  uint64_t r = 99;
  for (int i = 0; i < T * 16; i++) x[i] = kg_bf16_from_f32((float)((int)((r = r * 6364136223846793005ull + 1) >> 40) % 2001 - 1000) / 256.0f);
  for (int i = 0; i < T * 256; i++) y[i] = kg_bf16_from_f32((float)((int)((r = r * 6364136223846793005ull + 1) >> 40) % 2001 - 1000) / 512.0f);
  for (int i = 0; i < T * 16; i++) out[i] = (float)(i % 7) - 3;
  float *args[3] = {(float *)(void *)x, (float *)(void *)y, out};
  kg_cpu_call(&m, args, 3);
  int bad = 0;
  for (int t = 0; t < T; t++)
    for (int l = 0; l < 16; l++) {
      double want = (double)((t * 16 + l) % 7) - 3, mag = fabs(want);
      for (int k = 0; k < 16; k++) {
        double p = (double)kg_bf16_to_f32(x[t * 16 + k]) * kg_bf16_to_f32(y[t * 256 + (k / 2) * 32 + (k % 2) * 16 + l]);
        want += p;
        mag += fabs(p);
      }
      if (fabs(out[t * 16 + l] - want) > 1e-6 * mag + 1e-30 && bad++ < 5)
        CHECKF(0, "bfdot helpers (%s): dot %d lane %d = %.9g, want %.9g", native ? "native" : "portable", t, l,
               (double)out[t * 16 + l], want);
    }
  CHECKF(bad == 0, "bfdot helpers (%s): %d lanes off", native ? "native" : "portable", bad);
  kg_cpu_module_free(&m);
  free(x), free(y), free(out);
}

/* pairs: the column operand is stored in pairs of k, so its vectors are loaded, not interleaved; one_row: the
 * partial tiles' rows as dot products of one row (1), none so (0), either (-1) */
static void check_legal_as(const char *sizes, const char *sched, const char *what, int pairs, int one_row) {
  kg_test_workload w;
  if (kg_test_workload_from_text(&w, GEMM, sizes, 3, what) != 0) return;
  kg_schedule *s = kg_schedule_new(w.p);
  char err[1024];
  CHECKF(kg_test_apply_text(s, sched, err, sizeof err) == 0, "%s: %s", what, err);
  char *src = kg_test_print_c(s, err, sizeof err);
  CHECKF(src && strstr(src, "kg_bf_dot("), "%s: %s", what, src ? "no dot products" : err);
  int loaded = src && strstr(src, "kg_bf_load_pairs(kg_bk"), interleaved = src && strstr(src, "kg_bf_interleave(kg_bk");
  CHECKF(src && loaded == pairs && interleaved == !pairs,
         "%s: the column operand %s", what, pairs ? "not loaded in pairs" : "not interleaved");
  int rows = src && strstr(src, "(one row)");
  CHECKF(one_row < 0 || rows == one_row, "%s: %s", what,
         one_row ? "no dot products of one row" : "dot products of one row");
  free(src);
  kg_test_verify_c(&w, s, what);
  kg_schedule_free(s);
  kg_test_workload_free(&w);
}

static void check_legal(const char *sizes, const char *sched, const char *what) {
  check_legal_as(sizes, sched, what, 0, -1);
}

/* The rows a tile leaves over (rows 6 over M = 40: 4) as dot products of one row, where the rows loop is the
 * outermost of the three; M = 3: every row so. With the rows loop inside the columns, the plain loops. */
static void test_one_row(void) {
  static const char T6[] = "split C.r0 i 6\nsplit C.r0 j 32\nsplit C.r0 k 32\n"
                           "reorder C.r0 i.o j.o k.o i.i j.i k.i\nparallel C.r0 i.o\nbfdot C.r0 i.i j.i k.i\n";
  static const char T6C[] = "split C.r0 i 6\nsplit C.r0 j 32\nsplit C.r0 k 32\n"
                            "reorder C.r0 i.o j.o k.o j.i i.i k.i\nparallel C.r0 i.o\nbfdot C.r0 i.i j.i k.i\n";
  const struct {
    const char *sizes, *sched;
    int one_row;
  } cases[] = {{"M=40 N=64 K=64", T6, 1}, {"M=3 N=32 K=96", T6, 1}, {"M=36 N=64 K=64", T6, 0},
                {"M=40 N=64 K=64", T6C, 0}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char what[96];
    snprintf(what, sizeof what, "one-row remainder, case %zu (%s)", c, cases[c].sizes);
    check_legal_as(cases[c].sizes, cases[c].sched, what, 0, cases[c].one_row);
  }
}

static void test_legal(void) {
  char sched[2048];
  snprintf(sched, sizeof sched, "%sbfdot C.r0 i.i.i j.i k.i\n", TILE);
  check_legal("M=32 N=64 K=128", sched, "8 x 32 x 64 in place");
  snprintf(sched, sizeof sched, "%scache_read B local C.r0\ncompute_at B.local C.r0 k.o\nvectorize B.local ax1\n"
           "cache_read A local C.r0\ncompute_at A.local C.r0 i.i.o\nbfdot C.r0 i.i.i j.i k.i\n", TILE);
  check_legal("M=48 N=96 K=192", sched, "8 x 32 x 64, both operands packed");
  /* the loops in another order, one row, 64 columns; an f32 output */
  /* tiles that do not divide (rows 36 = 4 tiles of 8 and one of 4, k 136 = 2 steps of 64 and one of 8): the whole
   * tiles dot products, the partial ones plain loops */
  check_legal("M=36 N=64 K=136", sched, "8 x 32 x 64 with partial tiles");
  /* computed per tile of C (a region buffer), tiles partial along every axis */
  check_legal("M=70 N=40 K=34",
              "split C i 8\nsplit C j 32\nreorder C i.o j.o i.i j.i\nparallel C i.o\ncompute_at C.r0 C j.o\n"
              "split C.r0 i 8\nsplit C.r0 j 32\nsplit C.r0 k 8\nreorder C.r0 i.o j.o k.o i.i j.i k.i\n"
              "bfdot C.r0 i.i j.i k.i\n", "8 x 32 x 8 per tile of C, partial tiles");
  check_legal("M=4 N=64 K=32",
              "split C.r0 k 8\nreorder C.r0 k.o i k.i j\nbfdot C.r0 i j k.i\n", "4 x 64 x 8, order k, j");
  /* B packed in pairs of k ([k/2][j][2]) per k step, and BLIS's panels in pairs ([j/32][k/2][32][2]) once per k
   * block shared by the row blocks; tiles partial along the rows and k (the plain loops read the pairs too) */
  snprintf(sched, sizeof sched, "%scache_read B local C.r0\nsplit_storage B.local ax0 2\n"
           "reorder_storage B.local ax0.o ax1 ax0.i\ncompute_at B.local C.r0 k.o\nbfdot C.r0 i.i.i j.i k.i\n", TILE);
  check_legal_as("M=36 N=64 K=136", sched, "8 x 32 x 64, B in pairs, partial tiles", 1, -1);
  static const char BLIS[] = "split C.r0 k 64\nsplit C.r0 i 16\nsplit C.r0 i.i 8\nsplit C.r0 j 32\n"
                             "reorder C.r0 k.o i.o j.o i.i.o i.i.i j.i k.i\nparallel C.r0 i.o\n"
                             "cache_read B local C.r0\nsplit_storage B.local ax1 32\nsplit_storage B.local ax0 2\n"
                             "reorder_storage B.local ax1.o ax0.o ax1.i ax0.i\ncompute_at B.local C.r0 k.o\n"
                             "parallel B.local ax1.o\nunroll B.local ax0.i\nbfdot C.r0 i.i.i j.i k.i\n";
  check_legal_as("M=40 N=96 K=200", BLIS, "BLIS order, panels in pairs, partial tiles", 1, 1);
  check_legal_as("M=1 N=32 K=2", BLIS, "BLIS order, panels in pairs, one pair", 1, -1);
}

static void expect_error(const char *text, const char *sizes, const char *sched, const char *needle, int at_lower) {
  kg_program *p = kg_test_load_sizes(text, sizes);
  CHECK(p != NULL);
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  char err[1024] = "";
  int rc = kg_test_apply_text(s, sched, err, sizeof err);
  if (at_lower) {
    CHECKF(rc == 0, "%s", err);
    char *src = rc == 0 ? kg_test_print_c(s, err, sizeof err) : NULL;
    CHECKF(!src && strstr(err, needle), "want '%s', got %s", needle, src ? "success" : err);
    free(src);
    /* and never on CUDA */
    kg_arena la;
    kg_arena_init(&la);
    kg_lowered *lw = rc == 0 ? kg_lower(s, KG_TARGET_CUDA, &la, err, sizeof err) : NULL;
    CHECKF(!lw, "bfdot lowered for CUDA");
    kg_arena_free(&la);
  } else {
    CHECKF(rc != 0 && strstr(err, needle), "want '%s', got %s", needle, rc ? err : "success");
  }
  kg_schedule_free(s);
  kg_program_free(p);
}

static void test_illegal(void) {
  const char *sz = "M=32 N=64 K=128";
  char sched[2048];
  snprintf(sched, sizeof sched, "%sbfdot C.r0 i.i.i j.i k.i\n", TILE);
  expect_error("def mm(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {\n  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n", sz,
               "split C k 8\nreorder C k.o i j k.i\nbfdot C i j k.i\n", "bf16 dot products take two bf16 operands", 0);
  expect_error("def mm(A: f16[M, K], B: f16[K, N]) -> (C: f32[M, N]) {\n  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n", sz,
               "split C k 8\nreorder C k.o i j k.i\nbfdot C i j k.i\n", "are f16 and f16", 0);
  expect_error(GEMM, "M=32 N=64 K=96", "split C.r0 k 3\nreorder C.r0 k.o i j k.i\nbfdot C.r0 i j k.i\n", "reduction loop of an even extent", 0);
  expect_error(GEMM, sz, "split C.r0 k 8\nreorder C.r0 i k.o j k.i\nbfdot C.r0 i j k.i\n",
               "loop i (rows) is not among the three innermost loops", 0);
  expect_error(GEMM, "M=32 N=24 K=32", "split C.r0 k 8\nreorder C.r0 k.o i j k.i\nbfdot C.r0 i j k.i\n", "a multiple of 16 up to 64", 0);
  expect_error(GEMM, "M=32 N=128 K=32", "split C.r0 k 8\nreorder C.r0 k.o i j k.i\nbfdot C.r0 i j k.i\n", "a multiple of 16 up to 64", 0);
  expect_error(GEMM, "M=20 N=64 K=32", "split C.r0 k 8\nreorder C.r0 k.o i j k.i\nbfdot C.r0 i j k.i\n", "up to 16 (it is 20)", 0);
  expect_error(GEMM, "M=8 N=64 K=32", "split C.r0 k 8\nreorder C.r0 k.o i j k.i\nbfdot C.r0 i j k.i\n", "32 accumulator vectors, over 28", 0);
  expect_error(GEMM, "M=4 N=64 K=32", "bfdot C.r0 i j k\n", "loop k is the reduction's first loop", 0);
  /* the loops are frozen afterwards, and the step is taken once */
  snprintf(sched, sizeof sched, "%sbfdot C.r0 i.i.i j.i k.i\nsplit C.r0 k.i 4\n", TILE);
  expect_error(GEMM, sz, sched, "loop k.i is tensorized", 0);
  snprintf(sched, sizeof sched, "%sbfdot C.r0 i.i.i j.i k.i\nbfdot C.r0 i.i.i j.i k.i\n", TILE);
  expect_error(GEMM, sz, sched, "already computed by bfdot", 0);
  snprintf(sched, sizeof sched, "%sparallel C.r0 j.i\nbfdot C.r0 i.i.i j.i k.i\n", TILE);
  expect_error(GEMM, sz, sched, "loop j.i is parallel; the instruction's loops must be in one thread", 0);
  expect_error("def f(A: bf16[M, K], B: bf16[K, N]) -> (C: f32[M, N]) {\n  C[i, j] = sum[k](A[i, k] + B[k, j])\n}\n",
               sz, "split C k 8\nreorder C k.o i j k.i\nbfdot C i j k.i\n", "its body must be the product of two tensor reads", 0);
  /* at lowering: columns not contiguous in B (B transposed) */
  snprintf(sched, sizeof sched, "%sbfdot C.r0 i.i.i j.i k.i\n", TILE);
  expect_error("def mt(A: bf16[M, K], B: bf16[N, K]) -> (C: f32[M, N]) {\n  C[i, j] = sum[k](A[i, k] * B[j, k])\n}\n",
               "M=4 N=16 K=16", "split C k 8\nreorder C k.o i j k.i\nbfdot C i j k.i\n", "contiguous along the columns", 1);
  /* a copy in fours of k ([k/4][j][4]): neither contiguous nor in pairs */
  snprintf(sched, sizeof sched, "%scache_read B local C.r0\nsplit_storage B.local ax0 4\n"
           "reorder_storage B.local ax0.o ax1 ax0.i\ncompute_at B.local C.r0 k.o\nbfdot C.r0 i.i.i j.i k.i\n", TILE);
  expect_error(GEMM, sz, sched, "or the column operand stored in pairs of k", 1);
}

/* cpu/tile-rk's dot knob: its points with dot realize with a bfdot step (where the tile allows) and verify. */
static void test_sketch(void) {
  kg_test_workload w;
  if (kg_test_workload_from_text(&w, GEMM, "M=64 N=64 K=128", 5, "bf16 GEMM") != 0) return;
  kg_space *sp = kg_space_new(w.p, KG_TARGET_C, NULL);
  int k = sp ? kg_space_find_sketch(sp, "cpu/tile-rk") : -1;
  CHECK(k >= 0);
  uint64_t rng = 7;
  /* paired: points in BLIS's order, whose panels are packed in pairs of k and loaded as such */
  int stepped = 0, tried = 0, paired = 0;
  for (int t = 0; k >= 0 && t < 2000 && (stepped < 4 || paired < 2); t++) {
    kg_point pt;
    kg_space_sample(sp, k, &rng, &pt);
    char err[1024];
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    if (!s) continue;
    kg_sstage *c = kg_schedule_find_stage(s, "C.r0");
    int blis = kg_point_knob(&sp->sketches[k], &pt, "C.r0", "order", 0) == 2;
    if (c && c->bfdot[0] && (stepped < 4 || (blis && paired < 2))) {
      char what[64];
      snprintf(what, sizeof what, "cpu/tile-rk dot point %d", t);
      int ok = kg_test_verify_c(&w, s, what);
      stepped += ok;
      char *src = kg_test_print_c(s, err, sizeof err);
      int pairs = src && strstr(src, "kg_bf_load_pairs(kg_bk");
      CHECKF(pairs == blis, "%s: %s the BLIS order, its column operand %s in pairs", what, blis ? "in" : "not in",
             pairs ? "loaded" : "not loaded");
      paired += ok && pairs;
      free(src);
    }
    tried++;
    kg_schedule_free(s);
  }
  CHECKF(stepped >= 4 && paired >= 2, "%d of %d cpu/tile-rk points used bf16 dot products and verified, %d of them "
         "in pairs", stepped, tried, paired);
  kg_space_free(sp);
  kg_test_workload_free(&w);
}

int main(void) {
  test_helpers(1);
  test_helpers(0);
  test_legal();
  test_illegal();
  test_one_row();
  test_sketch();
  TEST_END();
}
