#include "http/ca_bundle.h"

#include <gtest/gtest.h>

#include <set>

namespace s3stream::internal {
namespace {

auto Present(std::set<std::string> files) {
  return [files = std::move(files)](const std::string& path) { return files.count(path) > 0; };
}

TEST(CaBundle, TheConfiguredBundleAlwaysWins) {
  EXPECT_EQ(ChooseCaBundle("/mine.pem", "/etc/ssl/certs/ca-certificates.crt", Present({})), "/mine.pem");
}

TEST(CaBundle, LibcurlsOwnDefaultIsKeptWhereItExists) {
  EXPECT_EQ(ChooseCaBundle("", "/etc/ssl/certs/ca-certificates.crt",
                           Present({"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"})),
            "");
}

TEST(CaBundle, ACarriedLibcurlOnRedHatFindsTheDistributionsBundle) {
  // A Debian-built libcurl inside a wheel, installed on Amazon Linux / RHEL.
  EXPECT_EQ(ChooseCaBundle("", "/etc/ssl/certs/ca-certificates.crt", Present({"/etc/pki/tls/certs/ca-bundle.crt"})),
            "/etc/pki/tls/certs/ca-bundle.crt");
  EXPECT_EQ(ChooseCaBundle("", "", Present({"/etc/ssl/cert.pem"})), "/etc/ssl/cert.pem");  // Alpine
}

TEST(CaBundle, NothingFoundLeavesLibcurlToReportIt) {
  EXPECT_EQ(ChooseCaBundle("", "/nowhere.crt", Present({})), "");
}

}  // namespace
}  // namespace s3stream::internal
