/* The analytical estimate (runtime/estimate.h) and the work it counts (lower/work.h):
 * - the counts of the shipped tiled SGEMM (examples/schedules/matmul_shared.sched) at 1024^3 against closed forms:
 *   its FLOPs, compulsory DRAM bytes, float4 tile loads (sectors), barriers, register tile;
 * - coalescing: a copy read along threadIdx.x moves 4 sectors per warp, read across it 32;
 * - shared wavefronts: a 32-way conflicting column read costs 32 times a row read, nothing more once the tile's
 *   rows are padded by a float (pad);
 * - the estimate: never below the roofline (FLOPs at peak, DRAM bytes at the copy rate); a memory-bound copy
 *   within 1.5x of it and a strided copy over twice as slow; a well-formed SGEMM ranked at least 10x ahead of the
 *   2-thread, 7x7-tile schedule that the emulator's clock once picked; the errors (an arch without figures, a block that cannot be resident);
 * - every arch kgen compiles for has device figures;
 * - tuning logs: an emulator record's estimate round-trips, ranks it, and a measured record is preferred over an
 *   estimated one at the same closeness. */
#include <math.h>
#include <stdint.h>
#include "kgen.h"
#include "runtime/estimate.h"
#include "codegen/front.h"
#include "codegen/gpu_arch.h"
#include "tlog/tlog.h"
#include "testlib.h"

typedef struct lowered {
  kg_program *p;
  kg_schedule *s;
  kg_arena a;
  kg_lowered *f;
} lowered;

static int lower_text(lowered *L, kg_program *p, const char *trace_text) {
  memset(L, 0, sizeof *L);
  L->p = p;
  if (!p) return -1;
  L->s = kg_schedule_new(p);
  kg_arena_init(&L->a);
  char err[512];
  if (kg_test_apply_text(L->s, trace_text, err, sizeof err) != 0) {
    CHECKF(0, "trace: %s", err);
    return -1;
  }
  L->f = kg_lower(L->s, KG_TARGET_CUDA, &L->a, err, sizeof err);
  CHECKF(L->f != NULL, "%s", err);
  return L->f ? 0 : -1;
}

static void lowered_free(lowered *L) {
  kg_arena_free(&L->a);
  if (L->s) kg_schedule_free(L->s);
  if (L->p) kg_program_free(L->p);
}

static kg_program *matmul(int64_t n) {
  kg_binding b[3] = {{"M", n}, {"N", n}, {"K", n}};
  return kg_test_load_lib("matmul", b, 3);
}

/* The estimate of L's program on arch with the occupancy of `regs` registers a thread (no NVRTC needed). */
static double estimate(const lowered *L, const char *arch, int regs, kg_kernel_estimate *k) {
  char err[512];
  kg_front f;
  kg_front_opts fo = {.target = KG_TARGET_CUDA, .stop = KG_BUILD_PRINT, .sched = L->s};
  if (kg_front_build(L->p, &fo, &f) != 0) {
    CHECKF(0, "print: %s", f.error.msg);
    kg_front_free(&f);
    return -1;
  }
  int n = f.cuda.nkernels;
  kg_kernel_quality q[8];
  CHECK(n <= 8);
  double s = -1;
  if (n <= 8 && kg_cuda_quality_launch(&f.cuda, arch, regs, q, err, sizeof err) == 0)
    s = kg_cuda_estimate(f.ir, q, n, arch, k, err, sizeof err);
  CHECKF(s > 0, "%s", err);
  kg_front_free(&f);
  return s;
}

static void test_sgemm_counts(void) {
  size_t len;
  char *text = kg_test_read_file("examples/schedules/matmul_shared.sched", &len);
  CHECK(text != NULL);
  if (!text) return;
  lowered L;
  const double n = 1024;
  if (lower_text(&L, matmul(1024), text) == 0) {
    kg_kernel_work w;
    CHECK(kg_lower_kernel_work(L.f, 0, &w) == 0);
    CHECKF(w.flops == 2 * n * n * n, "%g flops", w.flops);
    /* FMAs: one per multiply-add (the init stores are no arithmetic) */
    CHECKF(w.fp_insts == n * n * n, "%g f32 instructions", w.fp_insts);
    CHECKF(w.dram_bytes == 3 * 4 * n * n, "%g DRAM bytes", w.dram_bytes);
    CHECK(w.blocks == 16 * 16 && w.threads == 256);
    /* 64x64 tiles: each block reads a 64 x K panel of A and a K x 64 panel of B, as float4 loads by 256 threads,
     * every sector once: (n/64)^2 blocks x 2 x 64 n floats / 8 floats a sector */
    double sectors = (n / 64) * (n / 64) * 2 * 64 * n / 8;
    CHECKF(w.gld_sectors == sectors, "%g sectors, want %g", w.gld_sectors, sectors);
    CHECKF(w.gld_insts == 2 * 64 * n * (n / 64) * (n / 64) / 4, "%g load instructions", w.gld_insts);
    CHECK(w.load_bytes == 16);
    /* two stagings a k step, a barrier before and after each: 4 a step, K/16 steps */
    CHECKF(w.barriers == 4 * n / 16, "%g barriers a block", w.barriers);
    CHECKF(w.ilp == 16, "%d accumulation chains", w.ilp);
    /* the C stores: one per element, 4 per thread along j contiguous (float4, one sector a quarter warp) */
    CHECKF(w.gst_sectors > 0 && w.gst_sectors <= n * n / 8 * 2, "%g store sectors", w.gst_sectors);
    CHECK(w.sh_wavefronts > 0);
    kg_kernel_estimate k[1];
    double s = estimate(&L, "sm_90", 64, k);
    kg_gpu_device D;
    CHECK(kg_gpu_device_for_arch("sm_90", &D) == 0);
    double peak = D.sms * D.fp32_per_clk * 32 * 2 * D.clock_hz;
    CHECKF(s >= 2 * n * n * n / peak && s >= w.dram_bytes / D.dram_bps, "%g s under the roofline", s);
    char line[2048];
    kg_cuda_estimate_line(k, 1, s, "sm_90", line, sizeof line);
    CHECK_STR_CONTAINS(line, "estimate on sm_90 (NVIDIA H200 figures, a model, not a measurement): ");
  }
  lowered_free(&L);
  free(text);
}

/* A copy B = A of a 4096 x 4096 matrix, the warp's threads along `lane_axis`. */
static void copy_work(const char *lane_axis, kg_kernel_work *w, double *s) {
  static const char src[] = "def copy(A: f32[N, M]) -> (B: f32[N, M]) {\n  B[i, j] = A[i, j]\n}\n";
  char tr[512];
  snprintf(tr, sizeof tr, "split B %s 256\nbind B %s.i threadIdx.x\nbind B %s.o blockIdx.x\nbind B %s blockIdx.y\n",
           lane_axis, lane_axis, lane_axis, !strcmp(lane_axis, "j") ? "i" : "j");
  lowered L;
  memset(w, 0, sizeof *w);
  *s = -1;
  if (lower_text(&L, kg_test_load_sizes(src, "N=4096 M=4096"), tr) == 0) {
    CHECK(kg_lower_kernel_work(L.f, 0, w) == 0);
    *s = estimate(&L, "sm_90", 16, NULL);
  }
  lowered_free(&L);
}

static void test_coalescing(void) {
  kg_kernel_work row, col;
  double srow, scol;
  copy_work("j", &row, &srow);
  copy_work("i", &col, &scol);
  double warps = 4096.0 * 4096 / 32;
  CHECKF(row.gld_sectors == 4 * warps && row.gst_sectors == 4 * warps, "%g %g", row.gld_sectors, row.gst_sectors);
  CHECKF(col.gld_sectors == 32 * warps && col.gst_sectors == 32 * warps, "%g %g", col.gld_sectors, col.gst_sectors);
  CHECK(row.dram_bytes == 2 * 4 * 4096.0 * 4096 && col.dram_bytes == row.dram_bytes);
  /* the coalesced copy runs near the copy rate; the strided one is estimated several times slower */
  kg_gpu_device D;
  CHECK(kg_gpu_device_for_arch("sm_90", &D) == 0);
  double bound = row.dram_bytes / D.dram_bps;
  CHECKF(srow >= bound && srow < 1.5 * bound + KG_ESTIMATE_LAUNCH_S, "%g s, copy rate %g s", srow, bound);
  CHECKF(scol > 2 * srow, "strided %g s, coalesced %g s", scol, srow);
}

/* A 32 x 32 transpose through shared memory: the column read is 32-way conflicting, the row read conflict-free. */
static void test_wavefronts(void) {
  static const char src[] = "def t(A: f32[N, M]) -> (B: f32[M, N]) {\n  B[i, j] = A[j, i]\n}\n";
  static const char tile[] = "tile B i j 32 32\nbind B i.o blockIdx.y\nbind B j.o blockIdx.x\n"
                             "cache_read A shared B\n";
  char tr[512];
  double wf[3];
  for (int v = 0; v < 3; v++) {
    /* 2: the conflicting read again, the tile's rows padded by a float: each column word in its own bank */
    snprintf(tr, sizeof tr, "%sbind B i.i threadIdx.%s\nbind B j.i threadIdx.%s\ncompute_at A.shared B %s\n"
             "bind A.shared ax0 threadIdx.y\nbind A.shared ax1 threadIdx.x\n%s",
             tile, v == 1 ? "x" : "y", v == 1 ? "y" : "x", "j.o", v == 2 ? "pad A.shared 1\n" : "");
    lowered L;
    kg_kernel_work w;
    wf[v] = -1;
    if (lower_text(&L, kg_test_load_sizes(src, "N=64 M=64"), tr) == 0 && kg_lower_kernel_work(L.f, 0, &w) == 0)
      wf[v] = w.sh_wavefronts;
    lowered_free(&L);
  }
  /* per 64 x 64 output: 128 warps store rows of the tile (1 wavefront each) and read it: 32-way or 1 */
  CHECKF(wf[0] == 128 * (1 + 32) && wf[1] == 128 * (1 + 1) && wf[2] == 128 * (1 + 1), "%g, %g and %g wavefronts",
         wf[0], wf[1], wf[2]);
}

static void test_ranking(void) {
  size_t len;
  char *good = kg_test_read_file("bench/cuda-schedules/matmul_128x64_8x4_k16.sched", &len);
  CHECK(good != NULL);
  if (!good) return;
  /* the emulator clock's pick: a 2-thread block computing a 7 x 7 tile each, without shared memory */
  static const char tiny[] = "cache_write C local\nsplit C i 14\nsplit C i.i 7\nsplit C j 7\nbind C i.o blockIdx.y\n"
                             "bind C j.o blockIdx.x\nbind C i.i.o threadIdx.x\nreorder C i.o j.o i.i.o i.i.i j.i\n"
                             "compute_at C.local C i.i.o\n";
  lowered G, T;
  double sg = -1, st = -1;
  if (lower_text(&G, matmul(1024), good) == 0) sg = estimate(&G, "sm_86", 96, NULL);
  if (lower_text(&T, matmul(1024), tiny) == 0) st = estimate(&T, "sm_86", 64, NULL);
  CHECKF(sg > 0 && st > 10 * sg, "well-formed %g s, tiny blocks %g s", sg, st);
  /* errors: an arch without figures; a block that cannot be resident */
  kg_kernel_quality q;
  memset(&q, 0, sizeof q);
  q.threads = 256;
  q.blocks_per_sm = 1;
  char why[256];
  if (G.f) {
    CHECK(kg_cuda_estimate(G.f, &q, 1, "sm_61", NULL, why, sizeof why) < 0);
    CHECK_STR_CONTAINS(why, "no device figures for arch 'sm_61'");
    q.blocks_per_sm = 0;
    CHECK(kg_cuda_estimate(G.f, &q, 1, "sm_90", NULL, why, sizeof why) < 0);
    CHECK_STR_CONTAINS(why, "cannot be resident");
  }
  lowered_free(&G);
  lowered_free(&T);
  free(good);
}

static void test_log(void) {
  kg_program *p = matmul(8);
  if (!p) return;
  kg_tlog_workload wl;
  kg_tlog_workload_of(p, &wl);
  double times_fast[1] = {1e-3}, times_slow[1] = {9e-3};
  kg_tlog_record r[3];
  for (int i = 0; i < 3; i++) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].v = KG_TLOG_VERSION;
    r[i].workload = wl;
    r[i].target = (kg_tlog_target){"cuda", "sm_90", "CUDA emulator", "", "emulator"};
    kg_trace_init(&r[i].trace);
    r[i].status = "ok";
    r[i].msg = "";
    r[i].ntimes = 1;
    r[i].kgen = "test";
    r[i].flops = 1024;
    r[i].bytes = 768;
  }
  /* emulator records: 0 fast on the emulator's clock but estimated slow, 1 the reverse; 2 measured on a GPU */
  r[0].times = times_fast, r[0].estimate_s = 5e-6;
  r[1].times = times_slow, r[1].estimate_s = 2e-6;
  /* another schedule than record 0's (records of one schedule rank by their median together) */
  char perr[128];
  CHECK(kg_trace_parse(&r[1].trace, "t", "split C i 4\n", 12, perr, sizeof perr) == 0);
  r[2].times = times_slow;
  r[2].target = (kg_tlog_target){"cuda", "sm_90", "NVIDIA H200", "", "gpu"};
  kg_tlog log;
  kg_tlog_init(&log);
  for (int i = 0; i < 3; i++) {
    size_t n;
    char *buf = kg_tlog_encode(&r[i], &n);
    kg_tlog_decode(&log, buf, n);
    free(buf);
  }
  CHECK(log.n == 3);
  if (log.n == 3) {
    CHECK(log.recs[0].estimate_s == 5e-6 && log.recs[2].estimate_s == 0);
    CHECK(kg_tlog_record_estimated(&log.recs[0]) && !kg_tlog_record_estimated(&log.recs[2]));
    CHECK(kg_tlog_record_rank_s(&log.recs[1]) == 2e-6 && kg_tlog_record_rank_s(&log.recs[2]) == 9e-3);
    /* among emulator records the estimate ranks */
    kg_tlog_want w = {.wl = &wl, .kind = "cuda", .device = "CUDA emulator"};
    kg_tlog_pick pk;
    kg_tlog_pick_best(&log, &w, &pk);
    CHECKF(pk.index == 1 && pk.median_s == 2e-6, "picked record %d (%g s)", pk.index, pk.median_s);
    /* a measurement beats an estimate at the same closeness, however fast the estimate */
    w.device = NULL;
    kg_tlog_pick_best(&log, &w, &pk);
    CHECKF(pk.index == 2, "picked record %d", pk.index);
  }
  kg_tlog_free(&log);
  for (int i = 0; i < 3; i++) kg_trace_free(&r[i].trace);
  kg_program_free(p);
}

/* Every arch kgen compiles for (its launch limits and multiprocessor figures) has device figures to estimate on. */
static void test_archs(void) {
  int n = 0;
  for (int sm = 50; sm <= 130; sm++) {
    char arch[16];
    snprintf(arch, sizeof arch, "sm_%d", sm);
    kg_gpu_limits l;
    kg_gpu_sm m;
    kg_gpu_device d;
    if (kg_gpu_limits_for_arch(arch, &l) != 0 && kg_gpu_sm_for_arch(arch, &m) != 0) continue;
    n++;
    CHECKF(kg_gpu_device_for_arch(arch, &d) == 0 && d.sms > 0 && d.clock_hz > 0 && d.dram_bps > 0, "%s: no device "
           "figures", arch);
  }
  CHECKF(n >= 9, "%d archs", n);
}

/* The pipelined SGEMM (examples/schedules/matmul_pipelined.sched): its work counts one barrier per k step and the
 * ring's depth; its L1 sectors are its global loads' (a staged kernel asks little of L1); the register guess for its
 * 32-float tile is 80 (ptxas: 85), no spill; an 8 x 8 tile's guess is 120, and a 16 x 16 one's is capped at 255
 * with the rest spilled. */
static void test_pipelined(void) {
  size_t len;
  char *text = kg_test_read_file("examples/schedules/matmul_pipelined.sched", &len);
  CHECK(text != NULL);
  if (!text) return;
  lowered L;
  if (lower_text(&L, matmul(1024), text) == 0) {
    kg_kernel_work w;
    CHECK(kg_lower_kernel_work(L.f, 0, &w) == 0);
    CHECKF(w.pipeline == 2, "%d stages", w.pipeline);
    /* K/16 = 64 steps: one barrier each, one before the prologue */
    CHECKF(w.barriers == 64 + 1, "%g barriers a block", w.barriers);
    CHECKF(w.l1_sectors >= w.gld_sectors && w.l1_sectors <= 2 * w.gld_sectors, "%g L1 sectors, %g L2", w.l1_sectors,
           w.gld_sectors);
    CHECKF(w.bank_degree == 2 && !strcmp(w.bank_where, "A_shared load"), "%d-way (%s)", w.bank_degree, w.bank_where);
    int64_t spill;
    CHECK(kg_cuda_registers_guess(L.f, 0, &spill) == 80 && spill == 0);
    kg_kernel_estimate k[1];
    double piped = estimate(&L, "sm_90", 85, k);
    lowered_free(&L);
    /* the same without the ring: more exposed latency, more barriers */
    char *flat = strdup(text);
    char *at = strstr(flat, "pipeline C.local k.o 2");
    CHECK(at != NULL);
    if (at) *at = '#';
    if (lower_text(&L, matmul(1024), flat) == 0) {
      double plain = estimate(&L, "sm_90", 85, k);
      CHECKF(plain > piped, "unpipelined %g s, pipelined %g s", plain, piped);
      lowered_free(&L);
    }
    free(flat);
  }
  static const struct {
    int tile;
    int regs;
    int64_t spill;
  } guess[] = {{8, 120, 0}, {16, 255, 4 * (40 + 256 + 64 - 255)}};
  for (int g = 0; g < 2; g++) {
    char tr[512];
    snprintf(tr, sizeof tr,
             "cache_write C local\ntile C i j %d %d\nbind C i.o blockIdx.y\nbind C j.o blockIdx.x\n"
             "compute_at C.local C j.o\n",
             guess[g].tile, guess[g].tile);
    if (lower_text(&L, matmul(256), tr) == 0) {
      int64_t spill;
      int r = kg_cuda_registers_guess(L.f, 0, &spill);
      CHECKF(r == guess[g].regs && spill == guess[g].spill, "%dx%d tile: %d registers, %lld B spilled", guess[g].tile,
             guess[g].tile, r, (long long)spill);
      lowered_free(&L);
    }
  }
  free(text);
}

int main(void) {
  test_archs();
  test_sgemm_counts();
  test_pipelined();
  test_coalescing();
  test_wavefronts();
  test_ranking();
  test_log();
  TEST_END();
}
