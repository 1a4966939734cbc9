/* Schedule primitives: each one's legal use (state checked through the API and the dump) and its illegal uses
 * (error names the primitive, the stage and the loop; the schedule is unchanged), trace replay determinism and
 * the random schedule generator. */
#include <stdlib.h>
#include <string.h>
#include "../base/strbuf.h"
#include "../schedule/sched.h"
#include "../schedule/sched_impl.h"
#include "../gen/random.h"
#include "testlib.h"

static const char *matmul_src =
    "def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N]) {\n"
    "  C[i, j] = sum[k](A[i, k] * B[k, j])\n"
    "}\n";
static const char *softmax_src =
    "def softmax(X: f32[N, D]) -> (Y: f32[N, D]) {\n"
    "  m[i] = max[j](X[i, j])\n"
    "  e[i, j] = exp(X[i, j] - m[i])\n"
    "  Y[i, j] = e[i, j] / sum[j2](e[i, j2])\n"
    "}\n";
static const char *conv2d_src =
    "def conv2d(X: f32[N, C, H, W], K: f32[F, C, 3, 3]) -> (Y: f32[N, F, H, W]) {\n"
    "  P[n, c, h, w] : f32[N, C, H + 2, W + 2] = select(h >= 1 && h <= H && w >= 1 && w <= W, X[n, c, h - 1, w - 1], 0.0)\n"
    "  Y[n, f, y, x] = sum[c, r, s](P[n, c, y + r, x + s] * K[f, c, r, s])\n"
    "}\n";

/* CHECK_STR_CONTAINS compares its argument with NULL, which -Werror=address refuses for arrays */
#define HAS(buf, needle) CHECKF(strstr((buf), (needle)) != NULL, "'%s' not found in '%s'", (needle), (buf))

static kg_program *load(const char *src, const kg_binding *b, int nb) {
  kg_diag d;
  memset(&d, 0, sizeof d);
  kg_arena da;
  kg_arena_init(&da);
  kg_program *p = kg_program_load("test.te", src, strlen(src), NULL, b, nb, &d, &da);
  if (!p) fprintf(stderr, "load failed: %s\n", d.msg ? d.msg : "?");
  kg_arena_free(&da);
  return p;
}

static kg_program *load_matmul(void) {
  kg_binding b[] = {{"M", 128}, {"N", 32}, {"K", 48}};
  return load(matmul_src, b, 3);
}
static kg_program *load_softmax(void) {
  kg_binding b[] = {{"N", 8}, {"D", 16}};
  return load(softmax_src, b, 2);
}
static kg_program *load_conv2d(void) {
  kg_binding b[] = {{"N", 1}, {"C", 2}, {"H", 6}, {"W", 5}, {"F", 3}};
  return load(conv2d_src, b, 5);
}

static char *dump(const kg_schedule *s) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_schedule_dump(&b, s);
  kg_strbuf_puts(&b, "");
  return kg_strbuf_take(&b);
}

#define OK(s, text)                                                                                         \
  do {                                                                                                      \
    char e_[512] = "";                                                                                      \
    int rc_ = kg_test_apply_text((s), (text), e_, sizeof e_);                                                       \
    CHECKF(rc_ == 0, "'%s' failed: %s", (text), e_);                                                        \
  } while (0)

/* An illegal step: fails, the message contains every fragment given, the dump and trace are unchanged. */
static void illegal(int line, kg_schedule *s, const char *text, const kg_step *step, const char *f1,
                    const char *f2, const char *f3) {
  char *before = dump(s);
  int ntrace = s->trace.nsteps;
  char err[512] = "";
  int rc = step ? kg_schedule_apply(s, step, err, sizeof err) : kg_test_apply_text(s, text, err, sizeof err);
  CHECKF(rc == -1, "line %d: '%s' was accepted", line, text);
  const char *frags[3] = {f1, f2, f3};
  for (int i = 0; i < 3; i++)
    if (frags[i]) CHECKF(strstr(err, frags[i]) != NULL, "line %d: '%s' not in '%s'", line, frags[i], err);
  char *after = dump(s);
  CHECKF(strcmp(before, after) == 0, "line %d: '%s' changed the schedule:\n%s---\n%s", line, text, before, after);
  CHECK(s->trace.nsteps == ntrace);
  free(before);
  free(after);
}
#define ILLEGAL(s, text, f1, f2, f3) illegal(__LINE__, (s), (text), NULL, (f1), (f2), (f3))
/* for steps the trace reader would refuse (factor 0 ...) */
#define ILLEGAL_STEP(s, step, f1, f2, f3) illegal(__LINE__, (s), #step, &(step), (f1), (f2), (f3))

static int expr_reads(const kg_expr *e, const char *tensor) {
  if (!e) return 0;
  switch (e->kind) {
  case KG_EXPR_READ:
    if (strcmp(e->read.tensor->name, tensor) == 0) return 1;
    for (int i = 0; i < e->read.n; i++)
      if (expr_reads(e->read.idx[i], tensor)) return 1;
    return 0;
  case KG_EXPR_UNARY:
  case KG_EXPR_BINARY:
    return expr_reads(e->op.a, tensor) || expr_reads(e->op.b, tensor);
  case KG_EXPR_CALL:
    for (int i = 0; i < e->call.n; i++)
      if (expr_reads(e->call.args[i], tensor)) return 1;
    return 0;
  default:
    return 0;
  }
}

/* "name(extent ...)" of every leaf, space separated. */
static const char *leaves(const kg_schedule *s, const char *stage) {
  static char buf[1024];
  buf[0] = 0;
  const kg_sstage *st = kg_schedule_find_stage(s, stage);
  if (!st) return "(no stage)";
  for (int l = 0; l < st->nleaves; l++) {
    size_t n = strlen(buf);
    snprintf(buf + n, sizeof buf - n, "%s%s(%lld)", l ? " " : "", st->leaves[l]->name,
             (long long)st->leaves[l]->extent);
  }
  return buf;
}

static void test_default(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  CHECK(s->nstages == 1 && s->n_ivars == p->n_ivars && s->n_tensors == p->ntensors);
  kg_sstage *c = kg_schedule_find_stage(s, "C");
  CHECK(c && c->id == 0 && c->is_output && c->attach == KG_ATTACH_ROOT && c->scope == KG_SCOPE_GLOBAL);
  CHECK(c->nleaves == 3 && c->roots[0] == c->leaves[0] && c->roots[2]->is_reduce && !c->roots[1]->is_reduce);
  CHECK(c->body == p->stages[0]->body && c->out == p->stages[0]->out);
  char *d = dump(s);
  CHECKF(strcmp(d, "stage C  origin=program output  attach=root  scope=global  loops: i(128) j(32) k(48 reduce)\n") ==
             0,
         "%s", d);
  free(d);
  CHECK(kg_schedule_find_stage(s, "D") == NULL);
  CHECK(kg_sstage_find_iter(c, "k") == c->roots[2] && kg_sstage_find_iter(c, "q") == NULL);
  CHECK(kg_sstage_leaf_index(c, c->roots[1]) == 1);
  kg_schedule_free(s);
  kg_program_free(p);
}

static void test_loop_primitives(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  kg_sstage *c = kg_schedule_find_stage(s, "C");

  ILLEGAL(s, "split C q 4", "split", "stage C", "no loop named q");
  ILLEGAL(s, "split Z i 4", "split", "stage Z", NULL);
  kg_step split0 = {.kind = KG_STEP_SPLIT, .stage = "C", .names = {"i"}, .nnames = 1, .ints = {0}, .nints = 1};
  ILLEGAL_STEP(s, split0, "split: stage C: loop i: factor 0 must be at least 1", NULL, NULL);
  OK(s, "split C j 5");
  CHECKF(strcmp(leaves(s, "C"), "i(128) j.o(7) j.i(5) k(48)") == 0, "%s", leaves(s, "C"));
  kg_iter *j = kg_sstage_find_iter(c, "j"), *jo = kg_sstage_find_iter(c, "j.o");
  CHECK(j && jo && j->split_outer == jo && jo->split_parent == j && jo->factor == 5 &&
        jo->origin == KG_ITER_SPLIT_OUTER && kg_sstage_leaf_index(c, j) == -1);
  ILLEGAL(s, "split C j 2", "split", "stage C", "loop j is not a leaf");
  ILLEGAL(s, "vectorize C j", "vectorize", "stage C", "loop j is not a leaf");
  ILLEGAL(s, "vectorize C k", "vectorize", "stage C", "loop k is a reduction loop");
  ILLEGAL(s, "parallel C k", "parallel", "stage C", "loop k is a reduction loop");
  OK(s, "tile C i k 16 8");
  CHECKF(strcmp(leaves(s, "C"), "i.o(8) k.o(6) j.o(7) j.i(5) i.i(16) k.i(8)") == 0, "%s", leaves(s, "C"));
  ILLEGAL(s, "tile C j.o j.o 2 2", "tile", "stage C", "loop j.o is named twice");
  kg_step tile0 = {.kind = KG_STEP_TILE, .stage = "C", .names = {"j.o", "j.i"}, .nnames = 2, .ints = {2, 0}, .nints = 2};
  ILLEGAL_STEP(s, tile0, "tile", "stage C", "loop j.i: factor 0 must be at least 1");
  ILLEGAL(s, "reorder C i.i i.i", "reorder", "stage C", "loop i.i is named twice");
  ILLEGAL(s, "reorder C i.i i", "reorder", "stage C", "loop i is not a leaf");
  OK(s, "reorder C k.i j.o i.o");
  /* j.o (slot 2), i.o (slot 0), k.i (slot 5) take slots 0, 2, 5 in the given order */
  CHECKF(strcmp(leaves(s, "C"), "k.i(8) k.o(6) j.o(7) j.i(5) i.i(16) i.o(8)") == 0, "%s", leaves(s, "C"));
  ILLEGAL(s, "fuse C j.o i.i", "fuse", "stage C", "loop j.o is not immediately outside loop i.i");
  ILLEGAL(s, "fuse C k.o j.o", "fuse", "stage C", "loop k.o is a reduction loop");
  OK(s, "fuse C j.o j.i");
  CHECKF(strcmp(leaves(s, "C"), "k.i(8) k.o(6) j.o*j.i(35) i.i(16) i.o(8)") == 0, "%s", leaves(s, "C"));
  kg_iter *f = kg_sstage_find_iter(c, "j.o*j.i");
  CHECK(f && f->origin == KG_ITER_FUSED && f->fuse_outer == jo && jo->fused_into == f);
  OK(s, "fuse C k.i k.o");
  CHECKF(strcmp(leaves(s, "C"), "k.i*k.o(48) j.o*j.i(35) i.i(16) i.o(8)") == 0, "%s", leaves(s, "C"));
  OK(s, "vectorize C i.i");
  OK(s, "unroll C k.i*k.o");
  OK(s, "parallel C j.o*j.i");
  ILLEGAL(s, "split C i.i 4", "split", "stage C", "loop i.i is already vectorized");
  ILLEGAL(s, "unroll C i.i", "unroll", "stage C", "loop i.i is already vectorized");
  ILLEGAL(s, "fuse C i.i i.o", "fuse", "stage C", "loop i.i is already vectorized");
  char *d = dump(s);
  CHECK_STR_CONTAINS(d, "loops: k.i*k.o(48 reduce unrolled) j.o*j.i(35 parallel) i.i(16 vectorized) i.o(8)");
  free(d);
  char *t = kg_trace_to_text(&s->trace);
  CHECKF(strcmp(t, "split C j 5\ntile C i k 16 8\nreorder C k.i j.o i.o\nfuse C j.o j.i\nfuse C k.i k.o\n"
                   "vectorize C i.i\nunroll C k.i*k.o\nparallel C j.o*j.i\n") == 0,
         "%s", t);
  free(t);
  kg_schedule_free(s);

  /* bind */
  s = kg_schedule_new(p);
  OK(s, "split C i 32\nbind C i.o blockIdx.x\nbind C i.i threadIdx.x");
  ILLEGAL(s, "bind C j blockIdx.x", "bind", "stage C", "blockIdx.x is already bound to loop i.o");
  ILLEGAL(s, "bind C k blockIdx.y", "bind", "stage C", "loop k is a reduction loop");
  ILLEGAL(s, "bind C k vthread", "bind", "stage C", "loop k is a reduction loop");
  ILLEGAL(s, "bind C i.o blockIdx.y", "bind", "stage C", "loop i.o is already bound");
  {
    kg_step st = {.kind = KG_STEP_BIND, .stage = "C", .names = {"j", "warp"}, .nnames = 2};
    char err[256];
    CHECK(kg_schedule_apply(s, &st, err, sizeof err) == -1);
    HAS(err, "bind: stage C: loop j: unknown thread tag 'warp'");
    kg_step bad = {.kind = KG_STEP_SPLIT, .stage = "C", .names = {"j"}, .nnames = 1};
    CHECK(kg_schedule_apply(s, &bad, err, sizeof err) == -1);
    HAS(err, "split: stage C: wrong number of arguments");
  }
  d = dump(s);
  CHECK_STR_CONTAINS(d, "i.o(4 blockIdx.x) i.i(32 threadIdx.x) j(32) k(48 reduce)");
  free(d);
  kg_schedule_free(s);
  kg_program_free(p);
}

/* The stage of softmax that the nested sum became (its name is the front end's choice). */
static const char *softmax_sum_stage(const kg_schedule *s) {
  for (int i = 0; i < s->nstages; i++) {
    const char *n = s->stages[i]->name;
    if (strcmp(n, "m") && strcmp(n, "e") && strcmp(n, "Y")) return n;
  }
  return NULL;
}

static void test_placement(void) {
  kg_program *p = load_softmax();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  CHECK(s->nstages == 4);
  const char *sum = softmax_sum_stage(s);
  CHECK(sum != NULL);
  if (!sum) return;
  kg_sstage *m = kg_schedule_find_stage(s, "m"), *e = kg_schedule_find_stage(s, "e");
  kg_sstage *y = kg_schedule_find_stage(s, "Y");
  char buf[256];

  ILLEGAL(s, "compute_at m Y i", "compute_at", "stage m", "stage Y does not read it (loop i)");
  ILLEGAL(s, "compute_at Y e i", "compute_at", "stage Y", "output");
  ILLEGAL(s, "compute_at m m i", "compute_at", "stage m", "own loop i");
  ILLEGAL(s, "compute_at m e q", "compute_at", "stage e", "no loop named q");
  snprintf(buf, sizeof buf, "also read by stage %s", sum);
  ILLEGAL(s, "compute_at e Y i", "compute_at", "stage e", "loop i");
  ILLEGAL(s, "compute_at e Y j", "compute_at", "stage e", buf);
  ILLEGAL(s, "compute_inline m", "compute_inline", "stage m", "is a reduction (loop j)");
  ILLEGAL(s, "compute_inline Y", "compute_inline", "stage Y", "is an output");
  ILLEGAL(s, "compute_root m", "compute_root", "stage m", "already computed at root");

  OK(s, "compute_at m e i");
  CHECK(m->attach == KG_ATTACH_AT && m->attach_stage == e && m->attach_iter == kg_sstage_find_iter(e, "i"));
  ILLEGAL(s, "compute_at e m j", "compute_at", "stage e", "loop j would make a cycle");
  ILLEGAL(s, "compute_inline e", "compute_inline", "stage e", "stage m is computed at its loop i");
  /* splitting the loop a stage is computed at moves it to the inner loop */
  OK(s, "split e i 4");
  CHECK(m->attach_iter == kg_sstage_find_iter(e, "i.i"));
  OK(s, "split e j 4");
  CHECKF(strcmp(leaves(s, "e"), "i.o(2) i.i(4) j.o(4) j.i(4)") == 0, "%s", leaves(s, "e"));
  ILLEGAL(s, "fuse e i.o j.o", "fuse", "stage e", "loop i.o is not immediately outside loop j.o");
  ILLEGAL(s, "fuse e i.i j.o", "fuse", "stage e", "loop i.i: stage m is computed at it");
  OK(s, "reorder e j.o i.i");
  CHECKF(strcmp(leaves(s, "e"), "i.o(2) j.o(4) i.i(4) j.i(4)") == 0, "%s", leaves(s, "e"));
  /* m is computed at the inner loop of the pair: it follows into the fused loop */
  OK(s, "fuse e j.o i.i");
  CHECK(m->attach_iter == kg_sstage_find_iter(e, "j.o*i.i"));
  char *d = dump(s);
  CHECK_STR_CONTAINS(d, "stage m  origin=program  attach=at e.j.o*i.i  scope=global");
  free(d);
  OK(s, "compute_root m");
  CHECK(m->attach == KG_ATTACH_ROOT && m->attach_stage == NULL);
  OK(s, "compute_inline e");
  CHECK(e->attach == KG_ATTACH_INLINE);
  ILLEGAL(s, "compute_inline e", "compute_inline", "stage e", "already inlined");
  ILLEGAL(s, "compute_at m e i.o", "compute_at", "stage m", "stage e is inlined");
  /* m is now read, through the inlined e, by Y and the sum stage */
  snprintf(buf, sizeof buf, "compute_at m %s i", sum);
  ILLEGAL(s, buf, "compute_at", "stage m", "also read by stage Y");
  OK(s, "compute_root e");
  CHECK(e->attach == KG_ATTACH_ROOT);
  OK(s, "compute_at m e i.o");
  ILLEGAL(s, "compute_inline e", "compute_inline", "stage e", "stage m is computed at its loop i.o");
  kg_schedule_free(s);

  /* a stage read by several: computed at a loop of one of them when every other is computed inside it at that
   * loop or deeper (the row maximum at the output's row loop, where the row sum is computed too) */
  s = kg_schedule_new(p);
  m = kg_schedule_find_stage(s, "m");
  y = kg_schedule_find_stage(s, "Y");
  OK(s, "compute_inline e");
  snprintf(buf, sizeof buf, "also read by stage %s, which is not computed inside Y at loop i", sum);
  ILLEGAL(s, "compute_at m Y i", "compute_at", "stage m", buf);
  snprintf(buf, sizeof buf, "compute_at %s Y j", sum);
  OK(s, buf);
  OK(s, "compute_at m Y i");
  CHECK(m->attach == KG_ATTACH_AT && m->attach_stage == y && m->attach_iter == kg_sstage_find_iter(y, "i"));
  /* the sum at j, inside i: a reorder that takes it outside m's loop is refused and changes nothing */
  ILLEGAL(s, "reorder Y j i", "reorder", "stage Y", "stage m is computed at Y.i");
  CHECKF(strcmp(leaves(s, "Y"), "i(8) j(16)") == 0, "%s", leaves(s, "Y"));
  snprintf(buf, sizeof buf, "compute_root %s", sum);
  ILLEGAL(s, buf, "compute_root", sum, "stage m is computed at Y.i");
  /* m at the sum's own loop: Y, which reads m too, is not inside the sum */
  OK(s, "compute_root m");
  snprintf(buf, sizeof buf, "compute_at m %s i", sum);
  ILLEGAL(s, buf, "compute_at", "stage m", "also read by stage Y");
  /* m at Y.j with the sum at Y.j: the sum comes after m in the stages' order, so it reads m's region */
  OK(s, "compute_at m Y j");
  kg_schedule_free(s);

  /* a cache stage read by one stage can be inlined, brought back, and computed at its reader */
  s = kg_schedule_new(p);
  snprintf(buf, sizeof buf, "cache_read e local %s", sum);
  OK(s, buf);
  OK(s, "compute_inline e.local");
  snprintf(buf, sizeof buf, "compute_root e.local\ncompute_at e.local %s i", sum);
  OK(s, buf);
  CHECK(kg_schedule_find_stage(s, "e.local")->attach_stage == kg_schedule_find_stage(s, sum));
  (void)y;
  kg_schedule_free(s);
  kg_program_free(p);

  /* conv2d: the padding stage inlined into the convolution, or computed at one of its loops */
  p = load_conv2d();
  if (!p) return;
  s = kg_schedule_new(p);
  CHECKF(strcmp(leaves(s, "Y"), "n(1) f(3) y(6) x(5) c(2) r(3) s(3)") == 0, "%s", leaves(s, "Y"));
  CHECKF(strcmp(leaves(s, "P"), "n(1) c(2) h(8) w(7)") == 0, "%s", leaves(s, "P"));
  OK(s, "compute_at P Y y");
  OK(s, "compute_inline P");
  CHECK(kg_schedule_find_stage(s, "P")->attach == KG_ATTACH_INLINE);
  kg_schedule_free(s);
  /* X.local, read by Y only through the inlined P, is computed at Y; bringing P back would make P its consumer */
  s = kg_schedule_new(p);
  OK(s, "cache_read X local P\ncompute_inline P\ncompute_at X.local Y y");
  ILLEGAL(s, "compute_root P", "compute_root", "stage P", "stage X.local is computed at Y.y");
  ILLEGAL(s, "compute_at P Y x", "compute_at", "stage P", "stage X.local is computed at Y.y");
  OK(s, "compute_root X.local\ncompute_root P\ncompute_at X.local P w\ncompute_at P Y x");
  /* its consumer P is computed inside Y at x, so X.local can be computed at Y's outer loop y (a row of the
   * padded input's tiles); a reorder that takes x outside y is refused */
  OK(s, "compute_at X.local Y y");
  ILLEGAL(s, "reorder Y x y", "reorder", "stage Y", "stage X.local is computed at Y.y");
  ILLEGAL(s, "compute_at X.local Y s", "compute_at", "stage X.local", "stage Y does not read it (loop s)");
  kg_schedule_free(s);
  kg_program_free(p);
}

static void test_cache(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  int nv = s->n_ivars, nt = s->n_tensors;
  OK(s, "cache_read A local C");
  CHECK(s->nstages == 2 && s->n_ivars == nv + 2 && s->n_tensors == nt + 1);
  kg_sstage *al = kg_schedule_find_stage(s, "A.local"), *c = kg_schedule_find_stage(s, "C");
  CHECK(al && al->id == 0 && c->id == 1 && s->stages[0] == al);
  CHECK(al && al->origin == KG_ORIGIN_CACHE_READ && al->scope == KG_SCOPE_LOCAL && al->red == KG_RED_NONE &&
        al->nax == 2 && strcmp(al->ax[0]->name, "ax0") == 0 && al->ax[1]->id == nv + 1 && al->out->id == nt);
  CHECK(al && al->out->shape[0] == 128 && al->out->shape[1] == 48 && expr_reads(al->body, "A"));
  CHECK(expr_reads(c->body, "A.local") && !expr_reads(c->body, "A") && expr_reads(c->body, "B"));
  /* the program's own body is untouched */
  CHECK(expr_reads(p->stages[0]->body, "A") && !expr_reads(p->stages[0]->body, "A.local"));
  CHECKF(strcmp(leaves(s, "A.local"), "ax0(128) ax1(48)") == 0, "%s", leaves(s, "A.local"));
  ILLEGAL(s, "cache_read A shared C", "cache_read", "stage C", "does not read tensor A");
  ILLEGAL(s, "cache_read B global C", "cache_read", "scope must be shared or local", NULL);
  ILLEGAL(s, "cache_read Q local C", "cache_read", "no tensor named Q", NULL);
  ILLEGAL(s, "cache_read B local Z", "cache_read", "stage Z", NULL);
  OK(s, "cache_read B shared C");
  CHECK(s->nstages == 3 && kg_schedule_find_stage(s, "B.shared")->id == 1);
  OK(s, "split C k 8\ncompute_at A.local C k.o\ncompute_at B.shared C k.o");
  char *d = dump(s);
  CHECK_STR_CONTAINS(d, "stage A.local  origin=cache_read  attach=at C.k.o  scope=local  loops: ax0(128) ax1(48)");
  free(d);
  ILLEGAL(s, "cache_read A.local local C", "cache_read", "compute_root it first", NULL);
  ILLEGAL(s, "cache_write C local", "cache_write", "stage C", "already transformed");
  ILLEGAL(s, "rfactor C k 4", "rfactor", "stage C", NULL);
  kg_schedule_free(s);

  /* cache_write */
  s = kg_schedule_new(p);
  nv = s->n_ivars;
  OK(s, "cache_write C local");
  CHECK(s->nstages == 2);
  kg_sstage *cl = kg_schedule_find_stage(s, "C.local");
  c = kg_schedule_find_stage(s, "C");
  CHECK(cl && cl->id == 0 && c->id == 1 && cl->origin == KG_ORIGIN_CACHE_WRITE && cl->red == KG_RED_SUM &&
        cl->scope == KG_SCOPE_LOCAL && !cl->is_output && cl->body == p->stages[0]->body && cl->nrax == 1);
  CHECK(c->is_output && c->red == KG_RED_NONE && c->nrax == 0 && c->nax == 2 && c->out == p->outputs[0] &&
        strcmp(c->ax[0]->name, "i") == 0 && c->ax[0] != p->stages[0]->ax[0] && s->n_ivars == nv + 2);
  CHECK(expr_reads(c->body, "C.local") && c->out != cl->out);
  CHECKF(strcmp(leaves(s, "C.local"), "i(128) j(32) k(48)") == 0, "%s", leaves(s, "C.local"));
  CHECKF(strcmp(leaves(s, "C"), "i(128) j(32)") == 0, "%s", leaves(s, "C"));
  OK(s, "split C i 16\ncompute_at C.local C i.o");
  ILLEGAL(s, "cache_write C local", "cache_write", "stage C", NULL);
  OK(s, "cache_write C.local shared");
  CHECK(kg_schedule_find_stage(s, "C.local.shared") != NULL && s->nstages == 3);
  kg_schedule_free(s);

  /* rfactor */
  s = kg_schedule_new(p);
  ILLEGAL(s, "rfactor C i 4", "rfactor", "stage C", "loop i is not a reduction axis");
  ILLEGAL(s, "rfactor C k 1", "rfactor", "stage C", "loop k: factor 1");
  ILLEGAL(s, "rfactor C q 4", "rfactor", "stage C", "no loop named q");
  OK(s, "rfactor C k 8");
  kg_sstage *rf = kg_schedule_find_stage(s, "C.rf");
  c = kg_schedule_find_stage(s, "C");
  CHECK(rf && rf->id == 0 && rf->origin == KG_ORIGIN_RFACTOR && rf->red == KG_RED_SUM && rf->out->ndim == 3 &&
        rf->out->shape[2] == 8 && rf->nax == 3 && rf->nrax == 1);
  CHECKF(strcmp(leaves(s, "C.rf"), "i(128) j(32) k.i(8) k.o(6)") == 0, "%s", leaves(s, "C.rf"));
  CHECKF(strcmp(leaves(s, "C"), "i(128) j(32) k.i(8)") == 0, "%s", leaves(s, "C"));
  CHECK(c->red == KG_RED_SUM && expr_reads(c->body, "C.rf") && c->nrax == 1 && c->rax[0]->is_reduce);
  CHECK(rf && expr_reads(rf->body, "A") && rf->body->kind != KG_EXPR_CALL); /* 8 divides 48: no guard */
  /* partial sums are spatial in C.rf: they can be bound or vectorized there */
  OK(s, "vectorize C.rf k.i\nbind C.rf i blockIdx.x");
  ILLEGAL(s, "bind C k.i blockIdx.y", "bind", "stage C", "loop k.i is a reduction loop");
  OK(s, "bind C k.i threadIdx.x"); /* a cross-thread reduction over the partial sums */
  kg_schedule_free(s);

  s = kg_schedule_new(p);
  OK(s, "rfactor C k 5");
  rf = kg_schedule_find_stage(s, "C.rf");
  CHECK(rf && rf->body->kind == KG_EXPR_CALL && rf->body->call.fn == KG_FN_SELECT && rf->body->ty == KG_TY_F32 &&
        rf->body->call.args[0]->ty == KG_TY_BOOL && rf->body->call.args[2]->kind == KG_EXPR_NUM &&
        rf->body->call.args[2]->num.f == 0.0);
  CHECKF(strcmp(leaves(s, "C.rf"), "i(128) j(32) k.i(5) k.o(10)") == 0, "%s", leaves(s, "C.rf"));
  kg_schedule_free(s);
  kg_program_free(p);

  /* cache names stay unique */
  p = load_softmax();
  if (!p) return;
  s = kg_schedule_new(p);
  const char *sum = softmax_sum_stage(s);
  char buf[128];
  OK(s, "cache_read e local Y");
  snprintf(buf, sizeof buf, "cache_read e local %s", sum);
  OK(s, buf);
  CHECK(kg_schedule_find_stage(s, "e.local") && kg_schedule_find_stage(s, "e.local.2"));
  ILLEGAL(s, "rfactor e j 2", "rfactor", "stage e", "not a reduction");
  OK(s, "rfactor m j 4");
  rf = kg_schedule_find_stage(s, "m.rf");
  CHECK(rf && rf->red == KG_RED_MAX && rf->out->ndim == 2 && rf->body->kind != KG_EXPR_CALL);
  kg_schedule_free(s);
  s = kg_schedule_new(p);
  OK(s, "rfactor m j 3");
  rf = kg_schedule_find_stage(s, "m.rf");
  CHECK(rf && rf->body->kind == KG_EXPR_CALL && rf->body->call.args[2]->num.f < -1e300); /* -inf identity */
  kg_schedule_free(s);
  kg_program_free(p);
}

static const kg_expr *find_read(const kg_expr *e, const char *tensor) {
  if (!e) return NULL;
  if (e->kind == KG_EXPR_READ && strcmp(e->read.tensor->name, tensor) == 0) return e;
  const kg_expr *r = NULL;
  if (e->kind == KG_EXPR_UNARY || e->kind == KG_EXPR_BINARY) {
    r = find_read(e->op.a, tensor);
    if (!r) r = find_read(e->op.b, tensor);
  } else if (e->kind == KG_EXPR_CALL) {
    for (int i = 0; i < e->call.n && !r; i++) r = find_read(e->call.args[i], tensor);
  }
  return r;
}

/* split_storage: a cache stage's axis stored as outer and innermost dimensions; its axes follow and every read
 * becomes [e / F] ... [e % F]; with reorder_storage, a blocked layout. Refused: outputs, factors that do not
 * divide or are below 2, unknown axes, transformed or attached stages. */
static void test_split_storage(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  OK(s, "cache_read B local C");
  ILLEGAL(s, "split_storage C j 16", "split_storage", "stage C", "writes a program output");
  ILLEGAL(s, "split_storage B.local ax1 5", "split_storage", "loop ax1", "factor 5 does not divide the extent 32");
  ILLEGAL(s, "split_storage B.local ax1 1", "split_storage", "loop ax1", "must be at least 2");
  ILLEGAL(s, "split_storage B.local k 16", "split_storage", "loop k", "not a spatial axis");
  OK(s, "split_storage B.local ax1 16");
  kg_sstage *bl = kg_schedule_find_stage(s, "B.local");
  CHECK(bl && bl->out->ndim == 3 && bl->out->shape[0] == 48 && bl->out->shape[1] == 2 && bl->out->shape[2] == 16);
  CHECKF(strcmp(leaves(s, "B.local"), "ax0(48) ax1.o(2) ax1.i(16)") == 0, "%s", leaves(s, "B.local"));
  kg_sstage *c = kg_schedule_find_stage(s, "C");
  const kg_expr *r = c ? find_read(c->body, "B.local") : NULL;
  CHECK(r && r->read.n == 3 && r->read.idx[1]->kind == KG_EXPR_BINARY && r->read.idx[1]->op.op == KG_OP_DIV &&
        r->read.idx[2]->kind == KG_EXPR_BINARY && r->read.idx[2]->op.op == KG_OP_MOD &&
        r->read.idx[2]->op.b->kind == KG_EXPR_NUM && r->read.idx[2]->op.b->num.i == 16);
  OK(s, "reorder_storage B.local ax1.o ax0 ax1.i");
  CHECKF(strcmp(leaves(s, "B.local"), "ax1.o(2) ax0(48) ax1.i(16)") == 0, "%s", leaves(s, "B.local"));
  OK(s, "split B.local ax0 8");
  ILLEGAL(s, "split_storage B.local ax0 4", "split_storage", "stage B.local", "already transformed");
  kg_schedule_free(s);
  kg_program_free(p);
  /* a program temporary (the padded input) in blocks of channels (NCHW2c): the schedule's own copy, the program's
   * keeps its declared shape */
  p = load_conv2d();
  if (!p) return;
  s = kg_schedule_new(p);
  const kg_tensor *pt = kg_schedule_find_stage(s, "P")->out;
  OK(s, "split_storage P c 2\nreorder_storage P n c.o h w c.i");
  CHECKF(strcmp(leaves(s, "P"), "n(1) c.o(1) h(8) w(7) c.i(2)") == 0, "%s", leaves(s, "P"));
  CHECK(pt->ndim == 4 && kg_schedule_find_stage(s, "P")->out->ndim == 5);
  CHECK(!kg_sched_expr_reads(kg_schedule_find_stage(s, "Y")->body, pt));
  kg_schedule_free(s);
  kg_program_free(p);
}

/* reorder_storage: a cache stage's tensor takes the dimension order given, its axes follow, and every read of it
 * is rewritten; anything but an untransformed cache stage at root is refused. */
static void test_reorder_storage(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  OK(s, "cache_read B local C\ncache_write C local");
  ILLEGAL(s, "reorder_storage C i j", "reorder_storage", "stage C", "writes a program output");
  ILLEGAL(s, "reorder_storage B.local ax1", "reorder_storage", "stage B.local", "1 axes given, the stage has 2");
  ILLEGAL(s, "reorder_storage B.local ax1 ax1", "reorder_storage", "loop ax1", "named twice");
  ILLEGAL(s, "reorder_storage B.local ax1 k", "reorder_storage", "loop k", "not a spatial axis");
  ILLEGAL(s, "reorder_storage C.local j k", "reorder_storage", "loop k", "not a spatial axis");
  OK(s, "reorder_storage B.local ax1 ax0\nreorder_storage C.local j i");
  kg_sstage *bl = kg_schedule_find_stage(s, "B.local"), *cl = kg_schedule_find_stage(s, "C.local");
  CHECK(bl && bl->out->shape[0] == 32 && bl->out->shape[1] == 48 && strcmp(bl->ax[0]->name, "ax1") == 0);
  CHECKF(strcmp(leaves(s, "B.local"), "ax1(32) ax0(48)") == 0, "%s", leaves(s, "B.local"));
  CHECKF(strcmp(leaves(s, "C.local"), "j(32) i(128) k(48)") == 0, "%s", leaves(s, "C.local"));
  CHECK(cl && cl->out->shape[0] == 32 && cl->out->shape[1] == 128);
  /* the readers' indices are permuted: C.local reads B.local[j, k], C reads C.local[j, i] */
  const kg_expr *r = NULL;
  for (const kg_expr *e = cl->body; e;) {
    if (e->kind == KG_EXPR_READ) {
      if (strcmp(e->read.tensor->name, "B.local") == 0) r = e;
      break;
    }
    if (e->kind == KG_EXPR_BINARY) e = expr_reads(e->op.a, "B.local") ? e->op.a : e->op.b;
    else break;
  }
  CHECK(r && r->read.n == 2 && r->read.idx[0]->kind == KG_EXPR_IVAR && strcmp(r->read.idx[0]->var.name, "j") == 0 &&
        r->read.idx[1]->kind == KG_EXPR_IVAR && strcmp(r->read.idx[1]->var.name, "k") == 0);
  kg_sstage *c = kg_schedule_find_stage(s, "C");
  CHECK(c && c->body->kind == KG_EXPR_READ && c->body->read.idx[0]->var.iv == c->ax[1] &&
        c->body->read.idx[1]->var.iv == c->ax[0]);
  OK(s, "split B.local ax1 16");
  ILLEGAL(s, "reorder_storage B.local ax0 ax1", "reorder_storage", "stage B.local", "already transformed");
  OK(s, "split C i 16\ncompute_at C.local C i.o");
  ILLEGAL(s, "reorder_storage C.local i j", "reorder_storage", "stage C.local", "must be at root");
  kg_schedule_free(s);
  /* a program temporary (the padded input): the schedule permutes its own copy of the tensor, the program's keeps
   * its declared layout for every other schedule */
  kg_program_free(p);
  p = load_conv2d();
  if (!p) return;
  s = kg_schedule_new(p);
  kg_sstage *ps = kg_schedule_find_stage(s, "P");
  const kg_tensor *declared = ps ? ps->out : NULL;
  int64_t dshape[KG_MAX_DIMS] = {0};
  for (int d = 0; declared && d < declared->ndim; d++) dshape[d] = declared->shape[d];
  OK(s, "reorder_storage P n h w c");
  CHECK(ps && declared && ps->out != declared && ps->out->shape[1] == dshape[2] && ps->out->shape[3] == dshape[1]);
  CHECK(declared && declared->shape[1] == dshape[1] && declared->shape[3] == dshape[3]);
  CHECKF(strcmp(leaves(s, "P"), "n(1) h(8) w(7) c(2)") == 0, "%s", leaves(s, "P"));
  kg_sstage *y = kg_schedule_find_stage(s, "Y");
  CHECK(y && expr_reads(y->body, "P") && !kg_sched_expr_reads(y->body, declared));
  kg_schedule_free(s);
  s = kg_schedule_new(p);
  OK(s, "cache_read P local Y\nreorder_storage P.local ax0 ax2 ax3 ax1");
  CHECKF(strcmp(leaves(s, "P.local"), "ax0(1) ax2(8) ax3(7) ax1(2)") == 0, "%s", leaves(s, "P.local"));
  kg_schedule_free(s);
  kg_program_free(p);
}

/* pad: shared rows only, two or more dimensions, 1..32 floats, once; the storage changes, the loops do not. */
static void test_pad(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  OK(s, "cache_read A shared C\ncache_read B local C");
  ILLEGAL(s, "pad C 4", "pad", "stage C", "not in shared memory (scope global)");
  ILLEGAL(s, "pad B.local 4", "pad", "stage B.local", "not in shared memory (scope local)");
  ILLEGAL(s, "pad A.shared 0", "pad", "factor '0'", "not a positive integer");
  ILLEGAL(s, "pad A.shared 33", "pad", "stage A.shared", "33 floats, want 1 to 32");
  const char *before = leaves(s, "A.shared");
  char *was = before ? strdup(before) : NULL;
  OK(s, "pad A.shared 4");
  kg_sstage *a = kg_schedule_find_stage(s, "A.shared");
  CHECK(a && a->pad == 4);
  CHECK(was && !strcmp(was, leaves(s, "A.shared")));
  ILLEGAL(s, "pad A.shared 1", "pad", "stage A.shared", "already padded (4 floats)");
  /* a later step still applies; the dump says it */
  OK(s, "split A.shared ax1 4");
  char *d = dump(s);
  CHECK_STR_CONTAINS(d, "scope=shared  pad=4  loops:");
  free(d);
  free(was);
  kg_schedule_free(s);
  kg_program_free(p);
  /* a one-dimensional stage has no rows */
  static const char vsrc[] = "def v(A: f32[N]) -> (B: f32[N]) {\n  B[i] = A[i] * 2.0\n}\n";
  kg_binding b = {"N", 64};
  p = load(vsrc, &b, 1);
  if (!p) return;
  s = kg_schedule_new(p);
  OK(s, "cache_read A shared B");
  ILLEGAL(s, "pad A.shared 4", "pad", "stage A.shared", "one dimension, no rows to pad");
  kg_schedule_free(s);
  kg_program_free(p);
}

/* launch_bounds: a root stage, 1..32 blocks, once; a hint, so the loops do not change. */
static void test_launch_bounds(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  OK(s, "cache_read A shared C\nsplit C i 16\ncompute_at A.shared C i.o");
  ILLEGAL(s, "launch_bounds A.shared 2", "launch_bounds", "stage A.shared", "not computed at root");
  ILLEGAL(s, "launch_bounds C 33", "launch_bounds", "stage C", "33 blocks, want 1 to 32");
  ILLEGAL(s, "launch_bounds C 0", "launch_bounds", "factor '0'", "not a positive integer");
  OK(s, "launch_bounds C 2");
  kg_sstage *c = kg_schedule_find_stage(s, "C");
  CHECK(c && c->min_blocks == 2);
  ILLEGAL(s, "launch_bounds C 3", "launch_bounds", "stage C", "already bounded (2 blocks)");
  char *d = dump(s);
  CHECK_STR_CONTAINS(d, "launch_bounds=2");
  free(d);
  kg_schedule_free(s);
  kg_program_free(p);
}

/* pipeline: a serial leaf with a shared stage computed at it, 2..4 stages, once; the loop is then never split,
 * fused or annotated (its ring is planned on it). */
static void test_pipeline(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  OK(s, "split C k 8\ncache_read B local C\ncompute_at B.local C k.o");
  ILLEGAL(s, "pipeline C k.o 2", "pipeline", "stage C: loop k.o", "no shared-memory stage is computed at it");
  OK(s, "cache_read A shared C\ncompute_at A.shared C k.o\nunroll C k.i");
  ILLEGAL(s, "pipeline C k 2", "pipeline", "stage C", "loop k is not a leaf loop");
  ILLEGAL(s, "pipeline C k.i 2", "pipeline", "stage C", "loop k.i is unrolled");
  ILLEGAL(s, "pipeline C k.o 1", "pipeline", "stage C", "loop k.o: 1 stages, want 2 to 4");
  ILLEGAL(s, "pipeline C k.o 5", "pipeline", "stage C", "loop k.o: 5 stages, want 2 to 4");
  ILLEGAL(s, "pipeline C nope 2", "pipeline", "stage C", "no loop named nope");
  OK(s, "pipeline C k.o 3");
  kg_sstage *c = kg_schedule_find_stage(s, "C");
  kg_iter *ko = c ? kg_sstage_find_iter(c, "k.o") : NULL;
  CHECK(ko && ko->pipeline == 3);
  ILLEGAL(s, "pipeline C k.o 2", "pipeline", "stage C", "loop k.o is already pipelined (3 stages)");
  ILLEGAL(s, "split C k.o 2", "split", "stage C", "loop k.o is pipelined");
  ILLEGAL(s, "unroll C k.o", "unroll", "stage C", "loop k.o is pipelined");
  ILLEGAL(s, "bind C k.o threadIdx.x", "bind", "stage C", "loop k.o is pipelined");
  char *d = dump(s);
  CHECK_STR_CONTAINS(d, "k.o(");
  CHECK_STR_CONTAINS(d, "pipeline=3)");
  free(d);
  kg_schedule_free(s);
  kg_program_free(p);
}

static void test_trace_replay(void) {
  kg_program *p = load_conv2d();
  if (!p) return;
  const char *text = "tile Y y x 2 4\ncompute_at P Y x.o\nrfactor Y c 2\n";
  kg_schedule *a = kg_schedule_new(p), *b = kg_schedule_new(p);
  char err[512];
  /* rfactor after tile is refused: the trace stops at step 3 */
  CHECK(kg_test_apply_text(a, text, err, sizeof err) == -1);
  HAS(err, "line 3: rfactor: stage Y");
  CHECK(a->trace.nsteps == 2);
  const char *good = "cache_read K local Y\nsplit Y f 2\ncompute_at K.local Y f.i\ntile Y y x 2 4\n"
                     "compute_at P Y x.o\nunroll Y s\nvectorize Y x.i\n";
  kg_schedule_free(a);
  a = kg_schedule_new(p);
  CHECK(kg_test_apply_text(a, good, err, sizeof err) == 0);
  CHECK(kg_test_apply_text(b, good, err, sizeof err) == 0);
  char *da = dump(a), *db = dump(b), *ta = kg_trace_to_text(&a->trace);
  CHECK(strcmp(da, db) == 0);
  CHECK(strcmp(ta, good) == 0);
  free(da);
  free(db);
  free(ta);
  kg_schedule_free(a);
  kg_schedule_free(b);
  kg_program_free(p);
}

static void test_random(void) {
  kg_program *progs[3] = {load_matmul(), load_softmax(), load_conv2d()};
  int seen[2][KG_STEP_COUNT];
  memset(seen, 0, sizeof seen);
  for (int pi = 0; pi < 3; pi++) {
    kg_program *p = progs[pi];
    if (!p) continue;
    int distinct = 0;
    char *prev = NULL;
    for (uint64_t seed = 1; seed <= 60; seed++) {
      for (int tg = 0; tg < 2; tg++) {
        kg_target_kind target = tg ? KG_TARGET_CUDA : KG_TARGET_C;
        kg_schedule *a = kg_schedule_new(p), *b = kg_schedule_new(p), *c = kg_schedule_new(p);
        kg_schedule_random(a, seed, target, 10);
        kg_schedule_random(b, seed, target, 10);
        char *ta = kg_trace_to_text(&a->trace), *tb = kg_trace_to_text(&b->trace);
        CHECKF(strcmp(ta, tb) == 0, "seed %llu differs between runs", (unsigned long long)seed);
        /* the C target draws step by step; the GPU generator draws whole structures (at least a split and a
         * bind of each root stage) */
        CHECKF(a->trace.nsteps >= (target == KG_TARGET_C ? 5 : 2), "seed %llu: only %d steps",
               (unsigned long long)seed, a->trace.nsteps);
        char err[512] = "";
        int rc = kg_test_apply_text(c, ta, err, sizeof err);
        CHECKF(rc == 0, "seed %llu: replay failed: %s\n%s", (unsigned long long)seed, err, ta);
        char *da = dump(a), *dc = dump(c);
        CHECKF(strcmp(da, dc) == 0, "seed %llu: replay differs", (unsigned long long)seed);
        for (int i = 0; i < a->trace.nsteps; i++) {
          const kg_step *st = &a->trace.steps[i];
          seen[tg][st->kind]++;
          if (target == KG_TARGET_C) {
            CHECKF(st->kind != KG_STEP_BIND, "seed %llu: bind drawn for C", (unsigned long long)seed);
            for (int k = 0; k < st->nnames; k++)
              CHECKF(strcmp(st->names[k], "shared") != 0, "seed %llu: shared for C", (unsigned long long)seed);
          }
        }
        if (tg == 0) {
          if (prev && strcmp(prev, ta) != 0) distinct++;
          free(prev);
          prev = strdup(ta);
        }
        free(ta);
        free(tb);
        free(da);
        free(dc);
        kg_schedule_free(a);
        kg_schedule_free(b);
        kg_schedule_free(c);
      }
    }
    free(prev);
    CHECKF(distinct >= 50, "program %d: only %d of 59 consecutive seeds differ", pi, distinct);
    kg_program_free(p);
  }
  for (int k = 0; k < KG_STEP_COUNT; k++) {
    /* reorder_storage is the sketches' (lanes over a packed operand); random draws keep the layouts, so that
     * the draws of every seed stay what they were before it existed */
    /* pad, launch_bounds and pipeline: shared memory's and CUDA kernels' (the GPU sketches choose them);
     * tensorize: f16/bf16 GEMM stages' on CUDA (hand-written schedules; tests/test_tensorize.c); widen: copies
     * of f16/bf16 tensors, which these f32 programs do not have (tests/test_lowp.c draws it); bfdot: bf16 GEMM
     * stages' on the C target (the cpu/tile-rk sketch; tests/test_bfdot.c); split_storage, like reorder_storage,
     * is hand-written schedules' (test_split_storage, tests/cli/test_cli_layout.sh) */
    if (k != KG_STEP_BIND && k != KG_STEP_REORDER_STORAGE && k != KG_STEP_PAD && k != KG_STEP_LAUNCH_BOUNDS &&
        k != KG_STEP_PIPELINE && k != KG_STEP_TENSORIZE && k != KG_STEP_WIDEN && k != KG_STEP_BFDOT &&
        k != KG_STEP_SPLIT_STORAGE)
      CHECKF(seen[0][k] > 0, "C target never drew %s", kg_step_names[k]);
    if (k == KG_STEP_PAD || k == KG_STEP_PIPELINE)
      CHECKF(seen[0][k] == 0, "C target drew %s (shared memory)", kg_step_names[k]);
    /* the GPU generator builds its tiles from split + reorder, has no use for parallel (CPU threads) and
     * leaves stages at root by not moving them; streaming stores are the C target's */
    if (k != KG_STEP_TILE && k != KG_STEP_PARALLEL && k != KG_STEP_COMPUTE_ROOT && k != KG_STEP_STREAM &&
        k != KG_STEP_REORDER_STORAGE && k != KG_STEP_LAUNCH_BOUNDS && k != KG_STEP_TENSORIZE && k != KG_STEP_WIDEN &&
        k != KG_STEP_BFDOT && k != KG_STEP_SPLIT_STORAGE)
      CHECKF(seen[1][k] > 0, "CUDA target never drew %s", kg_step_names[k]);
  }
}

/* Loads te/lib/NAME.te with the bindings of its "# sizes:" line; NULL when the file is missing. */
static kg_program *load_lib(const char *name, char **text_out) {
  char path[256];
  snprintf(path, sizeof path, "te/lib/%s.te", name);
  size_t len;
  char *text = kg_test_read_file(path, &len);
  *text_out = text;
  if (!text) return NULL;
  kg_binding b[KG_MAX_DIMS * 2];
  static char names[16][32];
  int nb = 0;
  const char *line = strstr(text, "# sizes:");
  if (line) {
    const char *q = line + 8;
    while (*q && *q != '\n' && nb < 16) {
      while (*q == ' ') q++;
      int n = 0;
      while (*q && *q != '=' && *q != ' ' && *q != '\n' && n < 31) names[nb][n++] = *q++;
      names[nb][n] = 0;
      if (*q != '=') break;
      b[nb].name = names[nb];
      b[nb].value = strtoll(q + 1, (char **)&q, 10);
      nb++;
    }
  }
  kg_diag d;
  memset(&d, 0, sizeof d);
  kg_arena da;
  kg_arena_init(&da);
  kg_program *p = kg_program_load(path, text, len, NULL, b, nb, &d, &da);
  /* the front end has its own tests; here a workload it refuses is only skipped, loudly */
  if (!p) fprintf(stderr, "note: skipping %s: %s\n", path, d.msg ? d.msg : "?");
  kg_arena_free(&da);
  return p;
}

/* Every library workload: random schedules for both targets are reproducible from their text, and every step
 * they hold is legal when replayed (runs under the sanitizers in make test-san). */
static void test_random_library(void) {
  static const char *const lib[] = {"matmul",     "batch_matmul", "matvec",      "conv2d",
                                    "depthwise_conv2d", "maxpool2d", "softmax", "layernorm",
                                    "rmsnorm",    "bias_gelu_residual", "reduce_rows", "transpose",
                                    "mlp_epilogue", "attention"};
  int loaded = 0;
  for (size_t w = 0; w < sizeof lib / sizeof *lib; w++) {
    char *text;
    kg_program *p = load_lib(lib[w], &text);
    if (p) {
      loaded++;
      for (uint64_t seed = 100; seed < 150; seed++) {
        kg_schedule *a = kg_schedule_new(p), *b = kg_schedule_new(p);
        kg_schedule_random(a, seed, seed % 2 ? KG_TARGET_CUDA : KG_TARGET_C, 15);
        char *ta = kg_trace_to_text(&a->trace);
        char err[512] = "";
        CHECKF(a->trace.nsteps >= (seed % 2 ? 2 : 8), "%s seed %llu: only %d steps", lib[w],
               (unsigned long long)seed, a->trace.nsteps);
        CHECKF(kg_test_apply_text(b, ta, err, sizeof err) == 0, "%s seed %llu: %s", lib[w], (unsigned long long)seed, err);
        char *da = dump(a), *db = dump(b);
        CHECKF(strcmp(da, db) == 0, "%s seed %llu: replay differs", lib[w], (unsigned long long)seed);
        /* ids are positions; every attached stage is computed at a leaf of a later stage */
        for (int i = 0; i < a->nstages; i++) {
          const kg_sstage *st = a->stages[i];
          CHECK(st->id == i);
          if (st->attach == KG_ATTACH_AT)
            CHECK(st->attach_stage->id > i && kg_sstage_leaf_index(st->attach_stage, st->attach_iter) >= 0);
          if (seed % 2) continue;
          /* the C target's promises: one parallel loop, outermost; vectorized only innermost */
          int npar = 0;
          for (int l = 0; l < st->nleaves; l++) {
            const kg_iter *it = st->leaves[l];
            CHECK(it->kind != KG_LOOP_BOUND && st->scope != KG_SCOPE_SHARED);
            if (it->kind == KG_LOOP_PARALLEL) CHECK(l == 0 && ++npar == 1);
            if (it->kind == KG_LOOP_VECTORIZED) CHECK(l == st->nleaves - 1 && it->extent <= 64);
          }
        }
        free(ta);
        free(da);
        free(db);
        kg_schedule_free(a);
        kg_schedule_free(b);
      }
      kg_program_free(p);
    }
    free(text);
  }
  CHECKF(loaded >= 10, "only %d library workloads loaded (run from the repo root)", loaded);
}

/* Factors too large for the loop arithmetic or the tensor size limit are refused, not overflowed. */
static void test_huge_factors(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  ILLEGAL(s, "split C i 9223372036854775807", "split: stage C: loop i: factor 9223372036854775807 is larger than 2147483647",
          NULL, NULL);
  ILLEGAL(s, "tile C i j 4 2147483648", "tile: stage C: loop j: factor 2147483648 is larger than 2147483647", NULL,
          NULL);
  OK(s, "split C i 2147483647");
  CHECKF(strcmp(leaves(s, "C"), "i.o(1) i.i(2147483647) j(32) k(48)") == 0, "%s", leaves(s, "C"));
  kg_schedule_free(s);
  s = kg_schedule_new(p);
  ILLEGAL(s, "rfactor C k 4611686018427387904", "rfactor: stage C: loop k: factor 4611686018427387904 exceeds the extent 48",
          NULL, NULL);
  ILLEGAL(s, "rfactor C k 49", "rfactor: stage C: loop k: factor 49 exceeds the extent 48", NULL, NULL);
  OK(s, "rfactor C k 48");
  CHECKF(strcmp(leaves(s, "C.rf"), "i(128) j(32) k.i(48) k.o(1)") == 0, "%s", leaves(s, "C.rf"));
  kg_schedule_free(s);
  kg_program_free(p);

  /* C has 2^38 elements: its partial tensor over 64 partial sums would have 2^44 */
  kg_binding b[] = {{"M", 1 << 19}, {"N", 1 << 19}, {"K", 64}};
  p = load(matmul_src, b, 3);
  if (!p) return;
  s = kg_schedule_new(p);
  ILLEGAL(s, "rfactor C k 64", "rfactor: stage C: loop k: factor 64: the partial tensor would have more than 2^40",
          NULL, NULL);
  OK(s, "rfactor C k 4");
  kg_schedule_free(s);
  kg_program_free(p);
}

/* rfactor names an axis of the stage as the program wrote it, not a loop a split or fuse made. */
static void test_rfactor_split_axis(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  OK(s, "split C k 5");
  ILLEGAL(s, "rfactor C k.o 3", "rfactor: stage C: loop k.o was made by a split",
          "rfactor takes an original reduction axis of the stage, before it is split or fused", NULL);
  ILLEGAL(s, "rfactor C j 3", "rfactor: stage C: loop j is not a reduction axis", NULL, NULL);
  kg_schedule_free(s);
  kg_program_free(p);
}

/* A failing step is located by its line when it was parsed, by its position when it was made in code. */
static void test_trace_error_prefix(void) {
  kg_program *p = load_matmul();
  if (!p) return;
  kg_schedule *s = kg_schedule_new(p);
  char err[512];
  CHECK(kg_test_apply_text(s, "# comment\n\nsplit C i 4\nsplit C q 2\n", err, sizeof err) == -1);
  CHECKF(strcmp(err, "line 4: split: stage C: no loop named q") == 0, "%s", err);
  kg_schedule_free(s);
  s = kg_schedule_new(p);
  kg_trace t;
  kg_trace_init(&t);
  kg_step ok = {.kind = KG_STEP_SPLIT, .stage = "C", .names = {"i"}, .nnames = 1, .ints = {4}, .nints = 1};
  kg_step bad = {.kind = KG_STEP_SPLIT, .stage = "C", .names = {"q"}, .nnames = 1, .ints = {2}, .nints = 1};
  kg_trace_push(&t, &ok);
  kg_trace_push(&t, &bad);
  CHECK(kg_schedule_apply_trace(s, &t, err, sizeof err) == -1);
  CHECKF(strcmp(err, "step 2: split: stage C: no loop named q") == 0, "%s", err);
  CHECK(s->trace.nsteps == 1);
  kg_trace_free(&t);
  kg_schedule_free(s);
  kg_program_free(p);
}

int main(void) {
  test_default();
  test_loop_primitives();
  test_placement();
  test_cache();
  test_reorder_storage();
  test_split_storage();
  test_pad();
  test_launch_bounds();
  test_pipeline();
  test_trace_replay();
  test_huge_factors();
  test_rfactor_split_axis();
  test_trace_error_prefix();
  test_random();
  test_random_library();
  TEST_END();
}
