/* The workload's arithmetic and compulsory memory traffic, for GFLOP/s and GB/s in measurements.
 *
 * FLOPs are counted from the program's stages (te/stages.c), which is what every schedule of the program computes
 * (scheduling never changes the arithmetic, only its order and placement), times each stage's full domain:
 *   stage flops = (f32 operations in the body + 1 per reduction combine) x spatial points x reduction points.
 * Counted as one each: an f32 +, -, *, /, %, unary minus; a comparison with an f32 operand; a call (exp, max,
 * sqrt, ...), whatever its hardware cost. Counted as zero: select (it chooses, it does not compute; its condition
 * is counted), integer index arithmetic and comparisons of indices (address computation and guards), reads and
 * the conversion of an index to f32. A multiply-add is two operations, so matmul is 2*M*N*K (the convention of
 * cuBLAS and every GEMM benchmark); the combine with the reduction's identity is counted once per term (K per
 * output, not K-1), which keeps the count a plain product of the domains.
 *
 * Bytes are the compulsory traffic: every input read once and every output written once, 4 bytes per element.
 *
 * Requires: a checked program with its stages built (kg_program_load did both). */
#include <assert.h>
#include "te.h"

static int is_arith(kg_op op) {
  return op == KG_OP_ADD || op == KG_OP_SUB || op == KG_OP_MUL || op == KG_OP_DIV || op == KG_OP_MOD;
}

static int is_compare(kg_op op) {
  return op == KG_OP_LT || op == KG_OP_LE || op == KG_OP_GT || op == KG_OP_GE || op == KG_OP_EQ || op == KG_OP_NE;
}

static double expr_flops(const kg_expr *e) {
  if (!e) return 0;
  switch (e->kind) {
  case KG_EXPR_NUM:
  case KG_EXPR_NAME:
  case KG_EXPR_IVAR:
  case KG_EXPR_SIZE:
  case KG_EXPR_READ: /* the index expressions are address arithmetic */
    return 0;
  case KG_EXPR_UNARY:
    return (e->op.op == KG_OP_NEG && e->ty == KG_TY_F32 ? 1 : 0) + expr_flops(e->op.a);
  case KG_EXPR_BINARY: {
    double own = 0;
    if (is_arith(e->op.op) && e->ty == KG_TY_F32) own = 1;
    if (is_compare(e->op.op) && (e->op.a->ty == KG_TY_F32 || e->op.b->ty == KG_TY_F32)) own = 1;
    return own + expr_flops(e->op.a) + expr_flops(e->op.b);
  }
  case KG_EXPR_CALL: {
    /* a conversion is a rounding, not arithmetic the workload asks for */
    double n = e->call.fn == KG_FN_SELECT || e->call.fn == KG_FN_F32 || e->call.fn == KG_FN_F16 ||
                       e->call.fn == KG_FN_BF16
                   ? 0
                   : 1;
    for (int i = 0; i < e->call.n; i++) n += expr_flops(e->call.args[i]);
    return n;
  }
  case KG_EXPR_REDUCE:
    /* stage bodies hold no reductions (stages.c extracts them into stages of their own) */
    assert(!"reduction inside a stage body");
    return 0;
  }
  return 0;
}

double kg_program_flops(const kg_program *p) {
  double total = 0;
  for (int s = 0; s < p->nstages; s++) {
    const kg_stage *st = p->stages[s];
    double points = (double)kg_tensor_numel(st->out);
    for (int r = 0; r < st->nrax; r++) points *= (double)st->rax[r]->extent;
    double per_point = expr_flops(st->body) + (st->red != KG_RED_NONE ? 1 : 0);
    total += per_point * points;
  }
  return total;
}

double kg_program_bytes(const kg_program *p) {
  double bytes = 0;
  for (int i = 0; i < p->ninputs; i++)
    bytes += (double)kg_dtype_size[p->inputs[i]->dtype] * (double)kg_tensor_numel(p->inputs[i]);
  for (int i = 0; i < p->noutputs; i++)
    bytes += (double)kg_dtype_size[p->outputs[i]->dtype] * (double)kg_tensor_numel(p->outputs[i]);
  return bytes;
}
