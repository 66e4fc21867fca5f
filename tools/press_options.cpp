#include "press_options.h"

namespace kvs::cli {

void add_press_options(CLI::App* cmd, PressOptions& o) {
  cmd->add_option("--press", o.press, "compression method (see `kvshrink presses`)")->capture_default_str();
  cmd->add_option("--keep", o.keep,
                  "keep ratio: fraction of context tokens kept, in (0, 1]; 'auto' (or none) for presses that "
                  "choose their own");
  cmd->add_option("--quality", o.quality, "target quality in (0, 1] for a calibrated press (instead of --keep)");
  cmd->add_option("--budget", o.budget, "tokens kept per KV head (instead of --keep)")->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--sinks", o.sinks, "first tokens always kept (default: the press's)");
  cmd->add_option("--window", o.window, "most recent tokens always kept (default: the press's)");
  cmd->add_option("--opt", o.opts, "press option key=value (repeatable)");
  cmd->add_option("--trigger", o.trigger, "when to compress: prefill, every:N (decode steps), memory:BYTES");
  cmd->add_option("--press-seed", o.seed, "seed for randomised presses")->capture_default_str();
}

void add_prompt_options(CLI::App* cmd, PromptOptions& o) {
  cmd->add_flag("--chat", o.chat, "wrap context and question in the model's chat template");
  cmd->add_option("--question-template", o.question_template,
                  "how a question follows the context ({question} is replaced); default "
                  "'\\n\\nQuestion: {question}\\nAnswer:' (with --chat: '\\n\\n{question}')");
}

}  // namespace kvs::cli
