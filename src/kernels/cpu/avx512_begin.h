// Internal, for *_avx512.cpp files only: every function defined between this include and
// avx512_end.h is compiled for AVX-512 F/BW/DQ/VL/VNNI (+ AVX2, FMA, F16C) and must only run
// after use_avx512() said yes. Include every other header (standard library included) *before*
// this one, so no inline function or template of a shared header is emitted with AVX-512 code
// (the linker could pick that copy for generic callers); after it, only simd_avx2.h /
// simd_avx512.h (internal linkage) and the file's own code.
// (A pragma instead of per-file compiler flags: the build's globs give *_avx2.cpp files their
// flags; this keeps the AVX-512 files self-contained.)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"))), \
                             apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
// GCC 12's AVX-512 intrinsics start many results from _mm512_undefined_*(), which -Wall reports
// as uninitialised once inlined (a false positive of the compiler's own headers).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
