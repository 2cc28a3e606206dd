// Which CA certificates TLS verifies servers against when the user named none.
//
// libcurl looks where it was built to look (Debian's: /etc/ssl/certs/ca-certificates.crt). A wheel
// carries its own libcurl onto every distribution, and on Red Hat, Amazon Linux, SUSE or Alpine that
// file does not exist, so every HTTPS request would fail verification. When the built-in file is
// missing, the first bundle found in the distributions' usual places is used instead.
#pragma once

#include <functional>
#include <string>

namespace s3stream::internal {

// The bundle to hand libcurl (CURLOPT_CAINFO), or "" to keep libcurl's own choice: `configured`
// when set; else "" when `built_in` (libcurl's compiled default, may be empty) exists; else the
// first of the well-known locations that exists; else "" (libcurl then reports the failure).
std::string ChooseCaBundle(const std::string& configured, const std::string& built_in,
                           const std::function<bool(const std::string&)>& exists);

// ChooseCaBundle with libcurl's compiled default and the real file system.
std::string DefaultCaBundle(const std::string& configured);

}  // namespace s3stream::internal
