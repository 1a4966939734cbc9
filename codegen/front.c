#include "front.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kg_build_stage_name(kg_build_stage s) {
  static const char *const names[KG_BUILD_STAGE_COUNT] = {"schedule", "lower", "print", "limits", "compile"};
  return s >= 0 && s < KG_BUILD_STAGE_COUNT ? names[s] : "?";
}

void kg_build_fail(kg_build_error *e, kg_build_stage stage, const char *fmt, ...) {
  e->failed = 1;
  e->stage = stage;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
}

/* Step by step rather than kg_schedule_apply_trace, so that the failing step is known by index (a schedule
 * file's errors are reported at its line); the message is kg_schedule_apply_trace's. */
static int apply_trace(kg_schedule *s, const kg_trace *t, kg_build_error *e) {
  char msg[2048];
  for (int i = 0; i < t->nsteps; i++) {
    const kg_step *step = &t->steps[i];
    if (kg_schedule_apply(s, step, msg, sizeof msg) == 0) continue;
    if (step->line > 0)
      kg_build_fail(e, KG_BUILD_SCHEDULE, "line %d: %s", step->line, msg);
    else
      kg_build_fail(e, KG_BUILD_SCHEDULE, "step %d: %s", i + 1, msg);
    e->step = i;
    const char *at = strstr(e->msg, ": ");
    e->step_msg = at ? (int)(at + 2 - e->msg) : 0;
    return -1;
  }
  return 0;
}

kg_schedule *kg_front_default_schedule(const kg_program *p, kg_target_kind target) {
  kg_schedule *s = kg_schedule_new(p);
  if (target == KG_TARGET_CUDA) kg_schedule_gpu_default(s, KG_FRONT_GPU_THREADS);
  return s;
}

int kg_front_build(const kg_program *p, const kg_front_opts *o, kg_front *f) {
  memset(f, 0, sizeof *f);
  kg_arena_init(&f->arena);
  f->error.step = -1;
  if (o->sched) {
    f->sched = o->sched;
  } else if (o->trace) {
    f->sched = f->owned = kg_schedule_new(p);
    if (apply_trace(f->owned, o->trace, &f->error) != 0) return -1;
  } else {
    f->sched = f->owned = kg_front_default_schedule(p, o->target);
  }
  if (o->stop == KG_BUILD_SCHEDULE) return 0;
  char err[sizeof f->error.msg];
  f->ir = kg_lower(f->sched, o->target, &f->arena, err, sizeof err);
  if (!f->ir) {
    kg_build_fail(&f->error, KG_BUILD_LOWER, "%s", err);
    return -1;
  }
  if (o->stop == KG_BUILD_LOWER) return 0;
  if (o->target == KG_TARGET_C) {
    const char *name = o->name ? o->name : "kgen_entry";
    int rc = o->c_function ? kg_codegen_c_function(f->ir, name, &f->c_source, err, sizeof err)
                           : kg_codegen_c(f->ir, name, &f->c_source, err, sizeof err);
    if (rc != 0) {
      kg_build_fail(&f->error, KG_BUILD_PRINT, "%s", err);
      return -1;
    }
  } else {
    int rc = kg_codegen_cuda(f->ir, o->name ? o->name : "kgen", &f->cuda, err, sizeof err);
    if (rc != 0) {
      kg_build_fail(&f->error, KG_BUILD_PRINT, "%s", err);
      f->error.over_limit = rc == -2;
      return -1;
    }
    f->have_cuda = 1;
  }
  return 0;
}

void kg_front_free(kg_front *f) {
  if (f->have_cuda) kg_cuda_program_free(&f->cuda);
  free(f->c_source);
  kg_arena_free(&f->arena);
  if (f->owned) kg_schedule_free(f->owned);
  memset(f, 0, sizeof *f);
  f->error.step = -1;
}
