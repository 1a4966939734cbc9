/* What the C target's vector unit holds: the f32 lanes of one vector register and how many registers there are,
 * per instruction-set level. The CPU sketches size register tiles by it: a tile of accumulators that does not fit
 * the register file spills on every step of its reduction, and a register tile of 16-lane columns on a machine of
 * 8-lane registers is twice the tile it looks like. Logs record the level's name as the C target's arch.
 *
 * Pure data, like gpu_arch.h: the runtime finds the level the kernels are compiled for (runtime/cpu.c asks the
 * kernel compiler), the rules only read it. */
#ifndef KG_CPU_ARCH_H
#define KG_CPU_ARCH_H

typedef struct kg_cpu_arch {
  const char *name; /* "x86-64-v4" (AVX-512), "x86-64-v3" (AVX2 and FMA), "x86-64-avx", "x86-64-v2", "x86-64",
                       "aarch64", "generic" */
  int lanes;        /* f32 lanes of one vector register */
  int vregs;        /* architectural vector registers */
} kg_cpu_arch;

/* The level of that name, NULL when unknown. */
const kg_cpu_arch *kg_cpu_arch_find(const char *name);
/* What a space assumes when told nothing (x86-64-v4): fixed, so that a space built without a measurer (tests,
 * bench/sketch_sample) is the same on every machine. */
const kg_cpu_arch *kg_cpu_arch_default(void);
/* The level code compiled with these predefined macros may use (macros: the output of `cc -dM -E`, one
 * "#define NAME VALUE" per line), "generic" when it names no vector extension kgen knows. */
const kg_cpu_arch *kg_cpu_arch_from_macros(const char *macros);
/* The accumulator vectors a register tile may keep: three quarters of the registers, the rest for the operands
 * (a broadcast row value, the column vectors of the other operand) and addresses' spills. */
int kg_cpu_arch_max_acc(const kg_cpu_arch *a);
#endif
