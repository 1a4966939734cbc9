/* The schedule object: the default schedule of a program, lookups, attachment bookkeeping and the dump. */
#include "sched_impl.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "../base/strbuf.h"

const char *const kg_scope_names[] = {"global", "shared", "local"};
const char *const kg_loop_kind_names[] = {"serial", "parallel", "vectorized", "unrolled", "bound"};
const char *const kg_thread_tag_names[KG_THREAD_COUNT] = {
    "none",
#define X(n, s) s,
    KG_THREAD_TAGS(X)
#undef X
};

int kg_sched_fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

kg_iter *kg_sched_new_iter(kg_schedule *s, kg_sstage *st, const char *name, int64_t extent, int is_reduce,
                           kg_iter_origin origin) {
  kg_iter *it = KG_NEW(&s->arena, kg_iter);
  it->name = kg_arena_strdup(&s->arena, name);
  it->id = st->nall;
  it->is_reduce = is_reduce;
  it->extent = extent;
  it->origin = origin;
  it->root_axis = -1;
  it->kind = KG_LOOP_SERIAL;
  it->tag = KG_THREAD_NONE;
  KG_PUSH(&s->arena, st->all, st->nall, st->capall, it);
  return it;
}

void kg_sched_reset_roots(kg_schedule *s, kg_sstage *st) {
  int n = st->nax + st->nrax;
  st->all = NULL;
  st->nall = st->capall = 0;
  st->leaves = NULL;
  st->nleaves = st->capleaves = 0;
  st->roots = KG_NEW_ARRAY(&s->arena, kg_iter *, n > 0 ? n : 1);
  for (int a = 0; a < n; a++) {
    int red = a >= st->nax;
    kg_ivar *iv = kg_sstage_axis(st, a);
    int64_t extent = red ? iv->extent : st->out->shape[a];
    kg_iter *it = kg_sched_new_iter(s, st, iv->name, extent, red, KG_ITER_ROOT);
    it->root_axis = a;
    st->roots[a] = it;
    KG_PUSH(&s->arena, st->leaves, st->nleaves, st->capleaves, it);
  }
}

void kg_sched_insert_stage(kg_schedule *s, kg_sstage *st, int pos) {
  KG_PUSH(&s->arena, s->stages, s->nstages, s->capstages, st);
  memmove(&s->stages[pos + 1], &s->stages[pos], sizeof(*s->stages) * (size_t)(s->nstages - 1 - pos));
  s->stages[pos] = st;
  for (int i = 0; i < s->nstages; i++) s->stages[i]->id = i;
}

kg_schedule *kg_schedule_new(const kg_program *p) {
  kg_arena a;
  kg_arena_init(&a);
  kg_schedule *s = KG_NEW(&a, kg_schedule);
  s->arena = a;
  s->prog = p;
  kg_trace_init(&s->trace);
  s->n_ivars = p->n_ivars;
  s->n_tensors = p->ntensors;
  for (int i = 0; i < p->nstages; i++) {
    const kg_stage *ps = p->stages[i];
    kg_sstage *st = KG_NEW(&s->arena, kg_sstage);
    st->name = ps->name;
    st->origin = KG_ORIGIN_PROGRAM;
    st->out = ps->out;
    st->ax = ps->ax;
    st->nax = ps->nax;
    st->rax = ps->rax;
    st->nrax = ps->nrax;
    st->red = ps->red;
    st->body = ps->body;
    st->is_output = ps->out->kind == KG_TENSOR_OUTPUT;
    st->scope = KG_SCOPE_GLOBAL;
    st->attach = KG_ATTACH_ROOT;
    kg_sched_reset_roots(s, st);
    kg_sched_insert_stage(s, st, s->nstages);
  }
  return s;
}

void kg_schedule_free(kg_schedule *s) {
  if (!s) return;
  kg_trace_free(&s->trace);
  /* s itself lives in its arena: copy the arena out before releasing it. */
  kg_arena a = s->arena;
  kg_arena_free(&a);
}

kg_sstage *kg_schedule_find_stage(const kg_schedule *s, const char *name) {
  for (int i = 0; i < s->nstages; i++)
    if (strcmp(s->stages[i]->name, name) == 0) return s->stages[i];
  return NULL;
}

kg_iter *kg_sstage_find_iter(const kg_sstage *st, const char *name) {
  for (int i = 0; i < st->nall; i++)
    if (strcmp(st->all[i]->name, name) == 0) return st->all[i];
  return NULL;
}

int kg_sstage_leaf_index(const kg_sstage *st, const kg_iter *it) {
  for (int i = 0; i < st->nleaves; i++)
    if (st->leaves[i] == it) return i;
  return -1;
}

kg_ivar *kg_sstage_axis(const kg_sstage *st, int r) { return r < st->nax ? st->ax[r] : st->rax[r - st->nax]; }

kg_sstage *kg_sched_attached_at(const kg_schedule *s, const kg_sstage *st, const kg_iter *it) {
  for (int i = 0; i < s->nstages; i++) {
    kg_sstage *x = s->stages[i];
    if (x->attach == KG_ATTACH_AT && x->attach_stage == st && (!it || x->attach_iter == it)) return x;
  }
  return NULL;
}

int kg_sched_untransformed(const kg_sstage *st) {
  if (st->nleaves != st->nax + st->nrax) return 0;
  for (int l = 0; l < st->nleaves; l++)
    if (st->leaves[l] != st->roots[l] || st->leaves[l]->kind != KG_LOOP_SERIAL) return 0;
  return 1;
}

kg_sstage *kg_sched_stage_of_tensor(const kg_schedule *s, const kg_tensor *t) {
  for (int i = 0; i < s->nstages; i++)
    if (s->stages[i]->out == t) return s->stages[i];
  return NULL;
}

kg_tensor *kg_sched_find_tensor(const kg_schedule *s, const char *name) {
  for (int i = 0; i < s->nstages; i++)
    if (strcmp(s->stages[i]->out->name, name) == 0) return s->stages[i]->out;
  for (int i = 0; i < s->prog->ninputs; i++)
    if (strcmp(s->prog->inputs[i]->name, name) == 0) return s->prog->inputs[i];
  return NULL;
}

int kg_sched_expr_reads(const kg_expr *e, const kg_tensor *t) {
  if (!e) return 0;
  if (e->kind == KG_EXPR_READ && e->read.tensor == t) return 1;
  int n = kg_expr_nchildren(e);
  for (int i = 0; i < n; i++)
    if (kg_sched_expr_reads(*kg_expr_child((kg_expr *)e, i), t)) return 1;
  return 0;
}

int kg_sched_is_inlined(const kg_sstage *st, const kg_sched_hyp *h) {
  if (h && h->stage == st) return h->inlined;
  return st->attach == KG_ATTACH_INLINE;
}

/* Does r read t directly, or through a chain of inlined stages? */
static int reads_through(const kg_schedule *s, const kg_sstage *r, const kg_tensor *t, const kg_sched_hyp *h,
                         int depth) {
  if (kg_sched_expr_reads(r->body, t)) return 1;
  if (depth > s->nstages) return 0; /* producers come first, so chains are shorter than this */
  for (int i = 0; i < r->id && i < s->nstages; i++) {
    const kg_sstage *y = s->stages[i];
    if (y != r && kg_sched_is_inlined(y, h) && kg_sched_expr_reads(r->body, y->out) &&
        reads_through(s, y, t, h, depth + 1))
      return 1;
  }
  return 0;
}

int kg_sched_consumers(const kg_schedule *s, const kg_sstage *x, const kg_sched_hyp *h, const kg_sstage **out,
                       int max) {
  int n = 0;
  for (int i = 0; i < s->nstages; i++) {
    const kg_sstage *r = s->stages[i];
    if (r == x || kg_sched_is_inlined(r, h) || !reads_through(s, r, x->out, h, 0)) continue;
    if (n < max) out[n] = r;
    n++;
  }
  return n;
}

int kg_sched_nested_in(const kg_sstage *x, const kg_sstage *c, const kg_iter *l, const kg_sched_hyp *h) {
  int li = kg_sstage_leaf_index(c, l);
  for (int guard = 0; li >= 0 && x && x->attach == KG_ATTACH_AT && !(h && h->stage == x) && guard < 1 << 16;
       guard++) {
    if (x->attach_stage == c) return kg_sstage_leaf_index(c, x->attach_iter) >= li;
    x = x->attach_stage;
  }
  return 0;
}

const kg_sstage *kg_sched_attach_conflict(const kg_schedule *s, const kg_sstage *p, const kg_sstage *c,
                                          const kg_iter *l, const kg_sched_hyp *h) {
  const kg_sstage *other = NULL;
  int inside = 0;
  for (int i = 0; i < s->nstages; i++) {
    const kg_sstage *r = s->stages[i];
    if (r == p || kg_sched_is_inlined(r, h) || !reads_through(s, r, p->out, h, 0)) continue;
    if (r == c || kg_sched_nested_in(r, c, l, h)) inside = 1;
    else if (!other) other = r;
  }
  return inside ? other : c;
}

const kg_sstage *kg_sched_reads_attached(const kg_schedule *s, const kg_sstage *st) {
  for (int i = 0; i < s->nstages; i++) {
    const kg_sstage *x = s->stages[i];
    if (x != st && x->attach == KG_ATTACH_AT && x->attach_stage != st && reads_through(s, st, x->out, NULL, 0))
      return x;
  }
  return NULL;
}

const kg_sstage *kg_sched_broken_attachment(const kg_schedule *s, const kg_sched_hyp *h) {
  for (int i = 0; i < s->nstages; i++) {
    const kg_sstage *x = s->stages[i];
    if (x->attach != KG_ATTACH_AT || (h && h->stage == x)) continue;
    if (kg_sched_attach_conflict(s, x, x->attach_stage, x->attach_iter, h)) return x;
    if (kg_sched_is_inlined(x->attach_stage, h)) return x;
  }
  return NULL;
}

const kg_sstage *kg_schedule_find_broken_attachment(const kg_schedule *s) {
  return kg_sched_broken_attachment(s, NULL);
}

int kg_sstage_nested_in(const kg_sstage *x, const kg_sstage *c, const kg_iter *l) {
  return kg_sched_nested_in(x, c, l, NULL);
}

void kg_schedule_dump(kg_strbuf *b, const kg_schedule *s) {
  static const char *const origins[] = {"program", "cache_read", "cache_write", "rfactor"};
  for (int i = 0; i < s->nstages; i++) {
    const kg_sstage *st = s->stages[i];
    kg_strbuf_printf(b, "stage %s  origin=%s%s  attach=", st->name, origins[st->origin],
                     st->is_output ? " output" : "");
    if (st->attach == KG_ATTACH_ROOT)
      kg_strbuf_puts(b, "root");
    else if (st->attach == KG_ATTACH_INLINE)
      kg_strbuf_puts(b, "inline");
    else
      kg_strbuf_printf(b, "at %s.%s", st->attach_stage->name, st->attach_iter->name);
    kg_strbuf_printf(b, "  scope=%s%s", kg_scope_names[st->scope], st->stream ? "  stream" : "");
    if (st->pad) kg_strbuf_printf(b, "  pad=%lld", (long long)st->pad);
    if (st->min_blocks) kg_strbuf_printf(b, "  launch_bounds=%d", st->min_blocks);
    kg_strbuf_puts(b, "  loops:");
    for (int l = 0; l < st->nleaves; l++) {
      const kg_iter *it = st->leaves[l];
      kg_strbuf_printf(b, " %s(%lld", it->name, (long long)it->extent);
      if (it->is_reduce) kg_strbuf_puts(b, " reduce");
      if (it->kind == KG_LOOP_BOUND)
        kg_strbuf_printf(b, " %s", kg_thread_tag_names[it->tag]);
      else if (it->kind != KG_LOOP_SERIAL)
        kg_strbuf_printf(b, " %s", kg_loop_kind_names[it->kind]);
      if (it->pipeline) kg_strbuf_printf(b, " pipeline=%d", it->pipeline);
      kg_strbuf_putc(b, ')');
    }
    kg_strbuf_putc(b, '\n');
  }
}
