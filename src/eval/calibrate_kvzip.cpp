// `kvshrink calibrate --press kvzip`: KVzip's context-independent head-level scores (Kim et al.
// 2025, §3 and the experiments' "context-independent eviction"; official code: test.py
// --save_head_score stores each head's max pair score for one context, load_head_score takes the
// max over the stored contexts). Here: `samples` windows of `tokens` tokens of calibration text,
// each prefilled and scored by the pair-level repeat pass (press/methods/kvzip.h), each head's
// maximum pair score, maximum over the windows. `kvzip:level=head` then compresses with these
// scores and no scoring pass.
//
// Calibration text (--opt text=...; from the shared data directory, never the eval contexts):
//   squad_train  SQuAD v1.1 train, the 11 articles shipped (paragraphs joined by blank lines) —
//                the default: QA contexts, as the official scores were made on SCBench QA;
//   pg19         PG-19 book 22424 (not the eval book 10146);
//   wikitext     WikiText-2 test (also the eval's ppl_wikitext2 text).
// Windows are evenly spaced over the tokenized text (deterministic), BOS first. Options chunk,
// softmax, chat and sinks are the press's (sinks: the protected prefix excluded from the max).
#include "eval/calibrate_kvzip.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"
#include "core/progress.h"
#include "core/timer.h"
#include "press/methods/kvzip.h"
#include "runtime/engine_probe.h"

namespace kvs::eval {

namespace {

std::string calibration_text(DataStore& data, const std::string& which) {
  if (which == "pg19") return data.text("pg19/22424_frank_merriwell_down_south.txt");
  if (which == "wikitext") return data.text("wikitext2/wiki.test.raw");
  if (which != "squad_train") fail("calibrate kvzip: text must be squad_train, pg19 or wikitext, got '{}'", which);
  const std::string f = data.path("squad/train-v1.1.first11articles.json");
  const std::string& raw = data.text("squad/train-v1.1.first11articles.json");
  std::string out;
  try {
    const nlohmann::json j = nlohmann::json::parse(raw);
    for (const auto& art : j.at("data"))
      for (const auto& para : art.at("paragraphs")) out += (out.empty() ? "" : "\n\n") + para.at("context").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    fail("{}: unexpected layout (expected SQuAD v1.1 data/paragraphs/context): {}", f, e.what());
  }
  return out;
}

nlohmann::json run_kvzip_calibration(const CalibrateArgs& a) {
  ParamMap opt = a.options;
  auto take = [&](const std::string& k, const std::string& def) {
    const auto it = opt.find(k);
    std::string v = it == opt.end() ? def : it->second;
    if (it != opt.end()) opt.erase(it);
    return v;
  };
  const std::string text_name = take("text", "squad_train");
  const std::string sinks_s = take("sinks", "4");
  // The rest are the press's own options (chunk, softmax, chat, precision), validated by its parser.
  opt.erase("level");
  const Press press = make_press("kvzip", opt);
  const Params p("kvzip", press_param_specs(press_info("kvzip"), "global"), opt);
  const KvzipOptions ko = kvzip_options(p);
  const auto sinks = parse_int64(sinks_s);
  if (!sinks || *sinks < 0 || *sinks > 1 << 20) fail("calibrate kvzip: sinks must be an integer in 0..1048576, got '{}'", sinks_s);

  const Model& m = a.model;
  const int n_ctx = m.hp.n_ctx_train > 0 ? m.hp.n_ctx_train : 2048;
  const int tokens = a.tokens > 0 ? a.tokens : std::min(n_ctx, 2048);
  const int samples = a.samples > 0 ? a.samples : 8;
  const Tokenizer& tok = *m.tokenizer;
  const std::vector<int32_t> all = tok.encode(calibration_text(a.data, text_name), false, false);
  const bool bos = tok.bos() >= 0;
  const int body = tokens - (bos ? 1 : 0);
  if (body < 2 || static_cast<int64_t>(all.size()) < body)
    fail("calibrate kvzip: the '{}' text has {} tokens, fewer than a window of {}", text_name, all.size(), tokens);
  const KvLayout& l = a.engine.kv_layout();
  std::vector<std::vector<double>> best(static_cast<size_t>(l.n_layer), std::vector<double>(static_cast<size_t>(l.n_head_kv), 0.0));
  const int64_t span = static_cast<int64_t>(all.size()) - body;
  Progress prog(static_cast<size_t>(samples), samples, a.progress);  // a bar (terminal) or lines (log)
  prog.set_label("kvzip calibration");
  for (int i = 0; i < samples; ++i) {
    const int64_t start = samples > 1 ? span * i / (samples - 1) : 0;
    std::vector<int32_t> ids;
    if (bos) ids.push_back(tok.bos());
    ids.insert(ids.end(), all.begin() + start, all.begin() + start + body);
    auto cache = a.engine.new_cache();
    a.engine.forward(*cache, ids, Logits::None);
    EngineProbe probe(a.engine, ids);
    CompressRequest req;
    req.sinks = static_cast<int>(*sinks);
    const AttnShape shape = a.engine.attn_shape();
    const PressEnv env{*cache, shape, nullptr, a.engine.pool(), req, &probe, nullptr};
    const auto hs = kvzip_head_scores(kvzip_pair_scores(env, ko), l);
    for (int layer = 0; layer < l.n_layer; ++layer)
      for (int h = 0; h < l.n_head_kv; ++h) best[layer][h] = std::max(best[layer][h], hs[layer][h]);
    prog.advance(1);
  }
  nlohmann::json j;
  j["head_scores"] = best;
  j["aggregate"] = "max over windows of each head's max pair score";
  j["text"] = text_name;
  j["samples"] = samples;
  j["tokens"] = tokens;
  j["sinks"] = *sinks;
  j["chunk"] = ko.chunk;
  j["softmax"] = ko.softmax_cache ? "cache" : "chunk";
  j["chat"] = ko.chat;
  return j;
}

}  // namespace

CalibratorInfo kvzip_calibrator() {
  return {"kvzip",
          "KVzip head-level scores: each KV head's max pair score over repeat passes on calibration text "
          "(--opt text=squad_train|pg19|wikitext; --samples windows of --tokens tokens)",
          run_kvzip_calibration};
}

}  // namespace kvs::eval
