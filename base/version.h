/* kgen's version: written into every log record and exported header, printed by `kgen --version`. */
#ifndef KGEN_VERSION
#define KGEN_VERSION "0.1.0"
#endif
