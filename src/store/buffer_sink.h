// BufferSink: a GET's body into a Buffer, every byte checked against the count the store announced
// (more is refused as it arrives, fewer fails at the end). GetBuffer and every piece of the range
// engine (io/range_fetcher.cc) receive their bodies through it.
//
// Threading: the driver calls OnStart/OnData on its thread, one at a time; Finish runs once the GET
// completed; `cancelled` may be set from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "s3stream/object_store.h"

namespace s3stream::internal {

class BufferSink final : public BodySink {
 public:
  // Decides, when the response starts, where its body goes (a Buffer with room for
  // start.content_length bytes after its contents), or refuses the response.
  using Prepare = std::function<Result<Buffer>(const GetStart&)>;

  // `cancelled`, when set to true, stops the GET at its next bytes (a read-ahead no longer wanted).
  BufferSink(std::string object, Prepare prepare, std::shared_ptr<std::atomic<bool>> cancelled = nullptr);

  Status OnStart(const GetStart& start) override;
  Status OnData(std::span<const uint8_t> bytes) override;
  bool Wanted() const override { return !cancelled_ || !cancelled_->load(); }
  // The body, once the driver reported the GET complete.
  Result<Buffer> Finish();

 private:
  const std::string object_;
  const Prepare prepare_;
  const std::shared_ptr<std::atomic<bool>> cancelled_;
  Buffer dest_;
  uint64_t expected_ = 0;
  uint64_t written_ = 0;
};

}  // namespace s3stream::internal
