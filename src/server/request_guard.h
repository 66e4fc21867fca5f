// The checks every request passes before a handler sees it, as pure functions of its header
// fields exactly as sent (http_framing.h: httplib's copy is percent-decoded, and cut at a NUL
// when read through get_header_value):
//   - framing: Content-Length must be digits (repeated only with the same value), not combined
//     with Transfer-Encoding, which may only be `chunked`; a body over the limit is refused from
//     its Content-Length, before a byte of it is read;
//   - Host: the bound address, loopback names and addresses (localhost, *.localhost, 127.x, ::1),
//     any IP literal when bound to a wildcard address, and the names given with --allowed-host
//     ("*" for any). A web page that rebinds its DNS name to this machine sends its own name in
//     Host and is refused (DNS rebinding);
//   - Origin: a request carrying one is refused unless --allow-origin names it ("*" for any);
//     allowed origins get CORS headers and preflight answers, others none;
//   - authentication (Bearer, the scheme case-insensitive, the key compared in constant time);
//   - JSON endpoints take only `Content-Type: application/json` (a browser can send text/plain,
//     form or type-less bodies cross-site without a preflight; application/json needs one).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/http_framing.h"

namespace kvs::server {

struct GuardOptions {
  std::string bound_host = "127.0.0.1";      // --host
  std::vector<std::string> allowed_hosts;    // --allowed-host NAME ("*": any Host)
  std::vector<std::string> allowed_origins;  // --allow-origin ORIGIN ("*": any)
  std::string api_key;                       // empty: no authentication
  size_t max_body_bytes = size_t{8} << 20;
};

// The body a request announces.
struct Framing {
  enum class Kind { None, Length, Chunked };
  Kind kind = Kind::None;
  uint64_t length = 0;
};

class RequestGuard {
 public:
  explicit RequestGuard(GuardOptions o);

  // The body's framing, or the refusal (400 malformed or conflicting, 413 over the limit).
  Framing framing(const HeadFields& h) const;  // throws ApiError
  // Throws ApiError 400 (no or several Host headers on HTTP/1.1) or 403 (a Host not allowed).
  void check_host(const HeadFields& h) const;
  // The Origin header, if any; throws ApiError 403 when it is not allowed.
  std::optional<std::string> check_origin(const HeadFields& h) const;
  bool cors_enabled() const { return !origins_.empty(); }
  bool authorized(const HeadFields& h) const;
  const std::string& api_key() const { return opt_.api_key; }

  // "name", "name:port", "[v6]", "[v6]:port" -> the host, lower case, no trailing dot ("" if malformed).
  static std::string host_of(std::string_view host_header);
  bool host_allowed(std::string_view host_header) const;
  bool origin_allowed(std::string_view origin) const;
  // application/json, parameters (charset) allowed; case-insensitive.
  static bool is_json_content_type(std::string_view content_type);

 private:
  GuardOptions opt_;
  std::string bound_;
  bool bound_wildcard_ = false, any_host_ = false, any_origin_ = false;
  std::vector<std::string> hosts_, origins_;
};

// Why `key` cannot serve as an API key ("" when it can): a key a client cannot send in
// `Authorization: Bearer KEY` — empty, only whitespace, whitespace at either end (a header value's
// surrounding whitespace is not part of it), or a control byte — would lock every client out.
std::string api_key_problem(const std::string& key);

// Compares without an early exit (the time taken does not depend on where the strings differ).
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace kvs::server
