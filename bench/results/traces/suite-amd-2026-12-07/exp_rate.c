/* glibc libmvec expf (_ZGVeN16v_expf) over 1024 floats from L1, stored, then summed (no reassociation).
 * Build: cc -std=c11 -D_GNU_SOURCE -O3 -march=native -fno-math-errno -ffp-contract=fast exp_rate.c -o exp_rate -lm */
#include <math.h>
#include <stdio.h>
#include <time.h>
__attribute__((simd("notinbranch"), const)) float expf(float);
#pragma GCC target("prefer-vector-width=512")
static float x[1024], y[1024];
__attribute__((noinline)) void f(void){ for(int i=0;i<1024;i++) y[i]=expf(x[i]-3.0f); }
__attribute__((noinline)) float g(void){ float s=0; for(int i=0;i<1024;i++) s+=expf(x[i]-3.0f); return s;}
int main(){ for(int i=0;i<1024;i++) x[i]=(i%97)*0.01f; struct timespec a,b; long N=200000;
clock_gettime(CLOCK_MONOTONIC,&a); for(long n=0;n<N;n++){ f(); __asm__ volatile(""::"r"(y):"memory");} clock_gettime(CLOCK_MONOTONIC,&b);
double s=(b.tv_sec-a.tv_sec)+1e-9*(b.tv_nsec-a.tv_nsec); printf("store exp: %.2f Gexp/s\n", N*1024/s/1e9);
float t=0; clock_gettime(CLOCK_MONOTONIC,&a); for(long n=0;n<N;n++){ t+=g(); __asm__ volatile(""::"r"(y):"memory");} clock_gettime(CLOCK_MONOTONIC,&b);
s=(b.tv_sec-a.tv_sec)+1e-9*(b.tv_nsec-a.tv_nsec); printf("sum exp (no reassoc): %.2f Gexp/s %g\n", N*1024/s/1e9, t);}
