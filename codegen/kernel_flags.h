/* The compiler flags generated kernels are built with, in one place: kgen's C runner (runtime/cpu.c) and CUDA
 * emulator (runtime/emu.c) use them, exported headers recommend them (codegen/header.c, header_cuda.c), and the
 * Makefile reads them from this file (its KERNEL_CFLAGS, used for the examples and installed in the CMake and
 * Makefile helpers), so a change here reaches every one. Each stays a one-line string literal: the Makefile reads it with sed, and
 * tests/cli/test_make.sh checks that it did.
 *
 * -O3 -march=native: the kernels are tuned for the machine they are measured on. -fno-math-errno: kernels never
 * read errno, and a sqrt that may set it (layernorm's rsqrt) is a call that neither vectorizes nor leaves its
 * loop; gcc 12 ignores it in `#pragma GCC optimize`, so it must be a flag. -fopenmp: the parallel loops. */
#ifndef KG_KERNEL_FLAGS_H
#define KG_KERNEL_FLAGS_H
#define KG_KERNEL_CFLAGS "-std=c11 -O3 -march=native -fno-math-errno -fopenmp"
/* The emulator's C++ flags (g++ compiles generated CUDA with runtime/cuda_emu.h force-included). -O1: the kernels
 * run at small sizes in tests, where the compile dominates. -fno-strict-aliasing: CUDA code reads float arrays
 * through float4 pointers. -Wno-unknown-pragmas: #pragma unroll is CUDA's, unknown to g++. */
#define KG_EMU_CXXFLAGS "-std=c++17 -O1 -fno-strict-aliasing -Wno-unknown-pragmas -DKG_EMULATE"
#endif
