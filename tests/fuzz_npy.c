/* Fuzz target for the .npy reader (libFuzzer entry point; tests/fuzz_replay_main.c replays tests/fuzz/npy-corpus
 * in `make test`). Each input is the content of a .npy file, put in a memfd (a regular file, as the reader
 * requires) and loaded through its /proc/self/fd path with a few expected shapes: the ones the corpus uses, a
 * scalar and an empty tensor. A load either returns the data or an error naming the file; nothing may crash, leak,
 * read past what the shape allows or trip a sanitizer, whatever the bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../runtime/verify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 20)) return 0; /* the reader refuses more than header + data for these shapes anyway */
  int fd = memfd_create("fuzz-npy", MFD_CLOEXEC);
  if (fd < 0) return 0;
  for (size_t done = 0; done < size;) {
    ssize_t k = write(fd, data + done, size - done);
    if (k <= 0) {
      close(fd);
      return 0;
    }
    done += (size_t)k;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  static const int64_t shapes[][3] = {{2, 3, 0}, {4, 0, 0}, {0, 0, 0}, {0, 5, 0}, {1, 1, 1}};
  static const int ndims[] = {2, 1, 0, 2, 3};
  for (size_t i = 0; i < sizeof ndims / sizeof *ndims; i++) {
    char err[512] = "";
    float *x = kg_npy_load(path, KG_DT_F32, ndims[i], shapes[i], err, sizeof err);
    if (!x && !strstr(err, path)) {
      fprintf(stderr, "fuzz_npy: an error that does not name the file: %s\n", err);
      abort();
    }
    if (x) {
      /* every element is readable (ASan checks the allocation covers the shape) */
      int64_t n = 1;
      for (int d = 0; d < ndims[i]; d++) n *= shapes[i][d];
      volatile float sink = 0;
      for (int64_t k = 0; k < n; k++) sink += x[k];
      (void)sink;
    }
    free(x);
  }
  close(fd);
  return 0;
}
