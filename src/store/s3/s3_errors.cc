#include "store/s3/s3_errors.h"

namespace s3stream::internal {
namespace {

std::string CredentialsHint(const ErrorContext& ctx) {
  if (ctx.credentials_source == "none" || (ctx.credentials != nullptr && !ctx.credentials->had_credentials())) {
    return "; no AWS credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
           "choose a profile with AWS_PROFILE, or pass anonymous=True for a public bucket";
  }
  if (ctx.credentials_source == "anonymous") return "; the request was unsigned (anonymous=True): pass credentials if the bucket is private";
  return "; credentials came from " + ctx.credentials_source;
}

std::string Detail(int http_status, const S3ErrorDocument& doc) {
  std::string s = "HTTP " + std::to_string(http_status);
  if (!doc.code.empty()) s += " " + doc.code;
  if (!doc.message.empty()) s += ": " + doc.message;
  return s;
}

}  // namespace

AttemptFailure ClassifyHttpError(int http_status, std::string_view body, const ErrorContext& ctx) {
  S3ErrorDocument doc = ParseErrorDocument(body);
  const std::string detail = Detail(http_status, doc);
  AttemptFailure f;
  f.retryable = IsRetryableHttp(http_status, doc.code);
  const std::string& code = doc.code;

  if (f.retryable) {
    f.status = Unavailable(ctx.op + " " + ctx.object + ": " + detail);
  } else if (code == "NoSuchBucket") {
    f.status = NotFound("bucket '" + ctx.bucket + "' does not exist at " + ctx.endpoint + " (" + detail +
                        "); check the bucket name and endpoint_url");
  } else if (http_status == 404) {
    f.status = NotFound(ctx.object + " does not exist (" + detail + ")");
  } else if (code == "SignatureDoesNotMatch") {
    f.status = PermissionDenied(ctx.op + " " + ctx.object + " was refused: the request signature does not match (" +
                                detail + "); the secret access key is probably wrong" + CredentialsHint(ctx));
  } else if (code == "InvalidAccessKeyId") {
    f.status = PermissionDenied(ctx.op + " " + ctx.object + " was refused: the server does not know this access key id (" +
                                detail + ")" + CredentialsHint(ctx));
  } else if ((code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" || http_status == 301) &&
             !doc.region.empty()) {
    f.status = InvalidArgument("bucket '" + ctx.bucket + "' is in region " + doc.region + ", not " + ctx.region +
                               ": pass region='" + doc.region + "' or set AWS_REGION (" + detail + ")");
  } else if (http_status == 401 || http_status == 403) {
    f.status = PermissionDenied("access denied: " + ctx.op + " " + ctx.object + " (" + detail + ")" + CredentialsHint(ctx));
  } else if (http_status == 412) {
    f.status = Status(StatusCode::kPreconditionFailed, ctx.object + " changed while it was being read (" + detail + ")");
  } else if (http_status == 416) {
    f.status = OutOfRange("the requested byte range is outside " + ctx.object + " (" + detail + ")");
  } else if (http_status >= 400 && http_status < 500) {
    f.status = InvalidArgument(ctx.op + " " + ctx.object + " was rejected: " + detail);
  } else {
    f.status = Internal(ctx.op + " " + ctx.object + ": unexpected response " + detail);
  }
  f.status.set_server_detail(http_status, code);
  return f;
}

AttemptFailure ClassifyTransportError(const Status& transport_status, const ErrorContext& ctx) {
  AttemptFailure f;
  if (transport_status.code() == StatusCode::kCancelled) {
    f.status = transport_status;
    return f;
  }
  if (transport_status.code() != StatusCode::kUnavailable) {  // e.g. an untrusted certificate: asking again will not help
    f.status = Status(transport_status.code(), ctx.op + " " + ctx.object + " to " + ctx.endpoint + ": " +
                                                   transport_status.message());
    return f;
  }
  f.retryable = true;
  f.connection_lost = true;
  f.status = Unavailable(ctx.op + " " + ctx.object + ": network error talking to " + ctx.endpoint + ": " +
                         transport_status.message());
  return f;
}

Status GiveUp(const AttemptFailure& last, int attempts, const ErrorContext& ctx, const Deadline& deadline) {
  if (!last.retryable) return last.status;
  const std::string tries = std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts");
  const std::string why = deadline.passed()
      ? " (gave up at the request_timeout, after " + tries + "; raise request_timeout, or check that endpoint_url " +
            ctx.endpoint + " answers in time)"
      : " (gave up after " + tries + "; raise max_attempts, or check that endpoint_url " + ctx.endpoint +
            " is right and the server is up)";
  Status s(last.status.code(), last.status.message() + why);
  s.set_server_detail(last.status.http_status(), last.status.error_code());
  return s;
}

}  // namespace s3stream::internal
