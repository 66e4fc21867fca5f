// AVX2 quantised dot products and the dot tiles used by decode: one weight row against up to kNT
// tokens per pass, so each weight block is loaded and decoded (nibble split, 6-bit scale unpack,
// q6 assembly, F16/BF16 widening) once and then multiplied into every token's accumulator.
//   Q8_0/Q4_0 x Q8_0: per block sign trick + maddubs/madd -> 8 int32, scaled by d_w*d_a (fp32 FMA).
//   Q4_K x Q8_K: per 64-element group maddubs(nibbles, q8) * 6-bit scale; mins via the Q8_K bsums.
//   Q6_K x Q8_K: maddubs(q6 in [0,63], q8) * int8 scale, minus 32 * sum(scale * bsum).
// Integer parts are exact, so results differ from the reference only by float summation order.
// The single-row dots (dot_q8_0, ...) are the NT = 1 instances.
//
// Dimension legend: n = row length, nt = tokens in the tile, NT = tokens per pass (1..kNT),
// b = block, g = 64-element group (Q4_K), h = 128-element half (Q6_K), k = 32-element quarter.
#include "kernels/cpu/impl.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/quant.h"

namespace kvs::kernels::avx2 {
namespace {

// ---- float weights: F32 / F16 / BF16 rows against F32 activations ----------------------------
struct LoadF32 {
  static __m256 load(const uint8_t* w, int64_t i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i); }
  static float at(const uint8_t* w, int64_t i) { return reinterpret_cast<const float*>(w)[i]; }
};
struct LoadF16 {
  static __m256 load(const uint8_t* w, int64_t i) { return f16x8_to_ps(reinterpret_cast<const uint16_t*>(w) + i); }
  static float at(const uint8_t* w, int64_t i) { return h2f(reinterpret_cast<const uint16_t*>(w)[i]); }
};
struct LoadBF16 {
  static __m256 load(const uint8_t* w, int64_t i) { return bf16x8_to_ps(reinterpret_cast<const uint16_t*>(w) + i); }
  static float at(const uint8_t* w, int64_t i) {
    const uint32_t u = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(w)[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <class L>
struct FloatRow {
  template <int NT>
  struct K {
    static void run(const uint8_t* w, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
      const float* x[NT];
      for (int t = 0; t < NT; ++t) x[t] = reinterpret_cast<const float*>(a + t * as);
      // Two interleaved accumulator sets hide the FMA latency.
      __m256 acc0[NT], acc1[NT];
      for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
      int64_t i = 0;
      for (; i + 16 <= n; i += 16) {
        const __m256 w0 = L::load(w, i), w1 = L::load(w, i + 8);
        for (int t = 0; t < NT; ++t) {
          acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), acc0[t]);
          acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + i + 8), acc1[t]);
        }
      }
      for (; i + 8 <= n; i += 8) {
        const __m256 w0 = L::load(w, i);
        for (int t = 0; t < NT; ++t) acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), acc0[t]);
      }
      for (int t = 0; t < NT; ++t) {
        float s = hsum_ps(_mm256_add_ps(acc0[t], acc1[t]));
        for (int64_t j = i; j < n; ++j) s += L::at(w, j) * x[t][j];
        out[t * ldo] = s;
      }
    }
  };
};

// ---- Q8_0 / Q4_0 rows against Q8_0 activations ------------------------------------------------
struct UnpackQ8_0 {
  using Block = block_q8_0;
  static __m256i q(const Block& b) { return loadu256(b.qs); }
};
struct UnpackQ4_0 {
  using Block = block_q4_0;
  static __m256i q(const Block& b) { return unpack_q4_0(b.qs); }
};

template <class U>
struct Q8Row {
  template <int NT>
  struct K {
    static void run(const uint8_t* w, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
      using Block = typename U::Block;
      const auto* x = reinterpret_cast<const Block*>(w);
      const block_q8_0* y[NT];
      const float* dy[NT];  // float copies of the activation block scales (prepare_act_q8_0)
      for (int t = 0; t < NT; ++t) {
        y[t] = reinterpret_cast<const block_q8_0*>(a + t * as);
        dy[t] = act_q8_0_scales(a + t * as, n);
      }
      const int64_t nb = n / QK8_0;
      const __m256i ones = _mm256_set1_epi16(1);
      __m256 acc0[NT], acc1[NT];
      for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
      auto step = [&](int64_t b, __m256* acc) {
        const __m256i qx = U::q(x[b]);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        const __m256 dx = h2f_bcast(&x[b].d);
        for (int t = 0; t < NT; ++t) {
          const __m256i sy = _mm256_sign_epi8(loadu256(y[t][b].qs), qx);
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), ones);
          const __m256 d = _mm256_mul_ps(dx, _mm256_broadcast_ss(dy[t] + b));
          acc[t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[t]);
        }
      };
      int64_t b = 0;
      for (; b + 2 <= nb; b += 2) {
        step(b, acc0);
        step(b + 1, acc1);
      }
      if (b < nb) step(b, acc0);
      for (int t = 0; t < NT; ++t) out[t * ldo] = hsum_ps(_mm256_add_ps(acc0[t], acc1[t]));
    }
  };
};

// ---- Q4_K rows against Q8_K activations -------------------------------------------------------
template <int NT>
struct Q4KRow {
  static void run(const uint8_t* w, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const auto* x = reinterpret_cast<const block_q4_K*>(w);
    const block_q8_K* y[NT];
    for (int t = 0; t < NT; ++t) y[t] = reinterpret_cast<const block_q8_K*>(a + t * as);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[NT];
    __m128 acc_m[NT];
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm256_setzero_ps();
      acc_m[t] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < n / QK_K; ++b) {
      alignas(16) uint8_t sm[16];  // [0..7] scales, [8..15] mins
      unpack_q4_K_scales(x[b].scales, sm);
      const float dxs = h2f(x[b].d), dxm = h2f(x[b].dmin);
      // [16] int16: scales 0..7 then mins 0..7, kept in registers.
      const __m256i sm16 = _mm256_cvtepu8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(sm)));
      const __m128i mins = _mm256_extracti128_si256(sm16, 1);
      const __m256i scales = _mm256_permute2x128_si256(sm16, sm16, 0x00);  // scales in both lanes
      __m256i sumi[NT];
      for (int t = 0; t < NT; ++t) {
        const __m256i bs = loadu256(y[t][b].bsums);
        const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(-y[t][b].d * dxm), _mm_cvtepi32_ps(_mm_madd_epi16(mins, q8s)), acc_m[t]);
        sumi[t] = _mm256_setzero_si256();
      }
      for (int g = 0; g < 4; ++g) {
        const __m256i bytes = loadu256(x[b].qs + 32 * g);
        const __m256i lo = _mm256_and_si256(bytes, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4);
        // Broadcast int16 scale 2g / 2g+1 (bytes 4g..4g+1 / 4g+2..4g+3 of each lane) everywhere.
        const __m256i scl = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * g) | ((4 * g + 1) << 8))));
        const __m256i sch =
            _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * g + 2) | ((4 * g + 3) << 8))));
        for (int t = 0; t < NT; ++t) {
          const int8_t* ya = y[t][b].qs + 64 * g;
          const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu256(ya)), scl);
          const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu256(ya + 32)), sch);
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(pl, ph));
        }
      }
      for (int t = 0; t < NT; ++t)
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][b].d * dxs), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (int t = 0; t < NT; ++t) {
      __m128 m = _mm_add_ps(acc_m[t], _mm_movehl_ps(acc_m[t], acc_m[t]));
      m = _mm_add_ss(m, _mm_movehdup_ps(m));
      out[t * ldo] = hsum_ps(acc[t]) + _mm_cvtss_f32(m);
    }
  }
};

// ---- Q6_K rows against Q8_K activations -------------------------------------------------------
template <int NT>
struct Q6KRow {
  static void run(const uint8_t* w, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const auto* x = reinterpret_cast<const block_q6_K*>(w);
    const block_q8_K* y[NT];
    for (int t = 0; t < NT; ++t) y[t] = reinterpret_cast<const block_q8_K*>(a + t * as);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
    // Byte shuffles broadcasting int16 scale 2k (low 128-bit lane) and 2k+1 (high lane).
    const __m256i shuf[4] = {
        _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3),
        _mm256_setr_epi8(4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7),
        _mm256_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11),
        _mm256_setr_epi8(12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15)};
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales));
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);  // [16] int16 scales
      __m256i sumi[NT];
      for (int t = 0; t < NT; ++t)  // the -32 offset: -32 * sum_s scale[s] * bsum[s]
        sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                   _mm256_slli_epi32(_mm256_madd_epi16(sc16, loadu256(y[t][b].bsums)), 5));
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = loadu256(x[b].ql + 64 * h), ql1 = loadu256(x[b].ql + 64 * h + 32);
        const __m256i qh = loadu256(x[b].qh + 32 * h);
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2)),
            _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2))};
        // This half's 8 scales in both 128-bit lanes.
        const __m256i sch = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                   : _mm256_permute2x128_si256(sc16, sc16, 0x11);
        for (int k = 0; k < 4; ++k) {
          const __m256i scl = _mm256_shuffle_epi8(sch, shuf[k]);
          for (int t = 0; t < NT; ++t) {
            const __m256i p = _mm256_maddubs_epi16(q[k], loadu256(y[t][b].qs + 128 * h + 32 * k));
            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, scl));
          }
        }
      }
      const float dx = h2f(x[b].d);
      for (int t = 0; t < NT; ++t)
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y[t][b].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (int t = 0; t < NT; ++t) out[t * ldo] = hsum_ps(acc[t]);
  }
};

template <int NT>
using F32K = FloatRow<LoadF32>::K<NT>;
template <int NT>
using F16K = FloatRow<LoadF16>::K<NT>;
template <int NT>
using BF16K = FloatRow<LoadBF16>::K<NT>;
template <int NT>
using Q8_0K = Q8Row<UnpackQ8_0>::K<NT>;
template <int NT>
using Q4_0K = Q8Row<UnpackQ4_0>::K<NT>;

// One F16 row against one token (decode): eight accumulators (64 weights, two 64-byte lines per
// step) and a software prefetch kPrefetchBytes ahead inside the loop. The two-accumulator FloatRow
// is bound by its FMA chains here (8 weights per FMA); eight were the fastest measured
// (docs/benchmarks/issue14-vs-llamacpp.md).
float f16_row_decode(const uint8_t* w, const float* x, int64_t n) {
  constexpr int kAcc = 8;
  const auto* h = reinterpret_cast<const uint16_t*>(w);
  __m256 acc[kAcc];
  for (int j = 0; j < kAcc; ++j) acc[j] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 * kAcc <= n; i += 8 * kAcc) {
    const uint8_t* p = w + 2 * i + kPrefetchBytes;  // may run past the row: prefetches never fault
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + 64), _MM_HINT_T0);
    for (int j = 0; j < kAcc; ++j)
      acc[j] = _mm256_fmadd_ps(f16x8_to_ps(h + i + 8 * j), _mm256_loadu_ps(x + i + 8 * j), acc[j]);
  }
  for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(f16x8_to_ps(h + i), _mm256_loadu_ps(x + i), acc[0]);
  for (int j = 1; j < kAcc; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  float s = hsum_ps(acc[0]);
  for (; i < n; ++i) s += _cvtsh_ss(h[i]) * x[i];
  return s;
}

}  // namespace

float dot_q8_0(const void* w, const void* act, int64_t n) { return dot1<Q8_0K>(w, act, n); }
float dot_q4_0(const void* w, const void* act, int64_t n) { return dot1<Q4_0K>(w, act, n); }
float dot_q4_K(const void* w, const void* act, int64_t n) { return dot1<Q4KRow>(w, act, n); }
float dot_q6_K(const void* w, const void* act, int64_t n) { return dot1<Q6KRow>(w, act, n); }

void tile_f32(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
              float* out, int64_t ldo) {
  tile_by_tokens<F32K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_f16(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
              float* out, int64_t ldo) {
  if (nt == 1) {  // decode
    for (int r = 0; r < nr; ++r) out[r] = f16_row_decode(w + r * ws, reinterpret_cast<const float*>(a), n);
    return;
  }
  tile_by_tokens<F16K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_bf16(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  tile_by_tokens<BF16K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q8_0(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  tile_by_tokens<Q8_0K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q4_0(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  tile_by_tokens<Q4_0K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q4_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  tile_by_tokens<Q4KRow>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q6_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  tile_by_tokens<Q6KRow>(w, ws, nr, a, as, nt, n, out, ldo);
}

}  // namespace kvs::kernels::avx2
