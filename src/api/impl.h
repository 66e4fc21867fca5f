// Private state behind the public classes of include/kvshrink/kvshrink.h (pimpl), and the one
// place engine errors become kvshrink::Error.
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/kvc_meta.h"         // the .kvc header fields `kvshrink compress` writes and `ask` reads
#include "runtime/context_options.h"  // PressOptions / PromptOptions, the options' way to a CompressionSpec
#include "kvshrink/kvshrink.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/session.h"

namespace kvshrink {

struct Model::Impl {
  std::unique_ptr<kvs::Model> model;
  std::unique_ptr<kvs::Engine> engine;  // shared by every context of this model
  // Serialises every call that runs the engine or touches the KV page pool (forward passes,
  // compression, loading, saving, reading positions, destroying a context), so a model and its
  // contexts may be used from several threads (one call runs at a time). Recursive: a call may
  // make another (Model::compress with scores goes through prefill + Context::compress).
  mutable std::recursive_mutex engine_mutex;
};

struct Context::Impl {
  std::shared_ptr<Model::Impl> model;   // keeps the engine alive
  CompressOptions options;
  kvs::PressOptions press;         // the same options in the CLI's form (for the .kvc header)
  kvs::PromptOptions prompt;
  std::unique_ptr<kvs::CompressedContext> ctx;
  std::vector<int32_t> context_tokens;  // empty for a loaded context
  bool uncompressed_base = false;       // from Model::prefill: Context::compress derives from it
  std::vector<std::vector<float>> scores;  // [n_layer * n_head_kv][context_tokens] when kept
  std::optional<double> loaded_keep_chosen;  // a loaded .kvc's keep_chosen (adopt() does not restore it)
};

namespace detail {

// Holds `m`'s engine for the duration of one public call.
inline std::unique_lock<std::recursive_mutex> engine_lock(const Model::Impl& m) {
  return std::unique_lock<std::recursive_mutex>(m.engine_mutex);
}

// The CLI's option form of `o` (key=value options sorted by key).
kvs::PressOptions press_options(const CompressOptions& o);
kvs::PromptOptions prompt_options(const CompressOptions& o);
// CompressOptions back from the CLI's form (a loaded .kvc).
CompressOptions compress_options(const kvs::PressOptions& p, const kvs::PromptOptions& pr);
kvs::AnswerOptions answer_options(const SamplingOptions& s);
Answer to_answer(const kvs::Answer& a);

// Runs fn, turning kvs::Error (and any other std::exception) into kvshrink::Error with the same
// message, so callers need no internal type.
template <typename Fn>
auto guarded(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error("out of memory");
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
}

}  // namespace detail
}  // namespace kvshrink
