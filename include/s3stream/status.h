// Status and Result<T>: how every fallible operation in the core reports failure.
// Exceptions are never thrown by the core; the Python bindings convert a Status into an exception in
// one place (python/bindings/init_errors.cc).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace s3stream {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // caller error: malformed URI, bad range, bad option
  kNotFound,            // bucket or key does not exist
  kPermissionDenied,    // access denied, bad signature, missing credentials
  kOutOfRange,          // byte range outside the object
  kUnavailable,         // transient failure, retries exhausted (network, 5xx, SlowDown)
  kPreconditionFailed,  // object changed while being read (ETag mismatch)
  kCorrupt,             // data does not parse (bad tar, bad XML)
  kCancelled,           // operation aborted by the caller
  kTooLarge,            // more than may (or can) be held in memory: stream it instead
  kInternal,            // anything else: a bug or an unexpected server reply
};

const char* StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Detail from the server, when the failure came from its response: the HTTP status and the
  // store's own error code ("NoSuchKey", "SlowDown", ...; empty when it sent none). Any driver
  // fills them the same way.
  int http_status() const { return http_status_; }
  const std::string& error_code() const { return error_code_; }
  Status& set_server_detail(int http_status, std::string error_code) {
    http_status_ = http_status;
    error_code_ = std::move(error_code);
    return *this;
  }

  // "NotFound: message".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  int http_status_ = 0;
  std::string error_code_;
};

inline Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
inline Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status PermissionDenied(std::string m) { return Status(StatusCode::kPermissionDenied, std::move(m)); }
inline Status OutOfRange(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
inline Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
inline Status Corrupt(std::string m) { return Status(StatusCode::kCorrupt, std::move(m)); }
inline Status Cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }
inline Status TooLarge(std::string m) { return Status(StatusCode::kTooLarge, std::move(m)); }
inline Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

// A value or the Status explaining why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}                   // NOLINT(implicit)
  Result(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT(implicit)

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace s3stream

// Propagate a failed Status from an expression returning Status.
#define S3S_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::s3stream::Status s3s_status_ = (expr); \
    if (!s3s_status_.ok()) return s3s_status_; \
  } while (0)

#define S3S_CONCAT_INNER(a, b) a##b
#define S3S_CONCAT(a, b) S3S_CONCAT_INNER(a, b)
// `S3S_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a Result or returns its Status.
#define S3S_ASSIGN_OR_RETURN(lhs, expr) S3S_ASSIGN_OR_RETURN_IMPL(S3S_CONCAT(s3s_result_, __LINE__), lhs, expr)
#define S3S_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
