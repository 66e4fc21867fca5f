// Model hyper-parameters, read from GGUF metadata or a HF config.json.
#pragma once
#include <string>

#include "kernels/ops.h"

namespace kvs {

enum class Arch { Llama, Qwen2, Qwen3, Phi3 };

// The names a file gives an architecture: GGUF's general.architecture, HF's model_type and
// architectures[0].
const char* gguf_arch_name(Arch a);
const char* hf_model_type(Arch a);
const char* hf_architecture(Arch a);

struct RopeScaling {
  std::string type = "none";  // "none", "linear", "llama3"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int original_max_pos = 8192;    // llama3
};

struct HParams {
  Arch arch = Arch::Llama;
  std::string arch_name = "llama";  // as the file names it
  int n_vocab = 0;
  int n_embd = 0;       // hidden size
  int n_layer = 0;
  int n_head = 0;       // query heads
  int n_head_kv = 0;    // key/value heads (GQA: n_head % n_head_kv == 0)
  int head_dim = 0;
  int n_ff = 0;         // SwiGLU inner size
  int n_ctx_train = 0;  // context length the model was trained for
  int rope_dim = 0;     // rotated dims per head (usually head_dim)
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  kernels::RopeStyle rope_style = kernels::RopeStyle::Interleaved;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  int n_swa = 0;         // sliding window on every layer: a query sees keys at most n_swa - 1 positions back
                         // (llama.cpp's n_swa; Phi-3-mini-4k: 2047); 0 = none
  bool qk_norm = false;  // per-head RMSNorm of queries and keys after the projection, before RoPE (Qwen3)

  int n_group() const { return n_head / n_head_kv; }  // query heads per KV head
  // Throws kvs::Error (naming `source`) when values are inconsistent.
  void validate(const std::string& source) const;
  std::string summary() const;
};

}  // namespace kvs
