// Runtime CPU feature detection for kernel dispatch.
#pragma once

namespace kvs::kernels {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  // AVX-512 subsets the avx512 kernel table needs (with avx512f), and OS support for the ZMM and
  // mask registers (XCR0).
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  // AVX512_BF16 (VDPBF16PS): the BF16 attention tiles (ops.h, qk_panels_bf16) use it when present.
  bool avx512bf16 = false;
  bool os_avx512 = false;
};

const CpuFeatures& cpu_features();

// True when the AVX2+FMA+F16C kernels are used. KVS_FORCE_GENERIC=1 in the environment turns
// them off (to test the portable path on an AVX2 machine).
bool use_avx2();

// True when the AVX-512 (F, BW, DQ, VL, VNNI) kernels are used: use_avx2() and the CPU and OS
// support them. KVS_NO_AVX512=1 in the environment turns them off (the AVX2 table is used).
bool use_avx512();

}  // namespace kvs::kernels
