// Tokenizers: SentencePiece-style (scores + byte fallback; GGUF tokenizer.ggml.model = "llama",
// HF tokenizer.model) and byte-level BPE (GGUF "gpt2", HF tokenizer.json), with special/added
// tokens parsed from text, exact decoding and chat templates.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvs {

class GgufFile;

enum class TokenizerKind { SPM, BPE };

// Token types as GGUF stores them (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

// One normalizer step of a HF tokenizer.json pipeline (applied to each text fragment between
// added tokens, before pre-tokenization).
struct NormalizerStep {
  enum class Kind {
    NFC,               // Unicode canonical composition
    Prepend,           // prepend `content` to a non-empty fragment
    Replace,           // replace every match of `pattern` (literal, or PCRE2 regex if `regex`)
    StripExtraSpaces,  // SentencePiece remove_extra_whitespaces: trim and collapse runs of ' '
  };
  Kind kind = Kind::NFC;
  std::string pattern;
  bool regex = false;
  std::string content;
};

// How a split pattern's matches are kept (HF SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// One pre-tokenizer step: turns each piece into smaller pieces (words) for the subword model.
struct PreTokenizerStep {
  enum class Kind {
    Split,      // `pattern` (PCRE2 regex or literal), `behavior`, `invert`
    ByteLevel,  // GPT-2 regex split (use_regex) and optional prefix space (add_prefix_space)
    Digits,     // split off digits (\p{N}), one by one if individual_digits
    Metaspace,  // ' ' -> replacement, prefix per prepend_scheme, split before each replacement
  };
  enum class Prepend { Always, First, Never };
  Kind kind = Kind::Split;
  std::string pattern;
  bool regex = true;
  bool invert = false;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool add_prefix_space = false;
  bool use_regex = true;
  bool individual_digits = false;
  std::string replacement = "\u2581";
  Prepend prepend = Prepend::Always;
  bool split = true;
};

// A token matched in the raw text before normalization (HF added_tokens; GGUF control,
// user-defined and unknown tokens). Specials are matched only when parse_special is set.
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = true;
  bool lstrip = false;       // absorb whitespace before the match
  bool rstrip = false;       // absorb whitespace after the match
  bool single_word = false;  // match only at word boundaries
};

// Everything needed to build a tokenizer, from any file format.
struct VocabSpec {
  TokenizerKind kind = TokenizerKind::SPM;
  std::vector<std::string> tokens;   // token text as stored (SPM uses U+2581 for space; BPE the
                                     // GPT-2 byte-to-unicode alphabet)
  std::vector<float> scores;         // SPM merge scores (empty = all 0)
  std::vector<int32_t> types;        // TokenType per token (empty = all Normal)
  std::vector<std::string> merges;   // BPE merges "left right", highest priority first
  std::string pre = "default";       // BPE pre-tokenizer: "gpt2", "llama3", "qwen2", "smollm", ...
  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;      // SPM: prepend a space (U+2581) to the text
  std::string chat_template;         // Jinja source as shipped (used to pick the template family)

  // --- Optional detail (HF tokenizer.json / tokenizer.model); defaults reproduce llama.cpp. ---
  // When false, normalizers/pre_tokenizers are derived: SPM = [Replace ' ' -> U+2581, Prepend
  // U+2581 if add_space_prefix]; BPE = the regex list llama.cpp uses for `pre`.
  bool explicit_pipeline = false;
  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizers;
  // When empty, derived from `types` (Control/Unknown = special, UserDefined = not special).
  std::vector<AddedToken> added_tokens;
  bool byte_fallback = true;      // SPM: characters not in the vocab become <0xNN> tokens
  bool ignore_merges = false;     // BPE: a word that is itself a token is not split
  bool fuse_unk = false;          // consecutive unknown tokens collapse into one
  bool remove_extra_whitespaces = false;  // SentencePiece normalizer option (tokenizer.model)
  bool unigram = false;           // SPM: Viterbi segmentation (SentencePiece unigram tokenizer.model)
  std::string source = "vocab";   // file the spec came from (used in error messages)
  // GGUF (derived pipelines only): normalizer steps applied before the derived ones, read from
  // the kvshrink.tokenizer.normalizer key or implied by tokenizer.ggml.pre (Qwen2: NFC), and a
  // note saying which (shown by `kvshrink info`; empty when there are none).
  std::vector<NormalizerStep> base_normalizers;
  std::string normalizer_note;
};

// GGUF metadata key (kvshrink's own; llama.cpp ignores it) holding the normalizer steps that
// tokenizer.ggml.* cannot express, as the JSON of a HF tokenizer.json "normalizer" (or "null").
inline constexpr const char* kGgufNormalizerKey = "kvshrink.tokenizer.normalizer";
// GGUF key (kvshrink's own): true when a "llama" vocabulary is a SentencePiece unigram model.
inline constexpr const char* kGgufUnigramKey = "kvshrink.tokenizer.unigram";

// "NFC", "Replace(' ' -> '\u2581')", ... joined by ", " ("none" for no steps).
std::string describe_normalizers(const std::vector<NormalizerStep>& steps);

// Reads tokenizer.ggml.* keys. Throws kvs::Error naming the file and key if inconsistent.
VocabSpec vocab_from_gguf(const GgufFile& f);
// Reads a HF model directory: tokenizer.json (BPE, byte-level or SentencePiece-style with
// byte_fallback) or tokenizer.model (SentencePiece protobuf), plus tokenizer_config.json for
// bos/eos/add_bos and chat_template when present.
VocabSpec vocab_from_hf_dir(const std::string& dir);

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatFormat { ChatML, Llama3, Llama2, Phi3, Gemma, None };

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  static std::unique_ptr<Tokenizer> create(VocabSpec spec);

  // add_special: prepend BOS (and append EOS) as the vocab asks; BOS is not doubled when the text
  // already starts with it (parse_special). parse_special: text such as "<|im_start|>" becomes the
  // special token rather than being tokenized as characters. Thread-safe (const, no shared state).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                                      bool parse_special = false) const = 0;
  // Exact inverse of encode for normal text (special/control tokens are rendered as their text
  // unless skip_special). SPM drops the single leading space the encoder added.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;
  // The raw bytes one token contributes when streaming (may be a partial UTF-8 sequence).
  // `first` = this is the first generated token after BOS (SPM strips the leading space then).
  virtual std::string token_bytes(int32_t id) const = 0;
  // As above; with first = true an SPM tokenizer drops the leading space its encoder adds.
  std::string token_bytes(int32_t id, bool first) const;

  const VocabSpec& spec() const { return spec_; }
  int32_t n_vocab() const { return static_cast<int32_t>(spec_.tokens.size()); }
  int32_t bos() const { return spec_.bos; }
  int32_t eos() const { return spec_.eos; }
  // End of generation: eos, eot, or a control token such as <|im_end|> / <|eot_id|>.
  bool is_eog(int32_t id) const;

  ChatFormat chat_format() const;
  // Renders messages with the model's chat template family (detected from the Jinja source, as
  // llama.cpp does); add_generation_prompt appends the assistant header.
  std::string apply_chat_template(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) const;

 protected:
  explicit Tokenizer(VocabSpec spec) : spec_(std::move(spec)) {}
  // Whether the encoder puts a space (U+2581) before the text that decode/token_bytes(first) strip.
  virtual bool strips_leading_space() const { return false; }
  VocabSpec spec_;
};

}  // namespace kvs
