/* A plain C program including the reduce_rows kernels kgen exported for the CUDA target (`kgen export LOG
 * --target cuda --arch sm_90`), built by examples/make and examples/cmake against an installed kgen when they are
 * given a CUDA log of reduce_rows (CUDA_LOG, KGEN_EXAMPLE_CUDA_LOG). No CUDA toolkit is needed to build it: the
 * header loads the driver (libcuda.so.1) with dlopen, and so does this program for its device memory.
 *
 * Where the driver or a device is missing, the header's first call says so: the program prints the header's
 * message and exits with status 3. Otherwise it runs every tuned size binding of the header on random data and
 * checks it against a plain loop. Exit status 0 when all match, 1 when one does not, 2 on a host-side failure. */
#define KG_IMPLEMENTATION
#include "reduce_rows.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The few driver API calls the program makes itself, with cuda.h's types reduced to what they are on 64-bit
 * Linux (CUdeviceptr is an unsigned 64-bit integer, CUresult an int), so that no toolkit is needed to build. */
typedef unsigned long long devptr;
static struct {
  int (*mem_alloc)(devptr *, size_t);
  int (*mem_free)(devptr);
  int (*htod)(devptr, const void *, size_t);
  int (*dtoh)(void *, devptr, size_t);
  int (*sync)(void);
} cu;

static int driver_open(void) {
  /* the library the header has opened already: dlopen hands back the same one */
  void *lib = dlopen(KG_CUDA_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return -1;
  struct { const char *name; void *slot; } sym[] = {
      {"cuMemAlloc_v2", (void *)&cu.mem_alloc},   {"cuMemFree_v2", (void *)&cu.mem_free},
      {"cuMemcpyHtoD_v2", (void *)&cu.htod},      {"cuMemcpyDtoH_v2", (void *)&cu.dtoh},
      {"cuCtxSynchronize", (void *)&cu.sync},
  };
  for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++) {
    void *f = dlsym(lib, sym[i].name);
    if (!f) return -1;
    memcpy(sym[i].slot, &f, sizeof f); /* an object pointer to a function pointer, portably */
  }
  return 0;
}

int main(void) {
  /* Loading the kernels opens the driver and makes device 0's primary context current, or says why it cannot. */
  int rc = kg_reduce_rows_load();
  if (rc != KG_OK) {
    printf("reduce_rows (CUDA): error %d: %s\n", rc, kg_cuda_strerror(rc));
    return rc == KG_ERR_NO_DRIVER ? 3 : 1;
  }
  if (driver_open() != 0) {
    printf("the CUDA driver lacks the memory functions\n");
    return 2;
  }
  int bad = 0, n = 0;
  int64_t sz[2]; /* N, D: the def's sizes in order */
  for (int k = 0; kg_reduce_rows_sizes(k, sz) == 0; k++, n++) {
    int64_t N = sz[0], D = sz[1];
    size_t xb = (size_t)(N * D) * sizeof(float), yb = (size_t)N * sizeof(float);
    float *X = malloc(xb), *Y = malloc(yb);
    devptr dX = 0, dY = 0;
    if (!X || !Y || cu.mem_alloc(&dX, xb) != 0 || cu.mem_alloc(&dY, yb) != 0) {
      printf("reduce_rows N=%lld D=%lld: out of host or device memory\n", (long long)N, (long long)D);
      return 2;
    }
    srand(7);
    for (int64_t i = 0; i < N * D; i++) X[i] = (float)rand() / RAND_MAX - 0.5f;
    rc = cu.htod(dX, X, xb);
    if (rc == 0) rc = kg_reduce_rows_dispatch(0, N, D, (const float *)(uintptr_t)dX, (float *)(uintptr_t)dY);
    if (rc == 0) rc = cu.sync();
    if (rc == 0) rc = cu.dtoh(Y, dY, yb);
    if (rc != 0)
      printf("reduce_rows N=%lld D=%lld: error %d: %s\n", (long long)N, (long long)D, rc, kg_cuda_strerror(rc));
    int ok = rc == 0;
    for (int64_t i = 0; i < N && ok; i++) {
      double want = 0;
      for (int64_t j = 0; j < D; j++) want += X[i * D + j];
      if (fabs(Y[i] - want) > 1e-3 * (1 + fabs(want))) {
        printf("reduce_rows N=%lld D=%lld: Y[%lld] = %g, want %g\n", (long long)N, (long long)D, (long long)i, Y[i],
               want);
        ok = 0;
      }
    }
    if (ok) printf("reduce_rows N=%lld D=%lld ok (CUDA)\n", (long long)N, (long long)D);
    bad |= !ok;
    cu.mem_free(dX);
    cu.mem_free(dY);
    free(X);
    free(Y);
  }
  if (n == 0) {
    printf("the header has no kernels\n");
    bad = 1;
  }
  return bad;
}
