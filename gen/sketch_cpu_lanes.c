/* Vector lanes over a spatial axis other than the innermost (see sketch_cpu_lanes.h). A convolution
 * Y[n,f,y,x] = sum P[n,c,y+r,x+s] * K[f,c,r,s] vectorized along x reads P at unaligned offsets and 56-wide rows
 * leave partial vectors; along f, 16 output channels are one vector of pre-packed weights K[c,r,s,f] and each
 * input value is broadcast to them, which is the register tile of a matmul (oneDNN's direct convolution). */
#include <stdio.h>
#include <string.h>
#include "sketch_cpu_lanes.h"

/* The dimension of read r indexed by exactly ivar v when no other dimension uses v; -1 otherwise. */
static int lane_dim(const kg_expr *r, const kg_ivar *v) {
  int d = -1;
  for (int i = 0; i < r->read.n; i++) {
    const kg_expr *e = r->read.idx[i];
    if (e->kind == KG_EXPR_IVAR && e->var.iv == v) {
      if (d >= 0) return -1;
      d = i;
    } else if (kg_expr_uses_ivar(e, v)) {
      return -1;
    }
  }
  return d;
}

/* Visits the reads of e (not those in indices): fn returns nonzero to stop. */
typedef int (*read_fn)(const kg_expr *read, void *ctx);
static int each_read(const kg_expr *e, read_fn fn, void *ctx) {
  if (!e) return 0;
  if (e->kind == KG_EXPR_READ) return fn(e, ctx);
  int n = kg_expr_nchildren(e);
  for (int i = 0; i < n; i++)
    if (each_read(*kg_expr_child((kg_expr *)e, i), fn, ctx)) return 1;
  return 0;
}

typedef struct lane_scan {
  const kg_ivar *v;
  int packable, broadcast;
} lane_scan;

static int scan_read(const kg_expr *r, void *ctx) {
  lane_scan *sc = ctx;
  int d = lane_dim(r, sc->v);
  if (d >= 0 && d < r->read.n - 1) sc->packable = 1;
  int uses = 0;
  for (int i = 0; i < r->read.n; i++) uses |= kg_expr_uses_ivar(r->read.idx[i], sc->v);
  if (!uses) sc->broadcast = 1;
  return 0;
}

int kg_cpu_lane_axes(const kg_sstage *h, int64_t *out, int max) {
  int n = 0;
  for (int a = 0; a < h->nax - 1 && n < max; a++) {
    if (h->roots[a]->extent < 8) continue; /* fewer channels than half a vector */
    lane_scan sc = {h->ax[a], 0, 0};
    each_read(h->body, scan_read, &sc);
    if (sc.packable && sc.broadcast) out[n++] = a;
  }
  return n;
}

typedef struct pack_ctx {
  kg_builder *b;
  kg_sstage *reader;
  const kg_ivar *v;
  const kg_tensor *done[8];
  int ndone;
} pack_ctx;

/* Packs the tensor of read r (when its lane dimension is not its last) into a local copy at root, that
 * dimension moved innermost. */
static int pack_read(const kg_expr *r, void *ctx) {
  pack_ctx *pc = ctx;
  int d = lane_dim(r, pc->v);
  if (d < 0 || d == r->read.n - 1 || r->read.n > KG_STEP_MAX_NAMES) return 0;
  for (int i = 0; i < pc->ndone; i++)
    if (pc->done[i] == r->read.tensor) return 0;
  if (pc->ndone == (int)(sizeof pc->done / sizeof pc->done[0])) return 0;
  pc->done[pc->ndone++] = r->read.tensor;
  /* the copy runs once per call, at root: its outer loop parallel, the lane dimension vectorized */
  kg_builder_pack(pc->b, r->read.tensor->name, pc->reader, &(kg_pack){.inner = d, .parallel = 1});
  return pc->b->failed;
}

kg_sstage *kg_cpu_lanes_prepare(kg_builder *b, kg_sstage *h, int lane, int *perm) {
  kg_sstage *a = kg_builder_cache(b, KG_STEP_CACHE_WRITE, h->name, "local", NULL);
  if (!a) {
    b->failed = 1;
    return NULL;
  }
  const char *names[KG_STEP_MAX_NAMES];
  int k = 0;
  if (a->nax > KG_STEP_MAX_NAMES) {
    kg_builder_fail(b, "stage %s: too many axes", a->name);
    return NULL;
  }
  for (int i = 0; i < a->nax; i++)
    if (i != lane) perm[k] = i, names[k++] = a->ax[i]->name;
  perm[k] = lane;
  names[k++] = a->ax[lane]->name;
  if (kg_builder_step(b, KG_STEP_REORDER_STORAGE, a->name, names, k, 0, 0, 0)) return NULL;
  pack_ctx pc = {b, a, a->ax[a->nax - 1], {0}, 0};
  each_read(a->body, pack_read, &pc);
  return b->failed ? NULL : a;
}
