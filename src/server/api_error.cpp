#include "server/api_error.h"

namespace kvs::server {

nlohmann::json ApiError::to_json() const {
  nlohmann::json e;
  e["message"] = message_;
  e["type"] = type_;
  e["param"] = param_.empty() ? nlohmann::json(nullptr) : nlohmann::json(param_);
  e["code"] = code_.empty() ? nlohmann::json(nullptr) : nlohmann::json(code_);
  return {{"error", e}};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param), std::move(code));
}

ApiError not_found(std::string message, std::string code) {
  return ApiError(404, std::move(message), "not_found_error", "", std::move(code));
}

ApiError too_many_requests(std::string message, std::string code) {
  return ApiError(429, std::move(message), "rate_limit_error", "", std::move(code));
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvs::server
