// Throwaway: P.V of 3 queries over a 32-row Q8_0 page (head dim 64): rows with their scales (as
// today, one scale conversion per block) vs values apart from the scales, the scale folded into P.
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <random>
struct block_q8_0{uint16_t d; int8_t qs[32];};
alignas(64) block_q8_0 Vrow[4][32][2];
alignas(64) int8_t Vv[4][32][64]; alignas(64) uint16_t Vs[4][2][32];
static inline float h2f(uint16_t h){return _cvtsh_ss(h);}
__attribute__((noinline)) void pv_rowmajor(const float* P, int64_t ldp, const block_q8_0* V, int n, float* acc){
  __m512 a[3][4];
  for(int q=0;q<3;++q) for(int i=0;i<4;++i) a[q][i]=_mm512_loadu_ps(acc+q*64+16*i);
  for(int j=0;j<n;++j){
    const block_q8_0* v=V+2*j; __m512 x[4];
    for(int b=0;b<2;++b){ const __m512 s=_mm512_set1_ps(h2f(v[b].d));
      x[2*b]=_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)v[b].qs))),s);
      x[2*b+1]=_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(v[b].qs+16)))),s);}
#pragma GCC unroll 3
    for(int q=0;q<3;++q){ const __m512 w=_mm512_set1_ps(P[q*ldp+j]);
      for(int i=0;i<4;++i) a[q][i]=_mm512_fmadd_ps(w,x[i],a[q][i]); }
  }
  for(int q=0;q<3;++q) for(int i=0;i<4;++i) _mm512_storeu_ps(acc+q*64+16*i,a[q][i]);
}
__attribute__((noinline)) void pv_apart(const float* P, int64_t ldp, const int8_t* V, const uint16_t* S, float* acc){
  __m512 a[3][4];
  for(int q=0;q<3;++q) for(int i=0;i<4;++i) a[q][i]=_mm512_loadu_ps(acc+q*64+16*i);
  alignas(64) float W[2][3][16];
  for(int h=0;h<2;++h){
    const __m512 d0=_mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(S+16*h)));
    const __m512 d1=_mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(S+32+16*h)));
    for(int q=0;q<3;++q){ const __m512 p=_mm512_loadu_ps(P+q*ldp+16*h);
      _mm512_store_ps(W[0][q],_mm512_mul_ps(p,d0)); _mm512_store_ps(W[1][q],_mm512_mul_ps(p,d1)); }
#pragma GCC unroll 2
    for(int r=0;r<16;++r){
      const int8_t* v=V+64*(16*h+r); __m512 x[4];
      for(int i=0;i<4;++i) x[i]=_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128((const __m128i*)(v+16*i))));
#pragma GCC unroll 3
      for(int q=0;q<3;++q){ const __m512 w0=_mm512_set1_ps(W[0][q][r]), w1=_mm512_set1_ps(W[1][q][r]);
        a[q][0]=_mm512_fmadd_ps(w0,x[0],a[q][0]); a[q][1]=_mm512_fmadd_ps(w0,x[1],a[q][1]);
        a[q][2]=_mm512_fmadd_ps(w1,x[2],a[q][2]); a[q][3]=_mm512_fmadd_ps(w1,x[3],a[q][3]); }
    }
  }
  for(int q=0;q<3;++q) for(int i=0;i<4;++i) _mm512_storeu_ps(acc+q*64+16*i,a[q][i]);
}
int main(){
  std::mt19937 rng(1); std::uniform_int_distribution<int> ud(-127,127); std::uniform_real_distribution<float> uf(0,1);
  for(int pg=0;pg<4;++pg) for(int r=0;r<32;++r) for(int b=0;b<2;++b){ uint16_t h=_cvtss_sh(0.01f+0.001f*((r+b)%7),0);
    Vrow[pg][r][b].d=h; Vs[pg][b][r]=h; for(int e=0;e<32;++e){ int8_t v=(int8_t)ud(rng); Vrow[pg][r][b].qs[e]=v; Vv[pg][r][32*b+e]=v; } }
  alignas(64) float P[3][32]; for(auto& r:P) for(auto& x:r) x=uf(rng)/32;
  alignas(64) float a1[192]={0}, a2[192]={0};
  pv_rowmajor(&P[0][0],32,&Vrow[0][0][0],32,a1); pv_apart(&P[0][0],32,&Vv[0][0][0],&Vs[0][0][0],a2);
  double md=0; for(int i=0;i<192;++i) md=fmax(md,fabs(a1[i]-a2[i])); printf("max diff %.2e (a1[0]=%f)\n",md,a1[0]);
  for(int rep=0;rep<3;++rep){ const int N=2000000;
    auto t0=std::chrono::steady_clock::now();
    for(int i=0;i<N;++i){ asm volatile(""::"r"(P):"memory"); pv_rowmajor(&P[0][0],32,&Vrow[i%4][0][0],32,a1);}
    double s1=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
    t0=std::chrono::steady_clock::now();
    for(int i=0;i<N;++i){ asm volatile(""::"r"(P):"memory"); pv_apart(&P[0][0],32,&Vv[i%4][0][0],&Vs[i%4][0][0],a2);}
    double s2=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
    printf("rows with scales %.2f ns/row, scales apart %.2f ns/row\n", s1/N/32*1e9, s2/N/32*1e9);
  }
}
