// Command-line options shared by the commands that compress (run, compress, ask, eval, bench,
// generate): the flags that fill kvs::PressOptions / kvs::PromptOptions (runtime/context_options.h).
#pragma once
#include <CLI/CLI.hpp>

#include "runtime/context_options.h"

namespace kvs::cli {

using kvs::PressOptions;
using kvs::PromptOptions;

void add_press_options(CLI::App* cmd, PressOptions& o);   // --press, --keep, --quality, --budget, --sinks, ...
void add_prompt_options(CLI::App* cmd, PromptOptions& o); // --chat, --question-template

}  // namespace kvs::cli
