// Internal: closes the AVX-512 region opened by avx512_begin.h.
#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif
