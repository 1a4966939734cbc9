/* How much memory this process may still take, and the one message for "this does not fit": run, tune, replay and
 * the measurement harness all check user-sized data (tensors, the reference, buffers) with kg_mem_check before
 * allocating it, so the figure and the wording are the same everywhere. */
#ifndef KG_MEM_H
#define KG_MEM_H
#include <stddef.h>

typedef struct kg_mem_budget {
  double bytes;       /* what may still be allocated; < 0 when nothing is known */
  const char *limit;  /* what sets it: "available memory", "the address-space limit (ulimit -v)", ... */
} kg_mem_budget;

/* The least of: MemAvailable (/proc/meminfo), RLIMIT_AS and RLIMIT_DATA less what the process already maps,
 * and, for the process's cgroup and each parent, the cgroup v2 memory.max (v1 memory.limit_in_bytes) less its
 * current usage. */
kg_mem_budget kg_mem_budget_get(void);
/* The cgroup part alone, for the cgroup tree mounted at root (v2: the unified tree; v1: the memory
 * controller's) and the process's /proc/self/cgroup text: < 0 when no limit is set. Exposed for tests. */
double kg_mem_cgroup_budget(const char *v2_root, const char *v1_root, const char *proc_cgroup);
/* 0 when need bytes fit in the budget; else -1 and err gets "WHAT needs N MiB (...); only M MiB are free
 * (LIMIT)" in the one wording. what: e.g. "running matmul at these sizes". */
int kg_mem_check(const char *what, double need, char *err, size_t errlen);
/* "812 MiB", "3.2 GiB": the one way sizes in memory messages are written. */
const char *kg_mem_format(char *buf, size_t len, double bytes);
#endif
