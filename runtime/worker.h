/* Internal to the measurement harness (measure.c, the caller's side; worker.c, the worker process): the wire
 * protocol between them over a stream socketpair.
 *
 * Why the worker is a fresh exec of the running binary (/proc/self/exe) rather than a plain fork: GNU libgomp is
 * not fork-safe. A child forked from a process that has used an OpenMP parallel region (the harness builds
 * candidates in parallel; a tuner's cost model uses OpenMP) hangs in its first parallel region, and the CPU
 * kernels under measurement are OpenMP code. The exec'd image runs kg_worker's constructor before main(), which
 * sees KG_WORKER_ENV and never returns to main. Shared buffers cross the exec as a memfd.
 *
 * Messages: u32 payload length, then the payload, which starts with a u32 message type. Numbers are in host
 * order (both ends are the same binary). */
#ifndef KG_WORKER_H
#define KG_WORKER_H
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include "../base/clock.h"
#include "../base/xalloc.h"

/* "SOCKFD,MEMFD,PARENT_PID" in the worker's environment. */
#define KG_WORKER_ENV "KGEN_MEASURE_WORKER"
/* Makes sure worker.o (and its constructor) is linked into every binary that uses the measurer. */
extern const int kg_worker_linked;

enum {
  /* caller -> worker */
  KG_MSG_CONFIG = 1, /* runner, buffers, then the values of the dynamic sizes (count, int64s): the first message of a worker's life */
  KG_MSG_VERIFY,     /* load a candidate, run it once (outputs already poisoned by the caller) */
  KG_MSG_TIME,       /* min_repeat_s (f64), flush (u32), probe (u32): warm-up and timed repeats of the loaded
                      * candidate, or with probe one timed run and no warm-up (the early cut's second look) */
  /* worker -> caller */
  KG_MSG_READY,      /* answer to CONFIG: status, device description */
  KG_MSG_DONE,       /* answer to VERIFY / TIME */
};

/* Status in READY / DONE. FATAL: the worker reports and exits (a CUDA error leaves the context unusable). ENVFAULT:
 * an error of the environment, not the candidate's (the built module cannot be loaded; the driver rejects what
 * the toolchain made); FATAL_ENVFAULT: such an error after which the worker exits. */
enum { KG_WORKER_OK = 0, KG_WORKER_ERROR = 1, KG_WORKER_FATAL = 2, KG_WORKER_ENVFAULT = 3, KG_WORKER_FATAL_ENVFAULT = 4 };

/* Largest message either side accepts (timing replies hold up to 100000 doubles; cubins are a few MB). */
#define KG_WIRE_MAX ((size_t)256 << 20)

typedef struct kg_wire {
  unsigned char *data;
  size_t len, cap, pos;
  int bad; /* a read ran past the end: the message is malformed */
} kg_wire;

static inline void kg_wire_reset(kg_wire *w) { w->len = w->pos = 0, w->bad = 0; }
static inline void kg_wire_free(kg_wire *w) {
  free(w->data);
  memset(w, 0, sizeof *w);
}
static inline void kg_wire_put(kg_wire *w, const void *p, size_t n) {
  if (w->len + n > w->cap) {
    size_t cap = w->cap ? w->cap : 256;
    while (cap < w->len + n) cap *= 2;
    w->data = kg_xrealloc(w->data, cap);
    w->cap = cap;
  }
  if (n) memcpy(w->data + w->len, p, n);
  w->len += n;
}
static inline void kg_wire_u32(kg_wire *w, uint32_t v) { kg_wire_put(w, &v, sizeof v); }
static inline void kg_wire_i64(kg_wire *w, int64_t v) { kg_wire_put(w, &v, sizeof v); }
static inline void kg_wire_f64(kg_wire *w, double v) { kg_wire_put(w, &v, sizeof v); }
static inline void kg_wire_bytes(kg_wire *w, const void *p, size_t n) {
  kg_wire_i64(w, (int64_t)n);
  kg_wire_put(w, p, n);
}
static inline void kg_wire_str(kg_wire *w, const char *s) { kg_wire_bytes(w, s ? s : "", s ? strlen(s) : 0); }

static inline const void *kg_wire_take(kg_wire *w, size_t n) {
  if (w->bad || n > w->len - w->pos) {
    w->bad = 1;
    return NULL;
  }
  const void *p = w->data + w->pos;
  w->pos += n;
  return p;
}
static inline uint32_t kg_wire_get_u32(kg_wire *w) {
  uint32_t v = 0;
  const void *p = kg_wire_take(w, sizeof v);
  if (p) memcpy(&v, p, sizeof v);
  return v;
}
static inline int64_t kg_wire_get_i64(kg_wire *w) {
  int64_t v = 0;
  const void *p = kg_wire_take(w, sizeof v);
  if (p) memcpy(&v, p, sizeof v);
  return v;
}
static inline double kg_wire_get_f64(kg_wire *w) {
  double v = 0;
  const void *p = kg_wire_take(w, sizeof v);
  if (p) memcpy(&v, p, sizeof v);
  return v;
}
/* Points into the message (valid until the wire is reused); *n gets the length. */
static inline const void *kg_wire_get_bytes(kg_wire *w, size_t *n) {
  int64_t len = kg_wire_get_i64(w);
  if (len < 0) {
    w->bad = 1;
    len = 0;
  }
  *n = (size_t)len;
  return kg_wire_take(w, (size_t)len);
}
/* A malloc'ed NUL-terminated copy ("" on a malformed message). */
static inline char *kg_wire_get_str(kg_wire *w) {
  size_t n;
  const char *p = (const char *)kg_wire_get_bytes(w, &n);
  char *s = kg_xrealloc(NULL, (p ? n : 0) + 1);
  if (p) memcpy(s, p, n);
  s[p ? n : 0] = 0;
  return s;
}

/* Writes the whole frame. 0, or -1 when the peer is gone (never raises SIGPIPE). */
static inline int kg_wire_send(int fd, const kg_wire *w) {
  uint32_t len = (uint32_t)w->len;
  const unsigned char *parts[2] = {(const unsigned char *)&len, w->data};
  size_t sizes[2] = {sizeof len, w->len};
  for (int i = 0; i < 2; i++) {
    size_t off = 0;
    while (off < sizes[i]) {
      ssize_t r = send(fd, parts[i] + off, sizes[i] - off, MSG_NOSIGNAL);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return -1;
      off += (size_t)r;
    }
  }
  return 0;
}

/* Reads exactly n bytes before the deadline (kg_now_s() seconds; < 0: none). 0, -1 on EOF or error, -2 on
 * timeout. */
static inline int kg_wire_read_full(int fd, void *buf, size_t n, double deadline) {
  size_t off = 0;
  while (off < n) {
    if (deadline >= 0) {
      double left = deadline - kg_now_s();
      if (left <= 0) return -2;
      struct pollfd pf = {.fd = fd, .events = POLLIN};
      int ms = left > 1e6 ? 1000000000 : (int)(left * 1000) + 1;
      int pr = poll(&pf, 1, ms);
      if (pr < 0 && errno == EINTR) continue;
      if (pr < 0) return -1;
      if (pr == 0) continue; /* re-checks the deadline */
    }
    ssize_t r = recv(fd, (unsigned char *)buf + off, n - off, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    off += (size_t)r;
  }
  return 0;
}

/* Receives one frame into w (replacing its content). 0, -1 on EOF / error / malformed, -2 on timeout. */
static inline int kg_wire_recv(int fd, kg_wire *w, double deadline) {
  uint32_t len;
  int rc = kg_wire_read_full(fd, &len, sizeof len, deadline);
  if (rc) return rc;
  if (len > KG_WIRE_MAX) return -1;
  kg_wire_reset(w);
  if (len > w->cap) {
    w->data = kg_xrealloc(w->data, len);
    w->cap = len;
  }
  rc = kg_wire_read_full(fd, w->data, len, deadline);
  if (rc) return rc;
  w->len = len;
  return 0;
}

/* Buffer layout in the memfd, the same on both sides. A buffer owns whole pages (span bytes at its offset); its
 * data ends at the end of them, rounded to 64 bytes for alignment, so that a write past the end reaches the
 * inaccessible page that follows (kg_buffer_map) instead of another buffer. */
static inline size_t kg_buffer_span(int64_t numel) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = (size_t)numel * 4;
  return bytes <= page ? page : (bytes + page - 1) / page * page;
}
static inline size_t kg_buffer_data_off(int64_t numel) {
  return kg_buffer_span(numel) - ((size_t)numel * 4 + 63) / 64 * 64;
}
/* Maps a buffer's span of memfd (at file offset off) with prot between two PROT_NONE pages. Returns the data
 * pointer, or NULL; *base / *len are what munmap needs. */
static inline float *kg_buffer_map(int memfd, size_t off, int64_t numel, int prot, void **base, size_t *len) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), span = kg_buffer_span(numel);
  *len = span + 2 * page;
  *base = mmap(NULL, *len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (*base == MAP_FAILED) {
    *base = NULL;
    return NULL;
  }
  unsigned char *mid = (unsigned char *)*base + page;
  if (mmap(mid, span, prot, MAP_SHARED | MAP_FIXED, memfd, (off_t)off) == MAP_FAILED) {
    munmap(*base, *len);
    *base = NULL;
    return NULL;
  }
  return (float *)(void *)(mid + kg_buffer_data_off(numel));
}

/* The worker process's main loop (worker.c): serves requests on sockfd until EOF, then exits. */
void kg_worker_main(int sockfd, int memfd) __attribute__((noreturn));
#endif
