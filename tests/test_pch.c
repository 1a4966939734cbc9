/* The precompiled header of the generated C's includes (runtime/pch.c). With gcc -H in $KGEN_CFLAGS the build
 * log names the PCH gcc took ("! PATH.gch") or found invalid ("x PATH.gch"): no PCH for a command line's first two
 * builds, a valid one from the third; another command line its own; none with KGEN_NO_PCH=1; a corrupted PCH costs
 * a build nothing (gcc finds it invalid, or the build is retried without it and it is not used again). Every
 * kernel is run and its answer checked, and each folder of a PCH is there while the process lives. The compiler
 * is $CC (default cc); with one that is not gcc no PCH is made, and the test checks that instead. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "codegen/codegen.h"
#include "runtime/cpu.h"
#include "testlib.h"
#include "testutil.h"

static const char BODY[] = "void fn_args(float **a) {\n"
                           "  for (int i = 0; i < 64; i++) a[1][i] = kg_expf(a[0][i]) + (float)KG_TEST_ADD;\n"
                           "}\n";

enum { USED = 1, INVALID = 2 };

/* Builds and runs the kernel (KG_TEST_ADD as defined in define); what its -H log says of a PCH (USED, INVALID,
 * 0), the PCH's path into path when it names one. -1 when it does not build or computes wrongly. */
static int build_once(const char *define, float add, char *path, size_t pathlen) {
  kg_cpu_module m;
  int rc = kg_test_build_with_prelude(define, BODY, "fn", &m);
  CHECKF(rc == 0, "the kernel does not build: %s", m.log ? m.log : "?");
  int how = -1;
  if (rc == 0) {
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = (float)i / 16.0f - 2.0f, y[i] = -1;
    float *args[] = {x, y};
    kg_cpu_call(&m, args, 2);
    int ok = 1;
    for (int i = 0; i < 64; i++) ok &= fabsf(y[i] - (expf(x[i]) + add)) <= 1e-5f * (expf(x[i]) + add);
    CHECKF(ok, "the kernel computes wrongly");
    how = 0;
    const char *l = m.log ? m.log : "";
    for (const char *p = strstr(l, "kg_pch.h.gch"); p; p = strstr(p + 1, "kg_pch.h.gch")) {
      const char *s = p;
      while (s > l && s[-1] != '\n') s--;
      if (s[0] == '!' || s[0] == 'x') {
        how = s[0] == '!' ? USED : INVALID;
        size_t n = (size_t)(p + strlen("kg_pch.h.gch") - (s + 2));
        if (path && n < pathlen) {
          memcpy(path, s + 2, n);
          path[n] = 0;
        }
      }
    }
    if (!ok) how = -1;
  }
  kg_cpu_module_free(&m);
  return how;
}

static int compiler_is_gcc(void) {
  const char *cc = getenv("CC");
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s --version 2>/dev/null", cc && *cc ? cc : "cc");
  FILE *p = popen(cmd, "r");
  if (!p) return 0;
  char line[256];
  int gcc = 0;
  while (fgets(line, sizeof line, p)) gcc |= strstr(line, "Free Software Foundation") != NULL;
  pclose(p);
  return gcc;
}

int main(void) {
  unsetenv("KGEN_NO_PCH");
  int gcc = compiler_is_gcc();
  kg_test_cflags cf;
  kg_test_cflags_set(&cf, "-H", 0);
  const char *def1 = "#define KG_TEST_ADD 1\n";
  char path[1024] = "", path2[1024] = "";
  int hows[5];
  for (int i = 0; i < 5; i++) hows[i] = build_once(def1, 1, path, sizeof path);
  CHECKF(hows[0] == 0 && hows[1] == 0, "the first two builds of a command line take a PCH: %d %d", hows[0], hows[1]);
  if (gcc) {
    CHECKF(hows[2] == USED && hows[3] == USED && hows[4] == USED, "the third build on take no valid PCH: %d %d %d",
           hows[2], hows[3], hows[4]);
    struct stat st;
    CHECKF(path[0] && stat(path, &st) == 0 && st.st_size > 0, "no PCH at '%s'", path);
    /* corrupted in place: every build still right */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) {
      char junk[4096];
      memset(junk, 0x5a, sizeof junk);
      memcpy(junk, "gpch", 4);
      fwrite(junk, 1, sizeof junk, f);
      fclose(f);
    }
    for (int i = 0; i < 3; i++) {
      int h = build_once(def1, 1, NULL, 0);
      CHECKF(h == 0 || h == INVALID, "a build after the PCH's corruption: %d", h);
    }
  } else {
    CHECKF(hows[2] == 0 && hows[4] == 0, "a PCH with a compiler that is not gcc: %d %d", hows[2], hows[4]);
  }
  /* another command line: its own PCH from its own third build */
  kg_test_cflags_restore(&cf);
  kg_test_cflags_set(&cf, "-H -DKG_TEST_OTHER=1", 0);
  for (int i = 0; i < 3; i++) hows[i] = build_once("#define KG_TEST_ADD 2\n", 2, path2, sizeof path2);
  CHECKF(hows[0] == 0 && hows[1] == 0, "another command line's first builds take a PCH: %d %d", hows[0], hows[1]);
  if (gcc) {
    CHECKF(hows[2] == USED, "another command line's third build takes no valid PCH: %d", hows[2]);
    CHECKF(strcmp(path, path2) != 0, "two command lines share the PCH %s", path);
  }
  kg_test_cflags_restore(&cf);
  /* none at all with KGEN_NO_PCH */
  setenv("KGEN_NO_PCH", "1", 1);
  kg_test_cflags_set(&cf, "-H -DKG_TEST_THIRD=1", 0);
  for (int i = 0; i < 4; i++) hows[i] = build_once(def1, 1, NULL, 0);
  CHECKF(hows[0] == 0 && hows[1] == 0 && hows[2] == 0 && hows[3] == 0, "a PCH with KGEN_NO_PCH=1: %d %d %d %d",
         hows[0], hows[1], hows[2], hows[3]);
  kg_test_cflags_restore(&cf);
  unsetenv("KGEN_NO_PCH");
  TEST_END();
}
