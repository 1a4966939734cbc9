/* Random legal schedules: the tests' way of covering the schedule space without a search. */
#ifndef KG_RANDOM_H
#define KG_RANDOM_H
#include <stdint.h>
#include "../schedule/sched.h"

/* Appends a random sequence of about nsteps legal steps to s, drawn from seed (same seed, same steps).
 * For KG_TARGET_C only CPU-legal primitives are drawn (no bind, no shared scope). Illegal draws are skipped.
 * For KG_TARGET_CUDA (random_gpu.c) each untouched stage gets a whole launchable structure (blocks and threads,
 * shared staging, register accumulation, cross-thread reduction, ...) with random sizes; nsteps <= 0 draws
 * nothing, otherwise the structures decide the number of steps. */
void kg_schedule_random(kg_schedule *s, uint64_t seed, kg_target_kind target, int nsteps);
#endif
