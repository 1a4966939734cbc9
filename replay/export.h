/* `kgen export`: the best logged kernels of a workload as one self-contained header (codegen/header.h).
 *
 * Per size binding, and on CUDA per arch asked for, the best successful record is picked (tlog/select.c: exact
 * target; else the nearest record of the workload with a warning; else the default schedule with a warning), its
 * trace re-applied and lowered, and printed: on C as one function; on CUDA as a kernel program compiled by NVRTC for
 * the arch, checked against that arch's limits (a trace that no longer applies, or that does not fit the arch,
 * falls back to the default schedule with a warning). Archs whose records chose the same trace share one kernel
 * program (one variant: a cubin per arch, plus PTX of the lowest for the driver to JIT on archs not named). No
 * measurement, no search: exporting needs no GPU. */
#ifndef KG_EXPORT_H
#define KG_EXPORT_H
#include <stddef.h>
#include "../codegen/header.h"
#include "../tlog/tlog.h"

#define KG_EXPORT_MAX_ARCHS 16

typedef struct kg_export_opts {
  kg_target_kind target;
  const char *archs[KG_EXPORT_MAX_ARCHS]; /* CUDA: a cubin for each ("sm_86", "sm_90"); none: sm_86 */
  int narchs;
  const char *prefix;                     /* of the header's public names; NULL: "kg_" */
  const char *log_path;                   /* named in the header's comment; may be NULL */
  const char *device;                     /* C: prefer records measured on this device; NULL: any */
  int allow_emulated;                     /* CUDA: records timed on the CUDA emulator may be exported; by default
                                           * they are passed over with a warning (the emulator's clock rewards
                                           * tiny blocks and says nothing of a GPU's speed) */
} kg_export_opts;

/* The name of a workload's header and of its functions: the def's name, then what makes its variant another
 * workload (--dtype, --tf32): "matmul", "matmul_bf16", "matmul_tf32", so that one log holding several variants
 * exports each into a header of its own. Written into buf (len bytes); returns buf. */
const char *kg_export_variant_name(const kg_program *p, char *buf, size_t len);
/* The header of one workload: progs[0..n) are one def checked under n different size bindings (typically every
 * binding the log holds), all of one variant (kg_export_variant_name). Returns 0 with *header (heap) and *warnings (heap, one line per warning, "" for none;
 * each names the kernel it concerns), or -1 with err: programs of different defs, NVRTC missing on CUDA, a
 * program not even the default schedule can print or compile for. */
int kg_export_header(const kg_program *const *progs, int n, const kg_tlog *log, const kg_export_opts *o,
                     char **header, char **warnings, char *err, size_t errlen);
#endif
