/* The analytical estimate (estimate.h). */
#include "estimate.h"
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../codegen/gpu_arch.h"

int kg_gpu_device_for_arch(const char *arch, kg_gpu_device *d) {
  /* Sustained figures of one common device per arch: DRAM as a large copy runs (about 88% of the datasheet; sm_90's
   * is the copy rate measured on an H200, bench/results/gpu-first-run-2026-12-04.md), the boost clock, FP32 lanes per
   * SM (64 on sm_70, sm_75 and sm_80; 128 from sm_86). L2 to L1: 32 bytes per SM per cycle on sm_70 and sm_75, 48
   * from sm_80 (A100's 5120 bytes per cycle over 108 SMs). Tensor cores, dense f16/bf16 with f32 accumulation, in
   * mma.m16n8k16 steps (2048 FMAs) per SM per cycle: A100 1024 FMAs a cycle, GA10x/AD10x 512, H100/H200 2048, B200
   * 4096; m16n8k16 needs sm_80, so the older archs run it in software. */
  static const struct {
    int sm;
    kg_gpu_device d;
  } table[] = {
      {70, {"Tesla V100", 80, 1.53e9, 2, 790e9, 32, 500, 0}},
      {72, {"Jetson AGX Xavier", 8, 1.38e9, 2, 120e9, 32, 500, 0}},
      {75, {"Tesla T4", 40, 1.59e9, 2, 280e9, 32, 500, 0}},
      {80, {"A100-SXM4-40GB", 108, 1.41e9, 2, 1400e9, 48, 550, 0.5}},
      {86, {"RTX A6000", 84, 1.80e9, 4, 690e9, 48, 550, 0.25}},
      {87, {"Jetson AGX Orin", 16, 1.30e9, 4, 180e9, 48, 550, 0.25}},
      {89, {"L40S", 142, 2.52e9, 4, 780e9, 48, 550, 0.25}},
      {90, {"NVIDIA H200", 132, 1.98e9, 4, 4170e9, 48, 650, 1}},
      {100, {"B200", 148, 1.965e9, 4, 7000e9, 48, 700, 2}},
      {120, {"RTX 5090", 170, 2.41e9, 4, 1600e9, 48, 600, 0.25}},
  };
  int num;
  char suffix;
  if (kg_gpu_arch_parse(arch, &num, &suffix) != 0) return -1;
  for (size_t i = 0; i < sizeof table / sizeof *table; i++)
    if (table[i].sm == num) {
      *d = table[i].d;
      return 0;
    }
  return -1;
}

static double min1(double x) { return x < 1 ? x : 1; }

/* One kernel: see estimate.h for the model. */
static int estimate_kernel(const kg_gpu_device *D, const kg_kernel_quality *q, kg_kernel_estimate *e, char *why,
                           size_t whylen) {
  const kg_kernel_work *w = &e->work;
  if (q->blocks_per_sm <= 0) {
    snprintf(why, whylen, "kernel %s: a block of %d threads, %d registers each and %lld B of shared memory cannot be "
             "resident on an SM", q->name, q->threads, q->registers, (long long)q->shared_bytes);
    return -1;
  }
  double B = (double)(w->blocks > 0 ? w->blocks : 1), T = (double)(w->threads > 0 ? w->threads : 1);
  double lanes = T / ceil(T / 32), warps_b = ceil(T / 32);
  double per_wave = (double)D->sms * q->blocks_per_sm, waves = ceil(B / per_wave);
  double active = B < D->sms ? B : D->sms;                     /* SMs that get a block */
  double resident = fmin(q->blocks_per_sm, ceil(B / D->sms));  /* blocks at once on a busy SM */
  e->waves_eff = B >= per_wave ? (B / per_wave) / waves : 1;
  double warps_sm = resident * warps_b, f = D->clock_hz;

  /* compute: issue (every instruction) and the f32 pipes, hidden by warps x independent chains */
  double fp_w = w->fp_insts / lanes, sfu_w = w->sfu_insts / lanes;
  double all_w = (w->fp_insts + w->sfu_insts + w->other_insts + w->gld_insts + w->gst_insts + w->sh_insts) / lanes;
  e->eff_compute = min1(warps_sm / 4 * (w->ilp > 0 ? w->ilp : 1) / 4);
  /* tensor cores; before sm_80 the step runs in software (warp shuffles and 64 FMAs a thread), on the f32 pipes */
  double mma_clk = D->mma_per_clk;
  if (mma_clk == 0 && w->mma_insts > 0) {
    fp_w += w->mma_insts * 64;
    all_w += w->mma_insts * 64 * 2;
  }
  double t_issue = fmax(all_w / (active * 4 * f), fp_w / (active * D->fp32_per_clk * f));
  if (mma_clk > 0) t_issue = fmax(t_issue, w->mma_insts / (active * mma_clk * f));
  e->t_issue = t_issue / e->eff_compute;
  e->t_sfu = sfu_w / (active * 0.5 * f);
  e->t_shared = w->sh_wavefronts / (active * f);

  /* memory: L2 sectors and DRAM bytes, hidden by the bytes in flight */
  double need = D->dram_bps / D->sms * D->mem_latency / f; /* bytes an SM keeps in flight to draw its share */
  double inflight = warps_sm * lanes * w->load_bytes * (w->mlp > 0 ? w->mlp : 1);
  e->eff_memory = min1(inflight / need);
  double dram_rate = fmin(D->dram_bps, active * D->l2_bytes_per_clk * f);
  double l2 = (w->gld_sectors + w->gst_sectors) * 32;
  e->t_l2 = l2 / (active * D->l2_bytes_per_clk * f) / e->eff_memory;
  e->t_dram = w->dram_bytes / dram_rate / e->eff_memory;
  /* L1: 128 bytes (4 sectors) per SM per cycle, hits included: a kernel that reads its operands from global memory
   * in every iteration (no shared staging) pays here even when L1 holds them */
  e->t_l1 = w->l1_sectors / (active * 4 * f);

  /* barrier-separated steps: a staged loop's step waits for its loads unless other blocks have work meanwhile */
  double t_lat = 0;
  if (w->barriers >= 2 && w->gld_insts > 0) {
    /* a pipelined loop has one barrier per step, and its loads were issued pipeline - 1 steps earlier: that many
     * steps of every resident block's issue cover them too */
    double steps = w->pipeline >= 2 ? w->barriers : w->barriers / 2;
    double step_cycles = all_w / B / steps / 4; /* one block's issue per step, at the SM's whole rate */
    double ahead = w->pipeline >= 2 ? (w->pipeline - 1) * resident : 0;
    double exposed = fmax(0, D->mem_latency / 2 - (resident - 1 + ahead) * step_cycles); /* tiles: mostly L2 hits */
    t_lat = waves * steps * exposed / f;
  }
  t_lat += waves * w->barriers * 20 / f;
  e->t_latency = t_lat;

  const char *names[] = {"issue", "sfu", "shared", "l1", "l2", "dram"};
  double t[] = {e->t_issue, e->t_sfu, e->t_shared, e->t_l1, e->t_l2, e->t_dram}, worst = 0;
  e->bound = names[0];
  for (int i = 0; i < 6; i++)
    if (t[i] > worst) worst = t[i], e->bound = names[i];
  if (t_lat > worst) e->bound = "latency";
  /* every wave of blocks lasts at least one block's life: launched, a trip to memory, its barriers, retired */
  double floor = waves * (D->mem_latency + 300 + 20 * w->barriers) / f;
  if (floor > worst / e->waves_eff && floor > t_lat) e->bound = "block latency";
  double s = fmax(worst / e->waves_eff, floor) + t_lat;
  if (q->spill_bytes > 0) s *= 1 + fmin(1.0, (double)q->spill_bytes / 256);
  e->s = s + KG_ESTIMATE_LAUNCH_S;
  return 0;
}

double kg_cuda_estimate(const kg_lowered *f, const kg_kernel_quality *q, int nkernels, const char *arch,
                        kg_kernel_estimate *k, char *why, size_t whylen) {
  kg_gpu_device D;
  if (kg_gpu_device_for_arch(arch, &D) != 0) {
    snprintf(why, whylen, "no device figures for arch '%s'", arch ? arch : "(null)");
    return -1;
  }
  double total = 0;
  for (int i = 0; i < nkernels; i++) {
    kg_kernel_estimate one, *e = k ? &k[i] : &one;
    memset(e, 0, sizeof *e);
    if (kg_lower_kernel_work(f, i, &e->work) != 0) {
      snprintf(why, whylen, "kernel %d: its work cannot be counted (no launch shape)", i);
      return -1;
    }
    if (estimate_kernel(&D, &q[i], e, why, whylen) != 0) return -1;
    total += e->s;
  }
  return total;
}

/* The most floats of per-thread (LOCAL) arrays live at once on one path through s. */
static int64_t local_floats(const kg_irstmt *s) {
  if (!s) return 0;
  int64_t m = 0, x;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++)
        if ((x = local_floats(s->seq.items[i])) > m) m = x;
      return m;
    case KG_IRS_FOR: return local_floats(s->loop.body);
    case KG_IRS_IF:
      m = local_floats(s->cond.then);
      x = local_floats(s->cond.otherwise);
      return x > m ? x : m;
    case KG_IRS_ALLOC:
      return (s->alloc.buf->scope == KG_SCOPE_LOCAL ? s->alloc.buf->size : 0) + local_floats(s->alloc.body);
    default: return 0;
  }
}

int kg_cuda_registers_guess(const kg_lowered *ir, int k, int64_t *spill_bytes) {
  int64_t f = ir && ir->body && ir->body->kind == KG_IRS_SEQ && k >= 0 && k < ir->body->seq.n
                  ? local_floats(ir->body->seq.items[k])
                  : 0;
  int64_t r = 40 + f + f / 4;
  *spill_bytes = r > 255 ? 4 * (r - 255) : 0;
  return r > 255 ? 255 : (int)r;
}

double kg_cuda_estimate_build(const kg_cuda_program *cp, const kg_cubin *cb, const kg_lowered *ir, const char *arch,
                              kg_kernel_quality *q, kg_kernel_estimate *k, char *why, size_t whylen) {
  int ok = cb ? kg_cuda_quality(cp, cb, arch, q, why, whylen) == 0 : 1;
  /* no compiler's report: each kernel at the registers its per-thread arrays suggest */
  for (int i = 0; !cb && ok && i < cp->nkernels; i++) {
    int64_t spill;
    int regs = kg_cuda_registers_guess(ir, i, &spill);
    kg_cuda_program one = *cp;
    one.kernels = &cp->kernels[i];
    one.nkernels = 1;
    ok = kg_cuda_quality_launch(&one, arch, regs, &q[i], why, whylen) == 0;
    q[i].spill_bytes = spill;
  }
  return ok ? kg_cuda_estimate(ir, q, cp->nkernels, arch, k, why, whylen) : -1;
}

int kg_cuda_estimate_busiest(const kg_kernel_estimate *k, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (k[i].s > k[b].s) b = i;
  return b;
}

static void fmt_s(double s, char *buf, size_t len) {
  if (s >= 1e-3) snprintf(buf, len, "%.3g ms", s * 1e3);
  else snprintf(buf, len, "%.3g us", s * 1e6);
}

void kg_cuda_estimate_line(const kg_kernel_estimate *k, int nkernels, double total_s, const char *arch, char *buf,
                           size_t len) {
  kg_gpu_device D;
  char t[32];
  fmt_s(total_s, t, sizeof t);
  int n = snprintf(buf, len, "estimate on %s (%s figures, a model, not a measurement): %s", arch,
                   kg_gpu_device_for_arch(arch, &D) == 0 ? D.name : "no", t);
  for (int i = 0; i < nkernels && n >= 0 && (size_t)n < len; i++) {
    char ks[32];
    fmt_s(k[i].s, ks, sizeof ks);
    n += snprintf(buf + n, len - (size_t)n, "; kernel %d %s, bound by %s (compute hidden %.0f%%, memory %.0f%%, waves "
                  "%.0f%%)", i, ks, k[i].bound, 100 * k[i].eff_compute, 100 * k[i].eff_memory, 100 * k[i].waves_eff);
  }
}
