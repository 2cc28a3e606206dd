// A scripted Transport for unit tests of the store layer: every request is recorded and answered
// by a responder function, synchronously on the caller's thread; RunAfter runs at once (no sleeps).
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "http/transport.h"

namespace s3stream::testing {

using internal::HttpHeaders;
using internal::HttpRequest;
using internal::ResponseHandler;

// What the fake server does with one request.
struct FakeResponse {
  int status = 200;
  HttpHeaders headers;
  std::string body;
  // Deliver only this many body bytes, then fail the transfer like a connection reset.
  std::optional<size_t> reset_after;
  // Fail before any response (connection refused / reset before headers).
  bool network_error = false;
};

class FakeTransport : public internal::Transport {
 public:
  using Responder = std::function<FakeResponse(const HttpRequest&, int call_index)>;
  explicit FakeTransport(Responder responder) : responder_(std::move(responder)) {}

  void Send(HttpRequest request, std::shared_ptr<ResponseHandler> handler) override {
    int index;
    {
      std::lock_guard<std::mutex> lock(mu_);
      index = static_cast<int>(requests_.size());
      requests_.push_back(request);
    }
    FakeResponse r = responder_(request, index);
    if (r.network_error) return handler->OnComplete(Unavailable("Connection refused (fake)"));
    bool has_length = false;
    for (auto& [k, v] : r.headers) has_length |= k == "Content-Length";
    if (!has_length) r.headers.emplace_back("Content-Length", std::to_string(r.body.size()));
    if (!handler->OnHeaders(r.status, r.headers)) return handler->OnComplete(Cancelled("aborted"));
    std::string_view body = r.body;
    if (r.reset_after) body = body.substr(0, *r.reset_after);
    // Deliver in small pieces, as a socket would.
    for (size_t i = 0; i < body.size(); i += 7) {
      auto piece = body.substr(i, 7);
      if (!handler->OnBody({reinterpret_cast<const uint8_t*>(piece.data()), piece.size()}))
        return handler->OnComplete(Cancelled("aborted"));
    }
    handler->OnComplete(r.reset_after ? Unavailable("Connection reset by peer (fake)") : Status::Ok());
  }

  void RunAfter(std::chrono::milliseconds, std::function<void()> fn) override { fn(); }

  std::vector<HttpRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  Responder responder_;
  std::mutex mu_;
  std::vector<HttpRequest> requests_;
};

inline std::string ErrorXml(const std::string& code, const std::string& message) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code + "</Code><Message>" + message +
         "</Message></Error>";
}

}  // namespace s3stream::testing
