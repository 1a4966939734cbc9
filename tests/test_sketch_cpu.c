/* The CPU sketch rules: every library workload (and bench/workloads/conv2d_3x3.te) gets sketches whose random
 * points realize at a useful rate, realize deterministically, and whose schedules lower, print as C, compile and
 * verify against the reference; knob values stay within their loops; matmul has a register-tiled sketch. */
#include <stdio.h>
#include "testlib.h"
#include "../base/rng.h"
#include "../base/strbuf.h"
#include "../codegen/codegen.h"
#include "../runtime/pipeline.h"
#include "../gen/space.h"
#include "../runtime/cpu.h"

#define DRAWS 40

static int points_per_sketch(void) {
  const char *e = getenv("KGEN_RANDOM_SCHEDULES");
  int n = e ? atoi(e) / 10 : 3;
  return n < 1 ? 1 : n;
}

static void check_workload(const char *path, int npoints) {
  kg_test_workload w;
  if (kg_test_workload_load(&w, path) != 0) return;
  kg_space *sp = kg_space_new(w.p, KG_TARGET_C, NULL);
  CHECKF(sp->nsketches >= 1, "%s: no sketch", path);
  CHECKF(kg_space_find_sketch(sp, "cpu/simple") >= 0, "%s: no cpu/simple sketch", path);
  uint64_t rng = 12345;
  for (int si = 0; si < sp->nsketches; si++) {
    const kg_sketch *sk = &sp->sketches[si];
    char what[512];
    snprintf(what, sizeof what, "%s %s", path, sk->name);
    /* TILE knobs: positive values; every knob has values */
    for (int k = 0; k < sk->nknobs; k++) {
      CHECKF(sk->knobs[k].nvalues >= 1, "%s: knob %s has no values", what, sk->knobs[k].name);
      if (sk->knobs[k].kind == KG_KNOB_TILE || sk->knobs[k].kind == KG_KNOB_VECTOR)
        for (int v = 0; v < sk->knobs[k].nvalues; v++)
          CHECKF(sk->knobs[k].values[v] >= 1, "%s: knob %s value %lld", what, sk->knobs[k].name,
                 (long long)sk->knobs[k].values[v]);
    }
    int realized = 0, run = 0;
    char err[1024];
    for (int d = 0; d < DRAWS; d++) {
      kg_point pt;
      kg_space_sample(sp, si, &rng, &pt);
      kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
      CHECKF(s || strcmp(sk->name, "cpu/simple"), "%s: %s", what, err);
      if (!s) continue;
      realized++;
      /* deterministic: the same point gives the same trace */
      kg_schedule *again = kg_space_realize(sp, &pt, err, sizeof err);
      CHECKF(again != NULL, "%s: realized once, not twice", what);
      if (again) {
        char *a = kg_trace_to_text(&s->trace), *b = kg_trace_to_text(&again->trace);
        CHECKF(!strcmp(a, b), "%s: same point, different traces:\n%s\nvs\n%s", what, a, b);
        free(a);
        free(b);
        kg_schedule_free(again);
      }
      if (run < npoints) {
        kg_test_verify_c(&w, s, what);
        run++;
      }
      kg_schedule_free(s);
    }
    CHECKF(realized * 10 >= DRAWS * 3, "%s: only %d of %d random points realize", what, realized, DRAWS);
  }
  kg_space_free(sp);
  kg_test_workload_free(&w);
}

/* Does some realized point of sketch name at the given sizes contain every one of the steps? verify: the first
 * such point is also built, run and verified against the reference. */
static int sketch_find(const char *text, const char *sizes, const char *name, const char *const *steps, int nsteps,
                       int verify) {
  kg_test_workload w;
  memset(&w, 0, sizeof w);
  w.p = kg_test_load_sizes(text, sizes);
  if (!w.p) return 0;
  if (verify) {
    kg_data_init(&w.d, w.p, KG_TEST_DATA_SEED);
    kg_data_reference(&w.d, w.p, KG_TEST_DATA_SEED);
  }
  kg_space *sp = kg_space_new(w.p, KG_TARGET_C, NULL);
  int si = kg_space_find_sketch(sp, name), found = 0;
  uint64_t rng = 99;
  char err[512], what[256];
  for (int d = 0; si >= 0 && d < 400 && !found; d++) {
    kg_point pt;
    kg_space_sample(sp, si, &rng, &pt);
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    if (!s) continue;
    char *t = kg_trace_to_text(&s->trace);
    int all = 1;
    for (int k = 0; k < nsteps; k++) all &= strstr(t, steps[k]) != NULL;
    found = all;
    if (found && verify) {
      snprintf(what, sizeof what, "%s %s %s point %d", w.p->def->name, sizes, name, d);
      kg_test_verify_c(&w, s, what);
    }
    free(t);
    kg_schedule_free(s);
  }
  kg_space_free(sp);
  kg_test_workload_free(&w);
  return found;
}

static int sketch_has(const char *text, const char *sizes, const char *name, const char *const *steps, int nsteps) {
  return sketch_find(text, sizes, name, steps, nsteps, 0);
}

static int sketch_verify_has(const char *text, const char *sizes, const char *name, const char *const *steps,
                             int nsteps) {
  return sketch_find(text, sizes, name, steps, nsteps, 1);
}

/* The value of knob name in sketch sk (index), or -1. */
static int knob_index(const kg_sketch *sk, const char *name) {
  for (int k = 0; k < sk->nknobs; k++)
    if (!strcmp(sk->knobs[k].name, name)) return k;
  return -1;
}

/* Register and cache tiles of heavy stage st in every tiled sketch: register columns are whole or half vectors
 * within the axis (or the whole axis), register rows within the largest row axis, cache multipliers that keep
 * the smallest cache tile within its axis; a register tile too large for the vector registers fails to realize. */
static void check_heavy_knobs(const char *text, const char *sizes, const char *st, int64_t rowmax, int64_t lext) {
  kg_program *p = kg_test_load_sizes(text, sizes);
  CHECK(p != NULL);
  if (!p) return;
  kg_space *sp = kg_space_new(p, KG_TARGET_C, NULL);
  char name[64], err[512];
  int tiled = 0;
  for (int si = 0; si < sp->nsketches; si++) {
    const kg_sketch *sk = &sp->sketches[si];
    snprintf(name, sizeof name, "%s.rj", st);
    int rj = knob_index(sk, name);
    snprintf(name, sizeof name, "%s.ri", st);
    int ri = knob_index(sk, name);
    snprintf(name, sizeof name, "%s.tj", st);
    int tj = knob_index(sk, name);
    if (rj < 0 || ri < 0 || tj < 0) continue;
    tiled++;
    const kg_knob *kj = &sk->knobs[rj], *ki = &sk->knobs[ri], *kt = &sk->knobs[tj];
    for (int v = 0; v < kj->nvalues; v++)
      CHECKF(kj->values[v] <= lext && (kj->values[v] % 8 == 0 || kj->values[v] == lext), "%s: rj %lld (extent %lld)",
             sk->name, (long long)kj->values[v], (long long)lext);
    for (int v = 0; v < ki->nvalues; v++)
      CHECKF(ki->values[v] <= rowmax, "%s: ri %lld", sk->name, (long long)ki->values[v]);
    for (int v = 0; v < kt->nvalues; v++)
      CHECKF(kt->values[v] == 1 || kt->values[v] * kj->values[0] <= lext, "%s: tj %lld", sk->name,
             (long long)kt->values[v]);
    /* the largest register tile: 16 rows of 64 columns need 64 accumulator vectors */
    if (ki->values[ki->nvalues - 1] >= 16 && kj->values[kj->nvalues - 1] >= 64) {
      kg_point pt;
      uint64_t rng = 5;
      kg_space_sample(sp, si, &rng, &pt);
      pt.knobs[ri] = ki->values[ki->nvalues - 1];
      pt.knobs[rj] = kj->values[kj->nvalues - 1];
      kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
      CHECKF(!s && strstr(err, "spills"), "%s: a 16x64 register tile realized", sk->name);
      kg_schedule_free(s);
    }
  }
  CHECKF(tiled == 2, "%d tiled sketches", tiled);
  kg_space_free(sp);
  kg_program_free(p);
}

/* The convolution's padding P (elementwise, read first by the heavy Y): at root only in cpu/tile-cw, whose register
 * tile would recompute it, guarded, at every reuse; inlined or at root in cpu/tile-rk (its packed copy takes it in
 * once per block) and cpu/inner. */
static void check_pad_root(const char *conv) {
  kg_program *p = kg_test_load_sizes(conv, "N=1 C=8 H=12 W=12 F=16");
  CHECK(p != NULL);
  if (!p) return;
  kg_space *sp = kg_space_new(p, KG_TARGET_C, NULL);
  int seen = 0;
  for (int si = 0; si < sp->nsketches; si++) {
    const kg_sketch *sk = &sp->sketches[si];
    int k = knob_index(sk, "P.root");
    if (!strcmp(sk->name, "cpu/tile-cw")) {
      CHECKF(k >= 0 && sk->knobs[k].nvalues == 1 && sk->knobs[k].values[0] == 1, "%s: P.root", sk->name);
      seen++;
    } else if (!strcmp(sk->name, "cpu/tile-rk")) {
      CHECKF(k >= 0 && sk->knobs[k].nvalues == 2 && sk->knobs[k].values[0] == 0, "%s: P.root", sk->name);
      seen++;
    }
  }
  CHECKF(seen == 2, "%d tiled sketches", seen);
  kg_space_free(sp);
  kg_program_free(p);
}

/* cpu/inner of program text at sizes: random points, every one realizes (no knob combination is illegal), the
 * first npoints verify against the reference; steps: what some realized point of it holds (among at least
 * INNER_DRAWS, whatever npoints: realizing is cheap, running is not). */
#define INNER_DRAWS 200
static void check_inner(const char *text, const char *sizes, int npoints, const char *const *steps, int nsteps) {
  kg_test_workload w;
  memset(&w, 0, sizeof w);
  w.p = kg_test_load_sizes(text, sizes);
  CHECKF(w.p != NULL, "inner %s: does not load", sizes);
  if (!w.p) return;
  kg_data_init(&w.d, w.p, KG_TEST_DATA_SEED);
  kg_data_reference(&w.d, w.p, KG_TEST_DATA_SEED);
  kg_space *sp = kg_space_new(w.p, KG_TARGET_C, NULL);
  int si = kg_space_find_sketch(sp, "cpu/inner");
  CHECKF(si >= 0, "%s %s: no cpu/inner sketch", w.p->def->name, sizes);
  uint64_t rng = 4242;
  char err[1024], what[256];
  int *found = calloc((size_t)nsteps + 1, sizeof *found);
  for (int d = 0; si >= 0 && (d < npoints || d < INNER_DRAWS); d++) {
    kg_point pt;
    kg_space_sample(sp, si, &rng, &pt);
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    snprintf(what, sizeof what, "%s %s cpu/inner point %d", w.p->def->name, sizes, d);
    CHECKF(s != NULL, "%s: %s", what, err);
    if (!s) continue;
    if (d < npoints) kg_test_verify_c(&w, s, what);
    char *t = kg_trace_to_text(&s->trace);
    for (int k = 0; k < nsteps; k++) found[k] |= strstr(t, steps[k]) != NULL;
    free(t);
    kg_schedule_free(s);
  }
  for (int k = 0; si >= 0 && k < nsteps; k++)
    CHECKF(found[k], "%s %s cpu/inner: no point has '%s'", w.p->def->name, sizes, steps[k]);
  free(found);
  kg_space_free(sp);
  kg_test_workload_free(&w);
}

/* The trace of the point of cpu/inner at which each knob named in set ("knob=value" lines) has that value and
 * every other knob its first value (NULL when a knob or value is not in the sketch, or the point does not
 * realize); run: also built, run and verified. The tuner can only find what such a point realizes. */
static char *sketch_point(const char *text, const char *sizes, const char *sketch, const char *const *set, int nset,
                          int run) {
  kg_test_workload w;
  memset(&w, 0, sizeof w);
  w.p = kg_test_load_sizes(text, sizes);
  kg_program *p = w.p;
  if (!p) return NULL;
  if (run) {
    kg_data_init(&w.d, w.p, KG_TEST_DATA_SEED);
    kg_data_reference(&w.d, w.p, KG_TEST_DATA_SEED);
  }
  kg_space *sp = kg_space_new(p, KG_TARGET_C, NULL);
  int si = kg_space_find_sketch(sp, sketch), ok = si >= 0;
  char *t = NULL, err[512];
  kg_point pt = {.sketch = si};
  if (ok) {
    const kg_sketch *sk = &sp->sketches[si];
    pt.nknobs = sk->nknobs;
    for (int k = 0; k < sk->nknobs; k++) pt.knobs[k] = sk->knobs[k].values[0];
    for (int i = 0; i < nset && ok; i++) {
      const char *eq = strchr(set[i], '=');
      int k = -1;
      for (int j = 0; eq && j < sk->nknobs; j++)
        if (strlen(sk->knobs[j].name) == (size_t)(eq - set[i]) && !strncmp(sk->knobs[j].name, set[i], eq - set[i]))
          k = j;
      int64_t v = eq ? atoll(eq + 1) : -1;
      int found = 0;
      for (int j = 0; k >= 0 && j < sk->knobs[k].nvalues; j++) found |= sk->knobs[k].values[j] == v;
      CHECKF(found, "%s %s: %s has no knob value %s", p->def->name, sizes, sketch, set[i]);
      ok = found;
      if (found) pt.knobs[k] = v;
    }
  }
  kg_schedule *s = ok ? kg_space_realize(sp, &pt, err, sizeof err) : NULL;
  CHECKF(!ok || s, "%s %s: the point does not realize: %s", p->def->name, sizes, err);
  if (s) t = kg_trace_to_text(&s->trace);
  if (s && run) kg_test_verify_c(&w, s, sketch);
  kg_schedule_free(s);
  kg_space_free(sp);
  kg_test_workload_free(&w);
  return t;
}

static char *inner_point(const char *text, const char *sizes, const char *const *set, int nset, int run) {
  return sketch_point(text, sizes, "cpu/inner", set, nset, run);
}

/* kg_space_size of program text at sizes, and that of its sketch name alone */
static uint64_t space_size(const char *text, const char *sizes, const char *name, uint64_t *sketch_points) {
  kg_program *p = kg_test_load_sizes(text, sizes);
  if (!p) return 0;
  kg_space *sp = kg_space_new(p, KG_TARGET_C, NULL);
  uint64_t n = kg_space_size(sp);
  int si = kg_space_find_sketch(sp, name);
  *sketch_points = 0;
  if (si >= 0) {
    *sketch_points = 1;
    for (int k = 0; k < sp->sketches[si].nknobs; k++) *sketch_points *= (uint64_t)sp->sketches[si].knobs[k].nvalues;
  }
  kg_space_free(sp);
  kg_program_free(p);
  return n;
}

/* The C code of program text at sizes under the given trace (NULL when it does not build). */
static char *c_source(const char *text, const char *sizes, const char *trace) {
  kg_program *p = kg_test_load_sizes(text, sizes);
  if (!p) return NULL;
  kg_schedule *s = kg_schedule_new(p);
  kg_trace tr;
  kg_trace_init(&tr);
  char err[1024], *src = NULL;
  kg_arena la;
  kg_arena_init(&la);
  kg_lowered *lw = kg_trace_parse(&tr, "test", trace, strlen(trace), err, sizeof err) ||
                           kg_schedule_apply_trace(s, &tr, err, sizeof err)
                       ? NULL
                       : kg_lower(s, KG_TARGET_C, &la, err, sizeof err);
  if (!lw || kg_codegen_c(lw, "kgen_entry", &src, err, sizeof err)) fprintf(stderr, "c_source: %s\n", err);
  kg_arena_free(&la);
  kg_trace_free(&tr);
  kg_schedule_free(s);
  kg_program_free(p);
  return src;
}

/* The instruction-set levels: read off a compiler's predefined macros (a longer name that only begins with a
 * level's macro does not count), and the host's asked of the kernel compiler under $KGEN_CFLAGS. */
static void check_cpu_levels(void) {
  static const struct {
    const char *macros, *want;
  } cases[] = {
      {"#define __x86_64__ 1\n#define __SSE4_2__ 1\n#define __AVX__ 1\n#define __AVX2__ 1\n#define __FMA__ 1\n"
       "#define __AVX512F__ 1\n", "x86-64-v4"},
      {"#define __x86_64__ 1\n#define __AVX__ 1\n#define __AVX2__ 1\n#define __FMA__ 1\n", "x86-64-v3"},
      {"#define __x86_64__ 1\n#define __AVX__ 1\n#define __AVX2__ 1\n", "x86-64-avx"}, /* no FMA */
      {"#define __x86_64__ 1\n#define __AVX__ 1\n#define __AVX2__ 1\n#define __FMA__ 1\n#define __AVX512FP16__ 1\n",
       "x86-64-v3"},
      {"#define __x86_64__ 1\n#define __SSE4_2__ 1\n", "x86-64-v2"},
      {"#define __x86_64__ 1\n", "x86-64"},
      {"#define __aarch64__ 1\n#define __ARM_NEON 1\n", "aarch64"},
      {"#define __riscv 1\n", "generic"},
      {"", "generic"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const kg_cpu_arch *a = kg_cpu_arch_from_macros(cases[i].macros);
    CHECKF(!strcmp(a->name, cases[i].want), "case %zu: %s, wanted %s", i, a->name, cases[i].want);
    CHECK(kg_cpu_arch_find(cases[i].want) == a);
  }
  const kg_cpu_arch *v4 = kg_cpu_arch_find("x86-64-v4"), *v3 = kg_cpu_arch_find("x86-64-v3");
  CHECK(v4 && v4->lanes == 16 && kg_cpu_arch_max_acc(v4) == 24 && kg_cpu_arch_default() == v4);
  CHECK(v3 && v3->lanes == 8 && kg_cpu_arch_max_acc(v3) == 12);
  CHECK(kg_cpu_arch_find("x86-64-v5") == NULL && kg_cpu_arch_find(NULL) == NULL);
#if defined(__x86_64__)
  /* the kernel compiler's level follows -march in $KGEN_CFLAGS (the preprocessor only: no such CPU needed) */
  kg_test_cflags cf;
  kg_test_cflags_set(&cf, NULL, 0);
  static const char *const levels[] = {"x86-64-v2", "x86-64-v3", "x86-64-v4"};
  for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
    char flags[64];
    snprintf(flags, sizeof flags, "-march=%s", levels[i]);
    setenv("KGEN_CFLAGS", flags, 1);
    const char *got = kg_cpu_arch_host()->name;
    CHECKF(!strcmp(got, levels[i]), "KGEN_CFLAGS=%s: %s", flags, got);
  }
  kg_test_cflags_restore(&cf);
#endif
}

/* A matmul's register tiles at each level: columns in whole (or half) vectors of its lanes, at most four; a tile
 * one accumulator vector over its registers' share fails with "spills", and a tile within it does not. */
static void check_level_tiles(const char *level) {
  const kg_cpu_arch *a = kg_cpu_arch_find(level);
  CHECK(a != NULL);
  kg_program *p = kg_test_load_sizes(KG_TEST_MATMUL, "M=96 N=96 K=32");
  CHECK(p != NULL);
  if (!a || !p) {
    kg_program_free(p);
    return;
  }
  kg_space_opts o = {.cpu = a};
  kg_space *sp = kg_space_new_opts(p, KG_TARGET_C, NULL, &o);
  int64_t L = a->lanes, acc = kg_cpu_arch_max_acc(a);
  int tiled = 0;
  for (int si = 0; si < sp->nsketches; si++) {
    const kg_sketch *sk = &sp->sketches[si];
    int rj = knob_index(sk, "C.rj"), ri = knob_index(sk, "C.ri");
    if (rj < 0 || ri < 0) continue;
    tiled++;
    const kg_knob *kj = &sk->knobs[rj], *ki = &sk->knobs[ri];
    for (int v = 0; v < kj->nvalues; v++)
      CHECKF(kj->values[v] % (L / 2) == 0 && kj->values[v] <= 4 * L, "%s %s: rj %lld", level, sk->name,
             (long long)kj->values[v]);
    CHECKF(kj->values[kj->nvalues - 1] == 4 * L, "%s %s: widest rj %lld", level, sk->name,
           (long long)kj->values[kj->nvalues - 1]);
    /* one vector of columns: rows up to acc fit; the first row count above spills */
    int fit = -1, over = -1;
    for (int v = 0; v < ki->nvalues; v++) {
      if (ki->values[v] <= acc) fit = v;
      if (ki->values[v] > acc && over < 0) over = v;
    }
    int one = -1;
    for (int v = 0; v < kj->nvalues; v++)
      if (kj->values[v] == L) one = v;
    CHECK(fit >= 0 && one >= 0);
    if (fit < 0 || one < 0) continue;
    for (int t = 0; t < 2; t++) {
      int idx = t == 0 ? fit : over;
      if (idx < 0) continue;
      kg_point pt;
      uint64_t rng = 11;
      kg_space_sample(sp, si, &rng, &pt);
      pt.knobs[ri] = ki->values[idx];
      pt.knobs[rj] = kj->values[one];
      char err[512] = "";
      kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
      if (t == 0) CHECKF(s || !strstr(err, "spills"), "%s %s: %lldx%lld spills: %s", level, sk->name,
                         (long long)ki->values[idx], (long long)L, err);
      else CHECKF(!s && strstr(err, "spills"), "%s %s: %lldx%lld realized", level, sk->name,
                  (long long)ki->values[idx], (long long)L);
      kg_schedule_free(s);
    }
  }
  CHECKF(tiled == 2, "%s: %d tiled sketches", level, tiled);
  kg_space_free(sp);
  kg_program_free(p);
}

int main(void) {
  int npoints = points_per_sketch();
  char *files[KG_TEST_MAX_WORKLOADS];
  int nlib = 0, n = kg_test_list_workloads(files, KG_TEST_MAX_WORKLOADS, &nlib);
  for (int i = 0; i < n; i++)
    if (!strncmp(files[i], "te/lib/", 7)) check_workload(files[i], npoints);
  check_workload("bench/workloads/conv2d_3x3.te", npoints);
  kg_test_free_workloads(files, n);

  static const char *const cw[] = {"cache_write C local", "parallel C", "vectorize C.local", "compute_at C.local C"};
  CHECK(sketch_has(KG_TEST_MATMUL, "M=64 N=64 K=64", "cpu/tile-cw", cw, 4));
  static const char *const rk[] = {"cache_read B local C", "compute_at B.local C k.o", "unroll C", "vectorize C"};
  CHECK(sketch_has(KG_TEST_MATMUL, "M=64 N=64 K=64", "cpu/tile-rk", rk, 4));
  /* BLAS's loop order: the k block outside the column tiles, B's panel packed per column tile and A's block per k
   * block; verified at sizes that no tile divides */
  static const char *const go[] = {"reorder C i.o k.o j.o", "parallel C i.o", "compute_at B.local C j.o",
                                   "compute_at A.local C k.o"};
  CHECK(sketch_has(KG_TEST_MATMUL, "M=64 N=64 K=64", "cpu/tile-rk", go, 4));
  CHECK(sketch_verify_has(KG_TEST_MATMUL, "M=67 N=45 K=37", "cpu/tile-rk", go, 4));
  /* BLIS's loop order: the k block outermost, B packed once per k block into panels of the register tile's width
   * (shared by every row block and thread, the copy parallel over its panels), A's block per row block; verified
   * where the panels divide N, where they do not (B's layout kept), and with a batch axis (parallel over it) */
  static const char *const bl[] = {"reorder C k.o i.o j.o", "parallel C i.o\n", "split_storage B.local ax1 ",
                                   "reorder_storage B.local ax1.o ax0 ax1.i", "compute_at B.local C k.o",
                                   "parallel B.local ax1.o", "compute_at A.local C i.o"};
  CHECK(sketch_has(KG_TEST_MATMUL, "M=64 N=64 K=64", "cpu/tile-rk", bl, 7));
  CHECK(sketch_verify_has(KG_TEST_MATMUL, "M=67 N=48 K=37", "cpu/tile-rk", bl, 7));
  static const char *const bl_odd[] = {"reorder C k.o i.o j.o", "parallel C i.o\n", "compute_at B.local C k.o",
                                       "compute_at A.local C i.o"};
  CHECK(sketch_verify_has(KG_TEST_MATMUL, "M=67 N=45 K=37", "cpu/tile-rk", bl_odd, 4));
  /* bf16 operands: B's panels stored as f32 (widen), converted once per k block rather than at every use in the
   * register tiles, as the other packed operands are (the f32 accumulation is C.r0, C its bf16 rounding) */
  static const char bf_mm[] = "def f(A: bf16[M, K], B: bf16[K, N]) -> (C: bf16[M, N]) {\n"
                              "  C[i, j] = sum[k](A[i, k] * B[k, j])\n"
                              "}\n";
  static const char *const blw[] = {"reorder C.r0 k.o i.o j.o", "reorder_storage B.local ax1.o ax0 ax1.i",
                                    "compute_at B.local C.r0 k.o\nwiden B.local\nparallel B.local ax1.o"};
  CHECK(sketch_verify_has(bf_mm, "M=67 N=48 K=37", "cpu/tile-rk", blw, 3));
  static const char bmm[] = "def f(A: f32[B, M, K], W: f32[B, K, N]) -> (Y: f32[B, M, N]) {\n"
                            "  Y[b, i, j] = sum[k](A[b, i, k] * W[b, k, j])\n"
                            "}\n";
  static const char *const blb[] = {"reorder Y b k.o i.o j.o", "parallel Y b\n", "split_storage W.local ax2 ",
                                    "reorder_storage W.local ax2.o ax0 ax1 ax2.i", "compute_at W.local Y k.o"};
  CHECK(sketch_verify_has(bmm, "B=3 M=21 K=19 N=32", "cpu/tile-rk", blb, 5));
  /* ... and with the epilogue carrying the parallel row blocks (bias and GELU applied to each block of the
   * product while it is in cache), verified at sizes that no tile divides and with a batch axis */
  char *mlp = kg_test_read_file("bench/workloads/mlp_gelu.te", NULL);
  CHECK(mlp != NULL);
  if (mlp) {
    static const char *const goe[] = {"parallel Y i.o", "compute_at t Y i.o", "reorder t k.o j.o",
                                      "compute_at W.local t j.o", "compute_at X.local t k.o"};
    CHECK(sketch_verify_has(mlp, "M=67 K=45 N=37", "cpu/tile-rk", goe, 5));
    free(mlp);
  }
  static const char bmm_epi[] = "def f(A: f32[B, M, K], W: f32[K, N]) -> (Y: f32[B, M, N]) {\n"
                                "  t[b, i, j] = sum[k](A[b, i, k] * W[k, j])\n"
                                "  Y[b, i, j] = max(t[b, i, j], 0.0)\n"
                                "}\n";
  static const char *const gob[] = {"parallel Y b*i.o", "compute_at t Y b*i.o", "reorder t b k.o j.o"};
  CHECK(sketch_verify_has(bmm_epi, "B=3 M=21 K=19 N=35", "cpu/tile-rk", gob, 3));
  static const char *const rows[] = {"compute_at Y.r0 Y", "parallel Y", "vectorize Y"};
  CHECK(sketch_has(KG_TEST_SOFTMAX, "N=16 D=64", "cpu/rows", rows, 3));
  /* the portable inline exp and no libmvec, as with other compilers: softmax and attention (whose exp is
   * inlined into a reduction) still verify (the caller's own compiler flags kept) */
  kg_test_cflags cf;
  kg_test_cflags_set(&cf, "-DKG_NO_LIBMVEC -DKG_NO_VEXP", 0);
  check_workload("te/lib/softmax.te", npoints);
  check_workload("te/lib/attention.te", npoints);
  {
    /* attention's register columns as the GEMM's: half a vector where a whole one does not divide the keys or the
     * output's columns (no remainder loop), built, run and verified at such sizes */
    char *at = kg_test_read_file("te/lib/attention.te", NULL), sizes[64], vj[32], cj[32];
    CHECK(at != NULL);
    int64_t L = kg_cpu_arch_default()->lanes;
    snprintf(sizes, sizeof sizes, "B=2 S=9 T=%lld D=7 E=%lld", (long long)(3 * L / 2), (long long)(3 * L / 2));
    snprintf(vj, sizeof vj, "s.r0.vj=%lld", (long long)(L / 2));
    snprintf(cj, sizeof cj, "O.r0.cj=%lld", (long long)(L / 2));
    const char *const half[] = {vj, cj};
    char *t = at ? sketch_point(at, sizes, "cpu/attn", half, 2, 1) : NULL;
    CHECK(t != NULL);
    snprintf(vj, sizeof vj, "split O.r0 c %lld\n", (long long)(L / 2));
    CHECK_STR_CONTAINS(t, vj);
    free(t);
    free(at);
  }
  kg_test_cflags_restore(&cf);

  /* one pass over each row: softmax's maximum computed at the output's rows, where the row sum that also reads it
   * is computed (the exponentials inlined into both, or kept in a row buffer computed there too); layernorm's
   * mean at the output's rows, where the variance that also reads it is computed */
  static const char *const one_pass[] = {"compute_inline e", "compute_at Y.r0 Y i", "compute_at m Y i"};
  CHECK(sketch_has(KG_TEST_SOFTMAX, "N=16 D=64", "cpu/inner", one_pass, 3));
  static const char *const exp_row[] = {"compute_at Y.r0 Y i", "compute_at e Y i", "vectorize e j.i",
                                        "compute_at m Y i"};
  CHECK(sketch_has(KG_TEST_SOFTMAX, "N=16 D=64", "cpu/inner", exp_row, 4));
  /* the hand-written one-pass softmax at the bench size: the exponentials in a row buffer, max and sum in 4
   * chains of 16 lanes combined by a tree */
  static const char *const sm_best[] = {"e.root=2", "e.vec=16", "Y.vec=16", "m.lanes=16", "m.acc=4",
                                        "m.combine=1", "Y.r0.lanes=16", "Y.r0.acc=4", "Y.r0.combine=1"};
  char *smt = inner_point(KG_TEST_SOFTMAX, "N=4096 D=1024", sm_best, 9, 0);
  CHECK_STR_CONTAINS(smt, "compute_at e Y i\nsplit e j 16\nvectorize e j.i\n");
  free(smt);
  /* the same point at a size where nothing divides: built, run and verified */
  smt = inner_point(KG_TEST_SOFTMAX, "N=67 D=100", sm_best, 9, 1);
  CHECK_STR_CONTAINS(smt, "parallel Y i\n");
  CHECK_STR_CONTAINS(smt, "compute_at Y.r0.rf Y.r0.rf.2 i\n");
  CHECK_STR_CONTAINS(smt, "compute_at e Y i\nsplit e j 16\nvectorize e j.i\n");
  CHECK_STR_CONTAINS(smt, "compute_at m Y i\n");
  CHECK_STR_CONTAINS(smt, "compute_at m.rf m.rf.2 i\n");
  free(smt);
  char *ln = kg_test_read_file("te/lib/layernorm.te", NULL);
  CHECK(ln != NULL);
  if (ln) {
    static const char *const ln_steps[] = {"compute_at v.r0 Y i", "compute_at mu.r0 Y i", "parallel Y i"};
    CHECK(sketch_has(ln, "N=9 D=31", "cpu/inner", ln_steps, 3));
    /* mean and variance in 4 chains of 16 lanes with a tree combine, both at the output's rows: verified */
    static const char *const ln_best[] = {"Y.vec=16", "mu.r0.lanes=16", "mu.r0.acc=4", "mu.r0.combine=1",
                                          "v.r0.lanes=16", "v.r0.acc=4", "v.r0.combine=1"};
    char *lt = inner_point(ln, "N=67 D=100", ln_best, 7, 1);
    CHECK_STR_CONTAINS(lt, "compute_at v.r0 Y i\n");
    CHECK_STR_CONTAINS(lt, "compute_at mu.r0 Y i\n");
    CHECK_STR_CONTAINS(lt, "compute_at mu.r0.rf mu.r0.rf.2 i\n");
    free(lt);
    free(ln);
  }

  /* light reductions: partial results in vector lanes, computed at the reduction's row */
  static const char *const rf[] = {"rfactor Y.r0 j2", "compute_at Y.r0.rf Y.r0", "vectorize Y.r0.rf j2.i",
                                   "rfactor m j"};
  CHECK(sketch_has(KG_TEST_SOFTMAX, "N=16 D=64", "cpu/rows", rf, 4));

  /* inner-axis reductions: vector lanes in acc chains, rows per parallel task, or a row's reduction split into
   * parallel parts for few long rows; every sampled point runs correctly */
  char *rr = kg_test_read_file("te/lib/reduce_rows.te", NULL);
  CHECK(rr != NULL);
  if (rr) {
    static const char *const rows_steps[] = {"rfactor Y j", "compute_at Y.rf Y i.i", "unroll Y.rf j.i.o",
                                             "vectorize Y.rf j.i.i", "parallel Y i.o"};
    check_inner(rr, "N=37 D=41", 8 * npoints, rows_steps, 5);
    static const char *const parts_steps[] = {"parallel Y.rf i*j.i.o", "vectorize Y.rf j.i.i.i"};
    check_inner(rr, "N=3 D=300", 8 * npoints, parts_steps, 2);
    /* the combine of the partial results as a tree of vectorized adds: 4 chains of 8 lanes added into one
     * vector, halved to 4 then 2 lanes, the stage adding the last 2 */
    static const char *const tree[] = {"Y.lanes=8", "Y.acc=4", "Y.combine=1", "Y.rows=4"};
    char *tt = inner_point(rr, "N=37 D=41", tree, 4, 1);
    CHECK_STR_CONTAINS(tt, "rfactor Y j 32\nsplit Y.rf j.i 8\nreorder Y.rf i j.o j.i.o j.i.i\nvectorize Y.rf j.i.i\n"
                           "rfactor Y j.i 8\nreorder Y.rf.2 i j.i.o j.i.i\nvectorize Y.rf.2 j.i.i\n"
                           "rfactor Y j.i.i 4\nreorder Y.rf.3 i j.i.i.o j.i.i.i\nvectorize Y.rf.3 j.i.i.i\n"
                           "rfactor Y j.i.i.i 2\nreorder Y.rf.4 i j.i.i.i.o j.i.i.i.i\nvectorize Y.rf.4 j.i.i.i.i\n");
    CHECK_STR_CONTAINS(tt, "compute_at Y.rf.4 Y i.i\ncompute_at Y.rf.3 Y.rf.4 i\ncompute_at Y.rf.2 Y.rf.3 i\n"
                           "compute_at Y.rf Y.rf.2 i\n");
    free(tt);
    /* the hand-written schedule that reads rows at the rate of a copy: 4 chains of 16-lane vectors, their
     * combine a tree, 8 rows per parallel task */
    static const char *const best[] = {"Y.lanes=16", "Y.acc=4", "Y.combine=1", "Y.rows=8", "Y.par=1"};
    char *t = inner_point(rr, "N=4096 D=4096", best, 5, 0);
    CHECK_STR_CONTAINS(t, "rfactor Y j 64\nsplit Y.rf j.i 16\nreorder Y.rf i j.o j.i.o j.i.i\nvectorize Y.rf j.i.i\n"
                          "rfactor Y j.i 16\n");
    CHECK_STR_CONTAINS(t, "split Y i 8\nparallel Y i.o\ncompute_at Y.rf.5 Y i.i\n");
    free(t);
    /* the space's size: cpu/simple (no knob) and cpu/inner: lanes {1,4,8,16,32} x acc {1,2,3,4,6,8} x unroll 2 x
     * combine 2 x rows {1,2,4,8,16,32} x par 2 x parts {1,2,4,8} */
    uint64_t inner = 0;
    uint64_t n = space_size(rr, "N=37 D=41", "cpu/inner", &inner);
    CHECKF(n == 5761 && inner == 5760, "reduce_rows N=37 D=41: %llu points, cpu/inner %llu", (unsigned long long)n,
           (unsigned long long)inner);
    free(rr);
  }
  /* softmax: its max and sum get lanes, acc, unroll and combine (computed at the consumer's rows: no rows knob), the
   * elementwise stages their own knobs as in cpu/rows, but e's root inlined or at its reader's rows (2) */
  uint64_t simple_points = 0, rows_points = 0, inner_points = 0;
  uint64_t total = space_size(KG_TEST_SOFTMAX, "N=16 D=64", "cpu/rows", &rows_points);
  space_size(KG_TEST_SOFTMAX, "N=16 D=64", "cpu/inner", &inner_points);
  space_size(KG_TEST_SOFTMAX, "N=16 D=64", "cpu/simple", &simple_points);
  CHECKF(rows_points > 0 && total == simple_points + rows_points + inner_points &&
             inner_points == rows_points / (3 * 3) * 120 * 120,
         "softmax N=16 D=64: %llu points: cpu/simple %llu, cpu/rows %llu, cpu/inner %llu", (unsigned long long)total,
         (unsigned long long)simple_points, (unsigned long long)rows_points, (unsigned long long)inner_points);

  /* the tree combine in printed C: each level a vectorized loop over the lanes it keeps (the chains' vectors
   * added into one, then halved), the stage itself adding the last two */
  char *rrt = kg_test_read_file("te/lib/reduce_rows.te", NULL);
  if (rrt) {
    static const char tree[] =
        "rfactor Y j 64\nsplit Y.rf j.i 16\nreorder Y.rf i j.o j.i.o j.i.i\nvectorize Y.rf j.i.i\n"
        "rfactor Y j.i 16\nreorder Y.rf.2 i j.i.o j.i.i\nvectorize Y.rf.2 j.i.i\n"
        "rfactor Y j.i.i 8\nreorder Y.rf.3 i j.i.i.o j.i.i.i\nvectorize Y.rf.3 j.i.i.i\n"
        "parallel Y i\ncompute_at Y.rf.3 Y i\ncompute_at Y.rf.2 Y.rf.3 i\ncompute_at Y.rf Y.rf.2 i\n";
    char *src = c_source(rrt, "N=8 D=256", tree);
    CHECK_STR_CONTAINS(src, "/* stage Y.rf (computed at Y.rf.2.i) */");
    CHECK_STR_CONTAINS(src, "j_i_i < 16; j_i_i++) { /* Y.rf.2.j.i.i */");
    CHECK_STR_CONTAINS(src, "Y_rf_3_j_i_i_i < 8; Y_rf_3_j_i_i_i++) { /* Y.rf.3.j.i.i.i */");
    CHECK_STR_CONTAINS(src, "j_i_i_i < 8; j_i_i_i++) { /* Y.j.i.i.i */");
    free(src);
    free(rrt);
  }

  /* beside a heavy stage cpu/simple is one point (its naive heavy stage dominates whatever its vector widths):
   * the MLP layer's epilogue at the machine's lanes; without one (softmax above) its widths stay knobs */
  char *mlpt = kg_test_read_file("bench/workloads/mlp_gelu.te", NULL);
  CHECK(mlpt != NULL);
  if (mlpt) {
    uint64_t simple = 0;
    space_size(mlpt, "M=64 K=32 N=64", "cpu/simple", &simple);
    CHECKF(simple == 1, "mlp_gelu: cpu/simple has %llu points", (unsigned long long)simple);
    free(mlpt);
  }
  CHECKF(simple_points > 1, "softmax: cpu/simple has %llu points", (unsigned long long)simple_points);
  /* a matmul's rows can carry the lanes too (A packed K-major, B's values broadcast) */
  static const char *const mlanes[] = {"reorder_storage C.local j i", "reorder_storage A.local ax1 ax0",
                                       "vectorize C.local i"};
  CHECK(sketch_has(KG_TEST_MATMUL, "M=64 N=64 K=64", "cpu/tile-cw", mlanes, 3));
  check_cpu_levels();
  check_level_tiles("x86-64-v4");
  check_level_tiles("x86-64-v3");
  check_level_tiles("aarch64");
  check_heavy_knobs(KG_TEST_MATMUL, "M=64 N=64 K=64", "C", 64, 64);
  check_heavy_knobs(KG_TEST_MATMUL, "M=24 N=56 K=8", "C", 24, 56);
  char *conv = kg_test_read_file("bench/workloads/conv2d_3x3.te", NULL);
  CHECK(conv != NULL);
  if (conv) {
    check_heavy_knobs(conv, "N=1 C=4 H=8 W=24 F=8", "Y", 8, 24);
    check_pad_root(conv);
    /* the convolution's register tile f x x with every reduction loop inside it, the padding at root */
    static const char *const cw[] = {"cache_write Y local", "compute_at Y.local Y x.i.o",
                                     "reorder Y.local n y c r s f x", "vectorize Y.local x", "parallel P"};
    CHECK(sketch_has(conv, "N=1 C=4 H=8 W=24 F=8", "cpu/tile-cw", cw, 5));
    /* its accumulator stays in registers across c, r and s, not reloaded around s alone */
    static const char trace[] = "cache_write Y local\nsplit Y f 8\nsplit Y f.i 4\nsplit Y x 24\nsplit Y x.i 24\n"
                                "reorder Y n y f.o x.o f.i.o x.i.o f.i.i x.i.i\nfuse Y n y\nparallel Y n*y\n"
                                "compute_at Y.local Y x.i.o\nreorder Y.local n y c r s f x\nunroll Y.local f\n"
                                "vectorize Y.local x\n";
    char *src = c_source(conv, "N=1 C=4 H=8 W=24 F=8", trace);
    CHECK_STR_CONTAINS(src, "register accumulator of Y_local around loop c */");
    free(src);
    /* lanes over the output channels: weights packed C,R,S,F at root, the accumulator stored with f innermost,
     * register rows over the output width; a two-vector lane tile as an unrolled loop of single vectors */
    static const char *const lanes[] = {"reorder_storage Y.local n y x f", "cache_read K local Y.local",
                                        "reorder_storage K.local ax1 ax2 ax3 ax0", "vectorize K.local ax0",
                                        "unroll Y.local x", "split Y.local f 16", "unroll Y.local f.o",
                                        "vectorize Y.local f.i"};
    CHECK(sketch_has(conv, "N=1 C=4 H=8 W=24 F=32", "cpu/tile-cw", lanes, 8));
    /* the blocked accumulation (cb): the accumulator holds the parallel loop's whole output row, the input
     * channels in blocks of 8 outside the register tiles, the tile of 6 x by 32 f (two vectors) accumulating
     * over a block's channels and the window in registers; built, run and verified where neither the row nor
     * the channels divide into the tiles and blocks */
    static const char *const cb[] = {"Y.lane=1", "Y.row=3", "Y.ri=6", "Y.rj=32", "Y.cb=8", "Y.fuse=1", "Y.unroll=64"};
    char *ct = sketch_point(conv, "N=1 C=20 H=5 W=19 F=32", "cpu/tile-cw", cb, 7, 1);
    CHECK_STR_CONTAINS(ct, "compute_at Y.local Y n*y\nsplit Y.local x 6\nsplit Y.local f 32\nsplit Y.local f.i 16\n"
                           "split Y.local c 8\nreorder Y.local n y c.o x.o f.o c.i r s x.i f.i.o f.i.i\n"
                           "unroll Y.local x.i\nunroll Y.local f.i.o\nvectorize Y.local f.i.i\n");
    /* ... whose register tile accumulates in registers around the block's channels and the window */
    src = ct ? c_source(conv, "N=1 C=20 H=5 W=19 F=32", ct) : NULL;
    CHECK_STR_CONTAINS(src, "register accumulator of Y_local around loop c.i */");
    free(src);
    free(ct);
    free(conv);
  }
  TEST_END();
}
