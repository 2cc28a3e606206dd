// ObjectReader: a seekable reader over one object. Reading forward grows a read-ahead window of
// ranged GETs kept in flight ahead of the consumer (like the kernel's readahead: it starts at one
// chunk after a seek and doubles while reads stay sequential), so a sequential consumer waits for
// at most the first chunk's time to first byte. Every chunk is pinned to the ETag seen at open, so
// an object replaced mid-read fails with kPreconditionFailed instead of mixing versions.
//
// Memory: at most (prefetch_chunks + 1) * chunk_size bytes are held, or less when `pool` is shared
// with other readers and at its limit (prefetch then waits for the consumer: backpressure).
//
// Threading: one consumer thread at a time (like a file object); the store's threads fill chunks.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "s3stream/object_store.h"

namespace s3stream {

struct ReaderOptions {
  size_t chunk_size = 8 << 20;
  int prefetch_chunks = 8;
  std::shared_ptr<BufferPool> pool;  // none: a private pool of (prefetch_chunks + 1) chunks
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

 private:
  struct Chunk {
    uint64_t index;
    Future<Result<Buffer>> data;
    // Set when the chunk is dropped unread: its GET stops at the next piece of body that arrives
    // instead of finishing a download nobody wants.
    std::shared_ptr<std::atomic<bool>> cancelled;
  };

  ObjectReader(std::shared_ptr<ObjectStore> store, std::string key, ReaderOptions options, ObjectInfo info);
  uint64_t ChunkCount() const;
  // Ensures the chunk under position_ (and the read-ahead window after it) is requested.
  void Schedule();
  bool Request(uint64_t index, bool blocking);
  Result<Buffer> CurrentChunk();
  void DropChunks();

  const std::shared_ptr<ObjectStore> store_;
  const std::string key_;
  const ReaderOptions options_;
  const ObjectInfo info_;
  std::shared_ptr<BufferPool> pool_;

  uint64_t position_ = 0;
  uint64_t window_ = 1;                 // chunks to keep in flight, grows while sequential
  std::optional<uint64_t> last_chunk_;  // the chunk the previous read ended in
  std::deque<Chunk> chunks_;            // requested chunks, ascending and contiguous
};

}  // namespace s3stream
