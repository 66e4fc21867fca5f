// The press's scores of an uncompressed context, as compress() computes them before it allocates
// and selects (Context::scores, CompressOptions::keep_scores).
#pragma once
#include <span>
#include <vector>

#include "runtime/compression_spec.h"
#include "runtime/engine.h"
#include "runtime/session.h"

namespace kvshrink::detail {

// Scores of every position of `base` (uncompressed, prefilled from `context` with at least the
// statistics `spec`'s press needs): [n_layer * n_head_kv][base.context_tokens()], NaN where a head
// holds no slot for a position. Throws kvs::Error for presses that score during the prefill
// (memory-cap triggers, prefill pruning) or keep everything (full).
std::vector<std::vector<float>> score_context(kvs::Engine& engine, const kvs::CompressedContext& base,
                                              std::span<const int32_t> context, const kvs::CompressionSpec& spec);

// True when `base`'s prefill collected what `spec`'s press needs (else it must be prefilled again).
bool base_covers(const kvs::CompressedContext& base, const kvs::CompressionSpec& spec);

}  // namespace kvshrink::detail
