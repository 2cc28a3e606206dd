// CurlTransport: the production Transport, one libcurl multi handle driven by one event-loop thread.
//
// Threading and ownership: Send() and RunAfter() may be called from any thread, including from
// handler callbacks (which run on the loop thread). The transport owns every in-flight transfer and
// holds its handler until OnComplete. Destruction completes every outstanding request with
// kCancelled and runs pending timers (so retry chains end) on the loop thread, then joins it; when
// the last owner lets go from inside a callback (on the loop thread), the thread detaches and
// cleans up by itself instead.
// After fork() the child must not touch the parent's transport: its destructor notices the pid
// changed and leaks instead of joining a thread that does not exist there.
#pragma once

#include <memory>
#include <string>

#include "http/transport.h"

namespace s3stream::internal {

struct CurlOptions {
  int max_connections = 64;
  double connect_timeout_s = 10.0;
  long low_speed_limit = 1024;
  double low_speed_time_s = 20.0;
  double stall_timeout_s = 0;  // GET/HEAD receiving nothing this long is dropped (0: off)
  bool verify_tls = true;
  std::string ca_bundle;
};

std::unique_ptr<Transport> MakeCurlTransport(const CurlOptions& options);

}  // namespace s3stream::internal
