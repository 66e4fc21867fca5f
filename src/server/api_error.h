// Errors of the HTTP API, in OpenAI's shape:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": null}}
// Every refusal the server makes is an ApiError with a 4xx status; nothing a client sends may
// produce a 5xx or end the process.
#pragma once
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace kvs::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type = "invalid_request_error", std::string param = "",
           std::string code = "")
      : std::runtime_error(message), message_(std::move(message)), status_(status), type_(std::move(type)),
        param_(std::move(param)), code_(std::move(code)) {}

  int status() const { return status_; }
  // The whole message (what() stops at a NUL a client's text may have brought in).
  const std::string& message() const { return message_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  nlohmann::json to_json() const;  // {"error": {...}}; empty param / code become null

 private:
  std::string message_;
  int status_;
  std::string type_, param_, code_;
};

// The usual ones.
ApiError bad_request(std::string message, std::string param = "", std::string code = "");
ApiError not_found(std::string message, std::string code = "not_found");
ApiError too_many_requests(std::string message, std::string code);

// Serialises JSON for the wire: invalid UTF-8 (a token cut inside a character) is replaced,
// never thrown.
std::string dump_json(const nlohmann::json& j);

}  // namespace kvs::server
