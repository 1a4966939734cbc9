/* Bounded reads of the files kgen is given, and creation of the files it appends to (base/file.h). */
#include "file.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

const char *kg_file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG: return "a regular file";
  case S_IFDIR: return "a directory";
  case S_IFIFO: return "a FIFO (named pipe)";
  case S_IFCHR: return "a character device";
  case S_IFBLK: return "a block device";
  case S_IFSOCK: return "a socket";
  default: return "not a regular file";
  }
}

const char *kg_file_format_size(char *buf, size_t len, uint64_t bytes) {
  if (bytes >= ((uint64_t)1 << 30) && bytes % ((uint64_t)1 << 30) == 0)
    snprintf(buf, len, "%llu GiB", (unsigned long long)(bytes >> 30));
  else if (bytes >= ((uint64_t)1 << 20) && bytes % ((uint64_t)1 << 20) == 0)
    snprintf(buf, len, "%llu MiB", (unsigned long long)(bytes >> 20));
  else
    snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
  return buf;
}

/* "PATH: is a FIFO (named pipe), not a regular file"; a directory in strerror's words, as open(2) would say it */
static void not_regular(const char *path, unsigned mode, char *err, size_t errlen) {
  if (S_ISDIR(mode)) set_err(err, errlen, "%s: %s", path, strerror(EISDIR));
  else set_err(err, errlen, "%s: is %s, not a regular file", path, kg_file_kind(mode));
}

static int too_large(const char *path, uint64_t size, size_t limit, char *err, size_t errlen) {
  char lim[32];
  set_err(err, errlen, "%s: file too large (%llu bytes or more; the limit is %s)", path, (unsigned long long)size,
          kg_file_format_size(lim, sizeof lim, limit));
  errno = EFBIG;
  return -1;
}

int kg_file_open_read(const char *path, size_t limit, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    set_err(err, errlen, "%s: %s", path, strerror(e));
    errno = e;
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    set_err(err, errlen, "%s: %s", path, strerror(e));
    close(fd);
    errno = e;
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    not_regular(path, (unsigned)st.st_mode, err, errlen);
    close(fd);
    errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    return -1;
  }
  if ((uint64_t)st.st_size > limit) {
    too_large(path, (uint64_t)st.st_size, limit, err, errlen);
    close(fd);
    errno = EFBIG;
    return -1;
  }
  return fd;
}

char *kg_file_read_fd(int fd, const char *path, size_t limit, size_t *len, char *err, size_t errlen) {
  struct stat st;
  size_t cap = fstat(fd, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size <= limit ? (size_t)st.st_size + 1 : 4096;
  char *buf = malloc(cap + 1);
  size_t n = 0;
  for (;;) {
    if (!buf) {
      set_err(err, errlen, "%s: out of memory reading the file", path);
      errno = ENOMEM;
      return NULL;
    }
    if (n == cap) {
      /* one byte past the limit is enough to know the file is too large */
      size_t ncap = cap > limit / 2 ? limit + 1 : 2 * cap;
      if (ncap <= cap) {
        free(buf);
        too_large(path, n, limit, err, errlen);
        return NULL;
      }
      char *nb = realloc(buf, ncap + 1);
      if (!nb) free(buf);
      buf = nb;
      cap = ncap;
      continue;
    }
    ssize_t k = read(fd, buf + n, cap - n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      int e = errno;
      set_err(err, errlen, "%s: %s", path, strerror(e));
      free(buf);
      errno = e;
      return NULL;
    }
    if (k == 0) break;
    n += (size_t)k;
    if (n > limit) {
      free(buf);
      too_large(path, n, limit, err, errlen);
      return NULL;
    }
  }
  buf[n] = 0;
  *len = n;
  return buf;
}

char *kg_file_read(const char *path, size_t limit, size_t *len, char *err, size_t errlen) {
  int fd = kg_file_open_read(path, limit, err, errlen);
  if (fd < 0) return NULL;
  char *buf = kg_file_read_fd(fd, path, limit, len, err, errlen);
  int e = errno;
  close(fd);
  errno = e;
  return buf;
}

int kg_file_open_append(const char *path, int flags, char *err, size_t errlen) {
  struct stat st;
  /* checked before open too: opening a FIFO for writing would wait for a reader, a device could act on open */
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
    not_regular(path, (unsigned)st.st_mode, err, errlen);
    errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    return -1;
  }
  int fd = open(path, O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | flags, 0644);
  if (fd < 0) {
    int e = errno;
    set_err(err, errlen, "%s: %s", path, strerror(e));
    errno = e;
    return -1;
  }
  /* and after: the path may have been replaced in between */
  if (fstat(fd, &st) != 0) st.st_mode = 0;
  if (!S_ISREG(st.st_mode)) {
    not_regular(path, (unsigned)st.st_mode, err, errlen);
    close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
}
