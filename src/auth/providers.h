// The credential sources of the default chain that fetch (config.cc picks which apply).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "s3stream/credentials.h"

namespace s3stream::internal {

// A profile's credential_process command (process_credentials.cc).
std::shared_ptr<CredentialsProvider> ProcessCredentialsProvider(std::string command, std::string profile);

// The container credentials endpoint (ECS, Batch, EKS Pod Identity): `url` (from
// AWS_CONTAINER_CREDENTIALS_FULL_URI, or 169.254.170.2 + _RELATIVE_URI), sent with the token from
// AWS_CONTAINER_AUTHORIZATION_TOKEN or read from _TOKEN_FILE at every fetch (it rotates).
struct ContainerEndpoint {
  std::string url;
  std::string token;
  std::string token_file;
  std::string source;  // the variable the URL came from, for messages
};
std::shared_ptr<CredentialsProvider> ContainerCredentialsProvider(ContainerEndpoint endpoint);

// Web identity: the token in `token_file` (read at every fetch) exchanged at STS
// (AssumeRoleWithWebIdentity, unsigned) for the role's temporary credentials.
struct WebIdentity {
  std::string token_file;
  std::string role_arn;
  std::string session_name;
  std::string sts_endpoint;  // scheme://host[:port], no trailing slash
  std::string source;        // where the settings came from, for messages
};
std::shared_ptr<CredentialsProvider> WebIdentityProvider(WebIdentity identity);

// A role assumed with base credentials (a profile's role_arn with source_profile or
// credential_source): STS AssumeRole, signed with the base's credentials.
struct AssumeRole {
  std::string role_arn;
  std::string session_name;
  std::string external_id;   // empty: none
  int duration_seconds = 0;  // 0: STS's default (1 hour)
  std::string sts_endpoint;
  std::string region;
  std::string source;  // the profile, for messages
};
std::shared_ptr<CredentialsProvider> AssumeRoleProvider(AssumeRole role, std::shared_ptr<CredentialsProvider> base);

// EC2 instance metadata (IMDSv2: a session token first, then the role's credentials), at
// `endpoint` (AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254). Each request waits
// at most `timeout` and is tried `attempts` times, so a machine without IMDS (a laptop) costs about
// a second once; then the chain has no credentials (requests go unsigned, as before). IMDSv1 (no
// token) only when `allow_v1` and the token request is refused with 403/404/405.
struct InstanceMetadata {
  std::string endpoint;
  std::chrono::milliseconds timeout{1000};
  int attempts = 2;
  bool allow_v1 = true;
};
std::shared_ptr<CredentialsProvider> InstanceMetadataProvider(InstanceMetadata metadata);

}  // namespace s3stream::internal
