// Maps S3 responses and transport failures to Status, once, for every S3 operation. Messages name
// the operation and object and say what to do; they never contain credentials.
#pragma once

#include <string>

#include "s3stream/credentials.h"
#include "store/retry_policy.h"
#include "store/s3/s3_xml.h"

namespace s3stream::internal {

struct ErrorContext {
  std::string op;         // "GET", "HEAD", "LIST", "PUT", ...
  std::string object;     // "s3://bucket/key" (or "s3://bucket/prefix*" for listings)
  std::string bucket;
  std::string endpoint;
  std::string region;
  std::string credentials_source;  // "none" when requests go unsigned for lack of credentials
  // The source's cache (it outlives the request): a source that had none to give (instance metadata
  // on a laptop) leaves requests unsigned, which the hint must say.
  const CredentialsCache* credentials = nullptr;
};

// A complete HTTP response with status >= 300 (body may be empty, as for HEAD).
AttemptFailure ClassifyHttpError(int http_status, std::string_view body, const ErrorContext& ctx);

// A transport failure (refused, reset, timeout, stall, short body).
AttemptFailure ClassifyTransportError(const Status& transport_status, const ErrorContext& ctx);

// The final Status once retries are exhausted: says how many attempts were made, and whether the
// request's deadline (request_timeout_s) is what ended them.
Status GiveUp(const AttemptFailure& last, int attempts, const ErrorContext& ctx, const Deadline& deadline = {});

}  // namespace s3stream::internal
