/* Fuzz target for the tuning-log reader (libFuzzer entry point; tests/fuzz_replay_main.c replays
 * tests/fuzz/tlog-corpus in `make test`). Each input is decoded as a log and shown as `kgen show` would.
 * Invariants: nothing crashes, leaks or trips a sanitizer; the skipped counts add up; every record kept is valid
 * (a known status, a trace whose text form parses back to the same text) and its encoding decodes to one record,
 * nothing skipped, that encodes to the same bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../runtime/measure.h"
#include "../tlog/tlog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const kg_tlog_record *r) {
  fprintf(stderr, "fuzz_tlog: %s (record of workload '%s', status '%s')\n", what, r->workload.name, r->status);
  abort();
}

static void check_record(const kg_tlog_record *r) {
  int known = 0;
  for (int s = 0; s < KG_STATUS_COUNT; s++) known |= strcmp(r->status, kg_status_names[s]) == 0;
  if (!known) fail("unknown status", r);
  if (r->workload.nsizes > KG_TLOG_MAX_SIZES || r->nknobs > KG_TLOG_MAX_KNOBS || r->ntimes < 0)
    fail("counts out of range", r);

  char *text = kg_trace_to_text(&r->trace);
  kg_trace t;
  kg_trace_init(&t);
  char err[512];
  if (kg_trace_parse(&t, "fuzz", text, strlen(text), err, sizeof err) != 0) fail("trace text does not parse", r);
  char *text2 = kg_trace_to_text(&t);
  if (strcmp(text, text2) != 0) fail("trace text round trip differs", r);
  free(text2);
  kg_trace_free(&t);
  free(text);

  size_t n, n2;
  char *e = kg_tlog_encode(r, &n);
  kg_tlog again;
  kg_tlog_init(&again);
  kg_tlog_decode(&again, e, n);
  if (again.n != 1 || again.skipped_bytes != 0) fail("re-encoded record does not decode whole", r);
  char *e2 = kg_tlog_encode(&again.recs[0], &n2);
  if (n2 != n || memcmp(e, e2, n) != 0) fail("re-encoding differs", r);
  free(e2);
  kg_tlog_free(&again);
  free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kg_tlog log;
  kg_tlog_init(&log);
  kg_tlog_decode(&log, (const char *)data, size);
  if (log.skipped_bytes > size || (log.skipped_parts > 0) != (log.skipped_bytes > 0) ||
      (size_t)log.skipped_parts > log.skipped_bytes || (log.n == 0 && log.skipped_bytes != size)) {
    fprintf(stderr, "fuzz_tlog: %zu bytes skipped in %d parts of %zu with %d records\n", log.skipped_bytes,
            log.skipped_parts, size, log.n);
    abort();
  }
  /* the notes say where the skipped bytes are: inside the input, in order, a newer record noted as such */
  size_t noted = 0, end = 0;
  for (int i = 0; i < log.nnotes; i++) {
    const kg_tlog_skip *k = &log.notes[i];
    if (k->len == 0 || k->offset < end || k->offset + k->len > size || k->v < 0 || (k->v && k->v <= KG_TLOG_VERSION)) {
      fprintf(stderr, "fuzz_tlog: note %d: %zu bytes at %zu (v %d) in %zu\n", i, k->len, k->offset, k->v, size);
      abort();
    }
    end = k->offset + k->len;
    noted += k->len;
  }
  if (log.nnotes > log.skipped_parts || log.skipped_newer > log.skipped_parts || noted > log.skipped_bytes ||
      (log.nnotes == log.skipped_parts && noted != log.skipped_bytes) || log.offset != size) {
    fprintf(stderr, "fuzz_tlog: %d notes of %zu bytes for %d parts of %zu bytes\n", log.nnotes, noted,
            log.skipped_parts, log.skipped_bytes);
    abort();
  }
  for (int i = 0; i < log.n; i++) check_record(&log.recs[i]);
  for (int best_only = 0; best_only < 2; best_only++) {
    kg_strbuf out;
    kg_strbuf_init(&out);
    kg_tlog_show(&out, &log, best_only);
    kg_strbuf_free(&out);
  }
  kg_tlog_free(&log);
  return 0;
}
