/* The evolutionary round's prior (search/evolve.h): while the model is untrained, a round with a prior draws
 * KG_EVOLVE_PRIOR_DRAWS random candidates per pick and takes the best estimated of them (the eps share stays
 * random); without one, or with the random model, the round is the plain random sample it was. Checked on a CUDA
 * SGEMM space with a prior that is a pure function of the trace (so that the picks' values can be recomputed):
 * every non-random pick lies in the best eighth of what the same draws held, the picks are distinct and unseen, the
 * prior runs on every draw, and the same seed gives the same picks. Then the sketch quota (kg_evolve_opts.sketch_share)
 * on a CPU GEMM space with a model trained to like one sketch. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "kgen.h"
#include "base/rng.h"
#include "base/strset.h"
#include "gen/space.h"
#include "search/evolve.h"
#include "costmodel/features.h"
#include "costmodel/model.h"
#include "testlib.h"

static int calls;

/* A stand-in estimate: a hash of the trace text, spread over (0, 1]; any deterministic function of the schedule
 * serves, and one without ties makes "the best eighth" sharp. */
static double text_prior(void *ctx, const kg_schedule *s) {
  (void)ctx;
  char *t = kg_trace_to_text(&s->trace);
  double v = t ? (double)(kg_str_hash(t) % 1000000 + 1) / 1e6 : -1;
  free(t);
  __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
  return v;
}

static int never_seen(void *ctx, const char *text) {
  (void)ctx;
  (void)text;
  return 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The prior's values of n fresh random draws from rng, sorted. */
static int sample_values(const kg_space *sp, uint64_t rng, double *v, int n) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    kg_point pt;
    kg_space_sample(sp, (int)(kg_rng_next(&rng) % (uint64_t)sp->nsketches), &rng, &pt);
    char err[256];
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    if (s) v[k++] = text_prior(NULL, s);
    kg_schedule_free(s);
  }
  qsort(v, (size_t)k, sizeof *v, cmp_d);
  return k;
}

static int round_picks(const kg_space *sp, kg_model *m, kg_prior_fn prior, uint64_t seed, kg_evolve_pick *picks,
                       int want) {
  kg_evolve_opts o = {64, 1, 0.85, 0.25, prior, NULL, 0};
  uint64_t rng = seed;
  int nr = 0, nf = 0;
  return kg_evolve_round(sp, m, NULL, 0, never_seen, NULL, &o, &rng, picks, want, &nr, &nf);
}

/* How many of the picks come from each sketch (counts: room for sp->nsketches). */
static void per_sketch(const kg_evolve_pick *p, int n, int *counts, int nsk) {
  for (int k = 0; k < nsk; k++) counts[k] = 0;
  for (int i = 0; i < n; i++) counts[p[i].pt.sketch]++;
}

/* The sketch quota: a model trained to like one sketch of a CPU GEMM space fills a round with it; with a share of
 * 0.5 every other sketch gets its quota of the round. */
static void test_sketch_share(void) {
  kg_binding b[3] = {{"M", 512}, {"N", 512}, {"K", 512}};
  kg_program *p = kg_test_load_lib("matmul", b, 3);
  CHECK(p != NULL);
  if (!p) return;
  kg_space *sp = kg_space_new(p, KG_TARGET_C, NULL);
  int liked = kg_space_find_sketch(sp, "cpu/tile-rk"), other = kg_space_find_sketch(sp, "cpu/tile-cw");
  CHECK(liked >= 0 && other >= 0 && sp->nsketches <= 8);
  enum { ROWS = 96, WANT = 24 };
  float *x = calloc((size_t)ROWS * KG_NFEATURES, sizeof(float)), y[ROWS];
  uint64_t rng = 5;
  int n = 0;
  for (int i = 0; i < 4 * ROWS && n < ROWS; i++) {
    kg_point pt;
    kg_space_sample(sp, i % sp->nsketches, &rng, &pt);
    char err[256];
    kg_schedule *s = kg_space_realize(sp, &pt, err, sizeof err);
    if (s && kg_features_extract(s, KG_TARGET_C, x + (size_t)KG_NFEATURES * n) == 0)
      y[n++] = pt.sketch == liked ? 0.9f + 0.1f * (float)(i % 7) / 7 : 0.02f * (float)(i % 5);
    kg_schedule_free(s);
  }
  kg_model *m = kg_model_new(KG_MODEL_XGB, 3);
  char err[256];
  CHECKF(kg_model_train(m, x, y, n, err, sizeof err) == 0 && kg_model_trained(m), "%s", err);
  int counts[8], shared[8];
  kg_evolve_pick picks[WANT];
  for (int share = 0; share <= 1; share++) {
    kg_evolve_opts o = {256, 2, 0.85, 0, NULL, NULL, share ? 0.5 : 0};
    uint64_t r = 11;
    int nr = 0, nf = 0;
    int got = kg_evolve_round(sp, m, NULL, 0, never_seen, NULL, &o, &r, picks, WANT, &nr, &nf);
    CHECKF(got == WANT, "%d picks", got);
    per_sketch(picks, got, share ? shared : counts, sp->nsketches);
    kg_evolve_picks_free(picks, got);
  }
  printf("sketch share: %s %d of %d picks by score alone, %d with a share of 0.5; %s %d and %d\n",
         sp->sketches[liked].name, counts[liked], WANT, shared[liked], sp->sketches[other].name, counts[other],
         shared[other]);
  /* by score the liked sketch takes the round; with the share every sketch the round met has its quota
   * (0.5 x 24 / 3 = 4 each; cpu/simple's few points may fall short, the big sketches do not) */
  CHECKF(counts[liked] >= WANT * 3 / 4, "by score alone: %d of %d liked", counts[liked], WANT);
  CHECKF(shared[other] >= 4, "with the share: %d of %s", shared[other], sp->sketches[other].name);
  CHECKF(shared[liked] >= 4 && shared[liked] < counts[liked], "with the share: %d liked (%d by score)", shared[liked],
         counts[liked]);
  kg_model_free(m);
  free(x);
  kg_space_free(sp);
  kg_program_free(p);
}

int main(void) {
  test_sketch_share();
  kg_binding b[3] = {{"M", 4096}, {"N", 4096}, {"K", 4096}};
  kg_program *p = kg_test_load_lib("matmul", b, 3);
  CHECK(p != NULL);
  if (!p) TEST_END();
  kg_gpu_limits lim;
  CHECK(kg_gpu_limits_for_arch("sm_90", &lim) == 0);
  kg_space *sp = kg_space_new(p, KG_TARGET_CUDA, &lim);
  kg_model *m = kg_model_new(KG_MODEL_XGB, 1);
  CHECK(!kg_model_trained(m));
  enum { WANT = 16 };
  kg_evolve_pick picks[WANT], again[WANT];
  calls = 0;
  int n = round_picks(sp, m, text_prior, 42, picks, WANT);
  CHECKF(n == WANT, "%d picks", n);
  CHECKF(calls >= WANT * KG_EVOLVE_PRIOR_DRAWS * 3 / 4, "the prior ran on %d draws for %d picks", calls, WANT);
  /* the best eighth of a random sample of the space bounds the guided picks (12 of 16: eps 0.25 leaves 4 random) */
  double ref[WANT * KG_EVOLVE_PRIOR_DRAWS];
  int nref = sample_values(sp, 7, ref, WANT * KG_EVOLVE_PRIOR_DRAWS);
  double bound = nref ? ref[nref / 4] : 0; /* a quarter: margin for two different samples of the same space */
  int guided = 0;
  for (int i = 0; i < n; i++) {
    char err[256];
    kg_schedule *s = kg_space_realize(sp, &picks[i].pt, err, sizeof err);
    CHECK(s != NULL);
    if (s && text_prior(NULL, s) <= bound) guided++;
    kg_schedule_free(s);
    for (int j = 0; j < i; j++) CHECK(strcmp(picks[i].trace_text, picks[j].trace_text) != 0);
  }
  printf("prior: %d of %d picks within the best quarter of a random sample (value <= %g)\n", guided, n, bound);
  CHECKF(guided >= 12, "%d of %d picks guided by the prior", guided, n);
  /* deterministic in the seed */
  int n2 = round_picks(sp, m, text_prior, 42, again, WANT);
  CHECK(n2 == n);
  for (int i = 0; i < n && i < n2; i++) CHECK(strcmp(picks[i].trace_text, again[i].trace_text) == 0);
  kg_evolve_picks_free(again, n2);
  /* without a prior, or with the random model, no estimate is asked for */
  calls = 0;
  n2 = round_picks(sp, m, NULL, 42, again, WANT);
  CHECK(n2 == WANT && calls == 0);
  kg_evolve_picks_free(again, n2);
  kg_model *r = kg_model_new(KG_MODEL_RANDOM, 1);
  n2 = round_picks(sp, r, text_prior, 42, again, WANT);
  CHECK(n2 == WANT && calls == 0);
  kg_evolve_picks_free(again, n2);
  kg_model_free(r);
  kg_evolve_picks_free(picks, n);
  kg_model_free(m);
  kg_space_free(sp);
  kg_program_free(p);
  TEST_END();
}
