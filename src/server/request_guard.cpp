#include "server/request_guard.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace kvs::server {

namespace {

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool is_ipv4(const std::string& h) {
  in_addr a{};
  return inet_pton(AF_INET, h.c_str(), &a) == 1;
}
bool is_ipv6(const std::string& h) {
  in6_addr a{};
  return inet_pton(AF_INET6, h.c_str(), &a) == 1;
}
bool is_loopback_literal(const std::string& h) {
  in_addr a{};
  if (inet_pton(AF_INET, h.c_str(), &a) == 1) return (ntohl(a.s_addr) >> 24) == 127;
  in6_addr b{};
  return inet_pton(AF_INET6, h.c_str(), &b) == 1 && IN6_IS_ADDR_LOOPBACK(&b);
}

std::string shown(std::string_view s) {
  std::string o;
  for (char c : s.substr(0, 100)) o += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  return o;
}

ApiError forbidden(std::string message, std::string code) {
  return ApiError(403, std::move(message), "permission_error", "", std::move(code));
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Every byte of the longer string is visited whatever the contents; only the lengths show.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

std::string api_key_problem(const std::string& key) {
  if (key.empty()) return "is empty";
  if (trim(key).empty()) return "is only whitespace";
  if (trim(key).size() != key.size()) return "begins or ends with whitespace, which a header value cannot carry";
  for (char c : key)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "holds a control character";
  return "";
}

RequestGuard::RequestGuard(GuardOptions o) : opt_(std::move(o)) {
  if (!opt_.api_key.empty())
    if (const std::string why = api_key_problem(opt_.api_key); !why.empty()) fail("the API key {}", why);
  bound_ = host_of(opt_.bound_host.find(':') != std::string::npos && opt_.bound_host.front() != '['
                       ? "[" + opt_.bound_host + "]"
                       : opt_.bound_host);
  bound_wildcard_ = bound_ == "0.0.0.0" || bound_ == "::" || bound_.empty();
  for (const std::string& h : opt_.allowed_hosts) {
    if (h == "*") {
      any_host_ = true;
      continue;
    }
    const std::string n = host_of(h.find(':') != std::string::npos && h.front() != '[' && is_ipv6(h) ? "[" + h + "]" : h);
    if (n.empty()) fail("--allowed-host '{}' is not a host name or address", h);
    hosts_.push_back(n);
  }
  for (const std::string& o : opt_.allowed_origins) {
    if (o == "*") {
      any_origin_ = true;
      origins_.push_back("*");
      continue;
    }
    std::string n = lower(o);
    while (!n.empty() && n.back() == '/') n.pop_back();
    if (n.empty() || (n != "null" && n.find("://") == std::string::npos))
      fail("--allow-origin '{}' must be an origin such as https://app.example.com (or '*')", o);
    origins_.push_back(n);
  }
}

std::string RequestGuard::host_of(std::string_view h) {
  h = trim(h);
  std::string host;
  if (!h.empty() && h.front() == '[') {
    const size_t e = h.find(']');
    if (e == std::string_view::npos) return "";
    host = std::string(h.substr(1, e - 1));
    std::string_view rest = h.substr(e + 1);
    if (!rest.empty()) {
      if (rest.front() != ':' || rest.size() < 2) return "";
      for (char c : rest.substr(1))
        if (!std::isdigit(static_cast<unsigned char>(c))) return "";
    }
    if (!is_ipv6(host)) return "";
  } else {
    const size_t colon = h.rfind(':');
    std::string_view name = h;
    if (colon != std::string_view::npos) {
      for (char c : h.substr(colon + 1))
        if (!std::isdigit(static_cast<unsigned char>(c))) return "";
      name = h.substr(0, colon);
    }
    for (char c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) return "";
    host = std::string(name);
  }
  host = lower(host);
  while (!host.empty() && host.back() == '.') host.pop_back();
  return host;
}

bool RequestGuard::host_allowed(std::string_view header) const {
  if (any_host_) return true;
  const std::string h = host_of(header);
  if (h.empty()) return false;
  if (h == "localhost" || (h.size() > 10 && h.compare(h.size() - 10, 10, ".localhost") == 0)) return true;
  if (is_loopback_literal(h) || h == bound_) return true;
  if (bound_wildcard_ && (is_ipv4(h) || is_ipv6(h))) return true;
  return std::find(hosts_.begin(), hosts_.end(), h) != hosts_.end();
}

bool RequestGuard::origin_allowed(std::string_view origin) const {
  if (any_origin_) return true;
  std::string o = lower(trim(origin));
  while (!o.empty() && o.back() == '/') o.pop_back();
  return std::find(origins_.begin(), origins_.end(), o) != origins_.end();
}

bool RequestGuard::is_json_content_type(std::string_view ct) {
  const size_t semi = ct.find(';');
  return lower(trim(ct.substr(0, semi))) == "application/json";
}

Framing RequestGuard::framing(const HeadFields& h) const {
  Framing f;
  const size_t n_te = h.count("transfer-encoding");
  const size_t n_cl = h.count("content-length");
  if (n_te > 0 && n_cl > 0)
    throw bad_request("a request may not have both Content-Length and Transfer-Encoding", "", "bad_framing");
  if (n_te > 1 || (n_te == 1 && lower(h.value("transfer-encoding")) != "chunked"))
    throw bad_request(fmt::format("Transfer-Encoding '{}' is not supported (only 'chunked')",
                                  shown(h.value("transfer-encoding"))),
                      "", "bad_framing");
  if (n_te == 1) {
    f.kind = Framing::Kind::Chunked;
    return f;
  }
  for (size_t i = 0; i < n_cl; ++i) {
    const std::string_view v = h.value("content-length", i);
    uint64_t len = 0;
    bool ok = !v.empty() && v.size() <= 19;
    for (char c : v) {
      ok = ok && std::isdigit(static_cast<unsigned char>(c));
      len = len * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!ok) throw bad_request(fmt::format("Content-Length '{}' is not a byte count", shown(v)), "", "bad_framing");
    if (i > 0 && len != f.length) throw bad_request("conflicting Content-Length headers", "", "bad_framing");
    f.length = len;
  }
  if (n_cl > 0) f.kind = Framing::Kind::Length;
  if (f.length > opt_.max_body_bytes)
    throw ApiError(413, fmt::format("the request body ({} bytes) is larger than this server's limit of {} bytes "
                                    "(--max-body-mib)",
                                    f.length, opt_.max_body_bytes),
                   "invalid_request_error", "", "request_too_large");
  return f;
}

void RequestGuard::check_host(const HeadFields& hf) const {
  const size_t n = hf.count("host");
  if (n == 0) {
    if (hf.version == "HTTP/1.0") return;
    throw bad_request("an HTTP/1.1 request needs a Host header", "", "bad_host");
  }
  if (n > 1) throw bad_request("several Host headers", "", "bad_host");
  const std::string& h = hf.value("host");
  if (!host_allowed(h))
    throw forbidden(fmt::format("Host '{}' is not allowed: this server answers to {}, loopback names and the names "
                                "given with --allowed-host",
                                shown(h), opt_.bound_host),
                    "host_not_allowed");
}

std::optional<std::string> RequestGuard::check_origin(const HeadFields& h) const {
  if (!h.has("origin")) return std::nullopt;
  const std::string& o = h.value("origin");
  if (!origin_allowed(o))
    throw forbidden(fmt::format("Origin '{}' is not allowed (cross-site requests need --allow-origin)", shown(o)),
                    "origin_not_allowed");
  return o;
}

bool RequestGuard::authorized(const HeadFields& hf) const {
  if (opt_.api_key.empty()) return true;
  // "Bearer KEY": the scheme is case-insensitive (RFC 9110 11.1), spaces after it are skipped.
  // The value as sent: a NUL is refused with the head, a percent escape stays three bytes.
  if (hf.count("authorization") != 1) return false;
  const std::string& h = hf.value("authorization");
  if (h.size() < 7 || lower(std::string_view(h).substr(0, 6)) != "bearer" || (h[6] != ' ' && h[6] != '\t')) return false;
  return constant_time_equal(std::string(trim(std::string_view(h).substr(7))), opt_.api_key);
}

}  // namespace kvs::server
