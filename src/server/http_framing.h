// Strict RFC 9112 framing, checked on the raw bytes of a request as they are read (conn_stream.h
// feeds them; cpp-httplib parses the same bytes but tolerates what a proxy in front may read
// differently: whitespace before a colon, lines without one, obs-fold, bare LF, "0x1d" chunk
// sizes, and it percent-decodes header values). Anything RFC 9112 says to refuse is refused:
//
//   HeadChecker  request-line = method SP request-target SP HTTP-version CRLF, then field lines
//                name ":" OWS value OWS CRLF (name a token; value visible bytes, obs-text, SP and
//                HTAB, so no NUL, bare CR or other control), then CRLF. A line longer than
//                kMaxLineBytes (CRLF included) is refused (414 for the request line, 431 for a
//                field line), and so is a head longer than its byte cap or with more than
//                kMaxFields fields (431). It keeps the raw
//                field values (as sent, OWS trimmed) for the checks that must not see httplib's
//                decoded copy: framing, Host, Origin, authentication.
//   ChunkChecker chunk = 1*HEXDIG [ BWS ";" chunk-ext ] CRLF data CRLF, a last chunk of 0 and an
//                empty trailer section (trailer fields are refused, as httplib does). A chunk
//                larger than what the body may still hold is refused as soon as its size is read.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvs::server {

// The longest request line or field line, CRLF included: cpp-httplib's compiled limits
// (CPPHTTPLIB_REQUEST_URI_MAX_LENGTH, CPPHTTPLIB_HEADER_MAX_LENGTH), enforced here first so that
// every over-long line gets the same answer (414 / 431) whatever httplib would have said.
inline constexpr size_t kMaxLineBytes = 8192;
// The most header fields one request may have (Apache's LimitRequestFields is 100): bounds what
// a head costs held as fields (here and in httplib's map), not only its bytes.
inline constexpr size_t kMaxFields = 256;

// A request's header fields as sent: names lower case, values with surrounding OWS removed.
struct HeadFields {
  std::vector<std::pair<std::string, std::string>> fields;
  std::string version;  // "HTTP/1.1"

  size_t count(std::string_view lower_name) const;
  // The i-th value of the field (0-based), "" if absent.
  const std::string& value(std::string_view lower_name, size_t i = 0) const;
  bool has(std::string_view lower_name) const { return count(lower_name) > 0; }
};

class HeadChecker {
 public:
  enum class Verdict { More, Done, Bad, UriTooLong, HeadersTooLarge };

  explicit HeadChecker(size_t max_head_bytes) : max_head_(max_head_bytes) {}
  void reset();
  // Feeds bytes of the head; returns how many were taken (all, or up to and including the
  // final LF: what follows is the body). verdict() says whether the head is complete or why it
  // is refused (why()); after Done or a refusal nothing more is taken.
  size_t feed(const char* p, size_t n);
  Verdict verdict() const { return verdict_; }
  const std::string& why() const { return why_; }
  const HeadFields& head() const { return head_; }

 private:
  enum class State { Method, Target, Version, LineLF, FieldStart, Name, Value, FieldLF, EndLF };
  void refuse(Verdict v, std::string why);
  void take(char c);
  void end_field();

  size_t max_head_;
  State state_ = State::Method;
  Verdict verdict_ = Verdict::More;
  std::string why_;
  size_t head_bytes_ = 0, line_bytes_ = 0;
  bool in_request_line_ = true;
  std::string name_, value_;
  HeadFields head_;
};

class ChunkChecker {
 public:
  enum class Verdict { More, Done, Bad, TooLarge };

  // `max_content`: the body's limit in content bytes (the framing not counted).
  explicit ChunkChecker(uint64_t max_content = 0) : max_content_(max_content) {}
  void reset(uint64_t max_content);
  // Feeds raw body bytes; returns how many were taken (up to the final CRLF when it ends here).
  size_t feed(const char* p, size_t n);
  Verdict verdict() const { return verdict_; }
  const std::string& why() const { return why_; }
  uint64_t content_bytes() const { return content_; }

 private:
  enum class State { Size, SizeWs, Ext, SizeLF, Data, DataCR, DataLF, TrailerStart, TrailerLF };
  void refuse(Verdict v, std::string why);

  uint64_t max_content_ = 0, content_ = 0, chunk_ = 0;
  size_t line_bytes_ = 0;
  bool digits_ = false;
  State state_ = State::Size;
  Verdict verdict_ = Verdict::More;
  std::string why_;
};

}  // namespace kvs::server
