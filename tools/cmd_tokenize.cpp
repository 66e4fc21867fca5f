// kvshrink tokenize: print token ids (and pieces) for a text; kvshrink detokenize: the inverse,
// ids -> text. Both need only the tokenizer: a GGUF file or a Hugging Face directory with
// tokenizer.json / tokenizer.model (no config.json or weights needed).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <fstream>
#include <iostream>
#include <iterator>

#include "cli_common.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "load_tokenizer.h"

namespace kvs::cli {
namespace {

struct TokenizeOptions {
  std::string model, text, file, jsonl;
  bool no_bos = false, parse_special = false, ids_only = false;
};

// Many texts with one load of the tokenizer: each input line a JSON object with "text"; each
// output line {"ids": [...], "decoded": decode(ids), "decoded_skip_special": decode(ids, skip)}.
// Used to compare with a reference tokenizer on a whole string set (tests/model/tokenizer_js).
void run_tokenize_jsonl(const TokenizeOptions& o) {
  std::ifstream in(o.jsonl, std::ios::binary);
  if (!in) fail("{}: cannot open", o.jsonl);
  const auto tok = load_tokenizer(o.model);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: invalid JSON: {}", o.jsonl, n, e.what());
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
      fail("{}:{}: expected an object with a string \"text\"", o.jsonl, n);
    const auto ids = tok->encode(j["text"].get<std::string>(), !o.no_bos, o.parse_special);
    const nlohmann::json out = {{"ids", ids},
                                {"decoded", tok->decode(ids, false)},
                                {"decoded_skip_special", tok->decode(ids, true)}};
    fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
}

void run_tokenize(const TokenizeOptions& o) {
  if (!o.jsonl.empty()) {
    if (!o.text.empty() || !o.file.empty()) fail("--jsonl reads its own texts: give no -p or -f with it");
    return run_tokenize_jsonl(o);
  }
  std::string text = o.text;
  if (!o.file.empty()) text = read_file(o.file);
  const auto tok = load_tokenizer(o.model);
  const auto ids = tok->encode(text, !o.no_bos, o.parse_special);
  if (o.ids_only) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ids[i]);
    fmt::print("{}]\n", s);
    return;
  }
  for (int32_t id : ids) fmt::print("{:>8} {:?}\n", id, tok->token_bytes(id));
  fmt::print(stderr, "{} tokens\n", ids.size());
}

struct DetokenizeOptions {
  std::string model, file;
  std::vector<std::string> ids;
  bool skip_special = false, no_newline = false;
};

void run_detokenize(const DetokenizeOptions& o) {
  if (!o.file.empty() && !o.ids.empty()) fail("give the ids either as arguments or with -f FILE, not both");
  const auto tok = load_tokenizer(o.model);
  std::string text;
  std::string what = "ids";
  if (!o.file.empty()) {
    what = o.file;
    if (o.file == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    else text = read_file(o.file);
  } else {
    for (const auto& a : o.ids) text += a + " ";
  }
  const auto ids = parse_token_ids(text, tok->n_vocab(), what);
  const std::string out = tok->decode(ids, o.skip_special);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!o.no_newline) std::fputc('\n', stdout);
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text");
  cmd->add_option("-m,--model", o->model, "GGUF file or HF directory (tokenizer files suffice)")->required();
  cmd->add_option("-p,--prompt", o->text, "text to tokenize");
  cmd->add_option("-f,--file", o->file, "read the text from a file")->check(CLI::ExistingFile);
  cmd->add_flag("--no-bos", o->no_bos, "do not add BOS/EOS");
  cmd->add_flag("--parse-special", o->parse_special, "turn special-token text into special tokens");
  cmd->add_flag("--ids", o->ids_only, "print only the id list");
  cmd->add_option("--jsonl", o->jsonl,
                  "tokenize every line of FILE ({\"text\": ...}); print one JSON line each: ids, decoded, "
                  "decoded_skip_special")
      ->check(CLI::ExistingFile);
  cmd->callback([o] { run_tokenize(*o); });

  auto d = std::make_shared<DetokenizeOptions>();
  CLI::App* de = app.add_subcommand("detokenize", "print the text of token ids (the inverse of tokenize)");
  de->add_option("-m,--model", d->model, "GGUF file or HF directory (tokenizer files suffice)")->required();
  de->add_option("ids", d->ids, "token ids: '1 15043 3186', '1,15043' or tokenize --ids' '[1, 15043]'");
  de->add_option("-f,--file", d->file, "read the ids from a file ('-': standard input)");
  de->add_flag("--skip-special", d->skip_special, "leave out special tokens (BOS, EOS, ...)");
  de->add_flag("--no-newline", d->no_newline, "do not end the output with a newline");
  de->callback([d] { run_detokenize(*d); });
}

}  // namespace kvs::cli
