/* One round of evolutionary search over a space (internal to search/; the tuner in tune.c drives it).
 *
 * Requires: a model (trained or not) and a predicate telling which trace texts were measured already. When the
 * model is untrained or random, evolution would follow noise, so the round is a random sample instead (Ansor does
 * the same until the model has data), ranked by the prior when there is one (the GPU's analytical estimate: a
 * tuner's first round then measures the samples the estimate likes best, not the first ones drawn). */
#ifndef KG_EVOLVE_H
#define KG_EVOLVE_H
#include "../gen/space.h"
#include "../costmodel/features.h"
#include "../costmodel/model.h"

/* A prior: an analytical estimate of a candidate's time in seconds (<= 0: none), computed without measuring. Called
 * from several threads at once (each with its own schedule). */
typedef double (*kg_prior_fn)(void *ctx, const kg_schedule *s);

typedef struct kg_evolve_opts {
  int population;       /* >= 1 */
  int generations;      /* >= 0 */
  double mutation_prob; /* in [0, 1]: mutation, else crossover */
  double eps;           /* share of the picks drawn at random, in [0, 1] */
  /* NULL, or the prior that picks while the model is untrained: KG_EVOLVE_PRIOR_DRAWS random draws per pick, the
   * best estimated (1 - eps of the picks) taken, the rest random */
  kg_prior_fn prior;
  void *prior_ctx;
  /* in [0, 1]: the share of the model's picks spread evenly over the sketches the round met, each sketch's
   * best-scored first, the rest by score alone. The model, trained on a few rounds, ranks whole sketches by the
   * few points it has seen of each, and evolution then fills the round with the sketch it likes: a sketch whose
   * good region is narrow (a convolution's blocked accumulator) is never measured again after a bad random
   * start. 0: by score alone. */
  double sketch_share;
} kg_evolve_opts;
#define KG_EVOLVE_PRIOR_DRAWS 8

/* A picked candidate: its point, its trace text (malloc'd) and the model's score. */
typedef struct kg_evolve_pick {
  kg_point pt;
  char *trace_text;
  float score;
  int random;           /* an eps-greedy pick (or the model was untrained) */
  float features[KG_NFEATURES];
} kg_evolve_pick;

/* Whether a trace text was measured before (or is already picked). */
typedef int (*kg_seen_fn)(void *ctx, const char *trace_text);

/* Picks up to npicks distinct candidates not seen before. seeds (nseeds points, e.g. the best measured) join the
 * initial population. Deterministic in *rng (advanced). Returns the number of picks (fewer when the space runs
 * dry). Counts in *nrealized / *nfailed how many points were realized and how many failed to (dropped). */
int kg_evolve_round(const kg_space *sp, kg_model *model, const kg_point *seeds, int nseeds, kg_seen_fn seen,
                    void *ctx, const kg_evolve_opts *o, uint64_t *rng, kg_evolve_pick *picks, int npicks,
                    int *nrealized, int *nfailed);
void kg_evolve_picks_free(kg_evolve_pick *picks, int n);

/* Mutation and crossover of points (exposed for tests). mutate changes one or two knobs of in (a TILE knob
 * mostly to a neighbouring value); crossover takes each knob from a or b (same sketch); -1 when a and b come
 * from different sketches. */
void kg_point_mutate(const kg_space *sp, const kg_point *in, uint64_t *rng, kg_point *out);
int kg_point_crossover(const kg_point *a, const kg_point *b, uint64_t *rng, kg_point *out);
#endif
