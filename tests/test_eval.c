/* The reference evaluator against hand-computed values, and every te/lib workload evaluated at its test sizes. */
#include <math.h>
#include <stdint.h>
#include <time.h>
#include "../runtime/verify.h"
#include "testutil.h"

static kg_program *load(const char *text, const char *bind) {
  kg_binding b[16];
  char names[16][32];
  int nb = 0;
  for (const char *s = bind; s && *s && nb < 16;) {
    while (*s == ' ') s++;
    if (!*s) break;
    int len = 0;
    while (s[len] && s[len] != '=') len++;
    snprintf(names[nb], sizeof names[nb], "%.*s", len, s);
    s += len + (s[len] == '=');
    b[nb].name = names[nb];
    b[nb].value = strtoll(s, (char **)&s, 10);
    nb++;
  }
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  kg_program *p = kg_program_load("test.te", text, strlen(text), NULL, b, nb, &diag, &da);
  if (!p) fprintf(stderr, "load failed:\n%s\n", diag.msg ? diag.msg : "(no message)");
  kg_arena_free(&da);
  return p;
}

/* Evaluates p on the given inputs; returns malloc'ed outputs (one array per output). */
static double **run(const kg_program *p, const float *const *in) {
  double **out = calloc((size_t)p->noutputs, sizeof *out);
  for (int i = 0; i < p->noutputs; i++) out[i] = calloc((size_t)kg_tensor_numel(p->outputs[i]), sizeof(double));
  CHECK(kg_eval_reference(p, in, out) == 0);
  return out;
}

static void free_out(const kg_program *p, double **out) {
  for (int i = 0; i < p->noutputs; i++) free(out[i]);
  free(out);
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * (1 + fabs(b)); }
#define NEAR(a, b) near((a), (b))
#define CHECK_NEAR(a, b) CHECKF(NEAR(a, b), "%s = %.17g, expected %.17g", #a, (double)(a), (double)(b))

/* Runs a one-input one-output program on X and checks the outputs against want[]. */
static void check_1in(const char *name, const char *src, const char *bind, const float *x, const double *want,
                      int n) {
  kg_program *p = load(src, bind);
  CHECKF(p != NULL, "%s did not load", name);
  if (!p) return;
  CHECKF(kg_tensor_numel(p->outputs[0]) == n, "%s: %lld elements", name,
         (long long)kg_tensor_numel(p->outputs[0]));
  const float *in[1] = {x};
  double **out = run(p, in);
  for (int k = 0; k < n && k < kg_tensor_numel(p->outputs[0]); k++)
    CHECKF(NEAR(out[0][k], want[k]), "%s: [%d] = %.17g, expected %.17g", name, k, out[0][k], want[k]);
  free_out(p, out);
  kg_program_free(p);
}

static void test_matmul(void) {
  kg_program *p = load("def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {\n"
                       "  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n",
                       "M=2 N=2 K=3");
  CHECK(p != NULL);
  if (!p) return;
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
  const float *in[2] = {a, b};
  double **out = run(p, in);
  CHECK_NEAR(out[0][0], 58);
  CHECK_NEAR(out[0][1], 64);
  CHECK_NEAR(out[0][2], 139);
  CHECK_NEAR(out[0][3], 154);
  free_out(p, out);
  kg_program_free(p);
}

/* Large enough for the evaluator's threaded path: every element must equal, bit for bit, the same double sum
 * taken in order (the thread split must not change a single operation). */
static void test_matmul_large(void) {
  kg_program *p = load("def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {\n"
                       "  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n",
                       "M=67 N=45 K=129");
  CHECK(p != NULL);
  if (!p) return;
  kg_data d;
  kg_data_init(&d, p, 5);
  double **out = run(p, (const float *const *)d.inputs);
  int same = 1;
  for (int i = 0; i < 67; i++)
    for (int j = 0; j < 45; j++) {
      double acc = 0;
      for (int k = 0; k < 129; k++) acc += (double)d.inputs[0][i * 129 + k] * (double)d.inputs[1][k * 45 + j];
      if (acc != out[0][i * 45 + j]) same = 0;
    }
  CHECK(same);
  free_out(p, out);
  kg_data_free(&d);
  kg_program_free(p);
}

static void test_softmax(void) {
  kg_program *p = load("def softmax(X: f32[N, D]) -> (Y: f32[N, D]) {\n"
                       "  m[i] = max[j](X[i, j])\n"
                       "  e[i, j] = exp(X[i, j] - m[i])\n"
                       "  Y[i, j] = e[i, j] / sum[j2](e[i, j2])\n}\n",
                       "N=3 D=4");
  CHECK(p != NULL);
  if (!p) return;
  float x[12] = {1, 2, 3, 4, -1, 0, 1, 0.5f, 30, 30, -30, 0.25f};
  const float *in[1] = {x};
  double **out = run(p, in);
  for (int i = 0; i < 3; i++) {
    double z = 0, rowsum = 0;
    for (int j = 0; j < 4; j++) z += exp((double)x[i * 4 + j]);
    for (int j = 0; j < 4; j++) {
      double want = exp((double)x[i * 4 + j]) / z;
      CHECKF(fabs(out[0][i * 4 + j] - want) < 1e-14, "Y[%d,%d] = %.17g, expected %.17g", i, j, out[0][i * 4 + j],
             want);
      rowsum += out[0][i * 4 + j];
    }
    CHECKF(fabs(rowsum - 1) < 1e-14, "row %d sums to %.17g", i, rowsum);
  }
  CHECK_NEAR(out[0][8], 0.5 / (1 + exp(-60.0) / 2 + exp(0.25 - 30) / 2));
  free_out(p, out);
  kg_program_free(p);
}

/* 3x3 all-ones kernel, padding 1: each output is the sum of its in-bounds 3x3 neighbourhood. */
static void test_conv2d_padding(void) {
  kg_program *p = load(
      "def conv2d(X: f32[N, C, H, W], K: f32[F, C, 3, 3]) -> (Y: f32[N, F, H, W]) {\n"
      "  P[n, c, h, w] : f32[N, C, H + 2, W + 2] = select(h >= 1 && h <= H && w >= 1 && w <= W, X[n, c, h - 1, w - 1], 0.0)\n"
      "  Y[n, f, y, x] = sum[c, r, s](P[n, c, y + r, x + s] * K[f, c, r, s])\n}\n",
      "N=1 C=1 H=3 W=4 F=2");
  CHECK(p != NULL);
  if (!p) return;
  float x[12], k[18];
  for (int i = 0; i < 12; i++) x[i] = (float)(i + 1);
  for (int i = 0; i < 18; i++) k[i] = i < 9 ? 1.0f : (i == 9 + 4 ? 2.0f : 0.0f); /* f=1: 2 * centre tap */
  const float *in[2] = {x, k};
  double **out = run(p, in);
  /* X = [[1 2 3 4] [5 6 7 8] [9 10 11 12]] */
  CHECK_NEAR(out[0][0], 1 + 2 + 5 + 6);                       /* corner */
  CHECK_NEAR(out[0][1], 1 + 2 + 3 + 5 + 6 + 7);               /* top edge */
  CHECK_NEAR(out[0][5], 1 + 2 + 3 + 5 + 6 + 7 + 9 + 10 + 11); /* interior */
  CHECK_NEAR(out[0][11], 7 + 8 + 11 + 12);                    /* far corner */
  for (int i = 0; i < 12; i++) CHECK_NEAR(out[0][12 + i], 2.0 * x[i]);
  free_out(p, out);
  kg_program_free(p);
}

static void test_nested_reduction(void) {
  /* a reduction inside a reduction's body: y[i] = sum_j A[i,j] * (sum_k B[j,k]) */
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 10, 100, 2, 20, 200}; /* A 2x3, B 3x2 */
  kg_program *p = load("def f(A: f32[M, J], B: f32[J, K]) -> (y: f32[M]) {\n"
                       "  y[i] = sum[j](A[i, j] * sum[k](B[j, k]))\n}\n",
                       "M=2 J=3 K=2");
  CHECK(p != NULL);
  if (p) {
    const float *in[2] = {a, b};
    double **out = run(p, in);
    /* row sums of B: 11, 102, 220 */
    CHECK_NEAR(out[0][0], 1 * 11 + 2 * 102 + 3 * 220);
    CHECK_NEAR(out[0][1], 4 * 11 + 5 * 102 + 6 * 220);
    free_out(p, out);
    kg_program_free(p);
  }
  /* a reduction inside an expression (the mlp epilogue) */
  float w[6] = {1, -1, 1, -1, 1, -1}, bias[2] = {0.5f, -100};
  p = load("def f(A: f32[M, K], W: f32[K, N], b: f32[N]) -> (Y: f32[M, N]) {\n"
           "  Y[i, j] = max(sum[k](A[i, k] * W[k, j]) + b[j], 0.0)\n}\n",
           "M=2 N=2 K=3");
  CHECK(p != NULL);
  if (p) {
    const float *in[3] = {a, w, bias};
    double **out = run(p, in);
    /* A W: row0 = [1-2+3... ] W is 3x2 = [[1,-1],[1,-1],[1,-1]]: row sums with signs */
    CHECK_NEAR(out[0][0], 6 + 0.5);
    CHECK_NEAR(out[0][1], 0.0); /* -6 - 100 clamped */
    CHECK_NEAR(out[0][2], 15 + 0.5);
    CHECK_NEAR(out[0][3], 0.0);
    free_out(p, out);
    kg_program_free(p);
  }
}

static void test_select(void) {
  /* Only the branch taken is evaluated: the out-of-range reads X[-1] and X[N] are never made. */
  float x[5] = {1, 2, 3, 4, 5};
  double want[5] = {0 + 1 + 2, 1 + 2 + 3, 2 + 3 + 4, 3 + 4 + 5, 4 + 5 + 0};
  check_1in("select", "def f(X: f32[N]) -> (Y: f32[N]) {\n"
            "  Y[i] = select(i >= 1, X[i - 1], 0.0) + X[i] + select(i < N - 1, X[i + 1], 0.0)\n}\n",
            "N=5", x, want, 5);
  double want2[5] = {10, 2, 30, 4, 50};
  check_1in("select-or", "def f(X: f32[N]) -> (Y: f32[N]) {\n"
            "  Y[i] = select(i == 0 || i % 2 == 0 && !(i == 1), X[i] * 10, X[i])\n}\n",
            "N=5", x, want2, 5);
  double want3[5] = {-1, 2, -3, 4, -5};
  check_1in("select-value-cond", "def f(X: f32[N]) -> (Y: f32[N]) {\n"
            "  Y[i] = select(X[i] > 1.5 && X[i] < 4.5, X[i], -X[i]) * select(X[i] == 3.0, -1, 1)\n}\n",
            "N=5", x, want3, 5);
}

static void test_reducers(void) {
  float x[8] = {3, -2, 5, 0.5f, -1, -4, 2, 2};
  double wmax[2] = {5, 2}, wmin[2] = {-2, -4}, wprod[2] = {3 * -2 * 5 * 0.5, -1 * -4 * 2 * 2};
  check_1in("max", "def f(X: f32[N, D]) -> (Y: f32[N]) { Y[i] = max[j](X[i, j]) }", "N=2 D=4", x, wmax, 2);
  check_1in("min", "def f(X: f32[N, D]) -> (Y: f32[N]) { Y[i] = min[j](X[i, j]) }", "N=2 D=4", x, wmin, 2);
  check_1in("prod", "def f(X: f32[N, D]) -> (Y: f32[N]) { Y[i] = prod[j](X[i, j]) }", "N=2 D=4", x, wprod, 2);
  /* a reduction over two variables at once, to a scalar */
  double wall[1] = {3 - 2 + 5 + 0.5 - 1 - 4 + 2 + 2};
  check_1in("sum-all", "def f(X: f32[N, D]) -> (Y: f32[]) { Y[] = sum[i, j](X[i, j]) }", "N=2 D=4", x, wall, 1);
}

static void test_division(void) {
  float x[6] = {3, 5, 7, 11, 13, 17};
  /* integer (floor) division and modulo in indices, including negative numerators */
  double w1[6] = {3, 3, 5, 5, 7, 7};
  check_1in("idx-div", "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[i / 2] }", "N=6", x, w1, 6);
  double w2[6] = {5, 7, 11, 13, 17, 3};
  check_1in("idx-mod", "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[(i + 1) % 6] }", "N=6", x, w2, 6);
  double w3[6] = {7, 11, 13, 17, 3, 5}; /* floor modulo wraps negatives to the top: -4 % 6 = 2 */
  check_1in("idx-negmod", "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[(i - 4) % 6] }", "N=6", x, w3, 6);
  double w5[6] = {3, 5, 5, 7, 7, 11}; /* (i - 1) / 2 + 1 for i = 0..5: floor(-0.5)+1 = 0, 1, 1, 2, 2, 3 */
  check_1in("idx-floordiv", "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[(i - 1) / 2 + 1] }", "N=6", x, w5, 6);
  /* float division and fmod of values */
  double w6[6] = {1.5, 2.5, 3.5, 5.5, 6.5, 8.5};
  check_1in("val-div", "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[i] / 2 }", "N=6", x, w6, 6);
  double w7[6] = {3, 1, 3, 3, 1, 1};
  check_1in("val-mod", "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[i] % 4.0 }", "N=6", x, w7, 6);
  double w8[6] = {0.5, 5.0 / 6, 7.0 / 6, 11.0 / 6, 13.0 / 6, 17.0 / 6};
  check_1in("val-div-size", "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[i] / N }", "N=6", x, w8, 6);

  /* An index variable divided as a value: the checker's type decides (INT: floor division, F32: float). */
  kg_program *p = load("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = i / 4 + X[i] * 0.0 }", "N=6");
  CHECK(p != NULL);
  if (p) {
    const kg_expr *div = p->def->stmts[0]->rhs->op.a;
    const float *in[1] = {x};
    double **out = run(p, in);
    int is_int = div->kind == KG_EXPR_BINARY && div->ty == KG_TY_INT;
    for (int i = 0; i < 6; i++) CHECK_NEAR(out[0][i], is_int ? (double)(i / 4) : i / 4.0);
    free_out(p, out);
    kg_program_free(p);
  }
  double w9[6] = {0, 1, 2, 3, 4, 5};
  check_1in("ivar-value", "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = i + X[i] * 0.0 }", "N=6", x, w9, 6);
}

static void test_ranges(void) {
  float x[12] = {1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60}; /* 2 x 6 */
  double w1[2] = {2 + 3 + 4, 20 + 30 + 40};
  check_1in("in-range", "def f(X: f32[N, D]) -> (Y: f32[N]) { Y[i] = sum[k in 1..4](X[i, k]) }", "N=2 D=6", x,
            w1, 2);
  double w2[2] = {6 + 5 + 4, 60 + 50 + 40};
  check_1in("in-range-size", "def f(X: f32[N, D]) -> (Y: f32[N]) { Y[i] = sum[k in D - 3..D](X[i, k]) }",
            "N=2 D=6", x, w2, 2);
  /* a window over a strided index: the variable never appears bare */
  double w3[2] = {1 * 3 * 5, 10 * 30 * 50};
  check_1in("in-range-stride", "def f(X: f32[N, D]) -> (Y: f32[N]) { Y[i] = prod[k in 0..3](X[i, 2 * k]) }",
            "N=2 D=6", x, w3, 2);
  /* functions */
  float y[3] = {0.25f, 1, 4};
  double wf[3];
  for (int i = 0; i < 3; i++) {
    double v = y[i];
    wf[i] = exp(v) + log(v) + sqrt(v) + 1 / sqrt(v) + tanh(v) + erf(v) + fabs(-v) + 1 / (1 + exp(-v)) +
            pow(v, 1.5) + fmax(v, 1.0) + fmin(v, 1.0);
  }
  check_1in("funcs", "def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = exp(X[i]) + log(X[i]) + sqrt(X[i]) + rsqrt(X[i]) + "
            "tanh(X[i]) + erf(X[i]) + abs(-X[i]) + sigmoid(X[i]) + pow(X[i], 1.5) + max(X[i], 1.0) + min(X[i], 1) }",
            "N=3", y, wf, 3);
}

/* Intermediates chained through several statements, with a size used as a value. */
static void test_layernorm_values(void) {
  float x[6] = {1, 2, 3, 4, 6, 11}, g[3] = {1, 2, 0.5f}, b[3] = {0, 1, -1};
  kg_program *p = load("def layernorm(X: f32[N, D], gamma: f32[D], beta: f32[D]) -> (Y: f32[N, D]) {\n"
                       "  mu[i] = sum[j](X[i, j]) / D\n"
                       "  xc[i, j] = X[i, j] - mu[i]\n"
                       "  v[i] = sum[j](xc[i, j] * xc[i, j]) / D\n"
                       "  Y[i, j] = xc[i, j] * rsqrt(v[i] + 1e-5) * gamma[j] + beta[j]\n}\n",
                       "N=2 D=3");
  CHECK(p != NULL);
  if (!p) return;
  const float *in[3] = {x, g, b};
  double **out = run(p, in);
  for (int i = 0; i < 2; i++) {
    double mu = (x[3 * i] + x[3 * i + 1] + x[3 * i + 2]) / 3.0, var = 0;
    for (int j = 0; j < 3; j++) var += (x[3 * i + j] - mu) * (x[3 * i + j] - mu) / 3.0;
    for (int j = 0; j < 3; j++) {
      double want = (x[3 * i + j] - mu) / sqrt(var + 1e-5) * g[j] + b[j];
      CHECKF(fabs(out[0][3 * i + j] - want) < 1e-12, "Y[%d,%d] %.17g vs %.17g", i, j, out[0][3 * i + j], want);
    }
  }
  free_out(p, out);
  kg_program_free(p);
}

/* The evaluator memoizes a reduction nested in an expression (computed once per tuple of the variables it uses)
 * and computes top-level reductions for a row of elements at once; neither may change a single bit. These
 * compare with straightforward double loops taking every sum in the same order. */
static double max_combine(double acc, double v) { return (v > acc || isnan(v)) ? v : acc; }

static void test_memo_softmax_bitwise(void) {
  enum { N = 37, D = 300 };
  kg_program *p = load("def softmax(X: f32[N, D]) -> (Y: f32[N, D]) {\n"
                       "  m[i] = max[j](X[i, j])\n"
                       "  e[i, j] = exp(X[i, j] - m[i])\n"
                       "  Y[i, j] = e[i, j] / sum[j2](e[i, j2])\n}\n",
                       "N=37 D=300");
  CHECK(p != NULL);
  if (!p) return;
  kg_data d;
  kg_data_init(&d, p, 11);
  double **out = run(p, (const float *const *)d.inputs);
  const float *x = d.inputs[0];
  static double e[N][D];
  int same = 1;
  for (int i = 0; i < N; i++) {
    double m = -INFINITY, z = 0;
    for (int j = 0; j < D; j++) m = max_combine(m, (double)x[i * D + j]);
    for (int j = 0; j < D; j++) e[i][j] = exp((double)x[i * D + j] - m);
    for (int j = 0; j < D; j++) z += e[i][j];
    for (int j = 0; j < D; j++) same &= out[0][i * D + j] == e[i][j] / z;
  }
  CHECK(same);
  free_out(p, out);
  kg_data_free(&d);
  kg_program_free(p);
}

static void test_memo_attention_bitwise(void) {
  enum { B = 2, S = 33, T = 70, D = 16, E = 20 };
  char *text = kg_test_read_file("te/lib/attention.te", NULL);
  CHECK(text != NULL);
  if (!text) return;
  kg_program *p = load(text, "B=2 S=33 T=70 D=16 E=20");
  free(text);
  CHECK(p != NULL);
  if (!p) return;
  kg_data d;
  kg_data_init(&d, p, 12);
  double **out = run(p, (const float *const *)d.inputs);
  const float *q = d.inputs[0], *k = d.inputs[1], *v = d.inputs[2];
  static double s[T], e[T];
  int same = 1;
  for (int b = 0; b < B; b++)
    for (int i = 0; i < S; i++) {
      double m = -INFINITY, z = 0;
      for (int j = 0; j < T; j++) {
        double acc = 0;
        for (int dd = 0; dd < D; dd++) acc += (double)q[(b * S + i) * D + dd] * (double)k[(b * T + j) * D + dd];
        s[j] = acc * (1.0 / sqrt((double)D));
        m = max_combine(m, s[j]);
      }
      for (int j = 0; j < T; j++) e[j] = exp(s[j] - m);
      for (int j = 0; j < T; j++) z += e[j];
      for (int c = 0; c < E; c++) {
        double acc = 0;
        for (int j = 0; j < T; j++) acc += e[j] * (double)v[(b * T + j) * E + c];
        same &= out[0][(b * S + i) * E + c] == acc / z;
      }
    }
  CHECK(same);
  free_out(p, out);
  kg_data_free(&d);
  kg_program_free(p);
}

/* A reduction nested in a reduction whose value depends on the outer one's variable (and on an index): the
 * inner one is memoized per (c, j), and must still be the inner sum for that j. */
static void test_memo_nested_bitwise(void) {
  enum { M = 9, J = 23, K = 31, C = 7 };
  kg_program *p = load("def f(A: f32[M, J], B: f32[J, K], W: f32[K, C]) -> (y: f32[M, C]) {\n"
                       "  y[i, c] = sum[j](A[i, j] * max[k](B[j, k] * W[k, c])) + min[k2](W[k2, c])\n}\n",
                       "M=9 J=23 K=31 C=7");
  CHECK(p != NULL);
  if (!p) return;
  kg_data d;
  kg_data_init(&d, p, 13);
  double **out = run(p, (const float *const *)d.inputs);
  const float *a = d.inputs[0], *bb = d.inputs[1], *w = d.inputs[2];
  int same = 1;
  for (int i = 0; i < M; i++)
    for (int c = 0; c < C; c++) {
      double acc = 0, mn = INFINITY;
      for (int j = 0; j < J; j++) {
        double mx = -INFINITY;
        for (int k = 0; k < K; k++) mx = max_combine(mx, (double)bb[j * K + k] * (double)w[k * C + c]);
        acc += (double)a[i * J + j] * mx;
      }
      for (int k = 0; k < K; k++) {
        double v = w[k * C + c];
        mn = (v < mn || isnan(v)) ? v : mn;
      }
      same &= out[0][i * C + c] == acc + mn;
    }
  CHECK(same);
  free_out(p, out);
  kg_data_free(&d);
  kg_program_free(p);
  /* and small enough to know by hand: inner sums over k of B[j, k] * j-th weight */
  float a2[4] = {1, 2, 3, 4}, b2[4] = {1, 10, 100, 1000}; /* A 2x2, B 2x2 */
  p = load("def f(A: f32[M, J], B: f32[J, K]) -> (y: f32[M, M]) {\n"
           "  y[i, i2] = sum[j](A[i, j] * sum[k](B[j, k] * A[i2, j]))\n}\n",
           "M=2 J=2 K=2");
  CHECK(p != NULL);
  if (!p) return;
  const float *in2[2] = {a2, b2};
  out = run(p, in2);
  /* y[i, i2] = sum_j A[i,j] * A[i2,j] * (B[j,0] + B[j,1]); row sums of B: 11, 1100 */
  CHECK_NEAR(out[0][0], 1 * 1 * 11 + 2 * 2 * 1100);
  CHECK_NEAR(out[0][1], 1 * 3 * 11 + 2 * 4 * 1100);
  CHECK_NEAR(out[0][2], 3 * 1 * 11 + 4 * 2 * 1100);
  CHECK_NEAR(out[0][3], 3 * 3 * 11 + 4 * 4 * 1100);
  free_out(p, out);
  kg_program_free(p);
}

/* Reads "# sizes: A=1 B=2" from a workload's header. */
static int parse_sizes(const char *text, char *out, size_t outlen) {
  const char *s = strstr(text, "# sizes:");
  if (!s) return -1;
  s += strlen("# sizes:");
  size_t n = 0;
  while (s[n] && s[n] != '\n') n++;
  snprintf(out, outlen, "%.*s", (int)n, s);
  return 0;
}

static void test_library(void) {
  static const char *const names[] = {"matmul",  "batch_matmul", "matvec",  "conv2d",
                                      "depthwise_conv2d", "maxpool2d", "softmax", "layernorm",
                                      "rmsnorm", "bias_gelu_residual", "reduce_rows", "transpose",
                                      "mlp_epilogue", "attention"};
  for (size_t w = 0; w < sizeof names / sizeof *names; w++) {
    char path[256], sizes[256];
    snprintf(path, sizeof path, "te/lib/%s.te", names[w]);
    char *text = kg_test_read_file(path, NULL);
    CHECKF(text != NULL, "%s missing", path);
    if (!text) continue;
    CHECKF(parse_sizes(text, sizes, sizeof sizes) == 0, "%s has no '# sizes:' line", path);
    CHECKF(strstr(text, "# bench-sizes:") != NULL, "%s has no '# bench-sizes:' line", path);
    kg_program *p = load(text, sizes);
    CHECKF(p != NULL, "%s does not load with %s", path, sizes);
    free(text);
    if (!p) continue;
    kg_data d;
    kg_data_init(&d, p, 1234);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = kg_data_reference(&d, p, 1234);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
    CHECKF(rc == 0, "%s: reference not finite", names[w]);
    int64_t nonzero = 0, total = 0;
    for (int i = 0; i < p->noutputs; i++)
      for (int64_t k = 0; k < kg_tensor_numel(p->outputs[i]); k++, total++) nonzero += d.ref[i][k] != 0;
    /* random signed inputs: a workload whose output is mostly zero is not testing much (relu and padding
     * zero some, never most) */
    CHECKF(nonzero * 4 > total, "%s: only %lld of %lld outputs nonzero", names[w], (long long)nonzero,
           (long long)total);
    printf("  %-20s %-40s %8lld outputs %7.2f ms\n", names[w], sizes, (long long)total, ms);
    kg_data_free(&d);
    kg_program_free(p);
  }
}

int main(void) {
  test_matmul();
  test_matmul_large();
  test_softmax();
  test_conv2d_padding();
  test_nested_reduction();
  test_select();
  test_reducers();
  test_division();
  test_ranges();
  test_layernorm_values();
  test_memo_softmax_bitwise();
  test_memo_attention_bitwise();
  test_memo_nested_bitwise();
  test_library();
  TEST_END();
}
