// The driver-independent helpers declared in s3stream/object_store.h: whole-object GETs into one
// Buffer (in one stream, or in parallel parts), and a loop over List pages.
#include "s3stream/object_store.h"

#include <algorithm>
#include <cstring>
#include <mutex>
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

// One parallel GET of many parts into one Buffer (GetBufferInParts). The first part's OnStart sizes
// the Buffer and requests the other parts; each part's sink writes its own slice, so no lock is
// needed for the bytes. Parts are not cancelled when one fails: the result waits for all of them,
// so no GET outlives the Buffer it writes into.
class PartedGet : public std::enable_shared_from_this<PartedGet> {
 public:
  PartedGet(std::shared_ptr<ObjectStore> store, std::string key, GetOptions options, uint64_t part_size)
      : store_(std::move(store)), key_(std::move(key)), options_(std::move(options)), part_size_(part_size) {}

  Future<Result<Buffer>> Start() {
    GetOptions first = options_;
    const uint64_t start = options_.range ? options_.range->start : 0;
    std::optional<uint64_t> end = options_.range ? options_.range->end : std::nullopt;
    if (!end || *end > start + part_size_) {
      // The size is not known yet: ask for "up to" one part (OnFirstStart checks the caller's end).
      first.range = ByteRange{start, start + part_size_};
      first.clamp_end = true;
    }
    pending_ = 1;
    Issue(first, 0, /*first_part=*/true);
    return promise_.future();
  }

 private:
  class SliceSink;

  void Issue(const GetOptions& options, uint64_t offset, bool first_part);

  // The first response: the size is known; allocate and request the rest.
  Status OnFirstStart(const GetStart& start) {
    const uint64_t from = options_.range ? options_.range->start : 0;
    uint64_t total = start.object_size - std::min(from, start.object_size);
    if (options_.range && options_.range->end) {
      if (*options_.range->end > start.object_size) {
        return OutOfRange("byte range " + std::to_string(from) + "-" + std::to_string(*options_.range->end) +
                          " is outside " + store_->Describe(key_) + " (" + std::to_string(start.object_size) + " bytes)");
      }
      total = *options_.range->end - from;
    }
    std::vector<GetOptions> rest;
    {
      std::lock_guard<std::mutex> lock(mu_);
      buffer_ = Buffer::Allocate(total);
      buffer_.resize(total);
      for (uint64_t at = start.content_length; at < total; at += part_size_) {
        GetOptions part;
        part.range = ByteRange{from + at, from + std::min(total, at + part_size_)};
        part.if_match = options_.if_match.empty() ? start.etag : options_.if_match;
        rest.push_back(std::move(part));
      }
      pending_ += rest.size();
    }
    for (const GetOptions& part : rest) Issue(part, part.range->start - from, /*first_part=*/false);
    return Status::Ok();
  }

  void PartDone(const Status& status) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!status.ok() && error_.ok()) error_ = status;
    if (--pending_ > 0) return;
    lock.unlock();
    if (!error_.ok()) return promise_.Set(error_);
    promise_.Set(std::move(buffer_));
  }

  const std::shared_ptr<ObjectStore> store_;
  const std::string key_;
  const GetOptions options_;
  const uint64_t part_size_;
  Promise<Result<Buffer>> promise_;
  std::mutex mu_;
  Buffer buffer_;
  size_t pending_ = 0;
  Status error_;
};

class PartedGet::SliceSink : public BodySink {
 public:
  SliceSink(std::shared_ptr<PartedGet> get, uint64_t offset, bool first_part)
      : get_(std::move(get)), offset_(offset), first_part_(first_part) {}

  Status OnStart(const GetStart& start) override {
    expected_ = start.content_length;
    if (first_part_) S3S_RETURN_IF_ERROR(get_->OnFirstStart(start));
    std::lock_guard<std::mutex> lock(get_->mu_);
    dest_ = get_->buffer_.data() + offset_;
    room_ = get_->buffer_.size() - offset_;
    return Status::Ok();
  }

  Status OnData(std::span<const uint8_t> bytes) override {
    if (written_ + bytes.size() > std::min(expected_, room_)) {
      return Internal(get_->store_->Describe(get_->key_) + ": the store sent more than the " +
                      std::to_string(expected_) + " bytes it announced");
    }
    std::memcpy(dest_ + written_, bytes.data(), bytes.size());
    written_ += bytes.size();
    return Status::Ok();
  }

  Status Check() const {
    if (written_ == expected_) return Status::Ok();
    return Internal(get_->store_->Describe(get_->key_) + ": the store announced " + std::to_string(expected_) +
                    " bytes but delivered " + std::to_string(written_));
  }

 private:
  const std::shared_ptr<PartedGet> get_;
  const uint64_t offset_;
  const bool first_part_;
  uint8_t* dest_ = nullptr;
  uint64_t room_ = 0, expected_ = 0, written_ = 0;
};

void PartedGet::Issue(const GetOptions& options, uint64_t offset, bool first_part) {
  auto sink = std::make_shared<SliceSink>(shared_from_this(), offset, first_part);
  auto self = shared_from_this();
  store_->Get(key_, options, sink).Then([self, sink](const Status& status) {
    self->PartDone(status.ok() ? sink->Check() : status);
  });
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

Future<Result<Buffer>> GetBufferInParts(std::shared_ptr<ObjectStore> store, const std::string& key,
                                        const GetOptions& options, uint64_t part_size) {
  if (part_size == 0) {
    Promise<Result<Buffer>> failed;
    failed.Set(InvalidArgument("GetBufferInParts: part_size must be positive"));
    return failed.future();
  }
  return std::make_shared<PartedGet>(std::move(store), key, options, part_size)->Start();
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
