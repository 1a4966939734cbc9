/* The cost model: XGBoost (its C API) trained on measured candidates' features, predicting a score whose order
 * is the predicted order of throughput (higher is faster).
 *
 * Training data: rows of KG_NFEATURES features with a label per row, the candidate's normalized throughput
 * within its task (the task's best time divided by the candidate's time, in (0, 1]; failed candidates 0), and the
 * task each row belongs to. The model is a regression on the label weighted toward fast programs (weight grows
 * with the label), as Ansor's: what matters is ranking the best candidates right.
 *
 * KG_MODEL_RANDOM is the same interface with random scores, so search with and without the model share every
 * other step (`--model random`). */
#ifndef KG_MODEL_H
#define KG_MODEL_H
#include <stddef.h>
#include <stdint.h>

typedef enum { KG_MODEL_XGB, KG_MODEL_RANDOM } kg_model_kind;

typedef struct kg_model kg_model;

/* A new untrained model. seed drives XGBoost's sampling and the random model's scores. */
kg_model *kg_model_new(kg_model_kind kind, uint64_t seed);
void kg_model_free(kg_model *m);
kg_model_kind kg_model_kind_of(const kg_model *m);
/* Retrains from scratch on n rows (x: n * KG_NFEATURES, row-major; label in [0, 1]). Fewer than a minimum
 * number of rows (or no two distinct labels) leaves the model untrained. 0, or -1 with err (an XGBoost error). */
int kg_model_train(kg_model *m, const float *x, const float *label, int n, char *err, size_t errlen);
/* Whether predictions mean anything (trained XGBoost). Untrained models predict random scores. */
int kg_model_trained(const kg_model *m);
/* scores[i] for row i of x (n rows). */
void kg_model_predict(kg_model *m, const float *x, int n, float *scores);
/* Saves to / loads from path (XGBoost's own format). Load returns NULL with err when the file is missing or bad. */
int kg_model_save(const kg_model *m, const char *path, char *err, size_t errlen);
kg_model *kg_model_load(const char *path, uint64_t seed, char *err, size_t errlen);

/* Ranking accuracy of predictions against measurements: the fraction of pairs (i, j) with different labels that
 * the scores order the same way (0.5 is chance). -1 when there is no such pair. */
double kg_model_pair_accuracy(const float *scores, const float *label, int n);
#endif
