/* Dynamic sizes outside the printers: which dimensions a dynamic size decides (te/dynamic.c) and the user errors,
 * the symbolic lowering (loop extents, guards, strides, temporaries, regions), the primitives and regions a
 * dynamic size rules out, the log records of dynamic kernels, the buckets of range tuning, and the dispatch of a
 * dynamic header. The printed kernels themselves run in test_dynamic_c and test_dynamic_cuda. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../codegen/header.h"
#include "../search/dynamic.h"
#include "../tlog/tlog.h"
#include "testlib.h"

static kg_arena da;

static kg_program *load(const char *text, const char *bind, const kg_dynamic_size *dyn, int ndyn, kg_diag *d) {
  kg_binding b[KG_TEST_MAX_BIND];
  static char names[KG_TEST_MAX_BIND][32];
  int nb = kg_test_parse_bindings(bind, b, names, 1);
  memset(d, 0, sizeof *d);
  kg_program *p = kg_program_load("t.te", text, strlen(text), NULL, b, nb, d, &da);
  if (p && ndyn && kg_program_set_dynamic(p, dyn, ndyn, d, &da) != 0) {
    kg_program_free(p);
    return NULL;
  }
  return p;
}

static kg_program *load_lib(const char *name, const char *bind, const char *dyn_name, kg_diag *d) {
  char path[256];
  snprintf(path, sizeof path, "te/lib/%s.te", name);
  size_t len;
  char *text = kg_test_read_file(path, &len);
  if (!text) return NULL;
  kg_dynamic_size dyn = {dyn_name, 0, 0};
  kg_program *p = load(text, bind, &dyn, dyn_name ? 1 : 0, d);
  free(text);
  return p;
}

static int size_index(const kg_program *p, const char *name) {
  for (int i = 0; i < p->nsizes; i++)
    if (!strcmp(p->sizes[i].name, name)) return i;
  return -1;
}

static void test_marks(void) {
  kg_diag d;
  kg_dynamic_size m = {"M", 0, 0};
  kg_program *p = load(KG_TEST_MATMUL, "M=77 K=17 N=20", &m, 1, &d);
  CHECK(p != NULL);
  if (!p) return;
  int k = size_index(p, "M");
  CHECK(p->sizes[k].dynamic && p->sizes[k].lo == 1 && p->sizes[k].value == 77);
  /* the largest M that keeps A (M x 17) and C (M x 20) under 2^31 elements */
  CHECK(p->sizes[k].hi == (int64_t)2147483647 / 20);
  kg_tensor *A = kg_program_find_tensor(p, "A"), *B = kg_program_find_tensor(p, "B"), *C = kg_program_find_tensor(p, "C");
  CHECK(A->dyn[0] == k + 1 && A->dyn[1] == 0);
  CHECK(B->dyn[0] == 0 && B->dyn[1] == 0);
  CHECK(C->dyn[0] == k + 1 && C->dyn[1] == 0);
  CHECK(kg_program_ndynamic(p) == 1);
  CHECK(!p->sizes[size_index(p, "K")].dynamic);
  /* a reduction over a dynamic size */
  kg_program_free(p);
  kg_dynamic_size kd = {"K", 2, 500};
  p = load(KG_TEST_MATMUL, "M=7 K=17 N=20", &kd, 1, &d);
  CHECK(p != NULL);
  if (!p) return;
  CHECK(p->stages[0]->nrax == 1 && p->stages[0]->rax[0]->dyn == size_index(p, "K") + 1);
  CHECK(p->sizes[size_index(p, "K")].lo == 2 && p->sizes[size_index(p, "K")].hi == 500);
  /* rebinding keeps it dynamic with the same range */
  kg_program *q = kg_program_rebind(p, size_index(p, "K"), 333, &d, &da);
  CHECK(q && q->sizes[size_index(q, "K")].dynamic && q->sizes[size_index(q, "K")].value == 333 &&
        q->sizes[size_index(q, "K")].hi == 500);
  kg_program_free(q);
  kg_program_free(p);

  /* a size in an inner dimension (transpose) and in two tensors of attention */
  p = load_lib("transpose", "M=5 N=7", "N", &d);
  CHECK(p != NULL);
  if (p) {
    kg_tensor *X = kg_program_find_tensor(p, "X"), *Y = kg_program_find_tensor(p, "Y");
    CHECK(X->dyn[1] == size_index(p, "N") + 1 && Y->dyn[0] == size_index(p, "N") + 1 && X->dyn[0] == 0);
    kg_program_free(p);
  }
  p = load_lib("attention", "B=2 S=9 T=11 D=7 E=5", "T", &d);
  CHECK(p != NULL);
  if (p) {
    int t = size_index(p, "T") + 1, nred = 0;
    for (int s = 0; s < p->nstages; s++)
      for (int r = 0; r < p->stages[s]->nrax; r++) nred += p->stages[s]->rax[r]->dyn == t;
    CHECK(nred == 3); /* m's max, the weighted sum and the denominator range over the keys */
    kg_program_free(p);
  }
  /* two default ranges grow together: neither keeps only its bound value, and together they still fit */
  size_t len;
  char *text = kg_test_read_file("te/lib/attention.te", &len);
  kg_dynamic_size bs[2] = {{"B", 0, 0}, {"S", 0, 0}};
  p = text ? load(text, "B=2 S=9 T=11 D=7 E=5", bs, 2, &d) : NULL;
  free(text);
  CHECK(p != NULL);
  if (p) {
    const kg_size_var *b = &p->sizes[size_index(p, "B")], *sq = &p->sizes[size_index(p, "S")];
    CHECKF(b->hi >= 1024 && sq->hi >= 1024, "B..%lld S..%lld", (long long)b->hi, (long long)sq->hi);
    CHECK(b->hi * sq->hi * 7 <= (int64_t)2147483647 && b->hi * sq->hi * 5 <= (int64_t)2147483647);
    kg_program_free(p);
  }
}

static void test_errors(void) {
  kg_diag d;
  kg_program *p = load_lib("conv2d", "N=2 C=3 H=9 W=11 F=4", "H", &d);
  CHECK(p == NULL);
  CHECKF(d.msg && strstr(d.msg, "--dynamic H") && strstr(d.msg, "must be a whole dimension"), "%s", d.msg);
  kg_program *ok = load_lib("conv2d", "N=2 C=3 H=9 W=11 F=4", "N", &d);
  CHECK(ok != NULL);
  kg_program_free(ok);
  kg_dynamic_size bad = {"Q", 0, 0};
  CHECK(load(KG_TEST_MATMUL, "M=7 K=17 N=20", &bad, 1, &d) == NULL);
  CHECK(d.msg && strstr(d.msg, "'Q' is not a size variable"));
  kg_dynamic_size out = {"M", 100, 200};
  CHECK(load(KG_TEST_MATMUL, "M=7 K=17 N=20", &out, 1, &d) == NULL);
  CHECK(d.msg && strstr(d.msg, "outside the range"));
  kg_dynamic_size inv = {"M", 9, 3};
  CHECK(load(KG_TEST_MATMUL, "M=7 K=17 N=20", &inv, 1, &d) == NULL);
  CHECK(d.msg && strstr(d.msg, "1 <= LO <= HI"));
  kg_dynamic_size huge = {"M", 1, (int64_t)1 << 40};
  CHECK(load(KG_TEST_MATMUL, "M=7 K=17 N=20", &huge, 1, &d) == NULL);
  CHECK(d.msg && strstr(d.msg, "2^31-1"));
  kg_dynamic_size twice[2] = {{"M", 0, 0}, {"M", 0, 0}};
  CHECK(load(KG_TEST_MATMUL, "M=7 K=17 N=20", twice, 2, &d) == NULL);
  CHECK(d.msg && strstr(d.msg, "--dynamic M is given twice"));
  /* a failed call leaves every size static, also those it had marked before failing */
  kg_program *st = load(KG_TEST_MATMUL, "M=7 K=17 N=20", NULL, 0, &d);
  kg_dynamic_size mk[2] = {{"M", 0, 0}, {"K", 100, 200}};
  CHECK(st && kg_program_set_dynamic(st, mk, 2, &d, &da) == -1);
  if (st) {
    CHECK(kg_program_ndynamic(st) == 0);
    int marked = 0;
    for (int t = 0; t < st->ntensors; t++)
      for (int k = 0; k < st->tensors[t]->ndim; k++) marked += st->tensors[t]->dyn[k] != 0;
    for (int s2 = 0; s2 < st->nstages; s2++)
      for (int r = 0; r < st->stages[s2]->nrax; r++) marked += st->stages[s2]->rax[r]->dyn != 0;
    CHECK(marked == 0);
  }
  kg_program_free(st);
  /* a size used in an expression of a dimension */
  const char *shift = "def f(X: f32[N]) -> (Y: f32[N - 1]) {\n  Y[i] = X[i + 1] - X[i]\n}\n";
  kg_dynamic_size n = {"N", 0, 0};
  CHECK(load(shift, "N=10", &n, 1, &d) == NULL);
  CHECK(d.msg && strstr(d.msg, "must be a whole dimension"));
}

/* The lowered IR points into its schedule (loop and stage names): schedules live until the end of the test. */
static kg_schedule *live[64];
static int nlive;
static void free_live(void) {
  while (nlive > 0) kg_schedule_free(live[--nlive]);
}

static kg_lowered *lower_text(kg_program *p, const char *trace, kg_target_kind target, kg_arena *a, char *err,
                              size_t errlen) {
  kg_schedule *s = kg_schedule_new(p);
  if (trace) {
    kg_trace t;
    kg_trace_init(&t);
    int ok = kg_trace_parse(&t, "t", trace, strlen(trace), err, errlen) == 0 &&
             kg_schedule_apply_trace(s, &t, err, errlen) == 0;
    kg_trace_free(&t);
    if (!ok) {
      kg_schedule_free(s);
      return NULL;
    }
  }
  kg_lowered *f = kg_lower(s, target, a, err, errlen);
  if (f && kg_ir_verify(f, err, errlen) != 0) f = NULL; /* a broken invariant fails as lowering does */
  if (nlive < 64) live[nlive++] = s;
  else kg_schedule_free(s);
  return f;
}

static char *ir_text(const kg_lowered *f) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_ir_print(&b, f);
  return kg_strbuf_take(&b);
}

static void test_lowering(void) {
  kg_diag d;
  kg_dynamic_size m = {"M", 1, 4096};
  kg_program *p = load(KG_TEST_MATMUL, "M=64 K=17 N=20", &m, 1, &d);
  CHECK(p != NULL);
  if (!p) return;
  kg_arena a;
  kg_arena_init(&a);
  char err[512];
  /* M=64 is a multiple of 8: specialized, the split needs no guard; dynamic, it must keep one */
  kg_lowered *f = lower_text(p, "split C i 8\nparallel C i.o\n", KG_TARGET_CUDA, &a, err, sizeof err);
  CHECKF(f != NULL, "%s", err);
  if (f) {
    CHECK(f->nsize_vars == 1 && !strcmp(f->size_vars[0]->name, "M") && f->size_lo[0] == 1 && f->size_hi[0] == 4096 &&
          f->size_value[0] == 64);
    char *t = ir_text(f);
    CHECKF(strstr(t, "size M in [1, 4096]") && strstr(t, "floordiv((M + 7), 8)") && strstr(t, "< M)"), "%s", t);
    /* the outer loop's extent evaluates at the bound value */
    const kg_irstmt *loop = NULL;
    const kg_irstmt *it = f->body->seq.items[0];
    for (int i = 0; i < it->seq.n && !loop; i++)
      if (it->seq.items[i]->kind == KG_IRS_FOR) loop = it->seq.items[i];
    int64_t v = 0;
    CHECK(loop && kg_ir_eval_sizes(f, loop->loop.extent, &v) == 0 && v == 8);
    free(t);
  }
  /* specialized at the same value: no guard, constant extents */
  kg_program *ps = load(KG_TEST_MATMUL, "M=64 K=17 N=20", NULL, 0, &d);
  f = lower_text(ps, "split C i 8\n", KG_TARGET_CUDA, &a, err, sizeof err);
  CHECK(f && f->nsize_vars == 0);
  if (f) {
    char *t = ir_text(f);
    CHECKF(!strstr(t, "if ") && strstr(t, "[0, 8)"), "%s", t);
    free(t);
  }
  kg_program_free(ps);

  /* an inner dynamic dimension makes strides symbolic */
  kg_program *tp = load_lib("transpose", "M=5 N=7", "N", &d);
  f = tp ? lower_text(tp, NULL, KG_TARGET_C, &a, err, sizeof err) : NULL;
  CHECK(f != NULL);
  if (f) {
    char *t = ir_text(f);
    CHECKF(strstr(t, "X[((i * N) + j)]"), "%s", t);
    free(t);
  }
  kg_program_free(tp);

  /* a temporary whose size follows the size, and a size used as a value */
  kg_program *ln = load_lib("layernorm", "N=9 D=31", "D", &d);
  f = ln ? lower_text(ln, NULL, KG_TARGET_C, &a, err, sizeof err) : NULL;
  CHECK(f != NULL);
  if (f) {
    int dyn_temps = 0;
    for (int i = 0; i < f->ntemps; i++) dyn_temps += f->temps[i]->dyn_size != NULL;
    CHECK(dyn_temps >= 1);
    char *t = ir_text(f);
    CHECKF(strstr(t, "/ float(D)") || strstr(t, "/ D") || strstr(t, "(float)D") || strstr(t, "f32(D)"), "%s", t);
    free(t);
  }
  kg_program_free(ln);

  /* a region inside the dynamic loops has a constant size; one spanning the dynamic dimension cannot */
  kg_program *tile = load(KG_TEST_MATMUL, "M=6 K=10 N=4", &(kg_dynamic_size){"M", 0, 0}, 1, &d);
  f = tile ? lower_text(tile, "split C i 4\ncache_read A local C\ncompute_at A.local C i.o\n", KG_TARGET_C, &a, err,
                        sizeof err)
           : NULL;
  CHECKF(f != NULL, "%s", err);
  if (f) {
    char *t = ir_text(f);
    CHECKF(strstr(t, "alloc") || strstr(t, "local"), "%s", t);
    free(t);
  }
  kg_program_free(tile);
  kg_program *rs = load(KG_TEST_MATMUL, "M=6 K=10 N=4", &(kg_dynamic_size){"M", 0, 0}, 1, &d);
  f = rs ? lower_text(rs, "reorder C j i k\ncache_read A local C\ncompute_at A.local C j\n", KG_TARGET_C, &a, err,
                      sizeof err)
         : NULL;
  CHECK(f == NULL);
  CHECKF(strstr(err, "stage A.local: computed at C.j, its region spans a whole dimension that follows a dynamic size"),
         "%s", err);
  /* rfactor of a dynamic reduction is an illegal step */
  kg_program *rk = load(KG_TEST_MATMUL, "M=6 K=10 N=4", &(kg_dynamic_size){"K", 0, 0}, 1, &d);
  f = rk ? lower_text(rk, "rfactor C k 4\n", KG_TARGET_C, &a, err, sizeof err) : NULL;
  CHECK(f == NULL && strstr(err, "rfactor: stage C: loop k ranges over the dynamic size K"));
  kg_program_free(rk);
  kg_program_free(rs);
  free_live();
  kg_arena_free(&a);
  kg_program_free(p);
}

static void test_tlog(void) {
  kg_diag d;
  kg_program *p = load(KG_TEST_MATMUL, "M=77 K=17 N=20", &(kg_dynamic_size){"M", 1, 4096}, 1, &d);
  kg_program *s = load(KG_TEST_MATMUL, "M=77 K=17 N=20", NULL, 0, &d);
  kg_tlog_workload wd, ws;
  kg_tlog_workload_of(p, &wd);
  kg_tlog_workload_of(s, &ws);
  CHECK(strcmp(wd.hash, ws.hash) != 0); /* the dynamic kernel is another workload */
  kg_program *p2 = load(KG_TEST_MATMUL, "M=77 K=17 N=20", &(kg_dynamic_size){"M", 1, 2048}, 1, &d);
  kg_tlog_workload w2;
  kg_tlog_workload_of(p2, &w2);
  CHECK(strcmp(wd.hash, w2.hash) != 0); /* and its range is part of it */
  kg_tlog_record r;
  memset(&r, 0, sizeof r);
  r.v = KG_TLOG_VERSION;
  r.workload = wd;
  r.target = (kg_tlog_target){"c", "x86-64", "cpu", "cc", "cpu"};
  kg_trace_init(&r.trace);
  r.status = "ok";
  r.msg = "";
  double times[2] = {1e-3, 2e-3};
  r.times = times;
  r.ntimes = 2;
  r.kgen = "test";
  int64_t blo = 64, bhi = 127;
  kg_tlog_dynamic_of(p, &blo, &bhi, &r);
  CHECK(r.ndyn == 1 && !strcmp(r.dyn_names[0], "M") && r.dyn_lo[0] == 1 && r.dyn_hi[0] == 4096 &&
        r.bucket_lo[0] == 64 && r.bucket_hi[0] == 127);
  size_t len;
  char *buf = kg_tlog_encode(&r, &len);
  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_decode(&log, buf, len);
  CHECK(log.n == 1 && log.skipped_parts == 0);
  if (log.n == 1) {
    const kg_tlog_record *q = &log.recs[0];
    CHECK(q->ndyn == 1 && !strcmp(q->dyn_names[0], "M") && q->dyn_lo[0] == 1 && q->dyn_hi[0] == 4096 &&
          q->bucket_lo[0] == 64 && q->bucket_hi[0] == 127 && q->workload.size_values[0] == 77);
  }
  kg_tlog_free(&log);
  /* a bucket outside the range is not a record */
  r.bucket_hi[0] = 5000;
  char *bad = kg_tlog_encode(&r, &len);
  kg_tlog_init(&log);
  kg_tlog_decode(&log, bad, len);
  CHECK(log.n == 0 && log.skipped_parts == 1);
  kg_tlog_free(&log);
  free(bad);
  free(buf);
  kg_trace_free(&r.trace);
  /* a static record has no dynamic key */
  kg_tlog_dynamic_of(s, NULL, NULL, &r);
  CHECK(r.ndyn == 0);
  kg_program_free(p);
  kg_program_free(p2);
  kg_program_free(s);
}

static void test_buckets(void) {
  kg_dyn_bucket b[KG_DYN_MAX_BUCKETS];
  int n = kg_dyn_buckets(1, 4096, 4, NULL, 0, b);
  CHECK(n == 4);
  CHECK(b[0].lo == 1 && b[n - 1].hi == 4096);
  for (int i = 0; i < n; i++) {
    CHECK(b[i].lo <= b[i].value && b[i].value <= b[i].hi);
    if (i) CHECK(b[i].lo == b[i - 1].hi + 1);
  }
  CHECK(b[0].hi == 7 && b[1].hi == 63 && b[2].hi == 511); /* log-spaced: 8^1, 8^2, 8^3 */
  int64_t shapes[] = {333, 1, 7, 128, 4096, 7};
  n = kg_dyn_buckets(1, 4096, 0, shapes, 6, b);
  CHECK(n == 5);
  int64_t want[] = {1, 7, 128, 333, 4096};
  for (int i = 0; i < n && i < 5; i++) {
    CHECK(b[i].value == want[i] && b[i].lo <= want[i] && want[i] <= b[i].hi);
    if (i) CHECK(b[i].lo == b[i - 1].hi + 1);
  }
  CHECK(b[0].lo == 1 && b[4].hi == 4096);
  n = kg_dyn_buckets(5, 6, 4, NULL, 0, b);
  CHECK(n == 2 && b[0].lo == 5 && b[0].hi == 5 && b[1].lo == 6 && b[1].hi == 6);
}

static void test_header_dispatch(void) {
  static const char *pn[] = {"A", "B", "C"};
  static const int pin[] = {1, 1, 0};
  static const char *pd[] = {"[M][K]", "[K][N]", "[M][N]"};
  static const char *sn[] = {"M", "K", "N"};
  static const int sd[] = {1, 0, 0};
  int64_t v0[] = {4, 8, 8}, v1[] = {90, 8, 8};
  int64_t lo0[] = {1, 8, 8}, hi0[] = {15, 8, 8}, lo1[] = {16, 8, 8}, hi1[] = {256, 8, 8};
  kg_header_binding hb[2];
  memset(hb, 0, sizeof hb);
  hb[0].size_values = v0, hb[0].range_lo = lo0, hb[0].range_hi = hi0;
  hb[1].size_values = v1, hb[1].range_lo = lo1, hb[1].range_hi = hi1;
  hb[0].c_function = "int kg_mm_M1to15_K8_N8(int64_t M, const float *A, const float *B, float *C) { (void)M; (void)A; "
                     "(void)B; (void)C; return 0; }\n";
  hb[1].c_function = "int kg_mm_M16to256_K8_N8(int64_t M, const float *A, const float *B, float *C) { (void)M; "
                     "(void)A; (void)B; (void)C; return 1; }\n";
  kg_header_spec s = {.name = "mm", .prefix = "kg_", .target = KG_TARGET_C, .signature = "def mm(...)", .nparams = 3,
                      .param_names = pn, .param_is_input = pin, .param_dims = pd, .nsizes = 3, .size_names = sn,
                      .size_dynamic = sd, .bindings = hb, .nbindings = 2, .kgen_version = "test"};
  char *h = NULL, err[256];
  CHECK(kg_header_print(&s, &h, err, sizeof err) == 0);
  if (h) {
    CHECK(strstr(h, "int kg_mm_M1to15_K8_N8(int64_t M, const float *A, const float *B, float *C);") != NULL);
    CHECK(strstr(h, "if (M >= 16 && M <= 256 && K == 8 && N == 8) return kg_mm_M16to256_K8_N8(M, A, B, C);") != NULL);
    CHECK(strstr(h, "int kg_mm(int64_t M, int64_t K, int64_t N, const float *A, const float *B, float *C)") != NULL);
    CHECK(strstr(h, "int kg_mm_ranges(int i, int64_t *lo, int64_t *hi)") != NULL);
    CHECK(strstr(h, "M=16..256 (at run time; tuned at 90)") != NULL);
    CHECK(strstr(h, "#define KG_ERR_SIZE (-5)") != NULL);
  }
  free(h);
  /* overlapping buckets are refused */
  hi0[0] = 20;
  h = NULL;
  CHECK(kg_header_print(&s, &h, err, sizeof err) == -1 && strstr(err, "two kernels for the same sizes"));
  free(h);
}

int main(void) {
  kg_arena_init(&da);
  test_marks();
  test_errors();
  test_lowering();
  test_tlog();
  test_buckets();
  test_header_dispatch();
  kg_arena_free(&da);
  TEST_END();
}
