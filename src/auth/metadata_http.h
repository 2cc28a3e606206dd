// One small blocking HTTP request to a credentials endpoint (instance metadata, the container
// endpoint, STS): libcurl's easy interface, bounded in time and size, ended by Ctrl-C within
// kInterruptPoll. The machine's own endpoints (link-local or loopback) never go through a proxy;
// STS does where the environment names one (HTTPS_PROXY, NO_PROXY: libcurl reads them).
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
struct MetadataRequestOptions {
  std::string body;  // sent with POST
  bool through_proxy = false;
};
Result<MetadataResponse> MetadataRequest(const std::string& method, const std::string& url,
                                         const std::vector<std::string>& headers, std::chrono::milliseconds timeout,
                                         const MetadataRequestOptions& options = {});

}  // namespace s3stream::internal
