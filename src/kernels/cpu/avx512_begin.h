// Internal, for *_avx512.cpp files only: every function defined between this include and
// avx512_end.h is compiled for AVX-512 F/BW/DQ/VL/VNNI (+ AVX2, FMA, F16C) and must only run
// after use_avx512() said yes. Include every other header (standard library included) *before*
// this one, so no inline function or template of a shared header is emitted with AVX-512 code
// (the linker could pick that copy for generic callers); after it, only simd_avx2.h /
// simd_avx512.h (internal linkage) and the file's own code.
// (A pragma instead of per-file compiler flags: the build's globs give *_avx2.cpp files their
// flags; this keeps the AVX-512 files self-contained.)
// A file that also needs AVX512_BF16 (attn_bf16_avx512.cpp, only called when
// cpu_features().avx512bf16) defines KVS_AVX512_BF16 before including this.
#if defined(__clang__)
#if defined(KVS_AVX512_BF16)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512bf16"))), \
                             apply_to = function)
#else
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"))), \
                             apply_to = function)
#endif
#elif defined(__GNUC__)
#pragma GCC push_options
#if defined(KVS_AVX512_BF16)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512bf16")
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#endif
// GCC 12's AVX-512 intrinsics start many results from _mm512_undefined_*(), which -Wall reports
// as uninitialised once inlined (a false positive of the compiler's own headers).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
