#include "store/buffer_sink.h"

namespace s3stream::internal {

BufferSink::BufferSink(std::string object, Prepare prepare, std::shared_ptr<std::atomic<bool>> cancelled)
    : object_(std::move(object)), prepare_(std::move(prepare)), cancelled_(std::move(cancelled)) {}

Status BufferSink::OnStart(const GetStart& start) {
  if (cancelled_ && cancelled_->load()) return Cancelled("read-ahead of " + object_ + " no longer needed");
  S3S_ASSIGN_OR_RETURN(dest_, prepare_(start));
  expected_ = start.content_length;
  if (dest_.capacity() - dest_.size() < expected_) {
    return Internal(object_ + ": no room for the " + std::to_string(expected_) + " bytes the store announced");
  }
  return Status::Ok();
}

Status BufferSink::OnData(std::span<const uint8_t> bytes) {
  if (cancelled_ && cancelled_->load()) return Cancelled("read-ahead of " + object_ + " no longer needed");
  // More than announced is a driver bug, not a caller error: refuse it before writing anything.
  if (bytes.size() > expected_ - written_ || !dest_.Append(bytes)) {
    return Internal(object_ + ": the store sent more than the " + std::to_string(expected_) + " bytes it announced");
  }
  written_ += bytes.size();
  return Status::Ok();
}

Result<Buffer> BufferSink::Finish() {
  if (written_ != expected_) {
    return Internal(object_ + ": the store announced " + std::to_string(expected_) + " bytes but delivered " +
                    std::to_string(written_));
  }
  if (!dest_.valid()) dest_ = Buffer::Allocate(0);  // a driver that never called OnStart
  return std::move(dest_);
}

}  // namespace s3stream::internal
