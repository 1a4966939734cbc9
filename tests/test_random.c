/* Every library workload (te/lib) and every test program (tests/programs: language corners the library does not
 * reach, such as several outputs, scalars, explicit ranges, / and % in indices) under many random legal
 * schedules on the C target, each lowered, printed, compiled, run and verified against the reference evaluator.
 * A failure prints the trace and the `kgen run ... --random-schedule SEED` command that reproduces it.
 * KGEN_RANDOM_SCHEDULES overrides the count per workload (default 50). */
#include <dirent.h>
#include <stdint.h>
#include "kgen.h"
#include "testlib.h"
#include "testutil.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
  int per = 50;
  const char *env = getenv("KGEN_RANDOM_SCHEDULES");
  if (env) per = atoi(env);
  static const char *const dirs[] = {"te/lib", "tests/programs"};
  char *files[256];
  int nfiles = 0, nlib = 0;
  for (int di = 0; di < 2; di++) {
    DIR *dir = opendir(dirs[di]);
    CHECKF(dir != NULL, "cannot open %s", dirs[di]);
    if (!dir) continue;
    struct dirent *de;
    while ((de = readdir(dir)) && nfiles < 256) {
      size_t l = strlen(de->d_name);
      if (l > 3 && !strcmp(de->d_name + l - 3, ".te")) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dirs[di], de->d_name);
        files[nfiles++] = strdup(path);
        nlib += di == 0;
      }
    }
    closedir(dir);
  }
  qsort(files, (size_t)nfiles, sizeof files[0], cmp_str);
  CHECKF(nlib >= 14, "only %d workloads in te/lib", nlib);
  int total_ok = 0, total_steps = 0;
  for (int w = 0; w < nfiles; w++) {
    const char *path = files[w];
    size_t len = 0;
    char *text = kg_test_read_file(path, &len);
    CHECKF(text != NULL, "cannot read %s", path);
    if (!text) continue;
    kg_binding b[KG_TEST_MAX_BIND];
    char names[KG_TEST_MAX_BIND][32];
    int nb = kg_test_parse_sizes(text, b, names, 1);
    CHECKF(nb >= 0, "%s: no '# sizes:' line", path);
    kg_arena da;
    kg_arena_init(&da);
    kg_diag diag = {0};
    kg_program *p = kg_program_load(path, text, len, NULL, b, nb < 0 ? 0 : nb, &diag, &da);
    CHECKF(p != NULL, "%s: %s", path, diag.msg ? diag.msg : "?");
    if (!p) {
      kg_arena_free(&da);
      free(text);
      continue;
    }
    char sizes[512] = "";
    for (int k = 0, w2 = 0; k < nb && w2 >= 0 && (size_t)w2 < sizeof sizes; k++)
      w2 += snprintf(sizes + w2, sizeof sizes - (size_t)w2, " -D %s=%lld", b[k].name, (long long)b[k].value);
    kg_data d;
    kg_data_init(&d, p, 7);
    kg_data_reference(&d, p, 7);
    int ok_here = 0;
    /* Seed 0 is the default schedule (no steps). */
    for (int i = 0; i <= per; i++) {
      uint64_t seed = (uint64_t)w * 100000 + (uint64_t)i;
      kg_schedule *s = kg_schedule_new(p);
      int nsteps = 4 + i % 12;
      if (i > 0) kg_schedule_random(s, seed, KG_TARGET_C, nsteps);
      total_steps += s->trace.nsteps;
      char err[8192];
      kg_pipeline pl;
      int built = kg_pipeline_build(s, KG_TARGET_C, &pl, err, sizeof err) == 0;
      char *trace = kg_trace_to_text(&s->trace);
      char again[1024];
      snprintf(again, sizeof again, "kgen run %s%s --seed 7 --random-schedule %llu --random-steps %d", path, sizes,
               (unsigned long long)seed, nsteps);
      CHECKF(built, "%s seed %llu: build failed: %s\ntrace:\n%s\nreproduce: %s", path, (unsigned long long)seed,
             err, trace, again);
      if (built) {
        kg_verify_result v = kg_pipeline_verify(&pl, p, &d, 1e-4);
        CHECKF(v.ok, "%s seed %llu: %s max_rel_err=%g\ntrace:\n%s\nreproduce: %s", path, (unsigned long long)seed,
               v.msg, v.max_rel_err, trace, again);
        ok_here += v.ok;
      }
      free(trace);
      kg_pipeline_free(&pl);
      kg_schedule_free(s);
    }
    printf("%-32s %d/%d schedules verified\n", path, ok_here, per + 1);
    fflush(stdout);
    total_ok += ok_here;
    kg_data_free(&d);
    kg_program_free(p);
    kg_arena_free(&da);
    free(text);
  }
  printf("%d schedules verified, %d random steps in all\n", total_ok, total_steps);
  for (int i = 0; i < nfiles; i++) free(files[i]);
  TEST_END();
}
