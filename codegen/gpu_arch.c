#include "gpu_arch.h"
#include <ctype.h>
#include <string.h>

int kg_gpu_arch_parse(const char *arch, int *num, char *suffix) {
  if (!arch || strncmp(arch, "sm_", 3) != 0) return -1;
  const char *p = arch + 3;
  int n = 0, digits = 0;
  while (isdigit((unsigned char)*p) && digits < 4) n = n * 10 + (*p++ - '0'), digits++;
  if (digits < 2) return -1;
  *suffix = 0;
  if (*p == 'a' || *p == 'f') *suffix = *p++;
  if (*p) return -1;
  *num = n;
  return 0;
}

/* Documented limits per compute capability (CUDA C++ Programming Guide, "Technical Specifications per Compute
 * Capability"); the opt-in shared maximum is what cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
 * returns on those parts. */
int kg_gpu_limits_for_arch(const char *arch, kg_gpu_limits *l) {
  static const struct {
    int sm;
    int64_t optin;
  } table[] = {
      {70, 96 * 1024},  {72, 96 * 1024},  {75, 64 * 1024},  {80, 163 * 1024}, {86, 99 * 1024},
      {87, 163 * 1024}, {89, 99 * 1024},  {90, 227 * 1024}, {100, 227 * 1024}, {120, 99 * 1024},
  };
  int num;
  char suffix;
  if (kg_gpu_arch_parse(arch, &num, &suffix) != 0) return -1;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (table[i].sm != num) continue;
    memset(l, 0, sizeof *l);
    l->max_threads_per_block = 1024;
    l->max_block[0] = 1024;
    l->max_block[1] = 1024;
    l->max_block[2] = 64;
    l->max_grid[0] = 2147483647;
    l->max_grid[1] = 65535;
    l->max_grid[2] = 65535;
    l->max_shared_static = 48 * 1024;
    l->max_shared_optin = table[i].optin;
    l->max_regs_per_block = 65536;
    l->max_regs_per_thread = 255;
    return 0;
  }
  return -1;
}


int kg_gpu_sm_for_arch(const char *arch, kg_gpu_sm *s) {
  static const struct {
    int sm, threads, blocks;
    int64_t shared_kb;
  } table[] = {
      {70, 2048, 32, 96},  {72, 2048, 32, 96},  {75, 1024, 16, 64},  {80, 2048, 32, 164},  {86, 1536, 16, 100},
      {87, 1536, 16, 164}, {89, 1536, 24, 100}, {90, 2048, 32, 228}, {100, 2048, 32, 228}, {120, 1536, 32, 100},
  };
  int num;
  char suffix;
  if (kg_gpu_arch_parse(arch, &num, &suffix) != 0) return -1;
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (table[i].sm != num) continue;
    s->max_threads = table[i].threads;
    s->max_blocks = table[i].blocks;
    s->regs = 65536;
    s->reg_unit = 256;
    s->shared = table[i].shared_kb * 1024;
    s->shared_reserved = num >= 80 ? 1024 : 0;
    return 0;
  }
  return -1;
}
