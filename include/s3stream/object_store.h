// ObjectStore: the operations s3stream needs from a store, implemented by the `s3` and `file`
// drivers. A store is scoped to one bucket (S3) or one root directory (file); keys are relative.
//
// Every operation is asynchronous and returns a Future; a driver may complete it on its own I/O
// thread. Failures are Status values whose messages name the object (`Describe(key)`), never
// credentials. Retries of transient failures happen inside the driver, so a failed Future means the
// driver has given up.
//
// Threading: all methods are thread-safe. A store must outlive the futures it returned, and the
// sinks it was handed are held (shared_ptr) until their GET completes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "s3stream/buffer.h"
#include "s3stream/future.h"
#include "s3stream/status.h"

namespace s3stream {

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string etag;           // as the store reports it, quotes removed
  std::string last_modified;  // ISO 8601 as the store reports it; may be empty
};

// Bytes [start, end) of an object; no `end` means to the end of the object. Every driver applies
// the same rules: start == size gives 0 bytes; start > end, start > size or end > size is
// kOutOfRange naming the object's size. (S3 itself silently shortens a range whose end is past the
// size; the S3 driver does not, so nothing is ever truncated without an error.)
struct ByteRange {
  uint64_t start = 0;
  std::optional<uint64_t> end;
};

struct GetOptions {
  std::optional<ByteRange> range;
  // "Up to": a range end past the object's end is cut to it instead of failing (as S3 itself
  // does), for a caller that does not know the size yet. A start past the end still fails.
  bool clamp_end = false;
  // When set (quoted or not), the GET fails with kPreconditionFailed if the object's ETag differs.
  std::string if_match;
};

// What a GET learns before its body arrives.
struct GetStart {
  uint64_t object_size = 0;     // the whole object's size
  uint64_t content_length = 0;  // bytes that will be delivered through OnData
  std::string etag;  // quotes removed
};

// Receives a GET's body in order, every byte exactly once, even when the driver resumed the
// transfer after a failure. Called on a driver thread: copy and return, never block.
class BodySink {
 public:
  virtual ~BodySink() = default;
  // Once, before any data. A non-OK Status aborts the GET with that Status.
  virtual Status OnStart(const GetStart& start) = 0;
  virtual Status OnData(std::span<const uint8_t> bytes) = 0;
  // False: nobody wants the bytes any more (a read-ahead dropped, a call interrupted). Drivers ask
  // while the GET is in flight, also while no byte arrives, and stop it within about a second,
  // completing it with kCancelled; a retry is not started.
  virtual bool Wanted() const { return true; }
};

struct ListRequest {
  std::string prefix;
  std::string delimiter;           // empty: list recursively
  std::string continuation_token;  // from the previous page
  int max_keys = 1000;  // 1..1000 (S3's cap)
  // Only without a continuation token: what sorts after this (keys, and common prefixes compared
  // as strings) — where a listing of a range of the key space starts (parallel_list.h).
  std::string start_after;
};

struct ListPage {
  std::vector<ObjectInfo> objects;
  std::vector<std::string> common_prefixes;
  std::string next_continuation_token;  // empty on the last page
};

// A multipart upload begun and neither completed nor aborted: its parts are stored (and billed)
// until it is aborted. A writer that was killed leaves one behind.
struct UploadInfo {
  std::string key;
  std::string upload_id;
  std::string initiated;  // ISO 8601 as the store reports it
};

struct UploadListRequest {
  std::string prefix;
  // Where the previous page ended (its next markers); both empty on the first page.
  std::string key_marker;
  std::string upload_id_marker;
  int max_uploads = 1000;  // 1..1000 (S3's cap)
};

struct UploadPage {
  std::vector<UploadInfo> uploads;  // by key, then by the store's order of uploads of one key
  bool truncated = false;           // more pages follow, from the markers below
  std::string next_key_marker;
  std::string next_upload_id_marker;
};

struct CompletedPart {
  int part_number = 0;
  std::string etag;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // "s3://bucket/key" or "file:///path": how messages name an object.
  virtual std::string Describe(const std::string& key) const = 0;

  virtual Future<Status> Get(const std::string& key, const GetOptions& options,
                             std::shared_ptr<BodySink> sink) = 0;
  virtual Future<Result<ObjectInfo>> Head(const std::string& key) = 0;
  virtual Future<Result<ListPage>> List(const ListRequest& request) = 0;
  // Returns the new object's ETag.
  virtual Future<Result<std::string>> Put(const std::string& key, Buffer data) = 0;
  virtual Future<Status> Delete(const std::string& key) = 0;

  // Multipart upload: parts are numbered from 1; every part but the last must be >= 5 MiB on S3.
  virtual Future<Result<std::string>> CreateMultipartUpload(const std::string& key) = 0;
  virtual Future<Result<std::string>> UploadPart(const std::string& key, const std::string& upload_id,
                                                 int part_number, Buffer data) = 0;
  virtual Future<Status> CompleteMultipartUpload(const std::string& key, const std::string& upload_id,
                                                 const std::vector<CompletedPart>& parts) = 0;
  virtual Future<Status> AbortMultipartUpload(const std::string& key, const std::string& upload_id) = 0;
  // One page of the incomplete uploads whose key starts with the prefix (ListUploads has them all).
  virtual Future<Result<UploadPage>> ListMultipartUploads(const UploadListRequest& request) = 0;
};

// Helpers shared by every driver's callers.

// One GET into one Buffer sized from the response (readers split and pipeline ranges through the
// range engine, range_fetcher.h; this is the single request underneath, for tests and tools).
Future<Result<Buffer>> GetBuffer(ObjectStore& store, const std::string& key, const GetOptions& options = {});

// The pages of a listing, in order, following continuation tokens: every way of listing (ListEach,
// Client listings, so Python's Client.list) goes through it. A store that hands out a token it
// gave before would make the listing endless; that is refused (kCorrupt) instead.
// Threading: one caller at a time. Blocks: never call Next from a driver's thread.
class ListPager {
 public:
  ListPager(std::shared_ptr<ObjectStore> store, ListRequest first);
  // The next page, or nullopt after the last one.
  Result<std::optional<ListPage>> Next();

 private:
  std::shared_ptr<ObjectStore> store_;
  ListRequest request_;
  bool done_ = false;
  std::set<std::string> seen_tokens_;
};

// Every page of a listing; `on_page` sees each as it arrives and may stop with a non-OK status.
Status ListEach(std::shared_ptr<ObjectStore> store, ListRequest request,
                const std::function<Status(const ListPage&)>& on_page);

// Every incomplete multipart upload under `prefix`, following the pages' markers. A store that
// hands out a marker pair it gave before would make the listing endless; that is refused (kCorrupt).
// Blocks: never call it from a driver's thread.
Result<std::vector<UploadInfo>> ListUploads(ObjectStore& store, const std::string& prefix, int page_size = 1000);

}  // namespace s3stream
