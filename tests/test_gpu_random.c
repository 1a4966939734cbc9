/* The random CUDA schedules of test_cuda_random (same workloads and test programs, same seeds) on the real
 * device: each is lowered, printed, compiled with NVRTC for the device's arch (on every core), checked against the
 * device's limits, loaded, launched with its global temporaries allocated, and its outputs compared with the
 * reference. Without a device (no driver, a stub libcuda, no GPU) it prints "skipped: <reason>" and passes.
 * KGEN_GPU_RANDOM_SCHEDULES overrides the count per workload (default 30). A failure prints the workload, the
 * seed, the trace and the command that reproduces it. */
#include <stdint.h>
#include "kgen.h"
#include "runtime/cudrv.h"
#include "runtime/nvrtc.h"
#include "testlib.h"
#include "testutil.h"

/* One random schedule of a workload, through every stage of the check. */
typedef struct gcand {
  kg_test_cuda_draw x;
  int nvrtc_rc;
  kg_cubin cubin;
} gcand;

/* Runs one printed program on the device with d's inputs; fills d's outputs. 0, or -1 with the reason. */
static int run_on_device(const kg_cuda_program *cp, const kg_cubin *cb, const kg_program *p, kg_data *d, char *err,
                         size_t errlen) {
  int nargs = p->ninputs + p->noutputs + cp->ntemps, rc = 0;
  kg_devptr *dev = calloc((size_t)nargs, sizeof *dev);
  size_t *bytes = calloc((size_t)nargs, sizeof *bytes);
  kg_cudrv_module m;
  memset(&m, 0, sizeof m);
  int loaded = 0;
  for (int k = 0; k < nargs && rc == 0; k++) {
    int64_t n = k < p->ninputs ? kg_tensor_numel(p->inputs[k])
                : k < p->ninputs + p->noutputs ? kg_tensor_numel(p->outputs[k - p->ninputs])
                                               : cp->temp_elems[k - p->ninputs - p->noutputs];
    bytes[k] = (size_t)(n > 0 ? n : 1) * sizeof(float);
    rc = kg_cudrv_alloc(&dev[k], bytes[k], err, errlen);
  }
  for (int k = 0; k < p->ninputs && rc == 0; k++) rc = kg_cudrv_htod(dev[k], d->inputs[k], bytes[k], err, errlen);
  /* poisoned outputs, NaN temporaries: an element nobody writes fails the comparison */
  kg_data_poison(d, p);
  for (int k = 0; k < p->noutputs && rc == 0; k++)
    rc = kg_cudrv_htod(dev[p->ninputs + k], d->outputs[k], bytes[p->ninputs + k], err, errlen);
  for (int k = p->ninputs + p->noutputs; k < nargs && rc == 0; k++)
    rc = kg_cudrv_memset32(dev[k], 0x7fc00000u, bytes[k] / sizeof(float), err, errlen);
  if (rc == 0) rc = kg_cudrv_module_load(&m, cp, cb->cubin, err, errlen);
  loaded = rc == 0;
  if (rc == 0) rc = kg_cudrv_launch_program(&m, cp, dev, err, errlen);
  if (rc == 0) rc = kg_cudrv_sync(err, errlen);
  for (int k = 0; k < p->noutputs && rc == 0; k++)
    rc = kg_cudrv_dtoh(d->outputs[k], dev[p->ninputs + k], bytes[p->ninputs + k], err, errlen);
  if (loaded) kg_cudrv_module_unload(&m);
  for (int k = 0; k < nargs; k++)
    if (dev[k]) kg_cudrv_free(dev[k]);
  free(dev);
  free(bytes);
  return rc;
}

int main(void) {
  char why[512];
  if (!kg_cudrv_probe(why, sizeof why)) {
    printf("skipped: %s\n", why);
    TEST_END();
  }
  int per = 30;
  const char *env = getenv("KGEN_GPU_RANDOM_SCHEDULES");
  if (env) per = atoi(env);
  if (per < 1) per = 1;
  kg_cudrv_device dev;
  int opened = kg_cudrv_open(&dev, why, sizeof why) == 0;
  CHECKF(opened, "the probe found a device, but opening it failed: %s", why);
  if (!opened) TEST_END();
  printf("device: %s (%s, %d SMs)\n", dev.name, dev.arch, dev.sm_count);

  /* the workloads of test_cuda_random, in its order (the seeds depend on it) */
  char *files[KG_TEST_MAX_WORKLOADS];
  int nfiles = kg_test_list_workloads(files, KG_TEST_MAX_WORKLOADS, NULL);

  int total = 0, total_ok = 0;
  for (int w = 0; w < nfiles; w++) {
    const char *path = files[w];
    kg_test_workload wl;
    if (kg_test_workload_load(&wl, path) != 0) continue;
    kg_program *p = wl.p;
    /* draw, lower and print; compile on every core; then run one at a time */
    gcand *c = calloc((size_t)per, sizeof *c);
    for (int i = 0; i < per; i++) kg_schedule_free(kg_test_cuda_draw_make(&c[i].x, p, w, i));
#pragma omp parallel for schedule(dynamic)
    for (int i = 0; i < per; i++)
      if (c[i].x.printed) c[i].nvrtc_rc = kg_nvrtc_compile(&c[i].x.prog, dev.arch, &c[i].cubin);
    int ok_here = 0;
    for (int i = 0; i < per; i++) {
      gcand *g = &c[i];
      const kg_test_cuda_draw *x = &g->x;
      char again[1024];
      snprintf(again, sizeof again, "kgen run %s%s --seed 7 --target cuda --random-schedule %llu", path, wl.sizes,
               (unsigned long long)x->seed);
      unsigned long long seed = (unsigned long long)x->seed;
      char err[4096];
      int good = kg_test_cuda_draw_check(x, path, again);
      if (good) {
        good = g->nvrtc_rc == 0;
        CHECKF(good, "%s seed %llu: NVRTC %s:\n%s\ntrace:\n%s\nreproduce: %s", path, seed, dev.arch,
               g->cubin.log ? g->cubin.log : "(no log)", x->trace, again);
      }
      if (good) {
        good = kg_gpu_check_limits(&x->prog, &g->cubin, &dev.limits, err, sizeof err) == 0;
        CHECKF(good, "%s seed %llu: over the device's limits: %s\ntrace:\n%s\nreproduce: %s", path, seed, err,
               x->trace, again);
      }
      if (good) {
        good = run_on_device(&x->prog, &g->cubin, p, &wl.d, err, sizeof err) == 0;
        CHECKF(good, "%s seed %llu: %s\nsource:\n%s\ntrace:\n%s\nreproduce: %s", path, seed, err, x->prog.source,
               x->trace, again);
      }
      if (good) {
        kg_verify_result v = kg_verify(p, &wl.d, 1e-4);
        CHECKF(v.ok, "%s seed %llu: %s max_rel_err=%g\nsource:\n%s\ntrace:\n%s\nreproduce: %s", path, seed, v.msg,
               v.max_rel_err, x->prog.source, x->trace, again);
        good = v.ok;
      }
      ok_here += good;
    }
    for (int i = 0; i < per; i++) {
      kg_cubin_free(&c[i].cubin);
      kg_test_cuda_draw_free(&c[i].x);
    }
    free(c);
    printf("%-32s %d/%d random CUDA schedules verified on %s\n", path, ok_here, per, dev.name);
    fflush(stdout);
    total += per;
    total_ok += ok_here;
    kg_test_workload_free(&wl);
  }
  printf("%d/%d random CUDA schedules verified on the device\n", total_ok, total);
  kg_test_free_workloads(files, nfiles);
  TEST_END();
}
