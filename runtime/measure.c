/* The measurement harness, caller's side (see measure.h for the contract, worker.h for the protocol, worker.c for
 * the process that runs candidates).
 *
 * kg_measurer_new draws the inputs and computes the reference once, then places inputs and outputs in one memfd
 * that both processes map, each buffer between inaccessible pages (kg_buffer_map); the worker maps inputs
 * read-only. kg_measure_batch then
 *   1. builds every candidate on OpenMP threads with kg_candidate_build (runtime/pipeline.h): schedule + trace ->
 *      lower -> print -> compile (C: kg_cpu_build; GPU: NVRTC and the device's limits; emulator: the launch-shape
 *      limits of the arch, NVRTC where it loads, and kg_emu_build). A failure here is the candidate's result
 *      (compile_error, resource_limit) and never reaches the worker;
 *   2. runs the built ones one at a time: poisons the shared outputs, has the worker run the candidate once,
 *      compares the shared outputs with the cached reference, and only then asks for timed repeats.
 * A worker that dies (signal, exit) or does not answer in time (it is then killed) is reaped and started again
 * before the next candidate; its candidate gets runtime_error or timeout, except that a worker killed from outside
 * (SIGKILL, SIGTERM, ...: not a fault of the kernel) runs its candidate again once first.
 *
 * Failures of the environment rather than the candidate are marked (env_fault, see measure.h) where they are
 * seen: by the builders (no folder, no compiler), by a known-good probe of the toolchain after a compile error,
 * and by the worker (start, module load).
 *
 * The timing request's deadline is timeout_s plus what the repeats themselves need: one warm-up and at least
 * three runs or min_repeat_s of work, i.e. timeout_s + 4 x (the verification run's time) + min_repeat_s, so that
 * a slow but finite kernel is not called a hang.
 *
 * The worker loads what the build left on disk: the C or emulator module by the path the caller's own dlopen
 * resolved (dlinfo), the cubin bytes inline in the request. Build folders live until the end of the batch.
 *
 * Requires: Linux (memfd, /proc/self/exe). The caller's SIGCHLD must not be ignored (waitpid reaps the worker). */
#include "measure.h"
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>
#include "../base/clock.h"
#include "../base/xalloc.h"
#include "../base/stats.h"
#include "pipeline.h"
#include "cpu.h"
#include "verify.h"
#include "estimate.h"
#include "worker.h"

extern char **environ;

struct kg_measurer {
  const kg_program *p;
  kg_measure_opts o;
  kg_runner runner;
  char arch[80];
  int load_ptx;         /* GPU: --arch differs from the device's, so the driver JITs the PTX instead of the cubin */
  kg_gpu_limits limits; /* GPU: the device's; emulator: the arch's */
  char device[640];
  double flops, bytes;

  kg_data data;      /* the reference (ref); its own input/output arrays are released */
  kg_data view;      /* inputs/outputs pointing at the shared buffers, ref = data.ref (owns nothing) */
  int memfd;
  int nbuf;          /* inputs then outputs */
  int64_t *numel;    /* per buffer: its 4-byte words (kg_data_words), as the worker takes them */
  size_t *file_off;
  void **map_base;
  size_t *map_len;

  pid_t pid;         /* the worker, or -1 */
  int outside_death; /* the last worker_call lost the worker to a signal from outside (see killed_from_outside) */
  int sock;
  int starts;
  kg_wire req, rep;
  double build_s, run_s; /* wall time spent in each phase of kg_measure_batch, over its life */
  double best_s;         /* the fastest median timed or hinted (the early cut's reference); 0: none */
};

void kg_measure_result_free(kg_measure_result *r) {
  if (!r) return;
  free(r->times);
  free(r->res);
  free(r->quality);
  r->times = NULL;
  r->res = NULL;
  r->quality = NULL;
  r->runs = r->nres = r->nquality = 0;
}

kg_runner kg_measurer_runner(const kg_measurer *m) { return m->runner; }
const char *kg_measurer_device(const kg_measurer *m) { return m->device; }
const char *kg_measurer_arch(const kg_measurer *m) { return m->arch; }

void kg_device_split(const char *desc, char *name, size_t nlen, char *versions, size_t vlen) {
  const char *open = strstr(desc, " (");
  size_t n = open ? (size_t)(open - desc) : strlen(desc);
  snprintf(name, nlen, "%.*s", (int)n, desc);
  versions[0] = 0;
  if (open) {
    size_t len = strlen(open + 2);
    if (len > 0 && open[2 + len - 1] == ')') len--;
    snprintf(versions, vlen, "%.*s", (int)len, open + 2);
  }
}
const kg_gpu_limits *kg_measurer_limits(const kg_measurer *m) {
  return m->runner == KG_RUNNER_CPU ? NULL : &m->limits;
}
void kg_measurer_phase_times(const kg_measurer *m, double *build_s, double *run_s) {
  *build_s = m->build_s;
  *run_s = m->run_s;
}
int kg_measurer_worker_starts(const kg_measurer *m) { return m->starts; }
const float *kg_measurer_buffer(const kg_measurer *m, int i) {
  if (i < 0 || i >= m->nbuf) return NULL;
  return i < m->p->ninputs ? m->view.inputs[i] : m->view.outputs[i - m->p->ninputs];
}

/* ---- messages ---- */

static void result_msg(kg_measure_result *r, kg_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void result_msg(kg_measure_result *r, kg_status st, const char *fmt, ...) {
  r->status = st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->msg, sizeof r->msg, fmt, ap);
  va_end(ap);
}

/* prefix + the end of log (compiler errors that matter are usually last... but the first error is first: keep the
 * head when it fits, else the first and last parts). */
static void result_log(kg_measure_result *r, kg_status st, const char *prefix, const char *log) {
  r->status = st;
  if (!log || !*log) log = "(no output)";
  size_t room = sizeof r->msg - strlen(prefix) - 1;
  size_t n = strlen(log);
  if (n <= room) {
    snprintf(r->msg, sizeof r->msg, "%s%s", prefix, log);
    return;
  }
  size_t head = room / 2, tail = room - head - 8;
  if (snprintf(r->msg, sizeof r->msg, "%s%.*s\n[...]\n%s", prefix, (int)head, log, log + n - tail) < 0)
    r->msg[0] = 0;
}

static const char *signal_name(int sig) {
  switch (sig) {
  case SIGSEGV: return "SIGSEGV";
  case SIGBUS: return "SIGBUS";
  case SIGFPE: return "SIGFPE";
  case SIGILL: return "SIGILL";
  case SIGABRT: return "SIGABRT";
  case SIGKILL: return "SIGKILL";
  case SIGTERM: return "SIGTERM";
  case SIGTRAP: return "SIGTRAP";
  case SIGSYS: return "SIGSYS";
  case SIGPIPE: return "SIGPIPE";
  case SIGXCPU: return "SIGXCPU";
  default: return NULL;
  }
}

/* ---- the worker process ---- */

/* Waits for the worker to end within grace seconds, then kills it. Fills why with how it ended. Returns the signal
 * that ended it when the worker died of one before being killed here, else 0. */
static int worker_reap(kg_measurer *m, double grace, char *why, size_t whylen) {
  if (why && whylen) why[0] = 0;
  if (m->sock >= 0) close(m->sock);
  m->sock = -1;
  if (m->pid <= 0) return 0;
  int st = 0;
  pid_t r = 0;
  double deadline = kg_now_s() + grace;
  while ((r = waitpid(m->pid, &st, WNOHANG)) == 0 && kg_now_s() < deadline) usleep(2000);
  int killed_here = r == 0;
  if (r == 0) {
    kill(m->pid, SIGKILL);
    while ((r = waitpid(m->pid, &st, 0)) < 0 && errno == EINTR) {
    }
  }
  int sig = r > 0 && !killed_here && WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  if (why && whylen) {
    if (r < 0) {
      snprintf(why, whylen, "the worker ended (its status is unknown: %s)", strerror(errno));
    } else if (WIFSIGNALED(st)) {
      const char *name = signal_name(WTERMSIG(st));
      if (name)
        snprintf(why, whylen, "the worker died from %s (%s)", name, strsignal(WTERMSIG(st)));
      else
        snprintf(why, whylen, "the worker died from signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    } else if (WIFEXITED(st)) {
      snprintf(why, whylen, "the worker exited with status %d", WEXITSTATUS(st));
    }
  }
  m->pid = -1;
  return sig;
}

/* Signals that a kernel does not raise by faulting: someone outside (a user, the OOM killer, a job scheduler)
 * ended the worker. A candidate's own fault is SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT or SIGTRAP. */
static int killed_from_outside(int sig) {
  return sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
}

/* The worker's environment: ours, with the channel's descriptors, and sanitizer runtimes (when the binary has
 * them) told to leave fatal signals alone so that a faulting kernel ends the worker with the signal itself. */
static char **worker_env(const kg_measurer *m, int sock) {
  size_t n = 0;
  while (environ && environ[n]) n++;
  char **env = kg_xrealloc(NULL, sizeof(char *) * (n + 4));
  size_t k = 0;
  const char *asan = NULL, *ubsan = NULL;
  for (size_t i = 0; i < n; i++) {
    if (!strncmp(environ[i], KG_WORKER_ENV "=", strlen(KG_WORKER_ENV) + 1)) continue;
    if (!strncmp(environ[i], "ASAN_OPTIONS=", 13)) {
      asan = environ[i] + 13;
      continue;
    }
    if (!strncmp(environ[i], "UBSAN_OPTIONS=", 14)) {
      ubsan = environ[i] + 14;
      continue;
    }
    env[k++] = strdup(environ[i]);
  }
  static const char *const quiet = "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0";
  char buf[128];
  snprintf(buf, sizeof buf, "%s=%d,%d,%ld", KG_WORKER_ENV, sock, m->memfd, (long)getpid());
  env[k++] = strdup(buf);
  size_t la = (asan ? strlen(asan) : 0) + strlen(quiet) + 32, lu = (ubsan ? strlen(ubsan) : 0) + strlen(quiet) + 32;
  env[k] = kg_xrealloc(NULL, la);
  snprintf(env[k++], la, "ASAN_OPTIONS=%s%s%s", asan ? asan : "", asan && *asan ? ":" : "", quiet);
  env[k] = kg_xrealloc(NULL, lu);
  snprintf(env[k++], lu, "UBSAN_OPTIONS=%s%s%s", ubsan ? ubsan : "", ubsan && *ubsan ? ":" : "", quiet);
  env[k] = NULL;
  for (size_t i = 0; i < k; i++)
    if (!env[i]) abort(); /* strdup out of memory, as kg_xrealloc would */
  return env;
}

static void env_free(char **env) {
  for (size_t i = 0; env[i]; i++) free(env[i]);
  free(env);
}

/* Starts a worker and configures it (CONFIG -> READY). 0, or -1 with the reason. */
static int worker_start(kg_measurer *m, char *err, size_t errlen) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    snprintf(err, errlen, "cannot start the worker: socketpair: %s", strerror(errno));
    return -1;
  }
  char **env = worker_env(m, sv[1]);
  char *const argv[] = {"kgen-measure-worker", NULL};
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "cannot start the worker: fork: %s", strerror(errno));
    close(sv[0]);
    close(sv[1]);
    env_free(env);
    return -1;
  }
  if (pid == 0) {
    /* only async-signal-safe calls until exec */
    fcntl(sv[1], F_SETFD, 0);
    fcntl(m->memfd, F_SETFD, 0);
    execve("/proc/self/exe", argv, env);
    _exit(127);
  }
  env_free(env);
  close(sv[1]);
  m->sock = sv[0];
  m->pid = pid;
  m->starts++;

  kg_wire *q = &m->req;
  kg_wire_reset(q);
  kg_wire_u32(q, KG_MSG_CONFIG);
  kg_wire_u32(q, (uint32_t)m->runner);
  kg_wire_i64(q, m->p->ninputs);
  kg_wire_i64(q, m->p->noutputs);
  for (int i = 0; i < m->nbuf; i++) {
    kg_wire_i64(q, m->numel[i]);
    kg_wire_i64(q, (int64_t)m->file_off[i]);
  }
  /* the bound values of the dynamic sizes, in the program's order (kg_lowered.size_ids order): the one compiled
   * kernel is measured at the program's binding */
  kg_wire_i64(q, kg_program_ndynamic(m->p));
  for (int k = 0; k < m->p->nsizes; k++)
    if (m->p->sizes[k].dynamic) kg_wire_i64(q, m->p->sizes[k].value);
  /* CUDA's initialisation can take seconds on a large machine; the first answer gets more time */
  double wait = m->o.timeout_s > 60 ? m->o.timeout_s : 60;
  int rc = kg_wire_send(m->sock, q);
  if (rc == 0) rc = kg_wire_recv(m->sock, &m->rep, kg_now_s() + wait);
  kg_wire *a = &m->rep;
  if (rc == 0 && kg_wire_get_u32(a) != KG_MSG_READY) rc = -1;
  uint32_t status = rc == 0 ? kg_wire_get_u32(a) : KG_WORKER_FATAL;
  char *msg = rc == 0 ? kg_wire_get_str(a) : NULL;
  if (rc == 0 && !a->bad && status == KG_WORKER_OK) {
    char *name = kg_wire_get_str(a), *arch = kg_wire_get_str(a);
    int64_t sms = kg_wire_get_i64(a), drv = kg_wire_get_i64(a), l2 = kg_wire_get_i64(a);
    kg_gpu_limits l;
    l.max_threads_per_block = (int)kg_wire_get_i64(a);
    for (int d = 0; d < 3; d++) l.max_block[d] = kg_wire_get_i64(a);
    for (int d = 0; d < 3; d++) l.max_grid[d] = kg_wire_get_i64(a);
    l.max_shared_static = kg_wire_get_i64(a);
    l.max_shared_optin = kg_wire_get_i64(a);
    l.max_regs_per_block = (int)kg_wire_get_i64(a);
    l.max_regs_per_thread = (int)kg_wire_get_i64(a);
    if (m->runner == KG_RUNNER_GPU && !a->bad) {
      m->limits = l;
      if (!m->o.arch) snprintf(m->arch, sizeof m->arch, "%s", arch);
      /* a cubin runs only on its own arch family; PTX of an older arch is JIT-compiled for the device */
      m->load_ptx = strcmp(m->arch, arch) != 0;
      const char *nv = kg_nvrtc_version();
      snprintf(m->device, sizeof m->device, "%s (%lld SMs, %lld KB L2, driver %lld.%lld, NVRTC %s)", name,
               (long long)sms, (long long)(l2 >> 10), (long long)(drv / 1000), (long long)(drv % 1000 / 10),
               nv && *nv ? nv : "unavailable");
    }
    free(name);
    free(arch);
    if (!a->bad) {
      free(msg);
      return 0;
    }
    rc = -1;
  }
  char why[256];
  worker_reap(m, 2.0, why, sizeof why);
  if (rc == -2)
    snprintf(err, errlen, "the worker did not start within %.0f s", wait);
  else if (msg && *msg)
    snprintf(err, errlen, "%s", msg);
  else
    snprintf(err, errlen, "cannot start the worker: %s", why[0] ? why : "no answer");
  free(msg);
  return -1;
}

/* Sends m->req and reads the DONE answer into m->rep. 0 when the worker answered (*status: its status; the
 * worker is reaped after a FATAL one); else r holds runtime_error or timeout and the worker is gone. */
static int worker_call(kg_measurer *m, double timeout_s, kg_measure_result *r, uint32_t *status) {
  int rc = kg_wire_send(m->sock, &m->req);
  if (rc == 0) rc = kg_wire_recv(m->sock, &m->rep, kg_now_s() + timeout_s);
  if (rc == 0 && kg_wire_get_u32(&m->rep) != KG_MSG_DONE) rc = -1;
  if (rc == 0) {
    *status = kg_wire_get_u32(&m->rep);
    if (*status == KG_WORKER_FATAL || *status == KG_WORKER_FATAL_ENVFAULT) worker_reap(m, 5.0, NULL, 0);
    return 0;
  }
  char why[256];
  if (rc == -2) {
    kill(m->pid, SIGKILL);
    worker_reap(m, 5.0, why, sizeof why);
    result_msg(r, KG_STATUS_TIMEOUT, "no answer within %.3g s: the worker was killed", timeout_s);
  } else {
    m->outside_death = killed_from_outside(worker_reap(m, 5.0, why, sizeof why));
    result_msg(r, KG_STATUS_RUNTIME_ERROR, "%s", why[0] ? why : "the worker stopped answering");
  }
  return -1;
}

/* ---- the measurer ---- */

static void measurer_unmap(kg_measurer *m) {
  for (int i = 0; i < m->nbuf; i++)
    if (m->map_base && m->map_base[i]) munmap(m->map_base[i], m->map_len[i]);
  if (m->memfd >= 0) close(m->memfd);
  m->memfd = -1;
}

void kg_measurer_free(kg_measurer *m) {
  if (!m) return;
  worker_reap(m, 1.0, NULL, 0); /* closing the socket ends the worker's loop; a stuck one is killed */
  measurer_unmap(m);
  kg_data_free(&m->data);
  free(m->view.inputs);
  free(m->view.outputs);
  free(m->numel);
  free(m->file_off);
  free(m->map_base);
  free(m->map_len);
  kg_wire_free(&m->req);
  kg_wire_free(&m->rep);
  free(m);
}

/* The first line a shell command prints, or "" (for compiler versions in the device description). */
static void command_line(const char *cmd, char *out, size_t len) {
  out[0] = 0;
  FILE *f = popen(cmd, "r");
  if (!f) return;
  if (fgets(out, (int)len, f)) out[strcspn(out, "\n")] = 0;
  char sink[256];
  while (fgets(sink, sizeof sink, f)) {
  }
  pclose(f);
}

static void describe_cpu(kg_measurer *m) {
  char model[256] = "";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      char *colon = strchr(line, ':');
      if (colon && !strncmp(line, "model name", 10)) {
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        snprintf(model, sizeof model, "%s", colon);
        model[strcspn(model, "\n")] = 0;
        break;
      }
    }
    fclose(f);
  }
  /* the instruction-set level the kernels are compiled for: the space sizes its register tiles by it */
  snprintf(m->arch, sizeof m->arch, "%s", kg_cpu_arch_host()->name);
  char cc[256];
  command_line("${CC:-cc} --version 2>/dev/null", cc, sizeof cc);
  snprintf(m->device, sizeof m->device, "%s (%ld cores; cc: %s)", model[0] ? model : "unknown CPU",
           sysconf(_SC_NPROCESSORS_ONLN), cc[0] ? cc : "unknown");
}

kg_measurer *kg_measurer_new(const kg_program *p, const kg_measure_opts *o, char *err, size_t errlen) {
  kg_measurer *m = kg_xrealloc(NULL, sizeof *m);
  memset(m, 0, sizeof *m);
  m->p = p;
  m->o = *o;
  m->memfd = -1;
  m->pid = -1;
  m->sock = -1;
  if (m->o.min_repeat_s <= 0) m->o.min_repeat_s = 0.1;
  if (m->o.timeout_s <= 0) m->o.timeout_s = 10;
  m->runner = o->target == KG_TARGET_C ? KG_RUNNER_CPU : o->emulate ? KG_RUNNER_EMULATOR : KG_RUNNER_GPU;
  m->flops = kg_program_flops(p);
  m->bytes = kg_program_bytes(p);

  if (!kg_worker_linked || access("/proc/self/exe", X_OK) != 0) {
    snprintf(err, errlen, "the measurement worker needs /proc/self/exe: %s", strerror(errno));
    goto fail;
  }
  if (m->runner != KG_RUNNER_CPU) {
    if (o->arch) snprintf(m->arch, sizeof m->arch, "%s", o->arch);
    if (m->runner == KG_RUNNER_EMULATOR && !o->arch) snprintf(m->arch, sizeof m->arch, "sm_86");
    if (m->arch[0] && kg_gpu_limits_for_arch(m->arch, &m->limits) != 0) {
      snprintf(err, errlen, "unknown CUDA arch '%s'", m->arch);
      goto fail;
    }
    /* NVRTC is the GPU's compiler, and the emulator's check of resources where it is there; one that is
     * missing (GPU) or named but unusable (KGEN_NVRTC) would fail every candidate alike */
    char why[600];
    if (kg_nvrtc_setting_check(why, sizeof why) != 0 ||
        (m->runner == KG_RUNNER_GPU && kg_nvrtc_available(why, sizeof why) != 0)) {
      snprintf(err, errlen, "%s", why);
      goto fail;
    }
  }

  m->nbuf = p->ninputs + p->noutputs;
  m->numel = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)(m->nbuf + 1));
  m->file_off = kg_xrealloc(NULL, sizeof(size_t) * (size_t)(m->nbuf + 1));
  m->map_base = kg_xrealloc(NULL, sizeof(void *) * (size_t)(m->nbuf + 1));
  m->map_len = kg_xrealloc(NULL, sizeof(size_t) * (size_t)(m->nbuf + 1));
  memset(m->map_base, 0, sizeof(void *) * (size_t)(m->nbuf + 1));
  size_t total = 0;
  for (int i = 0; i < m->nbuf; i++) {
    /* in 4-byte words: the worker moves buffers as blocks of words, whatever their element type */
    m->numel[i] = kg_data_words(i < p->ninputs ? p->inputs[i] : p->outputs[i - p->ninputs]);
    m->file_off[i] = total;
    total += kg_buffer_span(m->numel[i]);
  }
  if (kg_data_check_memory(p, err, errlen)) goto fail;

  /* data: the reference once; kg_data_reference may redraw the inputs, so they are copied out afterwards */
  if (kg_data_init(&m->data, p, m->o.seed)) {
    kg_data_oom_message(p, 0, err, errlen);
    goto fail;
  }
  int ref;
  if (o->inputs) {
    for (int i = 0; i < p->ninputs; i++) memcpy(m->data.inputs[i], o->inputs[i], (size_t)m->numel[i] * 4);
    ref = kg_data_reference_as_is(&m->data, p);
  } else {
    ref = kg_data_reference(&m->data, p, m->o.seed);
  }
  m->o.inputs = NULL; /* the caller's arrays need not outlive this call */
  if (ref == -2) {
    kg_data_oom_message(p, 1, err, errlen);
    goto fail;
  }
  m->memfd = memfd_create("kgen-measure", MFD_CLOEXEC);
  if (m->memfd < 0 || ftruncate(m->memfd, (off_t)(total ? total : 1)) != 0) {
    snprintf(err, errlen, "cannot make the shared buffers (%zu bytes): %s", total, strerror(errno));
    goto fail;
  }
  m->view.ninputs = p->ninputs;
  m->view.noutputs = p->noutputs;
  m->view.inputs = kg_xrealloc(NULL, sizeof(float *) * (size_t)(p->ninputs + 1));
  m->view.outputs = kg_xrealloc(NULL, sizeof(float *) * (size_t)(p->noutputs + 1));
  m->view.ref = m->data.ref;
  for (int i = 0; i < m->nbuf; i++) {
    float *b = kg_buffer_map(m->memfd, m->file_off[i], m->numel[i], PROT_READ | PROT_WRITE, &m->map_base[i],
                             &m->map_len[i]);
    if (!b) {
      snprintf(err, errlen, "cannot map the shared buffers: %s", strerror(errno));
      goto fail;
    }
    if (i < p->ninputs) {
      m->view.inputs[i] = b;
      memcpy(b, m->data.inputs[i], (size_t)m->numel[i] * 4);
      free(m->data.inputs[i]);
      m->data.inputs[i] = NULL;
    } else {
      int k = i - p->ninputs;
      m->view.outputs[k] = b;
      free(m->data.outputs[k]);
      m->data.outputs[k] = NULL;
    }
  }

  if (m->runner == KG_RUNNER_CPU) describe_cpu(m);
  if (m->runner == KG_RUNNER_EMULATOR) {
    char cxx[256];
    command_line("${CXX:-g++} --version 2>/dev/null", cxx, sizeof cxx);
    snprintf(m->device, sizeof m->device, "CUDA emulator (limits of %s; c++: %s)", m->arch,
             cxx[0] ? cxx : "unknown");
  }
  if (worker_start(m, err, errlen) != 0) goto fail;
  return m;
fail:
  kg_measurer_free(m);
  return NULL;
}

/* ---- building ---- */

typedef struct built {
  int ok;
  char *so_path;           /* C / emulator: the module the worker loads */
  kg_build b;
} built;

/* The file a dlopen handle was loaded from (heap), or NULL. */
static char *handle_path(void *handle) {
  struct link_map *lm = NULL;
  if (!handle || dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name || !*lm->l_name) return NULL;
  return strdup(lm->l_name);
}

static int cpu_check(const char *arch, char *why, size_t whylen) {
  (void)arch;
  return kg_cpu_toolchain_check(why, whylen);
}
static int emu_check(const char *arch, char *why, size_t whylen) {
  (void)arch;
  return kg_emu_toolchain_check(why, whylen);
}

/* After a failed compile: the environment's fault when the builder saw it (env), or when the toolchain cannot
 * build a trivial known-good kernel either (checked once per setting; msg then says so). Otherwise the compiler
 * rejected this candidate's code. */
static void classify_build(kg_measure_result *r, int env, const char *log,
                           int (*check)(const char *, char *, size_t), const char *arch) {
  char why[1024];
  if (env) result_log(r, r->status, "", log); /* says what failed itself: not the compiler's verdict */
  if (!env && check(arch, why, sizeof why) != 0) {
    result_msg(r, r->status, "%s", why);
    env = 1;
  }
  r->env_fault = env;
}

/* The candidate's build failure as its result, worded as the measurement harness always has. */
static void build_failed(const kg_measurer *m, const built *bt, kg_measure_result *r) {
  const kg_build_error *e = &bt->b.front.error;
  switch (e->stage) {
  case KG_BUILD_SCHEDULE: result_msg(r, KG_STATUS_COMPILE_ERROR, "schedule: %s", e->msg); return;
  case KG_BUILD_LOWER: result_msg(r, KG_STATUS_COMPILE_ERROR, "%s", e->msg); return; /* "lower: ..." itself */
  case KG_BUILD_PRINT:
    if (m->o.target == KG_TARGET_C)
      result_msg(r, KG_STATUS_COMPILE_ERROR, "codegen c: %s", e->msg);
    else
      result_msg(r, e->over_limit ? KG_STATUS_RESOURCE_LIMIT : KG_STATUS_COMPILE_ERROR, "%s", e->msg);
    return;
  case KG_BUILD_LIMITS: result_msg(r, KG_STATUS_RESOURCE_LIMIT, "%s", e->msg); return;
  default: break;
  }
  switch (bt->b.tool) {
  case KG_BUILD_TOOL_CC:
    result_log(r, KG_STATUS_COMPILE_ERROR, "C compiler failed:\n", e->log);
    classify_build(r, e->env_fault, e->log, cpu_check, NULL);
    break;
  case KG_BUILD_TOOL_NVRTC:
    result_log(r, KG_STATUS_COMPILE_ERROR, "NVRTC failed:\n", e->log);
    classify_build(r, e->env_fault, e->log, kg_nvrtc_toolchain_check, m->arch);
    break;
  case KG_BUILD_TOOL_EMU:
    result_log(r, KG_STATUS_COMPILE_ERROR, "emulator build failed:\n", e->log);
    classify_build(r, e->env_fault, e->log, emu_check, NULL);
    break;
  default: result_msg(r, KG_STATUS_COMPILE_ERROR, "%s", e->msg); break;
  }
}

/* The analytical estimate of a built CUDA candidate (runtime/estimate.h), from the quality report r holds when the
 * caller asked for one, else from the build's. */
static void estimate(const kg_measurer *m, built *bt, kg_measure_result *r) {
  const kg_cuda_program *cp = &bt->b.front.cuda;
  int n = cp->nkernels;
  if (n <= 0 || !bt->b.front.ir) return;
  kg_kernel_quality *q = kg_xrealloc(NULL, sizeof *q * (size_t)n);
  kg_kernel_estimate *k = kg_xrealloc(NULL, sizeof *k * (size_t)n);
  char why[256];
  double s = r->nquality == n ? kg_cuda_estimate(bt->b.front.ir, r->quality, n, m->arch, k, why, sizeof why)
                              : kg_cuda_estimate_build(cp, bt->b.have_cubin ? &bt->b.cubin : NULL, bt->b.front.ir,
                                                       m->arch, q, k, why, sizeof why);
  if (s > 0) {
    r->estimate_s = s;
    kg_cuda_estimate_line(k, n, s, m->arch, r->estimate_line, sizeof r->estimate_line);
  }
  free(q);
  free(k);
}

static void build_one(const kg_measurer *m, const kg_candidate *c, built *bt, kg_measure_result *r) {
  double t0 = kg_now_s();
  kg_build_opts o = {.target = m->o.target,
                     .stop = KG_BUILD_COMPILE,
                     .trace = c->trace,
                     .source = c->source,
                     .emulate = m->runner == KG_RUNNER_EMULATOR,
                     .arch = m->arch,
                     .limits = &m->limits,
                     .at_bound_sizes = 1};
  int rc = kg_candidate_build(m->p, &o, &bt->b);
  /* what NVRTC reports is kept also when a limit then rejects the candidate */
  if (bt->b.have_cubin && bt->b.tool != KG_BUILD_TOOL_NVRTC && bt->b.cubin.nres > 0) {
    r->res = kg_xrealloc(NULL, sizeof(kg_kernel_resources) * (size_t)bt->b.cubin.nres);
    memcpy(r->res, bt->b.cubin.res, sizeof(kg_kernel_resources) * (size_t)bt->b.cubin.nres);
    r->nres = bt->b.cubin.nres;
  }
  /* the report reads what this build made (launch shapes, the resource report, the PTX, the IR) */
  if (rc == 0 && m->o.quality && m->o.target == KG_TARGET_CUDA && bt->b.have_cubin && bt->b.front.cuda.nkernels > 0) {
    int n = bt->b.front.cuda.nkernels;
    kg_kernel_quality *q = kg_xrealloc(NULL, sizeof *q * (size_t)n);
    char why[256];
    if (kg_cuda_quality(&bt->b.front.cuda, &bt->b.cubin, m->arch, q, why, sizeof why) == 0) {
      kg_cuda_quality_ir(bt->b.front.ir, q, n);
      r->quality = q;
      r->nquality = n;
    } else {
      free(q);
    }
  }
  if (rc == 0 && m->o.target == KG_TARGET_CUDA && (m->runner == KG_RUNNER_EMULATOR || m->o.quality))
    estimate(m, bt, r);
  if (rc != 0) {
    build_failed(m, bt, r);
  } else {
    if (m->runner == KG_RUNNER_CPU) bt->so_path = handle_path(bt->b.cpu.handle);
    if (m->runner == KG_RUNNER_EMULATOR) bt->so_path = handle_path(bt->b.emu.handle);
    if (m->runner != KG_RUNNER_GPU && !bt->so_path)
      result_msg(r, KG_STATUS_COMPILE_ERROR, "the built module's file cannot be found (dlinfo failed)");
    else
      bt->ok = 1;
  }
  r->compile_s = kg_now_s() - t0;
}

static void built_free(built *b) {
  kg_build_free(&b->b);
  free(b->so_path);
}

/* ---- running ---- */

/* The launch table of a CUDA candidate. With dynamic sizes, the worker runs it only at the program's bound values
 * (its CONFIG): the grids and temporaries go resolved at those, then the sizes' names and ranges (the kernels take
 * the values as leading arguments). build_one checked that they resolve. */
static void put_program(kg_wire *q, const kg_cuda_program *p, const kg_program *prog) {
  int64_t *sizes = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)(p->nsizes + 1));
  int64_t(*grid)[3] = kg_xrealloc(NULL, sizeof *grid * (size_t)(p->nkernels + 1));
  int64_t *temps = kg_xrealloc(NULL, sizeof(int64_t) * (size_t)(p->ntemps + 1));
  char why[256];
  kg_build_bound_sizes(prog, p, sizes);
  if (kg_cuda_program_grid(p, sizes, grid, temps, why, sizeof why) != 0) {
    for (int k = 0; k < p->nkernels; k++) memcpy(grid[k], p->kernels[k].grid, sizeof grid[k]);
    memcpy(temps, p->temp_elems, sizeof(int64_t) * (size_t)p->ntemps);
  }
  kg_wire_i64(q, p->nkernels);
  for (int k = 0; k < p->nkernels; k++) {
    const kg_cuda_kernel *kk = &p->kernels[k];
    kg_wire_str(q, kk->name);
    for (int d = 0; d < 3; d++) kg_wire_i64(q, grid[k][d]);
    for (int d = 0; d < 3; d++) kg_wire_i64(q, kk->block[d]);
    kg_wire_i64(q, kk->static_shared);
    kg_wire_i64(q, kk->dynamic_shared);
  }
  kg_wire_i64(q, p->nparams);
  kg_wire_i64(q, p->ntemps);
  for (int t = 0; t < p->ntemps; t++) kg_wire_i64(q, temps[t]);
  kg_wire_i64(q, p->nsizes);
  for (int i = 0; i < p->nsizes; i++) {
    kg_wire_str(q, p->size_names[i]);
    kg_wire_i64(q, p->size_lo[i]);
    kg_wire_i64(q, p->size_hi[i]);
  }
  free(sizes);
  free(grid);
  free(temps);
}

/* Asks the worker to time the loaded candidate (verified in run_s): a warm-up and repeats, or with probe one run.
 * 0 with the times (heap, *n >= 1), or -1 with r's status and message set. */
static int time_request(kg_measurer *m, int probe, double run_s, kg_measure_result *r, double **times, int *n) {
  kg_wire *q = &m->req;
  uint32_t st;
  kg_wire_reset(q);
  kg_wire_u32(q, KG_MSG_TIME);
  kg_wire_f64(q, m->o.min_repeat_s);
  kg_wire_u32(q, (uint32_t)(m->o.flush_l2 != 0));
  kg_wire_u32(q, (uint32_t)(probe != 0));
  if (worker_call(m, m->o.timeout_s + (probe ? 1 : 4) * run_s + (probe ? 0 : m->o.min_repeat_s), r, &st) != 0)
    return -1;
  char *msg = kg_wire_get_str(&m->rep);
  kg_wire_get_f64(&m->rep);
  int64_t got = kg_wire_get_i64(&m->rep);
  const void *tp = got > 0 ? kg_wire_take(&m->rep, sizeof(double) * (size_t)got) : NULL;
  if (st != KG_WORKER_OK || !tp) {
    result_msg(r, KG_STATUS_RUNTIME_ERROR, "timing: %s", st != KG_WORKER_OK ? msg : "the worker sent no times");
    free(msg);
    return -1;
  }
  free(msg);
  *n = (int)got;
  *times = kg_xrealloc(NULL, sizeof(double) * (size_t)got);
  memcpy(*times, tp, sizeof(double) * (size_t)got);
  return 0;
}

static void run_attempt(kg_measurer *m, const built *b, kg_measure_result *r) {
  int st0;
  if (m->pid > 0 && waitpid(m->pid, &st0, WNOHANG) == m->pid) {
    /* died between candidates (e.g. the OOM killer): not this candidate's fault */
    m->pid = -1;
    worker_reap(m, 0, NULL, 0);
  }
  if (m->pid < 0) {
    char err[1024];
    if (worker_start(m, err, sizeof err) != 0) {
      result_msg(r, KG_STATUS_RUNTIME_ERROR, "%s", err);
      r->env_fault = 1;
      return;
    }
  }
  kg_data_poison(&m->view, m->p);
  kg_wire *q = &m->req;
  kg_wire_reset(q);
  kg_wire_u32(q, KG_MSG_VERIFY);
  kg_wire_str(q, b->so_path);
  if (m->runner == KG_RUNNER_GPU && m->load_ptx)
    kg_wire_bytes(q, b->b.cubin.ptx, b->b.cubin.ptx ? strlen(b->b.cubin.ptx) + 1 : 0);
  else if (m->runner == KG_RUNNER_GPU)
    kg_wire_bytes(q, b->b.cubin.cubin, b->b.cubin.cubin_size);
  else
    kg_wire_bytes(q, NULL, 0);
  if (m->runner != KG_RUNNER_CPU) put_program(q, &b->b.front.cuda, m->p);
  uint32_t st;
  if (worker_call(m, m->o.timeout_s, r, &st) != 0) return;
  char *msg = kg_wire_get_str(&m->rep);
  double run_s = kg_wire_get_f64(&m->rep);
  if (st != KG_WORKER_OK) {
    result_msg(r, KG_STATUS_RUNTIME_ERROR, "%s", msg);
    r->env_fault = st == KG_WORKER_ENVFAULT || st == KG_WORKER_FATAL_ENVFAULT;
    free(msg);
    return;
  }
  free(msg);
  kg_verify_result v = kg_verify(m->p, &m->view, m->o.rtol);
  r->max_rel_err = v.max_rel_err;
  if (!v.ok) {
    result_msg(r, KG_STATUS_WRONG_ANSWER, "%s", v.msg);
    return;
  }
  if (m->o.no_timing) return;
  /* the early cut (measure.h): a verification run far behind the fastest, and a second, warm run (a one-off
   * stall of the machine, or a first run's page faults, does not decide); else a warm-up and repeats */
  double bar = m->o.early_cut * m->best_s, *times = NULL;
  int n = 0;
  if (m->runner == KG_RUNNER_CPU && m->o.early_cut > 0 && m->best_s > 0 && run_s >= bar &&
      4 * run_s >= m->o.min_repeat_s) {
    if (time_request(m, 1, run_s, r, &times, &n) != 0) return;
    r->cut = times[0] >= bar;
    if (r->cut)
      snprintf(r->msg, sizeof r->msg,
               "timed by one run after its verification run (early cut): %.3g s (verified in %.3g s), %.1fx the "
               "fastest (%.3g s)", times[0], run_s, times[0] / m->best_s, m->best_s);
    else
      free(times);
  }
  if (!r->cut && time_request(m, 0, run_s, r, &times, &n) != 0) return;
  r->runs = n;
  r->times = times;
  kg_stats ts = kg_stats_of(r->times, r->runs);
  r->min_s = ts.min;
  r->max_s = ts.max;
  r->median_s = ts.median;
  if (r->median_s > 0) {
    r->gflops = m->flops / r->median_s * 1e-9;
    r->gbps = m->bytes / r->median_s * 1e-9;
    if (m->best_s <= 0 || r->median_s < m->best_s) m->best_s = r->median_s;
  }
}

void kg_measurer_hint_best(kg_measurer *m, double seconds) {
  if (seconds > 0 && (m->best_s <= 0 || seconds < m->best_s)) m->best_s = seconds;
}

/* A worker killed from outside says nothing about its candidate: the candidate runs again once (in a new worker),
 * and only a second such death is its result. */
static void run_one(kg_measurer *m, const built *b, kg_measure_result *r) {
  m->outside_death = 0;
  run_attempt(m, b, r);
  if (!m->outside_death) return;
  char first[256];
  snprintf(first, sizeof first, "%.200s", r->msg);
  free(r->times);
  r->times = NULL;
  r->runs = 0;
  r->median_s = r->min_s = r->max_s = r->gflops = r->gbps = r->max_rel_err = 0;
  r->status = KG_STATUS_OK;
  r->msg[0] = 0;
  r->env_fault = 0;
  r->cut = 0;
  m->outside_death = 0;
  run_attempt(m, b, r);
  if (m->outside_death) {
    size_t n = strlen(r->msg);
    snprintf(r->msg + n, sizeof r->msg - n, " (twice: the first run also ended so: %s)", first);
  }
}

/* 1 when process pid is stopped (SIGSTOP, job control, a debugger's stop): it cannot give a lock back until someone
 * continues it. 0 when it runs, or is not visible here (gone, or in another PID namespace). */
static int process_stopped(long pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')'); /* the command name in parentheses may hold anything */
  return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

/* Takes the run lock at path for one batch's runs: the open descriptor that holds it (closing it releases it), or
 * -1 (it cannot be opened: runs go on unserialized, as without one). Waiting is bounded, because every measurer
 * sharing the lock waits behind its holder and the tuning waits with them: a rank stopped while it held the lock
 * once hung a whole 3-rank run. The holder writes its pid into the file; a waiter that finds that process stopped
 * for a second, or that has waited bound_s, runs without the lock and sets *unlocked (its timings may then overlap
 * another's). A holder that dies releases the lock with its descriptors. */
static int run_lock_take(const char *path, double bound_s, int *unlocked) {
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return -1;
  double t0 = kg_now_s(), stopped_since = -1;
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      char pid[32];
      int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
      if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)len, 0) != len) {
        /* the pid only lets waiters see a stopped holder: the lock holds without it */
      }
      return fd;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    double now = kg_now_s();
    char pid[32] = "";
    ssize_t r = pread(fd, pid, sizeof pid - 1, 0);
    long holder = r > 0 ? (pid[r] = 0, strtol(pid, NULL, 10)) : 0;
    if (holder > 0 && process_stopped(holder)) {
      if (stopped_since < 0) stopped_since = now;
    } else {
      stopped_since = -1;
    }
    if ((stopped_since >= 0 && now - stopped_since >= 1.0) || now - t0 >= bound_s) break;
    usleep(10000);
  }
  close(fd);
  *unlocked = 1;
  return -1;
}

void kg_measure_batch(kg_measurer *m, const kg_candidate *c, int n, kg_measure_result *out) {
  if (n <= 0) return;
  built *b = kg_xrealloc(NULL, sizeof(built) * (size_t)n);
  memset(b, 0, sizeof(built) * (size_t)n);
  for (int i = 0; i < n; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].status = KG_STATUS_OK;
  }
  int threads = m->o.build_threads > 0 ? m->o.build_threads : omp_get_num_procs();
  if (threads > n) threads = n;
  double t0 = kg_now_s();
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int i = 0; i < n; i++) build_one(m, &c[i], &b[i], &out[i]);
  double built_at = kg_now_s();
  /* waiting for another's runs is neither building nor running */
  int unlocked = 0;
  int lock = m->o.run_lock ? run_lock_take(m->o.run_lock, 60 * (m->o.timeout_s > 0 ? m->o.timeout_s : 10), &unlocked)
                           : -1;
  double t1 = kg_now_s();
  for (int i = 0; i < n; i++) {
    if (b[i].ok) run_one(m, &b[i], &out[i]);
    out[i].unlocked = unlocked;
  }
  if (lock >= 0) close(lock); /* releases the lock */
  m->build_s += built_at - t0;
  m->run_s += kg_now_s() - t1;
  for (int i = 0; i < n; i++) built_free(&b[i]);
  free(b);
}
