/* dist/ built without MPI (as the tests are: they link no MPI): launched alone it is a local run; launched among
 * several processes (the environment mpirun, mpiexec or srun give each process) it refuses, so that N copies of
 * kgen never run N independent tuners on one log. */
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../dist/dist.c"

static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS",
                                   "SLURM_STEP_NUM_TASKS"};

static void clear(void) {
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
}

int main(void) {
  CHECK(!kg_dist_available());
  clear();
  kg_dist *d = (kg_dist *)1;
  char err[512] = "";
  CHECK(kg_dist_launched() == 1);
  CHECK(kg_dist_start(&d, err, sizeof err) == 0 && d == NULL);
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
    clear();
    setenv(vars[i], "1", 1);
    CHECKF(kg_dist_start(&d, err, sizeof err) == 0, "%s=1 is a run alone", vars[i]);
    setenv(vars[i], "4", 1);
    CHECK(kg_dist_launched() == 4);
    err[0] = 0;
    CHECKF(kg_dist_start(&d, err, sizeof err) == -1 && d == NULL, "%s=4 refuses", vars[i]);
    CHECKF(strstr(err, "one of 4 processes") && strstr(err, "built without MPI"), "%s", err);
  }
  clear();
  kg_dist_opts o = {0, 0};
  kg_measure_opts mo;
  memset(&mo, 0, sizeof mo);
  CHECK(kg_dist_pool(NULL, &mo, &o, err, sizeof err) == NULL);
  CHECK(kg_dist_end(NULL, 3) == 3);
  TEST_END();
}
