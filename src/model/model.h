// A loaded model: hyper-parameters, weight views (mmapped where possible), tokenizer.
// Load from a GGUF file or a Hugging Face directory (config.json + *.safetensors + tokenizer).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor_view.h"
#include "model/hparams.h"
#include "model/tokenizer/tokenizer.h"

namespace kvs {

class GgufFile;

struct LayerWeights {
  TensorView attn_norm;  // [n_embd] f32
  TensorView wq;         // [n_head*head_dim][n_embd]
  TensorView wk;         // [n_head_kv*head_dim][n_embd]
  TensorView wv;         // [n_head_kv*head_dim][n_embd]
  TensorView wo;         // [n_embd][n_head*head_dim]
  TensorView bq, bk, bv; // optional biases (Qwen2), f32
  TensorView wqkv;       // [(H + 2 Hkv) D][n_embd] fused Q/K/V as stored (Phi-3); wq/wk/wv are row views into it
  TensorView ffn_gate_up;  // [2 n_ff][n_embd] fused gate (first half) and up as stored (Phi-3); row views as above
  TensorView q_norm, k_norm;  // [head_dim] f32, per-head RMSNorm weights of Q and K (Qwen3), else invalid
  TensorView ffn_norm;   // [n_embd] f32
  TensorView post_attn_norm, post_ffn_norm;  // [n_embd] f32, Gemma 2's norms of the attention and FFN outputs
  TensorView ffn_gate;   // [n_ff][n_embd]
  TensorView ffn_up;     // [n_ff][n_embd]
  TensorView ffn_down;   // [n_embd][n_ff]
};

class Model {
 public:
  ~Model();
  // Loads a GGUF file, or a HF model directory (or its config.json). Throws kvs::Error with a
  // message naming the file, the tensor or key, and what was expected.
  static std::unique_ptr<Model> load(const std::string& path);

  HParams hp;
  TensorView tok_embd;     // [n_vocab][n_embd]
  TensorView output_norm;  // [n_embd] f32
  TensorView output;       // [n_vocab][n_embd] (== tok_embd when tied)
  std::vector<LayerWeights> layers;
  std::vector<float> rope_inv_freq;  // [rope_dim/2] inverse frequencies, scaling applied
  std::vector<float> rope_inv_freq_swa;  // [rope_dim/2] the local layers' own (hp.rope_theta_swa > 0), else empty
  std::vector<float> rope_freqs;     // [rope_dim/2] a GGUF's rope_freqs.weight divisors as read (empty
                                     // otherwise): written back verbatim by convert, since recomputing
                                     // them from rope_inv_freq can be 1 ulp off
  std::unique_ptr<Tokenizer> tokenizer;

  std::string path;         // what was loaded
  std::string format;       // "gguf" or "hf"
  std::string name;         // general.name or the directory name
  uint64_t fingerprint = 0; // identity of shape + weights (used by saved compressed contexts)

  // Bytes of weight data the model references (mmapped or owned).
  size_t weight_bytes() const;
  // Bytes of weight data currently resident in RAM (mincore over the mappings + owned buffers).
  size_t resident_bytes() const;

  // Keeps `data` alive for the model's lifetime and returns a view onto it (used for converted
  // norm weights, permuted tensors, ...).
  TensorView own_f32(const std::string& name, std::vector<float> data, std::array<int64_t, 4> ne, int n_dims);

  std::unique_ptr<GgufFile> gguf_file;
  std::vector<std::shared_ptr<const void>> keep_alive;  // other storage the views point into (HF files)

  // Weights repacked for the active kernels (Q4_0 / Q8_0 -> kernels/packed_weights.h): the original views'
  // data pointers (the registry keys) and the packed bytes. Unregistered by the destructor.
  struct Packed {
    const void* key;
    size_t bytes;
  };
  std::vector<Packed> packed;

 private:
  std::deque<std::vector<float>> owned_;
};

namespace detail {
// Filled by the format loaders; shared validation and finishing steps.
void load_gguf(Model& m, const std::string& path);
void load_hf(Model& m, const std::string& dir);
// Parses and validates a HF config.json (llama / mistral / qwen2).
HParams hparams_from_hf_config(const std::string& config_json_path);
// Validates every weight's presence/shape/type, converts norm/bias weights to f32, computes
// rope frequencies and the fingerprint. `src` names the file for messages.
void finish_model(Model& m, const std::string& src);
// Repacks the Q4_0 / Q8_0 matrices (wq..ffn_down, output) for the active kernel table when it has
// the type's packed tile (kernels/packed_weights.h) and KVS_NO_REPACK is unset; the mapped GGUF pages of a
// repacked tensor are released (MADV_DONTNEED; re-read from the file if anything else reads them).
void repack_weights(Model& m);
// Inverse RoPE frequencies for hp (rope_theta, rope_dim, llama3/linear scaling).
std::vector<float> rope_inv_freq(const HParams& hp);
}  // namespace detail

}  // namespace kvs
