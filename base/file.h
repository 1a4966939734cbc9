/* Reading and creating the files kgen is given (programs, schedules, logs, .npy, cost models) with a size limit
 * and a check of what the path is: a directory, FIFO, device or socket given as an input is an error naming the
 * path at once, never a read that blocks or grows without bound (/dev/zero, /dev/urandom, a FIFO nobody writes). */
#ifndef KG_FILE_H
#define KG_FILE_H
#include <stddef.h>
#include <stdint.h>

/* The documented limits (docs/targets.md, "Limits on inputs"). Programs and schedules are text a person writes: tens of
 * KiB; a cost model is a few MiB of JSON; a tuning log grows by about 1 KiB per measured candidate. */
#define KG_FILE_MAX_TEXT ((size_t)16 << 20)  /* a program (.te) or a schedule (trace text) */
#define KG_FILE_MAX_LOG ((size_t)1 << 30)    /* a tuning log (read whole) */
#define KG_FILE_MAX_MODEL ((size_t)256 << 20) /* a cost model saved beside a log */

/* Opens path for reading without blocking (O_NONBLOCK, so a FIFO does not wait for a writer), then refuses
 * what fstat says is not a regular file or is larger than limit. Returns the descriptor, or -1 with errno set
 * (ENOENT and the like from open; EINVAL for a non-regular file, EFBIG for an oversized one) and err set to
 * "PATH: reason". */
int kg_file_open_read(const char *path, size_t limit, char *err, size_t errlen);
/* Reads the rest of fd (opened by kg_file_open_read) into a NUL-terminated malloc'ed buffer, refusing more than
 * limit bytes (a file that grows while being read). NULL with err set on failure; fd stays open either way. */
char *kg_file_read_fd(int fd, const char *path, size_t limit, size_t *len, char *err, size_t errlen);
/* Both: the whole file, NUL-terminated (callers that take a length may still see NUL bytes inside). */
char *kg_file_read(const char *path, size_t limit, size_t *len, char *err, size_t errlen);
/* Opens path for appending (flags: extra open flags, e.g. O_CREAT), refusing an existing path that is not a
 * regular file (a directory, /dev/full, a FIFO) before anything is written. Returns fd, or -1 with err set. */
int kg_file_open_append(const char *path, int flags, char *err, size_t errlen);
/* "a directory", "a FIFO", ... for an st_mode that is not a regular file. */
const char *kg_file_kind(unsigned mode);
/* The limit in words, e.g. "16 MiB" (buf of 32 bytes is enough). */
const char *kg_file_format_size(char *buf, size_t len, uint64_t bytes);
#endif
