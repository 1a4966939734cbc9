/* Lowering, the C printer and the CPU runner, end to end: program -> schedule (trace text) -> kg_lower ->
 * kg_codegen_c -> kg_cpu_build -> run on random inputs -> kg_verify against the reference evaluator.
 * Every primitive is exercised by a hand-written trace on matmul, softmax and conv2d at small odd sizes, and the
 * generated code's structure is asserted where it matters (pragmas, guards, allocations). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../codegen/codegen.h"
#include "../runtime/cpu.h"
#include "../runtime/verify.h"
#include "../lower/ir.h"
#include "../lower/bounds.h"
#include "testlib.h"
#include "testutil.h"

static const char *const CONV2D =
    "def conv2d(X: f32[N, C, H, W], K: f32[F, C, 3, 3]) -> (Y: f32[N, F, H, W]) {\n"
    "  P[n, c, h, w] : f32[N, C, H + 2, W + 2] = select(h >= 1 && h <= H && w >= 1 && w <= W, X[n, c, h - 1, w - 1], "
    "0.0)\n"
    "  Y[n, f, y, x] = sum[c, r, s](P[n, c, y + r, x + s] * K[f, c, r, s])\n"
    "}\n";
/* strided, with index division and modulo, a min-reduction and an INT value */
static const char *const MISC =
    "def misc(A: f32[N, M]) -> (B: f32[N2, M], S: f32[N2]) {\n"
    "  T[i, j] : f32[N2, M] = A[i * 2, j] + A[i * 2 + 1, j] * 0.5 + i\n"
    "  B[i, j] = T[i, j] - T[(i + 1) % N2, j / 2]\n"
    "  S[i] = min[j](T[i, j]) + prod[j2 in 0..3](A[i, j2] * 0.25 + 1.0)\n"
    "}\n";

typedef struct outcome {
  int lowered, built, ok;
  double err;
  char *code; /* generated C (heap), NULL when not generated */
  char *ir;   /* IR dump (heap) */
  char msg[1024];
} outcome;

/* Runs the whole path; the outcome says how far it got. */
static outcome run_case(const char *src, const char *sizes, const char *trace_text, kg_target_kind target) {
  outcome o;
  memset(&o, 0, sizeof o);
  kg_program *p = kg_test_load_sizes(src, sizes);
  if (!p) {
    snprintf(o.msg, sizeof o.msg, "program did not load");
    return o;
  }
  kg_schedule *s = kg_schedule_new(p);
  kg_trace t;
  kg_trace_init(&t);
  char err[512] = "";
  if (kg_trace_parse(&t, "trace", trace_text, strlen(trace_text), err, sizeof err) != 0 ||
      kg_schedule_apply_trace(s, &t, err, sizeof err) != 0) {
    snprintf(o.msg, sizeof o.msg, "trace: %s", err);
    goto out;
  }
  kg_arena a;
  kg_arena_init(&a);
  kg_lowered *f = kg_lower(s, target, &a, err, sizeof err);
  if (!f) {
    snprintf(o.msg, sizeof o.msg, "%s", err);
    kg_arena_free(&a);
    goto out;
  }
  if (kg_ir_verify(f, err, sizeof err) != 0) {
    snprintf(o.msg, sizeof o.msg, "%s", err);
    kg_arena_free(&a);
    goto out;
  }
  o.lowered = 1;
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_ir_print(&b, f);
  o.ir = kg_strbuf_take(&b);
  if (kg_codegen_c(f, "kernel", &o.code, err, sizeof err) != 0) {
    snprintf(o.msg, sizeof o.msg, "codegen: %s", err);
    kg_arena_free(&a);
    goto out;
  }
  kg_arena_free(&a);
  kg_cpu_module m;
  /* -Wall -Wextra -Werror: the generated code must compile without a warning */
  const char *old_cc = getenv("CC");
  char *saved = old_cc ? strdup(old_cc) : NULL;
  setenv("CC", "cc -Wall -Wextra -Werror", 1);
  int rc = kg_cpu_build(o.code, "kernel", &m);
  if (saved) setenv("CC", saved, 1);
  else unsetenv("CC");
  free(saved);
  if (rc != 0) {
    snprintf(o.msg, sizeof o.msg, "build: %.900s", m.log ? m.log : "?");
    kg_cpu_module_free(&m);
    goto out;
  }
  o.built = 1;
  kg_data d;
  kg_data_init(&d, p, 7);
  kg_data_reference(&d, p, 7);
  kg_data_poison(&d, p);
  float *args[32];
  int n = 0;
  for (int i = 0; i < d.ninputs; i++) args[n++] = d.inputs[i];
  for (int i = 0; i < d.noutputs; i++) args[n++] = d.outputs[i];
  kg_cpu_call(&m, args, n);
  kg_verify_result vr = kg_verify(p, &d, 1e-4);
  o.ok = vr.ok;
  o.err = vr.max_rel_err;
  if (!vr.ok) snprintf(o.msg, sizeof o.msg, "verify: %s", vr.msg);
  kg_data_free(&d);
  kg_cpu_module_free(&m);
out:
  kg_trace_free(&t);
  kg_schedule_free(s);
  kg_program_free(p);
  return o;
}

static void outcome_free(outcome *o) {
  free(o->code);
  free(o->ir);
}

static int verbose;

/* A case that must verify. */
static outcome expect_ok(const char *what, const char *src, const char *sizes, const char *trace) {
  outcome o = run_case(src, sizes, trace, KG_TARGET_C);
  CHECKF(o.ok && o.err <= 1e-4, "%s: %s (max_rel_err %g)\n--- trace\n%s--- ir\n%s--- code\n%s", what, o.msg, o.err,
         trace, o.ir ? o.ir : "", o.code ? o.code : "");
  if (verbose) printf("=== %s\n%s\n%s\n", what, o.ir ? o.ir : "", o.code ? o.code : "");
  return o;
}

static void ok_case(const char *what, const char *src, const char *sizes, const char *trace) {
  outcome o = expect_ok(what, src, sizes, trace);
  outcome_free(&o);
}

/* Every index in code ending with suffix (" + x * 2]") is a hoisted base plus it ("[kg_oN + x * 2]"), and there
 * is at least one: the unrolled copies' reads share one base (lower/unrollidx.c). */
static int all_via_base(const char *code, const char *suffix) {
  int n = 0;
  for (const char *p = code ? strstr(code, suffix) : NULL; p; p = strstr(p + 1, suffix)) {
    const char *b = p;
    while (b > code && b[-1] != '[') b--;
    if (strncmp(b, "kg_o", 4) != 0) return 0;
    for (b += 4; b < p; b++)
      if (*b < '0' || *b > '9') return 0;
    n++;
  }
  return n > 0;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay ? strstr(hay, needle) : NULL; p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* The guards in printed C: the conditions of the kernel's function (not the prelude's helpers), less the entry's
 * NULL-pointer check (codegen/c.c), which every function has; -1 when the function is not found. */
static int guards(const char *code) {
  const char *b = code ? strstr(code, "\n/* kernel: ") : NULL;
  const char *e = b ? strstr(b, "\nvoid kernel_args(float **args) {") : NULL;
  if (!e) return -1;
  char *fn = strndup(b, (size_t)(e - b));
  int n = fn ? count(fn, "if (") - count(fn, "/* a NULL tensor pointer") : -1;
  free(fn);
  return n;
}

static void test_matmul(void) {
  const char *sz = "M=33 N=20 K=17";
  outcome o = expect_ok("matmul default", KG_TEST_MATMUL, sz, "");
  CHECK(guards(o.code) == 0);
  CHECK(count(o.code, "#pragma omp") == 0 && count(o.code, "#pragma GCC unroll") == 0);
  CHECK_STR_CONTAINS(o.code, "int kernel(const float *KG_RESTRICT A, const float *KG_RESTRICT B, float *KG_RESTRICT C)");
  CHECK_STR_CONTAINS(o.code, "void kernel_args(float **args)");
  outcome_free(&o);

  /* non-dividing split: guarded (the init inside i.i and j makes their nests imperfect); a dividing one is not */
  o = expect_ok("matmul split 8", KG_TEST_MATMUL, sz, "split C i 8\n");
  CHECK_STR_CONTAINS(o.code, "< 33");
  CHECK(guards(o.code) >= 1);
  CHECK(count(o.code, "kg_n_") == 0);
  outcome_free(&o);
  o = expect_ok("matmul split dividing", KG_TEST_MATMUL, sz, "split C j 5\n");
  CHECK(guards(o.code) == 0);
  outcome_free(&o);

  /* tile + reorder with reduction loops outside spatial ones: init inside copies of the inner spatial loops */
  o = expect_ok("matmul tile reorder", KG_TEST_MATMUL, sz,
                "tile C i j 8 6\nsplit C k 4\nreorder C i.o j.o k.o i.i k.i j.i\n");
  CHECK_STR_CONTAINS(o.code, "i_i_init");
  CHECK_STR_CONTAINS(o.code, "j_i_init");
  outcome_free(&o);

  /* fuse + parallel, vectorize, unroll */
  o = expect_ok("matmul fuse parallel vectorize unroll", KG_TEST_MATMUL, sz,
                "split C j 4\nreorder C i j.o k j.i\nfuse C i j.o\nparallel C i*j.o\nvectorize C j.i\nsplit C k 3\n"
                "unroll C k.i\n");
  /* OpenMP pragmas only where OpenMP runs (see codegen/c.c) */
  CHECK_STR_CONTAINS(o.code, "#ifdef _OPENMP\n  #pragma omp parallel for\n  #endif\n");
  CHECK_STR_CONTAINS(o.code, "#ifdef _OPENMP\n        #pragma omp simd\n        #endif\n");
  CHECK(count(o.code, "#pragma omp") == count(o.code, "#ifdef _OPENMP"));
  CHECK_STR_CONTAINS(o.code, "#pragma GCC unroll 3");
  outcome_free(&o);

  /* under an unrolled loop, an index that varies with it ends with its term (lower/unrollidx.c), and its part
   * that the unrolled loop does not change is a LET before that loop: the unrolled copies then share one base
   * address and differ by a constant, where A[C_i * 8 + k] (C_i = i.o * 8 + i.i) would give gcc one register per
   * row, which it spills in larger tiles; indices free of it keep their LETs */
  o = expect_ok("matmul unrolled rows", KG_TEST_MATMUL, "M=16 N=32 K=8",
                "split C i 8\nsplit C j 16\nreorder C i.o j.o k i.i j.i\nunroll C i.i\nvectorize C j.i\n");
  CHECK_STR_CONTAINS(o.code, "const int64_t kg_o0 = i_o * 64 + k;\n");
  CHECK_STR_CONTAINS(o.code, "A[kg_o0 + i_i * 8]");
  CHECK_STR_CONTAINS(o.code, "B[k * 32 + C_j]");
  CHECK_STR_CONTAINS(o.code, "const int64_t kg_o1 = i_o * 256 + j_o * 16;\n");
  CHECK_STR_CONTAINS(o.code, "C[kg_o1 + (j_i + i_i * 32)] = kg_acc0[j_i + i_i * 16];");
  /* the LET comes before the unrolled loop, inside the loop it varies with */
  const char *let = o.code ? strstr(o.code, "const int64_t kg_o0") : NULL;
  const char *kloop = o.code ? strstr(o.code, "for (int64_t k = 0;") : NULL;
  const char *iloop = kloop ? strstr(kloop, "for (int64_t i_i = 0;") : NULL;
  CHECK(let && kloop && iloop && kloop < let && let < iloop);
  outcome_free(&o);
  /* a stride-2 convolution with 16 output channels in the lanes and 7 output pixels unrolled around them: the
   * pixels' broadcast reads of the padded input share one base (kg_o0), not 7 pointers */
  static const char conv_s2[] =
      "def conv2d(X: f32[N, C, H, W], K: f32[F, C, 3, 3]) -> (Y: f32[N, F, (H + 2 - 3) / 2 + 1, (W + 2 - 3) / 2 + 1]) "
      "{\n  P[n, c, h, w] : f32[N, C, H + 2, W + 2] = select(h >= 1 && h <= H && w >= 1 && w <= W, X[n, c, h - 1, w - "
      "1], 0.0)\n  Y[n, f, y, x] = sum[c, r, s](P[n, c, y * 2 + r, x * 2 + s] * K[f, c, r, s])\n}\n";
  static const char conv_s2_trace[] =
      "cache_write Y local\nreorder_storage Y.local n y x f\ncache_read K local Y.local\n"
      "reorder_storage K.local ax1 ax2 ax3 ax0\nvectorize K.local ax0\nsplit Y x 7\nsplit Y f 16\n"
      "reorder Y n y f.o x.o x.i f.i\nfuse Y n y\nfuse Y n*y f.o\nparallel Y n*y*f.o\ncompute_at Y.local Y x.o\n"
      "reorder Y.local n y c r s x f\nunroll Y.local x\nvectorize Y.local f\n";
  o = expect_ok("stride-2 conv, channels in lanes", conv_s2, "N=1 C=3 H=27 W=27 F=32", conv_s2_trace);
  CHECK(all_via_base(o.code, " + x * 2]"));
  CHECK(count(o.code, "P[kg_o") == 1);
  outcome_free(&o);
  /* a ragged tile (7 does not divide 15 pixels): the nest is versioned (register tile for the whole tiles, the
   * plain loop for the last), the two versions share their statements, and only the unrolled one gets the LET */
  o = expect_ok("stride-2 conv, ragged pixel tiles", conv_s2, "N=1 C=3 H=29 W=29 F=32", conv_s2_trace);
  CHECK(all_via_base(o.code, " + x * 2]"));
  CHECK_STR_CONTAINS(o.code, "full tiles: constant extents");
  outcome_free(&o);
  /* the same without the schedule's unroll: the register tile's constant loops count as unrolled in the whole
   * tiles' version, while the last tile's plain loop, which shares their statements, is not unrolled and must
   * keep its own indices (a LET it lacks would not compile) */
  char *no_unroll = strdup(conv_s2_trace);
  char *u = strstr(no_unroll, "unroll Y.local x\n");
  memmove(u, u + strlen("unroll Y.local x\n"), strlen(u + strlen("unroll Y.local x\n")) + 1);
  o = expect_ok("stride-2 conv, ragged tiles, not unrolled", conv_s2, "N=1 C=3 H=29 W=29 F=32", no_unroll);
  CHECK_STR_CONTAINS(o.code, "full tiles: constant extents");
  CHECK(all_via_base(o.code, " + x * 2]"));
  CHECK(count(o.code, " * 2 + s]") >= 1); /* the plain loop's read as lowering wrote it */
  outcome_free(&o);
  free(no_unroll);
  /* a register accumulator's tile loops count as unrolled (gcc unrolls them to keep the accumulators in
   * registers), its reduction loop and the loops around it do not */
  o = expect_ok("matmul register tile rows", KG_TEST_MATMUL, "M=16 N=32 K=8",
                "split C i 8\nsplit C j 16\nreorder C i.o j.o k i.i j.i\nvectorize C j.i\n");
  CHECK_STR_CONTAINS(o.code, "kg_acc0");
  CHECK_STR_CONTAINS(o.code, "A[kg_o0 + i_i * 8]");
  CHECK_STR_CONTAINS(o.code, "C[kg_o1 + (j_i + i_i * 32)] = kg_acc0[j_i + i_i * 16];");
  outcome_free(&o);
  /* vectorized loop with loops inside: no simd pragma */
  o = expect_ok("matmul vectorize outer", KG_TEST_MATMUL, sz, "vectorize C j\n");
  CHECK(count(o.code, "#pragma omp simd") == 0);
  CHECK_STR_CONTAINS(o.code, "vectorize: not applied");
  outcome_free(&o);

  /* cache_write local attached with compute_at */
  o = expect_ok("matmul cache_write", KG_TEST_MATMUL, sz,
                "cache_write C local\ntile C i j 4 8\ncompute_at C.local C j.o\n");
  CHECK_STR_CONTAINS(o.ir, "alloc C_local");
  outcome_free(&o);

  /* cache_read local at a loop */
  o = expect_ok("matmul cache_read", KG_TEST_MATMUL, sz,
                "tile C i j 4 8\nsplit C k 5\nreorder C i.o j.o k.o i.i j.i k.i\ncache_read B local C\n"
                "compute_at B.local C k.o\n");
  CHECK_STR_CONTAINS(o.ir, "alloc B_local");
  outcome_free(&o);

  /* both caches, and parallel outer loop over the attached stages */
  ok_case("matmul caches parallel", KG_TEST_MATMUL, sz,
          "cache_write C local\ncache_read A local C.local\ntile C i j 4 8\ncompute_at C.local C j.o\n"
          "split C.local k 4\ncompute_at A.local C.local k.o\nparallel C i.o\n");

  /* rfactor + parallel on the rf axis */
  ok_case("matmul rfactor", KG_TEST_MATMUL, sz, "rfactor C k 4\n");
  ok_case("matmul rfactor parallel", KG_TEST_MATMUL, sz, "rfactor C k 4\nparallel C.rf k.i\n");
}

/* The init of a reduction folded into its register accumulator's first load (lower/initfold.c): the outputs are
 * poisoned before each call (run_case), so an element the fold left unwritten fails verification. */
static void test_initfold(void) {
  /* k split, its outer loop around the register tile: the accumulator starts from 0 at k.o == 0, no init nest */
  outcome o = expect_ok("initfold matmul", KG_TEST_MATMUL, "M=16 N=32 K=12",
                        "split C i 8\nsplit C j 16\nsplit C k 4\nreorder C i.o j.o k.o i.i k.i j.i\nvectorize C j.i\n");
  CHECK_STR_CONTAINS(o.code, "/* init of C: the register accumulator's first load */");
  CHECK_STR_CONTAINS(o.code, "(k_o == 0 ? 0.0f : C[");
  CHECK(count(o.code, "_init") == 0);
  outcome_free(&o);
  /* the reduction loop outside the tile loops it does not index: first = both of them at 0 */
  o = expect_ok("initfold matmul, two loops", KG_TEST_MATMUL, "M=16 N=32 K=12",
                "split C i 8\nsplit C j 16\nsplit C k 4\nreorder C i.o k.o j.o i.i k.i j.i\nvectorize C j.i\n");
  CHECK(count(o.code, "_init") == 0);
  CHECK_STR_CONTAINS(o.code, "(k_o == 0 ? 0.0f : C[");
  outcome_free(&o);
  /* convolution: c, r and s outside the register tile of x */
  o = expect_ok("initfold conv2d", CONV2D, "N=1 C=3 H=4 W=8 F=4",
                "compute_inline P\nsplit Y x 8\nreorder Y n f y c r s x.o x.i\nvectorize Y x.i\n");
  CHECK_STR_CONTAINS(o.code, "init of Y");
  CHECK(count(o.code, "_init") == 0);
  outcome_free(&o);
  /* a tile that does not divide (M=33): the register tile is versioned under a condition, the init stays */
  o = expect_ok("initfold ragged", KG_TEST_MATMUL, "M=33 N=32 K=12",
                "split C i 8\nsplit C j 16\nsplit C k 4\nreorder C i.o j.o k.o i.i k.i j.i\nvectorize C j.i\n");
  CHECK(count(o.code, "_init") > 0);
  CHECK(count(o.code, "init of C") == 0);
  outcome_free(&o);
  /* a max-reduction (identity -inf) */
  o = expect_ok("initfold min", MISC, "N=8 M=16 N2=4", "split S.r0 i 2\nreorder S.r0 i.o j i.i\n");
  CHECK_STR_CONTAINS(o.code, "kg_acc0[i_i] = INFINITY;");
  CHECK(count(o.code, "init of S_r0") == 1);
  outcome_free(&o);
}

/* The next register tile's output lines prefetched while a tile computes (lower/prefetch.c): one prefetch per
 * line (a point at most a line apart along each row, and the row's last element), under a guard that keeps them
 * inside the output; none where the loop around the tile is parallel or does not move the tile. */
static void test_prefetch(void) {
  const char *tile = "split C i 8\nsplit C j 16\nreorder C i.o j.o k i.i j.i\nvectorize C j.i\n";
  outcome o = expect_ok("prefetch matmul", KG_TEST_MATMUL, "M=16 N=32 K=8", tile);
  CHECK_STR_CONTAINS(o.code, "if (j_o + 1 < 2 && ");
  CHECK_STR_CONTAINS(o.code, "kg_prefetch_w(&C[i_o * 256 + j_o * 16 + 16]);");
  CHECK_STR_CONTAINS(o.code, "kg_prefetch_w(&C[i_o * 256 + j_o * 16 + 31]);");
  CHECK_STR_CONTAINS(o.code, "kg_prefetch_w(&C[i_o * 256 + j_o * 16 + 255]);");
  CHECKF(count(o.code, "kg_prefetch_w(&C[") == 16, "%d prefetches", count(o.code, "kg_prefetch_w(&C["));
  CHECK_STR_CONTAINS(o.ir, "prefetch C[");
  outcome_free(&o);
  /* ragged rows (M=33): the guard bounds the next tile by the output's size; outputs poisoned, results verified */
  o = expect_ok("prefetch ragged", KG_TEST_MATMUL, "M=33 N=32 K=8", tile);
  CHECK_STR_CONTAINS(o.code, "< 1056)");
  outcome_free(&o);
  /* a tile of one row (i.i outside the reduction): hardware prefetchers follow rows themselves; none */
  o = expect_ok("prefetch, one row", KG_TEST_MATMUL, "M=16 N=32 K=12",
                "split C i 8\nsplit C j 16\nsplit C k 4\nreorder C i.o j.o k.o i.i k.i j.i\nvectorize C j.i\n");
  CHECK(count(o.code, "kg_prefetch_w(&") == 0);
  outcome_free(&o);
  /* a short reduction (k of 4) would pay more for the hints than they save: none */
  o = expect_ok("prefetch, short reduction", KG_TEST_MATMUL, "M=16 N=32 K=4", tile);
  CHECK(count(o.code, "kg_prefetch_w(&") == 0);
  outcome_free(&o);
  /* a parallel loop's next iteration is another thread's */
  o = expect_ok("prefetch, parallel loop", KG_TEST_MATMUL, "M=16 N=32 K=8",
                "split C i 8\nsplit C j 16\nreorder C j.o i.o k i.i j.i\nparallel C i.o\nvectorize C j.i\n");
  CHECK(count(o.code, "kg_prefetch_w(&") == 0);
  outcome_free(&o);
  /* CUDA has none */
  outcome c = run_case(KG_TEST_MATMUL, "M=16 N=32 K=8", "", KG_TARGET_CUDA);
  CHECK(c.code && count(c.code, "kg_prefetch_w(&") == 0);
  outcome_free(&c);
}

/* Loop-bound tightening (C target): the guard of a non-dividing split around the store of a perfect nest becomes
 * the extent min(F, E - rest) of the inner loop, computed once before it. */
static void test_tighten(void) {
  const char *sz = "M=33 N=20 K=17";
  /* reduction outside the split: the init nest (j.o.init, j.i.init) and the update nest (k, j.o, j.i) are perfect */
  const char *tr = "split C j 8\nreorder C i k j.o j.i\nvectorize C j.i\n";
  outcome o = expect_ok("tighten matmul inner split", KG_TEST_MATMUL, sz, tr);
  CHECK(guards(o.code) == 0);
  CHECK_STR_CONTAINS(o.code, "const int64_t kg_n_j_i = kg_min64(8, 20 - j_o * 8);");
  CHECK_STR_CONTAINS(o.code, "#pragma omp simd\n        #endif\n        for (int64_t j_i = 0; j_i < kg_n_j_i; j_i++)");
  CHECK_STR_CONTAINS(o.code, "const int64_t kg_n_j_i_init = kg_min64(8, 20 - j_o_init * 8);");
  outcome_free(&o);

  /* CUDA keeps the guard (a thread-bound loop cannot change extent per block) and constant extents */
  o = run_case(KG_TEST_MATMUL, sz, tr, KG_TARGET_CUDA);
  CHECKF(o.lowered, "%s", o.msg);
  CHECK(count(o.ir, "if (") == 2); /* init and update */
  CHECK_STR_CONTAINS(o.ir, "< 20");
  CHECK(count(o.ir, "select(") == 0);
  outcome_free(&o);

  /* the split loop's own variable with coefficient 8 (j.o innermost) or with an inner loop in rest: kept */
  o = expect_ok("tighten reordered split", KG_TEST_SOFTMAX, "N=7 D=33", "split e j 8\nreorder e i j.i j.o\n");
  CHECK(count(o.code, "if (e_j < 33)") == 1);
  CHECK(count(o.code, "kg_n_") == 0);
  outcome_free(&o);

  /* a producer computed inside the split's inner loop: that nest is not perfect, its guard stays */
  o = expect_ok("tighten producer inside", KG_TEST_SOFTMAX, "N=7 D=33", "split e j 8\ncompute_at m e j.i\n");
  CHECK(count(o.code, "if (e_j < 33)") == 1);
  CHECK(count(o.code, "kg_n_j_i") == 0);
  outcome_free(&o);

  /* a producer at the split's outer loop: the inner loop stays perfect and is tightened, and the producer's own
   * region guard (its rows beyond the tensor) becomes the bound of its perfect copy nest */
  o = expect_ok("tighten producer outside", KG_TEST_MATMUL, sz,
                "cache_write C local\nsplit C j 8\ncompute_at C.local C j.o\nreorder C.local i k j\n");
  /* no guard left: the only conditions choose the register accumulation's full-tile version (lower/regacc.c) */
  CHECK(count(o.code, ") { /* full tiles: constant extents */") > 0);
  CHECK(guards(o.code) == count(o.code, ") { /* full tiles: constant extents */"));
  /* the IR holds the accumulation and its versioning, as printed */
  CHECK_STR_CONTAINS(o.ir, "alloc kg_acc0: f32[8] local register (accumulates C_local around loop k)");
  CHECK_STR_CONTAINS(o.ir, "if (min(8, (20 - (j_o * 8))) >= 8):");
  CHECK_STR_CONTAINS(o.code, "kg_n_j_i = kg_min64(8, 20 - j_o * 8);");
  CHECK_STR_CONTAINS(o.code, "kg_n_j = kg_min64(8, 20 - j_o * 8);");
  CHECK(count(o.code, "C_local_j =") == 0); /* the init's LET served only its guard: gone with it */
  outcome_free(&o);

  /* a split of a split: two conjuncts on the innermost loop, a minimum of minimums; unroll uses its upper bound */
  o = expect_ok("tighten nested split", KG_TEST_SOFTMAX, "N=7 D=33", "split e j 8\nsplit e j.i 3\nunroll e j.i.i\n");
  CHECK(count(o.code, "if (e_j") == 0);
  CHECK_STR_CONTAINS(o.code, "kg_n_j_i_i = kg_min64(kg_min64(3, 33 - (j_o * 8 + j_i_o * 3)), 8 - j_i_o * 3);");
  CHECK_STR_CONTAINS(o.code, "#pragma GCC unroll 3\n");
  outcome_free(&o);

  /* tile with parallel outer loops over both dimensions, and a fused outer loop (its div/mod stays in rest) */
  o = expect_ok("tighten tile parallel", KG_TEST_SOFTMAX, "N=7 D=33",
                "tile e i j 4 8\nfuse e i.o j.o\nparallel e i.o*j.o\nvectorize e j.i\n");
  CHECK(count(o.code, "if (e_") == 0);
  CHECK_STR_CONTAINS(o.code, "const int64_t kg_n_i_i = kg_min64(4, 7 - kg_floordiv(i_o_j_o, 5) * 4);");
  outcome_free(&o);

  /* rfactor, caches, softmax with everything at the row: all still verify with their loops tightened */
  ok_case("tighten caches", KG_TEST_MATMUL, sz,
          "cache_write C local\ncache_read A local C.local\ntile C i j 4 8\ncompute_at C.local C j.o\n"
          "split C.local k 4\ncompute_at A.local C.local k.o\nreorder C.local k.o k.i i j\nparallel C i.o\n");
  ok_case("tighten rfactor", KG_TEST_MATMUL, sz, "rfactor C k 5\nsplit C.rf j 6\nreorder C.rf k.i i k.o j.o j.i\n");
}

static void test_softmax(void) {
  const char *sz = "N=7 D=33";
  ok_case("softmax default", KG_TEST_SOFTMAX, sz, "");
  outcome o = expect_ok("softmax max at row", KG_TEST_SOFTMAX, sz, "compute_at m e i\n");
  CHECK_STR_CONTAINS(o.ir, "alloc m");
  outcome_free(&o);
  ok_case("softmax inline e", KG_TEST_SOFTMAX, sz, "compute_inline e\n");
  ok_case("softmax all at row", KG_TEST_SOFTMAX, sz,
          "compute_at m e i\ncompute_at Y.r0 Y i\nsplit Y j 8\nvectorize Y j.i\nparallel Y i\n");
  /* one pass over each row: the maximum computed at the output's row loop, read there by the row sum (computed
   * at the same loop, exp inlined into both) and by the output; its region is the row's one value, not the
   * whole tensor, and so is the sum's */
  static const char one_pass[] = "split Y j 8\nvectorize Y j.i\nparallel Y i\nrfactor Y.r0 j2 16\n"
                                 "split Y.r0.rf j2.i 8\nreorder Y.r0.rf i j2.o j2.i.o j2.i.i\n"
                                 "vectorize Y.r0.rf j2.i.i\ncompute_at Y.r0 Y i\ncompute_at Y.r0.rf Y.r0 i\n"
                                 "compute_inline e\nrfactor m j 16\nreorder m.rf i j.o j.i\nvectorize m.rf j.i\n"
                                 "compute_at m Y i\ncompute_at m.rf m i\n";
  o = expect_ok("softmax one pass", KG_TEST_SOFTMAX, sz, one_pass);
  CHECK_STR_CONTAINS(o.code, "float m[1];");
  CHECK_STR_CONTAINS(o.code, "float Y_r0[1];");
  outcome_free(&o);
  /* the exponentials kept in a row buffer (read by the sum and the output, both inside the row loop), the
   * maximum computed at the buffer's row */
  o = expect_ok("softmax one pass, exp row", KG_TEST_SOFTMAX, sz,
                "parallel Y i\nrfactor Y.r0 j2 8\nreorder Y.r0.rf i j2.o j2.i\nvectorize Y.r0.rf j2.i\n"
                "compute_at Y.r0 Y i\ncompute_at Y.r0.rf Y.r0 i\ncompute_at e Y i\ncompute_at m e i\n");
  CHECK_STR_CONTAINS(o.code, "float e[33];");
  CHECK_STR_CONTAINS(o.code, "float m[1];");
  outcome_free(&o);
  /* the division by the row sum, invariant in the vectorized loop, becomes a product by its reciprocal computed
   * once per row (lower/recip.c), the plain division kept for a divisor whose reciprocal overflows */
  o = expect_ok("softmax reciprocal", KG_TEST_SOFTMAX, sz,
                "compute_at m e i\ncompute_at Y.r0 Y i\nsplit Y j 8\nvectorize Y j.i\nparallel Y i\n");
  CHECK_STR_CONTAINS(o.ir, "alloc kg_rcp0: f32[1] local");
  CHECK_STR_CONTAINS(o.code, "kg_rcp0[0] = 1.0f / Y_r0[0];");
  CHECK_STR_CONTAINS(o.code, "* kg_rcp0[0];");
  CHECK_STR_CONTAINS(o.code, "/ Y_r0[0];");
  CHECK(count(o.code, "kg_rcp") >= 4);
  outcome_free(&o);
  /* not vectorized, or the divisor varies in the loop: divisions stay */
  o = expect_ok("softmax no vector loop", KG_TEST_SOFTMAX, sz, "compute_at m e i\ncompute_at Y.r0 Y i\n");
  CHECK(count(o.code, "kg_rcp") == 0);
  outcome_free(&o);
  /* a subnormal divisor (about 1e-40, whose reciprocal overflows): the run-time test takes the plain division,
   * so quotients near 1e10 stay finite and verify */
  static const char tiny[] = "def f(X: f32[N, D]) -> (Y: f32[N, D]) {\n"
                             "  Y[i, j] = (X[i, j] * 1e-30) / (X[i, 0] * 1e-30 * 1e-10)\n"
                             "}\n";
  o = expect_ok("subnormal divisor", tiny, "N=5 D=37", "split Y j 16\nvectorize Y j.i\n");
  CHECK_STR_CONTAINS(o.code, "kg_rcp0");
  outcome_free(&o);
  /* the row sum inside a column loop of the output, the maximum at the row loop outside it */
  o = expect_ok("softmax max outside the sum's loop", KG_TEST_SOFTMAX, sz,
                "compute_inline e\nsplit Y j 8\ncompute_at Y.r0 Y j.o\ncompute_at m Y i\n");
  CHECK_STR_CONTAINS(o.code, "float m[1];");
  outcome_free(&o);
}

static void test_conv2d(void) {
  const char *sz = "N=2 C=3 H=9 W=11 F=4";
  ok_case("conv2d default", CONV2D, sz, "");
  outcome o = expect_ok("conv2d inline P", CONV2D, sz, "compute_inline P\n");
  CHECK(count(o.code, "P[") == 0);
  outcome_free(&o);
  o = expect_ok("conv2d P at y", CONV2D, sz, "compute_at P Y y\n");
  CHECK_STR_CONTAINS(o.ir, "alloc P");
  outcome_free(&o);
  ok_case("conv2d P at tiled x", CONV2D, sz, "tile Y y x 4 4\ncompute_at P Y x.o\nparallel Y n\n");
  ok_case("conv2d P at reduction c", CONV2D, sz, "reorder Y n f c y x r s\ncompute_at P Y c\n");
  ok_case("conv2d P at split", CONV2D, sz, "split Y x 4\nfuse Y y x.o\ncompute_at P Y y*x.o\n");
  ok_case("conv2d cache_read of K", CONV2D, sz, "compute_inline P\ncache_read K local Y\ncompute_at K.local Y f\n");
  /* a copy of X made at y for the padding computed inside it at x: its region covers every x of the row */
  ok_case("conv2d X copy at y, padding at x", CONV2D, sz,
          "cache_read X local P\ncompute_at P Y x\ncompute_at X.local Y y\n");
}

static const char *const SCALAR =
    "def total(A: f32[N], B: f32[N]) -> (S: f32[]) {\n"
    "  S[] = sum[i](A[i] * 2.0) \n"
    "}\n";

static void test_misc(void) {
  ok_case("misc default", MISC, "N=10 M=7 N2=5", "");
  ok_case("misc inline T", MISC, "N=10 M=7 N2=5", "compute_inline T\n");
  ok_case("misc split T", MISC, "N=10 M=7 N2=5", "split T j 3\nsplit S.r0 j 2\nvectorize T j.i\ncompute_at S.r1 S i\ncompute_at S.r0 S i\n");
  /* a scalar output and an unused input */
  outcome o = expect_ok("scalar", SCALAR, "N=37", "split S i 8\nunroll S i.i\n");
  CHECK_STR_CONTAINS(o.code, "S[0] = 0.0f;");
  CHECK_STR_CONTAINS(o.code, "(void)B;");
  outcome_free(&o);
  /* a cache of X read through the inlined padding stage (the select's reads count) */
  o = expect_ok("conv2d cache through inline", CONV2D, "N=2 C=3 H=9 W=11 F=4",
                "cache_read X local P\ncompute_inline P\ncompute_at X.local Y y\n");
  CHECK_STR_CONTAINS(o.ir, "alloc X_local");
  outcome_free(&o);
}

static void test_errors(void) {
  outcome o = run_case(KG_TEST_MATMUL, "M=33 N=20 K=17", "split C i 8\nbind C i.o blockIdx.x\nbind C i.i threadIdx.x\n",
                       KG_TARGET_C);
  CHECK(!o.lowered);
  CHECK_STR_CONTAINS(o.msg, "C");
  CHECK_STR_CONTAINS(o.msg, "i.o");
  CHECK_STR_CONTAINS(o.msg, "blockIdx.x");
  outcome_free(&o);
  o = run_case(KG_TEST_MATMUL, "M=33 N=20 K=17", "split C i 8\nbind C i.o blockIdx.x\n", KG_TARGET_CUDA);
  CHECK(o.lowered);
  CHECK(!o.built);
  CHECK_STR_CONTAINS(o.msg, "codegen");
  outcome_free(&o);
  o = run_case(KG_TEST_MATMUL, "M=33 N=20 K=17", "cache_read A shared C\ncompute_at A.shared C i\n", KG_TARGET_C);
  CHECK(!o.lowered);
  CHECK_STR_CONTAINS(o.msg, "shared");
  outcome_free(&o);
}

/* CUDA lowering builds the same IR: a shared cache gets a SHARED allocation with barriers around its nest, and
 * its region is relaxed over the threadIdx loops (8 rows of A, not 1). The C printer refuses it. */
static void test_cuda_ir(void) {
  outcome o = run_case(KG_TEST_MATMUL, "M=33 N=20 K=17",
                       "cache_read A shared C\nsplit C i 8\nbind C i.o blockIdx.x\nbind C i.i threadIdx.x\n"
                       "compute_at A.shared C i.i\n",
                       KG_TARGET_CUDA);
  CHECKF(o.lowered, "%s", o.msg);
  CHECK_STR_CONTAINS(o.ir, "alloc A_shared: f32[136] shared");
  CHECK(count(o.ir, "barrier") == 2);
  CHECK(!o.built);
  outcome_free(&o);
  /* local scope is not relaxed: one row per thread */
  o = run_case(KG_TEST_MATMUL, "M=33 N=20 K=17",
               "cache_read A local C\nsplit C i 8\nbind C i.o blockIdx.x\nbind C i.i threadIdx.x\n"
               "compute_at A.local C i.i\n",
               KG_TARGET_CUDA);
  CHECKF(o.lowered, "%s", o.msg);
  CHECK_STR_CONTAINS(o.ir, "alloc A_local: f32[17] local");
  CHECK(count(o.ir, "barrier") == 0);
  outcome_free(&o);
  /* a cross-thread reduction's result is stored by one thread, in the IR (lower/writer.c): the blockIdx loop
   * distinguishes the rows, the threads do not; the other stages launch no thread and stay unguarded */
  o = run_case(KG_TEST_SOFTMAX, "N=6 D=40", "split m j 32\nbind m i blockIdx.x\nbind m j.i threadIdx.x\n",
               KG_TARGET_CUDA);
  CHECKF(o.lowered, "%s", o.msg);
  CHECK_STR_CONTAINS(o.ir, "allreduce max m_red[0] across threadIdx.x (32, warp shuffles)  # m.j.i\n"
                           "      if (threadIdx.x == 0):\n        m[i] = m_red[0]\n");
  CHECK(count(o.ir, " == 0)") == 1);
  outcome_free(&o);
  /* the launch shape is the IR's (lower/launch.c): the fetch's threadIdx.x loop (4) is narrower than the block
   * (8), so threads 4..7 skip it under an IF on the thread index; the block-wide loop C.i.i is not guarded */
  const char *narrow_fetch = "split C i 8\nbind C i.o blockIdx.x\nbind C i.i threadIdx.x\ncache_read A shared C\n"
                             "compute_at A.shared C i.o\nsplit A.shared ax1 4\nbind A.shared ax1.i threadIdx.x\n";
  o = run_case(KG_TEST_MATMUL, "M=32 N=20 K=17", narrow_fetch, KG_TARGET_CUDA);
  CHECKF(o.lowered, "%s", o.msg);
  CHECK_STR_CONTAINS(o.ir, "  # kernel 0: grid (4, 1, 1) block (8, 1, 1)\n");
  CHECK_STR_CONTAINS(o.ir, "if (threadIdx.x < 4):\n            for ax1_i in [0, 4) bound threadIdx.x");
  CHECK(count(o.ir, "(threadIdx.x < ") == 1 && count(o.ir, "blockIdx.x < ") == 0);
  outcome_free(&o);
  /* with the fetch as wide as the block, nothing is guarded */
  o = run_case(KG_TEST_MATMUL, "M=32 N=20 K=17",
               "split C i 8\nbind C i.o blockIdx.x\nbind C i.i threadIdx.x\ncache_read A shared C\n"
               "compute_at A.shared C i.o\nsplit A.shared ax1 8\nbind A.shared ax1.i threadIdx.x\n",
               KG_TARGET_CUDA);
  CHECKF(o.lowered, "%s", o.msg);
  CHECK(count(o.ir, "(threadIdx.x < ") == 0);
  outcome_free(&o);
  /* a barrier under such a guard would not be reached by threads past it: lowering refuses it */
  o = run_case(KG_TEST_MATMUL, "M=32 N=32 K=32",
               "split C i 8\nbind C i.i threadIdx.x\nbind C i.o blockIdx.x\ncache_read A shared C\n"
               "compute_at A.shared C i.i\nbind A.shared ax1 threadIdx.x\n",
               KG_TARGET_CUDA);
  CHECK(!o.lowered);
  CHECK_STR_CONTAINS(o.msg, "lower: kernel 0: a barrier (__syncthreads around a shared stage) under the guarded loop "
                            "C.i.i (threadIdx.x extent 8 < 32 launched): not every thread would reach it");
  outcome_free(&o);
}

/* The runner reports compiler errors and missing entry points as values, with the reason in the log. */
static void test_cpu_runner(void) {
  kg_cpu_module m;
  CHECK(kg_cpu_build("this is not C;\n", "kernel", &m) == -1);
  CHECK_STR_CONTAINS(m.log, "error");
  CHECK(m.dir == NULL && m.fn == NULL);
  kg_cpu_module_free(&m);
  CHECK(kg_cpu_build("void other(float **a) { (void)a; }\n", "kernel", &m) == -1);
  CHECK_STR_CONTAINS(m.log, "wrapper");
  kg_cpu_module_free(&m);
  CHECK(kg_cpu_build("void kernel_args(float **a) { a[0][0] = 42.0f; }\n", "kernel", &m) == 0);
  CHECK(m.compile_s > 0);
  float x = 0, *args[1] = {&x};
  kg_cpu_call(&m, args, 1);
  CHECK(x == 42.0f);
  kg_cpu_module_free(&m);
}

/* ---- the IR verifier: hand-built IR, one broken invariant at a time ---- */

typedef struct vfix {
  kg_arena a;
  kg_lowered f;
  kg_buffer *A, *C, *T;
  kg_irvar *v[6];
  kg_irstmt *body; /* f.body's only item (the kernel) */
} vfix;

static kg_buffer *vbuf(vfix *x, const char *name, kg_scope scope, int64_t size, int param) {
  kg_buffer *b = KG_NEW(&x->a, kg_buffer);
  b->name = name;
  b->id = x->f.n_buffers++;
  b->scope = scope;
  b->size = size;
  b->param_index = param;
  return b;
}

/* A valid function over A (input, 8) and C (output, 8), a local buffer T (8), variables i j k t u w (unused
 * until a case uses them); body: for i in [0, 8): C[i] = A[i]. */
static void vfix_init(vfix *x, kg_target_kind target) {
  memset(x, 0, sizeof *x);
  kg_arena_init(&x->a);
  kg_arena *a = &x->a;
  x->f.name = "v";
  x->f.target = target;
  x->A = vbuf(x, "A", KG_SCOPE_GLOBAL, 8, 0);
  x->A->is_input = 1;
  x->C = vbuf(x, "C", KG_SCOPE_GLOBAL, 8, 1);
  x->T = vbuf(x, "T", KG_SCOPE_LOCAL, 8, -1);
  x->f.params = KG_NEW_ARRAY(a, kg_buffer *, 2);
  x->f.params[0] = x->A;
  x->f.params[1] = x->C;
  x->f.nparams = 2;
  static const char *const names[6] = {"i", "j", "k", "t", "u", "w"};
  for (int n = 0; n < 6; n++) {
    x->v[n] = KG_NEW(a, kg_irvar);
    x->v[n]->name = names[n];
    x->v[n]->id = x->f.n_vars++;
  }
  x->body = kg_ir_seq(a);
  x->f.body = kg_ir_seq(a);
  kg_ir_seq_push(a, x->f.body, x->body);
}

static kg_irexpr *vv(vfix *x, int n) { return kg_ir_var(&x->a, x->v[n]); }
static kg_irexpr *vi(vfix *x, int64_t c) { return kg_ir_int(&x->a, c); }
static kg_irstmt *vcopy(vfix *x, int n) { /* C[v] = A[v] */
  return kg_ir_store(&x->a, x->C, vv(x, n), kg_ir_load(&x->a, x->A, vv(x, n)));
}
static kg_irstmt *vloop(vfix *x, int n, int64_t ext, kg_thread_tag tag, kg_irstmt *body) {
  return kg_ir_for(&x->a, x->v[n], vi(x, ext), tag == KG_THREAD_NONE ? KG_LOOP_SERIAL : KG_LOOP_BOUND, tag,
                   x->v[n]->name, "C", body);
}

/* Verifies x; want NULL: it must pass, else it must fail with a message containing want. */
static void vexpect(vfix *x, const char *want, const char *what) {
  char err[512] = "";
  int rc = kg_ir_verify(&x->f, err, sizeof err);
  if (!want) {
    CHECKF(rc == 0, "%s: verifier rejected valid IR: %s", what, err);
  } else {
    CHECKF(rc == -1, "%s: verifier accepted it", what);
    CHECKF(strstr(err, want) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err, want);
  }
  kg_arena_free(&x->a);
}

static void test_verify(void) {
  vfix x;
  kg_arena *a;
  /* the base case and the C target's valid local allocation pass */
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body, vloop(&x, 0, 8, KG_THREAD_NONE, vcopy(&x, 0)));
  vexpect(&x, NULL, "valid");
  vfix_init(&x, KG_TARGET_C);
  a = &x.a;
  {
    kg_irstmt *in = kg_ir_seq(a);
    kg_ir_seq_push(a, in, kg_ir_store(a, x.T, vv(&x, 0), kg_ir_float(a, 0)));
    kg_ir_seq_push(a, in, kg_ir_store(a, x.C, vv(&x, 0), kg_ir_load(a, x.T, vv(&x, 0))));
    kg_ir_seq_push(a, x.body, kg_ir_alloc(a, x.T, vloop(&x, 0, 8, KG_THREAD_NONE, in)));
  }
  vexpect(&x, NULL, "valid alloc");

  /* a variable no loop or LET defines */
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body, vloop(&x, 0, 8, KG_THREAD_NONE, vcopy(&x, 1)));
  vexpect(&x, "variable j used outside its scope", "undefined variable");
  /* a LET is visible only after it, and only up to the end of its SEQ */
  vfix_init(&x, KG_TARGET_C);
  a = &x.a;
  {
    kg_irstmt *in = kg_ir_seq(a);
    kg_ir_seq_push(a, in, vcopy(&x, 3));
    kg_ir_seq_push(a, in, kg_ir_let(a, x.v[3], vv(&x, 0)));
    kg_ir_seq_push(a, x.body, vloop(&x, 0, 8, KG_THREAD_NONE, in));
  }
  vexpect(&x, "store to C: variable t used outside its scope", "use before LET");
  vfix_init(&x, KG_TARGET_C);
  a = &x.a;
  {
    kg_irstmt *in = kg_ir_seq(a), *inner = kg_ir_seq(a);
    kg_ir_seq_push(a, inner, kg_ir_let(a, x.v[3], vv(&x, 0)));
    kg_ir_seq_push(a, in, inner);
    kg_ir_seq_push(a, in, vcopy(&x, 3));
    kg_ir_seq_push(a, x.body, vloop(&x, 0, 8, KG_THREAD_NONE, in));
  }
  vexpect(&x, "variable t used outside its scope", "LET after its SEQ");
  /* a loop variable after its loop */
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body, vloop(&x, 0, 8, KG_THREAD_NONE, vcopy(&x, 0)));
  kg_ir_seq_push(&x.a, x.body, vcopy(&x, 0));
  vexpect(&x, "variable i used outside its scope", "loop variable after the loop");
  /* the same variable defined inside its own loop */
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body, vloop(&x, 0, 8, KG_THREAD_NONE, vloop(&x, 0, 2, KG_THREAD_NONE, vcopy(&x, 0))));
  vexpect(&x, "loop variable i defined again while in scope", "shadowing");
  /* an extent that uses its own loop variable */
  vfix_init(&x, KG_TARGET_C);
  x.body->seq.n = 0;
  kg_ir_seq_push(&x.a, x.body,
                 kg_ir_for(&x.a, x.v[0], vv(&x, 0), KG_LOOP_SERIAL, KG_THREAD_NONE, "i", "C", vcopy(&x, 0)));
  vexpect(&x, "loop i (stage C, variable i): variable i used outside its scope (in extent)", "extent uses the loop");
  /* constant extents are positive */
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body, vloop(&x, 0, 0, KG_THREAD_NONE, vcopy(&x, 0)));
  vexpect(&x, "loop i (stage C, variable i): constant extent 0", "zero extent");
  /* a local buffer read after its allocation ends */
  vfix_init(&x, KG_TARGET_C);
  a = &x.a;
  kg_ir_seq_push(a, x.body, kg_ir_alloc(a, x.T, kg_ir_store(a, x.T, vi(&x, 0), kg_ir_float(a, 1))));
  kg_ir_seq_push(a, x.body, kg_ir_store(a, x.C, vi(&x, 0), kg_ir_load(a, x.T, vi(&x, 0))));
  vexpect(&x, "store to C: load of buffer T outside its allocation", "load after the allocation");
  /* an allocation inside itself */
  vfix_init(&x, KG_TARGET_C);
  a = &x.a;
  kg_ir_seq_push(a, x.body, kg_ir_alloc(a, x.T, kg_ir_alloc(a, x.T, kg_ir_comment(a, "x"))));
  vexpect(&x, "allocated again inside its own scope", "nested allocation");
  /* inputs are read-only */
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body, kg_ir_store(&x.a, x.A, vi(&x, 0), kg_ir_float(&x.a, 1)));
  vexpect(&x, "store to A: store to the input A", "store to an input");
  /* constant indices inside the buffer */
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body, kg_ir_store(&x.a, x.C, vi(&x, 8), kg_ir_float(&x.a, 1)));
  vexpect(&x, "store of buffer C at constant index 8, outside [0, 8)", "index out of range");
  /* types: an F32 index, an INT condition */
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body, kg_ir_store(&x.a, x.C, kg_ir_float(&x.a, 1), kg_ir_float(&x.a, 1)));
  vexpect(&x, "index is not INT", "float index");
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body,
                 vloop(&x, 0, 8, KG_THREAD_NONE, kg_ir_if(&x.a, vv(&x, 0), vcopy(&x, 0), NULL)));
  vexpect(&x, "if: condition is not BOOL", "INT condition");
  /* storage scopes: no shared storage or bound loop on C, no global allocation anywhere */
  vfix_init(&x, KG_TARGET_C);
  x.T->scope = KG_SCOPE_SHARED;
  kg_ir_seq_push(&x.a, x.body, kg_ir_alloc(&x.a, x.T, kg_ir_comment(&x.a, "x")));
  vexpect(&x, "alloc T: shared storage on the C target", "shared on C");
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body, vloop(&x, 0, 8, KG_THREAD_THREAD_X, vcopy(&x, 0)));
  vexpect(&x, "bound to threadIdx.x on the C target", "bound loop on C");
  vfix_init(&x, KG_TARGET_CUDA);
  x.T->scope = KG_SCOPE_GLOBAL;
  kg_ir_seq_push(&x.a, x.body, kg_ir_alloc(&x.a, x.T, kg_ir_comment(&x.a, "x")));
  vexpect(&x, "alloc T: global scope", "global allocation");
  /* barriers: fine under a blockIdx condition, not under a threadIdx one (directly or through a LET), nor in a
   * loop whose extent follows a thread index, nor on the C target */
  for (int c = 0; c < 5; c++) {
    vfix_init(&x, c == 4 ? KG_TARGET_C : KG_TARGET_CUDA);
    a = &x.a;
    x.T->scope = KG_SCOPE_SHARED;
    kg_irstmt *in = kg_ir_seq(a);
    kg_irexpr *cond = kg_ir_binary(a, KG_OP_LT, vv(&x, c == 0 ? 0 : 1), vi(&x, 4));
    if (c == 2) {
      kg_ir_seq_push(a, in, kg_ir_let(a, x.v[3], kg_ir_binary(a, KG_OP_MUL, vv(&x, 1), vi(&x, 2))));
      cond = kg_ir_binary(a, KG_OP_LT, vv(&x, 3), vi(&x, 4));
    }
    if (c == 3)
      kg_ir_seq_push(a, in, kg_ir_for(a, x.v[2], kg_ir_binary(a, KG_OP_ADD, vv(&x, 1), vi(&x, 1)), KG_LOOP_SERIAL,
                                      KG_THREAD_NONE, "k", "C", kg_ir_barrier(a)));
    else
      kg_ir_seq_push(a, in, kg_ir_if(a, cond, kg_ir_barrier(a), NULL));
    kg_ir_seq_push(a, in, kg_ir_store(a, x.C, vv(&x, 1), kg_ir_float(a, 0)));
    kg_irstmt *k = vloop(&x, 0, 2, KG_THREAD_BLOCK_X, vloop(&x, 1, 4, KG_THREAD_THREAD_X, in));
    kg_ir_seq_push(a, x.body, k);
    static const char *const want[5] = {NULL, "barrier: under a condition or loop extent that depends on a thread",
                                        "barrier: under a condition", "barrier: under a condition",
                                        "only the CUDA target"};
    if (c == 4) k->loop.kind = KG_LOOP_SERIAL, k->loop.tag = KG_THREAD_NONE,
                k->loop.body->loop.kind = KG_LOOP_SERIAL, k->loop.body->loop.tag = KG_THREAD_NONE;
    vexpect(&x, want[c], "barrier");
  }
  /* thread indices: only on CUDA, and a barrier under a condition on one is divergent */
  vfix_init(&x, KG_TARGET_C);
  kg_ir_seq_push(&x.a, x.body,
                 kg_ir_store(&x.a, x.C, kg_ir_thread(&x.a, KG_THREAD_THREAD_X), kg_ir_float(&x.a, 1)));
  vexpect(&x, "store to C: a thread index (threadIdx.x) outside CUDA", "thread index on C");
  vfix_init(&x, KG_TARGET_CUDA);
  a = &x.a;
  kg_ir_seq_push(a, x.body,
                 kg_ir_if(a, kg_ir_binary(a, KG_OP_EQ, kg_ir_thread(a, KG_THREAD_BLOCK_X), vi(&x, 0)), kg_ir_barrier(a),
                          NULL));
  vexpect(&x, NULL, "barrier under a blockIdx condition");
  vfix_init(&x, KG_TARGET_CUDA);
  a = &x.a;
  kg_ir_seq_push(a, x.body,
                 kg_ir_if(a, kg_ir_binary(a, KG_OP_EQ, kg_ir_thread(a, KG_THREAD_THREAD_Y), vi(&x, 0)),
                          kg_ir_barrier(a), NULL));
  vexpect(&x, "barrier: under a condition or loop extent that depends on a thread index", "barrier under threadIdx");
  /* launch guards (lower/launch.c): threadIdx.x loops of 8 and 4 make a block of 8 in which threads 4..7 skip the
   * second loop; without its guard the IR is wrong, and a barrier inside it is refused */
  for (int c = 0; c < 3; c++) {
    vfix_init(&x, KG_TARGET_CUDA);
    a = &x.a;
    kg_irstmt *narrow = vloop(&x, 1, 4, KG_THREAD_THREAD_X, vcopy(&x, 1));
    if (c == 2) narrow->loop.body = kg_ir_barrier(a);
    kg_ir_seq_push(a, x.body, vloop(&x, 0, 8, KG_THREAD_THREAD_X, vcopy(&x, 0)));
    kg_ir_seq_push(a, x.body, narrow);
    char err[512] = "";
    int rc = kg_lower_launch(a, &x.f, err, sizeof err);
    if (c == 2) {
      CHECK(rc == -1);
      CHECK_STR_CONTAINS(err, "lower: kernel 0: a barrier (__syncthreads around a shared stage) under the guarded "
                              "loop C.j (threadIdx.x extent 4 < 8 launched)");
      kg_arena_free(&x.a);
      continue;
    }
    CHECKF(rc == 0, "launch: %s", err);
    CHECK(x.f.nlaunch == 1 && x.f.launch[0].ok && x.f.launch[0].ext[KG_THREAD_THREAD_X] == 8 &&
          x.f.launch[0].ext[KG_THREAD_BLOCK_X] == 1);
    CHECK(!kg_ir_is_launch_guard(x.body->seq.items[0]) && kg_ir_is_launch_guard(x.body->seq.items[1]));
    if (c == 1) x.body->seq.items[1] = x.body->seq.items[1]->cond.then; /* the guard dropped */
    vexpect(&x, c == 1 ? "extent 4 below the launched threadIdx.x extent 8 without a launch guard" : NULL,
            "launch guard");
  }
  /* a register accumulator that does not say what it accumulates */
  vfix_init(&x, KG_TARGET_C);
  x.T->reg_acc = 1;
  kg_ir_seq_push(&x.a, x.body, kg_ir_alloc(&x.a, x.T, kg_ir_comment(&x.a, "x")));
  vexpect(&x, "alloc T: a register accumulator must be local", "register accumulator");
  /* a cross-thread reduction of a buffer of more than one element */
  vfix_init(&x, KG_TARGET_CUDA);
  a = &x.a;
  kg_ir_seq_push(a, x.body,
                 kg_ir_alloc(a, x.T, vloop(&x, 1, 4, KG_THREAD_THREAD_X,
                                           kg_ir_allreduce(a, x.T, KG_RED_SUM, KG_THREAD_THREAD_X, 4, "C", "k"))));
  vexpect(&x, "allreduce of T (stage C, loop k): reduces T, not a local one-element buffer", "allreduce size");
  /* ids and names */
  vfix_init(&x, KG_TARGET_C);
  x.v[1]->name = "i";
  kg_ir_seq_push(&x.a, x.body, vloop(&x, 0, 8, KG_THREAD_NONE, vloop(&x, 1, 1, KG_THREAD_NONE, vcopy(&x, 1))));
  vexpect(&x, "two variables are named i", "duplicate variable names");
  vfix_init(&x, KG_TARGET_C);
  x.f.n_vars = 1;
  kg_ir_seq_push(&x.a, x.body, vloop(&x, 1, 8, KG_THREAD_NONE, vcopy(&x, 1)));
  vexpect(&x, "variable j has id 1 outside [0, 1)", "variable id");
  vfix_init(&x, KG_TARGET_C);
  x.C->name = "A";
  kg_ir_seq_push(&x.a, x.body, vloop(&x, 0, 8, KG_THREAD_NONE, vcopy(&x, 0)));
  vexpect(&x, "two buffers are named A", "duplicate buffer names");
}

int main(int argc, char **argv) {
  verbose = argc > 1 && !strcmp(argv[1], "-v");
  test_matmul();
  test_initfold();
  test_prefetch();
  test_tighten();
  test_softmax();
  test_conv2d();
  test_misc();
  test_errors();
  test_cuda_ir();
  test_cpu_runner();
  test_verify();
  TEST_END();
}
