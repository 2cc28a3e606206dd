#include "http/ca_bundle.h"

#include <curl/curl.h>
#include <sys/stat.h>

namespace s3stream::internal {
namespace {

// Where distributions keep their bundle (the list Go's crypto/x509 and the AWS CLI's installer use).
constexpr const char* kWellKnownBundles[] = {
    "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Gentoo, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",                   // Fedora, RHEL, CentOS, Amazon Linux
    "/etc/ssl/ca-bundle.pem",                             // openSUSE
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL 7+, Amazon Linux 2023
    "/etc/ssl/cert.pem",                                  // Alpine, macOS
};

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::string ChooseCaBundle(const std::string& configured, const std::string& built_in,
                           const std::function<bool(const std::string&)>& exists) {
  if (!configured.empty()) return configured;
  if (!built_in.empty() && exists(built_in)) return "";
  for (const char* path : kWellKnownBundles) {
    if (exists(path)) return path;
  }
  return "";
}

std::string DefaultCaBundle(const std::string& configured) {
  const curl_version_info_data* info = curl_version_info(CURLVERSION_NOW);
  const std::string built_in = info != nullptr && info->cainfo != nullptr ? info->cainfo : "";
  return ChooseCaBundle(configured, built_in, IsFile);
}

}  // namespace s3stream::internal
