// Future<T> / Promise<T>: a one-shot value that an I/O thread sets and another thread waits for, or
// reacts to with a callback. std::future has no continuations, which the store and reader layers need
// to chain retries and prefetches without parking a thread per request.
//
// Threading: Set() may be called from any thread, once. Wait() may be called from any number of
// threads. Callbacks registered with Then() run on the thread that calls Set(), or immediately on the
// registering thread if the value is already there; keep them short and non-blocking.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "s3stream/interrupt.h"

namespace s3stream {

template <typename T>
class Future;

namespace internal {
template <typename T>
struct FutureState {
  std::mutex mu;
  std::condition_variable ready_cv;
  std::optional<T> value;
  std::vector<std::function<void(const T&)>> callbacks;
};
}  // namespace internal

template <typename T>
class Promise {
 public:
  Promise() : state_(std::make_shared<internal::FutureState<T>>()) {}

  Future<T> future() const { return Future<T>(state_); }

  void Set(T value) {
    std::vector<std::function<void(const T&)>> callbacks;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->value) return;  // first value wins
      state_->value.emplace(std::move(value));
      callbacks.swap(state_->callbacks);
    }
    state_->ready_cv.notify_all();
    for (auto& cb : callbacks) cb(*state_->value);
  }

 private:
  std::shared_ptr<internal::FutureState<T>> state_;
};

template <typename T>
class Future {
 public:
  Future() = default;
  static Future Ready(T value) {
    Promise<T> p;
    p.Set(std::move(value));
    return p.future();
  }

  bool valid() const { return state_ != nullptr; }

  bool ready() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->value.has_value();
  }

  // Blocks until the value is set; returns a reference valid while any Future to it lives.
  const T& Wait() const {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->ready_cv.wait(lock, [&] { return state_->value.has_value(); });
    return *state_->value;
  }

  // Blocks at most `timeout`; true when the value is ready.
  template <typename Rep, typename Period>
  bool WaitFor(std::chrono::duration<Rep, Period> timeout) const {
    std::unique_lock<std::mutex> lock(state_->mu);
    return state_->ready_cv.wait_for(lock, timeout, [&] { return state_->value.has_value(); });
  }

  // Blocks until the value is set (true) or the interrupt check asks to stop (false; see
  // interrupt.h). For waits on a caller's thread; the store's threads never wait.
  bool WaitInterruptibly() const {
    while (!WaitFor(kInterruptPoll)) {
      if (InterruptRequested()) return false;
    }
    return true;
  }

  // Moves the value out; only for the sole consumer of this future.
  T Take() {
    Wait();
    std::lock_guard<std::mutex> lock(state_->mu);
    return std::move(*state_->value);
  }

  void Then(std::function<void(const T&)> callback) const {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (!state_->value) {
        state_->callbacks.push_back(std::move(callback));
        return;
      }
    }
    callback(*state_->value);
  }

 private:
  friend class Promise<T>;
  explicit Future(std::shared_ptr<internal::FutureState<T>> state) : state_(std::move(state)) {}
  std::shared_ptr<internal::FutureState<T>> state_;
};

// The value of a future of a Result or Status, or kCancelled ("<what> was interrupted") when the
// interrupt check stopped the wait first (what the future stands for goes on unless cancelled).
template <typename T>
Result<T> Await(Future<Result<T>> future, const std::string& what) {
  if (!future.WaitInterruptibly()) return Interrupted(what);
  return future.Take();
}

inline Status Await(Future<Status> future, const std::string& what) {
  if (!future.WaitInterruptibly()) return Interrupted(what);
  return future.Take();
}

}  // namespace s3stream
