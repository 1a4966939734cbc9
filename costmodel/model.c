/* The cost model over XGBoost's C API. Training rebuilds the booster from scratch on every call (the data only
 * grows, and a fresh fit avoids drifting with stale trees); until a fit exists, scores come from a splitmix64
 * stream seeded by the model's seed, so an untrained model and KG_MODEL_RANDOM behave the same and
 * deterministically.
 *
 * Files hold XGBoost's JSON model as XGBoost writes it (written to a temporary file and renamed, so a tuner
 * killed mid-save leaves the previous model). */
#include "model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xgboost/c_api.h>
#include "../base/rng.h"
#include "../base/file.h"
#include "../base/xalloc.h"
#include "features.h"

/* below this, or with a single distinct label, the model stays untrained: a fit on a handful of rows ranks
 * worse than chance often enough to mislead the search */
#define KG_MODEL_MIN_ROWS 16
#define KG_MODEL_ROUNDS 100
/* weight = label (as Ansor's), floored here for failed and very slow candidates. On 400 measured random C
 * matmul schedules, label weights picked better top-5 candidates on held-out rows than label^2 (0.51 vs 0.16-0.23
 * of the best) at a similar pair accuracy. */
#define KG_MODEL_MIN_WEIGHT_LABEL 0.05
/* early stop: every this many rounds, stop when the training RMSE improved by less than STOP_GAIN (relative) */
#define KG_MODEL_STOP_EVERY 10
#define KG_MODEL_STOP_GAIN 0.01
/* fits on at least this many rows use every core (see xgb_threads) */
#define KG_MODEL_PARALLEL_ROWS 4096

struct kg_model {
  kg_model_kind kind;
  uint64_t seed, rng;
  BoosterHandle booster; /* NULL while untrained */
};

static void set_err(char *err, size_t errlen, const char *what) {
  if (err && errlen) snprintf(err, errlen, "cost model: %s: %s", what, XGBGetLastError());
}

/* XGBoost's global configuration is per thread: set it in every thread that calls into XGBoost. */
static void quiet(void) { XGBSetGlobalConfig("{\"verbosity\": 0}"); }

kg_model *kg_model_new(kg_model_kind kind, uint64_t seed) {
  kg_model *m = kg_xrealloc(NULL, sizeof *m);
  m->kind = kind;
  m->seed = seed;
  m->rng = seed;
  m->booster = NULL;
  return m;
}

static void drop_booster(kg_model *m) {
  if (m->booster) XGBoosterFree(m->booster);
  m->booster = NULL;
}

void kg_model_free(kg_model *m) {
  if (!m) return;
  drop_booster(m);
  free(m);
}

kg_model_kind kg_model_kind_of(const kg_model *m) { return m->kind; }
int kg_model_trained(const kg_model *m) { return m->kind == KG_MODEL_XGB && m->booster != NULL; }

static int enough_data(const float *label, int n) {
  if (n < KG_MODEL_MIN_ROWS) return 0;
  for (int i = 1; i < n; i++)
    if (label[i] != label[0]) return 1;
  return 0;
}

/* XGBoost's threads for a fit on rows rows. Small fits run no faster on several threads, and while other
 * processes load the cores the OpenMP barriers of every tree level spin: 256 rows took 0.5 s on one thread and
 * 16 s on two of a busy 2-core machine. */
static long xgb_threads(int rows) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return rows >= KG_MODEL_PARALLEL_ROWS && cores > 1 ? cores : 1;
}

/* tree_method exact: on the few thousand rows a tuning collects it fits faster than hist (256 rows: 0.5 s against
 * 1.7 s on one thread), and its per-feature parallelism has few barriers. */
static int set_params(BoosterHandle b, uint64_t seed, long threads) {
  char nthread[32], seedtxt[32];
  snprintf(nthread, sizeof nthread, "%ld", threads);
  snprintf(seedtxt, sizeof seedtxt, "%llu", (unsigned long long)(seed & 0x7fffffff));
  const char *params[][2] = {{"verbosity", "0"},        {"objective", "reg:squarederror"}, {"tree_method", "exact"},
                             {"max_depth", "10"},       {"eta", "0.2"},                     {"min_child_weight", "2"},
                             {"subsample", "1"},        {"gamma", "0"},                     {"eval_metric", "rmse"},
                             {"nthread", nthread},      {"seed", seedtxt}};
  for (size_t i = 0; i < sizeof params / sizeof *params; i++)
    if (XGBoosterSetParam(b, params[i][0], params[i][1])) return -1;
  return 0;
}

/* The training RMSE XGBoost reports ("[3]\ttrain-rmse:0.0123"), or -1. */
static double train_rmse(BoosterHandle b, int iter, DMatrixHandle d) {
  const char *names[1] = {"train"}, *out = NULL;
  DMatrixHandle ds[1] = {d};
  if (XGBoosterEvalOneIter(b, iter, ds, names, 1, &out) || !out) return -1;
  const char *c = strrchr(out, ':');
  return c ? strtod(c + 1, NULL) : -1;
}

int kg_model_train(kg_model *m, const float *x, const float *label, int n, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (m->kind != KG_MODEL_XGB) return 0;
  drop_booster(m);
  if (n <= 0 || !enough_data(label, n)) return 0;
  quiet();
  /* labels outside [0, 1] or NaN would come from a caller's bug; clamp rather than let them dominate */
  float *lab = kg_xrealloc(NULL, sizeof(float) * (size_t)n), *wt = kg_xrealloc(NULL, sizeof(float) * (size_t)n);
  double wsum = 0;
  for (int i = 0; i < n; i++) {
    float l = label[i];
    lab[i] = !(l > 0) ? 0 : l > 1 ? 1 : l;
    wt[i] = lab[i] > KG_MODEL_MIN_WEIGHT_LABEL ? lab[i] : (float)KG_MODEL_MIN_WEIGHT_LABEL;
    wsum += wt[i];
  }
  /* mean weight 1, so min_child_weight counts rows of average weight whatever the label distribution */
  for (int i = 0; i < n; i++) wt[i] = (float)(wt[i] * n / wsum);
  DMatrixHandle d = NULL;
  BoosterHandle b = NULL;
  int rc = -1;
  if (XGDMatrixCreateFromMat(x, (bst_ulong)n, KG_NFEATURES, NAN, &d)) {
    set_err(err, errlen, "creating the training matrix");
    goto done;
  }
  if (XGDMatrixSetFloatInfo(d, "label", lab, (bst_ulong)n) || XGDMatrixSetFloatInfo(d, "weight", wt, (bst_ulong)n)) {
    set_err(err, errlen, "setting labels");
    goto done;
  }
  if (XGBoosterCreate(&d, 1, &b) || set_params(b, m->seed, xgb_threads(n))) {
    set_err(err, errlen, "creating the booster");
    goto done;
  }
  double last = -1;
  for (int it = 0; it < KG_MODEL_ROUNDS; it++) {
    if (XGBoosterUpdateOneIter(b, it, d)) {
      set_err(err, errlen, "training");
      goto done;
    }
    if ((it + 1) % KG_MODEL_STOP_EVERY) continue;
    double r = train_rmse(b, it, d);
    if (r < 0) {
      set_err(err, errlen, "evaluating");
      goto done;
    }
    if (r < 1e-6 || (last > 0 && last - r < KG_MODEL_STOP_GAIN * last)) break;
    last = r;
  }
  m->booster = b;
  b = NULL;
  rc = 0;
done:
  if (b) XGBoosterFree(b);
  if (d) XGDMatrixFree(d);
  free(lab);
  free(wt);
  return rc;
}

static void predict_random(kg_model *m, int n, float *scores) {
  for (int i = 0; i < n; i++) scores[i] = (float)(kg_rng_next(&m->rng) >> 40) / (float)(1 << 24);
}

void kg_model_predict(kg_model *m, const float *x, int n, float *scores) {
  if (n <= 0) return;
  if (!kg_model_trained(m)) {
    predict_random(m, n, scores);
    return;
  }
  quiet();
  DMatrixHandle d = NULL;
  const bst_ulong *shape = NULL;
  bst_ulong dim = 0;
  const float *out = NULL;
  static const char config[] =
      "{\"type\": 0, \"training\": false, \"iteration_begin\": 0, \"iteration_end\": 0, \"strict_shape\": false}";
  if (XGDMatrixCreateFromMat(x, (bst_ulong)n, KG_NFEATURES, NAN, &d) ||
      XGBoosterPredictFromDMatrix(m->booster, d, config, &shape, &dim, &out) || !out) {
    /* only out of memory gets here with a well-formed booster; random scores keep the search going */
    fprintf(stderr, "kgen: cost model: prediction failed (%s); using random scores\n", XGBGetLastError());
    predict_random(m, n, scores);
  } else {
    memcpy(scores, out, sizeof(float) * (size_t)n);
  }
  if (d) XGDMatrixFree(d);
}

int kg_model_save(const kg_model *m, const char *path, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  if (!kg_model_trained(m)) {
    if (err && errlen) snprintf(err, errlen, "cost model: nothing to save: the model is not trained");
    return -1;
  }
  quiet();
  bst_ulong len = 0;
  const char *buf = NULL;
  if (XGBoosterSaveModelToBuffer(m->booster, "{\"format\": \"json\"}", &len, &buf)) {
    set_err(err, errlen, "saving");
    return -1;
  }
  size_t pl = strlen(path);
  char *tmp = kg_xrealloc(NULL, pl + 8);
  snprintf(tmp, pl + 8, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  int ok = f && fwrite(buf, 1, (size_t)len, f) == (size_t)len;
  if (f && fclose(f)) ok = 0;
  if (ok && rename(tmp, path)) ok = 0;
  if (!ok) {
    if (err && errlen) snprintf(err, errlen, "cost model: cannot write %s", path);
    remove(tmp);
  }
  free(tmp);
  return ok ? 0 : -1;
}

kg_model *kg_model_load(const char *path, uint64_t seed, char *err, size_t errlen) {
  if (err && errlen) err[0] = 0;
  char why[512];
  size_t len = 0;
  char *buf = kg_file_read(path, KG_FILE_MAX_MODEL, &len, why, sizeof why);
  if (!buf) {
    if (err && errlen) snprintf(err, errlen, "cost model: cannot open %s", why);
    return NULL;
  }
  quiet();
  BoosterHandle b = NULL;
  bst_ulong nf = 0;
  int ok = len > 0 && !XGBoosterCreate(NULL, 0, &b) && !XGBoosterLoadModelFromBuffer(b, buf, (bst_ulong)len) &&
           !set_params(b, seed, xgb_threads(0)) && !XGBoosterGetNumFeature(b, &nf);
  free(buf);
  if (!ok || nf != KG_NFEATURES) {
    if (err && errlen) {
      if (!ok) snprintf(err, errlen, "cost model: %s: not a model (%s)", path, len ? XGBGetLastError() : "empty file");
      else snprintf(err, errlen, "cost model: %s: model of %llu features, expected %d", path, (unsigned long long)nf,
                    KG_NFEATURES);
    }
    if (b) XGBoosterFree(b);
    return NULL;
  }
  kg_model *m = kg_model_new(KG_MODEL_XGB, seed);
  m->booster = b;
  return m;
}

/* pairs beyond this many rows are sampled (the exact count is quadratic) */
#define KG_PAIR_EXACT_ROWS 4096
#define KG_PAIR_SAMPLES (1 << 24)

static void pair_score(const float *scores, const float *label, int i, int j, double *agree, double *pairs) {
  if (label[i] == label[j]) return;
  *pairs += 1;
  float ds = scores[i] - scores[j], dl = label[i] - label[j];
  if (ds == 0) *agree += 0.5;
  else if ((ds > 0) == (dl > 0)) *agree += 1;
}

double kg_model_pair_accuracy(const float *scores, const float *label, int n) {
  double agree = 0, pairs = 0;
  if (n <= KG_PAIR_EXACT_ROWS) {
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++) pair_score(scores, label, i, j, &agree, &pairs);
  } else {
    uint64_t r = 0x6b67656e; /* fixed: the same data gives the same accuracy */
    for (int s = 0; s < KG_PAIR_SAMPLES; s++) {
      int i = (int)(kg_rng_next(&r) % (uint64_t)n), j = (int)(kg_rng_next(&r) % (uint64_t)n);
      if (i != j) pair_score(scores, label, i, j, &agree, &pairs);
    }
  }
  return pairs > 0 ? agree / pairs : -1;
}
