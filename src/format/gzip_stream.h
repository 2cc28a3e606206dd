// GzipInflater: streaming gzip decompression for .tar.gz / .tgz shards, fed compressed chunks in
// order, handing out decompressed Buffers. Concatenated gzip members (pigz --independent, bgzip,
// `cat a.gz b.gz`) are one stream, as gzip -d treats them; zero bytes after the last member are
// ignored, like gzip does. (Python's tarfile in stream mode, which webdataset uses, stops after the
// first gzip member and silently drops the rest of such a shard.)
//
// Threading: not thread-safe; one instance per stream. It owns its zlib state. Output Buffers are
// slices of storage the inflater keeps writing past (never into bytes already handed out), so they
// may go to other threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "s3stream/buffer.h"
#include "s3stream/status.h"

namespace s3stream::internal {

// True when `head` starts with the gzip magic bytes 1f 8b.
bool HasGzipMagic(std::span<const uint8_t> head);
// True for names ending in .tgz or .tar.gz (any case): shards read through GzipInflater.
bool IsGzipShardName(std::string_view name);

class GzipInflater {
 public:
  using OutputCallback = std::function<Status(Buffer)>;

  // `source_name` names the object in error messages. Output is produced in storage blocks of
  // `block_size` bytes; each Feed hands out what it produced, at most one Buffer per block.
  explicit GzipInflater(std::string source_name, size_t block_size = 1 << 20);
  ~GzipInflater();
  GzipInflater(const GzipInflater&) = delete;
  GzipInflater& operator=(const GzipInflater&) = delete;

  // Decompresses the next compressed bytes. kCorrupt names the source and the compressed offset.
  Status Feed(std::span<const uint8_t> input, const OutputCallback& on_output);
  // End of input: kCorrupt when it stopped inside a gzip member, or was empty.
  Status Finish();

  uint64_t compressed_offset() const { return compressed_offset_; }
  uint64_t decompressed_offset() const { return decompressed_offset_; }

 private:
  struct ZState;
  enum class State { kMember, kBetween, kTrailingZeros, kFailed };

  Status Fail(Status status);
  Status Emit(const OutputCallback& on_output);

  std::string source_;
  size_t block_size_;
  std::unique_ptr<ZState> z_;
  State state_ = State::kBetween;
  Status failed_;
  bool seen_member_ = false;
  uint64_t member_start_ = 0;
  uint64_t compressed_offset_ = 0;
  uint64_t decompressed_offset_ = 0;
  Buffer block_;       // output storage: [0, emitted_) was handed out, then [emitted_, size) is ready
  size_t emitted_ = 0;
};

}  // namespace s3stream::internal
