/* The tensor-expression language: AST, checked program and its stages.
 *
 * Pipeline inside te/:  lex.c (tokens) -> parse.c (AST of every def) -> check.c (names resolved, sizes bound,
 * shapes inferred, bounds proved, types) -> stages.c (one stage per defined tensor and per nested reduction).
 * eval.c interprets the checked AST directly (the oracle) and never looks at stages.
 *
 * Memory: everything hangs off one kg_arena owned by kg_program; kg_program_free releases it at once. */
#ifndef KG_TE_H
#define KG_TE_H
#include <stdint.h>
#include "../base/arena.h"
#include "../base/diag.h"

#define KG_MAX_DIMS 8

typedef struct kg_expr kg_expr;
typedef struct kg_tensor kg_tensor;
typedef struct kg_ivar kg_ivar;
typedef struct kg_stage kg_stage;

/* Operators, in one list so the enum and the printable table cannot drift apart. */
#define KG_OPS(X)                                                                                           \
  X(ADD, "+") X(SUB, "-") X(MUL, "*") X(DIV, "/") X(MOD, "%") X(LT, "<") X(LE, "<=") X(GT, ">")              \
  X(GE, ">=") X(EQ, "==") X(NE, "!=") X(AND, "&&") X(OR, "||") X(NEG, "-") X(NOT, "!")
typedef enum {
#define X(n, s) KG_OP_##n,
  KG_OPS(X)
#undef X
  KG_OP_COUNT
} kg_op;
extern const char *const kg_op_names[KG_OP_COUNT];

/* Functions; arity in the table (select(cond, a, b) is 3, pow/max/min 2, the rest 1). f32(x), f16(x), bf16(x) are
 * the explicit conversions: x rounded to the type (to nearest, ties to even), the value then used as an f32 (f32(x)
 * is x: values are f32 already). */
#define KG_FUNCS(X)                                                                                         \
  X(EXP, "exp", 1) X(LOG, "log", 1) X(SQRT, "sqrt", 1) X(RSQRT, "rsqrt", 1) X(TANH, "tanh", 1)               \
  X(ERF, "erf", 1) X(ABS, "abs", 1) X(SIGMOID, "sigmoid", 1) X(POW, "pow", 2) X(MAX, "max", 2)               \
  X(MIN, "min", 2) X(SELECT, "select", 3) X(F32, "f32", 1) X(F16, "f16", 1) X(BF16, "bf16", 1)
typedef enum {
#define X(n, s, a) KG_FN_##n,
  KG_FUNCS(X)
#undef X
  KG_FN_COUNT
} kg_func;
extern const char *const kg_func_names[KG_FN_COUNT];
extern const int kg_func_arity[KG_FN_COUNT];

#define KG_REDUCERS(X) X(SUM, "sum") X(MAX, "max") X(MIN, "min") X(PROD, "prod")
typedef enum {
  KG_RED_NONE,
#define X(n, s) KG_RED_##n,
  KG_REDUCERS(X)
#undef X
  KG_RED_COUNT
} kg_reducer;
extern const char *const kg_reducer_names[KG_RED_COUNT]; /* [KG_RED_NONE] = "none" */
/* Identity element of a reducer (0, -inf, +inf, 1). */
double kg_reducer_identity(kg_reducer r);

/* Element types of tensors. Arithmetic is f32 whatever the operands' storage: loading an f16 or bf16 element widens
 * it exactly, storing a value into an f16 or bf16 tensor rounds it to nearest even, and a reduction into such a
 * tensor accumulates in f32 and rounds once (stages.c makes it a stage of its own). */
#define KG_DTYPES(X) X(F32, "f32", 4) X(F16, "f16", 2) X(BF16, "bf16", 2)
typedef enum {
#define X(n, s, sz) KG_DT_##n,
  KG_DTYPES(X)
#undef X
  KG_DT_COUNT
} kg_dtype;
extern const char *const kg_dtype_names[KG_DT_COUNT];
extern const int kg_dtype_size[KG_DT_COUNT]; /* bytes of an element */
/* v rounded to the type (the reference's rounding on a store: from double, once); v itself for f32, which the
 * reference keeps in double. */
double kg_dtype_round(kg_dtype t, double v);

/* Value types after checking. INT: integer arithmetic over index variables, size variables and integer
 * literals (index expressions, and comparisons of them); F32: float values; BOOL: comparisons and logic. An INT
 * expression used where a value is wanted converts to f32 (the checker marks it by the parent's type). */
typedef enum { KG_TY_UNKNOWN, KG_TY_INT, KG_TY_F32, KG_TY_BOOL } kg_type;

typedef enum {
  KG_EXPR_NUM,    /* num: a literal; num.is_int for integer literals */
  KG_EXPR_NAME,   /* var.name: unresolved name (parser output only; the checker rewrites it) */
  KG_EXPR_IVAR,   /* var.iv: an index or reduction variable */
  KG_EXPR_SIZE,   /* var.size: a size variable (index into kg_program.sizes) */
  KG_EXPR_READ,   /* read: tensor read T[e, ...] */
  KG_EXPR_UNARY,  /* op: NEG or NOT, operand a */
  KG_EXPR_BINARY, /* op: a op b */
  KG_EXPR_CALL,   /* call: FUNC(args) */
  KG_EXPR_REDUCE, /* reduce: REDUCER[rvars](body) -- in the checked AST; stages contain none */
} kg_expr_kind;

struct kg_expr {
  kg_expr_kind kind;
  kg_pos pos;
  kg_type ty;
  union {
    struct {
      double f;
      int64_t i;
      int is_int;
    } num;
    struct {
      const char *name;
      kg_ivar *iv; /* IVAR */
      int size;    /* SIZE */
    } var;
    struct {
      const char *name;
      kg_tensor *tensor; /* resolved by the checker */
      kg_expr **idx;
      int n;
    } read;
    struct {
      kg_op op;
      kg_expr *a, *b; /* b is NULL for unary */
    } op;
    struct {
      kg_func fn;
      kg_expr **args;
      int n;
    } call;
    struct {
      kg_reducer red;
      kg_ivar **rv; /* the reduction variables, with their ranges after checking */
      int nrv;
      kg_expr *body;
      kg_tensor *stage_tensor; /* set by stages.c: the tensor the reduction was extracted into */
    } reduce;
  };
};

/* An index variable: a left-hand index of a statement or a reduction variable. Each is its own object; ids are
 * unique in a program (0..n_ivars-1), so evaluators and lowering can keep values in arrays. */
struct kg_ivar {
  const char *name;
  kg_pos pos;
  int id;
  int is_reduce;
  int64_t lo, extent;      /* range [lo, lo+extent) after checking (lo is 0 for left-hand indices) */
  kg_expr *lo_expr, *hi_expr; /* explicit "in lo..hi" (size expressions), else NULL */
  int dyn;                 /* 1 + index into kg_program.sizes of the dynamic size this variable's extent equals
                              (lo is then 0), or 0 (static): see kg_program_set_dynamic */
};

typedef enum { KG_TENSOR_INPUT, KG_TENSOR_OUTPUT, KG_TENSOR_TEMP } kg_tensor_kind;

struct kg_tensor {
  const char *name;
  kg_pos pos;
  int id;
  kg_tensor_kind kind;
  kg_dtype dtype; /* element type in memory (extracted reductions: f32) */
  int ndim;
  int64_t shape[KG_MAX_DIMS];      /* after binding the size variables */
  int dyn[KG_MAX_DIMS];            /* per dimension: 1 + index into kg_program.sizes of the dynamic size it
                                      equals, or 0 (static); shape[d] then holds the size's bound value */
  kg_expr *shape_expr[KG_MAX_DIMS]; /* as written (NULL where inferred) */
  kg_stage *stage;                 /* producer; NULL for inputs */
  struct kg_stmt *stmt;            /* defining statement; NULL for inputs and extracted reductions */
};

typedef struct kg_stmt {
  kg_pos pos;
  kg_tensor *lhs;
  kg_ivar **idx; /* left-hand indices, lhs->ndim of them */
  int nidx;
  kg_expr *rhs; /* may contain REDUCE nodes anywhere */
  int has_shape; /* explicit ": f32[...]" (the type is lhs->dtype; intermediates without one are f32) */
} kg_stmt;

/* A stage computes one tensor: out[ax...] = red[rax...](body), or out[ax...] = body when red is NONE.
 * The body contains no REDUCE node: nested reductions became stages of their own, read like any tensor.
 * ax[d] ranges over out->shape[d]; rax[r] over [lo, lo+extent). Stages are listed in a valid execution order
 * (producers first). */
struct kg_stage {
  const char *name; /* = out->name */
  int id;
  kg_tensor *out;
  kg_ivar **ax;
  int nax;
  kg_ivar **rax;
  int nrax;
  kg_reducer red;
  kg_expr *body;
};

typedef struct kg_size_var {
  const char *name;
  kg_pos pos;
  int64_t value;
  int bound; /* given by -D */
  /* Dynamic (kg_program_set_dynamic): generated code takes the size as a run-time parameter and accepts every
   * value in [lo, hi]; value is the binding that schedules are built on and the reference evaluates. */
  int dynamic;
  int64_t lo, hi;
} kg_size_var;

typedef struct kg_def {
  const char *name;
  kg_pos pos;
  struct kg_param *inputs, *outputs;
  int ninputs, noutputs;
  kg_stmt **stmts;
  int nstmts;
} kg_def;

typedef struct kg_param {
  const char *name;
  kg_pos pos;
  kg_dtype dtype;
  int ndim;
  kg_expr *dims[KG_MAX_DIMS]; /* size expressions */
} kg_param;

/* A parsed file: every def, unchecked. */
typedef struct kg_module {
  kg_def **defs;
  int ndefs;
} kg_module;

/* A checked program: one def with its sizes bound. */
typedef struct kg_program {
  kg_arena arena;
  kg_source src;   /* owns a copy of the text */
  kg_module *module;
  kg_def *def;
  kg_size_var *sizes;
  int nsizes;
  kg_tensor **tensors; /* every tensor: inputs (in order), outputs (in order), then intermediates in
                          definition order, then extracted reductions */
  int ntensors;
  kg_tensor **inputs, **outputs;
  int ninputs, noutputs;
  kg_stage **stages; /* execution order */
  int nstages;
  int n_ivars;
  int io_retyped;      /* kg_program_set_io_dtype made every input and output io_dtype */
  kg_dtype io_dtype;
  /* `--tf32`: a sum of products of two f32 reads may run on the tensor cores as TF32 (operands rounded to 10
   * mantissa bits, f32 accumulation), as PyTorch's allow_tf32. Off by default: such a kernel is no longer computed
   * in f32, so the workload is another one (its log hash differs) and verification allows the operands' rounding */
  int tf32;
} kg_program;

/* A size binding from the command line (-D NAME=VALUE). */
typedef struct kg_binding {
  const char *name;
  int64_t value;
} kg_binding;

/* Parses and checks src (copied). def_name picks a def (NULL: the first). On a user error returns NULL and
 * fills *diag with the formatted message (allocated in diag_arena, which the caller owns). */
kg_program *kg_program_load(const char *file_name, const char *text, size_t len, const char *def_name,
                            const kg_binding *bindings, int nbindings, kg_diag *diag, kg_arena *diag_arena);
void kg_program_free(kg_program *p);

/* A def may make at most this many stages (its statements and the reductions nested in them): the C and CUDA
 * compilers take superlinear time in a kernel's size (500 stages: 10 s of gcc, 1000: minutes), and every stage
 * costs schedule steps, which a trace caps (KG_TRACE_MAX_STEPS). Fused graphs of real models have tens. */
#define KG_MAX_STAGES 256

/* Stages (stages.c): fills p->stages; called by kg_program_load after checking. */
void kg_program_build_stages(kg_program *p);

/* Parse only (parse.c). */
kg_module *kg_parse_module(kg_arena *a, const kg_source *src, kg_diag *diag);
/* Check one def (check.c): resolves names, binds sizes, infers shapes, proves bounds. Returns 0 or -1. */
int kg_check_def(kg_program *p, const kg_binding *bindings, int nbindings, kg_diag *diag, kg_arena *diag_arena);

/* A size to keep symbolic (`--dynamic NAME[=LO..HI]`); lo = hi = 0 asks for the default range. */
typedef struct kg_dynamic_size {
  const char *name;
  int64_t lo, hi;
} kg_dynamic_size;
/* Marks sizes of a loaded program dynamic (te/dynamic.c). A dynamic size must enter the program only as a whole
 * dimension of tensors, a whole reduction range [0, SIZE), or as a value in expressions: the program is checked
 * again at other values of each size, and every tensor dimension and variable range must either not change or
 * equal the size. Then lowering can keep it symbolic and one kernel serves every value. The default range is
 * [1, the largest value that keeps every tensor under 2^31 elements] (several default ranges grow together); an
 * explicit one must contain the bound value and lie inside that. The call states the whole set: sizes it does not
 * name are static. Returns 0, or -1 with a user error in diag (unknown size, one named twice, a size used inside an
 * expression such as H-2, a bad range), leaving every size static. */
int kg_program_set_dynamic(kg_program *p, const kg_dynamic_size *dyn, int ndyn, kg_diag *diag,
                           kg_arena *diag_arena);
/* p checked again with size k bound to value, its dynamic sizes kept dynamic with the same ranges (the program a
 * dynamic kernel is measured on at another value). NULL with a user error in diag. */
kg_program *kg_program_rebind(const kg_program *p, int k, int64_t value, kg_diag *diag, kg_arena *diag_arena);
/* Makes every input and output of p type t (`--dtype`: a library workload run in f16 or bf16), as if its signature
 * said so; intermediates keep their declared types. The stages are built again (a reduction into a narrow output
 * becomes an f32 stage of its own, stages.c). Call before kg_program_set_dynamic. Returns 0, or -1 with a user
 * error in diag when the rebuilt program has too many stages (then p can only be freed). */
int kg_program_set_io_dtype(kg_program *p, kg_dtype t, kg_diag *diag, kg_arena *diag_arena);
/* Number of dynamic sizes, and whether any. */
int kg_program_ndynamic(const kg_program *p);

/* Number of elements of a tensor. */
int64_t kg_tensor_numel(const kg_tensor *t);
kg_tensor *kg_program_find_tensor(const kg_program *p, const char *name);
/* Whether e mentions iv anywhere (indices, arguments, nested reduction bodies) (program.c). */
int kg_expr_uses_ivar(const kg_expr *e, const kg_ivar *iv);
/* The children of e in evaluation order (operands, a read's indices, a call's arguments, a reduction's body):
 * kg_expr_nchildren of them, the i-th at *kg_expr_child(e, i) (an address, so that a rewriter can replace it).
 * A reduction's variable ranges are not children: they belong to its variables. */
int kg_expr_nchildren(const kg_expr *e);
kg_expr **kg_expr_child(kg_expr *e, int i);

/* Canonical text of the checked program (used by `kgen check` and for workload identity later): one line per
 * stage, names and literals normalised, no comments or whitespace variation. Caller frees. */
char *kg_program_canonical(const kg_program *p);
/* Prints an expression in the language's syntax (stages' bodies, dumps). */
struct kg_strbuf;
void kg_expr_print(struct kg_strbuf *b, const kg_program *p, const kg_expr *e);

/* The reference evaluator (eval.c): interprets the checked AST (p->def->stmts), accumulating in double.
 * Values stored into f16/bf16 tensors are rounded to their type (kg_dtype_round), f32 ones are kept in double.
 * inputs[i] has kg_tensor_numel(p->inputs[i]) floats, each a value of the input's type (the caller rounds); outputs[i] is filled for p->outputs[i] (as double).
 * Shares no code with scheduling, lowering or printing. Returns 0, or -1 when a read fell out of bounds (the
 * checker proves that impossible, so -1 is a kgen bug; such reads yield NaN instead of touching memory), or -2
 * when the intermediates could not be allocated (outputs then undefined). */
int kg_eval_reference(const kg_program *p, const float *const *inputs, double *const *outputs);
/* The workload's arithmetic (f32 operations counted from the stages' bodies times their domains, a reduction's
 * combine included; calls count one each) and compulsory traffic (inputs read once, outputs written once). */
double kg_program_flops(const kg_program *p);
double kg_program_bytes(const kg_program *p);
#endif
