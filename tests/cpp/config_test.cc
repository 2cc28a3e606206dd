#include "s3stream/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

namespace s3stream {
namespace {

namespace fs = std::filesystem;

constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

// A fake environment and a private HOME with the two shared files under it.
class ConfigTest : public testing::Test {
 protected:
  void SetUp() override {
    home_ = fs::temp_directory_path() / ("s3stream_config_test_" + std::to_string(std::random_device()()));
    fs::create_directories(home_ / ".aws");
    vars_["HOME"] = home_.string();
    vars_["AWS_EC2_METADATA_DISABLED"] = "true";  // the chain's last source; its own tests turn it on
  }
  void TearDown() override { fs::remove_all(home_); }

  Environment Env() const {
    return Environment{[vars = vars_](const std::string& name) -> std::optional<std::string> {
      auto it = vars.find(name);
      return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
    }};
  }
  void WriteFile(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }
  void WriteCredentials(const std::string& text) { WriteFile(credentials_path(), text); }
  void WriteConfig(const std::string& text) { WriteFile(config_path(), text); }
  fs::path credentials_path() const { return home_ / ".aws" / "credentials"; }
  fs::path config_path() const { return home_ / ".aws" / "config"; }

  ResolvedConfig Resolve(const ClientConfig& c = {}) {
    auto r = ResolveConfig(c, Env());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r.value() : ResolvedConfig{};
  }
  Status ResolveError(const ClientConfig& c = {}) {
    auto r = ResolveConfig(c, Env());
    EXPECT_FALSE(r.ok());
    return r.status();
  }

  // The static credentials a resolved config signs with.
  static Credentials Creds(const ResolvedConfig& r) {
    EXPECT_NE(r.credentials, nullptr);
    if (r.credentials == nullptr) return {};
    auto got = r.credentials->Get();
    EXPECT_TRUE(got.ok() && got.value().has_value());
    return got.ok() && got.value() ? *got.value() : Credentials{};
  }

  fs::path home_;
  std::map<std::string, std::string> vars_;
};

TEST_F(ConfigTest, DefaultsWithNothingConfigured) {
  ResolvedConfig r = Resolve();
  EXPECT_EQ(r.region, "us-east-1");
  EXPECT_EQ(r.endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_TRUE(r.endpoint_is_aws);
  EXPECT_FALSE(r.path_style);
  EXPECT_EQ(r.credentials, nullptr);
  EXPECT_EQ(r.credentials_source, "none");
  EXPECT_EQ(r.options.max_attempts, 5);
}

TEST_F(ConfigTest, RegionPrecedence) {
  WriteConfig("[default]\nregion = from-profile\n");
  EXPECT_EQ(Resolve().region, "from-profile");
  vars_["AWS_DEFAULT_REGION"] = "from-default-region";
  EXPECT_EQ(Resolve().region, "from-default-region");
  vars_["AWS_REGION"] = "from-region";
  EXPECT_EQ(Resolve().region, "from-region");
  ClientConfig c;
  c.region = "explicit";
  EXPECT_EQ(Resolve(c).region, "explicit");
  EXPECT_EQ(Resolve(c).endpoint, "https://s3.explicit.amazonaws.com");
}

TEST_F(ConfigTest, EmptyValuesCountAsUnset) {
  vars_["AWS_REGION"] = "";
  vars_["AWS_DEFAULT_REGION"] = "eu-west-1";
  ClientConfig c;
  c.endpoint_url = "";
  ResolvedConfig r = Resolve(c);
  EXPECT_EQ(r.region, "eu-west-1");
  EXPECT_EQ(r.endpoint, "https://s3.eu-west-1.amazonaws.com");
}

TEST_F(ConfigTest, ChinaRegionsUseTheirOwnDomain) {
  ClientConfig c;
  c.region = "cn-north-1";
  EXPECT_EQ(Resolve(c).endpoint, "https://s3.cn-north-1.amazonaws.com.cn");
}

TEST_F(ConfigTest, EndpointPrecedence) {
  WriteConfig("[default]\nendpoint_url = http://global-profile:1\ns3 =\n  endpoint_url = http://s3-profile:2\n");
  EXPECT_EQ(Resolve().endpoint, "http://s3-profile:2");
  vars_["AWS_ENDPOINT_URL"] = "http://global-env:3";
  EXPECT_EQ(Resolve().endpoint, "http://global-env:3");
  vars_["AWS_ENDPOINT_URL_S3"] = "http://s3-env:4";
  EXPECT_EQ(Resolve().endpoint, "http://s3-env:4");
  ClientConfig c;
  c.endpoint_url = "http://explicit:5";
  EXPECT_EQ(Resolve(c).endpoint, "http://explicit:5");
}

TEST_F(ConfigTest, CaBundlePrecedence) {
  EXPECT_FALSE(Resolve().options.ca_bundle.has_value());  // the system's bundle (see http/ca_bundle.h)
  auto pem = [&](const std::string& name) {
    const std::string path = (home_ / name).string();
    WriteFile(path, "-----BEGIN CERTIFICATE-----\n");
    return path;
  };
  vars_["CURL_CA_BUNDLE"] = pem("curl.pem");
  EXPECT_EQ(Resolve().options.ca_bundle, pem("curl.pem"));
  vars_["SSL_CERT_FILE"] = pem("openssl.pem");
  EXPECT_EQ(Resolve().options.ca_bundle, pem("openssl.pem"));
  WriteConfig("[default]\nca_bundle = " + pem("profile.pem") + "\n");
  EXPECT_EQ(Resolve().options.ca_bundle, pem("profile.pem"));
  vars_["AWS_CA_BUNDLE"] = pem("aws.pem");
  EXPECT_EQ(Resolve().options.ca_bundle, pem("aws.pem"));
  ClientConfig c;
  c.ca_bundle = pem("explicit.pem");
  EXPECT_EQ(Resolve(c).options.ca_bundle, pem("explicit.pem"));
}

TEST_F(ConfigTest, AMissingCaBundleIsNamedWithItsSource) {
  vars_["AWS_CA_BUNDLE"] = "/nowhere/ca.pem";
  Status s = ResolveError();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'/nowhere/ca.pem' (from AWS_CA_BUNDLE) cannot be read"), std::string::npos) << s.message();
}

TEST_F(ConfigTest, AnEndpointWithAPasswordIsRefusedWithoutRepeatingIt) {
  ClientConfig c;
  c.endpoint_url = "https://alice:hunter2@minio.example.com:9000";
  Status s = ResolveError(c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().find("hunter2"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("alice"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("https://***@minio.example.com:9000"), std::string::npos) << s.message();
}

TEST_F(ConfigTest, GlobalProfileEndpointWithoutS3Block) {
  WriteConfig("[default]\nendpoint_url = http://global-profile:1/\n");
  ResolvedConfig r = Resolve();
  EXPECT_EQ(r.endpoint, "http://global-profile:1");
  EXPECT_FALSE(r.endpoint_is_aws);
}

TEST_F(ConfigTest, CredentialPrecedence) {
  WriteConfig("[default]\naws_access_key_id = AKID_CONFIG\naws_secret_access_key = s-config\n");
  ResolvedConfig r = Resolve();
  EXPECT_EQ(Creds(r).access_key_id, "AKID_CONFIG");
  EXPECT_EQ(r.credentials_source, "profile default");

  WriteCredentials("[default]\naws_access_key_id = AKID_FILE\naws_secret_access_key = s-file\naws_session_token = t-file\n");
  r = Resolve();
  EXPECT_EQ(Creds(r).access_key_id, "AKID_FILE");
  EXPECT_EQ(Creds(r).secret_access_key, "s-file");
  EXPECT_EQ(Creds(r).session_token, "t-file");
  EXPECT_EQ(r.credentials_source, "profile default");

  vars_["AWS_ACCESS_KEY_ID"] = "AKID_ENV";
  vars_["AWS_SECRET_ACCESS_KEY"] = "s-env";
  r = Resolve();
  EXPECT_EQ(Creds(r).access_key_id, "AKID_ENV");
  EXPECT_EQ(Creds(r).session_token, "");  // never mixed with the file's token
  EXPECT_EQ(r.credentials_source, "environment");

  vars_["AWS_SESSION_TOKEN"] = "t-env";
  EXPECT_EQ(Creds(Resolve()).session_token, "t-env");

  ClientConfig c;
  c.access_key_id = "AKID_EXPLICIT";
  c.secret_access_key = "s-explicit";
  r = Resolve(c);
  EXPECT_EQ(Creds(r).access_key_id, "AKID_EXPLICIT");
  EXPECT_EQ(Creds(r).session_token, "");
  EXPECT_EQ(r.credentials_source, "the Client's arguments");
}

TEST_F(ConfigTest, TokenWithoutKeysIsIgnored) {
  vars_["AWS_SESSION_TOKEN"] = "stale";
  WriteCredentials("[default]\naws_access_key_id = AKID_FILE\naws_secret_access_key = s-file\n");
  ResolvedConfig r = Resolve();
  EXPECT_EQ(r.credentials_source, "profile default");
  EXPECT_EQ(Creds(r).session_token, "");
}

TEST_F(ConfigTest, AnonymousIgnoresEveryCredential) {
  vars_["AWS_ACCESS_KEY_ID"] = "AKID_ENV";
  vars_["AWS_SECRET_ACCESS_KEY"] = "s-env";
  ClientConfig c;
  c.anonymous = true;
  c.access_key_id = "AKID";
  c.secret_access_key = "s";
  ResolvedConfig r = Resolve(c);
  EXPECT_EQ(r.credentials, nullptr);
  EXPECT_EQ(r.credentials_source, "anonymous");
}

TEST_F(ConfigTest, ProfileSelection) {
  WriteCredentials("[default]\naws_access_key_id = AKID_DEFAULT\naws_secret_access_key = s\n"
              "[dev]\naws_access_key_id = AKID_DEV\naws_secret_access_key = s\n"
              "[prod]\naws_access_key_id = AKID_PROD\naws_secret_access_key = s\n");
  WriteConfig("[default]\nregion = r-default\n"
         "[profile dev]\nregion = r-dev\n"
         "[prod]\nregion = r-not-a-profile\n");  // the config file needs the "profile " prefix
  EXPECT_EQ(Creds(Resolve()).access_key_id, "AKID_DEFAULT");
  EXPECT_EQ(Resolve().region, "r-default");

  vars_["AWS_PROFILE"] = "dev";
  ResolvedConfig r = Resolve();
  EXPECT_EQ(Creds(r).access_key_id, "AKID_DEV");
  EXPECT_EQ(r.region, "r-dev");
  EXPECT_EQ(r.credentials_source, "profile dev");

  ClientConfig c;
  c.profile = "prod";  // beats AWS_PROFILE
  r = Resolve(c);
  EXPECT_EQ(Creds(r).access_key_id, "AKID_PROD");
  EXPECT_EQ(r.region, "us-east-1");
}

TEST_F(ConfigTest, FileLocationsFromEnvironment) {
  fs::path creds = home_ / "elsewhere-credentials";
  fs::path conf = home_ / "elsewhere-config";
  WriteFile(creds, "[default]\naws_access_key_id = AKID_ELSEWHERE\naws_secret_access_key = s\n");
  WriteFile(conf, "[default]\nregion = r-elsewhere\n");
  WriteCredentials("[default]\naws_access_key_id = AKID_HOME\naws_secret_access_key = s\n");
  vars_["AWS_SHARED_CREDENTIALS_FILE"] = creds.string();
  vars_["AWS_CONFIG_FILE"] = "~/elsewhere-config";  // '~' expands to HOME
  ResolvedConfig r = Resolve();
  EXPECT_EQ(Creds(r).access_key_id, "AKID_ELSEWHERE");
  EXPECT_EQ(r.region, "r-elsewhere");
}

TEST_F(ConfigTest, IniSyntax) {
  WriteConfig("# leading comment\n"
         "; another\n"
         "[ profile   dev ]   \n"
         "  region=eu-central-1   # trailing comment\n"
         "\n"
         "s3 =\n"
         "    addressing_style = path\n"
         "    ; comment inside the block\n"
         "\tendpoint_url = http://nested:9000/\n"
         "aws_access_key_id = AKID_CFG\r\n"
         "aws_secret_access_key = abc#def;ghi\n"
         "[profile other]\n"
         "region = not-this-one\n");
  vars_["AWS_PROFILE"] = "dev";
  ResolvedConfig r = Resolve();
  EXPECT_EQ(r.region, "eu-central-1");
  EXPECT_EQ(r.endpoint, "http://nested:9000");
  EXPECT_TRUE(r.path_style);
  EXPECT_EQ(Creds(r).access_key_id, "AKID_CFG");              // back at the top level
  EXPECT_EQ(Creds(r).secret_access_key, "abc#def;ghi");  // '#' not after whitespace: data
}

TEST_F(ConfigTest, NestedAddressingStyleVirtualOnCustomEndpoint) {
  WriteConfig("[default]\ns3 =\n  addressing_style = virtual\n");
  ClientConfig c;
  c.endpoint_url = "http://minio.local:9000";
  EXPECT_FALSE(Resolve(c).path_style);
  c.addressing_style = AddressingStyle::kPath;  // explicit beats the profile
  EXPECT_TRUE(Resolve(c).path_style);
}

TEST_F(ConfigTest, BadAddressingStyleInProfile) {
  WriteConfig("[default]\ns3 =\n  addressing_style = sideways\n");
  Status s = ResolveError();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sideways"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("path, virtual, auto"), std::string::npos) << s.message();
}

TEST_F(ConfigTest, MissingNamedProfileIsAnError) {
  WriteCredentials("[default]\naws_access_key_id = AKID\naws_secret_access_key = s\n");
  vars_["AWS_PROFILE"] = "nope";
  Status s = ResolveError();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'nope'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("AWS_PROFILE"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(credentials_path().string()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(config_path().string()), std::string::npos) << s.message();

  ClientConfig c;
  c.profile = "also-missing";
  s = ResolveError(c);
  EXPECT_NE(s.message().find("'also-missing'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("ClientConfig.profile"), std::string::npos) << s.message();
}

TEST_F(ConfigTest, MissingDefaultProfileIsFine) {
  WriteConfig("[profile dev]\nregion = x\n");
  EXPECT_EQ(Resolve().credentials_source, "none");
}

TEST_F(ConfigTest, PartialCredentialsNameWhatIsMissing) {
  ClientConfig c;
  c.access_key_id = "AKID";
  Status s = ResolveError(c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ClientConfig.secret_access_key is missing"), std::string::npos) << s.message();

  vars_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  s = ResolveError();
  EXPECT_NE(s.message().find("AWS_ACCESS_KEY_ID is missing"), std::string::npos) << s.message();
  vars_.erase("AWS_SECRET_ACCESS_KEY");

  WriteCredentials(std::string("[default]\naws_secret_access_key = ") + kSecret + "\n");
  s = ResolveError();
  EXPECT_NE(s.message().find("aws_access_key_id in profile 'default'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(credentials_path().string()), std::string::npos) << s.message();
}

TEST_F(ConfigTest, EndpointValidation) {
  ClientConfig c;
  for (std::string bad : {"127.0.0.1:9000", "ftp://host", "http://", "s3.example.com"}) {
    c.endpoint_url = bad;
    Status s = ResolveError(c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("'" + bad + "'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("http://127.0.0.1:9000"), std::string::npos) << s.message();  // an example
  }
  vars_["AWS_ENDPOINT_URL"] = "localhost:9000";
  EXPECT_NE(ResolveError().message().find("AWS_ENDPOINT_URL"), std::string::npos);

  c.endpoint_url = "http://127.0.0.1:9000///";
  EXPECT_EQ(Resolve(c).endpoint, "http://127.0.0.1:9000");
  c.endpoint_url = "HTTPS://minio.example.com";
  EXPECT_EQ(Resolve(c).endpoint, "https://minio.example.com");
}

TEST_F(ConfigTest, PathStyleAutoRules) {
  struct Case {
    std::optional<std::string> endpoint;
    AddressingStyle style;
    bool is_aws, path_style;
  } cases[] = {
      {std::nullopt, AddressingStyle::kAuto, true, false},
      {std::nullopt, AddressingStyle::kPath, true, true},
      {"https://s3.eu-west-1.amazonaws.com", AddressingStyle::kAuto, true, false},
      {"https://s3.cn-north-1.amazonaws.com.cn", AddressingStyle::kAuto, true, false},
      {"https://notamazonaws.com", AddressingStyle::kAuto, false, true},
      {"http://127.0.0.1:9000", AddressingStyle::kAuto, false, true},
      {"http://[::1]:9000", AddressingStyle::kAuto, false, true},
      {"http://127.0.0.1:9000", AddressingStyle::kVirtual, false, false},
  };
  for (const Case& k : cases) {
    ClientConfig c;
    c.endpoint_url = k.endpoint;
    c.addressing_style = k.style;
    ResolvedConfig r = Resolve(c);
    EXPECT_EQ(r.endpoint_is_aws, k.is_aws) << k.endpoint.value_or("(AWS)");
    EXPECT_EQ(r.path_style, k.path_style) << k.endpoint.value_or("(AWS)");
  }
}

TEST_F(ConfigTest, OptionValidation) {
  auto expect_invalid = [&](auto mutate, const char* name) {
    ClientConfig c;
    mutate(c);
    Status s = ResolveError(c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  };
  expect_invalid([](ClientConfig& c) { c.max_attempts = 0; }, "max_attempts");
  expect_invalid([](ClientConfig& c) { c.max_inflight = 0; }, "max_inflight");
  expect_invalid([](ClientConfig& c) { c.connect_timeout_s = 0; }, "connect_timeout_s");
  expect_invalid([](ClientConfig& c) { c.low_speed_time_s = -1; }, "low_speed_time_s");
  expect_invalid([](ClientConfig& c) { c.stall_timeout_s = -0.5; }, "stall_timeout_s");
  expect_invalid([](ClientConfig& c) { c.low_speed_limit = -1; }, "low_speed_limit");
  expect_invalid([](ClientConfig& c) { c.retry_base_delay_s = -0.1; }, "retry_base_delay_s");
  expect_invalid([](ClientConfig& c) { c.retry_max_delay_s = 0.01; }, "retry_max_delay_s");
  expect_invalid([](ClientConfig& c) { c.connect_timeout_s = std::nan(""); }, "connect_timeout_s");
}

TEST_F(ConfigTest, NoErrorMessageContainsTheSecret) {
  std::vector<Status> errors;
  ClientConfig c;
  c.secret_access_key = kSecret;
  errors.push_back(ResolveError(c));  // explicit, missing key id

  vars_["AWS_SECRET_ACCESS_KEY"] = kSecret;
  vars_["AWS_SESSION_TOKEN"] = kSecret;
  errors.push_back(ResolveError());  // environment, missing key id
  vars_.clear();
  vars_["HOME"] = home_.string();

  WriteConfig(std::string("[default]\naws_secret_access_key = ") + kSecret + "\ns3 =\n  addressing_style = bad\n");
  errors.push_back(ResolveError());  // profile: bad style
  WriteConfig(std::string("[default]\naws_secret_access_key = ") + kSecret + "\n");
  errors.push_back(ResolveError());  // profile: missing key id

  c = {};
  c.access_key_id = "AKID";
  c.secret_access_key = kSecret;
  c.endpoint_url = "nope";
  errors.push_back(ResolveError(c));
  c.endpoint_url.reset();
  c.profile = "missing";
  errors.push_back(ResolveError(c));

  for (const Status& s : errors) {
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.message().find(kSecret), std::string::npos) << s.message();
  }
}

TEST(Environment, ProcessReadsTheRealEnvironment) {
  ::setenv("S3STREAM_CONFIG_TEST_VAR", "value", 1);
  Environment env = Environment::Process();
  EXPECT_EQ(env.getenv("S3STREAM_CONFIG_TEST_VAR"), "value");
  ::unsetenv("S3STREAM_CONFIG_TEST_VAR");
  EXPECT_EQ(env.getenv("S3STREAM_CONFIG_TEST_VAR"), std::nullopt);
}

}  // namespace
}  // namespace s3stream

namespace s3stream {
namespace {

// The sources of the default chain after the static keys: only which one is chosen (no request is
// made here; fetching is tested in credentials_test.cc and tests/python/test_credentials.py).
TEST_F(ConfigTest, InstanceMetadataIsTheLastSourceUnlessDisabled) {
  vars_.erase("AWS_EC2_METADATA_DISABLED");
  EXPECT_EQ(Resolve().credentials_source, "EC2 instance metadata at http://169.254.169.254");
  vars_["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = "http://127.0.0.1:9/";
  EXPECT_EQ(Resolve().credentials_source, "EC2 instance metadata at http://127.0.0.1:9");
  vars_.erase("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  vars_["AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE"] = "IPv6";
  EXPECT_EQ(Resolve().credentials_source, "EC2 instance metadata at http://[fd00:ec2::254]");
  vars_["AWS_METADATA_SERVICE_TIMEOUT"] = "soon";
  EXPECT_NE(ResolveError().message().find("AWS_METADATA_SERVICE_TIMEOUT (or metadata_service_timeout) = 'soon'"),
            std::string::npos);
  vars_["AWS_EC2_METADATA_DISABLED"] = "TRUE";
  ResolvedConfig r = Resolve();
  EXPECT_EQ(r.credentials, nullptr);
  EXPECT_EQ(r.credentials_source, "none");
}

TEST_F(ConfigTest, TheContainerEndpointComesBeforeInstanceMetadata) {
  vars_.erase("AWS_EC2_METADATA_DISABLED");
  vars_["AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"] = "/v2/credentials/abc";
  EXPECT_EQ(Resolve().credentials_source,
            "the container credentials endpoint http://169.254.170.2/v2/credentials/abc "
            "(AWS_CONTAINER_CREDENTIALS_RELATIVE_URI)");
  vars_.erase("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  for (const char* ok : {"http://127.0.0.1:8080/creds", "http://169.254.170.23/v1/credentials",
                         "https://creds.example.com/x", "http://[::1]:80/c"}) {
    vars_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = ok;
    EXPECT_NE(Resolve().credentials_source.find(ok), std::string::npos) << ok;
  }
  vars_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "http://creds.example.com/x";
  EXPECT_NE(ResolveError().message().find("is plain http to creds.example.com"), std::string::npos);
  vars_["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = "ftp://127.0.0.1/x";
  EXPECT_NE(ResolveError().message().find("is not an http(s) URL"), std::string::npos);
  vars_["AWS_ACCESS_KEY_ID"] = "AKID_ENV";  // earlier sources shadow it
  vars_["AWS_SECRET_ACCESS_KEY"] = "s-env";
  EXPECT_EQ(Resolve().credentials_source, "environment");
}

TEST_F(ConfigTest, AProfilesCredentialProcessComesAfterItsStaticKeys) {
  vars_["AWS_PROFILE"] = "dev";
  WriteConfig("[profile dev]\ncredential_process = /bin/echo '{\"Version\": 1}'\n");
  vars_.erase("AWS_EC2_METADATA_DISABLED");
  EXPECT_EQ(Resolve().credentials_source, "credential_process of profile 'dev'");
  WriteCredentials("[dev]\naws_access_key_id = AKID_DEV\naws_secret_access_key = s\n");
  EXPECT_EQ(Resolve().credentials_source, "profile dev");
}

TEST_F(ConfigTest, WebIdentityFromTheEnvironmentOrAProfile) {
  vars_.erase("AWS_EC2_METADATA_DISABLED");
  vars_["AWS_WEB_IDENTITY_TOKEN_FILE"] = "/var/run/secrets/eks.amazonaws.com/serviceaccount/token";
  vars_["AWS_ROLE_ARN"] = "arn:aws:iam::123456789012:role/train";
  vars_["AWS_REGION"] = "eu-west-1";
  EXPECT_EQ(Resolve().credentials_source,
            "web identity (AWS_WEB_IDENTITY_TOKEN_FILE: role arn:aws:iam::123456789012:role/train, token file "
            "/var/run/secrets/eks.amazonaws.com/serviceaccount/token)");
  // Half of it is refused: falling through would sign as another identity (the node's role).
  vars_.erase("AWS_ROLE_ARN");
  EXPECT_NE(ResolveError().message().find("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not"),
            std::string::npos);
  vars_.erase("AWS_WEB_IDENTITY_TOKEN_FILE");
  WriteConfig("[default]\nrole_arn = arn:aws:iam::123456789012:role/p\nweb_identity_token_file = /tmp/t\n");
  EXPECT_NE(Resolve().credentials_source.find("web identity (profile 'default' of"), std::string::npos);
}

TEST_F(ConfigTest, ARoleIsAssumedWithTheCredentialsOfItsSource) {
  vars_.erase("AWS_EC2_METADATA_DISABLED");
  const std::string config = config_path().string();
  WriteCredentials("[base]\naws_access_key_id = AKID_BASE\naws_secret_access_key = s\n");
  WriteConfig("[default]\nrole_arn = arn:aws:iam::1:role/train\nsource_profile = middle\n"
              "aws_access_key_id = AKID_IGNORED\naws_secret_access_key = s\n"  // the role wins, as in botocore
              "[profile middle]\nrole_arn = arn:aws:iam::1:role/hop\nsource_profile = base\n"
              "[profile env]\nrole_arn = arn:aws:iam::1:role/e\ncredential_source = Environment\n"
              "[profile self]\nrole_arn = arn:aws:iam::1:role/s\nsource_profile = self\n"
              "aws_access_key_id = AKID_SELF\naws_secret_access_key = s\n");
  EXPECT_EQ(Resolve().credentials_source,
            "role arn:aws:iam::1:role/train of profile 'default' of '" + config + "', assumed with role "
            "arn:aws:iam::1:role/hop of profile 'middle' of '" + config + "', assumed with profile base");
  vars_["AWS_PROFILE"] = "self";
  EXPECT_NE(Resolve().credentials_source.find("assumed with profile 'self' of"), std::string::npos);
  vars_["AWS_PROFILE"] = "env";
  EXPECT_NE(ResolveError().message().find("credential_source = Environment in profile 'env'"), std::string::npos);
  vars_["AWS_ACCESS_KEY_ID"] = "AKID_ENV";  // with AWS_PROFILE they win the chain at once (botocore too)
  vars_["AWS_SECRET_ACCESS_KEY"] = "s";
  EXPECT_EQ(Resolve().credentials_source, "environment");
  ClientConfig named;  // a profile named in the code is not shadowed: the variables become the role's source
  named.profile = "env";
  EXPECT_EQ(Resolve(named).credentials_source,
            "role arn:aws:iam::1:role/e of profile 'env' of '" + config + "', assumed with environment");
}

TEST_F(ConfigTest, BrokenRoleSettingsAreErrorsNamingTheProfile) {
  vars_.erase("AWS_EC2_METADATA_DISABLED");
  WriteConfig("[default]\nrole_arn = arn:aws:iam::1:role/a\nsource_profile = b\n"
              "[profile b]\nrole_arn = arn:aws:iam::1:role/b\nsource_profile = default\n");
  EXPECT_NE(ResolveError().message().find("the source_profile settings loop: default -> b -> default"),
            std::string::npos);
  WriteConfig("[default]\nrole_arn = arn:aws:iam::1:role/a\n");
  EXPECT_NE(ResolveError().message().find("needs source_profile, credential_source or web_identity_token_file"),
            std::string::npos);
  WriteConfig("[default]\nrole_arn = arn:aws:iam::1:role/a\nsource_profile = nobody\n");
  EXPECT_NE(ResolveError().message().find("but profile 'nobody' of"), std::string::npos);
  WriteConfig("[default]\nrole_arn = arn:aws:iam::1:role/a\ncredential_source = Moon\n");
  EXPECT_NE(ResolveError().message().find("credential_source = Moon"), std::string::npos);
  WriteConfig("[default]\nrole_arn = arn:aws:iam::1:role/a\ncredential_source = Ec2InstanceMetadata\n"
              "duration_seconds = 60\n");
  EXPECT_NE(ResolveError().message().find("duration_seconds = 60"), std::string::npos);
  WriteConfig("[default]\nsso_session = corp\n");
  EXPECT_NE(ResolveError().message().find("sso_session in profile 'default'"), std::string::npos);
}

}  // namespace
}  // namespace s3stream
