// The RoPE rotation table on the host: (cos, sin) of each position times each inverse frequency,
// in double then rounded to float. One definition for the forward (Backend::rope_cos_sin on the
// CPU) and for the host-side tables presses build (runtime/arch/forward.h: rope_table), so a
// press's queries rotate exactly as the forward's.
#pragma once
#include <cstdint>
#include <span>

namespace kvs::backend {

// out [n][2 * inv_freq.size()]: out[t][2i] = cos(pos[t] * inv_freq[i]), out[t][2i + 1] = sin(...).
void rope_cos_sin_host(std::span<const float> inv_freq, const int32_t* pos, int n, float* out);

}  // namespace kvs::backend
