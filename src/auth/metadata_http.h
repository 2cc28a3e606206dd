// One small blocking HTTP request to a credentials endpoint (instance metadata, the container
// endpoint): libcurl's easy interface, never through a proxy (these addresses are link-local or
// loopback), bounded in time and size, and ended by Ctrl-C within kInterruptPoll.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "s3stream/status.h"

namespace s3stream::internal {

struct MetadataResponse {
  long status = 0;
  std::string body;
};

// A failure to connect or to receive the answer in `timeout` is kUnavailable; a body over 1 MiB
// kTooLarge; Ctrl-C kCancelled.
Result<MetadataResponse> MetadataRequest(const std::string& method, const std::string& url,
                                         const std::vector<std::string>& headers, std::chrono::milliseconds timeout);

}  // namespace s3stream::internal
