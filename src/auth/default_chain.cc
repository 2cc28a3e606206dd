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

namespace {

// The container endpoint, where the environment names one.
Result<std::shared_ptr<CredentialsProvider>> ContainerOrNull(const ChainInputs& in) {

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
  return std::shared_ptr<CredentialsProvider>();
}

// Where and how instance metadata is asked.
Result<InstanceMetadata> MetadataSettings(const ChainInputs& in) {
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
  return m;
}

std::string Where(const ChainInputs& in, const std::string& profile) {
  return "profile '" + profile + "' of '" + in.profile_file + "'";
}

// credential_source: where a role's base credentials come from without another profile.
Result<std::shared_ptr<CredentialsProvider>> NamedSource(const ChainInputs& in, const std::string& profile,
                                                         const std::string& name) {
  if (name == "Environment") {
    auto key = Env(in, "AWS_ACCESS_KEY_ID");
    auto secret = Env(in, "AWS_SECRET_ACCESS_KEY");
    if (!key || !secret) {
      return InvalidArgument("credential_source = Environment in " + Where(in, profile) +
                             ", but AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set");
    }
    return StaticCredentials({*key, *secret, Env(in, "AWS_SESSION_TOKEN").value_or(""), std::nullopt}, "environment");
  }
  if (name == "Ec2InstanceMetadata") {
    S3S_ASSIGN_OR_RETURN(InstanceMetadata m, MetadataSettings(in));
    return InstanceMetadataProvider(std::move(m));
  }
  if (name == "EcsContainer") {
    S3S_ASSIGN_OR_RETURN(std::shared_ptr<CredentialsProvider> container, ContainerOrNull(in));
    if (!container) {
      return InvalidArgument("credential_source = EcsContainer in " + Where(in, profile) +
                             ", but neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor _FULL_URI is set");
    }
    return container;
  }
  return InvalidArgument("credential_source = " + name + " in " + Where(in, profile) +
                         " is not one of: Environment, Ec2InstanceMetadata, EcsContainer");
}

Result<std::shared_ptr<CredentialsProvider>> ProfileCredentials(const ChainInputs& in, const std::string& profile,
                                                                std::vector<std::string> visiting) {
  const std::string where = Where(in, profile);
  for (const std::string& seen : visiting) {
    if (seen == profile) {
      std::string path;
      for (const std::string& p : visiting) path += p + " -> ";
      return InvalidArgument("the source_profile settings loop: " + path + profile);
    }
  }
  visiting.push_back(profile);
  auto setting = [&](const char* key) { return in.setting_of(profile, key); };
  if (auto role = setting("role_arn")) {
    const std::string session = setting("role_session_name").value_or(SessionName(in));
    if (auto token_file = setting("web_identity_token_file")) {
      return WebIdentityProvider({*token_file, *role, session, StsEndpoint(in), where});
    }
    std::shared_ptr<CredentialsProvider> base;
    auto source_profile = setting("source_profile");
    auto credential_source = setting("credential_source");
    if (source_profile && credential_source) {
      return InvalidArgument(where + " sets both source_profile and credential_source: keep one");
    }
    if (source_profile && *source_profile == profile) {
      // A profile may be its own source: its static keys assume its role.
      S3S_ASSIGN_OR_RETURN(std::optional<Credentials> keys, in.static_keys_of(profile));
      if (!keys) return InvalidArgument(where + " is its own source_profile but has no static keys");
      base = StaticCredentials(*keys, where);
    } else if (source_profile) {
      S3S_ASSIGN_OR_RETURN(base, ProfileCredentials(in, *source_profile, visiting));
      if (!base) {
        return InvalidArgument("source_profile = " + *source_profile + " in " + where + ", but " +
                               Where(in, *source_profile) + " has no credentials (no keys, role or credential_process)");
      }
    } else if (credential_source) {
      S3S_ASSIGN_OR_RETURN(base, NamedSource(in, profile, *credential_source));
    } else {
      return InvalidArgument("role_arn in " + where + " needs source_profile, credential_source or "
                             "web_identity_token_file: where the credentials that assume the role come from");
    }
    AssumeRole r{*role, session, setting("external_id").value_or(""), 0, StsEndpoint(in), in.region, where};
    if (auto duration = setting("duration_seconds")) {
      char* end = nullptr;
      const long seconds = std::strtol(duration->c_str(), &end, 10);
      if (end == duration->c_str() || *end != '\0' || seconds < 900 || seconds > 43200) {
        return InvalidArgument("duration_seconds = " + *duration + " in " + where + " is not 900 to 43200 seconds");
      }
      r.duration_seconds = static_cast<int>(seconds);
    }
    return AssumeRoleProvider(std::move(r), std::move(base));
  }
  S3S_ASSIGN_OR_RETURN(std::optional<Credentials> keys, in.static_keys_of(profile));
  if (keys) return StaticCredentials(*keys, "profile " + profile);
  if (auto command = setting("credential_process")) return ProcessCredentialsProvider(*command, profile);
  for (const char* key : {"sso_session", "sso_start_url"}) {
    if (setting(key)) {
      return InvalidArgument(std::string(key) + " in " + where + ": this s3stream cannot use IAM Identity Center (SSO) "
                             "yet; pass credentials (access_key_id=..., or credentials=a callable), or use a profile "
                             "with keys, a role, a credential_process (e.g. `aws configure export-credentials "
                             "--format process`) or a web_identity_token_file");
    }
  }
  return std::shared_ptr<CredentialsProvider>();
}

}  // namespace

Result<std::shared_ptr<CredentialsProvider>> ProfileSource(const ChainInputs& in) {
  return ProfileCredentials(in, in.profile_name, {});
}

Result<std::shared_ptr<CredentialsProvider>> MachineSource(const ChainInputs& in) {
  S3S_ASSIGN_OR_RETURN(std::shared_ptr<CredentialsProvider> container, ContainerOrNull(in));
  if (container) return container;
  if (IsTrue(Env(in, "AWS_EC2_METADATA_DISABLED"))) return std::shared_ptr<CredentialsProvider>();
  S3S_ASSIGN_OR_RETURN(InstanceMetadata m, MetadataSettings(in));
  return InstanceMetadataProvider(std::move(m));
}

}  // namespace s3stream::internal
