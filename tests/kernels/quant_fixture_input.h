// The input row of the llama.cpp quantiser fixture (tests/kernels/data/ggml_quant_reference.inc):
// 8 super-blocks of 256 values with the characters weights have and the corners quantisers trip
// on. Integer generator and float arithmetic only (no libm, no <random> distributions), so the
// fixture maker (data/ggml_quant_fixture.cpp, linked with llama.cpp's ggml-quants.c) and the test
// see the same floats on every platform.
#pragma once
#include <cstdint>
#include <vector>

namespace kvs::kernels::test {

inline constexpr int kFixtureSuperBlocks = 8;
inline constexpr int kFixtureN = 256 * kFixtureSuperBlocks;

struct FixtureRng {
  uint64_t s;
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1), exact
  // Approximately standard normal: a centred sum of four uniforms (Irwin-Hall), scaled to unit variance.
  float normal() {
    float s = uniform();  // one call per statement: the order of the draws is fixed
    s += uniform();
    s += uniform();
    s += uniform();
    return (s - 2.0f) * 1.7320508f;
  }
};

inline std::vector<float> fixture_input() {
  FixtureRng rng{2025};
  std::vector<float> x(kFixtureN);
  for (int i = 0; i < kFixtureN; ++i) {
    const int sb = i / 256, j = i % 256;
    float v = 0.02f * rng.normal();
    switch (sb) {
      case 0: break;                                                        // typical weights
      case 1: if (j % 37 == 5) v *= 8.0f; break;                            // outliers
      case 2: v = 0.05f * (2.0f * rng.uniform() - 1.0f); break;             // uniform (make-model)
      case 3: v = (v < 0 ? -v : v) + 0.01f; break;                          // all positive
      case 4:                                                               // 32-element corners
        if (j < 32) v = 0.0f;                                               //   all zero
        else if (j < 64) v = 0.5f;                                          //   constant
        else if (j < 96) v = (j % 8 == 3) ? 1.0f : 0.0f;                    //   sparse
        else if (j < 128) v = -0.0f;                                        //   negative zero
        else if (j < 160) v = static_cast<float>(j - 144) * 0.25f;          //   on a grid
        else if (j < 192) v = j == 160 ? 127.0f : static_cast<float>(j - 176) + 0.5f;  // Q8_0 ties (d = 1)
        break;
      case 5: v *= static_cast<float>(1 << (j / 32)) * 0.0625f; break;      // scales 1/16 .. 8 by sub-block
      case 6: v *= 1e-12f; break;                                           // tiny
      case 7: v *= 3e3f; break;                                             // large
    }
    x[i] = v;
  }
  return x;
}

}  // namespace kvs::kernels::test
