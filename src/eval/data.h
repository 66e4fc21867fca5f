// Read-only benchmark data in a data directory (the layout of eval/data and its PROVENANCE.md):
// loaded on first use and cached for the life of the store.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kvs::eval {

struct SquadQa {
  std::string id, question;
  std::vector<std::string> answers;
};
struct SquadParagraph {
  std::string title, context;
  std::vector<SquadQa> qas;
};
struct HotpotItem {
  std::string question, answer;
  std::vector<std::pair<std::string, std::string>> paragraphs;  // (title, text)
};
struct Gsm8kItem {
  std::string question, answer;  // answer: worked solution ending "#### N"
};
struct LongBenchItem {
  std::string id, input, context;
  std::vector<std::string> answers, all_classes;
  int length = 0;  // LongBench's own length field (words or characters)
};
struct WordPools {
  std::vector<std::string> nouns, adjs, verbs;  // RULER's wonderwords lists as shipped
  // The testbed's held-out key pool (testbed/tasks.py Resources): lower-case alphabetic words,
  // sorted, de-duplicated, every 8th (index % 8 == 0). Training never used these as keys/values.
  std::vector<std::string> eval_nouns, eval_adjs;
  std::vector<std::string> all_words;  // nouns + adjectives + verbs, sorted, unique (RULER cwe)
};

class DataStore {
 public:
  // `root` is the data directory (holding niah_paul_graham_essays/, ruler/, squad/, ...).
  explicit DataStore(std::string root);
  // $KVSHRINK_DATA, else the data shipped with the binary (share_dir()/data: eval/data of the source
  // tree: NIAH, RULER, SQuAD, HotpotQA); --data overrides both at the callers.
  static std::string default_root();

  const std::string& root() const { return root_; }
  std::string path(const std::string& rel) const;  // throws kvs::Error naming the file if missing

  // The 49 NIAH essays (gkamradt / KVzip), each stripped, sorted by file name, joined by "\n\n".
  const std::string& niah_essays();
  // RULER's PaulGrahamEssays.json "text".
  const std::string& ruler_essays();
  const WordPools& words();
  const std::vector<SquadParagraph>& squad_dev();  // SQuAD v1.1 dev, paragraphs in file order
  const std::vector<HotpotItem>& hotpot();         // HotpotQA dev distractor, first 100
  const std::vector<Gsm8kItem>& gsm8k(const std::string& split);  // "train" or "test"
  const std::vector<LongBenchItem>& longbench(const std::string& task);
  std::string longbench_prompt(const std::string& task);  // dataset2prompt.json
  int longbench_maxlen(const std::string& task);         // dataset2maxlen.json
  const std::string& text(const std::string& rel);        // any text file, cached

 private:
  std::string root_;
  std::map<std::string, std::string> texts_;
  std::unique_ptr<WordPools> words_;
  std::unique_ptr<std::vector<SquadParagraph>> squad_;
  std::unique_ptr<std::vector<HotpotItem>> hotpot_;
  std::map<std::string, std::vector<Gsm8kItem>> gsm8k_;
  std::map<std::string, std::vector<LongBenchItem>> longbench_;
};

}  // namespace kvs::eval
