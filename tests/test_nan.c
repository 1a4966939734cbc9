/* max and min with NaN and signed zeros (docs/language.md): a NaN operand gives NaN, -0 orders below +0,
 * in both operand orders of the elementwise functions and at every position of a max[j] / min[j] reduction of
 * several lengths, with NaN from log(-1.0) and from NaN inputs of either sign.
 *
 * The reference evaluator (and tests/eval_naive.c, bit for bit) is held to values this file computes by the rule
 * itself; then the C target (default, hand-written rfactor/vectorized and random schedules, and once under
 * -ffast-math), the CUDA printer on the emulator (default mapping, warp-shuffle and shared-memory cross-thread
 * reductions, random schedules) and NVRTC's compile of the printed CUDA are each verified against the reference,
 * which admits a NaN output only where the reference is NaN. */
#include <math.h>
#include <stdint.h>
#include "kgen.h"
#include "runtime/emu.h"
#include "runtime/nvrtc.h"
#include "runtime/pipeline.h"
#include "testlib.h"
#include "testutil.h"
#include "eval_naive.c"

/* the rule, written again here so that a wrong reference cannot agree with itself */
static double rule_max(double a, double b) {
  if (a != a || b != b) return NAN;
  if (a == 0 && b == 0) return signbit(a) && signbit(b) ? -0.0 : 0.0;
  return a > b ? a : b;
}

static double rule_min(double a, double b) {
  if (a != a || b != b) return NAN;
  if (a == 0 && b == 0) return signbit(a) || signbit(b) ? -0.0 : 0.0;
  return a < b ? a : b;
}

/* NaN of either sign (x86's log(-1) is the negative one) */
static float nan_signed(int negative) { return negative ? -NAN : NAN; }

/* a value in [0.25, 1.25) of the given sign, different for each k */
static float value_signed(int k, int negative) {
  float v = 0.25f + (float)((k * 37) % 101) / 101.0f;
  return negative ? -v : v;
}

/* want and got are the same value, NaN and the sign of zeros and infinities included */
static int same_value(double want, double got) {
  if (want != want) return got != got;
  return want == got && signbit(want) == signbit(got);
}

/* ---- the programs ---- */

/* Reductions over j of length D, R = D + 2 rows. A: row r < D has a NaN at position r (negative on odd rows), row D
 * none, row D + 1 one at both ends. B: finite; row r < D negative except at position r, row D all negative, row
 * D + 1 all positive (so B * 0.0 is -0 except one +0, and -B * 0.0 the opposite). */
static const char RED[] =
    "def red(A: f32[R, D], B: f32[R, D]) -> (Mx: f32[R], Mn: f32[R], Zx: f32[R], Zn: f32[R], Lx: f32[D, R],\n"
    "                                         Ln: f32[D, R]) {\n"
    "  Mx[i] = max[j](A[i, j])\n"
    "  Mn[i] = min[j](A[i, j])\n"
    "  Zx[i] = 1.0 / max[j](B[i, j] * 0.0)\n"
    "  Zn[i] = 1.0 / min[j](-B[i, j] * 0.0)\n"
    "  Lx[p, i] = max[j](select(j == p, log(-1.0), B[i, j]))\n"
    "  Ln[p, i] = min[j](select(j == p, log(-1.0), B[i, j]))\n"
    "}\n";

static void red_fill(kg_data *d, int64_t R, int64_t D) {
  float *A = d->inputs[0], *B = d->inputs[1];
  for (int64_t r = 0; r < R; r++)
    for (int64_t j = 0; j < D; j++) {
      int k = (int)(r * D + j);
      int nan = r < D ? j == r : r == D + 1 && (j == 0 || j == D - 1);
      A[k] = nan ? nan_signed((int)(r & 1)) : value_signed(k, (k / 3) & 1);
      int positive = r < D ? j == r : r == D + 1;
      B[k] = value_signed(k, !positive);
    }
}

/* the expected value of output o at flat index k */
static double red_want(const kg_data *d, int64_t R, int64_t D, int o, int64_t k) {
  const float *A = d->inputs[0], *B = d->inputs[1];
  int64_t r = o < 4 ? k : k % R, p = o < 4 ? -1 : k / R;
  double acc = o == 1 || o == 3 || o == 5 ? INFINITY : -INFINITY;
  for (int64_t j = 0; j < D; j++) {
    double a = A[r * D + j], b = B[r * D + j];
    switch (o) {
    case 0: acc = rule_max(acc, a); break;
    case 1: acc = rule_min(acc, a); break;
    case 2: acc = rule_max(acc, b * 0.0); break;
    case 3: acc = rule_min(acc, -b * 0.0); break;
    case 4: acc = rule_max(acc, j == p ? log(-1.0) : b); break;
    default: acc = rule_min(acc, j == p ? log(-1.0) : b); break;
    }
  }
  return o == 2 || o == 3 ? 1.0 / acc : acc;
}

/* Elementwise, both operand orders. X and Y: by i % 4, X NaN, Y NaN, both (of opposite signs), neither; signs by
 * (i / 4) % 4. F finite. */
static const char EW[] =
    "def ew(X: f32[N], Y: f32[N], F: f32[N]) -> (L1: f32[N], L2: f32[N], L3: f32[N], L4: f32[N], P1: f32[N],\n"
    "       P2: f32[N], P3: f32[N], P4: f32[N], Z1: f32[N], Z2: f32[N], Z3: f32[N], Z4: f32[N]) {\n"
    "  L1[i] = max(F[i], log(-1.0))\n"
    "  L2[i] = max(log(-1.0), F[i])\n"
    "  L3[i] = min(F[i], log(-1.0))\n"
    "  L4[i] = min(log(-1.0), F[i])\n"
    "  P1[i] = max(X[i], Y[i])\n"
    "  P2[i] = max(Y[i], X[i])\n"
    "  P3[i] = min(X[i], Y[i])\n"
    "  P4[i] = min(Y[i], X[i])\n"
    "  Z1[i] = 1.0 / max(X[i] * 0.0, Y[i] * 0.0)\n"
    "  Z2[i] = 1.0 / max(Y[i] * 0.0, X[i] * 0.0)\n"
    "  Z3[i] = 1.0 / min(X[i] * 0.0, Y[i] * 0.0)\n"
    "  Z4[i] = 1.0 / min(Y[i] * 0.0, X[i] * 0.0)\n"
    "}\n";

static void ew_fill(kg_data *d, int64_t N) {
  float *X = d->inputs[0], *Y = d->inputs[1], *F = d->inputs[2];
  for (int64_t i = 0; i < N; i++) {
    int nan = (int)(i % 4), sx = (int)((i / 4) & 1), sy = (int)((i / 8) & 1);
    X[i] = nan == 0 || nan == 2 ? nan_signed(sx) : value_signed((int)i, sx);
    Y[i] = nan == 1 || nan == 2 ? nan_signed(nan == 2 ? !sx : sy) : value_signed((int)i + 5, sy);
    F[i] = value_signed((int)i, sx ^ sy);
  }
}

static double ew_want(const kg_data *d, int o, int64_t i) {
  double x = d->inputs[0][i], y = d->inputs[1][i], f = d->inputs[2][i], l = log(-1.0);
  switch (o) {
  case 0: return rule_max(f, l);
  case 1: return rule_max(l, f);
  case 2: return rule_min(f, l);
  case 3: return rule_min(l, f);
  case 4: return rule_max(x, y);
  case 5: return rule_max(y, x);
  case 6: return rule_min(x, y);
  case 7: return rule_min(y, x);
  case 8: return 1.0 / rule_max(x * 0.0, y * 0.0);
  case 9: return 1.0 / rule_max(y * 0.0, x * 0.0);
  case 10: return 1.0 / rule_min(x * 0.0, y * 0.0);
  default: return 1.0 / rule_min(y * 0.0, x * 0.0);
  }
}

/* ---- one program at one size, everywhere ---- */

typedef struct nancase {
  const char *name, *src;
  char sizes[64];
  int64_t R, D, N;
  kg_program *p;
  kg_test_workload w; /* p and its data, for kg_test_emu_verify */
} nancase;

static int have_nvrtc;

/* The reference (fast and naive) against the rule. */
static void check_reference(nancase *c) {
  kg_data *d = &c->w.d;
  kg_data_reference_as_is(d, c->p);
  double **slow = calloc((size_t)c->p->noutputs, sizeof *slow);
  for (int o = 0; o < c->p->noutputs; o++)
    slow[o] = calloc((size_t)kg_tensor_numel(c->p->outputs[o]), sizeof(double));
  CHECK(kg_eval_naive(c->p, (const float *const *)d->inputs, slow) == 0);
  int bad = 0, bad_naive = 0;
  for (int o = 0; o < c->p->noutputs; o++) {
    int64_t n = kg_tensor_numel(c->p->outputs[o]);
    for (int64_t k = 0; k < n; k++) {
      double want = c->N ? ew_want(d, o, k) : red_want(d, c->R, c->D, o, k), got = d->ref[o][k];
      if (!same_value(want, got) && bad++ < 3)
        fprintf(stderr, "%s %s: reference %s[%lld] = %g, the rule gives %g\n", c->name, c->sizes,
                c->p->outputs[o]->name, (long long)k, got, want);
      if (memcmp(&slow[o][k], &got, sizeof got) != 0 && bad_naive++ < 3)
        fprintf(stderr, "%s %s: %s[%lld]: eval.c %g, eval_naive.c %g\n", c->name, c->sizes, c->p->outputs[o]->name,
                (long long)k, got, slow[o][k]);
    }
    free(slow[o]);
  }
  free(slow);
  CHECKF(bad == 0, "%s %s: %d reference values break the rule", c->name, c->sizes, bad);
  CHECKF(bad_naive == 0, "%s %s: %d values differ between the two evaluators", c->name, c->sizes, bad_naive);
}

static kg_schedule *schedule_text(const kg_program *p, const char *text) {
  kg_schedule *s = kg_schedule_new(p);
  kg_trace t;
  kg_trace_init(&t);
  char err[1024];
  int ok = kg_trace_parse(&t, "trace", text, strlen(text), err, sizeof err) == 0 &&
           kg_schedule_apply_trace(s, &t, err, sizeof err) == 0;
  kg_trace_free(&t);
  CHECKF(ok, "schedule does not apply: %s\n%s", err, text);
  if (!ok) {
    kg_schedule_free(s);
    return NULL;
  }
  return s;
}

static void run_c(nancase *c, kg_schedule *s, const char *what) {
  if (!s) return;
  char err[8192];
  kg_pipeline pl;
  int built = kg_pipeline_build(s, KG_TARGET_C, &pl, err, sizeof err) == 0;
  char *trace = kg_trace_to_text(&s->trace);
  CHECKF(built, "%s %s, C, %s: build failed: %s\ntrace:\n%s", c->name, c->sizes, what, err, trace);
  if (built) {
    kg_verify_result v = kg_pipeline_verify(&pl, c->p, &c->w.d, 1e-4);
    CHECKF(v.ok, "%s %s, C, %s: %s\ntrace:\n%s", c->name, c->sizes, what, v.msg, trace);
  }
  free(trace);
  kg_pipeline_free(&pl);
  kg_schedule_free(s);
}

/* Lowers s for CUDA, prints, compiles with NVRTC (when it loads) and runs on the emulator. */
static void run_cuda(nancase *c, kg_schedule *s, const char *what) {
  if (!s) return;
  char err[4096];
  char *trace = kg_trace_to_text(&s->trace);
  kg_arena la;
  kg_arena_init(&la);
  kg_lowered *lw = kg_lower(s, KG_TARGET_CUDA, &la, err, sizeof err);
  if (lw && kg_ir_verify(lw, err, sizeof err) != 0) lw = NULL; /* reported below with the message */
  kg_cuda_program cp;
  int printed = lw && kg_codegen_cuda(lw, "kgen", &cp, err, sizeof err) == 0;
  kg_arena_free(&la);
  CHECKF(printed, "%s %s, CUDA, %s: %s\ntrace:\n%s", c->name, c->sizes, what, err, trace);
  if (printed) {
    if (have_nvrtc) {
      kg_cubin cb;
      memset(&cb, 0, sizeof cb);
      int rc = kg_nvrtc_compile(&cp, "sm_86", &cb);
      CHECKF(rc == 0, "%s %s, CUDA, %s: NVRTC: %s", c->name, c->sizes, what, cb.log ? cb.log : "(no log)");
      kg_cubin_free(&cb);
    }
    kg_emu_module m;
    memset(&m, 0, sizeof m);
    int built = kg_emu_build(&cp, &m) == 0;
    CHECKF(built, "%s %s, CUDA, %s: emulator build: %s", c->name, c->sizes, what, m.log ? m.log : "(no log)");
    if (built) {
      int ok = kg_test_emu_verify(&m, &cp, &c->w, err, sizeof err);
      CHECKF(ok, "%s %s, CUDA emulator, %s: %s\ntrace:\n%s", c->name, c->sizes, what, err, trace);
    }
    kg_emu_module_free(&m);
    kg_cuda_program_free(&cp);
  }
  free(trace);
  kg_schedule_free(s);
}

static int case_load(nancase *c, const char *name, const char *src, int64_t R, int64_t D, int64_t N) {
  memset(c, 0, sizeof *c);
  c->name = name;
  c->src = src;
  c->R = R, c->D = D, c->N = N;
  if (N) snprintf(c->sizes, sizeof c->sizes, "N=%lld", (long long)N);
  else snprintf(c->sizes, sizeof c->sizes, "R=%lld D=%lld", (long long)R, (long long)D);
  c->p = kg_test_load_sizes(src, c->sizes);
  CHECKF(c->p != NULL, "%s does not load at %s", name, c->sizes);
  if (!c->p) return -1;
  c->w.p = c->p;
  kg_data_init(&c->w.d, c->p, KG_TEST_DATA_SEED);
  if (N) ew_fill(&c->w.d, N);
  else red_fill(&c->w.d, R, D);
  check_reference(c);
  return 0;
}

static void case_free(nancase *c) {
  if (!c->p) return;
  kg_data_free(&c->w.d);
  kg_program_free(c->p);
  c->p = NULL;
}

/* The reductions of RED through the C paths that combine differently: rfactor's partials in a vectorized
 * register accumulator, an unrolled reduction, a split one. */
static void red_c_schedules(nancase *c) {
  char t[1024];
  run_c(c, kg_schedule_new(c->p), "default schedule");
  static const char *const stages[] = {"Mx", "Mn", "Zx.r0", "Zn.r0", "Lx", "Ln"};
  int f = c->D >= 16 ? 8 : 2;
  int n = 0;
  for (int s = 0; s < 6; s++)
    n += snprintf(t + n, sizeof t - (size_t)n, "rfactor %s j %d\nreorder %s.rf %s j.o j.i\nvectorize %s.rf j.i\n",
                  stages[s], f, stages[s], s < 4 ? "i" : "p i", stages[s]);
  if (c->D >= 2) run_c(c, schedule_text(c->p, t), "rfactor + vectorize");
  n = 0;
  for (int s = 0; s < 6; s++) n += snprintf(t + n, sizeof t - (size_t)n, "split %s j 4\nunroll %s j.i\n", stages[s], stages[s]);
  run_c(c, schedule_text(c->p, t), "split + unroll");
  for (int i = 1; i <= 3; i++) {
    kg_schedule *s = kg_schedule_new(c->p);
    kg_schedule_random(s, (uint64_t)(c->D * 1000 + i), KG_TARGET_C, 4 + 3 * i);
    char what[64];
    snprintf(what, sizeof what, "random schedule %d", i);
    run_c(c, s, what);
  }
}

/* RED's reductions across threads: xor shuffles within a warp (D threads up to 32), then shared memory across
 * warps (64), or shared memory alone (a thread count that is not a power of two). */
static void red_cuda_schedules(nancase *c) {
  kg_schedule *s = kg_schedule_new(c->p);
  kg_schedule_gpu_default(s, 64);
  run_cuda(c, s, "default GPU mapping");
  static const char *const stages[] = {"Mx", "Mn", "Zx.r0", "Zn.r0"};
  static const int64_t threads[] = {32, 64, 5};
  for (int k = 0, last = 0; k < 3; k++) {
    int64_t th = threads[k] < c->D ? threads[k] : c->D;
    if (th < 2 || th == last) continue; /* one thread reduces nothing across threads; a count already done */
    last = (int)th;
    char t[2048];
    int n = 0;
    for (int i = 0; i < 4; i++)
      n += snprintf(t + n, sizeof t - (size_t)n, "bind %s i blockIdx.x\nsplit %s j %lld\nreorder %s i j.i j.o\nbind %s j.i threadIdx.x\n",
                    stages[i], stages[i], (long long)th, stages[i], stages[i]);
    for (int i = 0; i < 2; i++) {
      const char *st = i ? "Ln" : "Lx";
      n += snprintf(t + n, sizeof t - (size_t)n,
                    "fuse %s p i\nbind %s p*i blockIdx.x\nsplit %s j %lld\nreorder %s p*i j.i j.o\n"
                    "bind %s j.i threadIdx.x\n",
                    st, st, st, (long long)th, st, st);
    }
    n += snprintf(t + n, sizeof t - (size_t)n, "bind Zx i blockIdx.x\nbind Zn i blockIdx.x\n");
    char what[64];
    snprintf(what, sizeof what, "cross-thread over %lld threads", (long long)th);
    run_cuda(c, schedule_text(c->p, t), what);
  }
  for (int i = 0; i < 2; i++) {
    kg_test_cuda_draw x;
    memset(&x, 0, sizeof x);
    kg_schedule *rs = kg_test_cuda_draw_make(&x, c->p, (int)c->D, i);
    kg_test_cuda_draw_free(&x);
    char what[64];
    snprintf(what, sizeof what, "random CUDA schedule %d", i);
    run_cuda(c, rs, what);
  }
}

static void ew_schedules(nancase *c) {
  run_c(c, kg_schedule_new(c->p), "default schedule");
  static const char *const outs[] = {"L1", "L2", "L3", "L4", "P1", "P2", "P3", "P4", "Z1", "Z2", "Z3", "Z4"};
  char t[2048];
  int n = 0;
  for (int o = 0; o < 12; o++) n += snprintf(t + n, sizeof t - (size_t)n, "split %s i 16\nvectorize %s i.i\n", outs[o], outs[o]);
  run_c(c, schedule_text(c->p, t), "vectorized");
  for (int i = 1; i <= 2; i++) {
    kg_schedule *s = kg_schedule_new(c->p);
    kg_schedule_random(s, (uint64_t)(c->N * 1000 + i), KG_TARGET_C, 6);
    run_c(c, s, "random schedule");
  }
  kg_schedule *s = kg_schedule_new(c->p);
  kg_schedule_gpu_default(s, 32);
  run_cuda(c, s, "default GPU mapping");
}

/* kgen compiles without -ffast-math, but $KGEN_CFLAGS or a user of an exported header may add it; under its
 * -ffinite-math-only the compiler may assume there is no NaN, and the helpers must still see one. (Zeros are
 * left out: -fno-signed-zeros gives up their sign on purpose.) */
static void fast_math(void) {
  static const char src[] =
      "def fm(A: f32[R, D], X: f32[R, D]) -> (Mx: f32[R], Mn: f32[R], P: f32[R, D], Q: f32[R, D]) {\n"
      "  Mx[i] = max[j](A[i, j])\n"
      "  Mn[i] = min[j](A[i, j])\n"
      "  P[i, j] = max(A[i, j], X[i, j])\n"
      "  Q[i, j] = min(X[i, j], A[i, j])\n"
      "}\n";
  kg_program *p = kg_test_load_sizes(src, "R=18 D=16");
  CHECK(p != NULL);
  if (!p) return;
  kg_data d;
  kg_data_init(&d, p, KG_TEST_DATA_SEED);
  for (int r = 0; r < 16; r++) d.inputs[0][r * 16 + r] = nan_signed(r & 1);
  kg_data_reference_as_is(&d, p);
  for (int r = 0; r < 18; r++) CHECK((r < 16) == isnan(d.ref[0][r]) && (r < 16) == isnan(d.ref[1][r]));
  setenv("KGEN_CFLAGS", "-ffast-math", 1);
  static const char *const traces[] = {"", "rfactor Mx j 8\nvectorize Mx.rf j.i\nrfactor Mn j 8\nvectorize Mn.rf j.i\n"
                                           "vectorize P j\nvectorize Q j\n"};
  for (int k = 0; k < 2; k++) {
    kg_schedule *s = k ? schedule_text(p, traces[k]) : kg_schedule_new(p);
    if (!s) continue;
    char err[8192];
    kg_pipeline pl;
    int built = kg_pipeline_build(s, KG_TARGET_C, &pl, err, sizeof err) == 0;
    CHECKF(built, "-ffast-math build: %s", err);
    if (built) {
      kg_verify_result v = kg_pipeline_verify(&pl, p, &d, 1e-4);
      CHECKF(v.ok, "-ffast-math, schedule %d: %s", k, v.msg);
    }
    kg_pipeline_free(&pl);
    kg_schedule_free(s);
  }
  unsetenv("KGEN_CFLAGS");
  kg_data_free(&d);
  kg_program_free(p);
}

/* An input NaN that happens to carry the poison's bits, copied to an output, is a NaN, not an unwritten element. */
static void poison_input(void) {
  kg_program *p = kg_test_load_sizes("def cp(A: f32[N]) -> (Y: f32[N]) { Y[i] = A[i] }", "N=8");
  CHECK(p != NULL);
  if (!p) return;
  kg_data d;
  kg_data_init(&d, p, 1);
  kg_data_poison(&d, p);
  memcpy(&d.inputs[0][3], &d.outputs[0][0], sizeof(float)); /* the poison pattern as an input value */
  kg_data_reference_as_is(&d, p);
  CHECK(isnan(d.ref[0][3]));
  kg_schedule *s = kg_schedule_new(p);
  char err[8192];
  kg_pipeline pl;
  int built = kg_pipeline_build(s, KG_TARGET_C, &pl, err, sizeof err) == 0;
  CHECKF(built, "%s", err);
  if (built) {
    kg_verify_result v = kg_pipeline_verify(&pl, p, &d, 1e-4);
    CHECKF(v.ok, "a copied NaN input: %s", v.msg);
  }
  kg_pipeline_free(&pl);
  kg_schedule_free(s);
  kg_data_free(&d);
  kg_program_free(p);
}

int main(void) {
  char why[512];
  have_nvrtc = kg_nvrtc_available(why, sizeof why) == 0;
  if (!have_nvrtc) printf("test_nan: NVRTC not available (%s): the printed CUDA is not compiled\n", why);
  static const int64_t lengths[] = {1, 2, 5, 16, 37, 64};
  for (int k = 0; k < 6; k++) {
    nancase c;
    int64_t D = lengths[k];
    if (case_load(&c, "red", RED, D + 2, D, 0) != 0) continue;
    red_c_schedules(&c);
    red_cuda_schedules(&c);
    case_free(&c);
  }
  static const int64_t sizes[] = {16, 37};
  for (int k = 0; k < 2; k++) {
    nancase c;
    if (case_load(&c, "ew", EW, 0, 0, sizes[k]) != 0) continue;
    ew_schedules(&c);
    case_free(&c);
  }
  fast_math();
  poison_input();
  TEST_END();
}
