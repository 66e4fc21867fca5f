// llama-quantize's per-tensor types (see quant_mix.h). Line references are to llama.cpp at
// c392e50 (2025-02-20): LQ = src/llama-quant.cpp, QC = examples/quantize/quantize.cpp.
#include "model/quant_mix.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace kvs {

namespace {

using F = QuantFtype;

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

int64_t block(DType t) { return dtype_info(t).block_size; }

// LQ:129-131: the first and last eighth of the layers, and every third layer in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// "blk.12.attn_v.weight" -> 12; -1 for tensors outside the blocks. (llama.cpp counts attn_v and
// ffn_down tensors in file order, layer by layer: for a dense model the count is the layer index.)
int layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos) return -1;
  int v = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

const std::vector<QuantPreset>& quant_presets() {
  // QC:18-56 (names), LQ:470-507 (base types).
  static const std::vector<QuantPreset> v = {
      {"Q4_0", F::Q4_0, DType::Q4_0},       {"Q4_1", F::Q4_1, DType::Q4_1},       {"Q5_0", F::Q5_0, DType::Q5_0},
      {"Q5_1", F::Q5_1, DType::Q5_1},       {"Q8_0", F::Q8_0, DType::Q8_0},       {"Q2_K", F::Q2_K, DType::Q2_K},
      {"Q3_K_S", F::Q3_K_S, DType::Q3_K},   {"Q3_K_M", F::Q3_K_M, DType::Q3_K},   {"Q3_K_L", F::Q3_K_L, DType::Q3_K},
      {"Q4_K_S", F::Q4_K_S, DType::Q4_K},   {"Q4_K_M", F::Q4_K_M, DType::Q4_K},   {"Q5_K_S", F::Q5_K_S, DType::Q5_K},
      {"Q5_K_M", F::Q5_K_M, DType::Q5_K},   {"Q6_K", F::Q6_K, DType::Q6_K},       {"IQ4_NL", F::IQ4_NL, DType::IQ4_NL},
      {"IQ4_XS", F::IQ4_XS, DType::IQ4_XS}, {"F16", F::F16, DType::F16},          {"BF16", F::BF16, DType::BF16}};
  return v;
}

std::string quant_preset_names() {
  std::string s;
  for (const auto& p : quant_presets()) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

std::optional<QuantPreset> find_quant_preset(const std::string& name) {
  std::string n = upper(name);
  if (n == "Q3_K") n = "Q3_K_M";  // QC:36, :43, :46
  if (n == "Q4_K") n = "Q4_K_M";
  if (n == "Q5_K") n = "Q5_K_M";
  // QC:421-430: refused without an importance matrix.
  for (const char* im : {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "Q2_K_S", "IQ1_S", "IQ1_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M"})
    if (n == im)
      fail("preset {} needs an importance matrix (llama-quantize --imatrix), which kvshrink does not compute; the presets "
           "that work without one: {}",
           n, quant_preset_names());
  for (const auto& p : quant_presets())
    if (p.name == n) return p;
  return std::nullopt;
}

QuantMixModel quant_mix_model(const HParams& hp) {
  QuantMixModel m;
  m.n_layer = hp.n_layer;
  m.n_gqa = hp.n_head_kv > 0 ? hp.n_head / hp.n_head_kv : 1;
  m.has_output = !hp.tied_embeddings;
  m.is_70b = hp.n_layer == 80;  // llama-model.cpp: LLM_TYPE_70B for llama and qwen2 at 80 layers
  return m;
}

DType quant_mix_type(const QuantPreset& p, const QuantMixModel& m, const std::string& name, int64_t nx) {
  DType t = p.base;
  if (p.ftype == F::F16 || p.ftype == F::BF16) return t;  // LQ:778: no mixture for float presets
  const F f = p.ftype;
  const int i = layer_of(name), n = m.n_layer;
  if (name == "output.weight" || (!m.has_output && name == "token_embd.weight")) {
    // LQ:151-167: the output projection (the tied token_embd stands for it).
    if (nx % block(t) != 0)
      t = DType::Q8_0;
    else if (t != DType::Q8_0)
      t = DType::Q6_K;
  } else if (name == "token_embd.weight") {
    // LQ:170-187: changed only for the IQ1/IQ2/IQ3_XXS ftypes; stays the base type.
  } else if (contains(name, "attn_v.weight")) {  // LQ:212-249
    if (f == F::Q2_K)
      t = m.n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
    else if (f == F::Q3_K_M)
      t = i < 2 ? DType::Q5_K : DType::Q4_K;
    else if (f == F::Q3_K_L)
      t = DType::Q5_K;
    else if ((f == F::IQ4_NL || f == F::IQ4_XS) && m.n_gqa >= 4)
      t = DType::Q5_K;
    else if ((f == F::Q4_K_M || f == F::Q5_K_M) && use_more_bits(i, n))
      t = DType::Q6_K;
    else if (f == F::Q4_K_S && i < 4)
      t = DType::Q5_K;
    if (m.is_70b && (t == DType::Q3_K || t == DType::Q4_K)) t = DType::Q5_K;  // LQ:238-243
  } else if (contains(name, "ffn_down")) {  // LQ:269-313 (n_ffn_down = n_layer)
    if (f == F::Q2_K)
      t = DType::Q3_K;
    else if (f == F::Q3_K_M)
      t = i < n / 16 ? DType::Q5_K : DType::Q4_K;
    else if (f == F::Q3_K_L)
      t = DType::Q5_K;
    else if (f == F::Q4_K_M) {
      if (use_more_bits(i, n)) t = DType::Q6_K;
    } else if (i < n / 8 && (f == F::IQ4_NL || f == F::IQ4_XS))
      t = DType::Q5_K;  // without an importance matrix
    else if (f == F::Q5_K_M && use_more_bits(i, n))
      t = DType::Q6_K;
    else if (f == F::Q4_K_S && i < n / 8)
      t = DType::Q5_K;
  } else if (contains(name, "attn_output.weight")) {  // LQ:314-333 (dense, not Falcon)
    if (f == F::Q2_K)
      t = DType::Q3_K;
    else if (f == F::Q3_K_M)
      t = DType::Q4_K;
    else if (f == F::Q3_K_L)
      t = DType::Q5_K;
  } else if (contains(name, "attn_qkv.weight")) {  // LQ:334-340 (fused QKV; not in llama/qwen2 files)
    if (f == F::Q3_K_M || f == F::Q3_K_L)
      t = DType::Q4_K;
    else if (f == F::Q4_K_M)
      t = DType::Q5_K;
    else if (f == F::Q5_K_M)
      t = DType::Q6_K;
  }
  // attn_q, attn_k, ffn_gate, ffn_up: unchanged for these presets (only IQ3_XS / n_expert rules).
  // LQ:369-407: a row length the block does not divide.
  if (nx % block(t) != 0) {
    const DType before = t;
    switch (t) {
      case DType::Q2_K:
      case DType::Q3_K:
      case DType::IQ4_XS: t = DType::IQ4_NL; break;
      case DType::Q4_K: t = DType::Q5_0; break;
      case DType::Q5_K: t = DType::Q5_1; break;
      case DType::Q6_K: t = DType::Q8_0; break;
      default:
        fail("preset {}: tensor '{}' has rows of {} elements, not a multiple of {}'s block of {}; llama-quantize refuses "
             "this model too (use a K preset, whose fallbacks handle it, or --type)",
             p.name, name, nx, dtype_name(before), block(before));
    }
    if (nx % block(t) != 0) t = DType::F16;
  }
  return t;
}

}  // namespace kvs
