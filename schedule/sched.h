/* Schedules: a program's default schedule transformed by primitive steps. A schedule is fully described by its
 * trace (the list of steps applied to the default schedule); applying a trace is deterministic.
 *
 * State kept per schedule stage: its loops (kg_iter) as a tree of split/fuse relations over the root axes, the
 * current leaf order, each leaf's kind (serial/parallel/vectorized/unrolled/bound to a GPU index), where the
 * stage is computed (root, inlined, or at a loop of a consumer) and the storage scope of its tensor.
 *
 * Every primitive checks all its preconditions before it changes anything: an illegal step returns -1 with a
 * message naming the primitive, the stage and the loop, and leaves the schedule exactly as it was. */
#ifndef KG_SCHED_H
#define KG_SCHED_H
#include <stddef.h>
#include <stdint.h>
#include "../te/te.h"

typedef enum { KG_TARGET_C, KG_TARGET_CUDA } kg_target_kind;

typedef enum { KG_SCOPE_GLOBAL, KG_SCOPE_SHARED, KG_SCOPE_LOCAL } kg_scope;
extern const char *const kg_scope_names[]; /* "global", "shared", "local" */

typedef enum { KG_LOOP_SERIAL, KG_LOOP_PARALLEL, KG_LOOP_VECTORIZED, KG_LOOP_UNROLLED, KG_LOOP_BOUND } kg_loop_kind;
extern const char *const kg_loop_kind_names[];

#define KG_THREAD_TAGS(X)                                                                                   \
  X(BLOCK_X, "blockIdx.x") X(BLOCK_Y, "blockIdx.y") X(BLOCK_Z, "blockIdx.z") X(THREAD_X, "threadIdx.x")      \
  X(THREAD_Y, "threadIdx.y") X(THREAD_Z, "threadIdx.z") X(VTHREAD, "vthread")
typedef enum {
  KG_THREAD_NONE,
#define X(n, s) KG_THREAD_##n,
  KG_THREAD_TAGS(X)
#undef X
  KG_THREAD_COUNT
} kg_thread_tag;
extern const char *const kg_thread_tag_names[KG_THREAD_COUNT]; /* [KG_THREAD_NONE] = "none" */
static inline int kg_thread_tag_is_thread(kg_thread_tag t) {
  return t == KG_THREAD_THREAD_X || t == KG_THREAD_THREAD_Y || t == KG_THREAD_THREAD_Z;
}
static inline int kg_thread_tag_is_block(kg_thread_tag t) {
  return t == KG_THREAD_BLOCK_X || t == KG_THREAD_BLOCK_Y || t == KG_THREAD_BLOCK_Z;
}

typedef enum { KG_ITER_ROOT, KG_ITER_SPLIT_OUTER, KG_ITER_SPLIT_INNER, KG_ITER_FUSED } kg_iter_origin;

/* A loop of a schedule stage. Root iters are the stage's axes (spatial first, then reduction); the others come
 * from split (outer, inner) or fuse. Relations are kept on both ends so that lowering can pass extents down
 * (root -> leaves) and values up (leaves -> root):
 *   split:  parent = outer * factor + inner;  outer extent = ceil(parent extent / factor), inner = factor
 *           (a non-dividing factor makes lowering guard parent < extent)
 *   fuse:   fused = outer * inner.extent + inner  (outer = fused / inner.extent, inner = fused % inner.extent) */
typedef struct kg_iter {
  const char *name; /* root: the axis name; split: "<parent>.o" / "<parent>.i"; fuse: "<outer>*<inner>" */
  int id;           /* index in kg_sstage.all */
  int is_reduce;
  int64_t extent;   /* with the stage's full domain (lowering recomputes it for attached stages' regions) */
  kg_iter_origin origin;
  int root_axis;    /* ROOT: index into the stage's axes (0..nax-1 spatial, nax.. reduction) */
  /* where this iter came from */
  struct kg_iter *split_parent; /* SPLIT_OUTER/INNER */
  int64_t factor;               /* SPLIT_*: the inner extent */
  struct kg_iter *fuse_outer, *fuse_inner; /* FUSED */
  /* what became of it (NULL while it is a leaf) */
  struct kg_iter *split_outer, *split_inner; /* split into these */
  struct kg_iter *fused_into;               /* fused into this */
  /* annotations (leaves only) */
  kg_loop_kind kind;
  kg_thread_tag tag;
  int pipeline; /* `pipeline`: the shared-memory stages computed at this (serial) loop fill a ring of this many
                 * buffers, up to pipeline - 1 steps ahead of the step that reads them (lower/pipeline.c); 0: none.
                 * A pipelined loop is never split, fused or annotated afterwards (the primitives refuse) */
  int tensorized; /* one of the loops a `tensorize` step maps onto the tensor cores (its three per-thread loops and the
                   * lane loop): never split, fused or annotated afterwards (the primitives refuse) */
} kg_iter;

typedef enum { KG_ATTACH_ROOT, KG_ATTACH_INLINE, KG_ATTACH_AT } kg_attach_kind;
typedef enum { KG_ORIGIN_PROGRAM, KG_ORIGIN_CACHE_READ, KG_ORIGIN_CACHE_WRITE, KG_ORIGIN_RFACTOR } kg_stage_origin;

/* A stage as the schedule sees it: the program's stage copied into the schedule's arena (bodies may be
 * rewritten by cache_read / cache_write / rfactor), or a stage that a primitive created. */
typedef struct kg_sstage {
  const char *name; /* unique among the schedule's stages; created ones: "A.shared", "A.local", "C.local", "C.rf" */
  int id;           /* index in kg_schedule.stages */
  kg_stage_origin origin;
  kg_tensor *out;   /* tensor written; created stages get a new tensor in the schedule's arena, whose stage field
                     * is NULL (nothing reads it: the schedule's stages are found by kg_sstage) */
  kg_ivar **ax;     /* spatial axes (ranging over out->shape) */
  int nax;
  kg_ivar **rax;    /* reduction axes */
  int nrax;
  kg_reducer red;
  kg_expr *body;    /* reads refer to tensors; created/rewritten bodies live in the schedule's arena */
  int is_output;    /* writes a program output: never inlined or attached */
  kg_scope scope;   /* storage of out; GLOBAL by default (an attached GLOBAL stage is lowered as LOCAL) */
  int stream;       /* `stream`: out is written with non-temporal stores, which bypass the caches (C target). Set
                     * only on a root, elementwise stage writing a program output that no stage reads: every
                     * element is stored once and never read back, so keeping it in cache only evicts data the
                     * kernel still reads. No primitive can make the stage violate this afterwards (outputs are
                     * never inlined or attached, and nothing may read them) */
  int min_blocks;   /* `launch_bounds`: the blocks of this stage's kernel that must fit on a multiprocessor at once
                     * (CUDA: __launch_bounds__'s second argument, which caps the registers a thread may take);
                     * 0: no such bound. Read only while the stage is at root (a kernel) */
  int64_t pad;      /* `pad`: floats left free after each row (innermost storage dimension) of the stage's region
                     * buffer, so that a warp reading down a column spreads over the shared memory banks. Set only
                     * on a shared-scope stage of two or more dimensions; 0: rows packed */

  kg_iter *mma[3];  /* `tensorize`: the per-thread row, column and reduction loops one tensor-core instruction per
                     * warp computes (see kg_sched_mma_plan); NULL: none */
  kg_iter *bfdot[3]; /* `bfdot`: the row, column and reduction loops computed by bf16 pair dot products (see
                      * kg_sched_bfdot_plan); NULL: none */

  kg_iter **roots;  /* nax + nrax */
  kg_iter **all;    /* every iter made for this stage, in creation order (for lookup by name) */
  int nall, capall;
  kg_iter **leaves; /* current loop order, outermost first */
  int nleaves, capleaves;

  kg_attach_kind attach;
  struct kg_sstage *attach_stage; /* AT: the consumer */
  kg_iter *attach_iter;           /* AT: a leaf of attach_stage; this stage is computed inside its body */
} kg_sstage;

/* One step of a trace. Text form, one per line (names contain no whitespace):
 *   split STAGE LOOP FACTOR             names = {LOOP}            ints = {FACTOR}
 *   tile STAGE LOOP1 LOOP2 F1 F2        names = {LOOP1, LOOP2}    ints = {F1, F2}   (split, split, reorder)
 *   reorder STAGE LOOP...               names = the loops, in their new relative order
 *   fuse STAGE LOOP1 LOOP2              names = {LOOP1, LOOP2} (adjacent, LOOP1 outer)
 *   unroll|vectorize|parallel STAGE LOOP
 *   bind STAGE LOOP TAG                 names = {LOOP, TAG}  (TAG: blockIdx.x ... threadIdx.z, vthread)
 *   compute_at STAGE CONSUMER LOOP      names = {CONSUMER, LOOP}
 *   compute_inline STAGE | compute_root STAGE
 *   cache_read TENSOR SCOPE READER...   names = {SCOPE, READER...}  creates stage "TENSOR.SCOPE"
 *   cache_write STAGE SCOPE             names = {SCOPE}             creates stage "STAGE.SCOPE" that computes
 *   rfactor STAGE LOOP FACTOR           names = {LOOP} (a root reduction axis), ints = {FACTOR}: creates stage
 *                                       "STAGE.rf" computing partial results over the FACTOR-wide inner part
 *   reorder_storage STAGE AXIS...       names = STAGE's spatial axes in their new storage order (a stage that
 *                                       cache_read or cache_write made; its readers are rewritten)
 *   stream STAGE                        non-temporal (streaming) stores for STAGE's output (see kg_sstage.stream)
 *   pad STAGE FLOATS                    ints = {FLOATS}: STAGE's shared rows stored FLOATS apart beyond their
 *                                       length (see kg_sstage.pad)
 *   launch_bounds STAGE BLOCKS          ints = {BLOCKS}: STAGE's kernel keeps BLOCKS blocks resident per
 *                                       multiprocessor (see kg_sstage.min_blocks)
 *   pipeline STAGE LOOP DEPTH           names = {LOOP}, ints = {DEPTH}: the shared stages computed at LOOP fill a
 *                                       ring of DEPTH buffers ahead of the step that reads them (kg_iter.pipeline)
 *   tensorize STAGE ROWS COLS K         names = {ROWS, COLS, K}: the warp's 32 threads compute those loops of STAGE
 *                                       with one mma.sync.m16n8k16 (kg_sstage.mma, kg_sched_mma_plan)
 *   widen STAGE                         STAGE, a cache_read copy of an f16/bf16 tensor, stores f32 (exact)
 *   bfdot STAGE ROWS COLS K             names = {ROWS, COLS, K}: those loops computed with bf16 pair dot products
 *                                       (C target; kg_sstage.bfdot, kg_sched_bfdot_plan)
 *   split_storage STAGE AXIS FACTOR     names = {AXIS}, ints = {FACTOR}: STAGE's tensor stores AXIS as AXIS.o in
 *                                       its place and AXIS.i (FACTOR wide) innermost (readers rewritten) */
/* name, text, then the step's form: how many names (min, max) and how many integers follow the stage. */
#define KG_STEPS(X)                                                                                         \
  X(SPLIT, "split", 1, 1, 1) X(TILE, "tile", 2, 2, 2) X(REORDER, "reorder", 2, KG_STEP_MAX_NAMES, 0)          \
  X(FUSE, "fuse", 2, 2, 0) X(UNROLL, "unroll", 1, 1, 0) X(VECTORIZE, "vectorize", 1, 1, 0)                    \
  X(PARALLEL, "parallel", 1, 1, 0) X(BIND, "bind", 2, 2, 0) X(COMPUTE_AT, "compute_at", 2, 2, 0)              \
  X(COMPUTE_INLINE, "compute_inline", 0, 0, 0) X(COMPUTE_ROOT, "compute_root", 0, 0, 0)                       \
  X(CACHE_READ, "cache_read", 2, KG_STEP_MAX_NAMES, 0) X(CACHE_WRITE, "cache_write", 1, 1, 0)                 \
  X(RFACTOR, "rfactor", 1, 1, 1) X(REORDER_STORAGE, "reorder_storage", 1, KG_STEP_MAX_NAMES, 0)               \
  X(STREAM, "stream", 0, 0, 0) X(PAD, "pad", 0, 0, 1) X(LAUNCH_BOUNDS, "launch_bounds", 0, 0, 1) \
  X(PIPELINE, "pipeline", 1, 1, 1) X(TENSORIZE, "tensorize", 3, 3, 0) X(WIDEN, "widen", 0, 0, 0) \
  X(BFDOT, "bfdot", 3, 3, 0) X(SPLIT_STORAGE, "split_storage", 1, 1, 1)
#define KG_SCHED_MAX_PIPELINE 4 /* ring buffers a `pipeline` step may ask for: past 4, shared memory runs out first */
#define KG_SCHED_MAX_PAD 32 /* floats a `pad` step may add to each row: a bank period (32 words) at most */
#define KG_SCHED_MAX_MIN_BLOCKS 32 /* resident blocks a `launch_bounds` step may ask for: every arch's maximum */
typedef enum {
#define X(n, s, lo, hi, ni) KG_STEP_##n,
  KG_STEPS(X)
#undef X
  KG_STEP_COUNT
} kg_step_kind;
typedef struct kg_step_form {
  int min_names, max_names, nints;
} kg_step_form;
extern const kg_step_form kg_step_forms[KG_STEP_COUNT];
extern const char *const kg_step_names[KG_STEP_COUNT];

#define KG_STEP_MAX_NAMES 16
/* The longest loop or stage name a trace may hold or a primitive may create (split appends ".o"/".i", fuse
 * joins two names with "*", caching appends ".local"...): a trace naming a longer one is refused where it is
 * parsed, and a step that would create one is illegal, so every name fits the buffers that messages, sketches
 * and code generation build from it. */
#define KG_MAX_LOOP_NAME 256
typedef struct kg_step {
  kg_step_kind kind;
  const char *stage;
  const char *names[KG_STEP_MAX_NAMES];
  int nnames;
  int64_t ints[2];
  int nints;
  int line; /* where kg_trace_parse read it (1-based), 0 for steps made in code; not part of its identity */
} kg_step;

/* The most steps a trace may hold: the text and msgpack readers refuse longer traces and kg_schedule_apply a
 * step past it. Tuned schedules have tens of steps; the limit keeps lowering time and memory bounded (a stage
 * per cache step makes them grow with the length). docs/targets.md, "Limits on inputs". */
#define KG_TRACE_MAX_STEPS 1000

/* A trace owns its strings (in its arena). */
typedef struct kg_trace {
  kg_arena arena;
  kg_step *steps;
  int nsteps, cap;
} kg_trace;

void kg_trace_init(kg_trace *t);
void kg_trace_free(kg_trace *t);
/* Appends a copy of step (strings copied into t's arena). */
void kg_trace_push(kg_trace *t, const kg_step *step);
/* Text form: one step per line, '#' comments and blank lines ignored by the reader. Caller frees the string. */
char *kg_trace_to_text(const kg_trace *t);
void kg_step_to_text(struct kg_strbuf *b, const kg_step *step);
/* Parses the text form into t (appending). On a malformed line returns -1 and writes
 * "NAME:LINE: error: ..." into err. Parsing checks only the form (step name, argument count, numbers);
 * legality is checked when the trace is applied. */
int kg_trace_parse(kg_trace *t, const char *name, const char *text, size_t len, char *err, size_t errlen);

typedef struct kg_schedule {
  kg_arena arena;
  const kg_program *prog;
  kg_sstage **stages; /* execution order: every producer before its consumers */
  int nstages, capstages;
  kg_trace trace;     /* the steps applied so far (only successful ones) */
  int n_ivars;        /* ivar ids in use (program's plus created) */
  int n_tensors;      /* tensor ids in use (program's plus created) */
} kg_schedule;

/* The default schedule: every stage computed at root, loops in axis order (spatial, then reduction), serial. */
kg_schedule *kg_schedule_new(const kg_program *p);
void kg_schedule_free(kg_schedule *s);

/* Applies one step. 0 on success (the step is appended to s->trace). -1 on an illegal step: err holds e.g.
 * "vectorize: stage C: loop k is a reduction loop", and the schedule is unchanged. */
int kg_schedule_apply(kg_schedule *s, const kg_step *step, char *err, size_t errlen);
/* Applies every step in order; stops at the first illegal one (returns -1, err prefixed by "line L: " for a step
 * kg_trace_parse read from line L, "step N: " for a step made in code). */
int kg_schedule_apply_trace(kg_schedule *s, const kg_trace *t, char *err, size_t errlen);

kg_sstage *kg_schedule_find_stage(const kg_schedule *s, const char *name);
kg_iter *kg_sstage_find_iter(const kg_sstage *st, const char *name); /* any iter, leaf or not */

/* `tensorize S ROWS COLS K` (schedule/tensorize.c) maps a sum of products of two f16 or bf16 reads onto the tensor
 * cores' mma.sync.aligned.m16n8k16 (f32 accumulation): per warp, a 16 x 8 tile of S over a 16-long stretch of the
 * reduction; or of two f32 reads, where the program allows TF32 (kg_program.tf32, `--tf32`), onto
 * mma.sync.aligned.m16n8k8.tf32 over an 8-long stretch (the operands rounded to TF32, as cvt.rna.tf32.f32 does).
 * What it requires of S (PTX ISA, "Matrix Fragments for mma.m16n8k16" and "for mma.m16n8k8"): its body is A * B,
 * two reads of f16 (or of bf16, or of f32 with TF32 allowed) tensors, A not depending on the column axis and B not
 * on the row axis; it sums; ROWS, COLS and K are its three innermost loops (any order), serial or unrolled, ROWS =
 * the outer part (2) of a split by 8 of a 16-long row stretch, COLS = the inner part (2) of a split by 2 of an
 * 8-long column stretch, K a stretch of kg_mma_kstep (16; 8 for TF32) of a reduction axis whose first loop is
 * further out; and the row split's inner part (8, the fragment's groupID)
 * fused, outer, with the column split's outer part (4, its thread in group) into one loop of 32 bound to
 * threadIdx.x: lane = 4 * groupID + thread_in_group. Each thread then computes exactly the four accumulator
 * elements the instruction's layout gives its lane, so the loops and the instruction mean the same. The kernel
 * must launch 32 threads along x (a warp per threadIdx.y, z), so that every warp runs the instruction whole; the
 * CUDA printer checks it. */
typedef struct kg_mma_plan {
  kg_iter *rows, *cols, *k; /* the per-thread loops (2, 2, 16) */
  kg_iter *lane;            /* the fused loop bound to threadIdx.x (32) */
  kg_iter *group, *tig;     /* its parts: the rows' 8 (outer), the columns' 4 (inner) */
  const kg_expr *a, *b;     /* the reads: a over rows and k, b over k and columns */
  kg_dtype dtype;           /* theirs: f16 or bf16, or f32 (computed as TF32) */
  int kstep;                /* the instruction's reduction: kg_mma_kstep(dtype) */
} kg_mma_plan;
/* The most instruction tiles of a warp whose accumulators a thread keeps in registers across the reduction
 * (lower/lower.c; 4 floats each, 128 in all): the generators build no warp tile larger. */
#define KG_MMA_MAX_TILES 32
/* The reduction one tensor-core step covers for operands of type t: 16 (f16, bf16: m16n8k16), 8 (f32 as TF32:
 * m16n8k8). */
int kg_mma_kstep(kg_dtype t);
/* Fills p for a stage of s that `tensorize` marked, checking everything above again (later steps may have changed
 * the loops around it); 0, or -1 with the reason in err ("tensorize: stage S: ..."). */
int kg_sched_mma_plan(const kg_schedule *s, const kg_sstage *st, kg_mma_plan *p, char *err, size_t errlen);
/* `bfdot S ROWS COLS K` (schedule/tensorize.c) computes S's three innermost loops with bf16 pair dot products
 * (x86's vdpbf16ps, Arm's BFDOT: per f32 lane, acc += a0 * b0 + a1 * b1 over two bf16 pairs), C target. It
 * requires: S sums A * B, two reads of bf16 tensors, A not depending on the columns and B not on the rows; ROWS,
 * COLS and K are its three innermost loops (any order), serial, unrolled or vectorized; K a reduction loop of an
 * even extent whose first loop is further out (the accumulators are set before), COLS spatial with a multiple of 16
 * up to 64 (whole 16-lane vectors), ROWS spatial up to 16, and at most 28 accumulator vectors (ROWS x COLS / 16),
 * which with the operands fill the 32 vector registers. Lowering (lower/lower.c) further needs the tile whole (no
 * guard), the accumulators and B contiguous along the columns and every stride constant. */
typedef struct kg_bfdot_plan {
  kg_iter *rows, *cols, *k;
  const kg_expr *a, *b; /* a over rows and k, b over k and columns */
} kg_bfdot_plan;
#define KG_BFDOT_MAX_ROWS 16
#define KG_BFDOT_MAX_COLS 64
#define KG_BFDOT_MAX_ACC 28
int kg_sched_bfdot_plan(const kg_sstage *st, kg_bfdot_plan *p, char *err, size_t errlen);
int kg_sstage_leaf_index(const kg_sstage *st, const kg_iter *it);   /* -1 when not a leaf */
/* Root axis r of st: the spatial axes (0..nax-1), then the reduction axes. */
kg_ivar *kg_sstage_axis(const kg_sstage *st, int r);
/* Is x computed inside stage c at its loop l or a loop inside l (attached there, or to a stage that is)? */
int kg_sstage_nested_in(const kg_sstage *x, const kg_sstage *c, const kg_iter *l);
/* The first attached stage whose attachment no longer holds (one of its consumers is neither its attach stage
 * nor computed inside the attach loop, or it has none), or NULL. The primitives keep this NULL; lowering checks it. */
const kg_sstage *kg_schedule_find_broken_attachment(const kg_schedule *s);

/* The naive GPU mapping (gpu_default.c): every untouched root stage's spatial loops fused, split by threads and
 * bound to blockIdx.x / threadIdx.x. Appends ordinary steps to s->trace. */
void kg_schedule_gpu_default(kg_schedule *s, int threads);

/* Human-readable dump of the schedule state (stages, attach points, leaf loops with extents and kinds). */
void kg_schedule_dump(struct kg_strbuf *b, const kg_schedule *s);
#endif
