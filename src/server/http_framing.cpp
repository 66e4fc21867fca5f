#include "server/http_framing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>

namespace kvs::server {

namespace {

// tchar (RFC 9110 5.6.2).
bool is_tchar(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.':
    case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

int hex_value(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A byte for a message: printable as itself, else as \xNN.
std::string shown_byte(unsigned char c) {
  if (c >= 0x21 && c < 0x7f) return std::string(1, static_cast<char>(c));
  return fmt::format("\\x{:02x}", c);
}

const std::string kEmpty;

}  // namespace

size_t HeadFields::count(std::string_view lower_name) const {
  return static_cast<size_t>(
      std::count_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == lower_name; }));
}

const std::string& HeadFields::value(std::string_view lower_name, size_t i) const {
  for (const auto& f : fields)
    if (f.first == lower_name && i-- == 0) return f.second;
  return kEmpty;
}

void HeadChecker::reset() {
  state_ = State::Method;
  verdict_ = Verdict::More;
  why_.clear();
  head_bytes_ = line_bytes_ = 0;
  in_request_line_ = true;
  name_.clear();
  value_.clear();
  head_ = HeadFields{};
}

void HeadChecker::refuse(Verdict v, std::string why) {
  verdict_ = v;
  why_ = std::move(why);
}

size_t HeadChecker::feed(const char* p, size_t n) {
  size_t i = 0;
  while (i < n && verdict_ == Verdict::More) {
    if (++head_bytes_ > max_head_) {
      refuse(Verdict::HeadersTooLarge, fmt::format("the request line and headers are larger than {} bytes", max_head_));
      break;
    }
    if (++line_bytes_ > kMaxLineBytes) {
      if (in_request_line_)
        refuse(Verdict::UriTooLong, fmt::format("the request line is longer than {} bytes", kMaxLineBytes));
      else
        refuse(Verdict::HeadersTooLarge, fmt::format("a header line is longer than {} bytes", kMaxLineBytes));
      break;
    }
    take(p[i++]);
  }
  return i;
}

void HeadChecker::end_field() {
  std::string name = name_;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t b = 0, e = value_.size();
  while (b < e && (value_[b] == ' ' || value_[b] == '\t')) ++b;
  while (e > b && (value_[e - 1] == ' ' || value_[e - 1] == '\t')) --e;
  head_.fields.emplace_back(std::move(name), value_.substr(b, e - b));
  name_.clear();
  value_.clear();
  if (head_.fields.size() > kMaxFields)
    refuse(Verdict::HeadersTooLarge, fmt::format("the request has more than {} header fields", kMaxFields));
}

void HeadChecker::take(char ch) {
  const unsigned char c = static_cast<unsigned char>(ch);
  const auto bare_lf = [&] { refuse(Verdict::Bad, "a line ends with a bare LF (RFC 9112 needs CRLF)"); };
  switch (state_) {
    case State::Method:
      if (is_tchar(c)) {
        name_ += ch;  // the method, kept only to see that there is one
      } else if (c == ' ' && !name_.empty()) {
        name_.clear();
        state_ = State::Target;
      } else {
        refuse(Verdict::Bad, fmt::format("malformed request line: '{}' where a method was expected", shown_byte(c)));
      }
      return;
    case State::Target:
      if (c >= 0x21 && c < 0x7f) {
        name_ += ch;
      } else if (c == ' ' && !name_.empty()) {
        name_.clear();
        state_ = State::Version;
      } else {
        refuse(Verdict::Bad, fmt::format("malformed request line: byte '{}' in the request target", shown_byte(c)));
      }
      return;
    case State::Version:
      if (c == '\r') {
        const std::string& v = head_.version;
        if (v.size() != 8 || v.compare(0, 5, "HTTP/") != 0 || !std::isdigit(static_cast<unsigned char>(v[5])) ||
            v[6] != '.' || !std::isdigit(static_cast<unsigned char>(v[7])))
          return refuse(Verdict::Bad, "malformed request line: the version must be HTTP/x.y after one space");
        state_ = State::LineLF;
      } else if (c == '\n') {
        bare_lf();
      } else if (head_.version.size() < 8 && c >= 0x21 && c < 0x7f) {
        head_.version += ch;
      } else {
        refuse(Verdict::Bad, "malformed request line: the version must be HTTP/x.y after one space");
      }
      return;
    case State::LineLF:
    case State::FieldLF:
      if (c != '\n') return refuse(Verdict::Bad, "a CR not followed by LF (a bare CR is not accepted)");
      if (state_ == State::FieldLF) end_field();
      if (verdict_ != Verdict::More) return;
      in_request_line_ = false;
      line_bytes_ = 0;
      state_ = State::FieldStart;
      return;
    case State::FieldStart:
      if (c == '\r') {
        state_ = State::EndLF;
      } else if (c == ' ' || c == '\t') {
        refuse(Verdict::Bad, head_.fields.empty() ? "whitespace before the first header field"
                                                  : "a header line starting with whitespace (obs-fold) is not accepted");
      } else if (c == '\n') {
        bare_lf();
      } else if (is_tchar(c)) {
        name_ = ch;
        state_ = State::Name;
      } else {
        refuse(Verdict::Bad, fmt::format("a header field name starts with '{}'", shown_byte(c)));
      }
      return;
    case State::Name:
      if (is_tchar(c)) {
        name_ += ch;
      } else if (c == ':') {
        state_ = State::Value;
      } else if (c == ' ' || c == '\t') {
        refuse(Verdict::Bad, fmt::format("whitespace between the header name '{}' and its colon",
                                         name_.substr(0, 64)));
      } else if (c == '\r' || c == '\n') {
        refuse(Verdict::Bad, fmt::format("a header line without a colon ('{}')", name_.substr(0, 64)));
      } else {
        refuse(Verdict::Bad, fmt::format("the header name '{}' holds the byte '{}'", name_.substr(0, 64), shown_byte(c)));
      }
      return;
    case State::Value:
      if (c == '\r') {
        state_ = State::FieldLF;
      } else if (c == '\n') {
        bare_lf();
      } else if (c == '\t' || c >= 0x20) {
        if (c == 0x7f) return refuse(Verdict::Bad, fmt::format("the header '{}' holds a DEL byte", name_.substr(0, 64)));
        value_ += ch;
      } else {
        refuse(Verdict::Bad, fmt::format("the header '{}' holds the control byte {} (NUL and other controls are not "
                                         "accepted in a value)",
                                         name_.substr(0, 64), shown_byte(c)));
      }
      return;
    case State::EndLF:
      if (c != '\n') return refuse(Verdict::Bad, "a CR not followed by LF (a bare CR is not accepted)");
      verdict_ = Verdict::Done;
      return;
  }
}

void ChunkChecker::reset(uint64_t max_content) {
  *this = ChunkChecker(max_content);
}

void ChunkChecker::refuse(Verdict v, std::string why) {
  verdict_ = v;
  why_ = std::move(why);
}

size_t ChunkChecker::feed(const char* p, size_t n) {
  size_t i = 0;
  while (i < n && verdict_ == Verdict::More) {
    if (state_ == State::Data) {
      const size_t m = static_cast<size_t>(std::min<uint64_t>(n - i, chunk_));
      chunk_ -= m;
      i += m;
      if (chunk_ == 0) state_ = State::DataCR;
      continue;
    }
    const unsigned char c = static_cast<unsigned char>(p[i++]);
    if (++line_bytes_ > kMaxLineBytes) {
      refuse(Verdict::Bad, fmt::format("a chunk size line is longer than {} bytes", kMaxLineBytes));
      break;
    }
    switch (state_) {
      case State::Size: {
        const int d = hex_value(c);
        if (d >= 0) {
          digits_ = true;
          const uint64_t room = max_content_ - content_;
          if (chunk_ > (room >> 4) || chunk_ * 16 + static_cast<uint64_t>(d) > room) {
            refuse(Verdict::TooLarge, "a chunk's size is larger than what the body may still hold");
            break;
          }
          chunk_ = chunk_ * 16 + static_cast<uint64_t>(d);
        } else if (!digits_) {
          refuse(Verdict::Bad, fmt::format("a chunk size must start with a hexadecimal digit, got '{}'", shown_byte(c)));
        } else if (c == '\r') {
          state_ = State::SizeLF;
        } else if (c == ';') {
          state_ = State::Ext;
        } else if (c == ' ' || c == '\t') {
          state_ = State::SizeWs;
        } else if (c == '\n') {
          refuse(Verdict::Bad, "a chunk size line ends with a bare LF (RFC 9112 needs CRLF)");
        } else {
          refuse(Verdict::Bad, fmt::format("a chunk size must be hexadecimal digits, got '{}'", shown_byte(c)));
        }
        break;
      }
      case State::SizeWs:
        if (c == ';') state_ = State::Ext;
        else if (c != ' ' && c != '\t') refuse(Verdict::Bad, "whitespace after a chunk size must lead to ';' and an extension");
        break;
      case State::Ext:
        if (c == '\r') state_ = State::SizeLF;
        else if (c == '\n') refuse(Verdict::Bad, "a chunk size line ends with a bare LF (RFC 9112 needs CRLF)");
        else if ((c < 0x20 && c != '\t') || c == 0x7f) refuse(Verdict::Bad, "a chunk extension holds a control byte");
        break;
      case State::SizeLF:
        if (c != '\n') {
          refuse(Verdict::Bad, "a CR not followed by LF in a chunk size line");
          break;
        }
        line_bytes_ = 0;
        content_ += chunk_;
        state_ = chunk_ == 0 ? State::TrailerStart : State::Data;
        break;
      case State::DataCR:
        if (c == '\r') state_ = State::DataLF;
        else refuse(Verdict::Bad, "chunk data is not followed by CRLF (more data than its size says)");
        break;
      case State::DataLF:
        if (c != '\n') {
          refuse(Verdict::Bad, "chunk data is not followed by CRLF (a bare CR)");
          break;
        }
        line_bytes_ = 0;
        digits_ = false;
        state_ = State::Size;
        break;
      case State::TrailerStart:
        if (c == '\r') state_ = State::TrailerLF;
        else if (c == '\n') refuse(Verdict::Bad, "the last chunk ends with a bare LF (RFC 9112 needs CRLF)");
        else refuse(Verdict::Bad, "trailer fields after a chunked body are not accepted");
        break;
      case State::TrailerLF:
        if (c == '\n') verdict_ = Verdict::Done;
        else refuse(Verdict::Bad, "a CR not followed by LF at the end of a chunked body");
        break;
      case State::Data:
        break;
    }
  }
  return i;
}

}  // namespace kvs::server
