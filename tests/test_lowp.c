/* f16 and bf16 through the whole pipeline: the rounding helpers (base/half.h) against their definition, the
 * generated code's own conversions (C prelude, both its _Float16 and its bit-level branch; CUDA prelude on the
 * emulator) bit for bit against them, the language (types, conversions, a reduction into a narrow tensor), .npy,
 * the log's dtype, the tolerance, and every library workload made f16 and bf16 (kg_program_set_io_dtype, `--dtype`)
 * under random C schedules and random CUDA schedules (NVRTC for sm_80, sm_86 and sm_90 with the limits checked, then
 * the emulator) against the reference. KGEN_LOWP_SCHEDULES sets the random schedules per workload and type
 * (default 3). */
#include <math.h>
#include <stdint.h>
#include "kgen.h"
#include "base/half.h"
#include "base/rng.h"
#include "base/strbuf.h"
#include <unistd.h>
#include "runtime/cpu.h"
#include "runtime/emu.h"
#include "runtime/nvrtc.h"
#include "testlib.h"
#include "testutil.h"

static kg_program *load(const char *text, const char *sizes, kg_diag *diag, kg_arena *da) {
  kg_binding b[KG_TEST_MAX_BIND];
  char names[KG_TEST_MAX_BIND][32];
  int nb = kg_test_parse_bindings(sizes, b, names, 1);
  return kg_program_load("t.te", text, strlen(text), NULL, b, nb, diag, da);
}

/* ---- the formats ---- */

static void test_formats(void) {
  /* every f16 and bf16 value survives widening and rounding back; NaNs stay NaN */
  int bad16 = 0, badb = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = kg_f16_to_f32((uint16_t)h);
    if (isnan(f)) {
      bad16 += !isnan(kg_f16_to_f32(kg_f16_from_double(f)));
    } else {
      bad16 += kg_f16_from_double(f) != h;
      bad16 += kg_round_f16(f) != (double)f;
    }
    float g = kg_bf16_to_f32((uint16_t)h);
    if (isnan(g)) {
      badb += !isnan(kg_bf16_to_f32(kg_bf16_from_f32(g)));
    } else {
      badb += kg_bf16_from_f32(g) != h;
      badb += kg_round_bf16(g) != (double)g;
    }
  }
  CHECKF(bad16 == 0, "%d f16 values do not round-trip", bad16);
  CHECKF(badb == 0, "%d bf16 values do not round-trip", badb);
  /* ties to even, overflow, subnormals */
  CHECK(kg_round_f16(1 + 0x1p-11) == 1);
  CHECK(kg_round_f16(1 + 3 * 0x1p-11) == 1 + 0x1p-9);
  CHECK(kg_round_f16(1 + 0x1p-11 + 0x1p-30) == 1 + 0x1p-10);
  CHECK(kg_round_f16(65519.99) == 65504);
  CHECK(isinf(kg_round_f16(65520)) && kg_round_f16(-65520) < 0);
  CHECK(kg_round_f16(0x1p-25) == 0 && signbit(kg_round_f16(-0x1p-25)));
  CHECK(kg_round_f16(3 * 0x1p-25) == 0x1p-23);
  CHECK(kg_round_f16(0x1p-24) == 0x1p-24 && kg_f16_from_double(0x1p-24) == 1);
  CHECK(kg_f16_from_double(65504) == 0x7bff && kg_f16_from_double(-INFINITY) == 0xfc00);
  CHECK(kg_round_bf16(1 + 0x1p-8) == 1);
  CHECK(kg_round_bf16(1 + 3 * 0x1p-8) == 1 + 0x1p-6);
  CHECK(isinf(kg_round_bf16(0x1.ffp127)) && kg_round_bf16(0x1.fefffp127) == 0x1.fep127);
  CHECK(kg_round_bf16(0x1p-133) == 0x1p-133 && kg_round_bf16(0x1p-134) == 0);
  CHECK(kg_bf16_from_f32(1.00390625f) == 0x3f80); /* 1 + 2^-8: a tie, to even */
  CHECK(kg_bf16_from_f32(-2.0f) == 0xc000);
  CHECK(kg_dtype_size[KG_DT_F16] == 2 && kg_dtype_size[KG_DT_BF16] == 2 && kg_dtype_size[KG_DT_F32] == 4);
}

/* Values a rounding gets wrong first: ties both ways, just beside them, overflow, the subnormal range, NaN. */
static int tricky_values(float *v, int max) {
  int n = 0;
  const double base[] = {1, 1.5, 0.75, 1024, 3.0e-5, 6.1e-5, 65504, 1e-7, 5.9604644775390625e-8, 3e38, 1e-39};
  for (size_t b = 0; b < sizeof base / sizeof *base && n + 16 < max; b++) {
    int e;
    frexp(base[b], &e);
    for (int p = 8; p <= 11; p += 3) { /* bf16 and f16 ties */
      double ulp = ldexp(1, e - p);
      for (int s = -1; s <= 1; s += 2) {
        v[n++] = (float)(s * (base[b] + ulp / 2));
        v[n++] = (float)(s * (base[b] + 3 * ulp / 2));
        v[n++] = nextafterf((float)(base[b] + ulp / 2), 0) * (float)s;
        v[n++] = nextafterf((float)(base[b] + ulp / 2), INFINITY) * (float)s;
      }
    }
  }
  const float extra[] = {65519.0f, 65520.0f, 65535.0f, -65520.0f, 0.0f, -0.0f, INFINITY, -INFINITY, NAN};
  for (size_t k = 0; k < sizeof extra / sizeof *extra && n < max; k++) v[n++] = extra[k];
  uint64_t s = 12345;
  while (n < max) {
    uint32_t u = (uint32_t)(kg_rng_next(&s) >> 32);
    float f;
    memcpy(&f, &u, 4);
    v[n++] = f;
  }
  return n;
}

/* The C prelude's kg_st_* / kg_ld_* against base/half.h, bit for bit; float16 0: the bit-level branch. */
static void test_c_prelude(int float16) {
  kg_cpu_module m;
  int rc = kg_test_build_with_prelude(float16 ? "" : "#define KG_NO_FLOAT16 1\n",
                     "void conv_args(float **a) {\n"
                     "  const float *x = a[0]; uint16_t *h = (uint16_t *)(void *)a[1], *g = (uint16_t *)(void *)a[2];\n"
                     "  float *back = a[3], *gback = a[4]; const int n = 4096;\n"
                     "  for (int i = 0; i < n; i++) { h[i] = kg_st_f16(x[i]); g[i] = kg_st_bf16(x[i]); }\n"
                     "  for (int i = 0; i < 65536; i++) { back[i] = kg_ld_f16((uint16_t)i); gback[i] = kg_ld_bf16((uint16_t)i); }\n"
                     "}\n",
                     "conv", &m);
  CHECKF(rc == 0, "the C prelude's conversions do not build: %s", m.log ? m.log : "?");
  if (rc) return;
  enum { N = 4096 };
  float *x = malloc(sizeof(float) * N), *back = malloc(sizeof(float) * 65536), *gback = malloc(sizeof(float) * 65536);
  uint16_t *h = malloc(2 * N), *g = malloc(2 * N);
  tricky_values(x, N);
  float *args[5] = {x, (float *)(void *)h, (float *)(void *)g, back, gback};
  kg_cpu_call(&m, args, 5);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    uint16_t want = kg_f16_from_f32(x[i]), wantb = kg_bf16_from_f32(x[i]);
    int nan = isnan(x[i]);
    int ok16 = nan ? isnan(kg_f16_to_f32(h[i])) : h[i] == want;
    int okb = nan ? isnan(kg_bf16_to_f32(g[i])) : g[i] == wantb;
    if ((!ok16 || !okb) && bad++ < 5)
      CHECKF(0, "C prelude (%s): %a: f16 %04x (want %04x), bf16 %04x (want %04x)", float16 ? "_Float16" : "bits",
             (double)x[i], h[i], want, g[i], wantb);
  }
  for (int i = 0; i < 65536; i++) {
    float a = kg_f16_to_f32((uint16_t)i), c = kg_bf16_to_f32((uint16_t)i);
    if (!((isnan(a) && isnan(back[i])) || kg_half_fbits(a) == kg_half_fbits(back[i])) && bad++ < 10)
      CHECKF(0, "C prelude: kg_ld_f16(%04x) = %a, want %a", i, (double)back[i], (double)a);
    if (!((isnan(c) && isnan(gback[i])) || kg_half_fbits(c) == kg_half_fbits(gback[i])) && bad++ < 10)
      CHECKF(0, "C prelude: kg_ld_bf16(%04x) = %a, want %a", i, (double)gback[i], (double)c);
  }
  CHECKF(bad == 0, "C prelude (%s): %d conversions differ", float16 ? "_Float16" : "bits", bad);
  kg_cpu_module_free(&m);
  free(x), free(back), free(gback), free(h), free(g);
}

/* The CUDA prelude's conversions on the emulator, bit for bit: stores into f16 and bf16 outputs and the conversion
 * calls, under a random CUDA schedule. */
static void test_cuda_prelude(void) {
  kg_arena da;
  kg_arena_init(&da);
  kg_diag d = {0};
  const char *text = "def conv(X: f32[N]) -> (H: f16[N], B: bf16[N], C: f32[N]) {\n"
                     "  H[i] = X[i]\n  B[i] = X[i]\n  C[i] = f16(X[i]) + bf16(X[i])\n}\n";
  kg_binding b = {"N", 4096};
  kg_program *p = kg_program_load("conv.te", text, strlen(text), NULL, &b, 1, &d, &da);
  CHECKF(p != NULL, "%s", d.msg ? d.msg : "?");
  kg_arena_free(&da);
  if (!p) return;
  kg_test_workload w;
  memset(&w, 0, sizeof w);
  w.p = p;
  CHECK(kg_data_init(&w.d, p, 1) == 0);
  tricky_values(w.d.inputs[0], 4096);
  for (int i = 0; i < 3; i++) {
    kg_test_cuda_draw x;
    memset(&x, 0, sizeof x);
    kg_schedule_free(kg_test_cuda_draw_make(&x, p, 77, i));
    kg_emu_module em;
    if (x.printed && kg_emu_build(&x.prog, &em) == 0) {
      float *args[3] = {w.d.inputs[0], w.d.outputs[0], w.d.outputs[1]};
      float *all[4] = {args[0], args[1], args[2], w.d.outputs[2]};
      char err[512];
      kg_data_poison(&w.d, p);
      CHECKF(kg_emu_run_program(&em, &x.prog, all, err, sizeof err) == 0, "%s", err);
      const uint16_t *h = (const uint16_t *)(void *)w.d.outputs[0], *g = (const uint16_t *)(void *)w.d.outputs[1];
      int bad = 0;
      for (int k = 0; k < 4096; k++) {
        float v = w.d.inputs[0][k];
        float c = w.d.outputs[2][k], cw = (float)kg_round_f16(v) + (float)kg_round_bf16(v);
        int ok = isnan(v) ? isnan(kg_f16_to_f32(h[k])) && isnan(kg_bf16_to_f32(g[k])) && isnan(c)
                          : h[k] == kg_f16_from_f32(v) && g[k] == kg_bf16_from_f32(v) &&
                                kg_half_fbits(c) == kg_half_fbits(cw);
        if (!ok && bad++ < 5)
          CHECKF(0, "CUDA prelude on the emulator: %a: f16 %04x bf16 %04x f32 %a (want %04x %04x %a)", (double)v, h[k],
                 g[k], (double)c, kg_f16_from_f32(v), kg_bf16_from_f32(v), (double)cw);
      }
      CHECKF(bad == 0, "%d elements differ\ntrace:\n%s", bad, x.trace);
      kg_emu_module_free(&em);
    } else {
      CHECKF(0, "conv: %s", x.printed ? (em.log ? em.log : "emulator build failed") : x.err);
    }
    kg_test_cuda_draw_free(&x);
  }
  kg_test_workload_free(&w);
}

/* The pipelined SGEMM example on bf16 and f16 operands: 64-bit (ushort4) fetches copied by cp.async, the f32
 * accumulator, verified on the emulator. */
/* The pipelined example schedule (examples/schedules/matmul_pipelined.sched, then the steps of extra) of
 * C = A * B with A and B of type t and an f32 C, M=128 N=128 K=64: w loaded with data from seed, prog printed for
 * CUDA. 1 when printed (each failure CHECKed); w is to be freed either way, prog when printed. */
static int pipelined_matmul(kg_dtype t, const char *extra, uint64_t seed, kg_test_workload *w, kg_cuda_program *prog) {
  memset(w, 0, sizeof *w);
  memset(prog, 0, sizeof *prog);
  size_t len;
  char *trace = kg_test_read_file("examples/schedules/matmul_pipelined.sched", &len);
  CHECK(trace != NULL);
  if (!trace) return 0;
  char text[256];
  snprintf(text, sizeof text, "def matmul(A: %s[M, K], B: %s[K, N]) -> (C: f32[M, N]) {\n"
           "  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n", kg_dtype_names[t], kg_dtype_names[t]);
  kg_arena da;
  kg_arena_init(&da);
  kg_diag d = {0};
  w->p = load(text, "M=128 N=128 K=64", &d, &da);
  kg_arena_free(&da);
  CHECK(w->p != NULL);
  int printed = 0;
  if (w->p) {
    kg_data_init(&w->d, w->p, seed);
    kg_data_reference(&w->d, w->p, seed);
    kg_schedule *s = kg_schedule_new(w->p);
    char err[1024];
    CHECKF(kg_test_apply_text(s, trace, err, sizeof err) == 0, "%s", err);
    CHECKF(kg_test_apply_text(s, extra, err, sizeof err) == 0, "%s", err);
    kg_arena la;
    kg_arena_init(&la);
    kg_lowered *lw = kg_lower(s, KG_TARGET_CUDA, &la, err, sizeof err);
    printed = lw && kg_codegen_cuda(lw, "kgen", prog, err, sizeof err) == 0;
    CHECKF(printed, "%s", err);
    kg_arena_free(&la);
    kg_schedule_free(s);
  }
  free(trace);
  return printed;
}

/* prog built for the emulator and verified against w's reference. */
static void emu_check(const kg_cuda_program *prog, kg_test_workload *w) {
  kg_emu_module em;
  char err[1024];
  CHECK(kg_emu_build(prog, &em) == 0);
  CHECKF(kg_test_emu_verify(&em, prog, w, err, sizeof err), "%s", err);
  kg_emu_module_free(&em);
}

static void test_vector_fetch(void) {
  for (int t = KG_DT_F16; t <= KG_DT_BF16; t++) {
    kg_test_workload w;
    kg_cuda_program prog;
    if (pipelined_matmul((kg_dtype)t, "", 3, &w, &prog)) {
      CHECKF(strstr(prog.source, "vectorized as ushort4") && strstr(prog.source, "kg_cp_async8(A_shared"),
             "no 64-bit fetch of a narrow operand:\n%s", prog.source);
      CHECK(strstr(prog.source, "unsigned short A_shared[") || strstr(prog.source, "unsigned short *const A_shared"));
      emu_check(&prog, &w);
      kg_cubin cb;
      memset(&cb, 0, sizeof cb);
      CHECKF(kg_nvrtc_compile(&prog, "sm_80", &cb) == 0 && cb.ptx && strstr(cb.ptx, "cp.async.ca.shared.global"),
             "%s", cb.log ? cb.log : "no cp.async in the PTX");
      kg_cubin_free(&cb);
      kg_cuda_program_free(&prog);
    }
    kg_test_workload_free(&w);
  }
}

/* ---- widen: packed copies stored as f32 ---- */

/* The packed operands of a bf16 GEMM widened: the same bits as without (widening is exact, and the readers compute
 * in f32 either way), f32 storage in the printed C, and no conversion left in the register tile's loop. On CUDA a
 * widened shared copy verifies on the emulator and is not copied with cp.async (which moves bytes unconverted). */
static const char widen_trace[] =
    "split C.r0 i 4\nsplit C.r0 j 16\nsplit C.r0 k 8\nreorder C.r0 i.o j.o k.o k.i i.i j.i\n"
    "cache_read B local C.r0\ncompute_at B.local C.r0 k.o\ncache_read A local C.r0\ncompute_at A.local C.r0 j.o\n"
    "vectorize C.r0 j.i\nunroll C.r0 i.i\n";

static void test_widen(void) {
  kg_test_workload w;
  if (kg_test_workload_load_typed(&w, "te/lib/matmul.te", KG_DT_BF16) != 0) return;
  int64_t nw = kg_data_words(w.p->outputs[0]);
  float *plain = calloc((size_t)nw, sizeof *plain);
  char err[1024], text[1024], *src[2] = {NULL, NULL};
  for (int wide = 0; wide < 2; wide++) {
    snprintf(text, sizeof text, "%s%s", widen_trace, wide ? "widen B.local\nwiden A.local\n" : "");
    kg_schedule *s = kg_schedule_new(w.p);
    CHECKF(kg_test_apply_text(s, text, err, sizeof err) == 0, "%s", err);
    kg_pipeline pl;
    int ok = kg_pipeline_build(s, KG_TARGET_C, &pl, err, sizeof err) == 0;
    CHECKF(ok, "%s", err);
    if (ok) {
      kg_verify_result v = kg_pipeline_verify(&pl, w.p, &w.d, 0);
      CHECKF(v.ok, "widen %d: %s", wide, v.msg);
      if (!wide) memcpy(plain, w.d.outputs[0], sizeof *plain * (size_t)nw);
      else CHECKF(!memcmp(plain, w.d.outputs[0], sizeof *plain * (size_t)nw), "widened copies change the result");
      kg_pipeline_free(&pl);
    }
    kg_arena la;
    kg_arena_init(&la);
    kg_lowered *lw = kg_lower(s, KG_TARGET_C, &la, err, sizeof err);
    CHECKF(lw != NULL, "%s", err);
    if (lw && kg_codegen_c(lw, "kgen", &src[wide], err, sizeof err) != 0) src[wide] = NULL;
    CHECKF(src[wide] != NULL, "%s", err);
    kg_arena_free(&la);
    kg_schedule_free(s);
  }
  if (src[0] && src[1]) {
    CHECKF(strstr(src[0], "uint16_t B_local[") && strstr(src[0], "kg_ld_bf16(B_local["), "%s", src[0]);
    CHECKF(strstr(src[1], "float B_local[") && strstr(src[1], "float A_local[") && !strstr(src[1], "kg_ld_bf16(B_local[") &&
           !strstr(src[1], "kg_ld_bf16(A_local["), "%s", src[1]);
  }
  free(src[0]);
  free(src[1]);
  free(plain);
  /* what widen refuses, and tensorize of a widened operand */
  static const char *const bad[][2] = {
      {"widen C.r0\n", "widen: stage C.r0: is not a cache_read copy"},
      {"widen A\n", "widen: stage A: no such stage"},
      {"cache_read A local C.r0\nwiden A.local\nwiden A.local\n", "widen: stage A.local: is already f32"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    kg_schedule *s = kg_schedule_new(w.p);
    CHECKF(kg_test_apply_text(s, bad[k][0], err, sizeof err) != 0 && strstr(err, bad[k][1]), "%s: %s", bad[k][0], err);
    kg_schedule_free(s);
  }
  kg_test_workload_free(&w);
  /* CUDA: the pipelined example with both shared copies widened; tensorize then refuses them */
  kg_cuda_program prog;
  if (pipelined_matmul(KG_DT_BF16, "widen A.shared\nwiden B.shared\n", 4, &w, &prog)) {
    CHECKF(strstr(prog.source, "float A_shared[") && !strstr(prog.source, "kg_cp_async8(A_shared") &&
           !strstr(prog.source, "kg_cp_async16(A_shared"), "%s", prog.source);
    emu_check(&prog, &w);
    kg_cuda_program_free(&prog);
  }
  if (w.p) {
    kg_schedule *s = kg_schedule_new(w.p);
    CHECKF(kg_test_apply_text(s, "cache_read A shared C\nwiden A.shared\ntensorize C i j k\n", err, sizeof err) != 0 &&
           strstr(err, "two f16 or two bf16"), "tensorize took a widened operand: %s", err);
    kg_schedule_free(s);
  }
  kg_test_workload_free(&w);
}

/* ---- the language ---- */


static void expect_error(const char *text, const char *needle) {
  kg_arena da;
  kg_arena_init(&da);
  kg_diag d = {0};
  kg_program *p = load(text, "N=4", &d, &da);
  CHECKF(p == NULL, "loaded: %s", text);
  kg_program_free(p);
  CHECKF(d.msg && strstr(d.msg, needle), "want '%s' in: %s", needle, d.msg ? d.msg : "(none)");
  kg_arena_free(&da);
}

static void test_language(void) {
  expect_error("def f(A: f64[N]) -> (T: f32[N]) { T[i] = A[i] }", "dtype f64 is not supported (tensors are f32, f16 or bf16)");
  expect_error("def f(A: i32[N]) -> (T: f32[N]) { T[i] = A[i] }", "dtype i32 is not supported");
  expect_error("def f(A: f16[N]) -> (T: f32[N]) { T[i] : bf16[N] = A[i] }", "'T' is declared bf16 here but f32 in the signature");
  expect_error("def f(A: f16[N]) -> (T: f32[N]) { T[i] = f16(A[i], 1.0) }", "f16 takes 1 argument, got 2");
  expect_error("def f(bf16: f16[N]) -> (T: f32[N]) { T[i] = 1.0 }", "reserved word");

  kg_arena da;
  kg_arena_init(&da);
  kg_diag d = {0};
  /* a reduction into a narrow tensor: an f32 stage of its own, rounded once by the tensor's stage */
  kg_program *p = load("def f(A: bf16[N, N], B: f16[N]) -> (C: f16[N]) {\n"
                       "  S[i] : bf16[N] = sum[k](A[i, k] * B[k])\n"
                       "  C[i] = f16(S[i]) + bf16(B[i]) * f32(0.5)\n}\n",
                       "N=4", &d, &da);
  CHECKF(p != NULL, "%s", d.msg ? d.msg : "?");
  if (p) {
    CHECK(p->inputs[0]->dtype == KG_DT_BF16 && p->inputs[1]->dtype == KG_DT_F16 && p->outputs[0]->dtype == KG_DT_F16);
    CHECKF(p->nstages == 3, "%d stages", p->nstages);
    if (p->nstages == 3) {
      CHECK(!strcmp(p->stages[0]->name, "S.r0") && p->stages[0]->red == KG_RED_SUM && p->stages[0]->out->dtype == KG_DT_F32);
      CHECK(!strcmp(p->stages[1]->name, "S") && p->stages[1]->red == KG_RED_NONE && p->stages[1]->out->dtype == KG_DT_BF16);
    }
    char *c = kg_program_canonical(p);
    CHECKF(strstr(c, "input A : bf16[4, 4]") && strstr(c, "temp S[i] : bf16[4] = S.r0[i]") &&
               strstr(c, "output C[i] : f16[4]"),
           "%s", c);
    free(c);
    /* the reference rounds on stores into narrow tensors, and the conversions round */
    float a[16], bv[4];
    for (int k = 0; k < 16; k++) a[k] = (float)kg_round_bf16(0.1 + 0.37 * k);
    for (int k = 0; k < 4; k++) bv[k] = (float)kg_round_f16(1.0 / (k + 3));
    double out[4];
    const float *in[2] = {a, bv};
    double *outs[1] = {out};
    CHECK(kg_eval_reference(p, in, outs) == 0);
    for (int i = 0; i < 4; i++) {
      double s = 0;
      for (int k = 0; k < 4; k++) s += (double)a[i * 4 + k] * bv[k];
      double want = kg_round_f16(kg_round_f16(kg_round_bf16(s)) + kg_round_bf16(bv[i]) * 0.5);
      CHECKF(out[i] == want, "C[%d] = %.9g, want %.9g", i, out[i], want);
    }
  }
  kg_program_free(p);

  /* --dtype: every input and output retyped, the hash moves, f32 hashes stay */
  const char *mm = "def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {\n  C[i, j] = sum[k](A[i, k] * B[k, j])\n}\n";
  kg_program *q = load(mm, "M=8 N=4 K=6", &d, &da), *r = load(mm, "M=8 N=4 K=6", &d, &da);
  CHECK(q && r);
  if (q && r) {
    kg_tlog_workload w0, w1;
    kg_tlog_workload_of(q, &w0);
    CHECK(kg_program_set_io_dtype(r, KG_DT_BF16, &d, &da) == 0);
    kg_tlog_workload_of(r, &w1);
    CHECK(strcmp(w0.hash, w1.hash) != 0 && w0.io_dtype == 0 && w1.io_dtype == 1 + KG_DT_BF16);
    CHECK(r->nstages == 2 && r->inputs[0]->dtype == KG_DT_BF16 && r->outputs[0]->dtype == KG_DT_BF16);
    CHECK(kg_program_bytes(r) == 2 * (8 * 6 + 6 * 4 + 8 * 4) && kg_program_bytes(q) == 4 * (8 * 6 + 6 * 4 + 8 * 4));
    /* a dynamic size on a retyped program (checked against the program reloaded, retyped too), and rebinding
     * keeps the types */
    kg_dynamic_size dm = {"M", 0, 0};
    CHECKF(kg_program_set_dynamic(r, &dm, 1, &d, &da) == 0, "%s", d.msg ? d.msg : "?");
    kg_program *rb = kg_program_rebind(r, 0, 16, &d, &da);
    CHECK(rb && rb->inputs[0]->dtype == KG_DT_BF16 && rb->io_retyped && rb->sizes[0].dynamic);
    kg_program_free(rb);
    /* --tf32: another workload (its hash moves; the f32 one's stays), kept by a rebinding */
    kg_tlog_workload w2, w3;
    q->tf32 = 1;
    kg_tlog_workload_of(q, &w2);
    CHECK(strcmp(w0.hash, w2.hash) != 0 && strcmp(w1.hash, w2.hash) != 0 && w2.tf32 == 1 && w2.io_dtype == 0);
    q->tf32 = 0;
    kg_tlog_workload_of(q, &w3);
    CHECK(!strcmp(w0.hash, w3.hash) && w3.tf32 == 0);
    r->tf32 = 1;
    rb = kg_program_rebind(r, 0, 16, &d, &da);
    CHECK(rb && rb->tf32 == 1);
    kg_program_free(rb);
    r->tf32 = 0;
    /* the log keeps the retyping and TF32; a reader gets them back */
    kg_tlog_record rec;
    memset(&rec, 0, sizeof rec);
    rec.v = KG_TLOG_VERSION;
    rec.workload = w1;
    rec.target = (kg_tlog_target){"c", "x86-64", "cpu", "gcc", "cpu"};
    kg_trace_init(&rec.trace);
    rec.status = "ok";
    char err[256];
    const char *path = "/tmp/kgen-test-lowp.kglog";
    unlink(path);
    kg_tlog_writer *wr = kg_tlog_open(path, err, sizeof err);
    CHECKF(wr && kg_tlog_append(wr, &rec, err, sizeof err) == 0, "%s", err);
    rec.workload = w2;
    CHECKF(wr && kg_tlog_append(wr, &rec, err, sizeof err) == 0, "%s", err);
    if (wr) kg_tlog_close(wr);
    kg_tlog log;
    kg_tlog_init(&log);
    int missing = 0;
    CHECK(kg_tlog_read(&log, path, &missing, err, sizeof err) == 0 && log.n == 2);
    if (log.n == 2) {
      CHECK(log.recs[0].workload.io_dtype == 1 + KG_DT_BF16 && !strcmp(log.recs[0].workload.hash, w1.hash) &&
            !log.recs[0].workload.tf32);
      CHECK(log.recs[1].workload.io_dtype == 0 && !strcmp(log.recs[1].workload.hash, w2.hash) &&
            log.recs[1].workload.tf32 == 1);
    }
    kg_tlog_free(&log);
    unlink(path);
  }
  kg_program_free(q);
  kg_program_free(r);
  /* --dtype retypes the intermediates that only move the retyped data (selects, negations, max/min, constants of
   * the type, reads of copies), whatever their declaration, and no other: values and results stay the same */
  kg_program *c = load("def f(X: f32[N], Y: f32[N]) -> (Z: f32[N]) {\n"
                       "  P[i] : f32[N + 2] = select(i >= 1 && i <= N, X[i - 1], 0.5)\n"
                       "  Q[i] = max(-P[i + 1], Y[i])\n  E[i] = P[i] * 2\n  G[i] = select(i > 0, Q[i], 0.1)\n"
                       "  Z[i] = Q[i] + E[i] + G[i]\n}\n", "N=8", &d, &da);
  CHECK(c != NULL);
  if (c) {
    CHECK(kg_program_set_io_dtype(c, KG_DT_BF16, &d, &da) == 0);
    static const char *const nm[] = {"P", "Q", "E", "G"};
    static const kg_dtype want[] = {KG_DT_BF16, KG_DT_BF16, KG_DT_F32, KG_DT_F32}; /* 0.1 is no bf16 */
    for (int k = 0; k < 4; k++) {
      const kg_tensor *t = kg_program_find_tensor(c, nm[k]);
      CHECKF(t && t->dtype == want[k], "%s is %s", nm[k], t ? kg_dtype_names[t->dtype] : "missing");
    }
    kg_program_free(c);
  }
  kg_arena_free(&da);
}

/* ---- data: .npy and the tolerance ---- */

static void test_npy(void) {
  char err[256];
  uint16_t h[6], back16[6];
  const float vals[6] = {1.0f, -2.5f, 0.333251953125f, 65504.0f, 5.9604644775390625e-8f, -0.0f};
  for (int k = 0; k < 6; k++) h[k] = kg_f16_from_f32(vals[k]);
  int64_t shape[2] = {2, 3};
  const char *p16 = "/tmp/kgen-test-lowp-f16.npy", *pb = "/tmp/kgen-test-lowp-bf16.npy";
  CHECK(kg_npy_save(p16, h, KG_DT_F16, 2, shape, err, sizeof err) == 0);
  size_t n;
  char *raw = kg_test_read_file(p16, &n);
  CHECK(raw && strstr(raw + 10, "'descr': '<f2'") && n == 128 + 12);
  free(raw);
  uint16_t *y = kg_npy_load(p16, KG_DT_F16, 2, shape, err, sizeof err);
  CHECKF(y && !memcmp(y, h, sizeof h), "%s", y ? "values" : err);
  free(y);
  /* the same file read as f32 widens exactly; as bf16 it rounds */
  float *yf = kg_npy_load(p16, KG_DT_F32, 2, shape, err, sizeof err);
  CHECK(yf && yf[2] == vals[2] && yf[3] == 65504.0f);
  free(yf);
  y = kg_npy_load(p16, KG_DT_BF16, 2, shape, err, sizeof err);
  CHECK(y && kg_bf16_to_f32(y[2]) == (float)kg_round_bf16(vals[2]));
  free(y);
  /* bf16 goes out as '<f4' with its exact values */
  for (int k = 0; k < 6; k++) back16[k] = kg_bf16_from_f32(vals[k] * 1.01f);
  CHECK(kg_npy_save(pb, back16, KG_DT_BF16, 2, shape, err, sizeof err) == 0);
  yf = kg_npy_load(pb, KG_DT_F32, 2, shape, err, sizeof err);
  CHECK(yf != NULL);
  for (int k = 0; yf && k < 6; k++) CHECK(yf[k] == kg_bf16_to_f32(back16[k]));
  free(yf);
  raw = kg_test_read_file(pb, &n);
  CHECK(raw && strstr(raw + 10, "'descr': '<f4'") && n == 128 + 24);
  free(raw);
  unlink(p16);
  unlink(pb);
}

/* A kernel off by an ulp of a narrow output passes; by two, or unwritten, it fails. */
static void test_tolerance(void) {
  kg_arena da;
  kg_arena_init(&da);
  kg_diag d = {0};
  kg_program *p = load("def f(X: bf16[N, N]) -> (Y: bf16[N, N]) {\n  Y[i, j] = exp(X[i, j]) / sum[k](exp(X[i, k]))\n}\n",
                       "N=16", &d, &da);
  CHECK(p != NULL);
  if (!p) return;
  double tol = kg_verify_tolerance(p, 1e-4);
  CHECKF(fabs(tol - (1e-4 + 0x1p-7)) < 1e-12, "tolerance %g", tol);
  kg_data data;
  CHECK(kg_data_init(&data, p, 5) == 0 && kg_data_reference(&data, p, 5) == 0);
  uint16_t *y = (uint16_t *)(void *)data.outputs[0];
  for (int k = 0; k < 256; k++) kg_data_set(KG_DT_BF16, y, k, data.ref[0][k]);
  kg_verify_result v = kg_verify(p, &data, 1e-4);
  CHECKF(v.ok && v.max_rel_err == 0, "%s", v.msg);
  y[37] = (uint16_t)(y[37] + 1); /* one ulp */
  v = kg_verify(p, &data, 1e-4);
  CHECKF(v.ok, "one ulp off fails: %s", v.msg);
  y[37] = (uint16_t)(y[37] + 1); /* two */
  v = kg_verify(p, &data, 1e-4);
  CHECKF(!v.ok && strstr(v.msg, "Y[2,5]"), "two ulps off passes: %s", v.msg);
  kg_data_poison(&data, p);
  v = kg_verify(p, &data, 1e-4);
  CHECKF(!v.ok && strstr(v.msg, "unwritten"), "%s", v.msg);
  kg_data_free(&data);
  kg_program_free(p);
  kg_arena_free(&da);
}

/* ---- every library workload, retyped, under random schedules ---- */

static const char *const arches[3] = {"sm_80", "sm_86", "sm_90"};

static void test_random(int per) {
  char *files[KG_TEST_MAX_WORKLOADS];
  int nlib = 0, nfiles = kg_test_list_workloads(files, KG_TEST_MAX_WORKLOADS, &nlib);
  CHECKF(nlib >= 14, "only %d workloads in te/lib", nlib);
  kg_gpu_limits lim[3];
  for (int a = 0; a < 3; a++) CHECK(kg_gpu_limits_for_arch(arches[a], &lim[a]) == 0);
  int c_ok = 0, c_n = 0, g_ok = 0, g_n = 0, narrow_shared = 0, widened = 0;
  for (int w = 0; w < nlib; w++)
    for (int t = KG_DT_F16; t <= KG_DT_BF16; t++) {
      kg_test_workload wl;
      if (kg_test_workload_load_typed(&wl, files[w], t) != 0) continue;
      for (int i = 0; i < per; i++) {
        uint64_t seed = (uint64_t)(w * 1000 + t * 100 + i + 1);
        /* C */
        kg_schedule *s = kg_schedule_new(wl.p);
        kg_schedule_random(s, seed, KG_TARGET_C, 10);
        for (int k = 0; k < s->trace.nsteps; k++) widened += s->trace.steps[k].kind == KG_STEP_WIDEN;
        char what[600];
        snprintf(what, sizeof what, "kgen run %s%s --dtype %s --target c --random-schedule %llu", files[w], wl.sizes,
                 kg_dtype_names[t], (unsigned long long)seed);
        c_ok += kg_test_verify_c(&wl, s, what);
        c_n++;
        kg_schedule_free(s);
        /* CUDA: NVRTC for each arch with the limits, then the emulator */
        kg_test_cuda_draw x;
        memset(&x, 0, sizeof x);
        s = kg_test_cuda_draw_make(&x, wl.p, w * 10 + t, i);
        for (int k = 0; k < s->nstages; k++)
          narrow_shared += s->stages[k]->scope == KG_SCOPE_SHARED && s->stages[k]->out->dtype != KG_DT_F32;
        kg_schedule_free(s);
        snprintf(what, sizeof what, "kgen run %s%s --dtype %s --target cuda --emulate --random-schedule %llu",
                 files[w], wl.sizes, kg_dtype_names[t], (unsigned long long)x.seed);
        if (!kg_test_cuda_draw_check(&x, files[w], what)) {
          kg_test_cuda_draw_free(&x);
          continue;
        }
        g_n++;
        int good = 1;
        for (int a = 0; a < 3; a++) {
          kg_cubin cb;
          memset(&cb, 0, sizeof cb);
          int rc = kg_nvrtc_compile(&x.prog, arches[a], &cb);
          CHECKF(rc == 0, "%s: NVRTC %s: %s\n%s", what, arches[a], cb.log ? cb.log : "?", x.prog.source);
          char lw[512];
          if (rc == 0) {
            int fits = kg_gpu_check_limits(&x.prog, &cb, &lim[a], lw, sizeof lw) == 0;
            CHECKF(fits, "%s: %s: over the limits: %s", what, arches[a], lw);
            good &= fits;
          }
          good &= rc == 0;
          kg_cubin_free(&cb);
        }
        kg_emu_module em;
        int rc = kg_emu_build(&x.prog, &em);
        CHECKF(rc == 0, "%s: emulator build: %s", what, em.log ? em.log : "?");
        if (rc == 0) {
          char rerr[1024];
          int ok = kg_test_emu_verify(&em, &x.prog, &wl, rerr, sizeof rerr);
          CHECKF(ok, "%s: emulator: %s\ntrace:\n%s", what, rerr, x.trace);
          good &= ok;
          kg_emu_module_free(&em);
        }
        g_ok += good;
        kg_test_cuda_draw_free(&x);
      }
      kg_test_workload_free(&wl);
    }
  printf("f16/bf16: %d/%d random C schedules verified, %d/%d random CUDA schedules compiled for sm_80/86/90 and "
         "verified on the emulator, %d narrow shared stages, %d widened copies in the C schedules\n", c_ok, c_n, g_ok, g_n,
         narrow_shared, widened);
  CHECKF(widened > 0 || per < 3, "no random C schedule widened a copy");
  CHECKF(g_n >= nlib, "only %d CUDA schedules printed", g_n);
  CHECKF(narrow_shared > 0, "no random CUDA schedule staged an f16/bf16 tensor in shared memory");
  kg_test_free_workloads(files, nfiles);
}

int main(void) {
  test_formats();
  test_c_prelude(1);
  test_c_prelude(0);
  test_cuda_prelude();
  test_vector_fetch();
  test_language();
  test_npy();
  test_tolerance();
  test_widen();
  int per = 3;
  const char *env = getenv("KGEN_LOWP_SCHEDULES");
  if (env) per = atoi(env);
  char why[512];
  CHECKF(kg_nvrtc_available(why, sizeof why) == 0, "NVRTC is needed: %s", why);
  test_random(per < 1 ? 1 : per);
  TEST_END();
}
