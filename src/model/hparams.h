// Model hyper-parameters, read from GGUF metadata or a HF config.json.
#pragma once
#include <cmath>
#include <string>

#include "kernels/ops.h"

namespace kvs {

enum class Arch { Llama, Qwen2, Qwen3, Phi3, Gemma2, Gemma3 };

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
  int n_swa = 0;         // sliding window of the local layers: a query sees keys at most n_swa - 1 positions
                         // back (llama.cpp's n_swa; Phi-3-mini-4k: 2047, Gemma 2: 4096); 0 = none
  int swa_period = 0;    // which layers are local: 0 = every layer (Phi-3); p > 0 = every layer but each p-th
                         // (layer il is global iff (il + 1) % p == 0: Gemma 2 p = 2, even layers local;
                         // Gemma 3 p = 6, five local layers for each global one)
  float rope_theta_swa = 0;  // RoPE base of the local layers, without rope_scaling (Gemma 3: 10,000 while the
                             // global layers use rope_theta = 1e6 with its scaling); 0 = one table for all
  // Gemma 2 and 3 (0 / false elsewhere):
  float attn_softcap = 0;   // attention logits s -> c * tanh(s / c) (attn_logit_softcapping; 50)
  float final_softcap = 0;  // output logits idem (final_logit_softcapping; 30)
  float query_scale = 0;    // attention scale; 0 = 1 / sqrt(head_dim) (Gemma 2: query_pre_attn_scalar^-1/2)
  bool gemma_block = false; // embeddings times sqrt(n_embd), norms after attention and FFN, GeGLU (tanh GELU)
  bool qk_norm = false;  // per-head RMSNorm of queries and keys after the projection, before RoPE (Qwen3, Gemma 3)

  int n_group() const { return n_head / n_head_kv; }  // query heads per KV head
  // A local (sliding-window) layer: its queries see only the last n_swa positions.
  bool layer_slides(int il) const { return n_swa > 0 && (swa_period == 0 || (il + 1) % swa_period != 0); }
  // Layer il rotates with the local layers' own RoPE table (rope_theta_swa, Gemma 3).
  bool layer_local_rope(int il) const { return rope_theta_swa > 0 && layer_slides(il); }
  float attn_scale() const { return query_scale > 0 ? query_scale : 1.0f / std::sqrt(static_cast<float>(head_dim)); }
  // Throws kvs::Error (naming `source`) when values are inconsistent.
  void validate(const std::string& source) const;
  std::string summary() const;
};

}  // namespace kvs
