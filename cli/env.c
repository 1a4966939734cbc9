/* The CLI's view of its environment: settings that name a library (KGEN_CUDA_LIB, KGEN_NVRTC) are checked before
 * any work, so that a bad one is an error naming it rather than a silent fallback or a fault blamed on every
 * candidate; and build folders left by dead kgen processes are removed, live ones removed on SIGINT/SIGTERM. */
#include <stdio.h>
#include "cli.h"
#include "../runtime/compiler.h"
#include "../runtime/cudrv.h"
#include "../runtime/nvrtc.h"

void cli_env_start(void) {
  kg_compiler_cleanup_on_signals();
  kg_compiler_clean_stale();
}

int cli_env_check(const char *cmd, kg_target_kind target, int emulate, int target_auto) {
  char why[1024];
  int cuda = target_auto || target == KG_TARGET_CUDA;
  /* the driver only serves a real GPU; NVRTC serves both the GPU and the emulator's resource check */
  if (cuda && !emulate && kg_cudrv_setting_check(why, sizeof why) != 0) {
    fprintf(stderr, "kgen %s: %s (unset it, or point it at the driver, libcuda.so.1)\n", cmd, why);
    return 1;
  }
  if (cuda && kg_nvrtc_setting_check(why, sizeof why) != 0) {
    fprintf(stderr, "kgen %s: %s (unset it, or point it at libnvrtc.so)\n", cmd, why);
    return 1;
  }
  return 0;
}
