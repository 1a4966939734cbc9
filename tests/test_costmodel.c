/* The cost model: features of hand-written schedules (the fields a transformation should move, and only those;
 * a tensor-core step and bf16 dot products counted as the FMAs they do),
 * determinism and finiteness, extraction on random schedules of every library workload for both targets (also
 * from several threads at once), and the XGBoost model: ranking on a synthetic task, the random model, save and
 * load, too little data, and the pair accuracy itself. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include "../base/rng.h"
#include "../base/xalloc.h"
#include "../costmodel/features.h"
#include "../costmodel/model.h"
#include "testlib.h"
#include "testutil.h"

static int feat(const char *name) {
  for (int i = 0; i < KG_NFEATURES; i++)
    if (!strcmp(kg_feature_name(i), name)) return i;
  CHECKF(0, "no feature named %s", name);
  return 0;
}

static double lg(double x) { return log2(1 + x); }

static int near(float got, double want) { return fabs(got - want) < 1e-4 * (1 + fabs(want)); }
#define CHECK_FEAT(v, name, want)                                                                          \
  do {                                                                                                     \
    float g_ = (v)[feat(name)];                                                                            \
    double w_ = (want);                                                                                    \
    CHECKF(near(g_, w_), "%s = %g, want %g", name, (double)g_, w_);                                       \
  } while (0)

static kg_schedule *sched_from(const kg_program *p, const char *trace) {
  kg_schedule *s = kg_schedule_new(p);
  kg_trace t;
  kg_trace_init(&t);
  char err[1024];
  int ok = kg_trace_parse(&t, "test", trace, strlen(trace), err, sizeof err) == 0 &&
           kg_schedule_apply_trace(s, &t, err, sizeof err) == 0;
  CHECKF(ok, "schedule: %s", err);
  kg_trace_free(&t);
  return s;
}

static int all_finite(const float *v) {
  for (int i = 0; i < KG_NFEATURES; i++)
    if (!isfinite(v[i])) return 0;
  return 1;
}

static void test_names(void) {
  for (int i = 0; i < KG_NFEATURES; i++)
    for (int j = i + 1; j < KG_NFEATURES; j++)
      if (!strcmp(kg_feature_name(i), kg_feature_name(j)))
        CHECKF(0, "feature %d and %d both %s", i, j, kg_feature_name(i));
  CHECK(!strcmp(kg_feature_name(0), "store0.iters"));
  CHECK(!strcmp(kg_feature_name(KG_FEAT_PER_STORE), "store1.iters"));
  CHECK(!strcmp(kg_feature_name(KG_FEAT_STORES * KG_FEAT_PER_STORE), "global.kernels"));
  CHECK(!strcmp(kg_feature_name(-1), "?") && !strcmp(kg_feature_name(KG_NFEATURES), "?"));
}

static const char TILED_CPU[] = "split C i 16\nsplit C j 8\nreorder C i.o j.o k i.i j.i\nparallel C i.o\n"
                                "vectorize C j.i\n";

/* matmul 64^3: the default nest (i, j, k) against a tiled one (i.o parallel, j.o, k, i.i, j.i vectorized). */
static void test_cpu_matmul(void) {
  kg_program *p = kg_test_load_sizes(KG_TEST_MATMUL, "M=64 N=64 K=64");
  CHECK(p != NULL);
  if (!p) return;
  kg_schedule *d = kg_schedule_new(p), *t = sched_from(p, TILED_CPU);
  float fd[KG_NFEATURES], ft[KG_NFEATURES], again[KG_NFEATURES];
  CHECK(kg_features_extract(d, KG_TARGET_C, fd) == 0);
  CHECK(kg_features_extract(t, KG_TARGET_C, ft) == 0);
  CHECK(all_finite(fd) && all_finite(ft));
  CHECK(kg_features_extract(t, KG_TARGET_C, again) == 0 && !memcmp(ft, again, sizeof ft));

  double n3 = 64.0 * 64 * 64;
  /* store0 is the update C = C + A * B in both: same work, one fma per iteration */
  CHECK_FEAT(fd, "store0.iters", lg(n3));
  CHECK_FEAT(ft, "store0.iters", lg(n3));
  CHECK_FEAT(fd, "store0.float_fma", lg(n3));
  CHECK_FEAT(fd, "store0.float_add", lg(n3));
  CHECK_FEAT(fd, "store0.float_mul", lg(n3));
  CHECK_FEAT(fd, "store0.float_div", 0);
  CHECK_FEAT(fd, "store0.is_update", 1);
  CHECK_FEAT(fd, "store0.loads_per_iter", lg(3));
  /* store1 is the init C = 0 */
  CHECK_FEAT(fd, "store1.iters", lg(64 * 64));
  CHECK_FEAT(fd, "store1.is_update", 0);
  CHECK_FEAT(fd, "store1.float_ops_per_iter", 0);
  CHECK_FEAT(fd, "store2.iters", 0);
  /* buffers by bytes: C (read and written), then A, B (ids break the tie) */
  CHECK_FEAT(fd, "store0.buf0.access", 3);
  CHECK_FEAT(fd, "store0.buf0.scope", KG_SCOPE_GLOBAL + 1);
  CHECK_FEAT(fd, "store0.buf0.bytes", lg(2 * n3 * 4));
  CHECK_FEAT(fd, "store0.buf0.unique_bytes", lg(64 * 64 * 4));
  CHECK_FEAT(fd, "store0.buf0.reuse", lg(2 * n3 / (64 * 64)));
  CHECK_FEAT(fd, "store0.buf1.access", 1);
  CHECK_FEAT(fd, "store0.buf3.access", 0);
  /* default: k innermost, so C is reused along it, A walks it contiguously, B with stride N */
  CHECK_FEAT(fd, "store0.buf0.stride", 0);
  CHECK_FEAT(fd, "store0.buf1.stride", lg(1));
  CHECK_FEAT(fd, "store0.buf2.stride", lg(64));
  CHECK_FEAT(fd, "store0.buf0.reuse_level", 1);
  CHECK_FEAT(fd, "store0.buf1.reuse_level", 2);
  CHECK_FEAT(fd, "store0.buf2.reuse_level", 3);
  /* B: k and j used, so 64 rows of 64 contiguous floats = 4 lines each */
  CHECK_FEAT(fd, "store0.buf2.cache_lines", lg(64 * 4));
  /* tiled: j.i innermost and vectorized; C and B contiguous along it, A reused along it; C reused at k */
  CHECK_FEAT(ft, "store0.buf0.stride", lg(1));
  CHECK_FEAT(ft, "store0.buf1.stride", 0);
  CHECK_FEAT(ft, "store0.buf2.stride", lg(1));
  CHECK_FEAT(ft, "store0.buf0.reuse_level", 3);
  CHECK_FEAT(ft, "store0.buf1.reuse_level", 1);
  /* the tiled update accumulates in registers around k (lower/regacc.c): its buf0 is the 16 x 8 accumulator */
  CHECK_FEAT(ft, "store0.buf0.unique_bytes", lg(16 * 8 * 4));

  CHECK_FEAT(fd, "store0.loop_depth", lg(3));
  CHECK_FEAT(ft, "store0.loop_depth", lg(5));
  CHECK_FEAT(fd, "store0.serial_prod", lg(n3));
  CHECK_FEAT(ft, "store0.serial_prod", lg(8 * 64 * 16));
  CHECK_FEAT(fd, "store0.vector_width", 0);
  CHECK_FEAT(ft, "store0.vector_width", lg(8));
  CHECK_FEAT(fd, "store0.parallel_prod", 0);
  CHECK_FEAT(ft, "store0.parallel_prod", lg(4));
  CHECK_FEAT(fd, "store0.inner_extent", lg(64));
  CHECK_FEAT(ft, "store0.inner_extent", lg(8));
  CHECK_FEAT(fd, "store0.inner_kind", KG_LOOP_SERIAL + 1);
  CHECK_FEAT(ft, "store0.inner_kind", KG_LOOP_VECTORIZED + 1);
  CHECK_FEAT(fd, "global.parallel_extent", 0);
  CHECK_FEAT(ft, "global.parallel_extent", lg(4));
  CHECK_FEAT(ft, "store1.parallel_prod", lg(4)); /* the accumulator's start sits inside the parallel loop too */
  CHECK_FEAT(fd, "store0.arith_intensity", lg(2.0 / 16));
  /* what the tiling leaves alone */
  const char *same[] = {"global.kernels", "global.total_float_ops", "global.blocks", "global.threads_per_block", "global.shared_bytes_per_block",
                        "store0.threadIdx.x", "store0.kernel_barriers", "store0.float_fma", "store0.guarded"};
  for (size_t i = 0; i < sizeof same / sizeof *same; i++)
    CHECKF(fd[feat(same[i])] == ft[feat(same[i])], "%s: %g vs %g", same[i], (double)fd[feat(same[i])],
           (double)ft[feat(same[i])]);
  CHECK_FEAT(fd, "global.kernels", 1);
  CHECK_FEAT(fd, "global.stores", lg(2));
  /* the accumulator's start (the init folded into it, lower/initfold.c) and store-back nests: one store more, and
   * the bytes of the accumulator */
  CHECK_FEAT(ft, "global.stores", lg(3));
  CHECK(ft[feat("global.total_bytes")] > fd[feat("global.total_bytes")]);
  CHECK_FEAT(fd, "global.blocks", 0);

  /* a bound loop does not lower on the C target: -1 and zeros */
  kg_schedule *b = sched_from(p, "bind C i blockIdx.x\n");
  memset(fd, 0xff, sizeof fd);
  CHECK(kg_features_extract(b, KG_TARGET_C, fd) == -1);
  int zero = 1;
  for (int i = 0; i < KG_NFEATURES; i++) zero &= fd[i] == 0;
  CHECK(zero);
  float fb[KG_NFEATURES];
  CHECK(kg_features_extract(b, KG_TARGET_CUDA, fb) == 0 && fb[feat("global.blocks")] == (float)lg(64));

  /* a non-dividing split: the guard shows on CUDA (C tightens the loop instead) */
  kg_schedule *g = sched_from(p, "split C i 5\nbind C i.o blockIdx.x\nbind C i.i threadIdx.x\n");
  CHECK(kg_features_extract(g, KG_TARGET_CUDA, fb) == 0);
  CHECK_FEAT(fb, "store0.guarded", 1);
  CHECK_FEAT(fb, "store0.threadIdx.x", lg(5));
  CHECK_FEAT(fb, "store0.blockIdx.x", lg(13));
  CHECK_FEAT(fb, "store0.kernel_threads_per_block", lg(5));
  kg_schedule_free(g);
  kg_schedule_free(b);
  kg_schedule_free(d);
  kg_schedule_free(t);
  kg_program_free(p);
}

/* The shared-memory CUDA matmul of examples/schedules at 256^3: 16 blocks of 16 x 16 threads, two 64 x 16 tiles
 * in shared memory, a 4 x 4 register tile, barriers around each staging. */
static void test_cuda_matmul(void) {
  kg_program *p = kg_test_load_sizes(KG_TEST_MATMUL, "M=256 N=256 K=256");
  char *text = kg_test_read_file("examples/schedules/matmul_shared.sched", NULL);
  CHECK(p && text);
  if (!p || !text) {
    free(text);
    if (p) kg_program_free(p);
    return;
  }
  kg_schedule *s = sched_from(p, text);
  free(text);
  float f[KG_NFEATURES];
  CHECK(kg_features_extract(s, KG_TARGET_CUDA, f) == 0 && all_finite(f));
  CHECK_FEAT(f, "global.blocks", lg(16));
  CHECK_FEAT(f, "global.threads_per_block", lg(256));
  CHECK_FEAT(f, "global.shared_bytes_per_block", lg(2 * 64 * 16 * 4));
  CHECK_FEAT(f, "global.local_bytes", lg(16 * 4));
  CHECK_FEAT(f, "global.barriers", lg(4));
  CHECK_FEAT(f, "global.stages_attached", lg(3));
  CHECK_FEAT(f, "global.parallel_extent", 0);
  /* the update is the heaviest store: all 256^3 iterations, in registers, unrolled 4 x 4 */
  CHECK_FEAT(f, "store0.iters", lg(256.0 * 256 * 256));
  CHECK_FEAT(f, "store0.is_update", 1);
  CHECK_FEAT(f, "store0.unroll_prod", lg(16));
  CHECK_FEAT(f, "store0.threadIdx.x", lg(16));
  CHECK_FEAT(f, "store0.blockIdx.y", lg(4));
  CHECK_FEAT(f, "store0.kernel_barriers", lg(4));
  CHECK_FEAT(f, "store0.buf0.scope", KG_SCOPE_LOCAL + 1);
  int shared = 0;
  for (int b = 1; b < 3; b++) {
    char name[64];
    snprintf(name, sizeof name, "store0.buf%d.scope", b);
    shared += f[feat(name)] == KG_SCOPE_SHARED + 1;
  }
  CHECK(shared == 2);
  kg_schedule_free(s);
  kg_program_free(p);
}

/* Extracts the features of base with step appended (ft) and of base alone (fs) for target; 0, or -1 (reported)
 * when either does not extract. */
static int extract_with_step(const kg_program *p, const char *base, const char *step, kg_target_kind target,
                             float *ft, float *fs) {
  char sched[2048];
  snprintf(sched, sizeof sched, "%s%s", base, step);
  kg_schedule *t = sched_from(p, sched), *s = sched_from(p, base);
  int ok = kg_features_extract(t, target, ft) == 0 && all_finite(ft) && kg_features_extract(s, target, fs) == 0 &&
           all_finite(fs);
  CHECKF(ok, "%s: no features", step);
  kg_schedule_free(t);
  kg_schedule_free(s);
  return ok ? 0 : -1;
}

/* ft's heaviest entry is a tensor instruction of kind inst, iters executions doing mnk FMAs in all; fs, the same
 * schedule without it, does the same arithmetic as scalar updates. */
static void check_tensor_entry(const float *ft, const float *fs, int inst, double mnk, double iters) {
  CHECK_FEAT(ft, "store0.inst_kind", inst);
  CHECK_FEAT(ft, "store0.iters", lg(iters));
  CHECK_FEAT(ft, "store0.tensor_fma", lg(mnk));
  CHECK_FEAT(ft, "store0.float_fma", lg(mnk));
  CHECK_FEAT(ft, "store0.float_ops_per_iter", lg(2 * mnk / iters));
  CHECK_FEAT(ft, "store0.is_update", 1);
  CHECK_FEAT(ft, "global.total_tensor_fma", lg(mnk));
  CHECK_FEAT(ft, "global.total_float_ops", lg(2 * mnk));
  CHECK_FEAT(fs, "store0.inst_kind", 0);
  CHECK_FEAT(fs, "store0.tensor_fma", 0);
  CHECK_FEAT(fs, "store0.float_fma", lg(mnk));
  CHECK_FEAT(fs, "global.total_tensor_fma", 0);
  CHECK_FEAT(fs, "global.total_float_ops", lg(2 * mnk));
  CHECK(memcmp(ft, fs, sizeof(float) * KG_NFEATURES) != 0);
}

static const char *const MMA_GEMM = "def matmul(A: %s[M, K], B: %s[K, N]) -> (C: f32[M, N]) {\n"
                                    "  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n";
/* One warp a block over two 16 x 8 tiles of C in turn (i.i.o serial), k.o right outside the tensorized loops (the
 * accumulators in registers). */
static const char MMA_TILE[] = "split C i 32\nsplit C i.i 16\nsplit C i.i.i 8\nsplit C j 8\nsplit C j.i 2\n"
                               "split C k 16\nreorder C i.o j.o i.i.i.i j.i.o i.i.o k.o i.i.i.o j.i.i k.i\n"
                               "fuse C i.i.i.i j.i.o\nbind C i.o blockIdx.y\nbind C j.o blockIdx.x\n"
                               "bind C i.i.i.i*j.i.o threadIdx.x\n";

/* A tensor-core GEMM at 64 x 32 x 48 in f16 and bf16: its mma step is the heaviest entry, 16 * 8 * 16 / 32 = 64
 * FMAs for each of the 32 lanes of the 8 blocks, 2 tiles and 3 k steps, so M N K in all. */
static void test_mma(void) {
  static const char *const types[] = {"f16", "bf16"};
  for (int t = 0; t < 2; t++) {
    char text[256];
    snprintf(text, sizeof text, MMA_GEMM, types[t], types[t]);
    kg_program *p = kg_test_load_sizes(text, "M=64 N=32 K=48");
    CHECK(p != NULL);
    if (!p) return;
    float fm[KG_NFEATURES], fs[KG_NFEATURES];
    if (extract_with_step(p, MMA_TILE, "tensorize C i.i.i.o j.i.i k.i\n", KG_TARGET_CUDA, fm, fs) == 0) {
      double mnk = 64.0 * 32 * 48, iters = 8 * 32 * 2 * 3;
      CHECK(iters * 64 == mnk);
      check_tensor_entry(fm, fs, 1, mnk, iters);
      CHECK_FEAT(fm, "store0.float_ops_per_iter", lg(2 * 64));
      CHECK_FEAT(fm, "store0.loads_per_iter", lg(8 + 4 + 4));
      CHECK_FEAT(fm, "store0.threadIdx.x", lg(32));
      /* by bytes: the four f32 accumulators read and written, the 8 elements of A's fragment, the 4 of B's (2
       * bytes each); all three in registers */
      CHECK_FEAT(fm, "store0.buf0.access", 3);
      CHECK_FEAT(fm, "store0.buf0.scope", KG_SCOPE_LOCAL + 1);
      CHECK_FEAT(fm, "store0.buf0.bytes", lg(iters * 8 * 4));
      CHECK_FEAT(fm, "store0.buf0.unique_bytes", lg(4 * 4));
      CHECK_FEAT(fm, "store0.buf1.access", 1);
      CHECK_FEAT(fm, "store0.buf1.bytes", lg(iters * 8 * 2));
      CHECK_FEAT(fm, "store0.buf1.unique_bytes", lg(8 * 2));
      CHECK_FEAT(fm, "store0.buf2.unique_bytes", lg(4 * 2));
      CHECK_FEAT(fm, "store0.buf2.scope", KG_SCOPE_LOCAL + 1);
      CHECK_FEAT(fm, "store0.buf3.access", 0);
    }
    kg_program_free(p);
  }
}

/* bf16 dot products on the C target at 32 x 64 x 128, blocks of 8 rows x 32 columns x 64 k (test_bfdot's tile):
 * 16 blocks of 8 * 32 * 64 FMAs, M N K in all. The accumulator C.r0 is an f32 temporary, A and B are bf16. */
static void test_bfdot(void) {
  static const char TEXT[] = "def matmul(A: bf16[M, K], B: bf16[K, N]) -> (C: bf16[M, N]) {\n"
                             "  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n";
  static const char TILE[] = "split C.r0 i 16\nsplit C.r0 i.i 8\nsplit C.r0 j 32\nsplit C.r0 k 64\n"
                             "reorder C.r0 i.o j.o k.o i.i.o i.i.i j.i k.i\nfuse C.r0 i.o j.o\nparallel C.r0 i.o*j.o\n";
  kg_program *p = kg_test_load_sizes(TEXT, "M=32 N=64 K=128");
  CHECK(p != NULL);
  if (!p) return;
  float fd[KG_NFEATURES], fs[KG_NFEATURES];
  if (extract_with_step(p, TILE, "bfdot C.r0 i.i.i j.i k.i\n", KG_TARGET_C, fd, fs) == 0) {
    double mnk = 32.0 * 64 * 128, iters = 4 * 2 * 2;
    CHECK(iters * 8 * 32 * 64 == mnk);
    check_tensor_entry(fd, fs, 2, mnk, iters);
    CHECK_FEAT(fd, "store0.parallel_prod", lg(4));
    /* by bytes: B's 64 x 32 block (all of B over the loops), C.r0's 8 x 32 read and written, A's 8 x 64 */
    CHECK_FEAT(fd, "store0.buf0.access", 1);
    CHECK_FEAT(fd, "store0.buf0.bytes", lg(iters * 64 * 32 * 2));
    CHECK_FEAT(fd, "store0.buf0.unique_bytes", lg(128 * 64 * 2));
    CHECK_FEAT(fd, "store0.buf0.cache_lines", lg(128 * 64 * 2 / 64));
    CHECK_FEAT(fd, "store0.buf1.access", 3);
    CHECK_FEAT(fd, "store0.buf1.bytes", lg(iters * 2 * 8 * 32 * 4));
    CHECK_FEAT(fd, "store0.buf1.unique_bytes", lg(32 * 64 * 4));
    CHECK_FEAT(fd, "store0.buf2.bytes", lg(iters * 8 * 64 * 2));
    CHECK_FEAT(fd, "global.global_temp_bytes", lg(32 * 64 * 4));
  }
  kg_program_free(p);
}

#define DRAWS 5

typedef struct drawn {
  kg_schedule *s;
  kg_target_kind target;
} drawn;

/* Random schedules of every library workload for both targets: each extracts (0 exactly when it lowers),
 * finite, deterministic; then all of them again from OpenMP threads, which must give the same vectors. */
static void test_random_schedules(void) {
  char *files[KG_TEST_MAX_WORKLOADS];
  int nlib = 0, nfiles = kg_test_list_workloads(files, KG_TEST_MAX_WORKLOADS, &nlib);
  CHECKF(nlib >= 14, "only %d library workloads", nlib);
  kg_program *progs[KG_TEST_MAX_WORKLOADS];
  drawn *all = kg_xrealloc(NULL, sizeof *all * (size_t)nfiles * DRAWS * 2);
  int nall = 0, lowered = 0;
  for (int w = 0; w < nfiles; w++) {
    progs[w] = NULL;
    if (strncmp(files[w], "te/lib/", 7)) continue;
    char *text = kg_test_read_file(files[w], NULL);
    kg_binding b[KG_TEST_MAX_BIND];
    char names[KG_TEST_MAX_BIND][32];
    int nb = text ? kg_test_parse_sizes(text, b, names, 1) : -1;
    progs[w] = nb >= 0 ? kg_test_load(text, b, nb) : NULL;
    free(text);
    CHECKF(progs[w] != NULL, "%s does not load", files[w]);
    if (!progs[w]) continue;
    for (int tg = 0; tg < 2; tg++)
      for (int i = 0; i < DRAWS; i++) {
        kg_target_kind target = tg ? KG_TARGET_CUDA : KG_TARGET_C;
        kg_schedule *s = kg_schedule_new(progs[w]);
        kg_schedule_random(s, (uint64_t)w * 1000 + (uint64_t)i * 2 + (uint64_t)tg + 1, target, 4 + 3 * i);
        float f[KG_NFEATURES], g[KG_NFEATURES];
        kg_arena a;
        kg_arena_init(&a);
        char err[512];
        int lowers = kg_lower(s, target, &a, err, sizeof err) != NULL;
        kg_arena_free(&a);
        int rc = kg_features_extract(s, target, f);
        CHECKF(rc == (lowers ? 0 : -1), "%s draw %d target %d: extract %d, lowers %d", files[w], i, tg, rc, lowers);
        CHECKF(all_finite(f), "%s draw %d target %d: non-finite feature", files[w], i, tg);
        CHECK(kg_features_extract(s, target, g) == rc && !memcmp(f, g, sizeof f));
        if (rc == 0) CHECKF(f[feat("store0.iters")] > 0, "%s draw %d target %d: no store", files[w], i, tg);
        lowered += rc == 0;
        all[nall].s = s;
        all[nall++].target = target;
      }
  }
  CHECKF(lowered * 10 >= nall * 9, "only %d of %d random schedules lowered", lowered, nall);

  float *serial = kg_xrealloc(NULL, sizeof(float) * KG_NFEATURES * (size_t)nall);
  float *par = kg_xrealloc(NULL, sizeof(float) * KG_NFEATURES * (size_t)nall);
  for (int i = 0; i < nall; i++) kg_features_extract(all[i].s, all[i].target, serial + (size_t)i * KG_NFEATURES);
#pragma omp parallel for schedule(dynamic, 1) num_threads(2)
  for (int i = 0; i < nall; i++) kg_features_extract(all[i].s, all[i].target, par + (size_t)i * KG_NFEATURES);
  CHECK(!memcmp(serial, par, sizeof(float) * KG_NFEATURES * (size_t)nall));
  free(serial);
  free(par);
  for (int i = 0; i < nall; i++) kg_schedule_free(all[i].s);
  free(all);
  for (int w = 0; w < nfiles; w++)
    if (progs[w]) kg_program_free(progs[w]);
  kg_test_free_workloads(files, nfiles);
  printf("random schedules: %d of %d lowered and extracted\n", lowered, nall);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Not a check: how long one candidate takes (the search featurises thousands per round). */
static void report_speed(void) {
  kg_program *p = kg_test_load_sizes(KG_TEST_MATMUL, "M=1024 N=1024 K=1024");
  if (!p) return;
  kg_schedule *s = sched_from(p, "cache_write C local\nsplit C i 64\nsplit C j 64\nreorder C i.o j.o i.i j.i\n"
                                 "parallel C i.o\ncompute_at C.local C j.o\nsplit C.local k 8\n"
                                 "split C.local j 16\nreorder C.local k.o i k.i j.o j.i\nunroll C.local k.i\n"
                                 "vectorize C.local j.i\nvectorize C j.i\n");
  float f[KG_NFEATURES];
  int n = 200;
  double t0 = now_s();
  for (int i = 0; i < n; i++) kg_features_extract(s, KG_TARGET_C, f);
  double t = (now_s() - t0) / n;
  printf("feature extraction: %.1f us per candidate (tiled matmul, C target)\n", t * 1e6);
  kg_schedule_free(s);
  kg_program_free(p);
}

/* ---- the model ---- */

static float uniform(uint64_t *r) { return (float)(kg_rng_next(r) >> 40) / (float)(1 << 24); }

/* n rows of random features in [0, 10) (like log-scaled counts); throughput grows with features 3 and 77 and
 * falls with feature 140, normalized so the best row has label 1. */
static void synth(int n, uint64_t seed, float *x, float *label) {
  uint64_t r = seed;
  double best = 0;
  double *t = kg_xrealloc(NULL, sizeof(double) * (size_t)n);
  for (int i = 0; i < n; i++) {
    float *row = x + (size_t)i * KG_NFEATURES;
    for (int j = 0; j < KG_NFEATURES; j++) row[j] = 10 * uniform(&r);
    t[i] = exp(0.3 * row[3] + 0.2 * row[77] - 0.25 * row[140]);
    if (t[i] > best) best = t[i];
  }
  for (int i = 0; i < n; i++) label[i] = (float)(t[i] / best);
  free(t);
}

static void test_model_ranks(void) {
  int ntrain = 256, ntest = 128;
  float *x = kg_xrealloc(NULL, sizeof(float) * KG_NFEATURES * (size_t)(ntrain + ntest));
  float *label = kg_xrealloc(NULL, sizeof(float) * (size_t)(ntrain + ntest));
  float *scores = kg_xrealloc(NULL, sizeof(float) * (size_t)ntest);
  float *s2 = kg_xrealloc(NULL, sizeof(float) * (size_t)ntest);
  synth(ntrain + ntest, 11, x, label);
  float *xt = x + (size_t)ntrain * KG_NFEATURES, *lt = label + ntrain;

  kg_model *m = kg_model_new(KG_MODEL_XGB, 5);
  char err[512];
  CHECK(kg_model_kind_of(m) == KG_MODEL_XGB && !kg_model_trained(m));
  double t0 = now_s();
  CHECKF(kg_model_train(m, x, label, ntrain, err, sizeof err) == 0, "%s", err);
  double tt = now_s() - t0;
  CHECK(kg_model_trained(m));
  kg_model_predict(m, xt, ntest, scores);
  double acc = kg_model_pair_accuracy(scores, lt, ntest);
  printf("synthetic task: held-out pair accuracy %.3f (trained on %d rows in %.2f s)\n", acc, ntrain, tt);
  CHECKF(acc > 0.8, "pair accuracy %.3f", acc);

  /* save, load: the same predictions */
  char path[] = "/tmp/kg_test_model_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECKF(kg_model_save(m, path, err, sizeof err) == 0, "%s", err);
  kg_model *l = kg_model_load(path, 5, err, sizeof err);
  CHECKF(l != NULL, "%s", err);
  if (l) {
    CHECK(kg_model_trained(l) && kg_model_kind_of(l) == KG_MODEL_XGB);
    kg_model_predict(l, xt, ntest, s2);
    CHECK(!memcmp(scores, s2, sizeof(float) * (size_t)ntest));
    kg_model_free(l);
  }
  /* a truncated or garbage file, a missing one: NULL with a message */
  FILE *f = fopen(path, "r+b");
  if (f) {
    CHECK(ftruncate(fileno(f), 100) == 0);
    fclose(f);
  }
  err[0] = 0;
  CHECK(kg_model_load(path, 5, err, sizeof err) == NULL && strstr(err, "not a model"));
  f = fopen(path, "wb");
  if (f) {
    fputs("garbage, not a model\n", f);
    fclose(f);
  }
  CHECK(kg_model_load(path, 5, err, sizeof err) == NULL);
  f = fopen(path, "wb");
  if (f) fclose(f);
  CHECK(kg_model_load(path, 5, err, sizeof err) == NULL && strstr(err, "empty"));
  remove(path);
  CHECK(kg_model_load(path, 5, err, sizeof err) == NULL && strstr(err, "cannot open"));
  CHECK(kg_model_save(m, "/nonexistent-dir/model", err, sizeof err) == -1 && strstr(err, "cannot write"));

  /* retraining on too little data leaves it untrained (random scores, nothing to save) */
  CHECK(kg_model_train(m, x, label, 15, err, sizeof err) == 0 && !kg_model_trained(m));
  CHECK(kg_model_save(m, path, err, sizeof err) == -1 && strstr(err, "not trained"));
  float same[64];
  for (int i = 0; i < 64; i++) same[i] = 0.5f;
  CHECK(kg_model_train(m, x, same, 64, err, sizeof err) == 0 && !kg_model_trained(m));
  CHECK(kg_model_train(m, x, label, 16, err, sizeof err) == 0 && kg_model_trained(m));
  kg_model_free(m);
  free(x);
  free(label);
  free(scores);
  free(s2);
}

static void test_model_random(void) {
  int n = 600;
  float *label = kg_xrealloc(NULL, sizeof(float) * (size_t)n);
  float *x = kg_xrealloc(NULL, sizeof(float) * KG_NFEATURES * (size_t)n);
  float *a = kg_xrealloc(NULL, sizeof(float) * (size_t)n), *b = kg_xrealloc(NULL, sizeof(float) * (size_t)n);
  synth(n, 3, x, label);
  kg_model *r1 = kg_model_new(KG_MODEL_RANDOM, 42), *r2 = kg_model_new(KG_MODEL_RANDOM, 42),
           *r3 = kg_model_new(KG_MODEL_RANDOM, 43);
  char err[256];
  /* training a random model changes nothing */
  CHECK(kg_model_train(r1, x, label, n, err, sizeof err) == 0 && !kg_model_trained(r1));
  CHECK(kg_model_kind_of(r1) == KG_MODEL_RANDOM);
  kg_model_predict(r1, x, n, a);
  kg_model_predict(r2, x, n, b);
  CHECK(!memcmp(a, b, sizeof(float) * (size_t)n));
  kg_model_predict(r3, x, n, b);
  CHECK(memcmp(a, b, sizeof(float) * (size_t)n) != 0);
  double acc = kg_model_pair_accuracy(a, label, n);
  printf("random model: pair accuracy %.3f\n", acc);
  CHECKF(fabs(acc - 0.5) < 0.05, "random model pair accuracy %.3f", acc);
  /* the stream moves on: the next round gets fresh scores */
  kg_model_predict(r2, x, n, b);
  kg_model_predict(r2, x, n, b);
  CHECK(memcmp(a, b, sizeof(float) * (size_t)n) != 0);
  int in_range = 1;
  for (int i = 0; i < n; i++) in_range &= a[i] >= 0 && a[i] < 1;
  CHECK(in_range);
  kg_model_free(r1);
  kg_model_free(r2);
  kg_model_free(r3);
  free(label);
  free(x);
  free(a);
  free(b);
}

static void test_pair_accuracy(void) {
  float l3[] = {1, 2, 3}, up[] = {0.1f, 0.2f, 0.3f}, down[] = {0.3f, 0.2f, 0.1f};
  CHECK(kg_model_pair_accuracy(up, l3, 3) == 1.0);
  CHECK(kg_model_pair_accuracy(down, l3, 3) == 0.0);
  /* pairs with equal labels do not count: (0,2) disagrees, (1,2) agrees */
  float lt[] = {1, 1, 2}, st[] = {0.3f, 0.1f, 0.2f};
  CHECK(kg_model_pair_accuracy(st, lt, 3) == 0.5);
  /* equal scores on different labels: half credit. (0,1) tie, (0,2) and (1,2) agree: 2.5 / 3 */
  float sq[] = {0.1f, 0.1f, 0.9f};
  CHECK(fabs(kg_model_pair_accuracy(sq, l3, 3) - 2.5 / 3) < 1e-12);
  float same[] = {4, 4, 4};
  CHECK(kg_model_pair_accuracy(up, same, 3) == -1);
  CHECK(kg_model_pair_accuracy(up, l3, 0) == -1);
  /* beyond the exact limit pairs are sampled: a perfect ranking stays perfect, a reversed one stays 0 */
  int n = 5000;
  float *s = kg_xrealloc(NULL, sizeof(float) * (size_t)n), *l = kg_xrealloc(NULL, sizeof(float) * (size_t)n);
  for (int i = 0; i < n; i++) {
    l[i] = (float)i;
    s[i] = (float)(2 * i);
  }
  CHECK(kg_model_pair_accuracy(s, l, n) == 1.0);
  for (int i = 0; i < n; i++) s[i] = (float)-i;
  CHECK(kg_model_pair_accuracy(s, l, n) == 0.0);
  free(s);
  free(l);
}

int main(void) {
  test_names();
  test_cpu_matmul();
  test_cuda_matmul();
  test_mma();
  test_bfdot();
  test_random_schedules();
  report_speed();
  test_pair_accuracy();
  test_model_random();
  test_model_ranks();
  TEST_END();
}
