/* Tuning-log files: reading a whole log, and appending records (one write(2) each, under flock) so that several
 * tuners can share one file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include "../base/file.h"
#include "../base/xalloc.h"
#include "tlog.h"
#include "tlog_impl.h"

static int io_error(char *err, size_t errlen, const char *what, const char *path, int e) {
  if (err && errlen) snprintf(err, errlen, "%s %s: %s", what, path, strerror(e));
  return -1;
}

/* flock, retried when a signal interrupts the wait. */
static int lock(int fd, int op) {
  int rc;
  do rc = flock(fd, op);
  while (rc != 0 && errno == EINTR);
  return rc;
}

/* The bytes of the file at path from offset on, read under a shared lock so that a record being appended right
 * now is not seen half-written: 0 with *buf (heap, NULL when empty) and *len; 1 when the file is missing; -1 with
 * err. A file shorter than offset (another file now has the path) is read from its start: *from says where the
 * bytes begin. The one place where a log's bytes are read: a bounded read of a regular file only, so /dev/zero
 * or a FIFO as a log is an error at once (base/file.h). */
static int read_tail(const char *path, size_t offset, char **out, size_t *outlen, size_t *from, char *err,
                     size_t errlen) {
  *out = NULL;
  *outlen = 0;
  *from = offset;
  char why[512];
  int fd = kg_file_open_read(path, KG_FILE_MAX_LOG, why, sizeof why);
  if (fd < 0) {
    if (errno == ENOENT) return 1;
    if (err && errlen) snprintf(err, errlen, "cannot read log %s", why);
    return -1;
  }
  if (lock(fd, LOCK_SH) != 0) {
    int e = errno;
    close(fd);
    return io_error(err, errlen, "cannot lock", path, e);
  }
  off_t end = lseek(fd, 0, SEEK_END);
  if (end >= 0 && (size_t)end < offset) *from = 0;
  if (end < 0 || lseek(fd, (off_t)*from, SEEK_SET) < 0) {
    int e = errno;
    close(fd);
    return io_error(err, errlen, "cannot seek in", path, e);
  }
  size_t len = 0;
  char *buf = kg_file_read_fd(fd, path, KG_FILE_MAX_LOG, &len, why, sizeof why);
  close(fd); /* releases the lock */
  if (!buf) {
    if (err && errlen) snprintf(err, errlen, "cannot read log %s", why);
    return -1;
  }
  *out = buf;
  *outlen = len;
  return 0;
}

int kg_tlog_read(kg_tlog *log, const char *path, int *missing, char *err, size_t errlen) {
  if (missing) *missing = 0;
  char *buf;
  size_t len, from;
  int rc = read_tail(path, 0, &buf, &len, &from, err, errlen);
  if (rc < 0) return -1;
  if (rc == 1) {
    if (missing) *missing = 1;
    return 0;
  }
  kg_tlog_decode(log, buf, len);
  free(buf);
  return 0;
}

int kg_tlog_read_more(kg_tlog *log, const char *path, char *err, size_t errlen) {
  char *buf;
  size_t len, from;
  int rc = read_tail(path, log->offset, &buf, &len, &from, err, errlen);
  if (rc < 0) return -1;
  if (rc == 1) return 0;
  int before = log->n;
  log->offset = from;
  kg_tlog_decode(log, buf, len);
  free(buf);
  return log->n - before;
}

struct kg_tlog_writer {
  int fd;
  char *path;
  size_t written;     /* bytes appended */
  long long first;    /* where the first record landed, -1 before */
};

kg_tlog_writer *kg_tlog_open(const char *path, char *err, size_t errlen) {
  /* a directory, /dev/full or a FIFO is refused here, before tuning starts */
  char why[512];
  int fd = kg_file_open_append(path, O_CREAT, why, sizeof why);
  if (fd < 0) {
    if (err && errlen) snprintf(err, errlen, "cannot open log %s", why);
    return NULL;
  }
  kg_tlog_writer *w = kg_xrealloc(NULL, sizeof *w);
  w->fd = fd;
  w->written = 0;
  w->first = -1;
  w->path = kg_xrealloc(NULL, strlen(path) + 1);
  strcpy(w->path, path);
  return w;
}

/* The record is checked before it goes out, so that nothing a reader would skip is ever written. O_APPEND puts
 * each write at the end; the lock keeps a record whole when a write is split (only on a full disk and the like,
 * where the loop writes the rest or reports why it cannot). */
int kg_tlog_append(kg_tlog_writer *w, const kg_tlog_record *r, char *err, size_t errlen) {
  size_t len;
  char *buf = kg_tlog_encode(r, &len);
  const char *why;
  if (kg_tlog_check_encoded(buf, len, &why) != 0) {
    if (err && errlen) snprintf(err, errlen, "record not written to %s: invalid: %s", w->path, why);
    free(buf);
    return -1;
  }
  if (lock(w->fd, LOCK_EX) != 0) {
    free(buf);
    return io_error(err, errlen, "cannot lock", w->path, errno);
  }
  int rc = 0;
  for (size_t done = 0; done < len;) {
    ssize_t k = write(w->fd, buf + done, len - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      rc = io_error(err, errlen, "cannot write", w->path, k < 0 ? errno : ENOSPC);
      break;
    }
    done += (size_t)k;
  }
  if (rc == 0) {
    w->written += len;
    /* O_APPEND leaves the descriptor's offset at the end of what it wrote */
    off_t end = lseek(w->fd, 0, SEEK_CUR);
    if (w->first < 0 && end >= (off_t)len) w->first = (long long)(end - (off_t)len);
  }
  lock(w->fd, LOCK_UN);
  free(buf);
  return rc;
}

size_t kg_tlog_written(const kg_tlog_writer *w) { return w->written; }
long long kg_tlog_first_offset(const kg_tlog_writer *w) { return w->first; }

int kg_tlog_flush(kg_tlog_writer *w, char *err, size_t errlen) {
  if (fsync(w->fd) != 0) return io_error(err, errlen, "cannot sync", w->path, errno);
  return 0;
}

void kg_tlog_close(kg_tlog_writer *w) {
  if (!w) return;
  close(w->fd);
  free(w->path);
  free(w);
}
