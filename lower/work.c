/* The work of one CUDA kernel, counted from its lowered IR (work.h). */
#include "work.h"
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include "../base/intmath.h"

#define EVAL_DEPTH 64 /* lets nest this deep at most before an index is given up on (then: assumed coalesced) */
/* A serial loop of at most this many iterations without a barrier is unrolled by the CUDA compiler (nvcc unrolls
 * small constant trip counts on its own): counted as unrolled code (its copies' common loads once, contiguous
 * ones as vector accesses, no loop control). */
#define KG_WORK_AUTO_UNROLL 16

typedef struct wctx {
  const kg_lowered *f;
  const kg_launch *L;
  kg_irexpr **lets;          /* by variable id */
  int64_t *env;              /* by variable id: the value an index is evaluated at (0 unless set) */
  unsigned char *busy;       /* by variable id: a let being evaluated (a cycle would be a lowering bug) */
  /* Memos of a let's value (eval) and of whether it depends on the variable asked about (uses), valid while their
   * generation is the current one: each top-level query starts a generation, so a let that several others read
   * is expanded once per query, never once per path through the let graph (which can be exponential) */
  uint32_t gen, *val_gen, ugen, *use_gen;
  int64_t *val;
  unsigned char *val_ok, *use;
  const kg_irvar *tvar[3][8];/* the loop variables bound to threadIdx.x/y/z on the current path (a stage attached
                              * inside another binds the same index again) */
  int ntvar[3];
  const kg_irvar *serial;    /* the innermost serial loop on the path, and its extent */
  int64_t serial_ext;
  int bound[KG_THREAD_COUNT];/* tags bound on the current path */
  double mult;               /* iterations of the loops around the current statement */
  const kg_irvar *unr[16];   /* the unrolled and vectorized loops on the path since the nearest serial loop */
  int64_t unr_ext[16];
  int nunr;
  int64_t ntx, nty, ntz, lanes; /* launched threads per tag, lanes of a warp in use */
  double lanes_avg;          /* threads per warp on average (a partial last warp wastes lanes) */
  unsigned char *touched;    /* by buffer id: 1 read, 2 written */
  double busiest;            /* executions of the busiest store so far */
  kg_kernel_work *w;
} wctx;

static int eval_cond(wctx *W, const kg_irexpr *e, int depth, int64_t *v);

/* The value of INT expression e with variables at W->env (lets expanded); 0 when it has no value here (a load, a
 * float, a division by zero, an overflow, a let cycle). */
static int eval(wctx *W, const kg_irexpr *e, int depth, int64_t *v) {
  if (!e || depth > EVAL_DEPTH) return 0;
  if (depth == 0) W->gen++;
  int64_t a, b, c;
  switch (e->kind) {
    case KG_IRE_INT: *v = e->i; return 1;
    case KG_IRE_VAR: {
      int id = e->var->id;
      if (id < 0 || id >= W->f->n_vars) return 0;
      if (W->lets[id]) {
        if (W->val_gen[id] == W->gen) {
          *v = W->val[id];
          return W->val_ok[id];
        }
        if (W->busy[id]) return 0;
        W->busy[id] = 1;
        int ok = eval(W, W->lets[id], depth + 1, v);
        W->busy[id] = 0;
        W->val_gen[id] = W->gen;
        W->val[id] = ok ? *v : 0;
        W->val_ok[id] = (unsigned char)ok;
        return ok;
      }
      *v = W->env[id];
      return 1;
    }
    case KG_IRE_THREAD:
      *v = 0;
      if (e->tag == KG_THREAD_THREAD_X || e->tag == KG_THREAD_THREAD_Y || e->tag == KG_THREAD_THREAD_Z) {
        /* the lane's index along the tag, kept in the env's spare slots */
        *v = W->env[W->f->n_vars + (e->tag - KG_THREAD_THREAD_X)];
      }
      return 1;
    case KG_IRE_BINARY:
      if (e->ty != KG_TY_INT || !eval(W, e->bin.a, depth + 1, &a) || !eval(W, e->bin.b, depth + 1, &b)) return 0;
      switch (e->bin.op) {
        case KG_OP_ADD: return !__builtin_add_overflow(a, b, v);
        case KG_OP_SUB: return !__builtin_sub_overflow(a, b, v);
        case KG_OP_MUL: return !__builtin_mul_overflow(a, b, v);
        case KG_OP_DIV:
        case KG_OP_MOD:
          if (b == 0 || (a == INT64_MIN && b == -1)) return 0;
          *v = e->bin.op == KG_OP_DIV ? kg_int_floordiv(a, b) : kg_int_floormod(a, b);
          return 1;
        default: return 0;
      }
    case KG_IRE_CALL:
      if (e->ty != KG_TY_INT || e->call.n != 2 || !eval(W, e->call.args[0], depth + 1, &a) ||
          !eval(W, e->call.args[1], depth + 1, &b))
        return 0;
      if (e->call.fn == KG_FN_MIN) *v = a < b ? a : b;
      else if (e->call.fn == KG_FN_MAX) *v = a > b ? a : b;
      else return 0;
      return 1;
    case KG_IRE_SELECT:
      if (e->ty != KG_TY_INT || !eval(W, e->sel.a, depth + 1, &a) || !eval(W, e->sel.b, depth + 1, &b)) return 0;
      /* the condition is usually a bounds check, true at the representative iteration */
      if (!eval_cond(W, e->sel.c, depth + 1, &c)) c = 1;
      *v = c ? a : b;
      return 1;
    default: return 0;
  }
}

/* A comparison of INT expressions, evaluated as eval does. */
static int eval_cond(wctx *W, const kg_irexpr *e, int depth, int64_t *v) {
  int64_t a, b;
  if (!e || e->kind != KG_IRE_BINARY || !eval(W, e->bin.a, depth, &a) || !eval(W, e->bin.b, depth, &b)) return 0;
  switch (e->bin.op) {
    case KG_OP_LT: *v = a < b; return 1;
    case KG_OP_LE: *v = a <= b; return 1;
    case KG_OP_GT: *v = a > b; return 1;
    case KG_OP_GE: *v = a >= b; return 1;
    case KG_OP_EQ: *v = a == b; return 1;
    case KG_OP_NE: *v = a != b; return 1;
    default: return 0;
  }
}

/* Sets the thread indices of lane l of a warp (x fastest). */
static void set_lane(wctx *W, int64_t l) {
  int64_t x = l % W->ntx, y = (l / W->ntx) % W->nty, z = l / (W->ntx * W->nty);
  const int64_t val[3] = {x, y, z};
  for (int t = 0; t < 3; t++) {
    for (int i = 0; i < W->ntvar[t]; i++) W->env[W->tvar[t][i]->id] = val[t];
    W->env[W->f->n_vars + t] = val[t];
  }
}

static void clear_lane(wctx *W) { set_lane(W, 0); }

/* Executions of a statement on the current path: its loops' iterations times the launched extent of every block
 * and thread index the path leaves unbound. */
static double factor(const wctx *W) {
  static const kg_thread_tag tags[] = {KG_THREAD_BLOCK_X,  KG_THREAD_BLOCK_Y,  KG_THREAD_BLOCK_Z,
                                       KG_THREAD_THREAD_X, KG_THREAD_THREAD_Y, KG_THREAD_THREAD_Z};
  double m = W->mult;
  for (size_t i = 0; i < sizeof tags / sizeof *tags; i++)
    if (!W->bound[tags[i]]) m *= (double)W->L->ext[tags[i]];
  return m;
}

/* The addresses (elements) the lanes of one warp touch with access `index`, w floats each: out[0..n). 0 when the
 * index has no value here. */
static int warp_addresses(wctx *W, const kg_irexpr *index, int64_t w, int64_t *out, int *n) {
  *n = 0;
  for (int64_t l = 0; l < W->lanes; l++) {
    set_lane(W, l);
    int64_t a;
    if (!eval(W, index, 0, &a)) {
      clear_lane(W);
      return 0;
    }
    for (int64_t j = 0; j < w; j++) out[(*n)++] = a + j;
  }
  clear_lane(W);
  return 1;
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

/* Distinct 32-byte sectors among n element addresses. */
static int sectors(int64_t *addr, int n) {
  for (int i = 0; i < n; i++) addr[i] = kg_int_floordiv(addr[i], 8);
  qsort(addr, (size_t)n, sizeof *addr, cmp_i64);
  int s = 0;
  for (int i = 0; i < n; i++) s += i == 0 || addr[i] != addr[i - 1];
  return s;
}

/* Wavefronts of one warp access (n words, w per lane): the most distinct words one bank holds over the warp
 * (equal words are one broadcast). A conflict-free 128-bit access of 32 lanes takes 4, as the hardware's
 * quarter-warp phases do; a broadcast takes 1. */
static int wavefronts(const int64_t *addr, int n) {
  int worst = 1;
  for (int bank = 0; bank < 32; bank++) {
    int64_t seen[128];
    int ns = 0;
    for (int i = 0; i < n; i++) {
      if (((addr[i] % 32) + 32) % 32 != bank) continue;
      int dup = 0;
      for (int k = 0; k < ns && !dup; k++) dup = seen[k] == addr[i];
      if (!dup) seen[ns++] = addr[i];
    }
    if (ns > worst) worst = ns;
  }
  return worst;
}

/* Whether e depends on variable v (lets expanded). */
static int uses(wctx *W, const kg_irexpr *e, const kg_irvar *v, int depth) {
  if (!e || depth > EVAL_DEPTH) return 1;
  if (depth == 0) W->ugen++;
  if (e->kind == KG_IRE_VAR) {
    if (e->var == v) return 1;
    int id = e->var->id;
    if (id < 0 || id >= W->f->n_vars || !W->lets[id] || W->busy[id]) return 0;
    if (W->use_gen[id] != W->ugen) {
      W->busy[id] = 1;
      W->use[id] = (unsigned char)uses(W, W->lets[id], v, depth + 1);
      W->busy[id] = 0;
      W->use_gen[id] = W->ugen;
    }
    return W->use[id];
  }
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++)
    if (uses(W, *kids[i], v, depth + 1)) return 1;
  return 0;
}

/* How far index moves (elements) when loop variable v goes from 0 to 1, the rest as they are: 1 with *d, or 0 when
 * the index has no value there or the difference overflows. */
static int step_along(wctx *W, const kg_irexpr *index, const kg_irvar *v, int64_t *d) {
  int64_t a0, a1;
  W->env[v->id] = 1;
  int ok = eval(W, index, 0, &a1);
  W->env[v->id] = 0;
  return ok && eval(W, index, 0, &a0) && !__builtin_sub_overflow(a1, a0, d) && *d != INT64_MIN;
}

/* buf is read (1) or written (2) by the kernel: its compulsory DRAM traffic counts (dram_bytes). */
static void touch(wctx *W, const kg_buffer *buf, int is_store) {
  if (buf->id >= 0 && buf->id < W->f->n_buffers) W->touched[buf->id] |= is_store ? 2 : 1;
}

static void access(wctx *W, kg_buffer *buf, const kg_irexpr *index, int is_store) {
  if (buf->scope == KG_SCOPE_LOCAL) return; /* registers (or the rare local array: its traffic is not modelled) */
  kg_kernel_work *w = W->w;
  double count = factor(W);
  /* One float2/float4 access per 2 or 4 contiguous elements along the innermost unrolled or vectorized loop the
   * index walks with step 1, when every lane's first element is aligned: what the printer emits for a vectorized
   * loop and what the compiler makes of unrolled code. */
  int64_t vw = 1;
  const kg_irvar *vv = NULL;
  for (int i = W->nunr - 1; i >= 0 && !vv; i--) {
    if (!uses(W, index, W->unr[i], 0)) continue;
    int64_t a0, d, ext = W->unr_ext[i], cand = ext % 4 == 0 ? 4 : ext % 2 == 0 ? 2 : 1;
    if (step_along(W, index, W->unr[i], &d) && d == 1 && cand > 1) {
      int aligned = 1;
      for (int64_t l = 0; l < W->lanes && aligned; l++) {
        set_lane(W, l);
        aligned = eval(W, index, 0, &a0) && ((a0 % cand) + cand) % cand == 0;
      }
      clear_lane(W);
      if (aligned) vw = cand, vv = W->unr[i];
    }
  }
  /* a load in unrolled code whose index does not follow an unrolled loop is loaded once for all its copies (the
   * compiler keeps it in a register); the copies that differ are loads issued back to back */
  double distinct = 1;
  for (int i = 0; i < W->nunr; i++) {
    if (W->unr[i] == vv) distinct *= (double)(W->unr_ext[i] / vw);
    else if (is_store || uses(W, index, W->unr[i], 0)) distinct *= (double)W->unr_ext[i];
    else count /= (double)W->unr_ext[i];
  }
  double insts = count / (double)vw, warp_insts = insts / W->lanes_avg;
  int64_t addr[32 * 4];
  int n = 0;
  int known = warp_addresses(W, index, vw, addr, &n);
  w->other_insts += insts;
  if (buf->scope == KG_SCOPE_SHARED) {
    int wf = known ? wavefronts(addr, n) : (int)vw;
    w->sh_insts += insts;
    w->sh_wavefronts += warp_insts * wf;
    /* the conflict degree: wavefronts over the fewest the distinct words need (a cross-thread reduction's own
     * scratch has a fixed, conflict-free pattern and is left out) */
    if (known && strncmp(buf->name, "kg_red", 6) != 0) {
      int distinct = 0;
      for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int k = 0; k < i && !dup; k++) dup = addr[k] == addr[i];
        distinct += !dup;
      }
      int need = (distinct + 31) / 32, degree = (wf + need - 1) / need;
      if (degree > w->bank_degree) {
        w->bank_degree = degree;
        snprintf(w->bank_where, sizeof w->bank_where, "%s %s", buf->name, is_store ? "store" : "load");
      }
    }
    return;
  }
  /* unknown addresses (an index through a load): taken as coalesced */
  double s = known ? sectors(addr, n) : (double)((W->lanes * vw * 4 + 31) / 32);
  if (is_store) {
    w->gst_insts += insts;
    w->gst_sectors += warp_insts * s;
  } else {
    w->gld_insts += insts;
    w->l1_sectors += warp_insts * s; /* L1 serves every sector asked, hit or miss */
    /* L1 keeps what the warp's previous iteration of the innermost serial loop fetched: a load that does not follow
     * that loop refetches nothing, and one that steps less than a sector per iteration fetches a sector every
     * 8/|step| iterations (the rest are hits) */
    if (W->serial && known) {
      if (!uses(W, index, W->serial, 0)) {
        s /= (double)W->serial_ext;
      } else {
        int64_t d;
        int ok = step_along(W, index, W->serial, &d);
        int64_t step = d < 0 ? -d : d;
        if (ok && step == 0) s /= (double)W->serial_ext;
        else if (ok && step < 8) s *= (double)(step * 4) / 32;
      }
    }
    w->gld_sectors += warp_insts * s;
    int mlp = distinct >= 8 ? 8 : distinct < 1 ? 1 : (int)distinct;
    if (mlp > w->mlp) w->mlp = mlp;
    if (4 * vw > w->load_bytes) w->load_bytes = (int)(4 * vw);
  }
  touch(W, buf, is_store);
}

static int is_fmul(const kg_irexpr *e) {
  return e && e->kind == KG_IRE_BINARY && e->ty == KG_TY_F32 && e->bin.op == KG_OP_MUL;
}

/* Counts the arithmetic of e and the memory accesses of its loads. */
static void expr(wctx *W, const kg_irexpr *e) {
  if (!e) return;
  kg_kernel_work *w = W->w;
  double c = factor(W);
  switch (e->kind) {
    case KG_IRE_LOAD:
      access(W, e->load.buf, e->load.index, 0);
      expr(W, e->load.index);
      return;
    case KG_IRE_BINARY:
      if (e->ty == KG_TY_F32 && (e->bin.op == KG_OP_ADD || e->bin.op == KG_OP_SUB) &&
          (is_fmul(e->bin.a) || is_fmul(e->bin.b))) {
        const kg_irexpr *m = is_fmul(e->bin.a) ? e->bin.a : e->bin.b, *o = m == e->bin.a ? e->bin.b : e->bin.a;
        w->fp_insts += c;
        w->flops += 2 * c;
        expr(W, m->bin.a);
        expr(W, m->bin.b);
        expr(W, o);
        return;
      }
      if (e->ty == KG_TY_F32 && e->bin.op == KG_OP_DIV) {
        /* an IEEE divide: a reciprocal on the SFU and a Newton step around it */
        w->sfu_insts += c;
        w->fp_insts += 6 * c;
        w->flops += c;
      } else if (e->ty == KG_TY_F32 || (e->ty == KG_TY_BOOL && e->bin.a && e->bin.a->ty == KG_TY_F32)) {
        w->fp_insts += c;
        if (e->ty == KG_TY_F32) w->flops += c;
      }
      break;
    case KG_IRE_CALL:
      if (e->ty == KG_TY_F32) {
        switch (e->call.fn) {
          case KG_FN_ABS:
          case KG_FN_MAX:
          case KG_FN_MIN: w->fp_insts += c; break;
          case KG_FN_SQRT:
          case KG_FN_RSQRT:
            w->sfu_insts += c;
            w->fp_insts += c;
            break;
          case KG_FN_POW:
            w->sfu_insts += 2 * c;
            w->fp_insts += 8 * c;
            break;
          default: /* exp, log, tanh, erf, sigmoid: a range reduction around the SFU's approximation */
            w->sfu_insts += c;
            w->fp_insts += 4 * c;
            break;
        }
        w->flops += c;
      }
      break;
    case KG_IRE_SELECT:
      if (e->ty == KG_TY_F32) w->fp_insts += c;
      break;
    case KG_IRE_CAST: w->fp_insts += c; break;
    default: break;
  }
  kg_irexpr **kids[KG_IR_MAX_CHILDREN];
  int n = kg_ir_children((kg_irexpr *)e, kids);
  for (int i = 0; i < n; i++) expr(W, *kids[i]);
}

/* A loop's extent: a constant, or at the program's bound sizes (1 when neither). */
static int64_t extent_of(const wctx *W, const kg_irexpr *e) {
  int64_t v;
  if (kg_ir_is_const(e, &v)) return v;
  return kg_ir_eval_sizes(W->f, e, &v) == 0 ? v : 1;
}

static void stmt(wctx *W, kg_irstmt *s) {
  if (!s) return;
  kg_kernel_work *w = W->w;
  switch (s->kind) {
    case KG_IRS_SEQ:
      for (int i = 0; i < s->seq.n; i++) stmt(W, s->seq.items[i]);
      break;
    case KG_IRS_LET:
      expr(W, s->let.value);
      if (s->let.var->id >= 0 && s->let.var->id < W->f->n_vars) W->lets[s->let.var->id] = s->let.value;
      break;
    case KG_IRS_FOR: {
      int64_t ext = extent_of(W, s->loop.extent);
      if (ext <= 0) break;
      wctx saved = *W;
      kg_thread_tag tag = s->loop.kind == KG_LOOP_BOUND ? s->loop.tag : KG_THREAD_NONE;
      if (tag != KG_THREAD_NONE && tag != KG_THREAD_VTHREAD) {
        /* the index's threads run it: a tag bound again further in (an attached stage's loop) adds no executions */
        int again = W->bound[tag];
        W->bound[tag] = 1;
        if (kg_thread_tag_is_thread(tag)) {
          int t = tag - KG_THREAD_THREAD_X;
          if (W->ntvar[t] < 8) W->tvar[t][W->ntvar[t]++] = s->loop.var;
        }
        if (again) {
          stmt(W, s->loop.body);
          saved.busiest = W->busiest;
          *W = saved;
          break;
        }
      } else if (s->loop.kind == KG_LOOP_UNROLLED || s->loop.kind == KG_LOOP_VECTORIZED ||
                 (s->loop.kind == KG_LOOP_SERIAL && ext <= KG_WORK_AUTO_UNROLL && !kg_ir_contains_sync(s->loop.body))) {
        if (W->nunr < 16) {
          W->unr[W->nunr] = s->loop.var;
          W->unr_ext[W->nunr++] = ext;
        }
      } else { /* serial (and vthread: a serial loop around its sub-tile) */
        w->other_insts += factor(W) * (double)ext;
        W->nunr = 0;
        W->serial = s->loop.var;
        W->serial_ext = ext;
      }
      if (s->loop.pipeline > w->pipeline) w->pipeline = s->loop.pipeline;
      W->mult *= (double)ext;
      stmt(W, s->loop.body);
      /* what the walk learnt below is kept; the path's state is restored */
      saved.busiest = W->busiest;
      *W = saved;
      break;
    }
    case KG_IRS_IF:
      expr(W, s->cond.cond);
      stmt(W, s->cond.then);
      stmt(W, s->cond.otherwise);
      break;
    case KG_IRS_STORE: {
      expr(W, s->store.value);
      expr(W, s->store.index);
      access(W, s->store.buf, s->store.index, 1);
      double c = factor(W);
      if (c > W->busiest) {
        W->busiest = c;
        int acc = kg_ir_reads(s->store.value, s->store.buf);
        int64_t chains = s->store.buf->scope == KG_SCOPE_LOCAL ? s->store.buf->size : 1;
        w->ilp = !acc ? 4 : chains < 1 ? 1 : chains > 64 ? 64 : (int)chains;
      }
      break;
    }
    case KG_IRS_ALLOC: stmt(W, s->alloc.body); break;
    case KG_IRS_BARRIER: w->barriers += factor(W) / ((double)w->blocks * (double)w->threads); break;
    case KG_IRS_MMA: {
      double warps = factor(W) / 32;
      w->mma_insts += warps;
      /* a TF32 m16n8k8 has half the FMAs of an m16n8k16 and takes the tensor cores as long (half their FMA rate),
       * so both count as one step */
      w->flops += warps * 2 * 16 * 8 * kg_mma_kstep(s->mma.dtype);
      /* accumulators in registers (a warp's tiles, lower.c): the steps are independent chains, one per tile, and
       * cost no moves; in the stage's buffer, each step loads and stores its four */
      const int regs = s->mma.c->scope == KG_SCOPE_LOCAL;
      w->other_insts += factor(W) * (regs ? 1 : 10);
      double c = factor(W);
      if (c > W->busiest) {
        W->busiest = c;
        int64_t chains = regs ? s->mma.c->size / 4 : 1;
        w->ilp = chains < 1 ? 1 : chains > 64 ? 64 : (int)chains;
      }
      break;
    }
    case KG_IRS_LDMATRIX: {
      /* one warp instruction; each matrix is a phase of 8 rows of 4 words, conflict-free when the rows' 16 bytes
       * fall on 8 distinct groups of 4 banks */
      expr(W, s->ldm.src_index);
      double warps = factor(W) / 32;
      int64_t addr[32 * 4];
      int n = 0, wf = 0, known = warp_addresses(W, s->ldm.src_index, 1, addr, &n) && n == 32;
      for (int m = 0; m < s->ldm.count; m++) {
        if (!known) {
          wf++;
          continue;
        }
        int64_t words[32];
        const int64_t eb = kg_dtype_size[s->ldm.src->dtype]; /* a row is 16 bytes: 4 words */
        for (int r = 0; r < 8; r++)
          for (int q = 0; q < 4; q++) words[4 * r + q] = kg_int_floordiv(addr[8 * m + r] * eb, 4) + q;
        wf += wavefronts(words, 32);
      }
      w->sh_insts += factor(W);
      w->sh_wavefronts += warps * wf;
      w->other_insts += factor(W) * (1 + s->ldm.count);
      int degree = (wf + s->ldm.count - 1) / s->ldm.count;
      if (known && degree > w->bank_degree) {
        w->bank_degree = degree;
        snprintf(w->bank_where, sizeof w->bank_where, "%s ldmatrix", s->ldm.src->name);
      }
      break;
    }
    case KG_IRS_BFDOT: {
      double dots = factor(W) * (double)s->bfdot.rows * (double)(s->bfdot.cols / 16) * (double)(s->bfdot.k / 2);
      w->flops += dots * 16 * 4;
      /* per pair of k: a broadcast per row; per vector of columns a load (stored in pairs) or two and a permute */
      double per_vec = s->bfdot.b_pairs ? 1 : 3;
      w->other_insts += dots + factor(W) * (double)(s->bfdot.k / 2) *
                                   ((double)s->bfdot.rows + per_vec * (double)(s->bfdot.cols / 16));
      break;
    }
    case KG_IRS_TSTORE: {
      /* n vector loads from the block (in L1 or registers), about n log2 n shuffles, n vector stores of n
       * contiguous elements each: one store instruction per n elements of dst */
      const double n = s->tstore.n, lg = n == 16 ? 4 : n == 8 ? 3 : 2;
      expr(W, s->tstore.dst_index);
      w->other_insts += factor(W) * n * (2 + lg);
      touch(W, s->tstore.dst, 1);
      break;
    }
    case KG_IRS_ALLREDUCE: {
      int steps = 0;
      for (int64_t e = 1; e < s->allreduce.extent; e *= 2) steps++;
      w->other_insts += factor(W) * 2 * steps;
      if (s->allreduce.how == KG_ALLREDUCE_WARPS || s->allreduce.how == KG_ALLREDUCE_SHARED)
        w->barriers += 2 * factor(W) / ((double)w->blocks * (double)w->threads);
      break;
    }
    default: break;
  }
}

int kg_lower_kernel_work(const kg_lowered *f, int k, kg_kernel_work *w) {
  memset(w, 0, sizeof *w);
  if (!f || !f->body || f->body->kind != KG_IRS_SEQ || k < 0 || k >= f->body->seq.n || !f->launch || k >= f->nlaunch ||
      !f->launch[k].ok)
    return -1;
  const kg_launch *L = &f->launch[k];
  wctx W;
  memset(&W, 0, sizeof W);
  W.f = f;
  W.L = L;
  int nv = f->n_vars > 0 ? f->n_vars : 1;
  W.lets = calloc((size_t)nv, sizeof *W.lets);
  W.env = calloc((size_t)nv + 3, sizeof *W.env);
  W.busy = calloc((size_t)nv, 1);
  W.touched = calloc((size_t)(f->n_buffers > 0 ? f->n_buffers : 1), 1);
  W.val_gen = calloc((size_t)nv, sizeof *W.val_gen);
  W.use_gen = calloc((size_t)nv, sizeof *W.use_gen);
  W.val = calloc((size_t)nv, sizeof *W.val);
  W.val_ok = calloc((size_t)nv, 1);
  W.use = calloc((size_t)nv, 1);
  if (!W.lets || !W.env || !W.busy || !W.touched || !W.val_gen || !W.use_gen || !W.val || !W.val_ok || !W.use) {
    free(W.lets), free(W.env), free(W.busy), free(W.touched);
    free(W.val_gen), free(W.use_gen), free(W.val), free(W.val_ok), free(W.use);
    return -1;
  }
  /* dynamic sizes at the program's bound values: extents and indices that follow them */
  for (int i = 0; i < f->nsize_vars; i++)
    if (f->size_vars[i]->id >= 0 && f->size_vars[i]->id < f->n_vars) W.env[f->size_vars[i]->id] = f->size_value[i];
  W.ntx = L->ext[KG_THREAD_THREAD_X];
  W.nty = L->ext[KG_THREAD_THREAD_Y];
  W.ntz = L->ext[KG_THREAD_THREAD_Z];
  w->threads = W.ntx * W.nty * W.ntz;
  w->blocks = L->ext[KG_THREAD_BLOCK_X] * L->ext[KG_THREAD_BLOCK_Y] * L->ext[KG_THREAD_BLOCK_Z];
  W.lanes = w->threads < 32 ? w->threads : 32;
  W.lanes_avg = (double)w->threads / (double)((w->threads + 31) / 32);
  W.mult = 1;
  W.w = w;
  w->ilp = 4;
  w->mlp = 1;
  stmt(&W, f->body->seq.items[k]);
  for (int i = 0; i < f->nparams; i++) {
    const kg_buffer *b = f->params[i];
    if (b->id >= 0 && b->id < f->n_buffers && W.touched[b->id])
      w->dram_bytes += 4.0 * (double)b->size * ((W.touched[b->id] & 1) + ((W.touched[b->id] & 2) >> 1));
  }
  for (int i = 0; i < f->ntemps; i++) {
    const kg_buffer *b = f->temps[i];
    if (b->id >= 0 && b->id < f->n_buffers && W.touched[b->id])
      w->dram_bytes += 4.0 * (double)b->size * ((W.touched[b->id] & 1) + ((W.touched[b->id] & 2) >> 1));
  }
  if (w->load_bytes == 0) w->load_bytes = 4;
  free(W.lets);
  free(W.env);
  free(W.busy);
  free(W.touched);
  free(W.val_gen), free(W.use_gen), free(W.val), free(W.val_ok), free(W.use);
  return 0;
}

int kg_lower_bank_conflicts(const kg_lowered *f, int k, char *where, size_t wlen) {
  kg_kernel_work w;
  int ok = kg_lower_kernel_work(f, k, &w) == 0;
  if (where && wlen) snprintf(where, wlen, "%s", ok && w.bank_degree ? w.bank_where : "");
  return ok ? w.bank_degree : 0;
}
