#include "eval/inspect/page.h"

#include "core/error.h"
#include "kvcache/kv_cache.h"
#include "model/tokenizer/tokenizer.h"

namespace kvs::inspect {

int32_t context_length(const nlohmann::json& header, int32_t n_past) {
  int64_t n = 0;
  if (header.is_object() && header.contains("context_tokens") && header.at("context_tokens").is_number_integer())
    n = header.at("context_tokens").get<int64_t>();
  if (n <= 0 || n > n_past) n = n_past;
  return static_cast<int32_t>(n);
}

InspectPage make_page(const nlohmann::json& header, KeptMap kept, const Tokenizer* tok, std::span<const int32_t> ids,
                      const std::string& title) {
  const int32_t n = kept.n_tokens;
  if (!ids.empty() && ids.size() != static_cast<size_t>(n))
    fail("the context has {} tokens but the compressed cache holds a context of {}: is it the text the cache was made from, "
         "with the same prompt format?",
         ids.size(), n);
  if (!ids.empty() && !tok) fail("inspect: token ids given without a tokenizer");
  InspectPage p;
  p.title = title;
  p.header = header;
  p.kept = std::move(kept);
  if (ids.empty()) {
    p.tokens.assign(static_cast<size_t>(n), TokenPiece{"\xC2\xB7", false});  // U+00B7 per token: no text known
  } else {
    p.tokens = token_pieces(*tok, ids);
    p.token_ids.assign(ids.begin(), ids.end());
  }
  return p;
}

InspectPage make_page(const nlohmann::json& header, const KvCache& cache, const Tokenizer* tok,
                      std::span<const int32_t> ids, const std::string& title) {
  return make_page(header, KeptMap::from_cache(cache, context_length(header, cache.n_past())), tok, ids, title);
}

std::vector<int32_t> find_marked(const std::vector<TokenPiece>& pieces, const std::string& text) {
  std::vector<int32_t> out;
  if (text.empty()) return out;
  std::string all;
  std::vector<size_t> start;  // [n_tokens] byte offset of each piece in `all`
  start.reserve(pieces.size());
  for (const auto& p : pieces) {
    start.push_back(all.size());
    all += p.text;
  }
  const size_t at = all.find(text);
  if (at == std::string::npos) return out;
  const size_t end = at + text.size();
  for (size_t t = 0; t < pieces.size(); ++t)
    if (start[t] + pieces[t].text.size() > at && start[t] < end && !pieces[t].text.empty()) out.push_back(static_cast<int32_t>(t));
  return out;
}

std::vector<int32_t> header_context_ids(const nlohmann::json& header, int32_t n_vocab, const std::string& file) {
  std::vector<int32_t> ids;
  if (!header.is_object() || !header.contains("context_ids") || header.at("context_ids").is_null()) return ids;
  const auto& a = header.at("context_ids");
  if (!a.is_array()) fail("{}: header field 'context_ids' must be an array of token ids", file);
  ids.reserve(a.size());
  for (const auto& x : a) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= n_vocab)
      fail("{}: header field 'context_ids' holds {}, not a token id of this vocabulary (0..{})", file, x.dump(), n_vocab - 1);
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

}  // namespace kvs::inspect
