#include "s3stream/object_reader.h"

#include <algorithm>
#include <cstring>

namespace s3stream {
namespace {

FetchOptions WindowOf(const ReaderOptions& o) {
  FetchOptions f;
  f.piece_size = o.chunk_size;
  const uint64_t ahead = static_cast<uint64_t>(std::max(0, o.prefetch_chunks));
  f.initial_window = o.chunk_size * (1 + std::min<uint64_t>(ahead, 1));
  f.max_window = o.chunk_size * (1 + ahead);
  f.pool = o.pool;
  return f;
}

}  // namespace

Result<std::unique_ptr<ObjectReader>> ObjectReader::Open(std::shared_ptr<ObjectStore> store, std::string key,
                                                         ReaderOptions options, std::optional<ObjectInfo> known) {
  if (options.chunk_size == 0 || options.prefetch_chunks < 0) {
    return InvalidArgument("reader options: chunk_size must be > 0 and prefetch_chunks >= 0");
  }
  ObjectInfo info;
  if (known) {
    info = *known;
  } else {
    S3S_ASSIGN_OR_RETURN(info, Await(store->Head(key), "HEAD " + store->Describe(key)));
  }
  return std::unique_ptr<ObjectReader>(new ObjectReader(std::move(store), std::move(key), std::move(options), std::move(info)));
}

ObjectReader::ObjectReader(std::shared_ptr<ObjectStore> store, std::string key, ReaderOptions options, ObjectInfo info)
    : store_(std::move(store)),
      key_(std::move(key)),
      options_(std::move(options)),
      info_(std::move(info)),
      fetcher_(nullptr, WindowOf(options_)) {}

// In-flight chunks belong to the fetcher, which cancels them; they finish on the store's thread.
ObjectReader::~ObjectReader() = default;

void ObjectReader::Seek(uint64_t position) { position_ = position; }

// The rest of the object from `offset` (a chunk boundary), pinned to the ETag seen at open.
RangeFetcher::Source ObjectReader::From(uint64_t offset) const {
  FetchRange rest;
  rest.store = store_;
  rest.key = key_;
  rest.start = offset;
  rest.end = info_.size;
  rest.etag = info_.etag;
  auto range = std::make_shared<std::optional<FetchRange>>(std::move(rest));
  return [range]() {
    std::optional<FetchRange> out = std::move(*range);
    range->reset();
    return out;
  };
}

Result<Buffer> ObjectReader::ChunkAtPosition() {
  if (current_ && position_ >= current_->offset && position_ < current_->offset + current_->data.size()) {
    return current_->data;
  }
  if (current_) {
    fetcher_.Release(current_->data.size());
    current_.reset();
  }
  // Sequential, or a forward seek into what is already requested: keep the read-ahead.
  if (!streaming_ || !fetcher_.SkipTo(position_)) {
    fetcher_.Restart(From(position_ / options_.chunk_size * options_.chunk_size));
    streaming_ = true;
  }
  Result<std::optional<FetchedPiece>> next = fetcher_.Next();
  if (!next.ok()) {
    streaming_ = false;  // a later read starts over (and may succeed)
    return next.status();
  }
  if (!*next || position_ < (*next)->offset || position_ >= (*next)->offset + (*next)->data.size()) {
    streaming_ = false;
    return Internal(store_->Describe(key_) + ": the read-ahead did not deliver byte " + std::to_string(position_));
  }
  current_ = std::move(**next);
  return current_->data;
}

Result<Buffer> ObjectReader::ReadBuffer(size_t max_bytes) {
  if (position_ >= info_.size || max_bytes == 0) return Buffer::Allocate(0);
  S3S_ASSIGN_OR_RETURN(Buffer chunk, ChunkAtPosition());
  const uint64_t offset = position_ - current_->offset;
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
