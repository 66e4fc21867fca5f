// Writes ggml_quant_reference.inc: llama.cpp's own quantisers (ggml-quants.c, linked in by
// make_ggml_quant_reference.sh) applied to fixture_input(), as hex per type. Not part of the
// build: the .inc it writes is committed, and tests/kernels/quant_weights_test.cpp checks
// kvshrink's quantisers against it byte for byte.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/fp16.h"
#include "quant_fixture_input.h"

extern "C" {
// ggml-quants.c entry points (block pointers as void*: the layouts are checked on our side).
void quantize_row_q4_0_ref(const float*, void*, int64_t);
void quantize_row_q4_1_ref(const float*, void*, int64_t);
void quantize_row_q5_0_ref(const float*, void*, int64_t);
void quantize_row_q5_1_ref(const float*, void*, int64_t);
void quantize_row_q8_0_ref(const float*, void*, int64_t);
void quantize_row_q2_K_ref(const float*, void*, int64_t);
void quantize_row_q3_K_ref(const float*, void*, int64_t);
void quantize_row_q4_K_ref(const float*, void*, int64_t);
void quantize_row_q5_K_ref(const float*, void*, int64_t);
void quantize_row_q6_K_ref(const float*, void*, int64_t);
size_t quantize_iq4_nl(const float*, void*, int64_t, int64_t, const float*);
size_t quantize_iq4_xs(const float*, void*, int64_t, int64_t, const float*);

// What ggml-quants.c needs from the rest of ggml: the fp16 table (filled below) and aborts.
float ggml_table_f32_f16[1 << 16];
void ggml_abort(const char*, int, const char*, ...) { std::abort(); }
size_t ggml_row_size(int, int64_t) { std::abort(); }
const char* ggml_type_name(int) { return "?"; }
size_t ggml_type_size(int) { std::abort(); }
}

namespace {

using Fn = void (*)(const float*, void*, int64_t);

// llama-quantize's calls for a file made without an importance matrix (ggml_quantize_chunk ->
// quantize_<type>(..., quant_weights = NULL)): the _ref rows, except IQ4_NL/IQ4_XS.
void iq4_nl(const float* x, void* y, int64_t n) { quantize_iq4_nl(x, y, 1, n, nullptr); }
void iq4_xs(const float* x, void* y, int64_t n) { quantize_iq4_xs(x, y, 1, n, nullptr); }

struct Type {
  const char* name;
  int block, bytes;
  Fn fn;
};

}  // namespace

int main() {
  for (int i = 0; i < (1 << 16); ++i) ggml_table_f32_f16[i] = kvs::fp16_to_fp32(static_cast<uint16_t>(i));
  const std::vector<float> x = kvs::kernels::test::fixture_input();
  const int64_t n = static_cast<int64_t>(x.size());
  const Type types[] = {{"q4_0", 32, 18, quantize_row_q4_0_ref},  {"q4_1", 32, 20, quantize_row_q4_1_ref},
                        {"q5_0", 32, 22, quantize_row_q5_0_ref},  {"q5_1", 32, 24, quantize_row_q5_1_ref},
                        {"q8_0", 32, 34, quantize_row_q8_0_ref},  {"q2_k", 256, 84, quantize_row_q2_K_ref},
                        {"q3_k", 256, 110, quantize_row_q3_K_ref}, {"q4_k", 256, 144, quantize_row_q4_K_ref},
                        {"q5_k", 256, 176, quantize_row_q5_K_ref}, {"q6_k", 256, 210, quantize_row_q6_K_ref},
                        {"iq4_nl", 32, 18, iq4_nl},               {"iq4_xs", 256, 136, iq4_xs}};
  std::printf("// Made by tests/kernels/data/make_ggml_quant_reference.sh from llama.cpp's ggml-quants.c:\n"
              "// {type, hex of its quantisation of fixture_input()}. Do not edit.\n");
  for (const Type& t : types) {
    std::vector<uint8_t> y(static_cast<size_t>(n / t.block * t.bytes));
    t.fn(x.data(), y.data(), n);
    std::printf("{\"%s\",\n \"", t.name);
    for (size_t i = 0; i < y.size(); ++i) {
      std::printf("%02x", y[i]);
      if (i % 64 == 63 && i + 1 < y.size()) std::printf("\"\n \"");
    }
    std::printf("\"},\n");
  }
  return 0;
}
