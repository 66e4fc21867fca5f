// llama.cpp's quantization presets (`llama-quantize IN OUT Q4_K_M`): the per-tensor type mix each
// preset writes, so that `kvshrink convert --preset q4_k_m` makes the files users download.
//
// Written from llama.cpp's src/llama-quant.cpp (llama_tensor_get_type, llama_model_quantize_impl)
// and examples/quantize/quantize.cpp at the 2025-02-20 snapshot (c392e50), for dense llama/qwen2
// models, no importance matrix, default options (no --pure, output tensor quantized):
//  - quantized: 2-D tensors named *.weight, not *_norm.weight; norms, biases and rope_freqs stay F32;
//  - output.weight — or token_embd.weight when the model has no output.weight (tied embeddings) —
//    becomes Q6_K (Q8_0 stays Q8_0; Q8_0 when the row length is not a multiple of the base
//    type's block); an untied token_embd keeps the base type;
//  - attn_v, ffn_down and attn_output take per-preset rules by layer (use_more_bits: the first and
//    last eighth of the layers and every third one in between), some on the GQA ratio n_gqa >= 4,
//    and attn_v of an 80-layer model (llama.cpp's "70B") never below Q5_K for Q3_K/Q4_K;
//  - a row length that is not a multiple of the chosen type's block falls back: Q2_K, Q3_K,
//    IQ4_XS -> IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 if that does not divide
//    either; for the 32-element types there is no fallback: llama-quantize refuses the model.
// The rule list and its line references: the comments in quant_mix.cpp. Checked against
// llama.cpp's libllama on five shapes and every preset (16,986 tensors, no difference; the
// script `scripts/compare-llamacpp-quant-mix` repeats it with llama-quantize).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/hparams.h"

namespace kvs {

enum class QuantFtype {
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K,
  IQ4_NL, IQ4_XS, F16, BF16
};

struct QuantPreset {
  std::string name;  // llama-quantize's name, upper case (Q4_K_M)
  QuantFtype ftype;
  DType base;        // the type most tensors get
};

// Every preset llama-quantize offers without an importance matrix.
const std::vector<QuantPreset>& quant_presets();
// By name, case-insensitive, with llama-quantize's aliases (Q3_K = Q3_K_M, Q4_K = Q4_K_M,
// Q5_K = Q5_K_M); nullopt if unknown. Presets that need an importance matrix (IQ2_*, IQ1_*,
// Q2_K_S, IQ3_*) throw kvs::Error saying so.
std::optional<QuantPreset> find_quant_preset(const std::string& name);
// "Q2_K, Q3_K_S, ..." for messages.
std::string quant_preset_names();

// What the per-tensor rules need to know of the model.
struct QuantMixModel {
  int n_layer = 0;
  int n_gqa = 1;            // n_head / n_head_kv (integer division, as llama.cpp)
  bool has_output = true;   // an output.weight tensor (false: tied embeddings)
  bool is_70b = false;      // llama.cpp's LLM_TYPE_70B (llama/qwen2 with 80 layers)
};
QuantMixModel quant_mix_model(const HParams& hp);

// The type `preset` gives the 2-D weight `gguf_name` (e.g. "blk.3.attn_v.weight") whose rows have
// `row_len` elements. Throws kvs::Error (naming the tensor) where llama-quantize refuses: a
// 32-element base type and a row length that is not a multiple of 32.
DType quant_mix_type(const QuantPreset& preset, const QuantMixModel& m, const std::string& gguf_name, int64_t row_len);

}  // namespace kvs
