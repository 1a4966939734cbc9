/* The hand-written CUDA schedules in examples/schedules (the trace text form users copy from): each applies to its
 * library workload, prints as CUDA with the constructs it is there to show (__shared__ and __syncthreads for the
 * tiled matmul, warp shuffles for the cross-thread reductions), runs on the CUDA emulator at the workload's
 * `# sizes:` and at a second size that is no multiple of the tiles, and matches the reference. At the benchmark
 * sizes (matmul 4096^3, softmax, layernorm and RMSNorm 8192 x 8192) each also applies, lowers, prints with the launch shape
 * the comments promise (float4 accesses included), and compiles with NVRTC for sm_90 within its limits.
 * Requires NVRTC and a C++ compiler. */
#include <stdint.h>
#include "kgen.h"
#include "runtime/emu.h"
#include "runtime/nvrtc.h"
#include "runtime/quality.h"
#include "testlib.h"
#include "testutil.h"

typedef struct example {
  const char *workload, *sched;
  const char *must[3];        /* substrings the printed CUDA must contain */
  const char *bench[4];       /* NAME=VALUE at the benchmark size */
  const char *bench_must;     /* a substring the printed CUDA must contain at the benchmark size */
  int64_t bench_grid0, bench_block0; /* the last kernel's grid.x and block.x at the benchmark size */
  int bench_kernels;                 /* kernels at the benchmark size */
} example;

static const example examples[] = {
    {"matmul", "matmul_shared", {"__shared__", "__syncthreads", NULL}, {"M=4096", "N=4096", "K=4096", NULL},
     "float4", 64, 16, 1},
    /* the same with 128 x 64 tiles and a ring of two (pipeline): cp.async copies, waited for before the barrier
     * (16 bytes each at the benchmark size; 4 at the small sizes, whose rows are no multiple of 4) */
    {"matmul", "matmul_pipelined", {"kg_cp_async", "kg_cp_async_wait(0);", "kg_cp_async_commit();"},
     {"M=4096", "N=4096", "K=4096", NULL}, "kg_cp_async16(A_shared", 64, 16, 1},
    {"softmax", "softmax_cross_thread", {"__shfl", NULL, NULL}, {"N=8192", "D=8192", NULL, NULL}, "float4", 8192,
     256, 2},
    {"layernorm", "layernorm_fused", {"__shfl", NULL, NULL}, {"N=8192", "D=8192", NULL, NULL}, "float4", 8192, 256,
     2},
    /* one kernel per workload, the row copied into shared memory once (X_shared) */
    {"softmax", "softmax_one_pass", {"__shfl", "X_shared", NULL}, {"N=8192", "D=8192", NULL, NULL}, "float4", 8192,
     256, 1},
    {"layernorm", "layernorm_one_pass", {"__shfl", "X_shared", NULL}, {"N=8192", "D=8192", NULL, NULL}, "float4",
     8192, 256, 1},
    {"rmsnorm", "rmsnorm_one_pass", {"__shfl", "X_shared", NULL}, {"N=8192", "D=8192", NULL, NULL}, "float4", 8192,
     256, 1},
};

/* Loads te/lib/<name>.te at its `# sizes:` scaled by scale (kg_test_parse_sizes), with overrides NAME=VALUE. */
static kg_program *load(const char *name, int scale, const char *const *over, kg_arena *da) {
  char path[256];
  snprintf(path, sizeof path, "te/lib/%s.te", name);
  size_t len = 0;
  char *text = kg_test_read_file(path, &len);
  CHECKF(text != NULL, "cannot read %s", path);
  if (!text) return NULL;
  kg_binding b[KG_TEST_MAX_BIND];
  char names[KG_TEST_MAX_BIND][32];
  int nb = kg_test_parse_sizes(text, b, names, scale);
  CHECKF(nb > 0, "%s: no '# sizes:' line", path);
  for (int o = 0; over && over[o]; o++) {
    const char *eq = strchr(over[o], '=');
    for (int k = 0; k < nb && eq; k++)
      if (strlen(b[k].name) == (size_t)(eq - over[o]) && !strncmp(b[k].name, over[o], (size_t)(eq - over[o])))
        b[k].value = atoll(eq + 1);
  }
  kg_diag diag = {0};
  kg_program *p = kg_program_load(path, text, len, NULL, b, nb < 0 ? 0 : nb, &diag, da);
  CHECKF(p != NULL, "%s: %s", path, diag.msg ? diag.msg : "?");
  free(text);
  return p;
}

/* The schedule of example e applied to p; NULL (with a failed check) when it does not apply. */
static kg_schedule *apply(const example *e, const kg_program *p, const char *what) {
  char path[256];
  snprintf(path, sizeof path, "examples/schedules/%s.sched", e->sched);
  size_t len = 0;
  char *text = kg_test_read_file(path, &len);
  CHECKF(text != NULL, "cannot read %s", path);
  if (!text) return NULL;
  kg_trace t;
  kg_trace_init(&t);
  char err[1024];
  int parsed = kg_trace_parse(&t, path, text, len, err, sizeof err) == 0;
  CHECKF(parsed, "%s", err);
  kg_schedule *s = NULL;
  if (parsed) {
    s = kg_schedule_new(p);
    int ok = kg_schedule_apply_trace(s, &t, err, sizeof err) == 0;
    CHECKF(ok, "%s on %s (%s): %s", path, e->workload, what, err);
    if (!ok) {
      kg_schedule_free(s);
      s = NULL;
    }
  }
  kg_trace_free(&t);
  free(text);
  return s;
}

/* Lowers and prints s; 0 on success. */
static int print_cuda(const example *e, const kg_schedule *s, kg_cuda_program *cp, const char *what) {
  kg_arena la;
  kg_arena_init(&la);
  char err[2048];
  kg_lowered *lw = kg_lower(s, KG_TARGET_CUDA, &la, err, sizeof err);
  CHECKF(lw != NULL, "%s (%s): lower: %s", e->sched, what, err);
  if (lw) CHECKF(kg_ir_verify(lw, err, sizeof err) == 0, "%s (%s): %s", e->sched, what, err);
  int ok = 0;
  if (lw) {
    ok = kg_codegen_cuda(lw, "kgen", cp, err, sizeof err) == 0;
    CHECKF(ok, "%s (%s): codegen cuda: %s", e->sched, what, err);
  }
  kg_arena_free(&la);
  return ok ? 0 : -1;
}

/* Runs e on the emulator at the workload's test sizes scaled by scale and compares with the reference. */
static void run_emulated(const example *e, int scale) {
  char what[64];
  snprintf(what, sizeof what, "sizes x%d%s", scale, scale > 1 ? " + 1" : "");
  kg_arena da;
  kg_arena_init(&da);
  kg_program *p = load(e->workload, scale, NULL, &da);
  kg_schedule *s = p ? apply(e, p, what) : NULL;
  kg_cuda_program cp;
  memset(&cp, 0, sizeof cp);
  if (s && print_cuda(e, s, &cp, what) == 0) {
    for (int k = 0; k < 3 && e->must[k]; k++)
      CHECKF(strstr(cp.source, e->must[k]) != NULL, "%s (%s): the CUDA has no %s:\n%s", e->sched, what, e->must[k],
             cp.source);
    kg_emu_module m;
    memset(&m, 0, sizeof m);
    int built = kg_emu_build(&cp, &m) == 0;
    CHECKF(built, "%s (%s): emulator build:\n%s", e->sched, what, m.log ? m.log : "(no log)");
    if (built) {
      kg_data d;
      kg_data_init(&d, p, 11);
      kg_data_reference(&d, p, 11);
      kg_data_poison(&d, p);
      int nargs = p->ninputs + p->noutputs + cp.ntemps;
      float **args = calloc((size_t)nargs, sizeof *args);
      for (int k = 0; k < p->ninputs; k++) args[k] = d.inputs[k];
      for (int k = 0; k < p->noutputs; k++) args[p->ninputs + k] = d.outputs[k];
      for (int k = 0; k < cp.ntemps; k++) {
        size_t n = (size_t)(cp.temp_elems[k] > 0 ? cp.temp_elems[k] : 1);
        float *t = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) t[i] = __builtin_nanf("");
        args[p->ninputs + p->noutputs + k] = t;
      }
      char err[1024];
      int ran = kg_emu_run_program(&m, &cp, args, err, sizeof err) == 0;
      CHECKF(ran, "%s (%s): emulator run: %s", e->sched, what, err);
      if (ran) {
        kg_verify_result v = kg_verify(p, &d, 1e-4);
        CHECKF(v.ok, "%s (%s): %s (max_rel_err %g)\n%s", e->sched, what, v.msg, v.max_rel_err, cp.source);
        if (v.ok) printf("%-22s %-14s verified on the emulator (max_rel_err %.2g)\n", e->sched, what, v.max_rel_err);
      }
      for (int k = 0; k < cp.ntemps; k++) free(args[p->ninputs + p->noutputs + k]);
      free(args);
      kg_data_free(&d);
    }
    kg_emu_module_free(&m);
    kg_cuda_program_free(&cp);
  }
  if (s) kg_schedule_free(s);
  if (p) kg_program_free(p);
  kg_arena_free(&da);
}

/* At the benchmark size: applies, prints with the promised launch shape, compiles for sm_90 within its limits. */
static void check_bench(const example *e, int have_nvrtc) {
  kg_arena da;
  kg_arena_init(&da);
  kg_program *p = load(e->workload, 1, e->bench, &da);
  kg_schedule *s = p ? apply(e, p, "bench sizes") : NULL;
  kg_cuda_program cp;
  memset(&cp, 0, sizeof cp);
  if (s && print_cuda(e, s, &cp, "bench sizes") == 0) {
    /* the vectorized loops print as float4 once the rows are aligned */
    CHECKF(strstr(cp.source, e->bench_must) != NULL, "%s (bench sizes): the CUDA has no %s:\n%s", e->sched,
           e->bench_must, cp.source);
    CHECKF(cp.nkernels == e->bench_kernels, "%s (bench sizes): %d kernels, expected %d", e->sched, cp.nkernels,
           e->bench_kernels);
    if (cp.nkernels >= 1) {
      const kg_cuda_kernel *k = &cp.kernels[cp.nkernels - 1];
      CHECKF(k->grid[0] == e->bench_grid0 && k->block[0] == e->bench_block0,
             "%s (bench sizes): last kernel launches grid.x %lld, block.x %lld; expected %lld, %lld", e->sched,
             (long long)k->grid[0], (long long)k->block[0], (long long)e->bench_grid0, (long long)e->bench_block0);
    }
    if (have_nvrtc) {
      kg_cubin cb;
      memset(&cb, 0, sizeof cb);
      int rc = kg_nvrtc_compile(&cp, "sm_90", &cb);
      CHECKF(rc == 0, "%s (bench sizes): NVRTC sm_90:\n%s", e->sched, cb.log ? cb.log : "(no log)");
      if (rc == 0) {
        kg_gpu_limits lim;
        kg_gpu_limits_for_arch("sm_90", &lim);
        char why[512];
        CHECKF(kg_gpu_check_limits(&cp, &cb, &lim, why, sizeof why) == 0, "%s (bench sizes): %s", e->sched, why);
        for (int k = 0; k < cb.nres; k++) {
          CHECKF(cb.res[k].registers > 0, "%s: kernel %s: no register count", e->sched, cb.res[k].name);
          printf("%-22s bench sizes    %s: %d registers, %lld B static shared, %lld B spilled\n", e->sched,
                 cb.res[k].name, cb.res[k].registers, (long long)cb.res[k].static_shared,
                 (long long)cb.res[k].spill_stores);
        }
        /* the static quality report (runtime/quality.h): every example fetches with 128-bit loads, spills
         * nothing and keeps at least a quarter of sm_90's warps resident; the tiled matmul and the one-pass row
         * kernels stage in shared memory and store 128 bits at a time */
        kg_kernel_quality q[4];
        CHECKF(cp.nkernels <= 4 && kg_cuda_quality(&cp, &cb, "sm_90", q, why, sizeof why) == 0, "%s: %s", e->sched,
               why);
        /* shared-memory banks (lower/work.c): the one-pass rows read their copy conflict-free; the tiled matmuls'
         * A tile is read 2-way (two rows of threads, 64 or 128 words apart: one bank), as the paper review found;
         * the pipelined matmul's ring has two stages */
        kg_arena la;
        kg_arena_init(&la);
        kg_lowered *lw = kg_lower(s, KG_TARGET_CUDA, &la, why, sizeof why);
        if (lw && cp.nkernels <= 4) kg_cuda_quality_ir(lw, q, cp.nkernels);
        kg_arena_free(&la);
        if (strstr(e->sched, "one_pass")) CHECKF(q[0].banks == 1, "%s: %d-way (%s)", e->sched, q[0].banks, q[0].bank_where);
        if (strstr(e->sched, "matmul"))
          CHECKF(q[0].banks == 2 && !strcmp(q[0].bank_where, "A_shared load"), "%s: %d-way (%s)", e->sched, q[0].banks,
                 q[0].bank_where);
        CHECKF(q[0].pipeline_stages == (strstr(e->sched, "pipelined") ? 2 : 1), "%s: %d pipeline stages", e->sched,
               q[0].pipeline_stages);
        /* the tiled matmuls' main loop (the k loop's body) is mostly FMAs: more so than the kernel as a whole */
        if (strstr(e->sched, "matmul"))
          CHECKF(q[0].loop_fma > 0 && (double)q[0].loop_fma / q[0].loop_instructions >= 0.5 &&
                     (double)q[0].loop_fma / q[0].loop_instructions > (double)q[0].fma / q[0].instructions,
                 "%s: main loop %d FMAs of %d, kernel %d of %d", e->sched, q[0].loop_fma, q[0].loop_instructions,
                 q[0].fma, q[0].instructions);
        for (int k = 0; k < cp.nkernels && k < 4; k++) {
          char line[1024];
          kg_cuda_quality_line(&q[k], "sm_90", line, sizeof line);
          printf("%-22s %s\n", e->sched, line);
          CHECKF(q[k].spill_bytes == 0 && q[k].blocks_per_sm >= 1 && q[k].occupancy >= 0.25, "%s", line);
          if (k == cp.nkernels - 1) CHECKF(q[k].load_bits == 128, "%s", line);
          if (strstr(e->sched, "one_pass") || strstr(e->sched, "matmul"))
            CHECKF(q[k].shared_staged && q[k].store_bits == 128, "%s", line);
        }
      }
      kg_cubin_free(&cb);
    }
    kg_cuda_program_free(&cp);
  }
  if (s) kg_schedule_free(s);
  if (p) kg_program_free(p);
  kg_arena_free(&da);
}

int main(void) {
  char why[512];
  int have_nvrtc = kg_nvrtc_available(why, sizeof why) == 0;
  CHECKF(have_nvrtc, "NVRTC is needed: %s", why);
  for (size_t i = 0; i < sizeof examples / sizeof *examples; i++) {
    run_emulated(&examples[i], 1);
    run_emulated(&examples[i], 2);
    check_bench(&examples[i], have_nvrtc);
  }
  TEST_END();
}
