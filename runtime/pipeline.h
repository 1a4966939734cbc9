/* A candidate built for a target, in one call: kg_candidate_build.
 *
 *   trace (NULL: the target's default schedule) --codegen/front.h--> schedule -> loop-nest IR -> printed source
 *   -> compiled and loaded:  C: kg_cpu_build (a loaded .so with the kgen_entry_args wrapper)
 *                            CUDA on a GPU: NVRTC for the arch, checked against the GPU's limits (the cubin is
 *                              loaded by whoever runs it: the measurement worker, never a process that forks)
 *                            CUDA on the emulator: the arch's limits, NVRTC too when it can be loaded (so that
 *                              registers, spills and shared memory are checked as on the GPU), the host build
 * Every caller that turns a trace into code goes through here or, when it needs no compiler (the cost model,
 * the GPU launch rules), through kg_front_build below it.
 *
 * Also the in-process C path of `kgen run` (kg_pipeline_*): build, verify against the reference, time with the
 * one timing loop (runtime/timing.h). */
#ifndef KG_PIPELINE_H
#define KG_PIPELINE_H
#include "../codegen/front.h"
#include "cpu.h"
#include "emu.h"
#include "nvrtc.h"
#include "verify.h"

typedef struct kg_build_opts {
  kg_target_kind target;
  kg_build_stage stop;          /* KG_BUILD_SCHEDULE, _LOWER, _PRINT or _COMPILE */
  const kg_trace *trace;        /* NULL: the default schedule (see codegen/front.h) */
  const kg_schedule *sched;     /* instead of a trace: the caller's schedule, lowered as it is */
  const char *name;             /* C function / CUDA kernel prefix: see kg_front_opts (compiling C needs the
                                 * self-contained unit: c_function 0) */
  int c_function;
  const char *source;           /* replaces the printed source before compiling (C: the whole unit, defining
                                 * kgen_entry_args; CUDA: the kernels' source, the launch table kept) */
  /* CUDA */
  int emulate;                  /* build for the emulator instead of the GPU */
  const char *arch;             /* NVRTC's target ("sm_90"); required to compile CUDA */
  const kg_gpu_limits *limits;  /* checked before anything runs; NULL: the arch's */
  int at_bound_sizes;           /* it will run at the program's bound sizes: a CUDA launch with dynamic sizes
                                 * must resolve there (else a resource limit) */
} kg_build_opts;

/* Which compiler a compile-stage failure came from. */
typedef enum kg_build_tool { KG_BUILD_TOOL_NONE, KG_BUILD_TOOL_CC, KG_BUILD_TOOL_NVRTC, KG_BUILD_TOOL_EMU } kg_build_tool;

typedef struct kg_build {
  kg_front front;               /* front.sched, front.ir, front.c_source / front.cuda; front.error: why it failed */
  kg_cpu_module cpu;            /* C: loaded (have_cpu: built, or tried: its log) */
  int have_cpu;
  kg_cubin cubin;               /* CUDA: cubin, PTX, NVRTC log, per-kernel resources */
  int have_cubin;
  kg_emu_module emu;            /* CUDA on the emulator: loaded */
  int have_emu;
  kg_build_tool tool;           /* of a compile failure */
} kg_build;

/* Builds p's candidate for o up to o->stop into b (always initialized: kg_build_free it, also after a failure).
 * 0, or -1 with b->front.error naming the stage and saying why (see kg_build_error). Requires: p outlives b;
 * o->sched (when given) belongs to p and outlives b. Thread-safe for distinct b. */
int kg_candidate_build(const kg_program *p, const kg_build_opts *o, kg_build *b);
void kg_build_free(kg_build *b);
/* The program's bound values of the dynamic sizes cp takes, in cp's order (what a measurement runs at). */
void kg_build_bound_sizes(const kg_program *p, const kg_cuda_program *cp, int64_t *out);

typedef struct kg_pipeline {
  kg_build b;       /* b.front.ir: the lowered IR, b.front.c_source: the C, b.cpu: the loaded module */
  int64_t *sizes;   /* the program's bound values of the code's dynamic sizes (ir->size_ids order), heap */
  int nsizes;
} kg_pipeline;

/* Lowers, prints and compiles schedule s for the C target. A program with dynamic sizes gets one kernel for their
 * whole range, which verify and time call at the program's bound values (s->prog->sizes[k].value). On failure
 * returns -1; err holds the reason (for a compiler failure, its log). */
int kg_pipeline_build(const kg_schedule *s, kg_target_kind target, kg_pipeline *pl, char *err, size_t errlen);
/* The same from build options (o->stop is taken as KG_BUILD_COMPILE; C only): -1 with pl->b.front.error. */
int kg_pipeline_build_opts(const kg_program *p, const kg_build_opts *o, kg_pipeline *pl);
void kg_pipeline_free(kg_pipeline *pl);
/* Poisons the outputs, runs once, compares with d->ref (kg_data_reference must have run). */
kg_verify_result kg_pipeline_verify(kg_pipeline *pl, const kg_program *p, kg_data *d, double rtol);

typedef struct kg_timing {
  double median_s, min_s, max_s;
  int runs;
} kg_timing;
/* The timing loop of runtime/timing.h: one warm-up run, then repeats until min_total_s of work and at least 3
 * runs; median and spread. */
kg_timing kg_pipeline_time(kg_pipeline *pl, kg_data *d, double min_total_s);
#endif
