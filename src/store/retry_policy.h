// RetryPolicy: the single place that decides whether a failed attempt is worth repeating and how
// long to wait first (exponential backoff with full jitter, as AWS recommends for S3).
#pragma once

#include <chrono>

#include "s3stream/status.h"

namespace s3stream::internal {

// Why an attempt failed, as far as retrying is concerned.
struct AttemptFailure {
  Status status;           // already mapped to a user-facing code and message
  bool retryable = false;  // transient: network error, 5xx, SlowDown, RequestTimeout, short body
};

// HTTP statuses and S3 error codes that S3 documents as transient.
bool IsRetryableHttp(int http_status, const std::string& error_code);

class RetryPolicy {
 public:
  RetryPolicy(int max_attempts, double base_delay_s, double max_delay_s)
      : max_attempts_(max_attempts), base_delay_s_(base_delay_s), max_delay_s_(max_delay_s) {}

  int max_attempts() const { return max_attempts_; }
  // True if another attempt may follow attempt number `attempt` (1-based) that failed this way.
  bool ShouldRetry(const AttemptFailure& failure, int attempt) const {
    return failure.retryable && attempt < max_attempts_;
  }
  // Delay before attempt `attempt + 1`: uniform in [0, min(max, base * 2^(attempt-1))].
  std::chrono::milliseconds Backoff(int attempt) const;

 private:
  int max_attempts_;
  double base_delay_s_;
  double max_delay_s_;
};

}  // namespace s3stream::internal
