// Builds the inspect page's data from a compressed cache: which positions each head kept, and the
// context's tokens as text. Shared by `kvshrink inspect FILE.kvc` (a loaded cache) and
// `kvshrink run --inspect` (the live compressed context).
#pragma once
#include <nlohmann/json.hpp>

#include <span>
#include <string>

#include "eval/inspect/html.h"

namespace kvs {
class KvCache;
class Tokenizer;
}  // namespace kvs

namespace kvs::inspect {

// The context's length: the header's context_tokens when in 1..n_past, else n_past.
int32_t context_length(const nlohmann::json& header, int32_t n_past);

// kept: the positions kept, over the context's length. ids: the context's tokens ([kept.n_tokens],
// or empty: tokens shown as placeholders); tok may be null only when ids is empty. Throws
// kvs::Error when ids has another length.
InspectPage make_page(const nlohmann::json& header, KeptMap kept, const Tokenizer* tok, std::span<const int32_t> ids,
                      const std::string& title);
// The same from a live cache (`kvshrink run --inspect`).
InspectPage make_page(const nlohmann::json& header, const KvCache& cache, const Tokenizer* tok,
                      std::span<const int32_t> ids, const std::string& title);

// The tokens whose text overlaps the first occurrence of `text` in the concatenated pieces
// (empty when it does not occur or `text` is empty): the page's and the heatmap's --mark.
std::vector<int32_t> find_marked(const std::vector<TokenPiece>& pieces, const std::string& text);

// The context's token ids the header records (field context_ids), or empty when it has none;
// throws kvs::Error naming `file` if the field is not an array of ids of `tok`'s vocabulary.
std::vector<int32_t> header_context_ids(const nlohmann::json& header, int32_t n_vocab, const std::string& file);

}  // namespace kvs::inspect
