/* kg_pool_local: worker threads of this process, each measuring with its own measurers (one per opened program,
 * made at open on the caller's thread, then used by that worker only). A worker takes up to `batch` queued
 * candidates at once and measures them as one kg_measure_batch (builds in parallel, runs one at a time); each
 * worker accepts twice its batch, so that the next batch is queued while one is measured. */
#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pool.h"
#include "../base/clock.h"
#include "../base/xalloc.h"

typedef struct job {
  int handle;
  char *text; /* the trace's text */
  int64_t tag;
} job;

typedef struct lworker {
  pthread_t th;
  int group;
  const char *suffix;
  job *q;               /* queued, oldest first */
  int nq, capq;
  int running;          /* candidates of the batch being measured */
  kg_measurer **m;      /* per handle (NULL: could not be made) */
} lworker;

typedef struct local_pool {
  kg_pool base;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  lworker *w;
  int nw, batch, stop, started;
  int nhandles;
  kg_pool_result *res;  /* finished, not yet taken */
  int nres, capres;
  int inflight;         /* submitted, not yet taken */
  char host[256];
} local_pool;

void kg_pool_hostname(char *host, size_t len) {
  if (gethostname(host, len) != 0 || !host[0]) snprintf(host, len, "localhost");
  host[len - 1] = 0;
}

void kg_pool_target_of(kg_measurer *m, kg_pool_target *t) {
  memset(t, 0, sizeof *t);
  t->runner = kg_measurer_runner(m);
  snprintf(t->arch, sizeof t->arch, "%s", kg_measurer_arch(m) ? kg_measurer_arch(m) : "");
  snprintf(t->device, sizeof t->device, "%s", kg_measurer_device(m));
  const kg_gpu_limits *l = kg_measurer_limits(m);
  if (l) t->has_limits = 1, t->limits = *l;
}

int kg_pool_measure_texts(kg_measurer *m, char *const *texts, int n, kg_measure_result *out, double *build_s,
                          double *run_s) {
  kg_trace *tr = kg_xrealloc(NULL, sizeof *tr * (size_t)(n > 0 ? n : 1));
  kg_candidate *c = kg_xrealloc(NULL, sizeof *c * (size_t)(n > 0 ? n : 1));
  int ok = 1;
  for (int i = 0; i < n; i++) {
    kg_trace_init(&tr[i]);
    char e[256];
    if (ok && kg_trace_parse(&tr[i], "candidate", texts[i], strlen(texts[i]), e, sizeof e) != 0) ok = 0;
    c[i] = (kg_candidate){&tr[i], NULL};
  }
  double b0, r0, b1, r1;
  if (ok) {
    kg_measurer_phase_times(m, &b0, &r0);
    kg_measure_batch(m, c, n, out);
    kg_measurer_phase_times(m, &b1, &r1);
    *build_s = (b1 - b0) / n;
    *run_s = (r1 - r0) / n;
  }
  for (int i = 0; i < n; i++) kg_trace_free(&tr[i]);
  free(tr);
  free(c);
  return ok ? 0 : -1;
}

static void measure_jobs(local_pool *lp, lworker *w, job *jobs, int n) {
  kg_measure_result *out = kg_xrealloc(NULL, sizeof *out * (size_t)n);
  char **texts = kg_xrealloc(NULL, sizeof *texts * (size_t)n);
  for (int j = 0; j < n; j++) texts[j] = jobs[j].text;
  /* jobs of one handle at a time: a batch is one program's */
  int i = 0;
  while (i < n) {
    int h = jobs[i].handle, k = i;
    while (k < n && jobs[k].handle == h) k++;
    pthread_mutex_lock(&lp->mu); /* open may grow w->m meanwhile */
    kg_measurer *m = w->m[h];
    pthread_mutex_unlock(&lp->mu);
    double build_s = 0, run_s = 0;
    int parsed = kg_pool_measure_texts(m, texts + i, k - i, out + i, &build_s, &run_s) == 0;
    assert(parsed && "the texts came from kg_trace_to_text");
    (void)parsed;
    pthread_mutex_lock(&lp->mu);
    for (int j = i; j < k; j++) {
      if (lp->nres == lp->capres) {
        lp->capres = lp->capres ? 2 * lp->capres : 16;
        lp->res = kg_xrealloc(lp->res, sizeof *lp->res * (size_t)lp->capres);
      }
      kg_pool_result *r = &lp->res[lp->nres++];
      memset(r, 0, sizeof *r);
      r->tag = jobs[j].tag;
      r->res = out[j];
      snprintf(r->host, sizeof r->host, "%s", lp->host);
      r->rank = (int)(w - lp->w);
      r->build_s = build_s;
      r->run_s = run_s;
      w->running--;
    }
    pthread_cond_broadcast(&lp->done);
    pthread_mutex_unlock(&lp->mu);
    i = k;
  }
  free(out);
  free(texts);
}

typedef struct start_arg {
  local_pool *lp;
  lworker *w;
} start_arg;

static void *worker_loop(void *arg) {
  start_arg sa = *(start_arg *)arg;
  free(arg);
  local_pool *lp = sa.lp;
  lworker *w = sa.w;
  pthread_mutex_lock(&lp->mu);
  for (;;) {
    while (!lp->stop && w->nq == 0) pthread_cond_wait(&lp->work, &lp->mu);
    if (lp->stop) break;
    int n = w->nq < lp->batch ? w->nq : lp->batch;
    job *jobs = kg_xrealloc(NULL, sizeof *jobs * (size_t)n);
    memcpy(jobs, w->q, sizeof *jobs * (size_t)n);
    memmove(w->q, w->q + n, sizeof *jobs * (size_t)(w->nq - n));
    w->nq -= n;
    w->running += n;
    pthread_mutex_unlock(&lp->mu);
    measure_jobs(lp, w, jobs, n);
    for (int i = 0; i < n; i++) free(jobs[i].text);
    free(jobs);
    pthread_mutex_lock(&lp->mu);
  }
  pthread_mutex_unlock(&lp->mu);
  return NULL;
}

static int local_open(kg_pool *pl, const kg_program *p, const kg_measure_opts *o, kg_pool_target *targets,
                      char *err, size_t errlen) {
  local_pool *lp = (local_pool *)pl;
  pthread_mutex_lock(&lp->mu);
  int h = lp->nhandles++;
  pthread_mutex_unlock(&lp->mu);
  for (int g = 0; g < pl->ngroups; g++) targets[g].runner = (kg_runner)-1;
  int made = 0;
  char first[1024] = "";
  for (int i = 0; i < lp->nw; i++) {
    lworker *w = &lp->w[i];
    char e[1024];
    kg_measurer *m = kg_measurer_new(p, o, e, sizeof e);
    if (!m && !first[0]) snprintf(first, sizeof first, "%s", e);
    pthread_mutex_lock(&lp->mu);
    w->m = kg_xrealloc(w->m, sizeof *w->m * (size_t)(h + 1));
    w->m[h] = m;
    pthread_mutex_unlock(&lp->mu);
    if (!m) continue;
    made++;
    kg_pool_target *t = &targets[w->group];
    if ((int)t->runner != -1) continue;
    kg_pool_target_of(m, t);
    if (w->suffix && w->suffix[0]) {
      /* the name is what precedes " (": the suffix goes there */
      char name[256], ver[512];
      kg_device_split(t->device, name, sizeof name, ver, sizeof ver);
      snprintf(t->device, sizeof t->device, "%.200s%.50s (%.250s)", name, w->suffix, ver);
    }
  }
  if (!made) {
    snprintf(err, errlen, "%s", first);
    return -1;
  }
  return h;
}

static int local_room(kg_pool *pl, int group) {
  local_pool *lp = (local_pool *)pl;
  pthread_mutex_lock(&lp->mu);
  int room = 0;
  for (int i = 0; i < lp->nw; i++)
    if (lp->w[i].group == group) {
      int r = 2 * lp->batch - lp->w[i].nq - lp->w[i].running;
      room += r > 0 ? r : 0;
    }
  pthread_mutex_unlock(&lp->mu);
  return room;
}

static int local_submit(kg_pool *pl, int handle, int group, const kg_trace *trace, int64_t tag, char *err,
                        size_t errlen) {
  local_pool *lp = (local_pool *)pl;
  pthread_mutex_lock(&lp->mu);
  /* the least loaded worker of the group that can measure the program */
  lworker *best = NULL;
  for (int i = 0; i < lp->nw; i++) {
    lworker *w = &lp->w[i];
    if (w->group != group || handle >= lp->nhandles || !w->m[handle]) continue;
    if (!best || w->nq + w->running < best->nq + best->running) best = w;
  }
  if (!best) {
    pthread_mutex_unlock(&lp->mu);
    snprintf(err, errlen, "no worker of group %d measures program %d", group, handle);
    return -1;
  }
  if (best->nq == best->capq) {
    best->capq = best->capq ? 2 * best->capq : 8;
    best->q = kg_xrealloc(best->q, sizeof *best->q * (size_t)best->capq);
  }
  best->q[best->nq++] = (job){handle, kg_trace_to_text(trace), tag};
  lp->inflight++;
  pthread_cond_broadcast(&lp->work);
  pthread_mutex_unlock(&lp->mu);
  return 0;
}

/* Takes the oldest finished result; the caller holds mu. */
static void take(local_pool *lp, kg_pool_result *out) {
  *out = lp->res[0];
  memmove(lp->res, lp->res + 1, sizeof *lp->res * (size_t)(lp->nres - 1));
  lp->nres--;
  lp->inflight--;
}

static int local_wait(kg_pool *pl, kg_pool_result *out, char *err, size_t errlen) {
  (void)err, (void)errlen;
  local_pool *lp = (local_pool *)pl;
  pthread_mutex_lock(&lp->mu);
  while (lp->inflight > 0 && lp->nres == 0) pthread_cond_wait(&lp->done, &lp->mu);
  int got = lp->nres > 0;
  if (got) take(lp, out);
  pthread_mutex_unlock(&lp->mu);
  return got;
}

int kg_pool_local_poll(kg_pool *pl, kg_pool_result *out) {
  local_pool *lp = (local_pool *)pl;
  pthread_mutex_lock(&lp->mu);
  int got = lp->nres > 0;
  if (got) take(lp, out);
  pthread_mutex_unlock(&lp->mu);
  return got;
}

int kg_pool_local_pending(kg_pool *pl) {
  local_pool *lp = (local_pool *)pl;
  pthread_mutex_lock(&lp->mu);
  int n = lp->inflight;
  pthread_mutex_unlock(&lp->mu);
  return n;
}

static void local_free(kg_pool *pl) {
  local_pool *lp = (local_pool *)pl;
  pthread_mutex_lock(&lp->mu);
  lp->stop = 1;
  pthread_cond_broadcast(&lp->work);
  pthread_mutex_unlock(&lp->mu);
  for (int i = 0; i < lp->started; i++) pthread_join(lp->w[i].th, NULL);
  for (int i = 0; i < lp->nw; i++) {
    for (int k = 0; k < lp->w[i].nq; k++) free(lp->w[i].q[k].text);
    free(lp->w[i].q);
    for (int h = 0; h < lp->nhandles; h++) kg_measurer_free(lp->w[i].m[h]);
    free(lp->w[i].m);
  }
  for (int i = 0; i < lp->nres; i++) kg_measure_result_free(&lp->res[i].res);
  free(lp->res);
  free(lp->w);
  pthread_mutex_destroy(&lp->mu);
  pthread_cond_destroy(&lp->work);
  pthread_cond_destroy(&lp->done);
  free(lp);
}

kg_pool *kg_pool_local_new(int nworkers, int batch, const char *const *device_suffix) {
  local_pool *lp = kg_xrealloc(NULL, sizeof *lp);
  memset(lp, 0, sizeof *lp);
  lp->base = (kg_pool){local_open, local_room, local_submit, local_wait, local_free, 0, nworkers};
  lp->nw = nworkers > 0 ? nworkers : 1;
  lp->base.nworkers = lp->nw;
  lp->batch = batch > 0 ? batch : 1;
  kg_pool_hostname(lp->host, sizeof lp->host);
  pthread_mutex_init(&lp->mu, NULL);
  pthread_cond_init(&lp->work, NULL);
  pthread_cond_init(&lp->done, NULL);
  lp->w = kg_xrealloc(NULL, sizeof *lp->w * (size_t)lp->nw);
  memset(lp->w, 0, sizeof *lp->w * (size_t)lp->nw);
  /* groups: workers with the same suffix share one, numbered in order of first appearance */
  for (int i = 0; i < lp->nw; i++) {
    lworker *w = &lp->w[i];
    w->suffix = device_suffix ? device_suffix[i] : NULL;
    w->group = -1;
    for (int k = 0; k < i && w->group < 0; k++)
      if (!strcmp(lp->w[k].suffix ? lp->w[k].suffix : "", w->suffix ? w->suffix : "")) w->group = lp->w[k].group;
    if (w->group < 0) w->group = lp->base.ngroups++;
  }
  for (int i = 0; i < lp->nw; i++) {
    start_arg *sa = kg_xrealloc(NULL, sizeof *sa);
    *sa = (start_arg){lp, &lp->w[i]};
    if (pthread_create(&lp->w[i].th, NULL, worker_loop, sa) != 0) {
      free(sa);
      break;
    }
    lp->started++;
  }
  lp->nw = lp->base.nworkers = lp->started; /* a worker that did not start takes nothing */
  if (lp->started == 0) {
    local_free(&lp->base);
    return NULL;
  }
  return &lp->base;
}
