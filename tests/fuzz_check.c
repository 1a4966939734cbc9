/* Fuzz target for the parser and checker (libFuzzer entry point; tests/fuzz_replay_main.c replays a corpus
 * with it in `make test`). Each input is loaded as a program; while the checker asks for a size variable
 * (not bound, or an unknown name that a -D would make a size), it is bound to a small value and the load is
 * retried, so that inputs get past binding into shape inference, bounds and stages. Nothing may crash, leak
 * or trip a sanitizer, whatever the bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../te/te.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The name between the first pair of quotes of msg, when msg starts with prefix. */
static int quoted_name(const char *msg, const char *prefix, char *out, size_t cap) {
  if (!msg || strncmp(msg, prefix, strlen(prefix)) != 0) return 0;
  const char *a = strchr(msg, '\'');
  const char *b = a ? strchr(a + 1, '\'') : NULL;
  if (!b || (size_t)(b - a - 1) >= cap || b == a + 1) return 0;
  memcpy(out, a + 1, (size_t)(b - a - 1));
  out[b - a - 1] = 0;
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  enum { MAX_BIND = 12 };
  static char names[MAX_BIND][64];
  kg_binding bind[MAX_BIND];
  int nb = 0;
  for (int attempt = 0; attempt <= MAX_BIND; attempt++) {
    kg_arena da;
    kg_arena_init(&da);
    kg_diag d;
    memset(&d, 0, sizeof d);
    kg_program *p = kg_program_load("fuzz.te", (const char *)data, size, NULL, bind, nb, &d, &da);
    int retry = 0;
    if (p) {
      char *c = kg_program_canonical(p);
      free(c);
      kg_program_free(p);
    } else if (nb < MAX_BIND && (quoted_name(d.text, "size variable '", names[nb], sizeof names[nb]) ||
                                 quoted_name(d.text, "unknown name '", names[nb], sizeof names[nb]))) {
      bind[nb].name = names[nb];
      bind[nb].value = 1 + (nb * 3) % 5; /* small, and not all equal, so that extents can disagree */
      nb++;
      retry = 1;
    }
    kg_arena_free(&da);
    if (!retry) break;
  }
  return 0;
}
