#include "http/curl_transport.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <queue>
#include <thread>
#include <unordered_map>

#include "http/ca_bundle.h"
#include "http/user_agent.h"

namespace s3stream::internal {
namespace {

using Clock = std::chrono::steady_clock;

// libcurl's global init is not thread-safe; do it once per process.
void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Transfer {
  CURL* easy = nullptr;
  HttpRequest request;
  std::shared_ptr<ResponseHandler> handler;
  curl_slist* header_list = nullptr;
  size_t body_offset = 0;
  int http_status = 0;
  HttpHeaders response_headers;
  bool headers_delivered = false;
  bool aborted_by_handler = false;
  // Stall detection below libcurl's whole-second low-speed check (CurlOptions::stall_timeout_s).
  Clock::duration stall_after{};  // zero: off for this transfer
  Clock::time_point last_progress{};
  curl_off_t received = 0;
  bool stalled = false;
  std::string handler_threw;  // what a handler's exception said (it never crosses into libcurl)
  char error[CURL_ERROR_SIZE] = {0};
};

// Runs a handler call that returns whether to go on. Nothing may be thrown through libcurl's C
// frames (std::terminate at best): an exception, typically std::bad_alloc, aborts the transfer
// instead and is reported as its status.
template <typename Fn>
bool Guarded(Transfer& t, Fn&& fn) {
  try {
    if (fn()) return true;
  } catch (const std::exception& e) {
    t.handler_threw = e.what();
  } catch (...) {
    t.handler_threw = "an unknown exception";
  }
  t.aborted_by_handler = true;
  return false;
}

// The server could not be trusted: permanent, unlike the network failures worth retrying.
bool IsTlsTrustFailure(CURLcode code) {
  return code == CURLE_PEER_FAILED_VERIFICATION || code == CURLE_SSL_CACERT_BADFILE ||
         code == CURLE_SSL_CERTPROBLEM || code == CURLE_SSL_ISSUER_ERROR;
}

// For callbacks with nothing to report to: the event loop must survive them.
template <typename Fn>
void RunSafely(const char* what, Fn&& fn) noexcept {
  try {
    fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "s3stream: internal error in %s: %s\n", what, e.what());
  } catch (...) {
    std::fprintf(stderr, "s3stream: internal error in %s\n", what);
  }
}

struct Timer {
  Clock::time_point due;
  uint64_t seq;  // FIFO among equal deadlines
  std::function<void()> fn;
  bool operator>(const Timer& other) const { return due != other.due ? due > other.due : seq > other.seq; }
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

// The event loop and everything it owns. Shared between the CurlTransport facade and the loop
// thread itself, so the transport may be destroyed from inside a callback on the loop thread (the
// last owner of a client can be a request completing there): the thread then detaches, finishes
// its iteration, cleans up on its own stack and frees this object when it exits.
class CurlLoop {
 public:
  explicit CurlLoop(const CurlOptions& options) : options_(options), owner_pid_(getpid()) {
    options_.ca_bundle = DefaultCaBundle(options_.ca_bundle);
    GlobalInitOnce();
    multi_ = curl_multi_init();
    curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS, static_cast<long>(options_.max_connections));
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, static_cast<long>(options_.max_connections));
    // Keep every connection we may use concurrently in the cache, so bursts reuse them.
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(options_.max_connections));
  }

  static void StartThread(const std::shared_ptr<CurlLoop>& self) {
    self->thread_ = std::thread([self] {
      self->Loop();
      self->Shutdown();
    });
  }

  pid_t owner_pid() const { return owner_pid_; }

  // Ends the loop; in-flight requests complete with kCancelled and pending timers run (so retry
  // chains end) on the loop thread before it exits.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      // Under the lock: once the loop thread sees stopping_ it leaves and curl_multi_cleanup frees
      // multi_ and closes its wakeup socket (whose descriptor another thread may then reuse); held
      // here, the loop cannot see stopping_ before this wakeup is done with them.
      curl_multi_wakeup(multi_);
    }
    if (std::this_thread::get_id() == thread_.get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }

  void Send(HttpRequest request, std::shared_ptr<ResponseHandler> handler) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_) {
        incoming_.push_back(std::make_unique<Transfer>());
        incoming_.back()->request = std::move(request);
        incoming_.back()->handler = std::move(handler);
        curl_multi_wakeup(multi_);
        return;
      }
    }
    handler->OnComplete(Cancelled("client closed"));
  }

  void RunAfter(std::chrono::milliseconds delay, std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stopping_) {
        timers_.push(Timer{Clock::now() + delay, timer_seq_++, std::move(fn)});
        curl_multi_wakeup(multi_);
        return;
      }
    }
    fn();
  }

 private:
  void Shutdown() {
    for (auto& [easy, transfer] : active_) {
      curl_multi_remove_handle(multi_, easy);
      Finish(*transfer, Cancelled("client closed while the request was in flight"));
      curl_easy_cleanup(easy);
    }
    active_.clear();
    DrainAfterStop();
    for (CURL* easy : idle_handles_) curl_easy_cleanup(easy);
    idle_handles_.clear();
    curl_multi_cleanup(multi_);
    multi_ = nullptr;
  }

  void Loop() {
    for (;;) {
      std::deque<std::unique_ptr<Transfer>> incoming;
      std::vector<std::function<void()>> due;
      int wait_ms = 1000;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        incoming.swap(incoming_);
        auto now = Clock::now();
        while (!timers_.empty() && timers_.top().due <= now) {
          due.push_back(timers_.top().fn);
          timers_.pop();
        }
        if (!timers_.empty()) {
          auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timers_.top().due - now).count();
          wait_ms = static_cast<int>(std::clamp<long long>(ms + 1, 0, wait_ms));
        }
      }
      for (auto& fn : due) RunSafely("a timer", fn);
      for (auto& transfer : incoming) Start(std::move(transfer));
      if (!due.empty() || !incoming.empty()) wait_ms = 0;
      if (options_.stall_timeout_s > 0 && !active_.empty()) {  // OnProgress must look in time
        wait_ms = std::min(wait_ms, std::clamp(static_cast<int>(options_.stall_timeout_s * 250), 10, 250));
      }

      int running = 0;
      curl_multi_perform(multi_, &running);
      ReapCompleted();
      if (wait_ms > 0) curl_multi_poll(multi_, nullptr, 0, wait_ms, nullptr);
    }
  }

  void Start(std::unique_ptr<Transfer> transfer) {
    CURL* easy;
    if (!idle_handles_.empty()) {
      easy = idle_handles_.back();
      idle_handles_.pop_back();
      curl_easy_reset(easy);
    } else {
      easy = curl_easy_init();
    }
    transfer->easy = easy;
    Transfer* t = transfer.get();
    const HttpRequest& req = t->request;
    t->last_progress = Clock::now();
    // Reads only: after an upload the server may rightly be silent while it stores the part.
    if (options_.stall_timeout_s > 0 && (req.method == "GET" || req.method == "HEAD")) {
      t->stall_after = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.stall_timeout_s));
    }

    curl_easy_setopt(easy, CURLOPT_URL, req.url.c_str());
    // Keys are opaque: "a/../b" is a key, not a path to resolve. Without this libcurl would send
    // "/b" (another object, another bucket) and the signature would cover what was not sent.
    curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, t);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, UserAgent().c_str());
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t->error);
    curl_easy_setopt(easy, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_s * 1000));
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, options_.low_speed_limit);
    curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, std::max(1L, static_cast<long>(options_.low_speed_time_s + 0.5)));
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
    // Larger receive chunks mean fewer callbacks per MB on fast links.
    curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, 256L * 1024);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, options_.verify_tls ? 1L : 0L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, options_.verify_tls ? 2L : 0L);
    if (!options_.ca_bundle.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, options_.ca_bundle.c_str());

    if (req.timeout.count() > 0) curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout.count()));
    // Progress calls come at least once a second, bytes or not: how a stalled request the caller
    // gave up on (Ctrl-C) is stopped without waiting for the stall detector.
    curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, &CurlLoop::OnProgress);
    curl_easy_setopt(easy, CURLOPT_XFERINFODATA, t);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &CurlLoop::OnHeaderLine);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &CurlLoop::OnWrite);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, t);

    if (req.method == "HEAD") {
      curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
    } else if (req.method == "PUT" || req.method == "POST") {
      // UPLOAD streams the body from OnRead with an exact Content-Length; CUSTOMREQUEST sets the verb.
      curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
      curl_easy_setopt(easy, CURLOPT_READFUNCTION, &CurlLoop::OnRead);
      curl_easy_setopt(easy, CURLOPT_READDATA, t);
      curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    } else if (req.method != "GET") {
      curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }

    for (const auto& [name, value] : req.headers) {
      std::string line = name + ": " + value;
      t->header_list = curl_slist_append(t->header_list, line.c_str());
    }
    // No "Expect: 100-continue" round trip before bodies; S3 answers errors after the body anyway.
    t->header_list = curl_slist_append(t->header_list, "Expect:");
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, t->header_list);

    active_.emplace(easy, std::move(transfer));
    curl_multi_add_handle(multi_, easy);
  }

  static size_t OnHeaderLine(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    t->last_progress = Clock::now();
    std::string_view line(data, size * n);
    if (line.starts_with("HTTP/")) {
      // A new response (possibly after an interim 1xx): start over.
      t->response_headers.clear();
      auto sp = line.find(' ');
      t->http_status = sp == std::string_view::npos ? 0 : std::atoi(std::string(line.substr(sp + 1, 3)).c_str());
      return line.size();
    }
    std::string_view trimmed = Trim(line);
    if (trimmed.empty()) {
      if (t->http_status >= 200 && !t->headers_delivered) {
        t->headers_delivered = true;
        if (!Guarded(*t, [&] { return t->handler->OnHeaders(t->http_status, t->response_headers); })) return 0;
      }
      return line.size();
    }
    auto colon = trimmed.find(':');
    if (colon != std::string_view::npos && !Guarded(*t, [&] {
          t->response_headers.emplace_back(std::string(Trim(trimmed.substr(0, colon))),
                                           std::string(Trim(trimmed.substr(colon + 1))));
          return true;
        })) {
      return 0;
    }
    return line.size();
  }

  static size_t OnWrite(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    size_t len = size * n;
    if (!Guarded(*t, [&] { return t->handler->OnBody({reinterpret_cast<const uint8_t*>(data), len}); })) {
      return 0;  // any value != len aborts the transfer
    }
    return len;
  }

  // Called on every pass of the loop over a running transfer (the loop passes at least every
  // quarter stall_timeout while one is set), also when nothing arrived.
  static int OnProgress(void* user, curl_off_t, curl_off_t received, curl_off_t, curl_off_t) {
    auto* t = static_cast<Transfer*>(user);
    if (t->stall_after.count() > 0) {
      auto now = Clock::now();
      if (received != t->received) {
        t->received = received;
        t->last_progress = now;
      } else if (now - t->last_progress > t->stall_after) {
        t->stalled = true;
        return 1;
      }
    }
    return Guarded(*t, [&] { return t->handler->Wanted(); }) ? 0 : 1;  // non-zero aborts
  }

  static size_t OnRead(char* dest, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    size_t left = t->request.body.size() - t->body_offset;
    size_t len = std::min(left, size * n);
    if (len) std::memcpy(dest, t->request.body.data() + t->body_offset, len);
    t->body_offset += len;
    return len;
  }

  void ReapCompleted() {
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL* easy = msg->easy_handle;
      CURLcode code = msg->data.result;
      curl_multi_remove_handle(multi_, easy);
      auto it = active_.find(easy);
      std::unique_ptr<Transfer> transfer = std::move(it->second);
      active_.erase(it);
      Status status;
      if (!transfer->handler_threw.empty()) {
        status = Internal("the response handler failed: " + transfer->handler_threw);
      } else if (transfer->aborted_by_handler) {
        status = Cancelled("aborted by the response handler");
      } else if (transfer->stalled) {
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g", options_.stall_timeout_s);
        status = Unavailable(std::string("nothing received for ") + seconds +
                             " s (stall_timeout): the connection was dropped");
      } else if (code != CURLE_OK) {
        std::string detail = transfer->error[0] ? transfer->error : curl_easy_strerror(code);
        status = IsTlsTrustFailure(code)
            ? PermissionDenied("the server's TLS certificate could not be verified (" + detail +
                               "): for a private CA pass ca_bundle='/path/to/ca.pem' (or set AWS_CA_BUNDLE); "
                               "for a test server without a real certificate, verify_tls=False")
            : Unavailable(detail);
      } else if (!transfer->headers_delivered) {
        // A response without a final blank header line (e.g. HEAD on some servers): deliver now.
        transfer->headers_delivered = true;
        Transfer& t = *transfer;
        if (!Guarded(t, [&] { return t.handler->OnHeaders(t.http_status, t.response_headers); })) {
          status = t.handler_threw.empty() ? Cancelled("aborted by the response handler")
                                           : Internal("the response handler failed: " + t.handler_threw);
        }
      }
      Finish(*transfer, status);
      if (idle_handles_.size() < 256) {
        idle_handles_.push_back(easy);
      } else {
        curl_easy_cleanup(easy);
      }
    }
  }

  static void Finish(Transfer& t, const Status& status) {
    curl_slist_free_all(t.header_list);
    t.header_list = nullptr;
    auto handler = std::move(t.handler);
    RunSafely("a request's completion", [&] { handler->OnComplete(status); });
  }

  void DrainAfterStop() {
    std::deque<std::unique_ptr<Transfer>> incoming;
    std::vector<std::function<void()>> timers;
    {
      std::lock_guard<std::mutex> lock(mu_);
      incoming.swap(incoming_);
      while (!timers_.empty()) {
        timers.push_back(timers_.top().fn);
        timers_.pop();
      }
    }
    for (auto& t : incoming) t->handler->OnComplete(Cancelled("client closed"));
    for (auto& fn : timers) fn();
  }

  CurlOptions options_;  // set once in the constructor (the CA bundle resolved), then read-only
  const pid_t owner_pid_;
  CURLM* multi_ = nullptr;
  std::thread thread_;

  std::mutex mu_;  // guards the fields below it
  bool stopping_ = false;
  std::deque<std::unique_ptr<Transfer>> incoming_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  uint64_t timer_seq_ = 0;

  // Loop-thread only.
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> active_;
  std::vector<CURL*> idle_handles_;
};

class CurlTransport final : public Transport {
 public:
  explicit CurlTransport(const CurlOptions& options) : loop_(std::make_shared<CurlLoop>(options)) {
    CurlLoop::StartThread(loop_);
  }

  ~CurlTransport() override {
    if (getpid() != loop_->owner_pid()) {
      // Forked child: the loop thread does not exist here and its sockets belong to the parent.
      // Leak the loop (a joinable std::thread would terminate the process) rather than join a
      // thread that is not there or close the parent's TLS sessions.
      (void)new std::shared_ptr<CurlLoop>(std::move(loop_));
      return;
    }
    loop_->Stop();
  }

  void Send(HttpRequest request, std::shared_ptr<ResponseHandler> handler) override {
    loop_->Send(std::move(request), std::move(handler));
  }
  void RunAfter(std::chrono::milliseconds delay, std::function<void()> fn) override {
    loop_->RunAfter(delay, std::move(fn));
  }

 private:
  std::shared_ptr<CurlLoop> loop_;
};

}  // namespace

std::unique_ptr<Transport> MakeCurlTransport(const CurlOptions& options) {
  return std::make_unique<CurlTransport>(options);
}

}  // namespace s3stream::internal
