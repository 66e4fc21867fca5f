// Defect 7 of issue 23: a key-less server on loopback must not be drivable by a web page. A page
// that rebinds its DNS name to 127.0.0.1 sends its own name in Host; a cross-site form or fetch
// sends an Origin and a text/plain, form or type-less body (no CORS preflight for those). Before:
// any Host, any Origin and text/plain were accepted, and a cross-site POST created a persisted
// context. Raw requests, as a browser would send them.
#include <gtest/gtest.h>

#include "server_test_util.h"

namespace kvs {
namespace {

using nlohmann::json;

class CrossSite : public test::StoriesModelSuite {};

std::string request(const std::string& method, const std::string& path, const std::string& headers,
                    const std::string& body = "") {
  return method + " " + path + " HTTP/1.1\r\n" + headers + (body.empty() && method == "GET" ? "" : "Content-Length: " + std::to_string(body.size()) + "\r\n") +
         "Connection: close\r\n\r\n" + body;
}

TEST_F(CrossSite, HostOriginAndContentTypeChecked) {
  test::TempDir dir("cross_site");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  test::TestServer s(*model_, o);
  const int port = s.port();
  const std::string ctx = json{{"text", "Once upon a time there was a cat."}}.dump();
  const std::string json_ct = "Content-Type: application/json\r\n";
  auto status = [&](const std::string& req) { return test::raw_status(test::raw_exchange(port, req)); };

  // Host: the bound address, loopback names and addresses, with or without the port.
  for (const std::string& h : std::vector<std::string>{"127.0.0.1", "127.0.0.1:" + std::to_string(port), "localhost", "LOCALHOST:80",
                              "app.localhost", "[::1]:9", "127.0.0.2"})
    EXPECT_EQ(status(request("GET", "/v1/models", "Host: " + h + "\r\n")), 200) << h;
  // DNS rebinding: the attacker's name (or anything that is not loopback) is refused.
  for (const std::string& h : std::vector<std::string>{"evil.example", "evil.example:" + std::to_string(port), "127.0.0.1.evil.example",
                              "10.1.2.3", "local host", "[::1"}) {
    const std::string r = test::raw_exchange(port, request("GET", "/v1/models", "Host: " + h + "\r\n"));
    EXPECT_EQ(test::raw_status(r), 403) << h << ": " << r.substr(0, 200);
    test::expect_error_shape(test::raw_body_json(r), h);
  }
  EXPECT_EQ(test::raw_body_json(test::raw_exchange(port, request("GET", "/v1/models", "Host: evil.example\r\n")))["error"]["code"],
            "host_not_allowed");
  EXPECT_EQ(status(request("GET", "/v1/models", "")), 400) << "HTTP/1.1 without Host";
  EXPECT_EQ(status(request("GET", "/v1/models", "Host: 127.0.0.1\r\nHost: evil.example\r\n")), 400);
  // /health answers whatever the Host (probes).
  EXPECT_EQ(status(request("GET", "/health", "Host: evil.example\r\n")), 200);

  // The cross-site POST that created a persisted context: refused, nothing created.
  const std::string r1 = test::raw_exchange(
      port, request("POST", "/v1/contexts", "Host: 127.0.0.1\r\nOrigin: https://evil.example\r\nContent-Type: text/plain\r\n", ctx));
  EXPECT_EQ(test::raw_status(r1), 403) << r1;
  EXPECT_EQ(test::raw_body_json(r1)["error"]["code"], "origin_not_allowed");
  EXPECT_TRUE(test::raw_header(r1, "Access-Control-Allow-Origin").empty()) << "no CORS by default";
  // Without the Origin (a form or a no-cors fetch from some clients): the content type refuses it.
  for (const std::string ct : {"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                               "multipart/form-data; boundary=x", ""}) {
    const std::string r =
        test::raw_exchange(port, request("POST", "/v1/contexts", "Host: 127.0.0.1\r\n" + (ct.empty() ? "" : "Content-Type: " + ct + "\r\n"), ctx));
    EXPECT_EQ(test::raw_status(r), 415) << ct << ": " << r.substr(0, 300);
    EXPECT_EQ(test::raw_body_json(r)["error"]["code"], "unsupported_media_type") << ct;
  }
  EXPECT_EQ(test::get(s, "/v1/contexts").json["data"].size(), 0u);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path)) << "a refused request persisted a context";
  // The same POST as a real client sends it works (charset allowed, case-insensitive).
  EXPECT_EQ(status(request("POST", "/v1/contexts", "Host: localhost\r\nContent-Type: Application/JSON; charset=utf-8\r\n", ctx)),
            200);
  // A preflight from a foreign origin gets no CORS either.
  const std::string pre = test::raw_exchange(
      port, request("OPTIONS", "/v1/contexts",
                    "Host: 127.0.0.1\r\nOrigin: https://evil.example\r\nAccess-Control-Request-Method: POST\r\n"));
  EXPECT_EQ(test::raw_status(pre), 403) << pre;
  EXPECT_TRUE(test::raw_header(pre, "Access-Control-Allow-Origin").empty());
}

TEST_F(CrossSite, AllowedHostsAndOrigins) {
  server::ServeOptions o = test::test_options();
  o.http.allowed_hosts = {"api.example.com"};
  o.http.allow_origins = {"https://app.example.com"};
  test::TestServer s(*model_, o);
  const int port = s.port();
  EXPECT_EQ(test::raw_status(test::raw_exchange(port, request("GET", "/v1/models", "Host: api.example.com:443\r\n"))), 200);
  EXPECT_EQ(test::raw_status(test::raw_exchange(port, request("GET", "/v1/models", "Host: other.example.com\r\n"))), 403);
  // The allowed origin: CORS on answers (errors included) and on the preflight.
  const std::string pre = test::raw_exchange(
      port, request("OPTIONS", "/v1/chat/completions",
                    "Host: api.example.com\r\nOrigin: https://app.example.com\r\nAccess-Control-Request-Method: POST\r\n"
                    "Access-Control-Request-Headers: authorization, content-type, x-stainless-os\r\n"));
  EXPECT_EQ(test::raw_status(pre), 204) << pre;
  EXPECT_EQ(test::raw_header(pre, "Access-Control-Allow-Origin"), "https://app.example.com");
  EXPECT_EQ(test::raw_header(pre, "Access-Control-Allow-Methods"), "POST");
  EXPECT_EQ(test::raw_header(pre, "Access-Control-Allow-Headers"), "authorization, content-type, x-stainless-os");
  const std::string body = json{{"prompt", "Hi"}, {"max_tokens", 2}}.dump();
  const std::string ok = test::raw_exchange(
      port, request("POST", "/v1/completions",
                    "Host: api.example.com\r\nOrigin: https://app.example.com\r\nContent-Type: application/json\r\n", body));
  EXPECT_EQ(test::raw_status(ok), 200) << ok;
  EXPECT_EQ(test::raw_header(ok, "Access-Control-Allow-Origin"), "https://app.example.com");
  EXPECT_EQ(test::raw_header(ok, "Vary"), "Origin");
  const std::string bad = test::raw_exchange(
      port, request("POST", "/v1/completions",
                    "Host: api.example.com\r\nOrigin: https://app.example.com\r\nContent-Type: application/json\r\n", "{"));
  EXPECT_EQ(test::raw_status(bad), 400);
  EXPECT_EQ(test::raw_header(bad, "Access-Control-Allow-Origin"), "https://app.example.com") << "errors readable too";
  const std::string other = test::raw_exchange(
      port, request("POST", "/v1/completions",
                    "Host: api.example.com\r\nOrigin: https://app.example.com.evil.example\r\nContent-Type: application/json\r\n",
                    body));
  EXPECT_EQ(test::raw_status(other), 403);
}

// --allowed-host '*' and a wildcard bind accept any IP literal / any Host.
TEST(RequestGuard, HostParsing) {
  using server::RequestGuard;
  EXPECT_EQ(RequestGuard::host_of("Example.COM.:8080"), "example.com");
  EXPECT_EQ(RequestGuard::host_of("[::1]:80"), "::1");
  EXPECT_EQ(RequestGuard::host_of("[::1"), "");
  EXPECT_EQ(RequestGuard::host_of("a b"), "");
  EXPECT_EQ(RequestGuard::host_of("host:80x"), "");
  server::GuardOptions g;
  g.bound_host = "0.0.0.0";
  const RequestGuard any_ip(g);
  EXPECT_TRUE(any_ip.host_allowed("192.168.1.5:8080"));
  EXPECT_TRUE(any_ip.host_allowed("[fe80::1]"));
  EXPECT_FALSE(any_ip.host_allowed("evil.example"));
  g.allowed_hosts = {"*"};
  EXPECT_TRUE(RequestGuard(g).host_allowed("evil.example"));
  EXPECT_TRUE(RequestGuard::is_json_content_type(" application/json ; charset=utf-8"));
  EXPECT_FALSE(RequestGuard::is_json_content_type("application/jsonx"));
  EXPECT_FALSE(RequestGuard::is_json_content_type("text/json"));
}

}  // namespace
}  // namespace kvs
