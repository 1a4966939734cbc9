#include "pipeline.h"
#include "../base/xalloc.h"
#include "timing.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const entry_name = "kgen_entry";

void kg_build_bound_sizes(const kg_program *p, const kg_cuda_program *cp, int64_t *out) {
  for (int i = 0; i < cp->nsizes; i++) {
    out[i] = 0;
    for (int k = 0; k < p->nsizes; k++)
      if (!strcmp(p->sizes[k].name, cp->size_names[i])) out[i] = p->sizes[k].value;
  }
}

static int compile_failed(kg_build *b, kg_build_tool tool, const char *what, const char *log, int env_fault) {
  kg_build_fail(&b->front.error, KG_BUILD_COMPILE, "%s failed:\n%s", what, log && *log ? log : "(no output)");
  b->front.error.log = log;
  b->front.error.env_fault = env_fault;
  b->tool = tool;
  return -1;
}

static int build_c(const kg_build_opts *o, kg_build *b) {
  b->have_cpu = 1;
  if (kg_cpu_build(o->source ? o->source : b->front.c_source, o->name ? o->name : entry_name, &b->cpu) != 0)
    return compile_failed(b, KG_BUILD_TOOL_CC, "C compiler", b->cpu.log, b->cpu.env_fault);
  return 0;
}

static int build_cuda(const kg_program *p, const kg_build_opts *o, kg_build *b) {
  kg_cuda_program *cp = &b->front.cuda;
  kg_build_error *e = &b->front.error;
  char err[sizeof e->msg];
  if (o->at_bound_sizes && cp->nsizes > 0) {
    int64_t *sz = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)(cp->nsizes + 1));
    int64_t(*grid)[3] = kg_xrealloc(NULL, sizeof *grid * (size_t)(cp->nkernels + 1));
    kg_build_bound_sizes(p, cp, sz);
    int grc = kg_cuda_program_grid(cp, sz, grid, NULL, err, sizeof err);
    free(sz);
    free(grid);
    if (grc != 0) {
      kg_build_fail(e, KG_BUILD_LIMITS, "codegen cuda: at the bound sizes: %s", err);
      e->over_limit = 1;
      return -1;
    }
  }
  if (o->source) {
    free(cp->source);
    cp->source = kg_xrealloc(NULL, strlen(o->source) + 1);
    memcpy(cp->source, o->source, strlen(o->source) + 1);
  }
  if (!o->arch) {
    kg_build_fail(e, KG_BUILD_COMPILE, "no arch to compile CUDA for");
    return -1;
  }
  /* The emulator runs any block size: the arch's limits keep it honest about the GPU, and where NVRTC is there
   * the candidate is also compiled for the arch, so its resources are reported and checked as a GPU run would. */
  char why[256];
  const kg_cubin *cb = NULL;
  if (!o->emulate || kg_nvrtc_available(why, sizeof why) == 0) {
    b->have_cubin = 1;
    if (kg_nvrtc_compile(cp, o->arch, &b->cubin) != 0)
      return compile_failed(b, KG_BUILD_TOOL_NVRTC, "NVRTC", b->cubin.log, b->cubin.env_fault);
    cb = &b->cubin;
  }
  kg_gpu_limits arch_limits;
  const kg_gpu_limits *l = o->limits;
  if (!l) {
    if (kg_gpu_limits_for_arch(o->arch, &arch_limits) != 0) {
      kg_build_fail(e, KG_BUILD_LIMITS, "unknown arch %s", o->arch);
      return -1;
    }
    l = &arch_limits;
  }
  if (kg_gpu_check_limits(cp, cb, l, err, sizeof err) != 0) {
    kg_build_fail(e, KG_BUILD_LIMITS, "%s", err);
    e->over_limit = 1;
    return -1;
  }
  if (o->emulate) {
    b->have_emu = 1;
    if (kg_emu_build(cp, &b->emu) != 0)
      return compile_failed(b, KG_BUILD_TOOL_EMU, "emulator build", b->emu.log, b->emu.env_fault);
  }
  return 0;
}

int kg_candidate_build(const kg_program *p, const kg_build_opts *o, kg_build *b) {
  memset(b, 0, sizeof *b);
  kg_front_opts fo = {.target = o->target,
                      .stop = o->stop < KG_BUILD_PRINT ? o->stop : KG_BUILD_PRINT,
                      .trace = o->trace,
                      .sched = o->sched,
                      .name = o->name,
                      .c_function = o->c_function};
  if (kg_front_build(p, &fo, &b->front) != 0) return -1;
  if (o->stop < KG_BUILD_COMPILE) return 0;
  if (o->target == KG_TARGET_C) {
    if (o->c_function) {
      kg_build_fail(&b->front.error, KG_BUILD_COMPILE, "a bare C function (c_function) cannot be loaded");
      return -1;
    }
    return build_c(o, b);
  }
  return build_cuda(p, o, b);
}

void kg_build_free(kg_build *b) {
  if (b->have_cpu) kg_cpu_module_free(&b->cpu);
  if (b->have_emu) kg_emu_module_free(&b->emu);
  if (b->have_cubin) kg_cubin_free(&b->cubin);
  kg_front_free(&b->front);
  memset(b, 0, sizeof *b);
}

/* ---- the in-process C path ---- */

int kg_pipeline_build_opts(const kg_program *p, const kg_build_opts *o, kg_pipeline *pl) {
  memset(pl, 0, sizeof *pl);
  kg_build_opts c = *o;
  c.stop = KG_BUILD_COMPILE;
  c.target = KG_TARGET_C;
  c.c_function = 0;
  int rc = kg_candidate_build(p, &c, &pl->b);
  const kg_lowered *ir = pl->b.front.ir;
  if (ir) {
    pl->nsizes = ir->nsize_vars;
    pl->sizes = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)(pl->nsizes + 1));
    for (int i = 0; i < pl->nsizes; i++) pl->sizes[i] = p->sizes[ir->size_ids[i]].value;
  }
  return rc;
}

int kg_pipeline_build(const kg_schedule *s, kg_target_kind target, kg_pipeline *pl, char *err, size_t errlen) {
  kg_build_opts o = {.target = target, .sched = s};
  if (kg_pipeline_build_opts(s->prog, &o, pl) == 0) return 0;
  snprintf(err, errlen, "%s", pl->b.front.error.msg);
  return -1;
}

void kg_pipeline_free(kg_pipeline *pl) {
  kg_build_free(&pl->b);
  free(pl->sizes);
  memset(pl, 0, sizeof *pl);
}

/* A def may have any number of parameters: the argument array is sized from the data. */
static void call_kernel(kg_pipeline *pl, kg_data *d) {
  float **args = kg_xrealloc(NULL, sizeof(float *) * (size_t)(d->ninputs + d->noutputs));
  int n = 0;
  for (int i = 0; i < d->ninputs; i++) args[n++] = d->inputs[i];
  for (int i = 0; i < d->noutputs; i++) args[n++] = d->outputs[i];
  kg_cpu_call_sizes(&pl->b.cpu, args, n, pl->sizes, pl->nsizes);
  free(args);
}

kg_verify_result kg_pipeline_verify(kg_pipeline *pl, const kg_program *p, kg_data *d, double rtol) {
  kg_data_poison(d, p);
  call_kernel(pl, d);
  return kg_verify(p, d, rtol);
}

typedef struct timed {
  kg_pipeline *pl;
  kg_data *d;
} timed;
static int timed_run(void *ctx) {
  timed *t = ctx;
  call_kernel(t->pl, t->d);
  return 0;
}

kg_timing kg_pipeline_time(kg_pipeline *pl, kg_data *d, double min_total_s) {
  timed t = {pl, d};
  kg_timer_ops ops = {timed_run, NULL, &t};
  kg_repeats rp;
  kg_time_repeats(&ops, min_total_s, KG_TIME_MAX_RUNS, &rp);
  kg_timing r = {rp.st.median, rp.st.min, rp.st.max, rp.n};
  kg_repeats_free(&rp);
  return r;
}
