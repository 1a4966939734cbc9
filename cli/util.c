#include <ctype.h>
/* Helpers the CLI's commands share: numbers, size bindings, files, the workload library. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "../base/file.h"
#include "../base/strbuf.h"

int cli_parse_u64(const char *s, uint64_t *v) {
  if (!s || !*s) return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(s, &end, 10);
  if (errno || *end || s[0] == '-') return -1;
  *v = x;
  return 0;
}

int cli_parse_binding(const char *s, kg_binding *b) {
  const char *eq = strchr(s, '=');
  if (!eq || eq == s) return -1;
  static char names[MAX_BINDINGS][128];
  static int used;
  if (used >= MAX_BINDINGS || (size_t)(eq - s) >= sizeof names[0]) return -1;
  memcpy(names[used], s, (size_t)(eq - s));
  names[used][eq - s] = 0;
  char *end;
  errno = 0;
  if (!(eq[1] == '-' || (eq[1] >= '0' && eq[1] <= '9'))) return -1; /* strtoll would skip blanks */
  long long v = strtoll(eq + 1, &end, 10);
  if (errno || *end || end == eq + 1) return -1;
  b->name = names[used++];
  b->value = v;
  return 0;
}

char *cli_read_file(const char *path, size_t *len, char *err, size_t errlen) {
  return kg_file_read(path, KG_FILE_MAX_TEXT, len, err, errlen);
}

/* A bare name (no '/', no ".te") that is not a file resolves into the workload library: $KGEN_LIB, else te/lib
 * beside the executable's build folder (a source tree's build/kgen), else share/kgen/lib beside its bin folder (an
 * installed kgen, found relative to the executable so that a DESTDIR-staged or moved tree works too), else
 * ./te/lib. */
char *cli_resolve_program(const char *arg) {
  struct stat st;
  if (strchr(arg, '/') || strstr(arg, ".te") || stat(arg, &st) == 0) return strdup(arg);
  char path[PATH_MAX + 64];
  const char *env = getenv("KGEN_LIB");
  if (env) {
    snprintf(path, sizeof path, "%s/%s.te", env, arg);
    return strdup(path);
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    for (int up = 0; up < 3; up++) {
      char *slash = strrchr(exe, '/');
      if (!slash) break;
      *slash = 0;
      snprintf(path, sizeof path, "%s/te/lib/%s.te", exe, arg);
      if (stat(path, &st) == 0) return strdup(path);
      snprintf(path, sizeof path, "%s/share/kgen/lib/%s.te", exe, arg);
      if (stat(path, &st) == 0) return strdup(path);
    }
  }
  snprintf(path, sizeof path, "te/lib/%s.te", arg);
  return strdup(path);
}

char *cli_read_program(const char *file, char **path, size_t *len) {
  *path = cli_resolve_program(file);
  char err[PATH_MAX + 200];
  char *text = cli_read_file(*path, len, err, sizeof err);
  if (!text) {
    fprintf(stderr, "kgen: cannot read %s\n", err);
    free(*path);
    *path = NULL;
  }
  return text;
}

int cli_parse_dynamic(const char *s, char name[64], kg_dynamic_size *d, int64_t *vals, int maxvals, int *nvals) {
  memset(d, 0, sizeof *d);
  if (nvals) *nvals = 0;
  const char *eq = strchr(s, '=');
  size_t n = eq ? (size_t)(eq - s) : strlen(s);
  if (n == 0 || n > 63) return -1;
  for (size_t i = 0; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return -1;
  memcpy(name, s, n);
  name[n] = 0;
  d->name = name;
  if (!eq) return 0;
  const char *r = eq + 1, *dots = strstr(r, "..");
  char *end;
  if (dots) {
    long long lo = strtoll(r, &end, 10);
    if (end != dots || end == r) return -1;
    long long hi = strtoll(dots + 2, &end, 10);
    if (*end || end == dots + 2 || lo < 1 || hi < lo) return -1;
    d->lo = lo;
    d->hi = hi;
    return 0;
  }
  int k = 0;
  while (*r) {
    long long v = strtoll(r, &end, 10);
    if (end == r || v < 1 || (*end && *end != ',')) return -1;
    if (!k || v < d->lo) d->lo = v;
    if (!k || v > d->hi) d->hi = v;
    if (vals && k < maxvals) vals[k] = v;
    k++;
    r = *end ? end + 1 : end;
  }
  if (!k) return -1;
  if (nvals) *nvals = k < maxvals ? k : maxvals;
  return 0;
}

kg_program *cli_load_program(const char *file, const char *def, const kg_binding *b, int nb,
                             const kg_dynamic_size *dyn, int ndyn, int io_dtype, int tf32) {
  char *path;
  size_t len;
  char *text = cli_read_program(file, &path, &len);
  if (!text) return NULL;
  kg_arena diag_arena;
  kg_arena_init(&diag_arena);
  kg_diag diag = {0};
  kg_program *p = kg_program_load(path, text, len, def, b, nb, &diag, &diag_arena);
  if (!p) fputs(diag.msg ? diag.msg : "kgen: error: cannot load program\n", stderr);
  if (p && io_dtype >= 0 && kg_program_set_io_dtype(p, (kg_dtype)io_dtype, &diag, &diag_arena) != 0) {
    fputs(diag.msg ? diag.msg : "kgen: error: bad --dtype\n", stderr);
    kg_program_free(p);
    p = NULL;
  }
  if (p) p->tf32 = tf32;
  if (p && ndyn > 0 && kg_program_set_dynamic(p, dyn, ndyn, &diag, &diag_arena) != 0) {
    fputs(diag.msg ? diag.msg : "kgen: error: bad --dynamic\n", stderr);
    kg_program_free(p);
    p = NULL;
  }
  kg_arena_free(&diag_arena);
  free(text);
  free(path);
  return p;
}

int cli_read_log(const char *cmd, const char *path, kg_tlog *log, int need_records) {
  char err[512];
  int missing = 0;
  kg_tlog_init(log);
  if (kg_tlog_read(log, path, &missing, err, sizeof err) != 0 || missing) {
    if (missing) fprintf(stderr, "kgen %s: %s: no such log\n", cmd, path);
    else fprintf(stderr, "kgen %s: %s\n", cmd, err);
    kg_tlog_free(log);
    return -1;
  }
  cli_log_notes(cmd, path, log);
  if (need_records && log->n == 0) {
    if (log->skipped_parts)
      fprintf(stderr, "kgen %s: %s: no usable record (%zu bytes skipped)\n", cmd, path, log->skipped_bytes);
    else
      fprintf(stderr, "kgen %s: %s: no record (the log is empty)\n", cmd, path);
    kg_tlog_free(log);
    return -1;
  }
  return 0;
}

void cli_log_notes(const char *cmd, const char *path, const kg_tlog *log) {
  for (int i = 0; i < log->nnotes; i++) {
    const kg_tlog_skip *k = &log->notes[i];
    if (k->v)
      fprintf(stderr, "kgen %s: warning: %s: skipped %zu bytes at offset %zu (a record of format version %d; this "
                      "kgen reads version %d and older)\n", cmd, path, k->len, k->offset, k->v, KG_TLOG_VERSION);
    else
      fprintf(stderr, "kgen %s: warning: %s: skipped %zu bytes at offset %zu (not a record)\n", cmd, path, k->len,
              k->offset);
  }
  if (log->skipped_parts > log->nnotes)
    fprintf(stderr, "kgen %s: warning: %s: skipped %zu bytes in %d parts in all\n", cmd, path, log->skipped_bytes,
            log->skipped_parts);
}
