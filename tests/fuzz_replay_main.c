/* Replays every file of a corpus directory through the fuzz target: `fuzz_replay DIR`. A crash or a sanitizer
 * report fails the run; otherwise prints "N inputs replayed". */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  DIR *dir = opendir(argv[1]);
  if (!dir) {
    perror(argv[1]);
    return 1;
  }
  int n = 0;
  struct dirent *ent;
  while ((ent = readdir(dir))) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", argv[1], ent->d_name);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    FILE *f = fopen(path, "rb");
    if (!f) {
      perror(path);
      closedir(dir);
      return 1;
    }
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    size_t len = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!buf) {
      closedir(dir);
      return 1;
    }
    LLVMFuzzerTestOneInput(buf, len);
    free(buf);
    n++;
  }
  closedir(dir);
  printf("%d inputs replayed\n", n);
  return 0;
}
