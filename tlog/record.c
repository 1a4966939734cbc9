/* One tuning-log record: workload identity, the msgpack encoding, and the decoder that keeps every intact record
 * of a buffer and skips the rest (layout of a record: tlog.h). */
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../base/stats.h"
#include "../base/strbuf.h"
#include "../base/xalloc.h"
#include "status.h"
#include "tlog.h"
#include "tlog_impl.h"

/* ---- workload identity ---- */

/* 64-bit FNV-1a: simple, stable across machines and versions, and good enough to tell workloads apart (the name
 * and sizes are stored beside the hash anyway). */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}
/* A string and its terminating NUL, so that consecutive fields cannot run into each other. */
static uint64_t fnv1a_str(uint64_t h, const char *s) { return fnv1a(h, s, strlen(s) + 1); }

/* Requires a checked program. The hash covers the def's name, the canonical program text, every size binding as
 * "NAME=VALUE" in the program's order, and the element type "f32"; only the first KG_TLOG_MAX_SIZES bindings are
 * listed in w (the hash still covers all of them). */
void kg_tlog_dynamic_of(const kg_program *p, const int64_t *bucket_lo, const int64_t *bucket_hi,
                        kg_tlog_record *r) {
  r->ndyn = 0;
  for (int i = 0; i < p->nsizes && r->ndyn < KG_TLOG_MAX_SIZES; i++) {
    const kg_size_var *sv = &p->sizes[i];
    if (!sv->dynamic) continue;
    int k = r->ndyn++;
    r->dyn_names[k] = sv->name;
    r->dyn_lo[k] = sv->lo;
    r->dyn_hi[k] = sv->hi;
    r->bucket_lo[k] = bucket_lo ? bucket_lo[k] : sv->lo;
    r->bucket_hi[k] = bucket_hi ? bucket_hi[k] : sv->hi;
  }
}

void kg_tlog_workload_of(const kg_program *p, kg_tlog_workload *w) {
  memset(w, 0, sizeof *w);
  w->name = p->def->name;
  uint64_t h = fnv1a_str(0xcbf29ce484222325ULL, w->name);
  char *canon = kg_program_canonical(p);
  h = fnv1a_str(h, canon);
  free(canon);
  for (int i = 0; i < p->nsizes; i++) {
    char val[32];
    /* a dynamic size's range is part of the kernel: a kernel taking M at run time is not the one specialized to
     * the same value, and static workloads hash as they always did */
    if (p->sizes[i].dynamic)
      snprintf(val, sizeof val, "=%lld@%lld..%lld", (long long)p->sizes[i].value, (long long)p->sizes[i].lo,
               (long long)p->sizes[i].hi);
    else
      snprintf(val, sizeof val, "=%lld", (long long)p->sizes[i].value);
    h = fnv1a(h, p->sizes[i].name, strlen(p->sizes[i].name));
    h = fnv1a_str(h, val);
    if (w->nsizes < KG_TLOG_MAX_SIZES) {
      w->size_names[w->nsizes] = p->sizes[i].name;
      w->size_values[w->nsizes++] = p->sizes[i].value;
    }
  }
  h = fnv1a_str(h, "f32"); /* the slot of the old single dtype; the tensors' types are in the canonical text */
  if (p->io_retyped) w->io_dtype = 1 + (int)p->io_dtype;
  /* TF32 computes another function than f32: its kernels must never be replayed for the f32 workload; logs without
   * it hash as before */
  if (p->tf32) h = fnv1a_str(h, "tf32");
  w->tf32 = p->tf32 != 0;
  snprintf(w->hash, sizeof w->hash, "%016llx", (unsigned long long)h);
}

double kg_tlog_record_median(const kg_tlog_record *r) {
  if (r->ntimes <= 0 || !r->times) return 0;
  return kg_stats_of(r->times, r->ntimes).median;
}

int kg_tlog_record_estimated(const kg_tlog_record *r) {
  return r->estimate_s > 0 && r->target.runner && !strcmp(r->target.runner, kg_runner_names[KG_RUNNER_EMULATOR]);
}

double kg_tlog_record_rank_s(const kg_tlog_record *r) {
  return kg_tlog_record_estimated(r) ? r->estimate_s : kg_tlog_record_median(r);
}

int kg_tlog_record_ok(const kg_tlog_record *r) {
  return r->status && strcmp(r->status, kg_status_names[KG_STATUS_OK]) == 0 && r->ntimes > 0;
}

int kg_tlog_record_plausible(const kg_tlog_record *r, const double *flops, const double *bytes, char *why,
                             size_t whylen) {
  double t = kg_tlog_record_rank_s(r);
  double f = flops ? *flops : r->flops, b = bytes ? *bytes : r->bytes;
  const char *what = NULL;
  double rate = 0;
  if (!isfinite(t) || t < KG_TLOG_MIN_TIME_S)
    what = "below the shortest possible kernel time";
  else if (f / t > KG_TLOG_PEAK_FLOPS)
    what = "FLOP/s", rate = f / t;
  else if (b / t > KG_TLOG_PEAK_BYTES_S)
    what = "B/s", rate = b / t;
  if (!what) return 1;
  if (why && whylen) {
    if (rate > 0)
      snprintf(why, whylen, "implausible time %.3g s (%.3g %s, above any machine's peak)", t, rate, what);
    else
      snprintf(why, whylen, "implausible time %.3g s (%s, %g s)", t, what, KG_TLOG_MIN_TIME_S);
  }
  return 0;
}

/* ---- encoding ---- */

/* The packer writes into a kg_strbuf, so running out of memory is fatal here as everywhere else in kgen. */
static int strbuf_write(void *data, const char *buf, size_t len) {
  kg_strbuf_putn(data, buf, len);
  return 0;
}

static void pack_str(msgpack_packer *pk, const char *s) {
  if (!s) s = "";
  size_t n = strlen(s);
  msgpack_pack_str(pk, n);
  msgpack_pack_str_body(pk, s, n);
}

static void pack_key_str(msgpack_packer *pk, const char *key, const char *val) {
  pack_str(pk, key);
  pack_str(pk, val);
}

static void pack_key_double(msgpack_packer *pk, const char *key, double val) {
  pack_str(pk, key);
  msgpack_pack_double(pk, val);
}

static void pack_trace(msgpack_packer *pk, const kg_trace *t) {
  msgpack_pack_array(pk, (size_t)t->nsteps);
  for (int i = 0; i < t->nsteps; i++) {
    const kg_step *st = &t->steps[i];
    msgpack_pack_array(pk, 4);
    pack_str(pk, (unsigned)st->kind < KG_STEP_COUNT ? kg_step_names[st->kind] : "");
    pack_str(pk, st->stage);
    msgpack_pack_array(pk, (size_t)st->nnames);
    for (int k = 0; k < st->nnames; k++) pack_str(pk, st->names[k]);
    msgpack_pack_array(pk, (size_t)st->nints);
    for (int k = 0; k < st->nints; k++) msgpack_pack_int64(pk, st->ints[k]);
  }
}

/* Keys in the order of tlog.h, "v" first: the reader resynchronises on a map whose first key is "v". */
char *kg_tlog_encode(const kg_tlog_record *r, size_t *len) {
  kg_strbuf b;
  kg_strbuf_init(&b);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &b, strbuf_write);
  msgpack_pack_map(&pk, 7 + (r->sketch != NULL) + (r->nknobs > 0) + (r->ndyn > 0) + (r->estimate_s > 0) +
                            (r->worker_host != NULL));

  pack_str(&pk, "v");
  msgpack_pack_int(&pk, KG_TLOG_VERSION);

  const kg_tlog_workload *w = &r->workload;
  pack_str(&pk, "workload");
  msgpack_pack_map(&pk, 3 + (w->io_dtype > 0) + (w->tf32 != 0));
  pack_key_str(&pk, "name", w->name);
  pack_key_str(&pk, "hash", w->hash);
  if (w->io_dtype > 0) pack_key_str(&pk, "dtype", kg_dtype_names[w->io_dtype - 1]);
  if (w->tf32) {
    pack_str(&pk, "tf32");
    msgpack_pack_true(&pk);
  }
  pack_str(&pk, "sizes");
  msgpack_pack_map(&pk, (size_t)w->nsizes);
  for (int i = 0; i < w->nsizes; i++) {
    pack_str(&pk, w->size_names[i]);
    msgpack_pack_int64(&pk, w->size_values[i]);
  }

  pack_str(&pk, "target");
  msgpack_pack_map(&pk, 5);
  pack_key_str(&pk, "kind", r->target.kind);
  pack_key_str(&pk, "arch", r->target.arch);
  pack_key_str(&pk, "device", r->target.device);
  pack_key_str(&pk, "versions", r->target.versions);
  pack_key_str(&pk, "runner", r->target.runner);

  pack_str(&pk, "trace");
  pack_trace(&pk, &r->trace);

  pack_str(&pk, "result");
  msgpack_pack_map(&pk, 6);
  pack_key_str(&pk, "status", r->status);
  pack_key_str(&pk, "msg", r->msg);
  pack_str(&pk, "times");
  msgpack_pack_array(&pk, (size_t)(r->ntimes > 0 ? r->ntimes : 0));
  for (int i = 0; i < r->ntimes; i++) msgpack_pack_double(&pk, r->times[i]);
  pack_key_double(&pk, "compile_s", r->compile_s);
  pack_key_double(&pk, "flops", r->flops);
  pack_key_double(&pk, "bytes", r->bytes);

  pack_key_double(&pk, "time", r->time);
  pack_key_str(&pk, "kgen", r->kgen);
  if (r->sketch) pack_key_str(&pk, "sketch", r->sketch);
  if (r->nknobs > 0) {
    pack_str(&pk, "knobs");
    msgpack_pack_array(&pk, (size_t)r->nknobs);
    for (int i = 0; i < r->nknobs; i++) msgpack_pack_int64(&pk, r->knobs[i]);
  }
  if (r->estimate_s > 0) pack_key_double(&pk, "estimate", r->estimate_s);
  if (r->ndyn > 0) {
    pack_str(&pk, "dynamic");
    msgpack_pack_map(&pk, (size_t)r->ndyn);
    for (int i = 0; i < r->ndyn; i++) {
      pack_str(&pk, r->dyn_names[i]);
      msgpack_pack_array(&pk, 4);
      msgpack_pack_int64(&pk, r->dyn_lo[i]);
      msgpack_pack_int64(&pk, r->dyn_hi[i]);
      msgpack_pack_int64(&pk, r->bucket_lo[i]);
      msgpack_pack_int64(&pk, r->bucket_hi[i]);
    }
  }
  if (r->worker_host) {
    pack_str(&pk, "worker");
    msgpack_pack_map(&pk, 2);
    pack_key_str(&pk, "host", r->worker_host);
    pack_str(&pk, "rank");
    msgpack_pack_int(&pk, r->worker_rank);
  }
  *len = b.len;
  return kg_strbuf_take(&b);
}

/* ---- decoding ---- */

/* How deep msgpack may nest before the reader gives up on it: a record needs 4 levels (record, trace, step,
 * names); the rest leaves room for values under keys that newer writers may add. */
#define SPAN_MAX_DEPTH 16
/* Keys a record's maps may have (they have at most 9 now); the bound keeps the duplicate-key check cheap. */
#define MAP_MAX_KEYS 64

static uint64_t be_uint(const unsigned char *b, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | b[i];
  return v;
}

/* The length of the msgpack object at b[0..len), found without allocating: 0 when it is malformed, nests deeper
 * than SPAN_MAX_DEPTH, or does not end within len. Every container and payload must fit in the bytes left once
 * each item announced but not yet read has one byte, which bounds what msgpack_unpack_next allocates afterwards
 * by the object's size (garbage can announce an array of 2^32 items). Linear in the object's length. */
static size_t object_span(const unsigned char *b, size_t len) {
  uint64_t left[SPAN_MAX_DEPTH + 1]; /* items still to read at each open level */
  uint64_t pending = 1;              /* sum of left[] */
  int d = 0;
  size_t p = 0;
  left[0] = 1;
  while (d >= 0) {
    if (left[d] == 0) {
      d--;
      continue;
    }
    if (p >= len) return 0;
    left[d]--;
    pending--;
    unsigned c = b[p++];
    int lenbytes = 0, container = 0, map = 0;
    uint64_t n = 0, extra = 0; /* items or payload bytes; bytes after the length field besides the payload */
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
      /* a value in the header byte */
    } else if (c <= 0x8f) {
      container = map = 1;
      n = c & 0x0f;
    } else if (c <= 0x9f) {
      container = 1;
      n = c & 0x0f;
    } else if (c <= 0xbf) {
      n = c & 0x1f;
    } else if (c >= 0xc4 && c <= 0xc6) { /* bin 8/16/32 */
      lenbytes = 1 << (c - 0xc4);
    } else if (c >= 0xc7 && c <= 0xc9) { /* ext 8/16/32: a type byte after the length */
      lenbytes = 1 << (c - 0xc7);
      extra = 1;
    } else if (c >= 0xca && c <= 0xd3) { /* float 32/64, uint 8..64, int 8..64 */
      static const unsigned char sizes[] = {4, 8, 1, 2, 4, 8, 1, 2, 4, 8};
      n = sizes[c - 0xca];
    } else if (c >= 0xd4 && c <= 0xd8) { /* fixext 1..16 and its type byte */
      n = 1 + (1u << (c - 0xd4));
    } else if (c >= 0xd9 && c <= 0xdb) { /* str 8/16/32 */
      lenbytes = 1 << (c - 0xd9);
    } else if (c == 0xdc || c == 0xdd) {
      container = 1;
      lenbytes = c == 0xdc ? 2 : 4;
    } else if (c == 0xde || c == 0xdf) {
      container = map = 1;
      lenbytes = c == 0xde ? 2 : 4;
    } else {
      return 0; /* 0xc1: never used */
    }
    if (lenbytes) {
      if (len - p < (size_t)lenbytes + pending) return 0;
      n = be_uint(b + p, lenbytes);
      p += (size_t)lenbytes;
    }
    if (map) n *= 2;
    /* (pending <= len - p holds throughout: each pending item needs a byte) */
    if (n + extra > (uint64_t)(len - p) - pending) return 0;
    if (!container) {
      p += (size_t)(n + extra);
    } else if (n) {
      if (d == SPAN_MAX_DEPTH) return 0;
      left[++d] = n;
      pending += n;
    }
  }
  return p;
}

/* Where a record written by kg_tlog_encode can start: a map header followed by the key "v". */
static int record_start_at(const unsigned char *b, size_t len, size_t p) {
  unsigned c = b[p];
  size_t k = (c & 0xf0) == 0x80 ? 1 : c == 0xde ? 3 : c == 0xdf ? 5 : 0;
  return k && len - p >= k + 2 && b[p + k] == 0xa1 && b[p + k + 1] == 'v';
}

static int str_eq(const msgpack_object *o, const char *s) {
  size_t n = strlen(s);
  return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && (n == 0 || memcmp(o->via.str.ptr, s, n) == 0);
}

/* Index of o's string among names[0..n), or -1. */
static int str_index(const msgpack_object *o, const char *const *names, int n) {
  for (int i = 0; o && i < n; i++)
    if (str_eq(o, names[i])) return i;
  return -1;
}

/* Whether o is a map of at most maxkeys entries whose keys are distinct strings. */
static int keyed_map(const msgpack_object *o, uint32_t maxkeys) {
  if (!o || o->type != MSGPACK_OBJECT_MAP || o->via.map.size > maxkeys) return 0;
  const msgpack_object_kv *kv = o->via.map.ptr;
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object *k = &kv[i].key;
    if (k->type != MSGPACK_OBJECT_STR) return 0;
    for (uint32_t j = 0; j < i; j++)
      if (kv[j].key.via.str.size == k->via.str.size &&
          (k->via.str.size == 0 || memcmp(kv[j].key.via.str.ptr, k->via.str.ptr, k->via.str.size) == 0))
        return 0;
  }
  return 1;
}

/* The value of key in a keyed map; NULL when absent. */
static const msgpack_object *get(const msgpack_object *m, const char *key) {
  for (uint32_t i = 0; i < m->via.map.size; i++)
    if (str_eq(&m->via.map.ptr[i].key, key)) return &m->via.map.ptr[i].val;
  return NULL;
}

/* Optional keys may also be nil. */
static const msgpack_object *get_optional(const msgpack_object *m, const char *key) {
  const msgpack_object *o = get(m, key);
  return o && o->type == MSGPACK_OBJECT_NIL ? NULL : o;
}

/* A string field. NAME: non-empty, without NUL bytes (names, identifiers). TEXT: anything; a NUL byte ends it
 * (messages, device descriptions). Copied NUL-terminated into a when a is not NULL. */
typedef enum { STR_NAME, STR_TEXT } str_kind;
static int get_str(const msgpack_object *o, str_kind kind, kg_arena *a, const char **out) {
  if (!o || o->type != MSGPACK_OBJECT_STR) return -1;
  const char *s = o->via.str.ptr;
  size_t n = o->via.str.size;
  if (kind == STR_NAME && (n == 0 || memchr(s, 0, n))) return -1;
  if (a) *out = n ? kg_arena_strndup(a, s, n) : kg_arena_strdup(a, "");
  return 0;
}

static int get_int(const msgpack_object *o, int64_t *out) {
  if (!o) return -1;
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
    *out = (int64_t)o->via.u64;
    return 0;
  }
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    *out = o->via.i64;
    return 0;
  }
  return -1;
}

/* A finite, non-negative number (integers accepted: other writers may store 0 as one). */
static int get_amount(const msgpack_object *o, double *out) {
  if (!o) return -1;
  double v;
  if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
    v = o->via.f64;
  else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
    v = (double)o->via.u64;
  else
    return -1;
  if (!isfinite(v) || v < 0) return -1;
  *out = v;
  return 0;
}

static const char *read_workload(const msgpack_object *o, kg_arena *a, kg_tlog_workload *w) {
  if (!keyed_map(o, MAP_MAX_KEYS)) return "workload: not a map with distinct string keys";
  if (get_str(get(o, "name"), STR_NAME, a, &w->name)) return "workload.name: not a non-empty string";
  const msgpack_object *h = get(o, "hash");
  if (!h || h->type != MSGPACK_OBJECT_STR || h->via.str.size != 16) return "workload.hash: not 16 hex digits";
  for (int i = 0; i < 16; i++) {
    char c = h->via.str.ptr[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return "workload.hash: not 16 hex digits";
    w->hash[i] = c;
  }
  w->hash[16] = 0;
  const msgpack_object *s = get(o, "sizes");
  if (!keyed_map(s, KG_TLOG_MAX_SIZES)) return "workload.sizes: not a map of at most 32 distinct names";
  w->nsizes = (int)s->via.map.size;
  for (int i = 0; i < w->nsizes; i++) {
    const msgpack_object_kv *kv = &s->via.map.ptr[i];
    if (get_str(&kv->key, STR_NAME, a, &w->size_names[i])) return "workload.sizes: an empty name";
    if (get_int(&kv->val, &w->size_values[i]) || w->size_values[i] < 1)
      return "workload.sizes: a value is not a positive integer";
  }
  const msgpack_object *dt = get(o, "dtype");
  if (dt) {
    int t = str_index(dt, kg_dtype_names, KG_DT_COUNT);
    if (t < 0) return "workload.dtype: not f32, f16 or bf16";
    w->io_dtype = 1 + t;
  }
  const msgpack_object *tf = get(o, "tf32");
  if (tf) {
    if (tf->type != MSGPACK_OBJECT_BOOLEAN) return "workload.tf32: not a boolean";
    w->tf32 = tf->via.boolean;
  }
  return NULL;
}

static const char *read_target(const msgpack_object *o, kg_arena *a, kg_tlog_target *t) {
  static const char *const kinds[] = {"c", "cuda"};
  if (!keyed_map(o, MAP_MAX_KEYS)) return "target: not a map with distinct string keys";
  int kind = str_index(get(o, "kind"), kinds, 2);
  if (kind < 0) return "target.kind: neither \"c\" nor \"cuda\"";
  t->kind = kinds[kind];
  int runner = str_index(get(o, "runner"), kg_runner_names, KG_RUNNER_EMULATOR + 1);
  if (runner < 0) return "target.runner: unknown";
  t->runner = kg_runner_names[runner];
  if (get_str(get(o, "arch"), STR_TEXT, a, &t->arch)) return "target.arch: not a string";
  if (get_str(get(o, "device"), STR_TEXT, a, &t->device)) return "target.device: not a string";
  if (get_str(get(o, "versions"), STR_TEXT, a, &t->versions)) return "target.versions: not a string";
  return NULL;
}

/* The trace's shape: every step [known step name, stage, [names within the step's form], [its integers]]. */
static const char *check_trace(const msgpack_object *o) {
  if (!o || o->type != MSGPACK_OBJECT_ARRAY) return "trace: not an array";
  _Static_assert(KG_TRACE_MAX_STEPS == 1000, "the message below names the limit");
  if (o->via.array.size > KG_TRACE_MAX_STEPS) return "trace: too many steps (a trace holds at most 1000)";
  for (uint32_t i = 0; i < o->via.array.size; i++) {
    const msgpack_object *st = &o->via.array.ptr[i];
    if (st->type != MSGPACK_OBJECT_ARRAY || st->via.array.size != 4) return "trace: a step is not a 4-array";
    const msgpack_object *f = st->via.array.ptr;
    int kind = str_index(&f[0], kg_step_names, KG_STEP_COUNT);
    if (kind < 0) return "trace: unknown step";
    if (get_str(&f[1], STR_NAME, NULL, NULL)) return "trace: a step's stage is not a name";
    const kg_step_form *form = &kg_step_forms[kind];
    if (f[2].type != MSGPACK_OBJECT_ARRAY || f[2].via.array.size < (uint32_t)form->min_names ||
        f[2].via.array.size > (uint32_t)form->max_names)
      return "trace: wrong number of names for the step";
    for (uint32_t k = 0; k < f[2].via.array.size; k++)
      if (get_str(&f[2].via.array.ptr[k], STR_NAME, NULL, NULL)) return "trace: a step's name is not a name";
    if (f[3].type != MSGPACK_OBJECT_ARRAY || f[3].via.array.size != (uint32_t)form->nints)
      return "trace: wrong number of integers for the step";
    for (uint32_t k = 0; k < f[3].via.array.size; k++) {
      int64_t v;
      if (get_int(&f[3].via.array.ptr[k], &v)) return "trace: a step's integer is not an int64";
    }
  }
  return NULL;
}

/* Builds the steps of t (initialised, empty) and their strings in a from a trace that check_trace accepted. t's
 * own arena is left alone (a kg_trace arena takes a 64 KiB block once used: one per record would be too much for
 * a big log). */
static void build_trace(const msgpack_object *o, kg_arena *a, kg_trace *t) {
  t->nsteps = t->cap = (int)o->via.array.size;
  t->steps = t->nsteps ? KG_NEW_ARRAY(a, kg_step, t->nsteps) : NULL;
  for (int i = 0; i < t->nsteps; i++) {
    const msgpack_object *f = o->via.array.ptr[i].via.array.ptr;
    kg_step *st = &t->steps[i];
    st->kind = (kg_step_kind)str_index(&f[0], kg_step_names, KG_STEP_COUNT);
    get_str(&f[1], STR_NAME, a, &st->stage);
    st->nnames = (int)f[2].via.array.size;
    for (int k = 0; k < st->nnames; k++) get_str(&f[2].via.array.ptr[k], STR_NAME, a, &st->names[k]);
    st->nints = (int)f[3].via.array.size;
    for (int k = 0; k < st->nints; k++) get_int(&f[3].via.array.ptr[k], &st->ints[k]);
  }
}

/* Whether t's text form reads back as the same text: the trace reader is the judge of what a step's names and
 * integers may be (no blanks, no '#', positive factors, known tags and scopes). */
static int trace_reads_back(const kg_trace *t) {
  char *text = kg_trace_to_text(t);
  kg_trace again;
  kg_trace_init(&again);
  char err[256];
  int ok = kg_trace_parse(&again, "log", text, strlen(text), err, sizeof err) == 0;
  if (ok) {
    char *text2 = kg_trace_to_text(&again);
    ok = strcmp(text, text2) == 0;
    free(text2);
  }
  kg_trace_free(&again);
  free(text);
  return ok;
}

static const char *read_result(const msgpack_object *o, kg_arena *a, kg_tlog_record *r) {
  if (!keyed_map(o, MAP_MAX_KEYS)) return "result: not a map with distinct string keys";
  int status = str_index(get(o, "status"), kg_status_names, KG_STATUS_COUNT);
  if (status < 0) return "result.status: unknown";
  r->status = kg_status_names[status];
  if (get_str(get(o, "msg"), STR_TEXT, a, &r->msg)) return "result.msg: not a string";
  const msgpack_object *times = get(o, "times");
  if (!times || times->type != MSGPACK_OBJECT_ARRAY || times->via.array.size > INT_MAX)
    return "result.times: not an array";
  r->ntimes = (int)times->via.array.size;
  r->times = a && r->ntimes ? KG_NEW_ARRAY(a, double, r->ntimes) : NULL;
  for (int i = 0; i < r->ntimes; i++) {
    double t;
    if (get_amount(&times->via.array.ptr[i], &t)) return "result.times: not finite non-negative seconds";
    if (r->times) r->times[i] = t;
  }
  if (get_amount(get(o, "compile_s"), &r->compile_s)) return "result.compile_s: not a non-negative number";
  if (get_amount(get(o, "flops"), &r->flops)) return "result.flops: not a non-negative number";
  if (get_amount(get(o, "bytes"), &r->bytes)) return "result.bytes: not a non-negative number";
  return NULL;
}

static const char v_newer[] = "v: a format version newer than this kgen's";

/* Reads record map o into r (all but the trace, which only gets checked). With a NULL it only validates and
 * leaves r's string pointers unset; with an arena (after a validating pass) it copies strings and times there. */
static const char *read_record(const msgpack_object *o, kg_arena *a, kg_tlog_record *r) {
  if (!keyed_map(o, MAP_MAX_KEYS)) return "not a map with distinct string keys";
  int64_t v;
  if (get_int(get(o, "v"), &v) || v < 1) return "v: not a positive version";
  r->v = v > INT_MAX ? INT_MAX : (int)v;
  /* a newer writer may have changed what any key means: nothing of it is used */
  if (v > KG_TLOG_VERSION) return v_newer;
  const char *why = read_workload(get(o, "workload"), a, &r->workload);
  if (!why) why = read_target(get(o, "target"), a, &r->target);
  if (!why) why = check_trace(get(o, "trace"));
  if (!why) why = read_result(get(o, "result"), a, r);
  if (why) return why;
  if (get_amount(get(o, "time"), &r->time)) return "time: not a non-negative number";
  if (get_str(get(o, "kgen"), STR_TEXT, a, &r->kgen)) return "kgen: not a string";
  const msgpack_object *sketch = get_optional(o, "sketch"), *knobs = get_optional(o, "knobs");
  r->sketch = NULL;
  if (sketch && get_str(sketch, STR_NAME, a, &r->sketch)) return "sketch: not a name";
  r->nknobs = 0;
  if (knobs) {
    if (knobs->type != MSGPACK_OBJECT_ARRAY || knobs->via.array.size > KG_TLOG_MAX_KNOBS)
      return "knobs: not an array of at most 64 integers";
    r->nknobs = (int)knobs->via.array.size;
    for (int i = 0; i < r->nknobs; i++)
      if (get_int(&knobs->via.array.ptr[i], &r->knobs[i])) return "knobs: not an array of at most 64 integers";
  }
  const msgpack_object *est = get_optional(o, "estimate");
  r->estimate_s = 0;
  if (est && get_amount(est, &r->estimate_s)) return "estimate: not a non-negative number";
  const msgpack_object *dyn = get_optional(o, "dynamic");
  r->ndyn = 0;
  if (dyn) {
    if (!keyed_map(dyn, KG_TLOG_MAX_SIZES)) return "dynamic: not a map of at most 32 sizes";
    r->ndyn = (int)dyn->via.map.size;
    for (int i = 0; i < r->ndyn; i++) {
      const msgpack_object_kv *kv = &dyn->via.map.ptr[i];
      if (get_str(&kv->key, STR_NAME, a, &r->dyn_names[i])) return "dynamic: an empty name";
      const msgpack_object *v = &kv->val;
      int64_t x[4];
      if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size != 4) return "dynamic: not [lo, hi, bucket_lo, bucket_hi]";
      for (int k = 0; k < 4; k++)
        if (get_int(&v->via.array.ptr[k], &x[k])) return "dynamic: not [lo, hi, bucket_lo, bucket_hi]";
      if (x[0] < 1 || x[1] < x[0] || x[2] < x[0] || x[3] < x[2] || x[3] > x[1])
        return "dynamic: need 1 <= lo <= bucket_lo <= bucket_hi <= hi";
      r->dyn_lo[i] = x[0], r->dyn_hi[i] = x[1], r->bucket_lo[i] = x[2], r->bucket_hi[i] = x[3];
    }
  }
  const msgpack_object *wk = get_optional(o, "worker");
  r->worker_host = NULL;
  r->worker_rank = 0;
  if (wk) {
    int64_t rank;
    if (!keyed_map(wk, MAP_MAX_KEYS) || get_str(get(wk, "host"), STR_TEXT, a, &r->worker_host))
      return "worker: not a map with a host";
    if (get_int(get(wk, "rank"), &rank) || rank < 0 || rank > INT_MAX) return "worker: rank not a non-negative int";
    r->worker_rank = (int)rank;
  }
  return NULL;
}

/* Validates the record that starts at buf[0] (within buf[0..len)): its length, or 0 with *why when no valid record
 * starts there. With a set (for a record this function accepted before), it also decodes it into *r, with its
 * strings, times and trace in a. */
static size_t decode_record(const char *buf, size_t len, kg_arena *a, kg_tlog_record *r, const char **why) {
  size_t span = object_span((const unsigned char *)buf, len);
  if (!span) {
    *why = "not one complete msgpack object";
    return 0;
  }
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  memset(r, 0, sizeof *r);
  if (msgpack_unpack_next(&u, buf, span, &off) != MSGPACK_UNPACK_SUCCESS || off != span)
    *why = "msgpack does not decode";
  else
    *why = read_record(&u.data, a, r);
  const msgpack_object *trace = *why ? NULL : get(&u.data, "trace");
  if (trace && !a) {
    kg_trace check;
    kg_trace_init(&check);
    build_trace(trace, &check.arena, &check);
    if (!trace_reads_back(&check)) *why = "trace: a step does not read back from its text form";
    kg_trace_free(&check);
  }
  assert(!(a && *why) && "a record accepted before decodes");
  if (trace && a) {
    kg_trace_init(&r->trace);
    build_trace(trace, a, &r->trace);
  }
  msgpack_unpacked_destroy(&u);
  return *why ? 0 : span;
}

/* Whether the valid record at buf[p..p+n) is the torn head of an interrupted write that swallowed the start of
 * the record after it: a record starts inside it and ends no earlier. (A record nested inside another, under a
 * key some newer writer added, ends earlier.) */
static int swallows_next(const char *buf, size_t len, size_t p, size_t n) {
  const unsigned char *b = (const unsigned char *)buf;
  for (size_t q = p + 1; q < p + n; q++) {
    kg_tlog_record r;
    const char *why;
    if (record_start_at(b, len, q) && decode_record(buf + q, len - q, NULL, &r, &why) >= p + n - q) return 1;
  }
  return 0;
}

int kg_tlog_check_encoded(const char *buf, size_t len, const char **why) {
  kg_tlog_record r;
  size_t n = decode_record(buf, len, NULL, &r, why);
  if (n && n != len) *why = "more than one msgpack object";
  return n && n == len ? 0 : -1;
}

void kg_tlog_init(kg_tlog *log) {
  memset(log, 0, sizeof *log);
  kg_arena_init(&log->arena);
}

void kg_tlog_free(kg_tlog *log) {
  for (int i = 0; i < log->n; i++) kg_trace_free(&log->recs[i].trace); /* steps pushed after decoding */
  free(log->recs);
  kg_arena_free(&log->arena);
  kg_tlog_init(log);
}

/* Scans buf once. A record is tried where the previous one ended (or at the start) and, inside a skipped part,
 * only where one of ours can start; a failed try moves on by one byte, never by the failed object's length, since
 * a torn record's announced length runs into the record after it. Without a checksum, a torn record completed by
 * the bytes of the next one can look valid: swallows_next catches it. */
/* Notes a skipped stretch at buf offset p (file offset log->offset + p): a new part (already counted in
 * skipped_parts), or more of the current one, which is the last note only while every part has one. */
static void note_skip(kg_tlog *log, size_t p, size_t n, int v, int fresh) {
  if (!fresh) {
    if (log->nnotes == log->skipped_parts) log->notes[log->nnotes - 1].len += n;
    return;
  }
  if (log->nnotes < KG_TLOG_MAX_NOTES) log->notes[log->nnotes++] = (kg_tlog_skip){log->offset + p, n, v};
}

void kg_tlog_decode(kg_tlog *log, const char *buf, size_t len) {
  const unsigned char *b = (const unsigned char *)buf;
  size_t p = 0;
  int clean = 1;
  while (p < len) {
    kg_tlog_record r;
    const char *why = NULL;
    size_t n = clean || record_start_at(b, len, p) ? decode_record(buf + p, len - p, NULL, &r, &why) : 0;
    if (!n && why == v_newer) {
      /* a whole record of a newer version: skipped as one part, said so, unless it is a torn head */
      size_t span = object_span(b + p, len - p);
      if (span && !swallows_next(buf, len, p, span)) {
        log->skipped_parts++;
        log->skipped_newer++;
        log->skipped_bytes += span;
        note_skip(log, p, span, r.v, 1);
        p += span;
        clean = 1;
        continue;
      }
    }
    if (n && !swallows_next(buf, len, p, n)) {
      decode_record(buf + p, len - p, &log->arena, &r, &why);
      if (log->n == log->cap) {
        log->cap = log->cap ? 2 * log->cap : 64;
        log->recs = kg_xrealloc(log->recs, sizeof *log->recs * (size_t)log->cap);
      }
      log->recs[log->n++] = r;
      p += n;
      clean = 1;
      continue;
    }
    if (clean) log->skipped_parts++;
    note_skip(log, p, 1, 0, clean);
    clean = 0;
    log->skipped_bytes++;
    p++;
  }
  log->offset += len;
}
