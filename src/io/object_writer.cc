#include "s3stream/object_writer.h"

#include <algorithm>
#include <atomic>

namespace s3stream {

namespace {
constexpr size_t kMinPartSize = 5 << 20;
constexpr int kPartsPerDoubling = 1000;
}  // namespace

Result<std::unique_ptr<ObjectWriter>> ObjectWriter::Create(std::shared_ptr<ObjectStore> store, std::string key,
                                                           WriterOptions options) {
  if (options.part_size < kMinPartSize) {
    return InvalidArgument("part_size must be at least 5 MiB (S3's minimum part size), got " +
                           std::to_string(options.part_size));
  }
  if (options.max_inflight_parts < 1) return InvalidArgument("max_inflight_parts must be at least 1");
  if (key.empty()) return InvalidArgument("cannot write to " + store->Describe(key) + ": the URI names no object");
  return std::unique_ptr<ObjectWriter>(new ObjectWriter(std::move(store), std::move(key), options));
}

ObjectWriter::ObjectWriter(std::shared_ptr<ObjectStore> store, std::string key, WriterOptions options)
    : store_(std::move(store)), key_(std::move(key)), options_(options) {}

ObjectWriter::~ObjectWriter() { Abort(); }

size_t ObjectWriter::CurrentPartSize() const {
  return options_.part_size << std::min(8, (next_part_ - 1) / kPartsPerDoubling);
}

Status ObjectWriter::Write(std::span<const uint8_t> bytes) {
  if (finished_) return error_.ok() ? InvalidArgument("write to " + store_->Describe(key_) + " after close") : error_;
  while (!bytes.empty()) {
    if (!part_.valid()) part_ = Buffer::Allocate(CurrentPartSize());
    size_t n = std::min(bytes.size(), part_.capacity() - part_.size());
    part_.Append(bytes.first(n));
    bytes = bytes.subspan(n);
    bytes_written_ += n;
    if (part_.size() == part_.capacity()) S3S_RETURN_IF_ERROR(FlushPart());
  }
  return Status::Ok();
}

Status ObjectWriter::FlushPart() {
  if (upload_id_.empty()) {
    Result<std::string> id = Await(store_->CreateMultipartUpload(key_), "starting the upload of " + store_->Describe(key_));
    if (!id.ok()) return Fail(id.status());
    upload_id_ = *id;
  }
  while (static_cast<int>(inflight_.size()) >= options_.max_inflight_parts) S3S_RETURN_IF_ERROR(WaitOldest());
  int number = next_part_++;
  inflight_.push_back({number, store_->UploadPart(key_, upload_id_, number, std::move(part_))});
  part_ = Buffer();
  return Status::Ok();
}

Status ObjectWriter::WaitOldest() {
  InflightPart part = std::move(inflight_.front());
  inflight_.pop_front();
  Result<std::string> etag = Await(part.etag, "the upload of " + store_->Describe(key_));
  if (!etag.ok()) return Fail(etag.status());
  completed_.push_back({part.number, *etag});
  return Status::Ok();
}

Status ObjectWriter::Close() {
  if (finished_) return error_;
  if (upload_id_.empty()) {
    // Never filled a part: one PUT (also for an empty object).
    Result<std::string> etag = Await(store_->Put(key_, part_.valid() ? std::move(part_) : Buffer::Allocate(0)),
                                     "the upload of " + store_->Describe(key_));
    if (!etag.ok()) return Fail(etag.status());
    finished_ = true;
    return Status::Ok();
  }
  if (part_.valid() && !part_.empty()) S3S_RETURN_IF_ERROR(FlushPart());
  while (!inflight_.empty()) S3S_RETURN_IF_ERROR(WaitOldest());
  Status done = Await(store_->CompleteMultipartUpload(key_, upload_id_, completed_),
                      "completing the upload of " + store_->Describe(key_));
  if (!done.ok()) return Fail(done);
  finished_ = true;
  upload_id_.clear();
  return Status::Ok();
}

Status ObjectWriter::Fail(Status status) {
  error_ = status;
  Abort();
  return status;
}

void ObjectWriter::Abort() {
  if (finished_ && upload_id_.empty()) return;
  finished_ = true;
  if (error_.ok()) error_ = Cancelled("upload of " + store_->Describe(key_) + " was aborted");
  part_ = Buffer();
  if (upload_id_.empty()) {
    inflight_.clear();
    return;
  }
  // The abort must go out after every part in flight has ended: a part landing after it would
  // leave storage behind. That is normally waited for here; when the wait is interrupted (Ctrl-C),
  // the last part to end sends it and the caller goes on at once.
  bool waited = true;
  for (auto& part : inflight_) waited = waited && part.etag.WaitInterruptibly();
  if (waited) {
    inflight_.clear();
    Await(store_->AbortMultipartUpload(key_, upload_id_), "aborting the upload of " + store_->Describe(key_));
    upload_id_.clear();
    return;
  }
  auto pending = std::make_shared<std::atomic<size_t>>(inflight_.size());
  auto send_abort = [pending, store = store_, key = key_, id = upload_id_] {
    if (--*pending == 0) store->AbortMultipartUpload(key, id);
  };
  for (auto& part : inflight_) part.etag.Then([send_abort](const Result<std::string>&) { send_abort(); });
  inflight_.clear();
  upload_id_.clear();
}

}  // namespace s3stream
