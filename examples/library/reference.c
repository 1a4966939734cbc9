/* A program using libkgen itself, built against an installed kgen (examples/cmake and examples/make build it): it
 * loads a def from text, evaluates kgen's reference interpreter on it, and checks the result against a plain C
 * loop; it also makes and frees an XGBoost cost model, so that the link needs libkgen's private dependencies. Built
 * with nothing but the installed tree:
 *   cc -I$PREFIX/include reference.c $(pkg-config --libs --static kgen)      (or CMake's kgen::kgen)
 * Exit status 0 when the reference matches. */
#include <kgen.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char src[] = "def axpy(X: f32[N], Y: f32[N]) -> (Z: f32[N]) {\n"
                          "  Z[i] = 3.0 * X[i] + Y[i]\n"
                          "}\n";

int main(void) {
  enum { N = 100 };
  kg_binding b = {"N", N};
  kg_arena da;
  kg_arena_init(&da);
  kg_diag diag = {0};
  kg_program *p = kg_program_load("axpy.te", src, strlen(src), "axpy", &b, 1, &diag, &da);
  if (!p) {
    fprintf(stderr, "%s\n", diag.msg ? diag.msg : "cannot load the program");
    return 1;
  }
  float x[N], y[N];
  double z[N];
  for (int i = 0; i < N; i++) {
    x[i] = (float)i * 0.5f;
    y[i] = 1.0f - (float)i;
  }
  const float *in[] = {x, y};
  double *out[] = {z};
  int bad = kg_eval_reference(p, in, out) != 0;
  for (int i = 0; i < N && !bad; i++)
    if (fabs(z[i] - (3.0 * x[i] + y[i])) > 1e-5) {
      fprintf(stderr, "Z[%d] = %g, want %g\n", i, z[i], 3.0 * x[i] + y[i]);
      bad = 1;
    }
  kg_model *m = kg_model_new(KG_MODEL_XGB, 1);
  if (!m) {
    fprintf(stderr, "cannot make a cost model\n");
    bad = 1;
  }
  kg_model_free(m);
  kg_program_free(p);
  kg_arena_free(&da);
  printf("kgen %s: the reference of axpy %s\n", KGEN_VERSION, bad ? "DIFFERS" : "matches");
  return bad;
}
