// The credential sources that are HTTP endpoints of the machine: the container endpoint (ECS,
// Batch, EKS Pod Identity) and EC2 instance metadata (IMDSv2, IMDSv1 where allowed).
#include <atomic>

#include "auth/credentials_json.h"
#include "auth/metadata_http.h"
#include "auth/providers.h"
#include "auth/text.h"

namespace s3stream::internal {
namespace {

constexpr int kContainerAttempts = 2;
constexpr std::chrono::milliseconds kContainerTimeout{2000};

// The server's words, short and on one line, for a message (never a credentials body: callers
// show this only for answers that are not credentials).
std::string Excerpt(const std::string& body) {
  std::string out = body.substr(0, 200);
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

// Tries a request up to `attempts` times while it fails to connect or answers 5xx.
Result<MetadataResponse> WithRetry(int attempts, const std::string& method, const std::string& url,
                                   const std::vector<std::string>& headers, std::chrono::milliseconds timeout) {
  Result<MetadataResponse> r = Unavailable("no attempt");
  for (int i = 0; i < attempts; ++i) {
    r = MetadataRequest(method, url, headers, timeout);
    if (r.ok() && r->status < 500) return r;
    if (!r.ok() && r.status().code() != StatusCode::kUnavailable) return r;  // Ctrl-C, a huge answer
  }
  return r;
}

class ContainerCredentials final : public CredentialsProvider {
 public:
  explicit ContainerCredentials(ContainerEndpoint e) : e_(std::move(e)) {}

  std::string Describe() const override { return "the container credentials endpoint " + e_.url + " (" + e_.source + ")"; }

  Result<std::optional<Credentials>> Fetch() override {
    std::vector<std::string> headers;
    std::string token = e_.token;
    if (!e_.token_file.empty()) {
      std::optional<std::string> from_file = ReadTokenFile(e_.token_file);
      if (!from_file) {
        return PermissionDenied("cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE '" + e_.token_file +
                                "' for " + Describe());
      }
      token = *from_file;
    }
    if (token.find_first_of("\r\n") != std::string::npos) {
      return InvalidArgument("the container authorization token for " + Describe() + " holds a line break");
    }
    if (!token.empty()) headers.push_back("Authorization: " + token);
    Result<MetadataResponse> r = WithRetry(kContainerAttempts, "GET", e_.url, headers, kContainerTimeout);
    if (!r.ok()) return Status(r.status().code(), "no credentials from " + Describe() + ": " + r.status().message());
    if (r->status != 200) {
      return PermissionDenied(Describe() + " answered HTTP " + std::to_string(r->status) + ": " + Excerpt(r->body));
    }
    Result<Credentials> c = ParseCredentialsJson(r->body, CredentialsDocument::kEndpoint, Describe());
    if (!c.ok()) return c.status();
    return std::optional<Credentials>(std::move(c.value()));
  }

 private:
  const ContainerEndpoint e_;
};

class InstanceMetadataCredentials final : public CredentialsProvider {
 public:
  explicit InstanceMetadataCredentials(InstanceMetadata m) : m_(std::move(m)) {}

  std::string Describe() const override { return "EC2 instance metadata at " + m_.endpoint; }

  Result<std::optional<Credentials>> Fetch() override {
    Result<std::optional<Credentials>> got = FetchOnce();
    if (got.ok() && got.value()) answered_.store(true);
    // A machine without IMDS (a laptop, a container without the route): no credentials, requests go
    // unsigned, as when no source has any. Once it has answered, a failure is a failure.
    if (!got.ok() && got.status().code() == StatusCode::kUnavailable && !answered_.load()) {
      return std::optional<Credentials>();
    }
    return got;
  }

 private:
  Result<std::optional<Credentials>> FetchOnce() {
    std::vector<std::string> headers;
    Result<MetadataResponse> token =
        WithRetry(m_.attempts, "PUT", m_.endpoint + "/latest/api/token",
                  {"X-aws-ec2-metadata-token-ttl-seconds: 21600"}, m_.timeout);
    if (!token.ok()) return token.status();
    if (token->status == 200) {
      headers.push_back("X-aws-ec2-metadata-token: " + Trimmed(token->body));
    } else if ((token->status == 403 || token->status == 404 || token->status == 405) && m_.allow_v1) {
      // An IMDS that does not offer sessions (IMDSv1 only): ask without a token.
    } else {
      return PermissionDenied(Describe() + " refused a session token (HTTP " + std::to_string(token->status) + ")" +
                              (m_.allow_v1 ? "" : "; IMDSv1 is disabled (AWS_EC2_METADATA_V1_DISABLED)"));
    }
    const std::string base = m_.endpoint + "/latest/meta-data/iam/security-credentials/";
    Result<MetadataResponse> role = WithRetry(m_.attempts, "GET", base, headers, m_.timeout);
    if (!role.ok()) return role.status();
    if (role->status == 404) return std::optional<Credentials>();  // no instance profile: no credentials here
    if (role->status != 200) {
      return PermissionDenied(Describe() + " answered HTTP " + std::to_string(role->status) + " for the role name");
    }
    std::string name = Trimmed(role->body.substr(0, role->body.find('\n')));
    if (name.empty() || name.find_first_of("/?#% ") != std::string::npos) {
      return InvalidArgument(Describe() + " named no usable role ('" + Excerpt(name) + "')");
    }
    Result<MetadataResponse> creds = WithRetry(m_.attempts, "GET", base + name, headers, m_.timeout);
    if (!creds.ok()) return creds.status();
    if (creds->status != 200) {
      return PermissionDenied(Describe() + " answered HTTP " + std::to_string(creds->status) +
                              " for the credentials of role '" + name + "'");
    }
    Result<Credentials> c = ParseCredentialsJson(creds->body, CredentialsDocument::kEndpoint,
                                                 Describe() + " (role '" + name + "')");
    if (!c.ok()) return c.status();
    return std::optional<Credentials>(std::move(c.value()));
  }

  const InstanceMetadata m_;
  std::atomic<bool> answered_{false};
};

}  // namespace

std::shared_ptr<CredentialsProvider> ContainerCredentialsProvider(ContainerEndpoint endpoint) {
  return std::make_shared<ContainerCredentials>(std::move(endpoint));
}

std::shared_ptr<CredentialsProvider> InstanceMetadataProvider(InstanceMetadata metadata) {
  return std::make_shared<InstanceMetadataCredentials>(std::move(metadata));
}

}  // namespace s3stream::internal
