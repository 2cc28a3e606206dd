#include "store/s3/s3_store.h"

#include <cstdio>
#include <ctime>

#include "util/numbers.h"

namespace s3stream::internal {
namespace {

std::string Encode(std::string_view v) { return UriEncode(v, /*keep_slash=*/false); }

// Threading: stateless beyond the immutable context; every call is independent.
class S3Store final : public ObjectStore {
 public:
  S3Store(std::shared_ptr<const S3Context> ctx, std::string bucket) : ctx_(std::move(ctx)), bucket_(std::move(bucket)) {}

  std::string Describe(const std::string& key) const override { return "s3://" + bucket_ + "/" + key; }

  Future<Status> Get(const std::string& key, const GetOptions& options, std::shared_ptr<BodySink> sink) override {
    return StartS3Get(ctx_, bucket_, key, options, std::move(sink));
  }

  Future<Result<ObjectInfo>> Head(const std::string& key) override { return StartS3Head(ctx_, bucket_, key); }

  Future<Result<ListPage>> List(const ListRequest& request) override {
    std::string query = "list-type=2&encoding-type=url&max-keys=" + std::to_string(request.max_keys) +
                        "&prefix=" + Encode(request.prefix);
    if (!request.delimiter.empty()) query += "&delimiter=" + Encode(request.delimiter);
    if (!request.continuation_token.empty()) {
      query += "&continuation-token=" + Encode(request.continuation_token);
    } else if (!request.start_after.empty()) {
      query += "&start-after=" + Encode(request.start_after);
    }
    Promise<Result<ListPage>> promise;
    Run("LIST", "s3://" + bucket_ + "/" + request.prefix + "*", "GET", {bucket_, "", query}, {}, {},
        [promise](Result<BufferedResponse> r) mutable {
          if (!r.ok()) return promise.Set(r.status());
          promise.Set(ParseListObjectsV2(r->body));
        });
    return promise.future();
  }

  Future<Result<std::string>> Put(const std::string& key, Buffer data) override {
    Promise<Result<std::string>> promise;
    Run("PUT", Describe(key), "PUT", {bucket_, key, ""}, {}, std::move(data), [promise](Result<BufferedResponse> r) mutable {
      promise.Set(r.ok() ? Result<std::string>(EtagOf(*r)) : Result<std::string>(r.status()));
    });
    return promise.future();
  }

  Future<Status> Delete(const std::string& key) override {
    Promise<Status> promise;
    Run("DELETE", Describe(key), "DELETE", {bucket_, key, ""}, {}, {},
        [promise](Result<BufferedResponse> r) mutable { promise.Set(r.status()); });
    return promise.future();
  }

  Future<Result<std::string>> CreateMultipartUpload(const std::string& key) override {
    Promise<Result<std::string>> promise;
    Run("CreateMultipartUpload", Describe(key), "POST", {bucket_, key, "uploads="}, {}, {},
        [promise](Result<BufferedResponse> r) mutable {
          if (!r.ok()) return promise.Set(r.status());
          promise.Set(ParseInitiateMultipartUpload(r->body));
        });
    return promise.future();
  }

  Future<Result<std::string>> UploadPart(const std::string& key, const std::string& upload_id, int part_number,
                                         Buffer data) override {
    Promise<Result<std::string>> promise;
    std::string query = "partNumber=" + std::to_string(part_number) + "&uploadId=" + Encode(upload_id);
    Run("UploadPart " + std::to_string(part_number) + " of", Describe(key), "PUT", {bucket_, key, query}, {},
        std::move(data), [promise](Result<BufferedResponse> r) mutable {
          promise.Set(r.ok() ? Result<std::string>(EtagOf(*r)) : Result<std::string>(r.status()));
        });
    return promise.future();
  }

  Future<Status> CompleteMultipartUpload(const std::string& key, const std::string& upload_id,
                                         const std::vector<CompletedPart>& parts) override {
    Promise<Status> promise;
    Buffer body = Buffer::CopyOf(BuildCompleteMultipartUpload(parts));
    Run("CompleteMultipartUpload", Describe(key), "POST", {bucket_, key, "uploadId=" + Encode(upload_id)},
        {{"Content-Type", "application/xml"}}, std::move(body),
        [promise](Result<BufferedResponse> r) mutable { promise.Set(r.status()); });
    return promise.future();
  }

  Future<Status> AbortMultipartUpload(const std::string& key, const std::string& upload_id) override {
    Promise<Status> promise;
    Run("AbortMultipartUpload", Describe(key), "DELETE", {bucket_, key, "uploadId=" + Encode(upload_id)}, {}, {},
        [promise](Result<BufferedResponse> r) mutable { promise.Set(r.status()); });
    return promise.future();
  }

  Future<Result<UploadPage>> ListMultipartUploads(const UploadListRequest& request) override {
    std::string query = "uploads=&encoding-type=url&max-uploads=" + std::to_string(request.max_uploads) +
                        "&prefix=" + Encode(request.prefix);
    if (!request.key_marker.empty()) query += "&key-marker=" + Encode(request.key_marker);
    if (!request.upload_id_marker.empty()) query += "&upload-id-marker=" + Encode(request.upload_id_marker);
    Promise<Result<UploadPage>> promise;
    Run("ListMultipartUploads", "s3://" + bucket_ + "/" + request.prefix + "*", "GET", {bucket_, "", query}, {}, {},
        [promise](Result<BufferedResponse> r) mutable {
          if (!r.ok()) return promise.Set(r.status());
          promise.Set(ParseListMultipartUploads(r->body));
        });
    return promise.future();
  }

 private:
  static std::string EtagOf(const BufferedResponse& r) {
    const std::string* etag = FindHeader(r.headers, "ETag");
    return etag ? StripQuotes(*etag) : "";
  }

  void Run(const std::string& op, const std::string& object, const std::string& method, S3Address address,
           HttpHeaders headers, Buffer body, std::function<void(Result<BufferedResponse>)> done) {
    auto ctx = ctx_;
    ExecuteWithRetry(
        ctx_, MakeErrorContext(*ctx_, op, bucket_, object),
        [ctx, method, address = std::move(address), headers = std::move(headers), body = std::move(body)] {
          return MakeS3Request(*ctx, method, address, headers, body);
        },
        std::move(done));
  }

  const std::shared_ptr<const S3Context> ctx_;
  const std::string bucket_;
};

}  // namespace

std::unique_ptr<ObjectStore> MakeS3Store(std::shared_ptr<const S3Context> ctx, std::string bucket) {
  return std::make_unique<S3Store>(std::move(ctx), std::move(bucket));
}

Future<Result<ObjectInfo>> StartS3Head(std::shared_ptr<const S3Context> ctx, std::string bucket, std::string key) {
  Promise<Result<ObjectInfo>> promise;
  std::string object = "s3://" + bucket + "/" + key;
  auto c = ctx;
  S3Address address{bucket, key, ""};
  ExecuteWithRetry(
      ctx, MakeErrorContext(*ctx, "HEAD", bucket, object), [c, address] { return MakeS3Request(*c, "HEAD", address); },
      [promise, key, object](Result<BufferedResponse> r) mutable {
        if (!r.ok()) return promise.Set(r.status());
        ObjectInfo info;
        info.key = key;
        const std::string* cl = FindHeader(r->headers, "Content-Length");
        std::optional<uint64_t> size = cl ? ParseSize(*cl) : std::nullopt;
        if (!size) {
          return promise.Set(Internal("HEAD " + object + ": the response has " +
                                      (cl ? "an invalid Content-Length '" + cl->substr(0, 40) + "'" : "no Content-Length") +
                                      ", so the object's size is unknown"));
        }
        info.size = *size;
        if (const std::string* etag = FindHeader(r->headers, "ETag")) info.etag = StripQuotes(*etag);
        if (const std::string* lm = FindHeader(r->headers, "Last-Modified")) info.last_modified = HttpDateToIso8601(*lm);
        promise.Set(std::move(info));
      });
  return promise.future();
}

bool ParseContentRange(std::string_view value, uint64_t* first, uint64_t* last, uint64_t* total) {
  // "bytes FIRST-LAST/TOTAL" (RFC 9110), every number checked: a server's word is not trusted.
  constexpr std::string_view kUnit = "bytes ";
  if (!value.starts_with(kUnit)) return false;
  value.remove_prefix(kUnit.size());
  const size_t dash = value.find('-');
  const size_t slash = value.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) return false;
  std::optional<uint64_t> a = ParseSize(value.substr(0, dash));
  std::optional<uint64_t> b = ParseSize(value.substr(dash + 1, slash - dash - 1));
  std::optional<uint64_t> t = ParseSize(value.substr(slash + 1));
  if (!a || !b || !t || *b < *a || *b >= *t) return false;
  *first = *a;
  *last = *b;
  *total = *t;
  return true;
}

std::string HttpDateToIso8601(const std::string& http_date) {
  std::tm tm{};
  if (!strptime(http_date.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm)) return http_date;
  // Four-digit years always: strftime's %Y writes the year 997 as "997", which is not ISO 8601.
  char out[80];  // room for any int in every field: no truncation to reason about
  std::snprintf(out, sizeof(out), "%04d-%02d-%02dT%02d:%02d:%02d.000Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec);
  return out;
}

}  // namespace s3stream::internal
