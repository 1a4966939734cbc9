/* The vocabulary of a measurement's outcome, shared by the measurement harness that produces it and the tuning
 * log that records it by name: the log is read by tools that run nothing, so it must not depend on the runtime. */
#ifndef KG_STATUS_H
#define KG_STATUS_H
#define KG_STATUSES(X)                                                                                      \
  X(OK, "ok") X(COMPILE_ERROR, "compile_error") X(RESOURCE_LIMIT, "resource_limit")                         \
  X(RUNTIME_ERROR, "runtime_error") X(TIMEOUT, "timeout") X(WRONG_ANSWER, "wrong_answer")
typedef enum {
#define X(n, s) KG_STATUS_##n,
  KG_STATUSES(X)
#undef X
  KG_STATUS_COUNT
} kg_status;
extern const char *const kg_status_names[KG_STATUS_COUNT];

/* Where a candidate runs. */
typedef enum { KG_RUNNER_CPU, KG_RUNNER_GPU, KG_RUNNER_EMULATOR } kg_runner;
extern const char *const kg_runner_names[]; /* "cpu", "gpu", "emulator" */
#endif
