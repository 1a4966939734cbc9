/* The GPU sketch rules (search/sketch_gpu.c), without a GPU:
 *   - every library workload (te/lib and tests/programs at their `# sizes:`, and bench/workloads/conv2d_3x3.te)
 *     gets sketches, among them the fallback; random points of each sketch realize at a reasonable rate, the same
 *     point twice gives the same trace, and every realized schedule lowers and prints as CUDA within sm_90's
 *     launch limits; a few realized points per workload (of different sketches) are compiled with NVRTC for
 *     sm_90 and run on the CUDA emulator against the reference evaluator;
 *   - the hand-written structures are points of the space: a point of matmul's tiled sketch realizes to the
 *     structure of examples/schedules/matmul_shared.sched (64 x 64 block tiles, 16 x 16 threads, 4 x 4 per thread,
 *     A and B staged in shared memory with float4 fetches, C accumulated in registers), verified on the emulator
 *     and, at 4096^3, compiled for sm_90 with no register spills, as is the 128 x 128 / 8 x 8 variant; a point of
 *     softmax's sketch realizes to softmax_cross_thread.sched's structure, compiled at 8192 x 8192;
 *   - random points at the bench sizes (matmul 4096^3, softmax 8192 x 8192) compile with NVRTC for sm_90.
 * KGEN_GPU_RANDOM_SCHEDULES sets the random points per sketch (default 30; emulator runs per workload: 2, plus one
 * per 30 points). Needs NVRTC and a C++ compiler for the compile and emulator parts (skipped with a message
 * when NVRTC is missing). */
#include <stdint.h>
#include "kgen.h"
#include "base/clock.h"
#include "base/rng.h"
#include "runtime/nvrtc.h"
#include "gen/space.h"
#include "gen/gpu_rules.h"
#include "testlib.h"

static kg_gpu_limits sm90;
static int have_nvrtc;

/* A realized schedule lowered and printed as CUDA (err holds why not). */
static int print_cuda(const kg_schedule *s, kg_cuda_program *prog, char *err, size_t errlen) {
  kg_arena a;
  kg_arena_init(&a);
  kg_lowered *lw = kg_lower(s, KG_TARGET_CUDA, &a, err, errlen);
  int ok = lw && kg_codegen_cuda(lw, "kgen", prog, err, errlen) == 0;
  kg_arena_free(&a);
  return ok;
}

/* The checks of an NVRTC build (rc, cb) of prog for sm_90: it compiled, within the limits; *spills gets the bytes
 * spilled by all kernels. Frees cb. */
static int check_cubin(const kg_cuda_program *prog, kg_cubin *cb, int rc, const char *what, int64_t *spills) {
  CHECKF(rc == 0, "%s: NVRTC failed:\n%s\nsource:\n%s", what, cb->log ? cb->log : "(no log)", prog->source);
  if (rc == 0) {
    char why[512];
    CHECKF(kg_gpu_check_limits(prog, cb, &sm90, why, sizeof why) == 0, "%s: %s", what, why);
    *spills = 0;
    for (int k = 0; k < cb->nres; k++) *spills += cb->res[k].spill_stores + cb->res[k].spill_loads;
  }
  kg_cubin_free(cb);
  return rc == 0;
}

static int compile_sm90(const kg_cuda_program *prog, const char *what, int64_t *spills) {
  kg_cubin cb;
  int rc = kg_nvrtc_compile(prog, "sm_90", &cb);
  return check_cubin(prog, &cb, rc, what, spills);
}

/* The checks of an emulator build (rc, m) of prog: it built, and its run matches the reference. Frees m. */
static void check_emu(const kg_cuda_program *prog, kg_emu_module *m, int rc, kg_test_workload *wl, const char *what,
                      const char *trace) {
  CHECKF(rc == 0, "%s: emulator build failed:\n%s", what, m->log ? m->log : "(no log)");
  if (rc == 0) {
    char err[1024];
    CHECKF(kg_test_emu_verify(m, prog, wl, err, sizeof err), "%s: %s\ntrace:\n%s\nsource:\n%s", what, err, trace,
           prog->source);
  }
  kg_emu_module_free(m);
}

static void emulate(const kg_cuda_program *prog, kg_test_workload *wl, const char *what, const char *trace) {
  kg_emu_module m;
  int rc = kg_emu_build(prog, &m);
  check_emu(prog, &m, rc, wl, what, trace);
}

/* A realized point picked for NVRTC and the emulator. */
typedef struct picked {
  kg_cuda_program prog;
  char what[600];
  char *trace;
  kg_cubin cubin;
  kg_emu_module emu;
  int nvrtc_rc, emu_rc;
} picked;

/* Every sketch of one workload under per random points. */
static void check_workload(const char *path, int w, int per, int *total, int *realized) {
  kg_test_workload wl;
  if (kg_test_workload_load(&wl, path) != 0) return;
  kg_space *sp = kg_space_new(wl.p, KG_TARGET_CUDA, &sm90);
  CHECKF(sp->nsketches >= 1, "%s: no sketch", path);
  CHECKF(kg_space_find_sketch(sp, "gpu/simple") >= 0, "%s: no fallback sketch", path);
  /* a few per workload (2, one more per 30 points), one per sketch, the sketches taken in turn across workloads */
  int here = 0, ok_here = 0, npick = 0, picks = 2 + per / 30;
  if (picks > sp->nsketches) picks = sp->nsketches;
  picked *pick = calloc((size_t)picks, sizeof *pick);
  for (int k = 0; k < sp->nsketches; k++) {
    const kg_sketch *sk = &sp->sketches[k];
    uint64_t rng = 0x5eed0000u + (uint64_t)k;
    int ok_sketch = 0, emu_left = (k + w) % sp->nsketches < picks;
    for (int i = 0; i < per; i++) {
      kg_point pt;
      kg_space_sample(sp, k, &rng, &pt);
      char err[1024], what[600];
      kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
      here++;
      if (!s) continue;
      ok_sketch++;
      char *trace = kg_trace_to_text(&s->trace);
      snprintf(what, sizeof what, "%s sketch %s point %d", path, sk->name, i);
      kg_schedule *again = kg_space_realize(sp, &pt, err, sizeof err);
      CHECKF(again != NULL, "%s: realized once, not twice: %s", what, err);
      if (again) {
        char *t2 = kg_trace_to_text(&again->trace);
        CHECKF(!strcmp(trace, t2), "%s: two traces:\n%s\n---\n%s", what, trace, t2);
        free(t2);
        kg_schedule_free(again);
      }
      kg_cuda_program prog;
      int printed = print_cuda(s, &prog, err, sizeof err);
      CHECKF(printed, "%s: does not print as CUDA: %s\ntrace:\n%s", what, err, trace);
      if (printed) {
        CHECKF(kg_gpu_check_limits(&prog, NULL, &sm90, err, sizeof err) == 0, "%s: %s\ntrace:\n%s", what, err,
               trace);
        if (have_nvrtc && emu_left > 0) {
          emu_left--;
          picked *x = &pick[npick++];
          x->prog = prog;
          snprintf(x->what, sizeof x->what, "%s", what);
          x->trace = trace;
          trace = NULL;
        } else {
          kg_cuda_program_free(&prog);
        }
      }
      free(trace);
      kg_schedule_free(s);
    }
    printf("  %-28s %-24s %2d knobs, %d/%d points realized\n", path, sk->name, sk->nknobs, ok_sketch, per);
    CHECKF(ok_sketch > 0, "%s: sketch %s: no point of %d realized", path, sk->name, per);
    ok_here += ok_sketch;
  }
  CHECKF(5 * ok_here >= here, "%s: %d of %d random points realized (< 20%%)", path, ok_here, here);
  /* NVRTC and the emulator's host compiles two at a time; the checks and runs one at a time */
#pragma omp parallel for num_threads(2) schedule(dynamic)
  for (int job = 0; job < 2 * npick; job++) {
    picked *x = &pick[job / 2];
    if (job % 2 == 0) x->nvrtc_rc = kg_nvrtc_compile(&x->prog, "sm_90", &x->cubin);
    else x->emu_rc = kg_emu_build(&x->prog, &x->emu);
  }
  for (int i = 0; i < npick; i++) {
    picked *x = &pick[i];
    int64_t spills;
    check_cubin(&x->prog, &x->cubin, x->nvrtc_rc, x->what, &spills);
    check_emu(&x->prog, &x->emu, x->emu_rc, &wl, x->what, x->trace);
    kg_cuda_program_free(&x->prog);
    free(x->trace);
  }
  free(pick);
  if (have_nvrtc) CHECKF(npick == picks, "%s: %d emulated, %d wanted", path, npick, picks);
  *total += here;
  *realized += ok_here;
  kg_space_free(sp);
  kg_test_workload_free(&wl);
}

/* A point of sketch k with the named knobs set (the others at their first value); -1 when a name or value is not
 * in the sketch. */
static int point_with(const kg_space *sp, int k, const char *const *names, const int64_t *values, int n,
                      kg_point *pt) {
  const kg_sketch *sk = &sp->sketches[k];
  memset(pt, 0, sizeof *pt);
  pt->sketch = k;
  pt->nknobs = sk->nknobs;
  for (int i = 0; i < sk->nknobs; i++) pt->knobs[i] = sk->knobs[i].values[0];
  for (int j = 0; j < n; j++) {
    int found = 0;
    for (int i = 0; i < sk->nknobs; i++)
      if (!strcmp(sk->knobs[i].name, names[j])) {
        pt->knobs[i] = values[j];
        found = 1;
      }
    CHECKF(found, "sketch %s has no knob %s", sk->name, names[j]);
    if (!found) return -1;
  }
  CHECKF(kg_space_point_valid(sp, pt), "sketch %s: a value is not among its knob's values", sk->name);
  return kg_space_point_valid(sp, pt) ? 0 : -1;
}

static const kg_iter *leaf_of_kind(const kg_sstage *st, kg_loop_kind kind) {
  for (int l = 0; st && l < st->nleaves; l++)
    if (st->leaves[l]->kind == kind) return st->leaves[l];
  return NULL;
}

/* The tiled sketch of matmul (M, N, K) at a point: block tile (tile x tile) of threads x threads, each thread
 * per x per, k tile 16, float4 fetches. Checks the structure of the realized schedule and its CUDA; returns the
 * printed program (prog->source NULL when it did not realize). */
static void matmul_point(const kg_program *p, int64_t threads, int64_t per, kg_cuda_program *prog, char **trace) {
  memset(prog, 0, sizeof *prog);
  *trace = NULL;
  kg_space *sp = kg_space_new(p, KG_TARGET_CUDA, &sm90);
  int k = kg_space_find_sketch(sp, "gpu/tile-fuse");
  CHECKF(k >= 0, "matmul has no gpu/tile-fuse sketch");
  static const char *const names[] = {"C.i.thread", "C.i.inner",  "C.j.thread",          "C.j.inner",
                                      "C.vthread",  "C.k.tile",   "C.unroll",            "C.vectorize",
                                      "C.A.shared.vector", "C.B.shared.vector"};
  int64_t values[] = {threads, per, threads, per, 1, 16, per * per, 1, 4, 4};
  kg_point pt;
  if (k < 0 || point_with(sp, k, names, values, 10, &pt) != 0) {
    kg_space_free(sp);
    return;
  }
  char err[1024];
  kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
  CHECKF(s != NULL, "matmul %lldx%lld threads, %lldx%lld per thread: %s", (long long)threads, (long long)threads,
         (long long)per, (long long)per, err);
  if (!s) {
    kg_space_free(sp);
    return;
  }
  *trace = kg_trace_to_text(&s->trace);
  const kg_sstage *loc = kg_schedule_find_stage(s, "C.local"), *sa = kg_schedule_find_stage(s, "A.shared"),
                  *sb = kg_schedule_find_stage(s, "B.shared"), *c = kg_schedule_find_stage(s, "C");
  CHECKF(loc && loc->scope == KG_SCOPE_LOCAL && loc->attach == KG_ATTACH_AT, "no register tile C.local:\n%s", *trace);
  CHECKF(sa && sa->scope == KG_SCOPE_SHARED && sb && sb->scope == KG_SCOPE_SHARED, "A, B not shared:\n%s", *trace);
  CHECKF(sa && leaf_of_kind(sa, KG_LOOP_VECTORIZED) && leaf_of_kind(sa, KG_LOOP_VECTORIZED)->extent == 4,
         "A's fetch is not float4:\n%s", *trace);
  CHECKF(c && leaf_of_kind(c, KG_LOOP_VECTORIZED), "C's store is not vectorized:\n%s", *trace);
  CHECKF(loc && leaf_of_kind(loc, KG_LOOP_UNROLLED), "the register tile is not unrolled:\n%s", *trace);
  CHECKF(print_cuda(s, prog, err, sizeof err), "matmul does not print: %s\n%s", err, *trace);
  if (prog->source) {
    int64_t tile = threads * per;
    const kg_cuda_kernel *kk = &prog->kernels[0];
    CHECKF(prog->nkernels == 1, "%d kernels", prog->nkernels);
    CHECKF(kk->block[0] == threads && kk->block[1] == threads && kk->block[2] == 1, "block %lld x %lld x %lld",
           (long long)kk->block[0], (long long)kk->block[1], (long long)kk->block[2]);
    int64_t M = p->outputs[0]->shape[0], N = p->outputs[0]->shape[1];
    CHECKF(kk->grid[0] == (N + tile - 1) / tile && kk->grid[1] == (M + tile - 1) / tile, "grid %lld x %lld",
           (long long)kk->grid[0], (long long)kk->grid[1]);
    /* the A tile (tile x 16) and the B tile (16 x tile), clipped to K */
    int64_t K = p->inputs[0]->shape[1], kt = K < 16 ? K : 16;
    CHECKF(kk->static_shared == 4 * (tile * kt + kt * tile), "shared %lld bytes", (long long)kk->static_shared);
    /* float4 where the rows of A and B allow aligned accesses */
    if (K % 4 == 0 && N % 4 == 0) CHECK_STR_CONTAINS(prog->source, "float4");
  }
  kg_schedule_free(s);
  kg_space_free(sp);
}

static void test_matmul_structure(void) {
  /* at the library's sizes, on the emulator */
  kg_test_workload wl;
  if (kg_test_workload_load(&wl, "te/lib/matmul.te") != 0) return;
  kg_cuda_program prog;
  char *trace;
  matmul_point(wl.p, 4, 4, &prog, &trace); /* 16 x 16 blocks of 4 x 4 threads at these small sizes */
  if (prog.source && have_nvrtc) emulate(&prog, &wl, "matmul 4x4 threads, 4x4 per thread", trace);
  if (prog.source) kg_cuda_program_free(&prog);
  free(trace);
  kg_test_workload_free(&wl);
  /* at 4096^3: matmul_shared.sched's structure, and 128 x 128 blocks with 8 x 8 per thread */
  kg_program *p = kg_test_load_sizes(KG_TEST_MATMUL, "M=4096 N=4096 K=4096");
  CHECK(p != NULL);
  if (!p) return;
  for (int per = 4; per <= 8; per += 4) {
    matmul_point(p, 16, per, &prog, &trace);
    if (per == 4 && trace) printf("matmul 4096^3, 64x64 tiles, 16x16 threads, 4x4 per thread:\n%s", trace);
    if (prog.source && have_nvrtc) {
      int64_t spills = -1;
      char what[64];
      snprintf(what, sizeof what, "matmul 4096^3 %dx%d per thread", per, per);
      if (compile_sm90(&prog, what, &spills)) CHECKF(spills == 0, "%s: %lld bytes spilled", what, (long long)spills);
    }
    if (prog.source) kg_cuda_program_free(&prog);
    free(trace);
  }
  kg_program_free(p);
}

/* matmul at sizes, its gpu/tile-fuse point with the named knobs set, realized and printed: the schedule (NULL on a
 * failed check), its trace and program in *trace and *prog (caller frees all, and wl). */
static kg_schedule *tile_point(kg_test_workload *wl, const char *sizes, const char *const *names,
                               const int64_t *values, int n, char **trace, kg_cuda_program *prog) {
  memset(wl, 0, sizeof *wl);
  memset(prog, 0, sizeof *prog);
  *trace = NULL;
  wl->p = kg_test_load_sizes(KG_TEST_MATMUL, sizes);
  CHECK(wl->p != NULL);
  if (!wl->p) return NULL;
  kg_data_init(&wl->d, wl->p, KG_TEST_DATA_SEED);
  kg_data_reference(&wl->d, wl->p, KG_TEST_DATA_SEED);
  kg_space *sp = kg_space_new(wl->p, KG_TARGET_CUDA, &sm90);
  int k = kg_space_find_sketch(sp, "gpu/tile-fuse");
  CHECKF(k >= 0, "matmul has no gpu/tile-fuse sketch");
  kg_point pt;
  kg_schedule *s = NULL;
  if (k >= 0 && point_with(sp, k, names, values, n, &pt) == 0) {
    char err[1024];
    s = kg_space_realize(sp, &pt, err, sizeof err);
    CHECKF(s != NULL, "%s: %s", names[n - 1], err);
    if (s) *trace = kg_trace_to_text(&s->trace);
    if (s && !print_cuda(s, prog, err, sizeof err)) {
      CHECKF(0, "%s: does not print: %s", names[n - 1], err);
      kg_schedule_free(s);
      s = NULL;
    }
  }
  kg_space_free(sp);
  return s;
}

/* The grouped block order (knob raster): matmul 1024 x 128 with 16 x 16 tiles, blocks in groups of 8 block rows
 * fused onto blockIdx.x: one grid dimension of 64 x 8 blocks, and the product verified on the emulator. */
static void test_raster(void) {
  static const char *const names[] = {"C.i.thread", "C.i.inner", "C.j.thread", "C.j.inner", "C.k.tile", "C.raster"};
  static const int64_t values[] = {4, 4, 16, 1, 8, 8};
  kg_test_workload wl;
  kg_cuda_program prog;
  char *trace;
  kg_schedule *s = tile_point(&wl, "M=1024 N=128 K=16", names, values, 6, &trace, &prog);
  if (s) {
    const kg_cuda_kernel *kk = &prog.kernels[0];
    CHECKF(kk->grid[0] == 64 * 8 && kk->grid[1] == 1, "grid %lld x %lld:\n%s", (long long)kk->grid[0],
           (long long)kk->grid[1], trace);
    CHECK_STR_CONTAINS(trace, "split C i.o 8\n");
    if (have_nvrtc) emulate(&prog, &wl, "matmul 1024x128, blocks in groups of 8 rows", trace);
    kg_cuda_program_free(&prog);
    kg_schedule_free(s);
  }
  free(trace);
  kg_test_workload_free(&wl);
}

/* k-major staging and the ring (knobs A.shared.kmajor, pipeline): matmul 128 x 128 x 40 with k steps of 8 (five
 * steps through a ring of three): A's copy stored transposed (reorder_storage, its fetch walking A's rows), the
 * staged tiles pipelined, the product verified on the emulator. Only A, read along the reduction in its
 * contiguous dimension, gets the knob; B is read along it in its rows already. */
static void test_kmajor_pipeline(void) {
  static const char *const names[] = {"C.i.thread", "C.i.inner", "C.j.thread", "C.j.inner",
                                      "C.k.tile",   "C.A.shared.kmajor", "C.pipeline"};
  static const int64_t values[] = {8, 4, 8, 4, 8, 1, 3};
  kg_test_workload wl;
  kg_cuda_program prog;
  char *trace;
  kg_schedule *s = tile_point(&wl, "M=128 N=128 K=40", names, values, 7, &trace, &prog);
  if (s) {
    /* B has no such knob: the sketches of the same program */
    kg_space *sp = kg_space_new(wl.p, KG_TARGET_CUDA, &sm90);
    for (int k = 0; k < sp->nsketches; k++)
      for (int i = 0; i < sp->sketches[k].nknobs; i++)
        CHECKF(strcmp(sp->sketches[k].knobs[i].name, "C.B.shared.kmajor") != 0, "%s offers B k-major",
               sp->sketches[k].name);
    kg_space_free(sp);
    CHECK_STR_CONTAINS(trace, "reorder_storage A.shared ax1 ax0\n");
    CHECK_STR_CONTAINS(trace, "reorder A.shared ax0 ax1\n");
    CHECK_STR_CONTAINS(trace, "pipeline C.local k.o 3\n");
    CHECK(strstr(trace, "reorder_storage B.shared") == NULL);
    CHECK_STR_CONTAINS(prog.source, "kg_cp_async4(A_shared + (");
    CHECK_STR_CONTAINS(prog.source, "kg_cp_async_wait(1);");
    if (have_nvrtc) emulate(&prog, &wl, "matmul 128^2 x 40, A k-major, ring of 3", trace);
    kg_cuda_program_free(&prog);
    kg_schedule_free(s);
  }
  free(trace);
  kg_test_workload_free(&wl);
}

static void test_softmax_structure(void) {
  kg_program *p = kg_test_load_sizes(KG_TEST_SOFTMAX, "N=8192 D=8192");
  CHECK(p != NULL);
  if (!p) return;
  kg_space *sp = kg_space_new(p, KG_TARGET_CUDA, &sm90);
  int k = kg_space_find_sketch(sp, "gpu/tile-fuse");
  CHECKF(k >= 0, "softmax has no gpu/tile-fuse sketch");
  static const char *const names[] = {"m.threads", "Y.threads", "Y.vector"};
  static const int64_t values[] = {256, 256, 4};
  kg_point pt;
  if (k >= 0 && point_with(sp, k, names, values, 3, &pt) == 0) {
    char err[1024];
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    CHECKF(s != NULL, "softmax: %s", err);
    if (s) {
      char *trace = kg_trace_to_text(&s->trace);
      printf("softmax 8192^2, cross-thread:\n%s", trace);
      const kg_sstage *e = kg_schedule_find_stage(s, "e"), *r = kg_schedule_find_stage(s, "Y.r0.shared"),
                      *m = kg_schedule_find_stage(s, "m");
      CHECKF(e && e->attach == KG_ATTACH_INLINE, "e not inlined:\n%s", trace);
      CHECKF(r && r->scope == KG_SCOPE_SHARED && r->attach == KG_ATTACH_AT, "no shared row sum:\n%s", trace);
      const kg_iter *rt = r ? leaf_of_kind(r, KG_LOOP_BOUND) : NULL, *mt = m ? leaf_of_kind(m, KG_LOOP_BOUND) : NULL;
      CHECKF(rt && rt->is_reduce && rt->tag == KG_THREAD_THREAD_X, "the row sum is not cross-thread:\n%s", trace);
      CHECKF(m && m->nleaves >= 2 && m->leaves[m->nleaves - 1]->is_reduce && mt,
             "the row max is not cross-thread:\n%s", trace);
      kg_cuda_program prog;
      if (print_cuda(s, &prog, err, sizeof err)) {
        CHECKF(prog.nkernels == 2, "%d kernels", prog.nkernels);
        for (int q = 0; q < prog.nkernels; q++)
          CHECKF(prog.kernels[q].block[0] == 256 && prog.kernels[q].grid[0] == 8192, "kernel %d: %lld x %lld", q,
                 (long long)prog.kernels[q].grid[0], (long long)prog.kernels[q].block[0]);
        CHECK_STR_CONTAINS(prog.source, "float4");
        int64_t spills;
        if (have_nvrtc) compile_sm90(&prog, "softmax 8192^2", &spills);
        kg_cuda_program_free(&prog);
      } else {
        CHECKF(0, "softmax does not print: %s", err);
      }
      free(trace);
      kg_schedule_free(s);
    }
  }
  kg_space_free(sp);
  kg_program_free(p);
}

/* gpu/row-onepass: softmax, layernorm and RMSNorm at rows of 8192 floats in one kernel, a block per row, the row
 * copied into shared memory once (the only stage that reads X from global memory is X.shared) and every pass (the
 * maximum or mean, the sum or variance, the output) reading it there; compiled for sm_90 within its limits and
 * without spills, and the same point verified on the emulator at the workload's small sizes. */
static void test_onepass(const char *path, const char *row) {
  kg_test_workload wl;
  if (kg_test_workload_load(&wl, path) != 0) return;
  char sizes[] = "N=8192 D=8192";
  size_t len = 0;
  char *text = kg_test_read_file(path, &len);
  kg_program *big = text ? kg_test_load_sizes(text, sizes) : NULL;
  free(text);
  CHECKF(big != NULL, "%s at %s", path, sizes);
  for (int size = 0; size < 2 && big; size++) {
    kg_program *p = size == 0 ? big : wl.p;
    kg_space *sp = kg_space_new(p, KG_TARGET_CUDA, &sm90);
    int k = kg_space_find_sketch(sp, "gpu/row-onepass");
    CHECKF(k >= 0, "%s has no gpu/row-onepass sketch", path);
    char n0[64], n1[64], n2[64];
    snprintf(n0, sizeof n0, "%s.threads", row);
    snprintf(n1, sizeof n1, "%s.vector", row);
    snprintf(n2, sizeof n2, "%s.stage_rows", row);
    const char *names[] = {n0, n1, n2};
    /* at the small sizes (rows of a few dozen) the widest values the knobs have */
    int64_t values[] = {size == 0 ? 256 : 32, size == 0 ? 4 : 1, 1};
    kg_point pt;
    char err[1024];
    kg_schedule *s = k >= 0 && point_with(sp, k, names, values, 3, &pt) == 0 ? kg_space_realize(sp, &pt, err, sizeof err)
                                                                             : NULL;
    CHECKF(s != NULL, "%s: row-onepass does not realize: %s", path, k >= 0 ? err : "");
    if (s) {
      char *trace = kg_trace_to_text(&s->trace);
      const kg_sstage *xs = kg_schedule_find_stage(s, "X.shared");
      CHECKF(xs && xs->scope == KG_SCOPE_SHARED && xs->attach == KG_ATTACH_AT, "%s: no row copy:\n%s", path, trace);
      for (int i = 0; i < s->nstages; i++) {
        const kg_sstage *st = s->stages[i];
        if (st == xs || st->attach == KG_ATTACH_INLINE) continue;
        kg_tensor *t[16];
        int reuse[16], n = 0;
        kg_gpu_collect_reads(st, st->body, t, reuse, &n, 16);
        for (int j = 0; j < n; j++) CHECKF(strcmp(t[j]->name, "X") != 0, "%s: %s reads X\n%s", path, st->name, trace);
      }
      kg_cuda_program prog;
      if (print_cuda(s, &prog, err, sizeof err)) {
        CHECKF(prog.nkernels == 1, "%s: %d kernels\n%s", path, prog.nkernels, trace);
        CHECK_STR_CONTAINS(prog.source, "X_shared");
        if (size == 0) {
          CHECKF(prog.kernels[0].grid[0] == 8192 && prog.kernels[0].block[0] == 256, "%s: %lld x %lld", path,
                 (long long)prog.kernels[0].grid[0], (long long)prog.kernels[0].block[0]);
          CHECK_STR_CONTAINS(prog.source, "float4");
          int64_t spills = 0;
          if (have_nvrtc && compile_sm90(&prog, path, &spills)) CHECKF(spills == 0, "%s: %lld B spilled", path,
                                                                        (long long)spills);
          if (size == 0) printf("%s 8192^2, one pass:\n%s", path, trace);
        } else if (have_nvrtc) {
          emulate(&prog, &wl, path, trace);
        }
        kg_cuda_program_free(&prog);
      } else {
        CHECKF(0, "%s does not print: %s", path, err);
      }
      free(trace);
      kg_schedule_free(s);
    }
    kg_space_free(sp);
  }
  kg_program_free(big);
  kg_test_workload_free(&wl);
}

/* Random points of every sketch at a bench size realize at a reasonable rate, and the first per_sketch
 * realized ones of each sketch compile for sm_90. */
static void test_bench_sizes(const char *text, const char *sizes, int points, int per_sketch) {
  kg_program *p = kg_test_load_sizes(text, sizes);
  CHECK(p != NULL);
  if (!p) return;
  kg_space *sp = kg_space_new(p, KG_TARGET_CUDA, &sm90);
  int compiled = 0, tried = 0, realized = 0;
  for (int k = 0; k < sp->nsketches; k++) {
    uint64_t rng = 0xbe9c0000u + (uint64_t)k;
    for (int i = 0, got = 0; i < points; i++) {
      kg_point pt;
      kg_space_sample(sp, k, &rng, &pt);
      char err[1024], what[256];
      kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
      tried++;
      if (!s) continue;
      realized++;
      if (got++ >= per_sketch) {
        kg_schedule_free(s);
        continue;
      }
      snprintf(what, sizeof what, "%s sketch %s point %d", sizes, sp->sketches[k].name, i);
      kg_cuda_program prog;
      int printed = print_cuda(s, &prog, err, sizeof err);
      CHECKF(printed, "%s: %s", what, err);
      if (printed) {
        int64_t spills;
        compiled += compile_sm90(&prog, what, &spills);
        kg_cuda_program_free(&prog);
      }
      kg_schedule_free(s);
    }
  }
  printf("%s: %d/%d random points realized, %d of them (%d sketches) compiled for sm_90\n", sizes, realized, tried,
         compiled, sp->nsketches);
  CHECKF(5 * realized >= tried, "%s: %d of %d random points realized (< 20%%)", sizes, realized, tried);
  if (per_sketch > 0) CHECKF(compiled >= sp->nsketches, "%s: only %d compiled", sizes, compiled);
  kg_space_free(sp);
  kg_program_free(p);
}

int main(void) {
  int per = 30;
  const char *env = getenv("KGEN_GPU_RANDOM_SCHEDULES");
  if (env) per = atoi(env);
  if (per < 1) per = 1;
  CHECK(kg_gpu_limits_for_arch("sm_90", &sm90) == 0);
  char why[512];
  have_nvrtc = kg_nvrtc_available(why, sizeof why) == 0;
  if (!have_nvrtc) printf("NVRTC unavailable (%s): compiles and emulator runs skipped\n", why);
  double t0 = kg_now_s();

  char *files[KG_TEST_MAX_WORKLOADS];
  int nlib = 0, nfiles = kg_test_list_workloads(files, KG_TEST_MAX_WORKLOADS - 1, &nlib);
  CHECKF(nlib >= 14, "only %d workloads in te/lib", nlib);
  files[nfiles++] = strdup("bench/workloads/conv2d_3x3.te");
  int total = 0, realized = 0;
  for (int w = 0; w < nfiles; w++) check_workload(files[w], w, per, &total, &realized);
  kg_test_free_workloads(files, nfiles);
  printf("%d/%d random points realized (%.0f%%), %.1f s\n", realized, total, total ? 100.0 * realized / total : 0.0,
         kg_now_s() - t0);

  test_matmul_structure();
  test_softmax_structure();
  test_raster();
  test_kmajor_pipeline();
  test_onepass("te/lib/softmax.te", "Y");
  test_onepass("te/lib/layernorm.te", "Y");
  test_onepass("te/lib/rmsnorm.te", "Y");
  test_bench_sizes(KG_TEST_MATMUL, "M=4096 N=4096 K=4096", per, have_nvrtc ? 2 : 0);
  test_bench_sizes(KG_TEST_SOFTMAX, "N=8192 D=8192", per, have_nvrtc ? 2 : 0);
  printf("%.1f s in all\n", kg_now_s() - t0);
  TEST_END();
}
