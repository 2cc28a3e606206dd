#include "auth/default_chain.h"

#include <cctype>
#include <cstdlib>

#include "auth/providers.h"

namespace s3stream::internal {
namespace {

constexpr const char* kContainerHost = "http://169.254.170.2";
constexpr const char* kImdsV4 = "http://169.254.169.254";
constexpr const char* kImdsV6 = "http://[fd00:ec2::254]";

std::optional<std::string> Env(const ChainInputs& in, const std::string& name) {
  auto v = in.env.getenv(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool IsTrue(const std::optional<std::string>& v) { return v && Lower(*v) == "true"; }

// The host of an http(s) URL, without brackets or port.
std::string HostOf(const std::string& url) {
  const size_t start = url.find("://") + 3;
  std::string authority = url.substr(start, url.find_first_of("/?#", start) - start);
  if (const size_t at = authority.rfind('@'); at != std::string::npos) authority = authority.substr(at + 1);
  if (!authority.empty() && authority[0] == '[') return Lower(authority.substr(1, authority.find(']') - 1));
  return Lower(authority.substr(0, authority.find(':')));
}

// Plain http only to the addresses the SDKs allow: loopback and the ECS / EKS Pod Identity ones.
bool AllowedPlainHttpHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.") || host == "169.254.170.2" ||
         host == "169.254.170.23" || host == "fd00:ec2::23";
}

// STS in the client's region (AWS_ENDPOINT_URL_STS or AWS_ENDPOINT_URL where set, as the SDKs do).
std::string StsEndpoint(const ChainInputs& in) {
  std::string endpoint = Env(in, "AWS_ENDPOINT_URL_STS").value_or(Env(in, "AWS_ENDPOINT_URL").value_or(""));
  if (endpoint.empty()) {
    endpoint = "https://sts." + in.region + (in.region.starts_with("cn-") ? ".amazonaws.com.cn" : ".amazonaws.com");
  }
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  return endpoint;
}

std::string SessionName(const ChainInputs& in) {
  if (auto name = Env(in, "AWS_ROLE_SESSION_NAME")) return *name;
  return "s3stream-" + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          WallClock::now().time_since_epoch()).count());
}

}  // namespace

Result<std::shared_ptr<CredentialsProvider>> WebIdentitySource(const ChainInputs& in) {
  auto token_file = Env(in, "AWS_WEB_IDENTITY_TOKEN_FILE");
  auto role = Env(in, "AWS_ROLE_ARN");
  if (!token_file && !role) return std::shared_ptr<CredentialsProvider>();
  if (!token_file || !role) {
    // Half of it: falling through would sign as another identity (on EKS, the node's role).
    return InvalidArgument(std::string(token_file ? "AWS_WEB_IDENTITY_TOKEN_FILE" : "AWS_ROLE_ARN") + " is set but " +
                           (token_file ? "AWS_ROLE_ARN" : "AWS_WEB_IDENTITY_TOKEN_FILE") +
                           " is not: web identity needs both (EKS sets both for a service account with a role)");
  }
  return WebIdentityProvider({*token_file, *role, SessionName(in), StsEndpoint(in), "AWS_WEB_IDENTITY_TOKEN_FILE"});
}

Result<std::shared_ptr<CredentialsProvider>> ProfileSource(const ChainInputs& in) {
  const std::string where = "profile '" + in.profile_name + "' of '" + in.profile_file + "'";
  auto role = in.profile_setting("role_arn");
  if (auto token_file = in.profile_setting("web_identity_token_file"); token_file && role) {
    std::string session = in.profile_setting("role_session_name").value_or(SessionName(in));
    return WebIdentityProvider({*token_file, *role, session, StsEndpoint(in), where});
  }
  if (auto command = in.profile_setting("credential_process")) {
    return ProcessCredentialsProvider(*command, in.profile_name);
  }
  for (const char* key : {"role_arn", "sso_session", "sso_start_url"}) {
    if (in.profile_setting(key)) {
      return InvalidArgument(std::string(key) + " in " + where + ": this s3stream cannot assume a role from another "
                             "profile or use SSO yet; pass credentials (access_key_id=..., or credentials=a callable), "
                             "or give the profile static keys, a credential_process or a web_identity_token_file");
    }
  }
  return std::shared_ptr<CredentialsProvider>();
}

Result<std::shared_ptr<CredentialsProvider>> MachineSource(const ChainInputs& in) {
  auto full = Env(in, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
  auto relative = Env(in, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
  if (relative || full) {
    ContainerEndpoint e;
    if (relative) {
      e.url = std::string(kContainerHost) + (relative->starts_with("/") ? "" : "/") + *relative;
      e.source = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI";
    } else {
      e.url = *full;
      e.source = "AWS_CONTAINER_CREDENTIALS_FULL_URI";
      const std::string scheme = Lower(e.url.substr(0, e.url.find("://")));
      if (e.url.find("://") == std::string::npos || (scheme != "http" && scheme != "https")) {
        return InvalidArgument("AWS_CONTAINER_CREDENTIALS_FULL_URI '" + e.url + "' is not an http(s) URL");
      }
      if (scheme == "http" && !AllowedPlainHttpHost(HostOf(e.url))) {
        return InvalidArgument("AWS_CONTAINER_CREDENTIALS_FULL_URI '" + e.url + "' is plain http to " + HostOf(e.url) +
                               ": only loopback, 169.254.170.2 and 169.254.170.23 may be, others need https");
      }
    }
    e.token_file = Env(in, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE").value_or("");
    e.token = Env(in, "AWS_CONTAINER_AUTHORIZATION_TOKEN").value_or("");
    return ContainerCredentialsProvider(std::move(e));
  }
  if (IsTrue(Env(in, "AWS_EC2_METADATA_DISABLED"))) return std::shared_ptr<CredentialsProvider>();
  InstanceMetadata m;
  auto mode = Env(in, "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
  if (!mode) mode = in.profile_setting("ec2_metadata_service_endpoint_mode");
  m.endpoint = mode && Lower(*mode) == "ipv6" ? kImdsV6 : kImdsV4;
  if (auto e = Env(in, "AWS_EC2_METADATA_SERVICE_ENDPOINT")) m.endpoint = *e;
  else if (auto p = in.profile_setting("ec2_metadata_service_endpoint")) m.endpoint = *p;
  while (!m.endpoint.empty() && m.endpoint.back() == '/') m.endpoint.pop_back();
  if (!m.endpoint.starts_with("http://") && !m.endpoint.starts_with("https://")) {
    return InvalidArgument("the instance metadata endpoint '" + m.endpoint + "' is not an http(s) URL");
  }
  auto number = [&](const char* var, const char* key, double low, double high) -> Result<std::optional<double>> {
    auto v = Env(in, var);
    if (!v) v = in.profile_setting(key);
    if (!v) return std::optional<double>();
    char* end = nullptr;
    const double x = std::strtod(v->c_str(), &end);
    if (end == v->c_str() || *end != '\0' || !(x >= low && x <= high)) {
      return InvalidArgument(std::string(var) + " (or " + key + ") = '" + *v + "' is not a number from " +
                             std::to_string(static_cast<int>(low)) + " to " + std::to_string(static_cast<int>(high)));
    }
    return std::optional<double>(x);
  };
  Result<std::optional<double>> timeout = number("AWS_METADATA_SERVICE_TIMEOUT", "metadata_service_timeout", 0.001, 60);
  if (!timeout.ok()) return timeout.status();
  if (*timeout) m.timeout = std::chrono::milliseconds(static_cast<long>(**timeout * 1000));
  Result<std::optional<double>> attempts =
      number("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "metadata_service_num_attempts", 1, 10);
  if (!attempts.ok()) return attempts.status();
  if (*attempts) m.attempts = static_cast<int>(**attempts);
  auto v1_off = Env(in, "AWS_EC2_METADATA_V1_DISABLED");
  if (!v1_off) v1_off = in.profile_setting("ec2_metadata_v1_disabled");
  m.allow_v1 = !IsTrue(v1_off);
  return InstanceMetadataProvider(std::move(m));
}

}  // namespace s3stream::internal
