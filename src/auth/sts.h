// One call to AWS STS for temporary credentials (AssumeRole, AssumeRoleWithWebIdentity): a form
// POST to the regional endpoint, signed with the caller's credentials when it has them (AssumeRole)
// and unsigned otherwise (the web identity token is the proof), retried on 5xx and broken
// connections, through HTTPS_PROXY where set. The answer's <Credentials> become Credentials; an
// <ErrorResponse> a PermissionDenied naming the role and STS's own code and message.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "s3stream/credentials.h"

namespace s3stream::internal {

struct StsCall {
  std::string endpoint;  // scheme://host[:port], no trailing slash
  std::string region;    // for the signature
  std::string action;    // "AssumeRole", "AssumeRoleWithWebIdentity"
  std::vector<std::pair<std::string, std::string>> fields;  // besides Action and Version
  std::optional<Credentials> sign_with;
  std::string describe;  // the source, for messages
};

Result<Credentials> CallSts(const StsCall& call);

}  // namespace s3stream::internal
