#include "store/retry_policy.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace s3stream::internal {

bool IsRetryableHttp(int http_status, const std::string& error_code) {
  if (http_status == 500 || http_status == 502 || http_status == 503 || http_status == 504) return true;
  if (http_status == 429) return true;  // some S3-compatible stores throttle with 429
  return error_code == "SlowDown" || error_code == "RequestTimeout" || error_code == "InternalError" ||
         error_code == "ServiceUnavailable";
}

Deadline::Deadline(double seconds)
    : end_(std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds))) {}

std::chrono::milliseconds Deadline::remaining() const {
  if (!end_) return std::chrono::milliseconds(0);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*end_ - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

std::chrono::milliseconds RetryPolicy::Backoff(int attempt) const {
  thread_local std::mt19937_64 rng(std::random_device{}());
  double cap = std::min(max_delay_s_, base_delay_s_ * std::pow(2.0, std::max(0, attempt - 1)));
  std::uniform_real_distribution<double> dist(0.0, cap);
  return std::chrono::milliseconds(static_cast<long long>(dist(rng) * 1000.0));
}

}  // namespace s3stream::internal
