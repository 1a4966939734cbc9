/* te/eval.c (the oracle, optimised) against tests/eval_naive.c (the plain interpreter it started as): bit for bit
 * on every library workload and test program at its test sizes, and at sizes that split rows across threads
 * and blocks. */
#include <dirent.h>
#include "kgen.h"
#include "testlib.h"
#include "testutil.h"
#include "eval_naive.c"



static void compare(const char *path, int scale) {
  size_t len = 0;
  char *text = kg_test_read_file(path, &len);
  if (!text) return;
  kg_binding b[KG_TEST_MAX_BIND];
  char names[KG_TEST_MAX_BIND][32];
  int nb = kg_test_parse_sizes(text, b, names, scale);
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  kg_program *p = kg_program_load(path, text, len, NULL, b, nb < 0 ? 0 : nb, &diag, &da);
  if (!p) {
    /* a scaled size may break a program's own constraints (e.g. a pooled output too small): skip, but the
     * unscaled sizes must always load */
    CHECKF(scale > 1, "%s: %s", path, diag.msg ? diag.msg : "?");
    kg_arena_free(&da);
    free(text);
    return;
  }
  kg_data d;
  kg_data_init(&d, p, 11);
  double **fast = calloc((size_t)p->noutputs, sizeof(double *)), **slow = calloc((size_t)p->noutputs, sizeof(double *));
  for (int i = 0; i < p->noutputs; i++) {
    fast[i] = malloc(sizeof(double) * (size_t)kg_tensor_numel(p->outputs[i]));
    slow[i] = malloc(sizeof(double) * (size_t)kg_tensor_numel(p->outputs[i]));
  }
  int rf = kg_eval_reference(p, (const float *const *)d.inputs, fast);
  int rs = kg_eval_naive(p, (const float *const *)d.inputs, slow);
  CHECKF(rf == rs, "%s x%d: status %d vs naive %d", path, scale, rf, rs);
  for (int i = 0; i < p->noutputs; i++) {
    int64_t n = kg_tensor_numel(p->outputs[i]), bad = -1;
    for (int64_t k = 0; k < n && bad < 0; k++)
      if (memcmp(&fast[i][k], &slow[i][k], sizeof(double)) != 0) bad = k;
    CHECKF(bad < 0, "%s x%d: %s[%lld] = %.17g, naive %.17g", path, scale, p->outputs[i]->name, (long long)bad,
           bad < 0 ? 0 : fast[i][bad], bad < 0 ? 0 : slow[i][bad]);
    free(fast[i]);
    free(slow[i]);
  }
  free(fast);
  free(slow);
  kg_data_free(&d);
  kg_program_free(p);
  kg_arena_free(&da);
  free(text);
}

int main(void) {
  static const char *const dirs[] = {"te/lib", "tests/programs"};
  int n = 0;
  for (int di = 0; di < 2; di++) {
    DIR *dir = opendir(dirs[di]);
    CHECK(dir != NULL);
    if (!dir) continue;
    struct dirent *de;
    while ((de = readdir(dir))) {
      size_t l = strlen(de->d_name);
      if (l <= 3 || strcmp(de->d_name + l - 3, ".te")) continue;
      char path[512];
      snprintf(path, sizeof path, "%s/%s", dirs[di], de->d_name);
      compare(path, 1);
      compare(path, 3);
      compare(path, 6);
      n++;
    }
    closedir(dir);
  }
  CHECKF(n >= 18, "only %d programs", n);
  TEST_END();
}
