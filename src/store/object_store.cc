// The driver-independent helpers declared in s3stream/object_store.h: whole-object GETs into one
// Buffer, and a loop over List pages.
#include "s3stream/object_store.h"

#include <string>
#include <utility>

namespace s3stream {
namespace {

// Collects a GET's body into one Buffer. With no Buffer given it allocates exactly content_length in
// OnStart, so the body is never copied twice; with one given (GetInto) it appends after its contents.
//
// Threading: the driver calls OnStart/OnData on its own thread, one call at a time; the completion
// callback reads buffer_ after the driver has finished with the sink, so no lock is needed.
class BufferSink : public BodySink {
 public:
  BufferSink(std::string object, std::optional<Buffer> into)
      : object_(std::move(object)), buffer_(std::move(into)) {}

  Status OnStart(const GetStart& start) override {
    expected_ = start.content_length;
    if (!buffer_) {
      buffer_ = Buffer::Allocate(start.content_length);
      return Status::Ok();
    }
    const size_t room = buffer_->capacity() - buffer_->size();
    if (start.content_length > room) {
      return OutOfRange(object_ + ": the response is " + std::to_string(start.content_length) +
                        " bytes but the destination buffer has room for " + std::to_string(room) +
                        "; pass a larger buffer or a smaller range");
    }
    start_size_ = buffer_->size();
    return Status::Ok();
  }

  Status OnData(std::span<const uint8_t> bytes) override {
    if (!buffer_ || !buffer_->Append(bytes)) {
      // The driver delivered more than it announced: a driver bug, not a caller error.
      return Internal(object_ + ": the store sent more than the " + std::to_string(expected_) +
                      " bytes it announced");
    }
    return Status::Ok();
  }

  // The result once the driver reported OK.
  Result<Buffer> Finish() {
    if (!buffer_) buffer_ = Buffer::Allocate(0);  // a driver that never called OnStart
    const uint64_t got = buffer_->size() - start_size_;
    if (got != expected_) {
      return Internal(object_ + ": the store announced " + std::to_string(expected_) +
                      " bytes but delivered " + std::to_string(got));
    }
    return std::move(*buffer_);
  }

 private:
  const std::string object_;
  std::optional<Buffer> buffer_;
  uint64_t expected_ = 0;
  size_t start_size_ = 0;
};

Future<Result<Buffer>> GetWithSink(ObjectStore& store, const std::string& key, const GetOptions& options,
                                   std::optional<Buffer> into) {
  auto sink = std::make_shared<BufferSink>(store.Describe(key), std::move(into));
  Promise<Result<Buffer>> promise;
  Future<Result<Buffer>> result = promise.future();
  store.Get(key, options, sink).Then([sink, promise](const Status& status) mutable {
    if (!status.ok()) {
      promise.Set(status);
      return;
    }
    promise.Set(sink->Finish());
  });
  return result;
}

}  // namespace

Future<Result<Buffer>> GetBuffer(ObjectStore& store, const std::string& key, const GetOptions& options) {
  return GetWithSink(store, key, options, std::nullopt);
}

Future<Result<Buffer>> GetInto(ObjectStore& store, const std::string& key, const GetOptions& options,
                               Buffer into) {
  if (!into.valid()) into = Buffer::Allocate(0);
  return GetWithSink(store, key, options, std::move(into));
}

Status ListEach(ObjectStore& store, ListRequest request,
                const std::function<Status(const ListPage&)>& on_page) {
  while (true) {
    Result<ListPage> page = store.List(request).Take();
    if (!page.ok()) return page.status();
    S3S_RETURN_IF_ERROR(on_page(*page));
    if (page->next_continuation_token.empty()) return Status::Ok();
    // A token that does not advance would loop forever; treat it as the driver bug it is.
    if (page->next_continuation_token == request.continuation_token) {
      return Internal("listing " + store.Describe(request.prefix) +
                      ": the store returned the same continuation token twice");
    }
    request.continuation_token = std::move(page->next_continuation_token);
  }
}

}  // namespace s3stream
