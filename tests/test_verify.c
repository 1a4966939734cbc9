/* Test data and verification: seeded inputs, poison detection, tolerance, NaN/inf handling, and .npy files
 * (round trip, header layout, corrupt files). */
#include <math.h>
#include <stdint.h>
#include <unistd.h>
#include "../runtime/verify.h"
#include "testlib.h"
#include "testutil.h"

/* CHECK_STR_CONTAINS on a char array (always non-NULL) trips -Waddress: go through a pointer. */
#define CHECK_MSG(arr, needle)          \
  do {                                  \
    const char *msg_ = (arr);           \
    CHECK_STR_CONTAINS(msg_, (needle)); \
  } while (0)

static float poison_value(void) {
  uint32_t bits = 0x7fa5a5a5u;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Copies the reference into the outputs, as a perfect kernel would. */
static void fill_outputs_from_ref(kg_data *d, const kg_program *p) {
  for (int i = 0; i < p->noutputs; i++)
    for (int64_t k = 0; k < kg_tensor_numel(p->outputs[i]); k++) d->outputs[i][k] = (float)d->ref[i][k];
}

static void test_data_init(void) {
  const char *src = "def f(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) { C[i, j] = sum[k](A[i, k] * B[k, j]) }";
  kg_binding b[] = {{"M", 7}, {"N", 5}, {"K", 300}};
  kg_program *p = kg_test_load(src, b, 3);
  CHECK(p != NULL);
  if (!p) return;
  kg_data d1, d2, d3;
  kg_data_init(&d1, p, 42);
  kg_data_init(&d2, p, 42);
  kg_data_init(&d3, p, 43);
  CHECK(d1.ninputs == 2 && d1.noutputs == 1);
  CHECK(memcmp(d1.inputs[0], d2.inputs[0], sizeof(float) * 7 * 300) == 0);
  CHECK(memcmp(d1.inputs[1], d2.inputs[1], sizeof(float) * 300 * 5) == 0);
  CHECK(memcmp(d1.inputs[0], d3.inputs[0], sizeof(float) * 7 * 300) != 0);
  int in_range = 1, neg = 0, pos = 0;
  double sum = 0;
  for (int k = 0; k < 7 * 300; k++) {
    float x = d1.inputs[0][k];
    if (!(fabsf(x) >= 1.0f / 64 && fabsf(x) <= 1.0f)) in_range = 0;
    neg += x < 0;
    pos += x > 0;
    sum += x;
  }
  CHECK(in_range);
  CHECKF(neg > 900 && pos > 900, "neg %d pos %d", neg, pos); /* both signs, roughly balanced */
  CHECKF(fabs(sum / 2100) < 0.1, "mean %g", sum / 2100);
  /* freshly initialised outputs are poisoned */
  uint32_t bits;
  memcpy(&bits, &d1.outputs[0][34], 4);
  CHECK(bits == 0x7fa5a5a5u);
  kg_data_free(&d1);
  kg_data_free(&d2);
  kg_data_free(&d3);
  kg_program_free(p);
}

static void test_verify_matmul(void) {
  const char *src = "def f(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) { C[i, j] = sum[k](A[i, k] * B[k, j]) }";
  kg_binding b[] = {{"M", 4}, {"N", 5}, {"K", 6}};
  kg_program *p = kg_test_load(src, b, 3);
  CHECK(p != NULL);
  if (!p) return;
  kg_data d;
  kg_data_init(&d, p, 7);
  CHECK(kg_data_reference(&d, p, 7) == 0);
  /* the reference really is the product of the drawn inputs */
  double c12 = 0;
  for (int k = 0; k < 6; k++) c12 += (double)d.inputs[0][1 * 6 + k] * d.inputs[1][k * 5 + 2];
  CHECKF(fabs(d.ref[0][1 * 5 + 2] - c12) < 1e-12, "%g vs %g", d.ref[0][7], c12);

  /* all poisoned: fails, names the first element */
  kg_verify_result r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);
  CHECK_MSG(r.msg, "C[0,0]: unwritten (still poisoned)");

  fill_outputs_from_ref(&d, p);
  r = kg_verify(p, &d, 1e-4);
  CHECKF(r.ok, "%s", r.msg);
  CHECKF(r.max_rel_err < 1e-6, "%g", r.max_rel_err);

  /* one element left unwritten */
  d.outputs[0][2 * 5 + 3] = poison_value();
  r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);
  CHECK_MSG(r.msg, "C[2,3]: unwritten");
  fill_outputs_from_ref(&d, p);

  /* a relative error of 1e-3 fails at rtol 1e-4 and passes at 1e-2; the message gives got/expected/error */
  double ref = d.ref[0][3 * 5 + 4];
  d.outputs[0][3 * 5 + 4] = (float)(ref * (1 + 1e-3));
  r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);
  CHECK_MSG(r.msg, "C[3,4]: got ");
  CHECK_MSG(r.msg, " expected ");
  CHECK_MSG(r.msg, "(rel err 0.001");
  CHECKF(fabs(r.max_rel_err - 1e-3) < 1e-5, "%g", r.max_rel_err);
  r = kg_verify(p, &d, 1e-2);
  CHECKF(r.ok, "%s", r.msg);
  /* rtol <= 0 means the default 1e-4 */
  r = kg_verify(p, &d, 0);
  CHECK(!r.ok);
  fill_outputs_from_ref(&d, p);

  /* a NaN where the reference is finite fails, as does inf */
  d.outputs[0][1] = NAN;
  r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);
  CHECK_MSG(r.msg, "C[0,1]: got NaN");
  CHECK(isinf(r.max_rel_err));
  d.outputs[0][1] = INFINITY;
  r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);
  CHECK_MSG(r.msg, "C[0,1]: got +inf");
  fill_outputs_from_ref(&d, p);

  /* the error of an element near zero is measured against 1e-2 * max|ref|, not against itself */
  double maxabs = 0;
  for (int k = 0; k < 20; k++) maxabs = fmax(maxabs, fabs(d.ref[0][k]));
  d.ref[0][0] = 1e-9;
  d.outputs[0][0] = (float)(1e-9 + 1e-2 * maxabs * 5e-5); /* rel err 5e-5 of the scale */
  r = kg_verify(p, &d, 1e-4);
  CHECKF(r.ok, "%s", r.msg);
  d.outputs[0][0] = (float)(1e-9 + 1e-2 * maxabs * 5e-4);
  r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);

  /* kg_data_poison restores the unwritten state */
  kg_data_poison(&d, p);
  r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);
  kg_data_free(&d);
  kg_program_free(p);
}

/* log of signed inputs is NaN: the reference redraws positive inputs and succeeds. */
/* The tolerance widens with the square root of the longest reduction past 256 terms, and a correct kernel with
 * a long f32 accumulation (here emulated: the reference rounded through a float running sum) passes. */
static void test_tolerance_scaling(void) {
  const char *mm = "def mm(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) { C[i, j] = sum[k](A[i, k] * B[k, j]) }";
  kg_binding small[] = {{"M", 3}, {"N", 4}, {"K", 64}}, big[] = {{"M", 8}, {"N", 64}, {"K", 4096}};
  kg_program *p = kg_test_load(mm, small, 3);
  CHECK(p && fabs(kg_verify_tolerance(p, 1e-4) - 1e-4) < 1e-12);
  CHECK(p && fabs(kg_verify_tolerance(p, 0) - 1e-4) < 1e-12);
  kg_program_free(p);
  p = kg_test_load(mm, big, 3);
  CHECK(p && fabs(kg_verify_tolerance(p, 1e-4) - 4e-4) < 1e-12);
  if (p) {
    kg_data d;
    kg_data_init(&d, p, 5);
    CHECK(kg_data_reference(&d, p, 5) == 0);
    for (int i = 0; i < 8; i++)
      for (int j = 0; j < 64; j++) {
        float acc = 0; /* sequential f32 accumulation, as the default schedule does */
        for (int k = 0; k < 4096; k++) acc += d.inputs[0][i * 4096 + k] * d.inputs[1][k * 64 + j];
        d.outputs[0][i * 64 + j] = acc;
      }
    kg_verify_result r = kg_verify(p, &d, 1e-4);
    CHECKF(r.ok, "%s", r.msg);
    CHECK(r.tolerance == kg_verify_tolerance(p, 1e-4));
    d.outputs[0][77] += 1.0f; /* one product too many or too few is far outside it */
    r = kg_verify(p, &d, 1e-4);
    CHECK(!r.ok);
    kg_data_free(&d);
  }
  kg_program_free(p);
}

static void test_reference_redraw(void) {
  kg_binding b[] = {{"N", 50}};
  kg_program *p = kg_test_load("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = log(X[i]) }", b, 1);
  CHECK(p != NULL);
  if (!p) return;
  kg_data d;
  kg_data_init(&d, p, 3);
  CHECK(kg_data_reference(&d, p, 3) == 0);
  int positive = 1;
  for (int k = 0; k < 50; k++) positive &= d.inputs[0][k] >= 0.5f && d.inputs[0][k] <= 1.5f;
  CHECK(positive);
  CHECKF(fabs(d.ref[0][5] - log(d.inputs[0][5])) < 1e-12, "%g", d.ref[0][5]);
  kg_data_free(&d);
  kg_program_free(p);

  /* a reference that stays non-finite: the result must be in the same class */
  p = kg_test_load("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = X[i] / 0.0 }", b, 1);
  CHECK(p != NULL);
  if (!p) return;
  kg_data_init(&d, p, 3);
  CHECK(kg_data_reference(&d, p, 3) == -1);
  CHECK(isinf(d.ref[0][0]) && d.ref[0][0] > 0);
  for (int k = 0; k < 50; k++) d.outputs[0][k] = INFINITY;
  kg_verify_result r = kg_verify(p, &d, 1e-4);
  CHECKF(r.ok, "%s", r.msg);
  d.outputs[0][4] = -INFINITY;
  r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);
  CHECK_MSG(r.msg, "Y[4]: got -inf expected +inf");
  d.outputs[0][4] = 1.0f;
  r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);
  d.outputs[0][4] = poison_value();
  r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);
  CHECK_MSG(r.msg, "Y[4]: unwritten");
  kg_data_free(&d);
  kg_program_free(p);

  p = kg_test_load("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = log(X[i] - 2.0) }", b, 1);
  CHECK(p != NULL);
  if (!p) return;
  kg_data_init(&d, p, 9);
  CHECK(kg_data_reference(&d, p, 9) == -1);
  CHECK(isnan(d.ref[0][0]));
  for (int k = 0; k < 50; k++) d.outputs[0][k] = NAN;
  r = kg_verify(p, &d, 1e-4);
  CHECKF(r.ok, "%s", r.msg);
  d.outputs[0][7] = 0.5f;
  r = kg_verify(p, &d, 1e-4);
  CHECK(!r.ok);
  CHECK_MSG(r.msg, "Y[7]: got 0.5 expected NaN");
  kg_data_free(&d);
  kg_program_free(p);
}

/* ---- .npy ---- */

static char tmpdir[256];

static const char *tmp_path(const char *name) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
  return buf;
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(data, 1, n, f);
  fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
  char *s = kg_test_read_file(path, n);
  return (unsigned char *)s;
}

static void test_npy_roundtrip(void) {
  char err[256];
  float x[60];
  for (int k = 0; k < 60; k++) x[k] = (float)k * 0.375f - 7.0f;
  x[5] = -0.0f;
  x[6] = 1e-38f;
  int64_t s3[3] = {3, 4, 5};
  CHECK(kg_npy_save(tmp_path("a.npy"), x, KG_DT_F32, 3, s3, err, sizeof err) == 0);
  float *y = kg_npy_load(tmp_path("a.npy"), KG_DT_F32, 3, s3, err, sizeof err);
  CHECKF(y != NULL, "%s", err);
  if (y) CHECK(memcmp(x, y, sizeof x) == 0);
  free(y);

  /* header bytes: magic, version 1.0, data aligned to 64, dict as numpy writes it */
  size_t n;
  unsigned char *b = read_bytes(tmp_path("a.npy"), &n);
  CHECK(b != NULL);
  if (b) {
    CHECK(memcmp(b, "\x93NUMPY\x01\x00", 8) == 0);
    size_t hlen = b[8] | (size_t)b[9] << 8;
    CHECKF((10 + hlen) % 64 == 0, "hlen %zu", hlen);
    CHECK(n == 10 + hlen + 60 * 4);
    CHECK(hlen + 10 == 128); /* numpy's own layout for a small array */
    CHECK(b[10 + hlen - 1] == '\n');
    CHECK(memcmp(b + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4, 5), }", 61) == 0);
    /* little-endian data */
    float v;
    uint32_t bits = (uint32_t)b[10 + hlen + 4] | (uint32_t)b[10 + hlen + 5] << 8 |
                    (uint32_t)b[10 + hlen + 6] << 16 | (uint32_t)b[10 + hlen + 7] << 24;
    memcpy(&v, &bits, 4);
    CHECK(v == x[1]);
    free(b);
  }

  /* 1-d "(7,)" and 0-d "()" */
  int64_t s1[1] = {7};
  CHECK(kg_npy_save(tmp_path("b.npy"), x, KG_DT_F32, 1, s1, err, sizeof err) == 0);
  b = read_bytes(tmp_path("b.npy"), &n);
  if (b) CHECK(strstr((char *)b + 10, "'shape': (7,), }") != NULL);
  free(b);
  y = kg_npy_load(tmp_path("b.npy"), KG_DT_F32, 1, s1, err, sizeof err);
  CHECK(y && y[6] == x[6]);
  free(y);
  CHECK(kg_npy_save(tmp_path("c.npy"), x + 9, KG_DT_F32, 0, NULL, err, sizeof err) == 0);
  b = read_bytes(tmp_path("c.npy"), &n);
  if (b) {
    CHECK(strstr((char *)b + 10, "'shape': (), }") != NULL);
    CHECK(n == 128 + 4);
  }
  free(b);
  y = kg_npy_load(tmp_path("c.npy"), KG_DT_F32, 0, NULL, err, sizeof err);
  CHECK(y && y[0] == x[9]);
  free(y);

  /* a file written by numpy (version 2.0 header, double quotes, no trailing comma) reads too */
  const char *h2 = "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,)}";
  unsigned char f2[256] = "\x93NUMPY\x02\x00";
  size_t hl = strlen(h2);
  f2[8] = (unsigned char)hl;
  memcpy(f2 + 12, h2, hl);
  float two[2] = {1.5f, -2.25f};
  memcpy(f2 + 12 + hl, two, 8);
  write_bytes(tmp_path("v2.npy"), f2, 12 + hl + 8);
  int64_t s2[1] = {2};
  y = kg_npy_load(tmp_path("v2.npy"), KG_DT_F32, 1, s2, err, sizeof err);
  CHECKF(y && y[0] == 1.5f && y[1] == -2.25f, "%s", y ? "values" : err);
  free(y);
}

static void expect_load_error(const char *name, int ndim, const int64_t *shape, const char *needle) {
  char err[256] = "";
  float *y = kg_npy_load(tmp_path(name), KG_DT_F32, ndim, shape, err, sizeof err);
  CHECKF(y == NULL, "%s loaded", name);
  free(y);
  CHECK_MSG(err, needle);
}

static void test_npy_errors(void) {
  char err[256];
  float x[12] = {0};
  int64_t s[2] = {3, 4};
  CHECK(kg_npy_save(tmp_path("good.npy"), x, KG_DT_F32, 2, s, err, sizeof err) == 0);
  size_t n;
  unsigned char *good = read_bytes(tmp_path("good.npy"), &n);
  CHECK(good && n == 128 + 48);
  if (!good) return;
  unsigned char buf[256];

  int64_t wrong[2] = {4, 3};
  expect_load_error("good.npy", 2, wrong, "shape (3, 4) does not match the expected (4, 3)");
  int64_t flat[1] = {12};
  expect_load_error("good.npy", 1, flat, "does not match the expected (12,)");
  expect_load_error("missing.npy", 2, s, "No such file");

  write_bytes(tmp_path("empty.npy"), "", 0);
  expect_load_error("empty.npy", 2, s, "bad magic");
  memcpy(buf, good, n);
  buf[1] = 'X';
  write_bytes(tmp_path("magic.npy"), buf, n);
  expect_load_error("magic.npy", 2, s, "bad magic");

  memcpy(buf, good, n);
  buf[6] = 3;
  write_bytes(tmp_path("ver.npy"), buf, n);
  expect_load_error("ver.npy", 2, s, "unsupported .npy version 3.0");

  for (size_t cut = 7; cut < n; cut += 9) {
    write_bytes(tmp_path("trunc.npy"), good, cut);
    expect_load_error("trunc.npy", 2, s, cut < 10 ? "bad magic" : cut < 128 ? "truncated header" : "truncated data");
  }
  memcpy(buf, good, n);
  buf[n] = 0;
  write_bytes(tmp_path("long.npy"), buf, n + 1);
  expect_load_error("long.npy", 2, s, "trailing bytes");

  memcpy(buf, good, n);
  char *f4 = strstr((char *)buf + 10, "<f4");
  if (f4) memcpy(f4, "<f8", 3);
  write_bytes(tmp_path("f8.npy"), buf, n);
  expect_load_error("f8.npy", 2, s, "dtype '<f8' is not supported");

  memcpy(buf, good, n);
  char *fo = strstr((char *)buf + 10, "False");
  if (fo) memcpy(fo, "True ", 5);
  write_bytes(tmp_path("fo.npy"), buf, n);
  expect_load_error("fo.npy", 2, s, "fortran_order True");

  memcpy(buf, good, n);
  char *sh = strstr((char *)buf + 10, "(3, 4)");
  if (sh) memcpy(sh, "(3x 4)", 6);
  write_bytes(tmp_path("sh.npy"), buf, n);
  expect_load_error("sh.npy", 2, s, "bad 'shape'");

  memcpy(buf, good, n);
  buf[10] = '[';
  write_bytes(tmp_path("dict.npy"), buf, n);
  expect_load_error("dict.npy", 2, s, "header is not a dict");

  /* a 2.0 header claiming 4 GB */
  unsigned char big[16] = "\x93NUMPY\x02\x00\xff\xff\xff\xff";
  write_bytes(tmp_path("big.npy"), big, 16);
  expect_load_error("big.npy", 2, s, "header too large");

  /* every single-byte corruption of the header either loads or fails cleanly */
  for (size_t k = 0; k < 128; k++) {
    memcpy(buf, good, n);
    buf[k] ^= 0x5a;
    write_bytes(tmp_path("flip.npy"), buf, n);
    float *y = kg_npy_load(tmp_path("flip.npy"), KG_DT_F32, 2, s, err, sizeof err);
    free(y);
  }
  free(good);
  CHECK(kg_npy_save("/nonexistent-dir/x.npy", x, KG_DT_F32, 2, s, err, sizeof err) == -1);
  CHECK_MSG(err, "/nonexistent-dir/x.npy");
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kg_test_verify_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_data_init();
  test_verify_matmul();
  test_tolerance_scaling();
  test_reference_redraw();
  test_npy_roundtrip();
  test_npy_errors();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
  TEST_END();
}
