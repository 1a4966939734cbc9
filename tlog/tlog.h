/* Tuning logs: one msgpack map per measured candidate, appended to a file that several tuners may share.
 *
 * A record is self-contained (it names the workload, the target, the trace and the result), so a log can be
 * read by anyone with any msgpack library: the file is a plain sequence of msgpack maps (tuning_logs/README.md
 * documents the keys). Writing is append-only: each record goes out in one write(2) on an O_APPEND descriptor
 * under an advisory lock (flock), and nothing written is ever rewritten. kg_tlog_flush fsyncs (the tuner calls it
 * at the end of each round).
 *
 * Reading keeps every intact record: a part that does not decode (a torn write, garbage, a truncated tail) or
 * that decodes to something that is not a valid record is skipped, the reader resynchronises at the next place
 * where a record's map can start, and the skipped bytes and parts are counted so the caller can say so.
 *
 * Keys of a record map (format version KG_TLOG_VERSION):
 *   v        int      format version
 *   workload map      {name: str, hash: str (16 hex digits), sizes: map str -> int}
 *   target   map      {kind: "c"|"cuda", arch: str, device: str, versions: str, runner: "cpu"|"gpu"|"emulator"}
 *   trace    array    of steps, each [step name: str, stage: str, names: [str...], ints: [int...]]
 *   result   map      {status: str, msg: str, times: [float64 seconds...], compile_s: float64,
 *                      flops: float64, bytes: float64}
 *   time     float64  unix time of the measurement
 *   kgen     str      kgen version
 *   sketch   str      optional: the search-space sketch the candidate came from
 *   knobs    [int...] optional: its knob values (see gen/space.h)
 *   estimate float64  optional: the analytical estimate of its time on target.arch (runtime/estimate.h), seconds;
 *                     what ranks a record of the emulator (runner "emulator"), whose own times only say that
 *                     it ran
 *   dynamic  map      optional, a kernel that takes sizes at run time: str -> [lo, hi, bucket_lo, bucket_hi] per
 *                     dynamic size: the values the kernel accepts, and the bucket of values its schedule serves;
 *                     the workload's sizes say which value of each it was measured at
 *   worker   map      optional, a distributed tuning (`mpirun ... kgen tune`): who measured it, {host: str (the
 *                     machine's name), rank: int (its MPI rank)}
 * Unknown keys are ignored by the reader (newer writers may add some). */
#ifndef KG_TLOG_H
#define KG_TLOG_H
#include <stddef.h>
#include <stdint.h>
#include "../base/arena.h"
#include "../schedule/sched.h"

#define KG_TLOG_VERSION 1
#define KG_TLOG_MAX_SIZES 32
#define KG_TLOG_MAX_KNOBS 64

/* Workload identity: the def's name, a hash of (name, canonical program text, size bindings, dtype), and the
 * size bindings. */
typedef struct kg_tlog_workload {
  const char *name;
  char hash[17];
  int nsizes;
  const char *size_names[KG_TLOG_MAX_SIZES];
  int64_t size_values[KG_TLOG_MAX_SIZES];
  /* 1 + the kg_dtype every input and output was made (`--dtype`, kg_program_set_io_dtype); 0: as the program
   * declares. Written as "dtype" only when set, so f32 logs read and hash as before */
  int io_dtype;
  /* the program allowed TF32 (`--tf32`, kg_program.tf32); written as "tf32": true only when set, and hashed */
  int tf32;
} kg_tlog_workload;

/* Fills w for program p (strings point into p). A dynamic size's range is hashed with its value. */
void kg_tlog_workload_of(const kg_program *p, kg_tlog_workload *w);
struct kg_tlog_record;
/* Fills r's dynamic-size fields from p's dynamic sizes (in program order); the bucket of the k-th is
 * [bucket_lo[k], bucket_hi[k]], or its whole range when those are NULL. */
void kg_tlog_dynamic_of(const kg_program *p, const int64_t *bucket_lo, const int64_t *bucket_hi,
                        struct kg_tlog_record *r);

typedef struct kg_tlog_target {
  const char *kind;     /* "c" or "cuda" */
  const char *arch;     /* "sm_90", or the CPU's ISA */
  const char *device;   /* "NVIDIA H200", the CPU's model name, "CUDA emulator" */
  const char *versions; /* compiler / driver / NVRTC versions, free text */
  const char *runner;   /* "cpu", "gpu", "emulator" */
} kg_tlog_target;

typedef struct kg_tlog_record {
  int v;
  kg_tlog_workload workload;
  kg_tlog_target target;
  kg_trace trace;       /* owned by the record when decoded (kg_tlog_free frees it) */
  const char *status;   /* one of kg_status_names (tlog/status.h) */
  const char *msg;      /* "" when ok, but for an early cut (runtime/measure.h), which says so */
  double *times;        /* ntimes seconds, in run order (empty unless status is "ok") */
  int ntimes;
  double compile_s;
  double flops, bytes;  /* of the workload */
  double time;          /* unix seconds */
  const char *kgen;     /* version */
  const char *sketch;   /* NULL when absent */
  int64_t knobs[KG_TLOG_MAX_KNOBS];
  int nknobs;
  double estimate_s;    /* 0 when absent */
  const char *worker_host; /* NULL when absent (not a distributed tuning) */
  int worker_rank;
  /* dynamic sizes (ndyn 0: a kernel specialized to the workload's sizes) */
  int ndyn;
  const char *dyn_names[KG_TLOG_MAX_SIZES];
  int64_t dyn_lo[KG_TLOG_MAX_SIZES], dyn_hi[KG_TLOG_MAX_SIZES];
  int64_t bucket_lo[KG_TLOG_MAX_SIZES], bucket_hi[KG_TLOG_MAX_SIZES];
} kg_tlog_record;

/* The median of r's times (0 when it has none). */
double kg_tlog_record_median(const kg_tlog_record *r);
/* Whether r is ranked by its analytical estimate: a record of the CUDA emulator that carries one. */
int kg_tlog_record_estimated(const kg_tlog_record *r);
/* The time that ranks r among its workload's records: its estimate when kg_tlog_record_estimated, else its
 * median. */
double kg_tlog_record_rank_s(const kg_tlog_record *r);
/* Whether r is a successful measurement (status "ok" with at least one time). */
int kg_tlog_record_ok(const kg_tlog_record *r);

/* Encodes r as one msgpack map. Returns a malloc'd buffer (caller frees) and its length in *len. */
char *kg_tlog_encode(const kg_tlog_record *r, size_t *len);

/* Whether r's result is plausible: its ranking time (kg_tlog_record_rank_s) is finite and at least
 * KG_TLOG_MIN_TIME_S, and implies at most KG_TLOG_PEAK_FLOPS and KG_TLOG_PEAK_BYTES_S for the workload's counts
 * (flops and bytes: the program's when the caller knows it, else NULL to use the record's). The bounds are
 * deliberately generous and the same for every machine, so that a log read elsewhere keeps its records: a time
 * below them is a broken measurement or a forged record, never a fast kernel. 1, or 0 with why (what it implies)
 * filled. */
#define KG_TLOG_MIN_TIME_S 1e-10     /* under one cycle of a 10 GHz clock: no kernel call is that fast */
#define KG_TLOG_PEAK_FLOPS 1e15      /* 1 PFLOP/s of f32: ten times the largest CPU (384 cores x 64 FLOP/cycle
                                      * x 4 GHz) or GPU (fp32 FMA units, kgen uses no tensor cores) of 2026 */
#define KG_TLOG_PEAK_BYTES_S 1e16    /* 10 PB/s: thirty times the aggregate L1 bandwidth of such a CPU, far above
                                      * any GPU's memory or L2 */
int kg_tlog_record_plausible(const kg_tlog_record *r, const double *flops, const double *bytes, char *why,
                             size_t whylen);

/* A skipped stretch of a log, for messages: where it is in the file and what it was. */
#define KG_TLOG_MAX_NOTES 16
typedef struct kg_tlog_skip {
  size_t offset, len; /* bytes from the start of the file */
  int v;              /* 0: not a record (garbage, torn, or breaking the schema); else a record of format
                       * version v, newer than this kgen's KG_TLOG_VERSION: not understood, so not used */
} kg_tlog_skip;

/* A log read into memory. Records' strings and traces live in the log's arena. */
typedef struct kg_tlog {
  kg_arena arena;
  kg_tlog_record *recs;
  int n, cap;
  size_t skipped_bytes; /* bytes that were not part of an intact record (newer-version records included) */
  int skipped_parts;    /* how many separate stretches were skipped */
  int skipped_newer;    /* records of a newer format version among them */
  kg_tlog_skip notes[KG_TLOG_MAX_NOTES]; /* the first skipped stretches (nnotes of skipped_parts) */
  int nnotes;
  size_t offset;        /* the file offset of the next byte to decode: kg_tlog_decode's buf[0] is there, and
                         * kg_tlog_read_more goes on from there */
} kg_tlog;

void kg_tlog_init(kg_tlog *log);
void kg_tlog_free(kg_tlog *log);
/* Decodes every intact record of buf[0..len) and appends them to log (skipping and counting the rest), and
 * advances log->offset by len. Never fails: garbage only adds to the skipped counts. A record whose version is
 * newer than KG_TLOG_VERSION is skipped whole (counted in skipped_newer). */
void kg_tlog_decode(kg_tlog *log, const char *buf, size_t len);
/* Reads the file at path into log. A missing file is an empty log (returns 0, *missing set when missing is not
 * NULL). -1 with err on an I/O error. */
int kg_tlog_read(kg_tlog *log, const char *path, int *missing, char *err, size_t errlen);
/* Reads what was appended to path since log->offset (what log has read of it so far) and appends its records to
 * log: a tuner sharing the log with others picks up their records this way. Returns the number of records added,
 * or -1 with err on an I/O error (a missing file adds nothing). Writers append whole records under an exclusive
 * lock and this reads under a shared one, so it never sees half a record; a file that became shorter than
 * log->offset (replaced by another) is read from its start again. */
int kg_tlog_read_more(kg_tlog *log, const char *path, char *err, size_t errlen);

/* Appending. */
typedef struct kg_tlog_writer kg_tlog_writer;
/* Opens (creating it if need be) the log at path for appending. NULL with err. */
kg_tlog_writer *kg_tlog_open(const char *path, char *err, size_t errlen);
/* One record in one write(2) under an exclusive flock. If the file's last record was torn (a writer killed
 * mid-write) the new record still starts a decodable map: the reader resynchronises. 0, or -1 with err. */
int kg_tlog_append(kg_tlog_writer *w, const kg_tlog_record *r, char *err, size_t errlen);
/* Bytes this writer appended so far, and the file offset where its first record landed (-1: none yet). */
size_t kg_tlog_written(const kg_tlog_writer *w);
long long kg_tlog_first_offset(const kg_tlog_writer *w);
/* fsync. 0, or -1 with err. */
int kg_tlog_flush(kg_tlog_writer *w, char *err, size_t errlen);
void kg_tlog_close(kg_tlog_writer *w);

/* Choosing records (tlog/select.c), for replay and export. */
typedef struct kg_tlog_want {
  const kg_tlog_workload *wl; /* the workload (required): its name and hash identify it, its sizes are named in
                               * messages */
  const char *kind;        /* "c" or "cuda" (required) */
  const char *arch;        /* NULL: any */
  const char *device;      /* NULL: any */
  /* Optional checks of a candidate record, in order of preference, until one passes (so that a record that cannot
   * be used gives way to the next best): prog, the program whose schedule the trace must apply to, and whose
   * FLOP and byte counts judge the time's plausibility (NULL: no trace check, and the largest counts among the
   * workload's records); usable,
   * any further check by the caller (e.g. that the schedule builds): 1, or 0 with why. */
  const kg_program *prog;
  int (*usable)(void *ctx, const kg_tlog_record *r, char *why, size_t whylen);
  void *ctx;
  int skip_emulated; /* records timed on the CUDA emulator are passed over (export without --allow-emulated) */
} kg_tlog_want;

typedef enum { KG_TLOG_PICK_EXACT, KG_TLOG_PICK_NEAREST, KG_TLOG_PICK_NONE } kg_tlog_pick_kind;

typedef struct kg_tlog_pick {
  kg_tlog_pick_kind kind;
  int index;         /* into log->recs; -1 with NONE */
  double median_s;   /* the time of the record's trace (kg_tlog_trace_times; not the ranking time), or the
                      * record's own (kg_tlog_record_rank_s) when that trace has no time */
  int nrecords;      /* the records of that trace median_s is the median of (1 for the record's own) */
  char differs[512]; /* NEAREST: what differs from the wanted target, e.g. "arch sm_86 (wanted sm_90)";
                      * NONE: why, e.g. "no successful record of matmul M=8 K=8 N=8 for the cuda target" */
  int nskipped;      /* better records passed over: implausible, a trace that no longer applies, not usable */
  char skipped[1024]; /* why, one line each ("record 7: its trace no longer applies: ..."), cut when long */
} kg_tlog_pick;

/* A trace's time on a target: the median of the ranking times (kg_tlog_record_rank_s) of the log's records of one
 * workload, target (kind, arch, device, versions) and trace, where a record that failed counts as infinitely slow
 * (a trace that sometimes fails is not the best) and one whose time is implausible (judged with the largest counts
 * of the workload's records on the target) does not count. A trace is measured once by the search, and again by
 * the tuner's confirmation (search/tune.h), so that one lucky measurement on a noisy machine does not decide; a
 * trace that failed in at least half of its measurements has an infinite time (pick_best passes it over).
 * What ranks a trace is its time, except for a trace measured once (not an estimate): its time times the factor by
 * which the group's re-measured traces came back (kg_tlog_single_factor over their kg_tlog_remeasure_ratio; 1 when
 * none was re-measured). The search's fastest single times are the luckiest of many (and a slow spell of a shared
 * machine during the confirmation inflates the re-measured ones alike), so a single time compared as it is beats
 * the confirmed traces whether or not it is faster; compared as what a re-measurement would likely give, it wins
 * only by more than the re-measurements' drift.
 * For every successful record i with a plausible time: times[i] gets its trace's time, rank[i] its ranking time,
 * counts[i] how many records that time is the median of, first[i] the index of the trace's first such record; for
 * the others 0, 0, 0, -1. Each array holds log->n; rank, counts and first may be NULL. */
void kg_tlog_trace_times(const kg_tlog *log, double *times, double *rank, int *counts, int *first);

/* How much slower a trace's later results came back than its first, t[0..n) in the order measured (a failure
 * INFINITY): the median of t[1..n) over t[0]; NAN when n < 2, t[0] is not a finite time or the later median is
 * infinite. */
double kg_tlog_remeasure_ratio(const double *t, int n);

/* The factor a trace measured once is ranked by: the median of the finite ratios[0..n) (kg_tlog_remeasure_ratio;
 * NANs skipped), 1 when there is none or it is below 1 (a single time never ranks faster than it was measured:
 * re-measurements that came back faster say the machine sped up, not that the single one was unlucky). The tuner's
 * confirmation and kg_tlog_trace_times both rank with it. */
double kg_tlog_single_factor(const double *ratios, int n);

/* What ranks a measured trace whose results' median is median over n results: the median, or for a trace measured
 * once (n == 1) its time times single (kg_tlog_single_factor). */
double kg_tlog_rank_time(double median, int n, double single);

/* The best successful record (the lowest ranking time of its trace, kg_tlog_trace_times; ties to the earlier
 * record, so a trace's first) of the workload w names, on the wanted target: among the records matching kind, and arch and
 * device where w gives them (EXACT); else the nearest among the workload's records of the same kind, preferring
 * the same arch, then the same device, then the lowest time (NEAREST); else NONE. A record of another kind never
 * matches: a CPU trace does not schedule a GPU. A record whose result is implausible (kg_tlog_record_plausible),
 * or that fails w's checks, is passed over for the next in that order, and named in out->skipped. */
void kg_tlog_pick_best(const kg_tlog *log, const kg_tlog_want *w, kg_tlog_pick *out);

/* The distinct workloads (name and hash) of log's records, in order of first appearance: returns how many and
 * sets *first (heap, caller frees) to the index of each one's first record. */
int kg_tlog_workloads(const kg_tlog *log, int **first);

/* `kgen show`: per workload (name, hash, sizes) and target (kind, arch, device): how many records, how many of
 * each status, the best median time with its GFLOP/s and GB/s, and (best_trace) the best record's trace as text.
 * best_only prints only the best record of each group, with its trace. */
struct kg_strbuf;
void kg_tlog_show(struct kg_strbuf *out, const kg_tlog *log, int best_only);
#endif
