// RetryPolicy: the single place that decides whether a failed attempt is worth repeating and how
// long to wait first (exponential backoff with full jitter, as AWS recommends for S3).
#pragma once

#include <chrono>
#include <optional>

#include "s3stream/status.h"

namespace s3stream::internal {

// Why an attempt failed, as far as retrying is concerned.
struct AttemptFailure {
  Status status;           // already mapped to a user-facing code and message
  bool retryable = false;  // transient: network error, 5xx, SlowDown, RequestTimeout, short body
  // The connection failed (refused, reset, stalled, ended before the body did): a fault of that connection,
  // not a sign of a busy server, so the first retry goes at once on a new one (see Delay).
  bool connection_lost = false;
};

// HTTP statuses and S3 error codes that S3 documents as transient.
bool IsRetryableHttp(int http_status, const std::string& error_code);

// The end of one request's time, its retries included (ClientConfig::request_timeout_s).
class Deadline {
 public:
  Deadline() = default;  // none
  explicit Deadline(double seconds);
  bool set() const { return end_.has_value(); }
  bool passed() const { return end_ && std::chrono::steady_clock::now() >= *end_; }
  // What an attempt started now may take: 0 (no limit) without a deadline, else at least 1 ms.
  std::chrono::milliseconds remaining() const;

 private:
  std::optional<std::chrono::steady_clock::time_point> end_;
};

class RetryPolicy {
 public:
  RetryPolicy(int max_attempts, double base_delay_s, double max_delay_s, double request_timeout_s = 0)
      : max_attempts_(max_attempts),
        base_delay_s_(base_delay_s),
        max_delay_s_(max_delay_s),
        request_timeout_s_(request_timeout_s) {}

  int max_attempts() const { return max_attempts_; }
  double request_timeout_s() const { return request_timeout_s_; }
  // A new request's deadline (none when request_timeout_s is 0).
  Deadline StartDeadline() const { return request_timeout_s_ > 0 ? Deadline(request_timeout_s_) : Deadline(); }
  // True if another attempt may follow attempt number `attempt` (1-based) that failed this way.
  bool ShouldRetry(const AttemptFailure& failure, int attempt, const Deadline& deadline = {}) const {
    return failure.retryable && attempt < max_attempts_ && !deadline.passed();
  }
  // Delay before attempt `attempt + 1`: uniform in [0, min(max, base * 2^(attempt-1))].
  std::chrono::milliseconds Backoff(int attempt) const;
  // Delay before retrying after `failure` on attempt `attempt`: none after a first attempt whose
  // connection broke (waiting would only add latency: the server answered, the connection failed),
  // Backoff otherwise, so 5xx/SlowDown and repeated failures still slow down.
  std::chrono::milliseconds Delay(const AttemptFailure& failure, int attempt) const {
    return failure.connection_lost && attempt == 1 ? std::chrono::milliseconds(0) : Backoff(attempt);
  }

 private:
  int max_attempts_;
  double base_delay_s_;
  double max_delay_s_;
  double request_timeout_s_;
};

}  // namespace s3stream::internal
