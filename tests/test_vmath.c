/* The C prelude's exp, erf and tanh (kg_expf, kg_erff, kg_tanhf): on gcc for x86-64 their vector variants under
 * the vector function ABI's names, which the vectorizer calls in place of libmvec's; elsewhere, or with
 * KG_NO_VEXP, the scalar code inline. Checks, at every ISA level the variants have (AVX-512, AVX2, AVX, SSE4.1,
 * SSE2) and for the scalar code: the vector loop, its remainder, a sum reduction and a scalar call through a
 * pointer, on random bit patterns, on the range where the function is not constant and on the special values,
 * against the function in double (exp within 1.5 ulp of the float result, subnormal results included, erf and tanh
 * within 2; NaN, infinities, overflow and underflow as libm); and, from the built code's disassembly, that the
 * vector loops call the variant of the level's width, so that a prelude the vectorizer silently stops using (a
 * scalar call per element) fails here. Last, built with -ffast-math (as an exported header may be): within 8 ulp
 * for finite inputs with normal results (reassociation had left exp 60 ulp off, and millions before that). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/codegen.h"
#include "runtime/cpu.h"
#include "testlib.h"
#include "testutil.h"

enum { N = 1 << 16, NREM = 16 * 37 + 13 };

static const char BODY[] =
    "void fn_args(float **a) {\n"
    "  const float *x = a[0];\n"
    "  float *y = a[1], *z = a[2], *info = a[3];\n"
    "  int n = (int)info[0];\n"
    "#pragma omp simd\n"
    "  for (int i = 0; i < n; i++) y[i] = F(x[i]);\n"
    "  float (*volatile one)(float) = FN;\n"
    "  for (int i = 0; i < n; i++) z[i] = one(x[i]);\n"
    "  float s = 0;\n"
    "  int m = (int)info[1];\n"
    "#pragma omp simd reduction(+ : s)\n"
    "  for (int i = 0; i < m; i++) s += F(x[i + 32] * 0.25f - 3.0f);\n"
    "  info[2] = s;\n"
    "#if defined(KG_VEXP)\n"
    "  info[3] = 1;\n"
    "#endif\n"
    "#if defined(__AVX512F__)\n"
    "  info[4] = 16;\n"
    "#elif defined(__AVX2__)\n"
    "  info[4] = 8;\n"
    "#elif defined(__AVX__)\n"
    "  info[4] = 7;\n"
    "#else\n"
    "  info[4] = 4;\n"
    "#endif\n"
    "#if defined(KG_TANHF_LIBMVEC)\n"
    "  info[6] = 1;\n"
    "#endif\n"
    "#if defined(__GNUC__) && !defined(__clang__) && !defined(__INTEL_COMPILER) && defined(__x86_64__) && \\\n"
    "    defined(__ELF__)\n"
    "  info[5] = 1;\n"
    "#endif\n"
    "}\n";

typedef struct {
  const char *name;         /* the prelude's function */
  double (*ref)(double);    /* in double */
  float lo, hi;             /* the range where it is not constant */
  double bound;             /* ulps */
  const char *define;       /* before the prelude */
  const char *libmvec;      /* libmvec's function that the prelude may map it to (KG_TANHF_LIBMVEC), or NULL */
} vfn;
/* tanh twice: kgen's own (KG_NO_LIBMVEC), and as kernels get it, libmvec's where glibc has it (libm's scalar
 * tanhf is within 2.2 ulp) */
static const vfn FNS[] = {{"kg_expf", exp, -104.0f, 89.0f, 1.5, "", NULL},
                          {"kg_erff", erf, -4.5f, 4.5f, 2.0, "", NULL},
                          {"kg_tanhf", tanh, -10.0f, 10.0f, 2.0, "#define KG_NO_LIBMVEC 1\n", NULL},
                          {"kg_tanhf", tanh, -10.0f, 10.0f, 3.0, "", "tanhf"}};

static uint32_t rng = 12345u;
static uint32_t next_u32(void) { return rng = rng * 1664525u + 1013904223u; }
/* a random bit pattern: any float, NaNs and infinities included */
static float next_bits(void) {
  next_u32();
  float f;
  memcpy(&f, &rng, sizeof f);
  return f;
}

/* y against f(x): 0 when right; otherwise the error in ulps of the float result (-1 for a wrong special case) */
static double err_ulps(const vfn *f, float x, float y) {
  if (isnan(x)) return isnan(y) ? 0 : -1;
  double e = f->ref((double)x);
  float rf = (float)e;
  if (isinf(rf)) return y == rf ? 0 : -1;
  if (rf == 0) return (y == 0 || y == 0x1p-149f) && signbit(y) == signbit(rf) ? 0 : -1;
  double ulp = (double)nextafterf(fabsf(rf), INFINITY) - (double)fabsf(rf);
  return fabs((double)y - e) / ulp;
}

/* Whether the disassembly of the module's shared object calls sym_<level> (kgen's), or sym itself through the PLT
 * or not (libmvec's: plain); -1 when objdump gives nothing. */
static int calls_symbol(const kg_cpu_module *m, const char *sym, int plain) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "objdump -d '%s/kernel.so' 2>/dev/null", m->dir);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[512], want[128], want2[128];
  snprintf(want, sizeof want, plain ? "<%s@" : "<%s_", sym); /* kgen's name goes on with the level: _v4 */
  snprintf(want2, sizeof want2, plain ? "<%s>" : "<%s_", sym);
  int lines = 0, found = 0;
  while (fgets(line, sizeof line, p)) {
    lines++;
    if (strstr(line, "call") && (strstr(line, want) || strstr(line, want2))) found = 1;
  }
  pclose(p);
  return lines ? found : -1;
}

static void check_level(const vfn *f, const char *define, const char *flags, const char *level) {
  char what[160], def[256];
  snprintf(what, sizeof what, "%s%s, %s", f->name, f->libmvec ? " (libmvec's where glibc has it)" : "", level);
  /* -ffast-math (an exported header built so): finite inputs with normal results only, within 8 ulp */
  int fast = strstr(flags, "fast-math") != NULL;
  /* F as a call: the vector variants are defined for the functions the unit calls */
  snprintf(def, sizeof def, "%s%s#define F(x) %s(x)\n#define FN %s\n", f->define, define, f->name, f->name);
  kg_test_cflags cf;
  kg_test_cflags_set(&cf, flags, 0);
  kg_cpu_module m;
  int rc = kg_test_build_with_prelude(def, BODY, "fn", &m);
  kg_test_cflags_restore(&cf);
  CHECKF(rc == 0, "%s does not build: %s", what, m.log ? m.log : "?");
  if (rc) return;
  float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N), *z = malloc(sizeof(float) * N);
  float info[8] = {0};
  static const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 88.72f, 88.73f, 89.0f, 89.5f, 1e30f,
                                  -87.3f, -87.4f, -103.2f, -103.3f, -103.98f, -104.0f, -105.0f, -1e30f, 1e-30f,
                                  0x1p-149f, -0x1p-149f, 0.34657359f, -0.34657359f, 0.921875f, -0.921875f,
                                  0.92187506f, -0.92187506f, 3.92f, 3.93f, 4.0f, -4.0f, 5.0f, -5.0f, 1.0f,
                                  1.0000001f, 0.75f, 0.75000006f, -0.75000006f, 9.0f, 9.5f, -9.6f, 20.0f};
  int nspecial = (int)(sizeof special / sizeof *special);
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < N; i++) {
      if (i < nspecial) x[i] = special[i];
      else if (pass == 0) x[i] = next_bits();
      else x[i] = f->lo + (f->hi - f->lo) * (float)(next_u32() >> 8) / 16777216.0f;
    }
    /* pass 0 over a length that leaves a remainder after every vector width */
    info[0] = (float)(pass == 0 ? NREM : N);
    info[1] = (float)(pass == 0 ? 4099 : N - 32); /* past the special values */
    float *args[4] = {x, y, z, info};
    kg_cpu_call(&m, args, 4);
    int n = (int)info[0];
    double worst = 0, worst_one = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
      double want = f->ref((double)x[i]);
      if (fast && !(isfinite(x[i]) && fabs(want) >= 0x1p-125 && fabs(want) <= 0x1p127)) continue;
      double e = err_ulps(f, x[i], y[i]), e1 = err_ulps(f, x[i], z[i]);
      if ((e < 0 || e1 < 0) && bad++ < 3)
        CHECKF(0, "%s: f(%a) is %a in the loop, %a in a call", what, (double)x[i], (double)y[i], (double)z[i]);
      if (e > worst) worst = e;
      if (e1 > worst_one) worst_one = e1;
    }
    CHECKF(bad == 0, "%s: %d special cases wrong", what, bad);
    if (getenv("KG_TEST_VERBOSE")) /* the largest errors, for the docs */
      printf("%s pass %d: %.3f %.3f ulp\n", what, pass, worst, worst_one);
    double bound = fast ? 8.0 : f->bound;
    CHECKF(worst <= bound && worst_one <= bound, "%s, pass %d: %.2f ulp in the loop, %.2f in a call", what,
           pass, worst, worst_one);
    double sum = 0;
    for (int i = 0; i < (int)info[1]; i++) sum += f->ref((double)(x[i + 32] * 0.25f - 3.0f));
    if (pass == 1) CHECKF(fabs(info[2] - sum) <= 1e-4 * fabs(sum) + 1e-3, "%s: sum %g, want %g", what, info[2], sum);
  }
  /* on for gcc on x86-64 (ELF), as the kernel's own macros say, unless turned off */
  int want_vexp = info[5] == 1 && !strstr(define, "KG_NO_VEXP");
  CHECKF((info[3] == 1) == want_vexp, "%s: vector variants %s, expected %s", what,
         info[3] == 1 ? "on" : "off", want_vexp ? "on" : "off");
  if (info[3] == 1) {
    int lanes = (int)info[4];
    char sym[64];
    const char *abi = lanes == 16 ? "_ZGVeN16v_" : lanes == 8 ? "_ZGVdN8v_" : lanes == 7 ? "_ZGVcN8v_" : "_ZGVbN4v_";
    int plain = f->libmvec && info[6] == 1;
    snprintf(sym, sizeof sym, "%s%s", abi, plain ? f->libmvec : f->name);
    int c = calls_symbol(&m, sym, plain);
    CHECKF(c != -1, "%s: objdump gave no disassembly of the kernel", what);
    CHECKF(c == 1, "%s: the vector loops do not call %s", what, sym);
  }
  free(x);
  free(y);
  free(z);
  kg_cpu_module_free(&m);
}

int main(void) {
  for (size_t k = 0; k < sizeof FNS / sizeof *FNS; k++) {
    const vfn *f = &FNS[k];
    check_level(f, "", "", "native");
    check_level(f, "#define KG_NO_VEXP 1\n", "", "scalar code");
#if defined(__x86_64__)
    /* the narrower variants, where the machine has the wider ones (-march=x86-64 overrides -march=native) */
    int lanes = (int)kg_cpu_arch_default()->lanes;
    if (lanes >= 16) check_level(f, "", "-mno-avx512f", "AVX2");
    if (lanes >= 8) {
      check_level(f, "", "-mno-avx2", "AVX");
      check_level(f, "", "-mno-avx", "SSE4.1");
    }
    check_level(f, "", "-march=x86-64", "SSE2");
#endif
  }
  /* last: a -ffast-math object may set the process's flush-to-zero mode when it loads */
  for (size_t k = 0; k < sizeof FNS / sizeof *FNS; k++) {
    check_level(&FNS[k], "", "-ffast-math", "-ffast-math");
#if defined(__x86_64__)
    check_level(&FNS[k], "", "-ffast-math -march=x86-64", "-ffast-math, SSE2");
#endif
  }
  TEST_END();
}
