/* The CUDA emulation header: force-included (g++ -std=c++17 -DKG_EMULATE -include cuda_emu.h) in front of the CUDA C
 * that kg_codegen_cuda prints, so the host compiler turns it into a shared object that the CUDA emulator
 * (runtime/emu.c) loads and launches block by block on the CPU.
 *
 * It defines the CUDA dialect the printer uses (qualifiers, blockIdx/threadIdx/blockDim/gridDim, __shared__,
 * KG_DYNAMIC_SHARED, __syncthreads, warp shuffles, float2/float4, ushort2/ushort4, device math) and the launcher,
 * `kg_emu_launch`, which emu.c finds with dlsym. The launcher lives here, in the compiled module, so that the
 * stack switching happens in code built without sanitizers even when libkgen is built with them.
 *
 * Model: the threads of a block are ucontext fibers run one after the other, each until it blocks (at a barrier,
 * a warp operation, or its end); so a missing __syncthreads shows up as a wrong answer, and shared memory (static
 * and dynamic) is filled with NaN before every block so that a read of data no thread wrote shows up too. A
 * __syncthreads releases when every live thread of the block waits at it; a warp operation (shuffle, __syncwarp)
 * releases when every lane of its mask that exists in the block waits at it. Anything else (threads at barriers on
 * different lines, a thread that exits while others wait, a lane missing from a shuffle) stops the launch with an
 * error naming the source line, as does copying a float2/float4 from or to a misaligned address. A shuffle reading
 * a lane outside its mask or past the end of the block gets NaN: CUDA leaves that value undefined. What the
 * emulator cannot turn into an error crashes the process like a GPU fault would (out-of-bounds accesses, a fiber
 * overflowing its stack into the guard page, KG_DYNAMIC_SHARED used by a launch that asked for none: NULL).
 *
 * Requires: Linux (ucontext, mmap), g++ or clang++ (section attributes and __start_/__stop_ symbols). The
 * scheduler's state is global to the module: one OS thread at a time may launch kernels of a given module.
 * Only C headers that are cheap to parse are included (g++'s <math.h> costs ~0.1 s a compile, which matters when
 * tests compile hundreds of candidates), so the math functions are declared here. */
#ifndef KG_CUDA_EMU_H
#define KG_CUDA_EMU_H
#ifndef __cplusplus
#error "cuda_emu.h is compiled as C++ (g++ -std=c++17 -include cuda_emu.h)"
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

/* ---- the CUDA dialect ---- */
#define __global__
/* static: a __shared__ array in a helper would otherwise be a static of an inline function with external linkage,
 * which g++ puts in a COMDAT group, whose section conflicts with the other shared arrays'. */
#define __device__ static
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
/* Static shared arrays become statics in one section, which the launcher poisons before every block (blocks run
 * one after the other, so one copy serves every block). `used` keeps the compiler from treating a never-written
 * array as constant zero, which would hide the poison. */
#define __shared__ static __attribute__((section("kg_emu_shared"), used))
#define KG_DYNAMIC_SHARED(name) float *const name = kg_emu_dyn_smem
#define warpSize 32

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };
/* float2/float4 as on the GPU (8- and 16-byte aligned), plus a check the GPU makes in hardware: copying one from
 * or to a misaligned address (`*(float4 *)(p + i)` with i not a multiple of 4) stops the launch, where x86 would
 * quietly do the unaligned access. Member reads through a pointer (`((float4 *)p)->y`) are not checked. */
static void kg_emu_check_align(const void *p, unsigned align, const char *what, int line);
struct __attribute__((aligned(8))) float2 {
  float x, y;
  float2() = default;
  float2(float x_, float y_) : x(x_), y(y_) {}
  float2(const float2 &o, int line = __builtin_LINE()) {
    kg_emu_check_align(&o, 8, "a float2 load (copy)", line);
    x = o.x, y = o.y;
  }
  float2 &operator=(const float2 &o) {
    kg_emu_check_align(this, 8, "a float2 store (assignment)", 0);
    kg_emu_check_align(&o, 8, "a float2 load (assignment)", 0);
    x = o.x, y = o.y;
    return *this;
  }
};
struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
  float4() = default;
  float4(float x_, float y_, float z_, float w_) : x(x_), y(y_), z(z_), w(w_) {}
  float4(const float4 &o, int line = __builtin_LINE()) {
    kg_emu_check_align(&o, 16, "a float4 load (copy)", line);
    x = o.x, y = o.y, z = o.z, w = o.w;
  }
  float4 &operator=(const float4 &o) {
    kg_emu_check_align(this, 16, "a float4 store (assignment)", 0);
    kg_emu_check_align(&o, 16, "a float4 load (assignment)", 0);
    x = o.x, y = o.y, z = o.z, w = o.w;
    return *this;
  }
};
/* ushort2/ushort4: pairs and quads of f16/bf16 elements (their bits), 4- and 8-byte aligned, checked alike. */
struct __attribute__((aligned(4))) ushort2 {
  unsigned short x, y;
  ushort2() = default;
  ushort2(const ushort2 &o, int line = __builtin_LINE()) {
    kg_emu_check_align(&o, 4, "a ushort2 load (copy)", line);
    x = o.x, y = o.y;
  }
  ushort2 &operator=(const ushort2 &o) {
    kg_emu_check_align(this, 4, "a ushort2 store (assignment)", 0);
    kg_emu_check_align(&o, 4, "a ushort2 load (assignment)", 0);
    x = o.x, y = o.y;
    return *this;
  }
};
struct __attribute__((aligned(8))) ushort4 {
  unsigned short x, y, z, w;
  ushort4() = default;
  ushort4(const ushort4 &o, int line = __builtin_LINE()) {
    kg_emu_check_align(&o, 8, "a ushort4 load (copy)", line);
    x = o.x, y = o.y, z = o.z, w = o.w;
  }
  ushort4 &operator=(const ushort4 &o) {
    kg_emu_check_align(this, 8, "a ushort4 store (assignment)", 0);
    kg_emu_check_align(&o, 8, "a ushort4 load (assignment)", 0);
    x = o.x, y = o.y, z = o.z, w = o.w;
    return *this;
  }
};
static inline float2 make_float2(float x, float y) { return float2(x, y); }
static inline float4 make_float4(float x, float y, float z, float w) { return float4(x, y, z, w); }

extern "C" {
float expf(float) noexcept;
float exp2f(float) noexcept;
float expm1f(float) noexcept;
float logf(float) noexcept;
float log2f(float) noexcept;
float log10f(float) noexcept;
float log1pf(float) noexcept;
float sqrtf(float) noexcept;
float cbrtf(float) noexcept;
float tanhf(float) noexcept;
float sinhf(float) noexcept;
float coshf(float) noexcept;
float sinf(float) noexcept;
float cosf(float) noexcept;
float tanf(float) noexcept;
float asinf(float) noexcept;
float acosf(float) noexcept;
float atanf(float) noexcept;
float atan2f(float, float) noexcept;
float erff(float) noexcept;
float erfcf(float) noexcept;
float fabsf(float) noexcept;
float powf(float, float) noexcept;
float fmaxf(float, float) noexcept;
float fminf(float, float) noexcept;
float fmodf(float, float) noexcept;
float fmaf(float, float, float) noexcept;
float floorf(float) noexcept;
float ceilf(float) noexcept;
float roundf(float) noexcept;
float truncf(float) noexcept;
float rintf(float) noexcept;
double exp(double) noexcept;
double log(double) noexcept;
double sqrt(double) noexcept;
double tanh(double) noexcept;
double fabs(double) noexcept;
double pow(double, double) noexcept;
double fmax(double, double) noexcept;
double fmin(double, double) noexcept;
double floor(double) noexcept;
double ceil(double) noexcept;
}
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __expf(float x) { return expf(x); }
static inline float __exp10f(float x) { return powf(10.0f, x); }
static inline float __logf(float x) { return logf(x); }
static inline float __log2f(float x) { return log2f(x); }
static inline float __powf(float x, float y) { return powf(x, y); }
static inline float __sinf(float x) { return sinf(x); }
static inline float __cosf(float x) { return cosf(x); }
static inline float __tanf(float x) { return tanf(x); }
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x == x ? x : 0.0f; }
static inline float __int_as_float(int i) { float f; __builtin_memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; __builtin_memcpy(&i, &f, 4); return i; }
static inline float __uint_as_float(unsigned u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; __builtin_memcpy(&u, &f, 4); return u; }

/* ---- the fiber scheduler ---- */
enum { KG_EMU_RUNNABLE, KG_EMU_AT_SYNC, KG_EMU_AT_WARP, KG_EMU_EXITED, KG_EMU_FAILED };
enum { KG_EMU_SHFL_IDX, KG_EMU_SHFL_UP, KG_EMU_SHFL_DOWN, KG_EMU_SHFL_XOR, KG_EMU_SYNCWARP };
#define KG_EMU_MAX_THREADS 1024
/* Per fiber: the printer allows per-thread register arrays of up to 64 KB each. Only touched pages cost memory;
 * under ASan every switch clears the shadow of the stack it enters, so bigger is slower there. Overridable with
 * KGEN_EMU_CXXFLAGS=-DKG_EMU_STACK_BYTES=... */
#ifndef KG_EMU_STACK_BYTES
#define KG_EMU_STACK_BYTES (256 * 1024)
#endif
#define KG_EMU_POISON 0x7fc0deadu /* a quiet NaN */

struct kg_emu_fiber {
  ucontext_t ctx;
  uint3 tid;
  int lane, warp, state, line;
  unsigned mask;     /* the warp operation's member mask */
  int src;           /* the lane a shuffle reads, or -1 for its own value */
  uint64_t val, res; /* a shuffle's value and result, as bits */
  const void *peer;  /* kg_emu_warp_publish: the address of this lane's registers, for its warp to read */
  /* asynchronous copies (cp.async) not yet landed, oldest first: each lands only at a wait that covers its group,
   * so a kernel that reads its shared memory before waiting reads what was there before (a wrong answer) */
  struct kg_emu_copy {
    void *dst;
    const void *src;
    unsigned bytes, group;
  } *copies;
  int ncopies, capcopies;
  unsigned group; /* the open group's number: groups committed so far */
};

static struct {
  kg_emu_fiber *fibers; /* KG_EMU_MAX_THREADS, allocated on first launch */
  char *stacks[KG_EMU_MAX_THREADS];
  size_t page;
  int nthreads;
  ucontext_t sched;
  void (*entry)(float **);
  float **args;
  unsigned exists[KG_EMU_MAX_THREADS / 32]; /* lanes of each warp present in the block */
  char *err;
  size_t errlen;
  int failed;
} kg_emu_s;
static kg_emu_fiber *kg_emu_cur;
static uint3 blockIdx;
static dim3 blockDim, gridDim;
static float *kg_emu_dyn_smem;
#define threadIdx (kg_emu_cur->tid)

/* The section of the static shared arrays always exists (this anchor), so its bounds always link. */
static float kg_emu_shared_anchor[4] __attribute__((section("kg_emu_shared"), used, aligned(16)));
extern "C" char __start_kg_emu_shared[] __attribute__((visibility("hidden")));
extern "C" char __stop_kg_emu_shared[] __attribute__((visibility("hidden")));

static void kg_emu_poison(void *p, size_t bytes) {
  uint32_t bits = KG_EMU_POISON;
  char *c = (char *)p;
  size_t i = 0;
  for (; i + 4 <= bytes; i += 4) __builtin_memcpy(c + i, &bits, 4);
  for (; i < bytes; i++) c[i] = (char)0xff;
}

static void kg_emu_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void kg_emu_errorf(const char *fmt, ...) {
  if (kg_emu_s.failed) return; /* the first error is the one to report */
  kg_emu_s.failed = 1;
  __builtin_va_list ap;
  __builtin_va_start(ap, fmt);
  vsnprintf(kg_emu_s.err, kg_emu_s.errlen, fmt, ap);
  __builtin_va_end(ap);
}

/* Parks the running fiber (the scheduler resumes it once released; never when it failed or exited). */
static void kg_emu_park(int state, int line) {
  kg_emu_fiber *f = kg_emu_cur;
  f->state = state;
  f->line = line;
  swapcontext(&f->ctx, &kg_emu_s.sched);
}

static void kg_emu_check_align(const void *p, unsigned align, const char *what, int line) {
  uintptr_t a;
  /* Opaque to the optimizer, which may otherwise take the type's alignment for granted and drop the test. */
  __asm__("" : "=r"(a) : "0"((uintptr_t)p));
  kg_emu_fiber *f = kg_emu_cur;
  if (!(a & (align - 1)) || !f) return;
  char at[32] = "";
  if (line > 0) snprintf(at, sizeof at, " at line %d", line);
  kg_emu_errorf("%s%s in thread (%u,%u,%u): address %p is not %u-byte aligned (a misaligned address on the GPU)", what,
                at, f->tid.x, f->tid.y, f->tid.z, p, align);
  kg_emu_park(KG_EMU_FAILED, line);
}

static inline void kg_emu_cp_async(void *dst, const void *src, unsigned bytes, int line) {
  kg_emu_fiber *f = kg_emu_cur;
  kg_emu_check_align(dst, bytes, "cp.async to shared memory", line);
  kg_emu_check_align(src, bytes, "cp.async from global memory", line);
  if (f->ncopies == f->capcopies) {
    int cap = f->capcopies ? 2 * f->capcopies : 64;
    void *p = realloc(f->copies, sizeof(*f->copies) * (size_t)cap);
    if (!p) {
      kg_emu_errorf("out of memory for the asynchronous copies of thread (%u,%u,%u)", f->tid.x, f->tid.y, f->tid.z);
      kg_emu_park(KG_EMU_FAILED, line);
      return;
    }
    f->copies = (struct kg_emu_fiber::kg_emu_copy *)p;
    f->capcopies = cap;
  }
  f->copies[f->ncopies++] = {dst, src, bytes, f->group};
}
static inline void kg_emu_cp_async_commit(void) { kg_emu_cur->group++; }
/* Lands every copy of the committed groups but the latest `pending`, in issue order. */
static inline void kg_emu_cp_async_wait(unsigned pending) {
  kg_emu_fiber *f = kg_emu_cur;
  int kept = 0;
  for (int i = 0; i < f->ncopies; i++) {
    struct kg_emu_fiber::kg_emu_copy *c = &f->copies[i];
    if (c->group + pending < f->group) __builtin_memcpy(c->dst, c->src, c->bytes);
    else f->copies[kept++] = *c;
  }
  f->ncopies = kept;
}

#define __syncthreads() kg_emu_syncthreads(__LINE__)
static inline void kg_emu_syncthreads(int line) { kg_emu_park(KG_EMU_AT_SYNC, line); }

#define __trap() kg_emu_trap(__LINE__)
static inline void kg_emu_trap(int line) {
  kg_emu_fiber *f = kg_emu_cur;
  kg_emu_errorf("__trap() at line %d in thread (%u,%u,%u)", line, f->tid.x, f->tid.y, f->tid.z);
  kg_emu_park(KG_EMU_FAILED, line);
}

static inline unsigned kg_emu_activemask(void) {
  unsigned live = 0;
  int base = kg_emu_cur->warp * 32;
  for (int l = 0; l < 32 && base + l < kg_emu_s.nthreads; l++)
    if (kg_emu_s.fibers[base + l].state != KG_EMU_EXITED) live |= 1u << l;
  return live;
}
#define __activemask() kg_emu_activemask()

/* A warp operation: publishes the value, waits for the lanes of the mask, returns what the source lane published. */
static uint64_t kg_emu_warp_op(int op, unsigned mask, uint64_t val, int arg, int width, int line) {
  kg_emu_fiber *f = kg_emu_cur;
  const char *name = op == KG_EMU_SYNCWARP ? "__syncwarp" : "a warp shuffle";
  if (!(mask & (1u << f->lane))) {
    kg_emu_errorf("%s at line %d: thread (%u,%u,%u), lane %d, is not in its mask 0x%08x", name, line, f->tid.x, f->tid.y,
                  f->tid.z, f->lane, mask);
    kg_emu_park(KG_EMU_FAILED, line);
  }
  if (width < 1 || width > 32 || (width & (width - 1))) {
    kg_emu_errorf("%s at line %d: width %d is not a power of two up to 32", name, line, width);
    kg_emu_park(KG_EMU_FAILED, line);
  }
  int lane = f->lane, base = lane & ~(width - 1), src = -1;
  switch (op) {
  case KG_EMU_SHFL_IDX: src = base + (arg & (width - 1)); break;
  case KG_EMU_SHFL_UP: src = lane - arg >= base ? lane - arg : -1; break;
  case KG_EMU_SHFL_DOWN: src = lane + arg < base + width ? lane + arg : -1; break;
  case KG_EMU_SHFL_XOR: src = (lane ^ (arg & 31)) < base + width ? lane ^ (arg & 31) : -1; break;
  default: break;
  }
  f->mask = mask;
  f->src = src;
  f->val = val;
  kg_emu_park(KG_EMU_AT_WARP, line);
  return f->res;
}

template <class T> static inline uint64_t kg_emu_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp shuffles of values up to 8 bytes");
  uint64_t b = 0;
  __builtin_memcpy(&b, &v, sizeof v);
  return b;
}
template <class T> static inline T kg_emu_from_bits(uint64_t b) {
  T v;
  __builtin_memcpy(&v, &b, sizeof v);
  return v;
}
#define __shfl_sync(mask, v, lane, ...) kg_emu_shfl(KG_EMU_SHFL_IDX, mask, v, lane, __LINE__, ##__VA_ARGS__)
#define __shfl_up_sync(mask, v, d, ...) kg_emu_shfl(KG_EMU_SHFL_UP, mask, v, d, __LINE__, ##__VA_ARGS__)
#define __shfl_down_sync(mask, v, d, ...) kg_emu_shfl(KG_EMU_SHFL_DOWN, mask, v, d, __LINE__, ##__VA_ARGS__)
#define __shfl_xor_sync(mask, v, m, ...) kg_emu_shfl(KG_EMU_SHFL_XOR, mask, v, m, __LINE__, ##__VA_ARGS__)
template <class T> static inline T kg_emu_shfl(int op, unsigned mask, T v, int arg, int line, int width = 32) {
  return kg_emu_from_bits<T>(kg_emu_warp_op(op, mask, kg_emu_bits(v), arg, width, line));
}
/* Register exchanges of a whole warp at once (the software tensor-core steps of kgen's CUDA prelude): each lane
 * publishes the address of its registers and the warp syncs; then any lane reads any other's through
 * kg_emu_warp_peer, until the warp syncs again (every lane waits at or before that second sync, its registers
 * untouched). Two warp operations where the shuffles exchanging the same values would be dozens, each a round of
 * fiber switches. A lane absent from the block reads as poison (NaN bits), as a shuffle from it does. */
static inline void kg_emu_warp_publish(const void *p, int line) {
  kg_emu_cur->peer = p;
  kg_emu_warp_op(KG_EMU_SYNCWARP, 0xffffffffu, 0, 0, 32, line);
}
static const unsigned kg_emu_poison_regs[64] = {
#define KG_EMU_P8 KG_EMU_POISON, KG_EMU_POISON, KG_EMU_POISON, KG_EMU_POISON, KG_EMU_POISON, KG_EMU_POISON, KG_EMU_POISON, KG_EMU_POISON
    KG_EMU_P8, KG_EMU_P8, KG_EMU_P8, KG_EMU_P8, KG_EMU_P8, KG_EMU_P8, KG_EMU_P8, KG_EMU_P8
#undef KG_EMU_P8
};
/* Lane lane's published registers (32-bit words; at most 64 of them read for an absent lane). */
static inline const unsigned *kg_emu_warp_peer(int lane) {
  int w = kg_emu_cur->warp;
  lane &= 31;
  const kg_emu_fiber *g = &kg_emu_s.fibers[w * 32 + lane];
  if (!(kg_emu_s.exists[w] & (1u << lane)) || !g->peer) return kg_emu_poison_regs;
  return (const unsigned *)g->peer;
}

/* A call object, so that both __syncwarp() and __syncwarp(mask) carry the line without variadic-macro tricks. */
struct kg_emu_syncwarp {
  int line;
  void operator()(unsigned mask = 0xffffffffu) const { kg_emu_warp_op(KG_EMU_SYNCWARP, mask, 0, 0, 32, line); }
};
#define __syncwarp kg_emu_syncwarp{__LINE__}

static void kg_emu_fiber_main(int i) {
  kg_emu_fiber *f = &kg_emu_s.fibers[i];
  kg_emu_s.entry(kg_emu_s.args);
  f->state = KG_EMU_EXITED;
  swapcontext(&f->ctx, &kg_emu_s.sched);
  __builtin_trap(); /* an exited fiber is never resumed */
}

static const char *kg_emu_state_text(const kg_emu_fiber *g, char *buf, size_t n) {
  switch (g->state) {
  case KG_EMU_EXITED: snprintf(buf, n, "it has exited"); break;
  case KG_EMU_AT_SYNC: snprintf(buf, n, "it waits at __syncthreads at line %d", g->line); break;
  case KG_EMU_AT_WARP: snprintf(buf, n, "it waits at a warp operation at line %d with mask 0x%08x", g->line, g->mask); break;
  default: snprintf(buf, n, "it is still running"); break;
  }
  return buf;
}

/* Lanes that wait at a warp operation whose every present member waits at the same one (same line and mask) are
 * released with their results; returns how many. */
static int kg_emu_release_warps(void) {
  int released = 0;
  kg_emu_fiber *fs = kg_emu_s.fibers;
  for (int i = 0; i < kg_emu_s.nthreads; i++) {
    kg_emu_fiber *f = &fs[i];
    if (f->state != KG_EMU_AT_WARP) continue;
    int base = f->warp * 32;
    unsigned members = f->mask & kg_emu_s.exists[f->warp];
    int ready = 1;
    for (int l = 0; l < 32 && ready; l++)
      if (members & (1u << l)) {
        kg_emu_fiber *g = &fs[base + l];
        ready = g->state == KG_EMU_AT_WARP && g->line == f->line && g->mask == f->mask;
      }
    if (!ready) continue;
    for (int l = 0; l < 32; l++) {
      if (!(members & (1u << l))) continue;
      kg_emu_fiber *g = &fs[base + l];
      if (g->src < 0) g->res = g->val;
      else if (members & (1u << g->src)) g->res = fs[base + g->src].val;
      else g->res = KG_EMU_POISON;
      g->state = KG_EMU_RUNNABLE;
      released++;
    }
  }
  return released;
}

/* Nothing can run, no warp can be released, and the block barrier cannot be either: says why. */
static void kg_emu_explain_deadlock(void) {
  kg_emu_fiber *fs = kg_emu_s.fibers;
  char why[128];
  for (int i = 0; i < kg_emu_s.nthreads; i++) {
    kg_emu_fiber *f = &fs[i];
    if (f->state != KG_EMU_AT_WARP) continue;
    unsigned members = f->mask & kg_emu_s.exists[f->warp];
    for (int l = 0; l < 32; l++) {
      kg_emu_fiber *g = &fs[f->warp * 32 + l];
      if (!(members & (1u << l)) || (g->state == KG_EMU_AT_WARP && g->line == f->line && g->mask == f->mask)) continue;
      kg_emu_errorf("warp operation at line %d (mask 0x%08x) is not reached by every lane of warp %d: thread "
                    "(%u,%u,%u), lane %d, does not reach it (%s)",
                    f->line, f->mask, f->warp, g->tid.x, g->tid.y, g->tid.z, l, kg_emu_state_text(g, why, sizeof why));
      return;
    }
  }
  const kg_emu_fiber *first = NULL;
  for (int i = 0; i < kg_emu_s.nthreads; i++)
    if (fs[i].state == KG_EMU_AT_SYNC) {
      first = &fs[i];
      break;
    }
  if (!first) { /* unreachable: a deadlock needs a waiting fiber */
    kg_emu_errorf("the scheduler found no thread to run and none waiting");
    return;
  }
  for (int i = 0; i < kg_emu_s.nthreads; i++) {
    const kg_emu_fiber *g = &fs[i];
    if (g->state == KG_EMU_AT_SYNC && g->line == first->line) continue;
    kg_emu_errorf("__syncthreads at line %d (thread (%u,%u,%u)) is not reached by every thread of the block: thread "
                  "(%u,%u,%u) does not reach it (%s)",
                  first->line, first->tid.x, first->tid.y, first->tid.z, g->tid.x, g->tid.y, g->tid.z,
                  kg_emu_state_text(g, why, sizeof why));
    return;
  }
}

static int kg_emu_run_block(void) {
  int n = kg_emu_s.nthreads;
  kg_emu_fiber *fs = kg_emu_s.fibers;
  for (int i = 0; i < n; i++) {
    kg_emu_fiber *f = &fs[i];
    if (getcontext(&f->ctx) != 0) {
      kg_emu_errorf("getcontext failed");
      return -1;
    }
    f->ctx.uc_stack.ss_sp = kg_emu_s.stacks[i] + kg_emu_s.page;
    f->ctx.uc_stack.ss_size = KG_EMU_STACK_BYTES;
    f->ctx.uc_link = NULL;
    makecontext(&f->ctx, (void (*)(void))kg_emu_fiber_main, 1, i);
    f->state = KG_EMU_RUNNABLE;
    f->ncopies = 0; /* copies a previous block never waited for are lost, as the block's shared memory is */
    f->group = 0;
    f->peer = NULL;
  }
  for (;;) {
    for (int i = 0; i < n; i++) {
      if (fs[i].state != KG_EMU_RUNNABLE) continue;
      kg_emu_cur = &fs[i];
      swapcontext(&kg_emu_s.sched, &fs[i].ctx);
      if (kg_emu_s.failed) return -1;
    }
    if (kg_emu_release_warps()) continue;
    int live = 0, at_sync = 0, line = -1, same = 1;
    for (int i = 0; i < n; i++) {
      if (fs[i].state == KG_EMU_EXITED) continue;
      live++;
      if (fs[i].state != KG_EMU_AT_SYNC) continue;
      if (at_sync++ == 0) line = fs[i].line;
      else if (fs[i].line != line) same = 0;
    }
    if (live == 0) return 0;
    if (at_sync == n && same) {
      for (int i = 0; i < n; i++) fs[i].state = KG_EMU_RUNNABLE;
      continue;
    }
    kg_emu_explain_deadlock();
    return -1;
  }
}

static int kg_emu_prepare(int nthreads) {
  if (!kg_emu_s.fibers) {
    kg_emu_s.fibers = (kg_emu_fiber *)calloc(KG_EMU_MAX_THREADS, sizeof(kg_emu_fiber));
    if (!kg_emu_s.fibers) {
      kg_emu_errorf("out of memory for %d fibers", KG_EMU_MAX_THREADS);
      return -1;
    }
    long pg = sysconf(_SC_PAGESIZE);
    kg_emu_s.page = pg > 0 ? (size_t)pg : 4096;
  }
  /* Stacks come from mmap with a guard page below each (an overflow faults instead of corrupting a neighbour)
   * and stay for later blocks and launches; only the pages a fiber touches cost memory. */
  for (int i = 0; i < nthreads; i++) {
    if (kg_emu_s.stacks[i]) continue;
    size_t bytes = KG_EMU_STACK_BYTES + kg_emu_s.page;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) {
      kg_emu_errorf("cannot map a %d KB fiber stack for thread %d", KG_EMU_STACK_BYTES / 1024, i);
      return -1;
    }
    if (mprotect(p, kg_emu_s.page, PROT_NONE) != 0) {
      munmap(p, bytes);
      kg_emu_errorf("cannot protect the guard page of a fiber stack");
      return -1;
    }
    kg_emu_s.stacks[i] = (char *)p;
  }
  return 0;
}

__attribute__((destructor)) static void kg_emu_unload(void) {
  for (int i = 0; i < KG_EMU_MAX_THREADS; i++)
    if (kg_emu_s.stacks[i]) munmap(kg_emu_s.stacks[i], KG_EMU_STACK_BYTES + kg_emu_s.page);
  for (int i = 0; kg_emu_s.fibers && i < KG_EMU_MAX_THREADS; i++) free(kg_emu_s.fibers[i].copies);
  free(kg_emu_s.fibers);
}

/* Launches entry(args) on a grid of blocks, one block after the other, with dyn_bytes of dynamic shared memory.
 * Returns 0, or -1 with the reason (naming the block and the source line) in err. */
extern "C" int kg_emu_launch(void (*entry)(float **), float **args, const int64_t grid[3], const int64_t block[3],
                             int64_t dyn_bytes, char *err, size_t errlen) {
  kg_emu_s.err = err;
  kg_emu_s.errlen = errlen;
  kg_emu_s.failed = 0;
  if (errlen) err[0] = 0;
  static const int64_t block_max[3] = {1024, 1024, 64}, grid_max[3] = {2147483647, 65535, 65535};
  for (int d = 0; d < 3; d++) {
    if (block[d] < 1 || block[d] > block_max[d]) {
      kg_emu_errorf("block dimension %c = %lld is outside 1..%lld", "xyz"[d], (long long)block[d],
                    (long long)block_max[d]);
      return -1;
    }
    if (grid[d] < 1 || grid[d] > grid_max[d]) {
      kg_emu_errorf("grid dimension %c = %lld is outside 1..%lld", "xyz"[d], (long long)grid[d], (long long)grid_max[d]);
      return -1;
    }
  }
  int64_t nthreads = block[0] * block[1] * block[2];
  if (nthreads > KG_EMU_MAX_THREADS) {
    kg_emu_errorf("a block of %lld threads (%lldx%lldx%lld) exceeds %d", (long long)nthreads, (long long)block[0],
                  (long long)block[1], (long long)block[2], KG_EMU_MAX_THREADS);
    return -1;
  }
  if (dyn_bytes < 0) {
    kg_emu_errorf("negative dynamic shared memory size %lld", (long long)dyn_bytes);
    return -1;
  }
  if (kg_emu_prepare((int)nthreads) != 0) return -1;
  kg_emu_s.nthreads = (int)nthreads;
  kg_emu_s.entry = entry;
  kg_emu_s.args = args;
  blockDim = {(unsigned)block[0], (unsigned)block[1], (unsigned)block[2]};
  gridDim = {(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
  for (int w = 0; w < KG_EMU_MAX_THREADS / 32; w++) {
    int64_t left = nthreads - 32 * w;
    kg_emu_s.exists[w] = left >= 32 ? 0xffffffffu : left > 0 ? (1u << left) - 1 : 0;
  }
  for (int i = 0; i < nthreads; i++) {
    kg_emu_fiber *f = &kg_emu_s.fibers[i];
    f->tid = {(unsigned)(i % block[0]), (unsigned)(i / block[0] % block[1]), (unsigned)(i / (block[0] * block[1]))};
    f->lane = i % 32;
    f->warp = i / 32;
  }
  /* Rounded up to 16 bytes, aligned like CUDA's (float4 accesses); NULL when the launch asks for none. */
  void *dyn = NULL;
  size_t dyn_alloc = ((size_t)dyn_bytes + 15) & ~(size_t)15;
  if (dyn_alloc && posix_memalign(&dyn, 16, dyn_alloc) != 0) {
    kg_emu_errorf("cannot allocate %lld bytes of dynamic shared memory", (long long)dyn_bytes);
    return -1;
  }
  kg_emu_dyn_smem = (float *)dyn;
  int rc = 0;
  for (int64_t bz = 0; bz < grid[2] && rc == 0; bz++)
    for (int64_t by = 0; by < grid[1] && rc == 0; by++)
      for (int64_t bx = 0; bx < grid[0] && rc == 0; bx++) {
        blockIdx = {(unsigned)bx, (unsigned)by, (unsigned)bz};
        kg_emu_poison(__start_kg_emu_shared, (size_t)(__stop_kg_emu_shared - __start_kg_emu_shared));
        if (dyn) kg_emu_poison(dyn, dyn_alloc);
        rc = kg_emu_run_block();
        if (rc != 0 && errlen) {
          char what[512];
          snprintf(what, sizeof what, "%s", err);
          snprintf(err, errlen, "block (%lld,%lld,%lld): %s", (long long)bx, (long long)by, (long long)bz, what);
        }
      }
  free(dyn);
  kg_emu_dyn_smem = NULL;
  (void)kg_emu_shared_anchor;
  return rc;
}
#endif
