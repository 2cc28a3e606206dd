// The HTTP transport abstraction: one request in, one streamed response out. The store layer talks
// only to this interface, so unit tests can substitute a fake transport.
//
// Threading: Send() and RunAfter() are thread-safe. Handler callbacks run on the transport's own
// thread, one request's callbacks never concurrently, and must not block.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "s3stream/buffer.h"
#include "s3stream/status.h"

namespace s3stream::internal {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Case-insensitive lookup; returns nullptr when absent.
const std::string* FindHeader(const HttpHeaders& headers, std::string_view name);

struct HttpRequest {
  std::string method;  // GET, HEAD, PUT, POST, DELETE
  std::string url;     // fully encoded
  HttpHeaders headers;
  Buffer body;         // sent as-is; empty for none
  std::chrono::milliseconds timeout{0};  // the whole exchange, connecting included; 0: none
};

class ResponseHandler {
 public:
  virtual ~ResponseHandler() = default;
  // The final status line and headers (interim 1xx responses are skipped). Return false to abort.
  virtual bool OnHeaders(int http_status, const HttpHeaders& headers) = 0;
  // A piece of the body; return false to abort the transfer.
  virtual bool OnBody(std::span<const uint8_t> bytes) = 0;
  // Exactly once. OK when the response arrived whole; kUnavailable for network failures (refused,
  // reset, timeout, stall); kPermissionDenied when the server's TLS certificate could not be
  // verified; kCancelled when a callback aborted.
  virtual void OnComplete(const Status& transport_status) = 0;
  // Asked often while the request is in flight (about once a second at least, also while no byte
  // arrives): false aborts it (completing with kCancelled). Thread: the transport's.
  virtual bool Wanted() { return true; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual void Send(HttpRequest request, std::shared_ptr<ResponseHandler> handler) = 0;
  // Runs `fn` on the transport thread after `delay` (used for retry backoff).
  virtual void RunAfter(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
};

}  // namespace s3stream::internal
