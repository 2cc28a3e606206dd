#include "store/retry_policy.h"

#include <gtest/gtest.h>

#include "store/s3/s3_errors.h"

namespace s3stream::internal {
namespace {

TEST(RetryPolicy, TransientResponsesAreRetryable) {
  for (int status : {500, 502, 503, 504, 429}) EXPECT_TRUE(IsRetryableHttp(status, "")) << status;
  EXPECT_TRUE(IsRetryableHttp(400, "RequestTimeout"));
  EXPECT_TRUE(IsRetryableHttp(503, "SlowDown"));
  for (int status : {400, 403, 404, 412, 416}) EXPECT_FALSE(IsRetryableHttp(status, "")) << status;
}

TEST(RetryPolicy, StopsAtMaxAttempts) {
  RetryPolicy policy(3, 0.05, 1.0);
  AttemptFailure transient{Unavailable("x"), true};
  AttemptFailure permanent{NotFound("x"), false};
  EXPECT_TRUE(policy.ShouldRetry(transient, 1));
  EXPECT_TRUE(policy.ShouldRetry(transient, 2));
  EXPECT_FALSE(policy.ShouldRetry(transient, 3));
  EXPECT_FALSE(policy.ShouldRetry(permanent, 1));
}

TEST(RetryPolicy, FullJitterStaysUnderTheCappedExponential) {
  RetryPolicy policy(10, 0.1, 0.8);
  for (int attempt = 1; attempt <= 8; ++attempt) {
    const double cap_ms = std::min(800.0, 100.0 * (1 << (attempt - 1)));
    long long max_seen = 0;
    for (int i = 0; i < 500; ++i) {
      long long ms = policy.Backoff(attempt).count();
      ASSERT_GE(ms, 0);
      ASSERT_LE(ms, cap_ms);
      max_seen = std::max(max_seen, ms);
    }
    // Full jitter spreads over the whole interval, not just near zero.
    EXPECT_GT(max_seen, cap_ms * 0.7) << "attempt " << attempt;
  }
}

TEST(RetryPolicy, TransportErrorsRetryUnlessCancelled) {
  ErrorContext ctx{"GET", "s3://b/k", "b", "http://h", "us-east-1", "explicit"};
  EXPECT_TRUE(ClassifyTransportError(Unavailable("reset"), ctx).retryable);
  EXPECT_FALSE(ClassifyTransportError(Cancelled("closed"), ctx).retryable);
  Status given_up = GiveUp(ClassifyTransportError(Unavailable("Connection refused"), ctx), 4, ctx);
  EXPECT_EQ(given_up.code(), StatusCode::kUnavailable);
  EXPECT_NE(given_up.message().find("4 attempts"), std::string::npos);
  EXPECT_NE(given_up.message().find("http://h"), std::string::npos);
}

TEST(RetryPolicy, ABrokenConnectionIsRetriedAtOnceThenBacksOff) {
  RetryPolicy policy(10, 0.1, 0.8);
  ErrorContext ctx{"GET", "s3://b/k", "b", "http://h", "us-east-1", "explicit"};
  AttemptFailure reset = ClassifyTransportError(Unavailable("Connection reset by peer"), ctx);
  AttemptFailure slow_down = ClassifyHttpError(503, "<Error><Code>SlowDown</Code></Error>", ctx);
  ASSERT_TRUE(reset.connection_lost);
  ASSERT_FALSE(slow_down.connection_lost);
  EXPECT_EQ(policy.Delay(reset, 1).count(), 0);
  // A second broken connection in a row, and any busy-server answer, back off as before.
  long long after_second_reset = 0, after_slow_down = 0;
  for (int i = 0; i < 200; ++i) {
    after_second_reset = std::max(after_second_reset, static_cast<long long>(policy.Delay(reset, 2).count()));
    after_slow_down = std::max(after_slow_down, static_cast<long long>(policy.Delay(slow_down, 1).count()));
  }
  EXPECT_GT(after_second_reset, 0);
  EXPECT_GT(after_slow_down, 0);
}

}  // namespace
}  // namespace s3stream::internal
