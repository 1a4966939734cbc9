/* The vector rates of one core: 16 independent vdpbf16ps chains, then 16 FMA chains (512-bit).
 * Build: cc -O3 -funroll-all-loops -march=native rates.c -o rates && ./rates */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
int main(void){
  __m512 a[16]; for(int i=0;i<16;i++) a[i]=_mm512_setzero_ps();
  __m512bh x=(__m512bh)_mm512_set1_epi32(0x3f803f80), y=(__m512bh)_mm512_set1_epi32(0x3f803f80);
  __m512 f[16]; for(int i=0;i<16;i++) f[i]=_mm512_setzero_ps();
  __m512 fx=_mm512_set1_ps(1e-3f);
  struct timespec t0,t1; long N=100000000;
  clock_gettime(CLOCK_MONOTONIC,&t0);
  for(long n=0;n<N;n++){
    for(int i=0;i<16;i++) a[i]=_mm512_dpbf16_ps(a[i],x,y);
  }
  clock_gettime(CLOCK_MONOTONIC,&t1);
  double s=(t1.tv_sec-t0.tv_sec)+1e-9*(t1.tv_nsec-t0.tv_nsec);
  printf("dpbf16: %.2f Gdp/s  %.1f GFLOP/s\n", N*16/s/1e9, N*16*64/s/1e9);
  clock_gettime(CLOCK_MONOTONIC,&t0);
  for(long n=0;n<N;n++){
    for(int i=0;i<16;i++) f[i]=_mm512_fmadd_ps(f[i],fx,fx);
  }
  clock_gettime(CLOCK_MONOTONIC,&t1);
  s=(t1.tv_sec-t0.tv_sec)+1e-9*(t1.tv_nsec-t0.tv_nsec);
  printf("fma: %.2f Gfma/s  %.1f GFLOP/s\n", N*16/s/1e9, N*16*32/s/1e9);
  float o[16]; __m512 sv=_mm512_setzero_ps(); for(int i=0;i<16;i++) sv=_mm512_add_ps(sv,_mm512_add_ps(a[i],f[i])); _mm512_storeu_ps(o,sv); printf("%g\n",o[0]);
}
