/* Fuzz target for the trace reader and the schedule primitives (libFuzzer entry point; tests/fuzz_replay_main.c
 * replays tests/fuzz/trace-corpus in `make test`). Each input is read as a schedule trace and applied to two
 * programs (a padded convolution and a softmax); whatever applies is lowered for both targets and printed as C.
 * Invariants checked on the way: the applied steps print to text that parses back to the same text, and
 * nothing crashes, leaks or trips a sanitizer, whatever the bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../codegen/codegen.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const sources[] = {
    "def conv2d(X: f32[N, C, H, W], K: f32[F, C, 3, 3]) -> (Y: f32[N, F, H, W]) {\n"
    "  P[n, c, h, w] : f32[N, C, H + 2, W + 2] = select(h >= 1 && h <= H && w >= 1 && w <= W, X[n, c, h - 1, w - 1], 0.0)\n"
    "  Y[n, f, y, x] = sum[c, r, s](P[n, c, y + r, x + s] * K[f, c, r, s])\n"
    "}\n",
    "def softmax(X: f32[N, D]) -> (Y: f32[N, D]) {\n"
    "  m[i] = max[j](X[i, j])\n"
    "  e[i, j] = exp(X[i, j] - m[i])\n"
    "  Y[i, j] = e[i, j] / sum[j2](e[i, j2])\n"
    "}\n",
};
static const kg_binding conv_sizes[] = {{"N", 2}, {"C", 3}, {"H", 5}, {"W", 6}, {"F", 4}};
static const kg_binding softmax_sizes[] = {{"N", 2}, {"D", 7}};

static kg_program *load(int which) {
  static kg_program *progs[2];
  if (!progs[which]) {
    kg_arena da;
    kg_arena_init(&da);
    kg_diag diag = {0};
    const kg_binding *b = which == 0 ? conv_sizes : softmax_sizes;
    int nb = which == 0 ? 5 : 2;
    progs[which] = kg_program_load("fuzz.te", sources[which], strlen(sources[which]), NULL, b, nb, &diag, &da);
    if (!progs[which]) {
      fprintf(stderr, "fuzz_trace: cannot load its own program: %s\n", diag.msg ? diag.msg : "?");
      abort();
    }
    kg_arena_free(&da);
  }
  return progs[which];
}

static void lower_and_print(const kg_schedule *s, kg_target_kind target) {
  kg_arena a;
  kg_arena_init(&a);
  char err[2048];
  kg_lowered *f = kg_lower(s, target, &a, err, sizeof err);
  if (f && target == KG_TARGET_C) {
    char *src = NULL;
    if (kg_codegen_c(f, "kgen_entry", &src, err, sizeof err) == 0) free(src);
  }
  kg_arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 131072) return 0; /* past 1000-odd lines the reader refuses the trace (KG_TRACE_MAX_STEPS) */
  char err[2048];
  kg_trace t;
  kg_trace_init(&t);
  int parsed = kg_trace_parse(&t, "fuzz.sched", (const char *)data, size, err, sizeof err) == 0;
  for (int which = 0; parsed && which < 2; which++) {
    kg_schedule *s = kg_schedule_new(load(which));
    kg_schedule_apply_trace(s, &t, err, sizeof err); /* an illegal step stops it; what applied stays */
    char *text = kg_trace_to_text(&s->trace);
    kg_trace again;
    kg_trace_init(&again);
    if (kg_trace_parse(&again, "again", text, strlen(text), err, sizeof err) != 0) {
      fprintf(stderr, "fuzz_trace: printed trace does not parse: %s\n%s", err, text);
      abort();
    }
    char *text2 = kg_trace_to_text(&again);
    if (strcmp(text, text2) != 0) {
      fprintf(stderr, "fuzz_trace: trace text round trip differs:\n%s---\n%s", text, text2);
      abort();
    }
    free(text2);
    free(text);
    kg_trace_free(&again);
    lower_and_print(s, KG_TARGET_C);
    lower_and_print(s, KG_TARGET_CUDA);
    kg_schedule_free(s);
  }
  kg_trace_free(&t);
  return 0;
}
