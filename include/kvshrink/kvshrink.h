// kvshrink's public C++ API: load a model, generate, prefill a long context, compress it with a
// named press, answer questions from it, save / load it (.kvc, the files `kvshrink compress`
// writes and `kvshrink ask` reads), list the presses, and read which positions every
// (layer, KV head) kept and the press's scores.
//
//   kvshrink::Model model("testbed/models/v7s1/model-f16.gguf");
//   kvshrink::CompressOptions opt;
//   opt.press = "snapkv";
//   opt.keep = 0.25;
//   kvshrink::Context ctx = model.compress(context_text, opt);
//   std::string answer = ctx.ask("What is the special magic number?").text;
//   ctx.save("ctx.kvc");
//
// Only this header (and kvshrink/version.h) is installed; the engine's own headers stay private
// (pimpl). Every failure throws kvshrink::Error with the engine's message, which names the file,
// option or field and what was expected.
//
// Threads: a Model and every Context made from it share one engine (thread pool, KV page pool).
// They may be called from several threads: calls that run the engine take the model's lock, so
// one runs at a time (each already uses the engine's threads). Contexts keep their model alive.
// Requires C++17.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvshrink/version.h"

#if defined(_WIN32)
#define KVSHRINK_API
#else
#define KVSHRINK_API __attribute__((visibility("default")))
#endif

namespace kvshrink {

// Every error of the library: a bad path, an unknown press or option, a value out of range, a
// .kvc made with another model. what() is the engine's message.
class KVSHRINK_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How the engine runs a model (the CLI's -t, --kv-type, --page-tokens, --batch).
struct ModelOptions {
  int threads = 0;               // 0 = all cores
  std::string kv_type = "f16";   // KV cache storage: "f16" (default), "f32", "q8_0" or "q4_0"
  int page_tokens = 32;          // tokens per KV page
  int batch = 512;               // prefill chunk (tokens per forward step)
};

// Shape of the loaded model.
struct ModelInfo {
  std::string name, path, arch;
  int n_vocab = 0, n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ctx_train = 0;
};

// Sampling and stopping (greedy by default).
struct SamplingOptions {
  int max_new_tokens = 64;
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 40;            // 0 = off
  float top_p = 0.95f;       // 1 = off
  float min_p = 0.0f;        // 0 = off
  uint64_t seed = 0;
  std::vector<std::string> stop;  // stop once the text contains one of these (not included)
  bool stop_at_eog = true;        // stop at the model's end-of-generation tokens
};

struct GenerateOptions : SamplingOptions {
  bool chat = false;    // wrap the prompt in the model's chat template
  std::string system;   // system message (with chat)
};

// A press and what it compresses to: the CLI's --press, --keep, --quality, --budget, --sinks,
// --window, --opt key=value, --trigger, --press-seed, and the prompt format (--chat,
// --question-template).
struct CompressOptions {
  std::string press = "full";
  std::optional<double> keep;     // fraction of the context kept, in (0, 1]; none: the press chooses (adaptive presses)
  std::optional<double> quality;  // target quality in (0, 1] of a calibrated press (instead of keep)
  int budget = 0;                 // tokens kept per KV head (instead of keep); 0 = none
  int sinks = -1, window = -1;    // first / most recent tokens always kept; -1 = the press's default
  std::map<std::string, std::string> options;  // press options (see presses())
  std::string trigger;            // "" (the press's default), "prefill", "every:N", "memory:BYTES"
  uint64_t seed = 0;              // for randomised presses
  bool chat = false;              // context and questions inside the model's chat template
  std::string question_template;  // how a question follows the context ({question}); "" = default
  bool keep_scores = false;       // record the press's score of every context position (Context::scores)
};

// Answering from a context: sampling plus the query-aware baseline (context + question compressed
// together, per question).
struct AskOptions : SamplingOptions {
  bool query_aware = false;
};

struct Answer {
  std::string text;
  std::vector<int32_t> tokens;
  double prefill_seconds = 0;   // the question (or the prompt)
  double decode_seconds = 0;
  double compress_seconds = 0;  // decode-time eviction (or all compression when query-aware)
  size_t kv_bytes_peak = 0;     // largest KV bytes the sequence held while answering
};

struct PressParam {
  std::string name, default_value, doc;
};

// A press as `kvshrink presses` lists it.
struct PressDescription {
  std::string name, description, paper;
  int default_sinks = 0, default_window = 0;
  std::string default_trigger;          // as `kvshrink presses` says it ("once after prefill", ...)
  std::string default_allocator;        // "" when the press takes none (full)
  std::vector<PressParam> params;       // its own options
};

struct AllocatorDescription {
  std::string name, description;
  std::vector<PressParam> params;
};

KVSHRINK_API std::vector<PressDescription> presses();
KVSHRINK_API std::vector<AllocatorDescription> allocators();
// "0.1.0" (KVSHRINK_VERSION_STRING of the library that was built)
KVSHRINK_API std::string version();

class Context;

class KVSHRINK_API Model {
 public:
  // Loads a GGUF file or a Hugging Face folder (config.json + safetensors + tokenizer).
  explicit Model(const std::string& path, const ModelOptions& options = {});
  ~Model();
  Model(const Model&);  // shares the loaded model and engine
  Model& operator=(const Model&);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  ModelInfo info() const;
  std::vector<int32_t> tokenize(const std::string& text, bool add_bos = true) const;
  std::string detokenize(const std::vector<int32_t>& tokens) const;

  // Completes `prompt` with a full cache.
  Answer generate(const std::string& prompt, const GenerateOptions& options = {});
  // Prefills `context` (uncompressed); Context::compress then derives compressed contexts from this
  // one prefill. `prepare_for`: presses whose statistics the prefill collects, so that compressing
  // with them needs no second prefill (others prefill again).
  Context prefill(const std::string& context, const std::vector<CompressOptions>& prepare_for = {},
                  bool chat = false);
  // Prefills and compresses `context` (what `kvshrink compress` does).
  Context compress(const std::string& context, const CompressOptions& options);
  // Loads a compressed context saved by Context::save or `kvshrink compress` (made with this model).
  Context load(const std::string& kvc_path);

  struct Impl;

 private:
  friend class Context;
  std::shared_ptr<Impl> impl_;
};

// A prefilled (and usually compressed) context.
class KVSHRINK_API Context {
 public:
  ~Context();
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Answers on a copy-on-write fork: the context is left as it was, so ask as often as you like.
  Answer ask(const std::string& question, const AskOptions& options = {});
  // A compressed copy of this context with another press (one prefill, many presses). This one must
  // be uncompressed (from Model::prefill).
  Context compress(const CompressOptions& options) const;
  // Writes the context to a .kvc file (atomically) that Model::load and `kvshrink ask` read.
  void save(const std::string& path) const;

  const CompressOptions& options() const;
  int n_layer() const;
  int n_head_kv() const;
  int context_tokens() const;   // tokens of the context (its positions are 0 .. context_tokens()-1)
  // Positions (token indices into the context) that KV head `head` of `layer` holds, increasing.
  std::vector<int32_t> kept_positions(int layer, int head) const;
  // The press's score of every context position at `layer`, `head` ([context_tokens()], higher =
  // keep; NaN where the press gave none). Needs CompressOptions::keep_scores; not saved in .kvc.
  std::vector<float> scores(int layer, int head) const;
  bool has_scores() const;
  double keep_measured() const;               // fraction of the context's token slots kept
  std::optional<double> keep_chosen() const;  // what an adaptive press chose
  size_t kv_bytes() const;                    // KV bytes held now
  size_t full_kv_bytes() const;               // before compression

  struct Impl;

 private:
  friend class Model;
  explicit Context(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Same as model.load(path).
inline Context load(const std::string& kvc_path, Model& model) { return model.load(kvc_path); }

}  // namespace kvshrink
