/* splitmix64: a tiny seedable generator giving the same stream on every platform, so a seed reproduces test
 * data and random schedules everywhere. */
#ifndef KG_RNG_H
#define KG_RNG_H
#include <stdint.h>

static inline uint64_t kg_rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
#endif
