/* Runs a compiler in a private temporary folder (see compiler.h): fork/execvp with no shell, output through a
 * pipe.
 *
 * Both pipes are close-on-exec, so compilers that other threads start at the same time do not inherit them (and
 * keep them open past our compiler's exit). Between fork and exec the child only calls async-signal-safe
 * functions; when the exec fails it sends its errno through the second pipe and the caller words the message.
 *
 * Build folders are named after the owning process ("kgen-<pid>-XXXXXX") and every live one is listed where a
 * signal handler can find it: a kgen ended by SIGINT/SIGTERM/SIGHUP removes them (kg_compiler_cleanup_on_signals),
 * and one that died without a chance to (SIGKILL, a crash) leaves folders that the next kgen removes once it sees
 * that their owner is gone (kg_compiler_clean_stale).
 *
 * Requires: POSIX (pipe2, fork, execvp, mkdtemp). */
#include "compiler.h"
#include "../base/clock.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- what a signal handler must find: live build folders and running compilers ---- */

/* Nodes are never freed (their number is the peak of folders alive at once), so the handler can walk the list
 * without a lock while other threads add and release folders. */
typedef struct live_dir {
  struct live_dir *next;
  atomic_int used;
  char path[PATH_MAX];
} live_dir;
static _Atomic(live_dir *) live_head;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
/* Process groups of running compilers (0: a free slot). More compilers than slots run unlisted, which only costs
 * the cleanup its kill of them. */
#define MAX_LIVE_COMPILERS 256
static atomic_int live_compilers[MAX_LIVE_COMPILERS];
static atomic_int dying; /* a handler is cleaning up: make no new folder */

static void live_dir_add(const char *path) {
  if (strlen(path) >= PATH_MAX) return;
  pthread_mutex_lock(&live_lock);
  live_dir *d = atomic_load(&live_head);
  while (d && atomic_load(&d->used)) d = d->next;
  if (!d && (d = calloc(1, sizeof *d))) {
    d->next = atomic_load(&live_head);
    atomic_store(&live_head, d);
  }
  if (d) {
    memcpy(d->path, path, strlen(path) + 1);
    atomic_store(&d->used, 1);
  }
  pthread_mutex_unlock(&live_lock);
}

static void live_dir_remove(const char *path) {
  pthread_mutex_lock(&live_lock);
  for (live_dir *d = atomic_load(&live_head); d; d = d->next)
    if (atomic_load(&d->used) && !strcmp(d->path, path)) {
      atomic_store(&d->used, 0);
      break;
    }
  pthread_mutex_unlock(&live_lock);
}

static int live_compiler_add(pid_t pid) {
  for (int i = 0; i < MAX_LIVE_COMPILERS; i++) {
    int zero = 0;
    if (atomic_compare_exchange_strong(&live_compilers[i], &zero, (int)pid)) return i;
  }
  return -1;
}

/* The files a build folder may hold (compiler.h's users: cpu.c, emu.c). */
/* every file a build folder may hold: kernels' (runtime/cpu.c, emu.c) and the precompiled header's (pch.c) */
static const char *const build_files[] = {"kernel.c", "kernel.so",  "kernel.cu",
                                          "cuda_emu.h", "kg_pch.h", "kg_pch.h.gch"};

/* Async-signal-safe "dir/file" into buf (PATH_MAX). */
static void join_safe(char *buf, const char *dir, const char *file) {
  size_t n = 0;
  for (const char *p = dir; *p && n < PATH_MAX - 2; p++) buf[n++] = *p;
  buf[n++] = '/';
  for (const char *p = file; *p && n < PATH_MAX - 1; p++) buf[n++] = *p;
  buf[n] = 0;
}

static void on_fatal_signal(int sig) {
  int saved = errno;
  atomic_store(&dying, 1);
  /* compilers first, so that none writes into a folder being removed; SIGTERM lets gcc remove its own
   * temporaries, SIGKILL follows for one that lingers */
  for (int i = 0; i < MAX_LIVE_COMPILERS; i++) {
    int pid = atomic_load(&live_compilers[i]);
    if (pid > 0) kill(-pid, SIGTERM);
  }
  struct timespec step = {0, 10 * 1000 * 1000};
  for (int tries = 0; tries < 100; tries++) {
    int left = 0;
    for (int i = 0; i < MAX_LIVE_COMPILERS; i++) {
      int pid = atomic_load(&live_compilers[i]);
      if (pid <= 0) continue;
      waitpid(pid, NULL, WNOHANG); /* a zombie leader would keep its group "alive" to kill(-pid, 0) */
      if (kill(-pid, 0) == 0) left = 1;
    }
    if (!left) break;
    nanosleep(&step, NULL);
  }
  for (int i = 0; i < MAX_LIVE_COMPILERS; i++) {
    int pid = atomic_load(&live_compilers[i]);
    if (pid > 0) kill(-pid, SIGKILL);
  }
  char buf[PATH_MAX];
  for (live_dir *d = atomic_load(&live_head); d; d = d->next) {
    if (!atomic_load(&d->used)) continue;
    for (size_t i = 0; i < sizeof build_files / sizeof *build_files; i++) {
      join_safe(buf, d->path, build_files[i]);
      unlink(buf);
    }
    rmdir(d->path);
  }
  signal(sig, SIG_DFL);
  errno = saved;
  raise(sig);
}

static void install_handlers(void) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
    struct sigaction old;
    if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sigfillset(&sa.sa_mask);
    sigaction(sigs[i], &sa, NULL);
  }
}

void kg_compiler_cleanup_on_signals(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, install_handlers);
}

static const char *tmp_dir(void) {
  const char *tmp = getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

/* Whether name is a build folder's ("kgen-<pid>-XXXXXX" or "kgen-emu-<pid>-XXXXXX"); *pid gets its owner. */
static int build_dir_owner(const char *name, long *pid) {
  if (strncmp(name, "kgen-", 5)) return 0;
  name += 5;
  if (!strncmp(name, "emu-", 4)) name += 4;
  char *end;
  if (*name < '1' || *name > '9') return 0;
  errno = 0;
  long v = strtol(name, &end, 10);
  if (errno || *end != '-' || strlen(end + 1) != 6) return 0;
  *pid = v;
  return 1;
}

int kg_compiler_clean_stale(void) {
  const char *tmp = tmp_dir();
  DIR *dir = opendir(tmp);
  if (!dir) return 0;
  int removed = 0;
  uid_t me = getuid();
  struct dirent *e;
  while ((e = readdir(dir))) {
    long pid;
    if (!build_dir_owner(e->d_name, &pid) || pid == (long)getpid() || pid > INT_MAX) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to ask): keep */
    char *path = kg_compiler_join_path(tmp, e->d_name);
    struct stat st;
    if (!path || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != me) {
      free(path);
      continue;
    }
    DIR *sub = opendir(path);
    struct dirent *f;
    while (sub && (f = readdir(sub))) {
      if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, "..")) continue;
      char *fp = kg_compiler_join_path(path, f->d_name);
      if (fp) unlink(fp);
      free(fp);
    }
    if (sub) closedir(sub);
    removed += rmdir(path) == 0;
    free(path);
  }
  closedir(dir);
  return removed;
}

char *kg_compiler_join_path(const char *dir, const char *file) {
  size_t n = strlen(dir) + strlen(file) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, file);
  return p;
}

char *kg_compiler_make_dir(const char *prefix, char **log) {
  const char *tmp = tmp_dir();
  size_t n = strlen(tmp) + strlen(prefix) + 40;
  char *dir = malloc(n);
  if (dir) snprintf(dir, n, "%s/%s%ld-XXXXXX", tmp, prefix, (long)getpid());
  if (dir && atomic_load(&dying)) errno = EINTR;
  else if (dir && mkdtemp(dir)) {
    live_dir_add(dir);
    return dir;
  }
  char msg[1024];
  snprintf(msg, sizeof msg, "kgen: cannot create a build folder under %s (TMPDIR): %s", tmp, strerror(errno));
  free(dir);
  free(*log);
  *log = strdup(msg);
  return NULL;
}

int kg_compiler_write_file(const char *dir, const char *file, const char *text) {
  char *path = kg_compiler_join_path(dir, file);
  if (!path) return -1;
  FILE *f = fopen(path, "wb");
  free(path);
  if (!f) return -1;
  size_t n = strlen(text);
  int ok = fwrite(text, 1, n, f) == n;
  ok = (fclose(f) == 0) && ok;
  return ok ? 0 : -1;
}

int kg_compiler_split_words(char *s, char **words, int max) {
  int n = 0;
  /* strtok_r: builds run on several threads at once */
  for (char *save = NULL, *w = strtok_r(s, " \t\n", &save); w && n < max; w = strtok_r(NULL, " \t\n", &save))
    words[n++] = w;
  return n;
}

/* Everything readable from fd until end of file, NUL-terminated (NULL when empty). When memory runs out the rest
 * is read and dropped: the log is cut short, the compiler is not left blocked on a full pipe. */
double kg_compiler_time_limit(void) {
  const char *e = getenv("KGEN_COMPILE_TIMEOUT");
  if (e && *e) {
    char *end;
    double v = strtod(e, &end);
    if (!*end && v >= 0) return v;
  }
  return 600;
}

void kg_compiler_log_timeout(char **log, const char *who, const char *cmd) {
  const char *old = *log ? *log : "";
  size_t n = strlen(old) + strlen(who) + strlen(cmd) + 160;
  char *s = malloc(n);
  if (!s) return;
  snprintf(s, n, "%s%skgen: %s '%s' ran past its time limit of %g s (KGEN_COMPILE_TIMEOUT) and was stopped", old,
           *old ? "\n" : "", who, cmd, kg_compiler_time_limit());
  free(*log);
  *log = s;
}

/* Reads fd to its end (the compiler and everything it started have exited or closed it), keeping at most
 * KG_COMPILER_MAX_LOG bytes. After limit_s seconds (0: never) the process group pgid gets SIGTERM, which lets
 * gcc's driver remove its temporary files, then SIGKILL if it still runs 2 s later; *timed_out is set and the rest
 * read (the pipe closes as the group dies). */
static char *read_all(int fd, pid_t pgid, double limit_s, int *timed_out) {
  char *buf = NULL, scratch[4096];
  size_t len = 0, cap = 0;
  int full = 0, sig = SIGTERM;
  double deadline = limit_s > 0 ? kg_now_s() + limit_s : 0;
  *timed_out = 0;
  for (;;) {
    if (deadline > 0) {
      double left = deadline - kg_now_s();
      struct pollfd pfd = {fd, POLLIN, 0};
      int pr = left > 0 ? poll(&pfd, 1, left > 3600 ? 3600 * 1000 : (int)(left * 1000) + 1) : 0;
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) {
        kill(-pgid, sig);
        kill(pgid, sig);
        *timed_out = 1;
        deadline = sig == SIGTERM ? kg_now_s() + 2 : 0;
        sig = SIGKILL;
        continue;
      }
    }
    if (!full && len + 4096 > cap) {
      size_t ncap = cap ? cap * 2 : 8192;
      char *nb = ncap <= KG_COMPILER_MAX_LOG + 1 ? realloc(buf, ncap) : NULL;
      if (nb) {
        buf = nb;
        cap = ncap;
      } else {
        full = 1;
      }
    }
    ssize_t r = full ? read(fd, scratch, sizeof scratch) : read(fd, buf + len, cap - len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (!full) len += (size_t)r;
  }
  if (!len) {
    free(buf);
    return NULL;
  }
  buf[len] = 0;
  return buf;
}

int kg_compiler_run_command(char *const argv[], const char *dir, char **out) {
  *out = NULL;
  int fd[2], efd[2];
  if (pipe2(fd, O_CLOEXEC) != 0) return -1;
  if (pipe2(efd, O_CLOEXEC) != 0) {
    int e = errno;
    close(fd[0]);
    close(fd[1]);
    errno = e;
    return -1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(fd[0]);
    close(fd[1]);
    close(efd[0]);
    close(efd[1]);
    errno = e;
    return -1;
  }
  if (pid == 0) {
    /* dup2 clears close-on-exec on 1 and 2 only */
    dup2(fd[1], STDOUT_FILENO);
    dup2(fd[1], STDERR_FILENO);
    close(fd[0]);
    close(fd[1]);
    close(efd[0]);
    setpgid(0, 0); /* its own group, which the signal cleanup kills whole (the driver and cc1, as, ld) */
    if (dir && chdir(dir) != 0) _exit(126);
    execvp(argv[0], argv);
    int e = errno;
    ssize_t wr = write(efd[1], &e, sizeof e);
    (void)wr;
    _exit(127);
  }
  setpgid(pid, pid); /* also here: the cleanup may run before the child's own call */
  int slot = live_compiler_add(pid);
  close(fd[1]);
  close(efd[1]);
  int timed_out;
  *out = read_all(fd[0], pid, kg_compiler_time_limit(), &timed_out);
  close(fd[0]);
  int exec_errno = 0;
  ssize_t r;
  while ((r = read(efd[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close(efd[0]);
  int st = 0;
  pid_t w;
  while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {
  }
  if (slot >= 0) atomic_store(&live_compilers[slot], 0);
  if (r == (ssize_t)sizeof exec_errno) {
    errno = exec_errno;
    return KG_COMPILER_NO_EXEC;
  }
  if (timed_out) return KG_COMPILER_TIMEOUT;
  if (w < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : KG_COMPILER_SIGNALED;
}

void kg_compiler_remove_dir(char **dir, const char *const *files, size_t nfiles) {
  if (!*dir) return;
  live_dir_remove(*dir);
  for (size_t i = 0; i < nfiles; i++) {
    char *p = kg_compiler_join_path(*dir, files[i]);
    if (p) unlink(p);
    free(p);
  }
  rmdir(*dir);
  free(*dir);
  *dir = NULL;
}
