/* CPU instruction-set levels (codegen/cpu_arch.h). */
#include "cpu_arch.h"
#include <string.h>

/* Most capable first: kg_cpu_arch_from_macros takes the first whose macros are all defined. */
static const struct level {
  kg_cpu_arch a;
  const char *macros[4]; /* all of them defined, NULL-terminated */
} levels[] = {
    {{"x86-64-v4", 16, 32}, {"__AVX512F__", NULL}},
    {{"x86-64-v3", 8, 16}, {"__AVX2__", "__FMA__", NULL}},
    {{"x86-64-avx", 8, 16}, {"__AVX__", NULL}},
    {{"x86-64-v2", 4, 16}, {"__SSE4_2__", NULL}},
    {{"x86-64", 4, 16}, {"__x86_64__", NULL}},
    {{"aarch64", 4, 32}, {"__aarch64__", NULL}},
    {{"generic", 4, 16}, {NULL}},
};
#define NLEVELS (sizeof levels / sizeof levels[0])

const kg_cpu_arch *kg_cpu_arch_find(const char *name) {
  for (size_t i = 0; name && i < NLEVELS; i++)
    if (!strcmp(levels[i].a.name, name)) return &levels[i].a;
  return NULL;
}

const kg_cpu_arch *kg_cpu_arch_default(void) { return &levels[0].a; }

/* Whether macros holds the line "#define NAME ..." (a name that only begins another, __AVX512FP16__ for
 * __AVX512F__, does not count). */
static int defines(const char *macros, const char *name) {
  size_t n = strlen(name);
  for (const char *p = macros; (p = strstr(p, "#define ")); p += 8)
    if (!strncmp(p + 8, name, n) && (p[8 + n] == ' ' || p[8 + n] == '\n' || p[8 + n] == '\t' || !p[8 + n]))
      return 1;
  return 0;
}

const kg_cpu_arch *kg_cpu_arch_from_macros(const char *macros) {
  for (size_t i = 0; i < NLEVELS; i++) {
    int all = 1;
    for (int k = 0; levels[i].macros[k] && all; k++) all = macros && defines(macros, levels[i].macros[k]);
    if (all) return &levels[i].a;
  }
  return &levels[NLEVELS - 1].a;
}

int kg_cpu_arch_max_acc(const kg_cpu_arch *a) { return a->vregs * 3 / 4; }
