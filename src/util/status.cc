#include "s3stream/status.h"

namespace s3stream {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kPermissionDenied: return "PermissionDenied";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kPreconditionFailed: return "PreconditionFailed";
    case StatusCode::kCorrupt: return "Corrupt";
    case StatusCode::kCancelled: return "Cancelled";
    case StatusCode::kTooLarge: return "TooLarge";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace s3stream
