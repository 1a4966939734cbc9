/* The measurement harness: builds a batch of candidates (one workload, one target) in parallel, runs them one
 * at a time in a separate worker process, verifies each against the reference and times it. A candidate that
 * faults (illegal address, trap, segfault) or hangs (timeout) cannot take the caller down: the worker is killed
 * if need be, restarted, and the candidate's result carries the status.
 *
 * Per candidate (kg_candidate_build): apply trace -> lower -> print -> compile (C: cc; CUDA: NVRTC + limits check,
 * or the emulator's host build) -> [worker] load, poison outputs, run once -> [caller] compare with the reference
 * (computed once per workload, cached in the measurer) -> [worker] warm-up, repeats until min_repeat_s of work
 * (runtime/timing.h; GPU: events, optional L2 flush between repeats; CPU: clock_gettime) -> median, spread
 * (base/stats.h), GFLOP/s, GB/s.
 *
 * Data lives in shared mappings (one memfd) made before the worker starts: inputs are read-only to the worker,
 * and every buffer sits between inaccessible guard pages, so a CPU kernel that writes an input or past a buffer
 * faults instead of corrupting what later candidates read. The worker is the running binary exec'd afresh
 * (/proc/self/exe; libgomp does not survive a plain fork of a process that has used OpenMP), so the binary must
 * link libkgen (statically, as every kgen binary does): runtime/worker.c's constructor takes over before main(). */
#ifndef KG_MEASURE_H
#define KG_MEASURE_H
#include <stdint.h>
#include "../schedule/sched.h"
#include "nvrtc.h"
#include "quality.h"
#include "../tlog/status.h"

typedef struct kg_measure_opts {
  kg_target_kind target;  /* C or CUDA */
  int emulate;            /* CUDA only: run on the emulator instead of the GPU */
  const char *arch;       /* CUDA: compile for this arch (NULL: the device's, else sm_86) */
  double min_repeat_s;    /* 0: 0.1 */
  double timeout_s;       /* per run of the worker (one verification run, or one timing loop); 0: 10 */
  int flush_l2;           /* GPU: overwrite L2 between repeats */
  int no_timing;          /* verify only */
  double rtol;            /* 0: default (see kg_verify_tolerance) */
  uint64_t seed;          /* input data */
  int build_threads;      /* 0: every core */
  int quality;            /* CUDA: also fill each result's static quality report (runtime/quality.h) from the
                           * build it measured; off by default, the tuner has no use for it */
  /* NULL, or a file that every measurer sharing this machine's cores locks (flock) while it runs candidates, so that
   * one's timing runs never overlap another's: what distributed ranks on one machine measuring the CPU or the
   * emulator set (builds still overlap). Must outlive the measurer. A waiter does not wait for a stopped holder
   * (nor past 60 timeouts): it runs without the lock and says so in each result (unlocked). */
  const char *run_lock;
  /* The early cut (CPU only), what a tuner sets: > 0, a candidate whose verification run took at least early_cut
   * times the fastest median this measurer has timed (or been told of: kg_measurer_hint_best), and at least a
   * quarter of min_repeat_s, runs once more (warm, the verification run its warm-up); when that run is also over the
   * bar, it is the candidate's one time (result.cut), instead of a warm-up and at least three repeats. A hopeless
   * candidate of a long kernel then costs two runs instead of five, and a single stalled run (a neighbour's burst,
   * a first run's page faults) cuts nothing. Not on the GPU, whose verification run includes the transfers and the
   * module's first launch, nor on the emulator, whose clock ranks nothing. <= 0: off. */
  double early_cut;
  float *const *inputs;   /* NULL: inputs drawn from seed; else the caller's (one array per program input,
                           * kg_tensor_numel floats each, copied), on which the reference is computed as they are */
} kg_measure_opts;

/* A candidate: a trace applied to the measurer's program. source (a test hook, and for measuring hand-written
 * kernels) replaces the generated code: C source defining `void kgen_entry_args(float **args)` on the C target;
 * on the CUDA target the printed program's source is replaced but its launch table kept. */
typedef struct kg_candidate {
  const kg_trace *trace;  /* NULL: the default schedule (CUDA: kg_schedule_gpu_default with 256 threads) */
  const char *source;     /* NULL: generated */
} kg_candidate;

typedef struct kg_measure_result {
  kg_status status;
  char msg[2048];          /* why it is not ok: the illegal step, compiler log (tail), limit, signal, mismatch */
  double compile_s;        /* lowering + printing + compiling */
  double median_s, min_s, max_s;
  int runs;                /* timed repeats */
  double *times;           /* heap (free with kg_measure_result_free), runs entries, in run order */
  double gflops, gbps;     /* from the workload's FLOPs and bytes and the median */
  double max_rel_err;      /* of the verification run */
  kg_kernel_resources *res;/* CUDA: heap, per kernel (nres) */
  int nres;
  kg_kernel_quality *quality; /* CUDA with opts.quality: heap, per kernel (nquality), for the arch it was built for */
  int nquality;
  /* CUDA on the emulator, or with opts.quality: the analytical estimate of the build's time on its arch
   * (runtime/estimate.h; 0 when there is none, e.g. the build failed) and its line for reports. On the emulator
   * this, not the emulator's clock, is what ranks the candidate (registers from NVRTC where it loads, else taken
   * as 32 per thread). */
  double estimate_s;
  char estimate_line[1024];
  /* Not ok because of the environment, not the candidate (msg says what): no build folder, a compiler missing or
   * killed, a toolchain that cannot build a trivial known-good kernel either (checked once, cached, after a
   * compile error), NVRTC unusable, a worker that cannot start or load a module. Such a result says nothing
   * about the candidate: do not record it (status is compile_error or runtime_error for display). A worker
   * killed by an outside signal (SIGKILL, SIGTERM, SIGINT, SIGHUP) is not this: the candidate is run again once,
   * and only a second such death is its result. */
  int env_fault;
  /* Timed without the run lock (kg_measure_opts.run_lock): its holder was stopped, or held it past the bound, so
   * these runs may have overlapped another measurer's. */
  int unlocked;
  /* Timed by one run after its verification run (kg_measure_opts.early_cut): runs is 1, and msg says how far
   * behind the fastest it was. */
  int cut;
} kg_measure_result;
void kg_measure_result_free(kg_measure_result *r);

typedef struct kg_measurer kg_measurer;
/* A measurer for program p (which must outlive it) and one target. Draws the inputs, computes the reference,
 * and for the GPU checks that a device is there. NULL with the reason in err (e.g. no device, not enough
 * memory). */
kg_measurer *kg_measurer_new(const kg_program *p, const kg_measure_opts *o, char *err, size_t errlen);
/* One result per candidate (out[i] for c[i]). Builds in parallel, then runs serially in the worker. */
void kg_measure_batch(kg_measurer *m, const kg_candidate *c, int n, kg_measure_result *out);
kg_runner kg_measurer_runner(const kg_measurer *m);
/* The target's description for logs and reports: device name ("NVIDIA H200", the CPU's model name or
 * "CUDA emulator"), arch ("sm_90", or the CPU's ISA such as "x86-64"), and compiler versions. */
const char *kg_measurer_device(const kg_measurer *m);
const char *kg_measurer_arch(const kg_measurer *m);
/* A device description "NAME (details)" split into the name (what logs record as the device) and the details
 * (cores or SMs, compiler, driver and NVRTC versions: what logs record as versions). */
void kg_device_split(const char *desc, char *name, size_t nlen, char *versions, size_t vlen);
/* CUDA: the limits candidates are checked against (the device's, or the arch's on the emulator); NULL on C. */
const kg_gpu_limits *kg_measurer_limits(const kg_measurer *m);
/* Wall seconds kg_measure_batch has spent building (in parallel) and running (in the worker), over all batches. */
void kg_measurer_phase_times(const kg_measurer *m, double *build_s, double *run_s);
/* The shared buffer i (inputs, then outputs): the inputs as measured, and after kg_measure_batch the outputs of
 * the last candidate that ran (its verification run's, copied back from the GPU). numel floats, valid until
 * kg_measurer_free. */
const float *kg_measurer_buffer(const kg_measurer *m, int i);
/* Tells the measurer of a time its program already reached (a tuning log's best), the early cut's reference until it
 * times something faster itself. */
void kg_measurer_hint_best(kg_measurer *m, double seconds);
/* How many times the worker was (re)started, for tests. */
int kg_measurer_worker_starts(const kg_measurer *m);
void kg_measurer_free(kg_measurer *m);

#endif
