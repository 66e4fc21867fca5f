// kvshrink logits: the raw logits of a model on given token ids, for comparisons with other
// engines (scripts/compare-llamacpp-logits runs llama.cpp on the same ids and file).
//
// Writes float32 little-endian logits [n_pos][n_vocab] to -o: one row per input id (the forward
// pass over the ids, teacher-forced, in prefill batches of --batch), then one row per greedy step
// when --greedy N > 0 (each step feeds the argmax of the previous row). Prints one JSON line on
// stdout: {"n_vocab": V, "n_pos": P, "greedy": [the N greedy ids]}.
#include <fmt/format.h>

#include <span>

#include "cli_common.h"
#include "core/atomic_output.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace kvs::cli {
namespace {

struct LogitsOptions {
  EngineOptions eng;
  std::string ids, ids_file, out;
  int greedy = 0;
  bool llamacpp_numerics = false;
};

void run_logits(const LogitsOptions& o) {
  require_int("--greedy", o.greedy, 0, 1 << 16);
  if (o.ids.empty() == o.ids_file.empty()) fail("give the token ids with --ids or --ids-file (one of them)");
  auto model = Model::load(o.eng.model);
  const int V = model->hp.n_vocab;
  const std::string text = o.ids.empty() ? read_file(o.ids_file) : o.ids;
  const auto ids = parse_token_ids(text, V, o.ids.empty() ? o.ids_file : "--ids");
  if (ids.empty()) fail("no token ids given");
  EngineParams ep = o.eng.params();
  ep.llamacpp_numerics = o.llamacpp_numerics;
  Engine engine(*model, ep);
  auto cache = engine.new_cache();
  std::vector<float> logits = engine.forward(*cache, ids, Logits::All);  // [ids][V]
  std::vector<int32_t> greedy;
  std::vector<float> last(logits.end() - V, logits.end());
  for (int i = 0; i < o.greedy; ++i) {
    const int32_t next = argmax(last);
    greedy.push_back(next);
    last = engine.forward(*cache, std::span<const int32_t>(&next, 1), Logits::Last);
    logits.insert(logits.end(), last.begin(), last.end());
  }
  write_file_atomic(o.out, logits.data(), logits.size() * sizeof(float));
  std::string g;
  for (size_t i = 0; i < greedy.size(); ++i) g += fmt::format("{}{}", i ? ", " : "", greedy[i]);
  fmt::print("{{\"n_vocab\": {}, \"n_pos\": {}, \"greedy\": [{}]}}\n", V, logits.size() / V, g);
}

}  // namespace

void register_logits(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "write a model's logits on given token ids (for comparisons with other engines)");
  o->eng.add(cmd);
  cmd->add_option("--ids", o->ids, "token ids: '1 15043 3186', '1,15043' or '[1, 15043]'");
  cmd->add_option("--ids-file", o->ids_file, "read the token ids from a file")->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", o->out, "output file: float32 logits [positions][n_vocab]")->required();
  cmd->add_option("--greedy", o->greedy, "then decode this many greedy tokens, one row of logits each")->capture_default_str();
  cmd->add_flag("--llamacpp-numerics", o->llamacpp_numerics,
                "round queries and attention probabilities to F16 as llama.cpp's CPU attention does");
  cmd->callback([o] { run_logits(*o); });
}

}  // namespace kvs::cli
