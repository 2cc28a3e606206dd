// The AWS default credential chain after explicit and environment keys (config.cc handles those
// and a profile's static keys): web identity, a profile's credential_process, the container
// endpoint, then EC2 instance metadata. Choosing a source reads only the environment and the
// profile; fetching happens later, in the CredentialsCache, at the first signed request.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "s3stream/config.h"
#include "s3stream/credentials.h"

namespace s3stream::internal {

struct ChainInputs {
  const Environment& env;
  std::string region;  // the resolved region: STS is called in it
  std::string profile_name;
  std::string profile_file;  // where the profile's settings were read, for messages
  std::function<std::optional<std::string>(const std::string& key)> profile_setting;  // empty: unset
};

// The source of web identity credentials (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN), if set.
Result<std::shared_ptr<CredentialsProvider>> WebIdentitySource(const ChainInputs& in);

// A profile's web identity (role_arn + web_identity_token_file) or credential_process (a role with
// source_profile / credential_source, or SSO, is refused for now with the reason).
Result<std::shared_ptr<CredentialsProvider>> ProfileSource(const ChainInputs& in);

// The container endpoint or, unless disabled, instance metadata; nullptr when neither applies.
Result<std::shared_ptr<CredentialsProvider>> MachineSource(const ChainInputs& in);

}  // namespace s3stream::internal
