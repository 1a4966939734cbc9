/* The elementwise space (gen/sketch_cpu_elem.c) and the `stream` primitive:
 * - every te/lib workload's CPU space holds at least 1000 distinct schedules (distinct realized traces, counted
 *   by sampling) at its bench sizes and at its test sizes;
 * - cpu/elem exists for the elementwise programs, its random points realize and verify against the reference,
 *   and its knobs reach 2-D tiles, the transposed inner order and streamed stores;
 * - stream: legal and illegal uses with their messages, the IR and C it lowers to, and a streamed schedule that
 *   verifies through the pipeline; CUDA refuses it. */
#include <stdio.h>
#include "testlib.h"
#include "../base/strbuf.h"
#include "../base/strset.h"
#include "../codegen/codegen.h"
#include "../runtime/pipeline.h"
#include "../gen/space.h"

/* Distinct traces among up to max_draws realized random points of sp (sketches in turn), stopping at want. */
static int distinct_schedules(const kg_space *sp, int want, int max_draws) {
  kg_strset seen;
  kg_strset_init(&seen);
  uint64_t rng = 777;
  int distinct = 0;
  char err[512];
  for (int d = 0; d < max_draws && distinct < want; d++) {
    kg_point pt;
    kg_space_sample(sp, d % sp->nsketches, &rng, &pt);
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    if (!s) continue;
    /* the trace is the schedule: equal traces from two sketches are one */
    char *t = kg_trace_to_text(&s->trace);
    if (!kg_strset_has(&seen, t)) {
      kg_strset_add(&seen, t);
      distinct++;
    }
    free(t);
    kg_schedule_free(s);
  }
  kg_strset_free(&seen);
  return distinct;
}

/* At the bench sizes (the "# bench-sizes:" line) and at the test sizes scaled by 4 ("# sizes:" times 4): the test
 * sizes themselves (a few dozen elements per axis, 6x4 outputs for max pooling) leave too few distinct tilings, so
 * they are not held to it. */
static void check_space_size(const char *path) {
  char *text = kg_test_read_file(path, NULL);
  CHECKF(text != NULL, "cannot read %s", path);
  if (!text) return;
  for (int l = 0; l < 2; l++) {
    kg_binding b[KG_TEST_MAX_BIND];
    char names[KG_TEST_MAX_BIND][32];
    const char *line = l == 0 ? strstr(text, "# bench-sizes:") : NULL;
    int nb = l == 0 ? (line ? kg_test_parse_bindings(line + strlen("# bench-sizes:"), b, names, 1) : -1)
                    : kg_test_parse_sizes(text, b, names, 4);
    CHECKF(nb >= 0, "%s: no %s line", path, l == 0 ? "bench-sizes" : "sizes");
    if (nb < 0) continue;
    kg_program *p = kg_test_load(text, b, nb);
    CHECKF(p != NULL, "%s: does not load", path);
    if (!p) continue;
    kg_space *sp = kg_space_new(p, KG_TARGET_C, NULL);
    int n = distinct_schedules(sp, 1000, 20000);
    CHECKF(n >= 1000, "%s (%s sizes): %d distinct schedules in 20000 draws (space: %llu points)", path,
           l == 0 ? "bench" : "4x test", n, (unsigned long long)kg_space_size(sp));
    kg_space_free(sp);
    kg_program_free(p);
  }
  free(text);
}

/* cpu/elem of workload path: npoints random points realize and verify; some realized point holds each of steps. */
static void check_elem(const char *path, int npoints, const char *const *steps, int nsteps) {
  kg_test_workload w;
  if (kg_test_workload_load(&w, path) != 0) return;
  kg_space *sp = kg_space_new(w.p, KG_TARGET_C, NULL);
  int si = kg_space_find_sketch(sp, "cpu/elem");
  CHECKF(si >= 0, "%s: no cpu/elem sketch", path);
  uint64_t rng = 31337;
  char err[1024], what[512];
  int found[16] = {0}, realized = 0;
  for (int d = 0; si >= 0 && d < 400; d++) {
    kg_point pt;
    kg_space_sample(sp, si, &rng, &pt);
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    CHECKF(s != NULL, "%s cpu/elem: %s", path, err);
    if (!s) continue;
    snprintf(what, sizeof what, "%s cpu/elem point %d", path, d);
    if (realized++ < npoints) kg_test_verify_c(&w, s, what);
    char *t = kg_trace_to_text(&s->trace);
    for (int k = 0; k < nsteps && k < 16; k++) found[k] |= strstr(t, steps[k]) != NULL;
    free(t);
    kg_schedule_free(s);
  }
  for (int k = 0; si >= 0 && k < nsteps && k < 16; k++) CHECKF(found[k], "%s cpu/elem: no point has '%s'", path, steps[k]);
  kg_space_free(sp);
  kg_test_workload_free(&w);
}

static void check_illegal(const char *text, const char *sizes, const char *trace, const char *msg) {
  kg_program *p = kg_test_load_sizes(text, sizes);
  CHECK(p != NULL);
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  char err[512];
  int rc = kg_test_apply_text(s, trace, err, sizeof err);
  CHECKF(rc != 0 && strstr(err, msg), "'%s': want an error with '%s', got rc %d '%s'", trace, msg, rc,
         rc ? err : "");
  kg_schedule_free(s);
  kg_program_free(p);
}

/* The IR dump and the C of p at sizes under trace ("" when it does not lower). */
static void lowered_text(const char *text, const char *sizes, const char *trace, kg_target_kind target, char **ir,
                         char **c, char *err, size_t errlen) {
  *ir = *c = NULL;
  kg_program *p = kg_test_load_sizes(text, sizes);
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  kg_arena la;
  kg_arena_init(&la);
  kg_lowered *lw = kg_test_apply_text(s, trace, err, errlen) ? NULL : kg_lower(s, target, &la, err, errlen);
  if (lw) {
    kg_strbuf b;
    kg_strbuf_init(&b);
    kg_ir_print(&b, lw);
    *ir = kg_strbuf_take(&b);
    if (target == KG_TARGET_C && kg_codegen_c(lw, "kgen_entry", c, err, errlen)) *c = NULL;
  }
  kg_arena_free(&la);
  kg_schedule_free(s);
  kg_program_free(p);
}

static void test_stream(void) {
  static const char tr[] = "def tr(X: f32[M, N]) -> (Y: f32[N, M]) {\n  Y[j, i] = X[i, j]\n}\n";
  static const char two[] =
      "def two(X: f32[N, D]) -> (Y: f32[N, D], Z: f32[N, D]) {\n  Y[i, j] = X[i, j] * 2.0\n  Z[i, j] = Y[i, j] + "
      "1.0\n}\n";
  static const char red[] = "def r(X: f32[N, D]) -> (Y: f32[N]) {\n  Y[i] = sum[j](X[i, j])\n}\n";
  static const char mid[] =
      "def m(X: f32[N, D]) -> (Y: f32[N, D]) {\n  h[i, j] = X[i, j] * 2.0\n  Y[i, j] = h[i, j] + 1.0\n}\n";
  /* illegal: a reduction, a stage that is not an output, an output another stage reads, twice */
  check_illegal(red, "N=4 D=8", "stream Y\n", "stream: stage Y: is a reduction (loop j)");
  check_illegal(mid, "N=4 D=8", "stream h\n", "stream: stage h: is not an output");
  check_illegal(tr, "M=4 N=8", "stream Y\nstream Y\n", "stream: stage Y: is already streamed");
  check_illegal(tr, "M=4 N=8", "stream Q\n", "stream: stage Q: no such stage");
  check_illegal(tr, "M=4 N=8", "stream Y i\n", "stream");
  check_illegal(two, "N=4 D=8", "stream Y\n", "stream: stage Y: stage Z reads it");
  char e2[512];
  kg_program *p2 = kg_test_load_sizes(two, "N=4 D=8");
  CHECK(p2 != NULL);
  if (p2) {
    kg_schedule *s2 = kg_schedule_new(p2);
    CHECKF(kg_test_apply_text(s2, "stream Z\n", e2, sizeof e2) == 0, "stream Z: %s", e2);
    kg_schedule_free(s2);
    kg_program_free(p2);
  }
  /* legal after cache_write of a reduction: the copy-out has no reduction */
  kg_program *p = kg_test_load_sizes(KG_TEST_MATMUL, "M=8 N=32 K=4");
  CHECK(p != NULL);
  if (p) {
    kg_schedule *s = kg_schedule_new(p);
    char err[512];
    CHECKF(kg_test_apply_text(s, "stream C\n", err, sizeof err) != 0 && strstr(err, "is a reduction"), "matmul: %s", err);
    CHECKF(kg_test_apply_text(s, "cache_write C local\nstream C\n", err, sizeof err) == 0, "cache_write then stream: %s",
           err);
    kg_strbuf b;
    kg_strbuf_init(&b);
    kg_schedule_dump(&b, s);
    char *d = kg_strbuf_take(&b);
    CHECK_STR_CONTAINS(d, "scope=global  stream");
    free(d);
    kg_schedule_free(s);
    kg_program_free(p);
  }
  /* the IR marks the store, the C streams whole aligned vectors with a fence after the parallel loop */
  char *ir, *c, err[1024];
  const char *trace = "tile Y j i 8 64\nparallel Y j.o\nvectorize Y i.i\nstream Y\n";
  lowered_text(tr, "M=100 N=70", trace, KG_TARGET_C, &ir, &c, err, sizeof err);
  CHECKF(ir && c, "transpose stream: %s", err);
  CHECK_STR_CONTAINS(ir, "stream Y[");
  CHECK_STR_CONTAINS(c, "kg_stream16(kg_ntp_i_i + kg_ntk_i_i, kg_ntb_i_i);");
  CHECK_STR_CONTAINS(c, "#pragma omp for nowait");
  CHECK_STR_CONTAINS(c, "    kg_stream_fence();\n  }\n");
  free(ir);
  free(c);
  /* a serial nest: the fence after it; a loop not vectorized keeps ordinary stores */
  lowered_text(tr, "M=100 N=70", "stream Y\n", KG_TARGET_C, &ir, &c, err, sizeof err);
  CHECKF(ir && c, "serial stream: %s", err);
  CHECK(c && !strstr(c, "kg_stream16(kg_ntp") && strstr(c, "  kg_stream_fence();\n  return"));
  free(ir);
  free(c);
  /* the target that cannot run it refuses it */
  lowered_text(tr, "M=100 N=70", "stream Y\n", KG_TARGET_CUDA, &ir, &c, err, sizeof err);
  CHECKF(!ir && strstr(err, "stream (non-temporal stores) is available on the C target only"), "cuda: %s", err);
  free(ir);
  /* it runs and verifies: transpose and an elementwise chain with non-dividing tiles, rows of sizes that leave some
   * loops 64-byte aligned (streamed vectors, then a tail) and others not (ordinary stores) */
  static const char *const runs[][3] = {
      {"te/lib/transpose.te", "tile Y j i 8 40\nfuse Y j.o i.o\nparallel Y j.o*i.o\nvectorize Y i.i\nstream Y\n",
       "M=100 N=37"},
      {"te/lib/bias_gelu_residual.te", "compute_inline h\nsplit Y j 48\nparallel Y i\nvectorize Y j.i\nstream Y\n",
       "N=5 D=203"},
  };
  for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
    char *text = kg_test_read_file(runs[k][0], NULL);
    CHECK(text != NULL);
    if (!text) continue;
    kg_test_workload w;
    memset(&w, 0, sizeof w);
    w.p = kg_test_load_sizes(text, runs[k][2]);
    CHECK(w.p != NULL);
    if (w.p) {
      kg_data_init(&w.d, w.p, KG_TEST_DATA_SEED);
      kg_data_reference(&w.d, w.p, KG_TEST_DATA_SEED);
      kg_schedule *s = kg_schedule_new(w.p);
      CHECKF(kg_test_apply_text(s, runs[k][1], err, sizeof err) == 0, "%s: %s", runs[k][0], err);
      kg_test_verify_c(&w, s, runs[k][0]);
      kg_schedule_free(s);
      kg_test_workload_free(&w);
    }
    free(text);
  }
}

/* The other rules' sketches of program text at sizes carry a stream knob for output Y: with it set, some sketch's
 * points realize with `stream Y`, verify, and some print non-temporal stores (Y's rows vectorized). */
static void check_stream_knob(const char *path, const char *sizes) {
  char *text = kg_test_read_file(path, NULL);
  CHECK(text != NULL);
  if (!text) return;
  kg_test_workload w;
  memset(&w, 0, sizeof w);
  w.p = kg_test_load_sizes(text, sizes);
  free(text);
  CHECK(w.p != NULL);
  if (!w.p) return;
  kg_data_init(&w.d, w.p, KG_TEST_DATA_SEED);
  kg_data_reference(&w.d, w.p, KG_TEST_DATA_SEED);
  kg_space *sp = kg_space_new(w.p, KG_TARGET_C, NULL);
  uint64_t rng = 2024;
  int knobs = 0, streamed = 0, printed = 0;
  char err[1024];
  for (int si = 0; si < sp->nsketches; si++) {
    const kg_sketch *sk = &sp->sketches[si];
    int k = -1;
    for (int i = 0; i < sk->nknobs; i++)
      if (!strcmp(sk->knobs[i].name, "Y.stream")) k = i;
    knobs += k >= 0;
    for (int d = 0; k >= 0 && d < 3; d++) {
      kg_point pt;
      kg_space_sample(sp, si, &rng, &pt);
      pt.knobs[k] = 1;
      kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
      if (!s) continue;
      char *t = kg_trace_to_text(&s->trace);
      if (strstr(t, "stream Y\n")) {
        char what[256];
        snprintf(what, sizeof what, "%s %s %s streamed", path, sizes, sk->name);
        if (streamed++ < 3) kg_test_verify_c(&w, s, what);
        kg_arena la;
        kg_arena_init(&la);
        kg_lowered *lw = kg_lower(s, KG_TARGET_C, &la, err, sizeof err);
        char *c = NULL;
        if (lw && kg_codegen_c(lw, "kgen_entry", &c, err, sizeof err) == 0) printed += strstr(c, "kg_stream16(kg_ntp") != NULL;
        free(c);
        kg_arena_free(&la);
      }
      free(t);
      kg_schedule_free(s);
    }
  }
  CHECKF(knobs >= 2 && streamed >= 2 && printed >= 1, "%s %s: %d sketches with Y.stream, %d streamed, %d printed", path,
         sizes, knobs, streamed, printed);
  kg_space_free(sp);
  kg_test_workload_free(&w);
}

int main(void) {
  test_stream();
  char *files[KG_TEST_MAX_WORKLOADS];
  int nlib = 0, n = kg_test_list_workloads(files, KG_TEST_MAX_WORKLOADS, &nlib);
  for (int i = 0; i < n; i++)
    if (!strncmp(files[i], "te/lib/", 7)) check_space_size(files[i]);
  kg_test_free_workloads(files, n);

  static const char *const tr_steps[] = {"parallel Y", "vectorize Y", "stream Y", "reorder Y i.o j.i"};
  check_elem("te/lib/transpose.te", 3, tr_steps, 3);
  static const char *const bgr_steps[] = {"compute_inline h", "split Y i", "split Y j", "stream Y", "unroll Y"};
  check_elem("te/lib/bias_gelu_residual.te", 3, bgr_steps, 5);
  static const char *const mp_steps[] = {"vectorize Y", "parallel Y", "reorder Y n*c*y.o r s"};
  check_elem("te/lib/maxpool2d.te", 4, mp_steps, 2);
  check_stream_knob("te/lib/softmax.te", "N=7 D=64");
  check_stream_knob("te/lib/layernorm.te", "N=9 D=80");
  TEST_END();
}
