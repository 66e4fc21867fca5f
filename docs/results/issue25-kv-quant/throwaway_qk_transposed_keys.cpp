// Throwaway: Q.K of 3 int16 queries against a 32-row Q8_0 page (head dim 64), row-major (as today)
// vs K transposed in pairs of dims (16 rows per vector) with the block scales apart.
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <random>
static inline __m128i loadu128(const void* p){return _mm_loadu_si128((const __m128i*)p);}
constexpr int kRowBytes=68;
alignas(64) uint8_t Krow[32*68*64];   // 64 pages row-major
alignas(64) uint8_t Kt[64][2048+128]; // 64 pages transposed: [32 pairs][32 rows][2] int8, then [2 blocks][32 rows] f16
alignas(64) int16_t Qi[3][64]; float Qs[3];
inline __m512i row_i16(const uint8_t* row, int o) {
  const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(row + 2 + o)), loadu128(row + 36 + o), 1);
  return _mm512_cvtepi8_epi16(x);
}
__attribute__((noinline)) void qk_rowmajor(const uint8_t* prep, const uint8_t* K, int n, float* out, int64_t ldo){
  constexpr int QB=3; __m512i qa[QB], qb[QB]; float qs[QB];
  for (int q=0;q<QB;++q){ qa[q]=_mm512_loadu_si512(prep+q*132); qb[q]=_mm512_loadu_si512(prep+q*132+64); memcpy(&qs[q],prep+q*132+128,4);}
  for (int r=0;r<n;r+=4){
    const uint8_t *k0=K+r*kRowBytes,*k1=k0+kRowBytes,*k2=k1+kRowBytes,*k3=k2+kRowBytes;
    const __m512i x0a=row_i16(k0,0),x0b=row_i16(k0,16),x1a=row_i16(k1,0),x1b=row_i16(k1,16);
    const __m512i x2a=row_i16(k2,0),x2b=row_i16(k2,16),x3a=row_i16(k3,0),x3b=row_i16(k3,16);
    auto d16=[](const uint8_t* p){int16_t h; memcpy(&h,p,2); return h;};
    const __m256 dk=_mm256_cvtph_ps(_mm_setr_epi16(d16(k0),d16(k1),d16(k2),d16(k3),d16(k0+34),d16(k1+34),d16(k2+34),d16(k3+34)));
#pragma GCC unroll 4
    for (int q=0;q<QB;++q){
      const __m512i a0=_mm512_dpwssd_epi32(_mm512_madd_epi16(x0a,qa[q]),x0b,qb[q]);
      const __m512i a1=_mm512_dpwssd_epi32(_mm512_madd_epi16(x1a,qa[q]),x1b,qb[q]);
      const __m512i a2=_mm512_dpwssd_epi32(_mm512_madd_epi16(x2a,qa[q]),x2b,qb[q]);
      const __m512i a3=_mm512_dpwssd_epi32(_mm512_madd_epi16(x3a,qa[q]),x3b,qb[q]);
      const __m512i t01=_mm512_add_epi32(_mm512_unpacklo_epi32(a0,a1),_mm512_unpackhi_epi32(a0,a1));
      const __m512i t23=_mm512_add_epi32(_mm512_unpacklo_epi32(a2,a3),_mm512_unpackhi_epi32(a2,a3));
      const __m512i u=_mm512_add_epi32(_mm512_unpacklo_epi64(t01,t23),_mm512_unpackhi_epi64(t01,t23));
      const __m512i v=_mm512_add_epi32(u,_mm512_shuffle_i32x4(u,u,_MM_SHUFFLE(2,3,0,1)));
      const __m256i w=_mm512_castsi512_si256(_mm512_shuffle_i32x4(v,v,_MM_SHUFFLE(3,1,2,0)));
      const __m256 f=_mm256_mul_ps(_mm256_cvtepi32_ps(w),dk);
      const __m128 sc=_mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(f),_mm256_extractf128_ps(f,1)),_mm_set1_ps(qs[q]));
      _mm_storeu_ps(out+q*ldo+r,sc);
    }
  }
}
// Transposed page: pair p (dims 2p, 2p+1) of rows [16h, 16h+16) at Kt + p*64 + 32h (row r's two
// int8 at 2(r-16h)); scales of block b, rows 0..31, f16 at Kt + 2048 + 64b.
__attribute__((noinline)) void qk_transposed(const int32_t* qpairs /*[3][32]*/, const float* qs, const uint8_t* Kp, float* out, int64_t ldo){
  constexpr int QB=3;
  for (int h=0;h<2;++h){
    __m512i acc[QB][2];
    for(int q=0;q<QB;++q){acc[q][0]=_mm512_setzero_si512(); acc[q][1]=_mm512_setzero_si512();}
#pragma GCC unroll 32
    for (int p=0;p<32;++p){
      const __m512i x=_mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i*)(Kp+p*64+32*h)));
#pragma GCC unroll 3
      for(int q=0;q<QB;++q) acc[q][p/16]=_mm512_dpwssd_epi32(acc[q][p/16],x,_mm512_set1_epi32(qpairs[q*32+p]));
    }
    const __m512 d0=_mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(Kp+2048+32*h)));
    const __m512 d1=_mm512_cvtph_ps(_mm256_load_si256((const __m256i*)(Kp+2048+64+32*h)));
    for(int q=0;q<QB;++q){
      const __m512 s=_mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[q][1]),d1,_mm512_mul_ps(_mm512_cvtepi32_ps(acc[q][0]),d0));
      _mm512_storeu_ps(out+q*ldo+16*h,_mm512_mul_ps(s,_mm512_set1_ps(qs[q])));
    }
  }
}
int main(){
  std::mt19937 rng(1); std::uniform_int_distribution<int> ud(-127,127);
  const int NP=4; // pages (L1: 4 x 2.2 KB)
  for(int pg=0;pg<NP;++pg) for(int r=0;r<32;++r){ uint8_t* row=Krow+pg*32*68+r*68;
    for(int b=0;b<2;++b){ float d=0.01f+0.001f*(r%7); uint16_t h=_cvtss_sh(d,0); memcpy(row+34*b,&h,2);
      memcpy(Kt[pg]+2048+64*b+2*r,&h,2);
      for(int e=0;e<32;++e){ int8_t v=(int8_t)ud(rng); row[34*b+2+e]=(uint8_t)v; int dim=32*b+e; int p=dim/2;
        Kt[pg][p*64+32*(r/16)+2*(r%16)+(dim%2)]=(uint8_t)v; } } }
  alignas(64) uint8_t prep[3*132]; int32_t qpairs[3*32]; float qs[3];
  for(int q=0;q<3;++q){ int16_t qi[64]; for(int i=0;i<64;++i) qi[i]=(int16_t)(ud(rng)*200);
    int16_t a[32],b[32]; for(int i=0;i<16;++i){a[i]=qi[i];a[16+i]=qi[32+i];b[i]=qi[16+i];b[16+i]=qi[48+i];}
    memcpy(prep+q*132,a,64); memcpy(prep+q*132+64,b,64); qs[q]=1e-4f*(q+1); memcpy(prep+q*132+128,&qs[q],4);
    for(int p=0;p<32;++p){ int32_t v=(uint16_t)qi[2*p] | ((int32_t)qi[2*p+1]<<16); qpairs[q*32+p]=v; } }
  float o1[3*32], o2[3*32];
  qk_rowmajor(prep,Krow,32,o1,32); qk_transposed(qpairs,qs,Kt[0],o2,32);
  double md=0; for(int i=0;i<96;++i) md=fmax(md,fabs(o1[i]-o2[i])/(1e-6+fabs(o1[i])));
  printf("max rel diff %.2e (o1[0]=%f o2[0]=%f)\n", md, o1[0], o2[0]);
  for(int rep=0;rep<3;++rep){
    const int N=2000000;
    auto t0=std::chrono::steady_clock::now();
    for(int i=0;i<N;++i){ asm volatile(""::"r"(prep):"memory"); qk_rowmajor(prep,Krow+(i%NP)*32*68,32,o1,32);}
    double s1=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
    t0=std::chrono::steady_clock::now();
    for(int i=0;i<N;++i){ asm volatile(""::"r"(qpairs):"memory"); qk_transposed(qpairs,qs,Kt[i%NP],o2,32);}
    double s2=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
    printf("row-major %.2f ns/row, transposed %.2f ns/row\n", s1/N/32*1e9, s2/N/32*1e9);
  }
}
