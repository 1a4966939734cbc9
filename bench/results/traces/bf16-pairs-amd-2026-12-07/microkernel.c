/* Pair dot products from L1: an R x 16V tile over 512 pairs of k, B interleaved at every pair (inter=1, as
 * kg_bf_interleave) or stored in pairs (inter=0). Build: cc -O3 -march=native microkernel.c -o mk && ./mk */
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>
#define R 6
#define V 4
static uint16_t A[R][512*2], B[512*2][64], BP[512][128];
__attribute__((noinline)) void kern(float *C, int inter, long KP){
  __m512 acc[R][V];
  for(int r=0;r<R;r++)for(int v=0;v<V;v++)acc[r][v]=_mm512_loadu_ps(C+r*64+v*16);
  const __m512i lanes = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  for(long kp=0;kp<KP;kp++){
    __m512i b[V];
    if(inter){ for(int v=0;v<V;v++) b[v]=_mm512_permutex2var_epi16(_mm512_castsi256_si512(_mm256_loadu_si256((void*)&B[2*kp][16*v])),lanes,_mm512_castsi256_si512(_mm256_loadu_si256((void*)&B[2*kp+1][16*v])));}
    else { for(int v=0;v<V;v++) b[v]=_mm512_loadu_si512(&BP[kp][32*v]); }
    for(int r=0;r<R;r++){ uint32_t a; __builtin_memcpy(&a,&A[r][2*kp],4); __m512bh ab=(__m512bh)_mm512_set1_epi32((int)a);
      for(int v=0;v<V;v++) acc[r][v]=_mm512_dpbf16_ps(acc[r][v],ab,(__m512bh)b[v]); }
  }
  for(int r=0;r<R;r++)for(int v=0;v<V;v++)_mm512_storeu_ps(C+r*64+v*16,acc[r][v]);
}
int main(){ float C[R*64]={0}; for(int inter=1;inter>=0;inter--){ struct timespec t0,t1; long it=200000;
 clock_gettime(CLOCK_MONOTONIC,&t0); for(long i=0;i<it;i++) kern(C,inter,512); clock_gettime(CLOCK_MONOTONIC,&t1);
 double s=(t1.tv_sec-t0.tv_sec)+1e-9*(t1.tv_nsec-t0.tv_nsec); printf("inter=%d %.2f Gdp/s\n",inter,it*512.0*R*V/s/1e9);} printf("%g\n",C[0]); }
