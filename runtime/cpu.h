/* The CPU runner: compiles generated C into a shared object with the system compiler and calls it. */
#ifndef KG_CPU_H
#define KG_CPU_H
#include <stddef.h>
#include <stdint.h>
#include "../codegen/cpu_arch.h"

typedef struct kg_cpu_module {
  void *handle;    /* dlopen handle */
  void *fn;        /* the entry point */
  char *dir;       /* temporary build folder, removed by kg_cpu_module_free */
  char *log;       /* compiler output (warnings or errors); may be NULL */
  double compile_s;
  int env_fault;   /* after a failed build: the environment's fault, not the source's (no build folder, the
                    * compiler missing or killed by a signal); see also kg_cpu_toolchain_check */
} kg_cpu_module;

/* Compiles src with $CC (default cc) -O3 -march=native -fopenmp -shared -fPIC $KGEN_CFLAGS and loads fn_name.
 * Returns 0, or -1 with m->log holding the compiler's output (or the reason). */
int kg_cpu_build(const char *src, const char *fn_name, kg_cpu_module *m);
void kg_cpu_module_free(kg_cpu_module *m);
/* Whether the C toolchain ($CC, $KGEN_CFLAGS, $TMPDIR as now) builds and loads a trivial known-good kernel: 0, or
 * -1 with the reason in why. Tells a broken toolchain from source that the compiler rejects. The answer is cached
 * per setting of those variables; thread-safe. */
int kg_cpu_toolchain_check(char *why, size_t whylen);
/* Calls the entry point with nargs float pointers (inputs then outputs). */
void kg_cpu_call(const kg_cpu_module *m, float **args, int nargs);
/* The same for code with dynamic sizes (kg_lowered.nsize_vars > 0): sizes[0..nsizes) are their values in
 * size_vars order, passed after the buffers as the wrapper expects (see kg_codegen_c). nsizes 0 is kg_cpu_call. */
void kg_cpu_call_sizes(const kg_cpu_module *m, float **args, int nargs, const int64_t *sizes, int nsizes);
/* The instruction-set level the kernels are compiled for: the kernel compiler's predefined macros under the
 * kernel flags and $KGEN_CFLAGS (so -march=x86-64-v2 there gives x86-64-v2), or the machine's baseline level when
 * the compiler cannot be run. Runs the preprocessor once per call (some milliseconds). */
const kg_cpu_arch *kg_cpu_arch_host(void);
#endif
