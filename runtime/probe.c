/* The cached toolchain verdict (runtime/probe.h). */
#include "probe.h"
#include <stdio.h>
#include <string.h>
#include "../base/clock.h"

void kg_probe_log_tail(const char *log, char *out, size_t outlen) {
  if (!outlen) return;
  if (!log || !*log) log = "(no output)";
  size_t n = strlen(log), keep = 800 < outlen ? 800 : outlen - 1;
  snprintf(out, outlen, "%s", n > keep ? log + n - keep : log);
}

int kg_toolchain_probe_check(kg_toolchain_probe *pr, const char *key, kg_probe_build_fn build, const char *ctx,
                             const char *what, char *why, size_t whylen) {
  pthread_mutex_lock(&pr->lock);
  if (!pr->have || strcmp(pr->key, key) || (pr->result == 0 && kg_now_s() - pr->when > KG_PROBE_RECHECK_S)) {
    char log[832];
    log[0] = 0;
    pr->result = build(ctx, log, sizeof log);
    if (pr->result != 0) snprintf(pr->reason, sizeof pr->reason, "%s: %s", what, log[0] ? log : "(no output)");
    snprintf(pr->key, sizeof pr->key, "%s", key);
    pr->have = 1;
    pr->when = kg_now_s();
  }
  int rc = pr->result;
  if (rc && why && whylen) snprintf(why, whylen, "%s", pr->reason);
  pthread_mutex_unlock(&pr->lock);
  return rc;
}
