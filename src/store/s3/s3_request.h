// Building, signing and sending S3 requests, with the retry loop shared by every S3 operation
// except GET (which streams and resumes; see s3_get.cc).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "http/transport.h"
#include "s3stream/config.h"
#include "store/retry_policy.h"
#include "store/s3/s3_errors.h"
#include "store/s3/sigv4.h"

namespace s3stream::internal {

// Shared by all bucket stores of one client.
// Threading: immutable after construction; the transport is thread-safe.
struct S3Context {
  S3Context(ResolvedConfig c, std::shared_ptr<Transport> t)
      : config(std::move(c)),
        transport(std::move(t)),
        signer(config.region),
        retry(config.options.max_attempts, config.options.retry_base_delay_s, config.options.retry_max_delay_s,
              config.options.request_timeout_s) {}

  ResolvedConfig config;
  std::shared_ptr<Transport> transport;
  SigV4Signer signer;
  RetryPolicy retry;
};

struct S3Address {
  std::string bucket;
  std::string key;    // may be empty (bucket-level operations)
  std::string query;  // encoded "a=b&c=d", may be empty
};

std::string BuildUrl(const ResolvedConfig& config, const S3Address& address);

// A signed (or, without credentials, unsigned) request. Bodies are signed by their SHA-256. Fails
// only when the credentials cannot be had (expired and not refreshed, a source that failed).
Result<HttpRequest> MakeS3Request(const S3Context& ctx, const std::string& method, const S3Address& address,
                          HttpHeaders headers = {}, Buffer body = {});

ErrorContext MakeErrorContext(const S3Context& ctx, const std::string& op, const std::string& bucket,
                              const std::string& object);

// The status of a request that could not be signed, naming it.
Status WithoutCredentials(const Status& why, const ErrorContext& ctx);

struct BufferedResponse {
  int http_status = 0;
  HttpHeaders headers;
  std::string body;
};

// Sends make_request() and repeats transient failures with backoff until the policy gives up.
// `done` receives the first 2xx response, or the mapped Status. Runs on the transport thread.
void ExecuteWithRetry(std::shared_ptr<const S3Context> ctx, ErrorContext error_ctx,
                      std::function<Result<HttpRequest>()> make_request,
                      std::function<void(Result<BufferedResponse>)> done);

}  // namespace s3stream::internal
