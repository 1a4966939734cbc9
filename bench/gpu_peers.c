/* gpu_peers: times the reference points kgen's GPU kernels are compared with, on the device kgen would use:
 * cuBLAS SGEMM in strict FP32 (no TF32), its bf16 GEMM (bgemm: bf16 operands, f32 accumulation), its TF32 GEMM
 * (tgemm: f32 operands computed as TF32, what `kgen --tf32` allows) and a device-to-device copy.
 *
 *   gpu_peers [--min-ms MS] [sgemm|bgemm|tgemm M N K]... [copy BYTES]...   (no operation: sgemm 4096 4096 4096,
 *                                                                            copy 268435456)
 * prints one line per measurement:
 *   cublas_sgemm M=4096 N=4096 K=4096 median_ms=... gflops=... min_ms=... max_ms=... repeats=... max_err=...
 *   d2d_copy bytes=268435456 median_ms=... gbps=... min_ms=... max_ms=... repeats=...
 * where gbps counts the bytes read plus the bytes written (2 x bytes). Without a CUDA device it prints
 * "skipped: <reason>" and exits 0; an operation that fails prints "<op> ... error: <reason>" and the exit status
 * is 1.
 *
 * Requires: libkgen (runtime/cudrv.h, which loads the driver with dlopen) and, for SGEMM, libcublas.so.13/.12
 * loadable with dlopen (the loader path, $CUDA_HOME/lib64 or /usr/local/cuda/lib64). No CUDA header is used:
 * the few cuBLAS prototypes and enum values are declared here as documented.
 *
 * Timing: warm-up, then batches of back-to-back calls between two events (so launch gaps of short calls are not
 * counted), each batch at least ~1 ms, until the batches total at least --min-ms (default 100); the median of
 * the per-call batch times is reported. SGEMM is checked against double-precision dot products on sampled
 * entries before its time counts; the tolerance is tight enough to catch TF32 for large K. */
#include "../runtime/cudrv.h"
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cublas_status; /* CUBLAS_STATUS_SUCCESS == 0 */
typedef void *cublas_handle;
enum { CUBLAS_OP_N = 0, CUBLAS_DEFAULT_MATH = 0 };
/* cublasGemmEx's enumerations (library_types.h, cublas_api.h) */
enum {
  KG_CUDA_R_32F = 0,
  KG_CUDA_R_16BF = 14,
  KG_CUBLAS_COMPUTE_32F = 68,
  KG_CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  KG_CUBLAS_GEMM_DEFAULT = -1
};
/* the GEMMs: strict f32, bf16 operands, f32 operands as TF32 */
enum { GEMM_F32, GEMM_BF16, GEMM_TF32 };
static const char *const gemm_names[] = {"sgemm", "bgemm", "tgemm"};
/* set when a tgemm is asked for: then the TF32 override is not set (SGEMM's default math mode is strict f32
 * anyway, and its check catches TF32) */
static int want_tf32;

static struct {
  void *lib;
  cublas_status (*create)(cublas_handle *);
  cublas_status (*destroy)(cublas_handle);
  cublas_status (*set_math_mode)(cublas_handle, int);
  cublas_status (*sgemm)(cublas_handle, int, int, int, int, int, const float *, const float *, int, const float *,
                         int, const float *, float *, int);
  const char *(*status_string)(cublas_status);
  cublas_status (*gemm_ex)(cublas_handle, int, int, int, int, int, const void *, const void *, int, int,
                           const void *, int, int, const void *, void *, int, int, int, int);
} cb;

static int load_cublas(char *err, size_t errlen) {
  static const char *const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
  /* TF32 would make SGEMM a different (less precise) operation; the override wins over any math mode, so it is
   * set only when no TF32 GEMM is asked for */
  if (!want_tf32) setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
  char first[512] = "";
  void *h = NULL;
  const char *dirs[3] = {NULL, getenv("CUDA_HOME"), "/usr/local/cuda"};
  for (int d = 0; d < 3 && !h; d++) {
    if (d > 0 && (!dirs[d] || !dirs[d][0])) continue;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
      char path[1024];
      if (d == 0)
        snprintf(path, sizeof path, "%s", names[i]);
      else
        snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], names[i]);
      h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (!h && !first[0]) snprintf(first, sizeof first, "%.500s", dlerror());
    }
  }
  if (!h) {
    snprintf(err, errlen, "cuBLAS not found: %s", first);
    return -1;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {{"cublasCreate_v2", (void **)&cb.create},
              {"cublasDestroy_v2", (void **)&cb.destroy},
              {"cublasSetMathMode", (void **)&cb.set_math_mode},
              {"cublasSgemm_v2", (void **)&cb.sgemm},
              {"cublasGetStatusString", (void **)&cb.status_string},
              {"cublasGemmEx", (void **)&cb.gemm_ex}};
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *f = dlsym(h, syms[i].name);
    if (!f) {
      snprintf(err, errlen, "cuBLAS lacks %s", syms[i].name);
      return -1;
    }
    memcpy(syms[i].slot, &f, sizeof f);
  }
  cb.lib = h;
  return 0;
}

static int cublas_fail(char *err, size_t errlen, const char *call, cublas_status s) {
  snprintf(err, errlen, "%s: %s (%d)", call, cb.status_string ? cb.status_string(s) : "cuBLAS error", s);
  return -1;
}

typedef int (*op_fn)(void *ctx, char *err, size_t errlen);

typedef struct {
  double median_ms, min_ms, max_ms;
  int repeats;
} timing;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int measure(op_fn op, void *ctx, double min_ms, timing *t, char *err, size_t errlen) {
  kg_cudrv_event_timer ev;
  if (kg_cudrv_timer_init(&ev, err, errlen) != 0) return -1;
  int rc = -1;
  double s = 0, *per_call = NULL;
  int cap = 0, n = 0, total_calls = 0;
  for (int i = 0; i < 3; i++)
    if (op(ctx, err, errlen) != 0) goto out;
  if (kg_cudrv_sync(err, errlen) != 0) goto out;
  /* One call to size the batches. */
  if (kg_cudrv_timer_start(&ev, err, errlen) != 0 || op(ctx, err, errlen) != 0 ||
      kg_cudrv_timer_stop(&ev, &s, err, errlen) != 0)
    goto out;
  int batch = s > 0 ? (int)ceil(1e-3 / s) : 1000;
  if (batch < 1) batch = 1;
  if (batch > 10000) batch = 10000;
  double total_ms = 0;
  while ((total_ms < min_ms || n < 5) && n < 100000) {
    if (kg_cudrv_timer_start(&ev, err, errlen) != 0) goto out;
    for (int i = 0; i < batch; i++)
      if (op(ctx, err, errlen) != 0) goto out;
    if (kg_cudrv_timer_stop(&ev, &s, err, errlen) != 0) goto out;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      double *grown = realloc(per_call, sizeof *per_call * (size_t)cap);
      if (!grown) {
        snprintf(err, errlen, "out of memory");
        goto out;
      }
      per_call = grown;
    }
    per_call[n++] = s * 1e3 / batch;
    total_ms += s * 1e3;
    total_calls += batch;
  }
  qsort(per_call, (size_t)n, sizeof *per_call, cmp_double);
  t->median_ms = n % 2 ? per_call[n / 2] : 0.5 * (per_call[n / 2 - 1] + per_call[n / 2]);
  t->min_ms = per_call[0];
  t->max_ms = per_call[n - 1];
  t->repeats = total_calls;
  rc = 0;
out:
  free(per_call);
  kg_cudrv_timer_free(&ev);
  return rc;
}

static float *random_floats(size_t n, uint64_t seed) {
  float *x = malloc(n * sizeof *x);
  if (!x) return NULL;
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = (float)((seed >> 40) % 2001) / 1000.0f - 1.0f + 0.0005f;
  }
  return x;
}

typedef struct {
  cublas_handle h;
  int m, n, k;
  kg_devptr a, b, c;
} sgemm_ctx;

/* Row-major C[M][N] = A[M][K] B[K][N] is column-major C^T = B^T A^T: cuBLAS computes an N x M result from B
 * (N x K, ld N) and A (K x M, ld K), with no transposes. */
static int sgemm_op(void *p, char *err, size_t errlen) {
  sgemm_ctx *g = p;
  const float one = 1.0f, zero = 0.0f;
  cublas_status s = cb.sgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->m, g->k, &one, (const float *)(uintptr_t)g->b,
                             g->n, (const float *)(uintptr_t)g->a, g->k, &zero, (float *)(uintptr_t)g->c, g->n);
  return s ? cublas_fail(err, errlen, "cublasSgemm_v2", s) : 0;
}

/* cublasGemmEx on row-major operands of type ab, f32 C (C^T = B^T A^T in its column-major terms). */
static int gemm_ex(const sgemm_ctx *g, int ab, int compute, char *err, size_t errlen) {
  const float one = 1.0f, zero = 0.0f;
  cublas_status s = cb.gemm_ex(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->m, g->k, &one, (const void *)(uintptr_t)g->b,
                               ab, g->n, (const void *)(uintptr_t)g->a, ab, g->k, &zero, (void *)(uintptr_t)g->c,
                               KG_CUDA_R_32F, g->n, compute, KG_CUBLAS_GEMM_DEFAULT);
  return s ? cublas_fail(err, errlen, "cublasGemmEx", s) : 0;
}

/* f32 operands, f32 C, computed as TF32 (the operands rounded to 10 mantissa bits) with f32 accumulation. */
static int tgemm_op(void *p, char *err, size_t errlen) {
  return gemm_ex(p, KG_CUDA_R_32F, KG_CUBLAS_COMPUTE_32F_FAST_TF32, err, errlen);
}

/* 256 sampled entries of C = A B (row-major) against double dot products, each error relative to the entry's
 * sum |a||b|: the largest (NaN sticks). */
static double sampled_error(const float *a, const float *b, const float *c, int m, int n, int k, uint64_t seed) {
  double max_err = 0;
  for (int s = 0; s < 256; s++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    size_t i = (size_t)((seed >> 33) % (uint64_t)m), j = (size_t)((seed >> 13) % (uint64_t)n);
    double ref = 0, mag = 0;
    for (int p = 0; p < k; p++) {
      ref += (double)a[i * k + p] * b[(size_t)p * n + j];
      mag += fabs((double)a[i * k + p] * b[(size_t)p * n + j]);
    }
    double e = fabs(c[i * n + j] - ref) / (mag > 0 ? mag : 1);
    if (!(e <= max_err)) max_err = e;
  }
  return max_err;
}

/* bf16 A and B, f32 C, f32 accumulation: the tensor cores' GEMM (what kgen's tensorized bf16 GEMM computes). */
static int bgemm_op(void *p, char *err, size_t errlen) {
  return gemm_ex(p, KG_CUDA_R_16BF, KG_CUBLAS_COMPUTE_32F, err, errlen);
}

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* finite inputs only */
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static int cublas_handle_get(cublas_handle *out, char *err, size_t errlen) {
  static int loaded = -1;
  static char load_err[600];
  static cublas_handle handle;
  if (loaded < 0) {
    loaded = load_cublas(load_err, sizeof load_err) == 0;
    if (loaded) {
      cublas_status s = cb.create(&handle);
      if (s) loaded = 0, cublas_fail(load_err, sizeof load_err, "cublasCreate_v2", s);
    }
    if (loaded) {
      cublas_status s = cb.set_math_mode(handle, CUBLAS_DEFAULT_MATH);
      if (s) loaded = 0, cublas_fail(load_err, sizeof load_err, "cublasSetMathMode", s);
    }
  }
  if (!loaded) {
    snprintf(err, errlen, "%s", load_err);
    return -1;
  }
  *out = handle;
  return 0;
}

/* cuBLAS's GEMM on random operands: f32 (SGEMM), bf16 (GemmEx, f32 accumulation; the operands rounded to bf16
 * first, so that the check's double products are the exact ones), or TF32 (GemmEx on f32 operands). Checked on
 * sampled entries, then timed. */
static int run_gemm(int mode, int m, int n, int k, double min_ms, char *err, size_t errlen) {
  const int bf16 = mode == GEMM_BF16;
  cublas_handle handle;
  if (cublas_handle_get(&handle, err, errlen) != 0) return -1;
  sgemm_ctx g = {handle, m, n, k, 0, 0, 0};
  size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n, es = bf16 ? 2 : 4;
  float *a = random_floats(na, 11), *b = random_floats(nb, 12), *c = malloc(nc * sizeof(float));
  uint16_t *ah = bf16 ? malloc(na * 2) : NULL, *bh = bf16 ? malloc(nb * 2) : NULL;
  int rc = -1;
  if (!a || !b || !c || (bf16 && (!ah || !bh))) {
    snprintf(err, errlen, "out of host memory");
    goto out;
  }
  for (size_t i = 0; bf16 && i < na; i++) a[i] = from_bf16(ah[i] = to_bf16(a[i]));
  for (size_t i = 0; bf16 && i < nb; i++) b[i] = from_bf16(bh[i] = to_bf16(b[i]));
  const void *ha = bf16 ? (const void *)ah : a, *hb = bf16 ? (const void *)bh : b;
  op_fn op = mode == GEMM_BF16 ? bgemm_op : mode == GEMM_TF32 ? tgemm_op : sgemm_op;
  if (kg_cudrv_alloc(&g.a, na * es, err, errlen) || kg_cudrv_alloc(&g.b, nb * es, err, errlen) ||
      kg_cudrv_alloc(&g.c, nc * 4, err, errlen) || kg_cudrv_htod(g.a, ha, na * es, err, errlen) ||
      kg_cudrv_htod(g.b, hb, nb * es, err, errlen) || kg_cudrv_memset32(g.c, 0x7fc00000u, nc, err, errlen))
    goto out;
  if (op(&g, err, errlen) || kg_cudrv_sync(err, errlen) || kg_cudrv_dtoh(c, g.c, nc * 4, err, errlen)) goto out;
  double max_err = sampled_error(a, b, c, m, n, k, bf16 ? 77 : 99);
  /* FP32 accumulation stays far below 4e-6 of sum |ab| (bf16: exact products accumulated in f32, 1e-5); TF32 inputs
   * (10-bit mantissa) do not at large K, and stay below 2^-10 + the accumulation's share */
  const double tol = mode == GEMM_BF16 ? 1e-5 : mode == GEMM_TF32 ? 0x1p-10 + 1e-5 : 4e-6;
  if (!(max_err <= tol)) {
    snprintf(err, errlen, "wrong result: max relative error %.3g%s", max_err, mode == GEMM_F32 ? " (TF32 in use?)" : "");
    goto out;
  }
  timing t;
  if (measure(op, &g, min_ms, &t, err, errlen)) goto out;
  printf("cublas_%s M=%d N=%d K=%d median_ms=%.4f gflops=%.1f min_ms=%.4f max_ms=%.4f repeats=%d max_err=%.2g\n",
         gemm_names[mode], m, n, k, t.median_ms, 2.0 * m * n * k / (t.median_ms * 1e-3) * 1e-9, t.min_ms,
         t.max_ms, t.repeats, max_err);
  rc = 0;
out:
  kg_cudrv_free(g.a);
  kg_cudrv_free(g.b);
  kg_cudrv_free(g.c);
  free(a);
  free(b);
  free(c);
  free(ah);
  free(bh);
  return rc;
}

typedef struct {
  kg_devptr src, dst;
  size_t bytes;
} copy_ctx;

static int copy_op(void *p, char *err, size_t errlen) {
  copy_ctx *c = p;
  return kg_cudrv_dtod(c->dst, c->src, c->bytes, err, errlen);
}

static int run_copy(size_t bytes, double min_ms, char *err, size_t errlen) {
  copy_ctx c = {0, 0, bytes};
  int rc = -1;
  size_t words = bytes / 4;
  if (kg_cudrv_alloc(&c.src, bytes, err, errlen) || kg_cudrv_alloc(&c.dst, bytes, err, errlen) ||
      kg_cudrv_memset32(c.src, 0x3fc00000u, words, err, errlen) || kg_cudrv_memset32(c.dst, 0, words, err, errlen))
    goto out;
  if (copy_op(&c, err, errlen) || kg_cudrv_sync(err, errlen)) goto out;
  /* The copy really happened: the last word of the destination holds the source's 1.5f. */
  if (words > 0) {
    float last = 0;
    if (kg_cudrv_dtoh(&last, c.dst + (words - 1) * 4, 4, err, errlen)) goto out;
    if (last != 1.5f) {
      snprintf(err, errlen, "the copy did not copy (read %g)", last);
      goto out;
    }
  }
  timing t;
  if (measure(copy_op, &c, min_ms, &t, err, errlen)) goto out;
  printf("d2d_copy bytes=%zu median_ms=%.4f gbps=%.1f min_ms=%.4f max_ms=%.4f repeats=%d\n", bytes, t.median_ms,
         2.0 * (double)bytes / (t.median_ms * 1e-3) * 1e-9, t.min_ms, t.max_ms, t.repeats);
  rc = 0;
out:
  kg_cudrv_free(c.src);
  kg_cudrv_free(c.dst);
  return rc;
}

static int parse_pos(const char *s, long long max, long long *v) {
  char *end;
  long long x = strtoll(s, &end, 10);
  if (end == s || *end || x < 1 || x > max) return -1;
  *v = x;
  return 0;
}

static void usage(void) {
  fprintf(stderr, "usage: gpu_peers [--min-ms MS] [sgemm M N K]... [bgemm M N K]... [tgemm M N K]... [copy BYTES]...\n");
}

int main(int argc, char **argv) {
  double min_ms = 100;
  enum { MAXOPS = 64 };
  struct {
    int kind; /* a GEMM_ mode, or -1: copy */
    long long a, b, c;
  } ops[MAXOPS];
  int nops = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--min-ms") && i + 1 < argc) {
      char *end;
      min_ms = strtod(argv[++i], &end);
      if (*end || !(min_ms > 0)) {
        usage();
        return 2;
      }
    } else if ((!strcmp(argv[i], "sgemm") || !strcmp(argv[i], "bgemm") || !strcmp(argv[i], "tgemm")) && i + 3 < argc &&
               nops < MAXOPS) {
      ops[nops].kind = argv[i][0] == 's' ? GEMM_F32 : argv[i][0] == 'b' ? GEMM_BF16 : GEMM_TF32;
      want_tf32 |= ops[nops].kind == GEMM_TF32;
      if (parse_pos(argv[i + 1], 1 << 20, &ops[nops].a) || parse_pos(argv[i + 2], 1 << 20, &ops[nops].b) ||
          parse_pos(argv[i + 3], 1 << 20, &ops[nops].c)) {
        usage();
        return 2;
      }
      nops++;
      i += 3;
    } else if (!strcmp(argv[i], "copy") && i + 1 < argc && nops < MAXOPS) {
      ops[nops].kind = -1;
      if (parse_pos(argv[i + 1], 1LL << 40, &ops[nops].a) || ops[nops].a % 4) {
        fprintf(stderr, "gpu_peers: copy BYTES must be a positive multiple of 4\n");
        return 2;
      }
      nops++;
      i += 1;
    } else {
      usage();
      return 2;
    }
  }
  if (nops == 0) {
    ops[0].kind = GEMM_F32;
    ops[0].a = ops[0].b = ops[0].c = 4096;
    ops[1].kind = -1;
    ops[1].a = 256LL << 20;
    nops = 2;
  }
  char why[600];
  if (!kg_cudrv_probe(why, sizeof why)) {
    printf("skipped: %s\n", why);
    return 0;
  }
  kg_cudrv_device dev;
  char err[1024];
  if (kg_cudrv_open(&dev, err, sizeof err) != 0) {
    printf("skipped: %s\n", err);
    return 0;
  }
  printf("device %s %s sms=%d l2_bytes=%lld driver=%d\n", dev.name, dev.arch, dev.sm_count, (long long)dev.l2_bytes,
         dev.driver_version);
  int status = 0;
  for (int i = 0; i < nops; i++) {
    if (ops[i].kind >= 0) {
      if (run_gemm(ops[i].kind, (int)ops[i].a, (int)ops[i].b, (int)ops[i].c, min_ms, err, sizeof err) != 0) {
        printf("cublas_%s M=%lld N=%lld K=%lld error: %s\n", gemm_names[ops[i].kind], ops[i].a, ops[i].b, ops[i].c,
               err);
        status = 1;
      }
    } else if (run_copy((size_t)ops[i].a, min_ms, err, sizeof err) != 0) {
      printf("d2d_copy bytes=%lld error: %s\n", ops[i].a, err);
      status = 1;
    }
    fflush(stdout);
  }
  return status;
}
