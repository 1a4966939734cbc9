/* NumPy .npy files for `--save` / `--load`: little-endian, C order.
 *
 * Types: f32 tensors are '<f4' and f16 ones '<f2'. bf16 has no NumPy type: its tensors are saved as '<f4' holding
 * their exact values. Loading takes '<f4' or '<f2' for a tensor of any type and rounds each value to the tensor's
 * type (to nearest even), so an f32 array can feed an f16 or bf16 input.
 *
 * Writes format 1.0 with the header padded (spaces, then '\n') so the data starts at a multiple of 64 bytes, as
 * numpy does. Reads 1.0 and 2.0; every field of the header is checked against what the caller expects, and a
 * truncated or corrupt file is an error message, never a crash. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "verify.h"
#include "../base/file.h"
#include "../base/half.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER (1 << 20) /* real headers are ~128 bytes; anything huge is corrupt */

static void npy_err(char *err, size_t errlen, const char *fmt, const char *path, const char *detail) {
  if (err && errlen) snprintf(err, errlen, fmt, path, detail);
}

/* Element count, or -1 when a dimension is negative or the product overflows what can be allocated. */
static int64_t npy_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0) return -1;
    if (shape[d] && n > (INT64_MAX / 8) / shape[d]) return -1;
    n *= shape[d];
  }
  return n;
}

static void put_le32(unsigned char *b, uint32_t v) {
  for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

int kg_npy_save(const char *path, const void *data, kg_dtype type, int ndim, const int64_t *shape, char *err,
                size_t errlen) {
  if (ndim < 0 || ndim > 32 || npy_numel(ndim, shape) < 0) {
    npy_err(err, errlen, "%s: %s", path, "invalid shape");
    return -1;
  }
  char dict[1024];
  int esz = type == KG_DT_F16 ? 2 : 4; /* bf16 goes out as f32 */
  int w = snprintf(dict, sizeof dict, "{'descr': '<f%d', 'fortran_order': False, 'shape': (", esz);
  for (int d = 0; d < ndim; d++) w += snprintf(dict + w, sizeof dict - (size_t)w, "%lld, ", (long long)shape[d]);
  if (ndim == 1) w -= 1;       /* "(5,)" */
  else if (ndim > 1) w -= 2;   /* "(3, 4)" */
  w += snprintf(dict + w, sizeof dict - (size_t)w, "), }");
  /* pad with spaces so that magic(6) + version(2) + len(2) + header ends on a 64-byte boundary, '\n' last */
  size_t total = (size_t)(NPY_MAGIC_LEN + 4 + w + 1);
  size_t padded = (total + 63) / 64 * 64;
  size_t hlen = padded - (NPY_MAGIC_LEN + 4);
  unsigned char pre[NPY_MAGIC_LEN + 4];
  memcpy(pre, NPY_MAGIC, NPY_MAGIC_LEN);
  pre[6] = 1;
  pre[7] = 0;
  pre[8] = (unsigned char)(hlen & 0xff);
  pre[9] = (unsigned char)(hlen >> 8);
  char *hdr = malloc(hlen);
  if (!hdr) {
    npy_err(err, errlen, "%s: %s", path, "out of memory");
    return -1;
  }
  memcpy(hdr, dict, (size_t)w);
  memset(hdr + w, ' ', hlen - (size_t)w);
  hdr[hlen - 1] = '\n';

  /* a FIFO or a device where the file should go is refused instead of blocking or writing into it */
  char whyf[512];
  int fd = kg_file_open_append(path, O_CREAT | O_TRUNC, whyf, sizeof whyf);
  FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (!f) {
    if (fd >= 0) {
      snprintf(whyf, sizeof whyf, "%s: %s", path, strerror(errno));
      close(fd);
    }
    free(hdr);
    npy_err(err, errlen, "%s%s", whyf, "");
    return -1;
  }
  int ok = fwrite(pre, 1, sizeof pre, f) == sizeof pre && fwrite(hdr, 1, hlen, f) == hlen;
  free(hdr);
  int64_t n = npy_numel(ndim, shape);
  unsigned char chunk[4096];
  for (int64_t k = 0; ok && k < n;) {
    size_t m = 0;
    for (; m < sizeof chunk / (size_t)esz && k < n; m++, k++) {
      if (esz == 2) {
        uint16_t h = ((const uint16_t *)data)[k];
        chunk[2 * m] = (unsigned char)h;
        chunk[2 * m + 1] = (unsigned char)(h >> 8);
      } else {
        put_le32(chunk + 4 * m, kg_half_fbits(kg_data_get(type, data, (int64_t)k)));
      }
    }
    ok = fwrite(chunk, (size_t)esz, m, f) == m;
  }
  if (fclose(f) != 0) ok = 0;
  if (!ok) {
    npy_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
    return -1;
  }
  return 0;
}

/* A tiny reader for the Python dict literal numpy writes: {'key': value, ...} with string, True/False and tuple
 * of integers values. */
typedef struct npy_hdr {
  char descr[32];
  int fortran; /* -1 until seen */
  int ndim;    /* -1 until seen */
  int64_t shape[32];
} npy_hdr;

static const char *skip_ws(const char *s, const char *end) {
  while (s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++;
  return s;
}

/* Parses a quoted string into out (cut to outlen-1); returns the position after it or NULL. */
static const char *parse_str(const char *s, const char *end, char *out, size_t outlen) {
  if (s >= end || (*s != '\'' && *s != '"')) return NULL;
  char q = *s++;
  size_t n = 0;
  while (s < end && *s != q) {
    if (n + 1 < outlen) out[n++] = *s;
    s++;
  }
  if (s >= end) return NULL;
  out[n] = 0;
  return s + 1;
}

static const char *parse_tuple(const char *s, const char *end, npy_hdr *h) {
  if (s >= end || *s != '(') return NULL;
  s = skip_ws(s + 1, end);
  h->ndim = 0;
  while (s < end && *s != ')') {
    if (*s < '0' || *s > '9') return NULL;
    int64_t v = 0;
    while (s < end && *s >= '0' && *s <= '9') {
      if (v > (INT64_MAX - 9) / 10) return NULL;
      v = v * 10 + (*s++ - '0');
    }
    if (s < end && *s == 'L') s++; /* python 2 longs */
    if (h->ndim >= 32) return NULL;
    h->shape[h->ndim++] = v;
    s = skip_ws(s, end);
    if (s < end && *s == ',') s = skip_ws(s + 1, end);
    else if (s < end && *s != ')') return NULL;
  }
  return s < end ? s + 1 : NULL;
}

static const char *parse_header(const char *s, const char *end, npy_hdr *h) {
  h->descr[0] = 0;
  h->fortran = -1;
  h->ndim = -1;
  s = skip_ws(s, end);
  if (s >= end || *s != '{') return "header is not a dict";
  s = skip_ws(s + 1, end);
  while (s < end && *s != '}') {
    char key[32];
    s = parse_str(s, end, key, sizeof key);
    if (!s) return "bad key in header";
    s = skip_ws(s, end);
    if (s >= end || *s != ':') return "missing ':' in header";
    s = skip_ws(s + 1, end);
    if (!strcmp(key, "descr")) {
      s = parse_str(s, end, h->descr, sizeof h->descr);
      if (!s) return "bad 'descr' (a structured dtype is not supported)";
    } else if (!strcmp(key, "fortran_order")) {
      if (end - s >= 4 && !memcmp(s, "True", 4)) h->fortran = 1, s += 4;
      else if (end - s >= 5 && !memcmp(s, "False", 5)) h->fortran = 0, s += 5;
      else return "bad 'fortran_order'";
    } else if (!strcmp(key, "shape")) {
      s = parse_tuple(s, end, h);
      if (!s) return "bad 'shape'";
    } else {
      return "unknown key in header";
    }
    s = skip_ws(s, end);
    if (s < end && *s == ',') s = skip_ws(s + 1, end);
    else if (s < end && *s != '}') return "missing ',' in header";
  }
  if (s >= end) return "unterminated header dict";
  if (!h->descr[0] || h->fortran < 0 || h->ndim < 0) return "header lacks descr, fortran_order or shape";
  return NULL;
}

static void format_shape(char *buf, size_t len, int ndim, const int64_t *shape) {
  int w = snprintf(buf, len, "(");
  for (int d = 0; d < ndim && w > 0 && (size_t)w < len; d++)
    w += snprintf(buf + w, len - (size_t)w, ndim == 1 ? "%lld," : d ? ", %lld" : "%lld", (long long)shape[d]);
  if (w > 0 && (size_t)w < len) snprintf(buf + w, len - (size_t)w, ")");
}

static void *npy_fail(FILE *f, char *hdr, void *data) {
  if (f) fclose(f);
  free(hdr);
  free(data);
  return NULL;
}

void *kg_npy_load(const char *path, kg_dtype type, int ndim, const int64_t *shape, char *err, size_t errlen) {
  int64_t n = npy_numel(ndim, shape);
  if (ndim < 0 || ndim > 32 || n < 0) {
    npy_err(err, errlen, "%s: %s", path, "invalid expected shape");
    return NULL;
  }
  /* a regular file no larger than the preamble, the largest header and the expected data: a FIFO, a device or an
   * oversized file is refused before anything is read (base/file.h) */
  uint64_t limit = 12 + NPY_MAX_HEADER + 4 * (uint64_t)n;
  char whyf[512];
  int fd = kg_file_open_read(path, limit > SIZE_MAX ? SIZE_MAX : (size_t)limit, whyf, sizeof whyf);
  if (fd < 0) {
    npy_err(err, errlen, "%s%s", whyf, "");
    return NULL;
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    npy_err(err, errlen, "%s: %s", path, strerror(errno));
    close(fd);
    return NULL;
  }
  unsigned char pre[12];
  if (fread(pre, 1, 10, f) != 10 || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
    npy_err(err, errlen, "%s: %s", path, "not a .npy file (bad magic)");
    return npy_fail(f, NULL, NULL);
  }
  uint32_t hlen;
  if (pre[6] == 1 && pre[7] == 0) {
    hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
  } else if (pre[6] == 2 && pre[7] == 0) {
    if (fread(pre + 10, 1, 2, f) != 2) {
      npy_err(err, errlen, "%s: %s", path, "truncated header");
      return npy_fail(f, NULL, NULL);
    }
    hlen = get_le32(pre + 8);
  } else {
    char v[64];
    snprintf(v, sizeof v, "unsupported .npy version %u.%u (expected 1.0 or 2.0)", pre[6], pre[7]);
    npy_err(err, errlen, "%s: %s", path, v);
    return npy_fail(f, NULL, NULL);
  }
  if (hlen > NPY_MAX_HEADER) {
    npy_err(err, errlen, "%s: %s", path, "header too large (corrupt file)");
    return npy_fail(f, NULL, NULL);
  }
  char *hdr = malloc(hlen + 1);
  if (!hdr || fread(hdr, 1, hlen, f) != hlen) {
    npy_err(err, errlen, "%s: %s", path, "truncated header");
    return npy_fail(f, hdr, NULL);
  }
  hdr[hlen] = 0;
  npy_hdr h;
  const char *why = parse_header(hdr, hdr + hlen, &h);
  if (why) {
    npy_err(err, errlen, "%s: %s", path, why);
    return npy_fail(f, hdr, NULL);
  }
  char msg[400];
  int fsz = !strcmp(h.descr, "<f4") ? 4 : !strcmp(h.descr, "<f2") ? 2 : 0;
  if (!fsz) {
    snprintf(msg, sizeof msg,
             "dtype '%.32s' is not supported (expected '<f4' or '<f2', float32 or float16 little-endian)", h.descr);
    npy_err(err, errlen, "%s: %s", path, msg);
    return npy_fail(f, hdr, NULL);
  }
  if (h.fortran) {
    npy_err(err, errlen, "%s: %s", path, "fortran_order True is not supported (expected C order)");
    return npy_fail(f, hdr, NULL);
  }
  int same = h.ndim == ndim;
  for (int d = 0; same && d < ndim; d++) same = h.shape[d] == shape[d];
  if (!same) {
    char got[160], want[160];
    format_shape(got, sizeof got, h.ndim, h.shape);
    format_shape(want, sizeof want, ndim, shape);
    snprintf(msg, sizeof msg, "shape %s does not match the expected %s", got, want);
    npy_err(err, errlen, "%s: %s", path, msg);
    return npy_fail(f, hdr, NULL);
  }
  void *data = malloc((size_t)(n ? n : 1) * (size_t)kg_dtype_size[type]);
  if (!data) {
    npy_err(err, errlen, "%s: %s", path, "out of memory");
    return npy_fail(f, hdr, NULL);
  }
  unsigned char chunk[4096];
  for (int64_t k = 0; k < n;) {
    size_t room = sizeof chunk / (size_t)fsz;
    size_t want = (size_t)(n - k) < room ? (size_t)(n - k) : room;
    if (fread(chunk, (size_t)fsz, want, f) != want) {
      npy_err(err, errlen, "%s: %s", path, "truncated data (file shorter than its shape says)");
      return npy_fail(f, hdr, data);
    }
    for (size_t m = 0; m < want; m++, k++) {
      if (fsz == 2 && type == KG_DT_F16) { /* the bits as they are (NaN payloads included) */
        ((uint16_t *)data)[k] = (uint16_t)(chunk[2 * m] | chunk[2 * m + 1] << 8);
      } else if (fsz == 4 && type == KG_DT_F32) {
        uint32_t bits = get_le32(chunk + 4 * m);
        memcpy((float *)data + k, &bits, 4);
      } else {
        float v = fsz == 2 ? kg_f16_to_f32((uint16_t)(chunk[2 * m] | chunk[2 * m + 1] << 8))
                           : kg_half_bitsf(get_le32(chunk + 4 * m));
        kg_data_set(type, data, k, v);
      }
    }
  }
  if (fgetc(f) != EOF) {
    npy_err(err, errlen, "%s: %s", path, "trailing bytes after the data (file longer than its shape says)");
    return npy_fail(f, hdr, data);
  }
  fclose(f);
  free(hdr);
  return data;
}
