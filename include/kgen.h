/* kgen: an auto-tuning kernel generator.
 *
 * Overview
 * --------
 * A user writes a computation in kgen's tensor-expression language (docs/language.md documents it):
 *
 *     def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {
 *       C[i, j] = sum[k](A[i, k] * B[k, j])
 *     }
 *
 * and kgen takes it through these stages, each a module (a folder) with its own header. The modules form layers
 * that point one way: each includes only the modules listed before it (tests/cli/test_layers.sh enforces it).
 *
 *   base/              arenas, diagnostics, bounded file reading, memory budget, string buffers, the version,
 *                      summary statistics (base/stats.h: the one median)
 *   te/te.h            kg_program_load: parse, check (names, sizes, shapes, bounds), split into stages;
 *                      kg_eval_reference: the oracle, interpreting the checked program directly;
 *                      kg_program_flops / kg_program_bytes
 *   schedule/sched.h   kg_schedule_new (default schedule), kg_schedule_apply (one primitive step: split, tile,
 *                      reorder, fuse, unroll, vectorize, parallel, bind, compute_at/inline/root, cache_read,
 *                      cache_write, rfactor, reorder_storage, stream, pad, launch_bounds, pipeline), traces and
 *                      their text form, the default GPU mapping
 *   lower/ir.h         kg_lower: the loop-nest IR (loop kinds, storage scopes, guards, barriers, asynchronous
 *                      copies) and the passes that transform it (bound tightening, software pipelining, ...),
 *                      each stating what it requires
 *   codegen/codegen.h  kg_codegen_c: C11 with OpenMP; kg_codegen_cuda: CUDA C, one kernel per root stage
 *                      (the kg_cuda_program family); codegen/gpu_arch.h: the limits of each CUDA arch;
 *                      codegen/header.h: exported headers;
 *                      codegen/front.h: kg_front_build, trace (or the default schedule) -> schedule -> IR -> source
 *   tlog/tlog.h        tuning logs: one msgpack record per measured candidate, appended under a lock; a reader
 *                      that keeps every intact record; kg_tlog_show (`kgen show`); tlog/status.h: the outcomes
 *   runtime/cpu.h      kg_cpu_build: the system compiler into a shared object, loaded with dlopen
 *   runtime/nvrtc.h    kg_nvrtc_compile: CUDA C to cubin + PTX with the ptxas resource report (NVRTC, dlopen);
 *                      kg_gpu_check_limits: a build against a device's limits
 *   runtime/cudrv.h    the CUDA driver API through dlopen (kg_cudrv_*): device query, memory, modules, launches
 *   runtime/emu.h      the CUDA emulator: generated CUDA run on the CPU (threads as fibers, real barriers)
 *   runtime/verify.h   random inputs, poisoned outputs, comparison with the reference; .npy files
 *   runtime/pipeline.h kg_candidate_build: kg_front_build, then compiled and loaded for a target (C, GPU, emulator), in
 *                      one call with the failing stage named; kg_pipeline_build / verify / time: the C path in
 *                      process
 *   runtime/timing.h   the one timing loop (warm-up, repeats until enough work; base/stats.h's median and spread)
 *   runtime/measure.h  the measurement harness: a batch of candidates built in parallel, run one at a time in a
 *                      worker process (faults and hangs become statuses), verified, timed
 *   costmodel/features.h, costmodel/model.h
 *                      a fixed-length feature vector from a candidate's lowered IR; the XGBoost cost model
 *   gen/random.h       random legal schedules (CPU and GPU structures), for tests
 *   gen/space.h        the search space: sketches derived by rules (CPU, GPU) built with one schedule builder,
 *                      and the knobs that annotate them
 *   search/tune.h      kg_tune: evolutionary search guided by the cost model, several workloads sharing a trial
 *                      budget, every measurement logged, resumable from the log
 *   search/pool.h      kg_pool: workers that measure for the tuner as results arrive (kg_pool_local: threads of this
 *                      process; the kgen command's dist/ adds every rank of an MPI job: `mpirun kgen tune`)
 *   replay/replay.h    kg_replay: the best logged record of a workload for this target (else the nearest, else the
 *                      default schedule, with a warning) rebuilt, verified and timed; no search
 *   replay/export.h    kg_export_header: a workload's best logged kernels (one per size binding; on CUDA a cubin per
 *                      arch plus PTX) as one self-contained header, printed by codegen/header.h
 *   cli/               the `kgen` command: one option table shared by the subcommands
 *
 * Errors come in four kinds: user input (a kg_diag "FILE:LINE:COL: error:" with the source line and a caret),
 * an illegal schedule step (kg_schedule_apply returns -1 with a message naming the primitive, the stage and the
 * loop, and leaves the schedule unchanged), internal invariants (assert), and compiler failures (a result
 * carrying the compiler's log).
 *
 * Memory: a kg_program and a kg_schedule each own one arena, freed at once by kg_program_free /
 * kg_schedule_free; a schedule points into its program, so free the schedule first.
 */
#ifndef KGEN_H
#define KGEN_H
#include "../base/version.h"
#include "../te/te.h"
#include "../schedule/sched.h"
#include "../lower/ir.h"
#include "../codegen/codegen.h"
#include "../codegen/front.h"
#include "../base/stats.h"
#include "../runtime/cpu.h"
#include "../runtime/verify.h"
#include "../runtime/pipeline.h"
#include "../runtime/timing.h"
#include "../runtime/nvrtc.h"
#include "../runtime/cudrv.h"
#include "../runtime/emu.h"
#include "../runtime/measure.h"
#include "../tlog/tlog.h"
#include "../costmodel/features.h"
#include "../costmodel/model.h"
#include "../gen/random.h"
#include "../gen/space.h"
#include "../search/tune.h"
#include "../search/pool.h"
#include "../codegen/header.h"
#include "../replay/replay.h"
#include "../replay/export.h"
#endif
