// Compress a long context, answer from it, save it, load it back and answer again; print which
// positions one KV head kept. Built against an installed kvshrink (see CMakeLists.txt).
//   kvshrink_example MODEL CONTEXT_FILE OUT.kvc
#include <kvshrink/kvshrink.h>

#include <fstream>
#include <iostream>
#include <sstream>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " MODEL CONTEXT_FILE OUT.kvc\n";
    return 2;
  }
  try {
    std::ifstream in(argv[2]);
    if (!in) throw kvshrink::Error(std::string("cannot read ") + argv[2]);
    std::stringstream text;
    text << in.rdbuf();

    kvshrink::Model model(argv[1]);
    kvshrink::CompressOptions opt;
    opt.press = "keydiff";
    opt.keep = 0.4;
    opt.question_template = "\n{question}";  // the prompt format the testbed model was trained on
    kvshrink::Context ctx = model.compress(text.str(), opt);

    const std::string q =
        "What is the special magic number for quiet-harbor mentioned in the provided text? "
        "The special magic number for quiet-harbor mentioned in the provided text is";
    kvshrink::AskOptions ask;
    ask.max_new_tokens = 8;
    std::cout << "kvshrink " << kvshrink::version() << ", press " << ctx.options().press << ": kept "
              << ctx.keep_measured() << " of " << ctx.context_tokens() << " tokens, " << ctx.kv_bytes() << " of "
              << ctx.full_kv_bytes() << " KV bytes\n";
    std::cout << "answer:" << ctx.ask(q, ask).text << "\n";

    ctx.save(argv[3]);
    kvshrink::Context loaded = kvshrink::load(argv[3], model);
    std::cout << "reloaded answer:" << loaded.ask(q, ask).text << "\n";
    std::cout << "layer 0, KV head 0 kept " << loaded.kept_positions(0, 0).size() << " positions\n";
  } catch (const kvshrink::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
