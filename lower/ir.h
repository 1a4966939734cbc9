/* The loop-nest IR that lowering produces and the printers read. Designed for both targets: loops carry a kind
 * and a GPU index tag, buffers a storage scope, and barriers are explicit statements.
 *
 * Index arithmetic is int64 in the IR (printed as the target's index type); values are f32; booleans only in
 * conditions and selects. IR nodes keep the source position of the expression they came from (or none). */
#ifndef KG_IR_H
#define KG_IR_H
#include "../schedule/sched.h"

typedef struct kg_irexpr kg_irexpr;
typedef struct kg_irstmt kg_irstmt;

/* A buffer: a program input/output (a parameter), a global temporary, or an allocation of a stage's region
 * (shared or local scope) placed at its attach point. Dense, C order; index expressions are flat. */
typedef struct kg_buffer {
  const char *name; /* a C identifier, unique in the function */
  int id;
  kg_scope scope;
  kg_tensor *tensor;
  kg_dtype dtype;   /* element type in memory: its tensor's (f32 for lowering's own scratch). A load widens an f16/bf16
                       element to f32 exactly; a store rounds the f32 value to the type */
  int64_t size;     /* elements (with dynamic sizes: the most it can take, every dynamic size at its hi) */
  kg_irexpr *dyn_size; /* a global temporary whose element count follows dynamic sizes: that count, an INT
                          expression over kg_lowered.size_vars; NULL otherwise (regions and parameters never) */
  int param_index;  /* >= 0 for parameters: inputs in order, then outputs in order; -1 otherwise */
  int is_input;     /* read-only parameter */
  /* A register accumulator (lower/regacc.c): a LOCAL array small enough for registers that holds the elements of
   * reg_acc_of a reduction updates, for the iterations of the loop named reg_acc_loop; 0 and NULL otherwise. */
  int reg_acc;
  const struct kg_buffer *reg_acc_of;
  const char *reg_acc_loop;
} kg_buffer;

typedef struct kg_irvar {
  const char *name; /* a C identifier, unique in the function */
  int id;
} kg_irvar;

typedef enum {
  KG_IRE_INT,    /* i */
  KG_IRE_FLOAT,  /* f */
  KG_IRE_VAR,    /* var (a loop variable or a LET) */
  KG_IRE_LOAD,   /* load.buf[load.index] */
  KG_IRE_BINARY, /* bin.op over bin.a, bin.b (type: INT for index arithmetic, F32, BOOL for comparisons/logic);
                    INT DIV/MOD are floor division/modulo */
  KG_IRE_UNARY,  /* bin.op (NEG, NOT) over bin.a */
  KG_IRE_CALL,   /* call.fn over call.args (SELECT never appears here: see KG_IRE_SELECT) */
  KG_IRE_SELECT, /* sel.c ? sel.a : sel.b, evaluating only the branch taken */
  KG_IRE_CAST,   /* bin.a (INT) converted to F32 */
  KG_IRE_THREAD, /* the running thread's index along tag (blockIdx.x ... threadIdx.z), INT; CUDA only, where no
                    loop bound to the tag need enclose it (lower/writer.c) */
} kg_irexpr_kind;

struct kg_irexpr {
  kg_irexpr_kind kind;
  kg_type ty;
  kg_pos pos;
  union {
    int64_t i;
    double f;
    kg_irvar *var;
    kg_thread_tag tag; /* THREAD */
    struct {
      kg_buffer *buf;
      kg_irexpr *index;
    } load;
    struct {
      kg_op op;
      kg_irexpr *a, *b;
    } bin;
    struct {
      kg_func fn;
      kg_irexpr *args[3];
      int n;
    } call;
    struct {
      kg_irexpr *c, *a, *b;
    } sel;
  };
};

/* How a cross-thread reduction combines (lower/launch.c decides it from the kernel's launch shape): xor warp
 * shuffles when the threads it spans are a power of two within a warp; shuffles, then shared memory across warps,
 * when they are whole warps along threadIdx.x; else through shared memory; nothing when its tag launches one
 * thread. */
typedef enum {
  KG_ALLREDUCE_UNPLANNED, /* not decided: the kernel's launch shape is unknown or beyond the launch limits */
  KG_ALLREDUCE_NONE,
  KG_ALLREDUCE_WARP,
  KG_ALLREDUCE_WARPS,
  KG_ALLREDUCE_SHARED,
} kg_allreduce_how;
extern const char *const kg_allreduce_how_names[];

typedef enum {
  KG_IRS_SEQ,     /* seq.items[0..n) in order */
  KG_IRS_FOR,     /* for (var = 0; var < extent; var++) body, with kind and tag; loop_name is the schedule's
                     name (e.g. "i.o") for dumps and comments */
  KG_IRS_IF,      /* if (cond) then [else otherwise] */
  KG_IRS_STORE,   /* buf[index] = value */
  KG_IRS_LET,     /* const var = value; visible to the statements after it in the enclosing SEQ */
  KG_IRS_ALLOC,   /* buf allocated (its scope) for the statements of body, freed after */
  KG_IRS_BARRIER, /* __syncthreads(): every thread of the block reaches it */
  KG_IRS_ALLREDUCE, /* allreduce: every thread of the block holds a partial in allreduce.buf[0] (a LOCAL buffer of
                       one element); afterwards each holds the reduction (allreduce.red) of the partials of all
                       threads that share its other thread indices, across threadIdx tag allreduce.tag. Every thread
                       of the block reaches it (a cross-thread reduction, CUDA only) */
  KG_IRS_COMMENT, /* text, for readable output */
  KG_IRS_ASYNC_COMMIT, /* closes the running thread's group of asynchronous stores (cp.async.commit_group; CUDA) */
  KG_IRS_ASYNC_WAIT,   /* waits until at most async_wait.pending of the thread's latest committed groups are still
                          in flight: every store of the groups before them has landed (cp.async.wait_group) */
  KG_IRS_MMA,          /* one tensor-core step of a warp (`tensorize`, CUDA): mma.sync.aligned.m16n8k16.row.col with
                          f32 accumulation over mma.dtype operands (f16, bf16), or m16n8k8 over f32 ones rounded to
                          TF32 (mma.dtype f32). Every thread of the warp reaches it together with its fragments in
                          mma.a from mma.a_off (8 elements, LOCAL, of mma.dtype; TF32: 4), mma.b from mma.b_off (4;
                          TF32: 2; the arrays may hold the fragments of several steps) and its four
                          accumulators at mma.c[mma.c_index[0..3]] (f32); each accumulator then has the sum over the
                          16 (TF32: 8) k of its row of A times its column of B added. Which elements a lane holds is
                          the PTX ISA's layout (schedule/sched.h, kg_mma_plan), lane = threadIdx.x */
  KG_IRS_BFDOT,        /* bf16 pair dot products (`bfdot`, C target): for r < rows, c < cols (a multiple of 16),
                          bfdot.c[c_index + r c_row + c] (f32) += the sum over k < bfdot.k (even) of
                          a[a_index + r a_row + k a_k] * b[b_index + k b_k + c] (bf16 buffers), computed a pair of k
                          at a time: the instruction (x86 vdpbf16ps) adds both products of a pair to each lane. With
                          b_pairs, b is stored in pairs of k (a copy laid out [k/2][c][2]): its element (k, c) is
                          b[b_index + (k / 2) b_k + 2 c + k % 2], so each vector of 16 pairs is one load */
  KG_IRS_LDMATRIX,     /* a warp's load of ldm.count (1, 2, 4) 8 x 8 matrices of 16-bit elements from shared memory
                          (ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16, CUDA): lane l names the row
                          (l % 8) of matrix l / 8, which starts at ldm.src[ldm.src_index] (8 contiguous elements,
                          16-byte aligned); lane (g = l / 4, t = l % 4) then holds of matrix i the elements at row g,
                          columns 2t and 2t + 1 (trans: rows 2t and 2t + 1, column g), stored at
                          ldm.dst[ldm.dst_off + 2 i] and + 1 (LOCAL): an mma fragment in one instruction where 8
                          loads of single elements would take eight. A source of f32 elements (TF32's A, not
                          transposed) is read as pairs of 16-bit ones: a row is 4 elements, and register i is the
                          element ldm.dst[ldm.dst_off + i]. The whole warp reaches it together */
  KG_IRS_PREFETCH,     /* a hint (C target): the cache line of prefetch.buf[prefetch.index] (an element of the
                          buffer) is brought towards the core for a write (lower/prefetch.c); values do not change */
  KG_IRS_TSTORE,       /* a tile stored transposed (lower/transpose.c, C target): for r, c < tstore.n (4, 8 or 16),
                          dst[dst_index + r + c dst_stride] = src[src_index + r src_ld + c], src a LOCAL f32 buffer
                          and dst an f32 one. The n rows of src, each a vector, become the n columns of dst, which
                          its n rows of contiguous elements are: in registers, by shuffles */
} kg_irstmt_kind;

struct kg_irstmt {
  kg_irstmt_kind kind;
  kg_pos pos;
  union {
    struct {
      kg_irstmt **items;
      int n, cap;
    } seq;
    struct {
      kg_irvar *var;
      kg_irexpr *extent; /* INT, invariant in the loop: a constant, or on the C target, where schedule/tighten.c
                            replaces a split's guard by a tighter bound, min(F, E - rest) written as an INT
                            SELECT; do not assume kg_ir_is_const holds */
      kg_loop_kind kind;
      kg_thread_tag tag;
      const char *loop_name;
      const char *stage_name;
      kg_irstmt *body;
      int pipeline; /* the schedule's `pipeline` depth (lower/pipeline.c rewrites the loop); 0: none */
    } loop;
    struct {
      kg_irexpr *cond;
      kg_irstmt *then, *otherwise;
    } cond;
    struct {
      kg_buffer *buf;
      kg_irexpr *index;
    } prefetch;
    struct {
      kg_buffer *buf;
      kg_irexpr *index, *value;
      int stream; /* a non-temporal store (the stage is streamed, C target): a hint, same meaning */
      int async;  /* CUDA: the copy of a global element (value a load of a parameter or temporary) into shared
                     memory may land any time up to the ASYNC_WAIT that covers its group (cp.async); a printer may
                     also store at once */
    } store;
    struct {
      kg_irvar *var;
      kg_irexpr *value;
    } let;
    struct {
      kg_buffer *buf;
      kg_irstmt *body;
    } alloc;
    struct {
      kg_buffer *buf;
      kg_reducer red;
      kg_thread_tag tag;
      int64_t extent;         /* extent of the reduction loop bound to tag (threads past it hold the identity) */
      const char *stage_name; /* for messages */
      const char *loop_name;
      kg_allreduce_how how;   /* CUDA, from the launch shape (lower/launch.c) */
      int64_t scratch;        /* the floats of shared memory it combines through (WARPS, SHARED), else 0 */
    } allreduce;
    const char *text;
    struct {
      int pending;
    } async_wait;
    struct {
      kg_buffer *a, *b, *c;
      kg_irexpr *a_off, *b_off; /* INT: where the fragments start in a and b (a warp tile's fragments share an array) */
      kg_irexpr *c_index[4];
      kg_dtype dtype;
      const char *stage_name; /* for messages and comments */
    } mma;
    struct {
      kg_buffer *src, *dst;
      kg_irexpr *src_index, *dst_off;
      int count, trans;
      const char *stage_name;
    } ldm;
    struct {
      kg_buffer *a, *b, *c;
      kg_irexpr *a_index, *b_index, *c_index; /* the elements at row 0, column 0, k 0 */
      kg_irexpr *a_row, *a_k, *b_k, *c_row;   /* strides, INT, invariant (constants, or the dynamic sizes'
                                                 expressions); along the columns b and c are contiguous, or b holds
                                                 pairs (b_pairs: b_k is then the stride of a pair of k) */
      int64_t rows, cols, k;
      int b_pairs;
      const char *stage_name;
    } bfdot;
    struct {
      kg_buffer *src, *dst;
      kg_irexpr *src_index, *dst_index; /* INT: the elements at r = 0, c = 0 */
      int64_t src_ld, dst_stride;       /* at least n: no two elements of a tile share a place */
      int n;
      const char *stage_name;
    } tstore;
  };
};

/* The launch shape of one CUDA kernel (one item of kg_lowered.body), computed by lower/launch.c. Per tag (blockIdx.x
 * ... threadIdx.z; the others stay 1), the launched extent is the largest extent of the loops bound to it. A
 * blockIdx loop may follow the dynamic sizes (never a threadIdx loop: blockDim is part of the compiled kernel); the
 * grid extent is then the largest of those expressions and the constant extents at launch. */
#define KG_LAUNCH_MAX_DYN 8 /* distinct dynamic extents bound to one block tag in one kernel */
#define KG_LAUNCH_MAX_THREADS 1024
/* The launch limits of every CUDA device kgen targets (sm_70 on), by tag. */
extern const int64_t kg_launch_max_ext[KG_THREAD_COUNT];
typedef struct kg_launch {
  /* 0 when some bound loop's extent is neither a constant nor (blockIdx only) a function of the dynamic sizes, or a
   * block tag has more than KG_LAUNCH_MAX_DYN of them: the shape is then unknown (the printer refuses the kernel)
   * and no guard is made */
  int ok;
  int64_t ext[KG_THREAD_COUNT];   /* the launched extent, with dynamic extents at the sizes' hi (1: none bound) */
  int64_t ext_c[KG_THREAD_COUNT]; /* the largest constant extent bound to the tag (1: none) */
  const kg_irexpr *dyn[KG_THREAD_COUNT][KG_LAUNCH_MAX_DYN]; /* the distinct dynamic extents, in program order */
  int ndyn[KG_THREAD_COUNT];
  int64_t dyn_lo[KG_THREAD_COUNT]; /* a tag with one dynamic extent: its value at the sizes' lo; else -1 */
  int min_blocks; /* the root stage's launch_bounds: blocks to keep resident per multiprocessor (0: none) */
} kg_launch;
/* Are l's extents within kg_launch_max_ext and its threads per block within KG_LAUNCH_MAX_THREADS? */
int kg_launch_within_limits(const kg_launch *l);

/* A lowered program: one function over the parameters. body is a SEQ whose items are the root stages' nests in
 * execution order (the CUDA printer makes one kernel of each); temps are global intermediates, which the
 * C printer allocates in the function and the CUDA runtime allocates between kernels. */
typedef struct kg_lowered {
  const char *name; /* the def's name */
  kg_target_kind target;
  /* Dynamic sizes (kg_program_set_dynamic), in the program's size order: the function's leading parameters,
   * printed as int64_t (C) or long long (CUDA) named size_vars[i]->name. size_ids[i] indexes prog->sizes;
   * [size_lo[i], size_hi[i]] is the range the code serves, which the printed function checks first (C: returns
   * -5, an exported header's KG_ERR_SIZE). Loop extents, guards, flat-index strides, the dyn_size of global
   * temporaries and values (a size used in an expression) may then mention these variables; every region
   * (shared, local, attached stage) still has a constant size. Ranges of loop variables whose extent follows a
   * size are taken at the size's hi. */
  kg_irvar **size_vars;
  int *size_ids;
  int64_t *size_lo, *size_hi;
  int64_t *size_value; /* the program's bound value of each (what measurement runs at, and features use) */
  int nsize_vars;
  kg_buffer **params;
  int nparams;
  kg_buffer **temps;
  int ntemps;
  kg_irstmt *body;
  int n_buffers, n_vars;
  /* CUDA: the launch shape of each kernel, launch[k] for item k of body (lower/launch.c); NULL on the C target */
  kg_launch *launch;
  int nlaunch;
} kg_lowered;

/* IR construction helpers (ir.c); every node from arena a. Constant folding happens in these constructors
 * (x + 0, x * 1, c1 op c2), so lowering gets simplified index arithmetic without a separate pass. */
kg_irexpr *kg_ir_int(kg_arena *a, int64_t v);
kg_irexpr *kg_ir_float(kg_arena *a, double v);
kg_irexpr *kg_ir_var(kg_arena *a, kg_irvar *v);
kg_irexpr *kg_ir_load(kg_arena *a, kg_buffer *b, kg_irexpr *index);
kg_irexpr *kg_ir_binary(kg_arena *a, kg_op op, kg_irexpr *x, kg_irexpr *y); /* type from operands and op */
kg_irexpr *kg_ir_unary(kg_arena *a, kg_op op, kg_irexpr *x);
kg_irexpr *kg_ir_call(kg_arena *a, kg_func fn, kg_irexpr **args, int n);
kg_irexpr *kg_ir_select(kg_arena *a, kg_irexpr *c, kg_irexpr *x, kg_irexpr *y);
kg_irexpr *kg_ir_cast_f32(kg_arena *a, kg_irexpr *x); /* no-op on F32 */
kg_irexpr *kg_ir_thread(kg_arena *a, kg_thread_tag tag);
kg_irstmt *kg_ir_seq(kg_arena *a);
void kg_ir_seq_push(kg_arena *a, kg_irstmt *seq, kg_irstmt *item); /* a NULL item is ignored */
kg_irstmt *kg_ir_for(kg_arena *a, kg_irvar *v, kg_irexpr *extent, kg_loop_kind kind, kg_thread_tag tag,
                     const char *loop_name, const char *stage_name, kg_irstmt *body);
kg_irstmt *kg_ir_if(kg_arena *a, kg_irexpr *cond, kg_irstmt *then, kg_irstmt *otherwise);
kg_irstmt *kg_ir_store(kg_arena *a, kg_buffer *b, kg_irexpr *index, kg_irexpr *value);
kg_irstmt *kg_ir_let(kg_arena *a, kg_irvar *v, kg_irexpr *value);
kg_irstmt *kg_ir_alloc(kg_arena *a, kg_buffer *b, kg_irstmt *body);
kg_irstmt *kg_ir_barrier(kg_arena *a);
kg_irstmt *kg_ir_allreduce(kg_arena *a, kg_buffer *b, kg_reducer red, kg_thread_tag tag, int64_t extent,
                           const char *stage_name, const char *loop_name);
kg_irstmt *kg_ir_comment(kg_arena *a, const char *text);
kg_irstmt *kg_ir_prefetch(kg_arena *a, kg_buffer *buf, kg_irexpr *index);
kg_irstmt *kg_ir_async_commit(kg_arena *a);
kg_irstmt *kg_ir_async_wait(kg_arena *a, int pending);
kg_irstmt *kg_ir_mma(kg_arena *a, kg_buffer *fa, kg_irexpr *a_off, kg_buffer *fb, kg_irexpr *b_off, kg_buffer *c,
                     kg_irexpr *const c_index[4], kg_dtype t,
                     const char *stage_name);
kg_irstmt *kg_ir_ldmatrix(kg_arena *a, kg_buffer *dst, kg_irexpr *dst_off, kg_buffer *src, kg_irexpr *src_index,
                          int count, int trans, const char *stage_name);
/* A KG_IRS_BFDOT with the fields of the struct (stage_name and the index expressions kept as given). */
kg_irstmt *kg_ir_bfdot(kg_arena *a, const kg_irstmt *fields);
kg_irstmt *kg_ir_tstore(kg_arena *a, kg_buffer *src, kg_irexpr *src_index, int64_t src_ld, kg_buffer *dst,
                        kg_irexpr *dst_index, int64_t dst_stride, int n, const char *stage_name);
int kg_ir_is_const(const kg_irexpr *e, int64_t *v);
/* Whether s holds a loop (through sequences, both branches of an IF and allocation bodies). */
int kg_ir_contains_loop(const kg_irstmt *s);
/* Whether s or a statement inside it (through sequences, loop bodies, both branches of an IF and allocation
 * bodies) satisfies is; 0 for a NULL s. */
int kg_ir_contains(const kg_irstmt *s, int (*is)(const kg_irstmt *));
/* The same with a context passed to is. */
int kg_ir_contains_ctx(const kg_irstmt *s, int (*is)(const kg_irstmt *, const void *), const void *ctx);
/* Whether s holds a barrier or a cross-thread reduction (which has barriers), looking as kg_ir_contains_loop does. */
int kg_ir_contains_sync(const kg_irstmt *s);
/* The children of an expression node, as the addresses of the fields that hold them (so that a pass can replace
 * them), in evaluation order: up to KG_IR_MAX_CHILDREN; returns their number (0 for constants and variables). */
#define KG_IR_MAX_CHILDREN 3
int kg_ir_children(kg_irexpr *e, kg_irexpr **kids[KG_IR_MAX_CHILDREN]);
/* Does e load any element (kg_ir_has_load), or an element of b (kg_ir_reads; NULL e: no)? */
int kg_ir_has_load(const kg_irexpr *e);
int kg_ir_reads(const kg_irexpr *e, const kg_buffer *b);
/* Sets mark[v->id] for every variable v (with id < n) that e uses. */
void kg_ir_mark_vars(const kg_irexpr *e, unsigned char *mark, int n);
/* Does e use a variable v (with id < n) whose mark[v->id] is set? */
int kg_ir_uses_marked(const kg_irexpr *e, const unsigned char *mark, int n);
/* Is s a launch guard (lower/launch.c): an IF without else around one loop bound to tag t, whose condition is
 * THREAD(t) < the loop's extent? Threads past the loop's extent skip it, when the launch is wider. */
int kg_ir_is_launch_guard(const kg_irstmt *s);
/* The integer minimum: select(a < b, a, b) over the same a and b nodes, which printers show as min(a, b). */
kg_irexpr *kg_ir_min_int(kg_arena *a, kg_irexpr *x, kg_irexpr *y);
int kg_ir_is_min_int(const kg_irexpr *e);
/* The value of an INT expression over constants and the dynamic-size variables of f, at their bound values
 * (f->size_value). 0 and *v set, or -1 when it uses another variable or divides by zero. */
int kg_ir_eval_sizes(const kg_lowered *f, const kg_irexpr *e, int64_t *v);
/* A constant upper bound of an INT expression that is a constant or a minimum with a constant in it. */
int kg_ir_const_upper(const kg_irexpr *e, int64_t *u);

/* Macro names the host headers of generated code define (the C printer's includes and the CUDA emulator's
 * header), sorted in strcmp order; generated at build time (build/gen/reserved_macros.c). Lowering never names a
 * buffer or variable after one of them. */
extern const char *const kg_reserved_macros[];
extern const int kg_nreserved_macros;

/* The IR verifier (verify.c): checks the invariants lowering guarantees and the printers rely on (scopes of
 * variables and buffers, types, extents, storage scopes legal for the target, barriers every thread reaches; see
 * the file comment). 0 when they hold, else -1 with a message in err naming the node and its problem. */
int kg_ir_verify(const kg_lowered *f, char *err, size_t errlen);

/* Pseudo-code dump of the IR (`kgen lower --dump ir`). */
void kg_ir_print(struct kg_strbuf *b, const kg_lowered *f);

/* Lowering (lower.c): builds the loop nests of every root stage with the stages computed at their loops,
 * infers the regions those stages must compute, inserts guards for non-dividing splits and out-of-range region
 * points, inlines compute_inline stages, and folds constants. Returns NULL with a message in err when the
 * schedule cannot be lowered for this target (e.g. a bound loop on the C target). */
kg_lowered *kg_lower(const kg_schedule *s, kg_target_kind target, kg_arena *a, char *err, size_t errlen);
#endif
