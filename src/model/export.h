// Writing a loaded (or generated) model out: GGUF (readable by llama.cpp) and Hugging Face
// directories (config.json + model.safetensors + tokenizer). Handles the two RoPE layouts: GGUF
// `llama` stores Q/K rows permuted for interleaved-pair RoPE, HF stores them for rotate-half.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_view.h"
#include "model/hparams.h"
#include "model/quant_mix.h"
#include "model/tokenizer/tokenizer.h"

namespace kvs {

class AtomicDir;
class GgufWriter;
class Model;

// Row permutation of a Q or K projection [n_heads*head_dim][cols] between the HF (rotate-half)
// and GGUF-llama (interleaved pairs) layouts, for any element type (whole rows move).
// to_interleaved: HF -> GGUF (llama.cpp convert_hf_to_gguf's permute); else GGUF -> HF.
std::vector<uint8_t> permute_qk_rows(const TensorView& t, int n_heads, bool to_interleaved);

// GGUF metadata for hyper-parameters ("{arch}.*", general.*).
void write_hparams_gguf(GgufWriter& w, const HParams& hp, const std::string& name);
// GGUF metadata for a vocabulary: tokenizer.ggml.* as llama.cpp reads them, plus kvshrink's own
// kGgufNormalizerKey (the normalizer steps GGUF cannot name, e.g. Qwen's NFC; always written)
// and kGgufUnigramKey. A HF pipeline's pre-tokenizer gets the `tokenizer.ggml.pre` name under
// which the GGUF tokenizes the probe texts exactly as `v` (kvs::Error when none does). SPM
// vocabularies with merges but no scores get scores ranking the merges.
void write_vocab_gguf(GgufWriter& w, const VocabSpec& v);

// GGUF carries llama3 RoPE scaling as a tensor `rope_freqs.weight` of per-frequency divisors;
// adds it when hp uses llama3 scaling: `divisors` verbatim when given (a GGUF's own tensor, so that
// a GGUF -> GGUF conversion keeps it bit for bit, as llama-quantize does), else computed from the
// inverse frequencies.
void add_rope_freqs_gguf(GgufWriter& w, const HParams& hp, const std::vector<float>& inv_freq,
                         const std::vector<float>& divisors = {});

// The type a 2-D weight of row length `cols` is stored in when `want` is requested: `want` if
// cols is a multiple of its block size, else Q8_0, else F16 (as llama.cpp falls back).
DType storage_type_for(DType want, int64_t cols);

// Writes `m` as a GGUF file with 2-D weights in `type` (norms and biases stay f32).
void export_gguf(const Model& m, const std::string& path, DType type);
// Writes `m` as a GGUF file with each 2-D weight in the type llama.cpp's `llama-quantize` gives
// it for `preset` (model/quant_mix.h); norms and biases stay f32. Throws kvs::Error before
// writing anything where llama-quantize refuses the model.
void export_gguf(const Model& m, const std::string& path, const QuantPreset& preset);
// Writes `m` as a HF directory; type must be f32, f16 or bf16. The folder is staged beside `dir`
// and swapped in whole (core/atomic_output.h): an existing `dir` must be empty or hold an earlier
// output (config.json), and is replaced entirely; on failure it is left as it was. Files:
// model.safetensors, config.json (absent special tokens as null), and the tokenizer files of
// write_hf_tokenizer_files.
void export_hf(const Model& m, const std::string& dir, DType type, const std::string& tokenizer_json_src = "");

// The tokenizer files of a HF folder being staged in `out`: tokenizer_config.json, tokenizer.json
// (copied from `tokenizer_json_src` when given, else generated from the vocabulary: byte-level BPE
// or SentencePiece-style merges; not for unigram models) and, for SentencePiece vocabularies,
// tokenizer.model. The folder's tokenizer is then loaded back and must tokenize the probe texts
// exactly as `v` does (kvs::Error naming the first difference otherwise). `v`: Tokenizer::spec().
void write_hf_tokenizer_files(AtomicDir& out, const VocabSpec& v, const std::string& tokenizer_json_src = "");

// SentencePiece ModelProto bytes for an SPM vocabulary (pieces, scores, types; byte fallback
// and add_dummy_prefix set as the vocabulary says).
std::string sentencepiece_model_proto(const VocabSpec& v);

}  // namespace kvs
