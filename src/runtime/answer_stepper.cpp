#include "runtime/answer_stepper.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "runtime/engine_probe.h"

namespace kvs {

AnswerStepper::AnswerStepper(Engine& engine, Sequence seq, CompressionSpec spec, std::vector<int32_t> question,
                             AnswerOptions opt, std::shared_ptr<const BuiltContext> source)
    : engine_(engine),
      seq_(std::move(seq)),
      spec_(std::move(spec)),
      question_(std::move(question)),
      opt_(std::move(opt)),
      source_(std::move(source)),
      sampler_(opt_.sampler) {
  if (question_.empty()) fail("empty question");
  if (!seq_.cache) seq_.cache = engine_.new_cache();
  // Statistics that nothing will read are not collected: the statistics observer runs serially on
  // the step's calling thread for every sequence and layer.
  if (!compresses_while_answering(spec_)) seq_.stats.reset();
  peak_ = seq_.cache->bytes_held();
  if (opt_.sampler.repetition_penalty != 1.0f) {  // the repetition penalty counts the context and the question
    std::vector<int32_t> prompt = source_ ? source_->tokens : std::vector<int32_t>{};
    prompt.insert(prompt.end(), question_.begin(), question_.end());
    sampler_.set_prompt(prompt);
  }
}

void AnswerStepper::run_alone() {
  KVS_ASSERT(phase_ == Phase::Prefill);
  // Rows of logits per chunk: at most 256, and at most ~64 MiB of them.
  const int64_t V = engine_.hp().n_vocab;
  const int64_t cap_rows = std::clamp<int64_t>((int64_t{64} << 20) / (4 * std::max<int64_t>(V, 1)), 1, 256);
  const int64_t rows = std::min(prefill_left(), cap_rows);
  compress_for_cap(static_cast<int>(rows));
  const auto chunk = std::span<const int32_t>(question_).subspan(static_cast<size_t>(fed_), static_cast<size_t>(rows));
  const std::vector<float> logits = engine_.forward(*seq_.cache, chunk, Logits::All, seq_.stats.get());
  const int64_t q = static_cast<int64_t>(question_.size());
  // Row r predicts question[fed_ + r + 1]; the question's last row predicts the answer's first token.
  const int64_t scored = std::min(rows, q - 1 - fed_);
  if (scored > 0)
    score_rows(logits, V, std::span<const int32_t>(question_).subspan(static_cast<size_t>(fed_ + 1), static_cast<size_t>(scored)),
               std::max(opt_.logprobs, 0), question_lp_);
  pending_ = rows;
  after_step(std::span<const float>(logits).subspan(static_cast<size_t>((rows - 1) * V), static_cast<size_t>(V)));
}

namespace {
// The two ways an answer compresses while it runs, decided once from its spec: a memory: trigger
// compresses before a step that would pass the cap (compress_for_cap); every:N evicts after every
// N-th decode step unless the request keeps everything (after_step's evict_).
bool compresses_for_cap(const CompressionSpec& spec) {
  return spec.trigger.kind == Trigger::Kind::MemoryCap && !spec.press.is_full();
}
bool evicts_every_n(const CompressionSpec& spec) {
  return spec.trigger.kind == Trigger::Kind::EveryN && !spec.press.is_full() && !spec.request.keeps_everything();
}
}  // namespace

bool AnswerStepper::compresses_while_answering(const CompressionSpec& spec) {
  return compresses_for_cap(spec) || evicts_every_n(spec);
}

void AnswerStepper::compress_for_cap(int n_next) {
  if (!compresses_for_cap(spec_)) return;
  const KvCache& c = *seq_.cache;
  const size_t need = c.bytes_held() + c.pages_needed_for_append(n_next) * c.layout().page_bytes();
  if (need <= spec_.trigger.cap_bytes) return;
  Timer t;
  static const std::vector<int32_t> kNoTokens;
  static const std::vector<float> kNoNll;
  EngineProbe probe(engine_, source_ ? source_->tokens : kNoTokens, source_ ? source_->nll : kNoNll);
  compress(*seq_.cache, seq_.stats.get(), spec_.press, spec_.request, engine_.attn_shape(), engine_.pool(),
           {&probe, &seq_.state});
  compress_s_ += t.seconds();
  ++evictions_;  // a decode-time compression, as an every:N eviction is
}

Engine::BatchItem AnswerStepper::next_item(int max_rows) {
  KVS_ASSERT(phase_ != Phase::Done && max_rows > 0);
  presampled_ = -1;  // a step whose after_step did not get to sample leaves nothing behind
  Engine::BatchItem it;
  it.cache = seq_.cache.get();
  it.observer = seq_.stats.get();
  if (phase_ == Phase::Prefill) {
    pending_ = std::min<int64_t>(max_rows, prefill_left());
    compress_for_cap(static_cast<int>(pending_));
    it.tokens = std::span<const int32_t>(question_).subspan(static_cast<size_t>(fed_), static_cast<size_t>(pending_));
    it.want_logits = fed_ + pending_ == static_cast<int64_t>(question_.size());
  } else {
    compress_for_cap(1);
    it.tokens = std::span<const int32_t>(&next_, 1);
    it.want_logits = true;
  }
  return it;
}

void AnswerStepper::after_step(std::span<const float> logits) {
  KvCache& c = *seq_.cache;
  peak_ = std::max(peak_, c.bytes_held());
  if (phase_ == Phase::Prefill) {
    fed_ += pending_;
    pending_ = 0;
    if (fed_ < static_cast<int64_t>(question_.size())) return;
    // The question is in: decode-time eviction keeps every head at what the sequence holds now.
    evict_ = evicts_every_n(spec_);
    budget_ = evict_ ? mean_head_len(c) : 0;
    phase_ = Phase::Decode;
    sample(logits);
    return;
  }
  // `step` of CompressedContext::decode: the index of the token just fed.
  const int step = static_cast<int>(tokens_.size()) - 1;
  if (evict_ && (step + 1) % spec_.trigger.every_n == 0 && c.max_len() > budget_) {
    Timer t;
    static const std::vector<int32_t> kNoTokens;
    static const std::vector<float> kNoNll;
    EngineProbe probe(engine_, source_ ? source_->tokens : kNoTokens, source_ ? source_->nll : kNoNll);
    evict_to_budget(engine_, seq_, spec_, budget_, &probe);
    compress_s_ += t.seconds();
    ++evictions_;
  }
  sample(logits);
}

bool AnswerStepper::samples_next() const {
  if (opt_.max_new_tokens <= 0) return false;
  if (phase_ == Phase::Decode) return true;
  return phase_ == Phase::Prefill && fed_ + pending_ == static_cast<int64_t>(question_.size());
}

void AnswerStepper::presample(std::span<const float> logits) noexcept {
  presampled_ = -1;
  if (logits.empty() || !samples_next()) return;
  try {
    presampled_ = sampler_.sample(logits);
  } catch (...) {
    presampled_ = -1;  // after_step samples (and reports what failed)
  }
}

void AnswerStepper::sample(std::span<const float> logits) {
  if (opt_.max_new_tokens <= 0) {
    phase_ = Phase::Done;
    finish_ = FinishReason::Length;
    return;
  }
  const Tokenizer& tok = *engine_.model().tokenizer;
  const int32_t next = presampled_ >= 0 ? presampled_ : sampler_.sample(logits);
  presampled_ = -1;
  // An end-of-generation token is listed with the log-probabilities too (as vLLM lists it), not
  // in the tokens or the text.
  if (opt_.logprobs >= 0) token_lp_.push_back(score_token(logits, next, opt_.logprobs));
  if (opt_.stop_at_eog && tok.is_eog(next)) {
    phase_ = Phase::Done;
    finish_ = FinishReason::Stop;
    return;
  }
  sampler_.accept(next);
  tokens_.push_back(next);
  const size_t before = text_.size();
  text_ += tok.token_bytes(next);
  // The earliest stop string in the text is where it is cut; only a match that ends in the new
  // bytes is new (the earlier text was searched before).
  size_t cut = std::string::npos;
  for (const auto& st : opt_.stop) {
    if (st.empty()) continue;
    const auto p = text_.find(st, before >= st.size() ? before - st.size() + 1 : 0);
    cut = std::min(cut, p);
  }
  if (cut != std::string::npos) {
    text_.resize(cut);
    phase_ = Phase::Done;
    finish_ = FinishReason::Stop;
  }
  if (phase_ == Phase::Done) return;
  if (static_cast<int>(tokens_.size()) == opt_.max_new_tokens) {
    phase_ = Phase::Done;
    finish_ = FinishReason::Length;
    return;
  }
  next_ = next;
}

}  // namespace kvs
