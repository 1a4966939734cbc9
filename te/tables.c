/* The printable tables behind te.h's X-macro lists: one list feeds both the enum and its names. */
#include <math.h>
#include "te.h"
#include "../base/half.h"

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

const char *const kg_dtype_names[KG_DT_COUNT] = {
#define X(n, s, sz) s,
    KG_DTYPES(X)
#undef X
};

const int kg_dtype_size[KG_DT_COUNT] = {
#define X(n, s, sz) sz,
    KG_DTYPES(X)
#undef X
};

double kg_dtype_round(kg_dtype t, double v) {
  switch (t) {
  case KG_DT_F16: return kg_round_f16(v);
  case KG_DT_BF16: return kg_round_bf16(v);
  default: return v; /* the reference keeps f32 tensors in double (te.h: kg_eval_reference) */
  }
}

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
