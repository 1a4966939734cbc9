/* The memory budget of this process (base/mem.h). */
#include "mem.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* The first number in a small file (a cgroup or proc file), or -1; "max" (cgroup v2: no limit) is -1 too. */
static double read_number(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[128];
  double v = -1;
  if (fgets(line, sizeof line, f) && line[0] >= '0' && line[0] <= '9') v = strtod(line, NULL);
  fclose(f);
  return v;
}

/* A proc file's "Key: N kB" line in bytes, or -1. */
static double proc_kb(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  size_t kl = strlen(key);
  double v = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, kl) && line[kl] == ':') {
      v = strtod(line + kl + 1, NULL) * 1024;
      break;
    }
  fclose(f);
  return v;
}

/* v1 reports "no limit" as a huge number (the page-rounded LONG_MAX) */
#define CGROUP_V1_UNLIMITED 9.0e18

/* The least of limit - usage over the cgroup at rel (under root) and its parents. */
static double cgroup_walk(const char *root, const char *rel, const char *limit_file, const char *usage_file) {
  char dir[4096], path[4200];
  snprintf(dir, sizeof dir, "%s", rel);
  double best = -1;
  for (;;) {
    size_t n = strlen(dir);
    while (n > 0 && dir[n - 1] == '/') dir[--n] = 0;
    snprintf(path, sizeof path, "%s%s/%s", root, dir, limit_file);
    double lim = read_number(path);
    if (lim >= 0 && lim < CGROUP_V1_UNLIMITED) {
      snprintf(path, sizeof path, "%s%s/%s", root, dir, usage_file);
      double use = read_number(path), left = lim - (use > 0 ? use : 0);
      if (left < 0) left = 0;
      if (best < 0 || left < best) best = left;
    }
    if (n == 0) break;
    char *slash = strrchr(dir, '/');
    if (!slash) break;
    *slash = 0;
  }
  return best;
}

double kg_mem_cgroup_budget(const char *v2_root, const char *v1_root, const char *proc_cgroup) {
  double best = -1;
  const char *p = proc_cgroup;
  while (p && *p) {
    const char *nl = strchr(p, '\n'), *end = nl ? nl : p + strlen(p);
    /* "ID:CONTROLLERS:PATH": v2 is "0::PATH", v1's memory controller lists "memory" */
    const char *c1 = memchr(p, ':', (size_t)(end - p)), *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
    if (c2) {
      char ctl[256], rel[4096];
      snprintf(ctl, sizeof ctl, "%.*s", (int)(c2 - c1 - 1), c1 + 1);
      snprintf(rel, sizeof rel, "%.*s", (int)(end - c2 - 1), c2 + 1);
      double b = -1;
      if (!ctl[0] && v2_root) {
        b = cgroup_walk(v2_root, rel, "memory.max", "memory.current");
        /* inside a cgroup namespace the mounted root is the process's own cgroup */
        if (b < 0) b = cgroup_walk(v2_root, "", "memory.max", "memory.current");
      } else if (v1_root) {
        for (char *sv, *t = strtok_r(ctl, ",", &sv); t; t = strtok_r(NULL, ",", &sv))
          if (!strcmp(t, "memory")) {
            b = cgroup_walk(v1_root, rel, "memory.limit_in_bytes", "memory.usage_in_bytes");
            if (b < 0) b = cgroup_walk(v1_root, "", "memory.limit_in_bytes", "memory.usage_in_bytes");
          }
      }
      if (b >= 0 && (best < 0 || b < best)) best = b;
    }
    p = nl ? nl + 1 : NULL;
  }
  return best;
}

static void take(kg_mem_budget *b, double bytes, const char *limit) {
  if (bytes < 0) return;
  if (b->bytes < 0 || bytes < b->bytes) {
    b->bytes = bytes;
    b->limit = limit;
  }
}

kg_mem_budget kg_mem_budget_get(void) {
  kg_mem_budget b = {-1, "available memory"};
  take(&b, proc_kb("/proc/meminfo", "MemAvailable"), "available memory");
  struct rlimit rl;
  double vm = proc_kb("/proc/self/status", "VmSize");
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    double left = (double)rl.rlim_cur - (vm > 0 ? vm : 0);
    take(&b, left > 0 ? left : 0, "the address-space limit (ulimit -v)");
  }
  if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    double data = proc_kb("/proc/self/status", "VmData"), left = (double)rl.rlim_cur - (data > 0 ? data : 0);
    take(&b, left > 0 ? left : 0, "the data-size limit (ulimit -d)");
  }
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (f) {
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    take(&b, kg_mem_cgroup_budget("/sys/fs/cgroup", "/sys/fs/cgroup/memory", text), "the cgroup's memory limit");
  }
  return b;
}

const char *kg_mem_format(char *buf, size_t len, double bytes) {
  if (bytes >= 1024.0 * 1024 * 1024) snprintf(buf, len, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  else snprintf(buf, len, "%.0f MiB", bytes / (1024.0 * 1024) < 1 && bytes > 0 ? 1 : bytes / (1024.0 * 1024));
  return buf;
}

int kg_mem_check(const char *what, double need, char *err, size_t errlen) {
  kg_mem_budget b = kg_mem_budget_get();
  if (b.bytes < 0 || need <= b.bytes) return 0;
  char n[32], h[32];
  if (err && errlen)
    snprintf(err, errlen, "not enough memory: %s needs %s; %s allows %s", what, kg_mem_format(n, sizeof n, need),
             b.limit, kg_mem_format(h, sizeof h, b.bytes));
  return -1;
}
