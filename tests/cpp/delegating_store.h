// A store that forwards to another and lets a test watch or sabotage calls: counts GETs, the most
// in flight at once and the body bytes they deliver, can delay GETs and fail UploadPart. A
// decorator like the ones Client hooks install (the disk cache will be one).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "s3stream/object_store.h"

namespace s3stream::testing {

class DelegatingStore : public ObjectStore {
 public:
  explicit DelegatingStore(std::shared_ptr<ObjectStore> inner) : inner_(std::move(inner)) {}

  std::atomic<int> gets{0};
  std::atomic<uint64_t> bytes{0};  // body bytes delivered by GETs
  std::atomic<int> inflight{0};
  std::atomic<int> max_inflight{0};
  std::atomic<int> aborts{0};
  std::atomic<int> fail_upload_part{0};  // part number to fail, 0 for none
  std::atomic<int> get_delay_ms{0};      // a time to first byte for every GET
  std::function<void(int nth_get)> before_get;  // set before use; runs first in every Get (1-based)

  // Like the real drivers, it may be destroyed by its own thread (a GET's sink held the last
  // reference): that thread is done with the store by then, and is detached instead of joined.
  ~DelegatingStore() override {
    std::lock_guard<std::mutex> lock(threads_mu_);
    for (auto& t : threads_) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();
      } else {
        t.join();
      }
    }
  }

  std::string Describe(const std::string& key) const override { return inner_->Describe(key); }
  Future<Status> Get(const std::string& key, const GetOptions& options, std::shared_ptr<BodySink> sink) override {
    sink = std::make_shared<CountingSink>(std::move(sink), &bytes);
    const int nth = ++gets;
    if (before_get) before_get(nth);
    int now = ++inflight;
    int seen = max_inflight.load();
    while (now > seen && !max_inflight.compare_exchange_weak(seen, now)) {
    }
    if (int delay = get_delay_ms.load(); delay > 0) {
      Promise<Status> delayed;
      std::lock_guard<std::mutex> lock(threads_mu_);
      threads_.emplace_back([this, delay, key, options, sink, delayed]() mutable {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay));
        Status s = inner_->Get(key, options, sink).Wait();
        --inflight;
        delayed.Set(s);
      });
      return delayed.future();
    }
    Future<Status> f = inner_->Get(key, options, std::move(sink));
    f.Then([this](const Status&) { --inflight; });
    return f;
  }
  Future<Result<ObjectInfo>> Head(const std::string& key) override { return inner_->Head(key); }
  Future<Result<ListPage>> List(const ListRequest& r) override { return inner_->List(r); }
  Future<Result<std::string>> Put(const std::string& key, Buffer data) override { return inner_->Put(key, std::move(data)); }
  Future<Status> Delete(const std::string& key) override { return inner_->Delete(key); }
  Future<Result<std::string>> CreateMultipartUpload(const std::string& key) override {
    return inner_->CreateMultipartUpload(key);
  }
  Future<Result<std::string>> UploadPart(const std::string& key, const std::string& id, int n, Buffer data) override {
    if (n == fail_upload_part.load()) {
      return Future<Result<std::string>>::Ready(Unavailable("injected failure of part " + std::to_string(n)));
    }
    return inner_->UploadPart(key, id, n, std::move(data));
  }
  Future<Status> CompleteMultipartUpload(const std::string& key, const std::string& id,
                                         const std::vector<CompletedPart>& parts) override {
    return inner_->CompleteMultipartUpload(key, id, parts);
  }
  Future<Status> AbortMultipartUpload(const std::string& key, const std::string& id) override {
    ++aborts;
    return inner_->AbortMultipartUpload(key, id);
  }
  Future<Result<UploadPage>> ListMultipartUploads(const UploadListRequest& r) override {
    return inner_->ListMultipartUploads(r);
  }

 private:
  class CountingSink final : public BodySink {
   public:
    CountingSink(std::shared_ptr<BodySink> inner, std::atomic<uint64_t>* bytes) : inner_(std::move(inner)), bytes_(bytes) {}
    Status OnStart(const GetStart& start) override { return inner_->OnStart(start); }
    Status OnData(std::span<const uint8_t> data) override {
      *bytes_ += data.size();
      return inner_->OnData(data);
    }

   private:
    std::shared_ptr<BodySink> inner_;
    std::atomic<uint64_t>* bytes_;
  };

  std::shared_ptr<ObjectStore> inner_;
  std::mutex threads_mu_;
  std::vector<std::thread> threads_;
};

}  // namespace s3stream::testing
