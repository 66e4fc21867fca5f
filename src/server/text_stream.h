// Streams generated text without ever sending bytes a later token could take back: an incomplete
// UTF-8 sequence at the end, or an end that could be the start of a stop string (once a stop
// string appears the text is cut before it, so what was sent is always a prefix of the answer).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace kvs::server {

class TextStream {
 public:
  explicit TextStream(std::vector<std::string> stop = {}) : stop_(std::move(stop)) {}
  // `text`: everything generated so far. Returns the new bytes that are safe to send.
  std::string update(const std::string& text);
  // `final_text`: the finished answer. Returns what has not been sent yet.
  std::string finish(const std::string& final_text);

 private:
  std::vector<std::string> stop_;
  size_t sent_ = 0;
};

// Length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace kvs::server
