/* Tuning logs: records round-trip through msgpack field for field; the reader keeps every intact record of a log
 * with garbage, torn or truncated records, or random corruption, and counts what it skipped; two processes
 * appending at once leave every record whole; workload identity; `kgen show`. */
#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../base/clock.h"
#include "../base/rng.h"
#include "../base/strbuf.h"
#include "../runtime/measure.h"
#include "../tlog/tlog.h"
#include "testlib.h"

static char tmpdir[] = "/tmp/kg-test-tlog-XXXXXX";

/* Every step kind, names at the edges of what the trace reader takes. */
static const char *all_steps =
    "split C i 32\n"
    "tile C j k 4 8\n"
    "reorder C i.o j.o i.i k.o\n"
    "fuse C i.o j.o\n"
    "unroll C k.i\n"
    "vectorize C j.i\n"
    "parallel C i.o*j.o\n"
    "bind C i.i threadIdx.x\n"
    "bind C j.o vthread\n"
    "compute_at P C i.o\n"
    "compute_inline e\n"
    "compute_root P\n"
    "cache_read A shared C D E F\n"
    "cache_write C local\n"
    "rfactor m j 16\n"
    "reorder_storage C.local j i\n"
    "stream Y\n"
    "pad A.shared 4\n"
    "launch_bounds C 2\n"
    "pipeline C.local k.o 3\n"
    "tensorize C.local i.i.o j.i.i k.i\n"
    "widen A.shared\n"
    "bfdot C.r0 i.i.i j.i k.i\n"
    "split_storage B.local ax1 32\n"
    "split C.ünï x 9223372036854775807\n";

/* A record for tests: every field set, values drawn from seed; strings are static or in the fixture. */
typedef struct fixture {
  kg_tlog_record r;
  kg_trace trace;
  double times[1000];
  char name[32], msg[1200];
} fixture;

static void fixture_init(fixture *f, uint64_t seed, int ntimes) {
  memset(f, 0, sizeof *f);
  kg_trace_init(&f->trace);
  char err[256];
  int rc = kg_trace_parse(&f->trace, "all", all_steps, strlen(all_steps), err, sizeof err);
  if (rc != 0) fprintf(stderr, "%s\n", err);
  CHECK(rc == 0);
  kg_tlog_record *r = &f->r;
  uint64_t s = seed;
  snprintf(f->name, sizeof f->name, "matmul%llu", (unsigned long long)(seed % 7));
  r->workload.name = f->name;
  snprintf(r->workload.hash, sizeof r->workload.hash, "%016llx", (unsigned long long)kg_rng_next(&s));
  static const char *const size_names[] = {"M", "N", "K", "Ünï"};
  r->workload.nsizes = 4;
  for (int i = 0; i < 4; i++) {
    r->workload.size_names[i] = size_names[i];
    r->workload.size_values[i] = 1 + (int64_t)(kg_rng_next(&s) % 5000);
  }
  r->workload.size_values[3] = INT64_MAX;
  r->target = (kg_tlog_target){"cuda", "sm_90", "NVIDIA H200 — ünïcödé ✓ \"q\" \\ \t tab",
                               "nvcc 12.4\nNVRTC 12.4\ndriver 550.54", "gpu"};
  r->trace = f->trace;
  r->status = kg_status_names[seed % KG_STATUS_COUNT];
  snprintf(f->msg, sizeof f->msg, "line 1: error: ‘x’ undeclared\n\tcol 7 {%llu}", (unsigned long long)seed);
  r->msg = f->msg;
  for (int i = 0; i < ntimes; i++) f->times[i] = 1e-6 * (double)(1 + kg_rng_next(&s) % 100000);
  r->times = f->times;
  r->ntimes = ntimes;
  r->compile_s = 0.25;
  r->flops = 2.0 * 1024 * 1024 * 1024;
  r->bytes = 12.0 * 1024 * 1024;
  r->time = 1700000000.125 + (double)seed;
  r->kgen = "0.4.0-dev";
  r->sketch = "gpu:SSSRRSRS/shared/local";
  r->nknobs = KG_TLOG_MAX_KNOBS;
  for (int i = 0; i < r->nknobs; i++)
    r->knobs[i] = (int64_t)(kg_rng_next(&s) >> 1) - (int64_t)(kg_rng_next(&s) >> 1);
  r->knobs[0] = INT64_MIN;
  r->knobs[1] = INT64_MAX;
  r->knobs[2] = (int64_t)seed;
  r->estimate_s = seed % 2 ? 1e-3 / (double)(seed + 1) : 0; /* optional: some records carry one */
  /* optional: a distributed tuning's records name their worker */
  r->worker_host = seed % 3 ? "node-7.cluster" : NULL;
  r->worker_rank = seed % 3 ? (int)(seed % 1000) : 0;
}

static void fixture_free(fixture *f) { kg_trace_free(&f->trace); }

static int str_same(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

/* Field-for-field equality; reports the first difference. */
static int records_equal(const kg_tlog_record *a, const kg_tlog_record *b) {
  const char *diff = NULL;
  if (!str_same(a->workload.name, b->workload.name) || strcmp(a->workload.hash, b->workload.hash) != 0 ||
      a->workload.nsizes != b->workload.nsizes)
    diff = "workload";
  for (int i = 0; !diff && i < a->workload.nsizes; i++)
    if (!str_same(a->workload.size_names[i], b->workload.size_names[i]) ||
        a->workload.size_values[i] != b->workload.size_values[i])
      diff = "sizes";
  if (!diff && (!str_same(a->target.kind, b->target.kind) || !str_same(a->target.arch, b->target.arch) ||
                !str_same(a->target.device, b->target.device) || !str_same(a->target.versions, b->target.versions) ||
                !str_same(a->target.runner, b->target.runner)))
    diff = "target";
  if (!diff) {
    char *ta = kg_trace_to_text(&a->trace), *tb = kg_trace_to_text(&b->trace);
    if (strcmp(ta, tb) != 0) diff = "trace";
    free(ta);
    free(tb);
  }
  if (!diff && (!str_same(a->status, b->status) || !str_same(a->msg, b->msg) || a->ntimes != b->ntimes))
    diff = "result";
  for (int i = 0; !diff && i < a->ntimes; i++)
    if (a->times[i] != b->times[i]) diff = "times";
  if (!diff && (a->compile_s != b->compile_s || a->flops != b->flops || a->bytes != b->bytes || a->time != b->time ||
                a->estimate_s != b->estimate_s))
    diff = "numbers";
  if (!diff && (!str_same(a->kgen, b->kgen) || !str_same(a->sketch, b->sketch) || a->nknobs != b->nknobs))
    diff = "kgen/sketch";
  if (!diff && (!str_same(a->worker_host, b->worker_host) || a->worker_rank != b->worker_rank)) diff = "worker";
  for (int i = 0; !diff && i < a->nknobs; i++)
    if (a->knobs[i] != b->knobs[i]) diff = "knobs";
  if (diff) fprintf(stderr, "records differ in %s\n", diff);
  return !diff;
}

/* ---- buffers and files ---- */

typedef struct buf {
  char *s;
  size_t len, cap;
} buf;

static void buf_put(buf *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    b->cap = 2 * (b->len + n);
    b->s = realloc(b->s, b->cap);
  }
  memcpy(b->s + b->len, p, n);
  b->len += n;
}

static void buf_put_record(buf *b, const kg_tlog_record *r) {
  size_t n;
  char *e = kg_tlog_encode(r, &n);
  buf_put(b, e, n);
  free(e);
}

static void buf_put_garbage(buf *b, uint64_t *rng, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)kg_rng_next(rng);
    buf_put(b, &c, 1);
  }
}

static char *path_in_tmp(const char *name) {
  static char path[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(path[k], sizeof path[k], "%s/%s", tmpdir, name);
  return path[k];
}

static void write_file(const char *path, const char *s, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  CHECK(fwrite(s, 1, n, f) == n);
  fclose(f);
}

/* What every decoded record must satisfy, whatever the input: a known status, a trace whose text reads back,
 * and an encoding that decodes to the same record with nothing skipped. */
static int record_valid(const kg_tlog_record *r) {
  int ok = 0;
  for (int s = 0; s < KG_STATUS_COUNT; s++) ok |= strcmp(r->status, kg_status_names[s]) == 0;
  char *text = kg_trace_to_text(&r->trace);
  kg_trace t;
  kg_trace_init(&t);
  char err[256];
  ok &= kg_trace_parse(&t, "x", text, strlen(text), err, sizeof err) == 0;
  kg_trace_free(&t);
  free(text);
  size_t n;
  char *e = kg_tlog_encode(r, &n);
  kg_tlog again;
  kg_tlog_init(&again);
  kg_tlog_decode(&again, e, n);
  ok &= again.n == 1 && again.skipped_bytes == 0 && records_equal(r, &again.recs[0]);
  kg_tlog_free(&again);
  free(e);
  return ok;
}

/* ---- tests ---- */

static void test_round_trip(void) {
  for (uint64_t seed = 0; seed < 6; seed++) {
    fixture f;
    fixture_init(&f, seed, seed == 0 ? 1000 : (int)seed);
    size_t n;
    char *e = kg_tlog_encode(&f.r, &n);
    kg_tlog log;
    kg_tlog_init(&log);
    kg_tlog_decode(&log, e, n);
    CHECK(log.n == 1 && log.skipped_bytes == 0 && log.skipped_parts == 0);
    if (log.n == 1) {
      const kg_tlog_record *d = &log.recs[0];
      CHECK(d->v == KG_TLOG_VERSION);
      CHECK(records_equal(&f.r, d));
      CHECK(d->trace.nsteps == 25);
      int seen[KG_STEP_COUNT] = {0}, kinds = 0;
      for (int i = 0; i < d->trace.nsteps; i++) kinds += !seen[d->trace.steps[i].kind]++;
      CHECK(kinds == KG_STEP_COUNT);
      size_t n2;
      char *e2 = kg_tlog_encode(d, &n2);
      CHECK(n2 == n && memcmp(e, e2, n) == 0);
      free(e2);
      CHECK(record_valid(d));
    }
    kg_tlog_free(&log);
    free(e);
    fixture_free(&f);
  }
  /* optional fields absent */
  fixture f;
  fixture_init(&f, 1, 0);
  f.r.sketch = NULL;
  f.r.nknobs = 0;
  kg_trace empty;
  kg_trace_init(&empty);
  f.r.trace = empty;
  size_t n;
  char *e = kg_tlog_encode(&f.r, &n);
  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_decode(&log, e, n);
  CHECK(log.n == 1 && log.recs[0].sketch == NULL && log.recs[0].nknobs == 0 && log.recs[0].trace.nsteps == 0 &&
        log.recs[0].ntimes == 0);
  CHECK(log.n == 1 && records_equal(&f.r, &log.recs[0]));
  kg_tlog_free(&log);
  free(e);
  fixture_free(&f);
}

static void test_median(void) {
  kg_tlog_record r;
  memset(&r, 0, sizeof r);
  double odd[] = {5, 1, 3}, even[] = {4, 1, 2, 8};
  CHECK(kg_tlog_record_median(&r) == 0);
  r.status = "ok";
  CHECK(!kg_tlog_record_ok(&r));
  r.times = odd;
  r.ntimes = 3;
  CHECK(kg_tlog_record_median(&r) == 3);
  CHECK(odd[0] == 5); /* the times are not reordered */
  CHECK(kg_tlog_record_ok(&r));
  r.times = even;
  r.ntimes = 4;
  CHECK(kg_tlog_record_median(&r) == 3);
  r.status = "timeout";
  CHECK(!kg_tlog_record_ok(&r));
}

/* A record's encoding with one value replaced, added (key absent) or removed (val NULL): key is "K" for a key of
 * the record, "K.K2" for one of a sub-map. */
static void buf_put_mutated(buf *out, const kg_tlog_record *r, const char *key, const msgpack_object *val) {
  size_t n;
  char *e = kg_tlog_encode(r, &n);
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  CHECK(msgpack_unpack_next(&u, e, n, &off) == MSGPACK_UNPACK_SUCCESS);
  msgpack_object *m = &u.data;
  char k1[64];
  snprintf(k1, sizeof k1, "%s", key);
  char *dot = strchr(k1, '.');
  const char *last = k1;
  if (dot) {
    *dot = 0;
    last = dot + 1;
    for (uint32_t i = 0; i < m->via.map.size; i++)
      if (m->via.map.ptr[i].key.via.str.size == strlen(k1) &&
          memcmp(m->via.map.ptr[i].key.via.str.ptr, k1, strlen(k1)) == 0)
        m = &m->via.map.ptr[i].val;
  }
  msgpack_object_kv kv[80];
  uint32_t nkv = 0, found = 0;
  for (uint32_t i = 0; i < m->via.map.size; i++) {
    const msgpack_object_kv *p = &m->via.map.ptr[i];
    if (p->key.via.str.size == strlen(last) && memcmp(p->key.via.str.ptr, last, strlen(last)) == 0) {
      found = 1;
      if (val) kv[nkv++] = (msgpack_object_kv){p->key, *val};
    } else {
      kv[nkv++] = *p;
    }
  }
  if (!found && val) {
    msgpack_object k = {.type = MSGPACK_OBJECT_STR};
    k.via.str.ptr = last;
    k.via.str.size = (uint32_t)strlen(last);
    kv[nkv++] = (msgpack_object_kv){k, *val};
  }
  m->via.map.ptr = kv;
  m->via.map.size = nkv;
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_object(&pk, u.data);
  buf_put(out, sb.data, sb.size);
  msgpack_sbuffer_destroy(&sb);
  msgpack_unpacked_destroy(&u);
  free(e);
}

static msgpack_object obj_str(const char *s, size_t n) {
  msgpack_object o = {.type = MSGPACK_OBJECT_STR};
  o.via.str.ptr = s;
  o.via.str.size = (uint32_t)n;
  return o;
}
static msgpack_object obj_int(int64_t v) {
  msgpack_object o = {.type = v < 0 ? MSGPACK_OBJECT_NEGATIVE_INTEGER : MSGPACK_OBJECT_POSITIVE_INTEGER};
  if (v < 0)
    o.via.i64 = v;
  else
    o.via.u64 = (uint64_t)v;
  return o;
}
static msgpack_object obj_array(msgpack_object *items, uint32_t n) {
  msgpack_object o = {.type = MSGPACK_OBJECT_ARRAY};
  o.via.array.ptr = items;
  o.via.array.size = n;
  return o;
}

/* Decodes one mutated record: whether it was kept (then compared with *expect when that is not NULL), and that
 * a rejected one is counted as skipped whole. */
static int mutated_kept(const kg_tlog_record *r, const char *key, const msgpack_object *val,
                        const kg_tlog_record *expect) {
  buf b = {0};
  buf_put_mutated(&b, r, key, val);
  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_decode(&log, b.s, b.len);
  int kept = log.n == 1;
  if (kept) {
    CHECK(log.skipped_bytes == 0);
    CHECK(record_valid(&log.recs[0]));
    if (expect) CHECKF(records_equal(expect, &log.recs[0]), "mutating %s", key);
  } else {
    CHECKF(log.n == 0 && log.skipped_bytes == b.len && log.skipped_parts == 1, "mutating %s", key);
  }
  kg_tlog_free(&log);
  free(b.s);
  return kept;
}

static void test_validation(void) {
  fixture f;
  fixture_init(&f, 3, 5);
  const kg_tlog_record *r = &f.r;
  msgpack_object o, items[70], step[4], names[3], ints[2];
  CHECK(mutated_kept(r, "future", NULL, r)); /* a no-op mutation keeps the record */
  /* unknown keys, nil optionals, integers for amounts: accepted */
  for (int i = 0; i < 3; i++) items[i] = obj_int(i);
  o = obj_array(items, 3);
  CHECK(mutated_kept(r, "future", &o, r));
  CHECK(mutated_kept(r, "target.future", &o, r));
  kg_tlog_record expect = *r;
  o.type = MSGPACK_OBJECT_NIL;
  expect.sketch = NULL;
  CHECK(mutated_kept(r, "sketch", &o, &expect));
  expect = *r;
  expect.nknobs = 0;
  CHECK(mutated_kept(r, "knobs", NULL, &expect));
  expect = *r;
  expect.compile_s = 3;
  o = obj_int(3);
  CHECK(mutated_kept(r, "result.compile_s", &o, &expect));
  /* a NUL in free text ends it */
  expect = *r;
  expect.msg = "ab";
  o = obj_str("ab\0cd", 5);
  CHECK(mutated_kept(r, "result.msg", &o, &expect));
  for (int i = 0; i < 64; i++) items[i] = obj_int(i - 5);
  o = obj_array(items, 64);
  CHECK(mutated_kept(r, "knobs", &o, NULL));
  /* the optional worker map: nil is absent; not a map, no host, a negative rank: rejected */
  fixture fw;
  fixture_init(&fw, 4, 5);
  CHECK(fw.r.worker_host != NULL);
  expect = fw.r;
  expect.worker_host = NULL;
  expect.worker_rank = 0;
  o.type = MSGPACK_OBJECT_NIL;
  CHECK(mutated_kept(&fw.r, "worker", &o, &expect));
  CHECK(mutated_kept(&fw.r, "worker.future", NULL, &fw.r));
  o = obj_int(3);
  CHECK(!mutated_kept(&fw.r, "worker", &o, NULL));
  o = obj_int(-1);
  CHECK(!mutated_kept(&fw.r, "worker.rank", &o, NULL));
  CHECK(!mutated_kept(&fw.r, "worker.host", NULL, NULL));
  fixture_free(&fw);

  /* rejected: missing or mistyped keys, values out of range, names with NULs, unknown names */
  const char *required[] = {"v", "workload", "target", "trace", "result", "time", "kgen", "workload.name",
                            "workload.hash", "workload.sizes", "target.kind", "target.arch", "target.device",
                            "target.versions", "target.runner", "result.status", "result.msg", "result.times",
                            "result.compile_s", "result.flops", "result.bytes"};
  for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
    CHECKF(!mutated_kept(r, required[i], NULL, NULL), "without %s", required[i]);
    o = obj_array(items, 1);
    CHECKF(!mutated_kept(r, required[i], &o, NULL), "%s an array", required[i]);
  }
  o = obj_int(0);
  CHECK(!mutated_kept(r, "v", &o, NULL));
  o = obj_int(-1);
  CHECK(!mutated_kept(r, "result.flops", &o, NULL));
  o = obj_str("bogus", 5);
  CHECK(!mutated_kept(r, "result.status", &o, NULL));
  CHECK(!mutated_kept(r, "target.kind", &o, NULL));
  CHECK(!mutated_kept(r, "target.runner", &o, NULL));
  o = obj_str("mat\0mul", 7);
  CHECK(!mutated_kept(r, "workload.name", &o, NULL));
  o = obj_str("", 0);
  CHECK(!mutated_kept(r, "workload.name", &o, NULL));
  CHECK(!mutated_kept(r, "sketch", &o, NULL));
  o = obj_str("0123456789ABCDEF", 16);
  CHECK(!mutated_kept(r, "workload.hash", &o, NULL));
  o = obj_str("0123456789abcde", 15);
  CHECK(!mutated_kept(r, "workload.hash", &o, NULL));
  items[0] = obj_str("fast", 4);
  o = obj_array(items, 1);
  CHECK(!mutated_kept(r, "result.times", &o, NULL));
  for (int i = 0; i < 65; i++) items[i] = obj_int(i);
  o = obj_array(items, 65);
  CHECK(!mutated_kept(r, "knobs", &o, NULL));
  /* sizes: 33 entries, a NUL in a name, a non-positive value */
  msgpack_object_kv kv[33];
  char sname[33][16];
  for (int i = 0; i < 33; i++) {
    snprintf(sname[i], sizeof sname[i], "S%d", i);
    kv[i] = (msgpack_object_kv){obj_str(sname[i], strlen(sname[i])), obj_int(i + 1)};
  }
  o.type = MSGPACK_OBJECT_MAP;
  o.via.map.ptr = kv;
  o.via.map.size = 32;
  expect = *r;
  CHECK(mutated_kept(r, "workload.sizes", &o, NULL));
  o.via.map.size = 33;
  CHECK(!mutated_kept(r, "workload.sizes", &o, NULL));
  kv[0].key = obj_str("S\0", 2);
  o.via.map.size = 2;
  CHECK(!mutated_kept(r, "workload.sizes", &o, NULL));
  kv[0].key = obj_str("S1", 2); /* a duplicate name */
  CHECK(!mutated_kept(r, "workload.sizes", &o, NULL));
  kv[0].key = obj_str("S0", 2);
  kv[0].val = obj_int(0);
  CHECK(!mutated_kept(r, "workload.sizes", &o, NULL));
  /* trace steps */
  names[0] = obj_str("i", 1);
  names[1] = obj_str("j", 1);
  names[2] = obj_str("k", 1);
  ints[0] = obj_int(4);
  ints[1] = obj_int(8);
  struct {
    const char *kind, *stage;
    int nnames, nints, kept;
  } cases[] = {{"split", "C", 1, 1, 1}, {"splitt", "C", 1, 1, 0}, {"split", "C", 2, 1, 0},
               {"split", "C", 1, 0, 0}, {"split", "", 1, 1, 0},   {"split", "C D", 1, 1, 0},
               {"split", "#C", 1, 1, 0}, {"tile", "C", 2, 2, 1},  {"reorder", "C", 1, 0, 0},
               {"reorder", "C", 3, 0, 1}, {"bind", "C", 2, 0, 0}}; /* "j" is no thread tag */
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    step[0] = obj_str(cases[c].kind, strlen(cases[c].kind));
    step[1] = obj_str(cases[c].stage, strlen(cases[c].stage));
    step[2] = obj_array(names, (uint32_t)cases[c].nnames);
    step[3] = obj_array(ints, (uint32_t)cases[c].nints);
    msgpack_object st = obj_array(step, 4), tr = obj_array(&st, 1);
    CHECKF(mutated_kept(r, "trace", &tr, NULL) == cases[c].kept, "step %s %s", cases[c].kind, cases[c].stage);
  }
  ints[0] = obj_int(0); /* factors are positive */
  step[0] = obj_str("split", 5);
  step[1] = obj_str("C", 1);
  step[2] = obj_array(names, 1);
  step[3] = obj_array(ints, 1);
  msgpack_object st = obj_array(step, 4), tr = obj_array(&st, 1);
  CHECK(!mutated_kept(r, "trace", &tr, NULL));
  st = obj_array(step, 3);
  CHECK(!mutated_kept(r, "trace", &tr, NULL));

  /* the writer refuses what the reader would skip */
  char err[512];
  const char *path = path_in_tmp("invalid.kglog");
  kg_tlog_writer *w = kg_tlog_open(path, err, sizeof err);
  CHECK(w != NULL);
  if (w) {
    expect = *r;
    expect.status = "great";
    CHECK(kg_tlog_append(w, &expect, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "result.status");
    expect = *r;
    expect.flops = NAN;
    CHECK(kg_tlog_append(w, &expect, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "result.flops");
    CHECK(kg_tlog_append(w, r, err, sizeof err) == 0);
    kg_tlog_close(w);
    struct stat sb;
    size_t n;
    free(kg_tlog_encode(r, &n));
    CHECK(stat(path, &sb) == 0 && (size_t)sb.st_size == n);
  }
  fixture_free(&f);
}

/* Three records, the last cut at every length: the first two stay, the cut part is counted. Also a record cut at
 * every length and followed by a whole one (a writer killed mid-write, then another append). */
static void test_truncated(void) {
  fixture f[3];
  buf whole = {0}, last = {0};
  for (int i = 0; i < 3; i++) fixture_init(&f[i], 10 + (uint64_t)i, 3);
  buf_put_record(&whole, &f[0].r);
  buf_put_record(&whole, &f[1].r);
  size_t head = whole.len;
  buf_put_record(&last, &f[2].r);
  buf_put(&whole, last.s, last.len);
  int bad = 0;
  for (size_t cut = 0; cut < last.len; cut++) {
    kg_tlog log;
    kg_tlog_init(&log);
    kg_tlog_decode(&log, whole.s, head + cut);
    int ok = log.n == 2 && log.skipped_bytes == cut && log.skipped_parts == (cut > 0) &&
             records_equal(&log.recs[0], &f[0].r) && records_equal(&log.recs[1], &f[1].r);
    if (!ok && bad++ < 3) fprintf(stderr, "cut at %zu of %zu: %d records, %zu skipped\n", cut, last.len, log.n,
                                  log.skipped_bytes);
    kg_tlog_free(&log);
  }
  CHECKF(bad == 0, "%d of %zu truncations lost intact records", bad, last.len);
  CHECK(last.len > 100); /* the loop covered a real record */

  /* torn, then whole */
  bad = 0;
  for (size_t cut = 1; cut < last.len; cut++) {
    buf b = {0};
    buf_put_record(&b, &f[0].r);
    buf_put(&b, last.s, cut);
    buf_put_record(&b, &f[1].r);
    kg_tlog log;
    kg_tlog_init(&log);
    kg_tlog_decode(&log, b.s, b.len);
    int ok = log.n == 2 && log.skipped_bytes == cut && log.skipped_parts == 1 &&
             records_equal(&log.recs[0], &f[0].r) && records_equal(&log.recs[1], &f[1].r);
    if (!ok && bad++ < 3) fprintf(stderr, "torn at %zu: %d records, %zu skipped\n", cut, log.n, log.skipped_bytes);
    kg_tlog_free(&log);
    free(b.s);
  }
  CHECKF(bad == 0, "%d torn records lost the record after them", bad);
  free(whole.s);
  free(last.s);
  for (int i = 0; i < 3; i++) fixture_free(&f[i]);
}

static void test_garbage(void) {
  fixture f;
  fixture_init(&f, 20, 4);
  uint64_t rng = 99;
  /* appended after N records, through a file */
  buf b = {0};
  for (int i = 0; i < 7; i++) buf_put_record(&b, &f.r);
  buf_put_garbage(&b, &rng, 1000);
  const char *path = path_in_tmp("garbage-end.kglog");
  write_file(path, b.s, b.len);
  kg_tlog log;
  kg_tlog_init(&log);
  char err[256];
  int missing = 7;
  CHECK(kg_tlog_read(&log, path, &missing, err, sizeof err) == 0 && missing == 0);
  CHECK(log.n == 7 && log.skipped_bytes == 1000 && log.skipped_parts == 1);
  for (int i = 0; i < log.n; i++) CHECK(records_equal(&log.recs[i], &f.r));
  kg_tlog_free(&log);
  free(b.s);

  /* in the middle, twice, and at the start */
  for (int trial = 0; trial < 20; trial++) {
    memset(&b, 0, sizeof b);
    size_t g1 = 1 + kg_rng_next(&rng) % 600, g2 = 1 + kg_rng_next(&rng) % 600, g0 = kg_rng_next(&rng) % 50;
    buf_put_garbage(&b, &rng, g0);
    buf_put_record(&b, &f.r);
    buf_put_record(&b, &f.r);
    buf_put_garbage(&b, &rng, g1);
    buf_put_record(&b, &f.r);
    buf_put_garbage(&b, &rng, g2);
    buf_put_record(&b, &f.r);
    kg_tlog_init(&log);
    kg_tlog_decode(&log, b.s, b.len);
    CHECKF(log.n == 4 && log.skipped_bytes == g0 + g1 + g2 && log.skipped_parts == 2 + (g0 > 0),
           "trial %d: %d records, %zu bytes in %d parts", trial, log.n, log.skipped_bytes, log.skipped_parts);
    kg_tlog_free(&log);
    free(b.s);
  }
  fixture_free(&f);
}

/* Random bytes changed in a log of five records: never a crash, every record kept is valid, and one changed
 * byte costs at most the record it hit. */
static void test_corruption(void) {
  fixture f[5];
  buf b = {0};
  for (int i = 0; i < 5; i++) {
    fixture_init(&f[i], 30 + (uint64_t)i, 1 + i);
    buf_put_record(&b, &f[i].r);
  }
  uint64_t rng = 12345;
  char *c = malloc(b.len);
  int invalid = 0, lost = 0;
  for (int trial = 0; trial < 3000; trial++) {
    memcpy(c, b.s, b.len);
    int flips = trial < 1500 ? 1 : 1 + (int)(kg_rng_next(&rng) % 8);
    for (int k = 0; k < flips; k++) c[kg_rng_next(&rng) % b.len] = (char)kg_rng_next(&rng);
    size_t len = trial % 3 == 2 ? kg_rng_next(&rng) % b.len : b.len;
    kg_tlog log;
    kg_tlog_init(&log);
    kg_tlog_decode(&log, c, len);
    for (int i = 0; i < log.n; i++) invalid += !record_valid(&log.recs[i]);
    if (flips == 1 && len == b.len && log.n < 4) lost++;
    kg_tlog_free(&log);
  }
  CHECKF(invalid == 0, "%d decoded records were invalid", invalid);
  CHECKF(lost == 0, "%d single-byte corruptions lost more than one record", lost);
  /* pure garbage of every small length */
  for (size_t len = 0; len < 300; len++) {
    buf g = {0};
    buf_put_garbage(&g, &rng, len);
    kg_tlog log;
    kg_tlog_init(&log);
    kg_tlog_decode(&log, g.s, len);
    CHECK(log.n == 0 && log.skipped_bytes == len && log.skipped_parts == (len > 0));
    kg_tlog_free(&log);
    free(g.s);
  }
  free(c);
  free(b.s);
  for (int i = 0; i < 5; i++) fixture_free(&f[i]);
}

/* A megabyte of garbage decodes in well under a second, including garbage shaped to look like records: map
 * headers with the key "v", containers announcing 2^32 items, records nested in strings, torn records. */
static void test_big_garbage(void) {
  fixture f;
  fixture_init(&f, 40, 3);
  size_t rn;
  char *rec = kg_tlog_encode(&f.r, &rn);
  const size_t size = 1 << 20;
  double slowest = 0;
  for (int kind = 0; kind < 6; kind++) {
    buf b = {0};
    uint64_t rng = 7 + (uint64_t)kind;
    static const unsigned char v_maps[] = {0x81, 0xa1, 'v'};
    static const unsigned char huge[] = {0x8f, 0xa1, 'v', 0xdd, 0xff, 0xff, 0xff, 0xff, 0xdf, 0xff, 0xff, 0xff};
    static const unsigned char nested_str[] = {0x89, 0xa1, 'v', 0x01, 0xdb, 0x00, 0x0f, 0xff, 0xf0};
    while (b.len < size) {
      switch (kind) {
      case 0: buf_put_garbage(&b, &rng, 4096); break;
      case 1: buf_put(&b, v_maps, sizeof v_maps); break;
      case 2: buf_put(&b, huge, sizeof huge); break;
      case 3: buf_put(&b, nested_str, sizeof nested_str); break;
      case 4: buf_put(&b, rec, rn / 2); break;                  /* torn records */
      default: buf_put(&b, rec, rn - 1 - kg_rng_next(&rng) % 8); /* nearly whole ones */
      }
    }
    double t0 = kg_now_s();
    kg_tlog log;
    kg_tlog_init(&log);
    kg_tlog_decode(&log, b.s, b.len);
    double dt = kg_now_s() - t0;
    /* A record cut short at its end and completed by the next one's first bytes is indistinguishable from a
     * whole one when nothing valid follows it (msgpack has no checksum): kind 5 may keep some, all valid. */
    if (kind < 5) CHECKF(log.n == 0 && log.skipped_bytes == b.len, "garbage %d: %d records", kind, log.n);
    int invalid = 0;
    for (int i = 0; i < log.n; i++) invalid += !record_valid(&log.recs[i]);
    CHECK(invalid == 0);
    /* a bound against quadratic rescanning (minutes), generous for a busy machine and the sanitizer build */
    CHECKF(dt < 5, "garbage %d: %.3f s for %zu bytes", kind, dt, b.len);
    if (dt > slowest) slowest = dt;
    kg_tlog_free(&log);
    free(b.s);
  }
  /* and a megabyte of records reads fast too */
  buf b = {0};
  while (b.len < size) buf_put(&b, rec, rn);
  double t0 = kg_now_s();
  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_decode(&log, b.s, b.len);
  double dt = kg_now_s() - t0;
  CHECK(log.n == (int)(b.len / rn) && log.skipped_bytes == 0);
  CHECKF(dt < 10, "%.3f s for %d records", dt, log.n);
  printf("a megabyte: of garbage at most %.3f s, of %d records %.3f s\n", slowest, log.n, dt);
  kg_tlog_free(&log);
  free(b.s);
  free(rec);
  fixture_free(&f);
}

/* Two processes append 300 records each to one log at the same time. */
static void test_concurrent_append(void) {
  const char *path = path_in_tmp("shared.kglog");
  int go[2];
  CHECK(pipe(go) == 0);
  pid_t pid[2];
  for (int p = 0; p < 2; p++) {
    pid[p] = fork();
    CHECK(pid[p] >= 0);
    if (pid[p] == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) < 0) _exit(3); /* wait for the start: the pipe closing */
      char err[512];
      kg_tlog_writer *w = kg_tlog_open(path, err, sizeof err);
      if (!w) _exit(1);
      fixture f;
      fixture_init(&f, 50 + (uint64_t)p, 20);
      f.r.workload.name = p ? "proc1" : "proc0";
      memset(f.msg, 'a' + p, 1000); /* records of a few KiB make interleaving likely */
      f.msg[1000] = 0;
      for (int i = 0; i < 300; i++) {
        f.r.knobs[2] = i;
        if (kg_tlog_append(w, &f.r, err, sizeof err) != 0) _exit(2);
        usleep(20); /* so that the writers overlap in time */
      }
      if (kg_tlog_flush(w, err, sizeof err) != 0) _exit(2);
      kg_tlog_close(w);
      fixture_free(&f);
      _exit(0);
    }
  }
  close(go[0]);
  close(go[1]);
  for (int p = 0; p < 2; p++) {
    int st = -1;
    CHECK(waitpid(pid[p], &st, 0) == pid[p]);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "writer %d: status %d", p, st);
  }
  kg_tlog log;
  kg_tlog_init(&log);
  char err[256];
  CHECK(kg_tlog_read(&log, path, NULL, err, sizeof err) == 0);
  CHECKF(log.n == 600 && log.skipped_bytes == 0, "%d records, %zu bytes skipped", log.n, log.skipped_bytes);
  int seen[2][300] = {{0}}, dup = 0, other = 0, switches = 0;
  for (int i = 0; i < log.n; i++) {
    const kg_tlog_record *r = &log.recs[i];
    int p = strcmp(r->workload.name, "proc1") == 0;
    int64_t k = r->knobs[2];
    if ((!p && strcmp(r->workload.name, "proc0") != 0) || k < 0 || k >= 300 || r->msg[0] != 'a' + p) {
      other++;
      continue;
    }
    dup += seen[p][k]++ != 0;
    if (i && strcmp(r->workload.name, log.recs[i - 1].workload.name) != 0) switches++;
  }
  CHECK(other == 0 && dup == 0);
  printf("concurrent append: %d records, writers alternated %d times\n", log.n, switches);
  kg_tlog_free(&log);
}

static void test_files(void) {
  char err[512] = "";
  kg_tlog log;
  kg_tlog_init(&log);
  int missing = 0;
  CHECK(kg_tlog_read(&log, path_in_tmp("nope.kglog"), &missing, err, sizeof err) == 0);
  CHECK(missing == 1 && log.n == 0 && log.skipped_bytes == 0);
  CHECK(kg_tlog_read(&log, tmpdir, &missing, err, sizeof err) == -1);
  CHECK(missing == 0);
  CHECK_STR_CONTAINS(err, "Is a directory");
  kg_tlog_free(&log);
  CHECK(kg_tlog_open(path_in_tmp("no/such/dir.kglog"), err, sizeof err) == NULL);
  CHECK_STR_CONTAINS(err, "No such file or directory");

  /* append to an existing log, flush, read back in order */
  const char *path = path_in_tmp("append.kglog");
  fixture f;
  fixture_init(&f, 60, 2);
  for (int round = 0; round < 2; round++) {
    kg_tlog_writer *w = kg_tlog_open(path, err, sizeof err);
    CHECK(w != NULL);
    if (!w) break;
    for (int i = 0; i < 3; i++) {
      f.r.knobs[2] = round * 3 + i;
      CHECK(kg_tlog_append(w, &f.r, err, sizeof err) == 0);
    }
    CHECK(kg_tlog_flush(w, err, sizeof err) == 0);
    kg_tlog_close(w);
  }
  kg_tlog_init(&log);
  CHECK(kg_tlog_read(&log, path, &missing, err, sizeof err) == 0 && missing == 0);
  CHECK(log.n == 6);
  for (int i = 0; i < log.n; i++) CHECK(log.recs[i].knobs[2] == i);
  kg_tlog_free(&log);
  fixture_free(&f);
}

/* FNV-1a 64 as tlog.h's contract states it, for comparison. */
static uint64_t fnv(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
  return h;
}

static void test_workload(void) {
  static const char spaced[] =
      "# the same matmul, laid out differently\n"
      "def   matmul(A: f32[M,K],\n      B: f32[K, N]) -> (C: f32[M, N])\n{\n"
      "  C[i, j] =   sum[k]( A[i,k]*B[k,j] )   # product\n"
      "}\n";
  kg_binding b[] = {{"M", 64}, {"N", 32}, {"K", 16}};
  kg_program *p1 = kg_test_load(KG_TEST_MATMUL, b, 3), *p2 = kg_test_load(spaced, b, 3);
  b[2].value = 17;
  kg_program *p3 = kg_test_load(KG_TEST_MATMUL, b, 3);
  kg_binding sb[] = {{"N", 64}, {"D", 32}};
  kg_program *p4 = kg_test_load(KG_TEST_SOFTMAX, sb, 2);
  CHECK(p1 && p2 && p3 && p4);
  if (!(p1 && p2 && p3 && p4)) return;
  kg_tlog_workload w1, w2, w3, w4;
  kg_tlog_workload_of(p1, &w1);
  kg_tlog_workload_of(p2, &w2);
  kg_tlog_workload_of(p3, &w3);
  kg_tlog_workload_of(p4, &w4);
  CHECK(strcmp(w1.name, "matmul") == 0 && strcmp(w4.name, "softmax") == 0);
  CHECK(strlen(w1.hash) == 16 && strspn(w1.hash, "0123456789abcdef") == 16);
  CHECK(strcmp(w1.hash, w2.hash) == 0);
  CHECK(strcmp(w1.hash, w3.hash) != 0);
  CHECK(strcmp(w1.hash, w4.hash) != 0);
  CHECK(w1.nsizes == p1->nsizes && w1.nsizes == 3);
  int64_t m = 0, k = 0;
  for (int i = 0; i < w1.nsizes; i++) {
    if (strcmp(w1.size_names[i], "M") == 0) m = w1.size_values[i];
    if (strcmp(w1.size_names[i], "K") == 0) k = w1.size_values[i];
  }
  CHECK(m == 64 && k == 16);
  /* the documented hash: name, canonical text, NAME=VALUE..., "f32", each NUL-terminated */
  char *canon = kg_program_canonical(p1);
  uint64_t h = fnv(0xcbf29ce484222325ULL, "matmul", 7);
  h = fnv(h, canon, strlen(canon) + 1);
  for (int i = 0; i < p1->nsizes; i++) {
    char kv[64];
    int n = snprintf(kv, sizeof kv, "%s=%lld", p1->sizes[i].name, (long long)p1->sizes[i].value);
    h = fnv(h, kv, (size_t)n + 1);
  }
  h = fnv(h, "f32", 4);
  char want[17];
  snprintf(want, sizeof want, "%016llx", (unsigned long long)h);
  CHECK(strcmp(w1.hash, want) == 0);
  free(canon);
  kg_program_free(p1);
  kg_program_free(p2);
  kg_program_free(p3);
  kg_program_free(p4);
}

static void test_show(void) {
  kg_trace t;
  kg_trace_init(&t);
  char err[256];
  CHECK(kg_trace_parse(&t, "x", "split C i 32\nparallel C i.o\n", 28, err, sizeof err) == 0);
  kg_trace t2; /* a trace that only failed */
  kg_trace_init(&t2);
  CHECK(kg_trace_parse(&t2, "y", "split C i 16\n", 13, err, sizeof err) == 0);
  kg_tlog_record base;
  memset(&base, 0, sizeof base);
  base.workload.name = "matmul";
  strcpy(base.workload.hash, "0123456789abcdef");
  base.workload.nsizes = 3;
  const char *sn[] = {"M", "N", "K"};
  for (int i = 0; i < 3; i++) {
    base.workload.size_names[i] = sn[i];
    base.workload.size_values[i] = 1024;
  }
  base.target = (kg_tlog_target){"c", "x86-64", "Test\nCPU", "cc 12", "cpu"};
  base.msg = "";
  base.flops = 2e9;
  base.bytes = 4e6;
  base.kgen = "0.4";
  base.time = 1.7e9;
  double t1[] = {3e-3, 2e-3, 4e-3}, t3[] = {2e-3}, t5[] = {1e-3, 5e-3};
  kg_tlog_record r[6];
  for (int i = 0; i < 6; i++) r[i] = base;
  r[0].status = "ok", r[0].times = t1, r[0].ntimes = 3;
  r[1].status = "compile_error", r[1].msg = "cc: error", r[1].trace = t2;
  r[2].status = "ok", r[2].times = t3, r[2].ntimes = 1, r[2].trace = t, r[2].sketch = "cpu:tile2";
  r[3].status = "timeout", r[3].trace = t2;
  r[4].status = "ok", r[4].times = t5, r[4].ntimes = 2;
  r[5].status = "wrong_answer";
  r[5].workload.name = "softmax";
  strcpy(r[5].workload.hash, "fedcba9876543210");
  r[5].workload.nsizes = 0;
  r[5].target = (kg_tlog_target){"cuda", "sm_90", "NVIDIA H200", "", "gpu"};
  buf b = {0};
  buf_put_record(&b, &r[0]);
  buf_put_record(&b, &r[5]);
  for (int i = 1; i < 5; i++) buf_put_record(&b, &r[i]);
  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_decode(&log, b.s, b.len);
  CHECK(log.n == 6);
  kg_strbuf out;
  kg_strbuf_init(&out);
  kg_tlog_show(&out, &log, 0);
  const char *want =
      "matmul [0123456789abcdef] M=1024 N=1024 K=1024 on c x86-64 (Test\\x0aCPU)\n"
      "  records: 5 (ok 3, compile_error 1, timeout 1)\n"
      "  best: 2.000 ms (1000.0 GFLOP/s, 2.0 GB/s) at record 4, sketch cpu:tile2\n"
      "    split C i 32\n"
      "    parallel C i.o\n"
      "  top 2:\n"
      "    2.000 ms (1000.0 GFLOP/s, 2.0 GB/s)  record 4, sketch cpu:tile2\n"
      "    3.000 ms (666.7 GFLOP/s, 1.3 GB/s)  record 1, median of 2 records\n"
      "\n"
      "softmax [fedcba9876543210] on cuda sm_90 (NVIDIA H200)\n"
      "  records: 1 (wrong_answer 1)\n"
      "  best: none (no successful measurement)\n";
  CHECKF(strcmp(out.s, want) == 0, "got:\n%s", out.s);
  kg_strbuf_free(&out);
  kg_tlog_free(&log);

  /* best only, with a corrupt part: not in the output (the CLI says it on stderr), counted */
  static const char junk[] = "\xc1junk!!";
  buf_put(&b, junk, 7);
  kg_tlog_init(&log);
  kg_tlog_decode(&log, b.s, b.len);
  kg_strbuf_init(&out);
  kg_tlog_show(&out, &log, 1);
  want =
      "matmul [0123456789abcdef] M=1024 N=1024 K=1024 on c x86-64 (Test\\x0aCPU)\n"
      "  best: 2.000 ms (1000.0 GFLOP/s, 2.0 GB/s) at record 4, sketch cpu:tile2\n"
      "    split C i 32\n"
      "    parallel C i.o\n"
      "\n"
      "softmax [fedcba9876543210] on cuda sm_90 (NVIDIA H200)\n"
      "  best: none (no successful measurement)\n";
  CHECKF(strcmp(out.s, want) == 0, "got:\n%s", out.s);
  kg_strbuf_free(&out);
  kg_tlog_free(&log);

  kg_tlog_init(&log);
  kg_strbuf_init(&out);
  kg_tlog_show(&out, &log, 0);
  CHECK(strcmp(out.s, "no records\n") == 0);
  kg_strbuf_free(&out);
  kg_tlog_free(&log);
  free(b.s);
  kg_trace_free(&t);
  kg_trace_free(&t2);
}

int main(void) {
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_round_trip();
  test_median();
  test_validation();
  test_truncated();
  test_garbage();
  test_corruption();
  test_big_garbage();
  test_concurrent_append();
  test_files();
  test_workload();
  test_show();
  const char *names[] = {"invalid.kglog", "garbage-end.kglog", "shared.kglog", "append.kglog"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) unlink(path_in_tmp(names[i]));
  if (rmdir(tmpdir) != 0) fprintf(stderr, "rmdir %s: %s\n", tmpdir, strerror(errno));
  TEST_END();
}
