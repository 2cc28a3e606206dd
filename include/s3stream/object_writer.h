// ObjectWriter: streams bytes into a new object. Small objects go up in one PUT at Close(); once a
// part fills, a multipart upload starts and full parts upload in parallel (up to max_inflight_parts)
// while the caller keeps writing. Nothing is visible until Close() succeeds; any failure, or
// destroying the writer without Close(), aborts the upload so no partial object or orphaned
// parts remain.
//
// Memory: at most (max_inflight_parts + 1) parts are held.
// Part size: starts at part_size and doubles every 1,000 parts, so S3's 10,000-part limit still
// allows objects far beyond part_size * 10,000.
//
// Threading: one producer thread at a time; uploads complete on the store's threads.
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "s3stream/object_store.h"

namespace s3stream {

struct WriterOptions {
  size_t part_size = 8 << 20;  // S3 requires >= 5 MiB for every part but the last
  int max_inflight_parts = 4;
};

class ObjectWriter {
 public:
  static Result<std::unique_ptr<ObjectWriter>> Create(std::shared_ptr<ObjectStore> store, std::string key,
                                                      WriterOptions options = {});
  ~ObjectWriter();  // aborts unless Close() succeeded

  Status Write(std::span<const uint8_t> bytes);
  // Commits the object. After it returns (either way) the writer is finished.
  Status Close();
  // Discards everything written; idempotent.
  void Abort();

  uint64_t bytes_written() const { return bytes_written_; }

 private:
  struct InflightPart {
    int number;
    Future<Result<std::string>> etag;
  };

  ObjectWriter(std::shared_ptr<ObjectStore> store, std::string key, WriterOptions options);
  size_t CurrentPartSize() const;
  Status FlushPart();
  Status WaitOldest();
  Status Fail(Status status);

  const std::shared_ptr<ObjectStore> store_;
  const std::string key_;
  const WriterOptions options_;

  Buffer part_;
  std::string upload_id_;  // empty until the first part is flushed
  int next_part_ = 1;
  std::deque<InflightPart> inflight_;
  std::vector<CompletedPart> completed_;
  uint64_t bytes_written_ = 0;
  Status error_;          // the first failure; sticky
  bool finished_ = false;
};

}  // namespace s3stream
