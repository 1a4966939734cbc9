/* The measurement worker: the process that runs candidates for measure.c, so that a kernel that faults, hangs or
 * corrupts memory takes down only this process. It is the running binary exec'd afresh (see worker.h for why
 * not a plain fork); a constructor catches KG_WORKER_ENV before main() and serves requests until its socket
 * closes.
 *
 * Runners:
 *   cpu       dlopens the candidate's .so (built by the caller) and calls kgen_entry_args(inputs, outputs, and
 *             for a program with dynamic sizes a pointer to their values, which CONFIG carries) on the shared
 *             buffers: inputs are mapped read-only, every buffer sits between inaccessible pages, so an input
 *             write or an overrun is a SIGSEGV of this process. Timing with clock_gettime.
 *   emulator  dlopens the candidate's emulator module and runs it with kg_emu_run_program_sizes (CONFIG's
 *             sizes); temporaries on this process's heap.
 *   gpu       opens CUDA itself (never the caller: a process that forks must not hold a CUDA context), uploads
 *             the inputs once per life, allocates outputs and temporaries per candidate, copies the poisoned
 *             outputs up and the results back into the shared buffers. After the verification run the inputs
 *             are read back and compared, since a GPU kernel writing an input does not fault. Any CUDA error is
 *             FATAL: the worker answers and exits, because an error such as an illegal address leaves the
 *             context unusable; the caller starts a new worker. Timing with CUDA events, one per repeat.
 *
 * Requires: the caller's CONFIG as the first message. Core dumps are disabled; the worker dies with its
 * parent. */
#include "worker.h"
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include "cudrv.h"
#include "emu.h"
#include "measure.h"
#include "timing.h"

const int kg_worker_linked = 1;


typedef struct worker {
  int sock, memfd;
  kg_runner runner;
  int nin, nout;
  int64_t *numel;   /* inputs then outputs */
  int nsizes;
  int64_t *sizes;   /* the values of the program's dynamic sizes (CONFIG), passed to every candidate */
  float **buf;      /* inputs then outputs: the shared mappings */
  void **map_base;
  size_t *map_len;
  /* the loaded candidate */
  int loaded;
  void *so;
  void (*fn)(float **);
  kg_cuda_program prog;
  float **temps;    /* emulator */
  /* GPU */
  kg_cudrv_device dev;
  kg_devptr *in_dev, *out_dev, *tmp_dev;
  kg_devptr *args_dev;
  kg_cudrv_module mod;
  int mod_loaded;
  kg_cudrv_event_timer timer;
  int timer_ok;
  char err[2048];
} worker;

static void reply(worker *w, int status, const char *msg, double run_s, const double *times, int n) {
  kg_wire o = {0};
  kg_wire_u32(&o, KG_MSG_DONE);
  kg_wire_u32(&o, (uint32_t)status);
  kg_wire_str(&o, msg);
  kg_wire_f64(&o, run_s);
  kg_wire_i64(&o, n);
  kg_wire_put(&o, times, sizeof(double) * (size_t)n);
  int rc = kg_wire_send(w->sock, &o);
  kg_wire_free(&o);
  if (rc != 0) _exit(0); /* the caller is gone */
  if (status == KG_WORKER_FATAL || status == KG_WORKER_FATAL_ENVFAULT) _exit(3);
}

static void release_candidate(worker *w) {
  if (w->mod_loaded) kg_cudrv_module_unload(&w->mod);
  w->mod_loaded = 0;
  if (w->out_dev)
    for (int i = 0; i < w->nout; i++)
      if (w->out_dev[i]) kg_cudrv_free(w->out_dev[i]);
  if (w->tmp_dev)
    for (int i = 0; i < w->prog.ntemps; i++)
      if (w->tmp_dev[i]) kg_cudrv_free(w->tmp_dev[i]);
  free(w->out_dev);
  free(w->tmp_dev);
  free(w->args_dev);
  w->out_dev = w->tmp_dev = w->args_dev = NULL;
  if (w->temps)
    for (int i = 0; i < w->prog.ntemps; i++) free(w->temps[i]);
  free(w->temps);
  w->temps = NULL;
  if (w->so) dlclose(w->so);
  w->so = NULL;
  w->fn = NULL;
  kg_cuda_program_free(&w->prog);
  w->loaded = 0;
}

/* ---- configuration ---- */

static void do_config(worker *w, kg_wire *in) {
  w->runner = (kg_runner)kg_wire_get_u32(in);
  w->nin = (int)kg_wire_get_i64(in);
  w->nout = (int)kg_wire_get_i64(in);
  if (in->bad || w->nin < 0 || w->nout < 0 || w->nin > 4096 || w->nout > 4096) _exit(122);
  int nb = w->nin + w->nout;
  w->numel = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)(nb + 1));
  w->buf = kg_xrealloc(NULL, sizeof(float *) * (size_t)(nb + 1));
  w->map_base = kg_xrealloc(NULL, sizeof(void *) * (size_t)(nb + 1));
  w->map_len = kg_xrealloc(NULL, sizeof(size_t) * (size_t)(nb + 1));
  kg_wire o = {0};
  kg_wire_u32(&o, KG_MSG_READY);
  int status = KG_WORKER_OK;
  w->err[0] = 0;
  for (int i = 0; i < nb; i++) {
    w->numel[i] = kg_wire_get_i64(in);
    int64_t off = kg_wire_get_i64(in);
    if (in->bad) _exit(122);
    int prot = i < w->nin ? PROT_READ : PROT_READ | PROT_WRITE;
    w->buf[i] = kg_buffer_map(w->memfd, (size_t)off, w->numel[i], prot, &w->map_base[i], &w->map_len[i]);
    if (!w->buf[i] && status == KG_WORKER_OK) {
      snprintf(w->err, sizeof w->err, "worker: cannot map buffer %d: %s", i, strerror(errno));
      status = KG_WORKER_FATAL;
    }
  }
  int64_t ns = kg_wire_get_i64(in);
  if (in->bad || ns < 0 || ns > 4096) _exit(122);
  w->nsizes = (int)ns;
  w->sizes = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)(ns + 1));
  for (int i = 0; i < w->nsizes; i++) w->sizes[i] = kg_wire_get_i64(in);
  if (in->bad) _exit(122);
  if (status == KG_WORKER_OK && w->runner == KG_RUNNER_GPU) {
    if (kg_cudrv_open(&w->dev, w->err, sizeof w->err) != 0) {
      status = KG_WORKER_FATAL;
    } else {
      w->in_dev = kg_xrealloc(NULL, sizeof(kg_devptr) * (size_t)(w->nin + 1));
      memset(w->in_dev, 0, sizeof(kg_devptr) * (size_t)(w->nin + 1));
      for (int i = 0; i < w->nin && status == KG_WORKER_OK; i++) {
        size_t bytes = (size_t)w->numel[i] * 4;
        if (kg_cudrv_alloc(&w->in_dev[i], bytes ? bytes : 4, w->err, sizeof w->err) != 0 ||
            kg_cudrv_htod(w->in_dev[i], w->buf[i], bytes, w->err, sizeof w->err) != 0)
          status = KG_WORKER_FATAL;
      }
      if (status == KG_WORKER_OK && kg_cudrv_timer_init(&w->timer, w->err, sizeof w->err) != 0)
        status = KG_WORKER_FATAL;
      w->timer_ok = status == KG_WORKER_OK;
    }
  }
  kg_wire_u32(&o, (uint32_t)status);
  kg_wire_str(&o, w->err);
  /* the device's description (GPU only; zeros otherwise) */
  kg_wire_str(&o, w->dev.name);
  kg_wire_str(&o, w->dev.arch);
  kg_wire_i64(&o, w->dev.sm_count);
  kg_wire_i64(&o, w->dev.driver_version);
  kg_wire_i64(&o, w->dev.l2_bytes);
  const kg_gpu_limits *l = &w->dev.limits;
  kg_wire_i64(&o, l->max_threads_per_block);
  for (int d = 0; d < 3; d++) kg_wire_i64(&o, l->max_block[d]);
  for (int d = 0; d < 3; d++) kg_wire_i64(&o, l->max_grid[d]);
  kg_wire_i64(&o, l->max_shared_static);
  kg_wire_i64(&o, l->max_shared_optin);
  kg_wire_i64(&o, l->max_regs_per_block);
  kg_wire_i64(&o, l->max_regs_per_thread);
  int rc = kg_wire_send(w->sock, &o);
  kg_wire_free(&o);
  if (rc != 0 || status != KG_WORKER_OK) _exit(rc != 0 ? 0 : 3);
}

/* ---- one candidate ---- */

/* The launch table of a CUDA candidate (kernels, temporaries); the source stays with the caller. */
static int read_program(kg_wire *in, kg_cuda_program *p) {
  memset(p, 0, sizeof *p);
  int64_t nk = kg_wire_get_i64(in);
  if (in->bad || nk < 0 || nk > 100000) return -1;
  p->nkernels = (int)nk;
  p->kernels = kg_xrealloc(NULL, sizeof(kg_cuda_kernel) * (size_t)(nk + 1));
  memset(p->kernels, 0, sizeof(kg_cuda_kernel) * (size_t)(nk + 1));
  for (int k = 0; k < p->nkernels; k++) {
    kg_cuda_kernel *kk = &p->kernels[k];
    kk->name = kg_wire_get_str(in);
    for (int d = 0; d < 3; d++) kk->grid[d] = kg_wire_get_i64(in);
    for (int d = 0; d < 3; d++) kk->block[d] = kg_wire_get_i64(in);
    kk->static_shared = kg_wire_get_i64(in);
    kk->dynamic_shared = kg_wire_get_i64(in);
  }
  p->nparams = (int)kg_wire_get_i64(in);
  int64_t nt = kg_wire_get_i64(in);
  if (in->bad || nt < 0 || nt > 100000) return -1;
  p->ntemps = (int)nt;
  p->temp_elems = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)(nt + 1));
  for (int t = 0; t < p->ntemps; t++) {
    p->temp_elems[t] = kg_wire_get_i64(in);
    if (p->temp_elems[t] < 0) return -1;
  }
  /* dynamic sizes: names and ranges (the grids above are resolved at CONFIG's values) */
  int64_t ns = kg_wire_get_i64(in);
  if (in->bad || ns < 0 || ns > 4096) return -1;
  if (ns > 0) {
    p->size_names = kg_xrealloc(NULL, sizeof(char *) * (size_t)ns);
    p->size_lo = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)ns);
    p->size_hi = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)ns);
    for (int i = 0; i < ns; i++) {
      p->size_names[i] = kg_wire_get_str(in);
      p->size_lo[i] = kg_wire_get_i64(in);
      p->size_hi[i] = kg_wire_get_i64(in);
      p->nsizes = i + 1;
    }
  }
  return in->bad ? -1 : 0;
}

static float **host_args(worker *w) {
  int n = w->nin + w->nout + (w->runner == KG_RUNNER_EMULATOR ? w->prog.ntemps : 0);
  float **args = kg_xrealloc(NULL, sizeof(float *) * (size_t)(n + 1));
  for (int i = 0; i < w->nin + w->nout; i++) args[i] = w->buf[i];
  /* C code with dynamic sizes reads their values after the buffers (see kg_codegen_c) */
  if (w->runner == KG_RUNNER_CPU && w->nsizes > 0) args[w->nin + w->nout] = (float *)(void *)w->sizes;
  if (w->runner == KG_RUNNER_EMULATOR)
    for (int t = 0; t < w->prog.ntemps; t++) args[w->nin + w->nout + t] = w->temps[t];
  return args;
}

/* Launches the GPU candidate once and waits for it. */
static int gpu_run(worker *w) {
  if (kg_cudrv_launch_program_sizes(&w->mod, &w->prog, w->args_dev, w->nsizes ? w->sizes : NULL, w->err,
                                   sizeof w->err) != 0)
    return -1;
  return kg_cudrv_sync(w->err, sizeof w->err);
}

static int run_once(worker *w, float **args) {
  switch (w->runner) {
  case KG_RUNNER_CPU:
    w->fn(args);
    return 0;
  case KG_RUNNER_EMULATOR: {
    kg_emu_module em;
    memset(&em, 0, sizeof em);
    em.handle = w->so;
    return kg_emu_run_program_sizes(&em, &w->prog, args, w->nsizes ? w->sizes : NULL, w->err, sizeof w->err);
  }
  case KG_RUNNER_GPU:
    return gpu_run(w);
  }
  return -1;
}

static int gpu_load(worker *w, const void *image, size_t image_len) {
  if (!image || image_len == 0) {
    snprintf(w->err, sizeof w->err, "worker: no cubin for the GPU candidate");
    return -1;
  }
  if (kg_cudrv_module_load(&w->mod, &w->prog, image, w->err, sizeof w->err) != 0) return -1;
  w->mod_loaded = 1;
  int nargs = w->nin + w->nout + w->prog.ntemps;
  w->out_dev = kg_xrealloc(NULL, sizeof(kg_devptr) * (size_t)(w->nout + 1));
  memset(w->out_dev, 0, sizeof(kg_devptr) * (size_t)(w->nout + 1));
  w->tmp_dev = kg_xrealloc(NULL, sizeof(kg_devptr) * (size_t)(w->prog.ntemps + 1));
  memset(w->tmp_dev, 0, sizeof(kg_devptr) * (size_t)(w->prog.ntemps + 1));
  w->args_dev = kg_xrealloc(NULL, sizeof(kg_devptr) * (size_t)(nargs + 1));
  for (int i = 0; i < w->nout; i++) {
    size_t bytes = (size_t)w->numel[w->nin + i] * 4;
    if (kg_cudrv_alloc(&w->out_dev[i], bytes ? bytes : 4, w->err, sizeof w->err) != 0) return -1;
  }
  for (int t = 0; t < w->prog.ntemps; t++) {
    size_t bytes = (size_t)w->prog.temp_elems[t] * 4;
    if (kg_cudrv_alloc(&w->tmp_dev[t], bytes ? bytes : 4, w->err, sizeof w->err) != 0) return -1;
  }
  for (int i = 0; i < w->nin; i++) w->args_dev[i] = w->in_dev[i];
  for (int i = 0; i < w->nout; i++) w->args_dev[w->nin + i] = w->out_dev[i];
  for (int t = 0; t < w->prog.ntemps; t++) w->args_dev[w->nin + w->nout + t] = w->tmp_dev[t];
  return 0;
}

/* GPU verification run: poisoned outputs up, one launch, outputs down; then the inputs must be unchanged. Returns
 * 0, -1 on a CUDA error (err set), 1 when the kernel wrote an input (err set; inputs restored). */
static int gpu_verify(worker *w) {
  for (int i = 0; i < w->nout; i++)
    if (kg_cudrv_htod(w->out_dev[i], w->buf[w->nin + i], (size_t)w->numel[w->nin + i] * 4, w->err,
                     sizeof w->err) != 0)
      return -1;
  if (gpu_run(w) != 0) return -1;
  for (int i = 0; i < w->nout; i++)
    if (kg_cudrv_dtoh(w->buf[w->nin + i], w->out_dev[i], (size_t)w->numel[w->nin + i] * 4, w->err,
                     sizeof w->err) != 0)
      return -1;
  int changed = -1;
  for (int i = 0; i < w->nin && changed < 0; i++) {
    size_t bytes = (size_t)w->numel[i] * 4;
    float *copy = kg_xrealloc(NULL, bytes ? bytes : 4);
    int rc = kg_cudrv_dtoh(copy, w->in_dev[i], bytes, w->err, sizeof w->err);
    if (rc == 0 && memcmp(copy, w->buf[i], bytes) != 0) changed = i;
    free(copy);
    if (rc != 0) return -1;
  }
  if (changed < 0) return 0;
  snprintf(w->err, sizeof w->err, "the kernel wrote input %d (inputs are read-only)", changed);
  char up[512];
  if (kg_cudrv_htod(w->in_dev[changed], w->buf[changed], (size_t)w->numel[changed] * 4, up, sizeof up) != 0) {
    size_t n = strlen(w->err);
    snprintf(w->err + n, sizeof w->err - n, "; restoring it failed: %s", up);
    return -1;
  }
  return 1;
}

static void do_verify(worker *w, kg_wire *in) {
  release_candidate(w);
  w->err[0] = 0;
  char *path = kg_wire_get_str(in);
  size_t image_len;
  const void *image = kg_wire_get_bytes(in, &image_len);
  int bad = in->bad;
  if (!bad && w->runner != KG_RUNNER_CPU) bad = read_program(in, &w->prog) != 0;
  if (bad) {
    free(path);
    reply(w, KG_WORKER_FATAL, "worker: malformed request", 0, NULL, 0);
  }
  if (w->runner != KG_RUNNER_CPU && w->prog.nparams != w->nin + w->nout) {
    free(path);
    snprintf(w->err, sizeof w->err, "worker: the program has %d parameters, the workload %d buffers",
             w->prog.nparams, w->nin + w->nout);
    reply(w, KG_WORKER_ERROR, w->err, 0, NULL, 0);
    return;
  }
  if (w->runner != KG_RUNNER_GPU) {
    w->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!w->so) {
      const char *e = dlerror();
      snprintf(w->err, sizeof w->err, "worker: cannot load %s: %s", path, e ? e : "dlopen failed");
      free(path);
      /* the caller loaded this very file: failing here is the environment's doing (the folder removed, memory) */
      reply(w, KG_WORKER_ENVFAULT, w->err, 0, NULL, 0);
      return;
    }
  }
  free(path);
  if (w->runner == KG_RUNNER_CPU) {
    *(void **)(&w->fn) = dlsym(w->so, "kgen_entry_args");
    if (!w->fn) {
      reply(w, KG_WORKER_ERROR, "worker: the module defines no kgen_entry_args(float **)", 0, NULL, 0);
      return;
    }
  }
  if (w->runner == KG_RUNNER_EMULATOR) {
    w->temps = kg_xrealloc(NULL, sizeof(float *) * (size_t)(w->prog.ntemps + 1));
    for (int t = 0; t < w->prog.ntemps; t++)
      w->temps[t] = kg_xrealloc(NULL, sizeof(float) * (size_t)(w->prog.temp_elems[t] ? w->prog.temp_elems[t] : 1));
  }
  if (w->runner == KG_RUNNER_GPU && gpu_load(w, image, image_len) != 0) {
    /* a driver that cannot take what NVRTC made (too old for its PTX, no JIT, no binary for this GPU) fails
     * every candidate alike */
    static const char *const toolchain[] = {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "CUDA_ERROR_NO_BINARY_FOR_GPU",
                                            "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "CUDA_ERROR_INVALID_PTX",
                                            "CUDA_ERROR_INVALID_IMAGE", "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"};
    int env = 0;
    for (size_t i = 0; i < sizeof toolchain / sizeof *toolchain; i++) env |= strstr(w->err, toolchain[i]) != NULL;
    reply(w, env ? KG_WORKER_FATAL_ENVFAULT : KG_WORKER_FATAL, w->err, 0, NULL, 0);
    return;
  }
  w->loaded = 1;
  double t0 = kg_now_s();
  int rc;
  if (w->runner == KG_RUNNER_GPU) {
    rc = gpu_verify(w);
  } else {
    float **args = host_args(w);
    rc = run_once(w, args);
    free(args);
  }
  double dt = kg_now_s() - t0;
  if (rc != 0) {
    w->loaded = 0;
    /* a CUDA error poisons the context; the emulator's errors (barrier divergence) leave the process sound */
    int fatal = w->runner == KG_RUNNER_GPU && rc < 0;
    reply(w, fatal ? KG_WORKER_FATAL : KG_WORKER_ERROR, w->err, dt, NULL, 0);
    return;
  }
  reply(w, KG_WORKER_OK, "", dt, NULL, 0);
}

/* The timing loop's view of the loaded candidate (runtime/timing.h). */
typedef struct timed {
  worker *w;
  float **args;
  int flush;
} timed;
static int timed_run(void *ctx) {
  timed *t = ctx;
  return run_once(t->w, t->args);
}
/* A GPU repeat: the L2 flush (when asked) before the events, the launch between them. */
static int timed_gpu_run(void *ctx, double *dt) {
  timed *t = ctx;
  worker *w = t->w;
  int rc = 0;
  if (t->flush && kg_cudrv_flush_l2(&w->dev, w->err, sizeof w->err) != 0) rc = -1;
  if (rc == 0) rc = kg_cudrv_timer_start(&w->timer, w->err, sizeof w->err);
  if (rc == 0)
    rc = kg_cudrv_launch_program_sizes(&w->mod, &w->prog, w->args_dev, w->nsizes ? w->sizes : NULL, w->err,
                                      sizeof w->err);
  if (rc == 0) rc = kg_cudrv_timer_stop(&w->timer, dt, w->err, sizeof w->err);
  return rc;
}

static void do_time(worker *w, kg_wire *in) {
  double min_total = kg_wire_get_f64(in);
  int flush = (int)kg_wire_get_u32(in);
  int probe = (int)kg_wire_get_u32(in);
  if (in->bad) reply(w, KG_WORKER_FATAL, "worker: malformed request", 0, NULL, 0);
  if (!w->loaded) {
    reply(w, KG_WORKER_ERROR, "worker: no verified candidate to time", 0, NULL, 0);
    return;
  }
  timed t = {w, w->runner == KG_RUNNER_GPU ? NULL : host_args(w), flush};
  kg_timer_ops ops = {timed_run, w->runner == KG_RUNNER_GPU ? timed_gpu_run : NULL, &t};
  kg_repeats rp;
  int rc;
  if (probe) { /* the verification run just before was its warm-up */
    memset(&rp, 0, sizeof rp);
    rp.times = kg_xrealloc(NULL, sizeof(double));
    rc = kg_time_run(&ops, &rp.times[0]);
    rp.total_s = rp.times[0];
    rp.n = rc == 0;
  } else {
    rc = kg_time_repeats(&ops, min_total, KG_TIME_MAX_RUNS, &rp);
  }
  free(t.args);
  if (rc != 0) {
    kg_repeats_free(&rp);
    reply(w, w->runner == KG_RUNNER_GPU ? KG_WORKER_FATAL : KG_WORKER_ERROR, w->err, 0, NULL, 0);
    return;
  }
  reply(w, KG_WORKER_OK, "", rp.total_s, rp.times, rp.n);
  kg_repeats_free(&rp);
}

void kg_worker_main(int sockfd, int memfd) {
  worker w;
  memset(&w, 0, sizeof w);
  w.sock = sockfd;
  w.memfd = memfd;
  kg_wire in = {0};
  for (;;) {
    if (kg_wire_recv(sockfd, &in, -1) != 0) _exit(0); /* the caller closed the socket: done */
    uint32_t type = kg_wire_get_u32(&in);
    switch (type) {
    case KG_MSG_CONFIG:
      do_config(&w, &in);
      break;
    case KG_MSG_VERIFY:
      do_verify(&w, &in);
      break;
    case KG_MSG_TIME:
      do_time(&w, &in);
      break;
    default:
      _exit(121);
    }
  }
}

/* Runs before main() in the exec'd image; in every other process it returns at once. */
__attribute__((constructor)) static void worker_entry(void) {
  const char *env = getenv(KG_WORKER_ENV);
  if (!env) return;
  int sock = -1, memfd = -1;
  long parent = -1;
  if (sscanf(env, "%d,%d,%ld", &sock, &memfd, &parent) != 3 || sock < 0 || memfd < 0) _exit(120);
  unsetenv(KG_WORKER_ENV);
  struct rlimit core = {0, 0};
  setrlimit(RLIMIT_CORE, &core); /* a faulting candidate must not leave core files behind */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if ((long)getppid() != parent) _exit(0); /* the caller died before the line above */
  kg_worker_main(sock, memfd);
}
