// Quantised block formats, bit-exact with ggml's GGUF layouts (ggml-common.h), and the small
// unpacking helpers every reader of them shares (scalar reference, SIMD kernels, quantisers).
//
// Dimension legend: QK = 32 elements per Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL block, QK_K = 256
// elements per K-quant / IQ4_XS super-block, s = sub-block, j = element within a block.
//
// Value of element j in each format (d, dmin, m: fp16 unless noted):
//   Q8_0:   d * qs[j]                                   qs int8 in [-127, 127]
//   Q4_0:   d * (nib(j) - 8)     nib(j) = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4
//   Q4_1:   d * nib(j) + m
//   Q5_0:   d * (q(j) - 16)      q(j) = nib(j) | bit j of qh (a little-endian uint32) << 4
//   Q5_1:   d * q(j) + m
//   IQ4_NL: d * kIQ4NLValues[nib(j)]
//   Q2_K:   d * (scales[s] & 15) * q - dmin * (scales[s] >> 4)    s = j / 16, q in [0, 3] =
//           (qs[32 * (j / 128) + j % 32] >> (2 * (j % 128 / 32))) & 3      (see q2_K_quant)
//   Q3_K:   d * (sc[s] - 32) * (q - 4 * !hbit)   s = j / 16, sc 6-bit (q3_K_scale), q as Q2_K's,
//           hbit = bit j / 32 of hmask[j % 32]
//   Q4_K:   d * sc[s] * q - dmin * m[s]  s = j / 32 sub-block, q in [0, 15], sc/m 6-bit,
//           qs[32 * (s / 2) + j % 32] holds q in its low (s even) or high (s odd) nibble
//   Q5_K:   as Q4_K with q in [0, 31]; the fifth bit is bit s of qh[j % 32]
//   Q6_K:   d * scales[j / 16] * (q - 32)   q in [0, 63], 4 low bits in ql, 2 high bits in qh
//   IQ4_XS: d * (ls[s] - 32) * kIQ4NLValues[nib]   s = j / 32, ls 6-bit: 4 low bits in
//           scales_l[s / 2] (nibble s % 2), 2 high bits at 2s in scales_h; nib of j in
//           qs[16 s + j % 16], low nibble for j % 32 < 16, high otherwise
//   Q8_K:   d (float) * qs[j]; bsums[k] = sum of qs[16k .. 16k+15] (activation format only)
#pragma once
#include <cstddef>
#include <cstdint>

namespace kvs::kernels {

inline constexpr int QK8_0 = 32;
inline constexpr int QK4_0 = 32;
inline constexpr int QK4_1 = 32;
inline constexpr int QK5_0 = 32;
inline constexpr int QK5_1 = 32;
inline constexpr int QK4_NL = 32;
inline constexpr int QK_K = 256;
inline constexpr int K_SCALE_SIZE = 12;

// The 16 non-linear levels of IQ4_NL and IQ4_XS (ggml-common.h kvalues_iq4nl).
inline constexpr int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

struct block_q8_0 {
  uint16_t d;       // fp16 scale
  int8_t qs[QK8_0];  // [32]
};
static_assert(sizeof(block_q8_0) == 34);

struct block_q4_0 {
  uint16_t d;            // fp16 scale
  uint8_t qs[QK4_0 / 2];  // [16] low nibble = element j, high nibble = element j + 16
};
static_assert(sizeof(block_q4_0) == 18);

struct block_q4_1 {
  uint16_t d;            // fp16 scale
  uint16_t m;            // fp16 offset (the block minimum)
  uint8_t qs[QK4_1 / 2];  // [16] low nibble = element j, high nibble = element j + 16
};
static_assert(sizeof(block_q4_1) == 20);

struct block_q5_0 {
  uint16_t d;            // fp16 scale
  uint8_t qh[4];         // [4] fifth bits: bit j (little-endian uint32) for element j
  uint8_t qs[QK5_0 / 2];  // [16] low 4 bits, as Q4_0
};
static_assert(sizeof(block_q5_0) == 22);

struct block_q5_1 {
  uint16_t d;            // fp16 scale
  uint16_t m;            // fp16 offset
  uint8_t qh[4];         // [4] fifth bits, as Q5_0
  uint8_t qs[QK5_1 / 2];  // [16] low 4 bits
};
static_assert(sizeof(block_q5_1) == 24);

struct block_iq4_nl {
  uint16_t d;             // fp16 scale
  uint8_t qs[QK4_NL / 2];  // [16] indices into kIQ4NLValues, Q4_0 nibble order
};
static_assert(sizeof(block_iq4_nl) == 18);

struct block_q2_K {
  uint8_t scales[QK_K / 16];  // [16] per 16 elements: low nibble scale, high nibble min
  uint8_t qs[QK_K / 4];       // [64] 2-bit quants (see q2_K_quant)
  uint16_t d;                 // fp16 super-block scale for the scales
  uint16_t dmin;              // fp16 super-block scale for the mins
};
static_assert(sizeof(block_q2_K) == 84);

struct block_q3_K {
  uint8_t hmask[QK_K / 8];  // [32] third bits: bit j / 32 of hmask[j % 32]
  uint8_t qs[QK_K / 4];     // [64] low 2 bits, as Q2_K
  uint8_t scales[12];       // [12] 16 6-bit scales (see q3_K_scale)
  uint16_t d;               // fp16 super-block scale
};
static_assert(sizeof(block_q3_K) == 110);

struct block_q4_K {
  uint16_t d;                    // fp16 super-block scale for the 6-bit scales
  uint16_t dmin;                 // fp16 super-block scale for the 6-bit mins
  uint8_t scales[K_SCALE_SIZE];  // [12] 8 scales + 8 mins, 6 bits each (see q4_K_scale_min)
  uint8_t qs[QK_K / 2];          // [128] 4-bit quants, 64-element groups of 32 bytes
};
static_assert(sizeof(block_q4_K) == 144);

struct block_q5_K {
  uint16_t d;                    // fp16 super-block scale for the 6-bit scales
  uint16_t dmin;                 // fp16 super-block scale for the 6-bit mins
  uint8_t scales[K_SCALE_SIZE];  // [12] as Q4_K
  uint8_t qh[QK_K / 8];          // [32] fifth bits: bit j / 32 of qh[j % 32]
  uint8_t qs[QK_K / 2];          // [128] low 4 bits, as Q4_K
};
static_assert(sizeof(block_q5_K) == 176);

struct block_q6_K {
  uint8_t ql[QK_K / 2];      // [128] low 4 bits
  uint8_t qh[QK_K / 4];      // [64] high 2 bits
  int8_t scales[QK_K / 16];  // [16] 8-bit sub-block scales
  uint16_t d;                // fp16 super-block scale
};
static_assert(sizeof(block_q6_K) == 210);

struct block_iq4_xs {
  uint16_t d;                // fp16 super-block scale
  uint16_t scales_h;         // high 2 bits of the 8 sub-block scales (bits 2s, 2s+1)
  uint8_t scales_l[QK_K / 64];  // [4] low 4 bits of the 8 sub-block scales (two per byte)
  uint8_t qs[QK_K / 2];      // [128] indices into kIQ4NLValues, 16 bytes per 32-element sub-block
};
static_assert(sizeof(block_iq4_xs) == 136);

struct block_q8_K {
  float d;                    // float scale
  int8_t qs[QK_K];            // [256] in [-127, 127]
  int16_t bsums[QK_K / 16];   // [16] sums of 16-element groups
};
static_assert(sizeof(block_q8_K) == 292);

// 6-bit scale/min j (0..7) of a Q4_K or Q5_K block, as ggml's get_scale_min_k4.
inline void q4_K_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// 6-bit scale s (0..15) of a Q3_K block, in [0, 63] (the value uses it minus 32): low 4 bits in
// the low (s < 8) or high nibble of scales[s % 8], high 2 bits at 2 * (s / 4) in scales[8 + s % 4].
inline int q3_K_scale(int s, const uint8_t* scales) {
  const int low = s < 8 ? (scales[s] & 0xF) : (scales[s - 8] >> 4);
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return low | (high << 4);
}

// 2-bit quant of element j (0..255) of a Q2_K or Q3_K qs array: each 128-element half h uses
// qs[32h .. 32h + 31], its quarter k (32 elements) the bits 2k, 2k+1.
inline int q2_K_quant(const uint8_t* qs, int j) {
  return (qs[32 * (j / 128) + j % 32] >> (2 * (j % 128 / 32))) & 3;
}

// 6-bit scale s (0..7) of an IQ4_XS block, in [0, 63] (the value uses it minus 32).
inline int iq4_xs_scale(int s, const block_iq4_xs& b) {
  return ((b.scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((b.scales_h >> (2 * s)) & 3) << 4);
}

}  // namespace kvs::kernels
