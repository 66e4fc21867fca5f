// The memory/time report printed after compressing a context.
#pragma once
#include "press_options.h"
#include "runtime/session.h"

namespace kvs::cli {
void print_context_report(const CompressedContext& ctx, Engine& engine, const PressOptions& po, bool per_layer,
                          bool query_aware);
// One query-aware answer's memory: the compression of context + question it was generated from.
void print_query_aware_memory(const CompressResult& r);
}
