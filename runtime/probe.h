/* A cached verdict on whether a toolchain (the C compiler, the emulator's C++ compiler, NVRTC) builds a trivial
 * known-good kernel: asked after a candidate's compile error, to tell the environment's fault from the
 * candidate's. One verdict per setting (the key: the variables that choose the toolchain); a "works" verdict is
 * re-checked after KG_PROBE_RECHECK_S, since a disk that filled up since breaks every compile. Thread-safe. */
#ifndef KG_PROBE_H
#define KG_PROBE_H
#include <pthread.h>
#include <stddef.h>

#define KG_PROBE_RECHECK_S 30.0

typedef struct kg_toolchain_probe {
  pthread_mutex_t lock;
  char key[4096];   /* the setting the verdict is for */
  int have, result; /* a verdict is there; 0 works, else the build's status */
  double when;      /* when it was reached (kg_now_s) */
  char reason[1024];
} kg_toolchain_probe;
#define KG_TOOLCHAIN_PROBE_INIT {PTHREAD_MUTEX_INITIALIZER, "", 0, 0, 0.0, ""}

/* Builds the trivial kernel: 0 when it built, else nonzero with the build's log (or its end) copied into log. */
typedef int (*kg_probe_build_fn)(const char *ctx, char *log, size_t loglen);

/* Copies the last part of a build's log (what failed is said last) into out; "(no output)" for none. */
void kg_probe_log_tail(const char *log, char *out, size_t outlen);

/* 0 when the toolchain chosen by key builds the trivial kernel (build(ctx) called only when no fresh verdict is
 * cached), else the build's status with why = "WHAT: the end of the build's log". */
int kg_toolchain_probe_check(kg_toolchain_probe *pr, const char *key, kg_probe_build_fn build, const char *ctx,
                             const char *what, char *why, size_t whylen);
#endif
