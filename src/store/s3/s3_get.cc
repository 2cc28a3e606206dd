// GET with resume. A transfer that fails after part of the body arrived continues from the next
// byte with a ranged GET pinned to the ETag first seen (If-Match), so the sink sees every byte
// exactly once and a replaced object is reported instead of silently mixed.
#include <algorithm>
#include <cstdlib>

#include "store/s3/s3_store.h"
#include "util/numbers.h"

namespace s3stream::internal {
namespace {

std::string RangeText(uint64_t start, std::optional<uint64_t> end) {
  return "[" + std::to_string(start) + ", " + (end ? std::to_string(*end) : std::string("end")) + ")";
}

// Threading: all callbacks arrive on the transport thread, one attempt at a time, so the state
// needs no lock. Lifetime: each attempt's handler holds the operation.
class GetOperation : public std::enable_shared_from_this<GetOperation> {
 public:
  GetOperation(std::shared_ptr<const S3Context> ctx, std::string bucket, std::string key, GetOptions options,
               std::shared_ptr<BodySink> sink)
      : ctx_(std::move(ctx)),
        bucket_(std::move(bucket)),
        key_(std::move(key)),
        object_("s3://" + bucket_ + "/" + key_),
        error_ctx_(MakeErrorContext(*ctx_, "GET", bucket_, object_)),
        options_(std::move(options)),
        sink_(std::move(sink)),
        etag_(StripQuotes(options_.if_match)) {}

  Future<Status> Begin() {
    if (options_.range) {
      start_ = options_.range->start;
      end_ = options_.range->end;
      if (end_ && *end_ < start_) {
        Finish(OutOfRange("invalid byte range " + RangeText(start_, end_) + " for " + object_ + ": end is before start"));
        return promise_.future();
      }
      // HTTP cannot ask for zero bytes; a HEAD checks the object and the bounds instead.
      if (end_ && *end_ == start_) {
        ResolveEmptyRange();
        return promise_.future();
      }
    }
    Attempt();
    return promise_.future();
  }

 private:
  class AttemptHandler;

  void Attempt();

  // Returns false to abort the attempt (failure_ or sink_status_ says why).
  bool OnResponseStart(int http_status, const HttpHeaders& headers, uint64_t requested_from, uint64_t* skip) {
    uint64_t first = 0, last = 0, total = 0;
    if (http_status == 206) {
      const std::string* cr = FindHeader(headers, "Content-Range");
      if (!cr || !ParseContentRange(*cr, &first, &last, &total)) {
        return Fail(Internal("GET " + object_ + ": 206 response without a valid Content-Range"), false);
      }
      if (first != requested_from) {
        return Fail(Internal("GET " + object_ + ": asked for byte " + std::to_string(requested_from) +
                             " but the server sent from " + std::to_string(first)), false);
      }
      if (const std::string* cl = FindHeader(headers, "Content-Length"); cl && ParseSize(*cl) != last - first + 1) {
        return Fail(Internal("GET " + object_ + ": the response's Content-Length and Content-Range disagree"), false);
      }
    } else {
      // 200: the whole object, also when a range was asked for (servers may ignore Range). Its
      // length must be stated: without it (a chunked or close-delimited body) a cut-short body
      // would look complete.
      const std::string* cl = FindHeader(headers, "Content-Length");
      std::optional<uint64_t> length = cl ? ParseSize(*cl) : std::nullopt;
      if (!length) {
        return Fail(Internal("GET " + object_ + ": the response has " +
                             (cl ? "an invalid Content-Length" : "no Content-Length (a chunked or close-delimited body)") +
                             ", so a cut-short body could not be told from a whole one; S3 always states it"), false);
      }
      total = *length;
      *skip = requested_from;
    }
    const std::string* etag_header = FindHeader(headers, "ETag");
    std::string etag = etag_header ? StripQuotes(*etag_header) : "";
    // A server that ignores If-Match answers with another version: refuse it rather than mix.
    if (!etag_.empty() && !etag.empty() && etag != etag_) {
      return Fail(Status(StatusCode::kPreconditionFailed,
                         object_ + " changed while it was being read (ETag " + etag + ", expected " + etag_ +
                             "); restart the read"), false);
    }

    if (!started_) {
      if (end_ && *end_ > total && options_.clamp_end) end_ = std::max(start_, total);
      if ((end_ && *end_ > total) || start_ > total) {
        return Fail(OutOfRange("byte range " + RangeText(start_, end_) + " is outside " + object_ + " (" +
                               std::to_string(total) + " bytes)"), false);
      }
      object_size_ = total;
      content_length_ = (end_ ? *end_ : total) - start_;
      if (etag_.empty()) etag_ = etag;
      started_ = true;
      sink_status_ = sink_->OnStart(GetStart{object_size_, content_length_, etag_});
      if (!sink_status_.ok()) return false;
    } else if (total != object_size_ || (!etag.empty() && !etag_.empty() && etag != etag_)) {
      return Fail(Status(StatusCode::kPreconditionFailed,
                         object_ + " changed while it was being read (after " + std::to_string(delivered_) + " of " +
                             std::to_string(content_length_) + " bytes); restart the read"), false);
    }
    return true;
  }

  bool OnResponseBody(std::span<const uint8_t> bytes, uint64_t* skip) {
    if (*skip) {
      size_t n = std::min<uint64_t>(*skip, bytes.size());
      bytes = bytes.subspan(n);
      *skip -= n;
    }
    const uint64_t remaining = content_length_ - delivered_;
    // More than wanted (a server that ignored Range, or sent past what it announced): keep what
    // was asked for and stop the transfer instead of reading the rest.
    const bool more = bytes.size() > remaining;
    if (more) bytes = bytes.first(remaining);
    if (!bytes.empty()) {
      sink_status_ = sink_->OnData(bytes);
      if (!sink_status_.ok()) return false;
      delivered_ += bytes.size();
    }
    return !more;
  }

  void OnAttemptComplete(const Status& transport_status, int http_status, const std::string& error_body) {
    if (!sink_status_.ok()) return Finish(sink_status_);
    if (failure_) return Finish(failure_->status);
    // Every wanted byte arrived: done, whatever happened to the rest of the response.
    if (started_ && delivered_ == content_length_ && (http_status == 200 || http_status == 206)) {
      return Finish(Status::Ok());
    }
    if (!Wanted()) return Finish(Cancelled("GET " + object_ + " is no longer wanted"));
    AttemptFailure failure;
    if (!transport_status.ok()) {
      failure = ClassifyTransportError(transport_status, error_ctx_);
    } else if (http_status == 416 && !started_) {
      return ResolveEmptyRange();
    } else if (http_status >= 300) {
      failure = ClassifyHttpError(http_status, error_body, error_ctx_);
      if (http_status == 412 && started_) {
        failure.status = Status(StatusCode::kPreconditionFailed,
                                object_ + " changed while it was being read (after " + std::to_string(delivered_) +
                                    " of " + std::to_string(content_length_) + " bytes); restart the read");
      }
    } else if (delivered_ < content_length_) {
      failure.retryable = true;
      failure.connection_lost = true;
      failure.status = Unavailable("GET " + object_ + ": the connection ended after " + std::to_string(delivered_) +
                                   " of " + std::to_string(content_length_) + " bytes");
    } else {
      return Finish(Status::Ok());
    }
    if (ctx_->retry.ShouldRetry(failure, attempt_, deadline_)) {
      auto self = shared_from_this();
      ctx_->transport->RunAfter(ctx_->retry.Delay(failure, attempt_), [self] { self->Attempt(); });
      return;
    }
    Finish(GiveUp(failure, attempt_, error_ctx_, deadline_));
  }

  // The range starts at or past the end: fine only for an empty read exactly at the end.
  void ResolveEmptyRange() {
    auto self = shared_from_this();
    StartS3Head(ctx_, bucket_, key_).Then([self](const Result<ObjectInfo>& head) {
      if (!head.ok()) return self->Finish(head.status());
      uint64_t size = head->size;
      uint64_t end = self->end_.value_or(size);
      if (self->options_.clamp_end) end = std::min(end, std::max(self->start_, size));
      if (self->start_ > size || end > size) {
        return self->Finish(OutOfRange("byte range " + RangeText(self->start_, self->end_) + " is outside " +
                                       self->object_ + " (" + std::to_string(size) + " bytes)"));
      }
      if (!self->etag_.empty() && self->etag_ != head->etag) {
        return self->Finish(Status(StatusCode::kPreconditionFailed, self->object_ + " does not have ETag " + self->etag_));
      }
      self->sink_status_ = self->sink_->OnStart(GetStart{size, 0, head->etag});
      self->Finish(self->sink_status_);
    });
  }

  // Still wanted by the caller; checked by the transport while the attempt is in flight.
  bool Wanted() const { return sink_ && sink_->Wanted(); }

  bool Fail(Status status, bool retryable) {
    failure_ = AttemptFailure{std::move(status), retryable};
    return false;
  }

  void Finish(Status status) {
    sink_.reset();
    promise_.Set(std::move(status));
  }

  const std::shared_ptr<const S3Context> ctx_;
  const std::string bucket_, key_, object_;
  const ErrorContext error_ctx_;
  const GetOptions options_;
  std::shared_ptr<BodySink> sink_;
  Promise<Status> promise_;

  uint64_t start_ = 0;
  std::optional<uint64_t> end_;
  std::string etag_;  // pinned by the first response (or the caller's if_match)
  const Deadline deadline_ = ctx_->retry.StartDeadline();
  bool started_ = false;
  uint64_t object_size_ = 0;
  uint64_t content_length_ = 0;
  uint64_t delivered_ = 0;
  int attempt_ = 0;
  Status sink_status_;
  std::optional<AttemptFailure> failure_;  // a non-retryable problem found mid-attempt
};

class GetOperation::AttemptHandler final : public ResponseHandler {
 public:
  AttemptHandler(std::shared_ptr<GetOperation> op, uint64_t from) : op_(std::move(op)), from_(from) {}

  bool OnHeaders(int http_status, const HttpHeaders& headers) override {
    http_status_ = http_status;
    if (http_status == 200 || http_status == 206) return op_->OnResponseStart(http_status, headers, from_, &skip_);
    return true;  // an error: collect the document
  }
  bool OnBody(std::span<const uint8_t> bytes) override {
    if (http_status_ == 200 || http_status_ == 206) return op_->OnResponseBody(bytes, &skip_);
    if (error_body_.size() < 64 * 1024) error_body_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return true;
  }
  bool Wanted() override { return op_->Wanted(); }
  void OnComplete(const Status& status) override {
    // A handler-initiated abort is reported through the operation's own state, not as a network error.
    Status transport = status.code() == StatusCode::kCancelled && (!op_->sink_status_.ok() || op_->failure_)
                           ? Status::Ok() : status;
    op_->OnAttemptComplete(transport, http_status_, error_body_);
  }

 private:
  std::shared_ptr<GetOperation> op_;
  uint64_t from_;
  uint64_t skip_ = 0;
  int http_status_ = 0;
  std::string error_body_;
};

void GetOperation::Attempt() {
  if (!Wanted()) return Finish(Cancelled("GET " + object_ + " is no longer wanted"));
  ++attempt_;
  HttpHeaders headers;
  const uint64_t from = start_ + delivered_;
  if (options_.range || delivered_ > 0) {
    std::string range = "bytes=" + std::to_string(from) + "-";
    if (end_) range += std::to_string(*end_ - 1);
    headers.emplace_back("Range", range);
  }
  if (!etag_.empty()) headers.emplace_back("If-Match", "\"" + etag_ + "\"");
  Result<HttpRequest> request = MakeS3Request(*ctx_, "GET", {bucket_, key_, ""}, std::move(headers));
  if (!request.ok()) return Finish(WithoutCredentials(request.status(), error_ctx_));
  request->timeout = deadline_.remaining();
  ctx_->transport->Send(std::move(request.value()), std::make_shared<AttemptHandler>(shared_from_this(), from));
}

}  // namespace

Future<Status> StartS3Get(std::shared_ptr<const S3Context> ctx, std::string bucket, std::string key,
                          GetOptions options, std::shared_ptr<BodySink> sink) {
  auto op = std::make_shared<GetOperation>(std::move(ctx), std::move(bucket), std::move(key), std::move(options),
                                           std::move(sink));
  return op->Begin();
}

}  // namespace s3stream::internal
