/* Distributed tuning over MPI (dist.h). Rank 0's pool and the other ranks' serving loop; without MPI only the
 * launcher check, so that `kgen tune` under mpirun refuses instead of running N tuners. */
#include "dist.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sizes a launcher puts in each process's environment: OpenMPI, MPICH and Intel MPI (Hydra's PMI), PMIx, Slurm's
 * srun. */
int kg_dist_launched(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS",
                                     "SLURM_STEP_NUM_TASKS"};
  int n = 1;
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    const char *v = getenv(vars[i]);
    int k = v ? atoi(v) : 0;
    if (k > n) n = k;
  }
  return n;
}

#ifndef KG_HAVE_MPI

int kg_dist_available(void) { return 0; }

int kg_dist_start(kg_dist **d, char *err, size_t errlen) {
  *d = NULL;
  int n = kg_dist_launched();
  if (n <= 1) return 0;
  snprintf(err, errlen,
           "started as one of %d processes (mpirun, srun), but this kgen was built without MPI: each would run a "
           "tuner of its own. Install MPI (Debian: libopenmpi-dev openmpi-bin; `make deps` does) and rebuild, or "
           "run kgen tune once, without the launcher",
           n);
  return -1;
}
int kg_dist_rank(const kg_dist *d) { return (void)d, 0; }
int kg_dist_size(const kg_dist *d) { return (void)d, 1; }
int kg_dist_serve(kg_dist *d) { return (void)d, 1; }
kg_pool *kg_dist_pool(kg_dist *d, const kg_measure_opts *mo, const kg_dist_opts *o, char *err, size_t errlen) {
  (void)d, (void)mo, (void)o;
  snprintf(err, errlen, "built without MPI");
  return NULL;
}
void kg_dist_summary(kg_dist *d, FILE *f) { (void)d, (void)f; }
int kg_dist_end(kg_dist *d, int rc) { return (void)d, rc; }

#else

#include <assert.h>
#include <errno.h>
#include <mpi.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "../base/clock.h"
#include "../base/version.h"
#include "../base/xalloc.h"
#include "../runtime/worker.h"
#include "../tlog/tlog.h"

enum { T_HELLO = 1, T_HELLO_ACK, T_OPEN, T_OPEN_ACK, T_JOB, T_RESULT, T_STOP };

int kg_dist_available(void) { return 1; }

typedef struct job {
  int handle;
  int64_t tag;
  char *text;
} job;

/* What rank 0 knows of a rank. */
typedef struct peer {
  int alive;        /* measuring for us (rank 0: unless idle) */
  int dropped;      /* gave no answer in time: it cannot be told to stop, nor finalize with us */
  int group;
  char host[256];
  int batch;        /* candidates it builds at once */
  job *out;         /* sent, not answered */
  int nout, capout;
  double last_heard;
  int measured;     /* results received */
  unsigned char *can; /* per handle: it made a measurer for it */
  int ncan;
} peer;

struct kg_dist {
  int rank, size;
  kg_pool base;            /* rank 0's pool */
  int pool_made;
  peer *peers;             /* per rank (rank 0: its local pool) */
  kg_pool *local;          /* rank 0's own measuring, NULL when idle */
  int nhandles;
  const kg_program **progs;/* per handle */
  kg_measure_opts mo;
  char arch_copy[64];
  double worker_timeout_s;
  int lost;                /* ranks dropped */
  char host[256];
  struct rx *rx;           /* per rank: the message being received from it */
};

/* A message being received. Receives never block: a large message needs its sender's part of the rendezvous, and a
 * stopped sender would hold rank 0 in MPI_Recv forever. A matched probe (MPI_Improbe) takes the message off the
 * queue, MPI_Imrecv receives it, and MPI_Test says when it is in. */
typedef struct rx {
  int active, tag;
  MPI_Request req;
  kg_wire w;
} rx;

static volatile sig_atomic_t stop_signal;

static void on_stop(int sig) { stop_signal = sig; }

/* Sends are non-blocking: a rank that stops (SIGSTOP, a hung machine) must not stop rank 0 in MPI_Send. Each
 * message's buffer is kept until its send completes (checked as rank 0 polls). */
typedef struct pending_send {
  MPI_Request req;
  unsigned char *data;
} pending_send;
static pending_send *sends;
static int nsends, capsends;

static void reap_sends(void) {
  int k = 0;
  for (int i = 0; i < nsends; i++) {
    int done = 0;
    if (MPI_Test(&sends[i].req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 0;
    if (done) free(sends[i].data);
    else sends[k++] = sends[i];
  }
  nsends = k;
}

static void send_wire(const kg_wire *w, int to, int tag) {
  reap_sends();
  if (nsends == capsends) {
    capsends = capsends ? 2 * capsends : 64;
    sends = kg_xrealloc(sends, sizeof *sends * (size_t)capsends);
  }
  pending_send *p = &sends[nsends];
  p->data = kg_xrealloc(NULL, w->len ? w->len : 1);
  memcpy(p->data, w->data, w->len);
  if (MPI_Isend(p->data, (int)w->len, MPI_BYTE, to, tag, MPI_COMM_WORLD, &p->req) != MPI_SUCCESS) {
    free(p->data);
    return; /* the rank is gone: its candidates come back through the timeout */
  }
  nsends++;
}

/* Waits for every send to complete (a rank's last answers before it finalizes), at most until deadline. */
static void flush_sends(double deadline) {
  while (nsends > 0 && kg_now_s() < deadline) {
    reap_sends();
    if (nsends) usleep(1000);
  }
}

/* Receives the message st announced into w. */
static void recv_wire(kg_wire *w, MPI_Status *st) {
  int n = 0;
  MPI_Get_count(st, MPI_BYTE, &n);
  kg_wire_reset(w);
  if ((size_t)n > w->cap) {
    w->data = kg_xrealloc(w->data, (size_t)n);
    w->cap = (size_t)n;
  }
  MPI_Recv(w->data, n, MPI_BYTE, st->MPI_SOURCE, st->MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  w->len = (size_t)n;
  w->pos = 0;
}

int kg_dist_start(kg_dist **d, char *err, size_t errlen) {
  *d = NULL;
  if (kg_dist_launched() <= 1) return 0;
  int provided = 0;
  /* only the main thread calls MPI; rank 0's measuring thread never does */
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    snprintf(err, errlen, "MPI_Init failed");
    return -1;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  kg_dist *x = kg_xrealloc(NULL, sizeof *x);
  memset(x, 0, sizeof *x);
  MPI_Comm_rank(MPI_COMM_WORLD, &x->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &x->size);
  kg_pool_hostname(x->host, sizeof x->host);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  *d = x;
  return 1;
}

int kg_dist_rank(const kg_dist *d) { return d ? d->rank : 0; }
int kg_dist_size(const kg_dist *d) { return d ? d->size : 1; }

/* ---- what travels ---- */

static void put_opts(kg_wire *w, const kg_measure_opts *o) {
  kg_wire_u32(w, (uint32_t)o->target);
  kg_wire_u32(w, (uint32_t)o->emulate);
  kg_wire_str(w, o->arch ? o->arch : "");
  kg_wire_f64(w, o->min_repeat_s);
  kg_wire_f64(w, o->timeout_s);
  kg_wire_u32(w, (uint32_t)o->flush_l2);
  kg_wire_u32(w, (uint32_t)o->no_timing);
  kg_wire_f64(w, o->rtol);
  kg_wire_i64(w, (int64_t)o->seed);
  kg_wire_f64(w, o->early_cut);
}

/* arch is copied into archbuf. */
static void get_opts(kg_wire *w, kg_measure_opts *o, char *archbuf, size_t archlen) {
  memset(o, 0, sizeof *o);
  o->target = (kg_target_kind)kg_wire_get_u32(w);
  o->emulate = (int)kg_wire_get_u32(w);
  char *arch = kg_wire_get_str(w);
  snprintf(archbuf, archlen, "%s", arch ? arch : "");
  free(arch);
  o->arch = archbuf[0] ? archbuf : NULL;
  o->min_repeat_s = kg_wire_get_f64(w);
  o->timeout_s = kg_wire_get_f64(w);
  o->flush_l2 = (int)kg_wire_get_u32(w);
  o->no_timing = (int)kg_wire_get_u32(w);
  o->rtol = kg_wire_get_f64(w);
  o->seed = (uint64_t)kg_wire_get_i64(w);
  o->early_cut = kg_wire_get_f64(w);
}

/* A program as its source, def, bindings (the sizes given, and the dynamic ones at their values) and dynamic
 * ranges, with its workload hash to check the rebuilt one against. */
static void put_program(kg_wire *w, const kg_program *p) {
  kg_wire_str(w, p->src.name ? p->src.name : "program");
  kg_wire_bytes(w, p->src.text, p->src.len);
  kg_wire_str(w, p->def->name);
  int nb = 0;
  for (int k = 0; k < p->nsizes; k++) nb += p->sizes[k].bound || p->sizes[k].dynamic;
  kg_wire_i64(w, nb);
  for (int k = 0; k < p->nsizes; k++)
    if (p->sizes[k].bound || p->sizes[k].dynamic) {
      kg_wire_str(w, p->sizes[k].name);
      kg_wire_i64(w, p->sizes[k].value);
    }
  kg_wire_i64(w, kg_program_ndynamic(p));
  for (int k = 0; k < p->nsizes; k++)
    if (p->sizes[k].dynamic) {
      kg_wire_str(w, p->sizes[k].name);
      kg_wire_i64(w, p->sizes[k].lo);
      kg_wire_i64(w, p->sizes[k].hi);
    }
  kg_wire_i64(w, p->io_retyped ? 1 + (int64_t)p->io_dtype : 0);
  kg_wire_i64(w, p->tf32);
  kg_tlog_workload wl;
  kg_tlog_workload_of(p, &wl);
  kg_wire_str(w, wl.hash);
}

#define MAX_SIZES 64

static kg_program *get_program(kg_wire *w, char *err, size_t errlen) {
  char *name = kg_wire_get_str(w);
  size_t len = 0;
  const char *text = kg_wire_get_bytes(w, &len);
  char *def = kg_wire_get_str(w);
  int64_t nb = kg_wire_get_i64(w);
  kg_binding b[MAX_SIZES];
  char *names[2 * MAX_SIZES] = {0};
  int nn = 0;
  kg_program *p = NULL;
  kg_dynamic_size dyn[MAX_SIZES];
  int64_t nd = 0;
  char *hash = NULL;
  if (nb < 0 || nb > MAX_SIZES) goto bad;
  for (int64_t k = 0; k < nb; k++) {
    b[k].name = names[nn++] = kg_wire_get_str(w);
    b[k].value = kg_wire_get_i64(w);
  }
  nd = kg_wire_get_i64(w);
  if (nd < 0 || nd > MAX_SIZES) goto bad;
  for (int64_t k = 0; k < nd; k++) {
    dyn[k].name = names[nn++] = kg_wire_get_str(w);
    dyn[k].lo = kg_wire_get_i64(w);
    dyn[k].hi = kg_wire_get_i64(w);
  }
  int64_t io = kg_wire_get_i64(w);
  int64_t tf32 = kg_wire_get_i64(w);
  hash = kg_wire_get_str(w);
  if (w->bad || !text || io < 0 || io > KG_DT_COUNT || tf32 < 0 || tf32 > 1) goto bad;
  kg_diag diag = {0};
  kg_arena da;
  kg_arena_init(&da);
  p = kg_program_load(name, text, len, def[0] ? def : NULL, b, (int)nb, &diag, &da);
  if (p && io > 0 && kg_program_set_io_dtype(p, (kg_dtype)(io - 1), &diag, &da) != 0) {
    kg_program_free(p);
    p = NULL;
  }
  if (p && nd > 0 && kg_program_set_dynamic(p, dyn, (int)nd, &diag, &da) != 0) {
    kg_program_free(p);
    p = NULL;
  }
  if (!p) snprintf(err, errlen, "the program does not load here: %s", diag.msg ? diag.msg : "?");
  kg_arena_free(&da);
  if (p) {
    p->tf32 = (int)tf32;
    kg_tlog_workload wl;
    kg_tlog_workload_of(p, &wl);
    if (strcmp(wl.hash, hash)) {
      snprintf(err, errlen, "the program rebuilt here is another workload (hash %s, rank 0's %s)", wl.hash, hash);
      kg_program_free(p);
      p = NULL;
    }
  }
  goto out;
bad:
  snprintf(err, errlen, "a malformed program message");
out:
  free(name);
  free(def);
  free(hash);
  for (int i = 0; i < nn; i++) free(names[i]);
  return p;
}

static void put_result(kg_wire *w, const kg_measure_result *r) {
  kg_wire_u32(w, (uint32_t)r->status);
  kg_wire_str(w, r->msg);
  kg_wire_f64(w, r->compile_s);
  kg_wire_f64(w, r->median_s);
  kg_wire_f64(w, r->min_s);
  kg_wire_f64(w, r->max_s);
  kg_wire_i64(w, r->runs);
  for (int i = 0; i < r->runs; i++) kg_wire_f64(w, r->times[i]);
  kg_wire_f64(w, r->gflops);
  kg_wire_f64(w, r->gbps);
  kg_wire_f64(w, r->max_rel_err);
  kg_wire_f64(w, r->estimate_s);
  kg_wire_str(w, r->estimate_line);
  kg_wire_u32(w, (uint32_t)r->env_fault);
}

static int get_result(kg_wire *w, kg_measure_result *r) {
  memset(r, 0, sizeof *r);
  uint32_t st = kg_wire_get_u32(w);
  r->status = st < KG_STATUS_COUNT ? (kg_status)st : KG_STATUS_RUNTIME_ERROR;
  char *msg = kg_wire_get_str(w);
  snprintf(r->msg, sizeof r->msg, "%s", msg ? msg : "");
  free(msg);
  r->compile_s = kg_wire_get_f64(w);
  r->median_s = kg_wire_get_f64(w);
  r->min_s = kg_wire_get_f64(w);
  r->max_s = kg_wire_get_f64(w);
  int64_t runs = kg_wire_get_i64(w);
  if (runs < 0 || runs > 1 << 24) return -1;
  r->runs = (int)runs;
  r->times = runs ? kg_xrealloc(NULL, sizeof(double) * (size_t)runs) : NULL;
  for (int i = 0; i < r->runs; i++) r->times[i] = kg_wire_get_f64(w);
  r->gflops = kg_wire_get_f64(w);
  r->gbps = kg_wire_get_f64(w);
  r->max_rel_err = kg_wire_get_f64(w);
  r->estimate_s = kg_wire_get_f64(w);
  char *line = kg_wire_get_str(w);
  snprintf(r->estimate_line, sizeof r->estimate_line, "%s", line ? line : "");
  free(line);
  r->env_fault = (int)kg_wire_get_u32(w);
  return w->bad ? -1 : 0;
}

static void put_target(kg_wire *w, const kg_pool_target *t) {
  kg_wire_u32(w, (uint32_t)t->runner);
  kg_wire_str(w, t->arch);
  kg_wire_str(w, t->device);
  kg_wire_u32(w, (uint32_t)t->has_limits);
  kg_wire_bytes(w, &t->limits, sizeof t->limits); /* the same kgen build on every rank (checked at hello) */
}

static void get_target(kg_wire *w, kg_pool_target *t) {
  memset(t, 0, sizeof *t);
  t->runner = (kg_runner)kg_wire_get_u32(w);
  char *arch = kg_wire_get_str(w), *dev = kg_wire_get_str(w);
  snprintf(t->arch, sizeof t->arch, "%s", arch ? arch : "");
  snprintf(t->device, sizeof t->device, "%s", dev ? dev : "");
  free(arch);
  free(dev);
  t->has_limits = (int)kg_wire_get_u32(w);
  size_t n = 0;
  const void *l = kg_wire_get_bytes(w, &n);
  if (l && n == sizeof t->limits) memcpy(&t->limits, l, n);
  else t->has_limits = 0;
}

/* The group key of a target: runner, arch and device name (the details, such as compiler versions, may differ
 * between machines of one model). */
static void group_key(const kg_pool_target *t, char *key, size_t len) {
  char name[256], ver[512];
  kg_device_split(t->device, name, sizeof name, ver, sizeof ver);
  snprintf(key, len, "%d|%s|%s", (int)t->runner, t->arch, name);
}

/* This rank's target under o, from a measurer of a one-line program: what every real measurer here reports. */
static int probe_target(const kg_measure_opts *o, kg_pool_target *t, char *err, size_t errlen) {
  static const char src[] = "def kgen_probe(X: f32[64]) -> (Y: f32[64]) {\n  Y[i] = X[i]\n}\n";
  kg_diag diag = {0};
  kg_arena da;
  kg_arena_init(&da);
  kg_program *p = kg_program_load("probe.te", src, sizeof src - 1, NULL, NULL, 0, &diag, &da);
  kg_arena_free(&da);
  if (!p) {
    snprintf(err, errlen, "kgen's probe program does not load");
    return -1;
  }
  kg_measurer *m = kg_measurer_new(p, o, err, errlen);
  if (m) kg_pool_target_of(m, t);
  kg_measurer_free(m);
  kg_program_free(p);
  return m ? 0 : -1;
}

/* The ranks on this machine, as the launcher says (OpenMPI, Hydra, Slurm); 1 when it does not. */
static int local_ranks(void) {
  const char *ln = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!ln) ln = getenv("MPI_LOCALNRANKS");
  if (!ln) ln = getenv("SLURM_NTASKS_PER_NODE");
  int local = ln ? atoi(ln) : 1;
  return local < 1 ? 1 : local;
}

/* Candidates this rank builds at once: its share of the machine's cores. */
static int local_batch(void) {
  long b = sysconf(_SC_NPROCESSORS_ONLN) / local_ranks();
  return b < 1 ? 1 : b > 64 ? 64 : (int)b;
}

/* Ranks sharing a machine's cores (several on one machine, measuring the CPU or the emulator) take turns at running
 * candidates (runtime/measure.h: run_lock); their builds still overlap. Ranks on GPUs each have their own. */
static char run_lock_path[512];
static void set_run_lock(kg_measure_opts *o) {
  if (local_ranks() <= 1 || (o->target == KG_TARGET_CUDA && !o->emulate)) return;
  const char *tmp = getenv("TMPDIR");
  snprintf(run_lock_path, sizeof run_lock_path, "%s/kgen-runs-%u.lock", tmp && *tmp ? tmp : "/tmp",
           (unsigned)getuid());
  o->run_lock = run_lock_path;
}

/* Says, once per rank, that it ran candidates without the run lock: the other ranks' timings may overlap its. */
static void note_unlocked(const kg_dist *d, const kg_measure_result *r) {
  static int said;
  if (!r->unlocked || said) return;
  said = 1;
  fprintf(stderr,
          "kgen: rank %d on %s: the process holding the run lock %s is stopped (or has held it for 60 timeouts): "
          "measuring without it, so timings may overlap\n",
          d->rank, d->host, run_lock_path);
}

/* ---- ranks > 0 ---- */

int kg_dist_serve(kg_dist *d) {
  kg_wire in = {0}, out = {0};
  kg_measure_opts mo;
  char arch[64] = "";
  memset(&mo, 0, sizeof mo);
  kg_program **progs = NULL;
  kg_measurer **ms = NULL;
  int nh = 0;
  job *q = NULL;
  int nq = 0, capq = 0, rc = 0;
  int batch = local_batch();
  for (;;) {
    MPI_Status st;
    int flag = 0;
    /* wait (blocking) only when nothing is queued */
    if (nq == 0) {
      while (!flag && !stop_signal) {
        if (MPI_Iprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS) goto lost;
        if (!flag) usleep(2000);
      }
    } else if (MPI_Iprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st) != MPI_SUCCESS) {
      goto lost;
    }
    if (stop_signal) {
      rc = 1;
      break;
    }
    if (flag) {
      recv_wire(&in, &st);
      if (st.MPI_TAG == T_STOP) break;
      if (st.MPI_TAG == T_HELLO) {
        get_opts(&in, &mo, arch, sizeof arch);
        mo.build_threads = batch;
        set_run_lock(&mo);
        kg_pool_target t;
        char err[1024] = "";
        int ok = probe_target(&mo, &t, err, sizeof err) == 0;
        kg_wire_reset(&out);
        kg_wire_str(&out, KGEN_VERSION " " __DATE__ " " __TIME__);
        kg_wire_str(&out, d->host);
        kg_wire_i64(&out, batch);
        kg_wire_u32(&out, (uint32_t)ok);
        kg_wire_str(&out, err);
        if (ok) put_target(&out, &t);
        send_wire(&out, 0, T_HELLO_ACK);
      } else if (st.MPI_TAG == T_OPEN) {
        int64_t h = kg_wire_get_i64(&in);
        char err[1024] = "";
        kg_program *p = get_program(&in, err, sizeof err);
        kg_measurer *m = p ? kg_measurer_new(p, &mo, err, sizeof err) : NULL;
        if (h >= nh) {
          progs = kg_xrealloc(progs, sizeof *progs * (size_t)(h + 1));
          ms = kg_xrealloc(ms, sizeof *ms * (size_t)(h + 1));
          for (int64_t k = nh; k <= h; k++) progs[k] = NULL, ms[k] = NULL;
          nh = (int)h + 1;
        }
        progs[h] = p;
        ms[h] = m;
        kg_pool_target t;
        kg_wire_reset(&out);
        kg_wire_i64(&out, h);
        kg_wire_u32(&out, m != NULL);
        kg_wire_str(&out, err);
        if (m) {
          kg_pool_target_of(m, &t);
          put_target(&out, &t);
        }
        send_wire(&out, 0, T_OPEN_ACK);
      } else if (st.MPI_TAG == T_JOB) {
        if (nq == capq) {
          capq = capq ? 2 * capq : 16;
          q = kg_xrealloc(q, sizeof *q * (size_t)capq);
        }
        job *j = &q[nq++];
        j->handle = (int)kg_wire_get_i64(&in);
        j->tag = kg_wire_get_i64(&in);
        j->text = kg_wire_get_str(&in);
      }
      continue; /* take every message that is there before measuring */
    }
    /* measure up to batch queued candidates of the first one's program */
    int h = q[0].handle, n = 0;
    job *b = kg_xrealloc(NULL, sizeof *b * (size_t)batch);
    for (int i = 0; i < nq && n < batch;)
      if (q[i].handle == h) {
        b[n++] = q[i];
        memmove(q + i, q + i + 1, sizeof *q * (size_t)(nq - i - 1));
        nq--;
      } else {
        i++;
      }
    kg_measure_result *res = kg_xrealloc(NULL, sizeof *res * (size_t)n);
    char **texts = kg_xrealloc(NULL, sizeof *texts * (size_t)n);
    for (int i = 0; i < n; i++) texts[i] = b[i].text;
    double build_s = 0, run_s = 0;
    if (!(h >= 0 && h < nh && ms[h]) || kg_pool_measure_texts(ms[h], texts, n, res, &build_s, &run_s) != 0) {
      /* rank 0 sends only what this rank opened, as text it printed: a kgen bug, said as an environment fault */
      for (int i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].status = KG_STATUS_RUNTIME_ERROR;
        res[i].env_fault = 1;
        snprintf(res[i].msg, sizeof res[i].msg, "rank %d cannot measure program %d (not opened here)", d->rank, h);
      }
    }
    for (int i = 0; i < n; i++) {
      note_unlocked(d, &res[i]);
      kg_wire_reset(&out);
      kg_wire_i64(&out, b[i].tag);
      kg_wire_f64(&out, build_s);
      kg_wire_f64(&out, run_s);
      put_result(&out, &res[i]);
      send_wire(&out, 0, T_RESULT);
      kg_measure_result_free(&res[i]);
      free(b[i].text);
    }
    free(texts);
    free(res);
    free(b);
  }
  goto done;
lost:
  rc = 1;
done:
  flush_sends(kg_now_s() + 60);
  for (int i = 0; i < nq; i++) free(q[i].text);
  free(q);
  for (int h = 0; h < nh; h++) {
    kg_measurer_free(ms[h]);
    kg_program_free(progs[h]);
  }
  free(ms);
  free(progs);
  kg_wire_free(&in);
  kg_wire_free(&out);
  free(sends);
  MPI_Finalize();
  free(d);
  return rc;
}

/* ---- rank 0's pool ---- */

static kg_dist *of(kg_pool *pl) { return (kg_dist *)((char *)pl - offsetof(kg_dist, base)); }

static int room_of(const kg_dist *d, int r) {
  const peer *p = &d->peers[r];
  if (!p->alive || r == 0) return 0;
  int room = 2 * p->batch - p->nout;
  return room > 0 ? room : 0;
}

static int dist_room(kg_pool *pl, int group) {
  kg_dist *d = of(pl);
  int room = 0;
  for (int r = 1; r < d->size; r++)
    if (d->peers[r].group == group) room += room_of(d, r);
  if (d->local && d->peers[0].alive && d->peers[0].group == group) room += d->local->room(d->local, 0);
  return room;
}

static int can_measure(const peer *p, int handle) { return handle < p->ncan && p->can[handle]; }

static void send_job(kg_dist *d, int r, int handle, int64_t tag, const char *text) {
  peer *p = &d->peers[r];
  if (p->nout == p->capout) {
    p->capout = p->capout ? 2 * p->capout : 16;
    p->out = kg_xrealloc(p->out, sizeof *p->out * (size_t)p->capout);
  }
  size_t len = strlen(text) + 1;
  char *copy = kg_xrealloc(NULL, len);
  memcpy(copy, text, len);
  p->out[p->nout++] = (job){handle, tag, copy};
  if (p->nout == 1) p->last_heard = kg_now_s(); /* its clock starts with its first candidate */
  kg_wire w = {0};
  kg_wire_i64(&w, handle);
  kg_wire_i64(&w, tag);
  kg_wire_str(&w, text);
  send_wire(&w, r, T_JOB);
  kg_wire_free(&w);
}

/* Whether rank r (0: rank 0's own pool) is in group and measures handle. */
static int takes(const kg_dist *d, int r, int handle, int group) {
  const peer *p = &d->peers[r];
  return p->alive && p->group == group && can_measure(p, handle) && (r > 0 || d->local);
}

/* The rank of group that measures handle's next candidate (0: rank 0's own pool): the one with the most room, else
 * (no room anywhere) the least loaded, which takes it all the same. -1 when none of the group is left. */
static int rank_for(kg_dist *d, int handle, int group) {
  int best = -1, best_room = 0;
  for (int r = 1; r < d->size; r++) {
    int room = takes(d, r, handle, group) ? room_of(d, r) : 0;
    if (room > best_room) best_room = room, best = r;
  }
  if (takes(d, 0, handle, group) && d->local->room(d->local, 0) > best_room) best = 0;
  if (best >= 0) return best;
  int best_n = 1 << 30;
  for (int r = 1; r < d->size; r++)
    if (takes(d, r, handle, group) && d->peers[r].nout < best_n) best_n = d->peers[r].nout, best = r;
  return best >= 0 ? best : takes(d, 0, handle, group) ? 0 : -1;
}

static int no_rank(int group, char *err, size_t errlen) {
  snprintf(err, errlen, "no rank of group %d is left to measure on", group);
  return -1;
}

static int dist_submit(kg_pool *pl, int handle, int group, const kg_trace *trace, int64_t tag, char *err,
                       size_t errlen) {
  kg_dist *d = of(pl);
  int r = rank_for(d, handle, group);
  if (r < 0) return no_rank(group, err, errlen);
  if (r == 0) return d->local->submit(d->local, handle, 0, trace, tag, err, errlen);
  char *text = kg_trace_to_text(trace);
  send_job(d, r, handle, tag, text);
  free(text);
  return 0;
}

/* Rank r stopped answering: drop it and give its candidates to the others of its group. */
static int drop_rank(kg_dist *d, int r, char *err, size_t errlen) {
  peer *p = &d->peers[r];
  p->alive = 0;
  p->dropped = 1;
  d->lost++;
  fprintf(stderr, "kgen: rank %d on %s gave no answer for %.0f s with %d candidate%s out: dropped, its candidates go to "
          "the other ranks\n", r, p->host, d->worker_timeout_s, p->nout, p->nout == 1 ? "" : "s");
  job *jobs = p->out;
  int n = p->nout;
  p->out = NULL;
  p->nout = p->capout = 0;
  int rc = 0;
  for (int i = 0; i < n; i++) {
    int to = rc == 0 ? rank_for(d, jobs[i].handle, p->group) : -1;
    if (rc == 0 && to < 0) rc = no_rank(p->group, err, errlen);
    if (to > 0) send_job(d, to, jobs[i].handle, jobs[i].tag, jobs[i].text); /* the text as it was sent */
    if (to == 0) { /* rank 0's own pool takes a trace */
      kg_trace t;
      kg_trace_init(&t);
      char e[256];
      int parsed = kg_trace_parse(&t, "candidate", jobs[i].text, strlen(jobs[i].text), e, sizeof e) == 0;
      assert(parsed && "rank 0 printed it");
      (void)parsed;
      rc = d->local->submit(d->local, jobs[i].handle, 0, &t, jobs[i].tag, err, errlen);
      kg_trace_free(&t);
    }
    free(jobs[i].text);
  }
  free(jobs);
  return rc;
}

static int inflight(const kg_dist *d) {
  int n = 0;
  for (int r = 1; r < d->size; r++) n += d->peers[r].alive ? d->peers[r].nout : 0;
  return n;
}

/* Starts receiving what any rank not dropped has sent with tag, and returns 1 with the rank in *from when one such
 * message is in (d->rx[*from].w, read from its start); 0 when none is. */
static int poll_recv(kg_dist *d, int tag, int *from) {
  if (!d->rx) {
    d->rx = kg_xrealloc(NULL, sizeof *d->rx * (size_t)d->size);
    memset(d->rx, 0, sizeof *d->rx * (size_t)d->size);
  }
  for (int r = 1; r < d->size; r++) {
    rx *x = &d->rx[r];
    if (x->active || (d->peers && d->peers[r].dropped)) continue;
    int flag = 0, n = 0;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(r, tag, MPI_COMM_WORLD, &flag, &msg, &st) != MPI_SUCCESS || !flag) continue;
    MPI_Get_count(&st, MPI_BYTE, &n);
    kg_wire_reset(&x->w);
    if ((size_t)n > x->w.cap || !x->w.data) {
      x->w.data = kg_xrealloc(x->w.data, (size_t)(n ? n : 1));
      x->w.cap = (size_t)(n ? n : 1);
    }
    x->w.len = (size_t)n;
    if (MPI_Imrecv(x->w.data, n, MPI_BYTE, &msg, &x->req) == MPI_SUCCESS) x->active = 1, x->tag = tag;
  }
  for (int r = 1; r < d->size; r++) {
    rx *x = &d->rx[r];
    int done = 0;
    if (!x->active || x->tag != tag || MPI_Test(&x->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) continue;
    x->active = 0;
    x->w.pos = 0;
    x->w.bad = 0;
    *from = r;
    return 1;
  }
  return 0;
}

static int dist_wait(kg_pool *pl, kg_pool_result *out, char *err, size_t errlen) {
  kg_dist *d = of(pl);
  int rc = 0;
  for (;;) {
    if (stop_signal) {
      snprintf(err, errlen, "stopped by signal %d (every result received is in the log: run again to resume)",
               (int)stop_signal);
      rc = -1;
      break;
    }
    if (d->local && kg_pool_local_poll(d->local, out)) {
      note_unlocked(d, &out->res);
      out->rank = 0;
      d->peers[0].measured++;
      rc = 1;
      break;
    }
    int r;
    if (poll_recv(d, T_RESULT, &r)) {
      kg_wire *w = &d->rx[r].w;
      peer *p = &d->peers[r];
      int64_t tag = kg_wire_get_i64(w);
      int k = 0;
      while (k < p->nout && p->out[k].tag != tag) k++;
      if (!p->alive || k == p->nout) continue; /* a dropped rank's late answer: its candidate went elsewhere */
      memset(out, 0, sizeof *out);
      out->tag = tag;
      out->build_s = kg_wire_get_f64(w);
      out->run_s = kg_wire_get_f64(w);
      if (get_result(w, &out->res) != 0) {
        kg_measure_result_free(&out->res);
        continue; /* malformed: the candidate stays out, and the rank's clock runs */
      }
      free(p->out[k].text);
      p->out[k] = p->out[--p->nout];
      p->last_heard = kg_now_s();
      p->measured++;
      snprintf(out->host, sizeof out->host, "%s", p->host);
      out->rank = r;
      rc = 1;
      break;
    }
    /* (a local result that finished since the poll above is pending too: the next turn takes it) */
    if (inflight(d) == 0 && (!d->local || kg_pool_local_pending(d->local) == 0)) {
      rc = 0;
      break;
    }
    double now = kg_now_s();
    for (int r = 1; r < d->size && rc == 0; r++) {
      peer *p = &d->peers[r];
      if (p->alive && p->nout > 0 && now - p->last_heard > d->worker_timeout_s && drop_rank(d, r, err, errlen))
        rc = -1;
    }
    if (rc) break;
    reap_sends();
    usleep(1000);
  }
  return rc;
}

/* The next message tagged tag from any rank: 1 with its sender in *from (the message in d->rx[*from].w), or 0 once
 * deadline passed or a stop signal came. */
static int recv_tagged(kg_dist *d, int tag, double deadline, int *from) {
  while (!stop_signal && kg_now_s() < deadline) {
    if (poll_recv(d, tag, from)) return 1;
    reap_sends();
    usleep(1000);
  }
  return 0;
}

static int dist_open(kg_pool *pl, const kg_program *prog, const kg_measure_opts *o, kg_pool_target *targets,
                     char *err, size_t errlen) {
  kg_dist *d = of(pl);
  (void)o; /* the options were sent at hello: one set per run */
  int h = d->nhandles++;
  for (int g = 0; g < pl->ngroups; g++) targets[g].runner = (kg_runner)-1;
  kg_wire w = {0};
  kg_wire_i64(&w, h);
  put_program(&w, prog);
  for (int r = 1; r < d->size; r++)
    if (d->peers[r].alive) send_wire(&w, r, T_OPEN);
  char first[1024] = "";
  int made = 0;
  for (int r = 0; r < d->size; r++) {
    peer *p = &d->peers[r];
    p->can = kg_xrealloc(p->can, (size_t)(h + 1));
    for (int k = p->ncan; k <= h; k++) p->can[k] = 0;
    p->ncan = h + 1;
  }
  if (d->local && d->peers[0].alive) {
    kg_pool_target t[1];
    char e[1024];
    if (d->local->open(d->local, prog, &d->mo, t, e, sizeof e) >= 0) {
      d->peers[0].can[h] = 1;
      made++;
      if ((int)targets[d->peers[0].group].runner == -1) targets[d->peers[0].group] = t[0];
    } else if (!first[0]) {
      snprintf(first, sizeof first, "rank 0: %.1000s", e);
    }
  }
  /* every answer, each within the timeout (a measurer computes the reference: seconds for a large workload) */
  int want = 0;
  for (int r = 1; r < d->size; r++) want += d->peers[r].alive;
  double deadline = kg_now_s() + d->worker_timeout_s;
  unsigned char *answered = kg_xrealloc(NULL, (size_t)d->size);
  memset(answered, 0, (size_t)d->size);
  int r;
  while (want > 0 && recv_tagged(d, T_OPEN_ACK, deadline, &r)) {
    kg_wire *in = &d->rx[r].w;
    int64_t hh = kg_wire_get_i64(in);
    int ok = (int)kg_wire_get_u32(in);
    char *e = kg_wire_get_str(in);
    if (hh != h) { /* an answer to an earlier open that came after its deadline: that rank was dropped */
      free(e);
      continue;
    }
    want -= !answered[r];
    answered[r] = 1;
    peer *p = &d->peers[r];
    p->last_heard = kg_now_s();
    if (ok) {
      kg_pool_target t;
      get_target(in, &t);
      p->can[h] = 1;
      made++;
      if ((int)targets[p->group].runner == -1) targets[p->group] = t;
    } else if (!first[0]) {
      snprintf(first, sizeof first, "rank %d on %s: %s", r, p->host, e ? e : "?");
    }
    free(e);
  }
  kg_wire_free(&w);
  for (r = 1; r < d->size && want > 0; r++)
    if (d->peers[r].alive && !answered[r]) { /* no answer in time: as good as lost */
      d->peers[r].alive = 0;
      d->peers[r].dropped = 1;
      d->lost++;
      fprintf(stderr, "kgen: rank %d on %s did not answer within %.0f s: dropped\n", r, d->peers[r].host,
              d->worker_timeout_s);
    }
  free(answered);
  if (stop_signal) {
    snprintf(err, errlen, "stopped by signal %d", (int)stop_signal);
    return -1;
  }
  if (!made) {
    snprintf(err, errlen, "no rank can measure it: %s", first);
    return -1;
  }
  return h;
}

static void dist_pool_free(kg_pool *pl) { (void)pl; /* the pool lives as long as d (kg_dist_end) */ }

kg_pool *kg_dist_pool(kg_dist *d, const kg_measure_opts *mo, const kg_dist_opts *o, char *err, size_t errlen) {
  if (d->pool_made) return &d->base;
  if (mo->inputs) {
    snprintf(err, errlen, "a distributed tuning draws its inputs from the seed (no caller's inputs)");
    return NULL;
  }
  d->mo = *mo;
  set_run_lock(&d->mo);
  if (mo->arch) {
    snprintf(d->arch_copy, sizeof d->arch_copy, "%s", mo->arch);
    d->mo.arch = d->arch_copy;
  }
  double per = mo->timeout_s > 0 ? mo->timeout_s : 10;
  /* a rank's batch: builds (minutes at worst for a large kernel) and two runs per candidate, each within the
   * measurement timeout */
  d->worker_timeout_s = o && o->worker_timeout_s > 0 ? o->worker_timeout_s : 600 + 4 * local_batch() * (2 * per + 60);
  d->peers = kg_xrealloc(NULL, sizeof *d->peers * (size_t)d->size);
  memset(d->peers, 0, sizeof *d->peers * (size_t)d->size);
  kg_wire w = {0};
  put_opts(&w, &d->mo);
  for (int r = 1; r < d->size; r++) send_wire(&w, r, T_HELLO);
  kg_wire_free(&w);
  /* rank 0 itself */
  char keys[KG_POOL_MAX_GROUPS][900];
  int ngroups = 0;
  char mine[64] = KGEN_VERSION " " __DATE__ " " __TIME__;
  peer *p0 = &d->peers[0];
  snprintf(p0->host, sizeof p0->host, "%s", d->host);
  p0->batch = local_batch();
  if (!(o && o->rank0_idle)) {
    kg_measure_opts lo = d->mo;
    lo.build_threads = p0->batch;
    char e[1024];
    kg_pool_target t;
    if (probe_target(&lo, &t, e, sizeof e) == 0) {
      d->mo.build_threads = p0->batch;
      d->local = kg_pool_local_new(1, p0->batch, NULL);
      p0->alive = d->local != NULL;
      group_key(&t, keys[0], sizeof keys[0]);
      ngroups = 1;
      p0->group = 0;
    } else {
      fprintf(stderr, "kgen: rank 0 cannot measure (%s): it only searches\n", e);
    }
  }
  int want = d->size - 1;
  /* a rank answers with one measurer made: seconds (a GPU's driver starting), never many minutes */
  double deadline = kg_now_s() + (d->worker_timeout_s < 600 ? d->worker_timeout_s : 600);
  char first[1100] = "";
  int r;
  while (want > 0 && recv_tagged(d, T_HELLO_ACK, deadline, &r)) {
    want--;
    kg_wire *in = &d->rx[r].w;
    peer *p = &d->peers[r];
    p->last_heard = -1; /* answered */
    char *ver = kg_wire_get_str(in), *host = kg_wire_get_str(in);
    p->batch = (int)kg_wire_get_i64(in);
    int ok = (int)kg_wire_get_u32(in);
    char *e = kg_wire_get_str(in);
    snprintf(p->host, sizeof p->host, "%s", host ? host : "?");
    if (!ver || strcmp(ver, mine)) {
      snprintf(first, sizeof first, "rank %d on %s runs another kgen build (%s; rank 0: %s)", r, p->host,
               ver ? ver : "?", mine);
      ok = 0;
    } else if (!ok && !first[0]) {
      snprintf(first, sizeof first, "rank %d on %s cannot measure: %s", r, p->host, e ? e : "?");
    }
    if (ok) {
      kg_pool_target t;
      get_target(in, &t);
      char key[900];
      group_key(&t, key, sizeof key);
      int g = 0;
      while (g < ngroups && strcmp(keys[g], key)) g++;
      if (g == ngroups && ngroups < KG_POOL_MAX_GROUPS) snprintf(keys[ngroups++], sizeof keys[0], "%s", key);
      if (g < ngroups) {
        p->group = g;
        p->alive = !in->bad && p->batch > 0;
      }
    }
    free(ver);
    free(host);
    free(e);
  }
  for (r = 1; r < d->size; r++)
    if (d->peers[r].last_heard == 0) { /* no answer: as good as lost */
      d->peers[r].dropped = 1;
      d->lost++;
      fprintf(stderr, "kgen: rank %d gave no answer to rank 0's hello: left out\n", r);
    }
  for (int r = 1; r < d->size; r++)
    if (d->peers[r].alive) d->peers[r].last_heard = kg_now_s();
  int alive = 0;
  for (int r = 0; r < d->size; r++) alive += d->peers[r].alive;
  if (first[0]) fprintf(stderr, "kgen: warning: %s\n", first);
  if (!alive) {
    snprintf(err, errlen, "no rank can measure%s%s", first[0] ? ": " : "", first);
    return NULL;
  }
  d->base = (kg_pool){dist_open, dist_room, dist_submit, dist_wait, dist_pool_free, ngroups, alive};
  d->pool_made = 1;
  return &d->base;
}

void kg_dist_summary(kg_dist *d, FILE *f) {
  if (!d || !d->peers) return;
  int alive = 0;
  for (int r = 0; r < d->size; r++) alive += d->peers[r].alive;
  fprintf(f, "ranks: %d measuring of %d", alive, d->size);
  if (d->lost) fprintf(f, " (%d dropped)", d->lost);
  fprintf(f, "; results per rank:");
  for (int r = 0; r < d->size; r++) fprintf(f, " %d", d->peers[r].measured);
  fputc('\n', f);
}

int kg_dist_end(kg_dist *d, int rc) {
  if (!d) return rc;
  if (d->rank != 0) return rc;
  kg_wire w = {0};
  kg_wire_u32(&w, 0);
  int lost = d->lost;
  for (int r = 1; r < d->size; r++)
    if (!d->peers || !d->peers[r].dropped) send_wire(&w, r, T_STOP);
  kg_wire_free(&w);
  flush_sends(kg_now_s() + 10);
  if (d->local) d->local->free(d->local);
  if (d->peers)
    for (int r = 0; r < d->size; r++) {
      for (int k = 0; k < d->peers[r].nout; k++) free(d->peers[r].out[k].text);
      free(d->peers[r].out);
      free(d->peers[r].can);
    }
  free(d->peers);
  if (d->rx)
    for (int r = 0; r < d->size; r++) kg_wire_free(&d->rx[r].w);
  free(d->rx);
  d->rx = NULL;
  fflush(stdout);
  fflush(stderr);
  if (lost || stop_signal) {
    /* a dropped rank cannot join MPI_Finalize (it would wait for it forever): end the job here */
    MPI_Abort(MPI_COMM_WORLD, rc ? rc : 0);
  }
  free(sends);
  MPI_Finalize();
  free(d);
  return rc;
}
#endif
