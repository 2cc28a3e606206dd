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

// Ctrl-C while the core waited: the interrupt check (init_errors.cc) ran Python's signal handlers
// and kept the exception they raised (KeyboardInterrupt) for this thread. Throwing InterruptRaised
// has the translator raise it. Safe without the GIL.
bool InterruptPending();
class InterruptRaised : public std::exception {
 public:
  const char* what() const noexcept override { return "interrupted"; }
};

// Both raise a pending interrupt first: the caller pressed Ctrl-C, whatever the result.
inline void ThrowIfError(const Status& status) {
  if (InterruptPending()) throw InterruptRaised();
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T Unwrap(Result<T> result) {
  if (InterruptPending()) throw InterruptRaised();
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).value();
}

}  // namespace s3stream::bindings
