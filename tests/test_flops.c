/* kg_program_flops / kg_program_bytes: exact counts for workloads whose arithmetic is known by hand, and the
 * counting rules (multiply-add = 2, reduction combine per term, select 0, f32 compare 1, index math 0). */
#include "../runtime/measure.h"
#include "testlib.h"
#include "testutil.h"

static void test_matmul(void) {
  kg_binding b[] = {{"M", 33}, {"N", 20}, {"K", 17}};
  kg_program *p = kg_test_load_lib("matmul", b, 3);
  CHECK(p != NULL);
  if (!p) return;
  /* one multiply and one add (the combine) per (i, j, k) */
  CHECK(kg_program_flops(p) == 2.0 * 33 * 20 * 17);
  CHECK(kg_program_bytes(p) == 4.0 * (33 * 17 + 17 * 20 + 33 * 20));
  kg_program_free(p);
}

static void test_softmax(void) {
  kg_binding b[] = {{"N", 7}, {"D", 33}};
  kg_program *p = kg_test_load_lib("softmax", b, 2);
  CHECK(p != NULL);
  if (!p) return;
  /* max combine (1) + subtract and exp (2) + sum combine (1) + divide (1) per element */
  CHECK(kg_program_flops(p) == 5.0 * 7 * 33);
  CHECK(kg_program_bytes(p) == 4.0 * (2 * 7 * 33));
  kg_program_free(p);
}

static void test_rules(void) {
  kg_binding b[] = {{"N", 10}};
  /* f32 compare 1, select 0, subtraction 1 */
  kg_program *p = kg_test_load("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = select(X[i] > 0.0, X[i], 0.0 - X[i]) }", b, 1);
  CHECK(p != NULL);
  if (p) CHECK(kg_program_flops(p) == 2.0 * 10);
  kg_program_free(p);
  /* an index comparison and index arithmetic are not f32 work; the multiply is */
  p = kg_test_load("def f(X: f32[N]) -> (Y: f32[N]) { Y[i] = select(i < 3, X[i], 2.0 * X[(i + 1) % N]) }", b, 1);
  CHECK(p != NULL);
  if (p) CHECK(kg_program_flops(p) == 1.0 * 10);
  kg_program_free(p);
  /* a call counts one, whatever it costs; a copy counts nothing */
  p = kg_test_load("def f(X: f32[N]) -> (Y: f32[N], Z: f32[N]) { Y[i] = exp(X[i]) Z[i] = X[i] }", b, 1);
  CHECK(p != NULL);
  if (p) {
    CHECK(kg_program_flops(p) == 1.0 * 10);
    CHECK(kg_program_bytes(p) == 4.0 * 30);
  }
  kg_program_free(p);
}

int main(void) {
  test_matmul();
  test_softmax();
  test_rules();
  TEST_END();
}
