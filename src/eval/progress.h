// The evaluation's progress bar is the core one (core/progress.h); these names stay for the
// eval code that uses them.
#pragma once
#include "core/progress.h"

namespace kvs::eval {
using kvs::format_duration;
using kvs::Progress;
}  // namespace kvs::eval
