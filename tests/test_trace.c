/* Trace text form: canonical text round-trips, printed steps reparse to the same steps, malformed lines fail with
 * "NAME:LINE: error: ..." and leave the trace as it was. */
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../schedule/sched.h"
#include "testutil.h"

static int steps_equal(const kg_step *a, const kg_step *b) {
  if (a->kind != b->kind || strcmp(a->stage, b->stage) != 0 || a->nnames != b->nnames || a->nints != b->nints)
    return 0;
  for (int i = 0; i < a->nnames; i++)
    if (strcmp(a->names[i], b->names[i]) != 0) return 0;
  for (int i = 0; i < a->nints; i++)
    if (a->ints[i] != b->ints[i]) return 0;
  return 1;
}

static const char *canonical =
    "split C i 32\n"
    "tile C j k 4 8\n"
    "reorder C i.o j.o i.i k.o\n"
    "fuse C i.o j.o\n"
    "unroll C k.i\n"
    "vectorize C j.i\n"
    "parallel C i.o*j.o\n"
    "bind C i.i threadIdx.x\n"
    "bind C j.o blockIdx.y\n"
    "compute_at P C i.o\n"
    "compute_inline e\n"
    "compute_root P\n"
    "cache_read A shared C D\n"
    "cache_write C local\n"
    "rfactor m j 16\n"
    "reorder_storage C.local j i\n"
    "split C x 9223372036854775807\n";

static void test_round_trip(void) {
  kg_trace t;
  kg_trace_init(&t);
  char err[256];
  CHECKF(kg_trace_parse(&t, "t.trace", canonical, strlen(canonical), err, sizeof err) == 0, "%s", err);
  CHECK(t.nsteps == 17);
  char *text = kg_trace_to_text(&t);
  CHECKF(strcmp(text, canonical) == 0, "got:\n%s", text);
  /* specific fields */
  CHECK(t.steps[0].kind == KG_STEP_SPLIT && strcmp(t.steps[0].stage, "C") == 0 && t.steps[0].nnames == 1 &&
        strcmp(t.steps[0].names[0], "i") == 0 && t.steps[0].nints == 1 && t.steps[0].ints[0] == 32);
  CHECK(t.steps[1].kind == KG_STEP_TILE && t.steps[1].nnames == 2 && t.steps[1].ints[0] == 4 &&
        t.steps[1].ints[1] == 8);
  CHECK(t.steps[2].kind == KG_STEP_REORDER && t.steps[2].nnames == 4 && strcmp(t.steps[2].names[3], "k.o") == 0);
  CHECK(t.steps[10].kind == KG_STEP_COMPUTE_INLINE && t.steps[10].nnames == 0 && t.steps[10].nints == 0);
  CHECK(t.steps[12].kind == KG_STEP_CACHE_READ && strcmp(t.steps[12].stage, "A") == 0 &&
        t.steps[12].nnames == 3 && strcmp(t.steps[12].names[0], "shared") == 0);
  CHECK(t.steps[15].kind == KG_STEP_REORDER_STORAGE && strcmp(t.steps[15].stage, "C.local") == 0 &&
        t.steps[15].nnames == 2 && strcmp(t.steps[15].names[0], "j") == 0 && t.steps[15].nints == 0);
  CHECK(t.steps[16].ints[0] == INT64_MAX);

  /* print -> parse gives identical steps */
  kg_trace u;
  kg_trace_init(&u);
  CHECKF(kg_trace_parse(&u, "u", text, strlen(text), err, sizeof err) == 0, "%s", err);
  CHECK(u.nsteps == t.nsteps);
  for (int i = 0; i < t.nsteps && i < u.nsteps; i++) CHECKF(steps_equal(&t.steps[i], &u.steps[i]), "step %d", i);

  /* steps built by hand and pushed, printed, reparsed */
  kg_trace h;
  kg_trace_init(&h);
  kg_step s = {.kind = KG_STEP_TILE, .stage = "Y", .names = {"n", "f"}, .nnames = 2, .ints = {3, 5}, .nints = 2};
  kg_trace_push(&h, &s);
  kg_step s2 = {.kind = KG_STEP_REORDER, .stage = "Y", .names = {"x", "y", "n.o"}, .nnames = 3};
  kg_trace_push(&h, &s2);
  kg_step s3 = {.kind = KG_STEP_COMPUTE_ROOT, .stage = "P"};
  kg_trace_push(&h, &s3);
  char *htext = kg_trace_to_text(&h);
  CHECK(strcmp(htext, "tile Y n f 3 5\nreorder Y x y n.o\ncompute_root P\n") == 0);
  kg_trace h2;
  kg_trace_init(&h2);
  CHECK(kg_trace_parse(&h2, "h", htext, strlen(htext), err, sizeof err) == 0);
  CHECK(h2.nsteps == 3);
  for (int i = 0; i < 3 && i < h2.nsteps; i++) CHECK(steps_equal(&h.steps[i], &h2.steps[i]));
  /* the trace owns its strings: the pushed step's strings are copies */
  CHECK(h.steps[0].stage != s.stage && strcmp(h.steps[0].stage, "Y") == 0);

  free(htext);
  free(text);
  kg_trace_free(&h2);
  kg_trace_free(&h);
  kg_trace_free(&u);
  kg_trace_free(&t);
}

static void test_comments_and_blanks(void) {
  const char *src = "# a schedule\n\n   split   C\ti 8   # inner\r\n\t\n#only a comment\nvectorize C i.i";
  kg_trace t;
  kg_trace_init(&t);
  char err[256];
  CHECKF(kg_trace_parse(&t, "c", src, strlen(src), err, sizeof err) == 0, "%s", err);
  CHECK(t.nsteps == 2);
  char *text = kg_trace_to_text(&t);
  CHECK(strcmp(text, "split C i 8\nvectorize C i.i\n") == 0);
  free(text);
  /* parsing appends */
  CHECK(kg_trace_parse(&t, "c", "unroll C i.o\n", 13, err, sizeof err) == 0);
  CHECK(t.nsteps == 3 && t.steps[2].kind == KG_STEP_UNROLL);
  kg_trace_free(&t);

  kg_trace e;
  kg_trace_init(&e);
  CHECK(kg_trace_parse(&e, "e", "", 0, err, sizeof err) == 0 && e.nsteps == 0);
  char *et = kg_trace_to_text(&e);
  CHECK(et && strcmp(et, "") == 0);
  free(et);
  kg_trace_free(&e);
}

static void expect_error(const char *src, size_t len, const char *msg) {
  kg_trace t;
  kg_trace_init(&t);
  char err[256] = "";
  kg_step keep = {.kind = KG_STEP_SPLIT, .stage = "C", .names = {"i"}, .nnames = 1, .ints = {2}, .nints = 1};
  kg_trace_push(&t, &keep);
  int rc = kg_trace_parse(&t, "bad.trace", src, len, err, sizeof err);
  CHECKF(rc == -1, "accepted: %s", src);
  const char *got = err; /* CHECK_STR_CONTAINS tests its argument against NULL: not an array */
  CHECK_STR_CONTAINS(got, msg);
  CHECKF(t.nsteps == 1, "trace changed by a failed parse (%d steps)", t.nsteps);
  kg_trace_free(&t);
}

static void test_errors(void) {
  expect_error("splt C i 4\n", 11, "bad.trace:1: error: unknown step 'splt'");
  expect_error("split C i\n", 10, "bad.trace:1: error: split takes STAGE LOOP FACTOR");
  expect_error("split C i 4 5\n", 14, "bad.trace:1: error: split takes STAGE LOOP FACTOR");
  expect_error("split C i 0\n", 12, "bad.trace:1: error: split: factor '0' is not a positive integer");
  expect_error("split C i -4\n", 13, "split: factor '-4' is not a positive integer");
  expect_error("split C i x\n", 12, "split: factor 'x' is not a positive integer");
  expect_error("split C i 99999999999999999999\n", 31, "is not a positive integer");
  expect_error("split C i 9223372036854775808\n", 30, "is not a positive integer");
  expect_error("# ok\nsplit C i 4\nreorder C i.o\n", 31, "bad.trace:3: error: reorder takes STAGE LOOP LOOP...");
  expect_error("reorder C a b c d e f g h i j k l m n o p q\n", 44, "reorder takes");
  expect_error("tile C i j 4\n", 13, "tile takes STAGE LOOP1 LOOP2 FACTOR1 FACTOR2");
  expect_error("fuse C i\n", 9, "fuse takes STAGE LOOP1 LOOP2");
  expect_error("bind C i threadIdx.w\n", 21, "bad.trace:1: error: bind: unknown thread tag 'threadIdx.w'");
  expect_error("bind C i none\n", 14, "bind: unknown thread tag 'none'");
  expect_error("bind C i\n", 9, "bind takes STAGE LOOP TAG");
  expect_error("cache_read A shared\n", 20, "cache_read takes TENSOR SCOPE READER...");
  expect_error("cache_read A texture C\n", 23, "cache_read: unknown scope 'texture'");
  expect_error("cache_write C\n", 14, "cache_write takes STAGE SCOPE");
  expect_error("compute_inline\n", 15, "compute_inline takes STAGE");
  expect_error("compute_inline e f\n", 19, "compute_inline takes STAGE");
  expect_error("compute_at P C\n", 15, "compute_at takes STAGE CONSUMER LOOP");
  expect_error("rfactor C k\n", 12, "rfactor takes STAGE LOOP FACTOR");
  expect_error("reorder_storage C.local\n", 24, "reorder_storage takes STAGE AXIS...");
  expect_error("split C i\0 4\n", 13, "unexpected control character (byte 0x00)");
  expect_error("vectorize C i\x01\n", 15, "unexpected control character (byte 0x01)");
  /* the error of a later line, after good ones, is reported with its line number and nothing is appended */
  expect_error("split C i 4\nsplit C j 4\n\nunroll\n", 33, "bad.trace:4: error: unroll takes STAGE LOOP");
  /* a very long token is cut in the message */
  char longline[300];
  memset(longline, 'x', sizeof longline);
  memcpy(longline, "foo", 3);
  longline[299] = '\n';
  expect_error(longline, sizeof longline, "unknown step 'fooxxxxxxx");
}

int main(void) {
  test_round_trip();
  test_comments_and_blanks();
  test_errors();
  TEST_END();
}
