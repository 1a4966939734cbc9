/* Transposed tile stores on the C target (lower/transpose.c, KG_IRS_TSTORE, the prelude's kg_tstore*). Checks: the
 * helpers at every ISA level they have (AVX-512, AVX, SSE, element by element) against the definition, gaps
 * between the destination's runs untouched; schedules whose vector loop scatters its stores made into tiles of 16,
 * 8 and 4, with several column blocks, ragged sizes, an elementwise value and a parallel loop around, verified
 * against the reference; the nests the pass must leave alone (a narrow output type, a store contiguous along the
 * vector, a loop between) verified and left so; the verifier's refusal of overlapping tiles; and cpu/elem's points
 * with the row inner producing the tiles. */
#include <stdlib.h>
#include <string.h>
#include "kgen.h"
#include "codegen/codegen.h"
#include "gen/space.h"
#include "lower/ir.h"
#include "runtime/cpu.h"
#include "testlib.h"
#include "testutil.h"

static const char TRANSPOSE[] = "def transpose(X: f32[M, N]) -> (Y: f32[N, M]) {\n  Y[j, i] = X[i, j]\n}\n";
/* a value that reads a second input along the output's layout, and the transposed one */
static const char MIXED[] = "def mixed(X: f32[M, N], B: f32[N, M]) -> (Y: f32[N, M]) {\n"
                            "  Y[j, i] = X[i, j] * 2.0 + B[j, i]\n}\n";
static const char NARROW[] = "def narrow(X: f32[M, N]) -> (Y: f16[N, M]) {\n  Y[j, i] = f16(X[i, j])\n}\n";

/* The helpers on a 40 x 40 source of distinct values, the destination 40 x 40 filled with a sentinel: every tile
 * element in its place, every other destination element still the sentinel. */
static void test_helpers(const char *define, const char *flags, const char *what) {
  kg_test_cflags cf;
  kg_test_cflags_set(&cf, flags, 1);
  kg_cpu_module m;
  int rc = kg_test_build_with_prelude(define,
                                      "void tiles_args(float **a) {\n"
                                      "  kg_tstore4(a[0] + 3, 40, a[1] + 5, 40);\n"
                                      "  kg_tstore8(a[0] + 10 * 40 + 1, 40, a[2] + 2 * 40 + 7, 40);\n"
                                      "  kg_tstore16(a[0] + 20 * 40 + 17, 40, a[3] + 3, 40);\n"
                                      "}\n",
                                      "tiles", &m);
  kg_test_cflags_restore(&cf);
  CHECKF(rc == 0, "tile store helpers (%s) do not build: %s", what, m.log ? m.log : "?");
  if (rc) return;
  enum { L = 40 };
  float *src = malloc(sizeof(float) * L * L), *dst[3];
  for (int i = 0; i < L * L; i++) src[i] = (float)i + 0.5f;
  for (int q = 0; q < 3; q++) {
    dst[q] = malloc(sizeof(float) * L * L);
    for (int i = 0; i < L * L; i++) dst[q][i] = -1.0f;
  }
  float *args[4] = {src, dst[0], dst[1], dst[2]};
  kg_cpu_call(&m, args, 4);
  const struct {
    int n, s0, d0;
  } t[3] = {{4, 3, 5}, {8, 10 * L + 1, 2 * L + 7}, {16, 20 * L + 17, 3}};
  for (int q = 0; q < 3; q++) {
    int bad = 0, inside = 0;
    for (int i = 0; i < L * L; i++) {
      int off = i - t[q].d0, r = off % L, c = off / L;
      float want = -1.0f;
      if (off >= 0 && r >= 0 && r < t[q].n && c < t[q].n) {
        want = src[t[q].s0 + r * L + c];
        inside++;
      }
      if (dst[q][i] != want && bad++ < 3)
        CHECKF(0, "kg_tstore%d (%s): element %d is %g, want %g", t[q].n, what, i, (double)dst[q][i], (double)want);
    }
    CHECKF(bad == 0 && inside == t[q].n * t[q].n, "kg_tstore%d (%s): %d elements wrong", t[q].n, what, bad);
    free(dst[q]);
  }
  free(src);
  kg_cpu_module_free(&m);
}

/* text at sizes under sched: verified, and its code holding kg_tstore<n> (0: no tile store at all). */
static void check(const char *text, const char *sizes, const char *sched, int n, const char *what) {
  kg_test_workload w;
  if (kg_test_workload_from_text(&w, text, sizes, 11, what) != 0) return;
  kg_schedule *s = kg_schedule_new(w.p);
  char err[1024];
  CHECKF(kg_test_apply_text(s, sched, err, sizeof err) == 0, "%s: %s", what, err);
  char *src = kg_test_print_c(s, err, sizeof err);
  CHECKF(src != NULL, "%s: %s", what, err);
  if (src) {
    char call[32];
    snprintf(call, sizeof call, "kg_tstore%d(kg_tt", n);
    if (n) CHECKF(strstr(src, call) != NULL, "%s: no %s...) in the code", what, call);
    else CHECKF(strstr(src, "kg_tstore4(kg_tt") == NULL && strstr(src, "kg_tstore8(kg_tt") == NULL &&
                    strstr(src, "kg_tstore16(kg_tt") == NULL,
                "%s: a tile store where none applies", what);
  }
  free(src);
  kg_test_verify_c(&w, s, what);
  kg_schedule_free(s);
  kg_test_workload_free(&w);
}

/* the row tile tj (j.i, vectorized) inside the column tile ti (i.i): the stores contiguous along i.i */
static const char *tile(char *buf, size_t len, int tj, int ti, const char *extra) {
  snprintf(buf, len,
           "split Y j %d\nsplit Y i %d\nreorder Y j.o i.o i.i j.i\nvectorize Y j.i\nfuse Y j.o i.o\n"
           "parallel Y j.o*i.o\n%s",
           tj, ti, extra);
  return buf;
}

static void test_schedules(void) {
  char b[512];
  check(TRANSPOSE, "M=64 N=48", tile(b, sizeof b, 16, 32, ""), 16, "16 x 16 tiles");
  check(TRANSPOSE, "M=64 N=48", tile(b, sizeof b, 8, 16, ""), 8, "8 x 8 tiles");
  check(TRANSPOSE, "M=64 N=48", tile(b, sizeof b, 4, 8, ""), 4, "4 x 4 tiles");
  check(TRANSPOSE, "M=64 N=64", tile(b, sizeof b, 32, 16, ""), 16, "two column blocks of 16");
  check(TRANSPOSE, "M=64 N=48", tile(b, sizeof b, 16, 8, ""), 8, "8 rows of 16 columns: tiles of 8");
  check(TRANSPOSE, "M=64 N=48", tile(b, sizeof b, 16, 32, "unroll Y i.i\n"), 16, "the column loop unrolled");
  /* partial tiles at both edges: the whole tiles stored transposed, the edges as they were */
  check(TRANSPOSE, "M=37 N=45", tile(b, sizeof b, 16, 32, ""), 16, "ragged sizes");
  check(TRANSPOSE, "M=19 N=23", tile(b, sizeof b, 8, 8, ""), 8, "ragged small sizes");
  check(MIXED, "M=48 N=32", tile(b, sizeof b, 16, 16, ""), 16, "an elementwise value over two layouts");
  /* the parallel loop itself around the vector loop */
  check(TRANSPOSE, "M=48 N=32", "split Y j 16\nreorder Y j.o i j.i\nvectorize Y j.i\nparallel Y i\n", 16,
        "a parallel loop around");
  /* left alone: an f16 output, a vector loop along the stores, a loop between */
  check(NARROW, "M=64 N=48", tile(b, sizeof b, 16, 32, ""), 0, "an f16 output");
  check(TRANSPOSE, "M=64 N=48", "split Y j 16\nsplit Y i 16\nreorder Y j.o i.o j.i i.i\nvectorize Y i.i\n", 0,
        "stores contiguous along the vector");
  check(TRANSPOSE, "M=64 N=48",
        "split Y j 16\nsplit Y i 32\nsplit Y j.i 8\nreorder Y j.o i.o i.i j.i.o j.i.i\nvectorize Y j.i.i\n", 0,
        "a loop between the contiguous one and the vector loop");
}

/* kg_ir_contains_ctx's test: a tile store, recorded at *out (a kg_irstmt *). */
static int is_tstore(const kg_irstmt *s, const void *out) {
  if (s->kind != KG_IRS_TSTORE) return 0;
  *(const kg_irstmt **)out = s;
  return 1;
}

/* A tile whose columns would overlap, or that reads past its block, is refused by the verifier. */
static void test_verifier(void) {
  kg_test_workload w;
  if (kg_test_workload_from_text(&w, TRANSPOSE, "M=64 N=48", 3, "verifier") != 0) return;
  kg_schedule *s = kg_schedule_new(w.p);
  char err[1024], b[512];
  CHECKF(kg_test_apply_text(s, tile(b, sizeof b, 16, 32, ""), err, sizeof err) == 0, "%s", err);
  kg_arena la;
  kg_arena_init(&la);
  kg_lowered *lw = kg_lower(s, KG_TARGET_C, &la, err, sizeof err);
  kg_irstmt *t = NULL;
  CHECKF(lw && kg_ir_contains_ctx(lw->body, is_tstore, (const void *)&t), "no tile store to mutate: %s",
         lw ? "" : err);
  if (t) {
    CHECKF(kg_ir_verify(lw, err, sizeof err) == 0, "the pass's IR refused: %s", err);
    int64_t stride = t->tstore.dst_stride;
    t->tstore.dst_stride = 8;
    CHECKF(kg_ir_verify(lw, err, sizeof err) != 0 && strstr(err, "overlap"), "an overlapping tile accepted (%s)",
           err);
    t->tstore.dst_stride = stride;
    t->tstore.src_index = kg_ir_int(&la, 16);
    CHECKF(kg_ir_verify(lw, err, sizeof err) != 0 && strstr(err, "past"), "a read past the block accepted (%s)", err);
  }
  kg_arena_free(&la);
  kg_schedule_free(s);
  kg_test_workload_free(&w);
}

/* cpu/elem's points with the row innermost (inner = 1) store tiles transposed where the vector width and the
 * column tile allow, and verify. */
static void test_sketch(void) {
  kg_test_workload w;
  if (kg_test_workload_from_text(&w, TRANSPOSE, "M=128 N=96", 5, "sketch") != 0) return;
  kg_space *sp = kg_space_new(w.p, KG_TARGET_C, NULL);
  int k = sp ? kg_space_find_sketch(sp, "cpu/elem") : -1;
  CHECK(k >= 0);
  uint64_t rng = 17;
  int tiled = 0, rowinner = 0;
  for (int t = 0; k >= 0 && t < 400 && tiled < 4; t++) {
    kg_point pt;
    kg_space_sample(sp, k, &rng, &pt);
    if (kg_point_knob(&sp->sketches[k], &pt, "Y", "inner", 0) != 1) continue;
    char err[1024];
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    if (!s) continue;
    rowinner++;
    char *src = kg_test_print_c(s, err, sizeof err);
    if (src && strstr(src, "kg_tstore")) {
      char what[64];
      snprintf(what, sizeof what, "cpu/elem point %d", t);
      tiled += kg_test_verify_c(&w, s, what);
    }
    free(src);
    kg_schedule_free(s);
  }
  CHECKF(tiled >= 4, "%d of %d cpu/elem points with the row inner stored tiles transposed and verified", tiled,
         rowinner);
  kg_space_free(sp);
  kg_test_workload_free(&w);
}

int main(void) {
  test_helpers("", NULL, "native");
  test_helpers("", "-mno-avx512f", "AVX");
  test_helpers("", "-mno-avx", "SSE");
  test_helpers("#define KG_NO_TSTORE_SIMD 1\n", NULL, "element by element");
  test_schedules();
  test_verifier();
  test_sketch();
  TEST_END();
}
