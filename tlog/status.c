#include "status.h"

const char *const kg_status_names[KG_STATUS_COUNT] = {
#define X(n, s) s,
    KG_STATUSES(X)
#undef X
};
const char *const kg_runner_names[] = {"cpu", "gpu", "emulator"};
