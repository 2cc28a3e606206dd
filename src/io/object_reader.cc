#include "s3stream/object_reader.h"

#include <algorithm>
#include <cstring>

namespace s3stream {

Result<std::unique_ptr<ObjectReader>> ObjectReader::Open(std::shared_ptr<ObjectStore> store, std::string key,
                                                         ReaderOptions options, std::optional<ObjectInfo> known) {
  if (options.chunk_size == 0 || options.prefetch_chunks < 0) {
    return InvalidArgument("reader options: chunk_size must be > 0 and prefetch_chunks >= 0");
  }
  ObjectInfo info;
  if (known) {
    info = *known;
  } else {
    S3S_ASSIGN_OR_RETURN(info, store->Head(key).Take());
  }
  return std::unique_ptr<ObjectReader>(new ObjectReader(std::move(store), std::move(key), std::move(options), std::move(info)));
}

ObjectReader::ObjectReader(std::shared_ptr<ObjectStore> store, std::string key, ReaderOptions options, ObjectInfo info)
    : store_(std::move(store)), key_(std::move(key)), options_(std::move(options)), info_(std::move(info)) {
  pool_ = options_.pool ? options_.pool
                        : std::make_shared<BufferPool>(options_.chunk_size * (options_.prefetch_chunks + 1));
}

namespace {

// Fills a chunk's buffer; gives up as soon as the reader no longer wants the chunk.
// Threading: called on the store's thread; `cancelled` is set from the reader's thread.
class ChunkSink final : public BodySink {
 public:
  ChunkSink(std::string object, Buffer into, std::shared_ptr<std::atomic<bool>> cancelled)
      : object_(std::move(object)), buffer_(std::move(into)), cancelled_(std::move(cancelled)) {}

  Status OnStart(const GetStart& start) override {
    if (cancelled_->load()) return Cancelled("read-ahead of " + object_ + " no longer needed");
    if (start.content_length != buffer_.capacity()) {
      return Internal(object_ + ": expected " + std::to_string(buffer_.capacity()) + " bytes, the store announced " +
                      std::to_string(start.content_length));
    }
    return Status::Ok();
  }
  Status OnData(std::span<const uint8_t> bytes) override {
    if (cancelled_->load()) return Cancelled("read-ahead of " + object_ + " no longer needed");
    if (!buffer_.Append(bytes)) return Internal(object_ + ": the store sent more bytes than it announced");
    return Status::Ok();
  }
  Buffer Take() { return std::move(buffer_); }

 private:
  const std::string object_;
  Buffer buffer_;
  std::shared_ptr<std::atomic<bool>> cancelled_;
};

}  // namespace

// In-flight chunks own their buffers and sinks, so nothing here needs to wait for them: they are
// cancelled and finish on the store's thread.
ObjectReader::~ObjectReader() { DropChunks(); }

void ObjectReader::DropChunks() {
  for (auto& chunk : chunks_) chunk.cancelled->store(true);
  chunks_.clear();
}

uint64_t ObjectReader::ChunkCount() const { return (info_.size + options_.chunk_size - 1) / options_.chunk_size; }

void ObjectReader::Seek(uint64_t position) { position_ = position; }

bool ObjectReader::Request(uint64_t index, bool blocking) {
  const uint64_t start = index * options_.chunk_size;
  const uint64_t end = std::min<uint64_t>(start + options_.chunk_size, info_.size);
  Buffer into = blocking ? pool_->Acquire(end - start) : pool_->TryAcquire(end - start);
  if (!into.valid()) return false;
  GetOptions get;
  get.range = ByteRange{start, end};
  get.if_match = info_.etag;
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  auto sink = std::make_shared<ChunkSink>(store_->Describe(key_), std::move(into), cancelled);
  Promise<Result<Buffer>> promise;
  store_->Get(key_, get, sink).Then([sink, promise](const Status& status) mutable {
    promise.Set(status.ok() ? Result<Buffer>(sink->Take()) : Result<Buffer>(status));
  });
  chunks_.push_back(Chunk{index, promise.future(), std::move(cancelled)});
  return true;
}

void ObjectReader::Schedule() {
  const uint64_t current = position_ / options_.chunk_size;
  // Sequential: the read continues in the chunk where the last one ended, or the next one.
  const bool sequential = last_chunk_ && (current == *last_chunk_ || current == *last_chunk_ + 1);
  if (!sequential) window_ = 1;
  else if (current != *last_chunk_) window_ = std::min<uint64_t>(window_ * 2, std::max(1, options_.prefetch_chunks));
  last_chunk_ = current;

  while (!chunks_.empty() && chunks_.front().index < current) {
    chunks_.front().cancelled->store(true);  // a no-op for a chunk already read
    chunks_.pop_front();
  }
  if (!chunks_.empty() && chunks_.front().index != current) DropChunks();  // seeked outside the window
  if (chunks_.empty()) Request(current, /*blocking=*/true);

  const uint64_t last_wanted = std::min(ChunkCount(), current + 1 + (options_.prefetch_chunks ? window_ : 0));
  while (chunks_.back().index + 1 < last_wanted) {
    if (!Request(chunks_.back().index + 1, /*blocking=*/false)) break;  // budget full: try again next read
  }
}

Result<Buffer> ObjectReader::CurrentChunk() {
  Schedule();
  const Result<Buffer>& result = chunks_.front().data.Wait();
  if (!result.ok()) {
    Status status = result.status();
    chunks_.pop_front();  // let a later read try again
    return status;
  }
  return result.value();
}

Result<Buffer> ObjectReader::ReadBuffer(size_t max_bytes) {
  if (position_ >= info_.size || max_bytes == 0) return Buffer::Allocate(0);
  S3S_ASSIGN_OR_RETURN(Buffer chunk, CurrentChunk());
  const uint64_t offset = position_ % options_.chunk_size;
  const size_t n = std::min<uint64_t>(max_bytes, chunk.size() - offset);
  position_ += n;
  return chunk.Slice(offset, n);
}

Result<size_t> ObjectReader::Read(std::span<uint8_t> dest) {
  size_t total = 0;
  while (total < dest.size() && position_ < info_.size) {
    S3S_ASSIGN_OR_RETURN(Buffer piece, ReadBuffer(dest.size() - total));
    std::memcpy(dest.data() + total, piece.data(), piece.size());
    total += piece.size();
  }
  return total;
}

}  // namespace s3stream
