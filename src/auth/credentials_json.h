// The JSON documents credential sources answer with: a credential_process's output
// ({"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration"}) and the
// container and instance metadata endpoints' ({"AccessKeyId", "SecretAccessKey", "Token",
// "Expiration", "Code"}). Untrusted input: a malformed document is a clear error naming the source,
// never a crash, and secrets are never repeated back.
#pragma once

#include <string>
#include <string_view>

#include "s3stream/credentials.h"

namespace s3stream::internal {

enum class CredentialsDocument {
  kProcess,   // credential_process: "SessionToken", "Version": 1 required
  kEndpoint,  // container / IMDS: "Token", an optional "Code" that must be "Success"
};

Result<Credentials> ParseCredentialsJson(std::string_view body, CredentialsDocument kind, const std::string& source);

// "2026-12-02T05:00:00Z" (also with fractional seconds, or an offset such as "+00:00"): RFC 3339.
Result<WallClock::time_point> ParseRfc3339(std::string_view text);

}  // namespace s3stream::internal
