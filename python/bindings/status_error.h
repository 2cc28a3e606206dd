// The bindings' single bridge from Status to Python exceptions: C++ binding code throws
// StatusError, and the translator registered in init_errors.cc raises the matching
// s3stream.errors class. Nothing else in the bindings creates Python exceptions from a Status.
#pragma once

#include <exception>
#include <utility>

#include "s3stream/status.h"

namespace s3stream::bindings {

class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).value();
}

}  // namespace s3stream::bindings
