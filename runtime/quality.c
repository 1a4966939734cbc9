/* The static quality report of a compiled CUDA program's kernels (quality.h). */
#include "quality.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/arena.h"
#include "../lower/work.h"

/* The body of entry `name` in ptx: from its ".entry name(" to the brace that closes it; NULL when absent. */
static const char *entry_body(const char *ptx, const char *name, const char **end) {
  size_t n = strlen(name);
  for (const char *s = ptx; (s = strstr(s, ".entry ")) != NULL; s += 7) {
    const char *nm = s + 7;
    if (strncmp(nm, name, n) != 0 || (nm[n] != '(' && nm[n] != ' ' && nm[n] != '\n')) continue;
    const char *b = strchr(nm, '{');
    if (!b) return NULL;
    int depth = 0;
    for (const char *e = b; *e; e++) {
      if (*e == '{') depth++;
      if (*e == '}' && --depth == 0) {
        *end = e;
        return b + 1;
      }
    }
    return NULL;
  }
  return NULL;
}

static int width_of(const char *op, const char *end) {
  const char *v4 = strstr(op, ".v4."), *v2 = strstr(op, ".v2.");
  if (v4 && v4 < end) return 128;
  if (v2 && v2 < end) return 64;
  return 32;
}

/* The loops of a PTX body, for the main loop's FMA share: a label and a later branch back to it enclose a loop. */
#define MAX_LABELS 256
typedef struct ptx_loops {
  const char *label[MAX_LABELS]; /* "$L__BB0_1" (up to its colon) */
  size_t len[MAX_LABELS];
  int at_inst[MAX_LABELS], at_fma[MAX_LABELS]; /* instructions and FMAs counted before the label */
  int n;
} ptx_loops;

/* A branch back to a label seen before closes a loop: the one with the most FMAs (the shorter on a tie, the
 * innermost) is the main loop. */
static void close_loop(ptx_loops *L, const char *target, size_t tlen, kg_kernel_quality *q) {
  for (int i = L->n - 1; i >= 0; i--) {
    if (L->len[i] != tlen || strncmp(L->label[i], target, tlen) != 0) continue;
    int insts = q->instructions - L->at_inst[i], fmas = q->fma - L->at_fma[i];
    if (fmas > q->loop_fma || (fmas == q->loop_fma && fmas > 0 && insts < q->loop_instructions)) {
      q->loop_fma = fmas;
      q->loop_instructions = insts;
    }
    return;
  }
}

/* Counts the instructions of one PTX body and reads its widest global accesses and shared-memory use. */
static void scan_ptx(const char *b, const char *end, kg_kernel_quality *q) {
  int st_shared = 0, bar = 0;
  ptx_loops L;
  L.n = 0;
  for (const char *l = b; l < end;) {
    const char *nl = memchr(l, '\n', (size_t)(end - l));
    if (!nl) nl = end;
    const char *t = l;
    while (t < nl && (*t == ' ' || *t == '\t')) t++;
    if (*t == '$' && L.n < MAX_LABELS) { /* a label: "$L__BB0_1:" */
      const char *c = memchr(t, ':', (size_t)(nl - t));
      if (c) {
        L.label[L.n] = t;
        L.len[L.n] = (size_t)(c - t);
        L.at_inst[L.n] = q->instructions;
        L.at_fma[L.n++] = q->fma;
      }
    }
    /* an instruction: not a directive (.reg, .shared, ...), label, brace or comment; a guard (@%p) may lead */
    if (t < nl && *t != '.' && *t != '{' && *t != '}' && *t != '/' && *t != '$' && memchr(t, ';', (size_t)(nl - t))) {
      if (*t == '@') {
        while (t < nl && *t != ' ' && *t != '\t') t++;
        while (t < nl && (*t == ' ' || *t == '\t')) t++;
      }
      q->instructions++;
      const char *sp = t;
      while (sp < nl && *sp != ' ' && *sp != '\t') sp++; /* the opcode: t..sp */
      if (!strncmp(t, "fma.", 4) && memmem(t, (size_t)(sp - t), ".f32", 4)) q->fma++;
      if (!strncmp(t, "ld.global", 9)) {
        int w = width_of(t, sp);
        if (w > q->load_bits) q->load_bits = w;
      }
      if (!strncmp(t, "st.global", 9)) {
        int w = width_of(t, sp);
        if (w > q->store_bits) q->store_bits = w;
      }
      if (!strncmp(t, "st.shared", 9)) st_shared = 1;
      if (!strncmp(t, "cp.async.", 9) && memmem(t, (size_t)(sp - t), ".shared.global", 14)) {
        /* cp.async.{ca,cg}.shared.global [dst], [src], BYTES: a global load straight into shared memory */
        st_shared = 1;
        const char *c = memchr(t, ';', (size_t)(nl - t));
        const char *d = c;
        while (d > t && d[-1] >= '0' && d[-1] <= '9') d--;
        while (d > t && (d[-1] == ' ' || d[-1] == ',')) d--;
        const char *num = d;
        while (num < c && (*num == ' ' || *num == ',')) num++;
        int w = 8 * atoi(num);
        if (w > q->load_bits && w <= 128) q->load_bits = w;
      }
      if (!strncmp(t, "bar.sync", 8) || !strncmp(t, "barrier.sync", 12)) bar = 1;
      if (!strncmp(t, "bra", 3)) { /* bra[.uni] $L__BB0_1; */
        const char *x = sp;
        while (x < nl && (*x == ' ' || *x == '\t')) x++;
        const char *y = x;
        while (y < nl && *y != ';' && *y != ' ') y++;
        if (x < y) close_loop(&L, x, (size_t)(y - x), q);
      }
    }
    l = nl < end ? nl + 1 : end;
  }
  q->shared_staged = st_shared && bar;
}

static void occupancy(kg_kernel_quality *q, const kg_gpu_sm *sm) {
  int warps = (q->threads + 31) / 32;
  int regs_warp = (q->registers > 0 ? q->registers : 1) * 32;
  regs_warp = (regs_warp + sm->reg_unit - 1) / sm->reg_unit * sm->reg_unit;
  int by_threads = sm->max_threads / (warps * 32);
  int by_regs = (sm->regs / regs_warp) / warps;
  int64_t per_block = q->shared_bytes + sm->shared_reserved;
  int by_shared = q->shared_bytes > 0 ? (int)(sm->shared / per_block) : sm->max_blocks;
  int b = sm->max_blocks;
  q->limited_by = "blocks";
  if (by_threads < b) b = by_threads, q->limited_by = "threads";
  if (by_regs < b) b = by_regs, q->limited_by = "registers";
  if (by_shared < b) b = by_shared, q->limited_by = "shared memory";
  q->blocks_per_sm = b > 0 ? b : 0;
  q->occupancy = (double)(q->blocks_per_sm * warps) / (sm->max_threads / 32);
}

/* What the launch shape says: name, threads, shared memory; the rest zero. */
static void launch_shape(kg_kernel_quality *x, const kg_cuda_kernel *kk, int registers) {
  memset(x, 0, sizeof *x);
  snprintf(x->name, sizeof x->name, "%s", kk->name);
  x->threads = (int)(kk->block[0] * kk->block[1] * kk->block[2]);
  x->registers = registers;
  x->shared_bytes = kk->static_shared + kk->dynamic_shared;
}

int kg_cuda_quality(const kg_cuda_program *p, const kg_cubin *c, const char *arch, kg_kernel_quality *q, char *why,
                    size_t whylen) {
  kg_gpu_sm sm;
  if (kg_gpu_sm_for_arch(arch, &sm) != 0) {
    snprintf(why, whylen, "no multiprocessor figures for arch '%s'", arch ? arch : "(null)");
    return -1;
  }
  if (!c->ptx || c->nres < p->nkernels) {
    snprintf(why, whylen, "the build has no PTX or no resource report");
    return -1;
  }
  for (int k = 0; k < p->nkernels; k++) {
    const kg_cuda_kernel *kk = &p->kernels[k];
    kg_kernel_quality *x = &q[k];
    launch_shape(x, kk, c->res[k].registers);
    x->spill_bytes = c->res[k].spill_stores + c->res[k].spill_loads;
    const char *end = NULL, *b = entry_body(c->ptx, kk->name, &end);
    if (!b) {
      snprintf(why, whylen, "kernel %s is not in the PTX", kk->name);
      return -1;
    }
    scan_ptx(b, end, x);
    occupancy(x, &sm);
  }
  return 0;
}

int kg_cuda_quality_launch(const kg_cuda_program *p, const char *arch, int registers, kg_kernel_quality *q, char *why,
                           size_t whylen) {
  kg_gpu_sm sm;
  if (kg_gpu_sm_for_arch(arch, &sm) != 0) {
    snprintf(why, whylen, "no multiprocessor figures for arch '%s'", arch ? arch : "(null)");
    return -1;
  }
  for (int k = 0; k < p->nkernels; k++) {
    launch_shape(&q[k], &p->kernels[k], registers);
    occupancy(&q[k], &sm);
  }
  return 0;
}

void kg_cuda_quality_ir(const kg_lowered *f, kg_kernel_quality *q, int nkernels) {
  /* both from the work count (lower/work.c), as the estimate sees them */
  for (int k = 0; k < nkernels; k++) {
    kg_kernel_work w;
    int ok = kg_lower_kernel_work(f, k, &w) == 0;
    q[k].banks = ok ? w.bank_degree : 0;
    snprintf(q[k].bank_where, sizeof q[k].bank_where, "%s", ok && w.bank_degree ? w.bank_where : "");
    q[k].banks_analysed = 1;
    q[k].pipeline_stages = ok && w.pipeline > 1 ? w.pipeline : 1;
  }
}

int kg_cuda_quality_well_formed(const kg_kernel_quality *q) {
  return q->threads >= 128 && q->threads % 32 == 0 && q->shared_staged && q->spill_bytes == 0 && q->load_bits == 128;
}

void kg_cuda_quality_line(const kg_kernel_quality *q, const char *arch, char *buf, size_t len) {
  char spill[48];
  if (q->spill_bytes) snprintf(spill, sizeof spill, "%lld B spilled", (long long)q->spill_bytes);
  else snprintf(spill, sizeof spill, "no spills");
  char banks[160] = "", pipe[48] = "";
  if (q->pipeline_stages > 1) snprintf(pipe, sizeof pipe, ", pipelined in %d stages", q->pipeline_stages);
  if (q->banks_analysed && q->banks == 1) snprintf(banks, sizeof banks, "; shared accesses conflict-free");
  else if (q->banks_analysed && q->banks > 1)
    snprintf(banks, sizeof banks, "; shared accesses up to %d-way bank conflicts (%s)", q->banks, q->bank_where);
  char loop[96] = "";
  if (q->loop_fma > 0 && q->loop_instructions > 0)
    snprintf(loop, sizeof loop, " (main loop: %.0f%% of %d)", 100.0 * q->loop_fma / q->loop_instructions,
             q->loop_instructions);
  snprintf(buf, len,
           "kernel %s (%s): %d threads, %d registers, %s, %lld B shared; %d blocks/SM (limited by %s), occupancy "
           "%.0f%%; global loads %d-bit, stores %d-bit; %s%s; FMA %.0f%% of %d PTX instructions%s%s",
           q->name, arch, q->threads, q->registers, spill, (long long)q->shared_bytes, q->blocks_per_sm, q->limited_by,
           100.0 * q->occupancy, q->load_bits, q->store_bits, q->shared_staged ? "shared staging" : "no shared staging",
           pipe, q->instructions ? 100.0 * q->fma / q->instructions : 0.0, q->instructions, loop, banks);
}
