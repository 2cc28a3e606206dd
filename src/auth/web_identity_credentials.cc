// Web identity (EKS IRSA, and profiles with web_identity_token_file): the token file, read again
// at every fetch (the kubelet rotates it), exchanged for a role's temporary credentials with STS
// AssumeRoleWithWebIdentity. The call needs no signature: the token is the proof.
#include <pugixml.hpp>

#include <fstream>
#include <sstream>

#include "auth/credentials_json.h"
#include "auth/metadata_http.h"
#include "auth/providers.h"
#include "store/s3/sigv4.h"

namespace s3stream::internal {
namespace {

constexpr int kAttempts = 3;
constexpr std::chrono::milliseconds kTimeout{10000};

std::string Form(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [name, value] : fields) {
    if (!out.empty()) out += "&";
    out += name + "=" + UriEncode(value, /*keep_slash=*/false);
  }
  return out;
}

std::string Trimmed(std::string s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

class WebIdentityCredentials final : public CredentialsProvider {
 public:
  explicit WebIdentityCredentials(WebIdentity w) : w_(std::move(w)) {}

  std::string Describe() const override {
    return "web identity (" + w_.source + ": role " + w_.role_arn + ", token file " + w_.token_file + ")";
  }

  Result<std::optional<Credentials>> Fetch() override {
    std::ifstream in(w_.token_file);
    std::stringstream text;
    text << in.rdbuf();
    const std::string token = Trimmed(text.str());
    if (!in || token.empty()) {
      return PermissionDenied("cannot read the web identity token file '" + w_.token_file + "' (" + w_.source +
                              "): it is missing, unreadable or empty");
    }
    const std::string body = Form({{"Action", "AssumeRoleWithWebIdentity"},
                                   {"Version", "2011-06-15"},
                                   {"RoleArn", w_.role_arn},
                                   {"RoleSessionName", w_.session_name},
                                   {"WebIdentityToken", token}});
    Result<MetadataResponse> r = Unavailable("no attempt");
    for (int i = 0; i < kAttempts; ++i) {
      r = MetadataRequest("POST", w_.sts_endpoint + "/",
                          {"Content-Type: application/x-www-form-urlencoded; charset=utf-8", "Accept: text/xml"},
                          kTimeout, {body, /*through_proxy=*/true});
      if (r.ok() && r->status < 500) break;
      if (!r.ok() && r.status().code() != StatusCode::kUnavailable) break;
    }
    if (!r.ok()) return Status(r.status().code(), Describe() + ": STS at " + w_.sts_endpoint + ": " + r.status().message());
    return Parse(r->status, r->body);
  }

 private:
  Result<std::optional<Credentials>> Parse(long status, const std::string& body) const {
    pugi::xml_document doc;
    const bool xml = doc.load_buffer(body.data(), body.size(), pugi::parse_default, pugi::encoding_utf8);
    if (status != 200) {
      pugi::xml_node error = doc.child("ErrorResponse").child("Error");
      std::string what = xml && error ? std::string(error.child_value("Code")) + ": " + error.child_value("Message")
                                      : "HTTP " + std::to_string(status);
      const Status refused = PermissionDenied(Describe() + ": STS at " + w_.sts_endpoint +
                                              " refused AssumeRoleWithWebIdentity: " + what.substr(0, 300));
      return status >= 500 ? Status(StatusCode::kUnavailable, refused.message()) : refused;
    }
    pugi::xml_node c = doc.child("AssumeRoleWithWebIdentityResponse")
                           .child("AssumeRoleWithWebIdentityResult")
                           .child("Credentials");
    if (!xml || !c) return Corrupt(Describe() + ": STS answered without credentials (" + std::to_string(body.size()) + " bytes)");
    Credentials out{c.child_value("AccessKeyId"), c.child_value("SecretAccessKey"), c.child_value("SessionToken"),
                    std::nullopt};
    if (out.access_key_id.empty() || out.secret_access_key.empty() || out.session_token.empty()) {
      return Corrupt(Describe() + ": STS answered with an incomplete credential set");
    }
    Result<WallClock::time_point> expires = ParseRfc3339(c.child_value("Expiration"));
    if (!expires.ok()) return Corrupt(Describe() + ": STS answered an Expiration " + expires.status().message());
    out.expiration = *expires;
    return std::optional<Credentials>(std::move(out));
  }

  const WebIdentity w_;
};

}  // namespace

std::shared_ptr<CredentialsProvider> WebIdentityProvider(WebIdentity identity) {
  return std::make_shared<WebIdentityCredentials>(std::move(identity));
}

}  // namespace s3stream::internal
