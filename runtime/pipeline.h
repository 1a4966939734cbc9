/* The whole path from a scheduled program to a verified, timed kernel on the CPU, in one place:
 *   schedule --kg_lower--> loop-nest IR --kg_codegen_c--> C source --kg_cpu_build--> loaded .so
 *   --kg_pipeline_verify--> outputs compared with the reference --kg_pipeline_time--> median time. */
#ifndef KG_PIPELINE_H
#define KG_PIPELINE_H
#include "../codegen/codegen.h"
#include "cpu.h"
#include "verify.h"

typedef struct kg_pipeline {
  kg_arena arena;   /* the lowered IR */
  kg_lowered *ir;
  char *source;     /* generated C (heap) */
  kg_cpu_module mod;
  int built;
  int64_t *sizes;   /* the program's bound values of the code's dynamic sizes (ir->size_ids order), heap */
  int nsizes;
} kg_pipeline;

/* Lowers, prints and compiles. A program with dynamic sizes gets one kernel for their whole range, which verify and
 * time call at the program's bound values (s->prog->sizes[k].value). On failure returns -1; err holds the reason
 * (for a compiler failure, its log). */
int kg_pipeline_build(const kg_schedule *s, kg_target_kind target, kg_pipeline *pl, char *err, size_t errlen);
void kg_pipeline_free(kg_pipeline *pl);
/* Poisons the outputs, runs once, compares with d->ref (kg_data_reference must have run). */
kg_verify_result kg_pipeline_verify(kg_pipeline *pl, const kg_program *p, kg_data *d, double rtol);

typedef struct kg_timing {
  double median_s, min_s, max_s;
  int runs;
} kg_timing;
/* One warm-up run, then repeats until min_total_s of work and at least 3 runs; median and spread. */
kg_timing kg_pipeline_time(kg_pipeline *pl, kg_data *d, double min_total_s);
#endif
