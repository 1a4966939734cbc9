/* Tuning logs read robustly: a record of a newer format version is skipped whole and said so (never used as if
 * understood); the best record gives way to the next best when its trace no longer applies to the program or its
 * time is implausible; skipped stretches are noted with their file offsets; a reader picks up exactly what was
 * appended since it last read, also while another process appends. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../base/strbuf.h"
#include "../runtime/measure.h"
#include "../tlog/tlog.h"
#include "testlib.h"

static char tmpdir[] = "/tmp/kg-test-tlog-robust-XXXXXX";

/* A record of matmul (the workload wl) on the C target with one time t (seconds) and the schedule `sched`. */
typedef struct rec {
  kg_tlog_record r;
  kg_trace trace;
  double t;
} rec;

static void rec_init(rec *x, const kg_tlog_workload *wl, const char *sched, double t) {
  memset(x, 0, sizeof *x);
  kg_trace_init(&x->trace);
  char err[256];
  int rc = kg_trace_parse(&x->trace, "t", sched, strlen(sched), err, sizeof err);
  CHECKF(rc == 0, "%s: %s", sched, err);
  x->t = t;
  kg_tlog_record *r = &x->r;
  r->workload = *wl;
  r->target = (kg_tlog_target){"c", "x86-64", "Test CPU", "cc 12", "cpu"};
  r->trace = x->trace;
  r->status = kg_status_names[KG_STATUS_OK];
  r->msg = "";
  r->times = &x->t;
  r->ntimes = 1;
  r->flops = 2.0 * 1024 * 1024 * 1024;
  r->bytes = 3.0 * 1024 * 1024 * 4;
  r->time = 1700000000;
  r->kgen = "test";
}

static void put_rec(kg_strbuf *b, const kg_tlog_record *r, int version) {
  size_t n;
  char *e = kg_tlog_encode(r, &n);
  /* kgen writes "v" first: a fixmap header, the key "v", then the version as a positive fixint */
  CHECK(n > 4 && (unsigned char)e[1] == 0xa1 && e[2] == 'v' && e[3] == KG_TLOG_VERSION);
  if (version) e[3] = (char)version;
  kg_strbuf_putn(b, e, n);
  free(e);
}

/* A log of records order[0..n) as kgen writes them, decoded (*buf holds the bytes; the caller frees both). */
static void decode_records(kg_tlog *log, kg_strbuf *buf, const kg_tlog_record *const *order, int n) {
  *buf = (kg_strbuf){0};
  for (int i = 0; i < n; i++) put_rec(buf, order[i], 0);
  kg_tlog_init(log);
  kg_tlog_decode(log, buf->s, buf->len);
  CHECKF(log->n == n, "%d records of %d", log->n, n);
}

/* A record of a newer format version is skipped whole, noted with its offset and version, and never used. */
static void test_newer_version(const kg_tlog_workload *wl) {
  rec a, fast, c;
  rec_init(&a, wl, "split C i 4\n", 2e-3);
  rec_init(&fast, wl, "split C j 4\n", 1e-3);
  rec_init(&c, wl, "split C k 4\n", 3e-3);
  kg_strbuf b = {0};
  put_rec(&b, &a.r, 0);
  size_t at = b.len;
  put_rec(&b, &fast.r, KG_TLOG_VERSION + 1);
  size_t newer_len = b.len - at;
  put_rec(&b, &c.r, 0);
  /* and one at the end whose "trace" is something this version never wrote: still skipped as newer */
  size_t at2 = b.len;
  static const unsigned char v9[] = {0x82, 0xa1, 'v', 0x09, 0xa5, 't', 'r', 'a', 'c', 'e', 0xa3, 'n', 'e', 'w'};
  kg_strbuf_putn(&b, (const char *)v9, sizeof v9);
  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_decode(&log, b.s, b.len);
  CHECKF(log.n == 2, "%d records", log.n);
  CHECK(log.skipped_newer == 2 && log.skipped_parts == 2 && log.skipped_bytes == newer_len + sizeof v9);
  CHECK(log.nnotes == 2 && log.notes[0].offset == at && log.notes[0].len == newer_len &&
        log.notes[0].v == KG_TLOG_VERSION + 1);
  CHECK(log.nnotes == 2 && log.notes[1].offset == at2 && log.notes[1].v == 9);
  CHECK(log.offset == b.len);
  for (int i = 0; i < log.n; i++) CHECK(log.recs[i].v == KG_TLOG_VERSION);
  kg_tlog_want w = {.wl = wl, .kind = "c"};
  kg_tlog_pick pk;
  kg_tlog_pick_best(&log, &w, &pk);
  CHECK(pk.kind == KG_TLOG_PICK_EXACT && pk.index == 0 && pk.median_s == 2e-3);
  kg_tlog_free(&log);
  free(b.s);
  kg_trace_free(&a.trace);
  kg_trace_free(&fast.trace);
  kg_trace_free(&c.trace);
}

/* The best record whose trace names a loop the program does not have gives way to the next best. */
static void test_trace_no_longer_applies(const kg_program *p, const kg_tlog_workload *wl) {
  rec broken, good, slow;
  rec_init(&broken, wl, "split C q 4\n", 1e-3);
  rec_init(&good, wl, "split C i 4\nreorder C i.o j k i.i\n", 2e-3);
  rec_init(&slow, wl, "split C j 8\n", 5e-3);
  kg_strbuf b = {0};
  put_rec(&b, &slow.r, 0);
  put_rec(&b, &broken.r, 0);
  put_rec(&b, &good.r, 0);
  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_decode(&log, b.s, b.len);
  CHECK(log.n == 3);
  kg_tlog_want w = {.wl = wl, .kind = "c", .prog = p};
  kg_tlog_pick pk;
  kg_tlog_pick_best(&log, &w, &pk);
  CHECKF(pk.index == 2 && pk.median_s == 2e-3, "picked %d", pk.index);
  CHECK(pk.nskipped == 1);
  CHECK_STR_CONTAINS(pk.skipped, "record 2: its trace no longer applies");
  /* without the program the reader cannot tell: the fastest is taken */
  kg_tlog_want blind = {.wl = wl, .kind = "c"};
  kg_tlog_pick_best(&log, &blind, &pk);
  CHECK(pk.index == 1 && pk.nskipped == 0);
  /* every record broken: none, saying why */
  kg_tlog only;
  kg_tlog_init(&only);
  kg_strbuf b2 = {0};
  put_rec(&b2, &broken.r, 0);
  kg_tlog_decode(&only, b2.s, b2.len);
  kg_tlog_pick_best(&only, &w, &pk);
  CHECK(pk.kind == KG_TLOG_PICK_NONE && pk.index == -1 && pk.nskipped == 1);
  CHECK_STR_CONTAINS(pk.differs, "no usable record");
  kg_tlog_free(&only);
  kg_tlog_free(&log);
  free(b.s);
  free(b2.s);
  kg_trace_free(&broken.trace);
  kg_trace_free(&good.trace);
  kg_trace_free(&slow.trace);
}

/* Times no machine can reach are never the best: zero, below a cycle, or implying more than the FLOP/s or bytes/s
 * bounds (judged by the program's counts when given, so a record cannot hide behind flops = 0). */
static void test_implausible(const kg_program *p, const kg_tlog_workload *wl) {
  rec zero, tiny, lying, real;
  rec_init(&zero, wl, "split C i 2\n", 0);
  rec_init(&tiny, wl, "split C i 8\n", 1e-7); /* 2^31 FLOP in 1e-7 s: 2e16 FLOP/s */
  rec_init(&lying, wl, "split C j 2\n", 1e-7);
  lying.r.flops = 0; /* the same by the program's count */
  lying.r.bytes = 0;
  rec_init(&real, wl, "split C k 2\n", 4e-3);
  kg_strbuf b = {0};
  put_rec(&b, &zero.r, 0);
  put_rec(&b, &tiny.r, 0);
  put_rec(&b, &lying.r, 0);
  put_rec(&b, &real.r, 0);
  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_decode(&log, b.s, b.len);
  CHECK(log.n == 4);
  char why[256];
  CHECK(!kg_tlog_record_plausible(&log.recs[0], NULL, NULL, why, sizeof why));
  CHECK(!kg_tlog_record_plausible(&log.recs[1], NULL, NULL, why, sizeof why));
  CHECK_STR_CONTAINS(why, "FLOP/s");
  CHECK(kg_tlog_record_plausible(&log.recs[2], NULL, NULL, why, sizeof why)); /* by its own (zero) counts */
  double f = kg_program_flops(p), by = kg_program_bytes(p);
  CHECK(!kg_tlog_record_plausible(&log.recs[2], &f, &by, why, sizeof why));
  CHECK(kg_tlog_record_plausible(&log.recs[3], &f, &by, why, sizeof why));
  double nan_t = NAN;
  kg_tlog_record bad = log.recs[3];
  bad.times = &nan_t;
  CHECK(!kg_tlog_record_plausible(&bad, NULL, NULL, why, sizeof why));
  kg_tlog_want w = {.wl = wl, .kind = "c", .prog = p};
  kg_tlog_pick pk;
  kg_tlog_pick_best(&log, &w, &pk);
  CHECKF(pk.index == 3 && pk.nskipped == 3, "picked %d, %d skipped", pk.index, pk.nskipped);
  CHECK_STR_CONTAINS(pk.skipped, "implausible time");
  /* show ranks none of them: it judges by the largest counts the workload's records give */
  kg_strbuf out;
  kg_strbuf_init(&out);
  kg_tlog_show(&out, &log, 0);
  CHECK_STR_CONTAINS(out.s, "best: 4.000 ms");
  CHECK_STR_CONTAINS(out.s, "records: 4 (ok 4), 3 with an implausible time, not ranked");
  kg_strbuf_free(&out);
  kg_tlog_free(&log);
  free(b.s);
  kg_trace_free(&zero.trace);
  kg_trace_free(&tiny.trace);
  kg_trace_free(&lying.trace);
  kg_trace_free(&real.trace);
}

/* A trace's time is the median of its records on one target (tune's confirmation re-measures the best): one lucky
 * measurement does not make it the best, records of another device do not join it, a failure counts as infinitely
 * slow (a trace failing half its measurements is passed over), an implausible time does not count. */
static void test_trace_median(const kg_program *p, const kg_tlog_workload *wl) {
  rec a1, a2, a3, a_bogus, b1, c1, c2, other1, other2, newer_cc;
  const char *A = "split C i 4\n", *B = "split C j 4\n", *C = "split C k 4\n";
  rec_init(&a1, wl, A, 1e-3); /* the search's lucky measurement */
  rec_init(&b1, wl, B, 2e-3);
  rec_init(&a2, wl, A, 3e-3);
  rec_init(&a3, wl, A, 3.2e-3);
  rec_init(&a_bogus, wl, A, 1e-12);
  rec_init(&c1, wl, C, 0.5e-3);
  rec_init(&c2, wl, C, 0);
  c2.r.status = kg_status_names[KG_STATUS_TIMEOUT];
  c2.r.ntimes = 0;
  rec_init(&other1, wl, A, 0.4e-3);
  rec_init(&other2, wl, A, 0.4e-3);
  other1.r.target.device = other2.r.target.device = "Other CPU";
  rec_init(&newer_cc, wl, A, 5e-3); /* another compiler: another target, as the tuner sees it */
  newer_cc.r.target.versions = "cc 13";
  const kg_tlog_record *order[] = {&a1.r, &b1.r, &c1.r, &other1.r, &a2.r, &c2.r, &a_bogus.r, &other2.r, &a3.r,
                                   &newer_cc.r};
  int n = (int)(sizeof order / sizeof *order);
  kg_strbuf b;
  kg_tlog log;
  decode_records(&log, &b, order, n);
  double t[10], rk[10];
  int cnt[10], first[10];
  kg_tlog_trace_times(&log, t, rk, cnt, first);
  CHECKF(t[0] == 3e-3 && cnt[0] == 3 && first[0] == 0, "A: %g of %d from %d", t[0], cnt[0], first[0]);
  CHECK(t[4] == 3e-3 && t[8] == 3e-3 && first[4] == 0 && first[8] == 0);
  CHECK(t[6] == 0 && cnt[6] == 0 && first[6] == -1); /* implausible: not counted, no time */
  /* B, measured once, ranks as A's re-measurements came back: 3.1 times its first (C's infinite median has no
   * ratio) */
  CHECKF(t[1] == 2e-3 && cnt[1] == 1 && first[1] == 1 && fabs(rk[1] - 6.2e-3) < 1e-12, "B: %g ranked %g", t[1], rk[1]);
  CHECK(rk[0] == 3e-3 && rk[4] == 3e-3 && rk[6] == 0);
  CHECK(isinf(t[2]) && cnt[2] == 2);                  /* C: one success, one timeout */
  CHECK(t[5] == 0 && first[5] == -1);                 /* the timeout itself has no time */
  CHECK(t[3] == 0.4e-3 && cnt[3] == 2 && first[3] == 3 && first[7] == 3); /* the other device's own trace time */
  CHECK(t[9] == 5e-3 && cnt[9] == 1 && first[9] == 9); /* the other compiler's, not in A's median */
  kg_tlog_want w = {.wl = wl, .kind = "c", .device = "Test CPU", .prog = p};
  kg_tlog_pick pk;
  kg_tlog_pick_best(&log, &w, &pk);
  CHECKF(pk.kind == KG_TLOG_PICK_EXACT && pk.index == 0 && pk.median_s == 3e-3 && pk.nrecords == 3,
         "picked %d (%g, %d records)", pk.index, pk.median_s, pk.nrecords);
  CHECK_STR_CONTAINS(pk.skipped, "record 3: its trace failed in at least half of its 2 measurements");
  /* on the other device A is the best, from its own records */
  w.device = "Other CPU";
  kg_tlog_pick_best(&log, &w, &pk);
  CHECK(pk.kind == KG_TLOG_PICK_EXACT && pk.index == 3 && pk.median_s == 0.4e-3 && pk.nrecords == 2);
  kg_strbuf out;
  kg_strbuf_init(&out);
  kg_tlog_show(&out, &log, 0);
  CHECK_STR_CONTAINS(out.s, "best: 3.000 ms");
  CHECK_STR_CONTAINS(out.s, "3.000 ms (715.8 GFLOP/s, 4.2 GB/s)  record 1, median of 3 records\n");
  CHECK_STR_CONTAINS(out.s, "record 2, measured once, ranked as 6.200 ms\n");
  CHECK(!strstr(out.s, "record 3\n")); /* C is not ranked */
  kg_strbuf_free(&out);
  kg_tlog_free(&log);
  free(b.s);
  rec *all[] = {&a1, &a2, &a3, &a_bogus, &b1, &c1, &c2, &other1, &other2, &newer_cc};
  for (int i = 0; i < 10; i++) kg_trace_free(&all[i]->trace);
}

/* A trace measured once ranks by its time times how much slower the re-measured traces came back (the search's
 * fastest single times are its luckiest, and a slow spell during the confirmation slows the re-measured alike):
 * a single time just below the confirmed medians does not win, one faster by more than that drift does. The
 * helpers' edge cases: too few results, a failed first or later median, no ratio at all. */
static void test_single_factor(const kg_program *p, const kg_tlog_workload *wl) {
  double r2[] = {2, 3}, r3[] = {1, 1.3, 1.5}, rf[] = {INFINITY, 1}, rl[] = {1, INFINITY, INFINITY}, r1[] = {1};
  CHECK(kg_tlog_remeasure_ratio(r2, 2) == 1.5 && fabs(kg_tlog_remeasure_ratio(r3, 3) - 1.4) < 1e-12);
  CHECK(isnan(kg_tlog_remeasure_ratio(rf, 2)) && isnan(kg_tlog_remeasure_ratio(rl, 3)));
  CHECK(isnan(kg_tlog_remeasure_ratio(r1, 1)));
  double ratios[] = {NAN, 1.2, 2, 1.5, INFINITY}, none[] = {NAN};
  CHECK(kg_tlog_single_factor(ratios, 5) == 1.5 && kg_tlog_single_factor(none, 1) == 1);
  CHECK(kg_tlog_single_factor(NULL, 0) == 1);
  double faster[] = {0.5, 0.8, 1.1};
  CHECK(kg_tlog_single_factor(faster, 3) == 1);

  rec a[3], b[3], c, d;
  const char *A = "split C i 4\n", *B = "split C j 4\n", *C = "split C k 4\n", *D = "split C i 8\n";
  double ta[] = {1.0e-3, 1.3e-3, 1.3e-3}, tb[] = {1.0e-3, 1.25e-3, 1.35e-3};
  for (int i = 0; i < 3; i++) rec_init(&a[i], wl, A, ta[i]), rec_init(&b[i], wl, B, tb[i]);
  rec_init(&c, wl, C, 1.1e-3); /* faster than both medians, by less than their drift: 1.43 ms re-measured */
  rec_init(&d, wl, D, 0.9e-3); /* 1.17 ms re-measured: faster than both */
  for (int with_d = 0; with_d < 2; with_d++) {
    const kg_tlog_record *order[] = {&a[0].r, &b[0].r, &c.r, &a[1].r, &b[1].r, &a[2].r, &b[2].r, &d.r};
    kg_strbuf buf;
    kg_tlog log;
    decode_records(&log, &buf, order, 7 + with_d);
    kg_tlog_want w = {.wl = wl, .kind = "c", .prog = p};
    kg_tlog_pick pk;
    kg_tlog_pick_best(&log, &w, &pk);
    if (!with_d)
      CHECKF(pk.index == 1 && pk.median_s == 1.25e-3 && pk.nrecords == 3, "picked %d (%g)", pk.index, pk.median_s);
    else
      CHECKF(pk.index == 7 && pk.median_s == 0.9e-3 && pk.nrecords == 1, "picked %d (%g)", pk.index, pk.median_s);
    kg_strbuf out;
    kg_strbuf_init(&out);
    kg_tlog_show(&out, &log, 0);
    CHECK_STR_CONTAINS(out.s, with_d ? "best: 900.000 us" : "best: 1.250 ms");
    CHECK_STR_CONTAINS(out.s, "record 3, measured once, ranked as 1.430 ms\n");
    kg_strbuf_free(&out);
    kg_tlog_free(&log);
    free(buf.s);
  }
  for (int i = 0; i < 3; i++) kg_trace_free(&a[i].trace), kg_trace_free(&b[i].trace);
  kg_trace_free(&c.trace);
  kg_trace_free(&d.trace);
}

/* Skipped stretches are noted at their offsets, the first KG_TLOG_MAX_NOTES of them; the rest are counted. */
static void test_notes(const kg_tlog_workload *wl) {
  rec a;
  rec_init(&a, wl, "split C i 4\n", 2e-3);
  kg_strbuf b = {0};
  size_t at[KG_TLOG_MAX_NOTES + 4];
  for (int i = 0; i < KG_TLOG_MAX_NOTES + 4; i++) {
    at[i] = b.len;
    kg_strbuf_putn(&b, "\xc1\xc1\xc1", 3);
    put_rec(&b, &a.r, i == KG_TLOG_MAX_NOTES + 1 ? KG_TLOG_VERSION + 1 : 0);
  }
  kg_strbuf_putn(&b, "\xc1", 1); /* after a newer record: a part of its own, never added to a note it does not own */
  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_decode(&log, b.s, b.len);
  CHECK(log.n == KG_TLOG_MAX_NOTES + 3 && log.skipped_newer == 1);
  CHECK(log.skipped_parts == KG_TLOG_MAX_NOTES + 6 && log.nnotes == KG_TLOG_MAX_NOTES);
  int ok = 1;
  for (int i = 0; i < log.nnotes; i++) ok &= log.notes[i].offset == at[i] && log.notes[i].len == 3 && !log.notes[i].v;
  CHECK(ok);
  kg_tlog_free(&log);
  free(b.s);
  kg_trace_free(&a.trace);
}

static void append_bytes(const char *path, const void *p, size_t n) {
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  CHECK(fd >= 0 && write(fd, p, n) == (ssize_t)n);
  close(fd);
}

/* kg_tlog_read_more reads exactly what was appended since, with skipped bytes noted at their file offsets; the
 * writer says how much it wrote and where its first record landed. */
static void test_read_more(const kg_tlog_workload *wl) {
  char path[256];
  snprintf(path, sizeof path, "%s/more.kglog", tmpdir);
  rec a, c;
  rec_init(&a, wl, "split C i 4\n", 2e-3);
  rec_init(&c, wl, "split C j 4\n", 3e-3);
  kg_strbuf b = {0};
  put_rec(&b, &a.r, 0);
  append_bytes(path, b.s, b.len);
  kg_tlog log;
  kg_tlog_init(&log);
  char err[256];
  CHECK(kg_tlog_read(&log, path, NULL, err, sizeof err) == 0 && log.n == 1 && log.offset == b.len);
  CHECK(kg_tlog_read_more(&log, path, err, sizeof err) == 0 && log.n == 1);
  kg_tlog_writer *w = kg_tlog_open(path, err, sizeof err);
  CHECK(w && kg_tlog_written(w) == 0 && kg_tlog_first_offset(w) == -1);
  CHECK(kg_tlog_append(w, &c.r, err, sizeof err) == 0);
  size_t one = kg_tlog_written(w);
  CHECK(kg_tlog_first_offset(w) == (long long)b.len);
  append_bytes(path, "junk!", 5);
  CHECK(kg_tlog_append(w, &a.r, err, sizeof err) == 0 && kg_tlog_written(w) == 2 * one + (b.len - one));
  CHECK(kg_tlog_first_offset(w) == (long long)b.len);
  int added = kg_tlog_read_more(&log, path, err, sizeof err);
  CHECKF(added == 2 && log.n == 3, "%d added, %d in all", added, log.n);
  CHECK(log.skipped_parts == 1 && log.skipped_bytes == 5 && log.nnotes == 1 && log.notes[0].offset == b.len + one &&
        log.notes[0].len == 5);
  CHECK(log.n == 3 && log.recs[1].times[0] == 3e-3 && log.recs[2].times[0] == 2e-3);
  CHECK(kg_tlog_read_more(&log, path, err, sizeof err) == 0 && log.n == 3);
  kg_tlog_close(w);
  /* the path now names a shorter file: read from its start */
  unlink(path);
  append_bytes(path, b.s, b.len);
  CHECK(kg_tlog_read_more(&log, path, err, sizeof err) == 1 && log.n == 4 && log.offset == b.len);
  /* a missing file adds nothing */
  unlink(path);
  CHECK(kg_tlog_read_more(&log, path, err, sizeof err) == 0 && log.n == 4);
  kg_tlog_free(&log);
  free(b.s);
  kg_trace_free(&a.trace);
  kg_trace_free(&c.trace);
}

/* While another process appends, repeated kg_tlog_read_more calls see every record exactly once and never half
 * of one. */
static void test_read_more_concurrent(const kg_tlog_workload *wl) {
  char path[256];
  snprintf(path, sizeof path, "%s/conc.kglog", tmpdir);
  const int N = 400;
  pid_t pid = fork();
  if (pid == 0) {
    rec a;
    rec_init(&a, wl, "split C i 4\nsplit C j 8\nreorder C i.o j.o k i.i j.i\n", 1e-3);
    char err[256];
    kg_tlog_writer *w = kg_tlog_open(path, err, sizeof err);
    if (!w) _exit(1);
    for (int i = 0; i < N; i++) {
      a.t = 1e-3 * (i + 1);
      if (kg_tlog_append(w, &a.r, err, sizeof err) != 0) _exit(1);
    }
    kg_tlog_close(w);
    _exit(0);
  }
  kg_tlog log;
  kg_tlog_init(&log);
  char err[256];
  int status = 0, done = 0, reads = 0, bad = 0;
  while (!done) {
    done = waitpid(pid, &status, WNOHANG) == pid;
    if (kg_tlog_read_more(&log, path, err, sizeof err) < 0) bad++;
    reads++;
  }
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECKF(log.n == N && log.skipped_bytes == 0 && bad == 0, "%d records in %d reads, %zu bytes skipped", log.n,
         reads, log.skipped_bytes);
  int order = 1;
  for (int i = 0; i < log.n; i++) order &= log.recs[i].times[0] == 1e-3 * (i + 1);
  CHECK(order);
  kg_tlog_free(&log);
}

int main(void) {
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  kg_program *p = kg_test_load_sizes(KG_TEST_MATMUL, "M=1024 N=1024 K=1024");
  CHECK(p != NULL);
  if (p) {
    kg_tlog_workload wl;
    kg_tlog_workload_of(p, &wl);
    test_newer_version(&wl);
    test_trace_no_longer_applies(p, &wl);
    test_implausible(p, &wl);
    test_trace_median(p, &wl);
    test_single_factor(p, &wl);
    test_notes(&wl);
    test_read_more(&wl);
    test_read_more_concurrent(&wl);
    kg_program_free(p);
  }
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
  TEST_END();
}
