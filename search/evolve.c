/* One round of evolutionary search (Ansor's, in outline): an initial population of the best measured points and
 * random samples; each generation scored by the cost model, parents drawn in proportion to their score, children
 * made by mutation (probability mutation_prob) or by crossover of two parents of one sketch; every distinct,
 * unmeasured candidate met on the way is remembered with its score, and the best of them are picked, beside a
 * few random samples (eps-greedy) that keep the model learning about regions it scores low.
 *
 * Determinism: every random draw happens on the calling thread, in order, from *rng; only realization and
 * feature extraction (pure functions of a point) run in parallel, into per-candidate slots. */
#include "evolve.h"
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../base/rng.h"
#include "../base/strset.h"
#include "../base/xalloc.h"

static int below(uint64_t *rng, int n) { return n <= 1 ? 0 : (int)(kg_rng_next(rng) % (uint64_t)n); }
static double uniform(uint64_t *rng) { return (double)(kg_rng_next(rng) >> 11) / 9007199254740992.0; }

static int value_index(const kg_knob *k, int64_t v) {
  for (int i = 0; i < k->nvalues; i++)
    if (k->values[i] == v) return i;
  return 0;
}

void kg_point_mutate(const kg_space *sp, const kg_point *in, uint64_t *rng, kg_point *out) {
  *out = *in;
  const kg_sketch *sk = &sp->sketches[in->sketch];
  if (sk->nknobs == 0) return;
  /* one knob, sometimes two: small moves keep most of what made the parent good */
  int nchange = uniform(rng) < 0.3 ? 2 : 1;
  for (int c = 0; c < nchange; c++) {
    int ki = below(rng, sk->nknobs);
    const kg_knob *k = &sk->knobs[ki];
    if (k->nvalues < 2) continue;
    int cur = value_index(k, out->knobs[ki]), next;
    if (k->kind == KG_KNOB_TILE && uniform(rng) < 0.7) {
      /* a neighbouring tile size: tile sizes act smoothly on locality */
      int step = 1 + below(rng, 2);
      next = uniform(rng) < 0.5 ? cur - step : cur + step;
      if (next < 0) next = cur + step;
      if (next >= k->nvalues) next = cur - step;
      if (next < 0 || next >= k->nvalues) next = below(rng, k->nvalues);
    } else {
      next = below(rng, k->nvalues - 1);
      if (next >= cur) next++;
    }
    out->knobs[ki] = k->values[next];
  }
}

int kg_point_crossover(const kg_point *a, const kg_point *b, uint64_t *rng, kg_point *out) {
  if (a->sketch != b->sketch || a->nknobs != b->nknobs) return -1;
  *out = *a;
  for (int i = 0; i < a->nknobs; i++)
    if (kg_rng_next(rng) & 1) out->knobs[i] = b->knobs[i];
  return 0;
}

/* A realized candidate. */
typedef struct cand {
  kg_point pt;
  char *text; /* NULL: failed to realize or to lower */
  float feat[KG_NFEATURES];
  float score;
  double prior; /* the prior's estimate (s), +inf without one */
} cand;

/* Realizes and featurizes c[0..n) in parallel, with the prior's estimate when one is given. */
static void realize_all(const kg_space *sp, cand *c, int n, int *nrealized, int *nfailed, const kg_evolve_opts *o) {
  int fails = 0;
#pragma omp parallel for schedule(dynamic, 4) reduction(+ : fails)
  for (int i = 0; i < n; i++) {
    char err[256];
    c[i].text = NULL;
    c[i].prior = INFINITY;
    kg_schedule *s = kg_space_realize(sp, &c[i].pt, err, sizeof err);
    if (s && kg_features_extract(s, sp->target, c[i].feat) == 0) c[i].text = kg_trace_to_text(&s->trace);
    if (c[i].text && o && o->prior) {
      double e = o->prior(o->prior_ctx, s);
      if (e > 0) c[i].prior = e;
    }
    if (!c[i].text) fails++;
    kg_schedule_free(s);
  }
  *nrealized += n;
  *nfailed += fails;
}

static void cands_free(cand *c, int n) {
  for (int i = 0; i < n; i++) free(c[i].text);
  free(c);
}

/* Draws n random points, sketches chosen uniformly. */
static void draw_random(const kg_space *sp, uint64_t *rng, cand *c, int n) {
  for (int i = 0; i < n; i++) kg_space_sample(sp, below(rng, sp->nsketches), rng, &c[i].pt);
}

/* The pool of distinct unmeasured candidates met during the round. */
typedef struct pool {
  cand *c;
  int n, cap;
  kg_strset texts;
} pool;

static void pool_add(pool *p, const cand *c, kg_seen_fn seen, void *ctx) {
  if (!c->text || seen(ctx, c->text) || !kg_strset_add(&p->texts, c->text)) return;
  if (p->n == p->cap) {
    p->cap = p->cap ? p->cap * 2 : 256;
    p->c = kg_xrealloc(p->c, sizeof *p->c * (size_t)p->cap);
  }
  p->c[p->n] = *c;
  size_t len = strlen(c->text) + 1;
  p->c[p->n].text = kg_xrealloc(NULL, len);
  memcpy(p->c[p->n].text, c->text, len);
  p->n++;
}

static void score_all(kg_model *m, cand *c, int n) {
  float *x = kg_xrealloc(NULL, sizeof(float) * KG_NFEATURES * (size_t)(n ? n : 1));
  float *s = kg_xrealloc(NULL, sizeof(float) * (size_t)(n ? n : 1));
  int k = 0;
  for (int i = 0; i < n; i++)
    if (c[i].text) memcpy(x + (size_t)KG_NFEATURES * k++, c[i].feat, sizeof c[i].feat);
  if (k) kg_model_predict(m, x, k, s);
  k = 0;
  for (int i = 0; i < n; i++) c[i].score = c[i].text ? s[k++] : -INFINITY;
  free(x);
  free(s);
}

/* Roulette selection over scores shifted to be positive; index into c. */
static int select_parent(const cand *c, int n, double lo, double total, uint64_t *rng) {
  if (total <= 0) return below(rng, n);
  double r = uniform(rng) * total, acc = 0;
  for (int i = 0; i < n; i++) {
    acc += c[i].score - lo;
    if (r < acc) return i;
  }
  return n - 1;
}

static int cmp_score_desc(const void *a, const void *b) {
  const cand *x = a, *y = b;
  return (x->score < y->score) - (x->score > y->score);
}

static void pick_from(const cand *c, kg_evolve_pick *p, int random) {
  p->pt = c->pt;
  size_t len = strlen(c->text) + 1;
  p->trace_text = kg_xrealloc(NULL, len);
  memcpy(p->trace_text, c->text, len);
  p->score = c->score;
  p->random = random;
  memcpy(p->features, c->feat, sizeof p->features);
}

/* Fills up to want random picks that are neither seen nor taken (taken: the texts picked so far). */
static int random_picks(const kg_space *sp, uint64_t *rng, kg_seen_fn seen, void *ctx, kg_strset *taken,
                        kg_evolve_pick *picks, int want, int *nrealized, int *nfailed) {
  int got = 0;
  /* a space smaller than the request runs dry: stop after a bounded number of fruitless draws */
  for (int attempt = 0; got < want && attempt < 8; attempt++) {
    int n = 2 * (want - got) + 8;
    cand *c = kg_xrealloc(NULL, sizeof *c * (size_t)n);
    draw_random(sp, rng, c, n);
    realize_all(sp, c, n, nrealized, nfailed, NULL);
    for (int i = 0; i < n && got < want; i++) {
      if (!c[i].text || seen(ctx, c[i].text) || !kg_strset_add(taken, c[i].text)) continue;
      c[i].score = 0;
      pick_from(&c[i], &picks[got++], 1);
    }
    cands_free(c, n);
  }
  return got;
}

static int cmp_prior(const void *a, const void *b) {
  const cand *x = a, *y = b;
  return (x->prior > y->prior) - (x->prior < y->prior);
}

/* The untrained round with a prior: KG_EVOLVE_PRIOR_DRAWS draws per pick, the best estimated of them taken (all but
 * the eps share, which stays random so that the model later learns where the prior is wrong). */
static int prior_picks(const kg_space *sp, uint64_t *rng, kg_seen_fn seen, void *ctx, kg_strset *taken,
                       const kg_evolve_opts *o, kg_evolve_pick *picks, int want, int *nrealized, int *nfailed) {
  int n = want * KG_EVOLVE_PRIOR_DRAWS;
  if (n > 4096) n = 4096;
  cand *c = kg_xrealloc(NULL, sizeof *c * (size_t)n);
  draw_random(sp, rng, c, n);
  realize_all(sp, c, n, nrealized, nfailed, o);
  qsort(c, (size_t)n, sizeof *c, cmp_prior); /* stable enough: ties keep no meaning */
  int nrand = (int)floor(o->eps * want + 0.5), got = 0;
  for (int i = 0; i < n && got < want - nrand; i++) {
    if (!c[i].text || !isfinite(c[i].prior) || seen(ctx, c[i].text) || !kg_strset_add(taken, c[i].text)) continue;
    c[i].score = 0;
    pick_from(&c[i], &picks[got++], 1);
  }
  cands_free(c, n);
  return got + random_picks(sp, rng, seen, ctx, taken, picks + got, want - got, nrealized, nfailed);
}

int kg_evolve_round(const kg_space *sp, kg_model *model, const kg_point *seeds, int nseeds, kg_seen_fn seen,
                    void *ctx, const kg_evolve_opts *o, uint64_t *rng, kg_evolve_pick *picks, int npicks,
                    int *nrealized, int *nfailed) {
  kg_strset taken;
  kg_strset_init(&taken);
  int got = 0;
  if (!kg_model_trained(model) || kg_model_kind_of(model) == KG_MODEL_RANDOM) {
    got = o->prior && kg_model_kind_of(model) != KG_MODEL_RANDOM
              ? prior_picks(sp, rng, seen, ctx, &taken, o, picks, npicks, nrealized, nfailed)
              : random_picks(sp, rng, seen, ctx, &taken, picks, npicks, nrealized, nfailed);
    kg_strset_free(&taken);
    return got;
  }
  int popn = o->population > 0 ? o->population : 1;
  pool pl = {0};
  kg_strset_init(&pl.texts);
  /* initial population: the seeds that still belong to the space, then random samples */
  cand *pop = kg_xrealloc(NULL, sizeof *pop * (size_t)popn);
  int n = 0;
  for (int i = 0; i < nseeds && n < popn / 2; i++)
    if (kg_space_point_valid(sp, &seeds[i])) pop[n++].pt = seeds[i];
  draw_random(sp, rng, pop + n, popn - n);
  realize_all(sp, pop, popn, nrealized, nfailed, NULL);
  for (int gen = 0;; gen++) {
    /* keep the realized members only */
    int m = 0;
    for (int i = 0; i < popn; i++) {
      if (pop[i].text) pop[m++] = pop[i];
      else free(pop[i].text);
    }
    score_all(model, pop, m);
    for (int i = 0; i < m; i++) pool_add(&pl, &pop[i], seen, ctx);
    if (gen >= o->generations || m == 0) {
      cands_free(pop, m);
      break;
    }
    double lo = INFINITY, total = 0;
    for (int i = 0; i < m; i++) lo = pop[i].score < lo ? pop[i].score : lo;
    lo -= 1e-6;
    for (int i = 0; i < m; i++) total += pop[i].score - lo;
    cand *next = kg_xrealloc(NULL, sizeof *next * (size_t)popn);
    for (int i = 0; i < popn; i++) {
      const cand *a = &pop[select_parent(pop, m, lo, total, rng)];
      if (uniform(rng) < o->mutation_prob) {
        kg_point_mutate(sp, &a->pt, rng, &next[i].pt);
        continue;
      }
      /* crossover needs a second parent of the same sketch; a few draws, else mutate */
      int done = 0;
      for (int t = 0; t < 8 && !done; t++) {
        const cand *b = &pop[select_parent(pop, m, lo, total, rng)];
        if (b != a && kg_point_crossover(&a->pt, &b->pt, rng, &next[i].pt) == 0) done = 1;
      }
      if (!done) kg_point_mutate(sp, &a->pt, rng, &next[i].pt);
    }
    cands_free(pop, m);
    pop = next;
    realize_all(sp, pop, popn, nrealized, nfailed, NULL);
  }
  /* the best predicted, then eps-greedy random picks */
  int nrand = (int)floor(o->eps * npicks + 0.5);
  if (nrand > npicks) nrand = npicks;
  qsort(pl.c, (size_t)pl.n, sizeof *pl.c, cmp_score_desc);
  /* each sketch met gets its quota of its best-scored, then the rest go by score */
  int nsk = 0, *per = kg_xrealloc(NULL, sizeof(int) * (size_t)(sp->nsketches + 1));
  for (int k = 0; k < sp->nsketches; k++) per[k] = 0;
  for (int i = 0; i < pl.n; i++) nsk += per[pl.c[i].pt.sketch]++ == 0;
  int quota = nsk > 1 ? (int)floor(o->sketch_share * (npicks - nrand) / nsk) : 0;
  for (int k = 0; k < sp->nsketches; k++) per[k] = 0;
  for (int i = 0; i < pl.n && quota > 0 && got < npicks - nrand; i++)
    if (per[pl.c[i].pt.sketch] < quota && kg_strset_add(&taken, pl.c[i].text)) {
      per[pl.c[i].pt.sketch]++;
      pick_from(&pl.c[i], &picks[got++], 0);
    }
  free(per);
  for (int i = 0; i < pl.n && got < npicks - nrand; i++)
    if (kg_strset_add(&taken, pl.c[i].text)) pick_from(&pl.c[i], &picks[got++], 0);
  got += random_picks(sp, rng, seen, ctx, &taken, picks + got, npicks - got, nrealized, nfailed);
  cands_free(pl.c, pl.n);
  kg_strset_free(&pl.texts);
  kg_strset_free(&taken);
  return got;
}

void kg_evolve_picks_free(kg_evolve_pick *picks, int n) {
  for (int i = 0; i < n; i++) {
    free(picks[i].trace_text);
    picks[i].trace_text = NULL;
  }
}
