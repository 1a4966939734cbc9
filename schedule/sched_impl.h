/* Helpers shared by the schedule's own files (sched.c, primitives.c, cache.c) and the schedule generators of gen/; not part of the API. */
#ifndef KG_SCHED_IMPL_H
#define KG_SCHED_IMPL_H
#include "sched.h"

/* Formats "<fmt>" into err (when err is non-NULL) and returns -1, so primitives can `return kg_sched_fail(...)`. */
int kg_sched_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A new iter of st (pushed onto st->all, not onto the leaves). */
kg_iter *kg_sched_new_iter(kg_schedule *s, kg_sstage *st, const char *name, int64_t extent, int is_reduce,
                           kg_iter_origin origin);
/* Replaces st's loops by fresh root iters over its current axes (spatial, then reduction), serial, in order. */
void kg_sched_reset_roots(kg_schedule *s, kg_sstage *st);
/* Inserts st into s->stages at position pos and renumbers the ids. */
void kg_sched_insert_stage(kg_schedule *s, kg_sstage *st, int pos);
/* The stage of s that writes tensor t; NULL for program inputs. */
kg_sstage *kg_sched_stage_of_tensor(const kg_schedule *s, const kg_tensor *t);
/* A tensor by name: a stage's output or a program input. */
kg_tensor *kg_sched_find_tensor(const kg_schedule *s, const char *name);
/* Does e read tensor t directly? */
int kg_sched_expr_reads(const kg_expr *e, const kg_tensor *t);

/* Attachment bookkeeping. A stage X computed at (C, L) is only correct while every stage that consumes X -- the
 * non-inlined stages reading X directly or through inlined stages -- is C or computed inside C at L or deeper
 * (softmax's row maximum at the row loop of its output, read there by the row sum computed at the same row), and
 * there is one. Primitives that change which stages are inlined, or the order of loops, must keep that true for
 * every attached stage; this checks it with one stage's inline state overridden (hyp_stage NULL: no override).
 * Returns the first violating stage or NULL. */
typedef struct kg_sched_hyp {
  const kg_sstage *stage;
  int inlined;
} kg_sched_hyp;
int kg_sched_is_inlined(const kg_sstage *st, const kg_sched_hyp *h);
/* Consumers of x (non-inlined, reading x directly or through inlined stages): their count; the first max of
 * them in out (in stage order). */
int kg_sched_consumers(const kg_schedule *s, const kg_sstage *x, const kg_sched_hyp *h, const kg_sstage **out,
                       int max);
/* Is x computed inside stage c at loop l or a loop inside it (attached there directly or through stages attached
 * there), with the override h? */
int kg_sched_nested_in(const kg_sstage *x, const kg_sstage *c, const kg_iter *l, const kg_sched_hyp *h);
/* Can p be computed at loop l of c: every consumer of p is c or computed inside c at l or deeper (so p's region
 * there is computed before each of them runs), and there is one? NULL if so, else the first consumer that is
 * not (c itself when none is). */
const kg_sstage *kg_sched_attach_conflict(const kg_schedule *s, const kg_sstage *p, const kg_sstage *c,
                                          const kg_iter *l, const kg_sched_hyp *h);
const kg_sstage *kg_sched_broken_attachment(const kg_schedule *s, const kg_sched_hyp *h);

/* A stage computed at a loop (of another stage) that st consumes, or NULL: a cache or rfactor stage made from st
 * would run at root and read it where it is not computed. */
const kg_sstage *kg_sched_reads_attached(const kg_schedule *s, const kg_sstage *st);
/* The first stage computed at loop it of st (it NULL: at any loop of st), or NULL. */
kg_sstage *kg_sched_attached_at(const kg_schedule *s, const kg_sstage *st, const kg_iter *it);
/* Does st still have its default loops (leaves are the roots, in order, all serial)? */
int kg_sched_untransformed(const kg_sstage *st);

/* Loop primitives (primitives.c) and the storage primitives (cache.c); each checks everything first. */
int kg_sched_cache_read(kg_schedule *s, const kg_step *st, char *err, size_t errlen);
int kg_sched_cache_write(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen);
int kg_sched_rfactor(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen);
int kg_sched_reorder_storage(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen);
int kg_sched_split_storage(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen);
int kg_sched_tensorize(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen);
int kg_sched_bfdot(kg_schedule *s, kg_sstage *st, const kg_step *step, char *err, size_t errlen);

#endif
