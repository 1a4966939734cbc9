/* The front end: parse + check + stages on the language's examples, shape inference, and the checker's errors
 * (line, column and message asserted for each malformed program). */
#include <stdint.h>
#include "../base/strbuf.h"
#include "../te/te.h"
#include "testutil.h"

static const char *MATMUL =
    "def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {\n"
    "  C[i, j] = sum[k](A[i, k] * B[k, j])\n"
    "}\n";
static const char *SOFTMAX =
    "def softmax(X: f32[N, D]) -> (Y: f32[N, D]) {\n"
    "  m[i] = max[j](X[i, j])\n"
    "  e[i, j] = exp(X[i, j] - m[i])\n"
    "  Y[i, j] = e[i, j] / sum[j2](e[i, j2])\n"
    "}\n";
static const char *CONV2D =
    "def conv2d(X: f32[N, C, H, W], K: f32[F, C, 3, 3]) -> (Y: f32[N, F, H, W]) {\n"
    "  P[n, c, h, w] : f32[N, C, H + 2, W + 2] = select(h >= 1 && h <= H && w >= 1 && w <= W, X[n, c, h - 1, w - 1], 0.0)\n"
    "  Y[n, f, y, x] = sum[c, r, s](P[n, c, y + r, x + s] * K[f, c, r, s])\n"
    "}\n";

static kg_arena diag_arena;

/* binds: "M=4 N=5" (space separated). */
static int parse_binds(const char *binds, kg_binding *b, char names[][32]) {
  int n = 0;
  const char *s = binds ? binds : "";
  while (*s) {
    while (*s == ' ') s++;
    if (!*s) break;
    int k = 0;
    while (*s && *s != '=' && k < 31) names[n][k++] = *s++;
    names[n][k] = 0;
    if (*s == '=') s++;
    b[n].name = names[n];
    b[n].value = strtoll(s, (char **)&s, 10);
    n++;
  }
  return n;
}

static kg_program *load_len(const char *src, size_t len, const char *def, const char *binds, kg_diag *d) {
  kg_binding b[16];
  char names[16][32];
  int nb = parse_binds(binds, b, names);
  memset(d, 0, sizeof *d);
  return kg_program_load("t.te", src, len, def, b, nb, d, &diag_arena);
}

static kg_program *load(const char *src, const char *def, const char *binds, kg_diag *d) {
  return load_len(src, strlen(src), def, binds, d);
}

#define EXPECT_ERROR_LEN(src, len, binds, line_, col_, substr)                                                \
  do {                                                                                                     \
    kg_diag d_;                                                                                            \
    kg_program *p_ = load_len((src), (len), NULL, (binds), &d_);                                           \
    CHECKF(p_ == NULL, "expected an error: %s", (substr));                                                 \
    kg_program_free(p_);                                                                                   \
    CHECKF(d_.failed && d_.pos.line == (line_) && d_.pos.col == (col_), "%s: at %d:%d, want %d:%d (%s)", (substr), \
           d_.pos.line, d_.pos.col, (line_), (col_), d_.text ? d_.text : "");                              \
    CHECK_STR_CONTAINS(d_.text, (substr));                                                                 \
  } while (0)
#define EXPECT_ERROR(src, binds, line_, col_, substr) EXPECT_ERROR_LEN(src, strlen(src), binds, line_, col_, substr)

static void test_examples(void) {
  kg_diag d;
  kg_program *p = load(MATMUL, NULL, "M=64 N=32 K=128", &d);
  CHECKF(p != NULL, "%s", d.msg);
  if (p) {
    CHECK(p->ninputs == 2 && p->noutputs == 1 && p->ntensors == 3);
    CHECK(p->outputs[0]->shape[0] == 64 && p->outputs[0]->shape[1] == 32);
    CHECK(kg_tensor_numel(p->inputs[0]) == 64 * 128);
    CHECK(p->nstages == 1);
    kg_stage *st = p->stages[0];
    CHECK(st->red == KG_RED_SUM && st->nrax == 1 && st->rax[0]->extent == 128 && st->nax == 2);
    CHECK(st->out == p->outputs[0] && p->outputs[0]->stage == st);
    CHECK(st->body->kind == KG_EXPR_BINARY && st->body->op.op == KG_OP_MUL);
    CHECK(st->body != p->def->stmts[0]->rhs->reduce.body); /* a copy */
    CHECK(kg_program_find_tensor(p, "B") == p->inputs[1] && kg_program_find_tensor(p, "Z") == NULL);
    char *can = kg_program_canonical(p);
    CHECK_STR_CONTAINS(can, "output C[i, j] : f32[64, 32] = sum[k in 0..128](A[i, k] * B[k, j])");
    CHECK_STR_CONTAINS(can, "input A : f32[64, 128]");
    free(can);
  }
  kg_program_free(p);

  p = load(SOFTMAX, NULL, "N=4 D=8", &d);
  CHECKF(p != NULL, "%s", d.msg);
  if (p) {
    CHECK(p->nstages == 4);
    const char *want[] = {"m", "e", "Y.r0", "Y"};
    for (int i = 0; i < 4 && i < p->nstages; i++) CHECKF(strcmp(p->stages[i]->name, want[i]) == 0, "stage %d is %s", i, p->stages[i]->name);
    kg_tensor *m = kg_program_find_tensor(p, "m"), *r0 = kg_program_find_tensor(p, "Y.r0");
    CHECK(m && m->ndim == 1 && m->shape[0] == 4 && m->kind == KG_TENSOR_TEMP);
    CHECK(r0 && r0->ndim == 1 && r0->shape[0] == 4 && r0->stmt == NULL && r0->id == p->ntensors - 1);
    kg_tensor *e = kg_program_find_tensor(p, "e");
    CHECK(e && e->shape[0] == 4 && e->shape[1] == 8);
    if (p->nstages == 4) {
      kg_stage *y = p->stages[3], *rs = p->stages[2];
      CHECK(y->red == KG_RED_NONE && y->body->kind == KG_EXPR_BINARY && y->body->op.b->kind == KG_EXPR_READ &&
            y->body->op.b->read.tensor == r0);
      CHECK(rs->red == KG_RED_SUM && rs->nax == 1 && rs->nrax == 1 && rs->rax[0]->extent == 8);
      CHECK(rs->ax[0] != y->ax[0] && rs->ax[0]->id != y->ax[0]->id && rs->ax[0]->id < p->n_ivars);
      CHECK(rs->ax[0]->extent == 4 && strcmp(rs->ax[0]->name, "i") == 0);
      /* The checked AST is untouched (the evaluator interprets it), apart from stage_tensor. */
      kg_expr *rhs = p->def->stmts[2]->rhs;
      CHECK(rhs->kind == KG_EXPR_BINARY && rhs->op.b->kind == KG_EXPR_REDUCE && rhs->op.b->reduce.stage_tensor == r0);
      CHECK(p->def->stmts[0]->rhs->reduce.stage_tensor == m);
    }
    /* Ivar ids are unique, 0..n_ivars-1. */
    int seen[64] = {0};
    for (int s = 0; s < p->nstages; s++) {
      for (int i = 0; i < p->stages[s]->nax; i++) seen[p->stages[s]->ax[i]->id]++;
      for (int i = 0; i < p->stages[s]->nrax; i++) seen[p->stages[s]->rax[i]->id]++;
    }
    int dup = 0;
    for (int i = 0; i < 64; i++) dup |= seen[i] > 1;
    CHECK(!dup && p->n_ivars == 8); /* i, j (m); i, j (e); i, j, j2 (Y); fresh i (Y.r0) */
  }
  kg_program_free(p);

  p = load(CONV2D, NULL, "N=2 C=3 H=32 W=30 F=8", &d);
  CHECKF(p != NULL, "%s", d.msg);
  if (p) {
    kg_tensor *pt = kg_program_find_tensor(p, "P"), *y = p->outputs[0];
    CHECK(pt && pt->shape[0] == 2 && pt->shape[1] == 3 && pt->shape[2] == 34 && pt->shape[3] == 32);
    CHECK(y->shape[1] == 8 && y->shape[2] == 32 && y->shape[3] == 30);
    CHECK(p->nstages == 2 && p->stages[1]->nrax == 3 && p->stages[1]->rax[1]->extent == 3);
  }
  kg_program_free(p);

  /* The same three defs in one file: --def picks. */
  char all[4096];
  snprintf(all, sizeof all, "%s%s%s", MATMUL, SOFTMAX, CONV2D);
  p = load(all, "softmax", "N=4 D=8", &d);
  CHECKF(p && strcmp(p->def->name, "softmax") == 0, "%s", d.msg);
  kg_program_free(p);
  p = load(all, NULL, "M=2 N=3 K=4", &d);
  CHECKF(p && strcmp(p->def->name, "matmul") == 0, "%s", d.msg);
  kg_program_free(p);
  p = load(all, "nope", "N=4 D=8", &d);
  CHECK(!p);
  CHECK_STR_CONTAINS(d.text, "no def named 'nope'");
}

static void test_canonical_ignores_layout(void) {
  const char *b = "# matmul, spelled differently\n"
                  "def matmul(A:f32[M,K],B:f32[K,N])->(C:f32[M,N]){C[i,j]=sum[k]((A[i,k])*B[k,j]);}  # done\n";
  kg_diag d;
  kg_program *p1 = load(MATMUL, NULL, "M=8 N=8 K=8", &d), *p2 = load(b, NULL, "M=8 N=8 K=8", &d);
  CHECK(p1 && p2);
  if (p1 && p2) {
    char *c1 = kg_program_canonical(p1), *c2 = kg_program_canonical(p2);
    CHECKF(strcmp(c1, c2) == 0, "\n%s---\n%s", c1, c2);
    free(c1);
    free(c2);
  }
  kg_program_free(p1);
  kg_program_free(p2);
}

static void test_inference(void) {
  kg_diag d;
  /* TC's rule: the minimum over the bare uses. */
  kg_program *p = load("def f(A: f32[N], B: f32[M]) -> (Y: f32[M]) {\n  T[i] = A[i] + B[i]\n  Y[i] = T[i]\n}\n", NULL,
                       "N=5 M=3", &d);
  CHECKF(p != NULL, "%s", d.msg);
  if (p) CHECK(kg_program_find_tensor(p, "T")->shape[0] == 3);
  kg_program_free(p);
  p = load("def f(A: f32[N], B: f32[M]) -> (Y: f32[N, M]) {\n  T[i, j] = A[i] * B[j]\n  Y[i, j] = T[i, j]\n}\n", NULL,
           "N=5 M=3", &d);
  CHECKF(p != NULL, "%s", d.msg);
  if (p) {
    kg_tensor *t = kg_program_find_tensor(p, "T");
    CHECK(t->shape[0] == 5 && t->shape[1] == 3);
  }
  kg_program_free(p);
  /* B[i+1] is not a bare use: i ranges over N (from A), and then B[i+1] cannot be proved in bounds. */
  EXPECT_ERROR("def f(A: f32[N], B: f32[N]) -> (Y: f32[N]) {\n  T[i] = A[i] + B[i+1]\n  Y[i] = T[i]\n}\n", "N=6",
               2, 17, "read B[i + 1] may be out of bounds: index 0 ranges over [1, 6] but B has 6 elements in dimension 0");
  /* Padding written with offsets narrows too; a reduction with an explicit range and lo != 0 extracts right. */
  p = load("def f(X: f32[H], A: f32[H, H]) -> (Y: f32[H]) {\n"
           "  Y[h] = select(h - 1 >= 0 && h + 1 < H, X[h - 1] + X[h + 1], 0.0) + 2 * sum[k in 1..H](A[h, k] * sum[j](A[k - 1, j]))\n"
           "}\n",
           NULL, "H=5", &d);
  CHECKF(p != NULL, "%s", d.msg);
  if (p) {
    CHECK(p->nstages == 3);
    kg_tensor *r0 = kg_program_find_tensor(p, "Y.r0"), *r1 = kg_program_find_tensor(p, "Y.r1");
    CHECK(r0 && r0->ndim == 1 && r0->shape[0] == 4); /* sum[j] depends on k (1..5): fresh k in 0..4 */
    CHECK(r1 && r1->ndim == 1 && r1->shape[0] == 5);
    kg_strbuf b;
    kg_strbuf_init(&b);
    if (r0) kg_expr_print(&b, p, r0->stage->body);
    CHECKF(b.s && strcmp(b.s, "A[k + 1 - 1, j]") == 0, "%s", b.s ? b.s : "");
    kg_strbuf_free(&b);
    /* Types: 2 * sum is f32, the index h - 1 is int. */
    kg_expr *rhs = p->def->stmts[0]->rhs;
    CHECK(rhs->ty == KG_TY_F32 && rhs->op.a->call.args[0]->ty == KG_TY_BOOL);
    CHECK(rhs->op.a->call.args[1]->op.a->read.idx[0]->ty == KG_TY_INT);
  }
  kg_program_free(p);
  /* Integer division is integer only inside indices. */
  p = load("def f(A: f32[N]) -> (Y: f32[N]) { Y[i] = A[i / 2] + 1 / 2 }", NULL, "N=4", &d);
  CHECKF(p != NULL, "%s", d.msg);
  if (p) {
    kg_expr *rhs = p->def->stmts[0]->rhs;
    CHECK(rhs->op.a->read.idx[0]->ty == KG_TY_INT && rhs->op.b->ty == KG_TY_F32 && rhs->op.b->op.a->ty == KG_TY_INT);
  }
  kg_program_free(p);
  /* Index / and % round toward minus infinity (as the reference evaluator computes them): (i - 4) % 6 wraps. */
  p = load("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[(i - 4) % 6] + X[(i - 1) / 2 + 1] + X[(i + N - 1) % N] }", NULL,
           "N=6", &d);
  CHECKF(p != NULL, "%s", d.msg);
  kg_program_free(p);
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[(i + 6) % 12] }", "N=6", 1, 42,
               "index 0 ranges over [6, 11] but X has 6 elements");
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[(i - 1) / 2] }", "N=6", 1, 42, "index 0 ranges over [-1, 2]");
  /* A nested reduction is a stage computed everywhere: an enclosing select does not narrow its reads... */
  EXPECT_ERROR("def f(X: f32[H, K]) -> (Y: f32[H]) { Y[h] = select(h >= 1, sum[k](X[h - 1, k]), 0.0) }", "H=4 K=3", 1, 67,
               "index 0 ranges over [-1, 2] but X has 4 elements in dimension 0 (a reduction inside select");
  /* ...but a select inside it does, and so does one around a top-level reduction's body. */
  p = load("def f(X: f32[H, K]) -> (Y: f32[H]) { Y[h] = 2 * sum[k](select(h >= 1, X[h - 1, k], 0.0)) }", NULL, "H=4 K=3", &d);
  CHECKF(p != NULL, "%s", d.msg);
  kg_program_free(p);
  /* A size variable used only as a value is bound by -D. */
  p = load("def f(A: f32[N]) -> (Y: f32[N]) { Y[i] = A[i] * ALPHA + i }", NULL, "N=4 ALPHA=3", &d);
  CHECKF(p != NULL && p->nsizes == 2, "%s", d.msg);
  kg_program_free(p);
}

static void test_errors(void) {
  const char *H1 = "def f(A: f32[N]) -> (T: f32[N]) {\n";
  char src[1024];
#define BODY(body) (snprintf(src, sizeof src, "%s%s\n}\n", H1, body), src)
  EXPECT_ERROR(BODY("  T[i] = A[j]"), "N=4", 2, 12, "unknown name 'j'");
  EXPECT_ERROR(BODY("  T[i] = B[i]"), "N=4", 2, 10, "unknown tensor 'B'");
  EXPECT_ERROR(BODY("  T[i] = A[i]\n  T[i] = A[i]"), "N=4", 3, 3, "tensor 'T' is defined twice");
  EXPECT_ERROR(BODY("  T[i] = A[i, 0]"), "N=4", 2, 10, "'A' has 1 dimension but is read with 2 indices");
  EXPECT_ERROR(BODY("  T[i] = A[i]"), "", 1, 14, "size variable 'N' is not bound (pass -D N=VALUE)");
  EXPECT_ERROR(BODY("  T[i] = A[i]"), "N=4 Q=3", 0, 0, "no size variable 'Q'");
  EXPECT_ERROR("def f(A: f64[N]) -> (T: f32[N]) { T[i] = A[i] }", "N=4", 1, 10,
               "dtype f64 is not supported (tensors are f32, f16 or bf16)");
  EXPECT_ERROR(BODY("  T[i] = A[i] > 0.0"), "N=4", 2, 15, "a comparison is not a value; use select(c, 1.0, 0.0)");
  EXPECT_ERROR(BODY("  T[i] = A[i * 1.5]"), "N=4", 2, 14, "index 0 of 'A' is not an integer expression");
  EXPECT_ERROR("def f(A: f32[N, M], B: f32[K]) -> (T: f32[N]) {\n  T[i] = sum[k](A[i, k] * B[k])\n}\n", "N=2 M=3 K=4",
               2, 27, "reduction variable 'k' ranges over 3 in A[i, k] (dimension 1) but over 4 in B[k] (dimension 0)");
  EXPECT_ERROR(BODY("  T[i] = (A[i] + 1.0"), "N=4", 3, 1, "expected ')' to close the parenthesis, found '}'");
  EXPECT_ERROR(BODY("  T[i] = A[i] ]"), "N=4", 2, 15, "expected a statement");
  EXPECT_ERROR(BODY("  T[i] = * A[i]"), "N=4", 2, 10, "expected an expression, found '*'");
  EXPECT_ERROR("", "", 1, 1, "no def in file");
  EXPECT_ERROR("# only a comment\n", "", 1, 1, "no def in file");
  EXPECT_ERROR_LEN("def f(A: f32[N]) -> (T: f32[N]) {\n  T[i] = A\0[i]\n}\n", 49, "N=4", 2, 11, "NUL byte");
  EXPECT_ERROR("def f(A: f32[N]) -> (T: f32[N]) { T[i] = A[i] \xc3\xa9 }", "N=4", 1, 47, "unexpected byte 0xc3");
  EXPECT_ERROR(BODY("  T[i, i] = A[i]"), "N=4", 2, 8, "index 'i' appears twice on the left of '='");
  EXPECT_ERROR("def f(A: f32[N]) -> (T: f32[N], U: f32[N]) {\n  T[i] = U[i]\n  U[i] = A[i]\n}\n", "N=4", 2, 10,
               "tensor 'U' is read before it is defined (at line 3)");
  EXPECT_ERROR("def f(A: f32[N]) -> (T: f32[N], U: f32[N]) {\n  T[i] = A[i]\n}\n", "N=4", 1, 33, "output 'U' is never defined");
  EXPECT_ERROR(BODY("  T[i] = T[i] + 1.0"), "N=4", 2, 10, "'T' is read in its own definition");
  EXPECT_ERROR(BODY("  A[i] = 1.0\n  T[i] = A[i]"), "N=4", 2, 3, "cannot assign to the input 'A'");
  EXPECT_ERROR(BODY("  U[i] = 1.0\n  T[i] = U[i]"), "N=4", 2, 5,
               "cannot infer the range of index 'i' of 'U': give U an explicit shape");
  EXPECT_ERROR(BODY("  T[i] = exp(A[i], 1.0)"), "N=4", 2, 10, "exp takes 1 argument, got 2");
  EXPECT_ERROR(BODY("  T[i] = sum(A[i])"), "N=4", 2, 10, "the reducer 'sum' needs its variables");
  EXPECT_ERROR("def f(sum: f32[N]) -> (T: f32[N]) { T[i] = 1.0 }", "N=4", 1, 7, "'sum' is a reserved word");
  EXPECT_ERROR(BODY("  T[i] = A[i * i]"), "N=4", 2, 14, "is not affine");
  EXPECT_ERROR(BODY("  T[i] = A[i] + sum[i](A[i])"), "N=4", 2, 21, "reduction variable 'i' shadows the index variable 'i'");
  EXPECT_ERROR(BODY("  T[i] = A[i] + sum[k in 3..3](A[k])"), "N=4", 2, 21, "the range of 'k' is empty: 3..3");
  EXPECT_ERROR(BODY("  T[i] = A[i] + sum[k](1.0)"), "N=4", 2, 21, "cannot infer the range of reduction variable 'k'");
  EXPECT_ERROR(BODY("  T[i] = A[i] + 2x"), "N=4", 2, 17, "malformed number '2x'");
  EXPECT_ERROR(BODY("  T[i] = select(A[i], 1.0, 0.0)"), "N=4", 2, 17, "the first argument of select needs a condition");
  EXPECT_ERROR(BODY("  T[i] = A[i] + A[i % (i + 1)]"), "N=4", 2, 21, "an index can only be divided by a constant or a size variable");
  EXPECT_ERROR(BODY("  T[i] = A[i] + A[i / (N - 4)]"), "N=4", 2, 26, "index divisor N - 4 may be zero or negative");
  EXPECT_ERROR(BODY("  T[i] = A"), "N=4", 2, 10, "'A' is a tensor: read it with indices");
  EXPECT_ERROR(BODY("  T[i] = A[i]"), "N=0", 1, 14, "-D N=0: size N must be at least 1 (got 0)");
  EXPECT_ERROR(BODY("  T[i] = A[i]"), "N=-1", 1, 14, "-D N=-1: size N must be at least 1 (got -1)");
  EXPECT_ERROR("def f(A: f32[N + P]) -> (T: f32[N + P]) { T[i] = A[i] }", "N=4 P=-1", 1, 18,
               "-D P=-1: size P must be at least 0 (got -1)");
  EXPECT_ERROR("def f(A: f32[N, N, N]) -> (T: f32[N]) { T[i] = A[i, i, i] }", "N=2147483647", 1, 7, "more than 2^40 elements");
  EXPECT_ERROR("def f(A: f32[N - 2]) -> (T: f32[N]) { T[i] = 1.0 }", "N=1", 1, 16, "dimension 0 of 'A' is -1");
  EXPECT_ERROR("def f(A: f32[N]) -> (T: f32[N]) { T[i] : f32[N + 1] = A[i] }", "N=3", 1, 48,
               "dimension 0 of 'T' is 4 here but 3 in the signature");
  EXPECT_ERROR("def f(A: f32[N]) -> (T: f32[N]) { T[i] }", "N=3", 1, 40, "expected '=' after the left-hand side, found '}'");
  EXPECT_ERROR("def f(A: f32[N]) -> (T: f32[N]) { T[i] = A[i]", "N=3", 1, 46, "expected '}' to close the body of 'f'");
  EXPECT_ERROR("def f(A: f32[N], A: f32[N]) -> (T: f32[N]) { T[i] = A[i] }", "N=3", 1, 18, "parameter 'A' is declared twice");
  EXPECT_ERROR("def f(A: f32[N]) -> (T: f32[N]) { T[N] = A[N] }", "N=3", 1, 37, "'N' is a size variable and cannot be an index variable");

  /* The conv2d pad without its select: the read of X reaches -1 and H. */
  EXPECT_ERROR("def p(X: f32[C, H]) -> (Y: f32[C, H]) {\n"
               "  P[c, h] : f32[C, H + 2] = X[c, h - 1]\n"
               "  Y[c, h] = P[c, h + 1]\n}\n",
               "C=2 H=32", 2, 29, "read X[c, h - 1] may be out of bounds: index 1 ranges over [-1, 32] but X has 32 elements in dimension 1");
#undef BODY
}


#define EXPECT_OK(src, binds)                                                                              \
  do {                                                                                                     \
    kg_diag d_;                                                                                            \
    kg_program *p_ = load((src), NULL, (binds), &d_);                                                      \
    CHECKF(p_ != NULL, "%s: %s", (src), d_.text ? d_.text : "");                                          \
    kg_program_free(p_);                                                                                   \
  } while (0)

/* Values are f32: a float literal past FLT_MAX (after rounding) is refused at the literal. */
static void test_f32_literals(void) {
  const char *H = "def f(A: f32[N]) -> (T: f32[N]) {\n  T[i] = A[i] * ";
  char src[512];
  const char *bad[] = {"1e39", "3.5e38", "1e308", "1e400", "3.4028236e38"};
  for (int k = 0; k < 5; k++) {
    snprintf(src, sizeof src, "%s%s\n}\n", H, bad[k]);
    char want[128];
    snprintf(want, sizeof want, "number %s is out of the f32 range", bad[k]);
    EXPECT_ERROR(src, "N=4", 2, 17, want);
  }
  /* FLT_MAX itself, as printed with 9 digits (a little above it), tiny literals, and large integer values. */
  const char *good[] = {"3.40282347e38", "3.4e38", "1e-50", "100000000000000", "9223372036854775807"};
  for (int k = 0; k < 5; k++) {
    snprintf(src, sizeof src, "%s%s\n}\n", H, good[k]);
    EXPECT_OK(src, "N=4");
  }
}

static void test_duplicate_defs(void) {
  EXPECT_ERROR("def f(A: f32[N]) -> (T: f32[N]) { T[i] = A[i] }\ndef g(A: f32[N]) -> (T: f32[N]) { T[i] = A[i] }\n"
               "  def f(A: f32[N]) -> (T: f32[N]) { T[i] = 2.0 * A[i] }\n",
               "N=4", 3, 3, "def 'f' is defined twice (first at 1:1)");
}

/* Index expressions are normalised to linear form before interval evaluation: like terms cancel. */
static void test_linear_indices(void) {
  const char *ok[] = {"X[i - i]", "X[2 * i - i]", "X[i + i - i]", "X[i - (i - i)]", "X[-i + 2 * i]", "X[(i - i + 9) / 2]",
                      "X[i * 3 - 2 * i - (N - N)]", "X[(2 * i - i) % N]", "X[N - 1 - i]"};
  char src[512];
  for (int k = 0; k < 9; k++) {
    snprintf(src, sizeof src, "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = %s }", ok[k]);
    EXPECT_OK(src, "N=5");
  }
  /* Ranges in errors stay right. */
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[2 * i - i + 1] }", "N=5", 1, 42, "index 0 ranges over [1, 5]");
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[i + i - 1] }", "N=5", 1, 42, "index 0 ranges over [-1, 7]");
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[i - 2 * i] }", "N=5", 1, 42, "index 0 ranges over [-4, 0]");
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[(i - i + 10) / 2] }", "N=5", 1, 42, "index 0 ranges over [5, 5]");
  /* Still affine only, and overflow still fails the proof instead of wrapping into range. */
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[i * (i - i)] }", "N=5", 1, 46, "is not affine");
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[(i * 4611686018427387904 * 4) / 4611686018427387904] }", "N=5",
               1, 42, "may be out of bounds");
}

static void test_select_narrowing(void) {
  char src[512];
  const char *ok[] = {
      "select(!(i < 1), X[i - 1], 0.0)",
      "select(!(i < 1 || i > N - 2), X[i - 1] + X[i + 1], 0.0)",
      "select(!(!(i >= 1) || !(i + 1 < N)), X[i - 1] + X[i + 1], 0.0)",
      "select(i != 0, X[i - 1], 0.0)",
      "select(i != 0 && i != N - 1, X[i - 1] + X[i + 1], 0.0)",
      "select(N - 1 != i, X[i + 1], 0.0)",
      "select(2 * i < N, X[2 * i], 0.0)",
      "select(2 * i + 1 < N, X[2 * i + 1], 0.0)",
      "select(-2 * i > -N, X[2 * i], 0.0)",
      "select(3 - i >= 1, X[i + 2], 0.0)",
      "select(3 * i >= 2 * N - 8, X[i - 1], 0.0)",
      "select(i == 0 || i == N - 1, 0.0, X[i - 1] + X[i + 1])",
      "select(i < 1, 0.0, X[i - 1])",
      "select(i == 2, X[i + 2] + X[i - 2], X[i])",
      "select(i > 9, X[i + 100], X[i])",
      "select(-3 * i <= -4, X[i - 2], 0.0)", /* i >= 4/3 rounded up */ /* the taken branch is empty: not checked */
  };
  int nok = (int)(sizeof ok / sizeof ok[0]);
  for (int k = 0; k < nok; k++) {
    snprintf(src, sizeof src, "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = %s }", ok[k]);
    EXPECT_OK(src, "N=5");
  }
  /* Only sound narrowing: a disjunction, != away from the ends, and the wrong branch narrow nothing. */
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = select(i < 1 || i > 3, X[i - 1], 0.0) }", "N=5", 1, 65,
               "index 0 ranges over [-1, 3]");
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = select(i != 2, X[i - 1], 0.0) }", "N=5", 1, 57,
               "index 0 ranges over [-1, 3]");
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = select(i == 0, 0.0, X[i + 1]) }", "N=5", 1, 62,
               "index 0 ranges over [2, 5]");
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = select(i >= 1, 0.0, X[i - 1]) }", "N=5", 1, 62,
               "index 0 ranges over [-1, -1]");
  /* 2 * i < N: i <= (N - 1) / 2 rounded down, so 2 * i + 1 may reach N. */
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = select(2 * i < N, X[2 * i + 1], 0.0) }", "N=5", 1, 60,
               "index 0 ranges over [1, 5]");
  EXPECT_ERROR("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = select(-3 * i <= -3, X[i - 2], 0.0) }", "N=5", 1, 63,
               "index 0 ranges over [-1, 2]");
}

static void test_hostile_inputs(void) {
  /* 100,000 nested parentheses: an error, not a stack overflow. */
  size_t n = 100000;
  const char *head = "def f(A: f32[N]) -> (T: f32[N]) { T[i] = ";
  size_t hl = strlen(head);
  char *s = malloc(hl + 2 * n + 16);
  if (!s) return;
  memcpy(s, head, hl);
  memset(s + hl, '(', n);
  memcpy(s + hl + n, "1.0", 3);
  memset(s + hl + n + 3, ')', n);
  memcpy(s + hl + 2 * n + 3, " }", 3);
  EXPECT_ERROR(s, "N=4", 1, 1042, "expression nested too deeply");
  /* A 100,000-term sum: a deep tree without deep recursion in the parser; also refused. */
  size_t len = hl;
  memcpy(s, head, hl);
  for (size_t k = 0; k < 50000; k++) memcpy(s + len, "1+", 2), len += 2;
  memcpy(s + len, "1 }", 4);
  EXPECT_ERROR(s, "N=4", 1, 2041, "expression nested too deeply");
  free(s);
  /* A 1 MB identifier. */
  size_t big = 1 << 20;
  s = malloc(hl + big + 16);
  if (!s) return;
  memcpy(s, head, hl);
  memset(s + hl, 'x', big);
  memcpy(s + hl + big, "[i] }", 6);
  EXPECT_ERROR(s, "N=4", 1, 42, "name 'xxxxxxxxxxxxxxxxxxxx...' too long (max 64 characters)");
  free(s);
  /* Many unary minuses. */
  s = malloc(hl + 300016);
  if (!s) return;
  memcpy(s, head, hl);
  memset(s + hl, '-', 300000);
  memcpy(s + hl + 300000, "1.0 }", 6);
  EXPECT_ERROR(s, "N=4", 1, 1041, "expression nested too deeply");
  free(s);
}

int main(void) {
  kg_arena_init(&diag_arena);
  test_examples();
  test_canonical_ignores_layout();
  test_inference();
  test_errors();
  test_hostile_inputs();
  test_f32_literals();
  test_duplicate_defs();
  test_linear_indices();
  test_select_narrowing();
  kg_arena_free(&diag_arena);
  TEST_END();
}
