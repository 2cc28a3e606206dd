#include "auth/sts.h"

#include <pugixml.hpp>

#include "auth/credentials_json.h"
#include "auth/metadata_http.h"
#include "store/s3/sigv4.h"

namespace s3stream::internal {
namespace {

constexpr int kAttempts = 3;
constexpr std::chrono::milliseconds kTimeout{10000};

std::string Form(const StsCall& call) {
  std::string out = "Action=" + call.action + "&Version=2011-06-15";
  for (const auto& [name, value] : call.fields) out += "&" + name + "=" + UriEncode(value, /*keep_slash=*/false);
  return out;
}

Result<Credentials> Parse(const StsCall& call, long status, const std::string& body) {
  pugi::xml_document doc;
  const bool xml = doc.load_buffer(body.data(), body.size(), pugi::parse_default, pugi::encoding_utf8);
  const std::string where = call.describe + ": STS at " + call.endpoint;
  if (status != 200) {
    pugi::xml_node error = doc.child("ErrorResponse").child("Error");
    const std::string what = xml && error ? std::string(error.child_value("Code")) + ": " + error.child_value("Message")
                                          : "HTTP " + std::to_string(status);
    const std::string message = where + " refused " + call.action + ": " + what.substr(0, 300);
    return status >= 500 ? Unavailable(message) : PermissionDenied(message);
  }
  pugi::xml_node c = doc.child((call.action + "Response").c_str()).child((call.action + "Result").c_str()).child("Credentials");
  if (!xml || !c) return Corrupt(where + " answered without credentials (" + std::to_string(body.size()) + " bytes)");
  Credentials out{c.child_value("AccessKeyId"), c.child_value("SecretAccessKey"), c.child_value("SessionToken"),
                  std::nullopt};
  if (out.access_key_id.empty() || out.secret_access_key.empty() || out.session_token.empty()) {
    return Corrupt(where + " answered with an incomplete credential set");
  }
  Result<WallClock::time_point> expires = ParseRfc3339(c.child_value("Expiration"));
  if (!expires.ok()) return Corrupt(where + " answered an Expiration " + expires.status().message());
  out.expiration = *expires;
  return out;
}

}  // namespace

Result<Credentials> CallSts(const StsCall& call) {
  HttpRequest request;
  request.method = "POST";
  request.url = call.endpoint + "/";
  request.headers = {{"Content-Type", "application/x-www-form-urlencoded; charset=utf-8"}, {"Accept", "text/xml"}};
  const std::string body = Form(call);
  Result<MetadataResponse> r = Unavailable("no attempt");
  for (int i = 0; i < kAttempts; ++i) {
    HttpRequest attempt = request;
    if (call.sign_with) {  // signed again per attempt: the signature carries the time
      SigV4Signer(call.region, "sts").SignRequest(attempt, *call.sign_with, Sha256Hex(body),
                                                 std::chrono::system_clock::now());
    }
    std::vector<std::string> headers;
    for (const auto& [name, value] : attempt.headers) headers.push_back(name + ": " + value);
    r = MetadataRequest("POST", attempt.url, headers, kTimeout, {body, /*through_proxy=*/true});
    if (r.ok() && r->status < 500) break;
    if (!r.ok() && r.status().code() != StatusCode::kUnavailable) break;
  }
  if (!r.ok()) return Status(r.status().code(), call.describe + ": STS at " + call.endpoint + ": " + r.status().message());
  return Parse(call, r->status, r->body);
}

}  // namespace s3stream::internal
