#include "store/s3/s3_request.h"

namespace s3stream::internal {
namespace {

// Collects a whole (small) response: listings, multipart replies, error documents.
class BufferingHandler final : public ResponseHandler {
 public:
  using Done = std::function<void(const Status&, BufferedResponse&)>;
  explicit BufferingHandler(Done done) : done_(std::move(done)) {}

  bool OnHeaders(int http_status, const HttpHeaders& headers) override {
    response_.http_status = http_status;
    response_.headers = headers;
    return true;
  }
  bool OnBody(std::span<const uint8_t> bytes) override {
    // No S3 control response is anywhere near this; a bigger one is not S3 talking.
    if (response_.body.size() + bytes.size() > kMaxBody) return false;
    response_.body.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return true;
  }
  void OnComplete(const Status& status) override { done_(status, response_); }

 private:
  static constexpr size_t kMaxBody = 64 << 20;
  Done done_;
  BufferedResponse response_;
};

struct RetryLoop : std::enable_shared_from_this<RetryLoop> {
  std::shared_ptr<const S3Context> ctx;
  ErrorContext error_ctx;
  std::function<Result<HttpRequest>()> make_request;
  std::function<void(Result<BufferedResponse>)> done;
  int attempt = 0;
  Deadline deadline;

  void Attempt() {
    ++attempt;
    auto self = shared_from_this();
    Result<HttpRequest> request = make_request();
    if (!request.ok()) return done(WithoutCredentials(request.status(), error_ctx));
    request->timeout = deadline.remaining();
    ctx->transport->Send(std::move(request.value()), std::make_shared<BufferingHandler>(
                                             [self](const Status& s, BufferedResponse& r) { self->OnResult(s, r); }));
  }

  void OnResult(const Status& transport_status, BufferedResponse& response) {
    AttemptFailure failure;
    if (!transport_status.ok()) {
      failure = ClassifyTransportError(transport_status, error_ctx);
    } else if (response.http_status >= 200 && response.http_status < 300) {
      // S3 can answer CompleteMultipartUpload with 200 and an <Error> document: a failed attempt.
      if (response.body.find("<Error>") == std::string::npos || !IsErrorDocument(response.body)) {
        done(std::move(response));
        return;
      }
      failure = ClassifyHttpError(500, response.body, error_ctx);
    } else {
      failure = ClassifyHttpError(response.http_status, response.body, error_ctx);
    }
    if (ctx->retry.ShouldRetry(failure, attempt, deadline)) {
      auto self = shared_from_this();
      ctx->transport->RunAfter(ctx->retry.Delay(failure, attempt), [self] { self->Attempt(); });
      return;
    }
    done(GiveUp(failure, attempt, error_ctx, deadline));
  }
};

std::string HostOf(const std::string& endpoint) {
  auto scheme_end = endpoint.find("://");
  return scheme_end == std::string::npos ? endpoint : endpoint.substr(scheme_end + 3);
}

std::string SchemeOf(const std::string& endpoint) {
  auto scheme_end = endpoint.find("://");
  return scheme_end == std::string::npos ? "https" : endpoint.substr(0, scheme_end);
}

}  // namespace

std::string BuildUrl(const ResolvedConfig& config, const S3Address& address) {
  std::string url;
  if (config.path_style || address.bucket.empty()) {
    url = config.endpoint + "/";
    if (!address.bucket.empty()) url += UriEncode(address.bucket, false) + "/";
  } else {
    url = SchemeOf(config.endpoint) + "://" + address.bucket + "." + HostOf(config.endpoint) + "/";
  }
  url += UriEncode(address.key, /*keep_slash=*/true);
  if (!address.query.empty()) url += "?" + address.query;
  return url;
}

Result<HttpRequest> MakeS3Request(const S3Context& ctx, const std::string& method, const S3Address& address,
                                  HttpHeaders headers, Buffer body) {
  HttpRequest request;
  request.method = method;
  request.url = BuildUrl(ctx.config, address);
  request.headers = std::move(headers);
  request.body = std::move(body);
  if (ctx.config.credentials) {
    S3S_ASSIGN_OR_RETURN(std::optional<Credentials> credentials, ctx.config.credentials->Get());
    if (credentials) {
      std::string payload_hash =
          request.body.empty() ? std::string(kEmptyPayloadSha256) : Sha256Hex(request.body.span());
      ctx.signer.SignRequest(request, *credentials, payload_hash, std::chrono::system_clock::now());
    }
  }
  return request;
}

ErrorContext MakeErrorContext(const S3Context& ctx, const std::string& op, const std::string& bucket,
                              const std::string& object) {
  return ErrorContext{op, object, bucket, ctx.config.endpoint, ctx.config.region, ctx.config.credentials_source,
                      ctx.config.credentials.get()};
}

Status WithoutCredentials(const Status& why, const ErrorContext& ctx) {
  return Status(why.code(), ctx.op + " " + ctx.object + ": no credentials to sign it with: " + why.message());
}

void ExecuteWithRetry(std::shared_ptr<const S3Context> ctx, ErrorContext error_ctx,
                      std::function<Result<HttpRequest>()> make_request,
                      std::function<void(Result<BufferedResponse>)> done) {
  auto loop = std::make_shared<RetryLoop>();
  loop->ctx = std::move(ctx);
  loop->error_ctx = std::move(error_ctx);
  loop->make_request = std::move(make_request);
  loop->done = std::move(done);
  loop->deadline = loop->ctx->retry.StartDeadline();
  loop->Attempt();
}

}  // namespace s3stream::internal
