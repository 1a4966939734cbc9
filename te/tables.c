/* The printable tables behind te.h's X-macro lists: one list feeds both the enum and its names. */
#include <math.h>
#include "te.h"

const char *const kg_op_names[KG_OP_COUNT] = {
#define X(n, s) s,
    KG_OPS(X)
#undef X
};

const char *const kg_func_names[KG_FN_COUNT] = {
#define X(n, s, a) s,
    KG_FUNCS(X)
#undef X
};

const int kg_func_arity[KG_FN_COUNT] = {
#define X(n, s, a) a,
    KG_FUNCS(X)
#undef X
};

const char *const kg_reducer_names[KG_RED_COUNT] = {
    "none",
#define X(n, s) s,
    KG_REDUCERS(X)
#undef X
};

double kg_reducer_identity(kg_reducer r) {
  switch (r) {
  case KG_RED_SUM: return 0.0;
  case KG_RED_PROD: return 1.0;
  case KG_RED_MAX: return -INFINITY;
  case KG_RED_MIN: return INFINITY;
  default: return 0.0;
  }
}
