/* The fused attention space: compute_at of a producer shared by stages computed at one loop, reorder_storage, and
 * the cpu/attn sketch rule (gen/sketch_cpu_attn.c). Schedules are verified against the reference evaluator at
 * sizes that are not multiples of any tile (S != T, D != E); the sketch exists for attention and batch matmul then
 * softmax, not for other programs. */
#include <stdio.h>
#include "testlib.h"
#include "../base/strbuf.h"
#include "../runtime/pipeline.h"
#include "../gen/space.h"

static char *attention_text;

static const char *const bmm_softmax =
    "def bmm_softmax(A: f32[B, M, K], W: f32[B, N, K]) -> (Y: f32[B, M, N]) {\n"
    "  s[b, i, j] = sum[k](A[b, i, k] * W[b, j, k])\n"
    "  m[b, i] = max[j](s[b, i, j])\n"
    "  e[b, i, j] = exp(s[b, i, j] - m[b, i])\n"
    "  Y[b, i, j] = e[b, i, j] / sum[j2](e[b, i, j2])\n"
    "}\n";

/* Loads text at sizes with inputs and reference outputs; -1 when it does not load. */
static int load(kg_test_workload *w, const char *text, const char *sizes) {
  memset(w, 0, sizeof *w);
  w->p = kg_test_load_sizes(text, sizes);
  CHECKF(w->p != NULL, "%s does not load", sizes);
  if (!w->p) return -1;
  kg_data_init(&w->d, w->p, KG_TEST_DATA_SEED);
  kg_data_reference(&w->d, w->p, KG_TEST_DATA_SEED);
  return 0;
}

/* The hand-written fused schedule: the score block of 8 query rows per parallel task, every stage of the block at
 * that loop (e and m with several consumers there), the block stored keys-major, Q packed transposed per tile. */
static const char *const fused_trace =
    "split O i 8\nfuse O b i.o\nparallel O b*i.o\nvectorize O c\n"
    "compute_at O.r0 O b*i.o\nsplit O.r0 i 3\nreorder O.r0 b i.o j i.i c\nunroll O.r0 i.i\nvectorize O.r0 c\n"
    "compute_at O.r1 O b*i.o\nreorder O.r1 b j2 i\nvectorize O.r1 i\n"
    "reorder_storage e b j i\ncompute_at e O b*i.o\nvectorize e i\n"
    "compute_at m O b*i.o\nreorder m b j i\nvectorize m i\n"
    "compute_inline s\nreorder_storage s.r0 b j i\ncache_read Q local s.r0\nreorder_storage Q.local ax0 ax2 ax1\n"
    "compute_at s.r0 O b*i.o\ncompute_at Q.local O b*i.o\nsplit s.r0 j 4\nreorder s.r0 b j.o d j.i i\n"
    "unroll s.r0 j.i\nvectorize s.r0 i\n";

static void check_fused_schedule(const char *sizes) {
  kg_test_workload w;
  if (load(&w, attention_text, sizes)) return;
  kg_schedule *s = kg_schedule_new(w.p);
  char err[1024] = "", what[256];
  snprintf(what, sizeof what, "attention %s, hand-written fused schedule", sizes);
  CHECKF(kg_test_apply_text(s, fused_trace, err, sizeof err) == 0, "%s: %s", what, err);
  kg_sstage *e = kg_schedule_find_stage(s, "e"), *q = kg_schedule_find_stage(s, "Q.local");
  /* the layouts: e's tensor [b][j][i], Q's copy [b][d][i] (its axes follow the dimensions) */
  CHECK(e && e->attach == KG_ATTACH_AT && !strcmp(e->attach_stage->name, "O") && !strcmp(e->ax[1]->name, "j") &&
        !strcmp(e->ax[2]->name, "i"));
  CHECK(q && q->attach == KG_ATTACH_AT && !strcmp(q->ax[1]->name, "ax2") && !strcmp(q->ax[2]->name, "ax1"));
  /* the program's own tensor keeps its declared layout (e's is the schedule's copy) */
  for (int i = 0; e && i < w.p->nstages; i++)
    if (!strcmp(w.p->stages[i]->name, "e")) {
      const kg_tensor *pt = w.p->stages[i]->out;
      CHECK(e->out != pt && e->out->shape[1] == pt->shape[2] && e->out->shape[2] == pt->shape[1]);
    }
  kg_test_verify_c(&w, s, what);
  /* the same without the layouts: each reorder_storage becomes a reorder of the stage's loops, the buffers stay
   * row-major */
  kg_schedule *plain = kg_schedule_new(w.p);
  char *noperm = strdup(fused_trace), *at;
  while ((at = strstr(noperm, "reorder_storage"))) memmove(at + 7, at + 15, strlen(at + 15) + 1);
  snprintf(what, sizeof what, "attention %s, fused schedule without reorder_storage", sizes);
  CHECKF(kg_test_apply_text(plain, noperm, err, sizeof err) == 0, "%s: %s", what, err);
  kg_test_verify_c(&w, plain, what);
  free(noperm);
  kg_schedule_free(plain);
  kg_schedule_free(s);
  kg_test_workload_free(&w);
}

/* An illegal step: fails with every fragment in the message, and leaves the trace as it was. */
static void illegal(int line, kg_schedule *s, const char *text, const char *f1, const char *f2) {
  int n = s->trace.nsteps;
  char err[1024] = "";
  CHECKF(kg_test_apply_text(s, text, err, sizeof err) == -1, "line %d: '%s' was accepted", line, text);
  CHECKF(strstr(err, f1) && (!f2 || strstr(err, f2)), "line %d: '%s': message '%s'", line, text, err);
  CHECK(s->trace.nsteps == n);
}
#define ILLEGAL(s, text, f1, f2) illegal(__LINE__, (s), (text), (f1), (f2))

static void check_illegal(void) {
  kg_program *p = kg_test_load_sizes(attention_text, "B=2 S=9 T=11 D=7 E=5");
  CHECK(p != NULL);
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  char err[1024];
  /* reorder_storage: outputs, unknown or repeated axes, a wrong count, inlined or attached stages */
  ILLEGAL(s, "reorder_storage O b c i", "reorder_storage: stage O", "program output");
  ILLEGAL(s, "reorder_storage e b j q", "reorder_storage: stage e: loop q", "not a spatial axis");
  ILLEGAL(s, "reorder_storage e b j j", "reorder_storage: stage e: loop j", "named twice");
  ILLEGAL(s, "reorder_storage e b j", "reorder_storage: stage e", "2 axes given, the stage has 3");
  CHECK(kg_test_apply_text(s, "compute_inline s", err, sizeof err) == 0);
  ILLEGAL(s, "reorder_storage s b j i", "reorder_storage: stage s", "inlined");
  /* a shared producer: every other consumer computed inside the consumer at that loop or deeper */
  CHECK(kg_test_apply_text(s, "split O i 4\ncompute_at O.r0 O i.o", err, sizeof err) == 0);
  ILLEGAL(s, "compute_at e O i.o", "compute_at: stage e", "also read by stage O.r1");
  ILLEGAL(s, "compute_at e O i.i", "compute_at: stage e", "stage O does not read it");
  CHECK(kg_test_apply_text(s, "compute_at O.r1 O i.i", err, sizeof err) == 0);
  /* e at i.o: O.r0 there, O.r1 at i.i inside it */
  CHECKF(kg_test_apply_text(s, "compute_at e O i.o", err, sizeof err) == 0, "%s", err);
  ILLEGAL(s, "reorder_storage e b j i", "reorder_storage: stage e", "at root");
  /* once e is computed there, its consumers stay inside, and no stage made from them runs at root */
  ILLEGAL(s, "rfactor O.r1 j2 2", "rfactor: stage O.r1", "it reads stage e, computed at O.i.o");
  ILLEGAL(s, "cache_write O.r1 local", "cache_write: stage O.r1", "it reads stage e, computed at O.i.o");
  ILLEGAL(s, "compute_root O.r1", "compute_root: stage O.r1", "stage e is computed at O.i.o");
  ILLEGAL(s, "compute_at O.r0 O b", "compute_at: stage O.r0", "stage e is computed at O.i.o");
  ILLEGAL(s, "reorder O c i.o", "reorder: stage O", "stage e is computed at O.i.o");
  kg_schedule_free(s);
  kg_program_free(p);
}

/* Whether the program's C space has cpu/attn. */
static int has_attn(const char *text, const char *sizes) {
  kg_program *p = kg_test_load_sizes(text, sizes);
  CHECKF(p != NULL, "%s does not load", sizes);
  if (!p) return 0;
  kg_space *sp = kg_space_new(p, KG_TARGET_C, NULL);
  int r = kg_space_find_sketch(sp, "cpu/attn") >= 0;
  kg_space_free(sp);
  kg_program_free(p);
  return r;
}

static int has_attn_lib(const char *name) {
  char path[256];
  snprintf(path, sizeof path, "te/lib/%s.te", name);
  kg_test_workload w;
  if (kg_test_workload_load(&w, path)) return 0;
  kg_space *sp = kg_space_new(w.p, KG_TARGET_C, NULL);
  int r = kg_space_find_sketch(sp, "cpu/attn") >= 0;
  kg_space_free(sp);
  kg_test_workload_free(&w);
  return r;
}

/* Random points of cpu/attn: most realize, each realized one verifies (up to nrun of them, and the first whose
 * light reductions are rfactored into vector lanes at the tile); both layouts and the steps of the fused structure
 * occur, and (want_rf: keys long enough for a vector) the rfactored reductions. */
static void check_points(const char *text, const char *sizes, int ndraw, int nrun, int want_rf) {
  kg_test_workload w;
  if (load(&w, text, sizes)) return;
  kg_space *sp = kg_space_new(w.p, KG_TARGET_C, NULL);
  int si = kg_space_find_sketch(sp, "cpu/attn");
  CHECKF(si >= 0, "%s: no cpu/attn", sizes);
  uint64_t rng = 777;
  int realized = 0, ran = 0, shared = 0, storage = 0, rf = 0;
  char err[1024], what[512];
  for (int d = 0; si >= 0 && d < ndraw; d++) {
    kg_point pt;
    kg_space_sample(sp, si, &rng, &pt);
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    if (!s) {
      CHECKF(strstr(err, "spills") != NULL, "%s point %d: %s", sizes, d, err);
      continue;
    }
    realized++;
    char *t = kg_trace_to_text(&s->trace);
    storage |= strstr(t, "reorder_storage") != NULL;
    free(t);
    /* a stage computed at the tile loop whose consumers are other stages there */
    int lanes = 0;
    for (int i = 0; i < s->nstages; i++) {
      const kg_sstage *x = s->stages[i];
      if (x->attach == KG_ATTACH_AT && x->nrax > 0 && !strcmp(x->name, "m")) shared = 1;
      /* the maximum's partial results, vector lanes computed at the same tile loop as the maximum */
      if (!strcmp(x->name, "m.rf") && x->attach == KG_ATTACH_AT && x->nleaves &&
          x->leaves[x->nleaves - 1]->kind == KG_LOOP_VECTORIZED && !x->leaves[x->nleaves - 1]->is_reduce)
        lanes = 1;
    }
    if (lanes && !rf++) {
      snprintf(what, sizeof what, "%s %s cpu/attn point %d (rfactored)", w.p->def->name, sizes, d);
      kg_test_verify_c(&w, s, what);
    } else if (ran < nrun) {
      snprintf(what, sizeof what, "%s %s cpu/attn point %d", w.p->def->name, sizes, d);
      kg_test_verify_c(&w, s, what);
      ran++;
    }
    kg_schedule_free(s);
  }
  CHECKF(realized * 2 >= ndraw, "%s: only %d of %d points realize", sizes, realized, ndraw);
  CHECKF(shared && storage, "%s: shared=%d storage=%d", sizes, shared, storage);
  CHECKF(!want_rf || rf > 0, "%s: no point with the light reductions in vector lanes", sizes);
  kg_space_free(sp);
  kg_test_workload_free(&w);
}

/* The row tiles (knob attn.ti) at sizes: a comma-separated list into out, "" without cpu/attn. */
static void row_tiles(const char *sizes, char *out, size_t outlen) {
  out[0] = 0;
  kg_program *p = kg_test_load_sizes(attention_text, sizes);
  kg_space *sp = p ? kg_space_new(p, KG_TARGET_C, NULL) : NULL;
  int si = sp ? kg_space_find_sketch(sp, "cpu/attn") : -1;
  const kg_sketch *sk = si >= 0 ? &sp->sketches[si] : NULL;
  for (int k = 0; sk && k < sk->nknobs; k++)
    if (!strcmp(sk->knobs[k].name, "attn.ti"))
      for (int v = 0; v < sk->knobs[k].nvalues; v++) {
        size_t n = strlen(out);
        snprintf(out + n, outlen - n, "%s%lld", v ? "," : "", (long long)sk->knobs[k].values[v]);
      }
  if (sp) kg_space_free(sp);
  kg_program_free(p);
}

/* Row tiles up to the rows whole, as long as a tile's score block (rows x keys floats) stays within 1 MiB: the
 * keys' transposed copy is packed once per tile. A 512-row tile's point realizes and verifies. */
static void check_row_tiles(void) {
  char t[256];
  row_tiles("B=2 S=512 T=512 D=8 E=8", t, sizeof t);
  CHECKF(!strcmp(t, "16,32,64,128,256,512"), "row tiles at S=T=512: %s", t);
  row_tiles("B=2 S=512 T=4096 D=8 E=8", t, sizeof t);
  CHECKF(!strcmp(t, "16,32,64"), "row tiles at S=512, T=4096 (a 64-row block is 1 MiB): %s", t);
  row_tiles("B=2 S=100 T=64 D=8 E=8", t, sizeof t);
  CHECKF(!strcmp(t, "100"), "row tiles at S=100 (none divides: the rows whole): %s", t);
  row_tiles("B=1 S=4000 T=8192 D=8 E=8", t, sizeof t);
  CHECKF(!strcmp(t, "16,32"), "row tiles at S=4000, T=8192 (only the smallest fits; 16 and 32 divide): %s", t);
  kg_test_workload w;
  if (load(&w, attention_text, "B=2 S=512 T=40 D=8 E=8")) return;
  kg_space *sp = kg_space_new(w.p, KG_TARGET_C, NULL);
  int si = kg_space_find_sketch(sp, "cpu/attn");
  CHECK(si >= 0);
  if (si >= 0) {
    const kg_sketch *sk = &sp->sketches[si];
    kg_point pt;
    memset(&pt, 0, sizeof pt);
    pt.sketch = si;
    pt.nknobs = sk->nknobs;
    for (int k = 0; k < sk->nknobs; k++) {
      pt.knobs[k] = sk->knobs[k].values[0];
      if (!strcmp(sk->knobs[k].name, "attn.ti")) pt.knobs[k] = sk->knobs[k].values[sk->knobs[k].nvalues - 1];
    }
    char err[1024];
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    CHECKF(s != NULL, "the 512-row point does not realize: %s", err);
    if (s) {
      kg_test_verify_c(&w, s, "attention B=2 S=512 T=40, 512-row tile");
      kg_schedule_free(s);
    }
  }
  kg_space_free(sp);
  kg_test_workload_free(&w);
}

int main(void) {
  attention_text = kg_test_read_file("te/lib/attention.te", NULL);
  CHECK(attention_text != NULL);
  if (!attention_text) TEST_END();
  check_illegal();
  check_fused_schedule("B=2 S=9 T=11 D=7 E=5");
  check_fused_schedule("B=3 S=37 T=70 D=19 E=33");

  CHECK(has_attn_lib("attention"));
  {
    kg_program *p = kg_test_load_sizes(attention_text, "B=2 S=9 T=11 D=7 E=5");
    kg_space_opts o = {.unfused = 1};
    kg_space *sp = p ? kg_space_new_opts(p, KG_TARGET_C, NULL, &o) : NULL;
    CHECK(sp && kg_space_find_sketch(sp, "cpu/attn") < 0);
    if (sp) kg_space_free(sp);
    kg_program_free(p);
  }
  CHECK(has_attn(bmm_softmax, "B=2 M=9 N=13 K=5"));
  const char *others[] = {"matmul", "batch_matmul", "softmax", "layernorm", "mlp_epilogue", "reduce_rows", "conv2d"};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
    CHECKF(!has_attn_lib(others[i]), "%s has cpu/attn", others[i]);

  check_points(attention_text, "B=2 S=9 T=11 D=7 E=5", 24, 4, 0);
  check_points(attention_text, "B=3 S=37 T=70 D=19 E=33", 24, 4, 1);
  check_points(attention_text, "B=1 S=130 T=17 D=16 E=40", 16, 2, 1);
  check_points(bmm_softmax, "B=2 M=21 N=35 K=6", 16, 3, 1);
  check_row_tiles();
  free(attention_text);
  TEST_END();
}
