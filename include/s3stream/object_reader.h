// ObjectReader: a seekable reader over one object, on the range engine (range_fetcher.h). Reading
// forward keeps a window of chunk-sized ranged GETs in flight ahead of the consumer; the window
// starts at two chunks after a seek and doubles each time the consumer has to wait for a chunk
// still on the wire, up to 1 + prefetch_chunks chunks, so a sequential consumer waits for at most
// the first chunk's time to first byte and a slow one holds little memory. Every chunk is pinned
// to the ETag seen at open, so an object replaced mid-read fails with kPreconditionFailed instead of
// mixing versions. A forward seek within what is already requested keeps it; any other seek
// cancels the read-ahead and starts again from the new position.
//
// Memory: at most (prefetch_chunks + 1) chunks are requested ahead, or less when `pool` is shared
// with other readers and at its limit (read-ahead then waits for the consumer: backpressure).
//
// Threading: one consumer thread at a time (like a file object); the store's threads fill chunks.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "s3stream/object_store.h"
#include "s3stream/range_fetcher.h"

namespace s3stream {

struct ReaderOptions {
  size_t chunk_size = 8 << 20;
  int prefetch_chunks = 8;
  std::shared_ptr<BufferPool> pool;  // none: chunks allocate their own memory (the window bounds it)
};

class ObjectReader {
 public:
  // HEADs the object unless `known` (e.g. from a listing) already says its size and ETag.
  static Result<std::unique_ptr<ObjectReader>> Open(std::shared_ptr<ObjectStore> store, std::string key,
                                                    ReaderOptions options = {},
                                                    std::optional<ObjectInfo> known = std::nullopt);
  ~ObjectReader();

  uint64_t size() const { return info_.size; }
  const ObjectInfo& info() const { return info_; }
  uint64_t Tell() const { return position_; }
  // Any position is allowed; reading past the end yields 0 bytes.
  void Seek(uint64_t position);

  // Copies up to dest.size() bytes from the current position; 0 means end of object. Blocks only
  // for the chunk under the position.
  Result<size_t> Read(std::span<uint8_t> dest);

  // Zero-copy variant: a slice of the chunk under the position, at most `max_bytes` long.
  Result<Buffer> ReadBuffer(size_t max_bytes);

  // The read-ahead window, waits on the network, GETs issued.
  const FetchStats& stats() const { return fetcher_.stats(); }

 private:
  ObjectReader(std::shared_ptr<ObjectStore> store, std::string key, ReaderOptions options, ObjectInfo info);
  // The chunk holding position_, fetched (or taken from the read-ahead) as needed.
  Result<Buffer> ChunkAtPosition();
  RangeFetcher::Source From(uint64_t offset) const;

  const std::shared_ptr<ObjectStore> store_;
  const std::string key_;
  const ReaderOptions options_;
  const ObjectInfo info_;
  RangeFetcher fetcher_;

  uint64_t position_ = 0;
  bool streaming_ = false;              // the fetcher holds a range to read from
  std::optional<FetchedPiece> current_;  // the chunk last delivered
};

}  // namespace s3stream
