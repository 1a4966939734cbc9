/* A precompiled header of the system headers the generated C includes (codegen/c.c's prelude: math.h, stdint.h,
 * stdlib.h, string.h and, on x86, immintrin.h), for gcc. Parsing immintrin.h with every AVX-512 header the
 * machine's -march enables was half of a small kernel's build (0.14 of 0.29 s for a depthwise convolution), and a
 * tuning builds a kernel for every candidate.
 *
 * A process makes one per kernel command line (the compiler and $KGEN_CFLAGS), at its third kernel build with that
 * line, so that a command that builds once or twice (kgen run: the toolchain's probe and the kernel) does not pay
 * for it; in a build folder of its own ($TMPDIR/kgen-<pid>-*: removed at exit, and by kg_compiler_clean_stale when
 * the process died). Kernels then compile with -include of that header, and gcc takes the precompiled form when it
 * is valid for the command line, the header's text otherwise: a PCH never changes what a kernel computes. Only
 * where the compiler made a gcc PCH (clang's are another format, found another way); never with $KGEN_NO_PCH set
 * to anything but 0. Safe to call from several threads (the measurement harness builds in parallel): a thread
 * that finds the PCH being made builds without it rather than wait. */
#ifndef KG_PCH_H
#define KG_PCH_H

/* The header to pass as `-include PATH` to the kernel compile whose command line, without the source, output and
 * link arguments, is argv[0..argc) (heap; NULL: build without one). Counts the build. */
char *kg_pch_for(char *const *argv, int argc);
/* Marks the PCH of this command line as unusable: a kernel failed to build with it and built without it. */
void kg_pch_failed(char *const *argv, int argc);
/* Removes every PCH this process made and forgets them (later builds count afresh): what happens at exit, for a
 * caller that wants no folder of kgen's left while it runs (tests that count them). */
void kg_pch_release(void);
#endif
