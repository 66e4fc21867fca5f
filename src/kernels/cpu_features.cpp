#include "kernels/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace kvs::kernels {
namespace {

bool env_on(const char* name) {
  const char* e = std::getenv(name);
  return e && *e && std::strcmp(e, "0") != 0;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    unsigned a, b, cx, d;
    __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(cx), "=d"(d) : "a"(1), "c"(0));
    c.f16c = (cx >> 29) & 1;  // every AVX2 CPU has F16C; cpuid leaf 1 ECX bit 29
    const bool osxsave = (cx >> 27) & 1;
    unsigned max_leaf;
    __asm__("cpuid" : "=a"(max_leaf), "=b"(b), "=c"(cx), "=d"(d) : "a"(0), "c"(0));
    if (max_leaf >= 7) {
      __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(cx), "=d"(d) : "a"(7), "c"(0));
      c.avx512f = (b >> 16) & 1;
      c.avx512dq = (b >> 17) & 1;
      c.avx512bw = (b >> 30) & 1;
      c.avx512vl = (b >> 31) & 1;
      c.avx512vnni = (cx >> 11) & 1;
      const unsigned max_sub = a;
      if (max_sub >= 1) {
        __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(cx), "=d"(d) : "a"(7), "c"(1));
        c.avx512bf16 = (a >> 5) & 1;  // leaf 7 subleaf 1 EAX bit 5
      }
    }
    if (osxsave) {
      unsigned lo, hi;
      __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      c.os_avx512 = (lo & 0xE6) == 0xE6;  // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM state enabled
    }
#endif
    return c;
  }();
  return f;
}

bool use_avx2() {
  static const bool on = [] {
    if (env_on("KVS_FORCE_GENERIC")) return false;
    const auto& f = cpu_features();
    return f.avx2 && f.fma && f.f16c;
  }();
  return on;
}

bool use_avx512() {
  static const bool on = [] {
    if (!use_avx2() || env_on("KVS_NO_AVX512")) return false;
    const auto& f = cpu_features();
    return f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx512vnni && f.os_avx512;
  }();
  return on;
}

}  // namespace kvs::kernels
