/* `kgen export`: a workload's best logged kernels, rebuilt from their traces and printed as one header
 * (replay/export.h). The pipeline per kernel: pick the record -> apply its trace -> lower -> print -> (CUDA) NVRTC
 * per arch + the arch's limits; anything that fails on the way falls back to the default schedule, with a warning.
 * Then kg_header_print assembles the header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/arena.h"
#include "../base/strbuf.h"
#include "../base/xalloc.h"
#include "../runtime/pipeline.h"
#include "../lower/ir.h"
#include "export.h"
#include "../base/version.h"

/* One kernel program of a CUDA binding: a schedule (by trace text) and the archs it was compiled for. */
typedef struct variant {
  char *trace_text;
  kg_cuda_program prog;
  kg_cubin cubins[KG_EXPORT_MAX_ARCHS];
  kg_header_image images[KG_EXPORT_MAX_ARCHS];
  int ncubins;
  const kg_tlog_record *rec; /* where the trace came from; NULL: the default schedule */
  int rec_index;
  kg_strbuf note;            /* warnings about the archs it serves */
  char *record_text;
} variant;

typedef struct binding {
  const kg_program *prog;
  char *fn;
  int64_t sizes[KG_TLOG_MAX_SIZES];
  int64_t rlo[KG_TLOG_MAX_SIZES], rhi[KG_TLOG_MAX_SIZES]; /* dynamic kernels: the values each size may take */
  /* C */
  char *c_function, *trace_text, *record_text, *note;
  const kg_tlog_record *rec;
  /* CUDA */
  variant vars[KG_EXPORT_MAX_ARCHS];
  int nvars;
  kg_header_variant hvars[KG_EXPORT_MAX_ARCHS];
} binding;

typedef struct exporter {
  const kg_tlog *log;
  const kg_export_opts *o;
  kg_strbuf warnings;
  char *err;
  size_t errlen;
} exporter;

static void warn(exporter *x, const char *fn, const char *arch, const char *msg) {
  kg_strbuf_printf(&x->warnings, "%s%s%s%s: %s\n", fn, arch ? " (" : "", arch ? arch : "", arch ? ")" : "", msg);
}

/* The build options a try stands for: the record's trace, or the target's default schedule (rec NULL). The build
 * fails at its schedule stage when the trace no longer applies (a log from another kgen version, or a program
 * that changed). */
static kg_build_opts try_opts(const kg_tlog_record *rec, kg_target_kind target, kg_build_stage stop) {
  kg_build_opts o = {.target = target, .stop = stop, .trace = rec ? &rec->trace : NULL};
  return o;
}

static char *record_text(const exporter *x, const kg_tlog_record *rec, int index) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  if (rec)
    kg_strbuf_printf(&b, "record %d of %s", index + 1, x->o->log_path ? x->o->log_path : "the log");
  else
    kg_strbuf_puts(&b, "no record: the default schedule");
  return kg_strbuf_take(&b);
}

static void fill_origin(kg_header_origin *h, const kg_tlog_record *rec, const char *trace_text, const char *record,
                        const char *note) {
  memset(h, 0, sizeof *h);
  h->trace_text = trace_text;
  h->record = record;
  h->note = note && *note ? note : NULL;
  if (!rec) return;
  h->device = rec->target.device;
  h->arch = rec->target.arch;
  h->sketch = rec->sketch;
  h->time_s = kg_tlog_record_rank_s(rec);
  h->estimated = kg_tlog_record_estimated(rec);
  if (h->time_s > 0) {
    h->gflops = rec->flops / h->time_s * 1e-9;
    h->gbps = rec->bytes / h->time_s * 1e-9;
  }
}

/* The record to try first for a kernel, with the warning its choice deserves. */
static const kg_tlog_record *pick(exporter *x, const kg_program *p, const char *kind, const char *arch,
                                  const char *device, int *index, char *note, size_t notelen) {
  kg_tlog_workload wl;
  kg_tlog_workload_of(p, &wl);
  kg_tlog_want w = {.wl = &wl, .kind = kind, .arch = arch, .device = device, .prog = p,
                    .skip_emulated = !strcmp(kind, "cuda") && !x->o->allow_emulated};
  kg_tlog_pick pk;
  kg_tlog_pick_best(x->log, &w, &pk);
  for (const char *l = pk.skipped; *l;) {
    const char *nl = strchr(l, '\n');
    char line[1100];
    int n = nl ? (int)(nl - l) : (int)strlen(l);
    snprintf(line, sizeof line, "%.*s: passed over", n, l);
    warn(x, p->def->name, arch, line);
    l += n + (nl != NULL);
  }
  note[0] = 0;
  *index = pk.index;
  if (pk.kind == KG_TLOG_PICK_NONE) {
    snprintf(note, notelen, "%s: the default schedule", pk.differs);
    return NULL;
  }
  if (pk.kind == KG_TLOG_PICK_NEAREST) snprintf(note, notelen, "no exact record: the nearest differs in %s", pk.differs);
  return &x->log->recs[pk.index];
}

/* ---- C ---- */

static int export_c(exporter *x, binding *bd) {
  char note[1024], why[1024];
  int index;
  const kg_tlog_record *rec = pick(x, bd->prog, "c", NULL, x->o->device, &index, note, sizeof note);
  for (;;) {
    kg_build_opts o = try_opts(rec, KG_TARGET_C, KG_BUILD_PRINT);
    o.name = bd->fn;
    o.c_function = 1;
    kg_build b;
    int ok = kg_candidate_build(bd->prog, &o, &b) == 0;
    if (ok) {
      bd->c_function = b.front.c_source;
      b.front.c_source = NULL;
      bd->trace_text = kg_trace_to_text(&b.front.sched->trace);
      bd->rec = rec;
      bd->record_text = record_text(x, rec, index);
    } else {
      snprintf(why, sizeof why, "%.1023s", b.front.error.msg);
    }
    kg_build_free(&b);
    if (ok) break;
    if (!rec) {
      snprintf(x->err, x->errlen, "%s: the default schedule cannot be printed: %s", bd->fn, why);
      return -1;
    }
    snprintf(note, sizeof note, "record %d no longer builds (%.600s): the default schedule", index + 1, why);
    rec = NULL;
  }
  if (note[0]) warn(x, bd->fn, NULL, note);
  bd->note = strdup(note);
  return 0;
}

/* ---- CUDA ---- */

static int sm_number(const char *arch) { return atoi(arch + (strncmp(arch, "sm_", 3) ? 0 : 3)); }

static void variant_free(variant *v) {
  free(v->trace_text);
  kg_cuda_program_free(&v->prog);
  for (int i = 0; i < v->ncubins; i++) kg_cubin_free(&v->cubins[i]);
  kg_strbuf_free(&v->note);
  free(v->record_text);
  memset(v, 0, sizeof *v);
}

/* Builds schedule rec (NULL: default) for arch, printed with the prefix "<fn>_v<vi>", and checks the arch's
 * limits; on success the cubin joins v, and a fresh v (no cubin yet) takes the printed program and the trace.
 * 0, or -1 with why. */
static int variant_add_arch(binding *bd, variant *v, int vi, const kg_tlog_record *rec, const char *arch, char *why,
                            size_t whylen) {
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s_v%d", bd->fn, vi);
  kg_build_opts o = try_opts(rec, KG_TARGET_CUDA, KG_BUILD_COMPILE);
  o.name = prefix;
  o.arch = arch;
  kg_build b;
  int rc = kg_candidate_build(bd->prog, &o, &b);
  if (rc != 0) {
    const kg_build_error *e = &b.front.error;
    if (e->stage == KG_BUILD_COMPILE && b.tool == KG_BUILD_TOOL_NVRTC) {
      const char *log = e->log ? e->log : "NVRTC failed";
      size_t len = strlen(log);
      snprintf(why, whylen, "NVRTC: %s", len > 600 ? log + len - 600 : log);
    } else {
      snprintf(why, whylen, "%.*s", (int)(whylen ? whylen - 1 : 0), e->msg);
    }
  } else {
    if (v->ncubins == 0) {
      kg_strbuf_init(&v->note);
      v->prog = b.front.cuda;
      b.front.have_cuda = 0;
      v->trace_text = kg_trace_to_text(&b.front.sched->trace);
    }
    v->cubins[v->ncubins++] = b.cubin;
    b.have_cubin = 0;
  }
  kg_build_free(&b);
  return rc;
}

static int export_cuda_arch(exporter *x, binding *bd, const char *arch) {
  char note[1024], why[1024];
  int index;
  const kg_tlog_record *rec = pick(x, bd->prog, "cuda", arch, NULL, &index, note, sizeof note);
  for (int attempt = 0;; attempt++) {
    char *text = NULL;
    if (rec) {
      text = kg_trace_to_text(&rec->trace);
    } else {
      kg_build_opts o = try_opts(NULL, KG_TARGET_CUDA, KG_BUILD_SCHEDULE);
      kg_build b;
      kg_candidate_build(bd->prog, &o, &b);
      text = kg_trace_to_text(&b.front.sched->trace);
      kg_build_free(&b);
    }
    variant *v = NULL;
    int fresh = 0;
    for (int i = 0; i < bd->nvars && !v; i++)
      if (!strcmp(bd->vars[i].trace_text, text)) v = &bd->vars[i];
    if (!v) {
      v = &bd->vars[bd->nvars];
      memset(v, 0, sizeof *v);
      fresh = 1;
    }
    free(text);
    int rc = variant_add_arch(bd, v, (int)(v - bd->vars), rec, arch, why, sizeof why);
    if (rc == 0) {
      if (fresh) {
        v->rec = rec;
        v->rec_index = index;
        v->record_text = record_text(x, rec, index);
        bd->nvars++;
      }
      if (note[0]) {
        kg_strbuf_printf(&v->note, "%sfor %s: %s", v->note.len ? "; " : "", arch, note);
        warn(x, bd->fn, arch, note);
      }
      return 0;
    }
    if (fresh) variant_free(v);
    if (!rec || attempt > 0) {
      snprintf(x->err, x->errlen, "%s (%s): the default schedule cannot be built: %s", bd->fn, arch, why);
      return -1;
    }
    snprintf(note, sizeof note, "record %d does not build for %s (%.600s): the default schedule", index + 1, arch,
             why);
    rec = NULL;
  }
}

static int export_cuda(exporter *x, binding *bd) {
  for (int a = 0; a < x->o->narchs; a++)
    if (export_cuda_arch(x, bd, x->o->archs[a]) != 0) return -1;
  for (int i = 0; i < bd->nvars; i++) {
    variant *v = &bd->vars[i];
    int low = 0;
    for (int c = 0; c < v->ncubins; c++) {
      v->images[c] = (kg_header_image){.arch = v->cubins[c].arch, .data = v->cubins[c].cubin, .size = v->cubins[c].cubin_size};
      if (sm_number(v->cubins[c].arch) < sm_number(v->cubins[low].arch)) low = c;
    }
    kg_header_variant *h = &bd->hvars[i];
    h->prog = &v->prog;
    h->cubins = v->images;
    h->ncubins = v->ncubins;
    h->ptx = v->cubins[low].ptx;
    h->ptx_arch = v->cubins[low].arch;
    fill_origin(&h->origin, v->rec, v->trace_text, v->record_text, v->note.s);
  }
  return 0;
}

/* ---- the header ---- */

/* "def matmul(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N])" and each parameter's "[M][K]". */
static char *signature(const kg_program *p, char **dims) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  kg_strbuf_printf(&b, "def %s(", p->def->name);
  int k = 0;
  for (int side = 0; side < 2; side++) {
    const kg_param *ps = side ? p->def->outputs : p->def->inputs;
    int n = side ? p->def->noutputs : p->def->ninputs;
    if (side) kg_strbuf_puts(&b, ") -> (");
    for (int i = 0; i < n; i++, k++) {
      kg_strbuf d;
      kg_strbuf_init(&d);
      const kg_tensor *t = side ? p->outputs[i] : p->inputs[i];
      kg_strbuf_printf(&b, "%s%s: %s[", i ? ", " : "", ps[i].name, kg_dtype_names[t->dtype]);
      for (int j = 0; j < ps[i].ndim; j++) {
        if (j) kg_strbuf_puts(&b, ", ");
        kg_expr_print(&b, p, ps[i].dims[j]);
        kg_strbuf_putc(&d, '[');
        kg_expr_print(&d, p, ps[i].dims[j]);
        kg_strbuf_putc(&d, ']');
      }
      kg_strbuf_putc(&b, ']');
      dims[k] = kg_strbuf_take(&d);
    }
  }
  kg_strbuf_putc(&b, ')');
  if (p->tf32)
    kg_strbuf_puts(&b, ", TF32 allowed (--tf32: products of f32 operands from operands rounded to TF32)");
  return kg_strbuf_take(&b);
}

/* The values a dynamic kernel of p serves: per size, the bucket its records were tuned for (every record of one
 * workload identity shares it), else the size's whole range; a static size its value. */
static void binding_ranges(const kg_tlog *log, const kg_program *p, int64_t *lo, int64_t *hi) {
  kg_tlog_workload wl;
  kg_tlog_workload_of(p, &wl);
  const kg_tlog_record *r = NULL;
  for (int i = 0; i < log->n && !r; i++)
    if (log->recs[i].ndyn && !strcmp(log->recs[i].workload.hash, wl.hash) && !strcmp(log->recs[i].workload.name, wl.name))
      r = &log->recs[i];
  for (int k = 0; k < p->nsizes && k < KG_TLOG_MAX_SIZES; k++) {
    const kg_size_var *sv = &p->sizes[k];
    lo[k] = hi[k] = sv->value;
    if (!sv->dynamic) continue;
    lo[k] = sv->lo;
    hi[k] = sv->hi;
    for (int j = 0; r && j < r->ndyn; j++)
      if (!strcmp(r->dyn_names[j], sv->name)) lo[k] = r->bucket_lo[j], hi[k] = r->bucket_hi[j];
  }
}

const char *kg_export_variant_name(const kg_program *p, char *buf, size_t len) {
  snprintf(buf, len, "%s%s%s%s", p->def->name, p->io_retyped && p->io_dtype != KG_DT_F32 ? "_" : "",
           p->io_retyped && p->io_dtype != KG_DT_F32 ? kg_dtype_names[p->io_dtype] : "", p->tf32 ? "_tf32" : "");
  return buf;
}

int kg_export_header(const kg_program *const *progs, int n, const kg_tlog *log, const kg_export_opts *o,
                     char **header, char **warnings, char *err, size_t errlen) {
  *header = NULL;
  *warnings = NULL;
  if (errlen) err[0] = 0;
  if (n < 1) {
    snprintf(err, errlen, "export: no program");
    return -1;
  }
  for (int i = 1; i < n; i++)
    if (strcmp(progs[i]->def->name, progs[0]->def->name) || progs[i]->nsizes != progs[0]->nsizes ||
        kg_program_ndynamic(progs[i]) != kg_program_ndynamic(progs[0]) ||
        progs[i]->ninputs + progs[i]->noutputs != progs[0]->ninputs + progs[0]->noutputs) {
      snprintf(err, errlen, "export: one header holds one def (%s and %s)", progs[0]->def->name, progs[i]->def->name);
      return -1;
    }
  char vname[256], vother[256];
  kg_export_variant_name(progs[0], vname, sizeof vname);
  for (int i = 1; i < n; i++)
    if (strcmp(kg_export_variant_name(progs[i], vother, sizeof vother), vname)) {
      snprintf(err, errlen, "export: one header holds one variant of a workload (%s and %s)", vname, vother);
      return -1;
    }
  if (progs[0]->nsizes > KG_TLOG_MAX_SIZES) {
    snprintf(err, errlen, "export: %s has more than %d size variables", progs[0]->def->name, KG_TLOG_MAX_SIZES);
    return -1;
  }
  kg_export_opts opts = *o;
  if (opts.target == KG_TARGET_CUDA) {
    if (opts.narchs == 0) opts.archs[opts.narchs++] = "sm_86";
    char why[512];
    if (kg_nvrtc_available(why, sizeof why) != 0) {
      snprintf(err, errlen, "export: CUDA kernels are compiled with NVRTC, which is missing: %s", why);
      return -1;
    }
  }
  exporter x = {.log = log, .o = &opts, .err = err, .errlen = errlen};
  kg_strbuf_init(&x.warnings);
  binding *bd = kg_xrealloc(NULL, sizeof *bd * (size_t)n);
  memset(bd, 0, sizeof *bd * (size_t)n);
  kg_header_binding *hb = kg_xrealloc(NULL, sizeof *hb * (size_t)n);
  memset(hb, 0, sizeof *hb * (size_t)n);
  const int np = progs[0]->ninputs + progs[0]->noutputs, ns = progs[0]->nsizes;
  const char **pnames = kg_xrealloc(NULL, sizeof *pnames * (size_t)(np + 1));
  int *pin = kg_xrealloc(NULL, sizeof *pin * (size_t)(np + 1));
  int *pdt = kg_xrealloc(NULL, sizeof *pdt * (size_t)(np + 1));
  for (int i = 0; i < np; i++)
    pdt[i] = (int)(i < progs[0]->ninputs ? progs[0]->inputs[i] : progs[0]->outputs[i - progs[0]->ninputs])->dtype;
  char **pdims = kg_xrealloc(NULL, sizeof *pdims * (size_t)(np + 1));
  const char **snames = kg_xrealloc(NULL, sizeof *snames * (size_t)(ns + 1));
  char *sig = signature(progs[0], pdims);
  /* Parameter names as lowering gives them (C identifiers clear of every name the header and its includes
   * define), from the default schedule: every kernel of the header takes the same parameters. */
  {
    kg_build_opts o = try_opts(NULL, KG_TARGET_C, KG_BUILD_LOWER);
    kg_build b;
    kg_candidate_build(progs[0], &o, &b);
    const kg_lowered *f = b.front.ir;
    for (int i = 0; i < np; i++) {
      const kg_tensor *t = i < progs[0]->ninputs ? progs[0]->inputs[i] : progs[0]->outputs[i - progs[0]->ninputs];
      pnames[i] = strdup(t->name);
      pin[i] = i < progs[0]->ninputs;
    }
    for (int i = 0; f && i < f->nparams; i++) {
      int k = f->params[i]->param_index;
      if (k < 0 || k >= np) continue;
      free((char *)pnames[k]);
      pnames[k] = strdup(f->params[i]->name);
    }
    kg_build_free(&b);
  }
  for (int k = 0; k < ns; k++) snames[k] = progs[0]->sizes[k].name;
  int *sdyn = kg_xrealloc(NULL, sizeof *sdyn * (size_t)(ns + 1));
  for (int k = 0; k < ns; k++) sdyn[k] = progs[0]->sizes[k].dynamic;
  const int dynamic = kg_program_ndynamic(progs[0]) > 0;
  kg_header_spec spec = {.name = vname,
                         .prefix = opts.prefix ? opts.prefix : "kg_",
                         .target = opts.target,
                         .signature = sig,
                         .nparams = np,
                         .param_names = pnames,
                         .param_is_input = pin,
                         .param_dtype = pdt,
                         .param_dims = (const char *const *)pdims,
                         .nsizes = ns,
                         .size_names = snames,
                         .size_dynamic = dynamic ? sdyn : NULL,
                         .bindings = hb,
                         .nbindings = n,
                         .log_path = opts.log_path,
                         .kgen_version = KGEN_VERSION};
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    bd[i].prog = progs[i];
    for (int k = 0; k < ns; k++) bd[i].sizes[k] = progs[i]->sizes[k].value;
    hb[i].size_values = bd[i].sizes;
    if (dynamic) {
      binding_ranges(log, progs[i], bd[i].rlo, bd[i].rhi);
      hb[i].range_lo = bd[i].rlo;
      hb[i].range_hi = bd[i].rhi;
    }
    bd[i].fn = kg_header_fn_name(&spec, i);
    rc = opts.target == KG_TARGET_CUDA ? export_cuda(&x, &bd[i]) : export_c(&x, &bd[i]);
    if (rc) break;
    if (opts.target == KG_TARGET_CUDA) {
      hb[i].variants = bd[i].hvars;
      hb[i].nvariants = bd[i].nvars;
    } else {
      hb[i].c_function = bd[i].c_function;
      fill_origin(&hb[i].origin, bd[i].rec, bd[i].trace_text, bd[i].record_text, bd[i].note);
    }
  }
  if (rc == 0) rc = kg_header_print(&spec, header, err, errlen);
  for (int i = 0; i < n; i++) {
    free(bd[i].fn);
    free(bd[i].c_function);
    free(bd[i].trace_text);
    free(bd[i].record_text);
    free(bd[i].note);
    for (int v = 0; v < bd[i].nvars; v++) variant_free(&bd[i].vars[v]);
  }
  for (int i = 0; i < np; i++) {
    free(pdims[i]);
    free((char *)pnames[i]);
  }
  free(pdims);
  free(pnames);
  free(pin);
  free(pdt);
  free(snames);
  free(sdyn);
  free(sig);
  free(bd);
  free(hb);
  if (rc != 0) {
    kg_strbuf_free(&x.warnings);
    return -1;
  }
  *warnings = kg_strbuf_take(&x.warnings);
  return 0;
}
