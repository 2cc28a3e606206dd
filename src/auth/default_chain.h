// The AWS default credential chain after explicit and environment keys (config.cc handles those):
// web identity, the profile (a role, static keys, credential_process), the container endpoint,
// then EC2 instance metadata. Choosing a source reads only the environment and the
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
  // A setting of any profile (the config file's, else the credentials file's); empty counts as unset.
  std::function<std::optional<std::string>(const std::string& profile, const std::string& key)> setting_of;
  // A profile's static keys, from one file (never mixed), or an error naming a half-set pair.
  std::function<Result<std::optional<Credentials>>(const std::string& profile)> static_keys_of;

  std::optional<std::string> profile_setting(const std::string& key) const { return setting_of(profile_name, key); }
};

// The source of web identity credentials (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN), if set.
Result<std::shared_ptr<CredentialsProvider>> WebIdentitySource(const ChainInputs& in);

// The selected profile's credentials, as botocore takes them: a role (role_arn with
// web_identity_token_file, source_profile or credential_source; a source profile may itself be a
// role, to any depth without a loop), else its static keys, else its credential_process. SSO is
// refused for now with the reason.
Result<std::shared_ptr<CredentialsProvider>> ProfileSource(const ChainInputs& in);

// The container endpoint or, unless disabled, instance metadata; nullptr when neither applies.
Result<std::shared_ptr<CredentialsProvider>> MachineSource(const ChainInputs& in);

}  // namespace s3stream::internal
