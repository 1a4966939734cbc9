/* The front half of building a candidate, written once: schedule -> lower -> print.
 *
 *   trace (or the target's default schedule, or a schedule the caller already has)
 *     --kg_schedule_apply per step--> schedule --kg_lower--> loop-nest IR
 *     --kg_codegen_c / kg_codegen_c_function / kg_codegen_cuda--> C source or kg_cuda_program
 *
 * It needs only schedule/, lower/ and codegen/, so every layer from codegen up uses it: the cost model's features
 * and the GPU launch rules stop after lowering, `kgen lower` and export after printing, and
 * runtime/pipeline.h's kg_candidate_build goes on from here to compile and load.
 *
 * The default schedule (no trace, no schedule given) is the program as written on C, and on CUDA the naive GPU
 * mapping kg_schedule_gpu_default with KG_FRONT_GPU_THREADS threads (never one thread for a whole kernel). */
#ifndef KG_FRONT_H
#define KG_FRONT_H
#include "codegen.h"

#define KG_FRONT_GPU_THREADS 256

/* How far a build goes; each stage includes the ones before. KG_BUILD_COMPILE is kg_candidate_build's only. */
typedef enum kg_build_stage {
  KG_BUILD_SCHEDULE, /* the trace applied */
  KG_BUILD_LOWER,    /* the loop-nest IR */
  KG_BUILD_PRINT,    /* C source, or the CUDA program with its launch table */
  KG_BUILD_LIMITS,   /* CUDA: the launch checked against the GPU's limits (failure only: see kg_candidate_build) */
  KG_BUILD_COMPILE,  /* compiled and loaded: C .so, cubin, emulator module */
  KG_BUILD_STAGE_COUNT
} kg_build_stage;
/* "schedule", "lower", "print", "limits", "compile". */
const char *kg_build_stage_name(kg_build_stage s);

/* Why a build stopped short. msg is the failing step's own message, without a prefix naming the stage (callers
 * word it as they always have): the schedule's "line N: <primitive>: ..." (or "step N: ..." for a trace with no
 * line numbers), kg_lower's "lower: ...", the printer's reason, a limit's, the compiler's log after
 * "C compiler failed:", "NVRTC failed:" or "emulator build failed:". */
typedef struct kg_build_error {
  int failed;
  kg_build_stage stage;
  int step;          /* schedule: index of the illegal trace step; else -1 */
  int step_msg;      /* schedule: offset in msg of the primitive's own message (past "line N: ") */
  int over_limit;    /* the candidate exceeds a hard limit of the GPU (a resource limit, not a code error) */
  int env_fault;     /* compile: the environment's fault (no compiler, no build folder), not the candidate's */
  const char *log;   /* compile: the compiler's log (owned by the build; may be NULL) */
  char msg[4096];
} kg_build_error;

typedef struct kg_front_opts {
  kg_target_kind target;
  kg_build_stage stop;        /* KG_BUILD_SCHEDULE, _LOWER or _PRINT (later stages: as _PRINT) */
  const kg_trace *trace;      /* applied step by step to a fresh schedule; NULL: the default schedule */
  const kg_schedule *sched;   /* instead of a trace: a schedule the caller owns, lowered as it is */
  const char *name;           /* C: the function's name (NULL: "kgen_entry"); CUDA: the kernels' prefix
                               * (NULL: "kgen") */
  int c_function;             /* C: the bare function of kg_codegen_c_function (for headers) instead of the
                               * self-contained unit with its args wrapper of kg_codegen_c */
} kg_front_opts;

typedef struct kg_front {
  const kg_schedule *sched;   /* the schedule: the caller's, or owned (below) */
  kg_schedule *owned;
  kg_arena arena;             /* holds ir */
  kg_lowered *ir;
  char *c_source;             /* C: heap */
  kg_cuda_program cuda;       /* CUDA: valid when have_cuda */
  int have_cuda;
  kg_build_error error;
} kg_front;

/* A new schedule of p: the target's default (above). */
kg_schedule *kg_front_default_schedule(const kg_program *p, kg_target_kind target);

/* Builds p's candidate up to o->stop into f (always initialized: kg_front_free it, also after a failure).
 * 0, or -1 with f->error filled. Requires: p outlives f; o->sched, when given, belongs to p and outlives f. */
int kg_front_build(const kg_program *p, const kg_front_opts *o, kg_front *f);
void kg_front_free(kg_front *f);
/* Fills e as failed at stage with printf-style msg. */
void kg_build_fail(kg_build_error *e, kg_build_stage stage, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#endif
