/* Runs a compiler in a private temporary folder (see compiler.h): fork/execvp with no shell, output through a
 * pipe.
 *
 * Both pipes are close-on-exec, so compilers that other threads start at the same time do not inherit them (and
 * keep them open past our compiler's exit). Between fork and exec the child only calls async-signal-safe
 * functions; when the exec fails it sends its errno through the second pipe and the caller words the message.
 *
 * Requires: POSIX (pipe2, fork, execvp, mkdtemp). */
#include "compiler.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

char *kg_compiler_join_path(const char *dir, const char *file) {
  size_t n = strlen(dir) + strlen(file) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, file);
  return p;
}

char *kg_compiler_make_dir(const char *prefix, char **log) {
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  size_t n = strlen(tmp) + strlen(prefix) + 8;
  char *dir = malloc(n);
  if (dir) snprintf(dir, n, "%s/%sXXXXXX", tmp, prefix);
  if (dir && mkdtemp(dir)) return dir;
  char msg[1024];
  snprintf(msg, sizeof msg, "kgen: cannot create a build folder under %s: %s", tmp, strerror(errno));
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
static char *read_all(int fd) {
  char *buf = NULL, scratch[4096];
  size_t len = 0, cap = 0;
  int full = 0;
  for (;;) {
    if (!full && len + 4096 > cap) {
      size_t ncap = cap ? cap * 2 : 8192;
      char *nb = realloc(buf, ncap);
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
    if (dir && chdir(dir) != 0) _exit(126);
    execvp(argv[0], argv);
    int e = errno;
    ssize_t wr = write(efd[1], &e, sizeof e);
    (void)wr;
    _exit(127);
  }
  close(fd[1]);
  close(efd[1]);
  *out = read_all(fd[0]);
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
  if (r == (ssize_t)sizeof exec_errno) {
    errno = exec_errno;
    return KG_COMPILER_NO_EXEC;
  }
  if (w < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

void kg_compiler_remove_dir(char **dir, const char *const *files, size_t nfiles) {
  if (!*dir) return;
  for (size_t i = 0; i < nfiles; i++) {
    char *p = kg_compiler_join_path(*dir, files[i]);
    if (p) unlink(p);
    free(p);
  }
  rmdir(*dir);
  free(*dir);
  *dir = NULL;
}
