// kvshrink presses: list the compression methods with their papers and options.
#include <fmt/format.h>

#include "cli_common.h"
#include "press/registry.h"

namespace kvs::cli {

void register_presses(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("presses", "list compression methods and their options");
  cmd->callback([] {
    for (const auto& p : press_registry()) {
      fmt::print("{:<14} {}\n", p.name, p.description);
      if (!p.paper.empty()) fmt::print("{:<14} paper: {}\n", "", p.paper);
      if (p.default_sinks || p.default_window)
        fmt::print("{:<14} defaults: --sinks {} --window {}\n", "", p.default_sinks, p.default_window);
      if (p.default_trigger.kind != Trigger::Kind::OnPrefill)
        fmt::print("{:<14} compresses: after prefill, then {}\n", "", p.default_trigger.describe());
      for (const auto& s : p.params)
        fmt::print("{:<14}   --opt {:<22} {}\n", "", s.name + "=" + s.default_value, s.doc);
      for (const auto& pr : p.presets) {
        std::string vals;
        for (const auto& [k, v] : pr.values) vals += (vals.empty() ? "" : " ") + k + "=" + v;
        if (pr.sinks >= 0) vals += fmt::format("{}sinks={}", vals.empty() ? "" : " ", pr.sinks);
        if (pr.window >= 0) vals += fmt::format("{}window={}", vals.empty() ? "" : " ", pr.window);
        fmt::print("{:<14}   preset {:<21} {}{}{}\n", "", pr.name, pr.doc, vals.empty() ? "" : ": ", vals);
      }
      if (!p.default_allocator.empty())
        fmt::print("{:<14}   --opt {:<22} {}\n", "", "allocator=" + p.default_allocator,
                   "budgets over layers and heads (see allocators below)");
    }
    fmt::print("\nallocators (--opt allocator=NAME with any press that scores tokens):\n");
    for (const auto& a : allocator_registry()) {
      fmt::print("{:<14} {}\n", a.name, a.description);
      for (const auto& s : a.params)
        fmt::print("{:<14}   --opt {:<22} {}\n", "", s.name + "=" + s.default_value, s.doc);
    }
    fmt::print("\nevery press: --keep R (fraction kept) | --budget N (tokens per head) | --keep auto (presses that "
               "choose their own), --sinks N, --window N, --trigger prefill|every:N|memory:BYTES\n");
  });
}

}  // namespace kvs::cli
