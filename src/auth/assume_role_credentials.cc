// A profile's role_arn with source_profile or credential_source: the base credentials (another
// profile's, possibly a role itself, or the environment's / the machine's) sign STS AssumeRole for
// the role's temporary credentials. The base has a CredentialsCache of its own, so a chain of roles
// refreshes each link when it is due.
#include "auth/providers.h"
#include "auth/sts.h"

namespace s3stream::internal {
namespace {

class AssumeRoleCredentials final : public CredentialsProvider {
 public:
  AssumeRoleCredentials(AssumeRole r, std::shared_ptr<CredentialsProvider> base)
      : r_(std::move(r)), base_description_(base->Describe()), base_(std::make_shared<CredentialsCache>(base)) {}

  std::string Describe() const override {
    return "role " + r_.role_arn + " of " + r_.source + ", assumed with " + base_description_;
  }

  Result<std::optional<Credentials>> Fetch() override {
    Result<std::optional<Credentials>> base = base_->Get();
    if (!base.ok()) return Status(base.status().code(), Describe() + ": " + base.status().message());
    if (!base.value()) return PermissionDenied(Describe() + ": " + base_description_ + " has no credentials");
    std::vector<std::pair<std::string, std::string>> fields = {{"RoleArn", r_.role_arn},
                                                               {"RoleSessionName", r_.session_name}};
    if (!r_.external_id.empty()) fields.emplace_back("ExternalId", r_.external_id);
    if (r_.duration_seconds > 0) fields.emplace_back("DurationSeconds", std::to_string(r_.duration_seconds));
    Result<Credentials> c = CallSts({r_.sts_endpoint, r_.region, "AssumeRole", fields, *base.value(), Describe()});
    if (!c.ok()) return c.status();
    return std::optional<Credentials>(std::move(c.value()));
  }

 private:
  const AssumeRole r_;
  const std::string base_description_;
  const std::shared_ptr<CredentialsCache> base_;
};

}  // namespace

std::shared_ptr<CredentialsProvider> AssumeRoleProvider(AssumeRole role, std::shared_ptr<CredentialsProvider> base) {
  return std::make_shared<AssumeRoleCredentials>(std::move(role), std::move(base));
}

}  // namespace s3stream::internal
