// Web identity (EKS IRSA, and profiles with web_identity_token_file): the token file, read again
// at every fetch (the kubelet rotates it), exchanged for a role's temporary credentials with STS
// AssumeRoleWithWebIdentity. The call needs no signature: the token is the proof.
#include "auth/providers.h"
#include "auth/sts.h"
#include "auth/text.h"

namespace s3stream::internal {
namespace {

class WebIdentityCredentials final : public CredentialsProvider {
 public:
  explicit WebIdentityCredentials(WebIdentity w) : w_(std::move(w)) {}

  std::string Describe() const override {
    return "web identity (" + w_.source + ": role " + w_.role_arn + ", token file " + w_.token_file + ")";
  }

  Result<std::optional<Credentials>> Fetch() override {
    const std::string token = ReadTokenFile(w_.token_file).value_or("");
    if (token.empty()) {
      return PermissionDenied("cannot read the web identity token file '" + w_.token_file + "' (" + w_.source +
                              "): it is missing, unreadable or empty");
    }
    Result<Credentials> c = CallSts({w_.sts_endpoint, "", "AssumeRoleWithWebIdentity",
                                     {{"RoleArn", w_.role_arn}, {"RoleSessionName", w_.session_name},
                                      {"WebIdentityToken", token}},
                                     std::nullopt, Describe()});
    if (!c.ok()) return c.status();
    return std::optional<Credentials>(std::move(c.value()));
  }

 private:
  const WebIdentity w_;
};

}  // namespace

std::shared_ptr<CredentialsProvider> WebIdentityProvider(WebIdentity identity) {
  return std::make_shared<WebIdentityCredentials>(std::move(identity));
}

}  // namespace s3stream::internal
